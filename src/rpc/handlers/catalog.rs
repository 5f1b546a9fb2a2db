//! Listing, finding and searching sessions (`sessions/*`), through the shared catalog index, with LSP-style
//! `$/progress`. These run on the blocking pool, beside everything else, and are cancellable: a cancelled request's
//! catalog work stops at its next check. Also the index's catch-up on files this process wrote, on a thread of its
//! own.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Write as _;

use std::sync::{mpsc, Arc, Mutex};

use super::{Cx, Res};
use crate::catalog::index::{CatalogIndex, SharedIndex};
use crate::catalog::info::session_infos;
use crate::catalog::info::ListedSession;
use crate::catalog::listing::Catalog;
use crate::catalog::quiet::{QuietDirs, Seen};
use crate::catalog::search::search_hit_json;
use crate::catalog::search::{self as catalog_search, Phase, Scope};
use crate::rpc::error::from_session;
use crate::rpc::proto::*;
use crate::rpc::reply::Out;
use crate::session::render::JsonOut;

/// Listings `sessions/listDelta` answered lately, by token, so the next answer can refer to their entries.
#[derive(Debug)]
pub struct RecentListings {
    /// Makes this process's tokens unlike any other's.
    nonce: String,
    issued: u64,
    /// Newest last.
    kept: VecDeque<Kept>,
}

/// One listing `sessions/listDelta` answered.
#[derive(Debug)]
struct Kept {
    token: String,
    /// Whether it has `allMessagesText`.
    with_text: bool,
    listing: SharedListing,
    /// What it was a listing of, and what it saw of those directories as it began: while none of them has
    /// changed, the same question is answered with it, unread.
    unchanged_while: Option<(ListingScope, Seen)>,
}

/// What a listing lists: `list`'s cwd (None: `listAll`), the session directory, and whether with text.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ListingScope {
    cwd: Option<String>,
    session_dir: Option<String>,
    with_text: bool,
}

/// A listing's entries, in order, as a token keeps them.
type SharedListing = Arc<Vec<Arc<ListedSession>>>;

/// How many listings `sessions/listDelta` remembers: one per scope a host keeps open is plenty.
const KEPT_LISTINGS: usize = 8;

impl Default for RecentListings {
    fn default() -> Self {
        RecentListings {
            nonce: uuid::Uuid::new_v4().simple().to_string()[..12].to_owned(),
            issued: 0,
            kept: VecDeque::new(),
        }
    }
}

impl RecentListings {
    fn get(&self, token: &str, with_text: bool) -> Option<SharedListing> {
        self.kept.iter().find(|k| k.token == token && k.with_text == with_text).map(|k| k.listing.clone())
    }

    /// The listing of `token` if it lists `scope`, with what it saw of its directories.
    fn get_unread(&self, token: &str, scope: &ListingScope) -> Option<(SharedListing, Seen)> {
        let kept = self.kept.iter().find(|k| k.token == token)?;
        match &kept.unchanged_while {
            Some((s, seen)) if s == scope => Some((kept.listing.clone(), seen.clone())),
            _ => None,
        }
    }

    fn keep(
        &mut self,
        with_text: bool,
        listing: SharedListing,
        unchanged_while: Option<(ListingScope, Seen)>,
    ) -> String {
        self.issued += 1;
        let token = format!("{}-{}", self.nonce, self.issued);
        if self.kept.len() == KEPT_LISTINGS {
            self.kept.pop_front();
        }
        self.kept.push_back(Kept { token: token.clone(), with_text, listing, unchanged_while });
        token
    }
}

/// Sends LSP-style `$/progress` for a listing or search: begin (per stage), a report every few files, end.
struct ProgressReporter<'a> {
    cx: &'a Cx<'a>,
    token: Option<ProgressToken>,
    last: std::time::Instant,
    stage: Option<ProgressStage>,
    /// The latest counts, which `end` repeats.
    counts: (usize, usize),
}

impl<'a> ProgressReporter<'a> {
    fn new(cx: &'a Cx<'a>, token: Option<ProgressToken>) -> Self {
        ProgressReporter { cx, token, last: std::time::Instant::now(), stage: None, counts: (0, 0) }
    }

    fn send(&self, kind: ProgressKind, loaded: usize, total: usize) {
        if let Some(token) = &self.token {
            let value = ProgressValue { kind, loaded, total, stage: self.stage };
            self.cx.server.notify("$/progress", &Progress { token: token.clone(), value });
        }
    }

    fn report(&mut self, loaded: usize, total: usize) {
        self.report_stage(None, loaded, total);
    }

