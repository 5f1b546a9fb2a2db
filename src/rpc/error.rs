//! Errors on the wire: JSON-RPC's codes for protocol faults, and application codes (outside every reserved range)
//! with a machine-readable `data.kind` for session faults. The one mapping from engine errors lives here.

use jsonrpsee::types::ErrorObjectOwned;
use serde_json::json;

use crate::session::Error;

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
/// The file is not a pi session, or holds an entry pi cannot read.
pub const INVALID_SESSION_FILE: i32 = 1004;
/// A session id breaks pi's rule.
pub const INVALID_SESSION_ID: i32 = 1005;
/// The file system failed.
pub const IO_ERROR: i32 = 1006;
/// Another process holds the session's write lock.
pub const SESSION_LOCKED: i32 = 1007;
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

/// An unknown handle.
pub fn handle_not_found(handle: &str) -> ErrorObjectOwned {
    rpc_error(
        HANDLE_NOT_FOUND,
        "handle_not_found",
        format!("no open session has handle {handle}"),
        json!({ "handle": handle }),
    )
}

/// Adds `data.leafId` (the leaf now) to an error, so every `content_modified` carries it.
pub fn with_leaf(e: ErrorObjectOwned, current_leaf: Option<String>) -> ErrorObjectOwned {
    let mut data: serde_json::Value =
        e.data().and_then(|d| serde_json::from_str(d.get()).ok()).unwrap_or_else(|| json!({}));
    data["leafId"] = json!(current_leaf);
    ErrorObjectOwned::owned(e.code(), e.message().to_owned(), Some(data))
}

/// A stale `expectedLeafId`.
pub fn content_modified(current_leaf: Option<String>) -> ErrorObjectOwned {
    rpc_error(
        CONTENT_MODIFIED,
        "content_modified",
        "the session's leaf is not the expected one: it changed since the caller last looked",
        json!({ "leafId": current_leaf }),
    )
}

/// Another process appended to the file (published as external changes just before this answer), moving the
/// leaf; nothing was written.
pub fn modified_by_another_process(current_leaf: Option<String>, path: Option<&str>) -> ErrorObjectOwned {
    rpc_error(
        CONTENT_MODIFIED,
        "content_modified",
        "another process appended to the session file and moved its leaf; nothing was written",
        json!({ "leafId": current_leaf, "path": path }),
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

/// The one mapping from engine errors to the wire.
pub fn from_session(e: Error) -> ErrorObjectOwned {
    let message = e.to_string();
    let not_found = e.is_not_found();
    match e {
        Error::Io { path, .. } if not_found => {
            rpc_error(SESSION_NOT_FOUND, "session_not_found", message, json!({ "path": path }))
        }
        Error::Io { path, .. } => rpc_error(IO_ERROR, "io_error", message, json!({ "path": path })),
        Error::AlreadyExists { path } => rpc_error(IO_ERROR, "io_error", message, json!({ "path": path })),
        Error::InvalidSessionFile { path } | Error::InvalidForkSource { path } => {
            rpc_error(INVALID_SESSION_FILE, "invalid_session_file", message, json!({ "path": path }))
        }
        Error::InvalidEntry { line, .. } => {
            rpc_error(INVALID_SESSION_FILE, "invalid_session_file", message, json!({ "line": line }))
        }
        Error::EntryNotFound { id } => rpc_error(ENTRY_NOT_FOUND, "entry_not_found", message, json!({ "id": id })),
        Error::InvalidSessionId => rpc_error(INVALID_SESSION_ID, "invalid_session_id", message, json!({})),
        Error::NotOnActiveBranch { .. } | Error::NotEditable { .. } => invalid_params("targetId", message),
        Error::InvalidReplacement => invalid_params("replacement", message),
        Error::InvalidQuery { .. } => invalid_params("query", message),
        Error::Locked { path, pid } => {
            rpc_error(SESSION_LOCKED, "session_locked", message, json!({ "path": path, "pid": pid }))
        }
        Error::Conflict { path, .. } => {
            rpc_error(CONTENT_MODIFIED, "content_modified", message, json!({ "path": path }))
        }
        Error::Cancelled => rpc_error(REQUEST_CANCELLED, "request_cancelled", message, json!({})),
    }
}
