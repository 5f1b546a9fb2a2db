//! The method table: every request the server answers, its params and result types, where it runs, and its
//! handler.
//!
//! One macro invocation ([`methods!`]) both routes requests and describes them for `protocol/`, so the served
//! methods and the documented ones cannot drift apart. Routing parses the params once, straight from the frame's
//! bytes (a bad field is named in `data.path`), and puts the handler where it runs: `reading` and `writing` on the
//! named session's queue (see `handles`), `opening` in a new slot, `pooled` on the blocking pool, `lifecycle`
//! in the event loop itself.

use crate::rpc::error::WireKind;
use std::sync::Arc;

use jsonrpsee::types::ErrorObjectOwned;
use schemars::{Schema, SchemaGenerator};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::value::RawValue;

use super::error::{self, invalid_params};
use super::handlers::open::OpenHandler;
use super::handlers::{catalog, changes, mutation, open, read, watch, Cx, ReadCx, Res, Server, WriteCx};
use super::handles::{Ack, Job, Slot};
use super::proto::*;
use super::reply::Reply;
use crate::session::store::Durability;

/// The protocol version this server speaks.
pub const PROTOCOL_VERSION: &str = "1.0";

/// What kind of work a method is: it decides whether a request can be cancelled, and `protocol/` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Category {
    /// The handshake and shutdown.
    Lifecycle,
    /// Opening, closing and watching sessions.
    Open,
    /// Changing a session.
    Mutation,
    /// Reading one session.
    Read,
    /// Listing and searching many sessions.
    Catalog,
}

impl Category {
    /// Its name in `protocol/methods.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Lifecycle => "lifecycle",
            Category::Open => "open",
            Category::Mutation => "mutation",
            Category::Read => "read",
            Category::Catalog => "catalog",
        }
    }

    /// Mutations and openings are not cancellable (an append that has started is finished); reads are.
    pub fn cancellable(self) -> bool {
        matches!(self, Category::Read | Category::Catalog)
    }
}

/// One method's description, for `protocol/`.
pub struct MethodSpec {
    /// The method name.
    pub name: &'static str,
    /// What kind of work it is.
    pub category: Category,
    /// One line for host authors.
    pub summary: &'static str,
    /// The params schema.
    pub params: fn(&mut SchemaGenerator) -> Schema,
    /// The result schema.
    pub result: fn(&mut SchemaGenerator) -> Schema,
}

impl MethodSpec {
    /// Whether its requests can be cancelled.
    pub fn cancellable(&self) -> bool {
        self.category.cancellable()
    }
}

/// Whether requests for `method` can be cancelled.
pub fn is_cancellable(method: &str) -> bool {
    category(method).is_some_and(Category::cancellable)
}

/// What routing a request left for the event loop to do.
pub enum Routed {
    /// The request is on its way (queued or running) or already answered; its reply answers it.
    Dispatched,
    /// `initialize`: answered by the event loop, which knows the framing.
    Initialize(InitializeParams, Reply),
    /// `shutdown`: the event loop answers it once everything received before it is answered.
    Shutdown(Reply),
}

/// Params that name the session a request is about.
pub trait NamesHandle {
    /// The handle.
    fn handle(&self) -> &str;
}

/// Params of a method that opens a session.
pub trait Opens {
    /// The handle the host chose, if any.
    fn chosen_handle(&self) -> Option<&str>;

    /// The snapshot asked for, if any.
    fn snapshot(&self) -> Option<Detail>;

    /// The file the request opens, when it is known before the request runs (an open one is reused).
    fn known_path(&self) -> Option<String> {
        None
    }

    /// Whether pi's load-time repairs are to be written as the session opens (`session/open {repair: true}`).
    fn repairs_now(&self) -> bool {
        false
    }

    /// The working directory the opener's session is to have (`session/open {cwdOverride}`).
    fn cwd_override(&self) -> Option<String> {
        None
    }
}

