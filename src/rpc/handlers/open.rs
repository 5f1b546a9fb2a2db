//! Opening and closing sessions: the five opening methods, `session/getState` and `session/close`.
//!
//! An opening request has its slot (and handle) from the moment it arrives ([`start`]); its job opens the session
//! and answers with the state. Opening a file that is already open (or being opened) under a server-chosen handle
//! reuses that handle, in arrival order. A failed open releases its slot and drops what it opened, so its file
//! descriptor is closed and the next open of the path starts afresh.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use jsonrpsee::types::ErrorObjectOwned;

use super::{null, registered_path, state_of, Res, Server, WriteCx};
use crate::rpc::error::{self, from_session, invalid_params};
use crate::rpc::handles::{Job, Slot, Taken};
use crate::rpc::proto::*;
use crate::rpc::reply::{Out, Reply};
use crate::session::context::ContextOptions;
use crate::session::{catalog, paths, Env, NewSessionOptions, SessionManager};

/// What an opening handler produced.
pub enum Opening {
    /// A session to put in the request's slot; `watch` starts following its file.
    New {
        /// The session.
        manager: Box<SessionManager>,
        /// `session/open {watch: true}`.
        watch: bool,
    },
    /// The file is already open in this slot: the request reuses its handle.
    Reuse(Arc<Slot>),
}

/// An opening method's handler.
pub type OpenHandler<P> = fn(P, &Arc<Server>, &Arc<Slot>) -> Result<Opening, ErrorObjectOwned>;

/// An opening handler, ready to run in the request's slot.
pub type OpenFn = Box<dyn FnOnce(&Arc<Server>, &Arc<Slot>) -> Result<Opening, ErrorObjectOwned> + Send>;

/// Routes an opening request on arrival: a reuse of the slot that has `path` open (when the host did not name
/// the handle), or a new slot under `name` (the host's) or the next `hN`, whose first job is `open`.
pub fn start(server: &Arc<Server>, name: Option<String>, path: Option<String>, open: OpenFn, reply: Reply) {
    if let Some(n) = &name {
        if n.is_empty() {
            return reply.error(&invalid_params("handle", "a handle must not be empty"));
        }
    }
    if name.is_none() {
        if let Some(existing) = path.as_deref().and_then(|p| server.registry.by_path(p)) {
            return reuse(server, &existing, Some(open), path, reply);
        }
    }
    let slot = match server.registry.reserve(name.as_deref(), path.as_deref()) {
        Ok(s) => s,
        Err(Taken::Handle) => {
            let n = name.unwrap_or_default();
            return reply.error(&invalid_params("handle", format!("handle {n} is already open; choose another")));
        }
        Err(Taken::Path(other)) => {
            let p = path.unwrap_or_default();
            return reply
                .error(&invalid_params("path", format!("{p} is already open as handle {other}; use that handle")));
        }
    };
    let job_server = server.clone();
    slot.push(Job::Open(Box::new(move |slot| run_open(&job_server, slot, open, reply))), &server.pool);
}

/// Queues a reuse of `existing` for an opening request. If the slot turns out not to hold a session when the
/// request's turn comes (its open failed, or it was closed), the request opens the file itself.
fn reuse(server: &Arc<Server>, existing: &Arc<Slot>, open: Option<OpenFn>, path: Option<String>, reply: Reply) {
    let job_server = server.clone();
    existing.push(
        Job::Write(Box::new(move |m, slot| {
            match (m.as_ref(), open) {
                (Some(m), _) => {
                    slot.add_ref();
                    reply.answer(state_of(slot, m).map(Out::Value));
                }
                (None, Some(open)) => start(&job_server, None, path, open, reply),
                (None, None) => reply.error(&error::handle_not_found(&slot.handle)),
            }
            None
        })),
        &server.pool,
    );
}

