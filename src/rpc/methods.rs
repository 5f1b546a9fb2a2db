//! The method table: every request the server answers, its params and result types, and its handler.
//!
//! One macro invocation ([`methods!`]) both registers the handlers in the jsonrpsee module and describes them for
//! `protocol/`, so the served methods and the documented ones cannot drift apart. Handlers parse their params
//! themselves (so a bad field is named in `data.path`), run engine calls on the blocking pool, and for mutations
//! send `session/changed` before they return — hence before the response is written.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use jsonrpsee::types::ErrorObjectOwned;
use jsonrpsee::{Extensions, RpcModule};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::value::RawValue;
use tokio::sync::mpsc::UnboundedSender;

use std::collections::HashMap;

use super::error::{self, from_session, invalid_params};
use super::framing::Message;
use super::handles::{OpenSession, Registry, Ticket};
use super::proto::*;
use super::watch::{dir_of, FsWatcher};
use crate::session::catalog::Catalog;
use crate::session::context::ContextOptions;
use crate::session::index::{CatalogIndex, SharedIndex};
use crate::session::info::ListedSession;
use crate::session::json::{JsString, Json};
use crate::session::key::Key;
use crate::session::manager::Refresh;
use crate::session::render::{self, search_hit_json, JsonOut};
use crate::session::search::{search_sessions, Phase, Scope};
use crate::session::store::Durability;
use crate::session::{catalog, paths, Env, NewSessionOptions, SessionManager};

/// The protocol version this server speaks.
pub const PROTOCOL_VERSION: &str = "1.0";

/// State shared by every handler.
#[derive(Debug)]
pub struct ServerState {
    /// Open sessions.
    pub registry: Registry,
    /// Outgoing messages (serialized JSON), in order, to the one writer.
    pub out: UnboundedSender<Message>,
    /// pi's agent directory (sessions root is `<agentDir>/sessions`).
    pub agent_dir: String,
    /// The framing in use, for `initialize`.
    pub framing: Mutex<String>,
    /// Set once `shutdown` has been answered.
    pub shut_down: AtomicBool,
    /// Requests received and not yet answered (`shutdown` aside).
    pub in_flight: std::sync::atomic::AtomicUsize,
    /// Signalled when `in_flight` drops to zero.
    pub idle: tokio::sync::Notify,
    /// Watches on the directories of watched sessions and `sessions/watch` directories.
    pub watcher: FsWatcher,
    /// How hard appends try to reach the disk.
    pub durability: Durability,
    /// The catalog index shared by listings and searches.
    pub index: Arc<SharedIndex>,
    /// `sessions/watch` watches: id → directory.
    pub dir_watches: Mutex<HashMap<String, String>>,
    next_watch_id: std::sync::atomic::AtomicU64,
    /// What `sessions/listDelta` answered lately.
    listings: Mutex<RecentListings>,
}

/// Listings `sessions/listDelta` answered lately, by token, so the next answer can refer to their entries.
#[derive(Debug)]
struct RecentListings {
    /// Makes this process's tokens unlike any other's.
    nonce: String,
    issued: u64,
    /// Newest last: token, whether it has `allMessagesText`, the listing.
    kept: std::collections::VecDeque<(String, bool, SharedListing)>,
}

/// A listing's entries, in order, as a token keeps them.
type SharedListing = Arc<Vec<Arc<ListedSession>>>;

/// How many listings `sessions/listDelta` remembers: one per scope a host keeps open is plenty.
const KEPT_LISTINGS: usize = 8;

impl RecentListings {
    fn get(&self, token: &str, with_text: bool) -> Option<SharedListing> {
        self.kept.iter().find(|(t, w, _)| t == token && *w == with_text).map(|(_, _, l)| l.clone())
    }

    fn keep(&mut self, with_text: bool, listing: SharedListing) -> String {
        self.issued += 1;
        let token = format!("{}-{}", self.nonce, self.issued);
        if self.kept.len() == KEPT_LISTINGS {
            self.kept.pop_front();
        }
        self.kept.push_back((token.clone(), with_text, listing));
        token
    }
}

impl ServerState {
    /// Shared state for a server.
    pub fn new(
        out: UnboundedSender<Message>,
        agent_dir: String,
        durability: Durability,
        watcher: FsWatcher,
        index_path: Option<String>,
    ) -> Self {
        ServerState {
            index: Arc::new(SharedIndex::new(index_path)),
            registry: Registry::default(),
            out,
            agent_dir,
            framing: Mutex::new(String::new()),
            shut_down: AtomicBool::new(false),
            in_flight: Default::default(),
            idle: tokio::sync::Notify::new(),
            watcher,
            durability,
            dir_watches: Mutex::new(HashMap::new()),
            next_watch_id: Default::default(),
            listings: Mutex::new(RecentListings {
                nonce: uuid::Uuid::new_v4().simple().to_string()[..12].to_owned(),
                issued: 0,
                kept: Default::default(),
            }),
        }
    }
}

impl ServerState {
    /// Sends a notification (queued behind everything sent before it).
    pub fn notify<T: Serialize>(&self, method: &str, params: &T) {
        // Serialized straight from the typed value: going through serde_json::Value would re-parse the raw
        // entries (losing key order, and failing on lone surrogates).
        #[derive(Serialize)]
        struct Notification<'a, T> {
            jsonrpc: &'static str,
            method: &'a str,
            params: &'a T,
        }
        let msg = Notification { jsonrpc: "2.0", method, params };
        let _ = self.out.send(serde_json::to_vec(&msg).expect("notifications serialize").into());
    }
}

/// What a handler gets besides its params.
pub struct Cx {
    /// Shared state.
    pub state: Arc<ServerState>,
    ext: Extensions,
}

/// Where a large result bypasses jsonrpsee: the dispatch loop frames it itself. jsonrpsee would copy a result
/// twice more and parse it once more to check it, which for a listing or a tree of tens of megabytes costs more
/// than producing it. The dispatch loop puts one in every request's extensions.
#[derive(Clone, Debug, Default)]
pub struct ResultSlot(Arc<Mutex<Option<Vec<u8>>>>);

impl ResultSlot {
    /// The result a handler left here, if any.
    pub fn take(&self) -> Option<Vec<u8>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    fn put(&self, json: Vec<u8>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(json);
    }

    fn is_filled(&self) -> bool {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }
}

/// Results at least this long go through the [`ResultSlot`].
const LARGE_RESULT: usize = 64 << 10;

/// The ticket the dispatch loop took for a request when it arrived (see `handles`).
#[derive(Clone, Debug)]
pub struct TicketSlot(pub Arc<Mutex<Option<Ticket>>>);

impl Cx {
    /// The request's ticket for `handle`: the one taken on arrival, or (for calls made without the dispatch
    /// loop) a fresh one.
    fn ticket(&self, handle: &str) -> Result<Ticket, ErrorObjectOwned> {
        if let Some(slot) = self.ext.get::<TicketSlot>() {
            if let Some(t) = slot.0.lock().unwrap_or_else(|e| e.into_inner()).take() {
                if t.session().handle == handle {
                    return Ok(t);
                }
            }
        }
        self.state.registry.get(handle).map(|s| s.ticket()).ok_or_else(|| error::handle_not_found(handle))
    }

