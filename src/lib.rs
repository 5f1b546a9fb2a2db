//! pi-sessiond: pi's session files, exactly, behind a JSON-RPC sidecar.
//!
//! [`session`] is the engine: pi 1.6.0's `SessionManager` reimplemented over a memory-light index of the file,
//! with no knowledge of RPC. [`catalog`] lists, indexes and searches many sessions, built on the engine. [`rpc`] is
//! the JSON-RPC sidecar in front of both; [`cli`] holds the command-line tools built directly on them;
//! [`team`] pushes sessions to a shared PostgreSQL and serves them from it; [`watch`], below the sidecar and the
//! team push, follows files other processes write.
#![deny(missing_docs)]

pub mod catalog;
pub mod cli;
#[cfg(target_os = "linux")]
pub mod memory;
pub mod rpc;
pub mod session;
pub mod team;
pub mod watch;
pub mod web;