/// The job that opens a slot's session: the state is built before the session is kept, so a session whose state
/// cannot be read is dropped (closing its file) rather than left behind under a handle.
fn run_open(server: &Arc<Server>, slot: &Arc<Slot>, open: OpenFn, reply: Reply) -> Option<SessionManager> {
    let opened = match open(server, slot) {
        Ok(o) => o,
        Err(e) => {
            server.registry.release(slot);
            reply.error(&e);
            return None;
        }
    };
    match opened {
        Opening::Reuse(existing) => {
            server.registry.release(slot);
            reuse(server, &existing, None, None, reply);
            None
        }
        Opening::New { manager, watch } => {
            let mut m = *manager;
            m.set_context_options(ContextOptions::default());
            m.set_durability(server.durability);
            let state = match state_of(slot, &m) {
                Ok(s) => s,
                Err(e) => {
                    server.registry.release(slot);
                    reply.error(&e);
                    return None;
                }
            };
            if !server.registry.set_path(slot, registered_path(&m)) {
                // Another slot took the file meanwhile (continueRecent finding a file opened since).
                server.registry.release(slot);
                reply.error(&invalid_params("path", "the file was opened under another handle meanwhile; retry"));
                return None;
            }
            if watch {
                super::watch::start(server, slot);
            }
            reply.result(&state);
            Some(m)
        }
    }
}

fn new_env(server: &Server) -> Env {
    Env::with_agent_dir(&server.agent_dir)
}

/// `session/create`.
pub fn create(p: CreateParams, server: &Arc<Server>, _slot: &Arc<Slot>) -> Result<Opening, ErrorObjectOwned> {
    let options = NewSessionOptions { id: p.id, parent_session: p.parent_session };
    let manager =
        SessionManager::create(&p.cwd, p.session_dir.as_deref(), options, new_env(server)).map_err(from_session)?;
    Ok(Opening::New { manager: Box::new(manager), watch: false })
}

/// `session/open`.
pub fn open(p: OpenParams, server: &Arc<Server>, _slot: &Arc<Slot>) -> Result<Opening, ErrorObjectOwned> {
    let resolved = paths::resolve_path(&p.path);
    let manager = SessionManager::open(&resolved, p.session_dir.as_deref(), p.cwd_override.as_deref(), new_env(server))
        .map_err(from_session)?;
    Ok(Opening::New { manager: Box::new(manager), watch: p.watch.unwrap_or(false) })
}

/// `session/continueRecent`: the directory's most recent file is found when the request runs, so a file already
/// open is reused then.
pub fn continue_recent(
    p: ContinueRecentParams,
    server: &Arc<Server>,
    slot: &Arc<Slot>,
) -> Result<Opening, ErrorObjectOwned> {
    let (dir, filter) =
        catalog::directory_for(&p.cwd, p.session_dir.as_deref(), &server.agent_dir).map_err(from_session)?;
    if let Some(recent) = catalog::find_most_recent_session(&dir, filter.then_some(p.cwd.as_str())) {
        if let Some(existing) = server.registry.by_path(&recent).filter(|s| !Arc::ptr_eq(s, slot)) {
            if p.handle.is_some() {
                return Err(invalid_params(
                    "handle",
                    format!("{recent} is already open as handle {}; use that handle", existing.handle),
                ));
            }
            return Ok(Opening::Reuse(existing));
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

/// `session/getState`.
pub fn get_state(_p: HandleParams, cx: &super::ReadCx<'_>) -> Res<SessionState> {
    state_of(cx.slot, cx.m).map(Out::Value)
}

/// `session/close`: drops one reference; the last one closes the session (requests queued behind it find the
/// handle closed).
pub fn close(_p: HandleParams, cx: &mut WriteCx<'_>) -> Res<Null> {
    if cx.slot.drop_ref() {
        cx.server.registry.release(cx.slot);
        super::watch::stop(cx.server, cx.slot);
        cx.slot.watched.store(false, Ordering::SeqCst);
        // The session is taken out by the worker once this job returns (see `methods::write`).
        cx.closed = true;
    }
    Ok(Out::Value(null()))
}