macro_rules! names_handle {
    ($($t:ty),* $(,)?) => {
        $(impl NamesHandle for $t {
            fn handle(&self) -> &str {
                &self.handle
            }
        })*
    };
}

names_handle!(
    HandleParams,
    AppendBatchParams,
    GetStateParams,
    ChangesSinceParams,
    TreeFlatParams,
    EntryIdParams,
    ChildrenParams,
    BranchPathParams,
    EntriesParams,
    NewSessionParams,
    SetSessionFileParams,
    CreateBranchedSessionParams,
);

macro_rules! opens {
    ($($t:ty),* $(,)?) => {
        $(impl Opens for $t {
            fn chosen_handle(&self) -> Option<&str> {
                self.handle.as_deref()
            }

            fn snapshot(&self) -> Option<Detail> {
                self.snapshot
            }
        })*
    };
}

opens!(CreateParams, ContinueRecentParams, InMemoryParams, ForkFromParams);

impl Opens for OpenParams {
    fn chosen_handle(&self) -> Option<&str> {
        self.handle.as_deref()
    }

    fn snapshot(&self) -> Option<Detail> {
        self.snapshot
    }

    fn known_path(&self) -> Option<String> {
        // Another machine's session is not this machine's file of the same path: it always gets a slot of its own.
        match self.machine {
            Some(_) => None,
            None => Some(crate::session::paths::resolve_path(&self.path)),
        }
    }

    fn repairs_now(&self) -> bool {
        self.repair.unwrap_or(false)
    }

    fn cwd_override(&self) -> Option<String> {
        self.cwd_override.clone()
    }
}

/// Parses one op of `session/appendBatch` (its params' text, without a handle) into what the engine runs;
/// `at_params` says where in the op a params error is.
type BatchPlanner =
    fn(&str, &dyn Fn(ErrorObjectOwned) -> ErrorObjectOwned) -> Result<mutation::Planned, ErrorObjectOwned>;

macro_rules! methods {
    (
        $( $name:literal, $category:ident, $kind:ident $handler:path [$params:ty] -> $result:ty, $summary:literal; )*
        ops:
        $( $op_name:literal, $op:path [$op_params:ty] -> $op_result:ty, $op_summary:literal; )*
        then:
        $( $name2:literal, $category2:ident, $kind2:ident $handler2:path [$params2:ty] -> $result2:ty, $summary2:literal; )*
    ) => {
        /// Describes every method.
        pub fn specs() -> Vec<MethodSpec> {
            vec![
                $(spec::<$params, $result>($name, Category::$category, $summary),)*
                $(spec::<$op_params, $op_result>($op_name, Category::Mutation, $op_summary),)*
                $(spec::<$params2, $result2>($name2, Category::$category2, $summary2),)*
            ]
        }

        /// The category of a served method (None: not served).
        pub fn category(method: &str) -> Option<Category> {
            match method {
                $($name => Some(Category::$category),)*
                $($op_name => Some(Category::Mutation),)*
                $($name2 => Some(Category::$category2),)*
                _ => None,
            }
        }

        $(impl NamesHandle for $op_params {
            fn handle(&self) -> &str {
                self.handle.as_deref().unwrap_or_default()
            }
        }

        impl OpParams for $op_params {
            fn has_handle(&self) -> bool {
                self.handle.is_some()
            }
        })*

        /// The planner of a batchable method's op (None: the method cannot be batched).
        fn batch_planner(method: &str) -> Option<BatchPlanner> {
            match method {
                $($op_name => Some(|text, at_params| {
                    let p: $op_params = parse_text(text).map_err(at_params)?;
                    if p.has_handle() {
                        return Err(invalid_params("params.handle", "an op's params have no handle: the batch's is used"));
                    }
                    $op(p)
                }),)*
                _ => None,
            }
        }

        /// Parses a request's params once and puts its handler where it runs; `reply` answers it. A request for
        /// an unknown method is answered `-32601`.
        pub fn route(server: &Arc<Server>, method: &str, params: Option<&RawValue>, reply: Reply) -> Routed {
            match method {
                $( $name => parsed(params, reply, |p, reply| $kind::<$params, $result>(server, p, reply, $handler)), )*
                $( $name2 => parsed(params, reply, |p, reply| $kind2::<$params2, $result2>(server, p, reply, $handler2)), )*
                $( $op_name => parsed_op(params, reply, |p, reply| alone::<$op_params, $op_result>(server, p, reply, $op)), )*
                other => {
                    reply.error(&error::rpc_error(
                        WireKind::MethodNotFound,
                        format!("method not found: {other}"),
                        serde_json::json!({}),
                    ));
                    Routed::Dispatched
                }
            }
        }
    };
}

