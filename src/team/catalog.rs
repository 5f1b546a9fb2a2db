//! Reading the team database: every machine's sessions listed, found and searched as pi would on each machine,
//! and a session of another machine read back line for line.
//!
//! Orders follow pi per machine: a directory's sessions are taken in filename-descending `localeCompare` order
//! (`list`), or by file mtime then basename (`listAll`), machine after machine, and then stably sorted by
//! `modified`; so the listing filtered to one machine is exactly pi's listing on it (as of its last push).
//!
//! Search keeps pi's `/resume` semantics (case-insensitive substrings, phrases, `re:`) by judging candidates with
//! the same matcher the local index uses; PostgreSQL narrows the candidates with `pg_trgm` (`ILIKE` and `~` over a
//! trigram GIN index) and walks them newest first, stopping once `limit` best hits are found.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use postgres::types::ToSql;
use postgres::Client;

use super::db::{DbError, DbResult, Target};
use crate::catalog::cancel::Cancel;
use crate::catalog::info::{Doc, ListedSession, SessionInfo};
use crate::catalog::listing::{collator, locale_compare};
use crate::catalog::search::{parse_query, search, session_weight, Hit, Query, Scope, Token};
use crate::session::js::sort::sort_like_v8;
use crate::session::json::{JsString, Json};
use crate::session::paths;

/// A session in the team database: which machine pushed it and pi's `SessionInfo` for it.
#[derive(Clone, Debug)]
pub struct TeamSession {
    /// The machine that pushed it.
    pub machine: String,
    /// Its listing entry, as pi lists it on that machine, with a `machine` member after pi's fields.
    pub listed: Arc<ListedSession>,
    sid: i64,
    agent_dir: String,
    file_name: String,
    mtime_ms: f64,
}

/// A search result and the machine of its session.
#[derive(Clone, Debug, PartialEq)]
pub struct TeamHit {
    /// The machine that pushed the session.
    pub machine: String,
    /// The hit, as the local search gives it.
    pub hit: Hit,
}

/// A session file as pushed: its complete lines, in order.
#[derive(Clone, Debug)]
pub struct PushedFile {
    /// The machine.
    pub machine: String,
    /// The file's path on that machine.
    pub path: String,
    /// The file's bytes as of the push: the lines, each with its `\n`, then what followed the last one.
    pub bytes: Vec<u8>,
}

/// The team database, for reading.
pub struct TeamCatalog {
    target: Target,
    client: Client,
    /// Entries per window of search's newest-first walk.
    window: i64,
    /// The running search's cancellation: checked before each statement.
    cancel: Cancel,
    /// Row-level security binds the role: candidates come through `pi_sessiond_matching_entries` (schema 6).
    row_security: bool,
}

impl std::fmt::Debug for TeamCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TeamCatalog").field("server", &self.target.describe()).finish()
    }
}

fn parse_literal(text: &str) -> Json {
    Json::parse(text.as_bytes()).unwrap_or(Json::Null)
}

fn js_string(text: &str) -> JsString {
    parse_literal(text).into_string().unwrap_or_default()
}

/// `%needle%` for `ILIKE`, with the pattern characters escaped, matching at least what the local matcher finds.
///
/// The local search lowercases as Rust does, which writes a word-final capital sigma as `ς`, while PostgreSQL
/// lowercases letter by letter (`Σ` is always `σ`): "ΟΔΟΣ" is "οδος" to one and "οδοσ" to the other, so neither
/// sigma can be asked for literally. Any single character stands for it here, and the local matcher, which
/// judges every candidate, keeps exactly the ones it would find itself.
fn contains_pattern(needle: &str) -> String {
    let mut p = String::with_capacity(needle.len() + 2);
    p.push('%');
    for c in needle.chars() {
        if matches!(c, 'σ' | 'ς' | 'Σ') {
            p.push('_');
            continue;
        }
        if matches!(c, '%' | '_' | '\\') {
            p.push('\\');
        }
        p.push(c);
    }
    p.push('%');
    p
}

