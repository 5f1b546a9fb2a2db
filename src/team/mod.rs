//! Beyond one machine: every machine's sessions in one PostgreSQL database, pushed by each machine and listed,
//! searched and read from anywhere.
//!
//! [`access`] records who may read and push what (PostgreSQL's row-level security enforces it); [`push`] copies one agent directory's sessions (rows per session, rows per line) incrementally and crash-safely;
//! [`catalog`] answers pi's `list`/`listAll`/`findById` and the `/resume` search across machines, and reads a
//! session back line for line; [`usage`] sums every machine's tokens and cost as `pi-sessiond usage` does;
//! [`prune`] deletes sessions older than a retention age; [`schema`] creates and
//! migrates the tables; [`db`] connects (URL, `PG*` variables,
//! the password file, TLS). The session files stay the truth on each machine: the database is a copy that a push brings up to date.
//! `docs/team.md` is the operator's view.

pub mod access;
pub mod catalog;
pub mod cli;
pub mod db;
mod pgpass;
pub mod prune;
pub mod push;
pub mod schema;
mod state;
pub mod usage;

pub use catalog::{TeamCatalog, TeamHit, TeamSession};
pub use db::{DbError, DbResult, Target};
pub use push::{push_once, PushOptions, PushReport};