methods! {
    "initialize", Lifecycle, lifecycle initialize [InitializeParams] -> InitializeResult, "Handshake: server name, version, protocol version and capabilities. Optional.";
    "shutdown", Lifecycle, lifecycle shutdown [NoParams] -> Null, "Closes every session and answers; send the `exit` notification next.";

    "session/create", Open, opening open::create [CreateParams] -> SessionState, "A new session for cwd; the file is written once it has a user or assistant message (pi's SessionManager.create).";
    "session/open", Open, opening open::open [OpenParams] -> SessionState, "Opens a session file without writing to it (with repair: true, applying pi's load-time repairs at once, as pi's open does); a missing file starts a new session there. A file already open returns its handle (reference-counted).";
    "session/continueRecent", Open, opening open::continue_recent [ContinueRecentParams] -> SessionState, "The most recent session in the directory, or a new one (pi's continueRecent).";
    "session/inMemory", Open, opening open::in_memory [InMemoryParams] -> SessionState, "A session that never touches the disk, optionally from entries (pi's inMemory).";
    "session/forkFrom", Open, opening open::fork_from [ForkFromParams] -> SessionState, "A new session in targetCwd with another session's whole history (migrated first).";
    "session/newSession", Mutation, writing mutation::new_session [NewSessionParams] -> SessionState, "Replaces the handle's session with a new, empty one; the old file is untouched.";
    "session/setSessionFile", Mutation, writing mutation::set_session_file [SetSessionFileParams] -> SessionState, "Points the handle at another file.";
    "session/getState", Read, reading open::get_state [GetStateParams] -> SessionState, "The handle's current state (with `snapshot`: and its entries).";
    "session/changesSince", Read, reading changes::changes_since [ChangesSinceParams] -> ChangesSinceResult, "The session/changed notifications after a seq, or the state and a fresh snapshot once they are no longer kept.";
    "session/close", Open, writing open::close [HandleParams] -> Null, "Drops one reference to the handle; the last one closes it.";
    "session/watch", Open, writing watch::watch_session [HandleParams] -> Null, "Follows appends other processes make to the handle's file (session/changed with origin external).";
    "session/unwatch", Open, writing watch::unwatch_session [HandleParams] -> Null, "Stops following the handle's file.";
    "session/lock", Open, writing open::lock_session [HandleParams] -> Null, "Takes the file's write lock now, as the first write would (session_locked when another process holds it): a host whose sidecar died takes it back at once on the next one.";
    "session/lockHolder", Open, pooled open::lock_holder [LockHolderParams] -> LockHolderResult, "The process other than this server holding a session file's write lock (a pi-sessiond writing it), or null: what to tell a user before they type into a session another pi writes.";

    // Mutations that are one engine op each: the line names the op (what the params ask of the engine); running
    // it alone, answering as the method does, and running it inside session/appendBatch follow from the line.
    ops:
    "session/appendMessage", mutation::message_op [AppendMessageParams] -> IdResult, "Appends a message under the leaf (pi's appendMessage).";
    "session/appendThinkingLevelChange", mutation::thinking_level_change_op [AppendThinkingLevelChangeParams] -> IdResult, "Appends a thinking_level_change.";
    "session/appendModelChange", mutation::model_change_op [AppendModelChangeParams] -> IdResult, "Appends a model_change.";
    "session/appendUsage", mutation::usage_op [AppendUsageParams] -> EntryResult, "Appends a usage entry and returns it.";
    "session/appendCompaction", mutation::compaction_op [AppendCompactionParams] -> IdResult, "Appends a compaction (with pi's system-message checkpoint, and an optional retainedTail).";
    "session/appendCustomEntry", mutation::custom_entry_op [AppendCustomEntryParams] -> IdResult, "Appends an extension's custom entry (not in context).";
    "session/appendSessionInfo", mutation::session_info_op [AppendSessionInfoParams] -> IdResult, "Sets the session name (an empty name clears it).";
    "session/appendCustomMessageEntry", mutation::custom_message_entry_op [AppendCustomMessageEntryParams] -> IdResult, "Appends an extension message that is part of the context.";
    "session/appendContextEdit", mutation::context_edit_op [AppendContextEditParams] -> IdResult, "Edits or omits an earlier entry's contribution to the context, on this branch.";
    "session/appendLabelChange", mutation::label_change_op [AppendLabelChangeParams] -> IdResult, "Sets or clears an entry's label.";
    "session/branch", mutation::branch_op [BranchParams] -> Null, "Moves the leaf to an entry; the next append starts a branch there.";
    "session/resetLeaf", mutation::reset_leaf_op [ResetLeafParams] -> Null, "Moves the leaf before the first entry; the next append is a new root.";
    "session/branchWithSummary", mutation::branch_with_summary_op [BranchWithSummaryParams] -> IdResult, "Moves the leaf and appends a summary of the abandoned branch.";
    then:
    "session/appendBatch", Mutation, writing append_batch [AppendBatchParams] -> AppendBatchResult, "Appends, leaf moves and branch summaries as one write (one fsync, one session/changed), all or nothing; results in order.";
    "session/createBranchedSession", Mutation, writing mutation::create_branched_session [CreateBranchedSessionParams] -> PathResult, "The handle becomes a new session holding only the path to leafId.";

    "session/getLeafId", Read, reading read::get_leaf_id [HandleParams] -> Option<AnyJson>, "The leaf id, or null.";
    "session/getLeafEntry", Read, reading read::get_leaf_entry [HandleParams] -> Option<EntryJson>, "The leaf entry, or null.";
    "session/getEntry", Read, reading read::get_entry [EntryIdParams] -> Option<EntryJson>, "The entry with that id (the last one if ids repeat), or null.";
    "session/getChildren", Read, reading read::get_children [ChildrenParams] -> Vec<EntryJson>, "Entries whose parent is parentId, in file order.";
    "session/getLabel", Read, reading read::get_label [EntryIdParams] -> Option<AnyJson>, "The entry's label, or null.";
    "session/getBranch", Read, reading read::get_branch [BranchPathParams] -> Vec<EntryJson>, "The path from the root to fromId (default: the leaf).";
    "session/getHeader", Read, reading read::get_header [HandleParams] -> Option<HeaderJson>, "The header, or null.";
    "session/getEntryCount", Read, reading read::get_entry_count [HandleParams] -> usize, "Distinct entry ids.";
    "session/getEntries", Read, reading read::get_entries [EntriesParams] -> Vec<Option<EntryAtDetailJson>>, "Entries in file order (all, or a page with offset/limit), or the entries with the ids given, in that order (null for an unknown id); full or skeleton.";
    "session/getTree", Read, reading read::get_tree [HandleParams] -> TreeJson, "The tree: roots in file order, children by timestamp, labels resolved.";
    "session/getTreeFlat", Read, reading read::get_tree_flat [TreeFlatParams] -> FlatTreeJson, "The same tree as a flat pre-order list with parent positions (no deep nesting), with entries full, skeleton or none, paged with offset/limit.";
    "session/getSessionName", Read, reading read::get_session_name [HandleParams] -> Option<AnyJson>, "The session name, or null.";
    "session/getWarnings", Read, reading read::get_warnings [HandleParams] -> Vec<WarningJson>, "What loading the file found: malformed and torn lines, broken links, legacy versions.";
    "session/buildContextEntries", Read, reading read::build_context_entries [HandleParams] -> Vec<EntryJson>, "The entries that make up the model's context.";
    "session/buildSessionProjection", Read, reading read::build_session_projection [HandleParams] -> ProjectionJson, "Context entries with their model-visible messages.";
    "session/buildSessionContext", Read, reading read::build_session_context [HandleParams] -> ContextJson, "What the model sees: messages, thinking level, model.";

    "sessions/list", Catalog, pooled catalog::list [ListParams] -> SessionInfoListJson, "Sessions of a cwd, newest activity first (pi's list).";
    "sessions/listAll", Catalog, pooled catalog::list_all [ListAllParams] -> SessionInfoListJson, "Every session (pi's listAll).";
    "sessions/listDelta", Catalog, pooled catalog::list_delta [ListDeltaParams] -> ListingDeltaJson, "A listing (list's with a cwd, listAll's without) as a change to one the host holds.";
    "sessions/findById", Catalog, pooled catalog::find_by_id [FindByIdParams] -> FindResult, "The file of the session with exactly this id, or null.";
    "sessions/search", Catalog, pooled catalog::search [SearchParams] -> Vec<SearchHitJson>, "Entries (and sessions) matching a /resume query, best first.";
    "sessions/searchPage", Catalog, pooled catalog::search_page [SearchParams] -> SearchPage, "sessions/search's hits from offset on, with how many there are in all and in how many sessions.";
    "sessions/watch", Open, pooled watch::watch_sessions [SessionsWatchParams] -> SessionsWatchResult, "Reports session files appearing, changing or vanishing in a directory (sessions/changed).";
    "sessions/unwatch", Open, pooled watch::unwatch_sessions [SessionsUnwatchParams] -> Null, "Stops a sessions/watch.";
}

