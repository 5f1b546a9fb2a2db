//! Entries as the engine holds them: a skeleton of the few fields pi's logic reads, and a reference to the body.
//!
//! A pi session can be gigabytes of base64 images inside tool results (pi #9613: 2.6 GB in 18,996 lines), yet the
//! tree, the leaf, labels and names need only ids, parent ids, types, roles and a few small fields. A [`Record`]
//! keeps exactly those, plus where the entry's bytes are ([`Body`]); the bytes themselves are read when a caller
//! asks for the entry. Bodies are never re-serialised: what a reader gets is the line as it is in the file,
//! with any edit we had to make (migration, re-chaining) spliced in by [`super::json::patch`].

use std::sync::Arc;

use super::json::patch::Patch;
use super::json::string::literal_name_bytes;
use super::json::Json;
use super::key::Key;

/// The `type` of a line, as pi's code distinguishes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryType {
    /// `session`: a header.
    Session,
    /// `message`
    Message,
    /// `thinking_level_change`
    ThinkingLevelChange,
    /// `model_change`
    ModelChange,
    /// `usage`
    Usage,
    /// `compaction`
    Compaction,
    /// `branch_summary`
    BranchSummary,
    /// `custom`
    Custom,
    /// `custom_message`
    CustomMessage,
    /// `context_edit`
    ContextEdit,
    /// `label`
    Label,
    /// `session_info`
    SessionInfo,
    /// Anything else, including a missing or non-string `type`, and lines that are not objects.
    Other,
}

impl EntryType {
    /// Every type, in a fixed order: kept skeletons store a type as its place here (`session/kept.rs`), so the
    /// order is part of their format (a change to it bumps their version).
    pub const ALL: [EntryType; 13] = [
        EntryType::Session,
        EntryType::Message,
        EntryType::ThinkingLevelChange,
        EntryType::ModelChange,
        EntryType::Usage,
        EntryType::Compaction,
        EntryType::BranchSummary,
        EntryType::Custom,
        EntryType::CustomMessage,
        EntryType::ContextEdit,
        EntryType::Label,
        EntryType::SessionInfo,
        EntryType::Other,
    ];

    /// The `type` pi writes for it (None for [`EntryType::Other`]): the compiler's list of types, which
    /// [`EntryType::from_name`] must read back (a test checks every one).
    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            EntryType::Session => "session",
            EntryType::Message => "message",
            EntryType::ThinkingLevelChange => "thinking_level_change",
            EntryType::ModelChange => "model_change",
            EntryType::Usage => "usage",
            EntryType::Compaction => "compaction",
            EntryType::BranchSummary => "branch_summary",
            EntryType::Custom => "custom",
            EntryType::CustomMessage => "custom_message",
            EntryType::ContextEdit => "context_edit",
            EntryType::Label => "label",
            EntryType::SessionInfo => "session_info",
            EntryType::Other => return None,
        })
    }

    /// The type a stored `type` member's value names (validated JSON): a string's text as `JSON.parse` reads it,
    /// compared where it lies unless it holds an escape; any other value, or none, names no type.
    pub fn of_value(value: Option<&[u8]>) -> EntryType {
        match value {
            Some(v) if v.first() == Some(&b'"') => EntryType::from_name(&literal_name_bytes(v)),
            _ => EntryType::Other,
        }
    }

    /// The type named by a decoded `type` value.
    pub fn from_name(name: &[u8]) -> EntryType {
        match name {
            b"session" => EntryType::Session,
            b"message" => EntryType::Message,
            b"thinking_level_change" => EntryType::ThinkingLevelChange,
            b"model_change" => EntryType::ModelChange,
            b"usage" => EntryType::Usage,
            b"compaction" => EntryType::Compaction,
            b"branch_summary" => EntryType::BranchSummary,
            b"custom" => EntryType::Custom,
            b"custom_message" => EntryType::CustomMessage,
            b"context_edit" => EntryType::ContextEdit,
            b"label" => EntryType::Label,
            b"session_info" => EntryType::SessionInfo,
            _ => EntryType::Other,
        }
    }
}

/// The `role` of a message entry's message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `user`
    User,
    /// `assistant`
    Assistant,
    /// `toolResult`
    ToolResult,
    /// `system`
    System,
    /// `bashExecution`
    BashExecution,
    /// `custom`
    Custom,
    /// `hookMessage` (v2; migrated to `custom`)
    HookMessage,
    /// Any other role, or none.
    Other,
}