/// pi's `sessionCwdMatches`.
fn cwd_matches(cwd: &str, resolved_cwd: &str) -> bool {
    !cwd.is_empty() && paths::resolve_path(cwd) == resolved_cwd
}

/// Whether a session at `path` on a machine whose agent directory is `agent_dir` is in pi's `list(cwd,
/// session_dir)` there, before the cwd filter; and whether that filter applies.
fn in_list_scope(path: &str, agent_dir: &str, cwd: &str, session_dir: Option<&str>) -> Option<bool> {
    let default = paths::default_session_dir_path(cwd, agent_dir);
    let dir = match session_dir.filter(|d| !d.is_empty()) {
        Some(d) => paths::normalize_path(d),
        None => default.clone(),
    };
    (paths::parent_dir(path) == dir).then(|| !paths::paths_equal(&dir, &default))
}

impl TeamCatalog {
    /// Connects to the database (migrating an older schema; one without pi-sessiond's tables is an error).
    pub fn open(target: &Target) -> DbResult<TeamCatalog> {
        let mut client = super::schema::open_for_reading(target)?;
        let row_security =
            client.query_one("SELECT row_security_active('pi_entries')", &[]).map_err(|e| target.error(e))?.get(0);
        Ok(TeamCatalog { target: target.clone(), client, window: NEWEST_WINDOW, cancel: Cancel::new(), row_security })
    }

    /// Walks search's newest entries `entries` at a time (tests make every path of the search run on a small
    /// database with a small window).
    pub fn with_search_window(mut self, entries: i64) -> TeamCatalog {
        self.window = entries.max(1);
        self
    }

    /// The connection and the server it goes to, for the team's other readers ([`super::usage`]).
    pub(super) fn connection(&mut self) -> (&mut Client, &Target) {
        (&mut self.client, &self.target)
    }

    /// What changes whenever a push changes what this role may see: how many sessions there are, when the last
    /// one was pushed and how far they all go. Cheap (one pass over the session rows, none over entries), so a
    /// web view asks for it every half second.
    pub fn fingerprint(&mut self) -> DbResult<String> {
        let row = self
            .client
            .query_one(
                "SELECT count(*)::text || ' ' || coalesce(max(pushed_at)::text, '-') || ' '
                        || coalesce(sum(pushed_offset), 0)::text
                 FROM pi_sessions",
                &[],
            )
            .map_err(self.err())?;
        Ok(row.get(0))
    }

    /// Whether the role connected sees `machine`'s session `path` (its grants, through the row-level security
    /// policies).
    pub fn shows(&mut self, machine: &str, path: &str) -> DbResult<bool> {
        let row = self
            .client
            .query_one("SELECT EXISTS (SELECT 1 FROM pi_sessions WHERE machine = $1 AND path = $2)", &[&machine, &path])
            .map_err(self.err())?;
        Ok(row.get(0))
    }