/// Parses params straight from the frame's bytes, naming the offending member.
fn parse<P: DeserializeOwned>(raw: Option<&RawValue>) -> Result<P, ErrorObjectOwned> {
    parse_text(raw.map_or("{}", RawValue::get))
}

/// Routes a request whose params parse as `P`; answers the parse error otherwise.
fn parsed<P: DeserializeOwned>(
    params: Option<&RawValue>,
    reply: Reply,
    route: impl FnOnce(P, Reply) -> Routed,
) -> Routed {
    match parse::<P>(params) {
        Ok(p) => route(p, reply),
        Err(e) => {
            reply.error(&e);
            Routed::Dispatched
        }
    }
}

/// Routes an op method's params as [`parsed`] does, answering about `handle` as serde did when the type required
/// it: first among missing members (serde reports them in declaration order, the handle first), and a `null`
/// handle as a wrong type. (The type's handle is optional because a batch's ops have none.)
fn parsed_op<P: DeserializeOwned + OpParams>(
    params: Option<&RawValue>,
    reply: Reply,
    route: impl FnOnce(P, Reply) -> Routed,
) -> Routed {
    let handle_member = || {
        params
            .and_then(|p| serde_json::from_str::<std::collections::HashMap<&str, &RawValue>>(p.get()).ok())
            .and_then(|members| members.get("handle").copied())
    };
    let refused = match parse::<P>(params) {
        Ok(p) if p.has_handle() => return route(p, reply),
        Ok(_) if handle_member().is_some() => {
            invalid_params("handle", "invalid params: invalid type: null, expected a string")
        }
        Ok(_) => invalid_params("handle", "invalid params: missing field `handle`"),
        Err(e) if e.message().starts_with("invalid params: missing field") && handle_member().is_none() => {
            invalid_params("handle", "invalid params: missing field `handle`")
        }
        Err(e) => e,
    };
    reply.error(&refused);
    Routed::Dispatched
}

