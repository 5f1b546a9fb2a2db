//! pi's read results as JSON text: entries as stored, trees as `{entry, children, label?, labelTimestamp?}`,
//! projections and contexts in pi's shapes.
//!
//! Output is what `JSON.stringify` of pi's result would parse back to: members pi leaves `undefined` are omitted,
//! and entries are their stored bytes (so a number spelt `12345678901234567890` in the file is not rounded on the
//! way out). Bytes that are not UTF-8 are replaced as Node's decoder replaces them, so the output is always valid.

use std::io::Write;

use super::context::{ContextMessage, Projection};
use super::error::{Error, Result};
use super::js::date::to_iso_string;
use super::json::scan::{find_member, scan_document};
use super::json::{JsString, Json};
use super::key::Key;
use super::manager::{trim_json_ws, SessionManager};
use super::tree::Tree;

/// Writes JSON text into a growing buffer that the caller may drain (for streaming large results).
pub struct JsonOut<'w> {
    buf: Vec<u8>,
    sink: Option<&'w mut dyn Write>,
    /// Buffered bytes above which the buffer is handed to the sink.
    pub flush_at: usize,
}

impl<'w> JsonOut<'w> {
    /// Output collected in memory.
    pub fn memory() -> JsonOut<'static> {
        JsonOut { buf: Vec::new(), sink: None, flush_at: usize::MAX }
    }

    /// Output streamed to `sink` in chunks.
    pub fn streaming(sink: &'w mut dyn Write) -> JsonOut<'w> {
        JsonOut { buf: Vec::with_capacity(1 << 20), sink: Some(sink), flush_at: 1 << 20 }
    }

    /// Appends raw JSON text.
    pub fn raw(&mut self, bytes: &[u8]) -> Result<()> {
        self.buf.extend_from_slice(bytes);
        self.maybe_flush()
    }

    /// Appends stored bytes, replacing invalid UTF-8 as Node's decoder does. Bytes at least as long as the
    /// flush threshold go straight to the sink (after what is buffered), so streaming a multi-megabyte entry
    /// does not hold a second copy of it.
    pub fn stored(&mut self, bytes: &[u8]) -> Result<()> {
        let lossy = match std::str::from_utf8(bytes) {
            Ok(_) => None,
            Err(_) => Some(String::from_utf8_lossy(bytes)),
        };
        let bytes = lossy.as_ref().map_or(bytes, |s| s.as_bytes());
        if self.sink.is_some() && bytes.len() >= self.flush_at {
            self.flush()?;
            let sink = self.sink.as_mut().expect("checked");
            return sink.write_all(bytes).map_err(|e| Error::io("write", "output", e));
        }
        self.buf.extend_from_slice(bytes);
        self.maybe_flush()
    }

    /// Appends a value.
    pub fn value(&mut self, v: &Json) -> Result<()> {
        v.write_preserving(&mut self.buf);
        self.maybe_flush()
    }

    /// Appends a string.
    pub fn string(&mut self, s: &JsString) -> Result<()> {
        s.write_json(&mut self.buf);
        self.maybe_flush()
    }

    /// Appends a Rust string as a JSON string.
    pub fn str(&mut self, s: &str) -> Result<()> {
        super::json::string::write_json_string_bytes(s.as_bytes(), &mut self.buf);
        self.maybe_flush()
    }

    fn maybe_flush(&mut self) -> Result<()> {
        if self.buf.len() >= self.flush_at {
            self.flush()?;
        }
        Ok(())
    }

    /// Hands buffered bytes to the sink.
    pub fn flush(&mut self) -> Result<()> {
        if let Some(sink) = self.sink.as_mut() {
            sink.write_all(&self.buf).map_err(|e| Error::io("write", "output", e))?;
            self.buf.clear();
        }
        Ok(())
    }

    /// The collected text (memory output).
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }
}

/// Writes `{"k":v,...}` members with commas.
pub struct ObjectWriter {
    first: bool,
}

impl ObjectWriter {
    /// Opens an object.
    pub fn open(out: &mut JsonOut<'_>) -> Result<ObjectWriter> {
        out.raw(b"{")?;
        Ok(ObjectWriter { first: true })
    }

    /// Starts a member.
    pub fn key(&mut self, out: &mut JsonOut<'_>, key: &str) -> Result<()> {
        if !self.first {
            out.raw(b",")?;
        }
        self.first = false;
        out.str(key)?;
        out.raw(b":")
    }

    /// Closes the object.
    pub fn close(self, out: &mut JsonOut<'_>) -> Result<()> {
        out.raw(b"}")
    }
}

