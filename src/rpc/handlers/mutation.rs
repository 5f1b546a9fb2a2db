//! Every mutation: the append methods, branching, and the methods that rebind a handle to another session.
//!
//! All of them go through [`apply`]: the engine's `SessionManager::apply` follows the file before writing (pi
//! takes no lock), checks the host's `expectedLeafId`, writes, and says what changed; this module sends those
//! changes as `session/changed` before the handler returns — hence before the response.

use std::sync::Arc;

use jsonrpsee::types::ErrorObjectOwned;

use super::{key, null, registered_path, state_of, Res, WriteCx};
use crate::rpc::error::{self, from_session, invalid_params};
use crate::rpc::proto::*;
use crate::rpc::reply::Out;
use crate::session::change::{Change, Compaction, Op, OpValue};
use crate::session::json::Json;
use crate::session::{paths, NewSessionOptions};

/// Runs a mutation through the engine and sends the `session/changed` notifications it reports: what following
/// the file found (even when the op is refused), then what the op did.
pub fn apply(cx: &mut WriteCx<'_>, expected_leaf: Option<String>, op: Op) -> Result<OpValue, ErrorObjectOwned> {
    let (server, slot) = (cx.server, cx.slot);
    if let Some(machine) = server.read_only(&slot.handle) {
        return Err(crate::rpc::team::read_only(&slot.handle, &machine));
    }
    let m = &mut *cx.m;
    let old_path = registered_path(m).map(str::to_owned);
    let outcome = m.apply(op, expected_leaf.as_deref());
    super::watch::publish(server, slot, m, &outcome.changes, old_path.as_deref())?;
    // The shared index catches up on what reached the file off the request path, so a search finds it (no `stat`
    // of its own: a written session has its file).
    let file_changed = outcome.changes.iter().any(|c| matches!(c, Change::Appended { .. } | Change::Reloaded));
    if let Some(path) = m.session_file().filter(|_| file_changed && m.is_persisted() && m.is_flushed()) {
        server.index_catch_up.written(path);
    }
    let value = outcome.result.map_err(from_session)?;
    // Under group commit the answer waits for the fsync that covers the write (the slot's worker makes it).
    cx.wrote = outcome.commit.is_pending();
    Ok(value)
}

fn id(value: OpValue) -> Res<IdResult> {
    match value {
        OpValue::Entry { id, .. } => Ok(Out::Value(IdResult { id })),
        other => Err(error::rpc_error(
            error::INTERNAL_ERROR,
            "internal_error",
            format!("an append returned {other:?}"),
            serde_json::json!({}),
        )),
    }
}

/// `session/appendMessage`.
pub fn append_message(p: AppendMessageParams, cx: &mut WriteCx<'_>) -> Res<IdResult> {
    if !matches!(&p.message.0, Json::Object(o) if matches!(o.get("role"), Some(Json::String(_)))) {
        return Err(invalid_params("message.role", "message must be an object with a string role"));
    }
    id(apply(cx, p.expected_leaf_id, Op::AppendMessage { message: p.message.0 })?)
}

/// `session/appendThinkingLevelChange`.
pub fn append_thinking_level_change(p: AppendThinkingLevelChangeParams, cx: &mut WriteCx<'_>) -> Res<IdResult> {
    let op = Op::AppendThinkingLevelChange { thinking_level: Json::String(p.thinking_level.0) };
    id(apply(cx, p.expected_leaf_id, op)?)
}

/// `session/appendModelChange`.
pub fn append_model_change(p: AppendModelChangeParams, cx: &mut WriteCx<'_>) -> Res<IdResult> {
    let op = Op::AppendModelChange { provider: Json::String(p.provider.0), model_id: Json::String(p.model_id.0) };
    id(apply(cx, p.expected_leaf_id, op)?)
}

/// `session/appendUsage`: answers with the entry itself.
pub fn append_usage(p: AppendUsageParams, cx: &mut WriteCx<'_>) -> Res<EntryResult> {
    let op = Op::AppendUsage {
        kind: Json::String(p.kind.0),
        provider: Json::String(p.provider.0),
        model: Json::String(p.model.0),
        usage: p.usage.0,
        note: p.note.map(|n| Json::String(n.0)),
    };
    let OpValue::Entry { record, .. } = apply(cx, p.expected_leaf_id, op)? else {
        return Err(error::rpc_error(
            error::INTERNAL_ERROR,
            "internal_error",
            "appendUsage returned no entry",
            serde_json::json!({}),
        ));
    };
    Ok(Out::Value(EntryResult { entry: super::read::entry_json(cx.m, record)? }))
}

