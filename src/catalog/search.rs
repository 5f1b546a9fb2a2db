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

    /// Where token `k` first occurs in `lower` (an entry's lowercased text), as a byte offset.
    fn position(&self, k: usize, lower: &str) -> Option<usize> {
        match &self.finders[k] {
            Some(finder) => finder.find(lower.as_bytes()),
            None => {
                let words: Vec<&str> = self.words[k].iter().map(String::as_str).collect();
                contains_words(lower, &words).then(|| lower.find(words.first().copied().unwrap_or("")).unwrap_or(0))
            }
        }
    }
}

/// Whether `normalize(text).contains(words.join(" "))`, for words without white space, without building the
/// normalized text (an entry can be a whole file's contents, and a phrase query judges every candidate): the
/// first word ends a run of non-space, the middle ones are whole runs, the last one starts a run.
fn contains_words(text: &str, words: &[&str]) -> bool {
    let Some((first, rest)) = words.split_first() else { return true };
    if rest.is_empty() {
        return memchr::memmem::find(text.as_bytes(), first.as_bytes()).is_some();
    }
    let follows = |mut at: usize| {
        for (k, word) in rest.iter().enumerate() {
            let gap: usize = text[at..].chars().take_while(|c| c.is_whitespace()).map(char::len_utf8).sum();
            if gap == 0 || !text[at + gap..].starts_with(word) {
                return false;
            }
            at += gap + word.len();
            if k + 1 < rest.len() && !text[at..].starts_with(char::is_whitespace) {
                return false;
            }
        }
        true
    };
    // Every occurrence, overlapping ones included (`match_indices` skips those). (memchr's searcher: std's
    // `str::find` was a sixth of a first search's time on phrase queries.)
    let finder = memchr::memmem::Finder::new(first.as_bytes());
    let mut from = 0;
    while let Some(i) = finder.find(&text.as_bytes()[from..]) {
        let start = from + i;
        if follows(start + first.len()) {
            return true;
        }
        from = start + text[start..].chars().next().map_or(1, char::len_utf8);
    }
    false
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

    /// The best score an entry can have: every token found in its own text.
    fn full_score(&self) -> f64 {
        match self.query {
            Query::Regex(_) => 10.0,
            Query::Tokens(t) => 10.0 * t.len() as f64,
        }
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
                (10.0, m.start(), m.len())
            }
            Query::Tokens(tokens) if tokens.is_empty() => return None,
            Query::Tokens(tokens) => {
                let lower = doc.text.to_lowercase();
                let mut score = 0.0;
                let mut first: Option<(usize, usize)> = None;
                let mut in_doc = 0;
                for k in 0..tokens.len() {
                    if let Some(pos) = self.prepared.position(k, &lower) {
                        in_doc += 1;
                        score += 10.0;
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
        let with_entry_hits: HashSet<String> = hits.iter().map(|h| h.path.clone()).collect();
        self.finish_with(hits, &with_entry_hits, limit)
    }

    /// [`Matcher::finish`] where `hits` may be only the best of the entry hits: `with_entry_hits` names every
    /// session that had one.
    fn finish_with(&self, mut hits: Vec<Hit>, with_entry_hits: &HashSet<String>, limit: usize) -> Vec<Hit> {
        hits.extend(self.session_hits(with_entry_hits));
        rank(&mut hits);
        hits.truncate(limit);
        hits
    }
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
    /// The hits, best first.
    pub hits: Vec<Hit>,
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
    search_in(query, scope, roles, limit, &mut catalog.without_text(), on_progress)
}

/// Reading the files is this many times faster than extracting their text into the index (FTS5 adding
/// trigrams is most of that), so a search reads the files when more than this fraction of its scope is not
/// indexed yet.
const SCAN_WHEN_UNINDEXED_OVER: u64 = 8;

fn search_in(
    query: &str,
    scope: Scope<'_>,
    roles: Option<&[String]>,
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
    let ask = Ask { query: &parsed, sessions: &sessions, paths: &paths, roles, limit, cancel: &cancel };
    if let Some(ix) = catalog.index() {
        let scan_first = match ix.unindexed_bytes(&paths) {
            Ok((behind, total)) => behind > 0 && behind * SCAN_WHEN_UNINDEXED_OVER > total,
            Err(IndexError::Cancelled) => return Err(Error::Cancelled),
            Err(_) => false,
        };
        if scan_first {
            let hits = scan(&ask, on_progress)?;
            return cancel.check().map(|()| Searched { hits, unindexed: paths });
        }
        match search_index(ix, &ask, on_progress) {
            Ok(hits) => return cancel.check().map(|()| Searched { hits, unindexed: Vec::new() }),
            Err(IndexError::Cancelled) => return Err(Error::Cancelled),
            Err(e) => tracing::warn!("catalog index unavailable ({e}); reading the sessions directly"),
        }
    }
    let hits = scan(&ask, on_progress)?;
    Ok(Searched { hits, unindexed: Vec::new() })
}

/// One search's question, once the scope is listed.
struct Ask<'a> {
    query: &'a Query,
    sessions: &'a [Arc<ListedSession>],
    paths: &'a [String],
    roles: Option<&'a [String]>,
    limit: usize,
    cancel: &'a Cancel,
}

/// The most threads a scan reads files on.
const MAX_SCAN_THREADS: usize = 4;

/// The search by reading every file in `paths`, a file at a time on each of a few threads (a session's entries
/// are judged as its file is read; only hits are kept, and only the best `limit` of them once there are many).
fn scan(ask: &Ask<'_>, on_progress: &mut dyn FnMut(Phase, usize, usize)) -> Result<Vec<Hit>> {
    let Ask { query, sessions, paths, roles, limit, cancel } = *ask;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, MAX_SCAN_THREADS);
    let next = AtomicUsize::new(0);
    let (found_tx, found) = mpsc::channel::<Vec<Hit>>();
    let mut hits: Vec<Hit> = Vec::new();
    let mut with_entry_hits = HashSet::new();
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
        for (done, file_hits) in found.iter().enumerate() {
            with_entry_hits.extend(file_hits.iter().map(|h: &Hit| h.path.clone()));
            hits.extend(file_hits);
            if hits.len() > 2 * limit + 4096 {
                // The order is total: entry hits past the best `limit` can never make the answer.
                rank(&mut hits);
                hits.truncate(limit);
            }
            on_progress(Phase::Indexing, done + 1, paths.len());
        }
    });
    cancel.check()?;
    Ok(Matcher::new(query, sessions, roles).finish_with(hits, &with_entry_hits, limit))
}

