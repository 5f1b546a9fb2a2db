//! A hostile host and a hostile environment, through the real binary (issue 11): a stderr that fails or is never
//! read, a host that stops reading stdout, results far larger than memory should allow, garbage between LSP
//! frames, frames that would expand in memory, failed opens under a descriptor limit, and a catalog call that
//! hangs. Memory is judged from the server's own `/proc` figures against the size of what was asked, never by time.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use pi_sessiond::session::json::Json;

use crate::support::sidecar::{binary, Sidecar, Wire};
use crate::support::{big_session, json, s, str_of, temp_dir};

fn kind_of(e: &Json) -> String {
    str_of(e.get("data").and_then(|d| d.get("kind")).expect("data.kind"))
}

/// A figure from `/proc/<pid>/status`, in bytes (`VmRSS`, `VmHWM`).
fn status_bytes(pid: u32, field: &str) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("{field} in {status}"));
    line.split_whitespace().nth(1).unwrap().parse::<usize>().unwrap() * 1024
}

/// The server's resident memory now.
fn rss(pid: u32) -> usize {
    status_bytes(pid, "VmRSS:")
}

/// The most resident memory the server has had.
fn peak(pid: u32) -> usize {
    status_bytes(pid, "VmHWM:")
}

/// A server driven with raw lines (no parsing of large answers on the test's side).
struct Raw {
    child: Child,
    out: BufReader<ChildStdout>,
    _agent: tempfile::TempDir,
}

