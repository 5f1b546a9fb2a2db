//! The one seam between the page and the sidecar protocol: what the page asks for (sessions, a session's
//! skeleton rows, bodies by id, the context, usage, live changes) in terms of sidecar calls; the usage overview
//! reads the listed sessions itself, read-only, through the same count `pi-sessiond usage` makes.
//!
//! The page works on skeleton rows — `{id, parentId, type, timestamp, role?, customType?, targetId?, name?,
//! setsLabel?, label?, preview, hasText, bytes}` (the planned `snapshot: "skeleton"` shape, plus the resolved
//! `label` of the entry and, for label entries, the label they set) — and fetches bodies only for entries it
//! shows whole. The rows are made here from `session/getTreeFlat` (they carry more than the sidecar's skeleton
//! snapshot: pi's one-line summary, the stop reason); bodies come in one `session/getEntries {ids}` per batch.

use std::sync::Arc;

use crate::catalog::usage::{add_entry_usage, day_of, overview, UsageByModel};
use crate::catalog::Cancel;
use crate::cli::describe::{content_text, one_line, summarize};
use crate::cli::output::{Failure, FailureKind};
use crate::session::json::{JsString, Json, Object};
use crate::session::ErrorKind;

use super::bridge::{params, Bridge};

/// How many characters of text a row previews.
const PREVIEW_CHARS: usize = 160;
/// How many search hits the page shows (view.js's SEARCH_SHOWN).
pub const SEARCH_SHOWN: usize = 100;
/// How many characters of one context message the context view shows.
const CONTEXT_CHARS: usize = 4000;

/// The page's operations over one sidecar.
#[derive(Clone)]
pub struct View {
    bridge: Arc<Bridge>,
}

fn obj(members: Vec<(&str, Json)>) -> Json {
    params(members)
}

fn text_of(v: Option<&Json>) -> Option<String> {
    v.and_then(Json::as_js_str).map(JsString::to_string_lossy)
}

impl View {
    /// A view over `bridge`.
    pub fn new(bridge: Arc<Bridge>) -> View {
        View { bridge }
    }

    /// Every session, newest activity first, without their full text: `[{path, id, name?, firstMessage,
    /// messageCount, modified, cwd}]`.
    pub fn sessions(&self) -> Result<Json, Failure> {
        let listing = self.bridge.call("sessions/listAll", obj(vec![("includeAllMessagesText", Json::Bool(false))]))?;
        Ok(listing)
    }

    /// Entries matching `query` (pi's `/resume` language) across every session: at most [`SEARCH_SHOWN`] + 1, so
    /// the page can say when there are more than it shows.
    pub fn search(&self, query: &str) -> Result<Json, Failure> {
        let limit = Json::number((SEARCH_SHOWN + 1) as f64);
        self.bridge.call("sessions/search", obj(vec![("query", Json::str(query)), ("limit", limit)]))
    }

    /// Opens `path` as [`View::open`] does, if it is one of the sessions [`View::sessions`] lists: the live page
    /// shows the agent directory's sessions and nothing else on the machine. A path that is not listed, whether or
    /// not it exists, gets the one answer a missing session gets, so the answer says nothing about other files.
    pub fn open_listed(&self, path: &str) -> Result<Json, Failure> {
        let listed = match &self.sessions()? {
            Json::Array(sessions) => sessions.iter().any(|s| text_of(s.get("path")).as_deref() == Some(path)),
            _ => false,
        };
        if !listed {
            return Err(Failure::new(
                ErrorKind::SessionNotFound,
                format!("{path}: no such session in this agent directory"),
            ));
        }
        self.open(path, true)
    }

    /// Opens the session at `path`, following what other processes append, and returns its snapshot.
    pub fn open(&self, path: &str, watch: bool) -> Result<Json, Failure> {
        if !crate::session::paths::as_path(path).is_file() {
            return Err(Failure::new(ErrorKind::SessionNotFound, format!("{path}: no such session file")));
        }
        let state =
            self.bridge.call("session/open", obj(vec![("path", Json::str(path)), ("watch", Json::Bool(watch))]))?;
        let handle = text_of(state.get("handle")).unwrap_or_default();
        self.snapshot(&handle)
    }

    /// `{state, rows}` of an open handle: its state and every entry as a skeleton row, in tree pre-order.
    pub fn snapshot(&self, handle: &str) -> Result<Json, Failure> {
        let state = self.bridge.call("session/getState", obj(vec![("handle", Json::str(handle))]))?;
        let tree = self.bridge.call("session/getTreeFlat", obj(vec![("handle", Json::str(handle))]))?;
        let Json::Array(nodes) = &tree else {
            return Err(Failure::new(FailureKind::Internal, "getTreeFlat did not return a list"));
        };
        let rows = nodes
            .iter()
            .filter_map(|n| {
                let mut row = skeleton(n.get("entry")?);
                if let (Json::Object(r), Some(label)) = (&mut row, n.get("label")) {
                    r.insert("label", label.clone());
                }
                Some(row)
            })
            .collect();
        Ok(obj(vec![("state", state), ("rows", Json::Array(rows))]))
    }

