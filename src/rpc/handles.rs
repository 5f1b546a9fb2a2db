//! Open sessions: handles, reference counts, and the order in which requests reach a session.
//!
//! A host may pipeline requests, so arrival order is the only order it can rely on. Every request that names a
//! handle gets a ticket when it arrives (in the single dispatch loop, so tickets follow arrival order). A ticket's
//! holder waits for its turn, queues for the session's read-write lock, and only then lets the next ticket take
//! its turn. Because the lock is fair, mutations are applied in arrival order, reads between two mutations run
//! concurrently, and a read sees every mutation that arrived before it. A ticket dropped without being used
//! (a cancelled or failed request) gives its turn up, so nothing waits forever.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;

use tokio::sync::{oneshot, OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};

use crate::session::SessionManager;

/// Arrival-order turns for one session. Each waiting ticket has its own wake-up, so ending a turn wakes only the
/// next ticket (a burst of thousands of pipelined appends would otherwise wake every waiter at every turn).
#[derive(Debug, Default)]
struct Turnstile {
    state: Mutex<TurnState>,
}

#[derive(Debug, Default)]
struct TurnState {
    next: u64,
    given_up: BTreeSet<u64>,
    waiting: HashMap<u64, oneshot::Sender<()>>,
}

impl Turnstile {
    fn new() -> Self {
        Turnstile::default()
    }

    async fn wait_for(&self, seq: u64) {
        let rx = {
            let mut t = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if t.next == seq {
                return;
            }
            let (tx, rx) = oneshot::channel();
            t.waiting.insert(seq, tx);
            rx
        };
        // The turnstile lives as long as the session, which the caller keeps alive.
        let _ = rx.await;
    }

    /// Ends turn `seq` (or gives it up in advance): the next turn that has not been given up starts.
    fn release(&self, seq: u64) {
        let mut t = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if t.next != seq {
            t.given_up.insert(seq);
            return;
        }
        t.next += 1;
        loop {
            let next = t.next;
            if !t.given_up.remove(&next) {
                break;
            }
            t.waiting.remove(&next);
            t.next += 1;
        }
        let next = t.next;
        if let Some(tx) = t.waiting.remove(&next) {
            let _ = tx.send(());
        }
    }
}

/// One open session behind a handle.
#[derive(Debug)]
pub struct OpenSession {
    /// The handle.
    pub handle: String,
    /// The engine's session.
    pub manager: Arc<RwLock<SessionManager>>,
    /// The last `session/changed` sequence number sent for this handle.
    pub seq: AtomicU64,
    /// How many opens this handle stands for.
    refs: AtomicUsize,
    tickets: AtomicU64,
    turns: Turnstile,
    /// Follow appends other processes make to the file.
    pub watched: std::sync::atomic::AtomicBool,
    /// A refresh is queued (file events coalesce into it).
    pub refresh_pending: std::sync::atomic::AtomicBool,
}

/// A request's place in a session's arrival order.
#[derive(Debug)]
pub struct Ticket {
    session: Arc<OpenSession>,
    seq: u64,
    done: bool,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.done {
            self.session.turns.release(self.seq);
        }
    }
}

impl Ticket {
    /// The session.
    pub fn session(&self) -> &Arc<OpenSession> {
        &self.session
    }

    /// Waits for this ticket's turn, queues for the lock, and lets the next ticket go.
    async fn enter<G>(mut self, acquire: impl Future<Output = G>) -> G {
        self.session.turns.wait_for(self.seq).await;
        let mut acquire = pin!(acquire);
        // One poll puts us in the lock's (fair) queue, or gives us the lock.
        let first = std::future::poll_fn(|cx| Poll::Ready(acquire.as_mut().poll(cx))).await;
        self.session.turns.release(self.seq);
        self.done = true;
        match first {
            Poll::Ready(guard) => guard,
            Poll::Pending => acquire.await,
        }
    }

    /// Shared access, in arrival order.
    pub async fn read(self) -> OwnedRwLockReadGuard<SessionManager> {
        let lock = self.session.manager.clone();
        self.enter(lock.read_owned()).await
    }

    /// Exclusive access, in arrival order.
    pub async fn write(self) -> OwnedRwLockWriteGuard<SessionManager> {
        let lock = self.session.manager.clone();
        self.enter(lock.write_owned()).await
    }
}

impl OpenSession {
    fn new(handle: String, manager: SessionManager) -> Arc<OpenSession> {
        Arc::new(OpenSession {
            handle,
            manager: Arc::new(RwLock::new(manager)),
            seq: AtomicU64::new(0),
            refs: AtomicUsize::new(1),
            tickets: AtomicU64::new(0),
            turns: Turnstile::new(),
            watched: Default::default(),
            refresh_pending: Default::default(),
        })
    }

    /// The next ticket (call in arrival order).
    pub fn ticket(self: &Arc<Self>) -> Ticket {
        Ticket { session: self.clone(), seq: self.tickets.fetch_add(1, Ordering::SeqCst), done: false }
    }

    /// The sequence number of the last `session/changed` sent for this handle (0 before the first).
    pub fn current_seq(&self) -> u64 {
        self.seq.load(Ordering::SeqCst)
    }

    /// The next `session/changed` sequence number.
    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::SeqCst) + 1
    }
}

/// Every open session, by handle and by file.
#[derive(Debug, Default)]
pub struct Registry {
    inner: Mutex<RegistryInner>,
    next_handle: AtomicU64,
}

#[derive(Debug, Default)]
struct RegistryInner {
    by_handle: HashMap<String, Arc<OpenSession>>,
    by_path: HashMap<String, String>,
}

