//! One process's handle on the index ([`SharedIndex`]): a pool of connections opened on first use, the files
//! this process wrote that the index has not caught up on yet, and the catch-up that takes them.

use super::*;

/// One process's handle on the index: connections opened on first use (a host that never lists creates
/// nothing), one per request running at a time, kept for reuse; they share the process's memo of listing
/// entries. A request never waits for another request of its process to finish with the index.
pub struct SharedIndex {
    pub(super) path: Option<String>,
    pub(super) memory: Arc<ProcessMemory>,
    pub(super) pool: Mutex<Pool>,
    pub(super) written: Mutex<Written>,
}

/// Files this process wrote that the index has not caught up on yet.
#[derive(Default)]
pub(super) struct Written {
    pub(super) paths: HashSet<String>,
    /// Files a search read because the index held too little of their text.
    pub(super) unindexed: Vec<String>,
    /// Someone is running [`SharedIndex::catch_up_written`] and will take new paths too.
    pub(super) running: bool,
}

/// Idle connections, and why there are none to be had.
#[derive(Default)]
pub(super) struct Pool {
    pub(super) idle: Vec<Connection>,
    /// The file at the path is not ours: the process does without the index.
    pub(super) refused: bool,
    /// The last reason an open failed (each new reason is logged once).
    pub(super) last_failure: Option<String>,
}

/// How many times [`SharedIndex::catch_up_written`] tries a file before leaving it to the next listing.
pub(super) const CATCH_UP_TRIES: u32 = 5;

/// The first pause before a failed catch-up is tried again; each later one is twice as long (0.1 to 0.8 s).
pub(super) const CATCH_UP_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// Idle connections kept for reuse (more requests at once each open their own).
pub(super) const IDLE_CONNECTIONS: usize = 4;

impl std::fmt::Debug for SharedIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedIndex").field("path", &self.path).finish()
    }
}

impl SharedIndex {
    /// An index at `path`, or none at all (every request reads the files).
    pub fn new(path: Option<String>) -> SharedIndex {
        SharedIndex { path, memory: Arc::default(), pool: Mutex::default(), written: Mutex::default() }
    }

    /// Notes that this process wrote `path`, so that a search finds what was just written even before anyone
    /// lists again (listings stat every file anyway). Returns true when the caller should now run
    /// [`SharedIndex::catch_up_written`] on a thread of its own (the engine starts none); false when there is no
    /// index or a catch-up already running will take `path` too, so a burst of writes costs one catch-up.
    pub fn note_written(&self, path: &str) -> bool {
        if self.path.is_none() {
            return false;
        }
        let mut written = lock(&self.written);
        written.paths.insert(path.to_owned());
        !std::mem::replace(&mut written.running, true)
    }

    /// Notes that a search read `paths` because the index did not hold their text yet (see
    /// [`crate::catalog::search::Searched`]). Returns true when the caller should now run
    /// [`SharedIndex::catch_up_written`] on a thread of its own, as [`SharedIndex::note_written`] does.
    pub fn note_unindexed(&self, paths: Vec<String>) -> bool {
        if self.path.is_none() || paths.is_empty() {
            return false;
        }
        let mut written = lock(&self.written);
        written.unindexed.extend(paths);
        !std::mem::replace(&mut written.running, true)
    }

    /// Brings the index up to date on every file noted by [`SharedIndex::note_written`] (only files the index
    /// follows: those of directories it has listed) and extracts the text of those noted by
    /// [`SharedIndex::note_unindexed`], until none is left. Blocks while it reads and writes.
    /// A file whose catch-up failed (the index busy past its timeout, a connection that could not be opened) is
    /// tried again after a pause, up to [`CATCH_UP_TRIES`] times, before it is left to the next listing.
    pub fn catch_up_written(&self) {
        let mut failures = 0;
        loop {
            let (paths, mut unindexed) = {
                let mut written = lock(&self.written);
                if written.paths.is_empty() && written.unindexed.is_empty() {
                    written.running = false;
                    return;
                }
                (std::mem::take(&mut written.paths), std::mem::take(&mut written.unindexed))
            };
            unindexed.sort();
            unindexed.dedup();
            let (failed, failed_text) = self.with(|ix| {
                let Some(ix) = ix else { return (paths.into_iter().collect(), unindexed) };
                let mut failed = Vec::new();
                for p in paths {
                    if let Err(e) = ix.refresh_known_file(&p, &Cancel::new()) {
                        tracing::warn!("catalog index: cannot follow {p}: {e}");
                        failed.push(p);
                    }
                }
                if let Err(e) = ix.catch_up_docs(&unindexed, &Cancel::new(), &mut |_, _| {}) {
                    tracing::warn!("catalog index: the searchable text was not stored ({e})");
                    return (failed, unindexed);
                }
                (failed, Vec::new())
            });
            if failed.is_empty() && failed_text.is_empty() {
                failures = 0;
                continue;
            }
            failures += 1;
            if failures >= CATCH_UP_TRIES || lock(&self.pool).refused {
                tracing::warn!(
                    "catalog index: {} files and the text of {} left for the next listing to catch up",
                    failed.len(),
                    failed_text.len()
                );
                continue;
            }
            std::thread::sleep(CATCH_UP_PAUSE * (1 << failures));
            let mut written = lock(&self.written);
            written.paths.extend(failed);
            written.unindexed.extend(failed_text);
        }
    }

    /// Runs `f` with a connection of its own to the index (opening one if none is idle), or with None when there
    /// is no index, the file at its path is not ours, or it cannot be opened now (a later request tries again).
    pub fn with<T>(&self, f: impl FnOnce(Option<&mut CatalogIndex>) -> T) -> T {
        let Some(path) = &self.path else { return f(None) };
        let idle = {
            let mut pool = lock(&self.pool);
            if pool.refused {
                drop(pool);
                return f(None);
            }
            pool.idle.pop()
        };
        let mut index = match idle {
            Some(conn) => Some(CatalogIndex {
                path: path.clone(),
                conn,
                memory: self.memory.clone(),
                refused: false,
                disk: real_disk(),
            }),
            None => match CatalogIndex::connect(path, self.memory.clone(), real_disk()) {
                Ok(ix) => Some(ix),
                Err(e) => {
                    self.note_failure(path, &e);
                    None
                }
            },
        };
        let out = f(index.as_mut());
        if let Some(ix) = index {
            let mut pool = lock(&self.pool);
            if ix.refused {
                if !pool.refused {
                    tracing::warn!("catalog index {path} is no longer ours; listing without it from now on");
                }
                pool.refused = true;
                pool.idle.clear();
            } else if pool.idle.len() < IDLE_CONNECTIONS {
                pool.idle.push(ix.conn);
            }
        }
        out
    }

    /// Says once why the index cannot be used; a file that is not ours is never tried again.
    fn note_failure(&self, path: &str, e: &IndexError) {
        let mut pool = lock(&self.pool);
        let reason = e.to_string();
        if pool.last_failure.as_deref() != Some(reason.as_str()) {
            match e {
                IndexError::Foreign { .. } => tracing::warn!("catalog index: {reason}; listing without it"),
                _ => tracing::warn!("catalog index {path} cannot be opened ({reason}); listing without it for now"),
            }
            pool.last_failure = Some(reason);
        }
        if matches!(e, IndexError::Foreign { .. }) {
            pool.refused = true;
        }
    }
}
