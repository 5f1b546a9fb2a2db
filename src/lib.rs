//! pi-sessiond: pi's session files, exactly, behind a JSON-RPC sidecar.
//!
//! [`session`] is the engine: pi 1.6.0's `SessionManager` reimplemented over a memory-light index of the file,
//! with no knowledge of RPC. [`rpc`] is the JSON-RPC sidecar in front of it; [`cli`] holds the command-line
//! tools built directly on the engine; [`team`] pushes sessions to a shared PostgreSQL and serves them from it.
#![deny(missing_docs)]

pub mod cli;
pub mod rpc;
pub mod session;
pub mod team;
