//! Paths that are not session files, and session files built to exhaust a reader: named pipes, devices,
//! directories, sparse giants, lines longer than pi can hold, and sessions whose reads are far larger than memory.
//! Each must be refused or read with bounded memory, at once, by the engine, the command line and the sidecar
//! alike (issue 11: a FIFO hung `session/open`; `/dev/zero`, `/dev/urandom` and a 10 GB sparse file grew the process
//! until it aborted; the reads of a 2.6 GB image session peaked at 5 GB).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pi_sessiond::session::json::Json;
use pi_sessiond::session::store::{WarningKind, MAX_LINE_BYTES};
use pi_sessiond::session::{Env, SessionManager};

use crate::support::sidecar::{binary, Sidecar};
use crate::support::{json, s, temp_dir};

const HEADER: &str = r#"{"type":"session","version":3,"id":"h","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#;
const ENTRY: &str = r#"{"type":"message","id":"m1","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"after","timestamp":1}}"#;

/// Runs `pi-sessiond inspect --json path` (errors as JSON on stdout) with its address space limited to `limit_kib` (so buffering what it should
/// not makes it abort), and returns its exit status and output. A run that has not ended after two minutes is a
/// hang, which fails the test.
fn inspect_within(path: &str, limit_kib: u64) -> (i32, Json) {
    let mut child = Command::new("bash")
        .args(["-c", r#"ulimit -v "$1" && exec "$2" inspect --json "$3""#, "inspect"])
        .arg(limit_kib.to_string())
        .arg(binary())
        .arg(path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("inspect {path} hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let parsed = Json::parse(text.trim_end().as_bytes()).unwrap_or_else(|e| {
        panic!("inspect printed no JSON ({e}), status {:?}: {}", out.status, String::from_utf8_lossy(&out.stderr))
    });
    (out.status.code().unwrap_or(-1), parsed)
}

fn error_message(v: &Json) -> String {
    v.get("error").and_then(|e| e.get("message")).and_then(Json::as_js_str).map(|m| m.to_string_lossy()).unwrap()
}

fn mkfifo(path: &str) {
    assert!(Command::new("mkfifo").arg(path).status().unwrap().success());
}

/// A file of `header`, then `hole` zero bytes (a sparse region, costing no disk), then `tail`.
fn sparse_file(path: &str, header: &str, hole: u64, tail: &str) {
    use std::io::{Seek, SeekFrom, Write};
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(header.as_bytes()).unwrap();
    f.set_len(header.len() as u64 + hole).unwrap();
    f.seek(SeekFrom::End(0)).unwrap();
    f.write_all(tail.as_bytes()).unwrap();
}

#[test]
fn a_named_pipe_is_refused_at_once_by_open_inspect_and_the_sidecar() {
    let dir = temp_dir();
    let fifo = s(&dir.path().join("pipe.jsonl"));
    mkfifo(&fifo);
    let err = SessionManager::open(&fifo, None, None, Env::system()).unwrap_err();
    assert!(err.to_string().contains("not a regular file (a named pipe)"), "{err}");
    let (status, out) = inspect_within(&fifo, 4 << 20);
    assert_eq!(status, 2, "a refused file is an error (status 2)");
    assert!(error_message(&out).contains("a named pipe"), "{}", out.to_canonical_string());
    let mut sc = Sidecar::new();
    let e = sc.call_err("session/open", json(&format!(r#"{{"path":"{fifo}"}}"#)));
    assert_eq!(e.get("data").and_then(|d| d.get("kind")), Some(&Json::str("io_error")), "{}", e.to_canonical_string());
    // The process goes on serving: a real session opens after the refusal.
    let good = s(&dir.path().join("good.jsonl"));
    std::fs::write(&good, format!("{HEADER}\n{ENTRY}\n")).unwrap();
    let st = sc.call("session/open", json(&format!(r#"{{"path":"{good}"}}"#)));
    assert_eq!(st.get("entryCount"), Some(&Json::number(1.0)));
}

#[test]
fn devices_and_directories_are_refused_instead_of_read_for_ever() {
    let dir = temp_dir();
    let mut sc = Sidecar::new();
    for (path, what) in [
        ("/dev/zero", "a character device"),
        ("/dev/urandom", "a character device"),
        (&s(dir.path())[..], "a directory"),
    ] {
        let e = sc.call_err("session/open", json(&format!(r#"{{"path":"{path}"}}"#)));
        let message = e.get("message").and_then(Json::as_js_str).unwrap().to_string_lossy();
        assert!(message.contains(what), "{path}: {message}");
        let (status, out) = inspect_within(path, 4 << 20);
        assert_eq!(status, 2, "{path}");
        assert!(error_message(&out).contains(what), "{path}: {}", out.to_canonical_string());
    }
    let good = s(&dir.path().join("good.jsonl"));
    std::fs::write(&good, format!("{HEADER}\n{ENTRY}\n")).unwrap();
    let st = sc.call("session/open", json(&format!(r#"{{"path":"{good}"}}"#)));
    assert_eq!(st.get("entryCount"), Some(&Json::number(1.0)), "the process goes on serving");
}

#[test]
fn a_sparse_file_of_zeros_is_refused_as_not_a_session_without_being_buffered() {
    let dir = temp_dir();
    let path = s(&dir.path().join("sparse.jsonl"));
    sparse_file(&path, "", 256 << 20, "");
    // 200 MB of address space: holding the 256 MiB line (as the reader used to) aborts the process.
    let (status, out) = inspect_within(&path, 200_000);
    assert_eq!(status, 2, "{}", out.to_canonical_string());
    assert_eq!(out.get("error").and_then(|e| e.get("kind")), Some(&Json::str("invalid_session_file")));
}

#[test]
fn a_giant_line_of_zeros_inside_a_session_is_a_malformed_line_and_the_rest_opens() {
    let dir = temp_dir();
    let path = s(&dir.path().join("hole.jsonl"));
    sparse_file(&path, &format!("{HEADER}\n"), 256 << 20, &format!("\n{ENTRY}\n"));
    let (status, out) = inspect_within(&path, 200_000);
    assert_eq!(status, 0, "{}", out.to_canonical_string());
    assert_eq!(out.get("entryCount"), Some(&Json::number(1.0)));
    let Some(Json::Array(warnings)) = out.get("warnings") else { panic!("{}", out.to_canonical_string()) };
    assert_eq!(warnings.len(), 1, "{}", out.to_canonical_string());
    assert_eq!(warnings[0].get("line"), Some(&Json::number(2.0)));
    assert_eq!(warnings[0].get("kind"), Some(&Json::str(WarningKind::MalformedLine.as_str())));
}

#[test]
fn a_line_longer_than_v8_can_hold_is_skipped_as_malformed_within_bounded_memory() {
    // pi 1.6.0 fails to open this file ("Invalid string length"); here the line is reported and skipped, and the
    // reader never holds more than the bound (900 MB of address space: a buffer doubled past it aborts).
    use std::io::Write;
    let dir = temp_dir();
    let path = s(&dir.path().join("long.jsonl"));
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    writeln!(f, "{HEADER}").unwrap();
    f.write_all(br#"{"type":"custom","customType":"x","data":""#).unwrap();
    let chunk = vec![b'a'; 1 << 20];
    for _ in 0..=MAX_LINE_BYTES >> 20 {
        f.write_all(&chunk).unwrap();
    }
    writeln!(f, "\"}}\n{ENTRY}").unwrap();
    drop(f);
    let (status, out) = inspect_within(&path, 900_000);
    assert_eq!(status, 0, "{}", out.get("error").map(Json::to_canonical_string).unwrap_or_default());
    assert_eq!(out.get("entryCount"), Some(&Json::number(1.0)));
    let Some(Json::Array(warnings)) = out.get("warnings") else { panic!() };
    let message = warnings[0].get("message").and_then(Json::as_js_str).unwrap().to_string_lossy();
    assert_eq!(warnings[0].get("line"), Some(&Json::number(2.0)));
    assert!(message.contains(&format!("longer than the {MAX_LINE_BYTES}")), "{message}");
}

#[test]
fn inspect_streams_reads_far_larger_than_its_memory_from_the_file() {
    use std::io::Write;
    // 20 messages of 4 MiB each (an image session in small): inspect writes every one of them six times
    // (entries, tree, branch, context entries, projection, context), about 670 MB, within 72 MB of address space,
    // less than the 80 MB file. It was 60 MB until a file of 8 MiB or more was read as two halves at once
    // (store::load_file): the second half's reader holds a line of its own (an 8 MiB buffer for these lines)
    // and its thread has a stack, about 10 MB more at the peak.
    let dir = temp_dir();
    let path = s(&dir.path().join("images.jsonl"));
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    writeln!(f, "{HEADER}").unwrap();
    let data = "A".repeat(4 << 20);
    let mut parent = "null".to_owned();
    for i in 0..20 {
        let id = format!("e{i:07}");
        writeln!(
            f,
            r#"{{"type":"message","id":"{id}","parentId":{parent},"timestamp":"2025-01-01T00:00:01.000Z","message":{{"role":"user","content":[{{"type":"image","data":"{data}","mimeType":"image/png"}}],"timestamp":{i}}}}}"#
        )
        .unwrap();
        parent = format!("\"{id}\"");
    }
    drop(f);
    let size = std::fs::metadata(&path).unwrap().len();
    let out = Command::new("bash")
        .args(["-c", r#"ulimit -v "$1" && set -o pipefail && "$2" inspect "$3" | wc -c"#, "inspect", "72000"])
        .arg(binary())
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    let written: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(written > 6 * size, "{written} bytes written for a {size}-byte file");
}

#[test]
fn values_nested_far_deeper_than_a_thread_stack_are_read_without_crashing_the_sidecar() {
    // JSON.parse accepts any depth, so pi opens this file; a recursive drop, clone or write of such a value
    // overflowed the 2 MiB stack of the sidecar's worker thread, aborting the process and every session in it.
    let deep = |inner: &str| format!("{}{inner}{}", "[".repeat(100_000), "]".repeat(100_000));
    let header = HEADER.replace(r#""cwd":"/p""#, &format!(r#""cwd":"/p","x":{}"#, deep("")));
    let message = format!(
        r#"{{"type":"message","id":"m1","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{{"role":"assistant","content":{},"provider":"p","model":"m","timestamp":1}}}}"#,
        deep("1")
    );
    let label = format!(
        r#"{{"type":"label","id":"l1","parentId":"m1","timestamp":{},"targetId":"m1","label":{}}}"#,
        deep(""),
        deep("\"L\"")
    );
    let dir = temp_dir();
    let path = s(&dir.path().join("deep.jsonl"));
    std::fs::write(&path, format!("{header}\n{message}\n{label}\n")).unwrap();
    let mut sc = Sidecar::new();
    let h = sc.call("session/open", json(&format!(r#"{{"path":"{path}"}}"#))).get("handle").cloned().unwrap();
    let params = json(&format!(r#"{{"handle":{}}}"#, h.to_canonical_string()));
    let Ok(tree) = sc.call("session/getTree", params.clone()).into_array() else { panic!("a tree") };
    assert_eq!(tree[0].get("label"), json(&deep("\"L\"")).into_array().ok().map(Json::Array).as_ref());
    let context = sc.call("session/buildSessionContext", params.clone());
    assert_eq!(context.get("model").and_then(|m| m.get("provider")), Some(&Json::str("p")));
    assert_eq!(sc.call("session/getEntryCount", params), Json::number(2.0));
}