/// Writes a record (entry or header) as stored.
pub fn record(m: &SessionManager, i: usize, out: &mut JsonOut<'_>) -> Result<()> {
    record_from(&m.bodies(), i, out)
}

/// Writes record `i` as stored, its bytes read through `bodies`.
pub fn record_from(bodies: &dyn super::context::Bodies, i: usize, out: &mut JsonOut<'_>) -> Result<()> {
    let bytes = bodies.bytes(i)?;
    out.stored(trim_json_ws(&bytes))
}

/// Writes `[entry, …]` for record indices (read ahead in file order: a few large reads, not one per line).
pub fn records(m: &SessionManager, list: &[usize], out: &mut JsonOut<'_>) -> Result<()> {
    let bodies = m.bodies_in_order();
    out.raw(b"[")?;
    for (n, &i) in list.iter().enumerate() {
        if n > 0 {
            out.raw(b",")?;
        }
        record_from(&bodies, i, out)?;
    }
    out.raw(b"]")
}

/// Writes a key's JSON value (`null` for undefined and object keys; callers omit undefined members).
pub fn key(k: &Key, out: &mut JsonOut<'_>) -> Result<()> {
    out.raw(k.to_json_text().unwrap_or_else(|| "null".to_owned()).as_bytes())
}

/// Writes pi's `getTree()`.
pub fn tree(m: &SessionManager, tree: &Tree, out: &mut JsonOut<'_>) -> Result<()> {
    // Iterative, so a deep chain (one node per message in a long linear session) cannot overflow the stack.
    enum Step {
        Open(usize),
        Children(usize, usize),
        Close,
    }
    out.raw(b"[")?;
    let mut stack: Vec<Step> = tree.roots.iter().rev().map(|&n| Step::Open(n)).collect();
    let mut need_comma = vec![false];
    while let Some(step) = stack.pop() {
        match step {
            Step::Open(n) => {
                let comma = need_comma.last_mut().expect("level");
                if *comma {
                    out.raw(b",")?;
                }
                *comma = true;
                let r = tree.nodes[n].record;
                out.raw(b"{\"entry\":")?;
                record(m, r, out)?;
                out.raw(b",\"children\":[")?;
                need_comma.push(false);
                stack.push(Step::Children(n, 0));
            }
            Step::Children(n, k) => {
                let children = &tree.nodes[n].children;
                if k < children.len() {
                    stack.push(Step::Children(n, k + 1));
                    stack.push(Step::Open(children[k]));
                } else {
                    need_comma.pop();
                    out.raw(b"]")?;
                    let id = &m.records()[tree.nodes[n].record].id;
                    if let Some(l) = m.index().label(id) {
                        out.raw(b",\"label\":")?;
                        out.value(&l.label)?;
                        if let Some(ts) = &l.timestamp {
                            out.raw(b",\"labelTimestamp\":")?;
                            out.value(ts)?;
                        }
                    }
                    stack.push(Step::Close);
                }
            }
            Step::Close => out.raw(b"}")?,
        }
    }
    out.raw(b"]")
}

/// Writes the same tree flat, for readers whose JSON decoders refuse deep nesting (a linear session of N entries
/// is N levels deep in pi's shape; many decoders stop at a few hundred or a thousand): the nodes in pre-order
/// (a node, then its subtrees in order), each `{entry, parentIndex, depth, label?, labelTimestamp?}` where
/// `parentIndex` is the position of its parent in this array (null for roots).
pub fn tree_flat(m: &SessionManager, tree: &Tree, out: &mut JsonOut<'_>) -> Result<()> {
    tree_flat_with(m, tree, 0..usize::MAX, Some(&|i, out| record(m, i, out)), out)
}

