//! The method handlers, one file per concern: `open` (opening, closing, handles), `mutation` (every write, and the
//! `session/changed` it sends), `read` (pi's reads of one session), `catalog` (listing, finding, searching),
//! `watch` (following files other processes write). Handlers are plain functions from typed params and a context
//! to a result; the method table (`methods.rs`) decides where each runs and answers with what it returns.
//!
//! This module holds what they share: the server's state, the contexts, and the conversions from engine values to
//! wire values.

pub mod catalog;
pub mod changes;
pub mod lazy;
pub mod mutation;
pub mod open;
pub mod read;
pub mod snapshot;
pub mod watch;

use crate::session::ErrorKind;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use jsonrpsee::types::ErrorObjectOwned;
use serde::Serialize;
use serde_json::value::RawValue;

use super::error::from_session;
use super::handles::{Registry, Slot};
use super::proto::{AnyJson, Detail, HeaderJson, RawJson, SessionState};
use super::reply::{Out, Reply};
use super::transport::Outbox;
use crate::catalog::index::SharedIndex;
use crate::session::json::{JsString, Json};
use crate::session::key::Key;
use crate::session::render::{self, JsonOut};
use crate::session::store::Durability;
use crate::session::SessionManager;
use crate::watch::FsWatcher;

pub use catalog::RecentListings;

/// What a handler returns: its result (see [`Out`]) or an error for the host.
pub type Res<T> = Result<Out<T>, ErrorObjectOwned>;

/// The server's state, shared by every handler.
pub struct Server {
    /// Open sessions.
    pub registry: Registry,
    /// Everything sent to the host, in order.
    pub outbox: Outbox,
    /// Where blocking work runs (session workers, catalog calls).
    pub pool: tokio::runtime::Handle,
    /// pi's agent directory (sessions root is `<agentDir>/sessions`).
    pub agent_dir: String,
    /// How hard appends try to reach the disk.
    pub durability: Durability,
    /// Where opens keep what they read for the next open of the same file: beside the catalog index (None
    /// without one, as under `--no-index`).
    pub keep: Option<Arc<crate::session::kept::Keep>>,
    /// The catalog index shared by listings and searches.
    pub index: Arc<SharedIndex>,
    /// Brings the index up to date on what this process wrote.
    pub index_catch_up: catalog::IndexCatchUp,
    /// Watches on the directories of watched sessions and `sessions/watch` directories.
    pub watcher: FsWatcher,
    /// `sessions/watch` watches: id → directory.
    pub dir_watches: Mutex<HashMap<String, String>>,
    /// `sessions/watch {all}` watches: id → the project directories under the sessions root watched for it.
    pub tree_watches: Mutex<HashMap<String, std::collections::BTreeSet<String>>>,
    /// The last `sessions/watch` id given.
    pub next_watch_id: AtomicU64,
    /// What `sessions/listDelta` answered lately.
    pub listings: Mutex<RecentListings>,
    /// Whether the directories of those listings changed since (inotify): one that did not is answered unread.
    pub quiet_dirs: crate::catalog::quiet::QuietDirs,
    /// The team catalog (`--catalog`): listings and searches then answer across machines from it.
    pub team: Option<Arc<super::team::TeamServer>>,
    /// Opens make skeletons (see `Env::skeletons`): true unless the host said at `initialize` that it never asks
    /// for them (`capabilities.skeletons: false`).
    pub skeletons: std::sync::atomic::AtomicBool,
}

impl Server {
    /// The machine whose session `handle` holds, when it was opened read-only from the team catalog.
    pub fn read_only(&self, handle: &str) -> Option<String> {
        self.team.as_ref().and_then(|t| t.read_only(handle))
    }
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("agent_dir", &self.agent_dir).finish_non_exhaustive()
    }
}

impl Server {
    /// Sends a notification (queued behind everything sent before it).
    pub fn notify<T: Serialize>(&self, method: &str, params: &T) {
        // Serialized straight from the typed value: going through serde_json::Value would re-parse the raw
        // entries (losing key order, and failing on lone surrogates).
        self.outbox.send(crate::rpc::envelope::notification(method, params));
    }
}

