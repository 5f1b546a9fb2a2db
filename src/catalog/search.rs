//! Searching sessions with pi's `/resume` query language, down to the entry.
//!
//! The query is parsed as pi's session selector parses it: space-separated tokens, `"exact phrases"`, or
//! `re:<regex>` (case-insensitive). pi matches a whole session (a token may hit the session name, id, cwd or any
//! message text); here the unit is an entry, so a hit says which message matched: an entry matches when every
//! token is found in its text or in its session's name, id or cwd, and at least one in its own text. A session
//! whose name, id or cwd alone satisfies the query is a hit too (`role: "session"`). Literal tokens match
//! case-insensitively as substrings; a token that matches nothing literally may still match the session name or
//! cwd as pi's fuzzy subsequence.
//!
//! Hits rank by relevance: each word found in the entry's own text scores [`FOUND`] plus BM25's weight of its
//! occurrences there (a saturating count, whole words over word starts over insides, over the entry's length
//! against a fixed typical length rather than the corpus's mean, so a score depends on the entry alone and is the
//! same whichever way the entry was read); a word only the session's name, id or cwd holds scores at most 3. Ties
//! go to the newest, then path and place in the file: a total order, so pages follow one another exactly. Every
//! hit is counted (the true total), and only the best of them are kept while a search runs.
//!
//! A query is bounded ([`MAX_QUERY_BYTES`], [`MAX_QUERY_WORDS`]; a longer one is refused as an invalid query).
//! Its words are prepared once, and an entry costs at most one pass over its text per word, a session's own
//! fields are judged once per session, and the index is asked with a bounded number of trigrams per word: a
//! search's work grows with the query's size, never with its square.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};

use super::cancel::Cancel;
use super::index::{CatalogIndex, IndexError, IndexResult};
use super::info::{Doc, InfoState, ListedSession, ReadlineLines, SessionInfo};
use super::listing::Catalog;
use crate::session::error::{Error, Result};
use crate::session::json::Json;
use crate::session::render::date_json;

/// One query token.
#[derive(Clone, Debug, PartialEq)]
pub enum Token {
    /// A word: literal substring, or fuzzy on the session name and cwd.
    Fuzzy(String),
    /// `"an exact phrase"`, compared with white space normalised.
    Phrase(String),
}

/// A parsed query.
#[derive(Clone, Debug)]
pub enum Query {
    /// All tokens must match.
    Tokens(Vec<Token>),
    /// `re:<pattern>`.
    Regex(regex::Regex),
}

/// The longest query accepted, in bytes of UTF-8: far more than anyone types into pi's `/resume` box.
pub const MAX_QUERY_BYTES: usize = 4096;

/// The most words a query may have (each word of a quoted phrase counts).
pub const MAX_QUERY_WORDS: usize = 64;

/// pi's `parseSearchQuery`. An empty or invalid regex is an error, and so is a query over [`MAX_QUERY_BYTES`] or
/// [`MAX_QUERY_WORDS`].
pub fn parse_query(query: &str) -> Result<Query, String> {
    if query.len() > MAX_QUERY_BYTES {
        return Err(format!("the query is {} bytes long; at most {MAX_QUERY_BYTES} are accepted", query.len()));
    }
    let trimmed = query.trim();
    if let Some(pattern) = trimmed.strip_prefix("re:") {
        let pattern = pattern.trim();
        if pattern.is_empty() {
            return Err("Empty regex".into());
        }
        return regex::RegexBuilder::new(pattern)
            .case_insensitive(true)
            .build()
            .map(Query::Regex)
            .map_err(|e| e.to_string());
    }
    let mut tokens = Vec::new();
    let mut buf = String::new();
    let mut in_quote = false;
    let flush = |buf: &mut String, tokens: &mut Vec<Token>, phrase: bool| {
        let v = buf.trim().to_owned();
        buf.clear();
        if !v.is_empty() {
            tokens.push(if phrase { Token::Phrase(v) } else { Token::Fuzzy(v) });
        }
    };
    for ch in trimmed.chars() {
        if ch == '"' {
            flush(&mut buf, &mut tokens, in_quote);
            in_quote = !in_quote;
            continue;
        }
        if !in_quote && ch.is_whitespace() {
            flush(&mut buf, &mut tokens, false);
            continue;
        }
        buf.push(ch);
    }
    if in_quote {
        // Unbalanced quotes: plain white-space tokens, as pi does.
        tokens = trimmed.split_whitespace().map(|t| Token::Fuzzy(t.to_owned())).collect();
    } else {
        flush(&mut buf, &mut tokens, false);
    }
    let words: usize = tokens
        .iter()
        .map(|t| match t {
            Token::Fuzzy(_) => 1,
            Token::Phrase(p) => p.split_whitespace().count(),
        })
        .sum();
    if words > MAX_QUERY_WORDS {
        return Err(format!("the query has {words} words; at most {MAX_QUERY_WORDS} are accepted"));
    }
    Ok(Query::Tokens(tokens))
}

