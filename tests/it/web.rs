//! `pi-sessiond web` under load and abuse from outside, as an adversary on the same machine would try it: many
//! connections, idle ones, big tokenless bodies, an event reader that stops reading while sessions grow, and
//! paths outside the agent directory. The server must keep serving with bounded memory and never say which
//! files exist. (The page itself is tested in Chromium: tests/web.)

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::sidecar::binary;
use crate::support::{s, temp_dir};

/// A running `pi-sessiond web` over an agent directory holding one small session.
struct Web {
    child: Child,
    port: u16,
    token: String,
    session: String,
    agent: tempfile::TempDir,
}

impl Drop for Web {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const SESSION_ID: &str = "0194aaaa-0000-7000-8000-000000000001";

impl Web {
    fn start() -> Web {
        let agent = temp_dir();
        let project = agent.path().join("sessions").join("--p--");
        std::fs::create_dir_all(&project).unwrap();
        let session = project.join(format!("2026-01-01T00-00-00-000Z_{SESSION_ID}.jsonl"));
        std::fs::write(
            &session,
            format!(
                "{{\"type\":\"session\",\"version\":3,\"id\":\"{SESSION_ID}\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/p\"}}\n\
                 {{\"type\":\"message\",\"id\":\"m0\",\"parentId\":null,\"timestamp\":\"2026-01-01T00:00:01.000Z\",\"message\":{{\"role\":\"user\",\"content\":\"hello\",\"timestamp\":1}}}}\n"
            ),
        )
        .unwrap();
        let mut command = Command::new(binary());
        command
            .args(["--agent-dir", &s(agent.path()), "web", "--port", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        // The usual limit of a desktop session, which the old thread-per-connection server ran out of.
        // SAFETY: between fork and exec only setrlimit is called, which is async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                let limit = rustix::process::Rlimit { current: Some(1024), maximum: Some(1024) };
                rustix::process::setrlimit(rustix::process::Resource::Nofile, limit).map_err(std::io::Error::from)
            });
        }
        let mut child = command.spawn().expect("pi-sessiond web starts");
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
        let url = first.trim().strip_prefix("http://127.0.0.1:").unwrap_or_else(|| panic!("first line: {first}"));
        let (port, rest) = url.split_once('/').unwrap();
        let token = rest.strip_prefix("?token=").unwrap().to_owned();
        Web { child, port: port.parse().unwrap(), token, session: s(&session), agent }
    }

    fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        stream
    }

    /// One request on its own connection: the status and the body.
    fn request(&self, method: &str, target: &str) -> (u16, String) {
        let mut stream = self.connect();
        let head = format!("{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n", self.port);
        stream.write_all(head.as_bytes()).unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).expect("an answer");
        parse_answer(&answer).unwrap_or_else(|| panic!("not HTTP: {}", String::from_utf8_lossy(&answer)))
    }

    /// A POST with a body on its own connection: the status and the body.
    fn post(&self, target: &str, body: &str) -> (u16, String) {
        let mut stream = self.connect();
        let head = format!(
            "POST {target} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.port,
            body.len()
        );
        stream.write_all(head.as_bytes()).unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).expect("an answer");
        parse_answer(&answer).unwrap_or_else(|| panic!("not HTTP: {}", String::from_utf8_lossy(&answer)))
    }

    fn tokened(&self, method: &str, path: &str, query: &str) -> (u16, String) {
        self.request(method, &format!("{path}?token={}{query}", self.token))
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    fn rss(&self) -> usize {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse::<usize>().unwrap() * 1024
    }
}

/// The status and body of a whole HTTP/1.1 answer.
fn parse_answer(answer: &[u8]) -> Option<(u16, String)> {
    let text = String::from_utf8_lossy(answer);
    let status = text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Some((status, body))
}

fn percent(path: &str) -> String {
    path.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

const MB: usize = 1 << 20;

#[test]
fn two_hundred_concurrent_connections_are_each_served_or_refused_and_the_server_stays_up() {
    let mut web = Web::start();
    let (port, token) = (web.port, web.token.clone());
    let clients: Vec<_> = (0..200)
        .map(|_| {
            let token = token.clone();
            std::thread::spawn(move || {
                let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else { return "not connected".to_owned() };
                stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                let head = format!(
                    "GET /api/sessions?token={token} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
                );
                let _ = stream.write_all(head.as_bytes());
                let mut answer = Vec::new();
                match stream.read_to_end(&mut answer) {
                    _ if answer.is_empty() => "closed".to_owned(),
                    _ => parse_answer(&answer).map(|(status, _)| status.to_string()).unwrap_or("garbled".into()),
                }
            })
        })
        .collect();
    let outcomes: Vec<String> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let served = outcomes.iter().filter(|o| *o == "200").count();
    let refused = outcomes.iter().filter(|o| *o == "503" || *o == "closed").count();
    assert_eq!(served + refused, 200, "each is served or refused: {outcomes:?}");
    assert!(served > 0, "{outcomes:?}");
    assert!(web.alive(), "the server is still running");
    assert_eq!(web.tokened("GET", "/api/sessions", "").0, 200);
}

#[test]
fn five_hundred_idle_connections_and_a_hundred_tokenless_4mb_bodies_leave_a_tokened_request_served() {
    let mut web = Web::start();
    let idle: Vec<TcpStream> = (0..500).map(|_| web.connect()).collect();
    let head =
        format!("POST /api/entries HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: {}\r\n\r\n", web.port, 4 * MB);
    let body = vec![b'['; 4 * MB];
    let bodies: Vec<TcpStream> = (0..100)
        .map(|_| {
            let mut stream = web.connect();
            stream.write_all(head.as_bytes()).unwrap();
            // As much of the body as the socket takes at once: the rest is never wanted.
            stream.set_nonblocking(true).unwrap();
            let _ = stream.write(&body);
            stream
        })
        .collect();
    let (status, listing) = web.tokened("GET", "/api/sessions", "");
    assert_eq!(status, 200, "{listing}");
    assert!(listing.contains(SESSION_ID), "{listing}");
    assert!(web.alive());
    let rss = web.rss();
    assert!(rss < 200 * MB, "resident memory {} MB", rss / MB);
    drop((idle, bodies));
}

#[test]
fn a_tokenless_request_announcing_a_4mb_body_is_refused_before_the_body_is_sent() {
    let web = Web::start();
    let mut stream = web.connect();
    let head =
        format!("POST /api/entries HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: {}\r\n\r\n", web.port, 4 * MB);
    stream.write_all(head.as_bytes()).unwrap();
    // Not a byte of the body is sent: an answer can only come from a server that did not wait for it.
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("an answer, then the end of the connection");
    let (status, text) = parse_answer(&answer).expect("HTTP");
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("token"), "{text}");
}