/// What a read handler gets: the session, shared with the reads running beside it.
pub struct ReadCx<'a> {
    /// The server.
    pub server: &'a Arc<Server>,
    /// The session.
    pub m: &'a SessionManager,
    /// Its slot.
    pub slot: &'a Arc<Slot>,
    /// The request's answer (for streamed results).
    pub reply: &'a Reply,
}

/// What a mutation handler gets: the session, alone.
pub struct WriteCx<'a> {
    /// The server.
    pub server: &'a Arc<Server>,
    /// The session.
    pub m: &'a mut SessionManager,
    /// Its slot.
    pub slot: &'a Arc<Slot>,
    /// The request's answer.
    pub reply: &'a Reply,
    /// Set when the handler wrote to the file (under group commit its answer waits for the fsync).
    pub wrote: bool,
    /// Set when the handler closed the session: it is dropped (and its file closed) once the handler returns.
    pub closed: bool,
}

/// What a handler that names no session gets.
pub struct Cx<'a> {
    /// The server.
    pub server: &'a Arc<Server>,
    /// The request's answer (for cancellation and progress).
    pub reply: &'a Reply,
}

/// A stand-in for an empty result.
pub fn null() -> super::proto::Null {
    super::proto::Null::default()
}

/// JSON the renderer writes from values this process holds, in memory.
pub fn rendered(
    f: impl FnOnce(&mut JsonOut<'static>) -> crate::session::Result<()>,
) -> Result<RawJson, ErrorObjectOwned> {
    let mut out = JsonOut::memory();
    f(&mut out).map_err(from_session)?;
    RawJson::from_bytes(out.into_bytes()).map_err(|e| {
        super::error::rpc_error(
            ErrorKind::IoError,
            format!("the session file changed on disk under this handle ({e}); open it again"),
            serde_json::json!({}),
        )
    })
}

/// A key as the JSON a result holds (None for `undefined`).
pub fn key_json(k: &Key) -> Option<AnyJson> {
    k.to_json_text().map(|t| AnyJson(RawJson(RawValue::from_string(t).expect("key text is JSON"))))
}

/// A value as a result.
pub fn any(v: &Json) -> AnyJson {
    AnyJson(RawJson::from_json(v))
}

/// An entry id from the wire.
pub fn key(id: &str) -> Key {
    Key::str(id)
}

/// The leaf id as text, for `content_modified` errors.
pub fn leaf_text(m: &SessionManager) -> Option<String> {
    m.leaf_id().as_js_str().map(JsString::to_string_lossy)
}

/// The handle's state as of now (so `seq` is exactly what it includes).
pub fn state_of(slot: &Slot, m: &SessionManager) -> Result<SessionState, ErrorObjectOwned> {
    state_at(&slot.handle, slot.detail(), m, slot.current_seq())
}

/// The state of a handle at `detail`, including the change numbered `seq`.
pub fn state_at(handle: &str, detail: Detail, m: &SessionManager, seq: u64) -> Result<SessionState, ErrorObjectOwned> {
    Ok(SessionState {
        seq,
        handle: handle.to_owned(),
        session_id: any(m.session_id()),
        session_file: m.session_file().map(str::to_owned),
        session_dir: m.session_dir().to_owned(),
        cwd: m.cwd().to_owned(),
        header: m.header().map(|h| rendered(|o| render::record(m, h, o)).map(HeaderJson)).transpose()?,
        leaf_id: key_json(m.leaf_id()),
        entry_count: m.entry_count(),
        // A name pi's getSessionName throws on must not make the whole session unopenable (issue 11).
        session_name: m.session_name().ok().flatten().map(|n| any(&Json::String(n))),
        is_persisted: m.is_persisted(),
        detail,
        snapshot: None,
        machine: None,
    })
}

/// The file a session is registered under: its file once persisted, none in memory.
pub fn registered_path(m: &SessionManager) -> Option<&str> {
    if m.is_persisted() {
        m.session_file()
    } else {
        None
    }
}
