//! Test support: pi's own SessionManager as an oracle (`tests/conformance/oracle.mjs` under Node), the
//! deterministic ids and clock both sides share, and a JSON comparison that says where two values differ.

pub mod faults;
pub mod faulty_disk;
pub mod postgres;
pub mod pty;
pub mod sidecar;
pub mod soak;
pub mod wire_check;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use pi_sessiond::session::ids::{Clock, IdSource, UuidV7State};
use pi_sessiond::session::json::value::number_value;
use pi_sessiond::session::json::{JsString, Json};
use pi_sessiond::session::Env;

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs the oracle with one JSON request and returns its parsed answer.
pub fn oracle(request: &Json) -> Json {
    let dir = repo().join("tests/conformance");
    assert!(
        dir.join("node_modules/@earendil-works/pi-coding-agent/package.json").exists(),
        "the conformance oracle needs pi 1.6.0 installed: run `npm ci` in tests/conformance (the README's test \
         command does this)"
    );
    let mut child = Command::new("node")
        .arg(dir.join("oracle.mjs"))
        .env("TZ", "UTC")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("the conformance tests need `node` (20+) on PATH: {e}"));
    let mut stdin = child.stdin.take().expect("stdin");
    let input = request.to_canonical_string();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("oracle ran");
    writer.join().expect("writer").expect("wrote request");
    assert!(out.status.success(), "oracle failed: {}", String::from_utf8_lossy(&out.stderr));
    Json::parse(&out.stdout).expect("oracle prints JSON")
}

/// Starts the oracle with a request and returns at once (for pi writing while the test does something else).
pub fn spawn_oracle(request: &Json) -> (std::process::Child, std::thread::JoinHandle<()>) {
    let dir = repo().join("tests/conformance");
    let mut child = Command::new("node")
        .arg(dir.join("oracle.mjs"))
        .env("TZ", "UTC")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("the conformance tests need `node` (20+) on PATH: {e}"));
    let mut stdin = child.stdin.take().expect("stdin");
    let input = request.to_canonical_string();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    (child, writer)
}

/// Waits for an oracle started with [`spawn_oracle`] and returns its answer.
pub fn finish_oracle((child, writer): (std::process::Child, std::thread::JoinHandle<()>)) -> Json {
    let out = child.wait_with_output().expect("oracle ran");
    writer.join().expect("writer");
    assert!(out.status.success(), "oracle failed");
    Json::parse(&out.stdout).expect("oracle prints JSON")
}

/// mulberry32, the generator `oracle.mjs` uses for `crypto.randomUUID` and `crypto.getRandomValues`.
#[derive(Clone, Debug)]
pub struct Mulberry(u32);

impl Mulberry {
    /// A generator with this seed.
    pub fn new(seed: u32) -> Self {
        Mulberry(seed)
    }

    /// The next 32 bits.
    pub fn next_u32(&mut self) -> u32 {
        self.0 = self.0.wrapping_add(0x6d2b_79f5);
        let a = self.0;
        let mut t = (a ^ (a >> 15)).wrapping_mul(1 | a);
        t = t.wrapping_add((t ^ (t >> 7)).wrapping_mul(61 | t)) ^ t;
        t ^ (t >> 14)
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let v = self.next_u32();
            for k in 0..4 {
                if out.len() < n {
                    out.push((v >> (8 * k)) as u8);
                }
            }
        }
        out
    }
}

/// The deterministic sources of one oracle run, shared by every manager a test creates (as the oracle's are
/// shared by every manager it creates in one process).
#[derive(Clone)]
pub struct Deterministic {
    inner: Arc<Mutex<(Mulberry, Mulberry, f64)>>,
    v7: Arc<Mutex<UuidV7State>>,
}

/// The oracle's fake clock starts here: 2026-01-01T00:00:00.000Z.
pub const START_MS: f64 = 1_767_225_600_000.0;

impl Deterministic {
    /// Fresh sources, in the state a fresh oracle process starts in.
    pub fn new() -> Self {
        Deterministic {
            inner: Arc::new(Mutex::new((Mulberry::new(1), Mulberry::new(2), START_MS))),
            v7: Arc::new(Mutex::new(UuidV7State::default())),
        }
    }

    /// An engine environment drawing from these sources.
    pub fn env(&self) -> Env {
        Env {
            ids: Box::new(self.clone()),
            clock: Box::new(self.clone()),
            v7: self.v7.clone(),
            agent_dir: None,
            keep: None,
            disk: pi_sessiond::session::store::real_disk(),
            skeletons: true,
        }
    }

    /// Moves the clock forward.
    pub fn tick(&self, ms: f64) {
        self.inner.lock().unwrap().2 += ms;
    }
}

impl IdSource for Deterministic {
    fn random_uuid(&mut self) -> String {
        let mut b = self.inner.lock().unwrap().0.bytes(16);
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
        format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
    }