impl Registry {
    /// The session behind `handle`.
    pub fn get(&self, handle: &str) -> Option<Arc<OpenSession>> {
        self.lock().by_handle.get(handle).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RegistryInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The open session for `path`, with one more reference, if any.
    pub fn reuse(&self, path: &str) -> Option<Arc<OpenSession>> {
        let inner = self.lock();
        let session = inner.by_path.get(path).and_then(|h| inner.by_handle.get(h)).cloned()?;
        session.refs.fetch_add(1, Ordering::SeqCst);
        Some(session)
    }

    /// Registers a newly opened session. If `path` was opened meanwhile by someone else, that session is reused
    /// (with one more reference) and `manager` is dropped, so one file never has two handles.
    pub fn insert(&self, path: Option<&str>, manager: SessionManager) -> Arc<OpenSession> {
        let mut inner = self.lock();
        if let Some(existing) = path.and_then(|p| inner.by_path.get(p)).and_then(|h| inner.by_handle.get(h)) {
            existing.refs.fetch_add(1, Ordering::SeqCst);
            return existing.clone();
        }
        let handle = format!("h{}", self.next_handle.fetch_add(1, Ordering::SeqCst) + 1);
        let session = OpenSession::new(handle.clone(), manager);
        inner.by_handle.insert(handle.clone(), session.clone());
        if let Some(p) = path {
            inner.by_path.insert(p.to_owned(), handle);
        }
        session
    }

    /// Every open session that follows its file.
    pub fn watched(&self) -> Vec<Arc<OpenSession>> {
        self.lock().by_handle.values().filter(|s| s.watched.load(Ordering::SeqCst)).cloned().collect()
    }

    /// The open session whose file is `path`, if any.
    pub fn by_path(&self, path: &str) -> Option<Arc<OpenSession>> {
        let inner = self.lock();
        inner.by_path.get(path).and_then(|h| inner.by_handle.get(h)).cloned()
    }

    /// The file `handle` has open, as registered.
    pub fn path_of(&self, handle: &str) -> Option<String> {
        self.lock().by_path.iter().find(|(_, h)| h.as_str() == handle).map(|(p, _)| p.clone())
    }

    /// The handle that has `path` open, if any.
    pub fn handle_for_path(&self, path: &str) -> Option<String> {
        self.lock().by_path.get(path).cloned()
    }

    /// Records that `handle` now holds `new_path` instead of `old_path`.
    pub fn rebind(&self, handle: &str, old_path: Option<&str>, new_path: Option<&str>) {
        let mut inner = self.lock();
        if let Some(old) = old_path {
            if inner.by_path.get(old).map(String::as_str) == Some(handle) {
                inner.by_path.remove(old);
            }
        }
        if let Some(new) = new_path {
            inner.by_path.insert(new.to_owned(), handle.to_owned());
        }
    }

    /// Drops one reference; the last one closes the handle. Returns whether the handle existed.
    pub fn close(&self, handle: &str) -> Option<Arc<OpenSession>> {
        let mut inner = self.lock();
        let session = inner.by_handle.get(handle).cloned()?;
        if session.refs.fetch_sub(1, Ordering::SeqCst) > 1 {
            return Some(session);
        }
        inner.by_handle.remove(handle);
        inner.by_path.retain(|_, h| h != handle);
        Some(session)
    }

    /// Every open session (for shutdown).
    pub fn drain(&self) -> Vec<Arc<OpenSession>> {
        let mut inner = self.lock();
        inner.by_path.clear();
        inner.by_handle.drain().map(|(_, s)| s).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::{Env, NewSessionOptions};

    fn session() -> Arc<OpenSession> {
        OpenSession::new(
            "h".into(),
            SessionManager::in_memory(None, NewSessionOptions::default(), None, Env::system()).unwrap(),
        )
    }

    #[tokio::test]
    async fn writes_apply_in_ticket_order_even_when_their_tasks_start_in_reverse() {
        let s = session();
        let tickets: Vec<Ticket> = (0..20).map(|_| s.ticket()).collect();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (i, t) in tickets.into_iter().enumerate().rev() {
            let order = order.clone();
            tasks.push(tokio::spawn(async move {
                let _guard = t.write().await;
                order.lock().unwrap().push(i);
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), (0..20).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_dropped_ticket_gives_up_its_turn() {
        let s = session();
        let a = s.ticket();
        let b = s.ticket();
        let c = s.ticket();
        drop(b);
        drop(a.write().await);
        // c would wait forever if b's turn were not given up.
        tokio::time::timeout(std::time::Duration::from_secs(5), c.read()).await.expect("c gets its turn");
    }

    #[tokio::test]
    async fn reads_between_writes_share_the_lock() {
        let s = session();
        let r1 = s.ticket();
        let r2 = s.ticket();
        let g1 = r1.read().await;
        let g2 = tokio::time::timeout(std::time::Duration::from_secs(5), r2.read()).await.expect("concurrent read");
        drop((g1, g2));
    }

    #[test]
    fn the_last_close_removes_the_handle_and_its_path() {
        let reg = Registry::default();
        let m = || SessionManager::in_memory(None, NewSessionOptions::default(), None, Env::system()).unwrap();
        let a = reg.insert(Some("/f"), m());
        let b = reg.insert(Some("/f"), m());
        assert_eq!(a.handle, b.handle, "one file, one handle");
        assert!(reg.close(&a.handle).is_some());
        assert!(reg.get(&a.handle).is_some(), "still referenced once");
        assert!(reg.close(&a.handle).is_some());
        assert!(reg.get(&a.handle).is_none());
        assert!(reg.handle_for_path("/f").is_none());
    }
}