/// The search through the index. Entries containing every token are the best hits, so they are visited newest
/// first and the walk stops once `limit` of them are found: a common word costs `limit` entries, not every
/// entry that has it. Only when fewer exist is every candidate (any token) judged.
fn search_index(
    ix: &mut CatalogIndex,
    ask: &Ask<'_>,
    on_progress: &mut dyn FnMut(Phase, usize, usize),
) -> IndexResult<Vec<Hit>> {
    let Ask { query, sessions, paths, roles, limit, cancel } = *ask;
    ix.catch_up_docs(paths, cancel, &mut |l, t| on_progress(Phase::Indexing, l, t))?;
    if limit == 0 {
        return Ok(Vec::new());
    }
    let matcher = Matcher::new(query, sessions, roles);
    let full = matcher.full_score();
    let mut hits: Vec<Hit> =
        ix.fragment_docs(paths, cancel)?.iter().filter_map(|(path, doc)| matcher.entry_hit(path, doc)).collect();
    // Only hits of the newest-first walk count towards stopping it: the unterminated lines judged above are in
    // no particular order, and the final ranking merges them in.
    let mut best = 0;
    // The time of the `limit`th full hit: entries of that same time may still rank before it (by path and place).
    let mut last_time: Option<f64> = None;
    let every_token: Vec<String> = match query {
        Query::Regex(_) => Vec::new(),
        Query::Tokens(_) => query.needles(),
    };
    let time = |t: f64| if t.is_nan() { f64::MIN } else { t };
    let exhausted = ix.for_each_doc_newest_first(paths, &every_token, cancel, &mut |path, doc| {
        if last_time.is_some_and(|last| time(doc.timestamp) < last) {
            return false;
        }
        if let Some(h) = matcher.entry_hit(path, &doc) {
            if h.score >= full {
                best += 1;
                if best == limit {
                    last_time = Some(time(h.timestamp));
                }
            }
            hits.push(h);
        }
        true
    })?;
    let single = match query {
        Query::Regex(_) => true,
        Query::Tokens(t) => t.len() <= 1,
    };
    if exhausted && !single {
        // Entries holding only some tokens (the rest matched by the session's name, id or cwd) rank lower but
        // still count: judge every entry holding any token.
        let docs = ix.docs(paths, &query.needles(), cancel)?;
        return Ok(search(query, sessions, &docs, roles, limit));
    }
    Ok(matcher.finish(hits, limit))
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
