//! Opening and closing sessions: the five opening methods, `session/getState` and `session/close`.
//!
//! An opening request is queued on arrival ([`start`]): on the slot its handle names, or (with no handle chosen)
//! on the slot that already has its file, or on a new slot — so requests naming the handle wait for it. When it
//! runs, a slot that holds a session is reused (a server-chosen handle: one more reference) or refused (a name
//! the host chose that is already open); an empty slot gets the session. A failed open leaves the slot empty and
//! drops what it opened, so its file descriptor is closed and the next open of the path starts afresh.

use crate::session::ErrorKind;
use std::sync::Arc;

use jsonrpsee::types::ErrorObjectOwned;

use super::{null, registered_path, state_of, Cx, Res, Server, WriteCx};
use crate::rpc::error::{from_session, invalid_params};
use crate::rpc::handles::{Job, Slot};
use crate::rpc::proto::*;
use crate::rpc::reply::{Out, Rendered, Reply};
use crate::session::context::ContextOptions;
use crate::session::{dirscan, paths, Env, NewSessionOptions, SessionManager};

/// What an opening handler produced.
pub enum Opening {
    /// A session to put in the request's slot; `watch` starts following its file.
    New {
        /// The session.
        manager: Box<SessionManager>,
        /// `session/open {watch: true}`.
        watch: bool,
    },
    /// The file is held by this other slot (open, or closing): the request goes there, to reuse its session or,
    /// if it has none by the request's turn, to open the file into it with this.
    Elsewhere(Arc<Slot>, OpenFn),
}

/// An opening method's handler.
pub type OpenHandler<P> = fn(P, &Arc<Server>, &Arc<Slot>) -> Result<Opening, ErrorObjectOwned>;

/// An opening handler, ready to run in the request's slot.
pub type OpenFn = Box<dyn FnOnce(&Arc<Server>, &Arc<Slot>) -> Result<Opening, ErrorObjectOwned> + Send>;

/// Routes an opening request on arrival (see the module doc).
pub fn start(
    server: &Arc<Server>,
    name: Option<String>,
    path: Option<String>,
    request: Request,
    open: OpenFn,
    reply: Reply,
) {
    if let Some(n) = &name {
        if n.is_empty() {
            return reply.error(&invalid_params("handle", "a handle must not be empty"));
        }
        if let Some(other) = path.as_deref().and_then(|p| server.registry.by_path(p)).filter(|s| s.handle != *n) {
            let p = path.unwrap_or_default();
            return reply.error(&invalid_params(
                "path",
                format!("{p} is already open as handle {}; use that handle", other.handle),
            ));
        }
    }
    let job_server = server.clone();
    let job = Job::Write(Box::new(move |session, slot| {
        let span = reply.span().clone();
        let _in_request = span.enter();
        span.record("handle", tracing::field::display(&slot.handle));
        run_open(&job_server, session, slot, request, open, reply);
        None
    }));
    server.registry.queue_open(name.as_deref(), path.as_deref(), job, &server.pool);
}

/// What an opening request asked for, beside what to open.
#[derive(Clone, Debug)]
pub struct Request {
    /// The host named the handle.
    pub chosen: bool,
    /// The snapshot (and detail) asked for.
    pub snapshot: Option<Detail>,
    /// Write pi's load-time repairs as the session opens.
    pub repair: bool,
    /// `session/open`'s `cwdOverride`: the working directory the opener's session has, even when the file is
    /// open already (pi reopens a session whose recorded cwd is gone in the user's cwd).
    pub cwd_override: Option<String>,
}

/// The detail of the entries a handle at `detail` sends in `session/changed`.
fn entries_detail(detail: Detail) -> Detail {
    match detail {
        Detail::Skeleton => Detail::Skeleton,
        Detail::None | Detail::Full => Detail::Full,
    }
}

/// Answers with a state and, when `snapshot` asks for entries, its snapshot (streamed when large). An error is
/// answered and returned.
pub fn answer_state(
    reply: &Reply,
    m: &SessionManager,
    state: &SessionState,
    snapshot: Option<Detail>,
) -> Result<(), ErrorObjectOwned> {
    match snapshot {
        Some(detail @ (Detail::Skeleton | Detail::Full)) => {
            match reply
                .render(detail.copies_file_bytes(), &|out| super::snapshot::state_with_snapshot(m, state, detail, out))
            {
                Ok(Rendered::Json(bytes)) => reply.result_json(bytes),
                Ok(Rendered::Sent) => {}
                Err(e) => {
                    reply.error(&e);
                    return Err(e);
                }
            }
        }
        _ => reply.result(state),
    }
    Ok(())
}

