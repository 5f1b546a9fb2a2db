//! The server: one reader thread (frames from stdin), one writer thread (the only owner of stdout), and one
//! dispatch loop in between that validates JSON-RPC envelopes, answers lifecycle and notification messages
//! itself, hands requests to the jsonrpsee method table, and keeps track of what is in flight.
//!
//! Order guarantees: requests that name a handle get their ticket here, in arrival order (see `handles`);
//! everything written goes through one FIFO channel, so a `session/changed` sent by a mutation always precedes
//! that mutation's response. Shutdown — on `exit`, stdin EOF or SIGTERM — waits for requests in flight, closes
//! every session and flushes the writer before the process exits.

use std::collections::HashMap;
use std::io::{BufReader, Read, Write};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use jsonrpsee::types::{ErrorObjectOwned, Id, Params};
use jsonrpsee::{ConnectionId, Extensions, MethodCallback, Methods};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinHandle, JoinSet};
use tracing::{debug, info, warn};

use super::error::{self, rpc_error};
use super::framing::{needs_escaping, Frame, FrameReader, Framing, Message};
use super::methods::{self, ResultSlot, ServerState, TicketSlot};
use super::proto::SessionsChanged;
use super::watch::{FsEvent, FsWatcher};
use crate::session::store::Durability;

/// One request in flight; dropping it (answered or cancelled) lets a waiting `shutdown` proceed.
struct InFlight(Arc<ServerState>);

impl InFlight {
    fn new(state: Arc<ServerState>) -> InFlight {
        state.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(state)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

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
}

enum Event {
    Frame(Frame),
    Eof,
}

/// A message's envelope, with every member kept raw (a `null` id is a member, not a missing one).
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(default, borrow, deserialize_with = "raw_member")]
    jsonrpc: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "raw_member")]
    id: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "raw_member")]
    method: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "raw_member")]
    params: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "raw_member")]
    result: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "raw_member")]
    error: Option<&'a RawValue>,
}

fn raw_member<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

fn error_response(id: &str, err: &ErrorObjectOwned) -> Vec<u8> {
    let mut out = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":").into_bytes();
    out.extend(serde_json::to_vec(err).expect("error objects serialize"));
    out.push(b'}');
    out
}

fn plain_error(code: i32, kind: &str, message: &str) -> ErrorObjectOwned {
    rpc_error(code, kind, message, serde_json::json!({}))
}

/// A response, or a task that will produce one.
enum Pending {
    Ready(Option<Vec<u8>>),
    /// The response, and the request's place among those in flight, released once the response is queued.
    Task(JoinHandle<(Message, Option<InFlight>)>),
}

struct Dispatcher {
    methods: Methods,
    cancellable: HashMap<&'static str, bool>,
    state: Arc<ServerState>,
    inflight: Arc<Mutex<HashMap<String, AbortHandle>>>,
    tasks: JoinSet<()>,
    next_synthetic_id: u64,
    exit_code: Option<i32>,
    /// A `shutdown` request has been read (its answer may still be on its way): an `exit` right behind it is
    /// the orderly end, status 0, and waits for that answer like every task in flight.
    shutdown_requested: bool,
}

impl Dispatcher {
    fn send(&self, bytes: Vec<u8>) {
        let _ = self.state.out.send(bytes.into());
    }