impl Query {
    /// Literal strings one of which any matching entry text must contain (for the index's prefilter); empty when
    /// the query cannot be narrowed that way (a regex).
    pub fn needles(&self) -> Vec<String> {
        match self {
            Query::Regex(_) => Vec::new(),
            Query::Tokens(t) => t
                .iter()
                .map(|t| match t {
                    Token::Fuzzy(v) => v.to_lowercase(),
                    // White space in the text may differ from the phrase's; any one word narrows enough.
                    Token::Phrase(v) => {
                        v.split_whitespace().max_by_key(|w| w.chars().count()).unwrap_or_default().to_lowercase()
                    }
                })
                .collect(),
        }
    }
}

/// A search result.
#[derive(Clone, Debug)]
pub struct Hit {
    /// The session file.
    pub path: String,
    /// The session id.
    pub session_id: Json,
    /// JSON text of the matching entry's id (None for a session-level hit).
    pub entry_id: Option<String>,
    /// The entry's role (`user`, `assistant`, `toolResult`, `custom`, `bashExecution`, `name`, `label`,
    /// `summary`) or `session`.
    pub role: String,
    /// Text around the match.
    pub snippet: String,
    /// The entry's time (ms), or the session's last activity for session hits.
    pub timestamp: f64,
    /// Relevance: higher is better.
    pub score: f64,
    /// Where the entry lies in its file ([`Doc::order`]; after every entry for a session hit): the last word on
    /// the order of hits that tie on score and time, after the path.
    order: u64,
}

fn normalize(s: &str) -> String {
    s.to_lowercase().split_whitespace().collect::<Vec<_>>().join(" ")
}

/// pi-tui's `fuzzyMatch` score (lower is better), or None when the query's characters do not all appear in order.
pub fn fuzzy_match(query: &str, text: &str) -> Option<f64> {
    let q: Vec<char> = query.to_lowercase().chars().collect();
    let t: Vec<char> = text.to_lowercase().chars().collect();
    if q.is_empty() {
        return Some(0.0);
    }
    if q.len() > t.len() {
        return None;
    }
    let score_of = |positions: &[usize]| -> f64 {
        let mut score = 0.0;
        let mut last: Option<usize> = None;
        let mut consecutive = 0.0;
        for &i in positions {
            if last.is_some_and(|l| l + 1 == i) {
                consecutive += 1.0;
                score -= consecutive * 5.0;
            } else {
                consecutive = 0.0;
                if let Some(l) = last {
                    score += (i - l - 1) as f64 * 2.0;
                }
            }
            if i == 0 || matches!(t[i - 1], ' ' | '\t' | '\n' | '-' | '_' | '.' | '/' | ':') {
                score -= 10.0;
            }
            score += i as f64 * 0.1;
            last = Some(i);
        }
        score
    };
    let mut positions = Vec::with_capacity(q.len());
    let mut from = 0;
    for &c in &q {
        let i = (from..t.len()).find(|&i| t[i] == c)?;
        positions.push(i);
        from = i + 1;
    }
    let mut score = score_of(&positions);
    for start in 0..=t.len() - q.len() {
        if t[start..start + q.len()] == q[..] {
            let contiguous: Vec<usize> = (start..start + q.len()).collect();
            score = score.min(score_of(&contiguous));
        }
    }
    if q == t {
        score -= 100.0;
    }
    Some(score)
}

/// How well a token is satisfied by a session's own fields (name, id, cwd): a relevance weight, or None.
pub fn session_weight(token: &Token, s: &SessionInfo) -> Option<f64> {
    let name = s.name.as_ref().map(|n| n.to_string_lossy()).unwrap_or_default();
    let id = match &s.id {
        Json::String(i) => i.to_string_lossy(),
        other => other.to_canonical_string(),
    };
    let cwd = s.cwd.to_string_lossy();
    match token {
        Token::Fuzzy(v) => {
            let v = v.to_lowercase();
            if name.to_lowercase().contains(&v) {
                Some(3.0)
            } else if id.to_lowercase().contains(&v) || cwd.to_lowercase().contains(&v) {
                Some(1.0)
            } else if fuzzy_match(&v, &name).is_some() || fuzzy_match(&v, &cwd).is_some() {
                Some(0.5)
            } else {
                None
            }
        }
        Token::Phrase(p) => {
            let p = normalize(p);
            if normalize(&name).contains(&p) {
                Some(3.0)
            } else if normalize(&id).contains(&p) || normalize(&cwd).contains(&p) {
                Some(1.0)
            } else {
                None
            }
        }
    }
}

