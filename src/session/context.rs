//! Context building: what the model sees, from the leaf's path, honouring the latest compaction and context edits.
//!
//! This is pi's `buildContextEntries` / `buildSessionProjection` / `buildSessionContext`, plus one extension the
//! seed asks for: a compaction that carries `retainedTail` (the exact post-compaction messages) contributes those
//! messages instead of the `firstKeptEntryId` range (pi 1.6.0 ignores the field; see `docs/compatibility.md`).
//!
//! Messages that pass through unchanged are not parsed: a [`ContextMessage::Stored`] names the entry whose
//! `message` member it is, so a 2 GB tool-result image is copied from the file when written out, never held twice.

use indexmap::IndexMap;

use super::entry::{Detail, EntryType, MessageShape, Record, Role};
use super::error::{Error, Result};
use super::js::{convert, to_js_string};
use super::json::{JsString, Json, Object};
use super::key::Key;
use super::tree::TreeIndex;

/// Access to entry bodies for context building.
pub trait Bodies {
    /// The record's bytes (patched), as in the file.
    fn bytes(&self, record: usize) -> Result<Vec<u8>>;

    /// The record parsed.
    fn json(&self, record: usize) -> Result<Json> {
        let bytes = self.bytes(record)?;
        Json::parse(&bytes).map_err(|e| Error::InvalidEntry {
            line: 0,
            message: format!("entry body no longer parses ({e}); the file changed on disk"),
        })
    }
}

/// One model-visible message.
#[derive(Clone, Debug, PartialEq)]
pub enum ContextMessage {
    /// The `message` member of this record, exactly as stored.
    Stored(usize),
    /// A message built or changed while projecting.
    Value(Json),
}

/// One context entry and the messages it contributes.
#[derive(Clone, Debug, PartialEq)]
pub struct ProjectedEntry {
    /// The source record.
    pub record: usize,
    /// Its messages after context edits.
    pub messages: Vec<ContextMessage>,
}

/// The model selected on the path: `{provider, modelId}` (members may be undefined).
#[derive(Clone, Debug, PartialEq)]
pub struct ModelRef {
    /// `provider`.
    pub provider: Option<Json>,
    /// `modelId`.
    pub model_id: Option<Json>,
}

/// pi's `SessionProjection`.
#[derive(Clone, Debug, PartialEq)]
pub struct Projection {
    /// Projected context entries.
    pub entries: Vec<ProjectedEntry>,
    /// The thinking level (None = `undefined`, when a `thinking_level_change` had no value).
    pub thinking_level: Option<Json>,
    /// The model, or None for `null`.
    pub model: Option<ModelRef>,
}

impl Projection {
    /// All messages, flattened (`buildSessionContext().messages`).
    pub fn messages(&self) -> impl Iterator<Item = &ContextMessage> {
        self.entries.iter().flat_map(|e| e.messages.iter())
    }
}

/// How context is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContextOptions {
    /// Use a compaction's `retainedTail` when present (the seed's checkpoint). Off reproduces pi 1.6.0, which
    /// ignores the field.
    pub honour_retained_tail: bool,
}

impl Default for ContextOptions {
    fn default() -> Self {
        ContextOptions { honour_retained_tail: true }
    }
}

/// The error for a read pi's JavaScript throws on because of entry `r`, naming it.
fn type_error(r: &Record, what: &str) -> Error {
    Error::InvalidEntry {
        line: r.line,
        message: format!("{}: {what} (pi 1.6.0 throws a TypeError here)", entry_name(r)),
    }
}

/// `entry "id"` (or `entry (no id)`), for messages.
pub fn entry_name(r: &Record) -> String {
    match r.id.to_json_text() {
        Some(id) => format!("entry {id}"),
        None => "entry (no id)".to_owned(),
    }
}

/// Reading `entry.message.role` as pi does: a TypeError when the message is null or missing.
fn message_role(r: &Record) -> Result<Role> {
    if r.message.property_access_throws() {
        return Err(type_error(r, "message entry has no message object"));
    }
    Ok(if r.message == MessageShape::Object { r.role } else { Role::Other })
}

