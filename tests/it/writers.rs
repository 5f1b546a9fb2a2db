//! Writing beside a writer that is not us (issue 19): a raw appender that writes pi-shaped lines in pieces,
//! flushing at any byte, as a plain pi or a careless script would, while a handle branches, appends and batches
//! with `expectedLeafId`. Whatever it does between our look at the file and our write, no request panics or answers
//! `internal_error`, no handle holds an entry the file lacks, no entry we write names a parent the file lacks, and
//! every entry we acknowledged is in the file as pi reads it.

use std::collections::HashSet;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pi_sessiond::session::json::Json;

use crate::support::sidecar::Sidecar;
use crate::support::{json, str_of, temp_dir, user_message, Mulberry};

/// The file's entries as pi reads them: every line that parses as a JSON object, the header aside (an
/// unterminated last line counts when it parses), as `(id, parentId)`.
fn entries_in_file(path: &str) -> Vec<(String, Option<String>)> {
    let bytes = std::fs::read(path).unwrap();
    let mut out = Vec::new();
    for line in bytes.split(|&b| b == b'\n') {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) else { continue };
        if v.get("type").and_then(|t| t.as_str()) == Some("session") {
            continue;
        }
        let Some(id) = v.get("id").and_then(|i| i.as_str()) else { continue };
        let parent = v.get("parentId").and_then(|p| p.as_str()).map(str::to_owned);
        out.push((id.to_owned(), parent));
    }
    out
}

/// Writes pi-shaped entries (each a child of `parent`) to `path` until `stop`, every line in random pieces with
/// pauses between them, so our writes see the file end in the middle of a line. Returns how many it wrote.
fn raw_appender(path: String, parent: String, seed: u32, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut rng = Mulberry::new(seed);
        let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        let mut n = 0;
        while !stop.load(Ordering::Relaxed) {
            n += 1;
            let line = format!(
                r#"{{"type":"message","id":"raw{seed}x{n}","parentId":"{parent}","timestamp":"2026-01-01T00:00:01.000Z","message":{{"role":"user","content":"raw {n} {}","timestamp":1}}}}"#,
                "y".repeat((rng.next_u32() % 300) as usize)
            ) + "\n";
            let bytes = line.as_bytes();
            let mut at = 0;
            while at < bytes.len() {
                let piece = 1 + (rng.next_u32() as usize % bytes.len());
                let end = (at + piece).min(bytes.len());
                file.write_all(&bytes[at..end]).unwrap();
                at = end;
                std::thread::sleep(Duration::from_micros(u64::from(rng.next_u32() % 3000)));
            }
        }
        n
    })
}

/// What a well-formed request may be answered with: a result, or one of the errors a write beside another
/// writer may meet. Never `internal_error`.
fn check_answer(r: &Json, what: &str) -> Option<String> {
    let e = r.get("error")?;
    let kind = e.get("data").and_then(|d| d.get("kind")).map(str_of).unwrap_or_default();
    assert_ne!(e.get("code"), Some(&Json::number(-32603.0)), "{what}: {}", r.to_canonical_string());
    assert_ne!(kind, "internal_error", "{what}: {}", r.to_canonical_string());
    Some(kind)
}

