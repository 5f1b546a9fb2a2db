//! The wire types: every method's params and result, and every notification, with their JSON Schemas.
//!
//! This is the only place wire names live. Values that pi passes through untouched (messages, `details`, `data`,
//! usage, content) are [`PiValue`]s, parsed by the engine's own JSON parser so that lone UTF-16 surrogates
//! (`"\ud83d"`, which pi writes) are accepted and stored exactly as pi stores them; serde_json would reject them.
//! Results in pi's shapes (entries, trees, contexts) are produced by the engine's renderer as raw JSON and carried
//! through as [`RawJson`] values whose schema describes pi's shape.

use std::borrow::Cow;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;

use crate::session::json::{JsString, Json};

/// Any JSON value, parsed as pi's JavaScript parses it (lone surrogates kept, key order kept, numbers as written).
#[derive(Clone, Debug, PartialEq)]
pub struct PiValue(pub Json);

impl<'de> Deserialize<'de> for PiValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Borrowed from the frame (params are always parsed from the frame's bytes): checked, then parsed once.
        let raw: &'de RawValue = Deserialize::deserialize(d)?;
        let text = raw.get().as_bytes();
        let cost = parsed_size(text);
        if cost > FREE_PARSED_BYTES && cost > MAX_EXPANSION * text.len() {
            return Err(D::Error::custom(format!(
                "a value of {} bytes with this many members would take about {} MB in memory once parsed \
                 (at most {MAX_EXPANSION} times its size is accepted); send it in smaller parts",
                text.len(),
                cost >> 20
            )));
        }
        Json::parse(text).map(PiValue).map_err(D::Error::custom)
    }
}

/// A value in params may take this much memory once parsed, whatever its size...
pub const FREE_PARSED_BYTES: usize = 64 << 20;
/// ...and beyond that, at most this many times its size (a frame of millions of tiny numbers would otherwise take
/// some 40 times its size).
pub const MAX_EXPANSION: usize = 8;

/// About what parsing `text` (valid JSON) into a [`Json`] takes: its bytes, plus a value's worth for every member
/// and element (each a 32-byte value and, for numbers and strings, an allocation), counted without parsing.
fn parsed_size(text: &[u8]) -> usize {
    const PER_VALUE: usize = 64;
    let mut values = 1;
    let mut in_string = false;
    let mut escaped = false;
    for &b in text {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b',' | b'[' | b'{' => values += 1,
                _ => {}
            }
        }
    }
    text.len() + values * PER_VALUE
}

impl JsonSchema for PiValue {
    fn schema_name() -> Cow<'static, str> {
        "PiValue".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "description": "Any JSON value; stored exactly as pi would store it." })
    }
}

/// A JSON string, as a JavaScript string (lone surrogates allowed).
#[derive(Clone, Debug, PartialEq)]
pub struct PiString(pub JsString);

impl<'de> Deserialize<'de> for PiString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match PiValue::deserialize(d)?.0.into_string() {
            Ok(s) => Ok(PiString(s)),
            Err(other) => Err(D::Error::custom(format!("expected a string, got {}", kind_name(&other)))),
        }
    }
}

impl JsonSchema for PiString {
    fn schema_name() -> Cow<'static, str> {
        "PiString".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "string" })
    }
}

fn kind_name(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

/// Deserializes an optional member so that `null` is kept as a value (pi writes `details: null` when given null)
/// and only a missing member is `None`.
pub fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PiValue>, D::Error> {
    PiValue::deserialize(d).map(Some)
}

/// Raw JSON produced by the engine's renderer, carried into the response unchanged.
#[derive(Debug)]
pub struct RawJson(pub Box<RawValue>);

impl RawJson {
    /// Wraps JSON text the renderer produced. It is checked: the renderer copies stored lines from the session
    /// file, and a file another process rewrote under an open handle can hold anything at those offsets.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<RawJson, String> {
        let text = String::from_utf8(bytes).map_err(|e| e.to_string())?;
        RawValue::from_string(text).map(RawJson).map_err(|e| e.to_string())
    }

    /// A value (our own serialisation, always valid).
    pub fn from_json(v: &Json) -> RawJson {
        let mut out = Vec::new();
        v.write_preserving(&mut out);
        RawJson::from_bytes(out).expect("Json values serialise to JSON")
    }
}