/// The query's tokens prepared once for judging many entries: lowercased, each word token with a substring
/// searcher built once (not per entry).
struct Prepared {
    /// Per token: its lowercase words (one for a word token; a phrase's words).
    words: Vec<Vec<String>>,
    /// The byte length of each token as written (for snippets).
    lens: Vec<usize>,
    /// Per token: the searcher of a word token (None: a phrase).
    finders: Vec<Option<memchr::memmem::Finder<'static>>>,
}

impl Prepared {
    fn new(tokens: &[Token]) -> Prepared {
        let mut finders = Vec::with_capacity(tokens.len());
        let mut words = Vec::with_capacity(tokens.len());
        let mut lens = Vec::with_capacity(tokens.len());
        for t in tokens {
            match t {
                Token::Fuzzy(v) => {
                    let lower = v.to_lowercase();
                    finders.push(Some(memchr::memmem::Finder::new(lower.as_bytes()).into_owned()));
                    words.push(vec![lower]);
                    lens.push(v.len());
                }
                Token::Phrase(p) => {
                    finders.push(None);
                    words.push(p.to_lowercase().split_whitespace().map(str::to_owned).collect());
                    lens.push(p.len());
                }
            }
        }
        Prepared { words, lens, finders }
    }

    /// Where token `k` first occurs in `lower` (an entry's lowercased text), as a byte offset, and how much it
    /// counts there ([`relevance`]); None when it does not occur.
    fn find(&self, k: usize, lower: &str) -> Option<(usize, f64)> {
        let mut first = None;
        let mut counted = Counted::default();
        let mut each = |start: usize, end: usize| {
            first.get_or_insert(start);
            counted.add(lower, start, end)
        };
        match &self.finders[k] {
            Some(finder) => {
                for start in finder.find_iter(lower.as_bytes()) {
                    if !each(start, start + finder.needle().len()) {
                        break;
                    }
                }
            }
            None => {
                let words: Vec<&str> = self.words[k].iter().map(String::as_str).collect();
                find_words(lower, &words, &mut each);
            }
        }
        Some((first?, counted.relevance(lower.len())))
    }
}

/// How many occurrences of one token (or matches of a regex) an entry's relevance counts at most.
const MAX_COUNTED: usize = 32;
/// BM25's term-frequency saturation (k1) and length normalisation (b), with the length (bytes) of a typical
/// entry standing in for the corpus's mean, so an entry's score depends on its own text alone: the same whether
/// the files were read or the index was asked, and across machines.
const BM25_K1: f64 = 1.2;
const BM25_B: f64 = 0.75;
const TYPICAL_ENTRY_BYTES: f64 = 400.0;
/// What a token found in an entry's own text adds to its score at least, and at most on top of that: a token
/// found in the text always outweighs one matched by the session's name, id or cwd (at most 3).
const FOUND: f64 = 10.0;
const RELEVANCE_SPAN: f64 = 2.0;

/// The occurrences of one token in one text, each weighed by where it falls: a whole word counts 1, the start
/// of a word 0.6, the inside of one 0.3 ("tokenizer" is about tokenizers; "detokenizers" less so).
#[derive(Default)]
struct Counted {
    n: usize,
    weight: f64,
}

impl Counted {
    /// Counts the occurrence at `start..end` of `text`; false once no more will be counted.
    fn add(&mut self, text: &str, start: usize, end: usize) -> bool {
        let word = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
        let starts = !word(text[..start].chars().next_back());
        let ends = !word(text.get(end..).and_then(|t| t.chars().next()));
        self.weight += match (starts, ends) {
            (true, true) => 1.0,
            (true, false) => 0.6,
            _ => 0.3,
        };
        self.n += 1;
        self.n < MAX_COUNTED
    }

    /// BM25's weight of these occurrences in a text of `len` bytes, scaled to `0..RELEVANCE_SPAN * (k1 + 1)`:
    /// more occurrences count for more but saturate, and the same count in a longer text counts for less.
    fn relevance(&self, len: usize) -> f64 {
        let tf = self.weight;
        let norm = 1.0 - BM25_B + BM25_B * (len as f64 / TYPICAL_ENTRY_BYTES);
        RELEVANCE_SPAN * tf * (BM25_K1 + 1.0) / (tf + BM25_K1 * norm)
    }
}

/// Whether `normalize(text).contains(words.join(" "))`, for words without white space, without building the
/// normalized text (an entry can be a whole file's contents, and a phrase query judges every candidate).
#[cfg(test)]
fn contains_words(text: &str, words: &[&str]) -> bool {
    let mut found = false;
    find_words(text, words, &mut |_, _| {
        found = true;
        false
    });
    found
}