    /// Answers with `json`, JSON text this process wrote from values it holds (so valid by construction): it
    /// goes to the host as it is when the dispatch loop frames results itself, and is checked otherwise.
    fn rendered_result<T>(&self, json: Vec<u8>, wrap: impl FnOnce(RawJson) -> T) -> Result<T, ErrorObjectOwned> {
        match self.ext.get::<ResultSlot>() {
            Some(slot) => {
                slot.put(json);
                Ok(wrap(RawJson::from_json(&Json::Null)))
            }
            None => rendered(|o| o.raw(&json)).map(wrap),
        }
    }
}

/// Which `session/changed` a mutation produces.
enum ChangeKind {
    Append,
    Leaf,
    Rebind,
}

/// One method's description, for `protocol/`.
pub struct MethodSpec {
    /// The method name.
    pub name: &'static str,
    /// lifecycle, open, mutation, read or catalog.
    pub category: &'static str,
    /// One line for host authors.
    pub summary: &'static str,
    /// The params schema.
    pub params: fn(&mut SchemaGenerator) -> Schema,
    /// The result schema.
    pub result: fn(&mut SchemaGenerator) -> Schema,
}

impl MethodSpec {
    /// Mutations and openings are not cancellable (an append that has started is finished); reads are.
    pub fn cancellable(&self) -> bool {
        matches!(self.category, "read" | "catalog")
    }
}

fn parse<P: DeserializeOwned>(raw: Option<&str>) -> Result<P, ErrorObjectOwned> {
    let text = raw.unwrap_or("{}");
    if !text.trim_start().starts_with('{') {
        return Err(invalid_params("", "params must be an object (by-name parameters)"));
    }
    let mut d = serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(&mut d).map_err(|e| {
        let path = e.path().to_string();
        let mut path = if path == "." { String::new() } else { path };
        let inner = e.into_inner().to_string();
        // serde reports a missing member at the object that lacks it; name the member itself.
        if let Some(field) = inner.strip_prefix("missing field `").and_then(|r| r.split('`').next()) {
            path = if path.is_empty() { field.to_owned() } else { format!("{path}.{field}") };
        }
        invalid_params(&path, format!("invalid params: {inner}"))
    })
}

fn internal(e: impl std::fmt::Display) -> ErrorObjectOwned {
    error::rpc_error(error::INTERNAL_ERROR, "internal_error", e.to_string(), serde_json::json!({}))
}

