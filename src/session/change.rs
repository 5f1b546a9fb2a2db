//! The engine's vocabulary for mutations: what a host asks for ([`Op`]), what it gets back ([`Outcome`]: the
//! value, what changed, and when it is durable), and what changed ([`Change`]) — in the engine's own words, with no
//! knowledge of any wire format.
//!
//! A mirror of a session (a tree view, a client cache) stays true by applying [`Change`]s in order: every mutation
//! through [`SessionManager::apply`](super::SessionManager::apply) and every follow of the file
//! ([`SessionManager::refresh`](super::SessionManager::refresh)) reports what it did, so nobody has to diff state to
//! find out.

use std::ops::Range;

use super::error::Result;
use super::json::{JsString, Json};
use super::key::Key;
pub use super::store::Commit;

/// Options for a new session (`NewSessionOptions`).
#[derive(Clone, Debug, Default)]
pub struct NewSessionOptions {
    /// A caller-chosen session id (checked against pi's rule).
    pub id: Option<String>,
    /// The `parentSession` header field.
    pub parent_session: Option<String>,
}

/// Who wrote appended records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// This manager, for the operation that reports it.
    Own,
    /// Another process (pi itself, or anything else appending to the file), found by following the file.
    External,
}

/// One thing that happened to a session, in the order it happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Records were added at the end, in file order. `records` indexes
    /// [`SessionManager::records`](super::SessionManager::records) and never holds the session's header; a second
    /// header another writer appended can be inside it (it is not an entry: skip records whose `is_header()` is
    /// true). The leaf may have moved with them (an append makes its entry the leaf; following the file moves a
    /// leaf that was at the last entry).
    Appended {
        /// Record indices.
        records: Range<usize>,
        /// Who wrote them.
        origin: Origin,
    },
    /// The leaf moved without a record being added (`branch`, `resetLeaf`, or a batch that ended on one).
    LeafMoved,
    /// The manager holds another session now (`newSession`, `setSessionFile`, `createBranchedSession`): every
    /// record, the header and the file may differ.
    Rebound,
    /// The file was truncated, rewritten or replaced under us (or appeared where there was none) and was read
    /// again from scratch: every record may differ.
    Reloaded,
    /// The file is gone, or is no longer a session. The session stays in memory; the next write puts the whole
    /// file back (header first) where that is safe. Reported by every follow of the file until it is back.
    Deleted,
}

/// Every mutation the engine knows: pi's `SessionManager` mutations, and a batch of them. Values are JSON as pi's
/// JavaScript would hold them; ids are [`Key`]s (pi's `Map` keys).
#[derive(Clone, Debug)]
pub enum Op {
    /// `appendMessage(message)`.
    AppendMessage {
        /// The message object.
        message: Json,
    },
    /// `appendThinkingLevelChange(thinkingLevel)`.
    AppendThinkingLevelChange {
        /// The level.
        thinking_level: Json,
    },
    /// `appendModelChange(provider, modelId)`.
    AppendModelChange {
        /// The provider.
        provider: Json,
        /// The model id.
        model_id: Json,
    },
    /// `appendUsage(kind, provider, model, usage, note?)`.
    AppendUsage {
        /// The usage kind.
        kind: Json,
        /// The provider.
        provider: Json,
        /// The model.
        model: Json,
        /// The usage object.
        usage: Json,
        /// A note (written only when truthy, as pi does).
        note: Option<Json>,
    },
    /// `appendCompaction(...)`, with the seed's optional checkpoint system message and `retainedTail`.
    AppendCompaction(Box<Compaction>),
    /// `appendCustomEntry(customType, data?)`.
    AppendCustomEntry {
        /// The extension's type.
        custom_type: Json,
        /// Its data.
        data: Option<Json>,
    },
    /// `appendSessionInfo(name)`.
    AppendSessionInfo {
        /// The name (line breaks collapsed and trimmed as pi does; empty clears).
        name: JsString,
    },
    /// `appendCustomMessageEntry(customType, content, display, details?)`.
    AppendCustomMessageEntry {
        /// The extension's type.
        custom_type: Json,
        /// The content.
        content: Json,
        /// Whether it is displayed.
        display: Json,
        /// Details.
        details: Option<Json>,
    },
    /// `appendContextEdit(targetId, replacement)`; None stands for `undefined`, which pi rejects.
    AppendContextEdit {
        /// The entry whose contribution is edited.
        target_id: EntryRef,
        /// `null` (omit) or `{content}`.
        replacement: Option<Json>,
    },
    /// `appendLabelChange(targetId, label?)`.
    AppendLabelChange {
        /// The labelled entry.
        target_id: EntryRef,
        /// A truthy label sets, anything else clears; None writes no `label` member.
        label: Option<Json>,
    },
    /// `branch(entryId)`.
    Branch {
        /// The new leaf.
        entry_id: EntryRef,
    },
    /// `resetLeaf()`.
    ResetLeaf,
    /// `branchWithSummary(branchFromId | null, summary, details?, fromHook?, usage?)`.
    BranchWithSummary {
        /// Where the branch starts (None: a new root).
        entry_id: Option<EntryRef>,
        /// The summary.
        summary: Json,
        /// Details.
        details: Option<Json>,
        /// Whether a hook made it.
        from_hook: Option<Json>,
        /// Usage.
        usage: Option<Json>,
    },
    /// `createBranchedSession(leafId)`: the manager becomes a new session holding the path to `leaf_id`.
    CreateBranchedSession {
        /// The last entry of the path kept.
        leaf_id: Key,
    },
    /// `newSession(options?)`.
    NewSession(NewSessionOptions),
    /// `setSessionFile(path)`.
    SetSessionFile {
        /// The file.
        path: String,
    },
    /// An append whose new entry takes the id and timestamp its host chose, rather than new ones. A host that
    /// goes on before the answer comes (pi's drop-in, which must return the id pi asks for at once) knows the
    /// entry it will find in the file. Refused when the session already has an entry with that id.
    WithIdentity {
        /// The id and timestamp.
        identity: EntryIdentity,
        /// The append (one that appends exactly one entry).
        op: Box<Op>,
    },
    /// Appends, leaf moves and branch summaries applied in order as one write (one `write`, one fsync under
    /// `Durability::Entry`), all or nothing: if any op, the write or the fsync fails, neither memory nor file
    /// changes. A later op sees what earlier ones did (a label on an entry the batch appended, a branch to it).
    Batch(Vec<Op>),
}