/// Writes one entry, given its record index.
pub type EntryWriter<'a> = &'a dyn Fn(usize, &mut JsonOut<'_>) -> Result<()>;

/// [`tree_flat`] for the nodes at `positions` of the pre-order list only (`parentIndex` stays the position in
/// the whole list), each with its entry written by `entry` (given a record index), or, without `entry`, with the
/// entry's `id` instead.
pub fn tree_flat_with(
    m: &SessionManager,
    tree: &Tree,
    positions: std::ops::Range<usize>,
    entry: Option<EntryWriter<'_>>,
    out: &mut JsonOut<'_>,
) -> Result<()> {
    out.raw(b"[")?;
    // (node, parent's position, depth)
    let mut stack: Vec<(usize, Option<usize>, usize)> = tree.roots.iter().rev().map(|&n| (n, None, 0)).collect();
    let mut position = 0;
    while let Some((n, parent, depth)) = stack.pop() {
        if position >= positions.end {
            break;
        }
        stack.extend(tree.nodes[n].children.iter().rev().map(|&c| (c, Some(position), depth + 1)));
        if position < positions.start {
            position += 1;
            continue;
        }
        if position > positions.start {
            out.raw(b",")?;
        }
        let r = tree.nodes[n].record;
        match entry {
            Some(write) => {
                out.raw(b"{\"entry\":")?;
                write(r, out)?;
                out.raw(b",")?;
            }
            None => {
                out.raw(b"{")?;
                if let Some(id) = m.records()[r].id.to_json_text() {
                    out.raw(b"\"id\":")?;
                    out.raw(id.as_bytes())?;
                    out.raw(b",")?;
                }
            }
        }
        out.raw(b"\"parentIndex\":")?;
        match parent {
            Some(p) => out.raw(p.to_string().as_bytes())?,
            None => out.raw(b"null")?,
        }
        out.raw(format!(",\"depth\":{depth}").as_bytes())?;
        if let Some(l) = m.index().label(&m.records()[r].id) {
            out.raw(b",\"label\":")?;
            out.value(&l.label)?;
            if let Some(ts) = &l.timestamp {
                out.raw(b",\"labelTimestamp\":")?;
                out.value(ts)?;
            }
        }
        out.raw(b"}")?;
        position += 1;
    }
    out.raw(b"]")
}

/// Writes one context message.
pub fn message(m: &SessionManager, msg: &ContextMessage, out: &mut JsonOut<'_>) -> Result<()> {
    match msg {
        ContextMessage::Value(v) => out.value(v),
        ContextMessage::Stored(i) => {
            let bytes = super::context::Bodies::bytes(&m.bodies(), *i)?;
            let doc = scan_document(&bytes).map_err(|e| Error::InvalidEntry {
                line: m.records()[*i].line,
                message: format!("entry no longer parses ({e}); the file changed on disk"),
            })?;
            match find_member(&bytes, &doc.members, "message") {
                Some(r) => out.stored(&bytes[r]),
                None => out.raw(b"null"),
            }
        }
    }
}

/// Writes `[message, …]`.
pub fn messages<'a>(
    m: &SessionManager,
    list: impl Iterator<Item = &'a ContextMessage>,
    out: &mut JsonOut<'_>,
) -> Result<()> {
    out.raw(b"[")?;
    for (n, msg) in list.enumerate() {
        if n > 0 {
            out.raw(b",")?;
        }
        message(m, msg, out)?;
    }
    out.raw(b"]")
}

fn settings(p: &Projection, w: &mut ObjectWriter, out: &mut JsonOut<'_>) -> Result<()> {
    if let Some(t) = &p.thinking_level {
        w.key(out, "thinkingLevel")?;
        out.value(t)?;
    }
    w.key(out, "model")?;
    match &p.model {
        None => out.raw(b"null"),
        Some(model) => {
            let mut mw = ObjectWriter::open(out)?;
            if let Some(v) = &model.provider {
                mw.key(out, "provider")?;
                out.value(v)?;
            }
            if let Some(v) = &model.model_id {
                mw.key(out, "modelId")?;
                out.value(v)?;
            }
            mw.close(out)
        }
    }
}

/// Writes pi's `buildSessionProjection()`: `{entries: [{sourceEntry, messages}], messages, thinkingLevel, model}`.
pub fn projection(m: &SessionManager, p: &Projection, out: &mut JsonOut<'_>) -> Result<()> {
    let mut w = ObjectWriter::open(out)?;
    w.key(out, "entries")?;
    out.raw(b"[")?;
    for (n, e) in p.entries.iter().enumerate() {
        if n > 0 {
            out.raw(b",")?;
        }
        out.raw(b"{\"sourceEntry\":")?;
        record(m, e.record, out)?;
        out.raw(b",\"messages\":")?;
        messages(m, e.messages.iter(), out)?;
        out.raw(b"}")?;
    }
    out.raw(b"]")?;
    w.key(out, "messages")?;
    messages(m, p.messages(), out)?;
    settings(p, &mut w, out)?;
    w.close(out)
}

/// Writes pi's `buildSessionContext()`: `{messages, thinkingLevel, model}`.
pub fn context(m: &SessionManager, p: &Projection, out: &mut JsonOut<'_>) -> Result<()> {
    let mut w = ObjectWriter::open(out)?;
    w.key(out, "messages")?;
    messages(m, p.messages(), out)?;
    settings(p, &mut w, out)?;
    w.close(out)
}

/// A `Date` as `JSON.stringify` writes it: an ISO string, or `null` for an invalid date.
pub fn date_json(ms: f64) -> Json {
    match to_iso_string(ms) {
        Some(s) => Json::str(&s),
        None => Json::Null,
    }
}
