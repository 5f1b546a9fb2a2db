//! Live and safe, at the engine: following a file another process appends to, one writer per file, never
//! interleaving with a writer that takes no lock (pi), and crash-safe appends.

use std::io::Write;

use pi_sessiond::session::context::Bodies;
use pi_sessiond::session::json::Json;
use pi_sessiond::session::key::Key;
use pi_sessiond::session::store::{Durability, WarningKind};
use pi_sessiond::session::{Change, Env, Error, NewSessionOptions, Origin, SessionManager};

use crate::support::{json, s, temp_dir};

/// A version-1 session (no version, no ids): pi migrates it, rewriting the file.
const V1_SESSION: &str = concat!(
    r#"{"type":"session","id":"old","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#,
    "\n",
    r#"{"type":"message","timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"a","timestamp":1}}"#,
    "\n"
);

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
    std::fs::write(&path, V1_SESSION).unwrap();
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

/// A session file of a header and a chain of entries `ids` (each the child of the one before), all of the same
/// length when the ids are.
fn chain_file(path: &str, ids: &[&str]) {
    let header = r#"{"type":"session","version":3,"id":"chain","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/"}"#;
    let mut text = format!("{header}\n");
    for (i, id) in ids.iter().enumerate() {
        text += &entry_line(id, if i == 0 { "" } else { ids[i - 1] }, "same text");
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

/// Overwrites the file's bytes without truncating it or changing its inode (what an editor saving in place or
/// `writeFileSync` does to the same length).
fn overwrite_in_place(path: &str, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, 0).unwrap();
    f.set_len(bytes.len() as u64).unwrap();
}

fn ids_of(m: &SessionManager, list: &[usize]) -> Vec<String> {
    list.iter().map(|&i| m.records()[i].id.as_js_str().unwrap().to_string_lossy()).collect()
}

#[test]
fn a_same_length_rewrite_in_place_is_read_again_not_served_from_stale_offsets_issue_11() {
    let dir = temp_dir();
    let path = s(&dir.path().join("s.jsonl"));
    chain_file(&path, &["aaaa", "bbbb", "cccc"]);
    let mut viewer = SessionManager::open(&path, None, None, Env::system()).unwrap();
    let before = std::fs::metadata(&path).unwrap().len();
    // The same bytes with the last two entries swapped: same length, same last 64 bytes, same inode.
    chain_file(&format!("{path}.new"), &["aaaa", "cccc", "bbbb"]);
    overwrite_in_place(&path, &std::fs::read(format!("{path}.new")).unwrap());
    assert_eq!(std::fs::metadata(&path).unwrap().len(), before);
    assert_eq!(viewer.refresh().unwrap(), Some(Change::Reloaded));
    let bbbb = viewer.entry(&Key::str("bbbb")).unwrap();
    assert_eq!(viewer.records()[bbbb].parent, Key::str("cccc"));
    assert_eq!(ids_of(&viewer, &viewer.branch_path(None)), ["aaaa", "cccc", "bbbb"]);
    let body = viewer.bodies().json(bbbb).unwrap();
    assert_eq!(body.get("id"), Some(&Json::str("bbbb")), "the body read is the entry asked for");
}

#[test]
fn a_legacy_file_pi_migrates_in_place_while_we_have_it_open_is_read_again_with_pis_ids() {
    let dir = temp_dir();
    let path = s(&dir.path().join("v1.jsonl"));
    std::fs::write(&path, V1_SESSION).unwrap();
    let mut viewer = SessionManager::open(&path, None, None, Env::system()).unwrap();
    assert!(viewer.warnings().iter().any(|w| w.kind == WarningKind::LegacyVersion));
    // pi's open rewrites the file in place (`openSync(path, "w")`) with its migration and ids of its own.
    let mut req = pi_sessiond::session::json::Object::new();
    req.insert("command", Json::str("reads"));
    req.insert("files", Json::Array(vec![Json::str(&path)]));
    let Ok(pi) = crate::support::oracle(&Json::Object(req)).into_array() else { panic!("oracle") };
    let pi_leaf = pi[0].get("ok").and_then(|r| r.get("leafId")).cloned().unwrap();
    assert_eq!(viewer.refresh().unwrap(), Some(Change::Reloaded));
    assert_eq!(key_json(viewer.leaf_id()), pi_leaf, "the leaf is pi's newly assigned id");
    assert!(viewer.warnings().iter().all(|w| w.kind != WarningKind::LegacyVersion), "{:?}", viewer.warnings());
}

fn key_json(k: &Key) -> Json {
    Json::parse(k.to_json_text().unwrap().as_bytes()).unwrap()
}

#[test]
fn a_file_emptied_while_open_is_reported_gone_refuses_writes_and_is_read_again_once_rewritten() {
    let (_dir, mut m, file) = created();
    let entry = m.entries()[0];
    // What pi's own rewrite (`openSync(path, "w")`) or a shell's `> file` leaves for a moment, or for good.
    std::fs::OpenOptions::new().write(true).open(&file).unwrap().set_len(0).unwrap();
    assert_eq!(m.refresh().unwrap(), Some(Change::Deleted));
    let err = m.bodies().bytes(entry).unwrap_err().to_string();
    assert!(err.contains("is no longer in the session file"), "{err}");
    // Writing now would mix our lines into a file another program is rewriting, or revive it without the
    // entries it lost: refused, and nothing is written.
    assert!(matches!(m.append_message(user("x")), Err(Error::Conflict { .. })));
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 0);
    chain_file(&file, &["w1"]);
    assert_eq!(m.refresh().unwrap(), Some(Change::Reloaded));
    assert_eq!((m.entry_count(), m.leaf_id()), (1, &Key::str("w1")));
    m.append_message(user("after the rewrite")).unwrap();
}

