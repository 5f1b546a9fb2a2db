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

mod disk;
mod pi_names;
mod stage;

impl SessionManager {
    /// Takes the file's write lock now, as this session's first write would (and holds it while the session is
    /// open): a host that wrote through a process that died takes it back on the next one at once, so no other
    /// writer slips in before its next write. A session whose file is not written yet has nothing to lock.
    pub fn take_write_lock(&mut self) -> Result<()> {
        if !self.persist || !self.flushed {
            return Ok(());
        }
        match self.file.as_mut() {
            Some(file) => file.lock(),
            None => Ok(()),
        }
    }

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
            relocate(&mut value, &self.index, &self.records);
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
                Ok(_) if !leaf.truthy() || self.index.contains(&self.records, &leaf) => self.index.leaf = leaf,
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
        for (i, r) in self.records.iter().enumerate().skip(first).rev() {
            if !r.is_header() {
                self.index.remove_newest(i, &r.id, Key::Null);
            }
        }
        self.records.truncate(first);
        self.index.leaf = leaf;
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
fn relocate(value: &mut OpValue, index: &TreeIndex, records: &[Record]) {
    match value {
        OpValue::Entry { id, record } => {
            if let Some(i) = index.get(records, &Key::str(id)) {
                *record = i;
            }
        }
        OpValue::Batch(values) => values.iter_mut().for_each(|v| relocate(v, index, records)),
        OpValue::Done | OpValue::Path(_) => {}
    }
}

fn entry_id(value: OpValue) -> String {
    match value {
        OpValue::Entry { id, .. } => id,
        other => unreachable!("an append returns its entry: {other:?}"),
    }
}
