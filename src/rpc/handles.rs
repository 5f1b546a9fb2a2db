//! Open sessions, their handles, and the order in which requests reach them.
//!
//! Every open session is a [`Slot`] with a queue of jobs. A request that names a handle is queued on its slot the
//! moment it arrives (in the one event loop, so a queue holds arrival order), and a slot runs its queue on one
//! worker at a time: a mutation alone, a run of consecutive reads side by side. So mutations apply in arrival
//! order and a read sees every mutation that arrived before it. An opening request reserves its slot — and its
//! handle's name — on arrival too, as the first job of the slot's queue: a request naming the new handle, sent
//! before the open was answered, waits for the open instead of failing.
//!
//! A slot's worker is one blocking task, started when a job arrives at an idle slot and ended when the queue is
//! empty; a burst of pipelined appends is drained by one task. Under group commit ([`Job::Write`] returning an
//! [`Ack`]) the worker runs consecutive writes, then one `fsync`, then sends their answers.

use std::collections::{HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::session::SessionManager;

/// What runs on a slot's worker.
pub enum Job {
    /// Reads the session; runs alongside the reads next to it in the queue.
    Read(ReadJob),
    /// Changes the session (or the slot); runs alone.
    Write(WriteJob),
    /// Opens the session.
    Open(OpenJob),
}

/// A read: gets the session (`None`: the handle is not open).
pub type ReadJob = Box<dyn FnOnce(Option<&SessionManager>, &Arc<Slot>) + Send>;

/// A write: gets the session (it may close it by taking it out), and may hand back an [`Ack`] to send once its
/// write is on disk (group commit).
pub type WriteJob = Box<dyn FnOnce(&mut Option<SessionManager>, &Arc<Slot>) -> Option<Ack> + Send>;

/// An open: what it returns becomes the slot's session; `None`: the open failed (and the job released the slot).
pub type OpenJob = Box<dyn FnOnce(&Arc<Slot>) -> Option<SessionManager> + Send>;

/// An answer held back until the writes before it are synced; it gets the sync's outcome.
pub type Ack = Box<dyn FnOnce(&crate::session::Result<()>) + Send>;

/// Reads that run side by side at most.
const READS_AT_ONCE: usize = 8;

/// One open (or opening) session behind a handle.
pub struct Slot {
    /// The handle.
    pub handle: String,
    manager: Mutex<Option<SessionManager>>,
    queue: Mutex<Queue>,
    path: Mutex<Option<String>>,
    seq: AtomicU64,
    /// How many opens this handle stands for.
    refs: AtomicUsize,
    /// Follow appends other processes make to the file.
    pub watched: AtomicBool,
    /// A refresh job is queued (file events coalesce into it).
    pub refresh_queued: AtomicBool,
    /// The file's deletion was already reported.
    pub deleted_reported: AtomicBool,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    running: bool,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot").field("handle", &self.handle).field("path", &self.path()).finish_non_exhaustive()
    }
}

impl Slot {
    fn new(handle: String, path: Option<&str>) -> Arc<Slot> {
        Arc::new(Slot {
            handle,
            manager: Mutex::new(None),
            queue: Mutex::new(Queue::default()),
            path: Mutex::new(path.map(str::to_owned)),
            seq: AtomicU64::new(0),
            refs: AtomicUsize::new(1),
            watched: AtomicBool::new(false),
            refresh_queued: AtomicBool::new(false),
            deleted_reported: AtomicBool::new(false),
        })
    }

    /// The file the slot is registered under, if any.
    pub fn path(&self) -> Option<String> {
        lock(&self.path).clone()
    }

    /// The sequence number of the last `session/changed` sent for this handle (0 before the first).
    pub fn current_seq(&self) -> u64 {
        self.seq.load(Ordering::SeqCst)
    }

    /// The next `session/changed` sequence number.
    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// One more open stands for this handle.
    pub fn add_ref(&self) {
        self.refs.fetch_add(1, Ordering::SeqCst);
    }

    /// One open fewer; true when it was the last.
    pub fn drop_ref(&self) -> bool {
        self.refs.fetch_sub(1, Ordering::SeqCst) == 1
    }

