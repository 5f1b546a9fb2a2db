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
            "id": { "description": "As stored: a string in files pi wrote (a hand-written file may hold a number, which pi keeps)." },
            "parentId": { "description": "As stored: a string, or null for a root, in files pi wrote (a hand-written file may hold a number)." },
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

    /// Whether entries at this detail copy bytes out of the session file, which another process may have rewritten
    /// since they were read, so a result made of them is checked to be JSON before it goes out. Skeletons are this
    /// process's own JSON (made from a line as it was scanned, or kept under a CRC): checking their megabytes again
    /// was a fifth of a skeleton snapshot's cost.
    pub fn copies_file_bytes(self) -> bool {
        self != Detail::Skeleton
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

// The wire types by concern (after `pi_shape!`, which they use).
mod mutation;
mod open;
mod read;
mod unasked;

pub use self::mutation::*;
pub use self::open::*;
pub use self::read::*;
pub use self::unasked::*;

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
