//! The sidecar: JSON-RPC 2.0 over stdin/stdout, in front of the engine.
//!
//! The path of a request, top down: `transport` (frames in from the reader thread, frames out through the one
//! writer) → `server` (the event loop over one `Event` enum) → `dispatch` (a frame's envelopes, read once) →
//! `methods` (the method table: params parsed once, the handler put where it runs) → `handles` (each open
//! session's queue, in arrival order) → `handlers/*` (the handlers, by concern) → the engine; the answer goes back
//! through `reply`, in `envelope`s (jsonrpsee's types where they keep the wire). `framing` is bytes ↔ frames, `proto` every wire type (the source of `protocol/`, written by
//! `protocol`), `error` the wire's errors, `log` logging that never blocks.
//! Nothing here knows how session files are laid out: that is `crate::session`'s business.

pub mod dispatch;
pub mod envelope;
pub mod error;
pub mod framing;
pub mod handlers;
pub mod handles;
pub mod log;
pub mod methods;
pub mod proto;
pub mod protocol;
pub mod reply;
pub mod server;
pub mod team;
pub mod transport;

pub use server::{serve, serve_connection, Config};
pub use transport::{Connection, MemoryHost};
