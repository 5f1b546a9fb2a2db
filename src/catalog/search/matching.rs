//! Matching and scoring: a hit, pi's fuzzy session match, an entry's words found and counted (BM25 over its
//! own text), the snippet around a match, and the matcher a scan and the index share.

use super::*;

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
    pub(super) order: u64,
}

pub(super) fn normalize(s: &str) -> String {
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
pub(super) struct Prepared {
    /// Per token: its lowercase words (one for a word token; a phrase's words).
    pub(super) words: Vec<Vec<String>>,
    /// The byte length of each token as written (for snippets).
    pub(super) lens: Vec<usize>,
    /// Per token: the searcher of a word token (None: a phrase).
    pub(super) finders: Vec<Option<memchr::memmem::Finder<'static>>>,
}

impl Prepared {
    pub(super) fn new(tokens: &[Token]) -> Prepared {
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
    pub(super) fn find(&self, k: usize, lower: &str) -> Option<(usize, f64)> {
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
pub(super) const MAX_COUNTED: usize = 32;
/// BM25's term-frequency saturation (k1) and length normalisation (b), with the length (bytes) of a typical
/// entry standing in for the corpus's mean, so an entry's score depends on its own text alone: the same whether
/// the files were read or the index was asked, and across machines.
pub(super) const BM25_K1: f64 = 1.2;
pub(super) const BM25_B: f64 = 0.75;
pub(super) const TYPICAL_ENTRY_BYTES: f64 = 400.0;
/// What a token found in an entry's own text adds to its score at least, and at most on top of that: a token
/// found in the text always outweighs one matched by the session's name, id or cwd (at most 3).
pub(super) const FOUND: f64 = 10.0;
pub(super) const RELEVANCE_SPAN: f64 = 2.0;

/// The occurrences of one token in one text, each weighed by where it falls: a whole word counts 1, the start
/// of a word 0.6, the inside of one 0.3 ("tokenizer" is about tokenizers; "detokenizers" less so).
#[derive(Default)]
pub(super) struct Counted {
    pub(super) n: usize,
    pub(super) weight: f64,
}

impl Counted {
    /// Counts the occurrence at `start..end` of `text`; false once no more will be counted.
    pub(super) fn add(&mut self, text: &str, start: usize, end: usize) -> bool {
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
    pub(super) fn relevance(&self, len: usize) -> f64 {
        let tf = self.weight;
        let norm = 1.0 - BM25_B + BM25_B * (len as f64 / TYPICAL_ENTRY_BYTES);
        RELEVANCE_SPAN * tf * (BM25_K1 + 1.0) / (tf + BM25_K1 * norm)
    }
}

/// Whether `normalize(text).contains(words.join(" "))`, for words without white space, without building the
/// normalized text (an entry can be a whole file's contents, and a phrase query judges every candidate).
#[cfg(test)]
pub(super) fn contains_words(text: &str, words: &[&str]) -> bool {
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
pub(super) fn find_words(text: &str, words: &[&str], each: &mut dyn FnMut(usize, usize) -> bool) {
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
pub(super) struct Matcher<'a> {
    pub(super) query: &'a Query,
    pub(super) sessions: &'a [Arc<ListedSession>],
    pub(super) by_path: HashMap<&'a str, &'a SessionInfo>,
    pub(super) roles: Option<&'a [String]>,
    pub(super) prepared: Prepared,
    /// Each session's weight for each token ([`session_weight`]), computed on first need: a session has many
    /// entries.
    pub(super) weights: RefCell<HashMap<&'a str, Vec<Option<f64>>>>,
}

impl<'a> Matcher<'a> {
    pub(super) fn new(query: &'a Query, sessions: &'a [Arc<ListedSession>], roles: Option<&'a [String]>) -> Self {
        let by_path = sessions.iter().map(|s| (s.info.path.as_str(), &s.info)).collect();
        let tokens: &[Token] = match query {
            Query::Tokens(t) => t,
            Query::Regex(_) => &[],
        };
        let prepared = Prepared::new(tokens);
        Matcher { query, sessions, by_path, roles, prepared, weights: RefCell::default() }
    }

    /// `session_weight(tokens[k], session)`, remembered.
    pub(super) fn weight(&self, path: &'a str, session: &SessionInfo, tokens: &[Token], k: usize) -> Option<f64> {
        let mut weights = self.weights.borrow_mut();
        let all = weights.entry(path).or_insert_with(|| tokens.iter().map(|t| session_weight(t, session)).collect());
        all[k]
    }

    pub(super) fn wants(&self, role: &str) -> bool {
        self.roles.is_none_or(|r| r.iter().any(|x| x == role))
    }

    /// The needles an entry's text must hold (every one) to be a hit, for the index to narrow by, or None when
    /// it cannot narrow to every one: a token some session in scope satisfies by its name, id or cwd need not be
    /// in the text, but a token none does must be, and a lone token always must be. A regex narrows to nothing
    /// (every entry is judged).
    pub(super) fn required_needles(&self) -> Option<Vec<String>> {
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
    pub(super) fn entry_hit(&self, path: &str, doc: &Doc) -> Option<Hit> {
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
    pub(super) fn session_hits(&self, with_entry_hits: &HashSet<String>) -> Vec<Hit> {
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
    pub(super) fn finish(&self, hits: Vec<Hit>, limit: usize) -> Vec<Hit> {
        let mut found = Found::new(limit);
        hits.into_iter().for_each(|h| found.add(h));
        self.page(found, 0, limit).hits
    }

    /// The entry hits `found` plus the session hits, ranked: `limit` from `offset` on, and how many there are.
    pub(super) fn page(&self, found: Found, offset: usize, limit: usize) -> Page {
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
pub(super) struct Found {
    pub(super) keep: usize,
    pub(super) hits: Vec<Hit>,
    pub(super) count: usize,
    pub(super) with_entry_hits: HashSet<String>,
}

impl Found {
    pub(super) fn new(keep: usize) -> Found {
        Found { keep, hits: Vec::new(), count: 0, with_entry_hits: HashSet::new() }
    }

    pub(super) fn extend(&mut self, hit: Option<Hit>) {
        if let Some(hit) = hit {
            self.add(hit);
        }
    }

    pub(super) fn add(&mut self, hit: Hit) {
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