    /// Takes the session out (closing it once dropped); later jobs see the handle as not open.
    pub fn take_manager(&self) -> Option<SessionManager> {
        lock(&self.manager).take()
    }

    /// Closes the session unless a job is using it (the process is exiting).
    pub fn close_if_idle(&self) {
        if let Ok(mut m) = self.manager.try_lock() {
            drop(m.take());
        }
    }

    /// Queues a job (call in arrival order); starts the slot's worker on `pool` if it is idle.
    pub fn push(self: &Arc<Self>, job: Job, pool: &tokio::runtime::Handle) {
        let mut q = lock(&self.queue);
        q.jobs.push_back(job);
        if !q.running {
            q.running = true;
            drop(q);
            let slot = self.clone();
            pool.spawn_blocking(move || slot.work());
        }
    }

    /// The worker: runs the queue until it is empty.
    fn work(self: Arc<Self>) {
        let mut acks: Vec<Ack> = Vec::new();
        loop {
            let next = {
                let mut q = lock(&self.queue);
                match q.jobs.front() {
                    None if acks.is_empty() => {
                        q.running = false;
                        return;
                    }
                    Some(Job::Write(_)) => Next::One(q.jobs.pop_front().expect("front")),
                    // Anything but a write goes after the answers held back for an fsync.
                    None => Next::Sync,
                    Some(_) if !acks.is_empty() => Next::Sync,
                    Some(Job::Read(_)) => {
                        let mut reads = Vec::new();
                        while reads.len() < READS_AT_ONCE {
                            match q.jobs.front() {
                                Some(Job::Read(_)) => match q.jobs.pop_front() {
                                    Some(Job::Read(r)) => reads.push(r),
                                    _ => unreachable!("front was a read"),
                                },
                                _ => break,
                            }
                        }
                        Next::Reads(reads)
                    }
                    Some(Job::Open(_)) => Next::One(q.jobs.pop_front().expect("front")),
                }
            };
            match next {
                Next::Sync => {
                    let synced = match lock(&self.manager).as_mut() {
                        Some(m) => m.sync(),
                        None => Ok(()),
                    };
                    for ack in acks.drain(..) {
                        guarded(&self.handle, || ack(&synced));
                    }
                }
                Next::Reads(mut reads) => {
                    let guard = lock(&self.manager);
                    let m = guard.as_ref();
                    let last = reads.pop().expect("at least one read");
                    let slot = &self;
                    std::thread::scope(|scope| {
                        for read in reads {
                            scope.spawn(move || guarded(&slot.handle, || read(m, slot)));
                        }
                        guarded(&slot.handle, || last(m, slot));
                    });
                }
                Next::One(Job::Write(write)) => {
                    let mut guard = lock(&self.manager);
                    if let Some(Some(ack)) = guarded(&self.handle, || write(&mut guard, &self)) {
                        acks.push(ack);
                    }
                }
                Next::One(Job::Open(open)) => {
                    // Opening can take long (a large file); nothing else touches the session meanwhile.
                    if let Some(Some(m)) = guarded(&self.handle, || open(&self)) {
                        *lock(&self.manager) = Some(m);
                    }
                }
                Next::One(Job::Read(_)) => unreachable!("reads are taken as a run"),
            }
        }
    }
}

enum Next {
    One(Job),
    Reads(Vec<ReadJob>),
    Sync,
}

/// Runs a job so that a panic in it fails only that request (its reply answers as it unwinds) and the slot's
/// queue goes on.
fn guarded<R>(handle: &str, f: impl FnOnce() -> R) -> Option<R> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => Some(r),
        Err(_) => {
            tracing::error!("{handle}: a request panicked; the session's queue goes on");
            None
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Why a handle could not be reserved.
#[derive(Debug, PartialEq, Eq)]
pub enum Taken {
    /// A session is open (or opening) under this handle.
    Handle,
    /// The file is open (or opening) under this other handle.
    Path(String),
}

/// Every open session, by handle and by file.
#[derive(Default)]
pub struct Registry {
    inner: Mutex<Inner>,
    next_handle: AtomicU64,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("open", &lock(&self.inner).by_handle.len()).finish()
    }
}

