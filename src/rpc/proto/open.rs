//! Wire types of the lifecycle and of opening sessions: handshake, the open methods, watches, a session's state.

use super::*;

// ------------------------------------------------------------------------------------------------------------------
// Lifecycle

/// `initialize` params (all optional).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    /// The host's name and version.
    pub client_info: Option<ClientInfo>,
    /// The host's capabilities. One is read: `skeletons: false` says the host never asks for entries at skeleton
    /// detail (pi's drop-in), so the sessions it opens make none (a third of a cold open's work, and most of
    /// what an open session holds beside its index), nor do the records it keeps for later opens (a host that
    /// reads skeletons reads such a file again and keeps its own); a skeleton snapshot asked all the same reads
    /// each entry's line again. Other members are accepted and ignored.
    pub capabilities: Option<serde_json::Value>,
    /// The protocol version the host speaks.
    pub protocol_version: Option<String>,
}

impl InitializeParams {
    /// The host said it never asks for skeletons (`capabilities.skeletons: false`).
    pub fn skeletons_declined(&self) -> bool {
        self.capabilities.as_ref().and_then(|c| c.get("skeletons")) == Some(&serde_json::Value::Bool(false))
    }
}

/// A name and version.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct ClientInfo {
    /// Name.
    pub name: String,
    /// Version.
    pub version: Option<String>,
}

/// `initialize` result.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    /// `{name: "pi-sessiond", version}`.
    pub server_info: ServerInfo,
    /// The protocol version this server speaks.
    pub protocol_version: String,
    /// What the server offers.
    pub capabilities: Capabilities,
}

/// The server's name and version.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ServerInfo {
    /// `pi-sessiond`.
    pub name: String,
    /// The crate version.
    pub version: String,
}

/// Server capabilities.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Capabilities {
    /// Every request method the server answers.
    pub methods: Vec<String>,
    /// Every notification the server sends.
    pub notifications: Vec<String>,
    /// The framing in use: `jsonl` or `lsp`.
    pub framing: String,
    /// The pi version whose session format and behaviour are implemented.
    pub pi_compatibility: String,
}

/// Params of methods that take nothing.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct NoParams {}

/// The JSON `null`, as a result type.
#[derive(Debug, Default, Serialize, JsonSchema)]
#[schemars(transparent)]
pub struct Null(());

// ------------------------------------------------------------------------------------------------------------------
// Opening sessions

/// `session/create`: a new session for `cwd` (written once it has a user or assistant message).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateParams {
    /// A handle of the host's choosing (any non-empty string no open session has); default: the server picks
    /// `hN`. Requests naming it may be sent right behind this one: they wait for the open.
    pub handle: Option<String>,
    /// Also return the session's entries (`snapshot: {seq, entries}` in the result), and set the detail of this
    /// handle's later `session/changed` entries: `none` (default: no snapshot; notifications carry entries as
    /// stored), `skeleton` (a few fields, a preview and the size of each entry), `full` (entries as stored).
    pub snapshot: Option<Detail>,
    /// The working directory (stored in the header; picks the default session directory).
    pub cwd: String,
    /// Where to put the file (default: pi's directory for `cwd`).
    pub session_dir: Option<String>,
    /// A session id (letters, digits, `.`, `_`, `-`; default: a UUID v7).
    pub id: Option<String>,
    /// The header's `parentSession`.
    pub parent_session: Option<String>,
}

