//! The server's event loop: one thread, one closed [`Event`] enum of everything that can happen (a frame, the end
//! of input, a file event, a poll tick, a finished request, a signal), one `match`.
//!
//! A frame's requests are routed through the method table (`methods`) the moment they arrive, so arrival order is
//! the order of every session's queue. The loop itself answers the lifecycle (`initialize`, `shutdown`, `exit`)
//! and `$/cancelRequest`, and keeps the requests in flight, so that `shutdown` and the end of input wait for what
//! was received before them. It never waits on the host: what it sends goes out without waiting for room.

use crate::rpc::error::WireKind;
use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use tracing::{debug, info, warn};

use super::dispatch::{self, Message, Parsed};
use super::error::rpc_error;
use super::framing::{Frame, Framing};
use super::handlers::catalog::IndexCatchUp;
use super::handlers::{self, null, RecentListings, Server};
use super::handles::Registry;
use super::methods::{self, Routed, PROTOCOL_VERSION};
use super::proto::{Capabilities, InitializeParams, InitializeResult, ServerInfo};
use super::reply::{error_message, Batch, Reply, ReplyState};
use super::transport::{Connection, Incoming, Limits};
use crate::catalog::index::SharedIndex;
use crate::session::store::Durability;
use crate::watch::{FsEvent, FsWatcher};

/// How the server runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// The framing, or None to detect it from the first byte.
    pub framing: Option<Framing>,
    /// pi's agent directory.
    pub agent_dir: String,
    /// The largest frame accepted from the host.
    pub max_frame: usize,
    /// How hard appends try to reach the disk.
    pub durability: Durability,
    /// The catalog index, or None to list and search by reading the files.
    pub index_path: Option<String>,
    /// How often watched files are checked even without a notification (the safety net for missed events).
    pub poll_interval: Duration,
    /// The team catalog's PostgreSQL URL (`--catalog`): listings, lookups and searches then answer across every
    /// machine that pushed to it, and `session/open` with `machine` reads another machine's session from it.
    pub catalog: Option<String>,
}

/// Everything the event loop reacts to.
#[derive(Debug)]
pub enum Event {
    /// A frame from the host.
    Frame(Frame),
    /// The host's input ended.
    InputClosed,
    /// A watched directory changed.
    Fs(FsEvent),
    /// Time to look at watched files again.
    Poll,
    /// A request was answered (its reply was dropped).
    Finished(u64),
    /// SIGTERM.
    Terminate,
}

/// Threads that run sessions' queues and catalog requests at most (tokio's blocking pool).
pub const BLOCKING_THREADS: usize = 64;

/// After `shutdown`, the end of input, SIGTERM or `exit`: how long reads still running may finish before they are
/// cancelled, and how long anything at all is waited for.
const GRACE: Duration = Duration::from_secs(5);
const GIVE_UP: Duration = Duration::from_secs(30);

/// Serves JSON-RPC on `input`/`output` until `exit`, end of input or SIGTERM. Returns the exit status.
pub fn serve(
    config: Config,
    input: impl std::io::Read + Send + 'static,
    output: impl std::io::Write + Send + 'static,
) -> i32 {
    serve_connection(config, Connection::new(input, output))
}

