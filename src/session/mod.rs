//! The session engine: pi 1.6.0's session files, exactly, with no knowledge of RPC.
//!
//! A session file is read line by line into [`entry::Record`]s — skeletons that keep only what pi's logic reads
//! (ids, parent ids, types, roles, labels, names) plus where each entry's bytes are — so memory follows the tree,
//! not the bodies. [`manager::SessionManager`] runs pi's operations over them; [`context`] builds what the model
//! sees; [`catalog`] lists and finds sessions; [`render`] writes pi's read results as JSON.
//!
//! Layering (imports go downward): `manager` → `context`, `tree`, `migrate`, `store` → `line`, `entry`, `key` →
//! `json`, `js`. Only `store` and `catalog` (and `info`, for listing) read or write files.

pub mod catalog;
pub mod change;
pub mod context;
pub mod dirscan;
pub mod entry;
pub mod error;
pub mod ids;
pub mod index;
pub mod info;
pub mod js;
pub mod json;
pub mod key;
pub mod line;
pub mod manager;
pub mod migrate;
pub mod paths;
pub mod render;
pub mod search;
pub mod store;
pub mod tree;

pub use change::{Change, Commit, EntryRef, Op, OpValue, Origin, Outcome};
pub use error::{Error, ErrorKind, Result};
pub use manager::{Env, NewSessionOptions, SessionManager};
