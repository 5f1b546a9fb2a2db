//! The engine's errors, and the one table of error kinds. Messages are pi's own where pi has one, so a host that
//! matched on pi's text keeps working; [`Error::kind`] says what kind of failure it is, so nobody has to match on
//! text. The CLI prints [`ErrorKind::as_str`], the RPC layer sends it as `data.kind` (with a code per kind), and
//! `protocol/methods.json` lists [`ErrorKind::ALL`] with [`ErrorKind::meaning`]: one table, three readers.

use std::io;

/// The message pi throws for an invalid session id.
pub const INVALID_SESSION_ID_MESSAGE: &str = "Session id must be non-empty, contain only alphanumeric characters, '-', '_', and '.', and start and end with an alphanumeric character";

/// Everything the engine can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file system operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done (`open`, `append to`, …).
        op: &'static str,
        /// The path it was done to.
        path: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The file is not empty but has no valid header (its first parsed line is not `type: "session"` with a
    /// string `id`). The file is left untouched.
    #[error("Session file is not a valid pi session: {path}")]
    InvalidSessionFile {
        /// The resolved path.
        path: String,
    },
    /// `forkFrom` was given a source that is missing, empty or has no valid header.
    #[error("Cannot fork: source session file is empty or invalid: {path}")]
    InvalidForkSource {
        /// The resolved source path.
        path: String,
    },
    /// No entry has this id.
    #[error("Entry {id} not found")]
    EntryNotFound {
        /// The id as pi prints it.
        id: String,
    },
    /// A context edit's target is not on the path from the root to the leaf.
    #[error("Entry {id} is not on the active branch")]
    NotOnActiveBranch {
        /// The target id.
        id: String,
    },
    /// A context edit's target produces no editable model content.
    #[error("Entry {id} does not contribute editable model content")]
    NotEditable {
        /// The target id.
        id: String,
    },
    /// A context edit's replacement is neither null nor `{content: string | array}`.
    #[error("Context edit replacement must be null or contain string/array content")]
    InvalidReplacement,
    /// A caller-chosen session id breaks pi's rule.
    #[error("{}", INVALID_SESSION_ID_MESSAGE)]
    InvalidSessionId,
    /// An entry pi would crash on (a `TypeError` in pi), e.g. a message entry without a message where pi must
    /// read its role. pi throws; we refuse the same operation with the line that caused it.
    #[error("line {line}: {message}")]
    InvalidEntry {
        /// 1-based line number in the file (0 when the entry did not come from a file).
        line: u32,
        /// What is wrong with it.
        message: String,
    },
    /// Another process holds the session's write lock.
    #[error("session file {path} is being written by another process{}", pid.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    Locked {
        /// The session file.
        path: String,
        /// The lock holder's pid, when it left one.
        pid: Option<u32>,
    },
    /// The caller's picture of the session is stale, so nothing was written: its expected leaf is not the leaf,
    /// another process appended and moved the leaf, or another process is writing the file right now.
    #[error("{message}")]
    Conflict {
        /// The session file, when another process's writing is the cause.
        path: Option<String>,
        /// The leaf now (its id as text; None when there is none), so the caller can look again from there.
        leaf: Option<String>,
        /// What changed.
        message: String,
    },
    /// An earlier write or fsync of this session file failed in a way that leaves what is on disk unknown (an
    /// fsync error, or a failed write that could not be cut back), so the session refuses every further write
    /// until the file is opened again. Reads still work.
    #[error("session file {path} refuses writes until it is opened again: {cause}")]
    Poisoned {
        /// The session file.
        path: String,
        /// The failure that poisoned it.
        cause: String,
    },
    /// A batch op names the entry of an earlier op ([`EntryRef::Earlier`](super::change::EntryRef::Earlier)) that
    /// is not an earlier op of the batch or appended no entry.
    #[error("op {index} of the batch is not an earlier op that appended an entry")]
    InvalidReference {
        /// The op number referred to.
        index: usize,
    },
    /// An operation that cannot be part of a batch (one that replaces the session) was put in one.
    #[error("{op} cannot be part of a batch")]
    NotBatchable {
        /// The operation's pi name.
        op: &'static str,
    },
    /// A host chose the id of a new entry ([`Op::WithIdentity`](super::change::Op::WithIdentity)) that an
    /// entry of the session already has.
    #[error("an entry with id {id} exists: a new entry needs an id of its own")]
    IdTaken {
        /// The id.
        id: String,
    },
    /// A search query that cannot be run (an empty or invalid `re:` pattern).
    #[error("invalid search query: {message}")]
    InvalidQuery {
        /// What is wrong with it.
        message: String,
    },
    /// The caller cancelled the work (a listing, lookup or search) before it finished; nothing was changed.
    #[error("request cancelled")]
    Cancelled,
    /// The file to create already exists (pi's exclusive create fails with EEXIST).
    #[error("EEXIST: file already exists, open '{path}'")]
    AlreadyExists {
        /// The path.
        path: String,
    },
}