impl Role {
    /// The role a stored `role` member's value names (validated JSON), as [`EntryType::of_value`] reads a type.
    pub fn of_value(value: Option<&[u8]>) -> Role {
        match value {
            Some(v) if v.first() == Some(&b'"') => Role::from_name(&literal_name_bytes(v)),
            _ => Role::Other,
        }
    }

    /// The role named by a decoded `role` value.
    pub fn from_name(name: &[u8]) -> Role {
        match name {
            b"user" => Role::User,
            b"assistant" => Role::Assistant,
            b"toolResult" => Role::ToolResult,
            b"system" => Role::System,
            b"bashExecution" => Role::BashExecution,
            b"custom" => Role::Custom,
            b"hookMessage" => Role::HookMessage,
            _ => Role::Other,
        }
    }

    /// True for the roles whose presence makes a new session worth writing (pi's `_hasConversation`).
    pub fn is_conversation(self) -> bool {
        matches!(self, Role::User | Role::Assistant)
    }
}

/// What a message entry's `message` member holds, as far as property access is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageShape {
    /// The member is missing: `entry.message.role` throws in pi.
    Missing,
    /// `null`: `entry.message.role` throws in pi.
    Null,
    /// An object: its role is in [`Record::role`].
    Object,
    /// A primitive or an array: every property read gives `undefined`.
    Primitive,
}

impl MessageShape {
    /// True when reading a property of the message throws a TypeError in JavaScript.
    pub fn property_access_throws(self) -> bool {
        matches!(self, MessageShape::Missing | MessageShape::Null)
    }
}

/// Where an entry's bytes are.
#[derive(Clone, Debug)]
pub enum BodySource {
    /// In the session file: `len` bytes at `offset` (the line without its newline).
    File {
        /// Byte offset of the line.
        offset: u64,
        /// Length of the line, without the newline.
        len: u64,
    },
    /// Held in memory (entries not written yet, in-memory sessions).
    Memory(Arc<[u8]>),
}

/// An entry's bytes: a source plus the edits to splice in when reading it.
#[derive(Clone, Debug)]
pub struct Body {
    /// Where the original bytes are.
    pub source: BodySource,
    /// Member edits that apply on top (migration, re-chaining); `None` for untouched entries.
    pub patch: Option<Box<Patch>>,
}

impl Body {
    /// A body held in memory.
    pub fn memory(bytes: Vec<u8>) -> Body {
        Body { source: BodySource::Memory(bytes.into()), patch: None }
    }

    /// A body in the session file.
    pub fn file(offset: u64, len: u64) -> Body {
        Body { source: BodySource::File { offset, len }, patch: None }
    }

    /// The patch, created on first use.
    pub fn patch_mut(&mut self) -> &mut Patch {
        self.patch.get_or_insert_with(Default::default)
    }
}

/// A `label` entry's fields, as [`Detail::Label`] holds them.
#[derive(Clone, Debug)]
pub struct LabelDetail {
    /// `targetId`.
    pub target: Key,
    /// `label`, as a parsed value (None when the member is missing).
    pub label: Option<Json>,
    /// The entry's `timestamp` value, which becomes the label's `labelTimestamp`.
    pub timestamp: Option<Json>,
}

/// Type-specific fields that pi's logic reads without looking at the rest of the body. Every variant with fields
/// is boxed: few entries have them, and inline they made every record 32 bytes larger (records 216 → 184).
#[derive(Clone, Debug)]
pub enum Detail {
    /// Nothing beyond the common fields.
    None,
    /// A header line (small; kept whole).
    Header(Box<Json>),
    /// A `label` entry (boxed: labels are few, and inline their fields made every record 40 bytes larger).
    Label(Box<LabelDetail>),
    /// A `session_info` entry's `name` (None when missing).
    SessionInfo(Option<Box<Json>>),
    /// A `compaction` entry's fields.
    Compaction(Box<CompactionDetail>),
    /// A `context_edit` entry's fields.
    ContextEdit(Box<ContextEditDetail>),
}

/// A `compaction` entry's fields, as [`Detail::Compaction`] holds them.
#[derive(Clone, Debug)]
pub struct CompactionDetail {
    /// `firstKeptEntryId`.
    pub first_kept: Key,
    /// `firstKeptEntryIndex` when it is a number (a v1 compaction awaiting migration).
    pub first_kept_index: Option<f64>,
}

