//! The sidecar at the edges of its process's resources (issue 19): pipelined reads run on a fixed pool instead of
//! a thread each, many busy handles share a capped blocking pool, and a listing or search that runs out of
//! descriptors says so instead of answering "no sessions".

use std::collections::HashSet;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pi_sessiond::session::json::Json;

use crate::support::sidecar::{binary, initialize_over, sidecar_writing_to, Sidecar, Wire};
use crate::support::{big_session, json, s, str_of, temp_dir};

/// The thread ids of a process now.
fn tasks(pid: u32) -> Vec<u64> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default()
}

/// Watches a process's threads until told to stop: every thread id seen, and the most alive at once.
struct ThreadWatch {
    done: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(HashSet<u64>, usize)>,
}

impl ThreadWatch {
    fn start(pid: u32) -> ThreadWatch {
        let done = Arc::new(AtomicBool::new(false));
        let stop = done.clone();
        let thread = std::thread::spawn(move || {
            let (mut seen, mut most) = (HashSet::new(), 0);
            let deadline = Instant::now() + Duration::from_secs(120);
            while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                let now = tasks(pid);
                most = most.max(now.len());
                seen.extend(now);
            }
            (seen, most)
        });
        ThreadWatch { done, thread }
    }

    fn stop(self) -> (HashSet<u64>, usize) {
        self.done.store(true, Ordering::SeqCst);
        self.thread.join().unwrap()
    }
}

