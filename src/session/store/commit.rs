//! Durability: how hard a write tries, and group commit (a [`SyncPoint`] whose fsync covers every write before
//! it; a [`Commit`] a write waits on).

use super::*;

/// How hard a write tries to reach the disk before it counts as done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// No fsync (what pi does): survives a crash of this process, not of the machine.
    #[default]
    None,
    /// fsync after every write, before it is acknowledged (and of the directory when a file is created or
    /// renamed).
    Entry,
    /// Group commit: writes are made at once and acknowledged once one fsync covers them ([`Commit::wait`]), so
    /// a burst of writers shares one fsync.
    Batch,
    /// Acknowledged once written, as `None`, and fsynced right after: the sidecar's worker makes one fsync for the
    /// writes of a burst as soon as their answers are out, before it runs the handle's next request. For a host
    /// that must not wait for the disk but wants what it wrote on the disk within moments (pi's drop-in, whose
    /// plain pi never fsyncs). A failed fsync poisons the session, so the next write is refused and says why.
    After,
}

/// What [`SessionFile::beyond`] found past the bytes we know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Beyond {
    /// The file's length now.
    pub end: u64,
    /// Where the bytes after the last newline start, when the file does not end with one: a line another writer
    /// is still writing, or one it left unfinished.
    pub unterminated: Option<u64>,
}

/// Where an append landed.
#[derive(Debug)]
pub struct Landed {
    /// File offset of the first byte written. It is the length known before the write unless another writer
    /// (one that takes no lock: pi) appended in between, whose bytes then lie before it.
    pub offset: u64,
    /// When the write is durable.
    pub commit: Commit,
}

/// Group commit and poisoning for one append handle. Writes are numbered as they are made; one fsync covers every
/// write numbered before it started, so writers waiting meanwhile share it (one fsync runs at a time; a waiter
/// whose write an fsync made since covers needs none of its own). It lives outside the session's lock (each
/// [`Commit`] holds it), so an fsync never has to hold up the next writer. Once an fsync fails, or a failed write
/// cannot be cut back, what is on disk is unknown: the point is poisoned, every write it was to cover fails, and
/// every later write is refused until the file is opened again (PostgreSQL's lesson: retrying an fsync after a
/// failure can report success for data the kernel already dropped).
#[derive(Debug)]
pub struct SyncPoint {
    /// A descriptor of the append handle's file, for fsync without the handle.
    pub(super) file: DiskFile,
    pub(super) path: String,
    pub(super) state: Mutex<SyncState>,
    /// Held while an fsync runs, so two are never made at once (the second waits, then usually finds its write
    /// covered by the first).
    pub(super) fsync_turn: Mutex<()>,
}

#[derive(Debug, Default)]
pub(super) struct SyncState {
    /// Number of the last write made.
    pub(super) written: u64,
    /// Number of the last write known durable.
    pub(super) synced: u64,
    /// Why the file refuses writes: the failure, and its OS error code when it had one.
    pub(super) poison: Option<(String, Option<i32>)>,
}

impl SyncPoint {
    pub(super) fn new(writer: &DiskFile, path: &str) -> Result<Arc<SyncPoint>> {
        let file = writer.try_clone().map_err(|e| Error::io("open", path, e))?;
        Ok(Arc::new(SyncPoint {
            file,
            path: path.to_owned(),
            state: Mutex::new(SyncState::default()),
            fsync_turn: Mutex::new(()),
        }))
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, SyncState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Numbers a write just made; returns its number.
    pub(super) fn wrote(&self) -> u64 {
        let mut s = self.lock();
        s.written += 1;
        s.written
    }

    /// Records that everything written so far is durable (a synced rewrite replaced the file).
    pub(super) fn all_synced(&self) {
        let mut s = self.lock();
        s.synced = s.written;
    }

    /// Poisons the file (see the type's doc).
    pub(super) fn poison(&self, cause: String, os_error: Option<i32>) {
        tracing::error!("{}: {cause}; the session refuses writes until it is opened again", self.path);
        self.lock().poison.get_or_insert((cause, os_error));
    }

    /// The error a write gets once the file is poisoned.
    pub(super) fn refusal(&self) -> Option<Error> {
        let s = self.lock();
        s.poison.as_ref().map(|(cause, _)| Error::Poisoned { path: self.path.clone(), cause: cause.clone() })
    }

    /// True when write number `generation` is durable.
    pub(crate) fn is_synced(&self, generation: u64) -> bool {
        self.lock().synced >= generation
    }

    /// Blocks until write number `generation` is durable, making the fsync on this thread unless one made since
    /// covers it. A write an fsync failed to cover gets that failure (it is not durable).
    pub(crate) fn sync_through(&self, generation: u64) -> Result<()> {
        loop {
            {
                let s = self.lock();
                if s.synced >= generation {
                    return Ok(());
                }
                if let Some((cause, os_error)) = &s.poison {
                    let source = match os_error {
                        Some(code) => std::io::Error::from_raw_os_error(*code),
                        None => std::io::Error::other(cause.clone()),
                    };
                    return Err(Error::io("sync", &self.path, source));
                }
            }
            let _turn = self.fsync_turn.lock().unwrap_or_else(|e| e.into_inner());
            let target = {
                let s = self.lock();
                if s.synced >= generation || s.poison.is_some() {
                    continue;
                }
                s.written
            };
            let result = self.file.sync_data();
            let mut s = self.lock();
            match result {
                Ok(()) => s.synced = s.synced.max(target),
                Err(e) => {
                    tracing::error!(
                        "{}: fsync failed: {e}; the session refuses writes until it is opened again",
                        self.path
                    );
                    s.poison.get_or_insert((format!("fsync failed: {e}"), e.raw_os_error()));
                }
            }
        }
    }

    /// fsyncs what is still owed (when the file is closed).
    pub(super) fn sync_all_written(&self) -> Result<()> {
        let written = self.lock().written;
        self.sync_through(written)
    }
}

/// The durability of one write: [`Commit::wait`] returns once the write is on disk as the session's durability
/// asks. Under `Durability::Batch` the fsync happens there, without the session (a `&mut SessionManager` is not
/// needed), and one fsync covers every write made before it, so a burst of writers shares one
/// ([`SessionManager::sync`](super::SessionManager::sync) does the same for everything written). Under `None` and
/// `Entry` there is nothing to wait for (an `Entry` write was synced before it was applied to memory).
#[derive(Debug, Default)]
#[must_use = "a write is not durable until its commit is waited for"]
pub struct Commit(Option<(Arc<SyncPoint>, u64)>);

impl Commit {
    /// A commit with nothing to wait for.
    pub fn done() -> Commit {
        Commit(None)
    }

    pub(crate) fn pending(point: Arc<SyncPoint>, generation: u64) -> Commit {
        Commit(Some((point, generation)))
    }

    /// True when [`Commit::wait`] may block (an fsync is still owed).
    pub fn is_pending(&self) -> bool {
        self.0.as_ref().is_some_and(|(point, generation)| !point.is_synced(*generation))
    }

    /// Blocks until the write is durable. The first waiter fsyncs everything written so far; the others wait
    /// for it. A failed fsync fails every write it was to cover (none of them is durable) and poisons the
    /// session: later writes fail until the file is opened again.
    pub fn wait(self) -> Result<()> {
        match self.0 {
            None => Ok(()),
            Some((point, generation)) => point.sync_through(generation),
        }
    }
}
