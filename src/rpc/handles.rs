//! Open sessions, their handles, and the order in which requests reach them.
//!
//! A handle names a [`Slot`]: a queue of jobs and, once opened, a session. A request that names a handle is queued
//! on its slot the moment it arrives (in the one event loop, so a queue holds arrival order), and a slot runs its
//! queue on one worker at a time: a write alone, a run of consecutive reads side by side. So mutations apply in
//! arrival order and a read sees every mutation that arrived before it. An opening request is queued on arrival
//! too — on a new slot (reserving its name), or on the slot already named by the handle or the file it opens — so
//! a request naming the handle, sent before the open was answered, waits for the open instead of failing, and
//! "close, then open again under the same name" works pipelined. A slot whose session is closed (or never opened)
//! is retired once its queue is empty.
//!
//! A slot's worker is one blocking task, started when a job arrives at an idle slot and ended when the queue is
//! empty; a burst of pipelined appends is drained by one task. Reads beside the one the worker runs go to one
//! fixed pool for the whole process, so pipelined reads never start threads of their own. Under group commit ([`Job::Write`] returning an
//! [`Ack`]) the worker runs consecutive writes, then one `fsync`, then sends their answers.

use std::collections::{HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use super::proto::Detail;
use crate::session::SessionManager;

/// What runs on a slot's worker.
pub enum Job {
    /// Reads the session; runs alongside the reads next to it in the queue.
    Read(ReadJob),
    /// Changes the session or the slot (opening and closing included); runs alone.
    Write(WriteJob),
}

/// A read: gets the session (`None`: the handle is not open).
pub type ReadJob = Box<dyn FnOnce(Option<&SessionManager>, &Arc<Slot>) + Send>;

/// A write: gets the session (an open puts one in, a close takes it out), and may hand back an [`Ack`] to send
/// once its write is on disk (group commit).
pub type WriteJob = Box<dyn FnOnce(&mut Option<SessionManager>, &Arc<Slot>) -> Option<Ack> + Send>;

/// An answer held back until the writes before it are synced; it gets the sync's outcome.
pub type Ack = Box<dyn FnOnce(&crate::session::Result<()>) + Send>;

/// Reads of one session that run side by side at most.
const READS_AT_ONCE: usize = 8;

/// Threads of the read pool, shared by every session: a read beside others on its session runs there (the
/// slot's worker runs one more itself).
const READ_POOL_THREADS: usize = READS_AT_ONCE - 1;

/// The pool reads run on beside their slot's worker, started on first use.
fn read_pool() -> &'static rayon::ThreadPool {
    static POOL: std::sync::OnceLock<rayon::ThreadPool> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(READ_POOL_THREADS)
            .thread_name(|n| format!("pi-sessiond-read-{n}"))
            .build()
            .expect("the read pool's threads start")
    })
}

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
    /// What the handle's notifications carry (set by its open and by rebinds that ask).
    detail: Mutex<Detail>,
    /// The last notifications sent, for `session/changesSince`.
    recent: Mutex<RecentChanges>,
    registry: Weak<Mutex<Inner>>,
}

/// The notifications a handle sent last, so a host that missed some can have them again: at most
/// [`RecentChanges::KEPT`] of them and [`RecentChanges::KEPT_BYTES`] in all, newest kept, and within what the
/// process keeps for every handle together ([`RecentChanges::KEPT_BYTES_ALL_HANDLES`], counted in a
/// [`RecentBudget`] the handles share; a handle's bytes leave it when the handle goes). A notification too large to
/// keep (a rebind carrying a big snapshot) ends the run: changes before it can no longer be given, and a host
/// that missed them gets a fresh snapshot instead.
#[derive(Debug, Default)]
pub struct RecentChanges {
    /// `(seq, params as sent)`, consecutive seqs, oldest first.
    kept: VecDeque<(u64, Arc<[u8]>)>,
    bytes: usize,
    budget: RecentBudget,
}

/// The bytes of notifications kept by every handle of a process, together.
#[derive(Clone, Debug, Default)]
pub struct RecentBudget(Arc<AtomicUsize>);

