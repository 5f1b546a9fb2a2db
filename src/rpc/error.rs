//! Errors on the wire: JSON-RPC's codes for protocol faults, and application codes (outside every reserved range)
//! with a machine-readable `data.kind` for session faults. The one mapping from engine errors lives here.

use jsonrpsee::types::ErrorObjectOwned;
use serde_json::json;

use crate::session::{Error, ErrorKind};

/// JSON-RPC: invalid JSON.
pub const PARSE_ERROR: i32 = -32700;
/// JSON-RPC: not a valid request object.
pub const INVALID_REQUEST: i32 = -32600;
/// JSON-RPC: no such method.
pub const METHOD_NOT_FOUND: i32 = -32601;
/// JSON-RPC: bad params.
pub const INVALID_PARAMS: i32 = -32602;
/// JSON-RPC: the server failed.
pub const INTERNAL_ERROR: i32 = -32603;
/// LSP: the request was cancelled.
pub const REQUEST_CANCELLED: i32 = -32800;
/// LSP: the content changed under the request (a stale `expectedLeafId`).
pub const CONTENT_MODIFIED: i32 = -32801;

/// The session file or directory does not exist.
pub const SESSION_NOT_FOUND: i32 = 1001;
/// No entry has that id.
pub const ENTRY_NOT_FOUND: i32 = 1002;
/// No open session has that handle.
pub const HANDLE_NOT_FOUND: i32 = 1003;
/// The file is not a pi session.
pub const INVALID_SESSION_FILE: i32 = 1004;
/// A session id breaks pi's rule.
pub const INVALID_SESSION_ID: i32 = 1005;
/// The file system failed.
pub const IO_ERROR: i32 = 1006;
/// Another process holds the session's write lock.
pub const SESSION_LOCKED: i32 = 1007;
/// The session holds an entry pi cannot read for this operation.
pub const INVALID_ENTRY: i32 = 1008;
/// An earlier failed fsync left the file's durable state unknown; the session refuses writes until reopened.
pub const SESSION_POISONED: i32 = 1009;
/// The team catalog (`--catalog`) failed or cannot be reached.
pub const CATALOG_UNAVAILABLE: i32 = 1020;
/// The session was opened read-only (another machine's, from the team catalog).
pub const READ_ONLY: i32 = 1021;

/// A JSON-RPC error object with `data.kind`.
pub fn rpc_error(code: i32, kind: &str, message: impl Into<String>, extra: serde_json::Value) -> ErrorObjectOwned {
    let mut data = json!({ "kind": kind });
    if let (Some(d), serde_json::Value::Object(e)) = (data.as_object_mut(), extra) {
        d.extend(e);
    }
    ErrorObjectOwned::owned(code, message.into(), Some(data))
}

/// Invalid params, naming the field (`data.path`).
pub fn invalid_params(path: &str, message: impl Into<String>) -> ErrorObjectOwned {
    rpc_error(INVALID_PARAMS, "invalid_params", message, json!({ "path": path }))
}

/// The same error, for a part of a larger request: its `data.path` (if any) is put under `prefix` (the op of a
/// batch, `ops[3]`), so the host can tell which part was refused.
pub fn within(e: ErrorObjectOwned, prefix: &str) -> ErrorObjectOwned {
    let mut data: serde_json::Value =
        e.data().and_then(|d| serde_json::from_str(d.get()).ok()).unwrap_or_else(|| json!({}));
    if let Some(d) = data.as_object_mut() {
        let path = match d.get("path").and_then(serde_json::Value::as_str) {
            Some("") | None => prefix.to_owned(),
            Some(p) if p.starts_with('[') => format!("{prefix}{p}"),
            Some(p) => format!("{prefix}.{p}"),
        };
        d.insert("path".into(), json!(path));
    }
    ErrorObjectOwned::owned(e.code(), format!("{prefix}: {}", e.message()), Some(data))
}

/// An unknown handle.
pub fn handle_not_found(handle: &str) -> ErrorObjectOwned {
    rpc_error(
        HANDLE_NOT_FOUND,
        "handle_not_found",
        format!("no open session has handle {handle}"),
        json!({ "handle": handle }),
    )
}

/// A group-commit fsync failed: the entry was written but is not known to be on disk, so it is not acknowledged.
pub fn fsync_failed(e: &Error) -> ErrorObjectOwned {
    rpc_error(
        IO_ERROR,
        "io_error",
        format!("the entry was written but could not be synced to disk ({e}); it is not acknowledged as durable"),
        json!({}),
    )
}

/// The code sent for each kind of engine error.
pub fn code(kind: ErrorKind) -> i32 {
    match kind {
        ErrorKind::InvalidParams => INVALID_PARAMS,
        ErrorKind::ContentModified => CONTENT_MODIFIED,
        ErrorKind::SessionNotFound => SESSION_NOT_FOUND,
        ErrorKind::EntryNotFound => ENTRY_NOT_FOUND,
        ErrorKind::InvalidSessionFile => INVALID_SESSION_FILE,
        ErrorKind::InvalidSessionId => INVALID_SESSION_ID,
        ErrorKind::IoError => IO_ERROR,
        ErrorKind::SessionLocked => SESSION_LOCKED,
        ErrorKind::InvalidEntry => INVALID_ENTRY,
        ErrorKind::SessionPoisoned => SESSION_POISONED,
        ErrorKind::Cancelled => REQUEST_CANCELLED,
    }
}

/// The one mapping from engine errors to the wire: the code of the error's kind, `data.kind`, and what the
/// fault names in `data`.
pub fn from_session(e: Error) -> ErrorObjectOwned {
    let kind = e.kind();
    let message = e.to_string();
    let data = match e {
        Error::Io { path, .. }
        | Error::AlreadyExists { path }
        | Error::InvalidSessionFile { path }
        | Error::InvalidForkSource { path }
        | Error::Poisoned { path, .. } => json!({ "path": path }),
        Error::InvalidEntry { line, .. } => json!({ "line": line }),
        Error::EntryNotFound { id } => json!({ "id": id }),
        Error::InvalidSessionId | Error::Cancelled => json!({}),
        Error::NotOnActiveBranch { .. } | Error::NotEditable { .. } => json!({ "path": "targetId" }),
        Error::InvalidReplacement => json!({ "path": "replacement" }),
        Error::InvalidQuery { .. } => json!({ "path": "query" }),
        Error::NotBatchable { .. } | Error::InvalidReference { .. } => json!({ "path": "ops" }),
        Error::Locked { path, pid } => json!({ "path": path, "pid": pid }),
        Error::Conflict { path: Some(path), leaf, .. } => json!({ "leafId": leaf, "path": path }),
        Error::Conflict { path: None, leaf, .. } => json!({ "leafId": leaf }),
    };
    rpc_error(code(kind), kind.as_str(), message, data)
}
