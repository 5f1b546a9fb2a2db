//! Every mutation: the append methods, branching, and the methods that rebind a handle to another session.
//!
//! All of them go through [`apply`], the one place that follows the file before writing (pi takes no lock),
//! checks the host's `expectedLeafId`, runs the engine call, and sends `session/changed` before the handler
//! returns — hence before the response.

use std::sync::Arc;

use jsonrpsee::types::ErrorObjectOwned;

use super::{any, key, key_json, leaf_text, null, registered_path, state_at, state_of, Res, WriteCx};
use crate::rpc::error::{self, from_session, invalid_params};
use crate::rpc::proto::*;
use crate::rpc::reply::Out;
use crate::session::json::Json;
use crate::session::{paths, NewSessionOptions, SessionManager};

/// Which `session/changed` a mutation produces.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// New entries.
    Append,
    /// The leaf moved.
    Leaf,
    /// The handle holds another session.
    Rebind,
}

/// Runs a mutation and, when it succeeds, sends `session/changed`.
///
/// First the file is checked for another process's appends: they are published, and the mutation is refused with
/// ContentModified if the host expected another leaf, or if following the file moved the leaf (the host's picture
/// was stale). After the write, appends another writer made around our line are published too.
pub fn apply<R>(
    cx: &mut WriteCx<'_>,
    expected_leaf: Option<String>,
    kind: ChangeKind,
    op: impl FnOnce(&mut SessionManager) -> crate::session::Result<R>,
) -> Result<R, ErrorObjectOwned> {
    let (server, slot) = (cx.server, cx.slot);
    if let Some(machine) = server.read_only(&slot.handle) {
        return Err(crate::rpc::team::read_only(&slot.handle, &machine));
    }
    let m = &mut *cx.m;
    let leaf_before = leaf_text(m);
    let external = super::watch::follow(server, slot, m)?;
    let current = leaf_text(m);
    match &expected_leaf {
        Some(expected) if current.as_deref() != Some(expected.as_str()) => {
            return Err(error::content_modified(current))
        }
        None if external && current != leaf_before => {
            return Err(error::modified_by_another_process(current, m.session_file()))
        }
        _ => {}
    }
    let before = m.records().len();
    let old_path = registered_path(m).map(str::to_owned);
    let result = match op(m) {
        Ok(r) => r,
        Err(e @ crate::session::Error::Conflict { .. }) => {
            // Another process wrote between the check and the write: show what it wrote, refuse ours.
            super::watch::follow(server, slot, m)?;
            if let Some(path) = m.session_file().filter(|_| m.is_persisted() && m.is_flushed()) {
                server.index_catch_up.written(path);
            }
            return Err(error::with_leaf(from_session(e), leaf_text(m)));
        }
        Err(e) => return Err(from_session(e)),
    };
    let seq = slot.next_seq();
    let change = match kind {
        ChangeKind::Append => {
            let added: Vec<usize> = (before..m.records().len()).filter(|&i| !m.records()[i].is_header()).collect();
            Change::Append { entries: super::read::entries_json(m, &added)? }
        }
        ChangeKind::Leaf => Change::Leaf { leaf_id: key_json(m.leaf_id()) },
        ChangeKind::Rebind => {
            let new_path = registered_path(m);
            server.registry.set_path(slot, new_path);
            super::watch::moved(server, slot, old_path.as_deref(), new_path);
            Change::Rebind { state: Box::new(state_at(&slot.handle, m, seq)?) }
        }
    };
    let note = SessionChanged {
        handle: slot.handle.clone(),
        session_id: any(m.session_id()),
        seq,
        origin: None,
        leaf_id: key_json(m.leaf_id()),
        change,
    };
    server.notify("session/changed", &note);
    // A writer that takes no lock (pi) may have appended around our line: publish what it wrote now.
    super::watch::follow(server, slot, m)?;
    // The shared index catches up on the write off the request path, so a search finds it (no `stat` of its own:
    // a written session has its file).
    if let Some(path) = m.session_file().filter(|_| m.is_persisted() && m.is_flushed()) {
        server.index_catch_up.written(path);
    }
    cx.wrote = kind != ChangeKind::Leaf;
    Ok(result)
}

fn id(id: String) -> Res<IdResult> {
    Ok(Out::Value(IdResult { id }))
}

/// `session/appendMessage`.
pub fn append_message(p: AppendMessageParams, cx: &mut WriteCx<'_>) -> Res<IdResult> {
    if !matches!(&p.message.0, Json::Object(o) if matches!(o.get("role"), Some(Json::String(_)))) {
        return Err(invalid_params("message.role", "message must be an object with a string role"));
    }
    id(apply(cx, p.expected_leaf_id, ChangeKind::Append, move |m| m.append_message(p.message.0))?)
}

/// `session/appendThinkingLevelChange`.
pub fn append_thinking_level_change(p: AppendThinkingLevelChangeParams, cx: &mut WriteCx<'_>) -> Res<IdResult> {
    let level = Json::String(p.thinking_level.0);
    id(apply(cx, p.expected_leaf_id, ChangeKind::Append, move |m| m.append_thinking_level_change(level))?)
}

/// `session/appendModelChange`.
pub fn append_model_change(p: AppendModelChangeParams, cx: &mut WriteCx<'_>) -> Res<IdResult> {
    let (provider, model) = (Json::String(p.provider.0), Json::String(p.model_id.0));
    id(apply(cx, p.expected_leaf_id, ChangeKind::Append, move |m| m.append_model_change(provider, model))?)
}

