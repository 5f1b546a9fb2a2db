//! Live and safe, through the real binary: watching a file another process writes (pi itself included), one
//! writer per file across processes, refusing to interleave with pi, and crashes that lose nothing acknowledged.

use std::io::Write;
use std::time::{Duration, Instant};

use pi_sessiond::session::json::{Json, Object};
use pi_sessiond::session::store::WarningKind;
use pi_sessiond::session::{Env, SessionManager};

use crate::support::sidecar::{Sidecar, Wire};
use crate::support::{finish_oracle, json, json_diff, oracle, s, spawn_oracle, str_of, temp_dir, user_message};

fn entry_line(id: &str, parent: &str, text: &str) -> String {
    format!(
        r#"{{"type":"message","id":"{id}","parentId":"{parent}","timestamp":"2025-01-01T00:00:01.000Z","message":{{"role":"user","content":"{text}","timestamp":1}}}}"#
    )
}

fn append_raw(path: &str, bytes: &[u8]) {
    std::fs::OpenOptions::new().append(true).open(path).unwrap().write_all(bytes).unwrap();
}

/// A session file with a header and one entry, written directly (as another program would).
fn session_file(dir: &std::path::Path) -> (String, String) {
    let path = s(&dir.join("live.jsonl"));
    let header = r#"{"type":"session","version":3,"id":"live","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#;
    std::fs::write(
        &path,
        format!(
            "{header}\n{}\n",
            entry_line("e0000000", "", "start").replace(r#""parentId":"""#, r#""parentId":null"#)
        ),
    )
    .unwrap();
    (path, "e0000000".to_owned())
}

/// Waits for the next `session/changed` (up to `timeout`).
fn next_change(sc: &mut Sidecar, timeout: Duration) -> Option<Json> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let m = sc.next_message(left)?;
        if m.get("method") == Some(&Json::str("session/changed")) {
            return m.get("params").cloned();
        }
        sc.backlog.push(m);
        if Instant::now() >= deadline {
            return None;
        }
    }
}