    fn on_frame(&mut self, frame: Frame) {
        let bytes = match frame {
            Frame::Message(b) => b,
            Frame::Malformed(why) => {
                warn!("bad frame: {why}");
                self.send(error_response(
                    "null",
                    &plain_error(error::PARSE_ERROR, "parse_error", &format!("bad frame: {why}")),
                ));
                return;
            }
        };
        debug!("< {}", String::from_utf8_lossy(&bytes[..bytes.len().min(2000)]));
        let raw: &RawValue = match serde_json::from_slice(&bytes) {
            Ok(r) => r,
            Err(e) => {
                self.send(error_response(
                    "null",
                    &plain_error(error::PARSE_ERROR, "parse_error", &format!("parse error: {e}")),
                ));
                return;
            }
        };
        let text = raw.get();
        if text.starts_with('[') {
            let items: Vec<&RawValue> = serde_json::from_str(text).expect("validated array");
            if items.is_empty() {
                self.send(error_response(
                    "null",
                    &plain_error(error::INVALID_REQUEST, "invalid_request", "empty batch"),
                ));
                return;
            }
            let pending: Vec<Pending> = items.into_iter().map(|item| self.on_message(item)).collect();
            let out = self.state.out.clone();
            self.tasks.spawn(async move {
                let mut responses = Vec::new();
                for p in pending {
                    // In a batch, a response counts as given once it is in the batch's array (which is sent whole):
                    // a `shutdown` in the same batch must not wait for the array it is part of.
                    let r = match p {
                        Pending::Ready(r) => r,
                        Pending::Task(t) => t.await.ok().map(|(r, _answered)| r.into_bytes()),
                    };
                    responses.extend(r);
                }
                if !responses.is_empty() {
                    let mut array = b"[".to_vec();
                    array.extend(responses.join(&b","[..]));
                    array.push(b']');
                    let _ = out.send(array.into());
                }
            });
        } else {
            match self.on_message(raw) {
                Pending::Ready(Some(r)) => self.send(r),
                Pending::Ready(None) => {}
                Pending::Task(t) => {
                    let out = self.state.out.clone();
                    self.tasks.spawn(async move {
                        if let Ok((r, guard)) = t.await {
                            let _ = out.send(r);
                            drop(guard);
                        }
                    });
                }
            }
        }
    }

    /// One message of a frame (or of a batch).
    fn on_message(&mut self, raw: &RawValue) -> Pending {
        let invalid = |id: &str, why: &str| {
            Pending::Ready(Some(error_response(id, &plain_error(error::INVALID_REQUEST, "invalid_request", why))))
        };
        if !raw.get().starts_with('{') {
            return invalid("null", "a message must be a JSON object");
        }
        let env: Envelope = match serde_json::from_str(raw.get()) {
            Ok(e) => e,
            Err(e) => return invalid("null", &format!("invalid request: {e}")),
        };
        let id = match env.id.map(RawValue::get) {
            Some(t)
                if t.starts_with('"')
                    || t.starts_with('-')
                    || t.starts_with(|c: char| c.is_ascii_digit())
                    || t == "null" =>
            {
                Some(t)
            }
            Some(_) => return invalid("null", "id must be a string, a number or null"),
            None => None,
        };
        let reply_id = id.unwrap_or("null");
        if env.jsonrpc.map(RawValue::get) != Some("\"2.0\"") {
            if env.method.is_none() && (env.result.is_some() || env.error.is_some()) {
                return Pending::Ready(None);
            }
            return match id {
                Some(i) => invalid(i, "jsonrpc must be \"2.0\""),
                None => Pending::Ready(None),
            };
        }
        let method: String = match env.method.map(|m| serde_json::from_str::<String>(m.get())) {
            Some(Ok(m)) => m,
            Some(Err(_)) => return invalid(reply_id, "method must be a string"),
            None if env.result.is_some() || env.error.is_some() => return Pending::Ready(None), // a response to us
            None => return invalid(reply_id, "missing method"),
        };
        if let Some(p) = env.params {
            if !(p.get().starts_with('{') || p.get().starts_with('[')) {
                return invalid(reply_id, "params must be an object");
            }
        }
        let Some(id) = id else {
            self.on_notification(&method, env.params);
            return Pending::Ready(None);
        };
        self.on_request(id, method, env.params)
    }

