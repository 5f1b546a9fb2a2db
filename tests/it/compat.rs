//! Every deliberate difference from pi 1.6.0, pinned. Each test is named in `docs/compatibility.md`; where pi
//! loses or corrupts data, the test shows what pi does (through the oracle) next to what we do.

use pi_sessiond::cli::{inspect_with, Reads};
use pi_sessiond::session::context::ContextOptions;
use pi_sessiond::session::json::{JsString, Json, Object};
use pi_sessiond::session::key::Key;
use pi_sessiond::session::render::JsonOut;
use pi_sessiond::session::store::WarningKind;
use pi_sessiond::session::{Env, Error, NewSessionOptions, SessionManager};

use crate::support::{json, json_diff, oracle, s, temp_dir, Deterministic};

const HEADER_V1: &str = r#"{"type":"session","id":"old-1","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/proj"}"#;
const USER_V1: &str = r#"{"type":"message","timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"hi","timestamp":12345678901234567890}}"#;
const ASSISTANT_V1: &str = r#"{"type":"message","timestamp":"2025-01-01T00:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"caf\u00e9"}],"provider":"p","model":"m","timestamp":2}}"#;

fn pi_reads(paths: &[String]) -> Vec<Json> {
    let mut req = Object::new();
    req.insert("command", Json::str("reads"));
    req.insert("files", Json::Array(paths.iter().map(|p| Json::str(p)).collect()));
    match oracle(&Json::Object(req)).into_array() {
        Ok(a) => a,
        Err(other) => panic!("{other:?}"),
    }
}

fn our_reads(m: &SessionManager) -> Json {
    let reads = Reads::compute(m);
    let mut out = JsonOut::memory();
    reads.write(m, false, &mut out).unwrap();
    Json::parse(&out.into_bytes()).unwrap()
}