/// `session/open`: open a session file (a missing file starts a new session at that path).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenParams {
    /// A handle of the host's choosing (any non-empty string no open session has); default: the server picks
    /// `hN`. Requests naming it may be sent right behind this one: they wait for the open.
    pub handle: Option<String>,
    /// Also return the session's entries (`snapshot: {seq, entries}` in the result), and set the detail of this
    /// handle's later `session/changed` entries: `none` (default: no snapshot; notifications carry entries as
    /// stored), `skeleton` (a few fields, a preview and the size of each entry), `full` (entries as stored).
    pub snapshot: Option<Detail>,
    /// The session file.
    pub path: String,
    /// Directory for sessions made from this one (default: the file's directory).
    pub session_dir: Option<String>,
    /// Use this cwd instead of the header's; for a file open already, the handle's cwd becomes this one.
    pub cwd_override: Option<String>,
    /// Follow appends other processes (pi itself) make to the file, as `session/changed` with `origin:
    /// "external"`.
    pub watch: Option<bool>,
    /// Open this machine's session from the team catalog (`--catalog`) instead of a local file: `path` is the
    /// file's path on that machine, the session is as last pushed, and it is read-only (mutations fail with
    /// `read_only`).
    pub machine: Option<String>,
    /// Apply pi's load-time repairs now, as pi's own open does: a 0-byte file gets its header, a v1/v2 file is
    /// rewritten migrated, a missing final newline is added. Without it (the default) opening never writes and
    /// they are applied just before the first write. The open fails if they cannot be written (another
    /// pi-sessiond holding the file's write lock: `session_locked`).
    pub repair: Option<bool>,
}

/// `session/lockHolder`: who else writes a session file.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LockHolderParams {
    /// The session file.
    pub path: String,
}

/// `session/lockHolder` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct LockHolderResult {
    /// The process holding the file's write lock: a pi-sessiond writing it (its parent is the program it writes
    /// for). `null`: nobody, this server itself, no such regular file, or a system that cannot say (only Linux
    /// names holders).
    pub pid: Option<u32>,
}

/// `session/continueRecent`: the most recent session in the directory, or a new one.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContinueRecentParams {
    /// A handle of the host's choosing (any non-empty string no open session has); default: the server picks
    /// `hN`. Requests naming it may be sent right behind this one: they wait for the open.
    pub handle: Option<String>,
    /// Also return the session's entries (`snapshot: {seq, entries}` in the result), and set the detail of this
    /// handle's later `session/changed` entries: `none` (default: no snapshot; notifications carry entries as
    /// stored), `skeleton` (a few fields, a preview and the size of each entry), `full` (entries as stored).
    pub snapshot: Option<Detail>,
    /// The working directory.
    pub cwd: String,
    /// The session directory (default: pi's directory for `cwd`).
    pub session_dir: Option<String>,
}

/// `session/inMemory`: a session that never touches the disk.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InMemoryParams {
    /// A handle of the host's choosing (any non-empty string no open session has); default: the server picks
    /// `hN`. Requests naming it may be sent right behind this one: they wait for the open.
    pub handle: Option<String>,
    /// Also return the session's entries (`snapshot: {seq, entries}` in the result), and set the detail of this
    /// handle's later `session/changed` entries: `none` (default: no snapshot; notifications carry entries as
    /// stored), `skeleton` (a few fields, a preview and the size of each entry), `full` (entries as stored).
    pub snapshot: Option<Detail>,
    /// The working directory (default: the server's).
    pub cwd: Option<String>,
    /// A session id.
    pub id: Option<String>,
    /// Entries to start from (a header among them is adopted; older versions are migrated).
    pub entries: Option<Vec<PiValue>>,
}

/// `session/forkFrom`: a new session in `targetCwd` holding another session's whole history.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ForkFromParams {
    /// A handle of the host's choosing (any non-empty string no open session has); default: the server picks
    /// `hN`. Requests naming it may be sent right behind this one: they wait for the open.
    pub handle: Option<String>,
    /// Also return the session's entries (`snapshot: {seq, entries}` in the result), and set the detail of this
    /// handle's later `session/changed` entries: `none` (default: no snapshot; notifications carry entries as
    /// stored), `skeleton` (a few fields, a preview and the size of each entry), `full` (entries as stored).
    pub snapshot: Option<Detail>,
    /// The session to copy.
    pub source_path: String,
    /// The new session's cwd.
    pub target_cwd: String,
    /// Where to put it (default: pi's directory for `targetCwd`).
    pub session_dir: Option<String>,
    /// A session id.
    pub id: Option<String>,
}

/// Params naming an open session.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct HandleParams {
    /// The handle `session/*` open methods returned.
    pub handle: String,
}

/// `session/getState`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct GetStateParams {
    /// The handle.
    pub handle: String,
    /// Also return the entries at this detail (`snapshot: {seq, entries}`); the handle's own detail is unchanged.
    pub snapshot: Option<Detail>,
}