/// `buildContextEntries()`: record indices.
pub fn context_entries(
    records: &[Record],
    tree: &TreeIndex,
    bodies: &dyn Bodies,
    options: ContextOptions,
) -> Result<Vec<usize>> {
    let path = tree.context_path(records);
    entries_for_path(records, &path, bodies, options)
}

fn entries_for_path(
    records: &[Record],
    path: &[usize],
    bodies: &dyn Bodies,
    options: ContextOptions,
) -> Result<Vec<usize>> {
    let Some(&compaction) = path.iter().rev().find(|&&i| records[i].kind == EntryType::Compaction) else {
        return Ok(path.to_vec());
    };
    let c = &records[compaction];
    let Some(compaction_idx) = path.iter().position(|&i| records[i].id == c.id) else {
        return Ok(path.to_vec());
    };
    let mut out = vec![compaction];
    let has_tail = options.honour_retained_tail && retained_tail(bodies, compaction)?.is_some();
    if !has_tail {
        let first_kept = match &c.detail {
            Detail::Compaction(c) => c.first_kept.clone(),
            _ => Key::Undefined,
        };
        let mut found = false;
        for &i in &path[..compaction_idx] {
            let r = &records[i];
            if r.id == first_kept {
                found = true;
            }
            if found && !(r.kind == EntryType::Message && message_role(r)? == Role::System) {
                out.push(i);
            }
        }
    }
    out.extend_from_slice(&path[compaction_idx + 1..]);
    Ok(out)
}

/// The compaction's `retainedTail`, when it is an array.
fn retained_tail(bodies: &dyn Bodies, compaction: usize) -> Result<Option<Vec<Json>>> {
    let bytes = bodies.bytes(compaction)?;
    // Cheap test before parsing: most compactions have no tail.
    if memchr::memmem::find(&bytes, b"retainedTail").is_none() {
        return Ok(None);
    }
    match bodies.json(compaction)?.get("retainedTail") {
        Some(Json::Array(items)) => Ok(Some(items.clone())),
        _ => Ok(None),
    }
}

/// `buildSessionProjection()`.
pub fn projection(
    records: &[Record],
    tree: &TreeIndex,
    bodies: &dyn Bodies,
    options: ContextOptions,
) -> Result<Projection> {
    let path = tree.context_path(records);
    let (thinking_level, model) = settings(records, &path, bodies)?;
    let entries = entries_for_path(records, &path, bodies, options)?;
    let mut edits: IndexMap<Key, usize> = IndexMap::new();
    for &i in &entries {
        if let Detail::ContextEdit(e) = &records[i].detail {
            edits.insert(e.target.clone(), i);
        }
    }
    let mut projected = Vec::with_capacity(entries.len());
    for (index, &i) in entries.iter().enumerate() {
        let r = &records[i];
        let messages = if r.kind == EntryType::Compaction && index > 0 {
            // An older compaction inside the kept range: only the newest one (at index 0) speaks.
            Vec::new()
        } else {
            let edit = edits.get(&r.id).copied();
            project_entry(records, i, edit, bodies, options)?
        };
        projected.push(ProjectedEntry { record: i, messages });
    }
    Ok(Projection { entries: projected, thinking_level, model })
}