    /// Reports progress; a new `stage` starts with a `begin` of its own.
    fn report_stage(&mut self, stage: Option<ProgressStage>, loaded: usize, total: usize) {
        if loaded == 1 {
            self.stage = stage;
            self.send(ProgressKind::Begin, 0, total);
        }
        self.counts = (loaded, total);
        if loaded == total || self.last.elapsed() >= std::time::Duration::from_millis(50) {
            self.send(ProgressKind::Report, loaded, total);
            self.last = std::time::Instant::now();
        }
    }

    /// The last message: the latest stage's final counts.
    fn end(&self) {
        self.send(ProgressKind::End, self.counts.0, self.counts.1);
    }
}

/// The catalog for a request: its work stops when the request is cancelled.
fn catalog<'a>(cx: &'a Cx<'_>, index: Option<&'a mut CatalogIndex>) -> Catalog<'a> {
    Catalog::new(&cx.server.agent_dir, index).with_cancel(cx.reply.cancel_token())
}

/// The catalog for a listing request (`allMessagesText` unless the host declined it).
fn catalog_of<'a>(cx: &'a Cx<'_>, index: Option<&'a mut CatalogIndex>, text: Option<bool>) -> Catalog<'a> {
    let c = catalog(cx, index);
    if text == Some(false) {
        c.without_text()
    } else {
        c
    }
}

type Run<'r> =
    dyn FnOnce(&mut Catalog<'_>, &mut dyn FnMut(usize, usize)) -> crate::session::Result<Vec<Arc<ListedSession>>> + 'r;

/// A listing through the shared index, with progress under `token`, rendered by `render` (with `allMessagesText`
/// or not).
fn listing<T>(
    cx: &Cx<'_>,
    scope: (Option<&str>, Option<&str>),
    token: Option<ProgressToken>,
    include_text: Option<bool>,
    run: Box<Run<'_>>,
    render: impl FnOnce(Vec<Arc<ListedSession>>, bool) -> Vec<u8>,
) -> Res<T> {
    let server = cx.server;
    if let Some(team) = &server.team {
        // Every machine's sessions, from the team catalog (the local index is not used).
        let infos = team.listing(scope.0, scope.1, include_text != Some(false))?;
        return Ok(Out::json(render(infos, include_text != Some(false))));
    }
    let mut progress = ProgressReporter::new(cx, token);
    let infos = server
        .index
        .with(|ix| run(&mut catalog_of(cx, ix, include_text), &mut |l, t| progress.report(l, t)))
        .map_err(from_session)?;
    progress.end();
    Ok(Out::json(render(infos, include_text != Some(false))))
}

fn pi_listing(infos: Vec<Arc<ListedSession>>, with_text: bool) -> Vec<u8> {
    session_infos(&infos, with_text)
}

/// `sessions/list`.
pub fn list(p: ListParams, cx: &Cx<'_>) -> Res<SessionInfoListJson> {
    let (cwd, dir) = (p.cwd, p.session_dir);
    let scope = (Some(cwd.clone()), dir.clone());
    let run = move |c: &mut Catalog<'_>, progress: &mut dyn FnMut(usize, usize)| c.list(&cwd, dir.as_deref(), progress);
    let scope = (scope.0.as_deref(), scope.1.as_deref());
    listing(cx, scope, p.progress_token, p.include_all_messages_text, Box::new(run), pi_listing)
}

/// `sessions/listAll`.
pub fn list_all(p: ListAllParams, cx: &Cx<'_>) -> Res<SessionInfoListJson> {
    let dir = p.session_dir;
    let scope_dir = dir.clone();
    let run = move |c: &mut Catalog<'_>, progress: &mut dyn FnMut(usize, usize)| c.list_all(dir.as_deref(), progress);
    listing(cx, (None, scope_dir.as_deref()), p.progress_token, p.include_all_messages_text, Box::new(run), pi_listing)
}

/// `sessions/listDelta`.
pub fn list_delta(p: ListDeltaParams, cx: &Cx<'_>) -> Res<ListingDeltaJson> {
    let server = cx.server;
    let listing_scope = ListingScope {
        cwd: p.cwd.clone(),
        session_dir: p.session_dir.clone(),
        with_text: p.include_all_messages_text != Some(false),
    };
    // Nothing changed in the directories of the listing the host holds: it is the answer, read from nothing.
    if let (Some(since), None) = (&p.since, &server.team) {
        let held = server.listings.lock().unwrap_or_else(|e| e.into_inner()).get_unread(since, &listing_scope);
        if let Some((listing, seen)) = held.filter(|(_, seen)| server.quiet_dirs.unchanged_since(seen)) {
            let with_text = listing_scope.with_text;
            let mut recent = server.listings.lock().unwrap_or_else(|e| e.into_inner());
            let token = recent.keep(with_text, listing.clone(), Some((listing_scope, seen)));
            drop(recent);
            tracing::debug!("listing {since}: its directories are unchanged since, so it is answered unread");
            return Ok(Out::json(listing_delta(&token, &listing, &listing, with_text)));
        }
    }
    // Watched before anything is read: a change while the listing is made is then a change after it.
    let seen = match &server.team {
        None => watch_listing_dirs(&server.quiet_dirs, &server.agent_dir, &listing_scope),
        Some(_) => None,
    };
    let unchanged_while = seen.map(|seen| (listing_scope, seen));
    let (cwd, session_dir, since) = (p.cwd, p.session_dir, p.since);
    let scope = (cwd.clone(), session_dir.clone());
    let run = move |c: &mut Catalog<'_>, progress: &mut dyn FnMut(usize, usize)| match &cwd {
        Some(cwd) => c.list(cwd, session_dir.as_deref(), progress),
        None => c.list_all(session_dir.as_deref(), progress),
    };
    let server = cx.server;
    let render = move |infos: Vec<Arc<ListedSession>>, with_text: bool| {
        let infos = Arc::new(infos);
        let mut recent = server.listings.lock().unwrap_or_else(|e| e.into_inner());
        let base = since.and_then(|t| recent.get(&t, with_text));
        let token = recent.keep(with_text, infos.clone(), unchanged_while);
        drop(recent);
        listing_delta(&token, base.as_deref().map_or(&[], Vec::as_slice), &infos, with_text)
    };
    let scope = (scope.0.as_deref(), scope.1.as_deref());
    listing(cx, scope, p.progress_token, p.include_all_messages_text, Box::new(run), render)
}