    fn random_bytes(&mut self) -> [u8; 16] {
        self.inner.lock().unwrap().1.bytes(16).try_into().unwrap()
    }
}

impl Clock for Deterministic {
    fn now_ms(&mut self) -> f64 {
        self.inner.lock().unwrap().2
    }
}

/// Where two JSON values first differ (None when equal). Objects compare as maps (key order is not part of a
/// JavaScript value's identity for `deepStrictEqual`), numbers by value (the oracle prints `JSON.stringify`'s
/// spelling; we keep the file's).
pub fn json_diff(path: &str, a: &Json, b: &Json) -> Option<String> {
    match (a, b) {
        (Json::Number(x), Json::Number(y)) if number_value(x) == number_value(y) => None,
        (Json::Array(x), Json::Array(y)) => {
            if x.len() != y.len() {
                return Some(format!("{path}: array lengths {} vs {}", x.len(), y.len()));
            }
            x.iter().zip(y).enumerate().find_map(|(i, (p, q))| json_diff(&format!("{path}[{i}]"), p, q))
        }
        (Json::Object(x), Json::Object(y)) => {
            for (k, v) in x.iter() {
                let key = k.to_string_lossy();
                match y.iter().find(|(k2, _)| *k2 == k) {
                    None => return Some(format!("{path}.{key}: missing on the right (left: {})", short(v))),
                    Some((_, w)) => {
                        if let Some(d) = json_diff(&format!("{path}.{key}"), v, w) {
                            return Some(d);
                        }
                    }
                }
            }
            y.iter()
                .find(|(k, _)| !x.iter().any(|(k2, _)| k2 == *k))
                .map(|(k, v)| format!("{path}.{}: missing on the left (right: {})", k.to_string_lossy(), short(v)))
        }
        _ if a == b => None,
        _ => Some(format!("{path}: {} vs {}", short(a), short(b))),
    }
}

fn short(v: &Json) -> String {
    let s = v.to_canonical_string();
    if s.len() > 300 {
        format!("{}…", &s[..s.char_indices().take_while(|(i, _)| *i < 300).last().map_or(0, |(i, _)| i)])
    } else {
        s
    }
}

/// Replaces every occurrence of `from` with `to` inside the strings of a JSON value (the oracle and the engine
/// run the same scenario under different directories).
pub fn replace_in_strings(v: &Json, from: &str, to: &str) -> Json {
    match v {
        Json::String(s) => match s.as_str() {
            Some(text) if text.contains(from) => Json::String(JsString::from(text.replace(from, to))),
            _ => v.clone(),
        },
        Json::Array(items) => Json::Array(items.iter().map(|i| replace_in_strings(i, from, to)).collect()),
        Json::Object(o) => Json::Object(o.iter().map(|(k, x)| (k.clone(), replace_in_strings(x, from, to))).collect()),
        _ => v.clone(),
    }
}

/// A fresh temporary directory (removed when dropped).
pub fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("pi-sessiond-test-").tempdir().expect("temp dir")
}

/// Builds a JSON value from text (test literals).
pub fn json(text: &str) -> Json {
    Json::parse(text.as_bytes()).unwrap_or_else(|e| panic!("bad test JSON {text}: {e}"))
}

/// A JSON string's text (panics on anything else).
pub fn str_of(v: &Json) -> String {
    v.as_js_str().map(|s| s.to_string_lossy()).unwrap_or_else(|| panic!("not a string: {}", v.to_canonical_string()))
}

/// A user message as the protocol takes it.
pub fn user_message(text: &str) -> String {
    format!(r#"{{"role":"user","content":"{text}","timestamp":1}}"#)
}

/// Writes a version 1 session (a header and one message, no ids) to `path`: the first write migrates it with a
/// rewrite.
pub fn write_v1_session(path: &str) {
    std::fs::write(
        path,
        concat!(
            r#"{"type":"session","id":"old","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#,
            "\n",
            r#"{"type":"message","timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"a","timestamp":1}}"#,
            "\n"
        ),
    )
    .unwrap();
}

/// A path as a string.
pub fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// A session file of `entries` user messages whose content is `bytes` of `x` then `tail`, written directly (as a
/// large session pi wrote would be), in `dir`; returns its path.
pub fn big_session(dir: &Path, entries: usize, bytes: usize, tail: &str) -> String {
    use std::io::Write;
    let path = dir.join("big.jsonl");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    writeln!(f, r#"{{"type":"session","version":3,"id":"big","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}}"#)
        .unwrap();
    let body = format!("{}{tail}", "x".repeat(bytes));
    let mut parent = "null".to_owned();
    for n in 0..entries {
        let id = format!("e{n:07}");
        writeln!(
            f,
            r#"{{"type":"message","id":"{id}","parentId":{parent},"timestamp":"2025-01-01T00:00:01.000Z","message":{{"role":"user","content":"{body}","timestamp":1}}}}"#
        )
        .unwrap();
        parent = format!("\"{id}\"");
    }
    f.flush().unwrap();
    s(&path)
}
