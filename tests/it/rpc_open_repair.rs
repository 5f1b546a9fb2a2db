//! `session/open {repair: true}` through the real binary: pi's open writes at once (a header into a 0-byte file,
//! a v1/v2 file rewritten migrated, a missing final newline), pi-sessiond's plain open never does, and the option
//! makes the sidecar do what pi's open does, which is what the pi drop-in needs to stand in for pi
//! (`tests/pi/session-manager/file-operations.test.mjs` checks the 0-byte case on the drop-in). The plain-open
//! difference is `docs/compatibility.md` difference 1.

use pi_sessiond::session::json::Json;

use crate::support::sidecar::Sidecar;
use crate::support::{json, oracle, s, str_of, temp_dir, user_message};

fn open(sc: &mut Sidecar, path: &str, repair: bool) -> Json {
    let path = Json::str(path).to_canonical_string();
    sc.call("session/open", json(&format!(r#"{{"path":{path},"repair":{repair}}}"#)))
}

fn read(sc: &mut Sidecar, method: &str, handle: &str) -> Json {
    sc.call(method, json(&format!(r#"{{"handle":"{handle}"}}"#)))
}

/// pi 1.6.0's `SessionManager.open` on `path`, with its reads (pi's open repairs what it finds, in place).
fn pi_reads(path: &str) -> Json {
    let request = format!(r#"{{"command":"reads","files":[{}]}}"#, Json::str(path).to_canonical_string());
    let answers = oracle(&json(&request)).into_array().expect("an array of answers");
    answers[0].get("ok").cloned().unwrap_or_else(|| panic!("pi could not open {path}: {:?}", answers[0]))
}

#[test]
fn open_with_repair_writes_a_0_byte_file_its_header_at_once_as_pis_open_does() {
    let dir = temp_dir();
    let plain = s(&dir.path().join("plain.jsonl"));
    let repaired = s(&dir.path().join("repaired.jsonl"));
    std::fs::write(&plain, "").unwrap();
    std::fs::write(&repaired, "").unwrap();
    let mut sc = Sidecar::new();

    open(&mut sc, &plain, false);
    assert_eq!(std::fs::read(&plain).unwrap(), b"", "a plain open never writes (the header waits for the first entry)");

    let state = open(&mut sc, &repaired, true);
    let content = std::fs::read_to_string(&repaired).unwrap();
    let lines: Vec<&str> = content.lines().collect();
    assert_eq!(lines.len(), 1, "{content:?}");
    assert!(content.ends_with('\n'));
    let header = json(lines[0]);
    assert_eq!(header.get("type"), Some(&Json::str("session")));
    assert_eq!(header.get("id"), state.get("sessionId"), "the header on disk is the session the handle holds");
    assert_eq!(Some(&header), state.get("header"));
    // pi opens what we wrote as it opens its own: same session, nothing left to repair.
    let pi = pi_reads(&repaired);
    assert_eq!(pi.get("sessionId"), state.get("sessionId"));
    assert_eq!(std::fs::read_to_string(&repaired).unwrap(), content, "pi found nothing to rewrite");
}

#[test]
fn open_with_repair_rewrites_a_v1_file_migrated_and_ends_an_unterminated_last_line() {
    let dir = temp_dir();
    let legacy = s(&dir.path().join("v1.jsonl"));
    let v1 = concat!(
        r#"{"type":"session","id":"legacy","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#,
        "\n",
        r#"{"type":"message","timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"a","timestamp":1}}"#,
        "\n",
        r#"{"type":"message","timestamp":"2025-01-01T00:00:02.000Z","message":{"role":"hookMessage","customType":"h","content":"b","display":true,"timestamp":2}}"#,
        "\n"
    );
    std::fs::write(&legacy, v1).unwrap();
    let unterminated = s(&dir.path().join("nl.jsonl"));
    let v3 = concat!(
        r#"{"type":"session","version":3,"id":"nl","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#,
        "\n",
        r#"{"type":"message","id":"aaaaaaaa","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"a","timestamp":1}}"#
    );
    std::fs::write(&unterminated, v3).unwrap();
    let mut sc = Sidecar::new();

    let state = open(&mut sc, &legacy, true);
    let handle = str_of(state.get("handle").unwrap());
    let on_disk = std::fs::read_to_string(&legacy).unwrap();
    assert!(on_disk.lines().next().unwrap().contains(r#""version":3"#), "{on_disk}");
    assert!(!on_disk.contains("hookMessage"), "v2 → v3 renames hookMessage: {on_disk}");
    // The file now holds what the handle reads, and pi reads it the same way without rewriting it again.
    let pi = pi_reads(&legacy);
    assert_eq!(pi.get("entries"), Some(&read(&mut sc, "session/getEntries", &handle)));
    assert_eq!(std::fs::read_to_string(&legacy).unwrap(), on_disk, "pi found nothing left to migrate");

    open(&mut sc, &unterminated, true);
    assert_eq!(std::fs::read_to_string(&unterminated).unwrap(), format!("{v3}\n"), "only the newline is added");
}

#[test]
fn open_with_repair_applies_what_an_earlier_plain_open_of_the_same_file_left_pending() {
    let dir = temp_dir();
    let path = s(&dir.path().join("empty.jsonl"));
    std::fs::write(&path, "").unwrap();
    let mut sc = Sidecar::new();
    let first = open(&mut sc, &path, false);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    let second = open(&mut sc, &path, true);
    assert_eq!(second.get("handle"), first.get("handle"), "one file, one handle");
    let header = json(std::fs::read_to_string(&path).unwrap().trim_end());
    assert_eq!(header.get("id"), first.get("sessionId"), "the header written is the session opened first");
}

#[test]
fn open_with_repair_of_a_missing_file_writes_nothing_as_pi_writes_nothing() {
    let dir = temp_dir();
    let path = s(&dir.path().join("later.jsonl"));
    let mut sc = Sidecar::new();
    let state = open(&mut sc, &path, true);
    assert_eq!(state.get("sessionFile"), Some(&Json::str(&path)));
    assert!(!dir.path().join("later.jsonl").exists(), "the file waits for the first message, as in pi");
}

#[test]
fn open_with_repair_fails_cleanly_while_another_sidecar_holds_the_write_lock() {
    let dir = temp_dir();
    let mut owner = Sidecar::new();
    let st = owner.call("session/create", json(&format!(r#"{{"cwd":"/p","sessionDir":"{}"}}"#, s(dir.path()))));
    let owner_handle = str_of(st.get("handle").unwrap());
    let file = str_of(st.get("sessionFile").unwrap());
    owner.call(
        "session/appendMessage",
        json(&format!(r#"{{"handle":"{owner_handle}","message":{}}}"#, user_message("mine"))),
    );
    // pi (which takes no lock) leaves a last line without its newline: a repair is due, and only the owner may
    // write.
    let mut f = std::fs::OpenOptions::new().append(true).open(&file).unwrap();
    std::io::Write::write_all(
        &mut f,
        br#"{"type":"custom","customType":"x","id":"pi000001","parentId":null,"timestamp":"2025-01-01T00:00:00.000Z"}"#,
    )
    .unwrap();
    drop(f);
    let before = std::fs::read(&file).unwrap();

    let mut other = Sidecar::new();
    let path = Json::str(&file).to_canonical_string();
    let e = other.call_err("session/open", json(&format!(r#"{{"path":{path},"repair":true}}"#)));
    assert_eq!(e.get("data").and_then(|d| d.get("kind")), Some(&Json::str("session_locked")), "{e:?}");
    assert_eq!(e.get("data").and_then(|d| d.get("pid")), Some(&Json::number(owner.pid() as f64)));
    assert_eq!(std::fs::read(&file).unwrap(), before, "nothing was written");
    // The failed open holds no reference: a plain open gets the handle, and one close ends it.
    let h = str_of(open(&mut other, &file, false).get("handle").unwrap());
    read(&mut other, "session/close", &h);
    let gone = other.call_err("session/getState", json(&format!(r#"{{"handle":"{h}"}}"#)));
    assert_eq!(gone.get("data").and_then(|d| d.get("kind")), Some(&Json::str("handle_not_found")), "{gone:?}");
}
