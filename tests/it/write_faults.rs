//! A failing disk, a full disk, a racing writer and a kill in the middle of a rewrite, through the real binary
//! (faults injected with the `LD_PRELOAD` shim in `support/faults.rs`): a host never sees success for a write that
//! is not where the durability mode says, a refused write leaves no bytes behind, and nothing is left to clean up.

use std::time::{Duration, Instant};

use pi_sessiond::session::json::Json;
use pi_sessiond::session::store::WarningKind;
use pi_sessiond::session::{Env, SessionManager};

use crate::support::faults::Faults;
use crate::support::sidecar::Sidecar;
use crate::support::{json, s, str_of, temp_dir, user_message, write_v1_session};

const HEADER: &str =
    r#"{"type":"session","version":3,"id":"faults","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#;
const FIRST: &str = r#"{"type":"message","id":"e0000000","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"start","timestamp":1}}"#;

/// A session file as pi writes it: a header and one entry (`e0000000`).
fn session_file(dir: &std::path::Path) -> String {
    let path = s(&dir.join("faults.jsonl"));
    std::fs::write(&path, format!("{HEADER}\n{FIRST}\n")).unwrap();
    path
}

/// A version 1 session (no ids), which the first write migrates with a rewrite.
fn legacy_file(dir: &std::path::Path) -> String {
    let path = s(&dir.join("legacy.jsonl"));
    write_v1_session(&path);
    path
}

