//! A minimal JSON-RPC host for tests: spawns the real `pi-sessiond` binary and talks to it over pipes, in either
//! framing, keeping every notification it receives in arrival order.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::Duration;

use pi_sessiond::session::json::{Json, Object};

use super::wire_check::WireCheck;

/// The binary under test.
pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_pi-sessiond")
}

/// Wire framing used by the test host.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Wire {
    /// LF-delimited JSON.
    Jsonl,
    /// LSP Content-Length headers.
    Lsp,
}

/// A running sidecar.
pub struct Sidecar {
    child: Child,
    stdin: Option<ChildStdin>,
    messages: Receiver<Json>,
    next_id: u64,
    wire: Wire,
    /// The agent directory given to a sidecar whose test did not choose one, so nothing is written to the real
    /// `~/.pi/agent` (the catalog index lives there).
    _agent_dir: Option<tempfile::TempDir>,
    /// Every message received that was not the response being waited for, in order.
    pub backlog: Vec<Json>,
    /// Every message received, checked against protocol/ (see wire_check.rs).
    wire_check: Arc<WireCheck>,
    /// The thread that reads and checks the output, joined at drop so every message sent is checked.
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Sidecar {
    /// Spawns the binary with extra arguments and environment.
    pub fn spawn(wire: Wire, args: &[&str], env: &[(&str, &str)]) -> Sidecar {
        let mut cmd = Command::new(binary());
        cmd.args(args).stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let chosen = args.contains(&"--agent-dir") || env.iter().any(|(k, _)| *k == "PI_CODING_AGENT_DIR");
        Sidecar::spawn_command(wire, cmd, chosen)
    }

    /// Spawns a command that runs the binary (through a shell that sets limits, say); `agent_dir_chosen` says
    /// whether the command already names an agent directory.
    pub fn spawn_command(wire: Wire, mut cmd: Command, agent_dir_chosen: bool) -> Sidecar {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        let chosen = agent_dir_chosen;
        let agent_dir = (!chosen).then(|| tempfile::tempdir().expect("temp agent dir"));
        if let Some(d) = &agent_dir {
            cmd.env("PI_CODING_AGENT_DIR", d.path());
        }
        let mut child = cmd.spawn().expect("spawn pi-sessiond");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        let wire_check = WireCheck::new();
        let checker = wire_check.clone();
        // The check converts and validates recursively, up to its depth limit (wire_check.rs): a roomy stack.
        let reader = std::thread::Builder::new()
            .stack_size(64 << 20)
            .spawn(move || {
                let mut r = BufReader::new(stdout);
                loop {
                    let body = match wire {
                        Wire::Jsonl => {
                            let mut line = Vec::new();
                            if r.read_until(b'\n', &mut line).unwrap_or(0) == 0 {
                                return;
                            }
                            line
                        }
                        Wire::Lsp => {
                            let mut len = None;
                            loop {
                                let mut h = String::new();
                                if r.read_line(&mut h).unwrap_or(0) == 0 {
                                    return;
                                }
                                let h = h.trim_end();
                                if h.is_empty() {
                                    break;
                                }
                                if let Some(v) = h.strip_prefix("Content-Length: ") {
                                    len = v.parse::<usize>().ok();
                                }
                            }
                            let mut body = vec![0; len.expect("Content-Length")];
                            r.read_exact(&mut body).unwrap();
                            body
                        }
                    };
                    let msg = Json::parse(&body).unwrap_or_else(|e| {
                        panic!("sidecar sent invalid JSON ({e}): {}", String::from_utf8_lossy(&body))
                    });
                    checker.received(&msg);
                    if tx.send(msg).is_err() {
                        return;
                    }
                }
            })
            .expect("a reader thread");
        let stdin = child.stdin.take();
        Sidecar {
            child,
            stdin,
            messages: rx,
            next_id: 0,
            wire,
            _agent_dir: agent_dir,
            backlog: Vec::new(),
            wire_check,
            reader: Some(reader),
        }
    }

    /// A JSONL sidecar with default arguments.
    pub fn new() -> Sidecar {
        Sidecar::spawn(Wire::Jsonl, &[], &[])
    }

    /// Writes raw bytes to the sidecar's stdin.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.wire_check.sent_raw(bytes);
        self.write(bytes);
    }