    fn on_notification(&mut self, method: &str, params: Option<&RawValue>) {
        match method {
            "initialized" => {}
            "exit" => {
                let orderly = self.shutdown_requested || self.state.shut_down.load(Ordering::SeqCst);
                self.exit_code = Some(if orderly { 0 } else { 1 });
            }
            "$/cancelRequest" => {
                #[derive(Deserialize)]
                struct Cancel {
                    id: serde_json::Value,
                }
                let Some(Ok(c)) = params.map(|p| serde_json::from_str::<Cancel>(p.get())) else { return };
                let key = c.id.to_string();
                let handle = self.inflight.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
                if let Some(h) = handle {
                    debug!("cancelling request {key}");
                    h.abort();
                }
            }
            other => debug!("ignoring notification {other}"),
        }
    }

    fn on_request(&mut self, id: &str, method: String, params: Option<&RawValue>) -> Pending {
        if self.shutdown_requested || self.state.shut_down.load(Ordering::SeqCst) {
            return Pending::Ready(Some(error_response(
                id,
                &plain_error(error::INVALID_REQUEST, "invalid_request", "the server is shutting down"),
            )));
        }
        if method == "shutdown" {
            self.shutdown_requested = true;
        }
        let Some(MethodCallback::Async(callback)) = self.methods.method(&method).cloned() else {
            return Pending::Ready(Some(error_response(
                id,
                &plain_error(error::METHOD_NOT_FOUND, "method_not_found", &format!("method not found: {method}")),
            )));
        };
        // Take this request's place in its session's arrival order now, before anything runs concurrently.
        let mut ext = Extensions::new();
        if let Some(p) = params {
            #[derive(Deserialize)]
            struct Peek {
                handle: Option<serde_json::Value>,
            }
            if let Ok(Peek { handle: Some(serde_json::Value::String(h)) }) = serde_json::from_str::<Peek>(p.get()) {
                if let Some(session) = self.state.registry.get(&h) {
                    ext.insert(TicketSlot(Arc::new(Mutex::new(Some(session.ticket())))));
                }
            }
        }
        // jsonrpsee ids are strings or unsigned integers; anything else (negative, fractional, null) is answered
        // under a stand-in id and put back in the response.
        let (rpc_id, rewrite) = match serde_json::from_str::<serde_json::Value>(id) {
            Ok(serde_json::Value::String(s)) => (Id::Str(s.into()), false),
            Ok(serde_json::Value::Number(n)) if n.as_u64().is_some() => (Id::Number(n.as_u64().unwrap()), false),
            _ => {
                self.next_synthetic_id += 1;
                (Id::Number(self.next_synthetic_id), true)
            }
        };
        let slot = ResultSlot::default();
        ext.insert(slot.clone());
        let params = Params::new(params.map(RawValue::get)).into_owned();
        let future = callback(rpc_id, params, ConnectionId(0), usize::MAX, ext);
        let key = serde_json::from_str::<serde_json::Value>(id).map(|v| v.to_string()).unwrap_or_default();
        // Every request but `shutdown` counts as in flight until its response is queued, so `shutdown` can wait
        // for everything received before it.
        let guard = (method != "shutdown").then(|| InFlight::new(self.state.clone()));
        let inner = tokio::spawn(future);
        if self.cancellable.get(method.as_str()).copied().unwrap_or(false) {
            self.inflight.lock().unwrap_or_else(|e| e.into_inner()).insert(key.clone(), inner.abort_handle());
        }
        let inflight = self.inflight.clone();
        let id = id.to_owned();
        Pending::Task(tokio::spawn(async move {
            let response = match inner.await {
                Ok(r) => {
                    let json = r.into_json();
                    if let Some(result) = slot.take() {
                        let head = [br#"{"jsonrpc":"2.0","id":"#.as_slice(), id.as_bytes(), br#","result":"#].concat();
                        Message(vec![head, result, b"}".to_vec()])
                    } else if rewrite {
                        with_id(json.get(), &id).into()
                    } else {
                        // Moved, not copied.
                        Box::<str>::from(json).into_boxed_bytes().into_vec().into()
                    }
                }
                Err(e) if e.is_cancelled() => error_response(
                    &id,
                    &plain_error(error::REQUEST_CANCELLED, "request_cancelled", "request cancelled"),
                )
                .into(),
                Err(e) => {
                    warn!("request {id} failed: {e}");
                    error_response(&id, &plain_error(error::INTERNAL_ERROR, "internal_error", "internal error")).into()
                }
            };
            inflight.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
            (response, guard)
        }))
    }
}

/// A jsonrpsee response with its id replaced by the host's own.
fn with_id(response: &str, id: &str) -> Vec<u8> {
    #[derive(Deserialize)]
    struct Parts<'a> {
        #[serde(borrow)]
        result: Option<&'a RawValue>,
        #[serde(borrow)]
        error: Option<&'a RawValue>,
    }
    let parts: Parts = serde_json::from_str(response).expect("jsonrpsee responses are JSON");
    let (key, value) = match (parts.result, parts.error) {
        (Some(r), _) => ("result", r.get()),
        (None, Some(e)) => ("error", e.get()),
        (None, None) => ("result", "null"),
    };
    format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"{key}\":{value}}}").into_bytes()
}