/// Calls `each(start, end)` for every place `normalize(text)` would contain `words.join(" ")` (for words without
/// white space), as byte ranges of `text`, until it returns false: the first word ends a run of non-space, the
/// middle ones are whole runs, the last one starts a run.
fn find_words(text: &str, words: &[&str], each: &mut dyn FnMut(usize, usize) -> bool) {
    let Some((first, rest)) = words.split_first() else {
        each(0, 0);
        return;
    };
    let follows = |mut at: usize| {
        for (k, word) in rest.iter().enumerate() {
            let gap: usize = text[at..].chars().take_while(|c| c.is_whitespace()).map(char::len_utf8).sum();
            if gap == 0 || !text[at + gap..].starts_with(word) {
                return None;
            }
            at += gap + word.len();
            if k + 1 < rest.len() && !text[at..].starts_with(char::is_whitespace) {
                return None;
            }
        }
        Some(at)
    };
    // Every occurrence, overlapping ones included (`match_indices` skips those). (memchr's searcher: std's
    // `str::find` was a sixth of a first search's time on phrase queries.)
    let finder = memchr::memmem::Finder::new(first.as_bytes());
    let mut from = 0;
    while let Some(i) = finder.find(&text.as_bytes()[from..]) {
        let start = from + i;
        if let Some(end) = follows(start + first.len()) {
            if !each(start, end) {
                return;
            }
            // The next occurrence starts past this one, as a word's do.
            from = end;
            continue;
        }
        from = start + text[start..].chars().next().map_or(1, char::len_utf8);
    }
}

impl PartialEq for Hit {
    /// Everything the answer shows; `order` only ranks (its numbers differ between the files and the index).
    fn eq(&self, o: &Hit) -> bool {
        (&self.path, &self.session_id, &self.entry_id, &self.role, &self.snippet)
            == (&o.path, &o.session_id, &o.entry_id, &o.role, &o.snippet)
            && self.timestamp == o.timestamp
            && self.score == o.score
    }
}

/// Text around `at` (a byte offset into `text`), on one line.
pub fn snippet(text: &str, at: usize, len: usize) -> String {
    let mut start = at.saturating_sub(40);
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = (at + len + 80).min(text.len());
    while !text.is_char_boundary(end) {
        end += 1;
    }
    let body = text[start..end].split_whitespace().collect::<Vec<_>>().join(" ");
    format!("{}{}{}", if start > 0 { "…" } else { "" }, body, if end < text.len() { "…" } else { "" })
}

/// Judges entries and sessions against one query.
struct Matcher<'a> {
    query: &'a Query,
    sessions: &'a [Arc<ListedSession>],
    by_path: HashMap<&'a str, &'a SessionInfo>,
    roles: Option<&'a [String]>,
    prepared: Prepared,
    /// Each session's weight for each token ([`session_weight`]), computed on first need: a session has many
    /// entries.
    weights: RefCell<HashMap<&'a str, Vec<Option<f64>>>>,
}

impl<'a> Matcher<'a> {
    fn new(query: &'a Query, sessions: &'a [Arc<ListedSession>], roles: Option<&'a [String]>) -> Self {
        let by_path = sessions.iter().map(|s| (s.info.path.as_str(), &s.info)).collect();
        let tokens: &[Token] = match query {
            Query::Tokens(t) => t,
            Query::Regex(_) => &[],
        };
        let prepared = Prepared::new(tokens);
        Matcher { query, sessions, by_path, roles, prepared, weights: RefCell::default() }
    }

    /// `session_weight(tokens[k], session)`, remembered.
    fn weight(&self, path: &'a str, session: &SessionInfo, tokens: &[Token], k: usize) -> Option<f64> {
        let mut weights = self.weights.borrow_mut();
        let all = weights.entry(path).or_insert_with(|| tokens.iter().map(|t| session_weight(t, session)).collect());
        all[k]
    }

    fn wants(&self, role: &str) -> bool {
        self.roles.is_none_or(|r| r.iter().any(|x| x == role))
    }

    /// The needles an entry's text must hold (every one) to be a hit, for the index to narrow by, or None when
    /// it cannot narrow to every one: a token some session in scope satisfies by its name, id or cwd need not be
    /// in the text, but a token none does must be, and a lone token always must be. A regex narrows to nothing
    /// (every entry is judged).
    fn required_needles(&self) -> Option<Vec<String>> {
        let Query::Tokens(tokens) = self.query else { return Some(Vec::new()) };
        let needles = self.query.needles();
        if tokens.len() == 1 {
            return Some(needles);
        }
        let required: Vec<String> = (0..tokens.len())
            .filter(|&k| self.sessions.iter().all(|s| self.weight(&s.info.path, &s.info, tokens, k).is_none()))
            .map(|k| needles[k].clone())
            .collect();
        (!required.is_empty()).then_some(required)
    }

