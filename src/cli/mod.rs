//! The command-line tools, straight on the engine (no RPC): for people by default — tables, coloured trees,
//! grouped search results, a pager on a terminal — and for scripts with `--json`, which prints what pi's read
//! API returns (or `{"error": {"kind", "message"}}`). None of them writes to a session file or creates a
//! directory. Each command lives in its own file; [`output`] holds what they share (style, pager, failures,
//! exit statuses) and [`resolve`] how a session is named (path, id, id prefix, `latest`).

pub mod inspect;
pub mod ls;
pub mod output;
pub mod pretty;
pub mod resolve;
pub mod search;
pub mod show;
pub mod stats;
pub mod tree;
pub mod usage;

pub use inspect::{inspect_with, warnings_json, Reads};