/// Serves JSON-RPC on `input`/`output` until `exit`, end of input or SIGTERM. Returns the exit status.
pub fn serve(config: Config, input: impl Read + Send + 'static, output: impl Write + Send + 'static) -> i32 {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    runtime.block_on(run(config, input, output))
}

async fn run(config: Config, input: impl Read + Send + 'static, output: impl Write + Send + 'static) -> i32 {
    let framing_cell: Arc<OnceLock<Framing>> = Arc::new(OnceLock::new());
    if let Some(f) = config.framing {
        let _ = framing_cell.set(f);
    }
    // Writer: the only owner of the output.
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Message>();
    let writer_framing = framing_cell.clone();
    let writer = std::thread::Builder::new()
        .name("pi-sessiond-writer".into())
        .spawn(move || {
            let mut output = output;
            let mut buf = Vec::new();
            // An empty message is the stop signal: everything queued before it is written first.
            while let Some(msg) = out_rx.blocking_recv() {
                if msg.is_empty() {
                    break;
                }
                let framing = writer_framing.get().copied().unwrap_or(Framing::Jsonl);
                if let Some(first) = msg.0.first() {
                    debug!("> {}", String::from_utf8_lossy(&first[..first.len().min(2000)]));
                }
                buf.clear();
                // A large message that needs no escaping is written as it is, not copied into the buffer first.
                let large = framing == Framing::Jsonl && msg.len() >= 1 << 20;
                let written = if large && !msg.0.iter().any(|p| needs_escaping(p)) {
                    msg.0.iter().try_for_each(|p| output.write_all(p)).and_then(|()| output.write_all(b"\n"))
                } else {
                    msg.encode(framing, &mut buf);
                    Ok(())
                };
                // Coalesce what is already queued into one write.
                let mut stop = false;
                while let Ok(more) = out_rx.try_recv() {
                    if more.is_empty() {
                        stop = true;
                        break;
                    }
                    more.encode(framing, &mut buf);
                }
                if written.and_then(|()| output.write_all(&buf)).and_then(|()| output.flush()).is_err() || stop {
                    break;
                }
                // A huge answer (a tree, a context) must not pin its size in memory for the process's life.
                if buf.capacity() > 8 << 20 {
                    buf = Vec::new();
                }
            }
        })
        .expect("writer thread");
    // Reader: frames from the input.
    let (ev_tx, mut ev_rx) = mpsc::channel::<Event>(64);
    let reader_framing = framing_cell.clone();
    let max_frame = config.max_frame;
    std::thread::Builder::new()
        .name("pi-sessiond-reader".into())
        .spawn(move || {
            let mut frames =
                FrameReader::new(BufReader::with_capacity(1 << 16, input), reader_framing.get().copied(), max_frame);
            loop {
                match frames.next_frame() {
                    Ok(Some(f)) => {
                        if let Some(framing) = frames.framing() {
                            let _ = reader_framing.set(framing);
                        }
                        if ev_tx.blocking_send(Event::Frame(f)).is_err() {
                            return;
                        }
                    }
                    Ok(None) | Err(_) => {
                        let _ = ev_tx.blocking_send(Event::Eof);
                        return;
                    }
                }
            }
        })
        .expect("reader thread");

    let (fs_tx, mut fs_rx) = mpsc::unbounded_channel::<FsEvent>();
    let state = Arc::new(ServerState::new(
        out_tx,
        config.agent_dir.clone(),
        config.durability,
        FsWatcher::new(fs_tx),
        config.index_path.clone(),
    ));
    // File events: refresh the watched session they concern; report session files in watched directories.
    let watch_state = state.clone();
    tokio::spawn(async move {
        while let Some(event) = fs_rx.recv().await {
            for path in &event.paths {
                let p = path.to_string_lossy();
                if !p.ends_with(".jsonl") {
                    continue;
                }
                if let Some(session) = watch_state.registry.by_path(&p) {
                    if session.watched.load(Ordering::SeqCst) {
                        methods::schedule_refresh(watch_state.clone(), session);
                    }
                }
                let dir = super::watch::dir_of(&p);
                let watches: Vec<String> = watch_state
                    .dir_watches
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .filter(|(_, d)| std::path::Path::new(d.as_str()) == dir)
                    .map(|(id, _)| id.clone())
                    .collect();
                for watch_id in watches {
                    let note = SessionsChanged { watch_id, path: p.to_string(), kind: event.kind };
                    watch_state.notify("sessions/changed", &note);
                }
            }
        }
    });
    // The poll: watched sessions are looked at now and then even without an event.
    let poll_state = state.clone();
    let poll = if poll_state.watcher.is_native() {
        config.poll_interval
    } else {
        config.poll_interval.min(Duration::from_millis(50))
    };
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(poll);
        loop {
            tick.tick().await;
            for session in poll_state.registry.watched() {
                methods::schedule_refresh(poll_state.clone(), session);
            }
        }
    });
    let module = methods::module(state.clone());
    let cancellable = methods::specs().iter().map(|s| (s.name, s.cancellable())).collect();
    let mut d = Dispatcher {
        methods: module.into(),
        cancellable,
        state: state.clone(),
        inflight: Default::default(),
        tasks: JoinSet::new(),
        next_synthetic_id: 1 << 53,
        exit_code: None,
        shutdown_requested: false,
    };
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let code = loop {
        tokio::select! {
            ev = ev_rx.recv() => match ev {
                Some(Event::Frame(f)) => {
                    if let Some(framing) = framing_cell.get() {
                        *state.framing.lock().unwrap_or_else(|e| e.into_inner()) = framing.name().to_owned();
                    }
                    d.on_frame(f);
                    if let Some(code) = d.exit_code {
                        break code;
                    }
                }
                Some(Event::Eof) | None => {
                    info!("input closed; shutting down");
                    break 0;
                }
            },
            _ = async { match sigterm.as_mut() { Some(s) => { s.recv().await; } None => std::future::pending::<()>().await } } => {
                info!("SIGTERM; shutting down");
                break 0;
            }
            Some(_) = d.tasks.join_next(), if !d.tasks.is_empty() => {}
        }
    };
    // Orderly shutdown: finish what is in flight, close every session, flush the writer.
    let _ = tokio::time::timeout(Duration::from_secs(30), async { while d.tasks.join_next().await.is_some() {} }).await;
    for s in state.registry.drain() {
        drop(s.manager.clone().write_owned().await);
    }
    let _ = state.out.send(Message::default());
    let _ = tokio::task::spawn_blocking(move || writer.join()).await;
    code
}