    /// Whether the connection is gone (the server closed it, or the network failed).
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// A driver error as a [`DbError`]; a statement that failed because this search was cancelled is
    /// [`DbError::Cancelled`].
    fn err(&self) -> impl Fn(postgres::Error) -> DbError + '_ {
        |e| if self.cancel.is_cancelled() { DbError::Cancelled } else { self.target.error(e) }
    }

    /// Every session row, machine by machine (each machine's in an unspecified order).
    fn sessions(
        &mut self,
        with_text: bool,
        filter: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> DbResult<Vec<TeamSession>> {
        let text = if with_text { "info_all_messages_text" } else { "NULL::text" };
        let sql = format!(
            "SELECT sid, machine, path, agent_dir, file_name, file_mtime_ns, info_id, info_cwd, info_name,
                    info_parent_session, info_created, info_modified, info_message_count, info_first_message, {text}
             FROM pi_sessions {filter} ORDER BY machine"
        );
        let rows = self.client.query(&sql, params).map_err(self.err())?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let mtime_ns: i64 = r.get(5);
                let info = SessionInfo {
                    path: r.get(2),
                    id: parse_literal(r.get(6)),
                    cwd: js_string(r.get(7)),
                    name: r.get::<_, Option<&str>>(8).map(js_string),
                    parent_session_path: r.get::<_, Option<&str>>(9).map(parse_literal),
                    created: r.get(10),
                    modified: r.get(11),
                    message_count: r.get::<_, i64>(12) as u64,
                    first_message: js_string(r.get(13)),
                    all_messages_text: r.get::<_, Option<&str>>(14).map(js_string),
                };
                TeamSession {
                    sid: r.get(0),
                    machine: r.get(1),
                    agent_dir: r.get(3),
                    file_name: r.get(4),
                    mtime_ms: crate::session::identity::mtime_ms_of(mtime_ns),
                    listed: Arc::new(ListedSession::with_member(info, "machine", &Json::str(r.get(1)))),
                }
            })
            .collect())
    }

    /// pi's `listAll(sessionDir?)` on every machine: with a directory, the sessions in that directory on each
    /// machine; without, every session.
    pub fn list_all(&mut self, session_dir: Option<&str>, with_text: bool) -> DbResult<Vec<TeamSession>> {
        let mut all = self.sessions(with_text, "", &[])?;
        if let Some(d) = session_dir.filter(|d| !d.is_empty()) {
            let dir = paths::normalize_path(d);
            all.retain(|s| paths::parent_dir(&s.listed.info.path) == dir);
        }
        // pi's candidate order (mtime, then basename, both descending), one machine after another. Its ties stay
        // in the order pi found the files: directory after directory, each's names as Node's `readdir` gives
        // them (sorted by their bytes).
        let c = collator();
        let mut ordered = Vec::with_capacity(all.len());
        for mut group in group_by_machine(all) {
            group.sort_by_cached_key(|s| (paths::parent_dir(&s.listed.info.path), s.file_name.clone()));
            sort_like_v8(&mut group, |a, b| {
                let diff = b.mtime_ms - a.mtime_ms;
                if diff != 0.0 && !diff.is_nan() {
                    diff
                } else {
                    locale_compare(&c, &b.file_name, &a.file_name)
                }
            });
            ordered.extend(group);
        }
        sort_like_v8(&mut ordered, |a, b| b.listed.info.modified - a.listed.info.modified);
        Ok(ordered)
    }

    /// pi's `list(cwd, sessionDir?)` on every machine: the sessions of `cwd`'s project directory on each (or of
    /// `session_dir`, filtered by cwd unless it is the default one), newest activity first.
    pub fn list(&mut self, cwd: &str, session_dir: Option<&str>, with_text: bool) -> DbResult<Vec<TeamSession>> {
        let resolved = paths::resolve_path(cwd);
        let all = self.sessions(with_text, "", &[])?;
        let c = collator();
        let mut ordered = Vec::new();
        for mut group in group_by_machine(all) {
            group.retain(|s| match in_list_scope(&s.listed.info.path, &s.agent_dir, cwd, session_dir) {
                Some(filter) => !filter || cwd_matches(&s.listed.info.cwd.to_string_lossy(), &resolved),
                None => false,
            });
            sort_like_v8(&mut group, |a, b| locale_compare(&c, &b.file_name, &a.file_name));
            ordered.extend(group);
        }
        sort_like_v8(&mut ordered, |a, b| b.listed.info.modified - a.listed.info.modified);
        Ok(ordered)
    }

    /// pi's `findById(cwd, id, sessionDir?)` on every machine: the first machine (by name) whose copy of the
    /// directory holds a session with exactly this id; `(machine, path)`.
    pub fn find_by_id(&mut self, cwd: &str, id: &str, session_dir: Option<&str>) -> DbResult<Option<(String, String)>> {
        let resolved = paths::resolve_path(cwd);
        let rows = self
            .client
            .query(
                "SELECT machine, path, agent_dir, info_cwd FROM pi_sessions WHERE session_id = $1
                 ORDER BY machine, file_name COLLATE \"C\"",
                &[&id],
            )
            .map_err(self.err())?;
        for r in rows {
            let (machine, path, agent_dir): (String, String, String) = (r.get(0), r.get(1), r.get(2));
            let Some(filter) = in_list_scope(&path, &agent_dir, cwd, session_dir) else { continue };
            if filter && !cwd_matches(&js_string(r.get(3)).to_string_lossy(), &resolved) {
                continue;
            }
            return Ok(Some((machine, path)));
        }
        Ok(None)
    }

    /// The session `path` of `machine` as pushed, or None when the database has no such session.
    pub fn read_file(&mut self, machine: &str, path: &str) -> DbResult<Option<PushedFile>> {
        let rows = self
            .client
            .query(
                "SELECT e.raw FROM pi_sessions s JOIN pi_entries e ON e.sid = s.sid
                 WHERE s.machine = $1 AND s.path = $2 ORDER BY e.line",
                &[&machine, &path],
            )
            .map_err(self.err())?;
        let Some(session) = self
            .client
            .query_opt("SELECT unterminated FROM pi_sessions WHERE machine = $1 AND path = $2", &[&machine, &path])
            .map_err(self.err())?
        else {
            return Ok(None);
        };
        let mut bytes = Vec::new();
        for r in rows {
            bytes.extend_from_slice(r.get::<_, &[u8]>(0));
            bytes.push(b'\n');
        }
        bytes.extend_from_slice(session.get::<_, &[u8]>(0));
        Ok(Some(PushedFile { machine: machine.to_owned(), path: path.to_owned(), bytes }))
    }

    /// `sessions/search` across every machine: pi's `/resume` query over the sessions in `scope` on each machine,
    /// best first, at most `limit`. An invalid query is an error; so is a database failure.
    pub fn search(
        &mut self,
        query: &str,
        scope: Scope<'_>,
        roles: Option<&[String]>,
        limit: usize,
    ) -> Result<Vec<TeamHit>, SearchError> {
        self.search_cancellable(query, scope, roles, limit, &Cancel::new())
    }

    /// [`TeamCatalog::search`] that stops when `cancel` is set (then [`DbError::Cancelled`]): the statement the
    /// database is running is cancelled (its cancel request, as `pg_cancel_backend` would), so neither the server
    /// nor this connection stays busy with a search nobody waits for.
    pub fn search_cancellable(
        &mut self,
        query: &str,
        scope: Scope<'_>,
        roles: Option<&[String]>,
        limit: usize,
        cancel: &Cancel,
    ) -> Result<Vec<TeamHit>, SearchError> {
        let token = self.client.cancel_token();
        let tls = self.target.tls()?;
        self.cancel = cancel.clone();
        let done = AtomicBool::new(false);
        let result = std::thread::scope(|s| {
            // Lives as long as the search: `done` ends it.
            s.spawn(|| {
                while !done.load(Ordering::Relaxed) {
                    if cancel.is_cancelled() {
                        if let Err(e) = token.cancel_query(tls) {
                            tracing::warn!("team search: the database did not take the cancel request: {e}");
                        }
                        return;
                    }
                    std::thread::sleep(CANCEL_POLL);
                }
            });
            let result = self.search_inner(query, scope, roles, limit);
            done.store(true, Ordering::Relaxed);
            result
        });
        self.cancel = Cancel::new();
        result
    }

    fn search_inner(
        &mut self,
        query: &str,
        scope: Scope<'_>,
        roles: Option<&[String]>,
        limit: usize,
    ) -> Result<Vec<TeamHit>, SearchError> {
        let parsed = parse_query(query).map_err(SearchError::Query)?;
        let sessions = match scope.cwd {
            Some(cwd) => self.list(cwd, scope.session_dir, false)?,
            None => self.list_all(scope.session_dir, false)?,
        };
        if sessions.is_empty() || matches!(&parsed, Query::Tokens(t) if t.is_empty()) || limit == 0 {
            return Ok(Vec::new());
        }
        // The matcher knows sessions by path, and paths repeat across machines: key them by path and row id (in
        // that order, so hits that tie rank by path as a local search ranks them).
        let key = |s: &TeamSession| format!("{}\u{0}{}", s.listed.info.path, s.sid);
        let keyed: Vec<Arc<ListedSession>> = sessions
            .iter()
            .map(|s| {
                let mut info = s.listed.info.clone();
                info.path = key(s);
                Arc::new(ListedSession::new(info))
            })
            .collect();
        let by_sid: HashMap<String, &TeamSession> = sessions.iter().map(|s| (key(s), s)).collect();
        let key_of: HashMap<String, String> = sessions.iter().map(|s| (s.sid.to_string(), key(s))).collect();
        let rekey = |docs: Vec<(String, Doc)>| -> Vec<(String, Doc)> {
            docs.into_iter().filter_map(|(sid, d)| Some((key_of.get(&sid)?.clone(), d))).collect()
        };
        let sids: Vec<i64> = sessions.iter().map(|s| s.sid).collect();
        let full = match &parsed {
            Query::Regex(_) => 10.0,
            Query::Tokens(t) => 10.0 * t.len() as f64,
        };
        let single = match &parsed {
            Query::Regex(_) => true,
            Query::Tokens(t) => t.len() <= 1,
        };
        // What an entry's text must contain for a token to be found in it: the word, or every word of a phrase
        // (white space between them may be anything, so the phrase itself cannot be a pattern).
        // A phrase of several words is also a regular expression (the words in order, white space between them),
        // so that entries holding its words elsewhere stay in the database.
        let token_patterns: Vec<Narrow> = match &parsed {
            Query::Regex(_) => Vec::new(),
            Query::Tokens(tokens) => tokens
                .iter()
                .map(|t| match t {
                    Token::Fuzzy(v) => Narrow::every(vec![contains_pattern(&v.to_lowercase())], Vec::new()),
                    Token::Phrase(p) => Narrow::every(
                        p.split_whitespace().map(|w| contains_pattern(&w.to_lowercase())).collect(),
                        self.accepted(phrase_regex(p)).into_iter().collect(),
                    ),
                })
                .collect(),
        };
        let every_token = match &parsed {
            Query::Regex(re) => Narrow::every(Vec::new(), self.accepted(pg_regex(re.as_str())).into_iter().collect()),
            Query::Tokens(_) => Narrow::all_of(token_patterns.iter()),
        };
        let roles_filter: Option<Vec<String>> = roles.map(<[String]>::to_vec);
        // Entries holding every token: each is judged, as a local search judges them, since hits rank by their
        // relevance and a newer one need not rank first.
        let docs = rekey(self.docs(&sids, &every_token, roles_filter.as_deref(), None)?.0);
        let mut hits = search(&parsed, &keyed, &docs, roles, limit);
        // Entries holding only some tokens score less than any holding them all: they matter only when fewer
        // than `limit` hold them all.
        let found = hits.iter().filter(|h| h.entry_id.is_some() && h.score >= full).count() >= limit;
        if !found {
            if let (false, Query::Tokens(tokens)) = (single, &parsed) {
                // An entry holding only some tokens is a hit when the session's own fields (name, id, cwd) match
                // the rest, so what it must hold depends on its session: every token those fields miss, or any
                // token when they miss none. Sessions are asked for in groups of the same missing tokens, so the
                // database hands over only entries that are hits.
                let mut groups: BTreeMap<Vec<usize>, Vec<i64>> = BTreeMap::new();
                for (s, k) in sessions.iter().zip(&keyed) {
                    let missing: Vec<usize> =
                        (0..tokens.len()).filter(|&i| session_weight(&tokens[i], &k.info).is_none()).collect();
                    groups.entry(missing).or_default().push(s.sid);
                }
                let mut some = Vec::new();
                for (missing, group) in &groups {
                    if missing.len() == tokens.len() {
                        // These need every token: the entries fetched above.
                        let group: HashSet<&String> =
                            group.iter().filter_map(|sid| key_of.get(&sid.to_string())).collect();
                        some.extend(docs.iter().filter(|(key, _)| group.contains(key)).cloned());
                        continue;
                    }
                    let narrow = if missing.is_empty() {
                        Narrow { patterns: every_token.patterns.clone(), all: false, regexes: Vec::new() }
                    } else {
                        Narrow::all_of(missing.iter().map(|&i| &token_patterns[i]))
                    };
                    some.extend(rekey(self.docs(group, &narrow, roles_filter.as_deref(), None)?.0));
                }
                hits = search(&parsed, &keyed, &some, roles, limit);
            }
        }
        Ok(hits
            .into_iter()
            .filter_map(|mut hit| {
                let s = by_sid.get(&hit.path)?;
                hit.path = s.listed.info.path.clone();
                Some(TeamHit { machine: s.machine.clone(), hit })
            })
            .collect())
    }

    /// `regex` if the server takes it: one it refuses (too complex for its engine, or written in a way this
    /// translation did not foresee) narrows nothing rather than failing the search.
    fn accepted(&mut self, regex: Option<String>) -> Option<String> {
        let regex = regex?;
        match self.client.query_one("SELECT '' ~ $1", &[&regex]) {
            Ok(_) => Some(regex),
            Err(e) => {
                tracing::debug!("team search: the database refuses {regex:?} ({e}); not narrowing by it");
                None
            }
        }
    }

    /// Searchable entries of the sessions `sids` that `narrow` lets through: all of them through the trigram
    /// index, or (`window`) those among the next window of newest entries from that offset, and whether entries
    /// older than the window remain.
    fn docs(
        &mut self,
        sids: &[i64],
        narrow: &Narrow,
        roles: Option<&[String]>,
        window: Option<i64>,
    ) -> DbResult<(Vec<(String, Doc)>, bool)> {
        if self.cancel.is_cancelled() {
            return Err(DbError::Cancelled);
        }
        let columns = "sid, search_entry, search_role, search_text, search_ts, line";
        let mut params: Vec<Box<dyn ToSql + Sync>> = vec![Box::new(sids.to_vec())];
        let from = match window {
            // Planned on its own, so the walk goes down the newest-first index and stops after the window.
            Some(offset) => {
                params.push(Box::new(self.window));
                params.push(Box::new(offset));
                format!(
                    "(SELECT {columns} FROM pi_entries WHERE search_text IS NOT NULL
                      ORDER BY search_ts DESC NULLS LAST, sid, line LIMIT $2 OFFSET $3) e"
                )
            }
            // A role under the policies gets no index for ILIKE and ~ (not leakproof): the owner's function finds
            // the entries through it, in the sessions the role may read (schema 6).
            None if self.row_security => {
                params.push(Box::new(narrow.patterns.clone()));
                params.push(Box::new(narrow.all));
                params.push(Box::new(narrow.regexes.clone()));
                "pi_sessiond_matching_entries(current_user, $1, $2, $3, $4) e".to_owned()
            }
            None => "pi_entries e".to_owned(),
        };
        let mut sql = format!("SELECT {columns} FROM {from} WHERE sid = ANY($1) AND search_text IS NOT NULL");
        // One condition per pattern: the trigram index serves `ILIKE` but not `ILIKE ALL (array)`.
        let mut conditions = Vec::new();
        for p in &narrow.patterns {
            params.push(Box::new(p.clone()));
            conditions.push(format!("search_text ILIKE ${}", params.len()));
        }
        if !conditions.is_empty() {
            sql.push_str(&format!(" AND ({})", conditions.join(if narrow.all { " AND " } else { " OR " })));
        }
        for re in &narrow.regexes {
            params.push(Box::new(re.clone()));
            sql.push_str(&format!(" AND search_text ~ ${}", params.len()));
        }
        if let Some(r) = roles {
            params.push(Box::new(r.to_vec()));
            sql.push_str(&format!(" AND search_role = ANY(${})", params.len()));
        }
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p.as_ref()).collect();
        let rows = self.client.query(&sql, &refs).map_err(self.err())?;
        let older = match window {
            Some(offset) => self
                .client
                .query_opt(
                    "SELECT 1 FROM pi_entries WHERE search_text IS NOT NULL
                     ORDER BY search_ts DESC NULLS LAST, sid, line OFFSET $1 LIMIT 1",
                    &[&(offset + self.window)],
                )
                .map_err(self.err())?
                .is_some(),
            None => false,
        };
        let docs = rows
            .into_iter()
            .map(|r| {
                let doc = Doc {
                    entry_id: r.get::<_, Option<String>>(1).unwrap_or_else(|| "null".to_owned()),
                    role: role_name(r.get(2)),
                    text: r.get(3),
                    timestamp: r.get::<_, Option<f64>>(4).unwrap_or(f64::NAN),
                    order: r.get::<_, i32>(5) as u64,
                };
                (r.get::<_, i64>(0).to_string(), doc)
            })
            .collect();
        Ok((docs, older))
    }
}