#[test]
fn a_watched_session_follows_external_appends_in_order_and_holds_back_partial_lines() {
    let dir = temp_dir();
    let (path, first) = session_file(dir.path());
    let mut sc = Sidecar::new();
    let st = sc.call("session/open", json(&format!(r#"{{"path":"{path}","watch":true}}"#)));
    let h = str_of(st.get("handle").unwrap());
    let mut parent = first;
    let mut seq = 0.0;
    for n in 0..20 {
        let id = format!("a{n:07}");
        let line = entry_line(&id, &parent, &format!("external {n}"));
        // Half the line first: nothing may be published until its newline arrives.
        append_raw(&path, &line.as_bytes()[..line.len() / 2]);
        assert!(
            next_change(&mut sc, Duration::from_millis(if n == 0 { 300 } else { 30 })).is_none(),
            "a partial line is held back"
        );
        append_raw(&path, format!("{}\n", &line[line.len() / 2..]).as_bytes());
        let change = next_change(&mut sc, Duration::from_secs(10)).expect("the append is published");
        seq += 1.0;
        assert_eq!(change.get("origin"), Some(&Json::str("external")));
        assert_eq!(change.get("seq"), Some(&Json::number(seq)), "consecutive seq");
        assert_eq!(change.get("leafId"), Some(&Json::str(&id)), "the leaf follows the file");
        let Some(Json::Array(entries)) = change.get("change").and_then(|c| c.get("entries")) else {
            panic!("{}", change.to_canonical_string())
        };
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].get("id"), Some(&Json::str(&id)));
        parent = id;
    }
    // The watched handle reads what a fresh open reads.
    let tree = sc.call("session/getTree", json(&format!(r#"{{"handle":"{h}"}}"#)));
    let mut fresh = Sidecar::new();
    let fh = str_of(fresh.call("session/open", json(&format!(r#"{{"path":"{path}"}}"#))).get("handle").unwrap());
    assert_eq!(json_diff("", &tree, &fresh.call("session/getTree", json(&format!(r#"{{"handle":"{fh}"}}"#)))), None);
}

#[test]
fn truncation_replacement_and_deletion_are_reported_not_papered_over() {
    let dir = temp_dir();
    let (path, first) = session_file(dir.path());
    let mut sc = Sidecar::new();
    let h =
        str_of(sc.call("session/open", json(&format!(r#"{{"path":"{path}","watch":true}}"#))).get("handle").unwrap());
    // Replaced by a rename (a new inode).
    let tmp = format!("{path}.new");
    let header = std::fs::read_to_string(&path).unwrap().lines().next().unwrap().to_owned();
    std::fs::write(
        &tmp,
        format!("{header}\n{}\n", entry_line("r1", "", "other").replace(r#""parentId":"""#, r#""parentId":null"#)),
    )
    .unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    let change = next_change(&mut sc, Duration::from_secs(10)).expect("reset");
    assert_eq!(change.get("change").and_then(|c| c.get("kind")), Some(&Json::str("reset")));
    assert_eq!(change.get("leafId"), Some(&Json::str("r1")));
    // Deleted.
    std::fs::remove_file(&path).unwrap();
    let change = next_change(&mut sc, Duration::from_secs(10)).expect("deleted");
    assert_eq!(change.get("change").and_then(|c| c.get("kind")), Some(&Json::str("deleted")));
    assert!(next_change(&mut sc, Duration::from_millis(1500)).is_none(), "reported once");
    // Writing again puts the whole file back, header first.
    sc.call("session/appendMessage", json(&format!(r#"{{"handle":"{h}","message":{}}}"#, user_message("back"))));
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with(r#"{"type":"session""#), "{text}");
    assert!(text.contains("back") && !text.contains(&first));
}

#[test]
fn a_file_rewritten_in_place_with_something_else_is_reported_and_its_handle_keeps_answering_issue_11() {
    let dir = temp_dir();
    let (path, first) = session_file(dir.path());
    let mut sc = Sidecar::new();
    let h =
        str_of(sc.call("session/open", json(&format!(r#"{{"path":"{path}","watch":true}}"#))).get("handle").unwrap());
    let params = json(&format!(r#"{{"handle":"{h}"}}"#));
    // Same inode, new bytes that are not a session (no header), longer than before.
    std::fs::write(&path, "just some notes\n".repeat(200)).unwrap();
    let change = next_change(&mut sc, Duration::from_secs(10)).expect("a change");
    assert_eq!(change.get("change").and_then(|c| c.get("kind")), Some(&Json::str("deleted")));
    // What needs no bytes from the file still answers, the header included.
    let state = sc.call("session/getState", params.clone());
    assert_eq!(state.get("header").and_then(|h| h.get("id")), Some(&Json::str("live")));
    assert_eq!(sc.call("session/getLeafId", params.clone()), Json::str(&first));
    // The entries' bytes are gone: the error says which entry, never "failed to fill whole buffer".
    let e = sc.call_err("session/getEntries", params.clone());
    let message = e.get("message").and_then(Json::as_js_str).unwrap().to_string_lossy();
    assert_eq!(e.get("code"), Some(&Json::number(1006.0)), "{message}");
    assert!(message.contains(&format!("entry \"{first}\" (line 2) is no longer in the session file")), "{message}");
    // A write would land in a file that is not ours any more: refused, the notes untouched.
    let notes = std::fs::read(&path).unwrap();
    let e = sc.call_err(
        "session/appendMessage",
        json(&format!(r#"{{"handle":"{h}","message":{}}}"#, user_message("into the notes?"))),
    );
    assert_eq!(e.get("code"), Some(&Json::number(-32801.0)), "{}", e.to_canonical_string());
    assert!(e.get("message").and_then(Json::as_js_str).unwrap().to_string_lossy().contains("not a pi session"));
    assert_eq!(std::fs::read(&path).unwrap(), notes);
    // A session there again is read and announced, and the handle writes as before.
    let (path, _) = session_file(dir.path());
    let change = next_change(&mut sc, Duration::from_secs(10)).expect("reset");
    assert_eq!(change.get("change").and_then(|c| c.get("kind")), Some(&Json::str("reset")));
    sc.call("session/appendMessage", json(&format!(r#"{{"handle":"{h}","message":{}}}"#, user_message("again"))));
    assert!(std::fs::read_to_string(&path).unwrap().contains("again"));
}

#[test]
fn a_same_length_rewrite_in_place_is_announced_and_reads_give_the_new_entries_issue_11() {
    let dir = temp_dir();
    let path = s(&dir.path().join("same.jsonl"));
    let header = r#"{"type":"session","version":3,"id":"same","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#;
    let chain = |ids: [&str; 3]| {
        let root = entry_line(ids[0], "", "x").replace(r#""parentId":"""#, r#""parentId":null"#);
        format!("{header}\n{root}\n{}\n{}\n", entry_line(ids[1], ids[0], "x"), entry_line(ids[2], ids[1], "x"))
    };
    std::fs::write(&path, chain(["aaaa", "bbbb", "cccc"])).unwrap();
    let mut sc = Sidecar::new();
    let h =
        str_of(sc.call("session/open", json(&format!(r#"{{"path":"{path}","watch":true}}"#))).get("handle").unwrap());
    // Swap the last two entries, keeping the length, the last 64 bytes and the inode.
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(chain(["aaaa", "cccc", "bbbb"]).as_bytes(), 0).unwrap();
    }
    let change = next_change(&mut sc, Duration::from_secs(10)).expect("the rewrite is announced");
    assert_eq!(change.get("change").and_then(|c| c.get("kind")), Some(&Json::str("reset")));
    assert_eq!(change.get("leafId"), Some(&Json::str("bbbb")));
    let entry = sc.call("session/getEntry", json(&format!(r#"{{"handle":"{h}","id":"bbbb"}}"#)));
    assert_eq!((entry.get("id"), entry.get("parentId")), (Some(&Json::str("bbbb")), Some(&Json::str("cccc"))));
    let Ok(branch) = sc.call("session/getBranch", json(&format!(r#"{{"handle":"{h}"}}"#))).into_array() else {
        panic!()
    };
    let ids: Vec<Json> = branch.iter().map(|e| e.get("id").cloned().unwrap()).collect();
    assert_eq!(ids, [Json::str("aaaa"), Json::str("cccc"), Json::str("bbbb")]);
}

#[test]
fn sessions_watch_reports_files_appearing_growing_and_vanishing() {
    let dir = temp_dir();
    let mut sc = Sidecar::new();
    let r = sc.call("sessions/watch", json(&format!(r#"{{"sessionDir":"{}"}}"#, s(dir.path()))));
    let watch_id = str_of(r.get("watchId").unwrap());
    let (path, first) = session_file(dir.path());
    append_raw(&path, format!("{}\n", entry_line("b1", &first, "more")).as_bytes());
    std::fs::write(dir.path().join("notes.txt"), "ignored").unwrap();
    std::fs::remove_file(&path).unwrap();
    let mut kinds = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !kinds.contains(&"removed".to_owned()) && Instant::now() < deadline {
        let Some(m) = sc.next_message(Duration::from_secs(1)) else { continue };
        if m.get("method") == Some(&Json::str("sessions/changed")) {
            let params = m.get("params").unwrap();
            assert_eq!(params.get("watchId"), Some(&Json::str(&watch_id)));
            assert_eq!(params.get("path"), Some(&Json::str(&path)), "only session files are reported");
            kinds.push(str_of(params.get("kind").unwrap()));
        }
    }
    assert_eq!(kinds.first().map(String::as_str), Some("created"));
    assert!(kinds.contains(&"changed".to_owned()), "{kinds:?}");
    assert_eq!(kinds.last().map(String::as_str), Some("removed"));
    sc.call("sessions/unwatch", json(&format!(r#"{{"watchId":"{watch_id}"}}"#)));
}

#[test]
fn a_watch_of_all_sessions_reports_files_in_every_project_directory_and_in_ones_made_later() {
    let agent = temp_dir();
    let root = agent.path().join("sessions");
    let old_project = root.join("--old--");
    std::fs::create_dir_all(&old_project).unwrap();
    let mut sc = Sidecar::spawn(Wire::Jsonl, &["--agent-dir", &s(agent.path())], &[]);
    let e = sc.call_err("sessions/watch", json(&format!(r#"{{"all":true,"sessionDir":"{}"}}"#, s(&root))));
    assert_eq!(e.get("data").and_then(|d| d.get("kind")), Some(&Json::str("invalid_params")), "all with a directory");
    let r = sc.call("sessions/watch", json(r#"{"all":true}"#));
    assert_eq!(r.get("dir"), Some(&Json::str(&s(&root))));
    let watch_id = str_of(r.get("watchId").unwrap());
    // A session in the project directory that was there, and one in a directory made as pi makes it: the
    // directory first, then the file, with no pause between them.
    let (in_old, first) = session_file(&old_project);
    let new_project = root.join("--new--");
    std::fs::create_dir(&new_project).unwrap();
    let (in_new, _) = session_file(&new_project);
    append_raw(&in_old, format!("{}\n", entry_line("b1", &first, "more")).as_bytes());
    let mut seen: Vec<(String, String)> = Vec::new();
    let wanted = |seen: &[(String, String)]| {
        [(&in_old, "created"), (&in_new, "created"), (&in_old, "changed")]
            .iter()
            .all(|(p, k)| seen.iter().any(|(sp, sk)| sp == *p && sk == k))
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !wanted(&seen) && Instant::now() < deadline {
        let Some(m) = sc.next_message(Duration::from_secs(1)) else { continue };
        if m.get("method") == Some(&Json::str("sessions/changed")) {
            let params = m.get("params").unwrap();
            assert_eq!(params.get("watchId"), Some(&Json::str(&watch_id)));
            seen.push((str_of(params.get("path").unwrap()), str_of(params.get("kind").unwrap())));
        }
    }
    assert!(wanted(&seen), "{seen:?}");
    assert!(seen.iter().all(|(p, _)| p == &in_old || p == &in_new), "only session files are reported: {seen:?}");
    sc.call("sessions/unwatch", json(&format!(r#"{{"watchId":"{watch_id}"}}"#)));
}

#[test]
fn a_second_sidecar_cannot_write_a_file_the_first_is_writing_but_can_read_it() {
    let dir = temp_dir();
    let mut a = Sidecar::new();
    let st = a.call("session/create", json(&format!(r#"{{"cwd":"/p","sessionDir":"{}"}}"#, s(dir.path()))));
    let ha = str_of(st.get("handle").unwrap());
    let file = str_of(st.get("sessionFile").unwrap());
    a.call("session/appendMessage", json(&format!(r#"{{"handle":"{ha}","message":{}}}"#, user_message("a holds it"))));
    let mut b = Sidecar::new();
    let hb = str_of(b.call("session/open", json(&format!(r#"{{"path":"{file}"}}"#))).get("handle").unwrap());
    assert_eq!(
        b.call("session/getEntryCount", json(&format!(r#"{{"handle":"{hb}"}}"#))),
        Json::number(1.0),
        "reads are never blocked"
    );
    let e = b.call_err(
        "session/appendMessage",
        json(&format!(r#"{{"handle":"{hb}","message":{}}}"#, user_message("b wants it"))),
    );
    assert_eq!(e.get("data").and_then(|d| d.get("kind")), Some(&Json::str("session_locked")));
    assert_eq!(e.get("data").and_then(|d| d.get("pid")), Some(&Json::number(a.pid() as f64)));
    assert!(str_of(e.get("message").unwrap()).contains(&a.pid().to_string()));
    // When the owner goes away (even killed), the lock goes with it.
    drop(a);
    b.call("session/appendMessage", json(&format!(r#"{{"handle":"{hb}","message":{}}}"#, user_message("b's turn"))));
}

#[test]
fn a_files_lock_holder_is_named_to_other_processes_never_to_itself_and_not_once_it_is_gone() {
    let dir = temp_dir();
    let mut a = Sidecar::new();
    let st = a.call("session/create", json(&format!(r#"{{"cwd":"/p","sessionDir":"{}"}}"#, s(dir.path()))));
    let ha = str_of(st.get("handle").unwrap());
    let file = str_of(st.get("sessionFile").unwrap());
    let holder = |sc: &mut Sidecar, path: &str| {
        sc.call("session/lockHolder", json(&format!(r#"{{"path":"{path}"}}"#))).get("pid").cloned().unwrap()
    };
    let mut b = Sidecar::new();
    assert_eq!(holder(&mut b, &file), Json::Null, "not written yet: no file");
    a.call("session/appendMessage", json(&format!(r#"{{"handle":"{ha}","message":{}}}"#, user_message("a holds it"))));
    assert_eq!(holder(&mut b, &file), Json::number(a.pid() as f64));
    assert_eq!(holder(&mut a, &file), Json::Null, "a server is not another process to itself");
    // Not regular files: nothing to hold, and a named pipe must not block the question.
    let fifo = s(&dir.path().join("pipe.jsonl"));
    rustix::fs::mknodat(rustix::fs::CWD, fifo.as_str(), rustix::fs::FileType::Fifo, 0o600.into(), 0).unwrap();
    assert_eq!(holder(&mut b, &fifo), Json::Null);
    assert_eq!(holder(&mut b, &s(dir.path())), Json::Null);
    drop(a);
    assert_eq!(holder(&mut b, &file), Json::Null, "a holder's lock dies with it");
}

#[test]
fn a_host_can_take_a_files_write_lock_before_it_writes_and_then_holds_it_against_others() {
    let dir = temp_dir();
    let (file, _) = session_file(dir.path());
    let mut a = Sidecar::new();
    let ha = str_of(a.call("session/open", json(&format!(r#"{{"path":"{file}"}}"#))).get("handle").unwrap());
    let mut b = Sidecar::new();
    let hb = str_of(b.call("session/open", json(&format!(r#"{{"path":"{file}"}}"#))).get("handle").unwrap());
    a.call("session/lock", json(&format!(r#"{{"handle":"{ha}"}}"#)));
    a.call("session/lock", json(&format!(r#"{{"handle":"{ha}"}}"#)));
    let holder = b.call("session/lockHolder", json(&format!(r#"{{"path":"{file}"}}"#)));
    assert_eq!(holder.get("pid"), Some(&Json::number(a.pid() as f64)), "held without a write");
    let refused = b.call_err("session/lock", json(&format!(r#"{{"handle":"{hb}"}}"#)));
    assert_eq!(refused.get("data").and_then(|d| d.get("kind")), Some(&Json::str("session_locked")));
    let refused = b.call_err(
        "session/appendMessage",
        json(&format!(r#"{{"handle":"{hb}","message":{}}}"#, user_message("b wants it"))),
    );
    assert_eq!(refused.get("data").and_then(|d| d.get("pid")), Some(&Json::number(a.pid() as f64)));
    // A session not written yet has no file to lock: nothing to do, and nothing written.
    let st = a.call("session/create", json(&format!(r#"{{"cwd":"/p","sessionDir":"{}"}}"#, s(dir.path()))));
    let fresh = str_of(st.get("handle").unwrap());
    a.call("session/lock", json(&format!(r#"{{"handle":"{fresh}"}}"#)));
    assert!(!std::path::Path::new(&str_of(st.get("sessionFile").unwrap())).exists());
    drop(a);
    b.call("session/lock", json(&format!(r#"{{"handle":"{hb}"}}"#)));
}

/// Asking who holds a lock takes a shared one for a moment: a writer taking its lock in that moment must still
/// get it, never `session_locked`.
#[test]
fn asking_who_holds_a_lock_never_makes_a_writer_refused() {
    let dir = temp_dir();
    let mut a = Sidecar::new();
    let st = a.call("session/create", json(&format!(r#"{{"cwd":"/p","sessionDir":"{}"}}"#, s(dir.path()))));
    let ha = str_of(st.get("handle").unwrap());
    let file = str_of(st.get("sessionFile").unwrap());
    a.call("session/appendMessage", json(&format!(r#"{{"handle":"{ha}","message":{}}}"#, user_message("start"))));
    a.call("session/close", json(&format!(r#"{{"handle":"{ha}"}}"#)));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let asker = {
        let (stop, file) = (stop.clone(), file.clone());
        std::thread::spawn(move || {
            let mut b = Sidecar::new();
            let mut asked = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let ids: Vec<u64> =
                    (0..16).map(|_| b.start("session/lockHolder", json(&format!(r#"{{"path":"{file}"}}"#)))).collect();
                for id in ids {
                    assert!(b.response(id).get("result").is_some());
                    asked += 1;
                }
            }
            asked
        })
    };
    // Each round takes the lock afresh: open, write (the lock is taken), close (it is let go).
    for round in 0..400 {
        let h = str_of(a.call("session/open", json(&format!(r#"{{"path":"{file}"}}"#))).get("handle").unwrap());
        let id = a.start(
            "session/appendMessage",
            json(&format!(r#"{{"handle":"{h}","message":{}}}"#, user_message(&format!("round {round}")))),
        );
        let r = a.response(id);
        assert!(r.get("result").is_some(), "round {round}: {}", r.to_canonical_string());
        a.call("session/close", json(&format!(r#"{{"handle":"{h}"}}"#)));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let asked = asker.join().unwrap();
    assert!(asked > 400, "the question was asked throughout ({asked} times)");
}

#[test]
fn an_append_by_another_process_is_published_and_the_stale_mutation_refused() {
    let dir = temp_dir();
    let mut sc = Sidecar::new();
    let st = sc.call("session/create", json(&format!(r#"{{"cwd":"/p","sessionDir":"{}"}}"#, s(dir.path()))));
    let h = str_of(st.get("handle").unwrap());
    let file = str_of(st.get("sessionFile").unwrap());
    let first = str_of(
        sc.call("session/appendMessage", json(&format!(r#"{{"handle":"{h}","message":{}}}"#, user_message("one"))))
            .get("id")
            .unwrap(),
    );
    sc.take_notifications("session/changed");
    append_raw(&file, format!("{}\n", entry_line("pi000001", &first, "pi wrote")).as_bytes());
    let id =
        sc.start("session/appendMessage", json(&format!(r#"{{"handle":"{h}","message":{}}}"#, user_message("ours"))));
    let r = sc.response(id);
    let e = r.get("error").unwrap_or_else(|| panic!("{}", r.to_canonical_string()));
    assert_eq!(e.get("code"), Some(&Json::number(-32801.0)));
    assert_eq!(e.get("data").and_then(|d| d.get("leafId")), Some(&Json::str("pi000001")), "the leaf now");
    assert_eq!(e.get("data").and_then(|d| d.get("path")), Some(&Json::str(&file)), "who was written");
    let notes = sc.take_notifications("session/changed");
    assert_eq!(notes.len(), 1, "the external entry was published");
    assert_eq!(notes[0].get("params").and_then(|p| p.get("origin")), Some(&Json::str("external")));
    // Now up to date: the retry lands on top of pi's entry, nothing interleaved.
    sc.call(
        "session/appendMessage",
        json(&format!(r#"{{"handle":"{h}","expectedLeafId":"pi000001","message":{}}}"#, user_message("ours"))),
    );
    let last = std::fs::read_to_string(&file).unwrap().lines().last().unwrap().to_owned();
    assert!(last.contains(r#""parentId":"pi000001""#), "{last}");
}

/// Appends through the sidecar until killed, then checks the file: every acknowledged entry is there and the
/// file opens.
fn kill_during_appends(delay: Duration, durability: &str) {
    let dir = temp_dir();
    let mut sc = Sidecar::spawn(Wire::Jsonl, &["--durability", durability], &[]);
    let st = sc.call("session/create", json(&format!(r#"{{"cwd":"/p","sessionDir":"{}"}}"#, s(dir.path()))));
    let h = str_of(st.get("handle").unwrap());
    let file = str_of(st.get("sessionFile").unwrap());
    sc.call("session/appendMessage", json(&format!(r#"{{"handle":"{h}","message":{}}}"#, user_message("first"))));
    let started = Instant::now();
    let mut acked = Vec::new();
    let body = "x".repeat(3000);
    let mut n = 0;
    while started.elapsed() < delay {
        let ids: Vec<u64> = (0..20)
            .map(|_| {
                n += 1;
                sc.start(
                    "session/appendMessage",
                    json(&format!(r#"{{"handle":"{h}","message":{}}}"#, user_message(&format!("{n} {body}")))),
                )
            })
            .collect();
        for id in ids {
            let r = sc.response(id);
            acked.push(str_of(r.get("result").unwrap().get("id").unwrap()));
        }
    }
    // More in flight, then SIGKILL mid-stream.
    for _ in 0..50 {
        n += 1;
        sc.start(
            "session/appendMessage",
            json(&format!(r#"{{"handle":"{h}","message":{}}}"#, user_message(&format!("{n} {body}")))),
        );
    }
    std::process::Command::new("kill").args(["-KILL", &sc.pid().to_string()]).status().unwrap();
    sc.wait();
    // Acknowledged ones that arrived before the kill count too.
    while let Some(m) = sc.next_message(Duration::from_millis(50)) {
        if let Some(id) = m.get("result").and_then(|r| r.get("id")) {
            acked.push(str_of(id));
        }
    }
    let m = SessionManager::open(&file, None, None, Env::system()).expect("the file always opens");
    for id in &acked {
        assert!(m.entry(&pi_sessiond::session::key::Key::str(id)).is_some(), "acknowledged entry {id} lost");
    }
    // Nothing but possibly a torn last line can be damaged, and nothing before it.
    let bad: Vec<_> =
        m.warnings().iter().filter(|w| matches!(w.kind, WarningKind::MalformedLine | WarningKind::TornTail)).collect();
    assert!(bad.iter().all(|w| w.kind == WarningKind::TornTail), "{bad:?}");
}

#[test]
fn sigkill_mid_stream_never_loses_an_acknowledged_entry_and_the_file_always_opens() {
    for (i, ms) in [0u64, 15, 40, 90, 150].into_iter().enumerate() {
        kill_during_appends(Duration::from_millis(ms), if i % 2 == 0 { "entry" } else { "batch" });
    }
}

#[test]
fn a_write_torn_by_a_crash_is_kept_reported_and_never_fused_with_the_next_append() {
    let dir = temp_dir();
    let mut sc = Sidecar::spawn(Wire::Jsonl, &[], &[("PI_SESSIOND_TEST_TEAR_AT", "4")]);
    let st = sc.call("session/create", json(&format!(r#"{{"cwd":"/p","sessionDir":"{}"}}"#, s(dir.path()))));
    let h = str_of(st.get("handle").unwrap());
    let file = str_of(st.get("sessionFile").unwrap());
    // The first message creates the file (not an append); appends 1..3 succeed, the 4th tears.
    for n in 0..4 {
        sc.call(
            "session/appendMessage",
            json(&format!(r#"{{"handle":"{h}","message":{}}}"#, user_message(&format!("m{n}")))),
        );
    }
    let id =
        sc.start("session/appendMessage", json(&format!(r#"{{"handle":"{h}","message":{}}}"#, user_message("torn"))));
    let _ = id;
    assert_ne!(sc.wait(), 0, "the hook aborts the process mid-write");
    let m = SessionManager::open(&file, None, None, Env::system()).unwrap();
    assert_eq!(m.entry_count(), 4, "everything before the tear is intact");
    assert!(m.warnings().iter().any(|w| w.kind == WarningKind::TornTail));
    drop(m);
    let mut next = Sidecar::new();
    let h2 = str_of(next.call("session/open", json(&format!(r#"{{"path":"{file}"}}"#))).get("handle").unwrap());
    next.call("session/appendMessage", json(&format!(r#"{{"handle":"{h2}","message":{}}}"#, user_message("after"))));
    let text = std::fs::read_to_string(&file).unwrap();
    let last = text.lines().last().unwrap();
    assert!(last.starts_with(r#"{"type":"message""#) && last.contains("after"), "a line of its own: {last}");
    let m = SessionManager::open(&file, None, None, Env::system()).unwrap();
    assert_eq!(m.entry_count(), 5);
}

#[test]
fn a_watcher_follows_a_real_pi_process_writing_a_session() {
    let dir = temp_dir();
    let (path, _) = session_file(dir.path());
    let mut sc = Sidecar::new();
    let h =
        str_of(sc.call("session/open", json(&format!(r#"{{"path":"{path}","watch":true}}"#))).get("handle").unwrap());
    let mut req = Object::new();
    req.insert("command", Json::str("write"));
    req.insert("file", Json::str(&path));
    req.insert("count", Json::number(40.0));
    req.insert("delayMs", Json::number(15.0));
    req.insert("text", Json::str("from pi"));
    let pi = spawn_oracle(&Json::Object(req));
    let Ok(written) = finish_oracle(pi).into_array() else { panic!() };
    let mut seen = Vec::new();
    while seen.len() < written.len() {
        let change = next_change(&mut sc, Duration::from_secs(10)).expect("pi's appends are published");
        let Some(Json::Array(entries)) = change.get("change").and_then(|c| c.get("entries")) else {
            panic!("{}", change.to_canonical_string())
        };
        seen.extend(entries.iter().map(|e| e.get("id").unwrap().clone()));
    }
    assert_eq!(seen, written, "every entry pi wrote, in order");
    // The same tree a fresh open (by pi) gives.
    let mut req = Object::new();
    req.insert("command", Json::str("reads"));
    req.insert("files", Json::Array(vec![Json::str(&path)]));
    let Ok(pi_reads) = oracle(&Json::Object(req)).into_array() else { panic!() };
    let pi_tree = pi_reads[0].get("ok").and_then(|r| r.get("tree")).unwrap().clone();
    let ours = sc.call("session/getTree", json(&format!(r#"{{"handle":"{h}"}}"#)));
    assert_eq!(json_diff("", &pi_tree, &ours), None);
}

#[test]
fn writing_while_a_real_pi_process_writes_the_same_file_never_interleaves_a_line() {
    let dir = temp_dir();
    let (path, _) = session_file(dir.path());
    let mut sc = Sidecar::new();
    let h = str_of(sc.call("session/open", json(&format!(r#"{{"path":"{path}"}}"#))).get("handle").unwrap());
    let mut req = Object::new();
    req.insert("command", Json::str("write"));
    req.insert("file", Json::str(&path));
    // Long enough (about a second) that the two writers overlap even on a loaded machine.
    req.insert("count", Json::number(300.0));
    req.insert("delayMs", Json::number(3.0));
    req.insert("text", Json::str("pi line"));
    let mut pi = spawn_oracle(&Json::Object(req));
    // Start once pi is writing, and keep writing while it does.
    let started = Instant::now();
    while !std::fs::read_to_string(&path).unwrap().contains("pi line 0") {
        assert!(started.elapsed() < Duration::from_secs(30), "pi never started writing");
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut ours = Vec::new();
    let mut refused = 0;
    while pi.0.try_wait().unwrap().is_none() || ours.len() < 20 {
        let id = sc.start(
            "session/appendMessage",
            json(&format!(r#"{{"handle":"{h}","message":{}}}"#, user_message(&format!("ours {}", ours.len())))),
        );
        let r = sc.response(id);
        match (r.get("result"), r.get("error")) {
            (Some(v), _) => ours.push(v.get("id").unwrap().clone()),
            (_, Some(e)) if e.get("code") == Some(&Json::number(-32801.0)) => refused += 1,
            _ => panic!("{}", r.to_canonical_string()),
        }
    }
    let Ok(theirs) = finish_oracle(pi).into_array() else { panic!() };
    let text = std::fs::read_to_string(&path).unwrap();
    for (n, line) in text.lines().enumerate() {
        assert!(Json::parse(line.as_bytes()).is_ok(), "line {} is not JSON (interleaved?): {line}", n + 1);
    }
    let m = SessionManager::open(&path, None, None, Env::system()).unwrap();
    for id in ours.iter().chain(theirs.iter()) {
        let key = pi_sessiond::session::key::Key::from_json(Some(id));
        assert!(m.entry(&key).is_some(), "entry {} missing", id.to_canonical_string());
    }
    // The two writers really overlapped: some of our lines sit between pi's first and last.
    let line_of =
        |id: &Json| text.lines().position(|l| l.contains(&format!("\"id\":{}", id.to_canonical_string()))).unwrap();
    let (pi_first, pi_last) = (line_of(&theirs[0]), line_of(&theirs[theirs.len() - 1]));
    let between = ours.iter().map(line_of).filter(|&l| l > pi_first && l < pi_last).count();
    assert!(between > 0, "no overlap between the writers (refused {refused})");
}

#[test]
fn a_watched_file_that_stays_emptied_is_warned_about_once_not_at_every_poll() {
    use std::io::{BufRead, Read};
    let dir = temp_dir();
    let (path, _) = session_file(dir.path());
    let mut child = std::process::Command::new(crate::support::sidecar::binary())
        .args(["--no-index", "--poll-ms", "50"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut answer = String::new();
    let open =
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"session/open","params":{{"path":"{path}","watch":true}}}}"#);
    writeln!(stdin, "{open}").unwrap();
    out.read_line(&mut answer).unwrap();
    assert!(answer.contains("\"result\""), "{answer}");
    // Emptied, and left so while its stamp is too fresh to vouch for it: it is read again at each poll.
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(0).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    drop(stdin);
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert!(rest.contains(r#""kind":"deleted""#), "the emptied file is reported: {rest}");
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    child.wait().unwrap();
    assert_eq!(stderr.matches("is no longer a pi session").count(), 1, "{stderr}");
}