impl Serialize for RawJson {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

/// Declares a raw-JSON result type whose schema is pi's shape.
macro_rules! pi_shape {
    ($(#[$doc:meta])* $name:ident, $schema_name:literal, |$g:ident| $schema:expr) => {
        $(#[$doc])*
        #[derive(Debug, Serialize)]
        #[serde(transparent)]
        pub struct $name(pub RawJson);

        impl JsonSchema for $name {
            fn schema_name() -> Cow<'static, str> {
                $schema_name.into()
            }
            fn json_schema($g: &mut SchemaGenerator) -> Schema {
                $schema
            }
        }
    };
}

pi_shape!(
    /// A session entry as stored in the file (pi's `SessionEntry`): the line's JSON, unknown members included.
    EntryJson, "SessionEntry", |_g| json_schema!({
        "type": "object",
        "additionalProperties": true,
        "description": "A session entry exactly as stored (pi's SessionEntry); unknown members are kept.",
        "properties": {
            "type": { "type": "string" },
            "id": { "type": "string" },
            "parentId": { "type": ["string", "null"] },
            "timestamp": { "description": "As stored: an ISO 8601 string in files pi wrote (a hand-written file may hold a number)." }
        },
        "required": ["type"]
    })
);

pi_shape!(
    /// The session header line (pi's `SessionHeader`).
    HeaderJson, "SessionHeader", |_g| json_schema!({
        "type": "object",
        "additionalProperties": true,
        "description": "The header line (pi's SessionHeader); unknown members are kept.",
        "properties": {
            "type": { "const": "session" },
            "version": { "type": "number" },
            "id": { "type": "string" },
            "timestamp": { "type": "string" },
            "cwd": { "type": "string" },
            "parentSession": { "type": "string" }
        },
        "required": ["type", "id"]
    })
);

pi_shape!(
    /// A model-visible message (pi's `AgentMessage`).
    MessageJson, "AgentMessage", |_g| json_schema!({
        "type": "object",
        "additionalProperties": true,
        "description": "A model-visible message (pi's AgentMessage: user, assistant, toolResult, system, bashExecution, custom, branchSummary, compactionSummary).",
        "properties": { "role": { "type": "string" } }
    })
);

pi_shape!(
    /// pi's `getTree()` result: root nodes.
    TreeJson, "SessionTree", |g| {
        let node = g.subschema_for::<TreeNodeJson>();
        json_schema!({
            "type": "array",
            "description": "Root nodes, in file order; children sorted by timestamp (pi's getTree).",
            "items": node
        })
    }
);

pi_shape!(
    /// One node of pi's `getTree()`.
    TreeNodeJson, "SessionTreeNode", |g| {
        let entry = g.subschema_for::<EntryJson>();
        let node = g.subschema_for::<TreeNodeJson>();
        json_schema!({
            "type": "object",
            "properties": {
                "entry": entry,
                "children": { "type": "array", "items": node },
                "label": { "description": "The resolved label (a string in files pi wrote)." },
                "labelTimestamp": { "description": "Timestamp of the label entry that set it." }
            },
            "required": ["entry", "children"]
        })
    }
);

pi_shape!(
    /// `session/getTreeFlat`: pi's tree as a flat list.
    FlatTreeJson, "SessionTreeFlat", |g| {
        let entry = g.subschema_for::<EntryAtDetailJson>();
        json_schema!({
            "type": "array",
            "description": "The nodes of pi's getTree in pre-order (a node, then its subtrees in order): the same tree without nesting, for JSON decoders that refuse deep documents.",
            "items": {
                "type": "object",
                "properties": {
                    "entry": entry,
                    "id": { "description": "With detail none, instead of entry: the entry's id as stored." },
                    "parentIndex": { "type": ["integer", "null"], "description": "Position of the parent node in the whole list (also when paging); null for a root." },
                    "depth": { "type": "integer", "description": "0 for roots." },
                    "label": { "description": "The resolved label (a string in files pi wrote)." },
                    "labelTimestamp": { "description": "Timestamp of the label entry that set it." }
                },
                "required": ["parentIndex", "depth"]
            }
        })
    }
);

pi_shape!(
    /// pi's `buildSessionProjection()` result.
    ProjectionJson, "SessionProjection", |g| {
        let entry = g.subschema_for::<EntryJson>();
        let message = g.subschema_for::<MessageJson>();
        json_schema!({
            "type": "object",
            "properties": {
                "entries": { "type": "array", "items": {
                    "type": "object",
                    "properties": { "sourceEntry": entry, "messages": { "type": "array", "items": message } },
                    "required": ["sourceEntry", "messages"]
                }},
                "messages": { "type": "array", "items": message },
                "thinkingLevel": { "type": "string" },
                "model": { "anyOf": [ { "type": "null" }, { "type": "object", "properties": { "provider": {}, "modelId": {} } } ] }
            },
            "required": ["entries", "messages", "model"]
        })
    }
);

pi_shape!(
    /// pi's `buildSessionContext()` result.
    ContextJson, "SessionContext", |g| {
        let message = g.subschema_for::<MessageJson>();
        json_schema!({
            "type": "object",
            "properties": {
                "messages": { "type": "array", "items": message },
                "thinkingLevel": { "type": "string" },
                "model": { "anyOf": [ { "type": "null" }, { "type": "object", "properties": { "provider": {}, "modelId": {} } } ] }
            },
            "required": ["messages", "model"]
        })
    }
);

pi_shape!(
    /// pi's `SessionInfo` (dates as ISO strings, `null` for an invalid date).
    SessionInfoJson, "SessionInfo", |_g| json_schema!({
        "type": "object",
        "properties": {
            "path": { "type": "string" },
            "id": { "description": "The header's id (a string in valid files)." },
            "cwd": { "type": "string" },
            "name": { "type": "string" },
            "parentSessionPath": { "type": "string" },
            "created": { "type": ["string", "null"] },
            "modified": { "type": ["string", "null"] },
            "messageCount": { "type": "integer" },
            "firstMessage": { "type": "string" },
            "allMessagesText": { "type": "string", "description": "Present unless the request set includeAllMessagesText: false." },
            "machine": { "type": "string", "description": "With `--catalog`: the machine that pushed the session." }
        },
        "required": ["path", "id", "cwd", "created", "modified", "messageCount", "firstMessage"]
    })
);

pi_shape!(
    /// One search result.
    SearchHitJson, "SearchHit", |_g| json_schema!({
        "type": "object",
        "properties": {
            "path": { "type": "string", "description": "The session file." },
            "sessionId": { "description": "The session's id (the header's)." },
            "entryId": { "type": ["string", "number", "null"], "description": "The matching entry's id as stored (a string in files pi wrote); null when the session itself matched (role `session`)." },
            "role": { "enum": ["user", "assistant", "toolResult", "custom", "bashExecution", "name", "label", "summary", "session"], "description": "What matched: a message of that role, a session name or label entry, a compaction or branch summary, or the session itself (its name, id or cwd)." },
            "snippet": { "type": "string", "description": "The text around the match, on one line." },
            "timestamp": { "type": ["string", "null"], "description": "ISO 8601: a message's own timestamp (as pi's listing uses it; the entry's when the message has none), another entry's timestamp, or the session's last activity for session hits." },
            "score": { "type": "number", "description": "Relevance: higher is better; results come best first, then newest." },
            "machine": { "type": "string", "description": "With `--catalog`: the machine that pushed the session." }
        },
        "required": ["path", "sessionId", "entryId", "role", "snippet", "timestamp", "score"]
    })
);

pi_shape!(
    /// A listing: pi's `SessionInfo[]`.
    SessionInfoListJson, "SessionInfoList", |g| {
        let info = g.subschema_for::<SessionInfoJson>();
        json_schema!({ "type": "array", "items": info })
    }
);

pi_shape!(
    /// A listing as a change to one the host holds.
    ListingDeltaJson, "ListingDelta", |g| {
        let info = g.subschema_for::<SessionInfoJson>();
        json_schema!({
            "type": "object",
            "properties": {
                "token": { "type": "string", "description": "Names this listing: pass it as `since` next time." },
                "sessions": {
                    "type": "array",
                    "items": { "anyOf": [info, { "type": "integer", "minimum": 0 }] },
                    "description": "The listing, in order: an entry is a SessionInfo, or the index of an identical entry in the listing `since` named."
                }
            },
            "required": ["token", "sessions"]
        })
    }
);

/// How much of each entry a result or a notification carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Detail {
    /// No entries (`snapshot`), or no `entry` in tree nodes (`getTreeFlat`). As a handle's detail: no snapshot,
    /// and `session/changed` entries as stored.
    #[default]
    None,
    /// Skeleton entries: `{id, parentId, type, timestamp, role?, stopReason?, hasText?, customType?, targetId?,
    /// label?, name?, preview?, bytes}` (see [`SkeletonEntryJson`]).
    Skeleton,
    /// Entries exactly as stored (as `session/getEntries` returns them).
    Full,
}

impl Detail {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Detail::None => "none",
            Detail::Skeleton => "skeleton",
            Detail::Full => "full",
        }
    }
}