impl Raw {
    fn spawn(args: &[&str], stderr: Stdio) -> Raw {
        let agent = temp_dir();
        let mut child = Command::new(binary())
            .args(args)
            .env("PI_CODING_AGENT_DIR", agent.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        Raw { child, out, _agent: agent }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
    }

    /// The next line the server wrote.
    fn line(&mut self) -> Vec<u8> {
        let mut line = Vec::new();
        assert!(self.out.read_until(b'\n', &mut line).unwrap() > 0, "the server's output ended");
        line
    }

    /// The next line, parsed (for small answers).
    fn message(&mut self) -> Json {
        json(std::str::from_utf8(&self.line()).unwrap().trim_end())
    }

    /// The next answer (notifications skipped).
    fn answer(&mut self) -> Json {
        loop {
            let m = self.message();
            if m.get("method").is_none() {
                return m;
            }
        }
    }

    fn finish(mut self) -> i32 {
        drop(self.child.stdin.take());
        let mut rest = Vec::new();
        let _ = self.out.read_to_end(&mut rest);
        self.child.wait().unwrap().code().unwrap_or(-1)
    }
}

fn request(id: u64, method: &str, params: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#)
}

/// Lines that make the server log a warning each: frames over `--max-frame-bytes 100`.
fn warnings_and_a_request(n: usize) -> Vec<String> {
    let mut lines: Vec<String> =
        (0..n).map(|i| format!(r#"{{"jsonrpc":"2.0","id":{i},"pad":"{}"}}"#, "y".repeat(200))).collect();
    lines.push(request(1_000_000, "initialize", "{}"));
    lines
}

#[test]
fn a_stderr_on_a_full_device_never_stops_the_server_issue_11() {
    let mut raw = Raw::spawn(
        &["--max-frame-bytes", "100", "--log-level", "debug"],
        Stdio::from(std::fs::File::options().write(true).open("/dev/full").unwrap()),
    );
    for line in warnings_and_a_request(20) {
        raw.send(&line);
    }
    for _ in 0..20 {
        assert_eq!(raw.answer().get("error").and_then(|e| e.get("code")), Some(&Json::number(-32700.0)));
    }
    assert!(raw.answer().get("result").is_some(), "still answering after failed log writes");
    assert_eq!(raw.finish(), 0, "no panic (status 101) at the first warning");
}

#[test]
fn a_stderr_whose_reader_is_gone_never_stops_the_server_issue_11() {
    let mut raw = Raw::spawn(&["--max-frame-bytes", "100", "--log-level", "debug"], Stdio::piped());
    drop(raw.child.stderr.take());
    for line in warnings_and_a_request(20) {
        raw.send(&line);
    }
    for _ in 0..20 {
        raw.answer();
    }
    assert!(raw.answer().get("result").is_some());
    assert_eq!(raw.finish(), 0);
}

#[test]
fn a_stderr_pipe_nobody_reads_never_stops_the_server_issue_11() {
    // Far more than a pipe's 64 KiB of log: every frame is logged at debug, and each bad one warns too.
    let mut raw = Raw::spawn(&["--max-frame-bytes", "100", "--log-level", "debug"], Stdio::piped());
    let _unread = raw.child.stderr.take();
    let lines = warnings_and_a_request(2000);
    for line in &lines {
        raw.send(line);
    }
    for _ in 0..2000 {
        raw.answer();
    }
    assert!(raw.answer().get("result").is_some(), "answers keep coming while stderr is full");
    assert_eq!(raw.finish(), 0);
}

#[test]
fn a_host_that_stops_reading_holds_back_the_servers_input_not_its_memory_issue_11() {
    let dir = temp_dir();
    let path = big_session(dir.path(), 1, 33_000, "");
    let mut raw = Raw::spawn(&["--no-index"], Stdio::inherit());
    raw.send(&request(1, "session/open", &format!(r#"{{"path":"{path}","handle":"s"}}"#)));
    assert!(raw.answer().get("result").is_some());
    let before = rss(raw.child.id());
    // 3,000 answers of 33 KB (about 100 MB) asked for, while the host reads nothing.
    const N: u64 = 3000;
    let mut stdin = raw.child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        for id in 0..N {
            let line = request(10 + id, "session/getEntries", r#"{"handle":"s"}"#) + "\n";
            if stdin.write_all(line.as_bytes()).is_err() {
                return None;
            }
        }
        Some(stdin)
    });
    // The host pauses; a server that buffers without limit grows meanwhile, one that holds back its input does not.
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while !writer.is_finished() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let grown = peak(raw.child.id()).saturating_sub(before);
    // Now read everything: every request is answered.
    let mut answered = 0;
    while answered < N {
        let line = raw.line();
        assert!(
            line.starts_with(br#"{"jsonrpc":"2.0","id":"#) && line.len() > 33_000,
            "{}",
            String::from_utf8_lossy(&line[..200.min(line.len())])
        );
        answered += 1;
    }
    let stdin = writer.join().unwrap().expect("every request was written");
    drop(stdin);
    assert!(grown < 40 << 20, "the server grew by {} MB while 100 MB of answers waited for the host", grown >> 20);
    let _ = raw.child.wait();
}

#[test]
fn results_larger_than_the_memory_they_may_take_are_streamed_from_the_file_issue_11() {
    let dir = temp_dir();
    // 32 MB of entries: each read below returns about that much.
    let path = big_session(dir.path(), 32, 1 << 20, "");
    for wire in [Wire::Jsonl, Wire::Lsp] {
        let mut sc = Sidecar::spawn(wire, &["--no-index"], &[]);
        sc.call("session/open", json(&format!(r#"{{"path":"{path}","handle":"s"}}"#)));
        for method in ["session/getEntries", "session/buildSessionContext", "session/getBranch"] {
            let before = rss(sc.pid());
            let result = sc.call(method, json(r#"{"handle":"s"}"#));
            let grown = peak(sc.pid()).saturating_sub(before);
            let entries = match method {
                "session/buildSessionContext" => result.get("messages").cloned().unwrap(),
                _ => result,
            };
            let Json::Array(entries) = &entries else { panic!("{method}") };
            assert_eq!(entries.len(), 32, "{method}: the whole result came ({wire:?})");
            assert!(grown < 16 << 20, "{method} ({wire:?}): the server grew by {} MB for a 32 MB result", grown >> 20);
        }
    }
}

#[test]
fn a_fork_and_a_branched_session_are_written_as_they_are_read_not_held_whole_in_memory() {
    let dir = temp_dir();
    // 64 MB of entries, each copied whole into the new session.
    let path = big_session(dir.path(), 64, 1 << 20, "");
    let small_dir = dir.path().join("small");
    std::fs::create_dir_all(&small_dir).unwrap();
    let small = big_session(&small_dir, 2, 10, "");
    let out = s(&dir.path().join("forks"));
    let mut sc = Sidecar::spawn(Wire::Jsonl, &["--no-index"], &[]);
    // The same calls on a small session first: the binary's code they run is resident before the peak is read.
    sc.call("session/forkFrom", json(&format!(r#"{{"sourcePath":"{small}","targetCwd":"/p","sessionDir":"{out}"}}"#)));
    sc.call("session/open", json(&format!(r#"{{"path":"{small}","handle":"warm"}}"#)));
    sc.call("session/createBranchedSession", json(r#"{"handle":"warm","leafId":"e0000001"}"#));
    let before = rss(sc.pid());
    let fork = sc.call(
        "session/forkFrom",
        json(&format!(r#"{{"sourcePath":"{path}","targetCwd":"/p","sessionDir":"{out}","handle":"f"}}"#)),
    );
    let forked = str_of(fork.get("sessionFile").expect("the fork's file"));
    assert_eq!(std::fs::read_to_string(&forked).unwrap().lines().count(), 65, "the header and every entry");
    let grown = peak(sc.pid()).saturating_sub(before);
    assert!(grown < 24 << 20, "forkFrom: the server grew by {} MB copying 64 MB", grown >> 20);

    sc.call("session/open", json(&format!(r#"{{"path":"{path}","handle":"s"}}"#)));
    let before = peak(sc.pid());
    let branched = sc.call("session/createBranchedSession", json(r#"{"handle":"s","leafId":"e0000063"}"#));
    let file = str_of(branched.get("path").expect("the branched session's file"));
    assert_eq!(std::fs::read_to_string(&file).unwrap().lines().count(), 65, "the header and the path to the leaf");
    let grown = peak(sc.pid()).saturating_sub(before);
    assert!(grown < 24 << 20, "createBranchedSession: the server grew by {} MB writing 64 MB", grown >> 20);
}

#[test]
fn garbage_between_lsp_frames_costs_only_the_frame_it_hits() {
    let mut sc = Sidecar::spawn(Wire::Lsp, &["--framing", "lsp", "--max-frame-bytes", "1000"], &[]);
    let frame = |id: u64| {
        let body = request(id, "initialize", "{}");
        format!("Content-Length: {}\r\n\r\n{body}", body.len())
    };
    let expect_error_then_answer = |sc: &mut Sidecar, garbage: String, id: u64| {
        sc.send_raw(format!("{garbage}{}", frame(id)).as_bytes());
        let e = sc.next_message(Duration::from_secs(20)).expect("an error for the garbage");
        assert_eq!(e.get("error").and_then(|e| e.get("code")), Some(&Json::number(-32700.0)), "{garbage:?}");
        assert!(sc.response(id).get("result").is_some(), "the frame after {garbage:?} is answered");
    };
    expect_error_then_answer(&mut sc, "garbage without a colon\r\n".into(), 1);
    expect_error_then_answer(&mut sc, "Content-Length: twelve\r\n\r\n{\"unknown\":\"length\"}".into(), 2);
    expect_error_then_answer(&mut sc, "Content-Length: 99999999999999999999999999\r\n\r\n[1,2,3]".into(), 3);
    // Over the limit: exactly the announced body is skipped, even when it looks like frames.
    let inside = frame(99).repeat(20);
    expect_error_then_answer(&mut sc, format!("Content-Length: {}\r\n\r\n{inside}", inside.len()), 4);
    assert!(
        sc.take_notifications("x").is_empty() && sc.backlog.is_empty(),
        "request 99 inside the skipped body never ran"
    );
}

#[test]
fn a_frame_of_millions_of_tiny_numbers_is_refused_before_it_is_parsed_issue_11() {
    let mut raw = Raw::spawn(&["--no-index"], Stdio::inherit());
    raw.send(&request(1, "session/inMemory", r#"{"handle":"m"}"#));
    raw.answer();
    let before = rss(raw.child.id());
    // 20 MB of frame; parsed, it would take about 40 times that.
    let zeros = vec!["0"; 10_000_000].join(",");
    raw.send(&request(
        2,
        "session/appendMessage",
        &format!(r#"{{"handle":"m","message":{{"role":"user","content":[{zeros}]}}}}"#),
    ));
    let e = raw.answer();
    let e = e.get("error").unwrap_or_else(|| panic!("refused: {}", e.to_canonical_string()));
    assert_eq!(
        (kind_of(e), e.get("data").unwrap().get("path")),
        ("invalid_params".into(), Some(&Json::str("message")))
    );
    let grown = peak(raw.child.id()).saturating_sub(before);
    assert!(grown < 100 << 20, "the server grew by {} MB for a 20 MB frame", grown >> 20);
    raw.send(&request(3, "session/getEntryCount", r#"{"handle":"m"}"#));
    assert_eq!(raw.answer().get("result"), Some(&Json::number(0.0)), "nothing was appended");
    assert_eq!(raw.finish(), 0);
}

/// A session file pi opens whose name pi cannot read (`getSessionName` throws): opening it fails here.
fn unnamed_session(path: &std::path::Path, name: &str) {
    std::fs::write(
        path,
        format!(
            "{}\n{}\n{}\n",
            r#"{"type":"session","version":3,"id":"n","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#,
            r#"{"type":"message","id":"m1","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"hi","timestamp":1}}"#,
            format_args!(r#"{{"type":"session_info","id":"i1","parentId":"m1","timestamp":"2025-01-01T00:00:02.000Z","name":{name}}}"#)
        ),
    )
    .unwrap();
}

#[test]
fn a_failed_open_leaves_no_handle_behind_and_the_fixed_file_then_opens_issue_11() {
    let dir = temp_dir();
    let path = dir.path().join("n.jsonl");
    unnamed_session(&path, "5");
    let mut sc = Sidecar::new();
    let id = sc.start("session/open", json(&format!(r#"{{"path":"{}"}}"#, s(&path))));
    let first = sc.response(id);
    if let Some(st) = first.get("result") {
        // An engine that opens what pi opens: nothing failed, so nothing can be left behind; close it.
        sc.call("session/close", json(&format!(r#"{{"handle":"{}"}}"#, str_of(st.get("handle").unwrap()))));
    }
    unnamed_session(&path, r#""fixed""#);
    let st = sc.call("session/open", json(&format!(r#"{{"path":"{}"}}"#, s(&path))));
    assert_eq!(
        st.get("sessionName"),
        Some(&Json::str("fixed")),
        "not what the failed open saw: {}",
        first.to_canonical_string()
    );
}

#[test]
fn three_hundred_failed_opens_under_a_256_descriptor_limit_leave_opens_and_listings_working_issue_11() {
    let root = temp_dir();
    let dir = root.path().join("sessions");
    std::fs::create_dir(&dir).unwrap();
    // Files an open refuses (no session header): each open reads it, fails, and must let its descriptor go.
    for n in 0..300 {
        std::fs::write(dir.join(format!("bad{n:03}.jsonl")), "not a session\n").unwrap();
    }
    let good = s(&dir.join("good.jsonl"));
    std::fs::write(
        &good,
        r#"{"type":"session","version":3,"id":"g","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#.to_owned()
            + "\n",
    )
    .unwrap();
    let mut cmd = Command::new("sh");
    cmd.args(["-c", r#"ulimit -n 256 && exec "$0" "$@""#, binary(), "--no-index"]).stderr(Stdio::inherit());
    let mut limited = Sidecar::spawn_command(Wire::Jsonl, cmd, false);
    let ids: Vec<u64> = (0..300)
        .map(|n| {
            limited
                .start("session/open", json(&format!(r#"{{"path":"{}"}}"#, s(&dir.join(format!("bad{n:03}.jsonl"))))))
        })
        .collect();
    for id in ids {
        assert!(limited.response(id).get("error").is_some());
    }
    let st = limited.call("session/open", json(&format!(r#"{{"path":"{good}"}}"#)));
    assert_eq!(st.get("sessionFile"), Some(&Json::str(&good)));
    let listed = limited.call("sessions/listAll", json(&format!(r#"{{"sessionDir":"{}"}}"#, s(&dir))));
    let expected = Sidecar::spawn(Wire::Jsonl, &["--no-index"], &[])
        .call("sessions/listAll", json(&format!(r#"{{"sessionDir":"{}"}}"#, s(&dir))));
    let Json::Array(items) = &listed else { panic!() };
    assert!(!items.is_empty(), "a listing under the limit is not silently empty");
    assert_eq!(listed, expected);
}

#[test]
fn a_hanging_catalog_call_does_not_keep_the_server_from_exiting_after_input_closes_issue_11() {
    let dir = temp_dir();
    let fifo = dir.path().join("stuck.jsonl");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let mut sc = Sidecar::spawn(Wire::Jsonl, &["--no-index"], &[]);
    let listed = sc.start("sessions/listAll", json(&format!(r#"{{"sessionDir":"{}"}}"#, s(dir.path()))));
    // Whether or not the listing gets past the FIFO, the end of input ends the process (status 0) and every
    // request sent is answered.
    sc.close_stdin();
    let r = sc.response(listed);
    assert!(r.get("result").is_some() || r.get("error").is_some());
    assert_eq!(sc.wait(), 0);
}

#[test]
fn closing_a_big_session_gives_the_memory_it_took_back_to_the_system() {
    // Its records, ids and index are small blocks, which glibc keeps for the process once freed: a web view that
    // showed a big session stayed 170 MB above its start with no page open (helper 34's trial).
    let dir = temp_dir();
    let path = dir.path().join("many.jsonl");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        writeln!(
            f,
            r#"{{"type":"session","version":3,"id":"many","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}}"#
        )
        .unwrap();
        for i in 0..80_000u32 {
            let parent = if i == 0 { "null".to_owned() } else { format!("\"e{:07}\"", i - 1) };
            writeln!(
                f,
                r#"{{"type":"message","id":"e{i:07}","parentId":{parent},"timestamp":"2025-01-01T00:00:01.000Z","message":{{"role":"user","content":"message number {i} of many, a line of ordinary length","timestamp":1}}}}"#
            )
            .unwrap();
        }
    }
    let mut server = Raw::spawn(&["--no-index"], Stdio::null());
    server.send(&request(1, "initialize", "{}"));
    server.answer();
    let pid = server.child.id();
    let before = rss(pid);
    server.send(&request(2, "session/open", &format!(r#"{{"path":"{}","handle":"big"}}"#, s(&path))));
    assert!(server.answer().get("result").is_some());
    server.send(&request(3, "session/getTreeFlat", r#"{"handle":"big"}"#));
    server.line();
    let open = rss(pid);
    assert!(open > before + (20 << 20), "the open took memory: {before} → {open}");
    server.send(&request(4, "session/close", r#"{"handle":"big"}"#));
    assert!(server.answer().get("result").is_some());
    let closed = rss(pid);
    assert!(
        closed < before + (open - before) / 3,
        "closed, most of it is given back: {} MiB at start, {} open, {} closed",
        before >> 20,
        open >> 20,
        closed >> 20
    );
    assert_eq!(server.finish(), 0);
}