/// A `context_edit` entry's fields, as [`Detail::ContextEdit`] holds them.
#[derive(Clone, Debug)]
pub struct ContextEditDetail {
    /// `targetId`.
    pub target: Key,
    /// False when the entry has no `replacement` member: pi's projection throws on it.
    pub has_replacement: bool,
}

/// One parsed line: the skeleton of an entry (or header) and where its body is.
#[derive(Clone, Debug)]
pub struct Record {
    /// 1-based line number in the file as loaded; 0 for entries that did not come from a file line.
    pub line: u32,
    /// The bytes.
    pub body: Body,
    /// True when the line is a JSON object (other truthy values such as `42` or `[1]` are entries to pi too).
    pub is_object: bool,
    /// True when the line is a JSON array (an object to JavaScript: it takes properties but never serialises them).
    pub is_array: bool,
    /// `type`.
    pub kind: EntryType,
    /// `id`.
    pub id: Key,
    /// `parentId`.
    pub parent: Key,
    /// `new Date(entry.timestamp).getTime()` (NaN when invalid).
    pub time_ms: f64,
    /// For message entries, what `message` holds.
    pub message: MessageShape,
    /// For message entries whose message is an object, its role.
    pub role: Role,
    /// For message entries whose message is an object: `message.content == null` (missing or null), which pi
    /// repairs when building context.
    pub content_nullish: bool,
    /// Type-specific fields.
    pub detail: Detail,
    /// Where the line's string values longer than [`LONG_STRING`](super::json::scan::LONG_STRING) bytes are
    /// (start, end within the line), found while the line was validated: a host is sent the entry without them
    /// and reads each one where it lies, and sending it reads only the bytes around them. `None`: none, or not
    /// known (entries not read from a file line).
    pub long_strings: Option<Box<[(u32, u32)]>>,
    /// The entry at skeleton detail (`super::skeleton`), made in the same pass that read the line, so a skeleton
    /// snapshot reads nothing again; None for headers. It describes the bytes as read, so it is dropped when the
    /// entry is patched (migration, re-chaining), and the entry is described from its patched bytes instead.
    /// Shared bytes, so records read from a kept file point into its buffer instead of each holding a copy.
    pub skeleton: Option<bytes::Bytes>,
}

impl Record {
    /// True for header lines (`type: "session"`).
    pub fn is_header(&self) -> bool {
        self.kind == EntryType::Session
    }

    /// True for an entry (not a header) read without its skeleton.
    pub fn lacks_skeleton(&self) -> bool {
        !self.is_header() && self.skeleton.is_none()
    }

    /// True for a message entry with a user or assistant message (pi's `_hasConversation` test).
    pub fn is_conversation(&self) -> bool {
        self.kind == EntryType::Message && self.message == MessageShape::Object && self.role.is_conversation()
    }

    /// The header value, for header records.
    pub fn header(&self) -> Option<&Json> {
        match &self.detail {
            Detail::Header(h) => Some(h),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::EntryType;

    /// Where a type is in [`EntryType::ALL`]: a match, so a type added to the enum fails to build here until it is
    /// listed there.
    fn position(kind: EntryType) -> usize {
        match kind {
            EntryType::Session => 0,
            EntryType::Message => 1,
            EntryType::ThinkingLevelChange => 2,
            EntryType::ModelChange => 3,
            EntryType::Usage => 4,
            EntryType::Compaction => 5,
            EntryType::BranchSummary => 6,
            EntryType::Custom => 7,
            EntryType::CustomMessage => 8,
            EntryType::ContextEdit => 9,
            EntryType::Label => 10,
            EntryType::SessionInfo => 11,
            EntryType::Other => 12,
        }
    }

    #[test]
    fn every_type_pi_writes_is_read_back_from_its_name_and_nothing_else_names_one() {
        for (i, kind) in EntryType::ALL.into_iter().enumerate() {
            assert_eq!(position(kind), i, "{kind:?} is listed once, in its place");
            match kind.name() {
                Some(name) => assert_eq!(EntryType::from_name(name.as_bytes()), kind, "{name}"),
                None => assert_eq!(kind, EntryType::Other),
            }
        }
        for stranger in [&b""[..], b"Message", b"message ", b"hookMessage", b"branchSummary"] {
            assert_eq!(EntryType::from_name(stranger), EntryType::Other);
        }
    }
}