/// `session/appendUsage`: answers with the entry itself.
pub fn append_usage(p: AppendUsageParams, cx: &mut WriteCx<'_>) -> Res<EntryResult> {
    let i = apply(cx, p.expected_leaf_id, ChangeKind::Append, move |m| {
        m.append_usage(
            Json::String(p.kind.0),
            Json::String(p.provider.0),
            Json::String(p.model.0),
            p.usage.0,
            p.note.map(|n| Json::String(n.0)),
        )
    })?;
    Ok(Out::Value(EntryResult { entry: super::read::entry_json(cx.m, i)? }))
}

/// `session/appendCompaction`.
pub fn append_compaction(p: AppendCompactionParams, cx: &mut WriteCx<'_>) -> Res<IdResult> {
    let first_kept = p.first_kept_entry_id.map(|s| Json::str(&s));
    let tail = p.retained_tail.map(|t| Json::Array(t.into_iter().map(|v| v.0).collect()));
    let system = p.system_message.map(|v| v.0);
    id(apply(cx, p.expected_leaf_id, ChangeKind::Append, move |m| {
        m.append_compaction_with(
            Json::String(p.summary.0),
            first_kept,
            p.tokens_before.0,
            p.details.map(|v| v.0),
            p.from_hook.map(|v| v.0),
            p.usage.map(|v| v.0),
            system,
            tail,
        )
    })?)
}

/// `session/appendCustomEntry`.
pub fn append_custom_entry(p: AppendCustomEntryParams, cx: &mut WriteCx<'_>) -> Res<IdResult> {
    id(apply(cx, p.expected_leaf_id, ChangeKind::Append, move |m| {
        m.append_custom_entry(Json::String(p.custom_type.0), p.data.map(|d| d.0))
    })?)
}

/// `session/appendSessionInfo`.
pub fn append_session_info(p: AppendSessionInfoParams, cx: &mut WriteCx<'_>) -> Res<IdResult> {
    id(apply(cx, p.expected_leaf_id, ChangeKind::Append, move |m| m.append_session_info(&p.name.0))?)
}

/// `session/appendCustomMessageEntry`.
pub fn append_custom_message_entry(p: AppendCustomMessageEntryParams, cx: &mut WriteCx<'_>) -> Res<IdResult> {
    id(apply(cx, p.expected_leaf_id, ChangeKind::Append, move |m| {
        m.append_custom_message_entry(Json::String(p.custom_type.0), p.content.0, p.display.0, p.details.map(|d| d.0))
    })?)
}

/// `session/appendContextEdit`.
pub fn append_context_edit(p: AppendContextEditParams, cx: &mut WriteCx<'_>) -> Res<IdResult> {
    let target = key(&p.target_id);
    id(apply(cx, p.expected_leaf_id, ChangeKind::Append, move |m| {
        m.append_context_edit(&target, Some(p.replacement.0))
    })?)
}

/// `session/appendLabelChange`.
pub fn append_label_change(p: AppendLabelChangeParams, cx: &mut WriteCx<'_>) -> Res<IdResult> {
    let target = key(&p.target_id);
    id(apply(cx, p.expected_leaf_id, ChangeKind::Append, move |m| {
        m.append_label_change(&target, p.label.map(|l| l.0))
    })?)
}

/// `session/branch`.
pub fn branch(p: BranchParams, cx: &mut WriteCx<'_>) -> Res<Null> {
    let target = key(&p.entry_id);
    apply(cx, p.expected_leaf_id, ChangeKind::Leaf, move |m| m.branch(&target))?;
    Ok(Out::Value(null()))
}

/// `session/resetLeaf`.
pub fn reset_leaf(p: ResetLeafParams, cx: &mut WriteCx<'_>) -> Res<Null> {
    apply(cx, p.expected_leaf_id, ChangeKind::Leaf, |m| {
        m.reset_leaf();
        Ok(())
    })?;
    Ok(Out::Value(null()))
}

/// `session/branchWithSummary`.
pub fn branch_with_summary(p: BranchWithSummaryParams, cx: &mut WriteCx<'_>) -> Res<IdResult> {
    let from = p.entry_id.as_deref().map(key);
    id(apply(cx, p.expected_leaf_id, ChangeKind::Append, move |m| {
        m.branch_with_summary(
            from.as_ref(),
            Json::String(p.summary.0),
            p.details.map(|v| v.0),
            p.from_hook.map(|v| v.0),
            p.usage.map(|v| v.0),
        )
    })?)
}

/// `session/createBranchedSession`.
pub fn create_branched_session(p: CreateBranchedSessionParams, cx: &mut WriteCx<'_>) -> Res<PathResult> {
    let leaf = key(&p.leaf_id);
    let path = apply(cx, p.expected_leaf_id, ChangeKind::Rebind, move |m| m.create_branched_session(&leaf))?;
    Ok(Out::Value(PathResult { path }))
}

/// `session/newSession`.
pub fn new_session(p: NewSessionParams, cx: &mut WriteCx<'_>) -> Res<SessionState> {
    let options = NewSessionOptions { id: p.id, parent_session: p.parent_session };
    apply(cx, None, ChangeKind::Rebind, move |m| m.new_session(options).map(|_| ()))?;
    state_of(cx.slot, cx.m).map(Out::Value)
}

/// `session/setSessionFile`.
pub fn set_session_file(p: SetSessionFileParams, cx: &mut WriteCx<'_>) -> Res<SessionState> {
    let resolved = paths::resolve_path(&p.path);
    if let Some(other) = cx.server.registry.by_path(&resolved).filter(|s| !Arc::ptr_eq(s, cx.slot)) {
        return Err(invalid_params(
            "path",
            format!("{resolved} is already open as handle {}; use that handle", other.handle),
        ));
    }
    apply(cx, None, ChangeKind::Rebind, move |m| m.set_session_file(&resolved))?;
    state_of(cx.slot, cx.m).map(Out::Value)
}
