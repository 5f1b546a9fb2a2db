//! Every mutation: the append methods, branching, and the methods that rebind a handle to another session.
//!
//! All of them go through [`apply`]: the engine's `SessionManager::apply` follows the file before writing (pi
//! takes no lock), checks the host's `expectedLeafId`, writes, and says what changed; this module sends those
//! changes as `session/changed` before the handler returns — hence before the response.

use crate::rpc::error::WireKind;
use std::sync::Arc;

use jsonrpsee::types::ErrorObjectOwned;

use super::changes::publish;
use super::{key, registered_path, Res, WriteCx};
use crate::rpc::error::{self, from_session, invalid_params};
use crate::rpc::proto::*;
use crate::rpc::reply::Out;
use crate::session::change::{Change, Compaction, EntryIdentity, EntryRef, Op, OpValue};
use crate::session::js::date::{parse_date, to_iso_string};
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
    if outcome.changes.contains(&Change::Rebound) {
        // The handle holds another file now: requests and watches find it under the new path.
        let new_path = registered_path(m);
        server.registry.set_path(slot, new_path);
        super::watch::moved(server, slot, old_path.as_deref(), new_path);
    }
    publish(server, slot, m, &outcome.changes);
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

fn unexpected(what: &str, value: &OpValue) -> ErrorObjectOwned {
    error::rpc_error(WireKind::InternalError, format!("{what} returned {value:?}"), serde_json::json!({}))
}

/// A mutation method's op, ready for the engine: what it asks, the leaf it expects, and how its answer looks.
#[derive(Debug)]
pub struct Planned {
    /// The op.
    pub op: Op,
    /// The `expectedLeafId` given.
    pub expected_leaf: Option<String>,
    /// How the method answers with the op's value.
    pub answer: Answer,
}

/// How a mutation method answers with its op's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// `{id}`.
    Id,
    /// `{entry}` (appendUsage).
    Entry,
    /// `null` (branch, resetLeaf).
    Null,
}

fn planned(op: Op, expected_leaf: Option<String>, answer: Answer) -> Result<Planned, ErrorObjectOwned> {
    Ok(Planned { op, expected_leaf, answer })
}

/// An append's op with the id and timestamp its host chose, when it chose any; a timestamp must read back as
/// itself through JavaScript's `Date` (what `toISOString` writes), so what pi reads is what was sent.
fn chosen(op: Op, id: Option<String>, timestamp: Option<String>) -> Result<Op, ErrorObjectOwned> {
    if id.as_deref() == Some("") {
        return Err(invalid_params("id", "id must not be empty"));
    }
    if let Some(t) = &timestamp {
        let reads_back = to_iso_string(parse_date(t)).is_some_and(|iso| iso == *t);
        if !reads_back {
            return Err(invalid_params(
                "timestamp",
                format!("timestamp must be written as toISOString writes it (2026-01-02T03:04:05.678Z), not {t:?}"),
            ));
        }
    }
    if id.is_none() && timestamp.is_none() {
        return Ok(op);
    }
    Ok(Op::WithIdentity { identity: EntryIdentity { id, timestamp }, op: Box::new(op) })
}

/// `session/appendMessage`'s op.
pub fn message_op(p: AppendMessageParams) -> Result<Planned, ErrorObjectOwned> {
    if !matches!(&p.message.0, Json::Object(o) if matches!(o.get("role"), Some(Json::String(_)))) {
        return Err(invalid_params("message.role", "message must be an object with a string role"));
    }
    planned(chosen(Op::AppendMessage { message: p.message.0 }, p.id, p.timestamp)?, p.expected_leaf_id, Answer::Id)
}

/// `session/appendThinkingLevelChange`'s op.
pub fn thinking_level_change_op(p: AppendThinkingLevelChangeParams) -> Result<Planned, ErrorObjectOwned> {
    let op = Op::AppendThinkingLevelChange { thinking_level: Json::String(p.thinking_level.0) };
    planned(chosen(op, p.id, p.timestamp)?, p.expected_leaf_id, Answer::Id)
}

/// `session/appendModelChange`'s op.
pub fn model_change_op(p: AppendModelChangeParams) -> Result<Planned, ErrorObjectOwned> {
    let op = Op::AppendModelChange { provider: Json::String(p.provider.0), model_id: Json::String(p.model_id.0) };
    planned(chosen(op, p.id, p.timestamp)?, p.expected_leaf_id, Answer::Id)
}

/// `session/appendUsage`'s op.
pub fn usage_op(p: AppendUsageParams) -> Result<Planned, ErrorObjectOwned> {
    let op = Op::AppendUsage {
        kind: Json::String(p.kind.0),
        provider: Json::String(p.provider.0),
        model: Json::String(p.model.0),
        usage: p.usage.0,
        note: p.note.map(|n| Json::String(n.0)),
    };
    planned(chosen(op, p.id, p.timestamp)?, p.expected_leaf_id, Answer::Entry)
}