fn register<P, R, F, Fut>(module: &mut RpcModule<ServerState>, name: &'static str, handler: F)
where
    P: DeserializeOwned + Send + 'static,
    R: Serialize,
    F: Fn(P, Cx) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<R, ErrorObjectOwned>> + Send + 'static,
{
    module
        .register_async_method(name, move |params, state, ext| {
            let handler = handler.clone();
            let slot = ext.get::<ResultSlot>().cloned();
            async move {
                let p: P = parse(params.as_str())?;
                let result = handler(p, Cx { state, ext }).await?;
                let null = || serde_json::value::to_raw_value(&()).map_err(internal);
                if slot.as_ref().is_some_and(ResultSlot::is_filled) {
                    return null();
                }
                let raw = serde_json::value::to_raw_value(&result).map_err(internal)?;
                match slot {
                    Some(slot) if raw.get().len() >= LARGE_RESULT => {
                        slot.put(Box::<str>::from(raw).into_boxed_bytes().into_vec());
                        null()
                    }
                    _ => Ok(raw),
                }
            }
        })
        .expect("method names are unique");
}

macro_rules! methods {
    ($( $name:literal, $category:literal, $handler:ident($params:ty) -> $result:ty, $summary:literal; )*) => {
        /// Registers every method.
        pub fn module(state: Arc<ServerState>) -> RpcModule<ServerState> {
            let mut m = RpcModule::from_arc(state);
            $( register::<$params, _, _, _>(&mut m, $name, $handler); )*
            m
        }

        /// Describes every method.
        pub fn specs() -> Vec<MethodSpec> {
            vec![$(MethodSpec {
                name: $name,
                category: $category,
                summary: $summary,
                params: |g| g.subschema_for::<$params>(),
                result: |g| g.subschema_for::<$result>(),
            },)*]
        }
    };
}

methods! {
    "initialize", "lifecycle", initialize(InitializeParams) -> InitializeResult, "Handshake: server name, version, protocol version and capabilities. Optional.";
    "shutdown", "lifecycle", shutdown(NoParams) -> Null, "Closes every session and answers; send the `exit` notification next.";

    "session/create", "open", create(CreateParams) -> SessionState, "A new session for cwd; the file is written once it has a user or assistant message (pi's SessionManager.create).";
    "session/open", "open", open(OpenParams) -> SessionState, "Opens a session file without writing to it; a missing file starts a new session there. A file already open returns its handle (reference-counted).";
    "session/continueRecent", "open", continue_recent(ContinueRecentParams) -> SessionState, "The most recent session in the directory, or a new one (pi's continueRecent).";
    "session/inMemory", "open", in_memory(InMemoryParams) -> SessionState, "A session that never touches the disk, optionally from entries (pi's inMemory).";
    "session/forkFrom", "open", fork_from(ForkFromParams) -> SessionState, "A new session in targetCwd with another session's whole history (migrated first).";
    "session/newSession", "mutation", new_session(NewSessionParams) -> SessionState, "Replaces the handle's session with a new, empty one; the old file is untouched.";
    "session/setSessionFile", "mutation", set_session_file(SetSessionFileParams) -> SessionState, "Points the handle at another file.";
    "session/getState", "read", get_state(HandleParams) -> SessionState, "The handle's current state.";
    "session/close", "open", close(HandleParams) -> Null, "Drops one reference to the handle; the last one closes it.";
    "session/watch", "open", watch_session(HandleParams) -> Null, "Follows appends other processes make to the handle's file (session/changed with origin external).";
    "session/unwatch", "open", unwatch_session(HandleParams) -> Null, "Stops following the handle's file.";

    "session/appendMessage", "mutation", append_message(AppendMessageParams) -> IdResult, "Appends a message under the leaf (pi's appendMessage).";
    "session/appendThinkingLevelChange", "mutation", append_thinking_level_change(AppendThinkingLevelChangeParams) -> IdResult, "Appends a thinking_level_change.";
    "session/appendModelChange", "mutation", append_model_change(AppendModelChangeParams) -> IdResult, "Appends a model_change.";
    "session/appendUsage", "mutation", append_usage(AppendUsageParams) -> EntryResult, "Appends a usage entry and returns it.";
    "session/appendCompaction", "mutation", append_compaction(AppendCompactionParams) -> IdResult, "Appends a compaction (with pi's system-message checkpoint, and an optional retainedTail).";
    "session/appendCustomEntry", "mutation", append_custom_entry(AppendCustomEntryParams) -> IdResult, "Appends an extension's custom entry (not in context).";
    "session/appendSessionInfo", "mutation", append_session_info(AppendSessionInfoParams) -> IdResult, "Sets the session name (an empty name clears it).";
    "session/appendCustomMessageEntry", "mutation", append_custom_message_entry(AppendCustomMessageEntryParams) -> IdResult, "Appends an extension message that is part of the context.";
    "session/appendContextEdit", "mutation", append_context_edit(AppendContextEditParams) -> IdResult, "Edits or omits an earlier entry's contribution to the context, on this branch.";
    "session/appendLabelChange", "mutation", append_label_change(AppendLabelChangeParams) -> IdResult, "Sets or clears an entry's label.";
    "session/branch", "mutation", branch(BranchParams) -> Null, "Moves the leaf to an entry; the next append starts a branch there.";
    "session/resetLeaf", "mutation", reset_leaf(ResetLeafParams) -> Null, "Moves the leaf before the first entry; the next append is a new root.";
    "session/branchWithSummary", "mutation", branch_with_summary(BranchWithSummaryParams) -> IdResult, "Moves the leaf and appends a summary of the abandoned branch.";
    "session/createBranchedSession", "mutation", create_branched_session(CreateBranchedSessionParams) -> PathResult, "The handle becomes a new session holding only the path to leafId.";

    "session/getLeafId", "read", get_leaf_id(HandleParams) -> Option<AnyJson>, "The leaf id, or null.";
    "session/getLeafEntry", "read", get_leaf_entry(HandleParams) -> Option<EntryJson>, "The leaf entry, or null.";
    "session/getEntry", "read", get_entry(EntryIdParams) -> Option<EntryJson>, "The entry with that id (the last one if ids repeat), or null.";
    "session/getChildren", "read", get_children(ChildrenParams) -> Vec<EntryJson>, "Entries whose parent is parentId, in file order.";
    "session/getLabel", "read", get_label(EntryIdParams) -> Option<AnyJson>, "The entry's label, or null.";
    "session/getBranch", "read", get_branch(BranchPathParams) -> Vec<EntryJson>, "The path from the root to fromId (default: the leaf).";
    "session/getHeader", "read", get_header(HandleParams) -> Option<HeaderJson>, "The header, or null.";
    "session/getEntryCount", "read", get_entry_count(HandleParams) -> usize, "Distinct entry ids.";
    "session/getEntries", "read", get_entries(EntriesParams) -> Vec<EntryJson>, "Entries in file order (all, or a page with offset/limit).";
    "session/getTree", "read", get_tree(HandleParams) -> TreeJson, "The tree: roots in file order, children by timestamp, labels resolved.";
    "session/getTreeFlat", "read", get_tree_flat(HandleParams) -> FlatTreeJson, "The same tree as a flat pre-order list with parent positions (no deep nesting).";
    "session/getSessionName", "read", get_session_name(HandleParams) -> Option<AnyJson>, "The session name, or null.";
    "session/getWarnings", "read", get_warnings(HandleParams) -> Vec<WarningJson>, "What loading the file found: malformed and torn lines, broken links, legacy versions.";
    "session/buildContextEntries", "read", build_context_entries(HandleParams) -> Vec<EntryJson>, "The entries that make up the model's context.";
    "session/buildSessionProjection", "read", build_session_projection(HandleParams) -> ProjectionJson, "Context entries with their model-visible messages.";
    "session/buildSessionContext", "read", build_session_context(HandleParams) -> ContextJson, "What the model sees: messages, thinking level, model.";

    "sessions/list", "catalog", list(ListParams) -> SessionInfoListJson, "Sessions of a cwd, newest activity first (pi's list).";
    "sessions/listAll", "catalog", list_all(ListAllParams) -> SessionInfoListJson, "Every session (pi's listAll).";
    "sessions/listDelta", "catalog", list_delta(ListDeltaParams) -> ListingDeltaJson, "A listing (list's with a cwd, listAll's without) as a change to one the host holds.";
    "sessions/findById", "catalog", find_by_id(FindByIdParams) -> FindResult, "The file of the session with exactly this id, or null.";
    "sessions/search", "catalog", search(SearchParams) -> Vec<SearchHitJson>, "Entries (and sessions) matching a /resume query, best first.";
    "sessions/watch", "open", watch_sessions(SessionsWatchParams) -> SessionsWatchResult, "Reports session files appearing, changing or vanishing in a directory (sessions/changed).";
    "sessions/unwatch", "open", unwatch_sessions(SessionsUnwatchParams) -> Null, "Stops a sessions/watch.";
}

/// The JSON `null`, as a result type.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(transparent)]
pub struct Null(());

fn null() -> Null {
    Null(())
}

// ---------------------------------------------------------------------------------------------------------------
// Rendering helpers

fn rendered(f: impl FnOnce(&mut JsonOut<'static>) -> crate::session::Result<()>) -> Result<RawJson, ErrorObjectOwned> {
    let mut out = JsonOut::memory();
    f(&mut out).map_err(from_session)?;
    RawJson::from_bytes(out.into_bytes()).map_err(|e| {
        error::rpc_error(
            error::IO_ERROR,
            "io_error",
            format!("the session file changed on disk under this handle ({e}); open it again"),
            serde_json::json!({}),
        )
    })
}

fn entry_json(m: &SessionManager, i: usize) -> Result<EntryJson, ErrorObjectOwned> {
    rendered(|o| render::record(m, i, o)).map(EntryJson)
}

fn entries_json(m: &SessionManager, list: &[usize]) -> Result<Vec<EntryJson>, ErrorObjectOwned> {
    list.iter().map(|&i| entry_json(m, i)).collect()
}

fn key_json(k: &Key) -> Option<AnyJson> {
    k.to_json_text().map(|t| AnyJson(RawJson(RawValue::from_string(t).expect("key text is JSON"))))
}

fn any(v: &Json) -> AnyJson {
    AnyJson(RawJson::from_json(v))
}

/// The handle's state as of now (under its lock, so `seq` is exactly what it includes).
fn state_of(session: &OpenSession, m: &SessionManager) -> Result<SessionState, ErrorObjectOwned> {
    state_at(&session.handle, m, session.current_seq())
}

/// The handle's state, including the change numbered `seq`.
fn state_at(handle: &str, m: &SessionManager, seq: u64) -> Result<SessionState, ErrorObjectOwned> {
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
    })
}

fn leaf_text(m: &SessionManager) -> Option<String> {
    m.leaf_id().as_js_str().map(JsString::to_string_lossy)
}

async fn blocking<R: Send + 'static>(
    f: impl FnOnce() -> Result<R, ErrorObjectOwned> + Send + 'static,
) -> Result<R, ErrorObjectOwned> {
    tokio::task::spawn_blocking(f).await.map_err(internal)?
}

