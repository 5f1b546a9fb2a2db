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
/// pauses between them (and longer ones between lines), so our writes see the file end in the middle of a line.
/// Returns how many it wrote.
fn raw_appender(
    path: String,
    parent: String,
    seed: u32,
    stop: Arc<AtomicBool>,
    written: Arc<std::sync::atomic::AtomicUsize>,
) -> std::thread::JoinHandle<usize> {
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
            written.fetch_add(1, Ordering::Relaxed);
            // Between lines it thinks a little, and now and then longer, as any writer of a session does.
            let pause = if rng.next_u32().is_multiple_of(3) {
                20_000 + rng.next_u32() % 40_000
            } else {
                2000 + rng.next_u32() % 4000
            };
            std::thread::sleep(Duration::from_micros(u64::from(pause)));
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
    let written = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let appender = raw_appender(path.clone(), root.clone(), seed, stop.clone(), written.clone());
    let mut acked = Vec::new();
    let mut refused = 0;
    // At least 20 rounds, and on until the appender has written 20 lines beside them and a few of ours got
    // through (a branch is refused while the appender moves a leaf that follows it, as it should be).
    let mut round = 0;
    while round < 20 || ((written.load(Ordering::Relaxed) < 20 || acked.len() < 3) && round < 1000) {
        round += 1;
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
    check_handle_and_file(&mut sc, &h, &path, round);
    let in_file: HashSet<String> = entries_in_file(&path).into_iter().map(|(id, _)| id).collect();
    for id in &acked {
        assert!(in_file.contains(id), "{id} was acknowledged but is not in the file");
    }
    eprintln!("beside a raw appender (watch {watch}, seed {seed}): {} entries acknowledged, {refused} requests refused, {raw_written} raw lines", acked.len());
    assert!(!acked.is_empty(), "some writes must get through ({refused} refused)");
    assert!(raw_written >= 20, "the appender wrote beside us ({raw_written} lines)");
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

/// A writer that flushes a line a byte at a time (a slow script, a plain pi on a busy disk) takes most of a second
/// over it. An append in that second waits for the line rather than refusing at once: refused, a host must write
/// its entries again later, which pi on pi-sessiond did not manage (the user's prompt was lost).
#[test]
fn an_append_waits_for_a_line_another_writer_is_still_writing_and_then_continues_after_it() {
    let dir = temp_dir();
    let mut sc = Sidecar::new();
    let st = sc.call("session/create", json(&format!(r#"{{"cwd":"/p","sessionDir":"{}"}}"#, dir.path().display())));
    let h = str_of(st.get("handle").unwrap());
    let path = str_of(st.get("sessionFile").unwrap());
    let first = str_of(
        sc.call("session/appendMessage", json(&format!(r#"{{"handle":"{h}","message":{}}}"#, user_message("first"))))
            .get("id")
            .unwrap(),
    );
    let line = format!(
        r#"{{"type":"message","id":"slowline","parentId":"{first}","timestamp":"2026-01-01T00:00:01.000Z","message":{{"role":"user","content":"written a byte at a time","timestamp":1}}}}"#
    ) + "\n";
    let writer = {
        let path = path.clone();
        std::thread::spawn(move || {
            let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
            let bytes = line.as_bytes();
            file.write_all(&bytes[..40]).unwrap();
            for b in &bytes[40..] {
                std::thread::sleep(Duration::from_millis(4));
                file.write_all(std::slice::from_ref(b)).unwrap();
            }
            std::time::Instant::now()
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    let append = format!(r#"{{"handle":"{h}","message":{}}}"#, user_message("ours"));
    let id = sc.start("session/appendMessage", json(&append));
    let r = sc.response(id);
    let answered = std::time::Instant::now();
    let line_done = writer.join().unwrap();
    assert!(answered >= line_done, "answered before the other writer's line was done");
    // The line is now whole lines the handle had not read: refused as any append after another writer's (the
    // host continues after them), never as "writing a line right now".
    if let Some(e) = r.get("error") {
        assert_eq!(e.get("code"), Some(&Json::number(-32801.0)), "{}", r.to_canonical_string());
        assert!(!str_of(e.get("message").unwrap()).contains("right now"), "{}", r.to_canonical_string());
        // Retry, as the protocol says: the next write takes the new lines in (and says the leaf moved), the one
        // after it goes on from there.
        let refused = sc.call_err("session/appendMessage", json(&append));
        assert_eq!(refused.get("data").and_then(|d| d.get("leafId")), Some(&Json::str("slowline")));
        sc.call("session/appendMessage", json(&append));
    }
    let file = entries_in_file(&path);
    let ids: Vec<&str> = file.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids.len(), 3, "first, the other writer's line, ours: {file:?}");
    assert_eq!(file[1], ("slowline".to_owned(), Some(first)));
    assert_eq!(file[2].1.as_deref(), Some("slowline"), "ours continues after the other writer's line");
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

/// Lines of the file that hold `marker`: how many parse as JSON (pi reads them) and how many do not.
fn marked_lines(path: &str, marker: &str) -> (usize, usize) {
    let bytes = std::fs::read(path).unwrap();
    let marked = bytes.split(|&b| b == b'\n').filter(|l| l.windows(marker.len()).any(|w| w == marker.as_bytes()));
    marked.fold((0, 0), |(ok, bad), l| match serde_json::from_slice::<serde_json::Value>(l) {
        Ok(_) => (ok + 1, bad),
        Err(_) => (ok, bad + 1),
    })
}

/// An `appendBatch` of `count` messages of about 4 KiB each, all holding `marker`.
fn big_batch(h: &str, marker: &str, count: usize) -> Json {
    let op = format!(
        r#"{{"method":"session/appendMessage","params":{{"message":{}}}}}"#,
        user_message(&format!("{marker} {}", "z".repeat(4000)))
    );
    json(&format!(r#"{{"handle":"{h}","ops":[{}]}}"#, vec![op; count].join(",")))
}

/// A session with one message, made by a sidecar with these arguments; returns the sidecar, handle and file.
fn session_with_one_message(args: &[&str], env: &[(&str, &str)], dir: &std::path::Path) -> (Sidecar, String, String) {
    let mut sc = Sidecar::spawn(crate::support::sidecar::Wire::Jsonl, args, env);
    let st = sc.call("session/create", json(&format!(r#"{{"cwd":"/p","sessionDir":"{}"}}"#, dir.display())));
    let h = str_of(st.get("handle").unwrap());
    let path = str_of(st.get("sessionFile").unwrap());
    sc.call("session/appendMessage", json(&format!(r#"{{"handle":"{h}","message":{}}}"#, user_message("first"))));
    (sc, h, path)
}

/// Opens the file in a fresh sidecar (which takes back a torn batch) and says how many of the marked lines pi
/// then reads, and how many it skips.
fn after_a_sidecar_opens(path: &str, marker: &str) -> (usize, usize) {
    let mut sc = Sidecar::new();
    let st = sc.call("session/open", json(&format!(r#"{{"path":"{path}"}}"#)));
    assert!(st.get("handle").is_some());
    let seen = marked_lines(path, marker);
    let count =
        sc.call("session/getEntryCount", json(&format!(r#"{{"handle":"{}"}}"#, str_of(st.get("handle").unwrap()))));
    assert_eq!(count, Json::number((1 + seen.0) as f64), "the sidecar reads what the file holds");
    seen
}

#[test]
fn a_batch_torn_by_a_crash_in_the_middle_of_its_write_is_taken_back_whole_at_the_next_open_issue_19() {
    for durability in ["none", "entry", "batch"] {
        let dir = temp_dir();
        // The first append after the file exists writes half of its bytes, and the process aborts.
        let (mut sc, h, path) =
            session_with_one_message(&["--durability", durability], &[("PI_SESSIOND_TEST_TEAR_AT", "1")], dir.path());
        // An odd count, so half of the bytes ends inside a line.
        let id = sc.start("session/appendBatch", big_batch(&h, "torn-batch", 499));
        let r = sc.response_or_exit(id);
        assert!(r.is_none_or(|r| r.get("result").is_none()), "{durability}: nothing torn is acknowledged");
        let (whole_lines, broken) = marked_lines(&path, "torn-batch");
        assert!(whole_lines > 0 && whole_lines < 499, "{durability}: pi alone reads part of it ({whole_lines})");
        assert_eq!(broken, 1, "{durability}: and a torn last line");
        assert_eq!(after_a_sidecar_opens(&path, "torn-batch"), (0, 0), "{durability}: none of the batch is left");
        // Nothing names the torn write any more, and the session takes new writes that pi reads.
        let (mut sc, _, _) = (Sidecar::new(), (), ());
        let st = sc.call("session/open", json(&format!(r#"{{"path":"{path}"}}"#)));
        let h = str_of(st.get("handle").unwrap());
        sc.call("session/appendBatch", big_batch(&h, "next-batch", 3));
        assert_eq!(marked_lines(&path, "next-batch"), (3, 0));
    }
}

#[test]
fn twenty_kills_during_two_megabyte_batches_leave_each_batch_whole_or_absent_under_every_durability_issue_19() {
    let mut rng = Mulberry::new(19);
    for durability in ["none", "entry", "batch"] {
        // How long a batch takes to be answered here, so the kills fall around its write, not all before it.
        let dir = temp_dir();
        let (mut sc, h, _) = session_with_one_message(&["--durability", durability], &[], dir.path());
        let started = std::time::Instant::now();
        sc.call("session/appendBatch", big_batch(&h, "calibration", 500));
        let answered_us = started.elapsed().as_micros() as u32;
        let mut outcomes = [0usize; 2];
        for trial in 0..20 {
            let dir = temp_dir();
            let (mut sc, h, path) = session_with_one_message(&["--durability", durability], &[], dir.path());
            let marker = format!("kill-batch-{trial}");
            sc.start("session/appendBatch", big_batch(&h, &marker, 500));
            let delay = answered_us * 3 / 10 + rng.next_u32() % (answered_us * 7 / 10).max(1);
            std::thread::sleep(Duration::from_micros(u64::from(delay)));
            drop(sc); // kill -9
            let (whole, broken) = after_a_sidecar_opens(&path, &marker);
            assert!(whole == 0 || whole == 500, "{durability} trial {trial}: {whole} of 500 entries");
            assert_eq!(broken, 0, "{durability} trial {trial}: no torn line left");
            outcomes[usize::from(whole == 500)] += 1;
        }
        eprintln!("{durability}: {} batches absent, {} whole after 20 kills", outcomes[0], outcomes[1]);
    }
}
