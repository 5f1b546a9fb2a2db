//! Live and safe, at the engine: following a file another process appends to, one writer per file, never
//! interleaving with a writer that takes no lock (pi), and crash-safe appends.

use std::io::Write;

use pi_sessiond::session::json::Json;
use pi_sessiond::session::key::Key;
use pi_sessiond::session::store::{Durability, WarningKind};
use pi_sessiond::session::{Change, Env, Error, NewSessionOptions, Origin, SessionManager};

use crate::support::{json, s, temp_dir, write_v1_session};

fn user(text: &str) -> Json {
    json(&format!(r#"{{"role":"user","content":"{text}","timestamp":1}}"#))
}

fn entry_line(id: &str, parent: &str, text: &str) -> String {
    let parent = if parent.is_empty() { "null".to_owned() } else { format!("\"{parent}\"") };
    format!(
        r#"{{"type":"message","id":"{id}","parentId":{parent},"timestamp":"2025-01-01T00:00:01.000Z","message":{{"role":"user","content":"{text}","timestamp":1}}}}"#
    )
}

fn append_raw(path: &str, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(bytes).unwrap();
}

fn created() -> (tempfile::TempDir, SessionManager, String) {
    let dir = temp_dir();
    let mut m =
        SessionManager::create("/p", Some(&s(dir.path())), NewSessionOptions::default(), Env::system()).unwrap();
    m.append_message(user("first")).unwrap();
    let file = m.session_file().unwrap().to_owned();
    (dir, m, file)
}

#[test]
fn refresh_reads_another_writers_complete_lines_and_holds_back_a_partial_one() {
    let (_dir, mut viewer, file) = created();
    let leaf = viewer.leaf_id().as_js_str().unwrap().to_string_lossy();
    let line_a = entry_line("aaaaaaaa", &leaf, "from pi");
    let line_b = entry_line("bbbbbbbb", "aaaaaaaa", "half written");
    append_raw(&file, format!("{line_a}\n{}", &line_b[..40]).as_bytes());
    let r = viewer.refresh().unwrap();
    let Some(Change::Appended { records: new, origin: Origin::External }) = r else { panic!("{r:?}") };
    assert_eq!(new.len(), 1, "only the complete line");
    assert_eq!(*viewer.leaf_id(), Key::str("aaaaaaaa"), "the leaf follows the conversation");
    assert_eq!(viewer.refresh().unwrap(), None, "the partial line is still being written");
    append_raw(&file, format!("{}\n", &line_b[40..]).as_bytes());
    let Some(Change::Appended { records: new, .. }) = viewer.refresh().unwrap() else { panic!() };
    assert_eq!(new.len(), 1);
    assert_eq!(*viewer.leaf_id(), Key::str("bbbbbbbb"));
    // The viewer now reads what a fresh open reads.
    let fresh = SessionManager::open(&file, None, None, Env::system()).unwrap();
    assert_eq!(fresh.entry_count(), viewer.entry_count());
    assert_eq!(fresh.leaf_id(), viewer.leaf_id());
    assert!(viewer.warnings().iter().all(|w| w.kind != WarningKind::MalformedLine), "{:?}", viewer.warnings());
}

#[test]
fn a_line_that_was_incomplete_at_open_is_read_whole_once_it_is_finished() {
    let dir = temp_dir();
    let path = s(&dir.path().join("s.jsonl"));
    let header = r#"{"type":"session","version":3,"id":"x","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/"}"#;
    let line = entry_line("aaaaaaaa", "", "written slowly");
    std::fs::write(&path, format!("{header}\n{}", &line[..30])).unwrap();
    let mut viewer = SessionManager::open(&path, None, None, Env::system()).unwrap();
    assert_eq!(viewer.entry_count(), 0);
    append_raw(&path, format!("{}\n", &line[30..]).as_bytes());
    let Some(Change::Appended { records: new, .. }) = viewer.refresh().unwrap() else { panic!() };
    assert_eq!(new.len(), 1);
    assert_eq!(viewer.entry_count(), 1);
    assert!(viewer.warnings().iter().all(|w| w.kind != WarningKind::TornTail), "{:?}", viewer.warnings());
}

#[test]
fn refresh_reports_a_truncated_or_replaced_file_as_reset_and_a_removed_one_as_deleted() {
    let (_dir, mut viewer, file) = created();
    let header = std::fs::read_to_string(&file).unwrap().lines().next().unwrap().to_owned();
    // Replaced: a new inode with other content.
    let tmp = format!("{file}.new");
    std::fs::write(&tmp, format!("{header}\n{}\n{}\n", entry_line("r1", "", "x"), entry_line("r2", "r1", "y")))
        .unwrap();
    std::fs::rename(&tmp, &file).unwrap();
    assert_eq!(viewer.refresh().unwrap(), Some(Change::Reloaded));
    assert_eq!(viewer.entry_count(), 2);
    assert_eq!(*viewer.leaf_id(), Key::str("r2"));
    // Truncated in place.
    std::fs::OpenOptions::new().write(true).open(&file).unwrap().set_len(header.len() as u64 + 1).unwrap();
    assert_eq!(viewer.refresh().unwrap(), Some(Change::Reloaded));
    assert_eq!(viewer.entry_count(), 0);
    std::fs::remove_file(&file).unwrap();
    assert_eq!(viewer.refresh().unwrap(), Some(Change::Deleted));
}

#[test]
fn a_leaf_the_host_moved_elsewhere_stays_when_others_append() {
    let (_dir, mut m, file) = created();
    let first = m.leaf_id().clone();
    let second = m.append_message(user("second")).unwrap();
    m.branch(&first).unwrap();
    append_raw(&file, format!("{}\n", entry_line("cccccccc", &second, "from pi")).as_bytes());
    assert!(matches!(m.refresh().unwrap(), Some(Change::Appended { .. })));
    assert_eq!(*m.leaf_id(), first);
}

#[test]
fn a_second_writer_is_refused_with_the_holders_pid_and_readers_are_never_blocked() {
    let (_dir, _writer, file) = created();
    let mut other = SessionManager::open(&file, None, None, Env::system()).unwrap();
    assert_eq!(other.entry_count(), 1, "reading is not blocked");
    let before = std::fs::read(&file).unwrap();
    match other.append_message(user("intruder")) {
        Err(Error::Locked { pid, .. }) => assert_eq!(pid, Some(std::process::id())),
        other => panic!("expected Locked, got {other:?}"),
    }
    assert_eq!(std::fs::read(&file).unwrap(), before, "nothing was written");
    assert_eq!(other.entry_count(), 1, "the refused append left the session unchanged");
}

#[test]
fn the_lock_is_released_when_the_writer_goes_away() {
    let (_dir, writer, file) = created();
    drop(writer);
    let mut next = SessionManager::open(&file, None, None, Env::system()).unwrap();
    next.append_message(user("my turn")).unwrap();
}

#[test]
fn an_append_after_another_process_wrote_is_refused_instead_of_interleaved() {
    let (_dir, mut m, file) = created();
    let leaf = m.leaf_id().as_js_str().unwrap().to_string_lossy();
    append_raw(&file, format!("{}\n", entry_line("dddddddd", &leaf, "pi wrote this")).as_bytes());
    let before = std::fs::read(&file).unwrap();
    let err = m.append_message(user("ours")).unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), before);
    // After following the file, the append goes on top of the other writer's entry.
    assert!(matches!(m.refresh().unwrap(), Some(Change::Appended { .. })));
    m.append_message(user("ours")).unwrap();
    let last = std::fs::read_to_string(&file).unwrap().lines().last().unwrap().to_owned();
    assert!(last.contains(r#""parentId":"dddddddd""#), "{last}");
}

#[test]
fn a_fragment_another_writer_left_is_ended_before_our_line_and_kept_as_a_torn_line() {
    let (_dir, mut m, file) = created();
    append_raw(&file, b"{\"type\":\"message\",\"id\":\"torn");
    m.append_message(user("after the tear")).unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[2], r#"{"type":"message","id":"torn"#);
    assert!(lines[3].contains("after the tear"));
    let reopened = SessionManager::open(&file, None, None, Env::system()).unwrap();
    assert_eq!(reopened.entry_count(), 2);
    assert!(reopened.warnings().iter().any(|w| w.line == 3 && w.kind == WarningKind::MalformedLine));
}

#[test]
fn durable_appends_and_a_migration_rewrite_keep_the_file_readable_at_every_step() {
    let dir = temp_dir();
    let path = s(&dir.path().join("v1.jsonl"));
    write_v1_session(&path);
    let mut m = SessionManager::open(&path, None, None, Env::system()).unwrap();
    m.set_durability(Durability::Entry);
    for n in 0..5 {
        m.append_message(user(&format!("n{n}"))).unwrap();
        let check = SessionManager::open(&path, None, None, Env::system()).unwrap();
        assert_eq!(check.entry_count(), n + 2);
        assert!(check.warnings().iter().all(|w| w.kind != WarningKind::LegacyVersion), "migrated on disk");
    }
    assert!(!std::fs::read_dir(dir.path()).unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .ends_with(".tmp")));
}