/// Sends `session/changed` for what following the file found; returns whether anything changed.
fn publish_refresh(
    state: &ServerState,
    session: &OpenSession,
    m: &mut SessionManager,
) -> Result<bool, ErrorObjectOwned> {
    let refreshed = match m.refresh() {
        Ok(r) => r,
        Err(e) => {
            // The file was replaced by something that is not a session: report it as gone, keep what we have.
            tracing::warn!("{}: cannot follow the file: {e}", session.handle);
            Refresh::Deleted
        }
    };
    let (seq, change) = match refreshed {
        Refresh::Unchanged => return Ok(false),
        Refresh::Appended(added) => {
            session.deleted_reported.store(false, Ordering::SeqCst);
            if added.is_empty() {
                return Ok(false);
            }
            (session.next_seq(), Change::Append { entries: entries_json(m, &added)? })
        }
        Refresh::Reset => {
            session.deleted_reported.store(false, Ordering::SeqCst);
            let seq = session.next_seq();
            (seq, Change::Reset { state: Box::new(state_at(&session.handle, m, seq)?) })
        }
        Refresh::Deleted => {
            if session.deleted_reported.swap(true, Ordering::SeqCst) {
                return Ok(false);
            }
            (session.next_seq(), Change::Deleted {})
        }
    };
    let note = SessionChanged {
        handle: session.handle.clone(),
        session_id: any(m.session_id()),
        seq,
        origin: Some("external".into()),
        leaf_id: key_json(m.leaf_id()),
        change,
    };
    state.notify("session/changed", &note);
    Ok(true)
}

/// Follows a watched session's file now (coalescing: one refresh queued per session at a time).
pub fn schedule_refresh(state: Arc<ServerState>, session: Arc<OpenSession>) {
    if session.refresh_pending.swap(true, Ordering::SeqCst) {
        return;
    }
    tokio::spawn(async move {
        let mut guard = session.ticket().write().await;
        session.refresh_pending.store(false, Ordering::SeqCst);
        let s2 = session.clone();
        let _ = tokio::task::spawn_blocking(move || publish_refresh(&state, &s2, &mut guard)).await;
    });
}

/// Runs a mutation in arrival order and, when it succeeds, sends `session/changed` before returning.
///
/// First the file is checked for another process's appends (pi takes no lock): they are published, and the
/// mutation is refused with ContentModified if the host expected another leaf, or if following the file moved
/// the leaf (the host's picture was stale). With group commit the response waits for the fsync that covers it.
async fn mutate<R: Send + 'static>(
    cx: &Cx,
    handle: &str,
    expected_leaf: Option<String>,
    kind: ChangeKind,
    op: impl FnOnce(&mut SessionManager) -> crate::session::Result<R> + Send + 'static,
) -> Result<R, ErrorObjectOwned> {
    let ticket = cx.ticket(handle)?;
    let session = ticket.session().clone();
    let mut guard = ticket.write().await;
    let state = cx.state.clone();
    let s2 = session.clone();
    let (result, generation) = blocking(move || {
        let session = s2;
        let m = &mut *guard;
        let leaf_before = leaf_text(m);
        let external = publish_refresh(&state, &session, m)?;
        let current = leaf_text(m);
        match &expected_leaf {
            Some(expected) if current.as_deref() != Some(expected.as_str()) => {
                return Err(error::content_modified(current))
            }
            None if external && current != leaf_before => {
                return Err(error::modified_by_another_process(current, m.session_file()))
            }
            _ => {}
        }
        let before = m.records().len();
        let old_path = m.session_file().map(str::to_owned);
        let result = match op(m) {
            Ok(r) => r,
            Err(e @ crate::session::Error::Conflict { .. }) => {
                // Another process wrote between the check and the write: show what it wrote, refuse ours.
                publish_refresh(&state, &session, m)?;
                // The shared index catches up on what was just written off the request path, so a search finds it.
                if let Some(path) = m.session_file().filter(|p| paths::as_path(p).exists()) {
                    if state.index.note_written(path) {
                        let index = state.index.clone();
                        tokio::task::spawn_blocking(move || index.catch_up_written());
                    }
                }
                return Err(error::with_leaf(from_session(e), leaf_text(m)));
            }
            Err(e) => return Err(from_session(e)),
        };
        let seq = session.next_seq();
        let change = match kind {
            ChangeKind::Append => {
                let added: Vec<usize> = (before..m.records().len()).filter(|&i| !m.records()[i].is_header()).collect();
                Change::Append { entries: entries_json(m, &added)? }
            }
            ChangeKind::Leaf => Change::Leaf { leaf_id: key_json(m.leaf_id()) },
            ChangeKind::Rebind => {
                state.registry.rebind(&session.handle, old_path.as_deref(), m.session_file());
                if session.watched.load(Ordering::SeqCst) {
                    if let Some(old) = &old_path {
                        state.watcher.unwatch_dir(&dir_of(old));
                    }
                    if let Some(new) = m.session_file() {
                        state.watcher.watch_dir(&dir_of(new));
                    }
                }
                Change::Rebind { state: Box::new(state_at(&session.handle, m, seq)?) }
            }
        };
        let note = SessionChanged {
            handle: session.handle.clone(),
            session_id: any(m.session_id()),
            seq,
            origin: None,
            leaf_id: key_json(m.leaf_id()),
            change,
        };
        state.notify("session/changed", &note);
        // A writer that takes no lock (pi) may have appended around our line: publish what it wrote now.
        publish_refresh(&state, &session, m)?;
        // The shared index catches up on what was just written off the request path, so a search finds it.
        if let Some(path) = m.session_file().filter(|p| paths::as_path(p).exists()) {
            if state.index.note_written(path) {
                let index = state.index.clone();
                tokio::task::spawn_blocking(move || index.catch_up_written());
            }
        }
        let generation = session.written.fetch_add(1, Ordering::SeqCst) + 1;
        Ok((result, generation))
    })
    .await?;
    if cx.state.durability == Durability::Batch {
        group_commit(&session, generation).await?;
    }
    Ok(result)
}

/// Group commit: one fsync covers every write made before it; each response waits for the fsync covering it.
async fn group_commit(session: &Arc<OpenSession>, generation: u64) -> Result<(), ErrorObjectOwned> {
    let mut synced = session.synced.subscribe();
    if !session.sync_pending.swap(true, Ordering::SeqCst) {
        let s = session.clone();
        tokio::spawn(async move {
            // Queue behind writers already waiting for the lock, so a burst of appends shares one fsync.
            let mut guard = s.manager.clone().write_owned().await;
            s.sync_pending.store(false, Ordering::SeqCst);
            let covered = s.written.load(Ordering::SeqCst);
            let result = tokio::task::spawn_blocking(move || guard.sync()).await;
            if !matches!(result, Ok(Ok(()))) {
                tracing::error!("{}: fsync failed: {result:?}", s.handle);
            }
            s.synced.send_modify(|g| *g = (*g).max(covered));
        });
    }
    synced.wait_for(|&g| g >= generation).await.map_err(internal)?;
    Ok(())
}