/// Watches the directories a listing of `scope` reads (the sessions root and its project directories for
/// `listAll` without one), as it begins; None when they cannot be told or watched (then the listing is never
/// answered unread).
fn watch_listing_dirs(quiet: &QuietDirs, agent_dir: &str, scope: &ListingScope) -> Option<Seen> {
    use crate::session::{dirscan, paths};
    match (&scope.cwd, &scope.session_dir) {
        (Some(cwd), dir) => quiet.before_listing(&[dirscan::directory_for(cwd, dir.as_deref(), agent_dir).ok()?.0]),
        (None, Some(dir)) if !dir.is_empty() => quiet.before_listing(&[paths::normalize_path(dir)]),
        (None, _) => quiet.before_listing_tree(&paths::join(&[agent_dir, "sessions"])),
    }
}

/// `sessions/findById`.
pub fn find_by_id(p: FindByIdParams, cx: &Cx<'_>) -> Res<FindResult> {
    let server = cx.server;
    if let Some(team) = &server.team {
        let found = team
            .with(|c| c.find_by_id(&p.cwd, &p.id, p.session_dir.as_deref()).map_err(crate::rpc::team::unavailable))?;
        let (machine, path) = found.map_or((None, None), |(m, p)| (Some(m), Some(p)));
        return Ok(Out::Value(FindResult { path, machine }));
    }
    let path = server
        .index
        .with(|ix| catalog(cx, ix).find_by_id(&p.cwd, &p.id, p.session_dir.as_deref()))
        .map_err(from_session)?;
    Ok(Out::Value(FindResult { path, machine: None }))
}

/// Brings the shared index up to date on the files this process wrote, on one long-lived thread: an append only
/// notes its file and, when no catch-up is under way, wakes the thread (so a search finds what was just written
/// without the append spawning anything).
pub struct IndexCatchUp {
    index: Arc<SharedIndex>,
    wake: Mutex<mpsc::Sender<()>>,
}

impl IndexCatchUp {
    /// Starts the thread; it ends when this is dropped.
    pub fn start(index: Arc<SharedIndex>) -> IndexCatchUp {
        let (wake, woken) = mpsc::channel::<()>();
        let thread_index = index.clone();
        let started = std::thread::Builder::new().name("pi-sessiond-index".into()).spawn(move || {
            while woken.recv().is_ok() {
                thread_index.catch_up_written();
            }
        });
        if let Err(e) = started {
            tracing::warn!("no index catch-up thread ({e}): searches find new writes at the next listing");
        }
        IndexCatchUp { index, wake: Mutex::new(wake) }
    }

    /// This process wrote `path`.
    pub fn written(&self, path: &str) {
        if self.index.note_written(path) {
            self.wake();
        }
    }

    /// A search read `paths` because the index did not hold their text: extract it now that the answer is out.
    pub fn unindexed(&self, paths: Vec<String>) {
        if self.index.note_unindexed(paths) {
            self.wake();
        }
    }