pi_shape!(
    /// An entry at skeleton detail: what a tree view draws, without the body.
    SkeletonEntryJson, "SkeletonEntry", |_g| json_schema!({
        "type": "object",
        "description": "An entry at skeleton detail. id, parentId, type, timestamp, role, stopReason, customType, targetId, label and name are the stored values, copied exactly, present when the entry has them (role and stopReason: of a message entry's message; customType: custom and custom_message entries; targetId: label and context_edit entries; label: the label a label entry sets, as stored (resolve labels as pi does: in file order, a truthy label sets its target's label, anything else clears it); name: session_info entries). preview is one line of the entry's text, as a tree view shows it; bytes the size of the entry's JSON as session/getEntries returns it.",
        "properties": {
            "id": { "description": "As stored (a string in files pi wrote)." },
            "parentId": { "description": "As stored (a string, or null for a root, in files pi wrote)." },
            "type": { "description": "As stored (a string in files pi wrote)." },
            "timestamp": { "description": "As stored (an ISO 8601 string in files pi wrote)." },
            "role": { "description": "message entries: message.role." },
            "stopReason": { "description": "message entries: message.stopReason, when present." },
            "hasText": { "type": "boolean", "description": "message entries: whether message.content holds text that is not all white space (a string, or a `text` block) within its first 4 KiB of text." },
            "customType": {},
            "targetId": {},
            "label": {},
            "name": {},
            "preview": { "type": "string", "description": "At most 160 characters (then `…`) of the entry's text with white space runs made one space, from the first 4 KiB of each text: message content (text blocks as themselves, tool calls as `→ name`, images as `[image]`), `$ command` for bashExecution, the summary of compactions, branch summaries and summary messages, `thinking level → L`, `model → provider/modelId`, `target → label` for labels, the name, custom type, usage kind or context edit target. Absent when empty." },
            "bytes": { "type": "integer", "description": "Size in bytes of the entry's JSON text." }
        },
        "required": ["bytes"]
    })
);

