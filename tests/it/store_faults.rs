//! The write path against a disk that fails on demand, in-process: the engine's store takes its file operations
//! from `Env::disk` (the `store::Disk` seam), and `support/faulty_disk.rs` fails the call a test chooses. After
//! each failure the file, read again as pi reads it, holds every acknowledged entry and no half entry, a write
//! that failed left nothing of itself (unless a later fsync was what failed: it landed and is reported, never
//! acknowledged), the handle holds exactly what the file holds, and the next write succeeds or says the session
//! is poisoned (and succeeds once it is opened again). `write_faults.rs` makes the same faults in the real binary
//! through an `LD_PRELOAD` shim.

use std::sync::Arc;

use pi_sessiond::session::context::Bodies;
use pi_sessiond::session::json::Json;
use pi_sessiond::session::store::{Disk, Durability};
use pi_sessiond::session::{Env, Error, NewSessionOptions, Op, SessionManager};

use crate::support::faulty_disk::{Call, Fault, FaultyDisk, EIO, ENOMEM, ENOSPC};
use crate::support::{s, temp_dir, user_message, write_v1_session};

fn env(disk: &Arc<FaultyDisk>) -> Env {
    let disk: Arc<dyn Disk> = disk.clone();
    Env { disk, ..Env::system() }
}

fn message(text: &str) -> Op {
    Op::AppendMessage { message: Json::parse(user_message(text).as_bytes()).unwrap() }
}

/// Every record of a session (header first) as its bytes, and its leaf.
fn contents(m: &SessionManager) -> (Vec<String>, String) {
    let bodies = m.bodies();
    let records = (0..m.records().len())
        .map(|i| String::from_utf8(bodies.bytes(i).expect("a record's bytes read again")).unwrap())
        .collect();
    (records, m.leaf_id().display())
}

/// The file as pi would read it now (through the real disk): None when there is none.
fn file_contents(path: &str) -> Option<(Vec<String>, String)> {
    std::path::Path::new(path).exists().then(|| {
        let m = SessionManager::open(path, None, None, Env::system()).expect("the file opens as a session");
        contents(&m)
    })
}

/// An op's outcome as a test sees it: the new entries' ids when it was acknowledged (its commit waited for), or
/// the failure, and whether the write landed nonetheless (a failed group-commit fsync: reported, not acked).
enum Answer {
    Acked(Vec<String>),
    Failed { error: Error, landed: bool },
}

fn run(m: &mut SessionManager, op: Op) -> Answer {
    let outcome = m.apply(op, None);
    match outcome.result {
        Err(error) => {
            drop(outcome.commit);
            Answer::Failed { error, landed: false }
        }
        Ok(value) => match outcome.commit.wait() {
            Err(error) => Answer::Failed { error, landed: true },
            Ok(()) => {
                let ids = match &value {
                    pi_sessiond::session::OpValue::Batch(values) => {
                        values.iter().filter_map(|v| v.id().map(str::to_owned)).collect()
                    }
                    v => v.id().map(str::to_owned).into_iter().collect(),
                };
                Answer::Acked(ids)
            }
        },
    }
}

/// What a scripted run has seen so far.
struct Script {
    disk: Arc<FaultyDisk>,
    dir: tempfile::TempDir,
    m: SessionManager,
    durability: Durability,
    /// Acknowledged entries: their ids.
    acked: Vec<String>,
    /// A legacy file's bytes, which stay as they are until its migration is written.
    legacy: Option<Vec<u8>>,
    /// Failures seen (call faults hit), for the caller to count.
    failures: usize,
}

impl Script {
    fn path(&self) -> String {
        self.m.session_file().expect("a persisted session").to_owned()
    }