/// One method's description from its line in the table.
fn spec<P: schemars::JsonSchema, R: schemars::JsonSchema>(
    name: &'static str,
    category: Category,
    summary: &'static str,
) -> MethodSpec {
    MethodSpec { name, category, summary, params: |g| g.subschema_for::<P>(), result: |g| g.subschema_for::<R>() }
}

/// An op method called alone (not in a batch; [`parsed_op`] saw its handle): its op runs on the session's queue
/// and is answered as the method answers.
fn alone<P, R>(
    server: &Arc<Server>,
    p: P,
    reply: Reply,
    op: fn(P) -> Result<mutation::Planned, ErrorObjectOwned>,
) -> Routed
where
    P: NamesHandle + Send + 'static,
    R: Serialize + Send + 'static,
{
    writing::<P, R>(server, p, reply, move |p, cx: &mut WriteCx<'_>| mutation::run_planned(cx, op(p)))
}

/// Params of an op method: the handle is the request's alone, the batch's inside a batch.
trait OpParams {
    /// Whether the params name a handle.
    fn has_handle(&self) -> bool;
}

/// [`parse`] of params given as text (one JSON value).
fn parse_text<P: DeserializeOwned>(text: &str) -> Result<P, ErrorObjectOwned> {
    if !text.starts_with('{') {
        return Err(invalid_params("", "params must be an object (by-name parameters)"));
    }
    let mut d = serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(&mut d).map_err(|e| {
        let path = e.path().to_string();
        let mut path = if path == "." { String::new() } else { path };
        let inner = without_position(&e.into_inner());
        // serde reports a missing member at the object that lacks it; name the member itself.
        if let Some(field) = inner.strip_prefix("missing field `").and_then(|r| r.split('`').next()) {
            path = if path.is_empty() { field.to_owned() } else { format!("{path}.{field}") };
            return invalid_params(&path, format!("invalid params: {inner}"));
        }
        let at = if path.is_empty() { String::new() } else { format!("{path}: ") };
        invalid_params(&path, format!("invalid params: {at}{inner}"))
    })
}

/// serde_json's message without the " at line L column C" it adds: a place in a frame the client library wrote,
/// which tells a host's author nothing (the member's path, in `data.path` and the message, does).
fn without_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let position = format!(" at line {} column {}", e.line(), e.column());
    match text.strip_suffix(&position) {
        Some(message) => message.to_owned(),
        None => text,
    }
}