#[test]
fn a_session_written_into_an_empty_file_we_opened_is_read_as_an_open_reads_it() {
    let dir = temp_dir();
    let path = s(&dir.path().join("empty.jsonl"));
    std::fs::write(&path, "").unwrap();
    let mut m = SessionManager::open(&path, None, None, Env::system()).unwrap();
    assert_eq!(m.refresh().unwrap(), None);
    chain_file(&path, &["p1", "p2"]);
    assert_eq!(m.refresh().unwrap(), Some(Change::Reloaded), "not followed as appends to our own fresh header");
    assert_eq!(m.session_id(), &Json::str("chain"));
    assert_eq!(ids_of(&m, &m.entries()), ["p1", "p2"]);
}

#[test]
fn a_file_overwritten_in_place_by_a_non_session_keeps_its_handle_answering_and_refuses_writes() {
    let (_dir, mut m, file) = created();
    m.append_message(user("second")).unwrap();
    let entries = m.entries();
    overwrite_in_place(&file, "just some notes\n".repeat(40).as_bytes());
    assert_eq!(m.refresh().unwrap(), Some(Change::Deleted));
    assert!(m.is_detached());
    assert_eq!(m.refresh().unwrap(), Some(Change::Deleted), "still not a session");
    // What needs no bytes still answers; the header is still shown; an entry's bytes are gone, and the error
    // says which entry, instead of a short read.
    assert_eq!(m.entry_count(), 2);
    let header = m.bodies().json(m.header().unwrap()).unwrap();
    assert_eq!(header.get("id"), Some(m.session_id()));
    let err = m.bodies().bytes(entries[1]).unwrap_err().to_string();
    let id = m.records()[entries[1]].id.as_js_str().unwrap().to_string_lossy();
    assert!(err.contains(&format!("entry \"{id}\" is no longer in the session file")), "{err}");
    // A write would land in someone else's file: refused, and the file keeps its bytes.
    let notes = std::fs::read(&file).unwrap();
    let refused = m.append_message(user("lost?")).unwrap_err();
    assert!(matches!(&refused, Error::Conflict { message, .. } if message.contains("not a pi session")), "{refused}");
    assert_eq!(std::fs::read(&file).unwrap(), notes);
    // Once the path holds a session again, it is read and written as usual.
    chain_file(&file, &["r1", "r2"]);
    assert_eq!(m.refresh().unwrap(), Some(Change::Reloaded));
    assert_eq!(*m.leaf_id(), Key::str("r2"));
    m.append_message(user("back")).unwrap();
    assert_eq!(SessionManager::open(&file, None, None, Env::system()).unwrap().entry_count(), 3);
}

#[test]
fn a_file_replaced_by_a_non_session_still_serves_its_entries_from_the_old_file() {
    let (dir, mut m, file) = created();
    let entry = m.entries()[0];
    let notes = s(&dir.path().join("notes.txt"));
    std::fs::write(&notes, "not a session\n").unwrap();
    std::fs::rename(&notes, &file).unwrap();
    assert_eq!(m.refresh().unwrap(), Some(Change::Deleted));
    // The old inode is still open: its entries are still there to read.
    assert!(m.bodies().json(entry).unwrap().get("message").is_some());
    assert!(matches!(m.append_message(user("x")), Err(Error::Conflict { .. })));
    // Removed altogether: a deleted session file, which the next write puts back whole (pi #8939).
    std::fs::remove_file(&file).unwrap();
    assert_eq!(m.refresh().unwrap(), Some(Change::Deleted));
    m.append_message(user("written again")).unwrap();
    let back = SessionManager::open(&file, None, None, Env::system()).unwrap();
    assert_eq!((back.entry_count(), back.session_id()), (2, m.session_id()));
}

#[test]
fn reading_an_entry_truncated_away_names_the_entry_instead_of_a_short_read_issue_11() {
    let dir = temp_dir();
    let file = s(&dir.path().join("s.jsonl"));
    chain_file(&file, &["t1"]);
    let m = SessionManager::open(&file, None, None, Env::system()).unwrap();
    let header_len = std::fs::read_to_string(&file).unwrap().lines().next().unwrap().len() as u64 + 1;
    std::fs::OpenOptions::new().write(true).open(&file).unwrap().set_len(header_len).unwrap();
    // No refresh yet: the read itself notices.
    let entry = m.entries()[0];
    let err = m.bodies().bytes(entry).unwrap_err().to_string();
    assert!(err.contains("entry \"t1\" (line 2) is no longer in the session file"), "{err}");
    assert!(!err.contains("failed to fill whole buffer"), "{err}");
}

#[test]
fn a_session_file_that_appears_at_a_path_opened_before_it_existed_is_read() {
    let dir = temp_dir();
    let path = s(&dir.path().join("later.jsonl"));
    let mut m = SessionManager::open(&path, None, None, Env::system()).unwrap();
    assert_eq!(m.refresh().unwrap(), None);
    // pi writes the file at its first message.
    chain_file(&path, &["n1"]);
    assert_eq!(m.refresh().unwrap(), Some(Change::Reloaded));
    assert_eq!((m.session_id(), m.leaf_id()), (&Json::str("chain"), &Key::str("n1")));
    m.append_message(user("and ours")).unwrap();
    assert_eq!(SessionManager::open(&path, None, None, Env::system()).unwrap().entry_count(), 2);
}