/// What an entry's searchable text must hold to be fetched: every (`all`) or any of the `ILIKE` patterns, and a
/// match of every PostgreSQL regular expression.
#[derive(Debug)]
struct Narrow {
    patterns: Vec<String>,
    all: bool,
    regexes: Vec<String>,
}

impl Narrow {
    fn every(patterns: Vec<String>, regexes: Vec<String>) -> Narrow {
        Narrow { patterns, all: true, regexes }
    }

    /// What each of `narrows` (each requiring all of its own) requires.
    fn all_of<'a>(narrows: impl Iterator<Item = &'a Narrow>) -> Narrow {
        let mut all = Narrow::every(Vec::new(), Vec::new());
        for n in narrows {
            all.patterns.extend(n.patterns.iter().cloned());
            all.regexes.extend(n.regexes.iter().cloned());
        }
        all
    }
}

/// A PostgreSQL regular expression matching at least the texts that hold the phrase `phrase` as the local search
/// finds it (lowercased, runs of white space as one space): its words, in order, with Rust's white space (the
/// Unicode `White_Space` characters) between them. None for a single word, which its pattern already covers.
fn phrase_regex(phrase: &str) -> Option<String> {
    const WHITE_SPACE: &str =
        "[\\u0009-\\u000D\\u0020\\u0085\\u00A0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000]+";
    let words: Vec<String> = phrase.split_whitespace().map(|w| pg_regex(&regex::escape(w))).collect::<Option<_>>()?;
    (words.len() > 1).then(|| words.join(WHITE_SPACE))
}

