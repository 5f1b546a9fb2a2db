//! The web view's way into the sessions: the sidecar itself, run in-process over a pair of pipes. The page's
//! tree, context and live changes are therefore exactly what `pi-sessiond` serves any host — the same reads,
//! the same watches — and the web module never reads a session file itself.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use crate::cli::output::{Failure, FailureKind};
use crate::rpc::framing::Framing;
use crate::rpc::Config;
use crate::session::json::{Json, Object};

type Waiter = mpsc::Sender<Result<Json, Failure>>;

/// A running in-process sidecar: requests in, responses matched by id, notifications to whoever listens.
pub struct Bridge {
    input: Mutex<std::io::PipeWriter>,
    pending: Mutex<HashMap<u64, Waiter>>,
    next_id: AtomicU64,
    listeners: Mutex<Vec<mpsc::Sender<Arc<Json>>>>,
}

impl Bridge {
    /// Starts a sidecar for `agent_dir` (JSON lines; watches polled every 500 ms as a safety net). With
    /// `exit_with_it`, the process ends when the sidecar does: the sidecar takes SIGTERM as its orderly end, and the
    /// web server must not outlive it.
    pub fn start(agent_dir: &str, index_path: Option<String>, exit_with_it: bool) -> std::io::Result<Arc<Bridge>> {
        let (to_server_read, to_server_write) = std::io::pipe()?;
        let (from_server_read, from_server_write) = std::io::pipe()?;
        let config = Config {
            framing: Some(Framing::Jsonl),
            agent_dir: agent_dir.to_owned(),
            max_frame: 1 << 30,
            durability: crate::session::store::Durability::Entry,
            index_path,
            poll_interval: std::time::Duration::from_millis(500),
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
            match output.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            // The engine's own JSON: lone UTF-16 surrogates, which pi writes, survive (serde_json refuses them).
            let Ok(message) = Json::parse(line.trim_ascii_end()) else { continue };
            let id = match message.get("id") {
                Some(Json::Number(n)) => n.parse::<u64>().ok(),
                _ => None,
            };
            match id {
                Some(id) => {
                    let waiter = self.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
                    if let Some(w) = waiter {
                        let _ = w.send(outcome(message));
                    }
                }
                None => {
                    let shared = Arc::new(message);
                    self.listeners.lock().unwrap_or_else(|e| e.into_inner()).retain(|l| l.send(shared.clone()).is_ok());
                }
            }
        }
        // The sidecar is gone: nobody waiting will get an answer.
        for (_, w) in self.pending.lock().unwrap_or_else(|e| e.into_inner()).drain() {
            let _ = w.send(Err(Failure::io("the sidecar stopped")));
        }
    }

    /// Calls `method` and waits for its result.
    pub fn call(&self, method: &str, params: Json) -> Result<Json, Failure> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).insert(id, tx);
        let mut request = Object::new();
        request.insert("jsonrpc", Json::str("2.0"));
        request.insert("id", Json::number(id as f64));
        request.insert("method", Json::str(method));
        request.insert("params", params);
        let mut frame = Vec::new();
        Json::Object(request).write_preserving(&mut frame);
        frame.push(b'\n');
        let written = self.input.lock().unwrap_or_else(|e| e.into_inner()).write_all(&frame);
        if let Err(e) = written {
            self.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
            return Err(Failure::io(format!("the sidecar stopped: {e}")));
        }
        rx.recv().unwrap_or_else(|_| Err(Failure::io("the sidecar stopped")))
    }

    /// Every notification from now on (`session/changed`, …), as the sidecar sent it.
    pub fn listen(&self) -> mpsc::Receiver<Arc<Json>> {
        let (tx, rx) = mpsc::channel();
        self.listeners.lock().unwrap_or_else(|e| e.into_inner()).push(tx);
        rx
    }
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