impl RecentBudget {
    /// Bytes kept now, across the handles sharing this budget.
    pub fn used(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

impl RecentChanges {
    /// Notifications kept at most.
    pub const KEPT: usize = 1024;
    /// Bytes of notifications kept at most.
    pub const KEPT_BYTES: usize = 4 << 20;
    /// Bytes of notifications kept at most by all the handles sharing a budget: 15 busy handles at 4 MiB each
    /// held 60 MiB for as long as they stayed open.
    pub const KEPT_BYTES_ALL_HANDLES: usize = 16 << 20;

    /// Changes counted in `budget` (shared with the other handles of the process).
    pub fn within(budget: &RecentBudget) -> RecentChanges {
        RecentChanges { kept: VecDeque::new(), bytes: 0, budget: budget.clone() }
    }

    /// Records notification `seq` (its params), or that it was not kept (`None`).
    pub fn record(&mut self, seq: u64, params: Option<Vec<u8>>) {
        let params = params.filter(|p| p.len() <= Self::KEPT_BYTES);
        let Some(params) = params else { return self.clear() };
        if self.kept.back().is_some_and(|(last, _)| last + 1 != seq) {
            self.clear();
        }
        self.bytes += params.len();
        self.budget.0.fetch_add(params.len(), Ordering::SeqCst);
        self.kept.push_back((seq, params.into()));
        // Over the process's budget, a handle gives up its own oldest (others keep theirs until they record), even
        // the one just sent: a host that missed it gets a fresh snapshot.
        while !self.kept.is_empty()
            && (self.kept.len() > Self::KEPT
                || self.bytes > Self::KEPT_BYTES
                || self.budget.used() > Self::KEPT_BYTES_ALL_HANDLES)
        {
            self.drop_oldest();
        }
    }

    fn drop_oldest(&mut self) {
        let (_, dropped) = self.kept.pop_front().expect("not empty");
        self.bytes -= dropped.len();
        self.budget.0.fetch_sub(dropped.len(), Ordering::SeqCst);
    }

    /// Forgets every notification (the handle closed, or a run ended).
    pub fn clear(&mut self) {
        while !self.kept.is_empty() {
            self.drop_oldest();
        }
    }

    /// Every notification after `seq` up to `last`, if all are kept.
    pub fn since(&self, seq: u64, last: u64) -> Option<Vec<Arc<[u8]>>> {
        if seq >= last {
            return Some(Vec::new());
        }
        let first = self.kept.front()?.0;
        if first > seq + 1 || self.kept.back()?.0 != last {
            return None;
        }
        Some(self.kept.iter().filter(|(s, _)| *s > seq).map(|(_, p)| p.clone()).collect())
    }
}

impl Drop for RecentChanges {
    fn drop(&mut self) {
        self.clear();
    }
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
    fn new(handle: String, path: Option<&str>, registry: Weak<Mutex<Inner>>, budget: &RecentBudget) -> Arc<Slot> {
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
            detail: Mutex::new(Detail::None),
            recent: Mutex::new(RecentChanges::within(budget)),
            registry,
        })
    }

    /// A slot that is in no registry, for answering a request whose handle names nothing.
    pub fn detached(handle: &str) -> Arc<Slot> {
        Slot::new(handle.to_owned(), None, Weak::new(), &RecentBudget::default())
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

    /// The handle's detail.
    pub fn detail(&self) -> Detail {
        *lock(&self.detail)
    }

    /// Sets the handle's detail.
    pub fn set_detail(&self, detail: Detail) {
        *lock(&self.detail) = detail;
    }

    /// The notifications the handle sent last.
    pub fn recent(&self) -> MutexGuard<'_, RecentChanges> {
        lock(&self.recent)
    }

    /// One more open stands for this handle.
    pub fn add_ref(&self) {
        self.refs.fetch_add(1, Ordering::SeqCst);
    }