#[derive(Default)]
struct Inner {
    by_handle: HashMap<String, Arc<Slot>>,
    by_path: HashMap<String, Arc<Slot>>,
}

impl Registry {
    /// The slot behind `handle`.
    pub fn get(&self, handle: &str) -> Option<Arc<Slot>> {
        lock(&self.inner).by_handle.get(handle).cloned()
    }

    /// The slot that has `path` open (or is opening it).
    pub fn by_path(&self, path: &str) -> Option<Arc<Slot>> {
        lock(&self.inner).by_path.get(path).cloned()
    }

    /// A new slot, under `name` (the host's choice) or the next free `hN`, registered under `path` if given.
    pub fn reserve(&self, name: Option<&str>, path: Option<&str>) -> Result<Arc<Slot>, Taken> {
        let mut inner = lock(&self.inner);
        if let Some(n) = name {
            if inner.by_handle.contains_key(n) {
                return Err(Taken::Handle);
            }
        }
        if let Some(existing) = path.and_then(|p| inner.by_path.get(p)) {
            return Err(Taken::Path(existing.handle.clone()));
        }
        let handle = match name {
            Some(n) => n.to_owned(),
            None => loop {
                // A host may have chosen an `hN` itself.
                let candidate = format!("h{}", self.next_handle.fetch_add(1, Ordering::SeqCst) + 1);
                if !inner.by_handle.contains_key(&candidate) {
                    break candidate;
                }
            },
        };
        let slot = Slot::new(handle.clone(), path);
        inner.by_handle.insert(handle, slot.clone());
        if let Some(p) = path {
            inner.by_path.insert(p.to_owned(), slot.clone());
        }
        Ok(slot)
    }

    /// Forgets the slot (its open failed, or its last reference was closed).
    pub fn release(&self, slot: &Arc<Slot>) {
        let mut inner = lock(&self.inner);
        if inner.by_handle.get(&slot.handle).is_some_and(|s| Arc::ptr_eq(s, slot)) {
            inner.by_handle.remove(&slot.handle);
        }
        inner.by_path.retain(|_, s| !Arc::ptr_eq(s, slot));
    }

    /// Records that the slot now holds `path` (or no file). Returns false, changing nothing, if another slot
    /// holds that path.
    pub fn set_path(&self, slot: &Arc<Slot>, path: Option<&str>) -> bool {
        let mut inner = lock(&self.inner);
        if let Some(p) = path {
            if inner.by_path.get(p).is_some_and(|s| !Arc::ptr_eq(s, slot)) {
                return false;
            }
        }
        inner.by_path.retain(|_, s| !Arc::ptr_eq(s, slot));
        if let Some(p) = path {
            inner.by_path.insert(p.to_owned(), slot.clone());
        }
        *lock(&slot.path) = path.map(str::to_owned);
        true
    }

    /// Every slot that follows its file.
    pub fn watched(&self) -> Vec<Arc<Slot>> {
        lock(&self.inner).by_handle.values().filter(|s| s.watched.load(Ordering::SeqCst)).cloned().collect()
    }