    /// Runs `op` and checks the invariants; a poisoned session is opened again and the op retried once. Returns
    /// whether the op was acknowledged the first time.
    fn step(&mut self, op: impl Fn() -> Op, what: &str) -> bool {
        let before = std::fs::read(self.path()).ok();
        let handle_before = self.disk.aside(|| contents(&self.m));
        match run(&mut self.m, op()) {
            Answer::Acked(ids) => {
                self.acked.extend(ids);
                self.check(what);
                true
            }
            Answer::Failed { error, landed } => {
                self.failures += 1;
                let after = std::fs::read(self.path()).ok();
                // A rewrite's rename cannot be taken back: when the directory's fsync after it fails, the write
                // is in the file, reported, never acknowledged, and the session is poisoned (memory lags the file
                // until it is opened again, which the poison forces).
                let renamed = self.renamed_then_dir_sync_failed();
                if renamed {
                    assert!(
                        matches!(error, Error::Io { op: "sync", .. }),
                        "{what}: reported as a failed sync: {error}"
                    );
                    assert!(self.m.is_poisoned(), "{what}: a rename whose directory fsync failed poisons the session");
                } else if !landed {
                    let (after, before) = (after.map(String::from_utf8), before.map(String::from_utf8));
                    assert_eq!(after, before, "{what}: a write that failed ({error}) left nothing of itself");
                    let now = self.disk.aside(|| contents(&self.m));
                    assert_eq!(now, handle_before, "{what}: memory is as it was before the failure");
                }
                if !renamed {
                    self.check(what);
                }
                // The next write succeeds, or says the session is poisoned; then it succeeds once reopened.
                match run(&mut self.m, op()) {
                    Answer::Acked(ids) => self.acked.extend(ids),
                    Answer::Failed { error: Error::Poisoned { .. }, .. } => {
                        let path = self.path();
                        let mut again = SessionManager::open(&path, None, None, env(&self.disk))
                            .unwrap_or_else(|e| panic!("{what}: the poisoned session opens again: {e}"));
                        again.set_durability(self.durability);
                        self.m = again;
                        self.check(&format!("{what}, reopened"));
                        match run(&mut self.m, op()) {
                            Answer::Acked(ids) => self.acked.extend(ids),
                            Answer::Failed { error, .. } => panic!("{what}: the write after reopening failed: {error}"),
                        }
                    }
                    Answer::Failed { error, .. } => panic!("{what}: the write after a one-off fault failed: {error}"),
                }
                self.check(&format!("{what}, written again"));
                false
            }
        }
    }

    /// The planned fault hit the directory fsync that follows a rewrite's rename.
    fn renamed_then_dir_sync_failed(&self) -> bool {
        let Some((n, Call::SyncDir, _)) = self.disk.hit() else { return false };
        n >= 2 && self.disk.log()[n as usize - 2].0 == Call::Rename
    }

    /// The invariants: the file is a session pi reads with every acknowledged entry and exactly what the handle
    /// holds, and nothing is left beside it but the session file (an append intent only when removing it was
    /// what failed).
    fn check(&self, what: &str) {
        let path = self.path();
        if self.m.pending_repairs().rewrite {
            // Not migrated yet: ids an open makes up are not in the file to compare; its bytes are the old ones.
            let legacy = self.legacy.as_ref().expect("only a legacy file waits for its migration");
            assert_eq!(&std::fs::read(&path).unwrap(), legacy, "{what}: the old file stays whole until migrated");
            assert!(self.acked.is_empty(), "{what}: nothing was acknowledged before the migration");
            return;
        }
        let Some((records, leaf)) = file_contents(&path) else {
            assert!(self.acked.is_empty(), "{what}: acknowledged entries but no file");
            assert!(!self.m.is_flushed(), "{what}: the handle says the file was written, but there is none");
            return;
        };
        for id in &self.acked {
            let needle = format!("\"id\":\"{id}\"");
            assert!(records.iter().any(|r| r.contains(&needle)), "{what}: acknowledged entry {id} is in the file");
        }
        let held = self.disk.aside(|| contents(&self.m));
        assert_eq!((records, leaf), held, "{what}: the handle holds exactly what the file holds");
        // A failed write is cut back to where it started; only a cut that failed too (which poisons the
        // session) leaves its part behind, a torn line pi skips and the next write ends.
        let raw = std::fs::read(&path).unwrap();
        let cut_failed = self.disk.hit().is_some_and(|(_, call, _)| call == Call::SetLen);
        assert!(raw.ends_with(b"\n") || cut_failed, "{what}: the file ends with a whole line");
        let intent_failed = self
            .disk
            .hit()
            .is_some_and(|(_, call, p)| call == Call::Remove && p.to_string_lossy().ends_with(".pi-sessiond-append"));
        let names: Vec<String> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !(n.ends_with(".jsonl") || intent_failed && n.ends_with(".pi-sessiond-append")))
            .collect();
        assert!(names.is_empty(), "{what}: nothing left beside the session: {names:?}");
    }
}