pi_shape!(
    /// An entry whose long strings stay in the file (`session/getEntries` with `lazyOver`).
    LazyEntryJson, "LazyEntry", |g| {
        let full = g.subschema_for::<EntryJson>();
        json_schema!({
            "type": "object",
            "description": "An entry as stored, except that each string whose stored literal is longer than lazyOver bytes is null; lazy says where each one is. Entries the file does not hold exactly as they are read (migrated, re-chained or not yet written) and entries whose objects repeat a key or escape one come whole, without line and lazy.",
            "properties": {
                "entry": full,
                "line": { "type": "array", "items": { "type": "integer" }, "description": "[offset, length] of the entry's JSON text in the session file (surrounding white space excluded): a host reading a string checks that the line is still there." },
                "lazy": {
                    "type": "array",
                    "description": "[path, offset, length] per string left out: path is the keys (strings) and array indices (integers) from the entry to the string; offset and length place its literal, quotes included, in the file.",
                    "items": { "type": "array" }
                }
            },
            "required": ["entry"]
        })
    }
);

pi_shape!(
    /// An entry at the detail a handle or a request asked for.
    EntryAtDetailJson, "EntryAtDetail", |g| {
        let full = g.subschema_for::<EntryJson>();
        let skeleton = g.subschema_for::<SkeletonEntryJson>();
        let lazy = g.subschema_for::<LazyEntryJson>();
        json_schema!({
            "description": "An entry as stored (detail none or full), a skeleton entry (detail skeleton), or an entry with its long strings left in the file (getEntries with lazyOver).",
            "anyOf": [full, skeleton, lazy]
        })
    }
);

pi_shape!(
    /// A snapshot: the session's entries at a `seq`.
    SnapshotJson, "Snapshot", |g| {
        let entry = g.subschema_for::<EntryAtDetailJson>();
        json_schema!({
            "type": "object",
            "description": "Every entry (header excluded) in file order, at the detail asked, exactly as of the change numbered seq: apply session/changed notifications with a higher seq on top.",
            "properties": {
                "seq": { "type": "integer" },
                "entries": { "type": "array", "items": entry }
            },
            "required": ["seq", "entries"]
        })
    }
);

pi_shape!(
    /// Any JSON value in a result (a label, a session id as stored).
    AnyJson, "AnyValue", |_g| json_schema!({ "description": "Any JSON value, as stored." })
);

// ------------------------------------------------------------------------------------------------------------------
// Lifecycle

/// `initialize` params (all optional).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    /// The host's name and version.
    pub client_info: Option<ClientInfo>,
    /// The host's capabilities (accepted, currently unused).
    pub capabilities: Option<serde_json::Value>,
    /// The protocol version the host speaks.
    pub protocol_version: Option<String>,
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
    /// Use this cwd instead of the header's.
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

// ------------------------------------------------------------------------------------------------------------------
// Mutations

/// `session/appendMessage`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppendMessageParams {
    /// The handle.
    // Required alone (the method table checks), absent in a batch's op (the batch's is used): one params type
    // serves both, and the schema says what a host sends alone.
    #[schemars(required, with = "String")]
    pub handle: Option<String>,
    /// Fail with ContentModified unless the leaf is this id.
    pub expected_leaf_id: Option<String>,
    /// The message (pi's AgentMessage: an object with a `role`).
    pub message: PiValue,
}

/// `session/appendThinkingLevelChange`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppendThinkingLevelChangeParams {
    /// The handle.
    // Required alone (the method table checks), absent in a batch's op (the batch's is used): one params type
    // serves both, and the schema says what a host sends alone.
    #[schemars(required, with = "String")]
    pub handle: Option<String>,
    /// Fail with ContentModified unless the leaf is this id.
    pub expected_leaf_id: Option<String>,
    /// The thinking level (`off`, `low`, `high`, …).
    pub thinking_level: PiString,
}

/// `session/appendModelChange`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppendModelChangeParams {
    /// The handle.
    // Required alone (the method table checks), absent in a batch's op (the batch's is used): one params type
    // serves both, and the schema says what a host sends alone.
    #[schemars(required, with = "String")]
    pub handle: Option<String>,
    /// Fail with ContentModified unless the leaf is this id.
    pub expected_leaf_id: Option<String>,
    /// Provider.
    pub provider: PiString,
    /// Model id.
    pub model_id: PiString,
}

/// `session/appendUsage`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppendUsageParams {
    /// The handle.
    // Required alone (the method table checks), absent in a batch's op (the batch's is used): one params type
    // serves both, and the schema says what a host sends alone.
    #[schemars(required, with = "String")]
    pub handle: Option<String>,
    /// Fail with ContentModified unless the leaf is this id.
    pub expected_leaf_id: Option<String>,
    /// Usage category, e.g. `cache_warm`.
    pub kind: PiString,
    /// Provider.
    pub provider: PiString,
    /// Model.
    pub model: PiString,
    /// pi's Usage object.
    pub usage: PiValue,
    /// A qualifier (omitted when empty).
    pub note: Option<PiString>,
}

