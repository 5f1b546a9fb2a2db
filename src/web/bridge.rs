//! The web view's way into the sessions: the sidecar itself, run in-process over a pair of pipes. The page's
//! tree, context and live changes are therefore exactly what `pi-sessiond` serves any host — the same reads,
//! the same watches — and the web module never reads a session file itself. Its ids are its own counter, which
//! jsonrpsee's `Id` holds, so its requests are jsonrpsee's `Request` and the answers are matched by their `Id`.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, Weak};

use jsonrpsee::types::{Id, Request};
use serde_json::value::RawValue;

use crate::cli::output::{Failure, FailureKind};
use crate::rpc::framing::Framing;
use crate::rpc::Config;
use crate::session::json::{scan, Json, Object};

type Waiter = mpsc::Sender<Result<Json, Failure>>;

/// A running in-process sidecar: requests in, responses matched by id, notifications to whoever listens.
pub struct Bridge {
    input: Mutex<std::io::PipeWriter>,
    pending: Mutex<HashMap<u64, Waiter>>,
    next_id: AtomicU64,
    listeners: Mutex<Vec<Weak<Feed>>>,
}

impl Bridge {
    /// Starts a sidecar for `agent_dir` (JSON lines; watches polled every 500 ms as a safety net). With
    /// `exit_with_it`, the process ends when the sidecar does: the sidecar takes SIGTERM as its orderly end, and the
    /// web server must not outlive it.
    pub fn start(agent_dir: &str, index_path: Option<String>, exit_with_it: bool) -> std::io::Result<Arc<Bridge>> {
        Bridge::start_with_catalog(agent_dir, index_path, exit_with_it, None)
    }

    /// [`Bridge::start`], answering from the team catalog at `catalog` when there is one (`--catalog`): every
    /// machine's sessions listed and searched, each opened read-only from the database.
    pub fn start_with_catalog(
        agent_dir: &str,
        index_path: Option<String>,
        exit_with_it: bool,
        catalog: Option<String>,
    ) -> std::io::Result<Arc<Bridge>> {
        let (to_server_read, to_server_write) = std::io::pipe()?;
        let (from_server_read, from_server_write) = std::io::pipe()?;
        let config = Config {
            framing: Some(Framing::Jsonl),
            agent_dir: agent_dir.to_owned(),
            max_frame: 1 << 30,
            durability: crate::session::store::Durability::Entry,
            index_path,
            poll_interval: std::time::Duration::from_millis(500),
            catalog,
        };
        std::thread::Builder::new().name("pi-sessiond-web-sidecar".into()).spawn(move || {
            let status = crate::rpc::serve(config, to_server_read, from_server_write);
            if exit_with_it {
                std::process::exit(status);
            }
        })?;
        let bridge = Arc::new(Bridge {
            input: Mutex::new(to_server_write),
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            listeners: Mutex::new(Vec::new()),
        });
        let reader = bridge.clone();
        std::thread::Builder::new().name("pi-sessiond-web-reader".into()).spawn(move || {
            reader.read_output(BufReader::with_capacity(1 << 20, from_server_read));
        })?;
        Ok(bridge)
    }

    fn read_output(&self, mut output: impl BufRead) {
        let mut line = Vec::new();
        loop {
            line.clear();
            // One huge notification must not keep its buffer for the rest of the process's life.
            if line.capacity() > 4 << 20 {
                line = Vec::new();
            }
            match output.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let text = line.trim_ascii_end();
            // Only responses are parsed here; notifications go to listeners as text (a parsed notification takes
            // many times its size, and a listener's budget is counted in what it holds).
            let Ok(doc) = scan::scan_document(text) else { continue };
            match scan::find_member(text, &doc.members, "id") {
                Some(id) => {
                    let Ok(Id::Number(id)) = serde_json::from_slice::<Id>(&text[id]) else { continue };
                    let waiter = self.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
                    // The engine's own JSON: lone UTF-16 surrogates, which pi writes, survive (serde_json refuses
                    // them).
                    if let (Some(w), Ok(message)) = (waiter, Json::parse(text)) {
                        let _ = w.send(outcome(message));
                    }
                }
                None => self.announce(text),
            }
        }
        for feed in self.listeners.lock().unwrap_or_else(|e| e.into_inner()).drain(..).filter_map(|l| l.upgrade()) {
            feed.close();
        }
        // The sidecar is gone: nobody waiting will get an answer.
        for (_, w) in self.pending.lock().unwrap_or_else(|e| e.into_inner()).drain() {
            let _ = w.send(Err(Failure::io("the sidecar stopped")));
        }
    }