/// Thinking level and model from the full path (not the compacted one). pi assigns them entry by entry, so the
/// last setter of each wins: only those two bodies are parsed (parsing every assistant message on a long path
/// was most of the cost of a context), but every message's role is still read, as pi reads it (and throws on a
/// message without one).
fn settings(records: &[Record], path: &[usize], bodies: &dyn Bodies) -> Result<(Option<Json>, Option<ModelRef>)> {
    let mut last_thinking = None;
    let mut last_model = None;
    for &i in path {
        let r = &records[i];
        match r.kind {
            EntryType::ThinkingLevelChange => last_thinking = Some(i),
            EntryType::ModelChange => last_model = Some(i),
            EntryType::Message if message_role(r)? == Role::Assistant => last_model = Some(i),
            EntryType::Session
            | EntryType::Message
            | EntryType::Usage
            | EntryType::Compaction
            | EntryType::BranchSummary
            | EntryType::Custom
            | EntryType::CustomMessage
            | EntryType::ContextEdit
            | EntryType::Label
            | EntryType::SessionInfo
            | EntryType::Other => {}
        }
    }
    let thinking_level = match last_thinking {
        Some(i) => bodies.json(i)?.get("thinkingLevel").cloned(),
        None => Some(Json::str("off")),
    };
    let model = match last_model {
        None => None,
        Some(i) if records[i].kind == EntryType::ModelChange => {
            let body = bodies.json(i)?;
            Some(ModelRef { provider: body.get("provider").cloned(), model_id: body.get("modelId").cloned() })
        }
        Some(i) => {
            let body = bodies.json(i)?;
            let message = body.get("message");
            Some(ModelRef {
                provider: message.and_then(|m| m.get("provider")).cloned(),
                model_id: message.and_then(|m| m.get("model")).cloned(),
            })
        }
    };
    Ok((thinking_level, model))
}

/// `{ ...message, content }` (content None = the member present but `undefined`, which JSON drops).
fn with_content(message: &Json, content: Option<Json>) -> Json {
    let mut o = message.as_object().cloned().unwrap_or_default();
    match content {
        Some(c) => o.insert("content", c),
        None => {
            o.remove("content");
        }
    }
    Json::Object(o)
}

/// The `message` member of a message record.
fn stored_message(bodies: &dyn Bodies, i: usize) -> Result<Json> {
    Ok(bodies.json(i)?.get("message").cloned().unwrap_or(Json::Null))
}

/// `sessionEntryToContextMessages` with pi's null-content repair applied to one message value.
fn repair_message(message: Json) -> Json {
    let role = message.get("role").and_then(Json::as_js_str).map(|s| Role::from_name(s.as_bytes()));
    let nullish = message.as_object().is_some_and(|o| matches!(o.get("content"), None | Some(Json::Null)));
    match role {
        Some(Role::System) if nullish => with_content(&message, Some(Json::str(""))),
        Some(Role::User | Role::Assistant | Role::ToolResult) if nullish => {
            with_content(&message, Some(Json::Array(Vec::new())))
        }
        _ => message,
    }
}

fn entry_messages(
    records: &[Record],
    i: usize,
    bodies: &dyn Bodies,
    options: ContextOptions,
) -> Result<Vec<ContextMessage>> {
    let r = &records[i];
    let ms = |body: &Json| Json::number(super::line::new_date_ms(body.get("timestamp")));
    Ok(match r.kind {
        EntryType::Message => {
            let role = message_role(r)?;
            let needs_repair = r.message == MessageShape::Object
                && r.content_nullish
                && matches!(role, Role::System | Role::User | Role::Assistant | Role::ToolResult);
            if needs_repair {
                vec![ContextMessage::Value(repair_message(stored_message(bodies, i)?))]
            } else {
                vec![ContextMessage::Stored(i)]
            }
        }
        EntryType::CustomMessage => {
            let body = bodies.json(i)?;
            let mut m = Object::new();
            m.insert("role", Json::str("custom"));
            if let Some(v) = body.get("customType") {
                m.insert("customType", v.clone());
            }
            let content = match body.get("content") {
                None | Some(Json::Null) => Json::Array(Vec::new()),
                Some(v) => v.clone(),
            };
            m.insert("content", content);
            for key in ["display", "details"] {
                if let Some(v) = body.get(key) {
                    m.insert(key, v.clone());
                }
            }
            m.insert("timestamp", ms(&body));
            vec![ContextMessage::Value(Json::Object(m))]
        }
        EntryType::BranchSummary => {
            let body = bodies.json(i)?;
            match body.get("summary") {
                Some(summary) if summary.truthy() => {
                    let mut m = Object::new();
                    m.insert("role", Json::str("branchSummary"));
                    m.insert("summary", summary.clone());
                    if let Some(v) = body.get("fromId") {
                        m.insert("fromId", v.clone());
                    }
                    m.insert("timestamp", ms(&body));
                    vec![ContextMessage::Value(Json::Object(m))]
                }
                _ => Vec::new(),
            }
        }
        EntryType::Compaction => {
            let body = bodies.json(i)?;
            let mut m = Object::new();
            m.insert("role", Json::str("compactionSummary"));
            if let Some(v) = body.get("summary") {
                m.insert("summary", v.clone());
            }
            if let Some(v) = body.get("tokensBefore") {
                m.insert("tokensBefore", v.clone());
            }
            m.insert("timestamp", ms(&body));
            let mut out = Vec::new();
            if let Some(system) = body.get("systemMessage").filter(|s| s.truthy()) {
                out.push(ContextMessage::Value(system.clone()));
            }
            out.push(ContextMessage::Value(Json::Object(m)));
            if options.honour_retained_tail {
                if let Some(Json::Array(tail)) = body.get("retainedTail") {
                    out.extend(tail.iter().cloned().map(repair_message).map(ContextMessage::Value));
                }
            }
            out
        }
        // What pi's buildSessionContext leaves out of the model's messages, named one by one so an entry type pi
        // adds is a decision here.
        EntryType::Session
        | EntryType::ThinkingLevelChange
        | EntryType::ModelChange
        | EntryType::Usage
        | EntryType::Custom
        | EntryType::ContextEdit
        | EntryType::Label
        | EntryType::SessionInfo
        | EntryType::Other => Vec::new(),
    })
}

