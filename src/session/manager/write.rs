//! The write path of [`SessionManager`]: every mutation, whether it comes through [`SessionManager::apply`] or
//! through one of pi's method names, is staged in memory, written in one go and reported as [`Change`]s.
//!
//! The order is always the same, so that a failure at any step leaves memory and file as they were:
//! follow the file (one `stat`; what another process appended becomes records first) → refuse a stale view →
//! stage the op's records in memory (a batch stages all of its ops, each seeing the ones before it) → encode →
//! one `write` (held-back load repairs ride along: the missing final newline in the same write, a migration
//! rewrite as the one renamed temporary file) → cut back on failure → fsync per durability → advance the valid
//! length → point records at their lines and apply labels → report the changes. A failure before the write is
//! done unstages the records, so neither memory nor file changes.

use std::ops::Range;

use crate::session::change::{Change, Commit, Compaction, EntryRef, Op, OpValue, Origin, Outcome};
use crate::session::context::{self, Bodies};
use crate::session::entry::{Body, Detail, EntryType, MessageShape, Record, Role};
use crate::session::error::{Error, Result};
use crate::session::identity::FileState;
use crate::session::ids;
use crate::session::json::{JsString, Json, Object};
use crate::session::key::Key;
use crate::session::paths;
use crate::session::store::{
    self, BodyReader, Durability, LineSlot, LoadedFile, SessionFile, Start, Warning, WarningKind,
};
use crate::session::tree::TreeIndex;

use super::SessionManager;
use super::{file_stamp, header_json, key_json, key_text, record_from_bytes, trim_json_ws, PendingRepairs};

impl SessionManager {
    // ----------------------------------------------------------------------------------------------------------
    // The entry point