    fn wake(&self) {
        let _ = self.wake.lock().unwrap_or_else(|e| e.into_inner()).send(());
    }
}

/// Results shown when the host does not say how many it wants.
const DEFAULT_SEARCH_LIMIT: usize = 50;

/// `sessions/search`.
pub fn search(p: SearchParams, cx: &Cx<'_>) -> Res<Vec<SearchHitJson>> {
    run_search(p, cx).map(|page| Out::Value(page.hits))
}

/// `sessions/searchPage`.
pub fn search_page(p: SearchParams, cx: &Cx<'_>) -> Res<SearchPage> {
    run_search(p, cx).map(Out::Value)
}

fn run_search(p: SearchParams, cx: &Cx<'_>) -> Result<SearchPage, jsonrpsee::types::ErrorObjectOwned> {
    let server = cx.server;
    let mut progress = ProgressReporter::new(cx, p.progress_token);
    let scope = Scope { cwd: p.cwd.as_deref(), session_dir: p.session_dir.as_deref() };
    let limit = p.limit.unwrap_or(DEFAULT_SEARCH_LIMIT);
    let offset = p.offset.unwrap_or(0);
    if let Some(team) = &server.team {
        // The team catalog ranks as a local search does but counts nothing past what it returns: the best
        // `offset + limit`, and, when there are fewer, the true total.
        let keep = offset.saturating_add(limit);
        let all = crate::rpc::team::search(team, &p.query, scope, p.roles.as_deref(), keep, &cx.reply.cancel_token())?;
        let total = all.len();
        // A session is a machine's path.
        let session_of = |h: &SearchHitJson| {
            let v: serde_json::Value = serde_json::from_str(h.0 .0.get()).unwrap_or_default();
            (v.get("machine").cloned(), v.get("path").cloned())
        };
        let sessions = all.iter().map(session_of).map(|k| format!("{k:?}")).collect::<HashSet<_>>().len();
        let hits = all.into_iter().skip(offset).collect();
        return Ok(SearchPage { hits, total, sessions, offset });
    }
    let searched = server
        .index
        .with(|ix| {
            let catalog = catalog(cx, ix);
            catalog_search::search_page(
                &p.query,
                scope,
                p.roles.as_deref(),
                offset,
                limit,
                catalog,
                &mut |phase, l, t| {
                    let stage = match phase {
                        Phase::Listing => ProgressStage::Listing,
                        Phase::Indexing => ProgressStage::Indexing,
                    };
                    progress.report_stage(Some(stage), l, t)
                },
            )
        })
        .map_err(from_session)?;
    progress.end();
    // (Queued before the answer is sent, but the index thread's work does not hold it up.)
    server.index_catch_up.unindexed(searched.unindexed);
    let hits = searched.hits.iter().map(|h| SearchHitJson(RawJson::from_json(&search_hit_json(h)))).collect();
    Ok(SearchPage { hits, total: searched.total, sessions: searched.sessions, offset })
}

/// A listing as a change to `base`, one the host holds: `{"token": token, "sessions": [...]}`, where each entry is
/// its `SessionInfo` or, when `base` has an identical entry, that entry's index in `base`. With an empty base every
/// entry comes in full.
pub fn listing_delta(
    token: &str,
    base: &[Arc<ListedSession>],
    listing: &[Arc<ListedSession>],
    with_text: bool,
) -> Vec<u8> {
    // Built only if an entry is not where it was: a listing asked for again is mostly the last one, in its order,
    // and hashing every path of a thousand sessions was a fifth of a held listing's time in the sidecar.
    let mut known: Option<HashMap<&str, usize, foldhash::fast::RandomState>> = None;
    let mut o = JsonOut::memory();
    o.raw(b"{\"token\":").and_then(|()| o.str(token)).expect("memory output cannot fail");
    let mut out = o.into_bytes();
    out.extend_from_slice(b",\"sessions\":[");
    for (i, s) in listing.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        // Entries the memo answered are the very same allocation; others may still render the same.
        let same = if base.get(i).is_some_and(|b| Arc::ptr_eq(b, s)) {
            Some(i)
        } else {
            let known =
                known.get_or_insert_with(|| base.iter().enumerate().map(|(i, s)| (s.info.path.as_str(), i)).collect());
            known
                .get(s.info.path.as_str())
                .copied()
                .filter(|&k| Arc::ptr_eq(&base[k], s) || base[k].same_json(s, with_text))
        };
        match same {
            Some(k) => {
                let _ = write!(out, "{k}");
            }
            None => s.write_json(with_text, &mut out),
        }
    }
    out.extend_from_slice(b"]}");
    out
}
