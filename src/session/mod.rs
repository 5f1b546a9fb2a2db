//! The session engine: pi 1.6.0's session files, exactly, with no knowledge of RPC.
//!
//! A session file is read line by line into [`entry::Record`]s — skeletons that keep only what pi's logic reads
//! (ids, parent ids, types, roles, labels, names) plus where each entry's bytes are — so memory follows the tree,
//! not the bodies. [`manager::SessionManager`] runs pi's operations over them, each mutation one [`change::Op`]
//! that says what it changed; [`context`] builds what the model sees; [`render`] writes pi's read results as JSON.
//! Listing and searching many sessions is the catalog's job (`crate::catalog`), built on this engine.
//!
//! Layering (imports go downward, and `tests/it/tidy.rs` refuses a cycle): `render` → `manager` → `kept`,
//! `change`, `context`, `tree`, `migrate` → `store` → `line` → `skeleton` → `describe`, `entry`, `key`, `ids`,
//! `error` → `json`, `js`. Only `store` (session files), `identity` (their stamps and known bytes), `dirscan`
//! (session directories) and `kept` (what opens read of them, kept in pi-sessiond's own files) touch the file
//! system.

pub mod change;
pub mod context;
pub mod describe;
pub mod dirscan;
pub mod entry;
pub mod error;
pub mod identity;
pub mod ids;
pub mod js;
pub mod json;
pub mod kept;
pub mod key;
pub mod line;
pub mod manager;
pub mod migrate;
pub mod paths;
pub mod render;
pub mod skeleton;
pub mod store;
pub mod tree;

/// A fixed pseudo-random draw below a bound (xorshift32 from `seed`), for tests that generate many inputs: the
/// same sequence every run, so a failure repeats.
#[cfg(test)]
pub(crate) fn draws_below(mut seed: u32) -> impl FnMut(u32) -> u32 {
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        seed % n
    }
}

pub use change::NewSessionOptions;
pub use change::{Change, Commit, EntryRef, Op, OpValue, Origin, Outcome};
pub use error::{Error, ErrorKind, Result};
pub use manager::{Env, SessionManager};