fn project_entry(
    records: &[Record],
    i: usize,
    edit: Option<usize>,
    bodies: &dyn Bodies,
    options: ContextOptions,
) -> Result<Vec<ContextMessage>> {
    let base = entry_messages(records, i, bodies, options)?;
    let Some(edit) = edit else { return Ok(base) };
    let replacement = bodies.json(edit)?.get("replacement").cloned();
    if replacement == Some(Json::Null) {
        return Ok(Vec::new());
    }
    let mut out = Vec::with_capacity(base.len());
    for m in base {
        let (value, role) = match &m {
            ContextMessage::Stored(j) => {
                let r = &records[*j];
                let role = if r.message == MessageShape::Object { r.role } else { Role::Other };
                if !matches!(role, Role::User | Role::Assistant | Role::ToolResult | Role::Custom) {
                    out.push(m);
                    continue;
                }
                (stored_message(bodies, *j)?, role)
            }
            ContextMessage::Value(v) => {
                let role =
                    v.get("role").and_then(Json::as_js_str).map_or(Role::Other, |s| Role::from_name(s.as_bytes()));
                (v.clone(), role)
            }
        };
        if !matches!(role, Role::User | Role::Assistant | Role::ToolResult | Role::Custom) {
            out.push(m);
            continue;
        }
        let content = match &replacement {
            None => return Err(type_error(&records[edit], "context edit has no replacement")),
            Some(Json::Object(o)) => o.get("content").cloned(),
            Some(_) => None,
        };
        let content = match &content {
            Some(Json::String(text)) if matches!(role, Role::Assistant | Role::ToolResult) => {
                Some(text_blocks(text.clone()))
            }
            _ => content,
        };
        out.push(ContextMessage::Value(with_content(&value, content)));
    }
    Ok(out)
}

/// `[{type: "text", text}]`.
pub fn text_blocks(text: JsString) -> Json {
    let mut block = Object::new();
    block.insert("type", Json::str("text"));
    block.insert("text", Json::String(text));
    Json::Array(vec![Json::Object(block)])
}

/// The value of a context message (parsing a stored one).
pub fn message_value(bodies: &dyn Bodies, m: &ContextMessage) -> Result<Json> {
    match m {
        ContextMessage::Stored(i) => stored_message(bodies, *i),
        ContextMessage::Value(v) => Ok(v.clone()),
    }
}