/// Runs a read in arrival order, concurrently with other reads.
async fn read<R: Send + 'static>(
    cx: &Cx,
    handle: &str,
    op: impl FnOnce(&SessionManager) -> Result<R, ErrorObjectOwned> + Send + 'static,
) -> Result<R, ErrorObjectOwned> {
    let guard = cx.ticket(handle)?.read().await;
    blocking(move || op(&guard)).await
}

fn key(id: &str) -> Key {
    Key::str(id)
}

fn new_env(state: &ServerState) -> Env {
    Env::with_agent_dir(&state.agent_dir)
}

fn configure(mut m: SessionManager, durability: Durability) -> SessionManager {
    m.set_context_options(ContextOptions::default());
    m.set_durability(durability);
    m
}

// ---------------------------------------------------------------------------------------------------------------
// Lifecycle

async fn initialize(_p: InitializeParams, cx: Cx) -> Result<InitializeResult, ErrorObjectOwned> {
    Ok(InitializeResult {
        server_info: ServerInfo { name: "pi-sessiond".into(), version: env!("CARGO_PKG_VERSION").into() },
        protocol_version: PROTOCOL_VERSION.into(),
        capabilities: Capabilities {
            methods: specs().iter().map(|s| s.name.to_owned()).collect(),
            notifications: vec!["session/changed".into(), "sessions/changed".into(), "$/progress".into()],
            framing: cx.state.framing.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            pi_compatibility: "@earendil-works/pi-coding-agent@1.6.0".into(),
        },
    })
}

async fn shutdown(_p: NoParams, cx: Cx) -> Result<Null, ErrorObjectOwned> {
    // Everything received before `shutdown` is answered first (requests after it are refused), so no session
    // opens after the answer says every session is closed.
    loop {
        let idle = cx.state.idle.notified();
        if cx.state.in_flight.load(Ordering::SeqCst) == 0 {
            break;
        }
        idle.await;
    }
    // Take every session's write lock, so any mutation in flight finishes before the answer.
    for s in cx.state.registry.drain() {
        drop(s.manager.clone().write_owned().await);
    }
    cx.state.shut_down.store(true, Ordering::SeqCst);
    Ok(null())
}

// ---------------------------------------------------------------------------------------------------------------
// Opening

async fn opened(
    cx: &Cx,
    path: Option<String>,
    make: impl FnOnce() -> crate::session::Result<SessionManager> + Send + 'static,
) -> Result<SessionState, ErrorObjectOwned> {
    let state = cx.state.clone();
    blocking(move || {
        if let Some(p) = &path {
            if let Some(existing) = state.registry.reuse(p) {
                let guard = existing.manager.blocking_read();
                return state_of(&existing, &guard);
            }
        }
        let m = configure(make().map_err(from_session)?, state.durability);
        let file = m.session_file().map(str::to_owned);
        let key = if m.is_persisted() { file.as_deref() } else { None };
        let session = state.registry.insert(key, m);
        let guard = session.manager.blocking_read();
        state_of(&session, &guard)
    })
    .await
}

async fn create(p: CreateParams, cx: Cx) -> Result<SessionState, ErrorObjectOwned> {
    let options = NewSessionOptions { id: p.id, parent_session: p.parent_session };
    let env = new_env(&cx.state);
    opened(&cx, None, move || SessionManager::create(&p.cwd, p.session_dir.as_deref(), options, env)).await
}

async fn open(p: OpenParams, cx: Cx) -> Result<SessionState, ErrorObjectOwned> {
    let resolved = paths::resolve_path(&p.path);
    let env = new_env(&cx.state);
    let watch = p.watch.unwrap_or(false);
    let state = opened(&cx, Some(resolved.clone()), move || {
        SessionManager::open(&resolved, p.session_dir.as_deref(), p.cwd_override.as_deref(), env)
    })
    .await?;
    if watch {
        start_watch(&cx.state, &state.handle);
    }
    Ok(state)
}

/// Marks a handle as following its file and watches the file's directory.
fn start_watch(state: &Arc<ServerState>, handle: &str) {
    let Some(session) = state.registry.get(handle) else { return };
    if session.watched.swap(true, Ordering::SeqCst) {
        return;
    }
    let path = session.manager.try_read().ok().and_then(|m| m.session_file().map(str::to_owned));
    let path = path.or_else(|| state.registry.path_of(handle));
    if let Some(p) = path {
        state.watcher.watch_dir(&dir_of(&p));
    }
    // Anything written between the open and the watch is picked up at once.
    schedule_refresh(state.clone(), session);
}

fn stop_watch(state: &ServerState, session: &OpenSession) {
    if session.watched.swap(false, Ordering::SeqCst) {
        if let Some(p) = state.registry.path_of(&session.handle) {
            state.watcher.unwatch_dir(&dir_of(&p));
        }
    }
}

async fn watch_session(p: HandleParams, cx: Cx) -> Result<Null, ErrorObjectOwned> {
    cx.state.registry.get(&p.handle).ok_or_else(|| error::handle_not_found(&p.handle))?;
    start_watch(&cx.state, &p.handle);
    Ok(null())
}

async fn unwatch_session(p: HandleParams, cx: Cx) -> Result<Null, ErrorObjectOwned> {
    let session = cx.state.registry.get(&p.handle).ok_or_else(|| error::handle_not_found(&p.handle))?;
    stop_watch(&cx.state, &session);
    Ok(null())
}

async fn watch_sessions(p: SessionsWatchParams, cx: Cx) -> Result<SessionsWatchResult, ErrorObjectOwned> {
    let dir = match (&p.session_dir, &p.cwd) {
        (Some(d), _) => paths::resolve_path(d),
        (None, Some(cwd)) => paths::default_session_dir_path(cwd, &cx.state.agent_dir),
        (None, None) => return Err(invalid_params("sessionDir", "give sessionDir or cwd")),
    };
    if !paths::as_path(&dir).is_dir() {
        return Err(error::rpc_error(
            error::SESSION_NOT_FOUND,
            "session_not_found",
            format!("no directory {dir}"),
            serde_json::json!({ "path": dir }),
        ));
    }
    let id = format!("w{}", cx.state.next_watch_id.fetch_add(1, Ordering::SeqCst) + 1);
    cx.state.watcher.watch_dir(std::path::Path::new(&dir));
    cx.state.dir_watches.lock().unwrap_or_else(|e| e.into_inner()).insert(id.clone(), dir.clone());
    Ok(SessionsWatchResult { watch_id: id, dir })
}

async fn unwatch_sessions(p: SessionsUnwatchParams, cx: Cx) -> Result<Null, ErrorObjectOwned> {
    let dir = cx.state.dir_watches.lock().unwrap_or_else(|e| e.into_inner()).remove(&p.watch_id);
    let Some(dir) = dir else { return Err(invalid_params("watchId", format!("no watch {}", p.watch_id))) };
    cx.state.watcher.unwatch_dir(std::path::Path::new(&dir));
    Ok(null())
}