/// A PostgreSQL regular expression (ARE) matching at least the texts `pattern` (a case-insensitive `re:` query,
/// Rust's syntax) matches, or None when it cannot be written (the database then narrows nothing).
///
/// The two syntaxes and their classes differ (`\w`, case folding, what `.` matches), so the pattern is not handed
/// over as it is: its parsed form is written out again with only what both read alike — characters as `\u`/`\U`
/// escapes, small classes listed (each case variant of a letter is one, so no case-insensitive flag is needed),
/// large ones as any character, every bounded repetition as `*`/`+`/`?` and assertions (`^`, `\b`) left out.
/// Each of those only widens the match; the local matcher then judges every text fetched.
fn pg_regex(pattern: &str) -> Option<String> {
    use regex_syntax::hir::{Class, Hir, HirKind};
    fn char_escape(c: char) -> String {
        if c.is_ascii_alphanumeric() {
            c.to_string()
        } else if (c as u32) <= 0xFFFF {
            format!("\\u{:04X}", c as u32)
        } else {
            format!("\\U{:08X}", c as u32)
        }
    }
    fn write(hir: &Hir, out: &mut String) -> Option<()> {
        match hir.kind() {
            HirKind::Empty | HirKind::Look(_) => {}
            HirKind::Literal(lit) => {
                std::str::from_utf8(&lit.0).ok()?.chars().for_each(|c| out.push_str(&char_escape(c)))
            }
            HirKind::Class(Class::Unicode(class)) => {
                let ranges = class.ranges();
                if ranges.is_empty() {
                    return None;
                }
                if ranges.len() > 32 {
                    out.push('.');
                } else {
                    out.push('[');
                    for r in ranges {
                        // PostgreSQL text holds no NUL, and a class naming it is refused.
                        let start = r.start().max('\u{1}');
                        out.push_str(&char_escape(start));
                        if r.end() > start {
                            out.push('-');
                            out.push_str(&char_escape(r.end()));
                        }
                    }
                    out.push(']');
                }
            }
            HirKind::Class(Class::Bytes(_)) => return None,
            HirKind::Repetition(rep) => {
                out.push_str("(?:");
                write(&rep.sub, out)?;
                out.push(')');
                out.push(match (rep.min, rep.max) {
                    (0, Some(1)) => '?',
                    (0, _) => '*',
                    _ => '+',
                });
            }
            HirKind::Capture(cap) => {
                out.push_str("(?:");
                write(&cap.sub, out)?;
                out.push(')');
            }
            HirKind::Concat(parts) => {
                for p in parts {
                    write(p, out)?;
                }
            }
            HirKind::Alternation(parts) => {
                out.push_str("(?:");
                for (i, p) in parts.iter().enumerate() {
                    if i > 0 {
                        out.push('|');
                    }
                    write(p, out)?;
                }
                out.push(')');
            }
        }
        Some(())
    }
    let hir = regex_syntax::ParserBuilder::new().case_insensitive(true).build().parse(pattern).ok()?;
    let mut out = String::new();
    write(&hir, &mut out)?;
    // An expression that matches everything narrows nothing: not worth the database's time.
    (!out.is_empty()).then_some(out)
}