    /// Stops following `handle` (one reference of it).
    pub fn close(&self, handle: &str) -> Result<Json, Failure> {
        self.bridge.call("session/close", obj(vec![("handle", Json::str(handle))]))
    }

    /// The entries with these ids, as stored: `{id: entry | null}`.
    pub fn entries(&self, handle: &str, ids: &[String]) -> Result<Json, Failure> {
        let asked = Json::Array(ids.iter().map(|id| Json::str(id)).collect());
        let found = self.bridge.call("session/getEntries", obj(vec![("handle", Json::str(handle)), ("ids", asked)]))?;
        let Ok(entries) = found.into_array() else {
            return Err(Failure::new(FailureKind::Internal, "getEntries {ids} did not return a list"));
        };
        let mut out = Object::new();
        for (id, entry) in ids.iter().zip(entries) {
            out.insert(id.as_str(), entry);
        }
        Ok(Json::Object(out))
    }

    /// What the model sees: `{thinkingLevel, model, messages: [{role, text, images, toolCalls}]}`, each
    /// message's text bounded.
    pub fn context(&self, handle: &str) -> Result<Json, Failure> {
        let context = self.bridge.call("session/buildSessionContext", obj(vec![("handle", Json::str(handle))]))?;
        let messages = match context.get("messages") {
            Some(Json::Array(m)) => m.iter().map(context_message).collect(),
            _ => Vec::new(),
        };
        Ok(obj(vec![
            ("thinkingLevel", context.get("thinkingLevel").cloned().unwrap_or(Json::Null)),
            ("model", context.get("model").cloned().unwrap_or(Json::Null)),
            ("messages", Json::Array(messages)),
        ]))
    }

    /// Tokens and cost by model, and entries by type and role, read page by page.
    pub fn usage(&self, handle: &str) -> Result<Json, Failure> {
        let mut tally = UsageTally::default();
        self.each_entry(handle, |e| tally.add(&e))?;
        Ok(tally.to_json())
    }

    /// Calls `f` with every entry of an open handle as stored, in file order, fetched a page at a time (so a
    /// large session is never held whole).
    pub fn each_entry(&self, handle: &str, mut f: impl FnMut(Json)) -> Result<(), Failure> {
        const PAGE: usize = 500;
        let mut offset = 0usize;
        loop {
            let page = self.bridge.call(
                "session/getEntries",
                obj(vec![
                    ("handle", Json::str(handle)),
                    ("offset", Json::number(offset as f64)),
                    ("limit", Json::number(PAGE as f64)),
                ]),
            )?;
            let Ok(entries) = page.into_array() else { break };
            let n = entries.len();
            entries.into_iter().for_each(&mut f);
            if n < PAGE {
                return Ok(());
            }
            offset += PAGE;
        }
        Ok(())
    }

    /// Tokens and cost of every listed session by UTC day and model (the overview's chart):
    /// `{sessions, unreadable, rows: [{day, model, input, output, cacheRead, cacheWrite, totalTokens, cost}]}`,
    /// summed as `pi-sessiond usage` sums them (sessions in path order).
    pub fn usage_overview(&self) -> Result<Json, Failure> {
        let listing = self.sessions()?;
        let Json::Array(listed) = &listing else { return Ok(Json::Array(Vec::new())) };
        let mut paths: Vec<String> = listed.iter().filter_map(|s| text_of(s.get("path"))).collect();
        paths.sort();
        let o = overview(&paths, None, &Cancel::new(), None, |_, c| (day_of(c.time_ms), c.key.clone()))?;
        let rows = o
            .groups
            .iter()
            .map(|((day, model), u)| {
                let mut row = u.to_json();
                row.insert("day", Json::str(day));
                row.insert("model", Json::str(model));
                Json::Object(row)
            })
            .collect();
        Ok(obj(vec![
            ("sessions", Json::number(o.sessions as f64)),
            ("unreadable", Json::number(o.unreadable.len() as f64)),
            ("rows", Json::Array(rows)),
        ]))
    }

    /// A sidecar notification as the page's live event, or None when the page has no use for it:
    /// `{kind: "append", handle, seq, leafId, rows}`, `{kind: "leaf", handle, seq, leafId}`, or `{kind: "reset" |
    /// "rebind" | "deleted", handle, seq}` (the page reloads the snapshot).
    pub fn event(notification: &Json) -> Option<Json> {
        if text_of(notification.get("method")).as_deref() != Some("session/changed") {
            return None;
        }
        let p = notification.get("params")?;
        let change = p.get("change")?;
        let kind = text_of(change.get("kind"))?;
        let mut out = vec![
            ("kind", Json::str(&kind)),
            ("handle", p.get("handle")?.clone()),
            ("seq", p.get("seq").cloned().unwrap_or(Json::Null)),
            ("leafId", p.get("leafId").cloned().unwrap_or(Json::Null)),
        ];
        if kind == "append" {
            let rows = match change.get("entries") {
                Some(Json::Array(entries)) => entries.iter().map(skeleton).collect(),
                _ => Vec::new(),
            };
            out.push(("rows", Json::Array(rows)));
        }
        Some(obj(out))
    }
}