async fn continue_recent(p: ContinueRecentParams, cx: Cx) -> Result<SessionState, ErrorObjectOwned> {
    let state = cx.state.clone();
    let (dir, filter) =
        catalog::directory_for(&p.cwd, p.session_dir.as_deref(), &state.agent_dir).map_err(from_session)?;
    let recent = catalog::find_most_recent_session(&dir, filter.then_some(p.cwd.as_str()));
    let env = new_env(&cx.state);
    opened(&cx, recent, move || SessionManager::continue_recent(&p.cwd, p.session_dir.as_deref(), env)).await
}

async fn in_memory(p: InMemoryParams, cx: Cx) -> Result<SessionState, ErrorObjectOwned> {
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
    let env = new_env(&cx.state);
    opened(&cx, None, move || SessionManager::in_memory(p.cwd.as_deref(), options, entries, env)).await
}

async fn fork_from(p: ForkFromParams, cx: Cx) -> Result<SessionState, ErrorObjectOwned> {
    let options = NewSessionOptions { id: p.id, parent_session: None };
    let env = new_env(&cx.state);
    opened(&cx, None, move || {
        SessionManager::fork_from(&p.source_path, &p.target_cwd, p.session_dir.as_deref(), options, env)
    })
    .await
}

async fn new_session(p: NewSessionParams, cx: Cx) -> Result<SessionState, ErrorObjectOwned> {
    let handle = p.handle.clone();
    let options = NewSessionOptions { id: p.id, parent_session: p.parent_session };
    mutate(&cx, &p.handle, None, ChangeKind::Rebind, move |m| m.new_session(options).map(|_| ())).await?;
    get_state(HandleParams { handle }, cx).await
}

async fn set_session_file(p: SetSessionFileParams, cx: Cx) -> Result<SessionState, ErrorObjectOwned> {
    let resolved = paths::resolve_path(&p.path);
    if let Some(other) = cx.state.registry.handle_for_path(&resolved).filter(|h| *h != p.handle) {
        return Err(invalid_params("path", format!("{resolved} is already open as handle {other}; use that handle")));
    }
    let handle = p.handle.clone();
    mutate(&cx, &p.handle, None, ChangeKind::Rebind, move |m| m.set_session_file(&resolved)).await?;
    get_state(HandleParams { handle }, cx).await
}

async fn get_state(p: HandleParams, cx: Cx) -> Result<SessionState, ErrorObjectOwned> {
    let ticket = cx.ticket(&p.handle)?;
    let session = ticket.session().clone();
    let guard = ticket.read().await;
    blocking(move || state_of(&session, &guard)).await
}

async fn close(p: HandleParams, cx: Cx) -> Result<Null, ErrorObjectOwned> {
    // Wait for requests that arrived before the close, then drop the reference.
    let guard = cx.ticket(&p.handle)?.write().await;
    drop(guard);
    let session = cx.state.registry.get(&p.handle).ok_or_else(|| error::handle_not_found(&p.handle))?;
    let path = cx.state.registry.path_of(&p.handle);
    cx.state.registry.close(&p.handle);
    if cx.state.registry.get(&p.handle).is_none() && session.watched.swap(false, Ordering::SeqCst) {
        if let Some(path) = path {
            cx.state.watcher.unwatch_dir(&dir_of(&path));
        }
    }
    Ok(null())
}

// ---------------------------------------------------------------------------------------------------------------
// Mutations

async fn append_message(p: AppendMessageParams, cx: Cx) -> Result<IdResult, ErrorObjectOwned> {
    if !matches!(&p.message.0, Json::Object(o) if matches!(o.get("role"), Some(Json::String(_)))) {
        return Err(invalid_params("message.role", "message must be an object with a string role"));
    }
    let id =
        mutate(&cx, &p.handle, p.expected_leaf_id, ChangeKind::Append, move |m| m.append_message(p.message.0)).await?;
    Ok(IdResult { id })
}

async fn append_thinking_level_change(
    p: AppendThinkingLevelChangeParams,
    cx: Cx,
) -> Result<IdResult, ErrorObjectOwned> {
    let level = Json::String(p.thinking_level.0);
    let id =
        mutate(&cx, &p.handle, p.expected_leaf_id, ChangeKind::Append, move |m| m.append_thinking_level_change(level))
            .await?;
    Ok(IdResult { id })
}

async fn append_model_change(p: AppendModelChangeParams, cx: Cx) -> Result<IdResult, ErrorObjectOwned> {
    let (provider, model) = (Json::String(p.provider.0), Json::String(p.model_id.0));
    let id =
        mutate(&cx, &p.handle, p.expected_leaf_id, ChangeKind::Append, move |m| m.append_model_change(provider, model))
            .await?;
    Ok(IdResult { id })
}

async fn append_usage(p: AppendUsageParams, cx: Cx) -> Result<EntryResult, ErrorObjectOwned> {
    let handle = p.handle.clone();
    let i = mutate(&cx, &p.handle, p.expected_leaf_id, ChangeKind::Append, move |m| {
        m.append_usage(
            Json::String(p.kind.0),
            Json::String(p.provider.0),
            Json::String(p.model.0),
            p.usage.0,
            p.note.map(|n| Json::String(n.0)),
        )
    })
    .await?;
    let entry = read(&cx, &handle, move |m| entry_json(m, i)).await?;
    Ok(EntryResult { entry })
}

async fn append_compaction(p: AppendCompactionParams, cx: Cx) -> Result<IdResult, ErrorObjectOwned> {
    let first_kept = p.first_kept_entry_id.map(|s| Json::str(&s));
    let tail = p.retained_tail.map(|t| Json::Array(t.into_iter().map(|v| v.0).collect()));
    let system = p.system_message.map(|v| v.0);
    let id = mutate(&cx, &p.handle, p.expected_leaf_id, ChangeKind::Append, move |m| {
        m.append_compaction_with(
            Json::String(p.summary.0),
            first_kept,
            p.tokens_before.0,
            p.details.map(|v| v.0),
            p.from_hook.map(|v| v.0),
            p.usage.map(|v| v.0),
            system,
            tail,
        )
    })
    .await?;
    Ok(IdResult { id })
}

async fn append_custom_entry(p: AppendCustomEntryParams, cx: Cx) -> Result<IdResult, ErrorObjectOwned> {
    let id = mutate(&cx, &p.handle, p.expected_leaf_id, ChangeKind::Append, move |m| {
        m.append_custom_entry(Json::String(p.custom_type.0), p.data.map(|d| d.0))
    })
    .await?;
    Ok(IdResult { id })
}

async fn append_session_info(p: AppendSessionInfoParams, cx: Cx) -> Result<IdResult, ErrorObjectOwned> {
    let id = mutate(&cx, &p.handle, p.expected_leaf_id, ChangeKind::Append, move |m| m.append_session_info(&p.name.0))
        .await?;
    Ok(IdResult { id })
}