/// The entry an op names: by id, or (inside a [`Op::Batch`]) as the entry an earlier op of the same batch
/// appended, whose id the caller cannot know before the batch runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryRef {
    /// An entry id.
    Id(Key),
    /// The entry appended by op number `n` (0-based) of the innermost enclosing batch; it must come before.
    Earlier(usize),
}

impl From<Key> for EntryRef {
    fn from(id: Key) -> Self {
        EntryRef::Id(id)
    }
}

/// A new entry's id and timestamp as its host chose them ([`Op::WithIdentity`]); None: made here, as pi makes
/// them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EntryIdentity {
    /// The id.
    pub id: Option<String>,
    /// The timestamp, as JavaScript's `toISOString` writes it.
    pub timestamp: Option<String>,
}

/// The arguments of [`Op::AppendCompaction`].
#[derive(Clone, Debug)]
pub struct Compaction {
    /// The summary.
    pub summary: Json,
    /// The first kept entry (None or null: the compaction's own id, as pi writes).
    pub first_kept_entry_id: Option<Json>,
    /// Tokens before.
    pub tokens_before: Json,
    /// Details.
    pub details: Option<Json>,
    /// Whether a hook made it.
    pub from_hook: Option<Json>,
    /// Usage.
    pub usage: Option<Json>,
    /// A checkpoint system message written as given, instead of pi's replay of the current system messages.
    pub system_message: Option<Json>,
    /// The seed's `retainedTail` (written last).
    pub retained_tail: Option<Json>,
}

impl Op {
    /// pi's name of the operation.
    pub fn name(&self) -> &'static str {
        match self {
            Op::AppendMessage { .. } => "appendMessage",
            Op::AppendThinkingLevelChange { .. } => "appendThinkingLevelChange",
            Op::AppendModelChange { .. } => "appendModelChange",
            Op::AppendUsage { .. } => "appendUsage",
            Op::AppendCompaction(_) => "appendCompaction",
            Op::AppendCustomEntry { .. } => "appendCustomEntry",
            Op::AppendSessionInfo { .. } => "appendSessionInfo",
            Op::AppendCustomMessageEntry { .. } => "appendCustomMessageEntry",
            Op::AppendContextEdit { .. } => "appendContextEdit",
            Op::AppendLabelChange { .. } => "appendLabelChange",
            Op::Branch { .. } => "branch",
            Op::ResetLeaf => "resetLeaf",
            Op::BranchWithSummary { .. } => "branchWithSummary",
            Op::CreateBranchedSession { .. } => "createBranchedSession",
            Op::NewSession(_) => "newSession",
            Op::SetSessionFile { .. } => "setSessionFile",
            Op::Batch(_) => "batch",
            Op::WithIdentity { op, .. } => op.name(),
        }
    }

    /// True for the ops that make the manager hold another session.
    pub fn rebinds(&self) -> bool {
        matches!(self, Op::CreateBranchedSession { .. } | Op::NewSession(_) | Op::SetSessionFile { .. })
    }
}

/// What an op returns when it succeeds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpValue {
    /// An append: the new entry's id and its record index (valid until the next [`Change::Reloaded`] or
    /// [`Change::Rebound`]).
    Entry {
        /// The id.
        id: String,
        /// Index into [`SessionManager::records`](super::SessionManager::records).
        record: usize,
    },
    /// `branch`, `resetLeaf`, `setSessionFile`: nothing to return.
    Done,
    /// `newSession`, `createBranchedSession`: the new file's path (None in memory).
    Path(Option<String>),
    /// A batch: each op's value, in order.
    Batch(Vec<OpValue>),
}

impl OpValue {
    /// The id of an appended entry.
    pub fn id(&self) -> Option<&str> {
        match self {
            OpValue::Entry { id, .. } => Some(id),
            _ => None,
        }
    }
}

/// What [`SessionManager::apply`](super::SessionManager::apply) did.
#[derive(Debug)]
#[must_use = "an outcome holds the changes to publish and the commit to wait for"]
pub struct Outcome {
    /// The op's value, or why it was refused (in which case neither memory nor file changed because of it).
    pub result: Result<OpValue>,
    /// What changed, in order: what following the file found before the op (reported even when the op is
    /// refused), then what the op did.
    pub changes: Vec<Change>,
    /// When the write is durable.
    pub commit: Commit,
}