/// `session/appendCompaction`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppendCompactionParams {
    /// The handle.
    // Required alone (the method table checks), absent in a batch's op (the batch's is used): one params type
    // serves both, and the schema says what a host sends alone.
    #[schemars(required, with = "String")]
    pub handle: Option<String>,
    /// Fail with ContentModified unless the leaf is this id.
    pub expected_leaf_id: Option<String>,
    /// The summary.
    pub summary: PiString,
    /// The first entry kept before the compaction; `null` keeps none (the entry's own id is stored).
    pub first_kept_entry_id: Option<String>,
    /// Tokens before compaction.
    pub tokens_before: PiValue,
    /// Implementation data.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<PiValue>")]
    pub details: Option<PiValue>,
    /// True for extension-made compactions.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<PiValue>")]
    pub from_hook: Option<PiValue>,
    /// Usage of the summarising call.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<PiValue>")]
    pub usage: Option<PiValue>,
    /// The checkpoint system message; default: pi's replay of the current system messages.
    pub system_message: Option<PiValue>,
    /// The complete post-compaction messages (the seed's checkpoint); `firstKeptEntryId` is written too.
    pub retained_tail: Option<Vec<PiValue>>,
}

/// `session/appendCustomEntry`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppendCustomEntryParams {
    /// The handle.
    // Required alone (the method table checks), absent in a batch's op (the batch's is used): one params type
    // serves both, and the schema says what a host sends alone.
    #[schemars(required, with = "String")]
    pub handle: Option<String>,
    /// Fail with ContentModified unless the leaf is this id.
    pub expected_leaf_id: Option<String>,
    /// The extension's type name.
    pub custom_type: PiString,
    /// The extension's data.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<PiValue>")]
    pub data: Option<PiValue>,
}

/// `session/appendSessionInfo`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppendSessionInfoParams {
    /// The handle.
    // Required alone (the method table checks), absent in a batch's op (the batch's is used): one params type
    // serves both, and the schema says what a host sends alone.
    #[schemars(required, with = "String")]
    pub handle: Option<String>,
    /// Fail with ContentModified unless the leaf is this id.
    pub expected_leaf_id: Option<String>,
    /// The name (line breaks become spaces, ends trimmed; empty clears).
    pub name: PiString,
}

/// `session/appendCustomMessageEntry`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppendCustomMessageEntryParams {
    /// The handle.
    // Required alone (the method table checks), absent in a batch's op (the batch's is used): one params type
    // serves both, and the schema says what a host sends alone.
    #[schemars(required, with = "String")]
    pub handle: Option<String>,
    /// Fail with ContentModified unless the leaf is this id.
    pub expected_leaf_id: Option<String>,
    /// The extension's type name.
    pub custom_type: PiString,
    /// A string or text/image blocks.
    pub content: PiValue,
    /// Whether the TUI shows it.
    pub display: PiValue,
    /// Extension data (not sent to the model).
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<PiValue>")]
    pub details: Option<PiValue>,
}

/// `session/appendContextEdit`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppendContextEditParams {
    /// The handle.
    // Required alone (the method table checks), absent in a batch's op (the batch's is used): one params type
    // serves both, and the schema says what a host sends alone.
    #[schemars(required, with = "String")]
    pub handle: Option<String>,
    /// Fail with ContentModified unless the leaf is this id.
    pub expected_leaf_id: Option<String>,
    /// The entry to edit (on the active branch).
    pub target_id: String,
    /// Required, and may be `null`: `null` omits the target from context; `{content: string | array}` replaces its
    /// content.
    pub replacement: PiValue,
}

/// `session/appendLabelChange`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppendLabelChangeParams {
    /// The handle.
    // Required alone (the method table checks), absent in a batch's op (the batch's is used): one params type
    // serves both, and the schema says what a host sends alone.
    #[schemars(required, with = "String")]
    pub handle: Option<String>,
    /// Fail with ContentModified unless the leaf is this id.
    pub expected_leaf_id: Option<String>,
    /// The entry to label.
    pub target_id: String,
    /// The label; missing or empty clears.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<PiValue>")]
    pub label: Option<PiValue>,
}

/// `session/branch`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BranchParams {
    /// The handle.
    // Required alone (the method table checks), absent in a batch's op (the batch's is used): one params type
    // serves both, and the schema says what a host sends alone.
    #[schemars(required, with = "String")]
    pub handle: Option<String>,
    /// Fail with ContentModified unless the leaf is this id.
    pub expected_leaf_id: Option<String>,
    /// The entry to continue from.
    pub entry_id: String,
}

/// `session/resetLeaf`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResetLeafParams {
    /// The handle.
    // Required alone (the method table checks), absent in a batch's op (the batch's is used): one params type
    // serves both, and the schema says what a host sends alone.
    #[schemars(required, with = "String")]
    pub handle: Option<String>,
    /// Fail with ContentModified unless the leaf is this id.
    pub expected_leaf_id: Option<String>,
}

/// `session/branchWithSummary`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BranchWithSummaryParams {
    /// The handle.
    // Required alone (the method table checks), absent in a batch's op (the batch's is used): one params type
    // serves both, and the schema says what a host sends alone.
    #[schemars(required, with = "String")]
    pub handle: Option<String>,
    /// Fail with ContentModified unless the leaf is this id.
    pub expected_leaf_id: Option<String>,
    /// The entry to continue from (`null`: a new root).
    pub entry_id: Option<String>,
    /// The summary of the abandoned branch.
    pub summary: PiString,
    /// Implementation data.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<PiValue>")]
    pub details: Option<PiValue>,
    /// True for extension-made summaries.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<PiValue>")]
    pub from_hook: Option<PiValue>,
    /// Usage of the summarising call.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<PiValue>")]
    pub usage: Option<PiValue>,
}