    /// The session was (re)opened: one open stands for it.
    pub fn opened(&self) {
        self.refs.store(1, Ordering::SeqCst);
        self.deleted_reported.store(false, Ordering::SeqCst);
    }

    /// One open fewer; true when it was the last.
    pub fn drop_ref(&self) -> bool {
        self.refs.fetch_sub(1, Ordering::SeqCst) == 1
    }

    /// Takes the session out (closing it once dropped); later jobs see the handle as not open, and its kept
    /// notifications go with it.
    pub fn take_manager(&self) -> Option<SessionManager> {
        lock(&self.recent).clear();
        lock(&self.manager).take()
    }

    /// Forgets the slot if nothing is queued on it and it holds no session (checked under the registry's lock,
    /// which every push to a slot holds too, so no job lands on a retired slot).
    fn retire_if_empty(self: &Arc<Self>) {
        let Some(registry) = self.registry.upgrade() else { return };
        let mut inner = lock(&registry);
        let idle = {
            let q = lock(&self.queue);
            q.jobs.is_empty() && !q.running
        };
        if idle && self.manager.try_lock().is_ok_and(|m| m.is_none()) {
            inner.forget(self);
        }
    }

    /// Closes the session unless a job is using it (the process is exiting).
    pub fn close_if_idle(&self) {
        if let Ok(mut m) = self.manager.try_lock() {
            drop(m.take());
        }
    }

    /// Queues a job (call in arrival order); starts the slot's worker on `pool` if it is idle. A job pushed
    /// without the registry's lock (by a job, or for a watch) may land on a slot retired meanwhile: it then finds no
    /// session, which is what the handle would say.
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
                        drop(q);
                        self.retire_if_empty();
                        return;
                    }
                    Some(Job::Write(_)) => match q.jobs.pop_front() {
                        Some(Job::Write(w)) => Next::One(w),
                        _ => unreachable!("front was a write"),
                    },
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
                    // The others run on the process's read pool, this one here: threads stay as many as the pool
                    // has, however many reads arrive (a thread per read made 56 threads of 64 pipelined reads).
                    read_pool().in_place_scope(|scope| {
                        for read in reads {
                            scope.spawn(move |_| {
                                guarded(&slot.handle, || read(m, slot));
                            });
                        }
                        guarded(&slot.handle, || last(m, slot));
                    });
                }
                Next::One(write) => {
                    let mut guard = lock(&self.manager);
                    if let Some(Some(ack)) = guarded(&self.handle, || write(&mut guard, &self)) {
                        acks.push(ack);
                    }
                }
            }
        }
    }
}

enum Next {
    One(WriteJob),
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

/// Every open session, by handle and by file.
#[derive(Default)]
pub struct Registry {
    inner: Arc<Mutex<Inner>>,
    next_handle: AtomicU64,
    recent: RecentBudget,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("slots", &lock(&self.inner).by_handle.len()).finish()
    }
}

#[derive(Default)]
struct Inner {
    by_handle: HashMap<String, Arc<Slot>>,
    by_path: HashMap<String, Arc<Slot>>,
}

impl Inner {
    fn forget(&mut self, slot: &Arc<Slot>) {
        if self.by_handle.get(&slot.handle).is_some_and(|s| Arc::ptr_eq(s, slot)) {
            self.by_handle.remove(&slot.handle);
        }
        self.by_path.retain(|_, s| !Arc::ptr_eq(s, slot));
    }
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

    /// Queues `job` on the slot named `handle`; gives the job back if there is none.
    pub fn queue(&self, handle: &str, job: Job, pool: &tokio::runtime::Handle) -> Result<(), Job> {
        let inner = lock(&self.inner);
        match inner.by_handle.get(handle) {
            Some(slot) => {
                slot.push(job, pool);
                Ok(())
            }
            None => Err(job),
        }
    }

    /// Queues `job` on `slot` if it is still registered under its handle (under the registry's lock, so it cannot
    /// be retired meanwhile); gives the job back if it was retired.
    pub fn push_if_registered(&self, slot: &Arc<Slot>, job: Job, pool: &tokio::runtime::Handle) -> Result<(), Job> {
        let inner = lock(&self.inner);
        if inner.by_handle.get(&slot.handle).is_some_and(|s| Arc::ptr_eq(s, slot)) {
            slot.push(job, pool);
            Ok(())
        } else {
            Err(job)
        }
    }