/// How often a search's watcher looks whether the search was cancelled.
const CANCEL_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// Entries per window of a newest-first walk (by default). A search no longer walks in windows (hits rank by
/// relevance, so it judges every entry holding every token); `docs` still can.
const NEWEST_WINDOW: i64 = 2000;

/// Splits sessions (ordered by machine) into one group per machine.
fn group_by_machine(sessions: Vec<TeamSession>) -> Vec<Vec<TeamSession>> {
    let mut groups: Vec<Vec<TeamSession>> = Vec::new();
    for s in sessions {
        match groups.last_mut() {
            Some(g) if g[0].machine == s.machine => g.push(s),
            _ => groups.push(vec![s]),
        }
    }
    groups
}

/// The static role name of a stored role.
fn role_name(role: &str) -> &'static str {
    const ROLES: [&str; 8] = ["user", "assistant", "toolResult", "custom", "bashExecution", "name", "label", "summary"];
    ROLES.iter().find(|r| **r == role).copied().unwrap_or("other")
}

/// Why a search failed.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// The query is not valid (an empty or broken `re:`).
    #[error("invalid query: {0}")]
    Query(String),
    /// The database failed.
    #[error(transparent)]
    Db(#[from] DbError),
}

/// A listing as JSON: pi's `SessionInfo` objects, each with a `machine` member after pi's fields.
pub fn listing_json(sessions: &[TeamSession], with_text: bool) -> Vec<u8> {
    let listed: Vec<Arc<ListedSession>> = sessions.iter().map(|s| s.listed.clone()).collect();
    crate::catalog::info::session_infos(&listed, with_text)
}
