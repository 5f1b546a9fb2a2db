//! Wire types of the mutations: each append's params, branching, batches, and what they answer.
//!
//! An op method's `handle` is `Option` marked `#[schemars(required, with = "String")]`: required alone (the method
//! table checks), absent in a batch's op (the batch's is used), so one params type serves both while the schema
//! says what a host sends alone.

use super::*;

// ------------------------------------------------------------------------------------------------------------------
// Mutations

/// `session/appendMessage`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppendMessageParams {
    /// The handle.
    #[schemars(required, with = "String")]
    pub handle: Option<String>,
    /// Fail with ContentModified unless the leaf is this id.
    pub expected_leaf_id: Option<String>,
    /// The new entry's id, chosen by the host so it knows the entry before the answer comes (default: a new one,
    /// as pi makes them). Refused (`invalid_params`) when an entry of the session has this id.
    pub id: Option<String>,
    /// The new entry's timestamp, as JavaScript's `toISOString` writes it (default: now).
    pub timestamp: Option<String>,
    /// The message (pi's AgentMessage: an object with a `role`).
    pub message: PiValue,
}

/// `session/appendThinkingLevelChange`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppendThinkingLevelChangeParams {
    /// The handle.
    #[schemars(required, with = "String")]
    pub handle: Option<String>,
    /// Fail with ContentModified unless the leaf is this id.
    pub expected_leaf_id: Option<String>,
    /// The new entry's id, chosen by the host so it knows the entry before the answer comes (default: a new one,
    /// as pi makes them). Refused (`invalid_params`) when an entry of the session has this id.
    pub id: Option<String>,
    /// The new entry's timestamp, as JavaScript's `toISOString` writes it (default: now).
    pub timestamp: Option<String>,
    /// The thinking level (`off`, `low`, `high`, …).
    pub thinking_level: PiString,
}

/// `session/appendModelChange`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppendModelChangeParams {
    /// The handle.
    #[schemars(required, with = "String")]
    pub handle: Option<String>,
    /// Fail with ContentModified unless the leaf is this id.
    pub expected_leaf_id: Option<String>,
    /// The new entry's id, chosen by the host so it knows the entry before the answer comes (default: a new one,
    /// as pi makes them). Refused (`invalid_params`) when an entry of the session has this id.
    pub id: Option<String>,
    /// The new entry's timestamp, as JavaScript's `toISOString` writes it (default: now).
    pub timestamp: Option<String>,
    /// Provider.
    pub provider: PiString,
    /// Model id.
    pub model_id: PiString,
}

/// `session/appendUsage`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppendUsageParams {
    /// The handle.
    #[schemars(required, with = "String")]
    pub handle: Option<String>,
    /// Fail with ContentModified unless the leaf is this id.
    pub expected_leaf_id: Option<String>,
    /// The new entry's id, chosen by the host so it knows the entry before the answer comes (default: a new one,
    /// as pi makes them). Refused (`invalid_params`) when an entry of the session has this id.
    pub id: Option<String>,
    /// The new entry's timestamp, as JavaScript's `toISOString` writes it (default: now).
    pub timestamp: Option<String>,
    /// Usage category, e.g. `cache_warm`.
    pub kind: PiString,
    /// Provider.
    pub provider: PiString,
    /// Model.
    pub model: PiString,
    /// pi's Usage object.
    pub usage: PiValue,
    /// A qualifier (omitted when empty).
    pub note: Option<PiString>,
}

/// `session/appendCompaction`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppendCompactionParams {
    /// The handle.
    #[schemars(required, with = "String")]
    pub handle: Option<String>,
    /// Fail with ContentModified unless the leaf is this id.
    pub expected_leaf_id: Option<String>,
    /// The new entry's id, chosen by the host so it knows the entry before the answer comes (default: a new one,
    /// as pi makes them). Refused (`invalid_params`) when an entry of the session has this id.
    pub id: Option<String>,
    /// The new entry's timestamp, as JavaScript's `toISOString` writes it (default: now).
    pub timestamp: Option<String>,
    /// The summary.
    pub summary: PiString,
    /// The first entry kept before the compaction; `null` keeps none (the entry's own id is stored).
    pub first_kept_entry_id: Option<String>,
    /// Tokens before compaction.
    pub tokens_before: PiValue,
    /// Implementation data.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<PiValue>")]
    pub details: Option<PiValue>,
    /// True for extension-made compactions.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<PiValue>")]
    pub from_hook: Option<PiValue>,
    /// Usage of the summarising call.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<PiValue>")]
    pub usage: Option<PiValue>,
    /// The checkpoint system message; default: pi's replay of the current system messages.
    pub system_message: Option<PiValue>,
    /// The complete post-compaction messages (the seed's checkpoint); `firstKeptEntryId` is written too.
    pub retained_tail: Option<Vec<PiValue>>,
}