    /// Queues an opening job: on the slot named `name` if there is one, else (without a name) on the slot that
    /// has `path`, else on a new slot named `name` or the next free `hN`, registered under `path`.
    pub fn queue_open(&self, name: Option<&str>, path: Option<&str>, job: Job, pool: &tokio::runtime::Handle) {
        let mut inner = lock(&self.inner);
        let existing = match name {
            Some(n) => inner.by_handle.get(n),
            None => path.and_then(|p| inner.by_path.get(p)),
        };
        if let Some(slot) = existing {
            return slot.push(job, pool);
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
        let slot = Slot::new(handle.clone(), path, Arc::downgrade(&self.inner), &self.recent);
        inner.by_handle.insert(handle, slot.clone());
        if let Some(p) = path {
            inner.by_path.entry(p.to_owned()).or_insert_with(|| slot.clone());
        }
        slot.push(job, pool);
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

    /// What the handles' kept notifications hold now, together.
    pub fn recent_bytes(&self) -> usize {
        self.recent.used()
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

    fn open_job() -> Job {
        Job::Write(Box::new(|m, _| {
            *m = Some(manager());
            None
        }))
    }

    #[test]
    fn recent_changes_give_every_change_after_a_seq_or_nothing_when_one_is_gone() {
        let mut r = RecentChanges::default();
        for seq in 1..=5 {
            r.record(seq, Some(format!("{{\"seq\":{seq}}}").into_bytes()));
        }
        let texts = |v: Vec<Arc<[u8]>>| v.iter().map(|p| String::from_utf8(p.to_vec()).unwrap()).collect::<Vec<_>>();
        assert_eq!(texts(r.since(3, 5).unwrap()), ["{\"seq\":4}", "{\"seq\":5}"]);
        assert_eq!(r.since(5, 5).unwrap().len(), 0);
        assert_eq!(r.since(0, 5).unwrap().len(), 5);
        // One too large to keep: nothing before it (nor it) can be given any more.
        r.record(6, Some(vec![b' '; RecentChanges::KEPT_BYTES + 1]));
        r.record(7, Some(b"{}".to_vec()));
        assert!(r.since(5, 7).is_none());
        assert_eq!(r.since(6, 7).unwrap().len(), 1);
        // The count bound drops the oldest.
        for seq in 8..8 + RecentChanges::KEPT as u64 {
            r.record(seq, Some(b"{}".to_vec()));
        }
        assert!(r.since(7, 7 + RecentChanges::KEPT as u64).is_some());
        assert!(r.since(6, 7 + RecentChanges::KEPT as u64).is_none());
    }

    #[test]
    fn the_handles_together_keep_at_most_their_shared_budget_and_give_it_back_when_they_go() {
        let budget = RecentBudget::default();
        // 12 handles of three 1 MiB notifications would keep 36 MiB on their own.
        let mut handles: Vec<RecentChanges> = (0..12).map(|_| RecentChanges::within(&budget)).collect();
        for h in handles.iter_mut() {
            for seq in 1..=3 {
                h.record(seq, Some(vec![b' '; 1 << 20]));
                assert!(budget.used() <= RecentChanges::KEPT_BYTES_ALL_HANDLES, "{}", budget.used());
            }
        }
        assert_eq!(handles[0].since(0, 3).map(|v| v.len()), Some(3), "the first handles kept theirs");
        assert!(handles[11].since(2, 3).is_none(), "the last one gave up what did not fit: a snapshot instead");
        assert!(budget.used() <= RecentChanges::KEPT_BYTES_ALL_HANDLES, "{}", budget.used());
        let before = budget.used();
        let mut last = handles.pop().unwrap();
        let its = last.bytes;
        last.clear();
        assert_eq!(budget.used(), before - its, "a cleared handle gives its bytes back");
        drop(handles);
        assert_eq!(budget.used(), 0, "closed handles keep nothing");
    }

    #[test]
    fn jobs_queued_before_the_open_finishes_run_after_it_in_arrival_order() {
        let rt = runtime();
        let reg = Registry::default();
        let (tx, rx) = std::sync::mpsc::channel();
        let (release_open, open_may_finish) = std::sync::mpsc::channel::<()>();
        let t = tx.clone();
        let open = Job::Write(Box::new(move |m, _| {
            open_may_finish.recv().unwrap();
            t.send("open".to_owned()).unwrap();
            *m = Some(manager());
            None
        }));
        reg.queue_open(None, None, open, rt.handle());
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
            assert!(reg.queue("h1", job, rt.handle()).is_ok(), "the name exists from the open's arrival");
        }
        release_open.send(()).unwrap();
        let got: Vec<String> = (0..21).map(|_| rx.recv().unwrap()).collect();
        assert_eq!(got[0], "open");
        let order: Vec<usize> = got[1..].iter().map(|s| s.split(' ').nth(1).unwrap().parse().unwrap()).collect();
        // Reads next to each other may finish in any order between them; nothing crosses a write.
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(sorted, (0..20).collect::<Vec<_>>());
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
        reg.queue_open(None, None, open_job(), rt.handle());
        let (tx, rx) = std::sync::mpsc::channel();
        for n in 0..3 {
            let t = tx.clone();
            let write = Job::Write(Box::new(move |_, _| {
                let t2 = t.clone();
                t.send(format!("wrote {n}")).unwrap();
                Some(Box::new(move |synced: &crate::session::Result<()>| {
                    t2.send(format!("acked {n} {}", synced.is_ok())).unwrap()
                }) as Ack)
            }));
            reg.queue("h1", write, rt.handle()).ok().unwrap();
        }
        let t = tx.clone();
        reg.queue("h1", Job::Read(Box::new(move |_, _| t.send("read".into()).unwrap())), rt.handle()).ok().unwrap();
        let got: Vec<String> = (0..7).map(|_| rx.recv().unwrap()).collect();
        let acked_at = got.iter().position(|s| s.starts_with("acked")).unwrap();
        assert_eq!(acked_at, 3, "every write ran before the one sync: {got:?}");
        assert_eq!(got[6], "read", "{got:?}");
    }

    #[test]
    fn a_panicking_job_fails_alone_and_the_queue_goes_on() {
        let rt = runtime();
        let reg = Registry::default();
        reg.queue_open(None, None, open_job(), rt.handle());
        reg.queue("h1", Job::Write(Box::new(|_, _| panic!("handler bug"))), rt.handle()).ok().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        reg.queue("h1", Job::Read(Box::new(move |m, _| tx.send(m.is_some()).unwrap())), rt.handle()).ok().unwrap();
        assert_eq!(rx.recv_timeout(std::time::Duration::from_secs(10)), Ok(true), "the next job ran");
    }

    #[test]
    fn a_closed_slot_serves_the_jobs_queued_behind_it_then_is_retired_with_its_path() {
        let rt = runtime();
        let reg = Registry::default();
        reg.queue_open(Some("mine"), Some("/f"), open_job(), rt.handle());
        let close = Job::Write(Box::new(|m, _| {
            drop(m.take());
            None
        }));
        reg.queue("mine", close, rt.handle()).ok().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        reg.queue("mine", Job::Read(Box::new(move |m, _| tx.send(m.is_some()).unwrap())), rt.handle()).ok().unwrap();
        assert!(!rx.recv().unwrap(), "queued behind the close: the handle is not open");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while reg.get("mine").is_some() && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert!(reg.get("mine").is_none() && reg.by_path("/f").is_none(), "retired once idle");
        // A generated name skips one the host took.
        reg.queue_open(Some("h1"), None, open_job(), rt.handle());
        reg.queue_open(None, None, open_job(), rt.handle());
        assert!(reg.get("h2").is_some());
    }
}