/// `session/appendCompaction`'s op.
pub fn compaction_op(p: AppendCompactionParams) -> Result<Planned, ErrorObjectOwned> {
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
    planned(chosen(op, p.id, p.timestamp)?, p.expected_leaf_id, Answer::Id)
}

/// `session/appendCustomEntry`'s op.
pub fn custom_entry_op(p: AppendCustomEntryParams) -> Result<Planned, ErrorObjectOwned> {
    let op = Op::AppendCustomEntry { custom_type: Json::String(p.custom_type.0), data: p.data.map(|d| d.0) };
    planned(chosen(op, p.id, p.timestamp)?, p.expected_leaf_id, Answer::Id)
}

/// `session/appendSessionInfo`'s op.
pub fn session_info_op(p: AppendSessionInfoParams) -> Result<Planned, ErrorObjectOwned> {
    planned(chosen(Op::AppendSessionInfo { name: p.name.0 }, p.id, p.timestamp)?, p.expected_leaf_id, Answer::Id)
}

/// `session/appendCustomMessageEntry`'s op.
pub fn custom_message_entry_op(p: AppendCustomMessageEntryParams) -> Result<Planned, ErrorObjectOwned> {
    let op = Op::AppendCustomMessageEntry {
        custom_type: Json::String(p.custom_type.0),
        content: p.content.0,
        display: p.display.0,
        details: p.details.map(|d| d.0),
    };
    planned(chosen(op, p.id, p.timestamp)?, p.expected_leaf_id, Answer::Id)
}

/// `session/appendContextEdit`'s op.
pub fn context_edit_op(p: AppendContextEditParams) -> Result<Planned, ErrorObjectOwned> {
    let op = Op::AppendContextEdit { target_id: key(&p.target_id).into(), replacement: Some(p.replacement.0) };
    planned(chosen(op, p.id, p.timestamp)?, p.expected_leaf_id, Answer::Id)
}

/// `session/appendLabelChange`'s op.
pub fn label_change_op(p: AppendLabelChangeParams) -> Result<Planned, ErrorObjectOwned> {
    let op = Op::AppendLabelChange { target_id: key(&p.target_id).into(), label: p.label.map(|l| l.0) };
    planned(chosen(op, p.id, p.timestamp)?, p.expected_leaf_id, Answer::Id)
}

/// `session/branch`'s op.
pub fn branch_op(p: BranchParams) -> Result<Planned, ErrorObjectOwned> {
    planned(Op::Branch { entry_id: key(&p.entry_id).into() }, p.expected_leaf_id, Answer::Null)
}

/// `session/resetLeaf`'s op.
pub fn reset_leaf_op(p: ResetLeafParams) -> Result<Planned, ErrorObjectOwned> {
    planned(Op::ResetLeaf, p.expected_leaf_id, Answer::Null)
}

/// `session/branchWithSummary`'s op.
pub fn branch_with_summary_op(p: BranchWithSummaryParams) -> Result<Planned, ErrorObjectOwned> {
    let op = Op::BranchWithSummary {
        entry_id: p.entry_id.as_deref().map(|id| key(id).into()),
        summary: Json::String(p.summary.0),
        details: p.details.map(|v| v.0),
        from_hook: p.from_hook.map(|v| v.0),
        usage: p.usage.map(|v| v.0),
    };
    planned(chosen(op, p.id, p.timestamp)?, p.expected_leaf_id, Answer::Id)
}

/// Points an op's `field` (`targetId`, `entryId`) at the entry that op `n` of its batch appends; false when the
/// op has no such field.
pub fn point_at_earlier(op: &mut Op, field: &str, n: usize) -> bool {
    let earlier = EntryRef::Earlier(n);
    match (op, field) {
        (Op::WithIdentity { op, .. }, _) => return point_at_earlier(op, field, n),
        (Op::AppendLabelChange { target_id, .. } | Op::AppendContextEdit { target_id, .. }, "targetId") => {
            *target_id = earlier
        }
        (Op::Branch { entry_id }, "entryId") => *entry_id = earlier,
        (Op::BranchWithSummary { entry_id, .. }, "entryId") => *entry_id = Some(earlier),
        _ => return false,
    }
    true
}

/// Runs a planned op alone and answers as its method does (the method table's `ops:` lines run through here).
pub fn run_planned<T>(cx: &mut WriteCx<'_>, planned: Result<Planned, ErrorObjectOwned>) -> Res<T> {
    let Planned { op, expected_leaf, answer } = planned?;
    let value = apply(cx, expected_leaf, op)?;
    Ok(Out::json(answer_json(cx, answer, &value)?))
}

