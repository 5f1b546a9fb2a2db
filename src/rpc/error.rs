//! Errors on the wire: JSON-RPC's codes for protocol faults, and application codes (outside every reserved range)
//! with a machine-readable `data.kind` for session faults. The one mapping from engine errors lives here. The
//! error object and JSON-RPC's own codes are jsonrpsee's ([`ErrorObjectOwned`], [`ErrorCode`]); LSP's two codes
//! and ours are not in it, so they are written here.

use jsonrpsee::types::{ErrorCode, ErrorObjectOwned};
use serde_json::json;

use crate::session::{Error, ErrorKind};

/// Every kind of error the wire carries, each with its code and its `data.kind` together: the engine's
/// [`ErrorKind`]s, and the faults only the protocol has (a frame, a request, a method, a handle, the team
/// catalog). Nothing else pairs a code with a kind, so `protocol/methods.json` and the wire cannot disagree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireKind {
    /// An engine error, under the code [`code`] gives its kind.
    Session(ErrorKind),
    /// JSON-RPC: invalid JSON.
    ParseError,
    /// JSON-RPC: not a valid request object (or sent after shutdown).
    InvalidRequest,
    /// JSON-RPC: no such method.
    MethodNotFound,
    /// JSON-RPC: the server failed.
    InternalError,
    /// No open session has that handle.
    HandleNotFound,
    /// The team catalog (`--catalog`) failed or cannot be reached.
    CatalogUnavailable,
    /// The session was opened read-only (another machine's, from the team catalog).
    ReadOnly,
}

impl WireKind {
    /// The protocol's own kinds (the engine's are [`ErrorKind::ALL`]).
    pub const PROTOCOL: [WireKind; 7] = [
        WireKind::ParseError,
        WireKind::InvalidRequest,
        WireKind::MethodNotFound,
        WireKind::InternalError,
        WireKind::HandleNotFound,
        WireKind::CatalogUnavailable,
        WireKind::ReadOnly,
    ];

    /// Every kind the wire can carry.
    pub fn all() -> impl Iterator<Item = WireKind> {
        WireKind::PROTOCOL.into_iter().chain(ErrorKind::ALL.into_iter().map(WireKind::Session))
    }

    /// The JSON-RPC error code.
    pub fn code(self) -> i32 {
        match self {
            WireKind::Session(kind) => code(kind),
            WireKind::ParseError => ErrorCode::ParseError.code(),
            WireKind::InvalidRequest => ErrorCode::InvalidRequest.code(),
            WireKind::MethodNotFound => ErrorCode::MethodNotFound.code(),
            WireKind::InternalError => ErrorCode::InternalError.code(),
            WireKind::HandleNotFound => 1003,
            WireKind::CatalogUnavailable => 1020,
            WireKind::ReadOnly => 1021,
        }
    }

    /// `data.kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            WireKind::Session(kind) => kind.as_str(),
            WireKind::ParseError => "parse_error",
            WireKind::InvalidRequest => "invalid_request",
            WireKind::MethodNotFound => "method_not_found",
            WireKind::InternalError => "internal_error",
            WireKind::HandleNotFound => "handle_not_found",
            WireKind::CatalogUnavailable => "catalog_unavailable",
            WireKind::ReadOnly => "read_only",
        }
    }

    /// What it means, for `protocol/methods.json`.
    pub fn meaning(self) -> &'static str {
        match self {
            WireKind::Session(kind) => kind.meaning(),
            WireKind::ParseError => "The frame is not JSON.",
            WireKind::InvalidRequest => "Not a JSON-RPC 2.0 request, or sent after shutdown.",
            WireKind::MethodNotFound => "No such method.",
            WireKind::InternalError => "The server failed; nothing was half-written.",
            WireKind::HandleNotFound => "No open session has that handle.",
            WireKind::CatalogUnavailable => {
                "The team catalog (`--catalog`) failed or cannot be reached; nothing was changed."
            }
            WireKind::ReadOnly => {
                "The handle holds another machine's session, opened read-only from the team catalog (`data.machine`)."
            }
        }
    }
}

impl From<ErrorKind> for WireKind {
    fn from(kind: ErrorKind) -> WireKind {
        WireKind::Session(kind)
    }
}

/// A JSON-RPC error object: the kind's code, and `data` with its `kind` and what `extra` adds.
pub fn rpc_error(kind: impl Into<WireKind>, message: impl Into<String>, extra: serde_json::Value) -> ErrorObjectOwned {
    let kind = kind.into();
    let mut data = json!({ "kind": kind.as_str() });
    if let (Some(d), serde_json::Value::Object(e)) = (data.as_object_mut(), extra) {
        d.extend(e);
    }
    ErrorObjectOwned::owned(kind.code(), message.into(), Some(data))
}

/// Invalid params, naming the field (`data.path`).
pub fn invalid_params(path: &str, message: impl Into<String>) -> ErrorObjectOwned {
    rpc_error(ErrorKind::InvalidParams, message, json!({ "path": path }))
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
    rpc_error(WireKind::HandleNotFound, format!("no open session has handle {handle}"), json!({ "handle": handle }))
}

/// A group-commit fsync failed: the entry was written but is not known to be on disk, so it is not acknowledged.
pub fn fsync_failed(e: &Error) -> ErrorObjectOwned {
    rpc_error(
        ErrorKind::IoError,
        format!("the entry was written but could not be synced to disk ({e}); it is not acknowledged as durable"),
        json!({}),
    )
}

/// The code sent for each kind of engine error: JSON-RPC's and LSP's where they have one, else ours (outside
/// every reserved range).
fn code(kind: ErrorKind) -> i32 {
    match kind {
        ErrorKind::InvalidParams => ErrorCode::InvalidParams.code(),
        // LSP's ContentModified and RequestCancelled.
        ErrorKind::ContentModified => -32801,
        ErrorKind::Cancelled => -32800,
        ErrorKind::SessionNotFound => 1001,
        ErrorKind::EntryNotFound => 1002,
        ErrorKind::InvalidSessionFile => 1004,
        ErrorKind::InvalidSessionId => 1005,
        ErrorKind::IoError => 1006,
        ErrorKind::SessionLocked => 1007,
        ErrorKind::InvalidEntry => 1008,
        ErrorKind::SessionPoisoned => 1009,
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
        Error::IdTaken { .. } => json!({ "path": "id" }),
        Error::NotBatchable { .. } | Error::InvalidReference { .. } => json!({ "path": "ops" }),
        Error::Locked { path, pid } => json!({ "path": path, "pid": pid }),
        Error::Conflict { path: Some(path), leaf, .. } => json!({ "leafId": leaf, "path": path }),
        Error::Conflict { path: None, leaf, .. } => json!({ "leafId": leaf }),
    };
    rpc_error(kind, message, data)
}