    /// The hit `doc` (an entry of the session at `path`) makes, if any.
    fn entry_hit(&self, path: &str, doc: &Doc) -> Option<Hit> {
        let (&path, &session) = self.by_path.get_key_value(path)?;
        if !self.wants(doc.role) {
            return None;
        }
        let (score, at, len) = match self.query {
            Query::Regex(re) => {
                let m = re.find(&doc.text)?;
                let mut counted = Counted::default();
                for m in re.find_iter(&doc.text) {
                    if !counted.add(&doc.text, m.start(), m.end()) {
                        break;
                    }
                }
                (FOUND + counted.relevance(doc.text.len()), m.start(), m.len())
            }
            Query::Tokens(tokens) if tokens.is_empty() => return None,
            Query::Tokens(tokens) => {
                let lower = doc.text.to_lowercase();
                let mut score = 0.0;
                let mut first: Option<(usize, usize)> = None;
                let mut in_doc = 0;
                for k in 0..tokens.len() {
                    if let Some((pos, relevance)) = self.prepared.find(k, &lower) {
                        in_doc += 1;
                        score += FOUND + relevance;
                        let len = self.prepared.lens[k];
                        if first.is_none_or(|(p, _)| pos < p) {
                            first = Some((pos, len));
                        }
                    } else {
                        score += self.weight(path, session, tokens, k)?;
                    }
                }
                if in_doc == 0 {
                    return None;
                }
                let (at, len) = first.unwrap_or((0, 0));
                (score, at, len)
            }
        };
        // `lower` and `text` can differ in byte length for some characters; clamp the offset into `text`.
        let at = at.min(doc.text.len());
        Some(Hit {
            path: path.to_owned(),
            session_id: session.id.clone(),
            entry_id: Some(doc.entry_id.clone()),
            role: doc.role.to_owned(),
            snippet: snippet(&doc.text, at, len),
            timestamp: doc.timestamp,
            score,
            order: doc.order,
        })
    }

    /// Sessions whose own name, id or cwd satisfy the query (`role: "session"`). A session already represented
    /// by matching entries is added only when its name matched (an id or cwd match adds nothing).
    fn session_hits(&self, with_entry_hits: &HashSet<String>) -> Vec<Hit> {
        if !self.wants("session") {
            return Vec::new();
        }
        let mut hits = Vec::new();
        for s in self.sessions.iter().map(|s| &s.info) {
            let score = match self.query {
                Query::Regex(re) => {
                    let name = s.name.as_ref().map(|n| n.to_string_lossy()).unwrap_or_default();
                    let id = match &s.id {
                        Json::String(i) => i.to_string_lossy(),
                        other => other.to_canonical_string(),
                    };
                    if re.is_match(&name) || re.is_match(&id) || re.is_match(&s.cwd.to_string_lossy()) {
                        3.0
                    } else {
                        continue;
                    }
                }
                Query::Tokens(tokens) if tokens.is_empty() => continue,
                Query::Tokens(tokens) => match tokens.iter().map(|t| session_weight(t, s)).sum::<Option<f64>>() {
                    Some(w) => w,
                    None => continue,
                },
            };
            if with_entry_hits.contains(&s.path) && score < 3.0 {
                continue;
            }
            let label =
                s.name.as_ref().map(|n| n.to_string_lossy()).unwrap_or_else(|| s.first_message.to_string_lossy());
            hits.push(Hit {
                path: s.path.clone(),
                session_id: s.id.clone(),
                entry_id: None,
                role: "session".into(),
                snippet: snippet(&label, 0, 0),
                timestamp: s.modified,
                score,
                order: u64::MAX,
            });
        }
        hits
    }

    /// Entry hits plus session hits, best first, then newest; at most `limit`.
    fn finish(&self, hits: Vec<Hit>, limit: usize) -> Vec<Hit> {
        let mut found = Found::new(limit);
        hits.into_iter().for_each(|h| found.add(h));
        self.page(found, 0, limit).hits
    }

    /// The entry hits `found` plus the session hits, ranked: `limit` from `offset` on, and how many there are.
    fn page(&self, found: Found, offset: usize, limit: usize) -> Page {
        let Found { mut hits, count, mut with_entry_hits, .. } = found;
        let session_hits = self.session_hits(&with_entry_hits);
        let total = count + session_hits.len();
        with_entry_hits.extend(session_hits.iter().map(|h| h.path.clone()));
        hits.extend(session_hits);
        rank(&mut hits);
        let hits = hits.into_iter().skip(offset).take(limit).collect();
        Page { hits, total, sessions: with_entry_hits.len() }
    }
}

/// Entry hits as a search finds them, in any order: every one counted, only the best `keep` kept.
struct Found {
    keep: usize,
    hits: Vec<Hit>,
    count: usize,
    with_entry_hits: HashSet<String>,
}