/// A new session: its first write creates the file, then single appends, a batch of several lines (announced in
/// the intent file), and more appends.
fn new_session_script(disk: Arc<FaultyDisk>, durability: Durability) -> Script {
    let dir = temp_dir();
    let mut m = SessionManager::create("/p", Some(&s(dir.path())), NewSessionOptions::default(), env(&disk)).unwrap();
    m.set_durability(durability);
    let mut script = Script { disk, dir, m, durability, acked: Vec::new(), legacy: None, failures: 0 };
    script.step(|| message("first"), "the first write (creates the file)");
    script.step(|| message("second"), "an append");
    script.step(|| Op::Batch(vec![message("b1"), message("b2"), message("b3")]), "a batch of three lines");
    script.step(|| Op::AppendSessionInfo { name: "named".into() }, "a session name");
    script.step(|| message("last"), "the last append");
    script
}

/// A version 1 file: the first write migrates it through a temporary file renamed over it; then appends.
fn legacy_script(disk: Arc<FaultyDisk>, durability: Durability) -> Script {
    let dir = temp_dir();
    let path = s(&dir.path().join("legacy.jsonl"));
    write_v1_session(&path);
    // The open reads through the disk too: a failed read fails the open, and the next one reads it whole.
    let mut m = SessionManager::open(&path, None, None, env(&disk))
        .or_else(|e| {
            assert!(matches!(e, Error::Io { .. }), "a failed read fails the open with an I/O error: {e}");
            SessionManager::open(&path, None, None, env(&disk))
        })
        .expect("the open after a failed one reads the file");
    m.set_durability(durability);
    let mut script = Script { disk, dir, m, durability, acked: Vec::new(), legacy: None, failures: 0 };
    script.legacy = Some(std::fs::read(&path).unwrap());
    script.step(|| message("after migration"), "the migrating write (a rewrite)");
    script.step(|| message("next"), "an append to the migrated file");
    script
}

/// Fails call 1, 2, 3, … of `script` in turn (once with the call's plain failure, once as a short write), each
/// run on a fresh directory, until a run ends without reaching the fault; every run checks the invariants after
/// every step. Returns how many calls the script makes without faults.
fn fail_each_call_in_turn(script: fn(Arc<FaultyDisk>, Durability) -> Script, durability: Durability) -> u64 {
    let clean = FaultyDisk::new();
    let clean_script = script(clean.clone(), durability);
    assert_eq!(clean_script.failures, 0, "the script runs cleanly on a disk that does not fail");
    let calls = clean.calls();
    for fault in [Fault::Errno(EIO), Fault::Errno(ENOSPC), Fault::ShortWrite] {
        for n in 1..=calls {
            let disk = FaultyDisk::new();
            disk.fail_call(n, fault);
            let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| script(disk.clone(), durability)));
            if let Err(panic) = done {
                eprintln!("{durability:?}, {fault:?} at call {n} ({:?}); calls: {:?}", disk.hit(), disk.log());
                std::panic::resume_unwind(panic);
            }
            assert!(disk.hit().is_some(), "call {n} of {calls} was reached (the script makes the same calls each run)");
        }
    }
    calls
}

#[test]
fn each_call_of_a_new_sessions_writes_failing_in_turn_leaves_the_file_whole_and_the_handle_matching_it() {
    for durability in [Durability::None, Durability::Entry, Durability::Batch] {
        let calls = fail_each_call_in_turn(new_session_script, durability);
        assert!(calls >= 9, "{durability:?}: the script makes the calls a write makes ({calls})");
    }
}

#[test]
fn each_call_of_a_migrating_rewrite_and_the_appends_after_it_failing_in_turn_leaves_the_file_whole() {
    for durability in [Durability::None, Durability::Entry, Durability::Batch] {
        let calls = fail_each_call_in_turn(legacy_script, durability);
        assert!(calls >= 6, "{durability:?}: the script makes the calls a rewrite makes ({calls})");
    }
}

/// A session file pi wrote (a header and one entry), opened on `disk` with `durability`.
fn opened(disk: &Arc<FaultyDisk>, durability: Durability) -> (tempfile::TempDir, String, SessionManager) {
    let dir = temp_dir();
    let path = s(&dir.path().join("s.jsonl"));
    let mut m = SessionManager::create("/p", Some(&s(dir.path())), NewSessionOptions::default(), env(disk)).unwrap();
    run(&mut m, message("written by pi"));
    std::fs::rename(m.session_file().unwrap(), &path).unwrap();
    let mut m = SessionManager::open(&path, None, None, env(disk)).unwrap();
    m.set_durability(durability);
    (dir, path, m)
}