/// `session/createBranchedSession`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateBranchedSessionParams {
    /// The handle.
    pub handle: String,
    /// Fail with ContentModified unless the leaf is this id.
    pub expected_leaf_id: Option<String>,
    /// The last entry of the path to keep.
    pub leaf_id: String,
    /// As on the opening methods: return the new session's snapshot, and set the handle's detail from now on
    /// (default: keep it).
    pub snapshot: Option<Detail>,
}

/// `session/appendBatch`: several mutations as one write.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppendBatchParams {
    /// The handle.
    pub handle: String,
    /// Fail with ContentModified (writing nothing) unless the leaf is this id before the first op.
    pub expected_leaf_id: Option<String>,
    /// The ops, applied in order, each seeing what the ones before it did.
    pub ops: Vec<BatchOp>,
}

/// One op of `session/appendBatch`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct BatchOp {
    /// Any `session/append…` method, `session/branch`, `session/resetLeaf` or `session/branchWithSummary`.
    pub method: String,
    /// That method's params without `handle` (and without `expectedLeafId`: give it on the batch). `targetId`
    /// (appendLabelChange, appendContextEdit) and `entryId` (branch, branchWithSummary) may be `{"op": n}`: the
    /// entry op `n` of this batch (an earlier one) appends.
    #[schemars(with = "Option<serde_json::Map<String, serde_json::Value>>")]
    pub params: Option<Box<RawValue>>,
}

/// `session/appendBatch` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct AppendBatchResult {
    /// What each op's method returns alone, in order: `{id}`, `{entry}` for appendUsage, `null` for branch and
    /// resetLeaf.
    #[schemars(with = "Vec<serde_json::Value>")]
    pub results: Vec<RawJson>,
}

/// The id of an appended entry.
#[derive(Debug, Serialize, JsonSchema)]
pub struct IdResult {
    /// The new entry's id.
    pub id: String,
}

/// `session/appendUsage` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct EntryResult {
    /// The appended entry.
    pub entry: EntryJson,
}

/// `session/createBranchedSession` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct PathResult {
    /// The new file (`null` in memory).
    pub path: Option<String>,
    /// With `snapshot` `skeleton` or `full`: the new session's entries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotJson>,
}

// ------------------------------------------------------------------------------------------------------------------
// Reads

/// Params naming an entry.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct EntryIdParams {
    /// The handle.
    pub handle: String,
    /// The entry id.
    pub id: String,
}

/// `session/getChildren`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChildrenParams {
    /// The handle.
    pub handle: String,
    /// The parent id.
    pub parent_id: String,
}

/// `session/getBranch`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BranchPathParams {
    /// The handle.
    pub handle: String,
    /// Where the path ends (default: the leaf).
    pub from_id: Option<String>,
}

/// `session/getEntries`: the entries with these ids, or a page of entries in file order.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct EntriesParams {
    /// The handle.
    pub handle: String,
    /// These entries, in this order (`null` for an id no entry has; an id held by several entries gives the last,
    /// as `getEntry`). Not with `offset` or `limit`.
    pub ids: Option<Vec<String>>,
    /// Entries to skip.
    pub offset: Option<usize>,
    /// At most this many.
    pub limit: Option<usize>,
    /// `full` (default: entries as stored) or `skeleton`.
    pub detail: Option<Detail>,
    /// With detail `full`: leave in the file every string whose stored literal (quotes included) is longer than
    /// this many bytes, so a host reads only the bodies it touches. Each entry is then a `LazyEntry`: `{entry,
    /// line?, lazy?}`, the entry as stored with those strings `null`, the line's `[offset, length]` in the file,
    /// and `[path, offset, length]` for each string left out (path: keys and array indices from the entry).
    /// With `offset`/`limit` only.
    #[serde(rename = "lazyOver")]
    pub lazy_over: Option<usize>,
}

/// `session/getTreeFlat`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct TreeFlatParams {
    /// The handle.
    pub handle: String,
    /// What each node's `entry` is: `full` (default: the entry as stored), `skeleton`, or `none` (no `entry`;
    /// the node has the entry's `id` instead).
    pub detail: Option<Detail>,
    /// Nodes to skip (in pre-order; `parentIndex` stays the position in the whole list).
    pub offset: Option<usize>,
    /// At most this many nodes.
    pub limit: Option<usize>,
}

/// A problem found while loading a file.
#[derive(Debug, Serialize, JsonSchema)]
pub struct WarningJson {
    /// 1-based line number (0: the whole file).
    pub line: u32,
    /// `malformed_line`, `torn_tail`, `missing_final_newline`, `non_object_line`, `extra_header`, `duplicate_id`,
    /// `missing_parent`, `self_parent`, `parent_cycle`, `legacy_version`, `unusable_entry` (pi loads the entry but
    /// some reads throw on it; here those reads fail with an error naming it).
    pub kind: String,
    /// For a person.
    pub message: String,
}

// ------------------------------------------------------------------------------------------------------------------
// Catalog