/// The handle's entries are all in the file, and every entry in the file names a parent the file holds.
fn check_handle_and_file(sc: &mut Sidecar, h: &str, path: &str, round: usize) {
    let held = sc.call("session/getEntries", json(&format!(r#"{{"handle":"{h}"}}"#)));
    let file = entries_in_file(path);
    let in_file: HashSet<&str> = file.iter().map(|(id, _)| id.as_str()).collect();
    let Json::Array(ref held) = held else { panic!("getEntries gives an array") };
    for e in held {
        let id = str_of(e.get("id").unwrap());
        assert!(in_file.contains(id.as_str()), "round {round}: the handle holds {id}, which the file lacks");
    }
    for (id, parent) in &file {
        if let Some(p) = parent {
            assert!(in_file.contains(p.as_str()), "round {round}: {id} names parent {p}, which the file lacks");
        }
    }
}

fn branch_and_append_beside_a_raw_appender(watch: bool, seed: u32) {
    let dir = temp_dir();
    let mut sc = Sidecar::new();
    let st = sc.call("session/create", json(&format!(r#"{{"cwd":"/p","sessionDir":"{}"}}"#, dir.path().display())));
    let h = str_of(st.get("handle").unwrap());
    let path = str_of(st.get("sessionFile").unwrap());
    let root = str_of(
        sc.call("session/appendMessage", json(&format!(r#"{{"handle":"{h}","message":{}}}"#, user_message("root"))))
            .get("id")
            .unwrap(),
    );
    if watch {
        sc.call("session/watch", json(&format!(r#"{{"handle":"{h}"}}"#)));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let appender = raw_appender(path.clone(), root.clone(), seed, stop.clone());
    let mut acked = Vec::new();
    let mut refused = 0;
    for round in 0..20 {
        // A branch back to the root, then an append (or a batch) that expects it: the look at the file and the
        // write both meet the appender's pieces.
        let b = sc.start("session/branch", json(&format!(r#"{{"handle":"{h}","entryId":"{root}"}}"#)));
        let message = user_message(&format!("ours {round}"));
        let a = if round % 2 == 0 {
            sc.start(
                "session/appendMessage",
                json(&format!(r#"{{"handle":"{h}","expectedLeafId":"{root}","message":{message}}}"#)),
            )
        } else {
            sc.start(
                "session/appendBatch",
                json(&format!(
                    r#"{{"handle":"{h}","expectedLeafId":"{root}","ops":[
                        {{"method":"session/appendMessage","params":{{"message":{message}}}}},
                        {{"method":"session/appendLabelChange","params":{{"targetId":{{"op":0}},"label":"r{round}"}}}},
                        {{"method":"session/appendMessage","params":{{"message":{message}}}}}]}}"#
                )),
            )
        };
        let rb = sc.response(b);
        if check_answer(&rb, "branch").is_some() {
            refused += 1;
        }
        let ra = sc.response(a);
        match check_answer(&ra, "append") {
            Some(_) => refused += 1,
            None => {
                let result = ra.get("result").unwrap();
                match result.get("results") {
                    Some(Json::Array(results)) => acked.extend(results.iter().filter_map(|r| r.get("id")).map(str_of)),
                    _ => acked.push(str_of(result.get("id").unwrap())),
                }
            }
        }
        check_handle_and_file(&mut sc, &h, &path, round);
    }
    stop.store(true, Ordering::Relaxed);
    let raw_written = appender.join().unwrap();
    check_handle_and_file(&mut sc, &h, &path, 20);
    let in_file: HashSet<String> = entries_in_file(&path).into_iter().map(|(id, _)| id).collect();
    for id in &acked {
        assert!(in_file.contains(id), "{id} was acknowledged but is not in the file");
    }
    eprintln!("beside a raw appender (watch {watch}, seed {seed}): {} entries acknowledged, {refused} requests refused, {raw_written} raw lines", acked.len());
    assert!(!acked.is_empty(), "some writes must get through ({refused} refused)");
    assert!(raw_written > 20, "the appender wrote beside us ({raw_written} lines)");
}

#[test]
fn branch_and_append_beside_a_raw_appender_flushing_at_any_byte_keep_handle_and_file_exact_issue_19() {
    for seed in 1..=3 {
        branch_and_append_beside_a_raw_appender(false, seed);
    }
}

#[test]
fn branch_and_append_beside_a_raw_appender_on_a_watched_handle_keep_handle_and_file_exact_issue_19() {
    for seed in 11..=13 {
        branch_and_append_beside_a_raw_appender(true, seed);
    }
}

/// Ids from the operating system until `left` runs out, then a panic: a stand-in for a bug anywhere on the write
/// path.
struct PanickingIds {
    left: Arc<std::sync::atomic::AtomicUsize>,
}

impl pi_sessiond::session::ids::IdSource for PanickingIds {
    fn random_uuid(&mut self) -> String {
        self.tick();
        uuid::Uuid::new_v4().to_string()
    }
    fn random_bytes(&mut self) -> [u8; 16] {
        self.tick();
        *uuid::Uuid::new_v4().as_bytes()
    }
}

impl PanickingIds {
    fn tick(&self) {
        if self.left.fetch_sub(1, Ordering::SeqCst) == 0 {
            panic!("a bug on the write path");
        }
    }
}

#[test]
fn a_write_that_panics_half_way_leaves_the_session_exactly_as_its_file_not_with_a_phantom_entry_issue_19() {
    use pi_sessiond::session::change::Op;
    use pi_sessiond::session::{Env, SessionManager};
    let dir = temp_dir();
    let left = Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX));
    let env = || Env { ids: Box::new(PanickingIds { left: left.clone() }), ..Env::system() };
    let mut m =
        SessionManager::create("/p", Some(&dir.path().display().to_string()), Default::default(), env()).unwrap();
    let message = |text: &str| json(&user_message(text));
    m.append_message(message("root")).unwrap();
    let root = m.leaf_id().clone();
    m.append_message(message("second")).unwrap();
    let path = m.session_file().unwrap().to_owned();
    m.branch(&root).unwrap();
    // The batch stages its first entry, then the id of its second one panics.
    left.store(1, Ordering::SeqCst);
    let batch = Op::Batch(vec![
        Op::AppendMessage { message: message("staged") },
        Op::AppendMessage { message: message("never") },
    ]);
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m.apply(batch, None))).is_err();
    assert!(panicked, "the id source panicked inside the write");
    left.store(usize::MAX, Ordering::SeqCst);
    let in_file: Vec<String> = entries_in_file(&path).into_iter().map(|(id, _)| id).collect();
    let held: Vec<String> = m.entries().into_iter().map(|i| m.records()[i].id.display()).collect();
    assert_eq!(held, in_file, "memory is the file again");
    // The next write names a parent the file holds.
    m.append_message(message("after")).unwrap();
    let file = entries_in_file(&path);
    let ids: HashSet<&str> = file.iter().map(|(id, _)| id.as_str()).collect();
    for (id, parent) in &file {
        assert!(parent.as_deref().is_none_or(|p| ids.contains(p)), "{id} names a parent the file lacks");
    }
}