/// `session/appendCustomEntry`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppendCustomEntryParams {
    /// The handle.
    #[schemars(required, with = "String")]
    pub handle: Option<String>,
    /// Fail with ContentModified unless the leaf is this id.
    pub expected_leaf_id: Option<String>,
    /// The new entry's id, chosen by the host so it knows the entry before the answer comes (default: a new one,
    /// as pi makes them). Refused (`invalid_params`) when an entry of the session has this id.
    pub id: Option<String>,
    /// The new entry's timestamp, as JavaScript's `toISOString` writes it (default: now).
    pub timestamp: Option<String>,
    /// The extension's type name.
    pub custom_type: PiString,
    /// The extension's data.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<PiValue>")]
    pub data: Option<PiValue>,
}

/// `session/appendSessionInfo`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppendSessionInfoParams {
    /// The handle.
    #[schemars(required, with = "String")]
    pub handle: Option<String>,
    /// Fail with ContentModified unless the leaf is this id.
    pub expected_leaf_id: Option<String>,
    /// The new entry's id, chosen by the host so it knows the entry before the answer comes (default: a new one,
    /// as pi makes them). Refused (`invalid_params`) when an entry of the session has this id.
    pub id: Option<String>,
    /// The new entry's timestamp, as JavaScript's `toISOString` writes it (default: now).
    pub timestamp: Option<String>,
    /// The name (line breaks become spaces, ends trimmed; empty clears).
    pub name: PiString,
}

/// `session/appendCustomMessageEntry`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppendCustomMessageEntryParams {
    /// The handle.
    #[schemars(required, with = "String")]
    pub handle: Option<String>,
    /// Fail with ContentModified unless the leaf is this id.
    pub expected_leaf_id: Option<String>,
    /// The new entry's id, chosen by the host so it knows the entry before the answer comes (default: a new one,
    /// as pi makes them). Refused (`invalid_params`) when an entry of the session has this id.
    pub id: Option<String>,
    /// The new entry's timestamp, as JavaScript's `toISOString` writes it (default: now).
    pub timestamp: Option<String>,
    /// The extension's type name.
    pub custom_type: PiString,
    /// A string or text/image blocks.
    pub content: PiValue,
    /// Whether the TUI shows it.
    pub display: PiValue,
    /// Extension data (not sent to the model).
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<PiValue>")]
    pub details: Option<PiValue>,
}

/// `session/appendContextEdit`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppendContextEditParams {
    /// The handle.
    #[schemars(required, with = "String")]
    pub handle: Option<String>,
    /// Fail with ContentModified unless the leaf is this id.
    pub expected_leaf_id: Option<String>,
    /// The new entry's id, chosen by the host so it knows the entry before the answer comes (default: a new one,
    /// as pi makes them). Refused (`invalid_params`) when an entry of the session has this id.
    pub id: Option<String>,
    /// The new entry's timestamp, as JavaScript's `toISOString` writes it (default: now).
    pub timestamp: Option<String>,
    /// The entry to edit (on the active branch).
    pub target_id: String,
    /// Required, and may be `null`: `null` omits the target from context; `{content: string | array}` replaces its
    /// content.
    pub replacement: PiValue,
}

/// `session/appendLabelChange`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppendLabelChangeParams {
    /// The handle.
    #[schemars(required, with = "String")]
    pub handle: Option<String>,
    /// Fail with ContentModified unless the leaf is this id.
    pub expected_leaf_id: Option<String>,
    /// The new entry's id, chosen by the host so it knows the entry before the answer comes (default: a new one,
    /// as pi makes them). Refused (`invalid_params`) when an entry of the session has this id.
    pub id: Option<String>,
    /// The new entry's timestamp, as JavaScript's `toISOString` writes it (default: now).
    pub timestamp: Option<String>,
    /// The entry to label.
    pub target_id: String,
    /// The label; missing or empty clears.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<PiValue>")]
    pub label: Option<PiValue>,
}