    /// Hands `notification` (a JSON-RPC notification's text) to every listener, as if the sidecar had sent it:
    /// how the web server tells pages of what it notices itself (the team catalog changed).
    pub fn announce(&self, notification: &[u8]) {
        let shared: Arc<[u8]> = Arc::from(notification);
        self.listeners.lock().unwrap_or_else(|e| e.into_inner()).retain(|l| match l.upgrade() {
            Some(feed) => {
                feed.push(&shared);
                true
            }
            None => false,
        });
    }

    /// Calls `method` and waits for its result.
    pub fn call(&self, method: &str, params: Json) -> Result<Json, Failure> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = request_frame(method, &params, id)?;
        let (tx, rx) = mpsc::channel();
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).insert(id, tx);
        let written = self.input.lock().unwrap_or_else(|e| e.into_inner()).write_all(&frame);
        if let Err(e) = written {
            self.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
            return Err(Failure::io(format!("the sidecar stopped: {e}")));
        }
        rx.recv().unwrap_or_else(|_| Err(Failure::io("the sidecar stopped")))
    }

    /// Tells every listener that it missed something (as one that fell behind is told), so each page loads what
    /// it shows again: for news the sidecar's notifications cannot carry.
    pub fn resync_listeners(&self) {
        for feed in self.listeners.lock().unwrap_or_else(|e| e.into_inner()).iter().filter_map(Weak::upgrade) {
            feed.lock().lagged = true;
            feed.ready.notify_one();
        }
    }

    /// Every notification from now on (`session/changed`, …), as the sidecar sent it, held for the listener up
    /// to `budget` bytes of the sidecar's text. Dropping the feed stops the listening and frees what it held.
    pub fn listen(&self, budget: usize) -> Arc<Feed> {
        let feed = Arc::new(Feed {
            state: Mutex::new(FeedState { queue: VecDeque::new(), bytes: 0, lagged: false, closed: false }),
            budget,
            ready: tokio::sync::Notify::new(),
        });
        self.listeners.lock().unwrap_or_else(|e| e.into_inner()).push(Arc::downgrade(&feed));
        feed
    }
}

/// One listener's notifications, bounded in bytes (its budget, or one notification when that is larger): a
/// listener that falls behind by more than that loses what it had not taken and is told so once ([`Heard::Lagged`]), so it can start again from a fresh state. The
/// sidecar is never held back by a listener.
pub struct Feed {
    state: Mutex<FeedState>,
    budget: usize,
    ready: tokio::sync::Notify,
}

struct FeedState {
    queue: VecDeque<Arc<[u8]>>,
    bytes: usize,
    lagged: bool,
    closed: bool,
}

/// What a listener hears next.
#[derive(Debug)]
pub enum Heard {
    /// A notification (its JSON text), in the sidecar's order.
    Notification(Arc<[u8]>),
    /// Notifications were dropped because the listener fell behind; those after this are complete again.
    Lagged,
    /// The sidecar has stopped: nothing more will come.
    Closed,
}

impl Feed {
    fn lock(&self) -> std::sync::MutexGuard<'_, FeedState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, notification: &Arc<[u8]>) {
        let size = notification.len();
        {
            let mut state = self.lock();
            // One notification larger than the budget still goes to a listener that has taken everything else.
            if !state.queue.is_empty() && state.bytes + size > self.budget {
                state.queue.clear();
                state.bytes = 0;
                state.lagged = true;
            } else {
                state.queue.push_back(notification.clone());
                state.bytes += size;
            }
        }
        self.ready.notify_one();
    }

    fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_one();
    }

    /// The next thing heard, without waiting: None when there is nothing yet.
    pub fn try_next(&self) -> Option<Heard> {
        let mut state = self.lock();
        if std::mem::take(&mut state.lagged) {
            return Some(Heard::Lagged);
        }
        if let Some(n) = state.queue.pop_front() {
            state.bytes -= n.len();
            return Some(Heard::Notification(n));
        }
        state.closed.then_some(Heard::Closed)
    }

    /// The next thing heard, waiting for it.
    pub async fn next(&self) -> Heard {
        loop {
            // Registered before looking, so a push between the look and the wait is not missed.
            let ready = self.ready.notified();
            if let Some(heard) = self.try_next() {
                return heard;
            }
            ready.await;
        }
    }
}

