//! Wire types of what the server sends unasked: `session/changed`, `$/progress`, and `$/cancelRequest`'s params.

use super::*;

// ------------------------------------------------------------------------------------------------------------------
// Notifications

/// `session/changed`: sent after every successful mutation, before its response.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionChanged {
    /// The handle.
    pub handle: String,
    /// The session id after the change.
    pub session_id: AnyJson,
    /// 1 for the first change after open, +1 per change on this handle (across rebinds).
    pub seq: u64,
    /// `external` when another process changed the file (a watched handle, or a check before a write); absent
    /// for the handle's own mutations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// The leaf after the change.
    pub leaf_id: Option<AnyJson>,
    /// What changed.
    pub change: Change,
}

/// A change: what a mirror of the session applies to stay equal to it (see `protocol/README.md`).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Change {
    /// Entries were added at the end of the file, in file order (every append method, `branchWithSummary`, and
    /// what another process appended), at the handle's detail. The leaf is the notification's `leafId`.
    Append {
        /// The new entries.
        entries: Vec<EntryAtDetailJson>,
    },
    /// The leaf moved (`branch`, `resetLeaf`; sent even when it did not move).
    #[serde(rename_all = "camelCase")]
    Leaf {
        /// The new leaf.
        leaf_id: Option<AnyJson>,
    },
    /// The handle now holds another session (`newSession`, `setSessionFile`, `createBranchedSession`).
    Rebind {
        /// What `session/getState` now returns.
        state: Box<SessionState>,
        /// At detail `skeleton` or `full`: every entry of the session now held. Absent at detail `none`, and
        /// when the entries could not be read (the file changed meanwhile): take one with `session/changesSince`.
        #[serde(skip_serializing_if = "Option::is_none")]
        snapshot: Option<SnapshotJson>,
    },
    /// The file was truncated, rewritten or replaced by another process, or appeared where the handle had
    /// nothing on disk yet (pi writes a new session's file at its first message), and was read again from
    /// scratch.
    Reset {
        /// What `session/getState` now returns.
        state: Box<SessionState>,
        /// At detail `skeleton` or `full`: every entry as now read (absent as for `rebind`).
        #[serde(skip_serializing_if = "Option::is_none")]
        snapshot: Option<SnapshotJson>,
    },
    /// The file was deleted by another process. The session stays open; the next write puts the file back,
    /// header and all.
    Deleted {},
}

/// `session/changesSince` result: either `changes` or `state` and `snapshot`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChangesSinceResult {
    /// Every `session/changed` (its params, as sent) with a `seq` above the one asked, in order, when the server
    /// still holds them all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changes: Option<Vec<SessionChanged>>,
    /// Otherwise: the state now...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<Box<SessionState>>,
    /// ...and every entry, at the handle's detail (`full` for a handle at detail `none`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotJson>,
}

/// `$/progress` params.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Progress {
    /// The token from the request.
    pub token: ProgressToken,
    /// Where it is.
    pub value: ProgressValue,
}

/// Progress of a long read.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ProgressValue {
    /// Where in the sequence: one `begin` per stage, `report`s, then one `end` for the request.
    pub kind: ProgressKind,
    /// Files done so far in this stage.
    pub loaded: usize,
    /// Files in this stage.
    pub total: usize,
    /// For `sessions/search`: which stage; each starts with its own `begin`, and `end` carries the last one's
    /// counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage: Option<ProgressStage>,
}

/// `ProgressValue.kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ProgressKind {
    /// A stage starts (`loaded` 0).
    Begin,
    /// Files done so far.
    Report,
    /// The request's work is done (sent before its response).
    End,
}

/// `ProgressValue.stage`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ProgressStage {
    /// Bringing the catalog up to date (stat, and read what changed).
    Listing,
    /// Extracting searchable text the index does not hold yet.
    Indexing,
}

/// `$/cancelRequest` params (client → server).
#[derive(Debug, Deserialize, JsonSchema)]
pub struct CancelParams {
    /// The id of the request to cancel.
    pub id: serde_json::Value,
}