/// The job that opens a slot's session. The state is built before the session is kept, so a session whose state
/// cannot be read, or whose repairs (`repair`) cannot be written, is dropped (closing its file) rather than left
/// behind under a handle.
fn run_open(
    server: &Arc<Server>,
    session: &mut Option<SessionManager>,
    slot: &Arc<Slot>,
    request: Request,
    open: OpenFn,
    reply: Reply,
) {
    if let Some(m) = session.as_mut() {
        if request.chosen {
            return reply
                .error(&invalid_params("handle", format!("handle {} is already open; choose another", slot.handle)));
        }
        // One handle per file, so its notifications have one detail: a second open must ask for the same one.
        let have = slot.detail();
        if let Some(asked) = request.snapshot.filter(|&d| entries_detail(d) != entries_detail(have)) {
            return reply.error(&invalid_params(
                "snapshot",
                format!(
                    "{} is open as handle {} at detail {}, whose notifications carry {} entries; ask snapshot {} \
                     (or leave it out) to share it, not {}",
                    m.session_file().unwrap_or("the session"),
                    slot.handle,
                    have.as_str(),
                    entries_detail(have).as_str(),
                    have.as_str(),
                    asked.as_str()
                ),
            ));
        }
        if request.repair {
            // An earlier plain open may have left repairs pending. What another process appended since is taken
            // in (and published) first, so the rewrite keeps it; a failed repair adds no reference.
            super::watch::follow(server, slot, m);
            if let Err(e) = m.apply_pending_repairs() {
                return reply.error(&from_session(e));
            }
        }
        if let Some(cwd) = request.cwd_override.as_deref().filter(|&c| c != m.cwd()) {
            m.set_cwd(cwd);
        }
        if request.snapshot == Some(Detail::Full) && have == Detail::None {
            // The same entries, and now snapshots after rebinds and resets too: nothing a host at `none` relies
            // on changes.
            slot.set_detail(Detail::Full);
        }
        let mut state = match state_of(slot, m) {
            Ok(s) => s,
            Err(e) => return reply.error(&e),
        };
        state.machine = server.read_only(&slot.handle);
        if answer_state(&reply, m, &state, request.snapshot).is_ok() {
            slot.add_ref();
        }
        return;
    }
    let opened = match open(server, slot) {
        Ok(o) => o,
        Err(e) => {
            if let Some(team) = &server.team {
                team.forget(&slot.handle);
            }
            return reply.error(&e);
        }
    };
    let (mut m, watch) = match opened {
        Opening::New { manager, watch } => (*manager, watch),
        Opening::Elsewhere(existing, open) => {
            let job_server = server.clone();
            let request = Request { chosen: false, ..request };
            let job = Job::Write(Box::new(move |session, slot| {
                run_open(&job_server, session, slot, request, open, reply);
                None
            }));
            // The other slot may have been retired since it was found (its last close ran and its queue
            // emptied): a job left on it would answer with a handle nobody can name. The file is free then, so
            // the open runs here, in this request's own slot.
            if let Err(Job::Write(here)) = server.registry.push_if_registered(&existing, job, &server.pool) {
                here(session, slot);
            }
            return;
        }
    };
    m.set_context_options(ContextOptions::default());
    m.set_durability(server.durability);
    if request.repair {
        if let Err(e) = m.apply_pending_repairs() {
            return reply.error(&from_session(e));
        }
    }
    slot.set_detail(request.snapshot.unwrap_or_default());
    let mut state = match state_of(slot, &m) {
        Ok(s) => s,
        Err(e) => return reply.error(&e),
    };
    state.machine = server.read_only(&slot.handle);
    if !server.registry.set_path(slot, registered_path(&m)) {
        // Another handle took the file meanwhile (continueRecent finding a file opened since it looked).
        return reply.error(&invalid_params("path", "the file was opened under another handle meanwhile; retry"));
    }
    // The answer goes out before the session is kept: one whose snapshot cannot be read is not left open.
    if answer_state(&reply, &m, &state, request.snapshot).is_err() {
        server.registry.set_path(slot, None);
        return;
    }
    slot.opened();
    *session = Some(m);
    if watch {
        super::watch::start(server, slot);
    }
}

