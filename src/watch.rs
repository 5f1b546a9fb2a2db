//! Watching files other processes write: the platform's notification API (inotify through the `notify` crate)
//! on the directories that hold watched sessions, plus a periodic poll as a safety net (and as the only source when
//! native watching is unavailable, e.g. too many watches or an exotic file system). A room of its own, below the
//! sidecar (session and directory watches) and the team push (`push --watch`), which both use it.
//!
//! Events only say "look again"; what changed is always decided by reading the file (`SessionManager::refresh`),
//! so a lost, duplicated or reordered event can delay an update but never corrupt one.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use notify::{RecursiveMode, Watcher};

/// A change the watcher saw: the paths involved and what happened to them.
#[derive(Debug, Clone)]
pub struct FsEvent {
    /// Paths the event is about.
    pub paths: Vec<PathBuf>,
    /// What happened.
    pub kind: FileChange,
}

/// What happened to a file, as far as a watcher can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileChange {
    /// It appeared (created, or renamed into place).
    Created,
    /// It was written.
    Changed,
    /// It vanished (removed, or renamed away).
    Removed,
}

/// Directories being watched, reference-counted, behind one native watcher.
pub struct FsWatcher {
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for FsWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FsWatcher").field("native", &self.is_native()).finish()
    }
}

struct Inner {
    native: Option<notify::RecommendedWatcher>,
    dirs: HashMap<PathBuf, usize>,
}

fn kind_of(kind: &notify::EventKind) -> Option<FileChange> {
    use notify::EventKind::*;
    use FileChange::{Changed, Created, Removed};
    match kind {
        Create(_) => Some(Created),
        Modify(notify::event::ModifyKind::Name(notify::event::RenameMode::From)) => Some(Removed),
        Modify(notify::event::ModifyKind::Name(_)) => Some(Created),
        Modify(_) => Some(Changed),
        Remove(_) => Some(Removed),
        Access(_) | Any | Other => None,
    }
}

impl FsWatcher {
    /// A watcher that hands what it sees to `events`. Falls back to polling only if native watching cannot start.
    pub fn new(events: impl Fn(FsEvent) + Send + 'static) -> FsWatcher {
        let native = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            if let Ok(event) = res {
                if let Some(kind) = kind_of(&event.kind) {
                    events(FsEvent { paths: event.paths, kind });
                }
            }
        });
        let native = match native {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!("native file watching unavailable ({e}); polling instead");
                None
            }
        };
        FsWatcher { inner: Mutex::new(Inner { native, dirs: HashMap::new() }) }
    }

    /// True when native notifications are in use (otherwise the poll is the only source).
    pub fn is_native(&self) -> bool {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).native.is_some()
    }

    /// Starts (or counts another user of) a watch on `dir`. A directory that cannot be watched natively is left
    /// to the poll.
    pub fn watch_dir(&self, dir: &Path) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let count = inner.dirs.entry(dir.to_path_buf()).or_insert(0);
        *count += 1;
        if *count == 1 {
            if let Some(w) = inner.native.as_mut() {
                if let Err(e) = w.watch(dir, RecursiveMode::NonRecursive) {
                    tracing::warn!("cannot watch {}: {e}; relying on polling", dir.display());
                }
            }
        }
    }

    /// Drops one user of a watch on `dir`.
    pub fn unwatch_dir(&self, dir: &Path) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let Some(count) = inner.dirs.get_mut(dir) else { return };
        *count -= 1;
        if *count == 0 {
            inner.dirs.remove(dir);
            if let Some(w) = inner.native.as_mut() {
                let _ = w.unwatch(dir);
            }
        }
    }
}

/// The directory a session file's events arrive on.
pub fn dir_of(path: &str) -> PathBuf {
    Path::new(path).parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."))
}