/// `session/appendBatch`: each op parsed here, with its own method's params type, then run as one batch.
fn append_batch(p: AppendBatchParams, cx: &mut WriteCx<'_>) -> Res<AppendBatchResult> {
    let mut planned = Vec::with_capacity(p.ops.len());
    for (n, op) in p.ops.into_iter().enumerate() {
        let op = batch_op(&op.method, op.params.as_deref()).map_err(|e| error::within(e, &format!("ops[{n}]")))?;
        planned.push(op);
    }
    mutation::append_batch(p.expected_leaf_id, planned, cx)
}

/// Parses one op of `session/appendBatch` (`params` without `handle`) into what the engine runs.
fn batch_op(method: &str, params: Option<&RawValue>) -> Result<mutation::Planned, ErrorObjectOwned> {
    let text = params.map_or("{}", RawValue::get).trim_start();
    if !text.starts_with('{') {
        return Err(invalid_params("params", "params must be an object (by-name parameters)"));
    }
    // `targetId` or `entryId` may name the entry an earlier op of the batch appends: `{"op": n}`. (Only params
    // that mention "op" at all are looked at twice.)
    let (replaced, refs) = if text.contains("\"op\"") { earlier_refs(text)? } else { (None, Vec::new()) };
    let text = replaced.as_deref().unwrap_or(text);
    let mut planned = batch_op_text(method, text)?;
    for (field, n) in refs {
        if !mutation::point_at_earlier(&mut planned.op, field, n) {
            return Err(invalid_params(&format!("params.{field}"), format!("{method} takes no {field}")));
        }
    }
    Ok(planned)
}