fn new_env(server: &Server) -> Env {
    Env {
        keep: server.keep.clone(),
        skeletons: server.skeletons.load(std::sync::atomic::Ordering::Relaxed),
        ..Env::with_agent_dir(&server.agent_dir)
    }
}

/// `session/create`.
pub fn create(p: CreateParams, server: &Arc<Server>, _slot: &Arc<Slot>) -> Result<Opening, ErrorObjectOwned> {
    let options = NewSessionOptions { id: p.id, parent_session: p.parent_session };
    let manager =
        SessionManager::create(&p.cwd, p.session_dir.as_deref(), options, new_env(server)).map_err(from_session)?;
    Ok(Opening::New { manager: Box::new(manager), watch: false })
}

/// `session/open`.
pub fn open(p: OpenParams, server: &Arc<Server>, slot: &Arc<Slot>) -> Result<Opening, ErrorObjectOwned> {
    // Resolved, an empty path names the working directory, and the error would name a directory nobody gave.
    if p.path.is_empty() {
        return Err(invalid_params("path", "the path is empty: name a session file"));
    }
    if let Some(machine) = &p.machine {
        return open_from_team(&p, machine, server, slot);
    }
    let resolved = paths::resolve_path(&p.path);
    let manager = SessionManager::open(&resolved, p.session_dir.as_deref(), p.cwd_override.as_deref(), new_env(server))
        .map_err(from_session)?;
    Ok(Opening::New { manager: Box::new(manager), watch: p.watch.unwrap_or(false) })
}

/// `session/lock`.
pub fn lock_session(_p: HandleParams, cx: &mut WriteCx<'_>) -> Res<Null> {
    if let Some(machine) = cx.server.read_only(&cx.slot.handle) {
        return Err(crate::rpc::team::read_only(&cx.slot.handle, &machine));
    }
    cx.m.take_write_lock().map_err(from_session)?;
    Ok(Out::Value(null()))
}

/// `session/lockHolder`: asked without the `/proc/locks` read where nobody holds the lock (see
/// [`other_lock_holder`](crate::session::store::other_lock_holder)).
pub fn lock_holder(p: LockHolderParams, _cx: &Cx<'_>) -> Res<LockHolderResult> {
    let pid = crate::session::store::other_lock_holder(&paths::resolve_path(&p.path)).map_err(from_session)?;
    Ok(Out::Value(LockHolderResult { pid }))
}

/// `session/open` with `machine`: that machine's session as last pushed, from the team catalog, read-only.
fn open_from_team(
    p: &OpenParams,
    machine: &str,
    server: &Arc<Server>,
    slot: &Arc<Slot>,
) -> Result<Opening, ErrorObjectOwned> {
    let Some(team) = &server.team else {
        return Err(invalid_params("machine", "opening another machine's session needs --catalog"));
    };
    if p.watch == Some(true) {
        return Err(invalid_params(
            "watch",
            "another machine's session cannot be watched (push --watch keeps it current)",
        ));
    }
    // Repairs are writes, and this session's file is on another machine: writing them here would create or
    // change a local file at that path.
    if p.repair == Some(true) {
        return Err(invalid_params("repair", "another machine's session is read-only: it cannot be repaired here"));
    }
    let file =
        team.with(|c| c.read_file(machine, &p.path).map_err(crate::rpc::team::unavailable))?.ok_or_else(|| {
            crate::rpc::error::rpc_error(
                ErrorKind::SessionNotFound,
                format!("the team catalog has no session {} of machine {machine}", p.path),
                serde_json::json!({ "path": p.path, "machine": machine }),
            )
        })?;
    let manager = SessionManager::open_pushed(&file.path, &file.bytes, new_env(server)).map_err(from_session)?;
    team.mark_read_only(&slot.handle, machine, &p.path);
    Ok(Opening::New { manager: Box::new(manager), watch: false })
}