/// `session/branch`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BranchParams {
    /// The handle.
    #[schemars(required, with = "String")]
    pub handle: Option<String>,
    /// Fail with ContentModified unless the leaf is this id.
    pub expected_leaf_id: Option<String>,
    /// The entry to continue from.
    pub entry_id: String,
}

/// `session/resetLeaf`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResetLeafParams {
    /// The handle.
    #[schemars(required, with = "String")]
    pub handle: Option<String>,
    /// Fail with ContentModified unless the leaf is this id.
    pub expected_leaf_id: Option<String>,
}

/// `session/branchWithSummary`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BranchWithSummaryParams {
    /// The handle.
    #[schemars(required, with = "String")]
    pub handle: Option<String>,
    /// Fail with ContentModified unless the leaf is this id.
    pub expected_leaf_id: Option<String>,
    /// The new entry's id, chosen by the host so it knows the entry before the answer comes (default: a new one,
    /// as pi makes them). Refused (`invalid_params`) when an entry of the session has this id.
    pub id: Option<String>,
    /// The new entry's timestamp, as JavaScript's `toISOString` writes it (default: now).
    pub timestamp: Option<String>,
    /// The entry to continue from (`null`: a new root).
    pub entry_id: Option<String>,
    /// The summary of the abandoned branch.
    pub summary: PiString,
    /// Implementation data.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<PiValue>")]
    pub details: Option<PiValue>,
    /// True for extension-made summaries.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<PiValue>")]
    pub from_hook: Option<PiValue>,
    /// Usage of the summarising call.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<PiValue>")]
    pub usage: Option<PiValue>,
}

/// `session/createBranchedSession`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateBranchedSessionParams {
    /// The handle.
    pub handle: String,
    /// Fail with ContentModified unless the leaf is this id.
    pub expected_leaf_id: Option<String>,
    /// The last entry of the path to keep.
    pub leaf_id: String,
    /// As on the opening methods: return the new session's snapshot, and set the handle's detail from now on
    /// (default: keep it).
    pub snapshot: Option<Detail>,
}

/// `session/appendBatch`: several mutations as one write.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppendBatchParams {
    /// The handle.
    pub handle: String,
    /// Fail with ContentModified (writing nothing) unless the leaf is this id before the first op.
    pub expected_leaf_id: Option<String>,
    /// The ops, applied in order, each seeing what the ones before it did.
    pub ops: Vec<BatchOp>,
}

/// One op of `session/appendBatch`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct BatchOp {
    /// Any `session/append…` method, `session/branch`, `session/resetLeaf` or `session/branchWithSummary`.
    pub method: String,
    /// That method's params without `handle` (and without `expectedLeafId`: give it on the batch). `targetId`
    /// (appendLabelChange, appendContextEdit) and `entryId` (branch, branchWithSummary) may be `{"op": n}`: the
    /// entry op `n` of this batch (an earlier one) appends.
    #[schemars(with = "Option<serde_json::Map<String, serde_json::Value>>")]
    pub params: Option<Box<RawValue>>,
}

/// `session/appendBatch` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct AppendBatchResult {
    /// What each op's method returns alone, in order: `{id}`, `{entry}` for appendUsage, `null` for branch and
    /// resetLeaf.
    #[schemars(with = "Vec<serde_json::Value>")]
    pub results: Vec<RawJson>,
}

/// The id of an appended entry.
#[derive(Debug, Serialize, JsonSchema)]
pub struct IdResult {
    /// The new entry's id.
    pub id: String,
}

/// `session/appendUsage` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct EntryResult {
    /// The appended entry.
    pub entry: EntryJson,
}

/// `session/createBranchedSession` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct PathResult {
    /// The new file (`null` in memory).
    pub path: Option<String>,
    /// With `snapshot` `skeleton` or `full`: the new session's entries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotJson>,
}