/// Tokens and cost by model and entries by kind, added up an entry at a time (the session's usage tab).
#[derive(Default)]
pub struct UsageTally {
    by_model: UsageByModel,
    kinds: std::collections::BTreeMap<String, u64>,
}

impl UsageTally {
    /// Counts one entry as stored.
    pub fn add(&mut self, entry: &Json) {
        add_entry_usage(entry, &mut self.by_model);
        *self.kinds.entry(summarize(entry, 0).what).or_default() += 1;
    }

    /// `{models: [{model, responses, input, …, cost}], kinds: {what: count}}`.
    pub fn to_json(&self) -> Json {
        let models = self
            .by_model
            .iter()
            .map(|(model, u)| {
                let mut row = u.to_json();
                row.insert("model", Json::str(model));
                Json::Object(row)
            })
            .collect();
        let mut counts = Object::new();
        for (k, n) in &self.kinds {
            counts.insert(k.as_str(), Json::number(*n as f64));
        }
        obj(vec![("models", Json::Array(models)), ("kinds", Json::Object(counts))])
    }
}

/// An entry's skeleton row (see the module doc).
pub fn skeleton(entry: &Json) -> Json {
    let summary = summarize(entry, PREVIEW_CHARS);
    let mut row = Object::new();
    let copy = |row: &mut Object, key: &str| {
        if let Some(v) = entry.get(key) {
            row.insert(key, v.clone());
        }
    };
    copy(&mut row, "id");
    row.insert("parentId", entry.get("parentId").cloned().unwrap_or(Json::Null));
    copy(&mut row, "type");
    copy(&mut row, "timestamp");
    let message = entry.get("message");
    if let Some(role) = message.and_then(|m| m.get("role")) {
        row.insert("role", role.clone());
    }
    copy(&mut row, "customType");
    copy(&mut row, "targetId");
    copy(&mut row, "name");
    if text_of(entry.get("type")).as_deref() == Some("label") {
        row.insert("setsLabel", entry.get("label").cloned().unwrap_or(Json::Null));
    }
    row.insert("what", Json::str(&summary.what));
    row.insert("preview", Json::str(&summary.preview));
    // pi's /tree hides assistant messages that only call tools, unless they ended in an error or were aborted.
    let has_text = match message.and_then(|m| m.get("content")) {
        Some(Json::String(s)) => !s.to_string_lossy().trim().is_empty(),
        Some(Json::Array(blocks)) => blocks.iter().any(|b| {
            text_of(b.get("type")).as_deref() == Some("text")
                && text_of(b.get("text")).is_some_and(|t| !t.trim().is_empty())
        }),
        _ => false,
    };
    row.insert("hasText", Json::Bool(has_text));
    if let Some(stop) = message.and_then(|m| m.get("stopReason")) {
        row.insert("stopReason", stop.clone());
    }
    let mut bytes = Vec::new();
    entry.write_preserving(&mut bytes);
    row.insert("bytes", Json::number(bytes.len() as f64));
    Json::Object(row)
}

/// One context message as the context view shows it.
fn context_message(m: &Json) -> Json {
    let role = text_of(m.get("role")).unwrap_or_else(|| "message".into());
    let mut text = match m.get("summary") {
        Some(Json::String(s)) => s.to_string_lossy(),
        _ => content_text(m.get("content")),
    };
    if let Some(cmd) = text_of(m.get("command")) {
        text = format!("$ {cmd}\n{}", text_of(m.get("output")).unwrap_or_default());
    }
    let (images, tools) = match m.get("content") {
        Some(Json::Array(blocks)) => {
            let kind = |b: &Json| text_of(b.get("type")).unwrap_or_default();
            let images = blocks.iter().filter(|b| kind(b) == "image").count();
            let tools =
                blocks.iter().filter(|b| kind(b) == "toolCall").filter_map(|b| b.get("name").cloned()).collect();
            (images, tools)
        }
        _ => (0, Vec::new()),
    };
    let cut = text.chars().count() > CONTEXT_CHARS;
    let shown: String = if cut { text.chars().take(CONTEXT_CHARS).collect::<String>() + "…" } else { text };
    obj(vec![
        ("role", Json::str(&role)),
        (
            "title",
            Json::str(&one_line(
                &text_of(m.get("customType")).or_else(|| text_of(m.get("toolName"))).unwrap_or_default(),
                80,
            )),
        ),
        ("text", Json::str(&shown)),
        ("images", Json::number(images as f64)),
        ("toolCalls", Json::Array(tools)),
    ])
}