/// Members of an op's params that name an earlier op: (member, op number).
type EarlierRefs = Vec<(&'static str, usize)>;

/// The members of an op's params that name an earlier op (`{"op": n}`), each replaced by a placeholder id (the
/// params' new text, when any was).
fn earlier_refs(text: &str) -> Result<(Option<String>, EarlierRefs), ErrorObjectOwned> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct EarlierOp {
        op: usize,
    }
    let mut members: std::collections::HashMap<String, Box<RawValue>> =
        serde_json::from_str(text).map_err(|e| invalid_params("params", format!("invalid params: {e}")))?;
    let mut refs = Vec::new();
    for field in ["targetId", "entryId"] {
        let Some(value) = members.get(field).filter(|v| v.get().starts_with('{')) else { continue };
        let earlier: EarlierOp = serde_json::from_str(value.get()).map_err(|_| {
            invalid_params(&format!("params.{field}"), "an entry id, or {\"op\": n} for the entry op n appends")
        })?;
        refs.push((field, earlier.op));
        members.insert(field.to_owned(), RawValue::from_string("\"\"".to_owned()).expect("JSON"));
    }
    if refs.is_empty() {
        return Ok((None, refs));
    }
    Ok((Some(serde_json::to_string(&members).expect("JSON")), refs))
}

/// Parses an op's params (an object's text) with its method's own params type: the same type the method takes
/// alone, so a batched op accepts exactly what its method does (less the handle, which is the batch's).
fn batch_op_text(method: &str, text: &str) -> Result<mutation::Planned, ErrorObjectOwned> {
    let Some(plan) = batch_planner(method) else {
        return Err(invalid_params(
            "method",
            format!(
                "{method} cannot be batched: give a session/append… method, session/branch, session/resetLeaf or \
                 session/branchWithSummary"
            ),
        ));
    };
    plan(text, &|e| error::within(e, "params"))
}

fn initialize(p: InitializeParams, reply: Reply) -> Routed {
    Routed::Initialize(p, reply)
}

fn shutdown(_p: NoParams, reply: Reply) -> Routed {
    Routed::Shutdown(reply)
}

/// `lifecycle`: answered by the event loop.
#[allow(clippy::extra_unused_type_parameters)] // the table passes every kind its declared result type
fn lifecycle<P, R>(_server: &Arc<Server>, p: P, reply: Reply, handler: fn(P, Reply) -> Routed) -> Routed {
    handler(p, reply)
}

/// `opening`: a new slot (or a reuse of the one that has the file open), the handler its first job.
#[allow(clippy::extra_unused_type_parameters)] // the table passes every kind its declared result type
fn opening<P, R>(server: &Arc<Server>, p: P, reply: Reply, handler: OpenHandler<P>) -> Routed
where
    P: Opens + Send + 'static,
{
    let name = p.chosen_handle().map(str::to_owned);
    let path = p.known_path();
    let request = open::Request {
        chosen: name.is_some(),
        snapshot: p.snapshot(),
        repair: p.repairs_now(),
        cwd_override: p.cwd_override(),
    };
    open::start(server, name, path, request, Box::new(move |server, slot| handler(p, server, slot)), reply);
    Routed::Dispatched
}

/// Queues a job on the slot the request names, or answers that there is none.
fn queue(server: &Server, handle: &str, job: Job) {
    if let Err(job) = server.registry.queue(handle, job, &server.pool) {
        // The job owns the reply; run it with no session so it answers `handle_not_found` itself.
        match job {
            Job::Read(read) => read(None, &Slot::detached(handle)),
            Job::Write(write) => drop(write(&mut None, &Slot::detached(handle))),
        }
    }
}