impl Found {
    fn new(keep: usize) -> Found {
        Found { keep, hits: Vec::new(), count: 0, with_entry_hits: HashSet::new() }
    }

    fn extend(&mut self, hit: Option<Hit>) {
        if let Some(hit) = hit {
            self.add(hit);
        }
    }

    fn add(&mut self, hit: Hit) {
        self.count += 1;
        if !self.with_entry_hits.contains(&hit.path) {
            self.with_entry_hits.insert(hit.path.clone());
        }
        self.hits.push(hit);
        if self.hits.len() > self.keep.saturating_mul(2).saturating_add(4096) {
            // The order is total: hits past the best `keep` can never make the answer.
            rank(&mut self.hits);
            self.hits.truncate(self.keep);
        }
    }
}

/// One page of a search's ranked hits, and how many there are in all.
struct Page {
    hits: Vec<Hit>,
    total: usize,
    sessions: usize,
}

/// A hit's time for ranking: unknown times last.
fn rank_time(h: &Hit) -> f64 {
    if h.timestamp.is_nan() {
        f64::MIN
    } else {
        h.timestamp
    }
}

/// Best score first, then newest (unknown times last), then by path and place in the file: a total order, so
/// the answer is the same whichever way the entries were found (the files read, or the index in whatever order
/// it stored them).
fn rank(hits: &mut [Hit]) {
    hits.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| rank_time(b).total_cmp(&rank_time(a)))
            .then_with(|| a.path.cmp(&b.path))
            .then_with(|| a.order.cmp(&b.order))
    });
}

/// Runs `query` over `sessions` (the scope, e.g. a listing) and their entries `docs` (path → entry texts).
/// Results are ranked by relevance, then newest first; at most `limit`; `roles` (when given) keeps only those
/// roles (`session` for session-level hits).
pub fn search(
    query: &Query,
    sessions: &[Arc<ListedSession>],
    docs: &[(String, Doc)],
    roles: Option<&[String]>,
    limit: usize,
) -> Vec<Hit> {
    let matcher = Matcher::new(query, sessions, roles);
    let hits = docs.iter().filter_map(|(path, doc)| matcher.entry_hit(path, doc)).collect();
    matcher.finish(hits, limit)
}

/// Where to search: pi's `/resume` scopes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Scope<'a> {
    /// With a cwd: that project's sessions, as `list(cwd, sessionDir)` finds them.
    pub cwd: Option<&'a str>,
    /// Without a cwd: every session in this directory (`listAll(sessionDir)`), or, when None, every session.
    pub session_dir: Option<&'a str>,
}

/// Which phase a search is in, for progress reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Listing the sessions in scope (bringing the catalog up to date).
    Listing,
    /// Extracting searchable text the index does not hold yet.
    Indexing,
}

/// A search's answer, and what it left for later.
#[derive(Debug)]
pub struct Searched {
    /// The hits asked for, best first.
    pub hits: Vec<Hit>,
    /// How many hits there are in all (entries and sessions), of which `hits` is a page.
    pub total: usize,
    /// How many sessions those hits are in.
    pub sessions: usize,
    /// Files in scope whose searchable text the index does not hold yet: the search read them instead. Pass them
    /// to [`CatalogIndex::catch_up_docs`] once the answer is out, so the next search asks the index.
    pub unindexed: Vec<String>,
}

/// `sessions/search`: runs `query` over the sessions in `scope`. With an index, the listing comes from it and
/// the text too once the index holds it; a first search reads the files and leaves extracting their text to the
/// caller, once the answer is out ([`Searched::unindexed`]). Without an index, or if it fails, every file in scope
/// is read.
pub fn search_sessions(
    query: &str,
    scope: Scope<'_>,
    roles: Option<&[String]>,
    limit: usize,
    catalog: Catalog<'_>,
    on_progress: &mut dyn FnMut(Phase, usize, usize),
) -> Result<Searched> {
    search_page(query, scope, roles, 0, limit, catalog, on_progress)
}

/// [`search_sessions`]'s hits from `offset` on (in rank order; the order is total, so the pages of one search
/// over unchanged sessions neither repeat nor skip a hit), with the true count of hits and of their sessions:
/// every candidate is judged and counted, and only the best `offset + limit` are kept while it goes.
pub fn search_page(
    query: &str,
    scope: Scope<'_>,
    roles: Option<&[String]>,
    offset: usize,
    limit: usize,
    catalog: Catalog<'_>,
    on_progress: &mut dyn FnMut(Phase, usize, usize),
) -> Result<Searched> {
    search_in(query, scope, roles, offset, limit, &mut catalog.without_text(), on_progress)
}