/// Serves JSON-RPC on a connection (the process's stdio, or [`Connection::memory`] in tests).
pub fn serve_connection(config: Config, connection: Connection) -> i32 {
    let team = match config.catalog.as_deref().map(super::team::TeamServer::new).transpose() {
        Ok(t) => t.map(Arc::new),
        Err(e) => {
            // A catalog URL that cannot be parsed is a startup error, before any request is answered.
            tracing::error!("--catalog: {e}");
            return 2;
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        // A busy session's worker and a catalog request each take a blocking thread; tokio's default allows 512,
        // so a host with hundreds of busy handles got hundreds of threads. Beyond this, work waits its turn (no
        // blocking task waits for another: each waits only for its session's lock, the disk or the host).
        .max_blocking_threads(BLOCKING_THREADS)
        .thread_name("pi-sessiond-rt")
        .enable_all()
        .build()
        .expect("tokio runtime");
    // How many cores the process may use is read from cgroup files (a quarter of a millisecond): read now, off the
    // first open's path, which asks it before splitting a large file between two threads.
    drop(runtime.spawn_blocking(crate::session::store::parallelism));
    // SIGTERM's handler is installed here, before the first frame is read: installed by the task that waits for
    // it, it was missing until the runtime's one worker first ran that task, and a host that stopped the sidecar
    // right after an answer (served on the blocking pool) found it killed, not shut down.
    let terminate = {
        let _in_runtime = runtime.enter();
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok()
    };
    let (events_tx, events) = mpsc::channel::<Event>();
    let frames = events_tx.clone();
    let transport = connection.start(config.framing, config.max_frame, Limits::default(), move |incoming| {
        let event = match incoming {
            Incoming::Frame(f) => Event::Frame(f),
            Incoming::Closed => Event::InputClosed,
        };
        frames.send(event).is_ok()
    });
    let fs_events = Mutex::new(events_tx.clone());
    let watcher = FsWatcher::new(move |e| {
        let _ = fs_events.lock().unwrap_or_else(|e| e.into_inner()).send(Event::Fs(e));
    });
    let poll =
        if watcher.is_native() { config.poll_interval } else { config.poll_interval.min(Duration::from_millis(50)) };
    let index = Arc::new(SharedIndex::new(config.index_path.clone()));
    let server = Arc::new(Server {
        registry: Registry::default(),
        outbox: transport.outbox.clone(),
        pool: runtime.handle().clone(),
        agent_dir: config.agent_dir.clone(),
        durability: config.durability,
        keep: config.index_path.as_deref().map(crate::session::kept::Keep::beside_index),
        index: index.clone(),
        index_catch_up: IndexCatchUp::start(index),
        watcher,
        dir_watches: Mutex::new(HashMap::new()),
        tree_watches: Mutex::new(HashMap::new()),
        next_watch_id: Default::default(),
        listings: Mutex::new(RecentListings::default()),
        quiet_dirs: crate::catalog::quiet::QuietDirs::new(),
        team,
        skeletons: std::sync::atomic::AtomicBool::new(true),
    });
    let ticks = events_tx.clone();
    runtime.spawn(async move {
        let mut tick = tokio::time::interval(poll);
        tick.tick().await;
        loop {
            tick.tick().await;
            if ticks.send(Event::Poll).is_err() {
                return;
            }
        }
    });
    let signals = events_tx.clone();
    runtime.spawn(async move {
        if let Some(mut term) = terminate {
            term.recv().await;
            let _ = signals.send(Event::Terminate);
        }
    });
    let outbox = transport.outbox.clone();
    let finished = Mutex::new(events_tx);
    let done: Arc<dyn Fn(u64) + Send + Sync> = Arc::new(move |key| {
        outbox.request_finished();
        let _ = finished.lock().unwrap_or_else(|e| e.into_inner()).send(Event::Finished(key));
    });
    let mut main = MainLoop {
        server: server.clone(),
        done,
        next_key: 0,
        in_flight: HashMap::new(),
        shutdown: None,
        shut_down: false,
        end: None,
    };
    let code = main.run(&events);
    // Every session is closed (its file lock released) before the last bytes go out; one still held by a request
    // that never finished is left to the process's exit.
    for slot in server.registry.drain() {
        slot.close_if_idle();
    }
    drop(main);
    transport.finish();
    runtime.shutdown_background();
    code
}

/// A request in flight, as the event loop keeps it.
struct InFlight {
    reply: Arc<ReplyState>,
    cancellable: bool,
    /// Answered `-32800` already: its work may still run (a read cannot be stopped mid-way), but nothing waits
    /// for it any more.
    cancelled: bool,
}

impl InFlight {
    fn cancel(&mut self, why: &str) {
        self.cancelled = true;
        self.reply.cancel(why);
    }
}

/// A `shutdown` waiting for the requests received before it.
struct PendingShutdown {
    key: u64,
    reply: Option<Reply>,
    waiting_for: HashSet<u64>,
    /// Reads and listings still running then are cancelled.
    grace_until: Instant,
}

/// The orderly end under way.
struct End {
    code: i32,
    grace_until: Instant,
    give_up_at: Instant,
    cancelled: bool,
}

struct MainLoop {
    server: Arc<Server>,
    done: Arc<dyn Fn(u64) + Send + Sync>,
    next_key: u64,
    in_flight: HashMap<u64, InFlight>,
    shutdown: Option<PendingShutdown>,
    /// `shutdown` was answered.
    shut_down: bool,
    end: Option<End>,
}

impl MainLoop {
    fn run(&mut self, events: &Receiver<Event>) -> i32 {
        loop {
            self.on_time(Instant::now());
            if let Some(code) = self.finished() {
                return code;
            }
            let event = match self.next_deadline() {
                None => match events.recv() {
                    Ok(e) => e,
                    Err(_) => return 0,
                },
                Some(at) => match events.recv_timeout(at.saturating_duration_since(Instant::now())) {
                    Ok(e) => e,
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => return self.end.as_ref().map_or(0, |e| e.code),
                },
            };
            match event {
                Event::Frame(frame) => self.on_frame(frame),
                Event::InputClosed => {
                    info!("input closed; shutting down");
                    self.begin_end(0);
                }
                Event::Terminate => {
                    info!("SIGTERM; shutting down");
                    self.begin_end(0);
                }
                Event::Fs(e) => handlers::watch::on_fs_event(&self.server, &e),
                Event::Poll => handlers::watch::on_poll(&self.server),
                Event::Finished(key) => self.on_finished(key),
            }
        }
    }

    /// When the loop must look at the time again without an event: a grace period ending.
    fn next_deadline(&self) -> Option<Instant> {
        let end = self.end.as_ref().map(|e| if e.cancelled { e.give_up_at } else { e.grace_until });
        let shutdown = self.shutdown.as_ref().filter(|p| p.reply.is_some()).map(|p| p.grace_until);
        end.into_iter().chain(shutdown).min()
    }

    /// Reads and listings still running when a grace period ends are cancelled, so nothing that may never finish
    /// (a listing stuck on a FIFO) holds the end up.
    fn on_time(&mut self, now: Instant) {
        let mut cancel_now = false;
        if let Some(end) = self.end.as_mut() {
            if !end.cancelled && now >= end.grace_until {
                end.cancelled = true;
                cancel_now = true;
            }
        }
        if let Some(pending) = self.shutdown.as_mut() {
            if pending.reply.is_some() && now >= pending.grace_until {
                cancel_now = true;
            }
        }
        if !cancel_now {
            return;
        }
        for (key, r) in self.in_flight.iter_mut().filter(|(_, r)| r.cancellable && !r.cancelled) {
            warn!("request {} still running at the end; cancelled", r.reply.id());
            r.cancel("cancelled: the server is ending");
            if let Some(p) = self.shutdown.as_mut() {
                p.waiting_for.remove(key);
            }
        }
        self.complete_shutdown_when_ready();
    }

    /// The exit status, once the orderly end is complete (everything received is answered, or waited for long
    /// enough).
    fn finished(&mut self) -> Option<i32> {
        let end = self.end.as_ref()?;
        let unanswered = self.in_flight.values().filter(|r| !r.cancelled).count();
        if (unanswered == 0 && self.shutdown.is_none()) || Instant::now() >= end.give_up_at {
            if unanswered > 0 {
                warn!("{unanswered} requests still unanswered after {GIVE_UP:?}; exiting");
            }
            return Some(end.code);
        }
        None
    }

    fn begin_end(&mut self, code: i32) {
        if self.end.is_none() {
            let now = Instant::now();
            self.end = Some(End { code, grace_until: now + GRACE, give_up_at: now + GIVE_UP, cancelled: false });
        }
    }

    fn on_finished(&mut self, key: u64) {
        self.in_flight.remove(&key);
        let Some(pending) = self.shutdown.as_mut() else { return };
        if pending.key == key {
            self.shutdown = None;
            self.shut_down = true;
            return;
        }
        pending.waiting_for.remove(&key);
        self.complete_shutdown_when_ready();
    }

    /// Once everything received before `shutdown` is answered: every session is closed (after any job still on
    /// its queue, such as a watch refresh), then `shutdown` is answered.
    fn complete_shutdown_when_ready(&mut self) {
        let Some(pending) = self.shutdown.as_mut() else { return };
        if !pending.waiting_for.is_empty() {
            return;
        }
        let Some(reply) = pending.reply.take() else { return };
        let server = self.server.clone();
        self.server.pool.spawn_blocking(move || {
            for slot in server.registry.drain() {
                drop(slot.take_manager());
            }
            reply.result(&null());
        });
    }

    fn refusing(&self) -> bool {
        self.shutdown.is_some() || self.shut_down || self.end.is_some()
    }

    fn on_frame(&mut self, frame: Frame) {
        let bytes = match frame {
            Frame::Message(b) => b,
            Frame::Malformed(why) => {
                warn!("bad frame: {why}");
                return self.reject(RawValue::NULL, WireKind::ParseError, &format!("bad frame: {why}"));
            }
        };
        debug!("< {}", String::from_utf8_lossy(&bytes[..bytes.len().min(2000)]));
        match dispatch::parse(&bytes) {
            Parsed::Unparsable(why) => self.reject(RawValue::NULL, WireKind::ParseError, &why),
            Parsed::NotAMessage(why) => self.reject(RawValue::NULL, WireKind::InvalidRequest, why),
            Parsed::Single(message) => self.on_message(message, None),
            Parsed::Batch(messages) => {
                let batch = Batch::new(self.server.outbox.clone());
                for m in messages {
                    self.on_message(m, Some(&batch));
                }
                batch.seal();
            }
        }
    }

    /// Answers an error without a request behind it (a bad frame).
    fn reject(&self, id: &RawValue, kind: WireKind, why: &str) {
        let e = rpc_error(kind, why, serde_json::json!({}));
        self.server.outbox.send_now(error_message(id, &e));
    }

    fn on_message(&mut self, message: Message<'_>, batch: Option<&Arc<Batch>>) {
        match message {
            Message::Response => {}
            Message::Invalid { id, why } => {
                let e = rpc_error(WireKind::InvalidRequest, why, serde_json::json!({}));
                match batch {
                    Some(b) => b.answer_now(error_message(id, &e)),
                    None => self.server.outbox.send_now(error_message(id, &e)),
                }
            }
            Message::Notification { method, params } => self.on_notification(&method, params),
            Message::Request { id, method, params } => {
                if self.refusing() {
                    let e = rpc_error(WireKind::InvalidRequest, "the server is shutting down", serde_json::json!({}));
                    return match batch {
                        Some(b) => b.answer_now(error_message(id, &e)),
                        None => self.server.outbox.send_now(error_message(id, &e)),
                    };
                }
                self.next_key += 1;
                let key = self.next_key;
                self.server.outbox.request_started();
                // The handle is recorded when the table knows it (methods.rs); the span goes with the reply.
                let span = tracing::info_span!("request", method = %method, id = %id, handle = tracing::field::Empty);
                let reply = match batch {
                    Some(b) => Reply::in_batch(id, key, b, self.done.clone(), span),
                    None => Reply::direct(id, key, self.server.outbox.clone(), self.done.clone(), span),
                };
                let cancellable = methods::is_cancellable(&method);
                self.in_flight.insert(key, InFlight { reply: reply.state(), cancellable, cancelled: false });
                match methods::route(&self.server, &method, params, reply) {
                    Routed::Dispatched => {}
                    Routed::Initialize(params, reply) => self.initialize(params, reply),
                    Routed::Shutdown(reply) => self.begin_shutdown(key, reply),
                }
            }
        }
    }

    fn initialize(&self, params: InitializeParams, reply: Reply) {
        // Taken here, on the loop, so every request after `initialize` opens as the host said (the drop-in sends
        // its first open right behind it).
        if params.skeletons_declined() {
            self.server.skeletons.store(false, std::sync::atomic::Ordering::Relaxed);
        }
        let result = InitializeResult {
            server_info: ServerInfo { name: "pi-sessiond".into(), version: env!("CARGO_PKG_VERSION").into() },
            protocol_version: PROTOCOL_VERSION.into(),
            capabilities: Capabilities {
                methods: methods::specs().iter().map(|s| s.name.to_owned()).collect(),
                notifications: vec!["session/changed".into(), "sessions/changed".into(), "$/progress".into()],
                framing: self.server.outbox.framing().name().to_owned(),
                pi_compatibility: "@earendil-works/pi-coding-agent@1.6.0".into(),
            },
        };
        // Answered off the loop: an answer may wait for the host to read.
        self.server.pool.spawn_blocking(move || reply.result(&result));
    }

    /// `shutdown`: everything received before it is waited for — reads and listings for a grace period, after
    /// which they are cancelled.
    fn begin_shutdown(&mut self, key: u64, reply: Reply) {
        let waiting_for = self.in_flight.iter().filter(|(k, r)| **k != key && !r.cancelled).map(|(k, _)| *k).collect();
        let grace_until = Instant::now() + GRACE;
        self.shutdown = Some(PendingShutdown { key, reply: Some(reply), waiting_for, grace_until });
        self.complete_shutdown_when_ready();
    }

    fn on_notification(&mut self, method: &str, params: Option<&RawValue>) {
        match method {
            "initialized" => {}
            "exit" => {
                let orderly = self.shutdown.is_some() || self.shut_down;
                self.begin_end(if orderly { 0 } else { 1 });
                if let Some(end) = self.end.as_mut() {
                    end.code = if orderly { 0 } else { 1 };
                }
            }
            "$/cancelRequest" => {
                #[derive(serde::Deserialize)]
                struct Cancel<'a> {
                    #[serde(borrow)]
                    id: &'a RawValue,
                }
                let Some(Ok(c)) = params.map(|p| serde_json::from_str::<Cancel>(p.get())) else { return };
                let wanted = c.id.get();
                let same = |id: &str| {
                    id == wanted
                        || serde_json::from_str::<serde_json::Value>(id).ok()
                            == serde_json::from_str::<serde_json::Value>(wanted).ok()
                };
                for r in self.in_flight.values_mut().filter(|r| r.cancellable && same(r.reply.id().get())) {
                    debug!("cancelling request {wanted}");
                    r.cancel("request cancelled");
                }
            }
            other => debug!("ignoring notification {other}"),
        }
    }
}
