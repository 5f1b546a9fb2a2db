//! The sidecar: JSON-RPC 2.0 over stdin/stdout, in front of the engine.
//!
//! `framing` turns bytes into frames and back; `server` runs the reader, the writer and the dispatch loop;
//! `methods` is the method table and its handlers; `handles` keeps open sessions and orders requests per session;
//! `proto` holds every wire type (and is the source of `protocol/`); `error` maps engine errors to the wire;
//! `protocol` writes the machine-readable contract. Nothing here knows how session files are laid out: that is
//! `crate::session`'s business.

pub mod error;
pub mod framing;
pub mod handles;
pub mod methods;
pub mod proto;
pub mod protocol;
pub mod server;
pub mod watch;

pub use server::{serve, Config};
