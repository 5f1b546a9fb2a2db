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

mod matching;
mod query;

pub use self::matching::*;
pub use self::query::*;

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