/// `session/appendCompaction`.
pub fn append_compaction(p: AppendCompactionParams, cx: &mut WriteCx<'_>) -> Res<IdResult> {
    let op = Op::AppendCompaction(Box::new(Compaction {
        summary: Json::String(p.summary.0),
        first_kept_entry_id: p.first_kept_entry_id.map(|s| Json::str(&s)),
        tokens_before: p.tokens_before.0,
        details: p.details.map(|v| v.0),
        from_hook: p.from_hook.map(|v| v.0),
        usage: p.usage.map(|v| v.0),
        system_message: p.system_message.map(|v| v.0),
        retained_tail: p.retained_tail.map(|t| Json::Array(t.into_iter().map(|v| v.0).collect())),
    }));
    id(apply(cx, p.expected_leaf_id, op)?)
}

/// `session/appendCustomEntry`.
pub fn append_custom_entry(p: AppendCustomEntryParams, cx: &mut WriteCx<'_>) -> Res<IdResult> {
    let op = Op::AppendCustomEntry { custom_type: Json::String(p.custom_type.0), data: p.data.map(|d| d.0) };
    id(apply(cx, p.expected_leaf_id, op)?)
}

/// `session/appendSessionInfo`.
pub fn append_session_info(p: AppendSessionInfoParams, cx: &mut WriteCx<'_>) -> Res<IdResult> {
    id(apply(cx, p.expected_leaf_id, Op::AppendSessionInfo { name: p.name.0 })?)
}

/// `session/appendCustomMessageEntry`.
pub fn append_custom_message_entry(p: AppendCustomMessageEntryParams, cx: &mut WriteCx<'_>) -> Res<IdResult> {
    let op = Op::AppendCustomMessageEntry {
        custom_type: Json::String(p.custom_type.0),
        content: p.content.0,
        display: p.display.0,
        details: p.details.map(|d| d.0),
    };
    id(apply(cx, p.expected_leaf_id, op)?)
}

/// `session/appendContextEdit`.
pub fn append_context_edit(p: AppendContextEditParams, cx: &mut WriteCx<'_>) -> Res<IdResult> {
    let op = Op::AppendContextEdit { target_id: key(&p.target_id).into(), replacement: Some(p.replacement.0) };
    id(apply(cx, p.expected_leaf_id, op)?)
}

/// `session/appendLabelChange`.
pub fn append_label_change(p: AppendLabelChangeParams, cx: &mut WriteCx<'_>) -> Res<IdResult> {
    let op = Op::AppendLabelChange { target_id: key(&p.target_id).into(), label: p.label.map(|l| l.0) };
    id(apply(cx, p.expected_leaf_id, op)?)
}

/// `session/branch`.
pub fn branch(p: BranchParams, cx: &mut WriteCx<'_>) -> Res<Null> {
    apply(cx, p.expected_leaf_id, Op::Branch { entry_id: key(&p.entry_id).into() })?;
    Ok(Out::Value(null()))
}

/// `session/resetLeaf`.
pub fn reset_leaf(p: ResetLeafParams, cx: &mut WriteCx<'_>) -> Res<Null> {
    apply(cx, p.expected_leaf_id, Op::ResetLeaf)?;
    Ok(Out::Value(null()))
}

/// `session/branchWithSummary`.
pub fn branch_with_summary(p: BranchWithSummaryParams, cx: &mut WriteCx<'_>) -> Res<IdResult> {
    let op = Op::BranchWithSummary {
        entry_id: p.entry_id.as_deref().map(|id| key(id).into()),
        summary: Json::String(p.summary.0),
        details: p.details.map(|v| v.0),
        from_hook: p.from_hook.map(|v| v.0),
        usage: p.usage.map(|v| v.0),
    };
    id(apply(cx, p.expected_leaf_id, op)?)
}

/// `session/createBranchedSession`.
pub fn create_branched_session(p: CreateBranchedSessionParams, cx: &mut WriteCx<'_>) -> Res<PathResult> {
    match apply(cx, p.expected_leaf_id, Op::CreateBranchedSession { leaf_id: key(&p.leaf_id) })? {
        OpValue::Path(path) => Ok(Out::Value(PathResult { path })),
        other => Err(error::rpc_error(
            error::INTERNAL_ERROR,
            "internal_error",
            format!("createBranchedSession returned {other:?}"),
            serde_json::json!({}),
        )),
    }
}

/// `session/newSession`.
pub fn new_session(p: NewSessionParams, cx: &mut WriteCx<'_>) -> Res<SessionState> {
    let options = NewSessionOptions { id: p.id, parent_session: p.parent_session };
    apply(cx, None, Op::NewSession(options))?;
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
    apply(cx, None, Op::SetSessionFile { path: resolved })?;
    state_of(cx.slot, cx.m).map(Out::Value)
}