#[test]
fn a_tokened_body_over_the_limit_is_refused_from_its_length_alone() {
    let web = Web::start();
    let mut stream = web.connect();
    let head = format!(
        "POST /api/entries?token={}&handle=h HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: {}\r\n\r\n",
        web.token,
        web.port,
        4 * MB
    );
    stream.write_all(head.as_bytes()).unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("an answer");
    let (status, text) = parse_answer(&answer).expect("HTTP");
    assert_eq!(status, 413, "{text}");
}

#[test]
fn a_session_file_outside_the_agent_dir_gives_the_same_error_as_a_path_that_does_not_exist() {
    let web = Web::start();
    let outside = temp_dir();
    let file = outside.path().join(format!("2026-01-01T00-00-00-000Z_{SESSION_ID}.jsonl"));
    std::fs::copy(&web.session, &file).unwrap();
    let missing = outside.path().join("nothing-here.jsonl");
    let open = |path: &str| web.tokened("POST", "/api/open", &format!("&path={}", percent(path)));
    let (status, text) = open(&web.session);
    assert_eq!(status, 200, "a listed session opens: {text}");
    let elsewhere = open(&s(&file));
    let nowhere = open(&s(&missing));
    assert_eq!(elsewhere.0, 404, "{}", elsewhere.1);
    // One answer for both, naming neither path, so it says nothing about what exists.
    let scrub = |(status, text): (u16, String), path: &std::path::Path| (status, text.replace(&s(path), "PATH"));
    assert_eq!(scrub(elsewhere, &file), scrub(nowhere, &missing));
    assert!(open("/etc/passwd").0 == 404 && open(&s(web.agent.path())).0 == 404);
}

#[test]
fn an_event_reader_that_stops_reading_costs_bounded_memory_and_gives_it_back_when_it_leaves() {
    let mut web = Web::start();
    let (status, text) = web.tokened("POST", "/api/open", &format!("&path={}", percent(&web.session)));
    assert_eq!(status, 200, "{text}");
    let handle = text.split("\"handle\":\"").nth(1).and_then(|t| t.split('"').next()).unwrap().to_owned();
    let mut reader = web.connect();
    let head = format!("GET /api/events?token={} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n", web.token, web.port);
    reader.write_all(head.as_bytes()).unwrap();
    let mut opened = [0u8; 12];
    reader.read_exact(&mut opened).unwrap();
    assert!(opened.starts_with(b"HTTP/1.1 200"));
    let baseline = web.rss();

    // Another process appends 40,000 entries, one write each, as pi would, in bursts that the server follows one
    // by one (so they come as many small changes, each an event); the reader reads nothing more.
    const APPENDS: usize = 40_000;
    let mut file = std::fs::OpenOptions::new().append(true).open(&web.session).unwrap();
    let text = "y".repeat(400);
    let mut parent = "m0".to_owned();
    for n in 0..APPENDS {
        let id = format!("a{n:07}");
        let line = format!(
            "{{\"type\":\"message\",\"id\":\"{id}\",\"parentId\":\"{parent}\",\"timestamp\":\"2026-01-01T00:00:02.000Z\",\"message\":{{\"role\":\"user\",\"content\":\"{text} {n}\",\"timestamp\":2}}}}\n"
        );
        file.write_all(line.as_bytes()).unwrap();
        parent = id;
        if n % 20 == 19 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    // The server has followed them all when it knows the last.
    let last = format!("a{:07}", APPENDS - 1);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, found) =
            web.post(&format!("/api/entries?token={}&handle={handle}", web.token), &format!("[\"{last}\"]"));
        if found.contains("\"message\"") {
            break;
        }
        assert!(Instant::now() < deadline, "the appends were not followed: {found}");
        std::thread::sleep(Duration::from_secs(1));
    }
    let stalled = web.rss();
    drop(reader);
    // The stream notices its reader has gone at its next write at the latest (a ping within 15 s).
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut after = web.rss();
    while after > baseline + 56 * MB && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
        after = web.rss();
    }
    eprintln!(
        "# RSS: {} MB before, {} MB with the reader stalled, {} MB after it left",
        baseline / MB,
        stalled / MB,
        after / MB
    );
    assert!(stalled < baseline + 64 * MB, "a stalled reader held {} MB", (stalled - baseline) / MB);
    assert!(after < baseline + 56 * MB, "{} MB were kept after the reader left", (after - baseline) / MB);
    assert!(web.alive());
    assert_eq!(web.tokened("GET", "/api/sessions", "").0, 200);
}
