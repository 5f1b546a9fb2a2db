//! The engine's errors. Messages are pi's own where pi has one, so a host that matched on pi's text keeps working;
//! the variant says what kind of failure it is, so nobody has to match on text.

use std::io;

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
    #[error("{}", super::ids::INVALID_SESSION_ID_MESSAGE)]
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
    /// Another process changed the file since we read it; nothing was written.
    #[error("{message}: {path}")]
    Conflict {
        /// The session file.
        path: String,
        /// What changed.
        message: String,
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
    /// True when the error means "no such session file or directory" (not: a directory could not be created,
    /// which is an I/O failure even when the OS says ENOENT).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Io { op, source, .. } if source.kind() == io::ErrorKind::NotFound && *op != "create directory")
    }

    /// What kind of failure this is, for machines (the RPC layer's `data.kind`, the CLI's `--json` errors).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Io { .. } if self.is_not_found() => ErrorKind::SessionNotFound,
            Error::Io { .. } | Error::AlreadyExists { .. } => ErrorKind::IoError,
            Error::InvalidSessionFile { .. } | Error::InvalidForkSource { .. } | Error::InvalidEntry { .. } => {
                ErrorKind::InvalidSessionFile
            }
            Error::EntryNotFound { .. } => ErrorKind::EntryNotFound,
            Error::NotOnActiveBranch { .. }
            | Error::NotEditable { .. }
            | Error::InvalidReplacement
            | Error::InvalidQuery { .. } => ErrorKind::InvalidParams,
            Error::InvalidSessionId => ErrorKind::InvalidSessionId,
            Error::Locked { .. } => ErrorKind::SessionLocked,
            Error::Conflict { .. } => ErrorKind::ContentModified,
            Error::Cancelled => ErrorKind::RequestCancelled,
        }
    }

    /// An I/O error with its context.
    pub fn io(op: &'static str, path: impl Into<String>, source: io::Error) -> Error {
        Error::Io { op, path: path.into(), source }
    }
}

/// The kinds of failure a caller can tell apart, each with a stable name (`as_str`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// No such session file (or directory).
    SessionNotFound,
    /// Any other file system failure.
    IoError,
    /// The file is not a pi session (or holds an entry pi would crash on).
    InvalidSessionFile,
    /// No entry has the id.
    EntryNotFound,
    /// An argument the operation cannot take.
    InvalidParams,
    /// A caller-chosen session id breaks pi's rule.
    InvalidSessionId,
    /// Another process holds the write lock.
    SessionLocked,
    /// The file changed under us.
    ContentModified,
    /// The caller cancelled the work.
    RequestCancelled,
}

impl ErrorKind {
    /// The stable name (`session_not_found`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::SessionNotFound => "session_not_found",
            ErrorKind::IoError => "io_error",
            ErrorKind::InvalidSessionFile => "invalid_session_file",
            ErrorKind::EntryNotFound => "entry_not_found",
            ErrorKind::InvalidParams => "invalid_params",
            ErrorKind::InvalidSessionId => "invalid_session_id",
            ErrorKind::SessionLocked => "session_locked",
            ErrorKind::ContentModified => "content_modified",
            ErrorKind::RequestCancelled => "request_cancelled",
        }
    }
}

/// The engine's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