/// Reading the files is this many times faster than extracting their text into the index (FTS5 adding
/// trigrams is most of that), so a search reads the files when more than this fraction of its scope is not
/// indexed yet.
const SCAN_WHEN_UNINDEXED_OVER: u64 = 8;

fn search_in(
    query: &str,
    scope: Scope<'_>,
    roles: Option<&[String]>,
    offset: usize,
    limit: usize,
    catalog: &mut Catalog<'_>,
    on_progress: &mut dyn FnMut(Phase, usize, usize),
) -> Result<Searched> {
    let parsed = parse_query(query).map_err(|message| Error::InvalidQuery { message })?;
    let mut listing = |l: usize, t: usize| on_progress(Phase::Listing, l, t);
    let sessions = match scope.cwd {
        Some(cwd) => catalog.list(cwd, scope.session_dir, &mut listing)?,
        None => catalog.list_all(scope.session_dir, &mut listing)?,
    };
    let paths: Vec<String> = sessions.iter().map(|s| s.info.path.clone()).collect();
    let cancel = catalog.cancel().clone();
    let ask = Ask { query: &parsed, sessions: &sessions, paths: &paths, roles, offset, limit, cancel: &cancel };
    let answer = |page: Page, unindexed: Vec<String>| Searched {
        hits: page.hits,
        total: page.total,
        sessions: page.sessions,
        unindexed,
    };
    if let Some(ix) = catalog.index() {
        let scan_first = match ix.unindexed_bytes(&paths) {
            Ok((behind, total)) => behind > 0 && behind * SCAN_WHEN_UNINDEXED_OVER > total,
            Err(IndexError::Cancelled) => return Err(Error::Cancelled),
            Err(_) => false,
        };
        if scan_first {
            let page = scan(&ask, on_progress)?;
            return cancel.check().map(|()| answer(page, paths));
        }
        match search_index(ix, &ask, on_progress) {
            Ok(page) => return cancel.check().map(|()| answer(page, Vec::new())),
            Err(IndexError::Cancelled) => return Err(Error::Cancelled),
            Err(e) => tracing::warn!("catalog index unavailable ({e}); reading the sessions directly"),
        }
    }
    let page = scan(&ask, on_progress)?;
    Ok(answer(page, Vec::new()))
}

/// One search's question, once the scope is listed.
struct Ask<'a> {
    query: &'a Query,
    sessions: &'a [Arc<ListedSession>],
    paths: &'a [String],
    roles: Option<&'a [String]>,
    offset: usize,
    limit: usize,
    cancel: &'a Cancel,
}

impl Ask<'_> {
    /// How many of the best hits a search keeps while it counts them all.
    fn keep(&self) -> usize {
        self.offset.saturating_add(self.limit)
    }
}

/// The most threads a scan reads files on.
const MAX_SCAN_THREADS: usize = 4;

/// The search by reading every file in `paths`, a file at a time on each of a few threads (a session's entries
/// are judged as its file is read; every hit is counted, and only the best are kept once there are many).
fn scan(ask: &Ask<'_>, on_progress: &mut dyn FnMut(Phase, usize, usize)) -> Result<Page> {
    let Ask { query, sessions, paths, roles, cancel, .. } = *ask;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, MAX_SCAN_THREADS);
    let next = AtomicUsize::new(0);
    let (found_tx, found_rx) = mpsc::channel::<Vec<Hit>>();
    let mut found = Found::new(ask.keep());
    std::thread::scope(|s| {
        for _ in 0..threads.min(paths.len()) {
            let (next, found_tx) = (&next, found_tx.clone());
            s.spawn(move || {
                let matcher = Matcher::new(query, sessions, roles);
                while let Some(path) = paths.get(next.fetch_add(1, Ordering::Relaxed)) {
                    if cancel.is_cancelled() {
                        break;
                    }
                    let file_hits = read_docs(path, cancel).iter().filter_map(|d| matcher.entry_hit(path, d)).collect();
                    if found_tx.send(file_hits).is_err() {
                        break;
                    }
                }
            });
        }
        drop(found_tx);
        for (done, file_hits) in found_rx.iter().enumerate() {
            file_hits.into_iter().for_each(|h| found.add(h));
            on_progress(Phase::Indexing, done + 1, paths.len());
        }
    });
    cancel.check()?;
    Ok(Matcher::new(query, sessions, roles).page(found, ask.offset, ask.limit))
}