/// `session/changesSince`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ChangesSinceParams {
    /// The handle.
    pub handle: String,
    /// The `seq` of the last change the host applied.
    pub seq: u64,
}

/// `sessions/watch`: report session files appearing, growing or vanishing in a directory.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionsWatchParams {
    /// The directory to watch.
    pub session_dir: Option<String>,
    /// Watch pi's directory for this cwd (when `sessionDir` is not given).
    pub cwd: Option<String>,
    /// `true`: watch every project directory under the agent directory's `sessions/` (the sessions `listAll`
    /// lists), including those created later, instead of one directory (`sessionDir` and `cwd` are then not
    /// given). A session file already in a project directory when it is noticed is reported as `created`.
    pub all: Option<bool>,
}

/// `sessions/watch` result.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionsWatchResult {
    /// Names the watch in `sessions/changed` and `sessions/unwatch`.
    pub watch_id: String,
    /// The directory watched.
    pub dir: String,
}

/// `sessions/unwatch`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionsUnwatchParams {
    /// From `sessions/watch`.
    pub watch_id: String,
}

/// `sessions/changed`: a session file in a watched directory appeared, changed or vanished.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionsChanged {
    /// The watch.
    pub watch_id: String,
    /// The session file.
    pub path: String,
    /// What happened to the file.
    pub kind: SessionsChangeKind,
}

/// `SessionsChanged.kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SessionsChangeKind {
    /// A session file appeared.
    Created,
    /// A session file was written.
    Changed,
    /// A session file vanished.
    Removed,
}

impl From<crate::watch::FileChange> for SessionsChangeKind {
    fn from(change: crate::watch::FileChange) -> SessionsChangeKind {
        use crate::watch::FileChange;
        match change {
            FileChange::Created => SessionsChangeKind::Created,
            FileChange::Changed => SessionsChangeKind::Changed,
            FileChange::Removed => SessionsChangeKind::Removed,
        }
    }
}

/// `session/newSession`: replace the handle's session with a new, empty one.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NewSessionParams {
    /// The handle.
    pub handle: String,
    /// As on the opening methods: return the new session's snapshot, and set the handle's detail from now on
    /// (default: keep it).
    pub snapshot: Option<Detail>,
    /// A session id.
    pub id: Option<String>,
    /// The header's `parentSession`.
    pub parent_session: Option<String>,
}

/// `session/setSessionFile`: point the handle at another file.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SetSessionFileParams {
    /// The handle.
    pub handle: String,
    /// The file.
    pub path: String,
    /// As on the opening methods: return the file's snapshot, and set the handle's detail from now on (default:
    /// keep it).
    pub snapshot: Option<Detail>,
}

/// An open session's state.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionState {
    /// Opaque handle for later calls.
    pub handle: String,
    /// The session id (the header's).
    pub session_id: AnyJson,
    /// The file (`null` in memory).
    pub session_file: Option<String>,
    /// The directory new sessions go to (`""` in memory).
    pub session_dir: String,
    /// The working directory.
    pub cwd: String,
    /// The header.
    pub header: Option<HeaderJson>,
    /// The leaf (`null` before the first entry or after `resetLeaf`).
    pub leaf_id: Option<AnyJson>,
    /// Distinct entry ids.
    pub entry_count: usize,
    /// The session name, if set. Also null when the latest `session_info`'s name is not a string: pi's
    /// `getSessionName` throws on that file (and so does `session/getSessionName`, naming the entry), but the
    /// session opens.
    pub session_name: Option<AnyJson>,
    /// False for in-memory sessions.
    pub is_persisted: bool,
    /// The `seq` of the last `session/changed` this state includes: notifications with a higher `seq` happened
    /// after it (a host resynchronising after a gap applies only those).
    pub seq: u64,
    /// The handle's detail: what its `session/changed` entries are (`skeleton`: skeleton entries; `none` and
    /// `full`: entries as stored) and whether `rebind` and `reset` carry a snapshot (`skeleton`, `full`).
    pub detail: Detail,
    /// With `snapshot` `skeleton` or `full` on the request: the entries this state holds, at that detail.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotJson>,
    /// The machine whose session this is, when it was opened read-only from the team catalog (absent otherwise;
    /// `session/open` and `session/getState` give it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
}