/// `sessions/list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListParams {
    /// The working directory.
    pub cwd: String,
    /// The session directory (default: pi's directory for `cwd`).
    pub session_dir: Option<String>,
    /// Send `$/progress` with this token while loading.
    pub progress_token: Option<ProgressToken>,
    /// `false` leaves `allMessagesText` out (default `true`, pi's exact result). It holds every user and
    /// assistant text of every session, most of a listing's size; `sessions/search` searches without it.
    pub include_all_messages_text: Option<bool>,
}

/// `sessions/listAll`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListAllParams {
    /// A directory to list flat (default: every project directory under the sessions root).
    pub session_dir: Option<String>,
    /// Send `$/progress` with this token while loading.
    pub progress_token: Option<ProgressToken>,
    /// `false` leaves `allMessagesText` out (default `true`, pi's exact result).
    pub include_all_messages_text: Option<bool>,
}

/// `sessions/listDelta`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListDeltaParams {
    /// The working directory: with it, the listing is `sessions/list`'s; without, `sessions/listAll`'s.
    pub cwd: Option<String>,
    /// The session directory, as `sessions/list` or `sessions/listAll` take it.
    pub session_dir: Option<String>,
    /// The `token` of an earlier `sessions/listDelta` answer that the host still holds. An unknown or expired
    /// token (this server keeps the last few) only means every entry comes in full.
    pub since: Option<String>,
    /// Send `$/progress` with this token while loading.
    pub progress_token: Option<ProgressToken>,
    /// `false` leaves `allMessagesText` out (default `true`, pi's exact result).
    pub include_all_messages_text: Option<bool>,
}

/// `sessions/findById`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FindByIdParams {
    /// The working directory.
    pub cwd: String,
    /// The exact session id.
    pub id: String,
    /// The session directory (default: pi's directory for `cwd`).
    pub session_dir: Option<String>,
}

/// `sessions/search`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SearchParams {
    /// pi's `/resume` query: space-separated words (each must match, as a substring of an entry's text or of the
    /// session's name, id or cwd; a word may also match the name or cwd fuzzily), `"exact phrases"`, or
    /// `re:<regex>` (case-insensitive). At most 4096 bytes and 64 words (each word of a phrase counts); a longer
    /// query is an `invalid_params` error.
    pub query: String,
    /// Search this project's sessions only (as `sessions/list` finds them); default: every session.
    pub cwd: Option<String>,
    /// With `cwd`: the session directory to use instead of pi's directory for it. Without: search only this
    /// directory (as `sessions/listAll` with it).
    pub session_dir: Option<String>,
    /// At most this many results (default 50).
    pub limit: Option<usize>,
    /// Skip this many of the best results first (default 0): the next page starts at the previous page's offset
    /// plus its limit. Results are in a total order (relevance, time, path, place in the file), so the pages of
    /// unchanged sessions neither repeat nor skip a result.
    pub offset: Option<usize>,
    /// Only these roles: `user`, `assistant`, `toolResult`, `custom`, `bashExecution`, `name`, `label`,
    /// `summary`, or `session` (a session whose name, id or cwd matches).
    pub roles: Option<Vec<String>>,
    /// Send `$/progress` with this token while the catalog and the search index catch up (`stage` says which).
    pub progress_token: Option<ProgressToken>,
}

/// A progress token: a string or an integer (LSP's `ProgressToken`).
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum ProgressToken {
    /// An integer token.
    Number(i64),
    /// A string token.
    String(String),
}

/// `sessions/searchPage` result.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SearchPage {
    /// The results from `offset` on, at most `limit`, best first (as `sessions/search` returns them).
    pub hits: Vec<SearchHitJson>,
    /// How many results the query has in all (every matching entry, and every session matched by its own name,
    /// id or cwd), counted whatever `offset` and `limit` are.
    pub total: usize,
    /// How many sessions those results are in.
    pub sessions: usize,
    /// The offset of the first of `hits`.
    pub offset: usize,
}

/// `sessions/findById` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FindResult {
    /// The file, or `null`.
    pub path: Option<String>,
    /// With `--catalog`: the machine the file is on (absent without a catalog).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
}

// ------------------------------------------------------------------------------------------------------------------
// Notifications

/// `session/changed`: sent after every successful mutation, before its response.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionChanged {
    /// The handle.
    pub handle: String,
    /// The session id after the change.
    pub session_id: AnyJson,
    /// 1 for the first change after open, +1 per change on this handle (across rebinds).
    pub seq: u64,
    /// `external` when another process changed the file (a watched handle, or a check before a write); absent
    /// for the handle's own mutations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// The leaf after the change.
    pub leaf_id: Option<AnyJson>,
    /// What changed.
    pub change: Change,
}

