//! Wire types of the reads of one session and of the catalog (listing, finding, search).

use super::*;

// ------------------------------------------------------------------------------------------------------------------
// Reads

/// Params naming an entry.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct EntryIdParams {
    /// The handle.
    pub handle: String,
    /// The entry id.
    pub id: String,
}

/// `session/getChildren`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChildrenParams {
    /// The handle.
    pub handle: String,
    /// The parent id.
    pub parent_id: String,
}

/// `session/getBranch`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BranchPathParams {
    /// The handle.
    pub handle: String,
    /// Where the path ends (default: the leaf).
    pub from_id: Option<String>,
}

/// `session/getEntries`: the entries with these ids, or a page of entries in file order.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct EntriesParams {
    /// The handle.
    pub handle: String,
    /// These entries, in this order (`null` for an id no entry has; an id held by several entries gives the last,
    /// as `getEntry`). Not with `offset` or `limit`.
    pub ids: Option<Vec<String>>,
    /// Entries to skip.
    pub offset: Option<usize>,
    /// At most this many.
    pub limit: Option<usize>,
    /// `full` (default: entries as stored) or `skeleton`.
    pub detail: Option<Detail>,
    /// With detail `full`: leave in the file every string whose stored literal (quotes included) is longer than
    /// this many bytes, so a host reads only the bodies it touches. Each entry is then a `LazyEntry`: `{entry,
    /// line?, lazy?}`, the entry as stored with those strings `null`, the line's `[offset, length]` in the file,
    /// and `[path, offset, length]` for each string left out (path: keys and array indices from the entry).
    /// With `offset`/`limit` only.
    #[serde(rename = "lazyOver")]
    pub lazy_over: Option<usize>,
}

/// `session/getTreeFlat`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct TreeFlatParams {
    /// The handle.
    pub handle: String,
    /// What each node's `entry` is: `full` (default: the entry as stored), `skeleton`, or `none` (no `entry`;
    /// the node has the entry's `id` instead).
    pub detail: Option<Detail>,
    /// Nodes to skip (in pre-order; `parentIndex` stays the position in the whole list).
    pub offset: Option<usize>,
    /// At most this many nodes.
    pub limit: Option<usize>,
}

/// A problem found while loading a file.
#[derive(Debug, Serialize, JsonSchema)]
pub struct WarningJson {
    /// 1-based line number (0: the whole file).
    pub line: u32,
    /// `malformed_line`, `torn_tail`, `missing_final_newline`, `non_object_line`, `extra_header`, `duplicate_id`,
    /// `missing_parent`, `self_parent`, `parent_cycle`, `legacy_version`, `unusable_entry` (pi loads the entry but
    /// some reads throw on it; here those reads fail with an error naming it).
    pub kind: String,
    /// For a person.
    pub message: String,
}

// ------------------------------------------------------------------------------------------------------------------
// Catalog

/// `sessions/list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListParams {
    /// The working directory.
    pub cwd: String,
    /// The session directory (default: pi's directory for `cwd`).
    pub session_dir: Option<String>,
    /// Send `$/progress` with this token while loading.
    pub progress_token: Option<ProgressToken>,
    /// `false` leaves `allMessagesText` out (default `true`, pi's exact result). It holds every user and
    /// assistant text of every session, most of a listing's size; `sessions/search` searches without it.
    pub include_all_messages_text: Option<bool>,
}

/// `sessions/listAll`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListAllParams {
    /// A directory to list flat (default: every project directory under the sessions root).
    pub session_dir: Option<String>,
    /// Send `$/progress` with this token while loading.
    pub progress_token: Option<ProgressToken>,
    /// `false` leaves `allMessagesText` out (default `true`, pi's exact result).
    pub include_all_messages_text: Option<bool>,
}

/// `sessions/listDelta`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListDeltaParams {
    /// The working directory: with it, the listing is `sessions/list`'s; without, `sessions/listAll`'s.
    pub cwd: Option<String>,
    /// The session directory, as `sessions/list` or `sessions/listAll` take it.
    pub session_dir: Option<String>,
    /// The `token` of an earlier `sessions/listDelta` answer that the host still holds. An unknown or expired
    /// token (this server keeps the last few) only means every entry comes in full.
    pub since: Option<String>,
    /// Send `$/progress` with this token while loading.
    pub progress_token: Option<ProgressToken>,
    /// `false` leaves `allMessagesText` out (default `true`, pi's exact result).
    pub include_all_messages_text: Option<bool>,
}

/// `sessions/findById`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FindByIdParams {
    /// The working directory.
    pub cwd: String,
    /// The exact session id.
    pub id: String,
    /// The session directory (default: pi's directory for `cwd`).
    pub session_dir: Option<String>,
}

/// `sessions/search`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SearchParams {
    /// pi's `/resume` query: space-separated words (each must match, as a substring of an entry's text or of the
    /// session's name, id or cwd; a word may also match the name or cwd fuzzily), `"exact phrases"`, or
    /// `re:<regex>` (case-insensitive). At most 4096 bytes and 64 words (each word of a phrase counts); a longer
    /// query is an `invalid_params` error.
    pub query: String,
    /// Search this project's sessions only (as `sessions/list` finds them); default: every session.
    pub cwd: Option<String>,
    /// With `cwd`: the session directory to use instead of pi's directory for it. Without: search only this
    /// directory (as `sessions/listAll` with it).
    pub session_dir: Option<String>,
    /// At most this many results (default 50).
    pub limit: Option<usize>,
    /// Skip this many of the best results first (default 0): the next page starts at the previous page's offset
    /// plus its limit. Results are in a total order (relevance, time, path, place in the file), so the pages of
    /// unchanged sessions neither repeat nor skip a result.
    pub offset: Option<usize>,
    /// Only these roles: `user`, `assistant`, `toolResult`, `custom`, `bashExecution`, `name`, `label`,
    /// `summary`, or `session` (a session whose name, id or cwd matches).
    pub roles: Option<Vec<String>>,
    /// Send `$/progress` with this token while the catalog and the search index catch up (`stage` says which).
    pub progress_token: Option<ProgressToken>,
}

/// A progress token: a string or an integer (LSP's `ProgressToken`).
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum ProgressToken {
    /// An integer token.
    Number(i64),
    /// A string token.
    String(String),
}

/// `sessions/searchPage` result.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SearchPage {
    /// The results from `offset` on, at most `limit`, best first (as `sessions/search` returns them).
    pub hits: Vec<SearchHitJson>,
    /// How many results the query has in all (every matching entry, and every session matched by its own name,
    /// id or cwd), counted whatever `offset` and `limit` are.
    pub total: usize,
    /// How many sessions those results are in.
    pub sessions: usize,
    /// The offset of the first of `hits`.
    pub offset: usize,
}

/// `sessions/findById` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FindResult {
    /// The file, or `null`.
    pub path: Option<String>,
    /// With `--catalog`: the machine the file is on (absent without a catalog).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
}
