//! Staging: pi's entries built in memory from an op (ids, timestamps, key order), before anything is written.

use super::*;

impl SessionManager {
    // ----------------------------------------------------------------------------------------------------------
    // Staging: pi's entries, built in memory

    pub(super) fn new_entry_id(&mut self) -> String {
        let (index, records) = (&self.index, &self.records);
        ids::generate_entry_id(self.env.ids.as_mut(), |id| index.has_str(records, id))
    }

    /// The common fields of a new entry, in pi's order: type, id, parentId, timestamp.
    pub(super) fn base_entry(&mut self, kind: &str) -> (Object, String) {
        let chosen = self.chosen.take().unwrap_or_default();
        let timestamp = chosen.timestamp.unwrap_or_else(|| self.env.now_iso().1);
        let id = chosen.id.unwrap_or_else(|| self.new_entry_id());
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
    pub(super) fn base_entry_last<const N: usize>(
        &mut self,
        kind: &str,
        fields: [(&str, Option<Json>); N],
    ) -> (Object, String) {
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
    pub(super) fn stage_entry(&mut self, entry: Object, id: String) -> OpValue {
        let mut bytes = Vec::new();
        Json::Object(entry).write_canonical(&mut bytes);
        let i = self.records.len();
        self.records.push(record_from_bytes(bytes));
        self.index.add(&self.records, i);
        OpValue::Entry { id, record: i }
    }

    /// Applies `op` to memory only. `earlier` holds the values of the ops before it in its batch.
    pub(super) fn stage(&mut self, op: Op, earlier: &[OpValue]) -> Result<OpValue> {
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
                if !self.index.contains(&self.records, &target_id) {
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
                if !self.index.contains(&self.records, &entry_id) {
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
                    if !self.index.contains(&self.records, id) {
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
            Op::WithIdentity { identity, op } => {
                if let Some(id) = identity.id.as_deref().filter(|id| self.index.has_str(&self.records, id)) {
                    return Err(Error::IdTaken { id: id.to_owned() });
                }
                self.chosen = Some(identity);
                let staged = self.stage(*op, earlier);
                // An op that staged no entry (a refused one) must not hand its identity to the next.
                self.chosen = None;
                staged?
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

    pub(super) fn stage_compaction(&mut self, c: Compaction) -> Result<OpValue> {
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

    pub(super) fn stage_context_edit(&mut self, target_id: &Key, replacement: Option<Json>) -> Result<OpValue> {
        let valid = match &replacement {
            Some(Json::Null) => true,
            Some(Json::Object(o)) => matches!(o.get("content"), Some(Json::String(_) | Json::Array(_))),
            _ => false,
        };
        if !valid {
            return Err(Error::InvalidReplacement);
        }
        let Some(target) = self.index.get(&self.records, target_id) else {
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
}