async fn append_custom_message_entry(p: AppendCustomMessageEntryParams, cx: Cx) -> Result<IdResult, ErrorObjectOwned> {
    let id = mutate(&cx, &p.handle, p.expected_leaf_id, ChangeKind::Append, move |m| {
        m.append_custom_message_entry(Json::String(p.custom_type.0), p.content.0, p.display.0, p.details.map(|d| d.0))
    })
    .await?;
    Ok(IdResult { id })
}

async fn append_context_edit(p: AppendContextEditParams, cx: Cx) -> Result<IdResult, ErrorObjectOwned> {
    let target = key(&p.target_id);
    let id = mutate(&cx, &p.handle, p.expected_leaf_id, ChangeKind::Append, move |m| {
        m.append_context_edit(&target, Some(p.replacement.0))
    })
    .await?;
    Ok(IdResult { id })
}

async fn append_label_change(p: AppendLabelChangeParams, cx: Cx) -> Result<IdResult, ErrorObjectOwned> {
    let target = key(&p.target_id);
    let id = mutate(&cx, &p.handle, p.expected_leaf_id, ChangeKind::Append, move |m| {
        m.append_label_change(&target, p.label.map(|l| l.0))
    })
    .await?;
    Ok(IdResult { id })
}

async fn branch(p: BranchParams, cx: Cx) -> Result<Null, ErrorObjectOwned> {
    let target = key(&p.entry_id);
    mutate(&cx, &p.handle, p.expected_leaf_id, ChangeKind::Leaf, move |m| m.branch(&target)).await?;
    Ok(null())
}

async fn reset_leaf(p: ResetLeafParams, cx: Cx) -> Result<Null, ErrorObjectOwned> {
    mutate(&cx, &p.handle, p.expected_leaf_id, ChangeKind::Leaf, |m| {
        m.reset_leaf();
        Ok(())
    })
    .await?;
    Ok(null())
}

async fn branch_with_summary(p: BranchWithSummaryParams, cx: Cx) -> Result<IdResult, ErrorObjectOwned> {
    let from = p.entry_id.as_deref().map(key);
    let id = mutate(&cx, &p.handle, p.expected_leaf_id, ChangeKind::Append, move |m| {
        m.branch_with_summary(
            from.as_ref(),
            Json::String(p.summary.0),
            p.details.map(|v| v.0),
            p.from_hook.map(|v| v.0),
            p.usage.map(|v| v.0),
        )
    })
    .await?;
    Ok(IdResult { id })
}

async fn create_branched_session(p: CreateBranchedSessionParams, cx: Cx) -> Result<PathResult, ErrorObjectOwned> {
    let leaf = key(&p.leaf_id);
    let path =
        mutate(&cx, &p.handle, p.expected_leaf_id, ChangeKind::Rebind, move |m| m.create_branched_session(&leaf))
            .await?;
    Ok(PathResult { path })
}

// ---------------------------------------------------------------------------------------------------------------
// Reads

async fn get_leaf_id(p: HandleParams, cx: Cx) -> Result<Option<AnyJson>, ErrorObjectOwned> {
    read(&cx, &p.handle, |m| Ok(key_json(m.leaf_id()))).await
}

async fn get_leaf_entry(p: HandleParams, cx: Cx) -> Result<Option<EntryJson>, ErrorObjectOwned> {
    read(&cx, &p.handle, |m| m.leaf_entry().map(|i| entry_json(m, i)).transpose()).await
}

async fn get_entry(p: EntryIdParams, cx: Cx) -> Result<Option<EntryJson>, ErrorObjectOwned> {
    read(&cx, &p.handle, move |m| m.entry(&key(&p.id)).map(|i| entry_json(m, i)).transpose()).await
}

async fn get_children(p: ChildrenParams, cx: Cx) -> Result<Vec<EntryJson>, ErrorObjectOwned> {
    read(&cx, &p.handle, move |m| entries_json(m, &m.children(&key(&p.parent_id)))).await
}

async fn get_label(p: EntryIdParams, cx: Cx) -> Result<Option<AnyJson>, ErrorObjectOwned> {
    read(&cx, &p.handle, move |m| Ok(m.label(&key(&p.id)).map(any))).await
}

async fn get_branch(p: BranchPathParams, cx: Cx) -> Result<Vec<EntryJson>, ErrorObjectOwned> {
    read(&cx, &p.handle, move |m| {
        let from = p.from_id.as_deref().map(key);
        entries_json(m, &m.branch_path(from.as_ref()))
    })
    .await
}

async fn get_header(p: HandleParams, cx: Cx) -> Result<Option<HeaderJson>, ErrorObjectOwned> {
    read(&cx, &p.handle, |m| m.header().map(|h| rendered(|o| render::record(m, h, o)).map(HeaderJson)).transpose())
        .await
}

async fn get_entry_count(p: HandleParams, cx: Cx) -> Result<usize, ErrorObjectOwned> {
    read(&cx, &p.handle, |m| Ok(m.entry_count())).await
}

async fn get_entries(p: EntriesParams, cx: Cx) -> Result<Vec<EntryJson>, ErrorObjectOwned> {
    read(&cx, &p.handle, move |m| {
        let all = m.entries();
        let start = p.offset.unwrap_or(0).min(all.len());
        let end = p.limit.map_or(all.len(), |l| start.saturating_add(l).min(all.len()));
        entries_json(m, &all[start..end])
    })
    .await
}

async fn get_tree(p: HandleParams, cx: Cx) -> Result<TreeJson, ErrorObjectOwned> {
    read(&cx, &p.handle, |m| rendered(|o| render::tree(m, &m.tree(), o)).map(TreeJson)).await
}

async fn get_tree_flat(p: HandleParams, cx: Cx) -> Result<FlatTreeJson, ErrorObjectOwned> {
    read(&cx, &p.handle, |m| rendered(|o| render::tree_flat(m, &m.tree(), o)).map(FlatTreeJson)).await
}

async fn get_session_name(p: HandleParams, cx: Cx) -> Result<Option<AnyJson>, ErrorObjectOwned> {
    read(&cx, &p.handle, |m| Ok(m.session_name().map_err(from_session)?.map(|n| any(&Json::String(n))))).await
}

async fn get_warnings(p: HandleParams, cx: Cx) -> Result<Vec<WarningJson>, ErrorObjectOwned> {
    read(&cx, &p.handle, |m| {
        Ok(m.warnings()
            .iter()
            .map(|w| WarningJson { line: w.line, kind: w.kind.as_str().to_owned(), message: w.message.clone() })
            .collect())
    })
    .await
}

async fn build_context_entries(p: HandleParams, cx: Cx) -> Result<Vec<EntryJson>, ErrorObjectOwned> {
    read(&cx, &p.handle, |m| entries_json(m, &m.build_context_entries().map_err(from_session)?)).await
}