/// `reading`: on the session's queue, beside the reads next to it.
fn reading<P, R>(server: &Arc<Server>, p: P, reply: Reply, handler: fn(P, &ReadCx<'_>) -> Res<R>) -> Routed
where
    P: NamesHandle + Send + 'static,
    R: Serialize + Send + 'static,
{
    let handle = p.handle().to_owned();
    reply.span().record("handle", tracing::field::display(&handle));
    let job_server = server.clone();
    queue(
        server,
        &handle,
        Job::Read(Box::new(move |m, slot| {
            let _in_request = reply.span().enter();
            if reply.is_answered() {
                return; // cancelled while queued
            }
            match m {
                Some(m) => {
                    if let Some(Err(e)) = job_server.team.as_ref().map(|t| t.check_still_shown(&slot.handle)) {
                        return reply.error(&e);
                    }
                    let cx = ReadCx { server: &job_server, m, slot, reply: &reply };
                    reply.answer(handler(p, &cx));
                }
                None => reply.error(&error::handle_not_found(&slot.handle)),
            }
        })),
    );
    Routed::Dispatched
}

/// `writing`: on the session's queue, alone. Under group commit, the answer to a write waits for the fsync.
fn writing<P, R>(
    server: &Arc<Server>,
    p: P,
    reply: Reply,
    handler: impl FnOnce(P, &mut WriteCx<'_>) -> Res<R> + Send + 'static,
) -> Routed
where
    P: NamesHandle + Send + 'static,
    R: Serialize + Send + 'static,
{
    let handle = p.handle().to_owned();
    reply.span().record("handle", tracing::field::display(&handle));
    let job_server = server.clone();
    queue(
        server,
        &handle,
        Job::Write(Box::new(move |session, slot| {
            let span = reply.span().clone();
            let _in_request = span.enter();
            let Some(m) = session.as_mut() else {
                reply.error(&error::handle_not_found(&slot.handle));
                return None;
            };
            let mut cx = WriteCx { server: &job_server, m, slot, reply: &reply, wrote: false, closed: false };
            let outcome = handler(p, &mut cx);
            let (wrote, closed) = (cx.wrote, cx.closed);
            if closed {
                let dropped = session.take();
                // The notifications it kept for changesSince go with the handle.
                slot.recent().clear();
                if dropped.is_some() {
                    drop(dropped);
                    crate::memory::give_back_freed();
                }
            }
            if wrote && outcome.is_ok() && job_server.durability == Durability::Batch {
                return Some(Box::new(move |synced: &crate::session::Result<()>| match synced {
                    Ok(()) => reply.answer(outcome),
                    Err(e) => reply.error(&error::fsync_failed(e)),
                }) as Ack);
            }
            let fsync_after = wrote && outcome.is_ok() && job_server.durability == Durability::After;
            reply.answer(outcome);
            // Under `after` the answer is out; the ack only makes the worker fsync once the burst's answers are.
            // A failed fsync has poisoned the session by then, so the next write is refused saying why.
            fsync_after.then(|| Box::new(|_: &crate::session::Result<()>| {}) as Ack)
        })),
    );
    Routed::Dispatched
}

/// `pooled`: on the blocking pool, independently of everything else.
fn pooled<P, R>(server: &Arc<Server>, p: P, reply: Reply, handler: fn(P, &Cx<'_>) -> Res<R>) -> Routed
where
    P: Send + 'static,
    R: Serialize + Send + 'static,
{
    let job_server = server.clone();
    server.pool.spawn_blocking(move || {
        let _in_request = reply.span().enter();
        if reply.is_answered() {
            return; // cancelled while queued
        }
        let cx = Cx { server: &job_server, reply: &reply };
        reply.answer(handler(p, &cx));
    });
    Routed::Dispatched
}