/// pi-ai's `getCurrentSystemMessage`: every system message replayed into one (content joined with blank lines,
/// sections patched by name, tools removed then added by name), or None when there is nothing to replay.
pub fn current_system_message(messages: &[Json]) -> Result<Option<Json>> {
    let mut content: Vec<JsString> = Vec::new();
    let mut sections: IndexMap<JsString, Json> = IndexMap::new();
    let mut timestamp: Option<Json> = None;
    let is_system = |m: &Json| m.get("role").and_then(Json::as_js_str).is_some_and(|r| r.eq_str("system"));
    for m in messages.iter().filter(|m| is_system(m)) {
        // `timestamp ??= message.timestamp`: null counts as unset too.
        if matches!(timestamp, None | Some(Json::Null)) {
            timestamp = m.get("timestamp").cloned();
        }
        let text = content_text(m.get("content"))?;
        if !text.is_empty() {
            content.push(text);
        }
        match m.get("sections") {
            None | Some(Json::Null) => {}
            Some(Json::Object(o)) => {
                for (name, value) in o.js_order() {
                    if *value == Json::Null {
                        sections.shift_remove(name);
                    } else {
                        sections.insert(name.clone(), value.clone());
                    }
                }
            }
            Some(_) => {}
        }
    }
    let tools = current_tools(messages.iter().filter(|m| is_system(m)))?;
    if timestamp.is_none() && tools.is_empty() {
        return Ok(None);
    }
    let mut out = Object::new();
    out.insert("role", Json::str("system"));
    let mut joined = JsString::new();
    for (i, c) in content.iter().enumerate() {
        if i > 0 {
            joined.push_str("\n\n");
        }
        joined.push_js(c);
    }
    out.insert("content", Json::String(joined));
    if !sections.is_empty() {
        out.insert("sections", Json::Object(sections.into_iter().collect()));
    }
    if !tools.is_empty() {
        out.insert("toolsAdded", Json::Array(tools));
    }
    out.insert(
        "timestamp",
        match timestamp {
            None | Some(Json::Null) => Json::number(0.0),
            Some(t) => t,
        },
    );
    Ok(Some(Json::Object(out)))
}

/// pi-ai's `contentText(content, "\n")`.
fn content_text(content: Option<&Json>) -> Result<JsString> {
    match content {
        Some(Json::String(s)) => Ok(s.clone()),
        Some(Json::Array(blocks)) => {
            let mut texts = Vec::new();
            for b in blocks {
                match b {
                    Json::Null => {
                        return Err(Error::InvalidEntry { line: 0, message: "null content block".into() });
                    }
                    Json::Object(o) if o.get("type").and_then(Json::as_js_str).is_some_and(|t| t.eq_str("text")) => {
                        texts.push(o.get("text"));
                    }
                    _ => {}
                }
            }
            Ok(convert::join(texts.into_iter(), "\n"))
        }
        _ => Err(Error::InvalidEntry { line: 0, message: "system message content is not text".into() }),
    }
}

/// pi-ai's `getCurrentTools`: removals then additions per system message, keyed by name.
fn current_tools<'a>(messages: impl Iterator<Item = &'a Json>) -> Result<Vec<Json>> {
    let mut tools: IndexMap<Key, Json> = IndexMap::new();
    let list = |v: Option<&'a Json>| -> Result<&'a [Json]> {
        match v {
            None | Some(Json::Null) => Ok(&[]),
            Some(Json::Array(items)) => Ok(items),
            Some(_) => Err(Error::InvalidEntry { line: 0, message: "system message tool list is not an array".into() }),
        }
    };
    for m in messages {
        for t in list(m.get("toolsRemoved"))? {
            tools.shift_remove(&Key::from_json(t.get("name")));
        }
        for t in list(m.get("toolsAdded"))? {
            tools.insert(Key::from_json(t.get("name")), t.clone());
        }
    }
    Ok(tools.into_values().collect())
}

/// `String(x)` of a JSON value (re-exported for callers that format messages).
pub fn js_string(v: &Json) -> JsString {
    to_js_string(v)
}