    /// Applies one mutation, as a host that shares the file with other writers needs it: the file is followed
    /// first (another process — pi — may have appended; that is reported as [`Origin::External`] appends), and
    /// the op is refused with [`Error::Conflict`] (`content_modified`) when `expected_leaf` is not the leaf
    /// then, or, without an expected leaf, when following the file moved the leaf (the caller's picture is
    /// stale). The op is then staged and written in one write; under `Durability::Batch`, [`Outcome::commit`]
    /// says when it is durable.
    ///
    /// Changes found by following are in [`Outcome::changes`] even when the op is refused. `newSession` and
    /// `setSessionFile` do not follow the file they leave; `createBranchedSession` is refused when following
    /// appended records (it would replace them before they could be reported).
    ///
    /// Should a bug panic half-way, memory is made what the file says again before the panic goes on (a
    /// persisted session is read again; an in-memory one drops what was staged), so no entry the file lacks is
    /// left behind to become the parent of the next write.
    pub fn apply(&mut self, op: Op, expected_leaf: Option<&str>) -> Outcome {
        let mut changes = Vec::new();
        let (first, leaf_before) = (self.records.len(), self.index.leaf.clone());
        let attempt = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.apply_followed(op, expected_leaf, &mut changes)
        }));
        self.last_seen = None;
        let result = match attempt {
            Ok(result) => result,
            Err(panic) => {
                self.recover_from_panic(first, leaf_before);
                std::panic::resume_unwind(panic)
            }
        };
        match result {
            Ok((value, commit)) => Outcome { result: Ok(value), changes, commit },
            Err(e) => Outcome { result: Err(e), changes, commit: Commit::done() },
        }
    }

    fn apply_followed(
        &mut self,
        op: Op,
        expected_leaf: Option<&str>,
        changes: &mut Vec<Change>,
    ) -> Result<(OpValue, Commit)> {
        let leaves_file = matches!(op, Op::NewSession(_) | Op::SetSessionFile { .. });
        let leaf_before = self.leaf_text();
        let followed = if leaves_file { None } else { self.refresh()? };
        changes.extend(followed.clone());
        let current = self.leaf_text();
        let stale = match expected_leaf {
            Some(expected) if current.as_deref() != Some(expected) => {
                Some(("the session's leaf is not the expected one: it changed since the caller last looked", false))
            }
            None if followed.is_some() && current != leaf_before => {
                Some(("another process appended to the session file and moved its leaf; nothing was written", true))
            }
            _ if op.rebinds() && matches!(followed, Some(Change::Appended { .. })) => {
                Some(("another process appended to the session file; look at what it wrote before branching off", true))
            }
            _ => None,
        };
        if let Some((message, external)) = stale {
            return Err(self.conflict(message, external));
        }
        self.run(op, changes)
    }

    /// A [`Error::Conflict`] carrying the leaf now (and the file, when another writer is the cause).
    fn conflict(&self, message: &str, external: bool) -> Error {
        Error::Conflict {
            path: if external { self.session_file.clone() } else { None },
            leaf: self.leaf_text(),
            message: message.to_owned(),
        }
    }

    fn leaf_text(&self) -> Option<String> {
        self.index.leaf.as_js_str().map(JsString::to_string_lossy)
    }

    /// Runs `op` as pi's method of that name does: without following the file first (pi does not), through the
    /// same write path as [`SessionManager::apply`]. Under `Durability::Batch` the fsync is left to
    /// [`SessionManager::sync`] (or to closing the file).
    fn run_unfollowed(&mut self, op: Op) -> Result<OpValue> {
        self.last_seen = None;
        let mut changes = Vec::new();
        self.run(op, &mut changes).map(|(value, commit)| {
            drop(commit);
            value
        })
    }

    fn run(&mut self, op: Op, changes: &mut Vec<Change>) -> Result<(OpValue, Commit)> {
        let value = match op {
            Op::NewSession(options) => OpValue::Path(self.new_session(options)?),
            Op::SetSessionFile { path } => {
                self.set_session_file(&path)?;
                OpValue::Done
            }
            Op::CreateBranchedSession { leaf_id } => OpValue::Path(self.create_branched_session(&leaf_id)?),
            op => return self.run_staged(op, changes),
        };
        changes.push(Change::Rebound);
        Ok((value, Commit::done()))
    }

    /// Stages `op`, writes what it staged, and reports it; on any failure, unstages.
    fn run_staged(&mut self, op: Op, changes: &mut Vec<Change>) -> Result<(OpValue, Commit)> {
        let first = self.records.len();
        let leaf_before = self.index.leaf.clone();
        let moves_leaf = moves_leaf(&op);
        let mut value = match self.stage(op, &[]) {
            Ok(v) => v,
            Err(e) => {
                self.unstage(first, leaf_before);
                return Err(e);
            }
        };
        let written = if self.records.len() == first {
            Ok((Commit::done(), first..first))
        } else {
            self.write_staged(first, changes)
        };
        let (commit, ours) = match written {
            Ok(w) => w,
            Err(e) => {
                self.unstage(first, leaf_before);
                return Err(e);
            }
        };
        // Labels resolve only once their entry is written (pi's order: the map changes after the write).
        let (records, index) = (&self.records, &mut self.index);
        for r in &records[ours.clone()] {
            if r.kind == EntryType::Label {
                index.apply_label(r);
            }
        }
        if ours.start != first {
            relocate(&mut value, &self.index);
        }
        let last_appended = ours.clone().last().map(|i| self.records[i].id.clone());
        if !ours.is_empty() {
            changes.push(Change::Appended { records: ours, origin: Origin::Own });
        }
        if moves_leaf && last_appended.as_ref() != Some(&self.index.leaf) {
            changes.push(Change::LeafMoved);
        }
        Ok((value, commit))
    }

    /// After a panic inside [`SessionManager::apply`]: whatever it left half done, memory becomes the file again.
    fn recover_from_panic(&mut self, first: usize, leaf: Key) {
        if self.persist && self.flushed && self.file.is_some() {
            match self.reload() {
                Ok(_) if !leaf.truthy() || self.index.contains(&leaf) => self.index.leaf = leaf,
                Ok(_) => {}
                Err(e) => tracing::error!("after a panic, the session file could not be read again: {e}"),
            }
        } else if first <= self.records.len() {
            self.records.truncate(first);
            self.index = TreeIndex::build(&self.records);
            self.index.leaf = leaf;
        }
    }

    /// Undoes staging: the records from `first` on leave memory and the index, and the leaf is put back.
    fn unstage(&mut self, first: usize, leaf: Key) {
        for r in self.records[first..].iter().rev() {
            if !r.is_header() {
                self.index.remove_newest(&r.id, Key::Null);
            }
        }
        self.records.truncate(first);
        self.index.leaf = leaf;
    }

    // ----------------------------------------------------------------------------------------------------------
    // Staging: pi's entries, built in memory

    fn new_entry_id(&mut self) -> String {
        let index = &self.index;
        ids::generate_entry_id(self.env.ids.as_mut(), |id| index.has_str(id))
    }

    /// The common fields of a new entry, in pi's order: type, id, parentId, timestamp.
    fn base_entry(&mut self, kind: &str) -> (Object, String) {
        let (_, timestamp) = self.env.now_iso();
        let id = self.new_entry_id();
        let mut o = Object::new();
        o.insert("type", Json::str(kind));
        o.insert("id", Json::str(&id));
        // `parentId: this.leafId`; an undefined leaf (an id-less last entry) writes no member at all.
        if let Some(parent) = key_json(&self.index.leaf) {
            o.insert("parentId", parent);
        }
        o.insert("timestamp", Json::str(&timestamp));
        (o, id)
    }

    /// An entry whose own fields come right after `type` and before the common ones (pi's key order for custom
    /// entries: type, the fields, id, parentId, timestamp); a None field is left out (`undefined`).
    fn base_entry_last<const N: usize>(&mut self, kind: &str, fields: [(&str, Option<Json>); N]) -> (Object, String) {
        let (base, id) = self.base_entry(kind);
        let mut o = Object::new();
        o.insert("type", Json::str(kind));
        for (k, v) in fields {
            if let Some(v) = v {
                o.insert(k, v);
            }
        }
        for k in ["id", "parentId", "timestamp"] {
            o.insert(k, base.get(k).cloned().unwrap_or(Json::Null));
        }
        (o, id)
    }

    /// Adds an entry to memory (records and index; the leaf moves to it), not yet to the file.
    fn stage_entry(&mut self, entry: Object, id: String) -> OpValue {
        let mut bytes = Vec::new();
        Json::Object(entry).write_canonical(&mut bytes);
        let i = self.records.len();
        self.records.push(record_from_bytes(bytes));
        self.index.add(i, &self.records[i]);
        OpValue::Entry { id, record: i }
    }

    /// Applies `op` to memory only. `earlier` holds the values of the ops before it in its batch.
    fn stage(&mut self, op: Op, earlier: &[OpValue]) -> Result<OpValue> {
        Ok(match op {
            Op::AppendMessage { message } => {
                let (mut o, id) = self.base_entry("message");
                o.insert("message", message);
                self.stage_entry(o, id)
            }
            Op::AppendThinkingLevelChange { thinking_level } => {
                let (mut o, id) = self.base_entry("thinking_level_change");
                o.insert("thinkingLevel", thinking_level);
                self.stage_entry(o, id)
            }
            Op::AppendModelChange { provider, model_id } => {
                let (mut o, id) = self.base_entry("model_change");
                o.insert("provider", provider);
                o.insert("modelId", model_id);
                self.stage_entry(o, id)
            }
            Op::AppendUsage { kind, provider, model, usage, note } => {
                let (mut o, id) = self.base_entry("usage");
                o.insert("kind", kind);
                o.insert("provider", provider);
                o.insert("model", model);
                o.insert("usage", usage);
                if let Some(note) = note.filter(Json::truthy) {
                    o.insert("note", note);
                }
                self.stage_entry(o, id)
            }
            Op::AppendCompaction(c) => self.stage_compaction(*c)?,
            Op::AppendCustomEntry { custom_type, data } => {
                let fields = [("customType", Some(custom_type)), ("data", data)];
                let (o, id) = self.base_entry_last("custom", fields);
                self.stage_entry(o, id)
            }
            Op::AppendSessionInfo { name } => {
                let sanitized = name.collapse_line_breaks().trim();
                let (mut o, id) = self.base_entry("session_info");
                o.insert("name", Json::String(sanitized));
                self.stage_entry(o, id)
            }
            Op::AppendCustomMessageEntry { custom_type, content, display, details } => {
                let fields = [
                    ("customType", Some(custom_type)),
                    ("content", Some(content)),
                    ("display", Some(display)),
                    ("details", details),
                ];
                let (o, id) = self.base_entry_last("custom_message", fields);
                self.stage_entry(o, id)
            }
            Op::AppendContextEdit { target_id, replacement } => {
                self.stage_context_edit(&resolve(target_id, earlier)?, replacement)?
            }
            Op::AppendLabelChange { target_id, label } => {
                let target_id = resolve(target_id, earlier)?;
                if !self.index.contains(&target_id) {
                    return Err(Error::EntryNotFound { id: target_id.display() });
                }
                let (mut o, id) = self.base_entry("label");
                if let Some(t) = key_json(&target_id) {
                    o.insert("targetId", t);
                }
                if let Some(l) = label {
                    o.insert("label", l);
                }
                self.stage_entry(o, id)
            }
            Op::Branch { entry_id } => {
                let entry_id = resolve(entry_id, earlier)?;
                if !self.index.contains(&entry_id) {
                    return Err(Error::EntryNotFound { id: entry_id.display() });
                }
                self.index.leaf = entry_id;
                OpValue::Done
            }
            Op::ResetLeaf => {
                self.index.leaf = Key::Null;
                OpValue::Done
            }
            Op::BranchWithSummary { entry_id, summary, details, from_hook, usage } => {
                let entry_id = entry_id.map(|r| resolve(r, earlier)).transpose()?;
                if let Some(id) = &entry_id {
                    if !self.index.contains(id) {
                        return Err(Error::EntryNotFound { id: id.display() });
                    }
                }
                let from_id =
                    key_json(&self.index.leaf).filter(|v| *v != Json::Null).unwrap_or_else(|| Json::str("root"));
                self.index.leaf = entry_id.unwrap_or(Key::Null);
                let (mut o, id) = self.base_entry("branch_summary");
                o.insert("fromId", from_id);
                o.insert("summary", summary);
                for (k, v) in [("details", details), ("usage", usage), ("fromHook", from_hook)] {
                    if let Some(v) = v {
                        o.insert(k, v);
                    }
                }
                self.stage_entry(o, id)
            }
            Op::Batch(ops) => {
                let mut values = Vec::with_capacity(ops.len());
                for op in ops {
                    let value = self.stage(op, &values)?;
                    values.push(value);
                }
                OpValue::Batch(values)
            }
            op @ (Op::CreateBranchedSession { .. } | Op::NewSession(_) | Op::SetSessionFile { .. }) => {
                return Err(Error::NotBatchable { op: op.name() })
            }
        })
    }

    fn stage_compaction(&mut self, c: Compaction) -> Result<OpValue> {
        let (ms, timestamp) = self.env.now_iso();
        let system = match c.system_message {
            Some(given) => Some(given),
            None => {
                let projection = self.build_session_projection()?;
                let bodies = self.bodies();
                let messages: Vec<Json> =
                    projection.messages().map(|m| context::message_value(&bodies, m)).collect::<Result<_>>()?;
                context::current_system_message(&messages)?.map(|s| match s.into_object() {
                    Ok(mut sm) => {
                        sm.insert("timestamp", Json::number(ms));
                        Json::Object(sm)
                    }
                    Err(other) => other,
                })
            }
        };
        let id = self.new_entry_id();
        let mut o = Object::new();
        o.insert("type", Json::str("compaction"));
        o.insert("id", Json::str(&id));
        if let Some(parent) = key_json(&self.index.leaf) {
            o.insert("parentId", parent);
        }
        o.insert("timestamp", Json::str(&timestamp));
        o.insert("summary", c.summary);
        o.insert(
            "firstKeptEntryId",
            match c.first_kept_entry_id {
                None | Some(Json::Null) => Json::str(&id),
                Some(v) => v,
            },
        );
        o.insert("tokensBefore", c.tokens_before);
        for (k, v) in [("details", c.details), ("usage", c.usage), ("fromHook", c.from_hook)] {
            if let Some(v) = v {
                o.insert(k, v);
            }
        }
        if let Some(sm) = system {
            o.insert("systemMessage", sm);
        }
        if let Some(tail) = c.retained_tail {
            o.insert("retainedTail", tail);
        }
        Ok(self.stage_entry(o, id))
    }

    fn stage_context_edit(&mut self, target_id: &Key, replacement: Option<Json>) -> Result<OpValue> {
        let valid = match &replacement {
            Some(Json::Null) => true,
            Some(Json::Object(o)) => matches!(o.get("content"), Some(Json::String(_) | Json::Array(_))),
            _ => false,
        };
        if !valid {
            return Err(Error::InvalidReplacement);
        }
        let Some(target) = self.index.get(target_id) else {
            return Err(Error::EntryNotFound { id: target_id.display() });
        };
        let branch = self.index.branch(&self.records, None);
        if !branch.iter().any(|&i| self.records[i].id == *target_id) {
            return Err(Error::NotOnActiveBranch { id: target_id.display() });
        }
        let t = &self.records[target];
        let role = if t.kind == EntryType::Message {
            if t.message.property_access_throws() {
                return Err(Error::InvalidEntry {
                    line: t.line,
                    message: "message entry has no message object (pi 1.6.0 throws a TypeError here)".into(),
                });
            }
            Some(if t.message == MessageShape::Object { t.role } else { Role::Other })
        } else {
            None
        };
        let editable =
            t.kind == EntryType::CustomMessage || matches!(role, Some(Role::User | Role::Assistant | Role::ToolResult));
        if !editable {
            return Err(Error::NotEditable { id: target_id.display() });
        }
        let replacement = replacement.expect("validated");
        let normalized = match (&replacement, role) {
            (Json::Object(o), Some(Role::Assistant | Role::ToolResult)) => match o.get("content") {
                Some(Json::String(text)) => {
                    let mut n = Object::new();
                    n.insert("content", context::text_blocks(text.clone()));
                    Json::Object(n)
                }
                _ => replacement.clone(),
            },
            _ => replacement.clone(),
        };
        let (mut o, id) = self.base_entry("context_edit");
        if let Some(t) = key_json(target_id) {
            o.insert("targetId", t);
        }
        o.insert("replacement", normalized);
        Ok(self.stage_entry(o, id))
    }

    // ----------------------------------------------------------------------------------------------------------
    // Writing what was staged

    /// pi's `_hasConversation`: any message entry with a user or assistant message, on any branch.
    fn has_conversation(&self) -> Result<bool> {
        for r in &self.records {
            if r.kind == EntryType::Message {
                if r.message.property_access_throws() {
                    return Err(Error::InvalidEntry {
                        line: r.line,
                        message: "message entry has no message object (pi 1.6.0 throws a TypeError here)".into(),
                    });
                }
                if r.is_conversation() {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Writes records `first..` (staged, in memory) to the file in one write, with the held-back load repairs,
    /// and returns the commit and where the staged records are now (after records another writer appended in
    /// between, if one did). On failure nothing was written (a partial write is cut back) and memory is
    /// untouched, so the caller unstages.
    fn write_staged(&mut self, first: usize, changes: &mut Vec<Change>) -> Result<(Commit, Range<usize>)> {
        let staged = first..self.records.len();
        if !self.persist {
            return Ok((Commit::done(), staged));
        }
        let Some(path) = self.session_file.clone() else { return Ok((Commit::done(), staged)) };
        if !self.flushed {
            // pi's lazy first write: nothing reaches the disk before the session has a conversation.
            if !self.has_conversation()? {
                return Ok((Commit::done(), staged));
            }
            self.write_new_file(&path, self.records.len())?;
            self.flushed = true;
            return Ok((Commit::done(), staged));
        }
        if let Some(refused) = self.file.as_ref().and_then(SessionFile::refusal) {
            return Err(refused);
        }
        if self.file.as_ref().is_some_and(|f| f.detached().is_some()) {
            // A write would land in a file another program is writing, or has emptied.
            return Err(self.conflict(store::DETACHED, true));
        }
        let seen = self.last_seen.take();
        let state = match (&self.file, seen) {
            (None, _) => FileState::Missing,
            (Some(_), Some(seen)) => seen,
            (Some(file), None) => file.state()?,
        };
        let known = self.file.as_ref().map_or(0, SessionFile::len);
        // Bytes past what we know are looked at as they are now: the state above may come from a `stat` that
        // another writer has overtaken since (its size may even be below what following the file then read).
        let mut torn = None;
        match state {
            FileState::Same => {}
            FileState::Grew(_) => {
                let file = self.file.as_ref().expect("a grown file is present");
                let beyond = file.beyond(known)?;
                let whole_lines = beyond.end > known && beyond.unterminated != Some(known);
                if beyond.end < known || whole_lines {
                    // Lines we have not read (or bytes gone): the caller's picture is stale; following the file
                    // at the next look brings them in.
                    return Err(self.conflict("another process changed the session file since it was read", true));
                }
                if let Some(from) = beyond.unterminated {
                    if file.still_growing(beyond.end)? {
                        return Err(self.conflict(
                            "another process is writing a line to the session file right now; nothing was written",
                            true,
                        ));
                    }
                    // A line another writer left unfinished: our newline ends it, so ours is never fused with it.
                    torn = Some((from, beyond.end - from));
                }
            }
            FileState::Missing => {
                // The file was deleted while open (pi #8939): write it again, header and all, never a headerless
                // file.
                tracing::warn!("{path} was deleted while open; writing it again with its header");
                self.write_new_file(&path, self.records.len())?;
                return Ok((Commit::done(), staged));
            }
            _ => return Err(self.conflict("another process changed the session file since it was read", true)),
        }
        let empty = known == 0 && self.lines.is_empty();
        if self.pending.rewrite && !empty {
            // A migration rewrite: the staged records go into the same temporary file, so one rename makes
            // both the repair and the new entries durable, or neither.
            self.rewrite_file()?;
            return Ok((Commit::done(), staged));
        }
        // A 0-byte file gets its header here, written through the path as pi writes it (a symlink stays one).
        let write_from = if self.pending.rewrite { 0 } else { first };
        let mut lines = Vec::new();
        let mut lens = Vec::with_capacity(self.records.len() - write_from);
        for i in write_from..self.records.len() {
            let body = self.bodies().bytes(i)?;
            lens.push(body.len() as u64);
            lines.extend_from_slice(&body);
            lines.push(b'\n');
        }
        let newline_first = torn.is_some() || self.pending.final_newline;
        let (landed, lines_start) = self.append_lines(&lines, newline_first, known)?;
        self.pending = PendingRepairs::default();
        self.tail = None;
        let contiguous = match torn {
            None => landed.offset == known,
            Some((from, len)) => from == known && landed.offset == from + len,
        } && lines_start == landed.offset + u64::from(newline_first);
        if !contiguous {
            let ours = if lines_start < known {
                // The file was cut short under us: read it again; our lines are whole lines in it.
                self.reload_finding_ours(self.index.leaf.clone(), lines_start, lens.len(), changes)?
            } else {
                self.adopt_interleaved(write_from, known, lines_start, &lens, changes)?
            };
            let staged_count = staged.len();
            return Ok((landed.commit, ours.end - staged_count..ours.end));
        }
        if let Some((offset, len)) = torn {
            self.note_torn_fragment(offset, len);
        }
        let mut offset = lines_start;
        for (i, len) in (write_from..self.records.len()).zip(lens) {
            self.records[i].body = Body::file(offset, len);
            self.lines.push(LineSlot { offset, len, record: Some(i) });
            offset += len + 1;
        }
        Ok((landed.commit, staged))
    }

    /// Appends whole `lines` in one write (after a newline of our own when `newline_first`) and returns where the
    /// write landed and where the lines start. Appending is atomic against other appends, but not against a line
    /// another writer is in the middle of: if one ended where ours began (its writer flushes piece by piece), the
    /// first of ours was fused into it, so the lines are written again after a newline of our own, which no other
    /// write can come between. The fused copy is a line pi skips as malformed; the lines after it in that first
    /// write stay in the file too (pi reads them twice, the later copy winning, as it reads any repeated id).
    fn append_lines(&mut self, lines: &[u8], newline_first: bool, known: u64) -> Result<(store::Landed, u64)> {
        let file = self.file.as_mut().expect("a file to append to");
        let mut bytes = Vec::with_capacity(lines.len() + 1);
        if newline_first {
            bytes.push(b'\n');
        }
        bytes.extend_from_slice(lines);
        let landed = file.append(&bytes)?;
        let lines_start = landed.offset + u64::from(newline_first);
        if newline_first || landed.offset == known || file.starts_a_line(landed.offset)? {
            return Ok((landed, lines_start));
        }
        tracing::warn!(
            "{}: another writer's unfinished line was in the file where our line landed; writing it again after it",
            file.path()
        );
        bytes.insert(0, b'\n');
        let again = file.append(&bytes)?;
        let lines_start = again.offset + 1;
        Ok((again, lines_start))
    }

    /// The file changed under a write in a way that following it cannot explain (cut short, or lines that could
    /// not be read): reads it again as an open would, and finds our `count` lines, written at `lines_start`.
    fn reload_finding_ours(
        &mut self,
        leaf: Key,
        lines_start: u64,
        count: usize,
        changes: &mut Vec<Change>,
    ) -> Result<Range<usize>> {
        self.reload()?;
        changes.push(Change::Reloaded);
        let first = self.records.iter().position(|r| {
            matches!(r.body.source, crate::session::entry::BodySource::File { offset, .. } if offset == lines_start)
        });
        match first {
            Some(first) if first + count <= self.records.len() => {
                if !leaf.truthy() || self.index.contains(&leaf) {
                    self.index.leaf = leaf;
                }
                Ok(first..first + count)
            }
            _ => {
                Err(self
                    .conflict("another process changed the session file while it was written; it was read again", true))
            }
        }
    }

    /// Another writer (one that takes no lock: pi) appended between our look at the file and our write, so our
    /// lines landed after its: its lines become records first (reported as external appends), then ours, in file
    /// order, as a fresh open would read them. Returns where records `write_from..` (ours) are now.
    fn adopt_interleaved(
        &mut self,
        write_from: usize,
        known: u64,
        lines_start: u64,
        lens: &[u64],
        changes: &mut Vec<Change>,
    ) -> Result<Range<usize>> {
        let leaf = self.index.leaf.clone();
        let ours = self.records.split_off(write_from);
        for r in ours.iter().rev() {
            if !r.is_header() {
                self.index.remove_newest(&r.id, Key::Null);
            }
        }
        let file = self.file.as_ref().expect("just written");
        let start = Start {
            offset: known,
            line: self.lines.len() as u32,
            seen_header: self.records.iter().any(Record::is_header),
            hold_back_partial: true,
        };
        let foreign = match file.read_between(start, lines_start) {
            Ok(loaded) if loaded.len == lines_start => loaded,
            other => {
                // Their bytes before ours could not be read as whole lines: read the whole file again rather
                // than guess.
                tracing::warn!(
                    "{}: another writer's bytes before ours could not be read as whole lines ({:?}); reading the \
                     file again",
                    file.path(),
                    other.err()
                );
                return self.reload_finding_ours(leaf, lines_start, lens.len(), changes);
            }
        };
        let foreign_first = self.records.len();
        self.absorb(foreign);
        let theirs = foreign_first..self.records.len();
        if theirs.clone().any(|i| !self.records[i].is_header()) {
            changes.push(Change::Appended { records: theirs, origin: Origin::External });
        }
        let ours_first = self.records.len();
        let mut offset = lines_start;
        for (mut r, &len) in ours.into_iter().zip(lens) {
            let i = self.records.len();
            r.body = Body::file(offset, len);
            self.lines.push(LineSlot { offset, len, record: Some(i) });
            if !r.is_header() {
                self.index.add(i, &r);
            }
            self.records.push(r);
            offset += len + 1;
        }
        self.index.leaf = leaf;
        Ok(ours_first..self.records.len())
    }

    /// Adds lines read from the file after what is known (records, line slots, warnings, index, labels).
    fn absorb(&mut self, loaded: LoadedFile) {
        let first_new = self.records.len();
        let LoadedFile { records, lines, warnings, .. } = loaded;
        for mut slot in lines {
            slot.record = slot.record.map(|r| r + first_new);
            self.lines.push(slot);
        }
        self.records.extend(records);
        self.warnings.extend(warnings);
        for i in first_new..self.records.len() {
            let r = &self.records[i];
            if !r.is_header() {
                self.index.add(i, r);
                self.index.apply_label(r);
            }
        }
    }

    /// A fragment another writer left unterminated was ended with `\n` before our line: keep it as a torn line.
    fn note_torn_fragment(&mut self, offset: u64, len: u64) {
        let line = self.lines.len() as u32 + 1;
        self.lines.push(LineSlot { offset, len, record: None });
        self.warnings.push(Warning {
            line,
            kind: WarningKind::TornTail,
            message: "another writer left this line incomplete; it is kept and ended, and later lines start fresh"
                .to_owned(),
        });
    }

    /// Every line to write for a file holding records `..upto`: the loaded layout (lines pi would drop
    /// included) followed by records added since.
    fn layout(&self, upto: usize) -> Vec<LineSlot> {
        let mut slots: Vec<LineSlot> =
            self.lines.iter().filter(|s| s.record.is_none_or(|r| r < upto)).copied().collect();
        let covered: std::collections::HashSet<usize> = slots.iter().filter_map(|s| s.record).collect();
        slots.extend((0..upto).filter(|r| !covered.contains(r)).map(|r| LineSlot {
            offset: 0,
            len: 0,
            record: Some(r),
        }));
        slots
    }

    /// Writes `slots` (record bodies, or raw lines read from the current file) and returns where each landed.
    fn write_layout(
        &self,
        slots: &[LineSlot],
        reader: BodyReader<'_>,
        w: &mut dyn std::io::Write,
    ) -> std::io::Result<Vec<LineSlot>> {
        let mut placed = Vec::with_capacity(slots.len());
        let mut offset = 0u64;
        for slot in slots {
            let bytes = match slot.record {
                Some(r) => trim_json_ws(&reader.body(&self.records[r].body)?).to_vec(),
                None => reader.raw(slot.offset, slot.len)?,
            };
            w.write_all(&bytes)?;
            w.write_all(b"\n")?;
            placed.push(LineSlot { offset, len: bytes.len() as u64, record: slot.record });
            offset += bytes.len() as u64 + 1;
        }
        Ok(placed)
    }

    /// Creates `path` exclusively with records `..upto` (the lazy first write, or a deleted file written again)
    /// and makes it this session's file.
    fn write_new_file(&mut self, path: &str, upto: usize) -> Result<()> {
        let slots = self.layout(upto);
        let mut content = Vec::new();
        let reader = self.file.as_ref().map_or(BodyReader::NONE, SessionFile::lines);
        let placed = self.write_layout(&slots, reader, &mut content).map_err(|e| Error::io("write", path, e))?;
        let file = SessionFile::create(path, &content, self.durability)?;
        self.adopt_layout(placed);
        self.file = Some(file);
        self.tail = None;
        Ok(())
    }

    /// Rewrites the whole file (every record, staged ones included) through a temporary file renamed over it.
    fn rewrite_file(&mut self) -> Result<()> {
        let slots = self.layout(self.records.len());
        let mut placed = Vec::new();
        // The rewrite reads the old file through its own handle while the new one is written.
        let mut file = self.file.take().expect("a file to rewrite");
        let result = file.replace(|reader, w| {
            placed = self.write_layout(&slots, reader, w)?;
            Ok(())
        });
        self.file = Some(file);
        result?;
        self.adopt_layout(placed);
        self.pending = PendingRepairs::default();
        self.tail = None;
        Ok(())
    }

    /// Points every record at its place in the file just written.
    fn adopt_layout(&mut self, placed: Vec<LineSlot>) {
        for slot in &placed {
            if let Some(r) = slot.record {
                self.records[r].body = Body::file(slot.offset, slot.len);
            }
        }
        self.lines = placed;
    }

    /// Applies pi's held-back load-time repairs now. Called before the first write to an opened file; callers
    /// that want pi's eager behaviour (rewrite on open) may call it right after opening.
    pub fn apply_pending_repairs(&mut self) -> Result<()> {
        if !self.persist || self.file.is_none() || !(self.pending.rewrite || self.pending.final_newline) {
            return Ok(());
        }
        self.last_seen = None;
        let mut changes = Vec::new();
        let first = self.records.len();
        self.write_staged(first, &mut changes).map(|_| ())
    }

    /// The pending load-time repairs.
    pub fn pending_repairs(&self) -> super::PendingRepairs {
        self.pending
    }

    /// How hard writes try to reach the disk (default: like pi, no fsync).
    pub fn set_durability(&mut self, durability: Durability) {
        self.durability = durability;
        if let Some(f) = self.file.as_mut() {
            f.set_durability(durability);
        }
    }

    /// fsyncs writes that group commit ([`Durability::Batch`]) left pending (those of pi's method names, whose
    /// commits are not returned).
    pub fn sync(&mut self) -> Result<()> {
        match self.file.as_mut() {
            Some(f) => f.sync(),
            None => Ok(()),
        }
    }

    // ----------------------------------------------------------------------------------------------------------
    // pi's method names: the same write path, without following the file first (pi does not)

    /// `appendMessage(message)`. Returns the new entry's id.
    pub fn append_message(&mut self, message: Json) -> Result<String> {
        self.run_unfollowed(Op::AppendMessage { message }).map(entry_id)
    }

    /// `appendThinkingLevelChange(thinkingLevel)`.
    pub fn append_thinking_level_change(&mut self, thinking_level: Json) -> Result<String> {
        self.run_unfollowed(Op::AppendThinkingLevelChange { thinking_level }).map(entry_id)
    }

    /// `appendModelChange(provider, modelId)`.
    pub fn append_model_change(&mut self, provider: Json, model_id: Json) -> Result<String> {
        self.run_unfollowed(Op::AppendModelChange { provider, model_id }).map(entry_id)
    }

    /// `appendUsage(kind, provider, model, usage, note?)`. Returns the entry's index (pi returns the entry).
    pub fn append_usage(
        &mut self,
        kind: Json,
        provider: Json,
        model: Json,
        usage: Json,
        note: Option<Json>,
    ) -> Result<usize> {
        match self.run_unfollowed(Op::AppendUsage { kind, provider, model, usage, note })? {
            OpValue::Entry { record, .. } => Ok(record),
            other => unreachable!("an append returns its entry: {other:?}"),
        }
    }

    /// `appendCompaction(summary, firstKeptEntryId | null, tokensBefore, details?, fromHook?, usage?)`, plus the
    /// seed's optional `retainedTail` (written last; `firstKeptEntryId` is always written too).
    #[allow(clippy::too_many_arguments)]
    pub fn append_compaction(
        &mut self,
        summary: Json,
        first_kept_entry_id: Option<Json>,
        tokens_before: Json,
        details: Option<Json>,
        from_hook: Option<Json>,
        usage: Option<Json>,
        retained_tail: Option<Json>,
    ) -> Result<String> {
        self.append_compaction_with(
            summary,
            first_kept_entry_id,
            tokens_before,
            details,
            from_hook,
            usage,
            None,
            retained_tail,
        )
    }

    /// [`SessionManager::append_compaction`] with an explicit checkpoint system message (written as given) instead
    /// of pi's replay of the current system messages.
    #[allow(clippy::too_many_arguments)]
    pub fn append_compaction_with(
        &mut self,
        summary: Json,
        first_kept_entry_id: Option<Json>,
        tokens_before: Json,
        details: Option<Json>,
        from_hook: Option<Json>,
        usage: Option<Json>,
        system_message: Option<Json>,
        retained_tail: Option<Json>,
    ) -> Result<String> {
        let c = Compaction {
            summary,
            first_kept_entry_id,
            tokens_before,
            details,
            from_hook,
            usage,
            system_message,
            retained_tail,
        };
        self.run_unfollowed(Op::AppendCompaction(Box::new(c))).map(entry_id)
    }

    /// `appendCustomEntry(customType, data?)`. Key order: type, customType, data, id, parentId, timestamp.
    pub fn append_custom_entry(&mut self, custom_type: Json, data: Option<Json>) -> Result<String> {
        self.run_unfollowed(Op::AppendCustomEntry { custom_type, data }).map(entry_id)
    }

    /// `appendSessionInfo(name)`: CR/LF runs become one space, then the name is trimmed (an empty name clears).
    pub fn append_session_info(&mut self, name: &JsString) -> Result<String> {
        self.run_unfollowed(Op::AppendSessionInfo { name: name.clone() }).map(entry_id)
    }

    /// `appendCustomMessageEntry(customType, content, display, details?)`. Key order: type, customType, content,
    /// display, details, id, parentId, timestamp.
    pub fn append_custom_message_entry(
        &mut self,
        custom_type: Json,
        content: Json,
        display: Json,
        details: Option<Json>,
    ) -> Result<String> {
        self.run_unfollowed(Op::AppendCustomMessageEntry { custom_type, content, display, details }).map(entry_id)
    }

    /// `appendContextEdit(targetId, replacement)`: `replacement` is `null` (omit the target) or `{content}`
    /// (string or array). None stands for `undefined`, which pi rejects.
    pub fn append_context_edit(&mut self, target_id: &Key, replacement: Option<Json>) -> Result<String> {
        let op = Op::AppendContextEdit { target_id: target_id.clone().into(), replacement };
        self.run_unfollowed(op).map(entry_id)
    }

    /// `appendLabelChange(targetId, label?)`: a truthy label sets, anything else clears. None writes no `label`
    /// member (pi's `undefined`).
    pub fn append_label_change(&mut self, target_id: &Key, label: Option<Json>) -> Result<String> {
        self.run_unfollowed(Op::AppendLabelChange { target_id: target_id.clone().into(), label }).map(entry_id)
    }

    /// `branch(entryId)`: move the leaf to an existing entry.
    pub fn branch(&mut self, entry_id: &Key) -> Result<()> {
        self.run_unfollowed(Op::Branch { entry_id: entry_id.clone().into() }).map(drop)
    }

    /// `resetLeaf()`: the next append starts a new root.
    pub fn reset_leaf(&mut self) {
        self.index.leaf = Key::Null;
    }

    /// `branchWithSummary(branchFromId | null, summary, details?, fromHook?, usage?)`: move the leaf and append a
    /// `branch_summary` whose `fromId` is the abandoned leaf (`"root"` when there was none).
    pub fn branch_with_summary(
        &mut self,
        branch_from_id: Option<&Key>,
        summary: Json,
        details: Option<Json>,
        from_hook: Option<Json>,
        usage: Option<Json>,
    ) -> Result<String> {
        let from = branch_from_id.cloned().map(EntryRef::Id);
        let op = Op::BranchWithSummary { entry_id: from, summary, details, from_hook, usage };
        self.run_unfollowed(op).map(entry_id)
    }

    /// `createBranchedSession(leafId)`: this manager becomes a new session holding only the path to `leafId`
    /// (labels dropped from the path and re-created after it, parents re-chained). Returns the new file path
    /// (None in memory). The old file is untouched.
    pub fn create_branched_session(&mut self, leaf_id: &Key) -> Result<Option<String>> {
        let previous_file = self.session_file.clone();
        let path = self.index.branch(&self.records, Some(leaf_id));
        if path.is_empty() {
            return Err(Error::EntryNotFound { id: leaf_id.display() });
        }
        // Re-chain the path without its labels; remember what each removed label "stood before".
        let mut kept: Vec<(usize, Key, Option<Key>)> = Vec::new(); // (record, new parent, new firstKeptEntryId)
        let mut replacement_by_label: indexmap::IndexMap<Key, Key> = indexmap::IndexMap::new();
        let mut pending_labels: Vec<Key> = Vec::new();
        let mut parent = Key::Null;
        for &i in &path {
            let r = &self.records[i];
            if r.kind == EntryType::Label {
                pending_labels.push(r.id.clone());
                continue;
            }
            for l in pending_labels.drain(..) {
                replacement_by_label.insert(l, r.id.clone());
            }
            let first_kept = match &r.detail {
                Detail::Compaction { first_kept, .. } if r.kind == EntryType::Compaction => {
                    if *first_kept == r.id {
                        None
                    } else {
                        replacement_by_label.get(first_kept).cloned()
                    }
                }
                _ => None,
            };
            kept.push((i, parent.clone(), first_kept));
            parent = r.id.clone();
        }
        let new_id = self.env.session_id();
        let (_, timestamp) = self.env.now_iso();
        let new_file = paths::join(&[&self.session_dir, &format!("{}_{}.jsonl", file_stamp(&timestamp), new_id)]);
        let parent_session = if self.persist { previous_file.as_deref() } else { None };
        let header = header_json(&new_id, &timestamp, &self.cwd, parent_session);

        // New records: the old bodies (still in the old file) with parentId and firstKeptEntryId spliced in.
        let mut new_records = vec![record_from_bytes(header.to_canonical_string().into_bytes())];
        let mut path_ids: std::collections::HashSet<Key> = std::collections::HashSet::new();
        for (i, new_parent, first_kept) in &kept {
            let r = &self.records[*i];
            let mut nr = r.clone();
            if r.is_object {
                // Re-chained bytes are described again when a skeleton is asked for.
                nr.skeleton = None;
                let patch = nr.body.patch_mut();
                match key_text(new_parent) {
                    Some(t) => patch.set("parentId", t),
                    None => patch.remove("parentId"),
                }
                if let Some(fk) = first_kept {
                    match key_text(fk) {
                        Some(t) => patch.set("firstKeptEntryId", t),
                        None => patch.remove("firstKeptEntryId"),
                    }
                }
            }
            nr.parent = new_parent.clone();
            if let (Some(fk), Detail::Compaction { first_kept_index, .. }) = (first_kept, &r.detail) {
                nr.detail = Detail::Compaction { first_kept: fk.clone(), first_kept_index: *first_kept_index };
            }
            path_ids.insert(r.id.clone());
            new_records.push(nr);
        }
        let labels: Vec<(Key, Json, Option<Json>)> = self
            .index
            .labels()
            .filter(|(target, _)| path_ids.contains(*target))
            .map(|(t, l)| (t.clone(), l.label.clone(), l.timestamp.clone()))
            .collect();
        let mut label_parent = match kept.last().map(|(i, _, _)| &self.records[*i].id) {
            Some(k) if k.truthy() => k.clone(),
            _ => Key::Null,
        };
        for (target, label, ts) in labels {
            let label_id = ids::generate_entry_id(self.env.ids.as_mut(), |id| path_ids.contains(&Key::str(id)));
            let mut o = Object::new();
            o.insert("type", Json::str("label"));
            o.insert("id", Json::str(&label_id));
            o.insert("parentId", key_json(&label_parent).unwrap_or(Json::Null));
            if let Some(ts) = ts {
                o.insert("timestamp", ts);
            }
            if let Some(t) = key_json(&target) {
                o.insert("targetId", t);
            }
            o.insert("label", label);
            new_records.push(record_from_bytes(Json::Object(o).to_canonical_string().into_bytes()));
            path_ids.insert(Key::str(&label_id));
            label_parent = Key::str(&label_id);
        }
        self.records = new_records;
        self.session_id = Json::str(&new_id);
        self.index = TreeIndex::build(&self.records);
        self.lines.clear();
        self.tail = None;
        self.pending = PendingRepairs::default();
        self.warnings.clear();
        if self.persist && self.has_conversation()? {
            // Written at once, streamed from the old file (which stays untouched).
            self.session_file = Some(new_file.clone());
            self.write_new_file(&new_file, self.records.len())?;
            self.flushed = true;
            return Ok(Some(new_file));
        }
        // Not written yet: the bodies must outlive the old file, so they move into memory (a path without a user
        // or assistant message is small).
        for i in 0..self.records.len() {
            let bytes = self.bodies().bytes(i)?;
            self.records[i].body = Body::memory(bytes);
        }
        self.file = None;
        self.flushed = false;
        if !self.persist {
            return Ok(None);
        }
        self.session_file = Some(new_file.clone());
        Ok(Some(new_file))
    }
}

/// True when `op` moves the leaf without appending (or is a batch holding such an op).
fn moves_leaf(op: &Op) -> bool {
    match op {
        Op::Branch { .. } | Op::ResetLeaf => true,
        Op::Batch(ops) => ops.iter().any(moves_leaf),
        _ => false,
    }
}

/// The id an [`EntryRef`] stands for.
fn resolve(entry: EntryRef, earlier: &[OpValue]) -> Result<Key> {
    match entry {
        EntryRef::Id(id) => Ok(id),
        EntryRef::Earlier(index) => {
            earlier.get(index).and_then(OpValue::id).map(Key::str).ok_or(Error::InvalidReference { index })
        }
    }
}

/// Points the record indices of `value` at where their entries are now (after another writer's records were
/// put before them).
fn relocate(value: &mut OpValue, index: &TreeIndex) {
    match value {
        OpValue::Entry { id, record } => {
            if let Some(i) = index.get(&Key::str(id)) {
                *record = i;
            }
        }
        OpValue::Batch(values) => values.iter_mut().for_each(|v| relocate(v, index)),
        OpValue::Done | OpValue::Path(_) => {}
    }
}

fn entry_id(value: OpValue) -> String {
    match value {
        OpValue::Entry { id, .. } => id,
        other => unreachable!("an append returns its entry: {other:?}"),
    }
}