/// Sends `n` pipelined reads of the whole session on `h` and waits for every answer, while the process's threads
/// are watched; returns every thread id seen and the most alive at once.
fn pipelined_reads(sc: &mut Sidecar, h: &str, n: usize) -> (HashSet<u64>, usize) {
    let watch = ThreadWatch::start(sc.pid());
    let methods = ["session/buildSessionContext", "session/getEntries", "session/getTree", "session/getBranch"];
    let ids: Vec<u64> =
        (0..n).map(|i| sc.start(methods[i % methods.len()], json(&format!(r#"{{"handle":"{h}"}}"#)))).collect();
    for id in ids {
        let r = sc.response(id);
        assert!(r.get("result").is_some(), "{}", r.to_canonical_string());
    }
    watch.stop()
}

#[test]
fn sixty_four_pipelined_reads_on_one_handle_run_on_a_fixed_pool_without_starting_threads_of_their_own() {
    let dir = temp_dir();
    let file = big_session(dir.path(), 3000, 600, "");
    let mut sc = Sidecar::new();
    sc.call("session/open", json(&format!(r#"{{"path":"{file}","handle":"b"}}"#)));
    // The first run starts whatever pools there are.
    pipelined_reads(&mut sc, "b", 64);
    let before: HashSet<u64> = tasks(sc.pid()).into_iter().collect();
    let (seen, most) = pipelined_reads(&mut sc, "b", 64);
    let started: Vec<&u64> = seen.difference(&before).collect();
    assert!(started.len() <= 2, "64 reads started {} threads: {started:?}", started.len());
    assert!(most <= before.len() + 2, "{most} threads alive at once, {} before the reads", before.len());
    assert_eq!(sc.finish(), 0);
}

#[test]
fn reads_on_a_hundred_and_fifty_busy_handles_at_once_take_at_most_the_blocking_pools_threads() {
    let dir = temp_dir();
    let mut sc = Sidecar::new();
    let handles: Vec<String> = (0..150)
        .map(|k| {
            let sub = dir.path().join(format!("s{k}"));
            std::fs::create_dir(&sub).unwrap();
            let file = big_session(&sub, 1500, 200, "");
            sc.call("session/open", json(&format!(r#"{{"path":"{file}","handle":"b{k}"}}"#)));
            format!("b{k}")
        })
        .collect();
    let before = tasks(sc.pid()).len();
    let watch = ThreadWatch::start(sc.pid());
    let ids: Vec<u64> = handles
        .iter()
        .map(|h| sc.start("session/buildSessionContext", json(&format!(r#"{{"handle":"{h}"}}"#))))
        .collect();
    for id in ids {
        assert!(sc.response(id).get("result").is_some());
    }
    let (_, most) = watch.stop();
    let bound = before + pi_sessiond::rpc::server::BLOCKING_THREADS + 7;
    assert!(most <= bound, "{most} threads for 150 busy handles ({before} before; at most {bound})");
    assert_eq!(sc.finish(), 0);
}

/// An agent directory of `n` sessions of one project, written directly.
fn sessions_on_disk(agent: &std::path::Path, n: usize) {
    let dir = agent.join("sessions").join("--p--");
    std::fs::create_dir_all(&dir).unwrap();
    for k in 0..n {
        let id = format!("0000000{k:05}");
        std::fs::write(
            dir.join(format!("2026-01-01T00-00-00-000Z_{id}.jsonl")),
            format!(
                "{{\"type\":\"session\",\"version\":3,\"id\":\"{id}\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/p\"}}\n\
                 {{\"type\":\"message\",\"id\":\"m{k:07}\",\"parentId\":null,\"timestamp\":\"2026-01-01T00:00:01.000Z\",\
                 \"message\":{{\"role\":\"user\",\"content\":\"needle {k}\",\"timestamp\":1}}}}\n"
            ),
        )
        .unwrap();
    }
}

/// A listing or search answered while the process has no descriptor left: an io_error naming the path it could
/// not read, or every session (never fewer, never none).
fn assert_error_or_everything(sc: &mut Sidecar, method: &str, params: &str, all: usize) {
    let id = sc.start(method, json(params));
    let r = sc.response(id);
    match (r.get("result"), r.get("error")) {
        (Some(result), _) => {
            let n = match result {
                Json::Array(a) => a.len(),
                _ => panic!("{method}: {}", r.to_canonical_string()),
            };
            assert_eq!(n, all, "{method} answered {n} of {all}: {}", r.to_canonical_string());
        }
        (None, Some(e)) => {
            let kind = str_of(e.get("data").and_then(|d| d.get("kind")).expect("data.kind"));
            assert_eq!(kind, "io_error", "{method}: {}", e.to_canonical_string());
            let message = str_of(e.get("message").unwrap());
            assert!(message.contains("open files"), "{method} says why: {message}");
        }
        _ => panic!("{method}: {}", r.to_canonical_string()),
    }
}

#[test]
fn at_the_descriptor_limit_list_all_and_search_answer_an_io_error_never_an_empty_list_and_work_again_after() {
    let agent = temp_dir();
    sessions_on_disk(agent.path(), 200);
    let mut cmd = Command::new("prlimit");
    cmd.args(["--nofile=64:64", binary(), "--agent-dir", &s(agent.path())]);
    let mut sc = Sidecar::spawn_command(Wire::Jsonl, cmd, true);
    let all = sc.call("sessions/listAll", json("{}"));
    assert!(matches!(&all, Json::Array(a) if a.len() == 200), "every session, with descriptors to spare");
    // Handles hold their files open: open sessions until the process has no descriptor left.
    let dir = agent.path().join("sessions").join("--p--");
    let mut files: Vec<String> = std::fs::read_dir(&dir).unwrap().map(|e| s(&e.unwrap().path())).collect();
    files.sort();
    let mut opened = Vec::new();
    let mut refused = None;
    for (k, f) in files.iter().enumerate() {
        let id = sc.start("session/open", json(&format!(r#"{{"path":"{f}","handle":"o{k}"}}"#)));
        let r = sc.response(id);
        match r.get("error") {
            None => opened.push(format!("o{k}")),
            Some(e) => {
                refused = Some(e.clone());
                break;
            }
        }
    }
    let refused = refused.expect("64 descriptors run out before 200 opens");
    assert!(str_of(refused.get("message").unwrap()).contains("open files"), "{}", refused.to_canonical_string());
    assert_error_or_everything(&mut sc, "sessions/listAll", "{}", 200);
    assert_error_or_everything(&mut sc, "sessions/search", r#"{"query":"needle","limit":500}"#, 200);
    // Descriptors back: the same calls answer in full.
    for h in opened.iter().take(8) {
        sc.call("session/close", json(&format!(r#"{{"handle":"{h}"}}"#)));
    }
    let all = sc.call("sessions/listAll", json("{}"));
    assert!(matches!(&all, Json::Array(a) if a.len() == 200), "{}", all.to_canonical_string());
    assert_eq!(sc.finish(), 0);
}

/// A number the kernel publishes under /proc/sys.
fn kernel_setting(path: &str) -> usize {
    std::fs::read_to_string(path).ok().and_then(|t| t.trim().parse().ok()).expect(path)
}

#[test]
fn the_pipe_to_the_host_is_made_a_megabyte_deep_so_a_snapshot_goes_out_in_few_rounds() {
    // The kernel's limit for an unprivileged process (1 MiB unless the machine lowered it).
    let limit: usize = kernel_setting("/proc/sys/fs/pipe-max-size");
    let mut child = sidecar_writing_to(std::process::Stdio::piped());
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let before = rustix::pipe::fcntl_getpipe_size(stdout.get_ref()).expect("a pipe");
    let mut stdin = child.stdin.take().unwrap();
    initialize_over(&mut stdin, &mut stdout);
    let after = rustix::pipe::fcntl_getpipe_size(stdout.get_ref()).expect("a pipe");
    drop(stdin);
    assert!(child.wait().unwrap().success());
    assert_eq!(before, 64 << 10, "the kernel's default depth, before the sidecar started");
    assert_eq!(after, limit.min(1 << 20), "the depth the sidecar asked for");
}

/// The send buffer of the socket a sidecar writes its answers to, before it started and once it has answered
/// `initialize` through it; `ours` is the socket's other end.
fn send_buffer_around_a_sidecar(ours: impl std::io::Read, theirs: std::os::fd::OwnedFd) -> (usize, usize) {
    // The same socket as the child's stdout: its options are the child's.
    let theirs_seen = theirs.try_clone().unwrap();
    let before = rustix::net::sockopt::socket_send_buffer_size(&theirs_seen).unwrap();
    let mut child = sidecar_writing_to(std::process::Stdio::from(theirs));
    let mut stdin = child.stdin.take().unwrap();
    initialize_over(&mut stdin, &mut std::io::BufReader::new(ours));
    let after = rustix::net::sockopt::socket_send_buffer_size(&theirs_seen).unwrap();
    drop(stdin);
    assert!(child.wait().unwrap().success());
    (before, after)
}

#[test]
fn a_socket_to_the_host_gets_a_megabyte_send_buffer_as_node_hosts_give_one() {
    // libuv (so every Node host: the TypeScript client, the drop-in, the bench) gives a child's stdio as a
    // socket pair, not a pipe; the pipe's depth does not apply to it, its send buffer does.
    let limit: usize = kernel_setting("/proc/sys/net/core/wmem_max");
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().expect("a socket pair");
    let (before, after) = send_buffer_around_a_sidecar(ours, theirs.into());
    assert!(before < 1 << 20, "the kernel's default ({before} bytes) is below what the sidecar asks for");
    // Linux doubles what is asked (room for its bookkeeping) after capping it at wmem_max.
    assert_eq!(after, 2 * limit.min(1 << 20), "the send buffer the sidecar asked for");
}

#[test]
fn a_tcp_socket_to_the_host_keeps_its_send_buffer() {
    // Setting a TCP socket's send buffer turns off the kernel's autotuning of it, which may grow it further; and a
    // host that sized it had its reasons.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback listener");
    let ours = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (theirs, _) = listener.accept().unwrap();
    // Loopback sockets start with a buffer of megabytes; one set small shows whether the sidecar touches it.
    rustix::net::sockopt::set_socket_send_buffer_size(&theirs, 64 << 10).unwrap();
    let (before, after) = send_buffer_around_a_sidecar(ours, theirs.into());
    assert_eq!(after, before, "the send buffer is left as the host made it");
}
