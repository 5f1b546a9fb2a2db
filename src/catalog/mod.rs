//! The catalog: many sessions at once. pi's `list`, `listAll`, `findById` with pi's orders ([`listing`]), what a
//! listing shows of one file ([`info`]), the persistent index every pi-sessiond process shares ([`index`]), and
//! search with pi's `/resume` query language down to the entry ([`search`]), and the secret patterns replaced before
//! session text leaves the machine ([`redact`]), and tokens and cost summed as pi sums them ([`usage`]). Built on the engine
//! (`crate::session`), which never imports it; every loop checks a [`Cancel`] flag. Whether the directories a
//! listing read changed since, from the kernel's notifications ([`quiet`]), lets a held listing be answered
//! without reading them.
//!
//! Layering (imports go downward): `search` → `listing` → `index` → `info` → `cancel`. Only `listing`, `index`,
//! `info` and `quiet` (which watches directories and looks at their names) touch the file system (the index
//! database and the session files they read).

pub mod cancel;
pub mod index;
pub mod info;
pub mod listing;
pub mod quiet;
pub mod redact;
pub mod search;
pub mod usage;

pub use cancel::Cancel;
