//! pi's method names (`appendMessage`, `branch`, `createBranchedSession`, …): the same write path, without
//! following the file first, as pi's own `SessionManager` does not.

use super::*;
use crate::session::entry::CompactionDetail;

impl SessionManager {
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
                Detail::Compaction(c) if r.kind == EntryType::Compaction => {
                    if c.first_kept == r.id {
                        None
                    } else {
                        replacement_by_label.get(&c.first_kept).cloned()
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
            if let (Some(fk), Detail::Compaction(c)) = (first_kept, &r.detail) {
                nr.detail = Detail::Compaction(Box::new(CompactionDetail {
                    first_kept: fk.clone(),
                    first_kept_index: c.first_kept_index,
                }));
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