fn open(sc: &mut Sidecar, path: &str) -> String {
    str_of(sc.call("session/open", json(&format!(r#"{{"path":"{path}"}}"#))).get("handle").unwrap())
}

fn create(sc: &mut Sidecar, dir: &std::path::Path) -> (String, String) {
    let st = sc.call("session/create", json(&format!(r#"{{"cwd":"/p","sessionDir":"{}"}}"#, s(dir))));
    (str_of(st.get("handle").unwrap()), str_of(st.get("sessionFile").unwrap()))
}

fn append(sc: &mut Sidecar, h: &str, text: &str) -> Json {
    let id =
        sc.start("session/appendMessage", json(&format!(r#"{{"handle":"{h}","message":{}}}"#, user_message(text))));
    sc.response(id)
}

fn error_kind(response: &Json) -> String {
    let e = response.get("error").unwrap_or_else(|| panic!("expected an error: {}", response.to_canonical_string()));
    str_of(e.get("data").and_then(|d| d.get("kind")).unwrap())
}

fn entry_count(sc: &mut Sidecar, h: &str) -> Json {
    sc.call("session/getEntryCount", json(&format!(r#"{{"handle":"{h}"}}"#)))
}

/// Closes the handle and opens the file again: a poisoned session writes again after that.
fn reopen(sc: &mut Sidecar, h: &str, path: &str) -> String {
    sc.call("session/close", json(&format!(r#"{{"handle":"{h}"}}"#)));
    open(sc, path)
}

fn temporaries(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect()
}

#[test]
fn under_entry_durability_a_failed_fsync_is_an_error_the_entry_is_cut_back_and_writes_are_refused_until_reopened() {
    let dir = temp_dir();
    let path = session_file(dir.path());
    let faults = Faults::new();
    let mut sc = faults.sidecar(&["--durability", "entry"], &s(dir.path()));
    let h = open(&mut sc, &path);
    assert!(append(&mut sc, &h, "durable").get("result").is_some());
    let before = std::fs::read(&path).unwrap();
    faults.set("fsync-eio", true);
    let r = append(&mut sc, &h, "not durable");
    assert_eq!(error_kind(&r), "io_error", "a failed fsync is an error, never a success");
    assert_eq!(std::fs::read(&path).unwrap(), before, "the entry that was not synced is cut back");
    assert_eq!(entry_count(&mut sc, &h), Json::number(2.0), "memory holds nothing of it either");
    faults.set("fsync-eio", false);
    let r = append(&mut sc, &h, "after the failure");
    assert_eq!(error_kind(&r), "session_poisoned", "nothing is written on top of an unknown state");
    assert_eq!(std::fs::read(&path).unwrap(), before);
    let h = reopen(&mut sc, &h, &path);
    assert!(append(&mut sc, &h, "reopened").get("result").is_some(), "a reopened session writes again");
    assert_eq!(entry_count(&mut sc, &h), Json::number(3.0));
}

#[test]
fn under_batch_durability_a_failed_fsync_fails_every_write_it_covers_and_writes_are_refused_until_reopened() {
    let dir = temp_dir();
    let path = session_file(dir.path());
    let faults = Faults::new();
    let mut sc = faults.sidecar(&["--durability", "batch"], &s(dir.path()));
    let h = open(&mut sc, &path);
    assert!(append(&mut sc, &h, "durable").get("result").is_some());
    faults.set("fsync-eio", true);
    // A pipelined burst: the writes that share the failed fsync, and those after it, all fail.
    let ids: Vec<u64> = (0..10)
        .map(|n| {
            let params = format!(r#"{{"handle":"{h}","message":{}}}"#, user_message(&format!("burst {n}")));
            sc.start("session/appendMessage", json(&params))
        })
        .collect();
    let kinds: Vec<String> = ids.into_iter().map(|id| error_kind(&sc.response(id))).collect();
    assert_eq!(kinds[0], "io_error", "{kinds:?}");
    assert!(kinds.iter().all(|k| k == "io_error" || k == "session_poisoned"), "{kinds:?}");
    faults.set("fsync-eio", false);
    assert_eq!(error_kind(&append(&mut sc, &h, "after the failure")), "session_poisoned");
    let h = reopen(&mut sc, &h, &path);
    assert!(append(&mut sc, &h, "reopened").get("result").is_some(), "a reopened session writes again");
}

#[test]
fn without_durability_a_rewrite_whose_fsync_fails_is_abandoned_and_the_original_left_as_it_was() {
    let dir = temp_dir();
    let path = legacy_file(dir.path());
    let before = std::fs::read(&path).unwrap();
    let faults = Faults::new();
    let mut sc = faults.sidecar(&["--durability", "none"], &s(dir.path()));
    let h = open(&mut sc, &path);
    faults.set("fsync-eio", true);
    // The first write migrates the file: a temporary file, fsynced (in every mode), renamed over the original.
    let r = append(&mut sc, &h, "needs the rewrite");
    assert_eq!(error_kind(&r), "io_error");
    assert_eq!(std::fs::read(&path).unwrap(), before, "the original is untouched");
    assert_eq!(temporaries(dir.path()), Vec::<String>::new(), "the abandoned temporary is removed");
    faults.set("fsync-eio", false);
    assert!(append(&mut sc, &h, "now it works").get("result").is_some());
    let m = SessionManager::open(&path, None, None, Env::system()).unwrap();
    assert_eq!(m.entry_count(), 2);
    assert!(m.warnings().iter().all(|w| w.kind != WarningKind::LegacyVersion), "migrated on disk");
}

#[test]
fn a_first_write_whose_fsync_fails_leaves_no_file_and_the_retry_writes_it_whole() {
    let dir = temp_dir();
    let faults = Faults::new();
    let mut sc = faults.sidecar(&["--durability", "entry"], &s(dir.path()));
    let (h, file) = create(&mut sc, dir.path());
    faults.set("fsync-eio", true);
    assert_eq!(error_kind(&append(&mut sc, &h, "first")), "io_error");
    assert!(!std::path::Path::new(&file).exists(), "the file whose creation was not synced is removed");
    faults.set("fsync-eio", false);
    assert!(append(&mut sc, &h, "first again").get("result").is_some());
    let m = SessionManager::open(&file, None, None, Env::system()).unwrap();
    assert_eq!(m.entry_count(), 1, "only the retried entry");
}

#[test]
fn a_full_disk_leaves_no_partial_line_of_the_refused_entry_issue_11() {
    let dir = temp_dir();
    let path = session_file(dir.path());
    let faults = Faults::new();
    let mut sc = faults.sidecar(&[], &s(dir.path()));
    let h = open(&mut sc, &path);
    let before = std::fs::read(&path).unwrap();
    faults.set("write-enospc", true);
    for n in 0..3 {
        let r = append(&mut sc, &h, &format!("does not fit {n}"));
        assert_eq!(error_kind(&r), "io_error");
        assert_eq!(std::fs::read(&path).unwrap(), before, "the half-written line is cut back");
    }
    faults.set("write-enospc", false);
    assert!(append(&mut sc, &h, "space freed").get("result").is_some());
    let m = SessionManager::open(&path, None, None, Env::system()).unwrap();
    assert_eq!(m.entry_count(), 2);
    assert!(
        m.warnings().iter().all(|w| !matches!(w.kind, WarningKind::MalformedLine | WarningKind::TornTail)),
        "{:?}",
        m.warnings()
    );
}

#[test]
fn a_first_write_that_fails_on_a_full_disk_leaves_no_file_so_the_retry_is_not_refused_with_eexist_issue_11() {
    let dir = temp_dir();
    let faults = Faults::new();
    let mut sc = faults.sidecar(&[], &s(dir.path()));
    let (h, file) = create(&mut sc, dir.path());
    faults.set("write-enospc", true);
    assert_eq!(error_kind(&append(&mut sc, &h, "first")), "io_error");
    assert!(!std::path::Path::new(&file).exists(), "no 0-byte or half-written file is left");
    faults.set("write-enospc", false);
    assert!(append(&mut sc, &h, "first again").get("result").is_some(), "the retry creates the file");
    let m = SessionManager::open(&file, None, None, Env::system()).unwrap();
    assert_eq!(m.entry_count(), 1);
}

#[test]
fn another_writers_line_landing_between_our_look_and_our_write_is_published_before_ours_in_file_order() {
    let dir = temp_dir();
    let path = session_file(dir.path());
    let faults = Faults::new();
    let mut sc = faults.sidecar(&[], &s(dir.path()));
    let h = open(&mut sc, &path);
    let theirs = r#"{"type":"message","id":"pi000001","parentId":"e0000000","timestamp":"2025-01-01T00:00:02.000Z","message":{"role":"user","content":"pi got in first","timestamp":2}}"#;
    faults.inject_before_next_write(format!("{theirs}\n").as_bytes());
    let r = append(&mut sc, &h, "ours");
    let ours =
        str_of(r.get("result").and_then(|v| v.get("id")).unwrap_or_else(|| panic!("{}", r.to_canonical_string())));
    let notes = sc.take_notifications("session/changed");
    let appended: Vec<(Option<Json>, Json)> = notes
        .iter()
        .map(|n| {
            let p = n.get("params").unwrap();
            let entries = p.get("change").and_then(|c| c.get("entries")).unwrap();
            let Json::Array(list) = entries else { panic!() };
            assert_eq!(list.len(), 1);
            (p.get("origin").cloned(), list[0].get("id").unwrap().clone())
        })
        .collect();
    assert_eq!(
        appended,
        vec![(Some(Json::str("external")), Json::str("pi000001")), (None, Json::str(&ours))],
        "their entry first, then ours, as the file has them"
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[2], theirs);
    assert!(lines[3].contains(&ours) && lines[3].contains(r#""parentId":"e0000000""#), "{}", lines[3]);
    // The handle now reads what a fresh open reads.
    let mut fresh = Sidecar::new();
    let fh = open(&mut fresh, &path);
    for method in ["session/getEntries", "session/getTree", "session/getLeafId"] {
        let ours_view = sc.call(method, json(&format!(r#"{{"handle":"{h}"}}"#)));
        let fresh_view = fresh.call(method, json(&format!(r#"{{"handle":"{fh}"}}"#)));
        assert_eq!(ours_view, fresh_view, "{method}");
    }
}

#[test]
fn temporaries_a_rewrite_killed_with_sigkill_left_are_removed_when_the_directory_is_next_written_issue_11() {
    let dir = temp_dir();
    let path = legacy_file(dir.path());
    let before = std::fs::read(&path).unwrap();
    // A temporary of a process that is alive (this one) is not stale and must stay.
    let live = dir.path().join(format!("other.jsonl.pi-sessiond-{}.tmp", std::process::id()));
    std::fs::write(&live, "being written").unwrap();
    let faults = Faults::new();
    faults.set("stall-tmp", true);
    let mut sc = faults.sidecar(&[], &s(dir.path()));
    let h = open(&mut sc, &path);
    sc.start("session/appendMessage", json(&format!(r#"{{"handle":"{h}","message":{}}}"#, user_message("migrate"))));
    let left = format!("legacy.jsonl.pi-sessiond-{}.tmp", sc.pid());
    let started = Instant::now();
    while !temporaries(dir.path()).contains(&left) {
        assert!(started.elapsed() < Duration::from_secs(30), "the rewrite never started");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::process::Command::new("kill").args(["-KILL", &sc.pid().to_string()]).status().unwrap();
    sc.wait();
    assert!(temporaries(dir.path()).contains(&left), "the kill left the temporary behind");
    assert_eq!(std::fs::read(&path).unwrap(), before, "the original is untouched");
    let mut next = Sidecar::new();
    let h = open(&mut next, &path);
    assert!(append(&mut next, &h, "after the crash").get("result").is_some());
    let mut remaining = temporaries(dir.path());
    remaining.sort();
    assert_eq!(remaining, vec![live.file_name().unwrap().to_string_lossy().into_owned()], "only the live one stays");
}

#[test]
fn a_pipelined_burst_under_batch_durability_is_answered_in_full_sharing_fsyncs() {
    // main before the engine owned group commit left about half of such bursts unanswered (5,000 appends).
    let dir = temp_dir();
    let faults = Faults::new();
    let mut sc = faults.sidecar(&["--durability", "batch"], &s(dir.path()));
    let (h, file) = create(&mut sc, dir.path());
    for round in 0..3 {
        let ids: Vec<u64> = (0..2000)
            .map(|n| {
                let params = format!(r#"{{"handle":"{h}","message":{}}}"#, user_message(&format!("{round}.{n}")));
                sc.start("session/appendMessage", json(&params))
            })
            .collect();
        for id in ids {
            let r = sc.response(id);
            assert!(r.get("result").is_some(), "{}", r.to_canonical_string());
        }
    }
    let m = SessionManager::open(&file, None, None, Env::system()).unwrap();
    assert_eq!(m.entry_count(), 6000);
    let fsyncs = faults.fsyncs();
    assert!(fsyncs < 3000, "a burst shares its fsyncs: {fsyncs} for 6000 appends");
}

#[test]
fn an_append_batch_under_entry_durability_is_one_write_and_one_fsync() {
    let dir = temp_dir();
    let faults = Faults::new();
    let path = session_file(dir.path());
    let mut sc = faults.sidecar(&["--durability", "entry"], &s(dir.path()));
    let h = open(&mut sc, &path);
    // The first write of a file that has its final newline needs no repair: each write is one fsync from here.
    assert!(append(&mut sc, &h, "one alone").get("result").is_some());
    let before = faults.fsyncs();
    assert_eq!(before, 1, "one append, one fsync");
    let op = format!(r#"{{"method":"session/appendMessage","params":{{"message":{}}}}}"#, user_message("batched"));
    let ops = vec![op; 500].join(",");
    let r = sc.call("session/appendBatch", json(&format!(r#"{{"handle":"{h}","ops":[{ops}]}}"#)));
    let Some(Json::Array(results)) = r.get("results") else { panic!() };
    assert_eq!(results.len(), 500);
    assert_eq!(faults.fsyncs() - before, 1, "500 appends in a batch share one fsync");
    assert_eq!(entry_count(&mut sc, &h), Json::number(502.0));
    // A failing fsync fails the whole batch, and the session refuses writes until reopened (nothing acknowledged).
    faults.set("fsync-eio", true);
    let e = sc.call_err("session/appendBatch", json(&format!(r#"{{"handle":"{h}","ops":[{ops}]}}"#)));
    assert!(e.get("data").is_some(), "{}", e.to_canonical_string());
    faults.set("fsync-eio", false);
    assert_eq!(entry_count(&mut sc, &h), Json::number(502.0), "a batch whose fsync failed is not in memory");
}

#[test]
fn under_after_durability_a_write_is_answered_before_its_fsync_which_follows_at_once_and_a_failed_one_refuses_the_next()
{
    let dir = temp_dir();
    let path = session_file(dir.path());
    let faults = Faults::new();
    let mut sc = faults.sidecar(&["--durability", "after"], &s(dir.path()));
    let h = open(&mut sc, &path);
    let leaf = |sc: &mut Sidecar| sc.call("session/getLeafId", json(&format!(r#"{{"handle":"{h}"}}"#)));
    assert!(append(&mut sc, &h, "first").get("result").is_some());
    leaf(&mut sc);
    let before = faults.fsyncs();
    // Each write alone is fsynced before the handle's next request runs (a read waits for it): one each.
    for n in 0..3 {
        assert!(append(&mut sc, &h, &format!("alone {n}")).get("result").is_some());
        leaf(&mut sc);
        assert_eq!(faults.fsyncs() - before, n + 1, "write {n} was fsynced before the read after it");
    }
    // A failing fsync comes after the answer: the write is acknowledged (it is in the file, as pi's would be),
    // and the session is poisoned, so the next write is refused and says so.
    faults.set("fsync-eio", true);
    assert!(append(&mut sc, &h, "answered before its fsync").get("result").is_some());
    leaf(&mut sc);
    faults.set("fsync-eio", false);
    assert_eq!(error_kind(&append(&mut sc, &h, "after the failure")), "session_poisoned");
    let m = SessionManager::open(&path, None, None, Env::system()).unwrap();
    assert_eq!(m.entry_count(), 6, "every acknowledged write is in the file (after the one it opened with)");
    let h = reopen(&mut sc, &h, &path);
    assert!(append(&mut sc, &h, "reopened").get("result").is_some(), "a reopened session writes again");
}