async fn build_session_projection(p: HandleParams, cx: Cx) -> Result<ProjectionJson, ErrorObjectOwned> {
    read(&cx, &p.handle, |m| {
        let projection = m.build_session_projection().map_err(from_session)?;
        rendered(|o| render::projection(m, &projection, o)).map(ProjectionJson)
    })
    .await
}

async fn build_session_context(p: HandleParams, cx: Cx) -> Result<ContextJson, ErrorObjectOwned> {
    read(&cx, &p.handle, |m| {
        let projection = m.build_session_projection().map_err(from_session)?;
        rendered(|o| render::context(m, &projection, o)).map(ContextJson)
    })
    .await
}

// ---------------------------------------------------------------------------------------------------------------
// Catalog

/// Sends LSP-style `$/progress` for a listing or search: begin (per stage), a report every few files, end.
struct ProgressReporter {
    state: Arc<ServerState>,
    token: Option<ProgressToken>,
    last: std::time::Instant,
    stage: Option<ProgressStage>,
    /// The latest counts, which `end` repeats.
    counts: (usize, usize),
}

impl ProgressReporter {
    fn new(state: Arc<ServerState>, token: Option<ProgressToken>) -> Self {
        ProgressReporter { state, token, last: std::time::Instant::now(), stage: None, counts: (0, 0) }
    }

    fn send(&self, kind: ProgressKind, loaded: usize, total: usize) {
        if let Some(token) = &self.token {
            let value = ProgressValue { kind, loaded, total, stage: self.stage };
            self.state.notify("$/progress", &Progress { token: token.clone(), value });
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

/// The catalog for a listing request (`allMessagesText` unless the host declined it).
fn catalog_of<'a>(state: &'a ServerState, index: Option<&'a mut CatalogIndex>, text: Option<bool>) -> Catalog<'a> {
    let c = Catalog::new(&state.agent_dir, index);
    if text == Some(false) {
        c.without_text()
    } else {
        c
    }
}

/// A listing on a blocking thread, through the shared index, with progress under `token`, rendered by `render`
/// (with `allMessagesText` or not).
async fn listing(
    cx: Cx,
    token: Option<ProgressToken>,
    include_text: Option<bool>,
    run: impl FnOnce(&mut Catalog<'_>, &mut dyn FnMut(usize, usize)) -> crate::session::Result<Vec<Arc<ListedSession>>>
        + Send
        + 'static,
    render: impl FnOnce(Vec<Arc<ListedSession>>, bool) -> Vec<u8> + Send + 'static,
) -> Result<(Cx, Vec<u8>), ErrorObjectOwned> {
    let state = cx.state.clone();
    let json = blocking(move || {
        let mut progress = ProgressReporter::new(state.clone(), token);
        let infos = state
            .index
            .with(|ix| run(&mut catalog_of(&state, ix, include_text), &mut |l, t| progress.report(l, t)))
            .map_err(from_session)?;
        progress.end();
        Ok(render(infos, include_text != Some(false)))
    })
    .await?;
    Ok((cx, json))
}

fn pi_listing(infos: Vec<Arc<ListedSession>>, with_text: bool) -> Vec<u8> {
    render::session_infos(&infos, with_text)
}

async fn list(p: ListParams, cx: Cx) -> Result<SessionInfoListJson, ErrorObjectOwned> {
    let run = move |c: &mut Catalog<'_>, progress: &mut dyn FnMut(usize, usize)| {
        c.list(&p.cwd, p.session_dir.as_deref(), progress)
    };
    let (cx, json) = listing(cx, p.progress_token, p.include_all_messages_text, run, pi_listing).await?;
    cx.rendered_result(json, SessionInfoListJson)
}

async fn list_all(p: ListAllParams, cx: Cx) -> Result<SessionInfoListJson, ErrorObjectOwned> {
    let run = move |c: &mut Catalog<'_>, progress: &mut dyn FnMut(usize, usize)| {
        c.list_all(p.session_dir.as_deref(), progress)
    };
    let (cx, json) = listing(cx, p.progress_token, p.include_all_messages_text, run, pi_listing).await?;
    cx.rendered_result(json, SessionInfoListJson)
}

async fn list_delta(p: ListDeltaParams, cx: Cx) -> Result<ListingDeltaJson, ErrorObjectOwned> {
    let state = cx.state.clone();
    let (cwd, session_dir, since) = (p.cwd, p.session_dir, p.since);
    let run = move |c: &mut Catalog<'_>, progress: &mut dyn FnMut(usize, usize)| match &cwd {
        Some(cwd) => c.list(cwd, session_dir.as_deref(), progress),
        None => c.list_all(session_dir.as_deref(), progress),
    };
    let render = move |infos: Vec<Arc<ListedSession>>, with_text: bool| {
        let infos = Arc::new(infos);
        let mut recent = state.listings.lock().unwrap_or_else(|e| e.into_inner());
        let base = since.and_then(|t| recent.get(&t, with_text));
        let token = recent.keep(with_text, infos.clone());
        drop(recent);
        render::listing_delta(&token, base.as_deref().map_or(&[], Vec::as_slice), &infos, with_text)
    };
    let (cx, json) = listing(cx, p.progress_token, p.include_all_messages_text, run, render).await?;
    cx.rendered_result(json, ListingDeltaJson)
}

async fn find_by_id(p: FindByIdParams, cx: Cx) -> Result<FindResult, ErrorObjectOwned> {
    let state = cx.state.clone();
    blocking(move || {
        let path = state
            .index
            .with(|ix| Catalog::new(&state.agent_dir, ix).find_by_id(&p.cwd, &p.id, p.session_dir.as_deref()))
            .map_err(from_session)?;
        Ok(FindResult { path })
    })
    .await
}

/// Results shown when the host does not say how many it wants.
const DEFAULT_SEARCH_LIMIT: usize = 50;

async fn search(p: SearchParams, cx: Cx) -> Result<Vec<SearchHitJson>, ErrorObjectOwned> {
    let state = cx.state.clone();
    blocking(move || {
        let mut progress = ProgressReporter::new(state.clone(), p.progress_token);
        let scope = Scope { cwd: p.cwd.as_deref(), session_dir: p.session_dir.as_deref() };
        let limit = p.limit.unwrap_or(DEFAULT_SEARCH_LIMIT);
        let hits = state
            .index
            .with(|ix| {
                let catalog = Catalog::new(&state.agent_dir, ix);
                search_sessions(&p.query, scope, p.roles.as_deref(), limit, catalog, &mut |phase, l, t| {
                    let stage = match phase {
                        Phase::Listing => ProgressStage::Listing,
                        Phase::Indexing => ProgressStage::Indexing,
                    };
                    progress.report_stage(Some(stage), l, t)
                })
            })
            .map_err(from_session)?;
        progress.end();
        Ok(hits.iter().map(|h| SearchHitJson(RawJson::from_json(&search_hit_json(h)))).collect())
    })
    .await
}