/// The search through the index: every entry that may hold what a hit must hold (the index narrows by
/// trigrams, [`Matcher::required_needles`]) is judged and counted, the best kept; the unterminated last lines,
/// which the index does not hold, are judged as the listing saw them.
fn search_index(
    ix: &mut CatalogIndex,
    ask: &Ask<'_>,
    on_progress: &mut dyn FnMut(Phase, usize, usize),
) -> IndexResult<Page> {
    let Ask { query, sessions, paths, roles, cancel, .. } = *ask;
    ix.catch_up_docs(paths, cancel, &mut |l, t| on_progress(Phase::Indexing, l, t))?;
    let matcher = Matcher::new(query, sessions, roles);
    let mut found = Found::new(ask.keep());
    for (path, doc) in ix.fragment_docs(paths, cancel)? {
        found.extend(matcher.entry_hit(&path, &doc));
    }
    match matcher.required_needles() {
        Some(needles) => {
            ix.for_each_doc_newest_first(paths, &needles, cancel, &mut |path, doc| {
                found.extend(matcher.entry_hit(path, &doc));
                true
            })?;
        }
        // Every token is satisfied by some session's own fields: an entry holding any one token may be a hit.
        None => {
            ix.for_each_doc_with_any(paths, &query.needles(), cancel, &mut |path, doc| {
                found.extend(matcher.entry_hit(path, &doc));
            })?;
        }
    }
    Ok(matcher.page(found, ask.offset, ask.limit))
}

/// Every searchable entry of the file at `path`, read directly (nothing when it is not a regular file; what was
/// read when `cancel` was set).
pub fn read_docs(path: &str, cancel: &Cancel) -> Vec<Doc> {
    let Ok(file) = crate::session::store::open_regular(path).inspect_err(|e| cancel.note_failure(e)) else {
        return Vec::new();
    };
    let mut lines = ReadlineLines::new(cancel.reader(std::io::BufReader::with_capacity(1 << 20, file)));
    let mut buf = Vec::new();
    let mut state = InfoState::default();
    let mut docs = Vec::new();
    while lines.next_line(&mut buf).inspect_err(|e| cancel.note_io_failure("read", path, e)).unwrap_or(false) {
        state.feed(&buf, Some(&mut docs));
    }
    if state.rejected {
        docs.clear();
    }
    docs
}

/// A search hit as `sessions/search` returns it (dates as ISO strings, `null` when unknown).
pub fn search_hit_json(h: &Hit) -> Json {
    let mut o = crate::session::json::Object::new();
    o.insert("path", Json::str(&h.path));
    o.insert("sessionId", h.session_id.clone());
    o.insert("entryId", h.entry_id.as_deref().and_then(|t| Json::parse(t.as_bytes()).ok()).unwrap_or(Json::Null));
    o.insert("role", Json::str(&h.role));
    o.insert("snippet", Json::str(&h.snippet));
    o.insert("timestamp", date_json(h.timestamp));
    o.insert("score", Json::number(h.score));
    Json::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_phrase_is_found_as_normalising_the_text_would_find_it() {
        // Every word list against every text built from a small alphabet of words, spaces and other white
        // space: the same answer as normalising the text and searching the joined words.
        let pieces = ["ab", "b", "a", " ", "  ", "\n", "\t ", "\u{3000}", "ba"];
        let mut rng = 0x2545_f491_u32;
        let mut next = |n: usize| {
            rng ^= rng << 13;
            rng ^= rng >> 17;
            rng ^= rng << 5;
            rng as usize % n
        };
        for _ in 0..20_000 {
            let text: String = (0..next(9)).map(|_| pieces[next(pieces.len())]).collect();
            let words: Vec<&str> = (0..next(4)).map(|_| ["a", "b", "ab", "ba", "bab"][next(5)]).collect();
            let expected = normalize(&text).contains(&words.join(" "));
            assert_eq!(contains_words(&text, &words), expected, "{text:?} {words:?}");
        }
    }

    #[test]
    fn queries_parse_like_pis_selector() {
        let Query::Tokens(t) = parse_query(r#"foo "node cve" bar"#).unwrap() else { panic!() };
        assert_eq!(t, vec![Token::Fuzzy("foo".into()), Token::Phrase("node cve".into()), Token::Fuzzy("bar".into())]);
        let Query::Tokens(t) = parse_query(r#"a "unclosed b"#).unwrap() else { panic!() };
        assert_eq!(t, vec![Token::Fuzzy("a".into()), Token::Fuzzy("\"unclosed".into()), Token::Fuzzy("b".into())]);
        assert!(matches!(parse_query("re:fo+").unwrap(), Query::Regex(_)));
        assert!(parse_query("re:").is_err());
        assert!(parse_query("re:(").is_err());
    }

    #[test]
    fn fuzzy_match_prefers_contiguous_and_word_starts() {
        assert!(fuzzy_match("opus", "openrouter/anthropic/claude-opus").is_some());
        assert!(fuzzy_match("xyz", "abc").is_none());
        let exact = fuzzy_match("proj", "proj").unwrap();
        let scattered = fuzzy_match("proj", "p-r-o-j").unwrap();
        assert!(exact < scattered);
    }
}