#[test]
fn an_append_whose_fsync_fails_is_reported_and_the_handle_matches_the_file() {
    let disk = FaultyDisk::new();
    let (_dir, path, mut m) = opened(&disk, Durability::Entry);
    let before = std::fs::read(&path).unwrap();
    disk.fail_next(Call::SyncData, "s.jsonl", Fault::Errno(EIO));
    let Answer::Failed { error, landed: false } = run(&mut m, message("not durable")) else {
        panic!("an append whose fsync failed is reported as failed");
    };
    assert!(matches!(error, Error::Io { op: "sync", .. }), "{error}");
    assert_eq!(std::fs::read(&path).unwrap(), before, "the entry whose fsync failed is cut back out of the file");
    assert_eq!(disk.aside(|| contents(&m)), file_contents(&path).unwrap(), "the handle holds what the file holds");
    assert!(m.is_poisoned(), "a failed fsync poisons the session");
    assert!(matches!(run(&mut m, message("refused")), Answer::Failed { error: Error::Poisoned { .. }, .. }));
    drop(m);
    let mut again = SessionManager::open(&path, None, None, env(&disk)).unwrap();
    again.set_durability(Durability::Entry);
    assert!(matches!(run(&mut again, message("after reopening")), Answer::Acked(_)));
    assert_eq!(disk.aside(|| contents(&again)), file_contents(&path).unwrap());
}

#[test]
fn a_short_write_is_rolled_back_before_the_next_append() {
    let disk = FaultyDisk::new();
    let (_dir, path, mut m) = opened(&disk, Durability::None);
    let before = std::fs::read(&path).unwrap();
    disk.fail_next(Call::Write, "s.jsonl", Fault::ShortWrite);
    let Answer::Failed { error, landed: false } = run(&mut m, message("half of me lands")) else {
        panic!("a write the disk took half of is reported as failed");
    };
    assert!(matches!(&error, Error::Io { source, .. } if source.raw_os_error() == Some(ENOSPC)), "{error}");
    assert_eq!(std::fs::read(&path).unwrap(), before, "the half that landed is cut back");
    assert!(!m.is_poisoned(), "a cut back that succeeded leaves the session writable");
    let Answer::Acked(ids) = run(&mut m, message("whole")) else { panic!("the next append succeeds") };
    let raw = String::from_utf8(std::fs::read(&path).unwrap()).unwrap();
    assert!(raw.starts_with(std::str::from_utf8(&before).unwrap()), "the next append lands where the cut left off");
    assert_eq!(raw.lines().count(), 3, "the header, pi's entry and the new one, each on a whole line: {raw}");
    assert!(raw.contains(&ids[0]) && !raw.contains("half of me"));
    assert_eq!(disk.aside(|| contents(&m)), file_contents(&path).unwrap(), "the handle holds what the file holds");
}

#[test]
fn a_rewrite_whose_rename_fails_leaves_the_old_file_whole() {
    let disk = FaultyDisk::new();
    let dir = temp_dir();
    let path = s(&dir.path().join("legacy.jsonl"));
    write_v1_session(&path);
    let before = std::fs::read(&path).unwrap();
    let mut m = SessionManager::open(&path, None, None, env(&disk)).unwrap();
    disk.fail_next(Call::Rename, "legacy.jsonl", Fault::Errno(EIO));
    let Answer::Failed { landed: false, .. } = run(&mut m, message("needs the migration")) else {
        panic!("a rewrite whose rename failed is reported as failed");
    };
    assert_eq!(std::fs::read(&path).unwrap(), before, "the old file is whole and untouched");
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["legacy.jsonl"], "the temporary file is gone");
    assert!(m.pending_repairs().rewrite, "the migration is still owed");
    let Answer::Acked(ids) = run(&mut m, message("migrated now")) else { panic!("the next write migrates") };
    let (records, _) = file_contents(&path).unwrap();
    assert!(records[0].contains("\"version\":3") && records.last().unwrap().contains(&ids[0]));
    assert_eq!(disk.aside(|| contents(&m)), file_contents(&path).unwrap(), "the handle holds what the file holds");
}