/// `session/continueRecent`: the directory's most recent file is found when the request runs, so a file already
/// open is reused then.
pub fn continue_recent(
    p: ContinueRecentParams,
    server: &Arc<Server>,
    slot: &Arc<Slot>,
) -> Result<Opening, ErrorObjectOwned> {
    let (dir, filter) =
        dirscan::directory_for(&p.cwd, p.session_dir.as_deref(), &server.agent_dir).map_err(from_session)?;
    if let Some(recent) = dirscan::find_most_recent_session(&dir, filter.then_some(p.cwd.as_str())) {
        if let Some(existing) = server.registry.by_path(&recent).filter(|s| !Arc::ptr_eq(s, slot)) {
            if p.handle.is_some() {
                return Err(invalid_params(
                    "handle",
                    format!("{recent} is already open as handle {}; use that handle", existing.handle),
                ));
            }
            // What continueRecent does with the file it found: open it with this cwd and directory.
            let (cwd, env) = (p.cwd, new_env(server));
            let open: OpenFn = Box::new(move |_, _| {
                let manager = SessionManager::open(&recent, Some(&dir), Some(&cwd), env).map_err(from_session)?;
                Ok(Opening::New { manager: Box::new(manager), watch: false })
            });
            return Ok(Opening::Elsewhere(existing, open));
        }
    }
    let manager =
        SessionManager::continue_recent(&p.cwd, p.session_dir.as_deref(), new_env(server)).map_err(from_session)?;
    Ok(Opening::New { manager: Box::new(manager), watch: false })
}

/// `session/inMemory`.
pub fn in_memory(p: InMemoryParams, server: &Arc<Server>, _slot: &Arc<Slot>) -> Result<Opening, ErrorObjectOwned> {
    let entries = p.entries.map(|e| {
        e.into_iter()
            .map(|v| {
                let mut out = Vec::new();
                v.0.write_preserving(&mut out);
                out
            })
            .collect()
    });
    let options = NewSessionOptions { id: p.id, parent_session: None };
    let manager =
        SessionManager::in_memory(p.cwd.as_deref(), options, entries, new_env(server)).map_err(from_session)?;
    Ok(Opening::New { manager: Box::new(manager), watch: false })
}

/// `session/forkFrom`.
pub fn fork_from(p: ForkFromParams, server: &Arc<Server>, _slot: &Arc<Slot>) -> Result<Opening, ErrorObjectOwned> {
    let options = NewSessionOptions { id: p.id, parent_session: None };
    let manager =
        SessionManager::fork_from(&p.source_path, &p.target_cwd, p.session_dir.as_deref(), options, new_env(server))
            .map_err(from_session)?;
    Ok(Opening::New { manager: Box::new(manager), watch: false })
}

/// `session/getState`: with `snapshot`, the entries too (the handle's detail stays as it is).
pub fn get_state(p: GetStateParams, cx: &super::ReadCx<'_>) -> Res<SessionState> {
    state_with(cx.reply, cx.slot, cx.m, p.snapshot, cx.server.read_only(&cx.slot.handle))
}

/// A handler's result: the handle's state (naming `machine` for a read-only session of another machine), with a
/// snapshot at `snapshot` when it asks for entries.
pub fn state_with(
    reply: &Reply,
    slot: &Slot,
    m: &SessionManager,
    snapshot: Option<Detail>,
    machine: Option<String>,
) -> Res<SessionState> {
    let mut state = state_of(slot, m)?;
    state.machine = machine;
    match snapshot {
        Some(detail @ (Detail::Skeleton | Detail::Full)) => reply
            .rendered(detail.copies_file_bytes(), &|out| super::snapshot::state_with_snapshot(m, &state, detail, out)),
        _ => Ok(Out::Value(state)),
    }
}

/// `session/close`: drops one reference; the last one closes the session (requests queued behind it find the
/// handle closed).
pub fn close(_p: HandleParams, cx: &mut WriteCx<'_>) -> Res<Null> {
    if cx.slot.drop_ref() {
        super::watch::stop(cx.server, cx.slot);
        if let Some(team) = &cx.server.team {
            team.forget(&cx.slot.handle);
        }
        // The file is free at once (an open of it from now on makes a new handle); the session is taken out once
        // this job returns (see `methods::writing`), and the slot is retired when idle.
        cx.server.registry.set_path(cx.slot, None);
        cx.closed = true;
    }
    Ok(Out::Value(null()))
}