fn user(text: &str) -> Json {
    json(&format!(r#"{{"role":"user","content":"{text}","timestamp":1}}"#))
}

#[test]
fn opening_a_legacy_file_does_not_write_until_the_first_append() {
    let dir = temp_dir();
    let path = s(&dir.path().join("v1.jsonl"));
    let original = format!("{HEADER_V1}\n{USER_V1}\n");
    std::fs::write(&path, &original).unwrap();
    let mut m = SessionManager::open(&path, None, None, Env::system()).unwrap();
    assert!(m.pending_repairs().rewrite, "a v1 file needs its migration written");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), original, "open must not touch the file");
    assert!(m.warnings().iter().any(|w| w.kind == WarningKind::LegacyVersion));
    m.append_message(user("next")).unwrap();
    let after = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = after.lines().collect();
    assert_eq!(lines.len(), 3);
    assert!(lines[0].contains(r#""version":3"#), "{}", lines[0]);
    // The migrated entry and the new one chain up: new ids, parent links, and the append under the old leaf.
    let first = Json::parse(lines[1].as_bytes()).unwrap();
    let second = Json::parse(lines[2].as_bytes()).unwrap();
    assert_eq!(second.get("parentId"), first.get("id"));
}

#[test]
fn migration_keeps_malformed_lines_and_number_spellings_that_pi_drops_or_rounds() {
    let dir = temp_dir();
    let ours = s(&dir.path().join("ours.jsonl"));
    let theirs = s(&dir.path().join("pi.jsonl"));
    let content = format!("{HEADER_V1}\n{USER_V1}\nnot json\n\n{ASSISTANT_V1}\n");
    std::fs::write(&ours, &content).unwrap();
    std::fs::write(&theirs, &content).unwrap();
    // pi rewrites on open; we rewrite before the first write (here: forced now).
    let pi = pi_reads(std::slice::from_ref(&theirs));
    assert!(pi[0].get("ok").is_some());
    let mut m = SessionManager::open(&ours, None, None, Deterministic::new().env()).unwrap();
    m.apply_pending_repairs().unwrap();
    let pi_bytes = std::fs::read_to_string(&theirs).unwrap();
    let our_bytes = std::fs::read_to_string(&ours).unwrap();
    assert!(!pi_bytes.contains("not json"), "pi drops the malformed line");
    assert!(pi_bytes.contains("12345678901234567000"), "pi rounds the number");
    assert!(our_bytes.lines().nth(2) == Some("not json"), "we keep it in place:\n{our_bytes}");
    assert!(our_bytes.contains("12345678901234567890") && our_bytes.contains(r"caf\u00e9"), "{our_bytes}");
    // Apart from those bytes, both files are the same session: pi reads ours exactly as it reads its own.
    let again = pi_reads(&[theirs.clone(), ours.clone()]);
    let a = crate::support::replace_in_strings(again[0].get("ok").unwrap(), &theirs, &ours);
    let b = again[1].get("ok").unwrap();
    assert_eq!(json_diff("", &a, b), None);
}

#[test]
fn fork_from_a_legacy_source_migrates_it_instead_of_copying_unmigrated_lines_pi_9950() {
    let dir = temp_dir();
    let src = s(&dir.path().join("src.jsonl"));
    std::fs::write(&src, format!("{HEADER_V1}\n{USER_V1}\n{ASSISTANT_V1}")).unwrap();
    let before = std::fs::read(&src).unwrap();
    let target = s(&dir.path().join("target"));
    let fork =
        SessionManager::fork_from(&src, &target, Some(&target), NewSessionOptions::default(), Env::system()).unwrap();
    assert_eq!(std::fs::read(&src).unwrap(), before, "the source is left untouched (pi appends a newline to it)");
    let file = fork.session_file().unwrap().to_owned();
    // pi opening our fork sees the whole history; the messages keep their order and chain.
    let pi = pi_reads(std::slice::from_ref(&file));
    let messages = pi[0].get("ok").and_then(|r| r.get("context")).and_then(|c| c.get("messages"));
    match messages {
        Some(Json::Array(m)) => assert_eq!(m.len(), 2, "pi sees both messages of the fork"),
        other => panic!("pi could not read the fork: {other:?}"),
    }
}

#[test]
fn malformed_lines_are_reported_with_their_line_numbers_and_kept() {
    let dir = temp_dir();
    let path = s(&dir.path().join("damaged.jsonl"));
    let header = r#"{"type":"session","version":3,"id":"d","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/"}"#;
    let entry = r#"{"type":"message","id":"a1","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"x","timestamp":1}}"#;
    std::fs::write(&path, format!("{header}\n{{broken\n{entry}\n42\n{{\"type\":\"mess")).unwrap();
    let mut out = Vec::new();
    assert_eq!(inspect_with(&path, ContextOptions::default(), Env::system(), &mut out), 0);
    let v = Json::parse(&out).unwrap();
    let warnings: Vec<(String, String)> = match v.get("warnings") {
        Some(Json::Array(w)) => w
            .iter()
            .map(|w| (w.get("line").unwrap().to_canonical_string(), w.get("kind").unwrap().to_canonical_string()))
            .collect(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        warnings,
        vec![
            ("2".to_owned(), "\"malformed_line\"".to_owned()),
            ("4".to_owned(), "\"non_object_line\"".to_owned()),
            ("5".to_owned(), "\"torn_tail\"".to_owned())
        ]
    );
    assert!(std::fs::read_to_string(&path).unwrap().contains("{broken"), "the line stays in the file");
}

#[test]
fn a_torn_last_line_is_never_fused_with_the_next_append_oh_my_pi_8596() {
    let dir = temp_dir();
    let path = s(&dir.path().join("torn.jsonl"));
    let header = r#"{"type":"session","version":3,"id":"t","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/"}"#;
    std::fs::write(&path, format!("{header}\n{{\"type\":\"message\",\"id\":\"x\",\"mess")).unwrap();
    let mut m = SessionManager::open(&path, None, None, Env::system()).unwrap();
    let id = m.append_message(user("after the tear")).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(lines[1], r#"{"type":"message","id":"x","mess"#, "the torn fragment stays, alone on its line");
    assert!(Json::parse(lines[2].as_bytes()).unwrap().get("id") == Some(&Json::str(&id)));
    let reopened = SessionManager::open(&path, None, None, Env::system()).unwrap();
    assert_eq!(reopened.entry_count(), 1);
    assert!(reopened.warnings().iter().any(|w| w.kind == WarningKind::MalformedLine && w.line == 2));
}

#[test]
fn parent_cycles_and_self_parents_terminate_where_pi_hangs() {
    let dir = temp_dir();
    let path = s(&dir.path().join("cycle.jsonl"));
    let header = r#"{"type":"session","version":3,"id":"c","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/"}"#;
    let e = |id: &str, parent: &str| {
        format!(
            r#"{{"type":"message","id":"{id}","parentId":"{parent}","timestamp":"2025-01-01T00:00:01.000Z","message":{{"role":"user","content":"{id}","timestamp":1}}}}"#
        )
    };
    std::fs::write(&path, format!("{header}\n{}\n{}\n{}\n{}\n", e("a", "b"), e("b", "a"), e("s", "s"), e("leaf", "a")))
        .unwrap();
    let m = SessionManager::open(&path, None, None, Env::system()).unwrap();
    let branch = m.branch_path(None);
    assert_eq!(branch.len(), 3, "leaf → a → b, then the walk stops where a would repeat");
    let tree = m.tree();
    assert_eq!(tree.roots.len(), 1, "only the self-parented entry is a root, as in pi's getTree");
    assert!(m.build_session_projection().is_ok());
    let kinds: Vec<WarningKind> = m.warnings().iter().map(|w| w.kind).collect();
    assert!(kinds.contains(&WarningKind::ParentCycle) && kinds.contains(&WarningKind::SelfParent), "{kinds:?}");
}

#[test]
fn sessions_pi_hides_because_a_message_has_null_content_are_still_listed() {
    let dir = temp_dir();
    let session_dir = s(&dir.path().join("sessions"));
    std::fs::create_dir_all(&session_dir).unwrap();
    let header = r#"{"type":"session","version":3,"id":"n","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#;
    let null_content = r#"{"type":"message","id":"a","parentId":null,"timestamp":"2025-01-02T00:00:00.000Z","message":{"role":"user","content":null,"timestamp":1735776000000}}"#;
    let text = r#"{"type":"message","id":"b","parentId":"a","timestamp":"2025-01-02T00:00:01.000Z","message":{"role":"assistant","content":[null,{"type":"text","text":"still here"}],"timestamp":1735776001000}}"#;
    std::fs::write(format!("{session_dir}/n.jsonl"), format!("{header}\n{null_content}\n{text}\n")).unwrap();
    let mut req = Object::new();
    req.insert("command", Json::str("list"));
    req.insert("calls", Json::Array(vec![json(&format!(r#"{{"kind":"listAll","dir":"{session_dir}"}}"#))]));
    let pi = oracle(&Json::Object(req));
    assert_eq!(pi, json(r#"[{"ok":[]}]"#), "pi 1.6.0 drops the file");
    let ours = pi_sessiond::catalog::listing::Catalog::new("/nonexistent-agent-dir", None)
        .list_all(Some(&session_dir), &mut |_, _| {})
        .unwrap();
    assert_eq!(ours.len(), 1);
    assert_eq!(ours[0].info.message_count, 2);
    assert_eq!(ours[0].info.first_message, JsString::from("(no messages)"));
    let rendered = pi_sessiond::catalog::info::session_info_json(&ours[0], true);
    assert_eq!(rendered.get("allMessagesText"), Some(&Json::str("still here")));
    assert_eq!(
        pi_sessiond::session::js::date::to_iso_string(ours[0].info.modified).unwrap(),
        "2025-01-02T00:00:01.000Z"
    );
}

#[test]
fn a_retained_tail_is_the_context_after_its_compaction_and_pi_can_still_read_the_file() {
    let dir = temp_dir();
    let mut m =
        SessionManager::create("/p", Some(&s(dir.path())), NewSessionOptions::default(), Env::system()).unwrap();
    let u1 = m.append_message(user("one")).unwrap();
    m.append_message(user("two")).unwrap();
    let tail = json(
        r#"[{"role":"user","content":"kept verbatim","timestamp":5},{"role":"assistant","content":null,"timestamp":6}]"#,
    );
    m.append_compaction(Json::str("sum"), Some(Json::str(&u1)), Json::number(10.0), None, None, None, Some(tail))
        .unwrap();
    m.append_message(user("three")).unwrap();
    let reads = our_reads(&m);
    let roles: Vec<String> = match reads.get("context").and_then(|c| c.get("messages")) {
        Some(Json::Array(ms)) => ms
            .iter()
            .map(|m| {
                let role = m.get("role").unwrap().to_canonical_string();
                let content = m.get("content").map(Json::to_canonical_string).unwrap_or_default();
                format!("{role}:{content}")
            })
            .collect(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        roles,
        vec![
            "\"compactionSummary\":".to_owned(),
            "\"user\":\"kept verbatim\"".to_owned(),
            "\"assistant\":[]".to_owned(),
            "\"user\":\"three\"".to_owned()
        ],
        "summary, the tail (null content repaired), then what came after; not the firstKeptEntryId range"
    );
    // The line carries firstKeptEntryId too, so pi 1.6.0 (which ignores the tail) still reads a sensible context.
    let file = m.session_file().unwrap().to_owned();
    let text = std::fs::read_to_string(&file).unwrap();
    let compaction = text.lines().find(|l| l.contains("\"compaction\"")).unwrap();
    assert!(compaction.contains(&format!(r#""firstKeptEntryId":"{u1}""#)) && compaction.contains("retainedTail"));
    let pi = pi_reads(&[file]);
    match pi[0].get("ok").and_then(|r| r.get("context")).and_then(|c| c.get("messages")) {
        Some(Json::Array(ms)) => assert_eq!(ms.len(), 4, "pi: summary, one, two, three"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_session_file_deleted_while_open_is_written_again_with_its_header_pi_8939() {
    let dir = temp_dir();
    let mut m =
        SessionManager::create("/p", Some(&s(dir.path())), NewSessionOptions::default(), Env::system()).unwrap();
    m.append_message(user("one")).unwrap();
    let file = m.session_file().unwrap().to_owned();
    std::fs::remove_file(&file).unwrap();
    m.append_message(user("two")).unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "header, the entry that was in the deleted file, the new one:\n{text}");
    assert!(lines[0].contains(r#""type":"session""#));
    let pi = pi_reads(std::slice::from_ref(&file));
    assert!(pi[0].get("ok").is_some(), "pi opens it: {}", pi[0].to_canonical_string());
}

#[test]
fn a_session_whose_directory_was_deleted_fails_the_append_and_writes_nothing() {
    let dir = temp_dir();
    let sessions = dir.path().join("sessions");
    let mut m = SessionManager::create("/p", Some(&s(&sessions)), NewSessionOptions::default(), Env::system()).unwrap();
    m.append_message(user("one")).unwrap();
    let file = m.session_file().unwrap().to_owned();
    std::fs::remove_dir_all(&sessions).unwrap();
    let leaf = m.leaf_id().clone();
    let err = m.append_message(user("two")).unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err}");
    assert!(!std::path::Path::new(&file).exists(), "no headerless file appears");
    assert_eq!(*m.leaf_id(), leaf, "the failed append left the session as it was");
    assert_eq!(m.entry_count(), 1);
}

#[test]
fn labels_survive_a_branched_copy_and_no_entry_is_orphaned_pi_5669() {
    let dir = temp_dir();
    let mut m =
        SessionManager::create("/p", Some(&s(dir.path())), NewSessionOptions::default(), Env::system()).unwrap();
    let u1 = m.append_message(user("one")).unwrap();
    m.append_label_change(&Key::str(&u1), Some(Json::str("start"))).unwrap();
    let a1 = m.append_message(json(r#"{"role":"assistant","content":[],"timestamp":2}"#)).unwrap();
    m.append_label_change(&Key::str(&a1), Some(Json::str("answer"))).unwrap();
    let u2 = m.append_message(user("two")).unwrap();
    m.create_branched_session(&Key::str(&u2)).unwrap();
    let file = m.session_file().unwrap().to_owned();
    let reopened = SessionManager::open(&file, None, None, Env::system()).unwrap();
    assert!(reopened.warnings().iter().all(|w| w.kind != WarningKind::MissingParent), "{:?}", reopened.warnings());
    assert_eq!(reopened.tree().roots.len(), 1, "one tree, no orphans");
    assert_eq!(reopened.label(&Key::str(&u1)), Some(&Json::str("start")));
    assert_eq!(reopened.label(&Key::str(&a1)), Some(&Json::str("answer")));
}