/// What an open read, in a form two opens can be compared by: every line's place and whether it is a record.
fn shape(loaded: &pi_sessiond::session::store::LoadedFile) -> (u64, usize, Vec<(u64, u64, bool)>) {
    let lines = loaded.lines.iter().map(|l| (l.offset, l.len, l.record.is_some())).collect();
    (loaded.len, loaded.records.len(), lines)
}

#[test]
fn a_failing_kept_skeleton_write_leaves_no_trusted_damaged_file() {
    use pi_sessiond::session::kept::Keep;
    use pi_sessiond::session::store::SessionFile;
    let dir = temp_dir();
    let path = crate::support::big_session(dir.path(), 300, 1000, "end");
    let (_, fresh) = SessionFile::open(&path, Durability::None).unwrap();
    let kept_dir = s(&dir.path().join("kept"));
    let clean = FaultyDisk::new();
    Keep::in_dir(&kept_dir).open_on(&(clean.clone() as Arc<dyn Disk>), &path, Durability::None, true).unwrap();
    let calls = clean.calls();
    assert!(clean.log().iter().any(|(call, _)| *call == Call::Rename), "a clean open keeps what it read");
    for fault in [Fault::Errno(EIO), Fault::ShortWrite] {
        for n in 1..=calls {
            std::fs::remove_dir_all(&kept_dir).ok();
            let disk = FaultyDisk::new();
            disk.fail_call(n, fault);
            let keep = Keep::in_dir(&kept_dir);
            let first = keep.open_on(&(disk.clone() as Arc<dyn Disk>), &path, Durability::None, true);
            if let Ok((_, loaded)) = &first {
                assert_eq!(shape(loaded), shape(&fresh), "call {n} ({fault:?}): an open that succeeds read it all");
            }
            // The next open trusts what was kept only if it is whole; either way it reads what a fresh open reads.
            let (_, again) = keep.open(&path, Durability::None).unwrap();
            assert_eq!(shape(&again), shape(&fresh), "call {n} ({fault:?}, {:?}): the next open", disk.hit());
            let left: Vec<_> = std::fs::read_dir(&kept_dir)
                .map(|d| d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect())
                .unwrap_or_default();
            assert!(left.iter().all(|n| n.ends_with(".skel")), "call {n} ({fault:?}): no temporary left: {left:?}");
        }
    }
}

#[test]
fn a_kept_skeleton_file_that_cannot_be_mapped_or_read_is_passed_over_for_the_session_file() {
    use pi_sessiond::session::kept::Keep;
    use pi_sessiond::session::store::SessionFile;
    let dir = temp_dir();
    let path = crate::support::big_session(dir.path(), 300, 1000, "end");
    let (_, fresh) = SessionFile::open(&path, Durability::None).unwrap();
    let keep = Keep::in_dir(&s(&dir.path().join("kept")));
    keep.open(&path, Durability::None).unwrap();
    // The kept file is there now; the next open maps it, unless the map or the open of it fails.
    let disk = FaultyDisk::new();
    keep.open_on(&(disk.clone() as Arc<dyn Disk>), &path, Durability::None, true).unwrap();
    let mapped: Vec<_> = disk.log().into_iter().filter(|(call, _)| *call == Call::Map).collect();
    assert_eq!(mapped.len(), 1, "a kept open maps the kept file once: {mapped:?}");
    assert!(mapped[0].1.to_string_lossy().ends_with(".skel"), "{mapped:?}");
    for (call, fault) in
        [(Call::Map, Fault::Errno(ENOMEM)), (Call::Map, Fault::Errno(EIO)), (Call::Open, Fault::Errno(EIO))]
    {
        let disk = FaultyDisk::new();
        disk.fail_next(call, ".skel", fault);
        let (_, loaded) = keep.open_on(&(disk.clone() as Arc<dyn Disk>), &path, Durability::None, true).unwrap();
        assert!(disk.hit().is_some(), "{call:?} of the kept file was failed");
        assert_eq!(shape(&loaded), shape(&fresh), "{call:?} failing ({fault:?}): the open reads the session file");
        let read_session = disk.log().iter().any(|(c, p)| *c == Call::ReadAt && p.to_string_lossy() == path);
        assert!(read_session, "{call:?} failing: the session file itself was read");
    }
}