impl Error {
    /// What kind of failure this is (the wire's `data.kind`).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Io { .. } if self.is_not_found() => ErrorKind::SessionNotFound,
            Error::Io { .. } | Error::AlreadyExists { .. } => ErrorKind::IoError,
            Error::InvalidSessionFile { .. } | Error::InvalidForkSource { .. } => ErrorKind::InvalidSessionFile,
            Error::EntryNotFound { .. } => ErrorKind::EntryNotFound,
            Error::NotOnActiveBranch { .. }
            | Error::NotEditable { .. }
            | Error::InvalidReplacement
            | Error::InvalidQuery { .. }
            | Error::NotBatchable { .. }
            | Error::InvalidReference { .. }
            | Error::IdTaken { .. } => ErrorKind::InvalidParams,
            Error::InvalidSessionId => ErrorKind::InvalidSessionId,
            Error::InvalidEntry { .. } => ErrorKind::InvalidEntry,
            Error::Locked { .. } => ErrorKind::SessionLocked,
            Error::Conflict { .. } => ErrorKind::ContentModified,
            Error::Poisoned { .. } => ErrorKind::SessionPoisoned,
            Error::Cancelled => ErrorKind::Cancelled,
        }
    }

    /// True when the error means "no such session file or directory" (not: a directory could not be created,
    /// which is an I/O failure even when the OS says ENOENT).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Io { op, source, .. } if source.kind() == io::ErrorKind::NotFound && *op != "create directory")
    }

    /// An I/O error with its context.
    pub fn io(op: &'static str, path: impl Into<String>, source: io::Error) -> Error {
        Error::Io { op, path: path.into(), source }
    }
}

/// The kinds of [`Error`]: the one table the CLI, the RPC layer and the protocol description share.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// A parameter breaks a rule of the operation (a context edit's target or replacement, a search query, an
    /// operation that cannot be batched).
    InvalidParams,
    /// The caller's view is stale; nothing was written.
    ContentModified,
    /// The session file or directory does not exist.
    SessionNotFound,
    /// No entry has that id.
    EntryNotFound,
    /// The file is not a pi session.
    InvalidSessionFile,
    /// A session id breaks pi's rule.
    InvalidSessionId,
    /// The file system failed.
    IoError,
    /// Another process holds the session's write lock.
    SessionLocked,
    /// An entry pi cannot read (pi throws a `TypeError` there).
    InvalidEntry,
    /// An earlier failed fsync or write left the file's durable state unknown; writes are refused until reopened.
    SessionPoisoned,
    /// The work was cancelled (`$/cancelRequest`) before it finished.
    Cancelled,
}

impl ErrorKind {
    /// Every kind, in the order the protocol lists them.
    pub const ALL: [ErrorKind; 11] = [
        ErrorKind::InvalidParams,
        ErrorKind::ContentModified,
        ErrorKind::SessionNotFound,
        ErrorKind::EntryNotFound,
        ErrorKind::InvalidSessionFile,
        ErrorKind::InvalidSessionId,
        ErrorKind::IoError,
        ErrorKind::SessionLocked,
        ErrorKind::InvalidEntry,
        ErrorKind::SessionPoisoned,
        ErrorKind::Cancelled,
    ];

    /// The snake_case name: the CLI's `error.kind` and the wire's `data.kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidParams => "invalid_params",
            ErrorKind::ContentModified => "content_modified",
            ErrorKind::SessionNotFound => "session_not_found",
            ErrorKind::EntryNotFound => "entry_not_found",
            ErrorKind::InvalidSessionFile => "invalid_session_file",
            ErrorKind::InvalidSessionId => "invalid_session_id",
            ErrorKind::IoError => "io_error",
            ErrorKind::SessionLocked => "session_locked",
            ErrorKind::InvalidEntry => "invalid_entry",
            ErrorKind::SessionPoisoned => "session_poisoned",
            ErrorKind::Cancelled => "request_cancelled",
        }
    }

    /// What the kind means, for host authors (`protocol/methods.json`), naming the `data` members that come with it.
    pub fn meaning(self) -> &'static str {
        match self {
            ErrorKind::InvalidParams => "A param is missing, has the wrong type or breaks the operation's rule; data.path names it.",
            ErrorKind::ContentModified => {
                "Nothing was written: expectedLeafId is not the leaf, or another process wrote the file first (data.path); data.leafId is the leaf now."
            }
            ErrorKind::SessionNotFound => "The file or directory does not exist.",
            ErrorKind::EntryNotFound => "No entry has that id.",
            ErrorKind::InvalidSessionFile => "The file is not a pi session (data.path).",
            ErrorKind::InvalidSessionId => "The session id breaks pi's rule.",
            ErrorKind::IoError => {
                "The file system failed (a failed fsync included: the write is not acknowledged); data.path names the file."
            }
            ErrorKind::SessionLocked => "Another process holds the session's write lock; data.pid names it when known.",
            ErrorKind::InvalidEntry => "The session holds an entry pi cannot read for this operation (pi throws a TypeError); data.line names its line.",
            ErrorKind::SessionPoisoned => {
                "An earlier fsync (or a failed write that could not be cut back) left what is on disk unknown: the session refuses writes until the file is opened again; reads still work. data.path names the file."
            }
            ErrorKind::Cancelled => "Cancelled by $/cancelRequest.",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The engine's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