/// Request `id` as one JSON line. The params are the engine's JSON (numbers as written, lone surrogates
/// escaped), put in jsonrpsee's `Request` as the raw JSON they write.
fn request_frame(method: &str, params: &Json, id: u64) -> Result<Vec<u8>, Failure> {
    let mut text = Vec::new();
    params.write_preserving(&mut text);
    let params = String::from_utf8(text)
        .ok()
        .and_then(|t| RawValue::from_string(t).ok())
        .ok_or_else(|| Failure::new(FailureKind::Internal, "the web view wrote params that are not JSON"))?;
    let mut frame = serde_json::to_vec(&Request::borrowed(method, Some(&params), Id::Number(id)))
        .map_err(|e| Failure::new(FailureKind::Internal, e.to_string()))?;
    frame.push(b'\n');
    Ok(frame)
}

/// A response as a result, its error as a [`Failure`] with the sidecar's `data.kind`.
fn outcome(response: Json) -> Result<Json, Failure> {
    let text = |v: Option<&Json>| v.and_then(Json::as_js_str).map(|s| s.to_string_lossy());
    if let Some(error) = response.get("error") {
        let kind = text(error.get("data").and_then(|d| d.get("kind"))).unwrap_or_default();
        let message = text(error.get("message")).unwrap_or_else(|| "error".into());
        return Err(Failure::new(FailureKind::from_name(&kind), message));
    }
    let mut response = response;
    match &mut response {
        Json::Object(o) => Ok(o.remove("result").unwrap_or(Json::Null)),
        _ => Ok(Json::Null),
    }
}

/// `{k: v, …}` as params.
pub fn params(members: Vec<(&str, Json)>) -> Json {
    let mut o = Object::new();
    for (k, v) in members {
        o.insert(k, v);
    }
    Json::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::dispatch::{self, Message, Parsed};

    #[test]
    fn a_request_is_read_by_the_sidecar_with_its_id_method_and_params_as_written() {
        // A number as written and a lone surrogate: what the engine's JSON keeps and serde_json's values would not.
        let params = Json::parse(br#"{"handle":"h1","offset":1.50,"text":"\ud800"}"#).expect("JSON");
        let frame = request_frame("session/getEntries", &params, 42).expect("a frame");
        assert_eq!(frame.last(), Some(&b'\n'));
        let Parsed::Single(Message::Request { id, method, params }) = dispatch::parse(&frame) else {
            panic!("not a request: {}", String::from_utf8_lossy(&frame))
        };
        assert_eq!(id.get(), "42");
        assert_eq!(method, "session/getEntries");
        assert_eq!(params.map(RawValue::get), Some(r#"{"handle":"h1","offset":1.50,"text":"\ud800"}"#));
    }

    fn feed(budget: usize) -> Feed {
        Feed {
            state: Mutex::new(FeedState { queue: VecDeque::new(), bytes: 0, lagged: false, closed: false }),
            budget,
            ready: tokio::sync::Notify::new(),
        }
    }

    fn number(heard: Option<Heard>) -> Option<String> {
        match heard? {
            Heard::Notification(n) => Some(String::from_utf8_lossy(&n).into_owned()),
            Heard::Lagged => Some("lagged".into()),
            Heard::Closed => Some("closed".into()),
        }
    }

    #[test]
    fn a_listener_that_falls_behind_its_budget_is_told_once_and_then_hears_what_comes_after() {
        let f = feed(100);
        for n in 1..=3 {
            f.push(&Arc::from(format!("{n:040}").as_bytes()));
        }
        f.push(&Arc::from(format!("{:040}", 4).as_bytes()));
        assert_eq!(f.lock().bytes, 40, "what was dropped is no longer held");
        assert_eq!(number(f.try_next()).as_deref(), Some("lagged"));
        assert_eq!(number(f.try_next()).as_deref(), Some(format!("{:040}", 4).as_str()));
        assert_eq!(number(f.try_next()), None);
        f.close();
        assert_eq!(number(f.try_next()).as_deref(), Some("closed"));
    }

    #[test]
    fn one_notification_larger_than_the_budget_reaches_a_listener_that_is_keeping_up() {
        let f = feed(10);
        f.push(&Arc::from(format!("{:01000}", 1).as_bytes()));
        assert_eq!(number(f.try_next()).as_deref(), Some(format!("{:01000}", 1).as_str()));
        assert_eq!(number(f.try_next()), None);
    }
}