/// The JSON text a method answers with for its op's value.
fn answer_json(cx: &WriteCx<'_>, answer: Answer, value: &OpValue) -> Result<Vec<u8>, ErrorObjectOwned> {
    Ok(match (answer, value) {
        (Answer::Id, OpValue::Entry { id, .. }) => serde_json::to_vec(&IdResult { id: id.clone() }).expect("JSON"),
        (Answer::Entry, OpValue::Entry { record, .. }) => {
            let entry = super::read::entry_json(cx.m, *record)?;
            serde_json::to_vec(&EntryResult { entry }).expect("JSON")
        }
        (Answer::Null, _) => b"null".to_vec(),
        (_, other) => return Err(unexpected("an op", other)),
    })
}

/// `session/appendBatch`, its ops parsed (`methods::append_batch` parses each with its own method's params type):
/// one engine batch (one write, one fsync under `--durability entry`, one `session/changed` for all the entries,
/// all or nothing), answered with what each op's method answers alone.
pub fn append_batch(
    expected_leaf: Option<String>,
    planned: Vec<Planned>,
    cx: &mut WriteCx<'_>,
) -> Res<AppendBatchResult> {
    if planned.is_empty() {
        return Err(invalid_params("ops", "a batch needs at least one op"));
    }
    let mut ops = Vec::with_capacity(planned.len());
    let mut answers = Vec::with_capacity(planned.len());
    for (n, p) in planned.into_iter().enumerate() {
        if p.expected_leaf.is_some() {
            return Err(invalid_params(
                &format!("ops[{n}].params.expectedLeafId"),
                "give expectedLeafId on the batch, not on its ops",
            ));
        }
        ops.push(p.op);
        answers.push(p.answer);
    }
    let value = apply(cx, expected_leaf, Op::Batch(ops))?;
    let OpValue::Batch(values) = &value else { return Err(unexpected("a batch", &value)) };
    let mut text = br#"{"results":["#.to_vec();
    for (n, (&answer, v)) in answers.iter().zip(values).enumerate() {
        if n > 0 {
            text.push(b',');
        }
        text.extend(answer_json(cx, answer, v)?);
    }
    text.extend_from_slice(b"]}");
    Ok(Out::json(text))
}

/// Runs a rebinding op with the detail it asks for (kept only if it succeeds), so the `rebind` notification
/// already carries the snapshot at that detail.
fn rebind(
    cx: &mut WriteCx<'_>,
    expected_leaf: Option<String>,
    snapshot: Option<Detail>,
    op: Op,
) -> Result<OpValue, ErrorObjectOwned> {
    let previous = cx.slot.detail();
    if let Some(detail) = snapshot {
        cx.slot.set_detail(detail);
    }
    let result = apply(cx, expected_leaf, op);
    if result.is_err() {
        cx.slot.set_detail(previous);
    }
    result
}

/// `session/createBranchedSession`.
pub fn create_branched_session(p: CreateBranchedSessionParams, cx: &mut WriteCx<'_>) -> Res<PathResult> {
    let path = match rebind(cx, p.expected_leaf_id, p.snapshot, Op::CreateBranchedSession { leaf_id: key(&p.leaf_id) })?
    {
        OpValue::Path(path) => path,
        other => return Err(unexpected("createBranchedSession", &other)),
    };
    match p.snapshot {
        Some(detail @ (Detail::Skeleton | Detail::Full)) => {
            let (m, seq) = (&*cx.m, cx.slot.current_seq());
            let head = serde_json::to_vec(&PathResult { path, snapshot: None }).expect("JSON");
            cx.reply.rendered(detail.copies_file_bytes(), &|out| {
                out.raw(&head[..head.len() - 1])?;
                out.raw(b",\"snapshot\":")?;
                super::snapshot::snapshot(m, seq, detail, out)?;
                out.raw(b"}")
            })
        }
        _ => Ok(Out::Value(PathResult { path, snapshot: None })),
    }
}

/// `session/newSession`.
pub fn new_session(p: NewSessionParams, cx: &mut WriteCx<'_>) -> Res<SessionState> {
    let options = NewSessionOptions { id: p.id, parent_session: p.parent_session };
    rebind(cx, None, p.snapshot, Op::NewSession(options))?;
    super::open::state_with(cx.reply, cx.slot, cx.m, p.snapshot, None)
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
    rebind(cx, None, p.snapshot, Op::SetSessionFile { path: resolved })?;
    super::open::state_with(cx.reply, cx.slot, cx.m, p.snapshot, None)
}
