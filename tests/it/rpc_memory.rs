//! The server driven in-process over [`Connection::memory`]: no process, no pipes, the host's end reading as
//! slowly as a pipe lets it. Used where a test must control exactly how much of the output the host has taken.

use std::time::Duration;

use pi_sessiond::rpc::{serve_connection, Config, Connection, MemoryHost};
use pi_sessiond::session::json::Json;
use pi_sessiond::session::store::Durability;

use crate::support::{big_session, json, s, temp_dir, user_message};

struct Host {
    io: MemoryHost,
    server: Option<std::thread::JoinHandle<i32>>,
    _agent: tempfile::TempDir,
}

impl Host {
    fn start() -> Host {
        let agent = temp_dir();
        let config = Config {
            framing: None,
            agent_dir: s(agent.path()),
            max_frame: 1 << 30,
            durability: Durability::Entry,
            index_path: None,
            poll_interval: Duration::from_secs(1),
            catalog: None,
        };
        let (connection, io) = Connection::memory();
        let server = std::thread::spawn(move || serve_connection(config, connection));
        Host { io, server: Some(server), _agent: agent }
    }

    fn send(&self, id: u64, method: &str, params: &str) {
        self.io.write(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#).as_bytes());
        self.io.write(b"\n");
    }

    fn line(&mut self) -> Json {
        let line = self.io.read_line(Duration::from_secs(30)).expect("a line from the server");
        json(std::str::from_utf8(&line).unwrap())
    }

    /// Ends the input and returns the server's exit status.
    fn finish(mut self) -> i32 {
        self.io.close_input();
        while self.io.read_bytes(Duration::from_secs(30)).is_some() {}
        self.server.take().unwrap().join().unwrap()
    }
}

#[test]
fn a_server_over_a_memory_connection_answers_pipelined_requests_and_ends_on_shutdown_and_exit() {
    let mut host = Host::start();
    host.send(1, "initialize", "{}");
    host.send(2, "session/inMemory", r#"{"handle":"m"}"#);
    for n in 0..3 {
        host.send(10 + n, "session/appendMessage", &format!(r#"{{"handle":"m","message":{}}}"#, user_message("x")));
    }
    host.send(20, "session/getEntryCount", r#"{"handle":"m"}"#);
    host.send(21, "shutdown", "{}");
    host.io.write(b"{\"jsonrpc\":\"2.0\",\"method\":\"exit\"}\n");
    let mut answers = Vec::new();
    let mut seqs = Vec::new();
    while answers.len() < 7 {
        let m = host.line();
        match m.get("method") {
            Some(_) => seqs.push(m.get("params").unwrap().get("seq").cloned().unwrap()),
            None => answers.push(m),
        }
    }
    assert!(answers.iter().all(|a| a.get("result").is_some()), "{answers:?}");
    let count = answers.iter().find(|a| a.get("id") == Some(&Json::number(20.0))).unwrap();
    assert_eq!(count.get("result"), Some(&Json::number(3.0)));
    assert_eq!(seqs, [1.0, 2.0, 3.0].map(Json::number));
    assert_eq!(host.finish(), 0);
}

#[test]
fn each_mutation_s_notification_comes_before_its_response() {
    let mut host = Host::start();
    host.send(1, "session/inMemory", r#"{"handle":"m"}"#);
    for n in 0..20 {
        host.send(10 + n, "session/appendMessage", &format!(r#"{{"handle":"m","message":{}}}"#, user_message("x")));
    }
    assert!(host.line().get("result").is_some());
    for n in 0..20 {
        let note = host.line();
        assert_eq!(note.get("method"), Some(&Json::str("session/changed")), "change {n} first");
        let answer = host.line();
        assert_eq!(answer.get("id"), Some(&Json::number(10.0 + n as f64)), "then its answer");
    }
    assert_eq!(host.finish(), 0);
}

#[test]
fn a_streamed_result_cut_short_by_a_truncated_file_is_followed_by_an_error_with_its_id() {
    let dir = temp_dir();
    let path = big_session(dir.path(), 32, 1 << 20, "\u{2028}");
    let mut host = Host::start();
    host.send(1, "session/open", &format!(r#"{{"path":"{path}","handle":"s"}}"#));
    assert!(host.line().get("result").is_some());
    host.send(2, "session/getEntries", r#"{"handle":"s"}"#);
    // The answer has started; the host has taken one piece of it and holds the rest back.
    let first = host.io.read_bytes(Duration::from_secs(30)).unwrap();
    assert!(first.starts_with(br#"{"jsonrpc":"2.0","id":2,"result":"#));
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(0).unwrap();
    let mut cut = first;
    let rest = host.io.read_line(Duration::from_secs(30)).unwrap();
    cut.extend_from_slice(&rest);
    assert!(Json::parse(&cut).is_err(), "the cut frame is not a result");
    assert!(cut.len() < 32 << 20, "it stopped early");
    let error = host.line();
    assert_eq!(error.get("id"), Some(&Json::number(2.0)));
    assert!(error.get("error").is_some(), "{}", error.to_canonical_string());
    // The server goes on.
    host.send(3, "initialize", "{}");
    assert!(host.line().get("result").is_some());
    assert_eq!(host.finish(), 0);
}

/// Reads one LSP frame's body from the host's end.
fn lsp_body(io: &mut MemoryHost, pending: &mut Vec<u8>) -> Vec<u8> {
    loop {
        if let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            let header = std::str::from_utf8(&pending[..end]).unwrap();
            let len: usize = header.strip_prefix("Content-Length: ").expect("a length header").parse().unwrap();
            if pending.len() >= end + 4 + len {
                let body = pending[end + 4..end + 4 + len].to_vec();
                pending.drain(..end + 4 + len);
                return body;
            }
        }
        pending.extend(io.read_bytes(Duration::from_secs(30)).expect("more of the frame"));
    }
}

#[test]
fn a_streamed_lsp_result_announces_exactly_its_escaped_length_and_equals_the_jsonl_one() {
    let dir = temp_dir();
    let path = big_session(dir.path(), 12, 1 << 20, "\u{2028}");
    let mut bodies = Vec::new();
    for lsp in [false, true] {
        let mut host = Host::start();
        let frame = |id: u64, method: &str, params: &str| {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#);
            if lsp {
                format!("Content-Length: {}\r\n\r\n{body}", body.len())
            } else {
                format!("{body}\n")
            }
        };
        host.io.write(frame(1, "session/open", &format!(r#"{{"path":"{path}","handle":"s"}}"#)).as_bytes());
        host.io.write(frame(2, "session/getEntries", r#"{"handle":"s"}"#).as_bytes());
        let mut pending = Vec::new();
        let mut read = |host: &mut Host| {
            if lsp {
                lsp_body(&mut host.io, &mut pending)
            } else {
                host.io.read_line(Duration::from_secs(30)).unwrap()
            }
        };
        read(&mut host);
        let body = read(&mut host);
        assert!(!body.windows(3).any(|w| w == "\u{2028}".as_bytes()), "U+2028 is escaped");
        let parsed = Json::parse(&body).unwrap_or_else(|e| panic!("lsp {lsp}: {e}"));
        let Some(Json::Array(entries)) = parsed.get("result") else { panic!() };
        assert_eq!(entries.len(), 12);
        bodies.push(parsed);
        assert_eq!(host.finish(), 0);
    }
    assert_eq!(bodies[0], bodies[1]);
}

/// The rest of a frame whose first piece is `first`, parsed.
fn rest_of_frame(host: &mut Host, mut first: Vec<u8>) -> Json {
    if !first.ends_with(b"\n") {
        first.extend(host.io.read_line(Duration::from_secs(30)).expect("the rest of the frame"));
    }
    Json::parse(first.strip_suffix(b"\n").unwrap_or(&first)).unwrap()
}

#[test]
fn a_full_snapshot_of_a_large_session_is_streamed_in_pieces_in_answers_and_in_notifications() {
    // A mirror of a 40 MB session must not need one 40 MB buffer on the server's side (issue 13).
    let dir = temp_dir();
    let path = big_session(dir.path(), 12, 1 << 20, "");
    let other_dir = temp_dir();
    let other = big_session(other_dir.path(), 12, 1 << 20, "\u{2028}");
    let mut host = Host::start();
    host.send(1, "session/open", &format!(r#"{{"path":"{path}","handle":"s","snapshot":"full"}}"#));
    let first = host.io.read_bytes(Duration::from_secs(30)).unwrap();
    assert!(first.starts_with(br#"{"jsonrpc":"2.0","id":1,"result":"#), "{}", String::from_utf8_lossy(&first));
    assert!(first.len() < 4 << 20, "the answer comes in pieces ({} bytes first)", first.len());
    let opened = rest_of_frame(&mut host, first);
    let snapshot = opened.get("result").unwrap().get("snapshot").unwrap();
    assert_eq!(snapshot.get("seq"), Some(&Json::number(0.0)));
    host.send(2, "session/getEntries", r#"{"handle":"s"}"#);
    let entries = host.line();
    assert_eq!(snapshot.get("entries"), entries.get("result"), "a full snapshot is getEntries");
    // A rebind to another large file: its notification carries the new snapshot, streamed too, before the answer.
    host.send(3, "session/setSessionFile", &format!(r#"{{"handle":"s","path":"{other}"}}"#));
    let first = host.io.read_bytes(Duration::from_secs(30)).unwrap();
    assert!(first.starts_with(br#"{"jsonrpc":"2.0","method":"session/changed","params":"#));
    assert!(first.len() < 4 << 20, "the notification comes in pieces ({} bytes first)", first.len());
    let note = rest_of_frame(&mut host, first);
    let change = note.get("params").unwrap().get("change").unwrap();
    assert_eq!(change.get("kind"), Some(&Json::str("rebind")));
    let Some(Json::Array(rebound)) = change.get("snapshot").and_then(|s| s.get("entries")) else { panic!() };
    assert_eq!(rebound.len(), 12);
    assert!(host.line().get("result").is_some());
    host.send(4, "session/getEntries", r#"{"handle":"s"}"#);
    assert_eq!(Some(&Json::Array(rebound.clone())), host.line().get("result"));
    assert_eq!(host.finish(), 0);
}