    fn write(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).unwrap();
        stdin.flush().unwrap();
    }

    /// Frames and sends a message.
    pub fn send(&mut self, msg: &Json) {
        self.wire_check.sent(msg);
        let body = msg.to_canonical_string();
        match self.wire {
            Wire::Jsonl => self.write(format!("{body}\n").as_bytes()),
            Wire::Lsp => self.write(format!("Content-Length: {}\r\n\r\n{body}", body.len()).as_bytes()),
        }
    }

    /// Sends a request without waiting; returns its id.
    pub fn start(&mut self, method: &str, params: Json) -> u64 {
        self.next_id += 1;
        let mut o = Object::new();
        o.insert("jsonrpc", Json::str("2.0"));
        o.insert("id", Json::number(self.next_id as f64));
        o.insert("method", Json::str(method));
        o.insert("params", params);
        self.send(&Json::Object(o));
        self.next_id
    }

    /// Sends a notification.
    pub fn notify(&mut self, method: &str, params: Json) {
        let mut o = Object::new();
        o.insert("jsonrpc", Json::str("2.0"));
        o.insert("method", Json::str(method));
        o.insert("params", params);
        self.send(&Json::Object(o));
    }

    /// The next message (from the backlog first).
    pub fn next_message(&mut self, timeout: Duration) -> Option<Json> {
        if !self.backlog.is_empty() {
            return Some(self.backlog.remove(0));
        }
        self.messages.recv_timeout(timeout).ok()
    }

    /// Waits for the response to `id`, keeping everything else in the backlog.
    pub fn response(&mut self, id: u64) -> Json {
        let answer = self.wait_response(id);
        self.wire_check.assert_clean();
        answer
    }

    fn wait_response(&mut self, id: u64) -> Json {
        let want = Json::number(id as f64);
        if let Some(i) = self.backlog.iter().position(|m| m.get("id") == Some(&want) && m.get("method").is_none()) {
            return self.backlog.remove(i);
        }
        loop {
            let m = self
                .messages
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("no response to request {id}"));
            if m.get("id") == Some(&want) && m.get("method").is_none() {
                return m;
            }
            self.backlog.push(m);
        }
    }

    /// Waits for the response to `id`, or for the process to close its output first (None): for a request the
    /// process may die in the middle of.
    pub fn response_or_exit(&mut self, id: u64) -> Option<Json> {
        let want = Json::number(id as f64);
        loop {
            match self.messages.recv_timeout(Duration::from_secs(60)) {
                Ok(m) if m.get("id") == Some(&want) && m.get("method").is_none() => return Some(m),
                Ok(m) => self.backlog.push(m),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return None,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("no response to request {id}, no exit"),
            }
        }
    }

    /// Sends a request and returns its `result`, panicking on an error response.
    pub fn call(&mut self, method: &str, params: Json) -> Json {
        let id = self.start(method, params);
        let r = self.response(id);
        match r.get("result") {
            Some(v) => v.clone(),
            None => panic!("{method} failed: {}", r.to_canonical_string()),
        }
    }

    /// Sends a request and returns its `result`, or its `error`: for a request that may go either way.
    pub fn call_result(&mut self, method: &str, params: Json) -> Result<Json, Json> {
        let id = self.start(method, params);
        let r = self.response(id);
        match (r.get("result"), r.get("error")) {
            (Some(v), _) => Ok(v.clone()),
            (None, Some(e)) => Err(e.clone()),
            (None, None) => panic!("{method}: neither result nor error: {}", r.to_canonical_string()),
        }
    }

    /// Sends a request and returns its `error`, panicking on success.
    pub fn call_err(&mut self, method: &str, params: Json) -> Json {
        let id = self.start(method, params);
        let r = self.response(id);
        match r.get("error") {
            Some(e) => e.clone(),
            None => panic!("{method} unexpectedly succeeded: {}", r.to_canonical_string()),
        }
    }

    /// Notifications with this method received so far (taken out of the backlog).
    pub fn take_notifications(&mut self, method: &str) -> Vec<Json> {
        let mine = |m: &Json| m.get("method").and_then(Json::as_js_str).is_some_and(|s| s.eq_str(method));
        let (taken, rest): (Vec<Json>, Vec<Json>) = std::mem::take(&mut self.backlog).into_iter().partition(mine);
        self.backlog = rest;
        taken
    }

    /// Closes stdin (end of input for the sidecar).
    pub fn close_stdin(&mut self) {
        drop(self.stdin.take());
    }

    /// Closes stdin and waits for the exit status.
    pub fn finish(mut self) -> i32 {
        drop(self.stdin.take());
        self.wait()
    }

    /// Waits for the process to exit (up to 30 s).
    pub fn wait(&mut self) -> i32 {
        for _ in 0..3000 {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        panic!("pi-sessiond did not exit");
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The output closes with the process; a grandchild holding it open must not hang the test, so the wait is
        // bounded (and the check then covers what was read).
        if let Some(reader) = self.reader.take() {
            for _ in 0..500 {
                if reader.is_finished() {
                    let _ = reader.join();
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        if !std::thread::panicking() {
            self.wire_check.assert_clean();
        }
    }
}

/// A sidecar started by hand, its stdin a pipe and its stdout `stdout`.
pub fn sidecar_writing_to(stdout: Stdio) -> Child {
    Command::new(binary()).arg("--no-index").stdin(Stdio::piped()).stdout(stdout).spawn().expect("spawn pi-sessiond")
}

/// Asks a sidecar started by hand to `initialize` and waits for its answer (by then it has set up its stdout).
pub fn initialize_over(stdin: &mut impl Write, stdout: &mut impl BufRead) {
    stdin.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{}}\n").unwrap();
    let mut answer = String::new();
    stdout.read_line(&mut answer).unwrap();
    assert!(answer.contains("\"result\""), "{answer}");
}