    /// Every slot, forgotten (for shutdown).
    pub fn drain(&self) -> Vec<Arc<Slot>> {
        let mut inner = lock(&self.inner);
        inner.by_path.clear();
        inner.by_handle.drain().map(|(_, s)| s).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::{Env, NewSessionOptions};

    fn manager() -> SessionManager {
        SessionManager::in_memory(None, NewSessionOptions::default(), None, Env::system()).unwrap()
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().unwrap()
    }

    #[test]
    fn jobs_queued_before_the_open_finishes_run_after_it_in_arrival_order() {
        let rt = runtime();
        let reg = Registry::default();
        let slot = reg.reserve(None, None).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let (release_open, open_may_finish) = std::sync::mpsc::channel::<()>();
        let t = tx.clone();
        slot.push(
            Job::Open(Box::new(move |_| {
                open_may_finish.recv().unwrap();
                t.send("open".to_owned()).unwrap();
                Some(manager())
            })),
            rt.handle(),
        );
        for n in 0..20 {
            let t = tx.clone();
            let job: Job = if n % 3 == 0 {
                Job::Read(Box::new(move |m, _| t.send(format!("read {n} {}", m.is_some())).unwrap()))
            } else {
                Job::Write(Box::new(move |m, _| {
                    t.send(format!("write {n} {}", m.is_some())).unwrap();
                    None
                }))
            };
            slot.push(job, rt.handle());
        }
        release_open.send(()).unwrap();
        let got: Vec<String> = (0..21).map(|_| rx.recv().unwrap()).collect();
        assert_eq!(got[0], "open");
        let order: Vec<usize> = got[1..].iter().map(|s| s.split(' ').nth(1).unwrap().parse().unwrap()).collect();
        // Reads next to each other may finish in any order between them; nothing crosses a write.
        let mut sorted_runs = order.clone();
        sorted_runs.sort();
        assert_eq!(sorted_runs, (0..20).collect::<Vec<_>>());
        for (i, n) in order.iter().enumerate() {
            if n % 3 != 0 {
                assert_eq!(*n, i, "a write runs exactly in its place: {order:?}");
            }
        }
        assert!(got[1..].iter().all(|s| s.ends_with("true")), "every job saw the opened session");
    }

    #[test]
    fn held_back_acks_are_sent_after_one_sync_before_the_next_read() {
        let rt = runtime();
        let reg = Registry::default();
        let slot = reg.reserve(None, None).unwrap();
        slot.push(Job::Open(Box::new(|_| Some(manager()))), rt.handle());
        let (tx, rx) = std::sync::mpsc::channel();
        for n in 0..3 {
            let t = tx.clone();
            slot.push(
                Job::Write(Box::new(move |_, _| {
                    let t2 = t.clone();
                    t.send(format!("wrote {n}")).unwrap();
                    Some(Box::new(move |synced: &crate::session::Result<()>| {
                        t2.send(format!("acked {n} {}", synced.is_ok())).unwrap()
                    }) as Ack)
                })),
                rt.handle(),
            );
        }
        let t = tx.clone();
        slot.push(Job::Read(Box::new(move |_, _| t.send("read".into()).unwrap())), rt.handle());
        let got: Vec<String> = (0..7).map(|_| rx.recv().unwrap()).collect();
        let acked_at = got.iter().position(|s| s.starts_with("acked")).unwrap();
        assert!(got[..acked_at].iter().all(|s| s.starts_with("wrote")), "{got:?}");
        assert_eq!(got[6], "read", "{got:?}");
    }

    #[test]
    fn a_panicking_job_fails_alone_and_the_queue_goes_on() {
        let rt = runtime();
        let reg = Registry::default();
        let slot = reg.reserve(None, None).unwrap();
        slot.push(Job::Write(Box::new(|_, _| panic!("handler bug"))), rt.handle());
        let (tx, rx) = std::sync::mpsc::channel();
        slot.push(Job::Read(Box::new(move |_, _| tx.send(()).unwrap())), rt.handle());
        rx.recv_timeout(std::time::Duration::from_secs(10)).expect("the next job ran");
    }

    #[test]
    fn a_reserved_name_or_path_cannot_be_reserved_twice_until_released() {
        let reg = Registry::default();
        let a = reg.reserve(Some("mine"), Some("/f")).unwrap();
        assert_eq!(reg.reserve(Some("mine"), None).unwrap_err(), Taken::Handle);
        assert_eq!(reg.reserve(None, Some("/f")).unwrap_err(), Taken::Path("mine".into()));
        reg.release(&a);
        assert!(reg.get("mine").is_none() && reg.by_path("/f").is_none());
        assert!(reg.reserve(Some("mine"), Some("/f")).is_ok());
        // A generated name skips one the host took.
        let reg = Registry::default();
        reg.reserve(Some("h1"), None).unwrap();
        assert_eq!(reg.reserve(None, None).unwrap().handle, "h2");
    }
}