/// A change: what a mirror of the session applies to stay equal to it (see `protocol/README.md`).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Change {
    /// Entries were added at the end of the file, in file order (every append method, `branchWithSummary`, and
    /// what another process appended), at the handle's detail. The leaf is the notification's `leafId`.
    Append {
        /// The new entries.
        entries: Vec<EntryAtDetailJson>,
    },
    /// The leaf moved (`branch`, `resetLeaf`; sent even when it did not move).
    #[serde(rename_all = "camelCase")]
    Leaf {
        /// The new leaf.
        leaf_id: Option<AnyJson>,
    },
    /// The handle now holds another session (`newSession`, `setSessionFile`, `createBranchedSession`).
    Rebind {
        /// What `session/getState` now returns.
        state: Box<SessionState>,
        /// At detail `skeleton` or `full`: every entry of the session now held. Absent at detail `none`, and
        /// when the entries could not be read (the file changed meanwhile): take one with `session/changesSince`.
        #[serde(skip_serializing_if = "Option::is_none")]
        snapshot: Option<SnapshotJson>,
    },
    /// The file was truncated, rewritten or replaced by another process, or appeared where the handle had
    /// nothing on disk yet (pi writes a new session's file at its first message), and was read again from
    /// scratch.
    Reset {
        /// What `session/getState` now returns.
        state: Box<SessionState>,
        /// At detail `skeleton` or `full`: every entry as now read (absent as for `rebind`).
        #[serde(skip_serializing_if = "Option::is_none")]
        snapshot: Option<SnapshotJson>,
    },
    /// The file was deleted by another process. The session stays open; the next write puts the file back,
    /// header and all.
    Deleted {},
}

/// `session/changesSince` result: either `changes` or `state` and `snapshot`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChangesSinceResult {
    /// Every `session/changed` (its params, as sent) with a `seq` above the one asked, in order, when the server
    /// still holds them all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changes: Option<Vec<SessionChanged>>,
    /// Otherwise: the state now...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<Box<SessionState>>,
    /// ...and every entry, at the handle's detail (`full` for a handle at detail `none`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotJson>,
}

/// `$/progress` params.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Progress {
    /// The token from the request.
    pub token: ProgressToken,
    /// Where it is.
    pub value: ProgressValue,
}

/// Progress of a long read.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ProgressValue {
    /// Where in the sequence: one `begin` per stage, `report`s, then one `end` for the request.
    pub kind: ProgressKind,
    /// Files done so far in this stage.
    pub loaded: usize,
    /// Files in this stage.
    pub total: usize,
    /// For `sessions/search`: which stage; each starts with its own `begin`, and `end` carries the last one's
    /// counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage: Option<ProgressStage>,
}

/// `ProgressValue.kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ProgressKind {
    /// A stage starts (`loaded` 0).
    Begin,
    /// Files done so far.
    Report,
    /// The request's work is done (sent before its response).
    End,
}

/// `ProgressValue.stage`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ProgressStage {
    /// Bringing the catalog up to date (stat, and read what changed).
    Listing,
    /// Extracting searchable text the index does not hold yet.
    Indexing,
}

/// `$/cancelRequest` params (client → server).
#[derive(Debug, Deserialize, JsonSchema)]
pub struct CancelParams {
    /// The id of the request to cancel.
    pub id: serde_json::Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse<T: serde::de::DeserializeOwned>(s: &str) -> Result<T, String> {
        let mut d = serde_json::Deserializer::from_str(s);
        serde_path_to_error::deserialize(&mut d).map_err(|e| format!("{} at {}", e.inner(), e.path()))
    }

    #[test]
    fn lone_surrogates_in_params_are_accepted() {
        let p: AppendSessionInfoParams = parse(r#"{"handle":"h","name":"cut \ud83d"}"#).unwrap();
        assert_eq!(p.name.0.to_json(), "\"cut \\ud83d\"");
        let m: AppendMessageParams = parse(r#"{"handle":"h","message":{"role":"user","content":"\udc00"}}"#).unwrap();
        assert!(matches!(m.message.0, Json::Object(_)));
    }

    #[test]
    fn bad_params_name_the_field() {
        let e = parse::<AppendSessionInfoParams>(r#"{"handle":"h","name":5}"#).unwrap_err();
        assert!(e.ends_with("at name"), "{e}");
        let e = parse::<AppendCustomEntryParams>(r#"{"handle":7,"customType":"x"}"#).unwrap_err();
        assert!(e.ends_with("at handle"), "{e}");
    }

    #[test]
    fn a_value_of_millions_of_tiny_members_is_refused_before_it_is_parsed() {
        let zeros = vec!["0"; 2_000_000].join(",");
        let e = parse::<AppendMessageParams>(&format!(
            r#"{{"handle":"h","message":{{"role":"user","content":[{zeros}]}}}}"#
        ))
        .unwrap_err();
        assert!(e.contains("smaller parts") && e.ends_with("at message"), "{e}");
        // The same size in one string is fine: it parses to about its own size.
        let text = "x".repeat(4_000_000);
        let m: AppendMessageParams =
            parse(&format!(r#"{{"handle":"h","message":{{"role":"user","content":"{text}"}}}}"#)).unwrap();
        assert!(matches!(m.message.0, Json::Object(_)));
    }

    #[test]
    fn null_is_kept_apart_from_missing_for_pass_through_values() {
        let p: AppendCustomEntryParams = parse(r#"{"handle":"h","customType":"x","data":null}"#).unwrap();
        assert_eq!(p.data, Some(PiValue(Json::Null)));
        let p: AppendCustomEntryParams = parse(r#"{"handle":"h","customType":"x"}"#).unwrap();
        assert_eq!(p.data, None);
    }
}
