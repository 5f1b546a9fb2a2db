//! The engine's write path as a host drives it: one entry point (`SessionManager::apply`) that says what changed,
//! batches that are one write and all or nothing, symlinks written through as pi writes them, and one table of
//! error kinds shared by the CLI and the sidecar.

use std::io::Write;

use pi_sessiond::session::change::Compaction;
use pi_sessiond::session::json::Json;
use pi_sessiond::session::key::Key;
use pi_sessiond::session::store::WarningKind;
use pi_sessiond::session::{
    Change, EntryRef, Env, Error, ErrorKind, NewSessionOptions, Op, OpValue, Origin, SessionManager,
};

use crate::support::sidecar::Sidecar;
use crate::support::{json, s, str_of, temp_dir, write_v1_session, Deterministic};

fn user(text: &str) -> Json {
    json(&format!(r#"{{"role":"user","content":"{text}","timestamp":1}}"#))
}

fn assistant(text: &str) -> Json {
    json(&format!(
        r#"{{"role":"assistant","content":[{{"type":"text","text":"{text}"}}],"provider":"p","model":"m","timestamp":2}}"#
    ))
}

fn message(m: Json) -> Op {
    Op::AppendMessage { message: m }
}

fn entry_line(id: &str, parent: &str, text: &str) -> String {
    format!(
        r#"{{"type":"message","id":"{id}","parentId":"{parent}","timestamp":"2025-01-01T00:00:01.000Z","message":{{"role":"user","content":"{text}","timestamp":1}}}}"#
    )
}

/// A session with one user message, written to disk.
fn created(env: Env) -> (tempfile::TempDir, SessionManager, String) {
    let dir = temp_dir();
    let mut m = SessionManager::create("/p", Some(&s(dir.path())), NewSessionOptions::default(), env).unwrap();
    m.apply(message(user("first")), None).result.unwrap();
    let file = m.session_file().unwrap().to_owned();
    (dir, m, file)
}

fn leaf(m: &SessionManager) -> String {
    m.leaf_id().as_js_str().unwrap().to_string_lossy()
}

#[test]
fn apply_reports_its_own_append_with_the_records_it_added() {
    let (_dir, mut m, _) = created(Env::system());
    let before = m.records().len();
    let outcome = m.apply(message(user("second")), None);
    let value = outcome.result.unwrap();
    assert_eq!(outcome.changes, vec![Change::Appended { records: before..before + 1, origin: Origin::Own }]);
    assert_eq!(value.id(), Some(leaf(&m).as_str()), "the appended entry is the leaf");
    let branch = m.apply(Op::Branch { entry_id: EntryRef::Id(Key::str(&leaf(&m))) }, None);
    assert_eq!(branch.changes, vec![Change::LeafMoved]);
}

#[test]
fn apply_publishes_another_processs_appends_and_refuses_when_they_moved_the_leaf() {
    let (_dir, mut m, file) = created(Env::system());
    let ours = leaf(&m);
    std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .unwrap()
        .write_all(format!("{}\n", entry_line("pi000001", &ours, "pi wrote")).as_bytes())
        .unwrap();
    let before = std::fs::read(&file).unwrap();
    let records = m.records().len();
    let outcome = m.apply(message(user("stale")), None);
    assert_eq!(
        outcome.changes,
        vec![Change::Appended { records: records..records + 1, origin: Origin::External }],
        "what following found is reported even though the op is refused"
    );
    match outcome.result {
        Err(e @ Error::Conflict { .. }) => {
            assert_eq!(e.kind(), ErrorKind::ContentModified);
            let Error::Conflict { leaf, path, .. } = e else { unreachable!() };
            assert_eq!(leaf.as_deref(), Some("pi000001"), "the leaf now");
            assert_eq!(path.as_deref(), Some(file.as_str()));
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(std::fs::read(&file).unwrap(), before, "nothing was written");
    // Up to date now: with the expected leaf, the append goes on top of pi's entry.
    let outcome = m.apply(message(user("fresh")), Some("pi000001"));
    assert_eq!(outcome.changes.len(), 1, "{:?}", outcome.changes);
    outcome.result.unwrap();
    let last = std::fs::read_to_string(&file).unwrap().lines().last().unwrap().to_owned();
    assert!(last.contains(r#""parentId":"pi000001""#), "{last}");
    // A stale expected leaf is refused without a write.
    let before = std::fs::read(&file).unwrap();
    let outcome = m.apply(message(user("late")), Some("pi000001"));
    assert!(matches!(outcome.result, Err(Error::Conflict { path: None, .. })), "{:?}", outcome.result);
    assert!(outcome.changes.is_empty());
    assert_eq!(std::fs::read(&file).unwrap(), before);
}

#[test]
fn a_batch_is_one_write_that_equals_its_ops_applied_one_by_one_and_later_ops_see_earlier_ones() {
    let ops = || {
        vec![
            message(user("question")),
            message(assistant("answer")),
            // A label on the question, a branch back to it and a new answer there: all refer to this batch's
            // entries, whose ids the caller cannot know in advance.
            Op::AppendLabelChange { target_id: EntryRef::Earlier(0), label: Some(Json::str("asked")) },
            Op::Branch { entry_id: EntryRef::Earlier(0) },
            message(assistant("another answer")),
            Op::AppendSessionInfo { name: "named".into() },
        ]
    };
    let one_by_one = {
        let det = Deterministic::new();
        let (_dir, mut m, file) = created(det.env());
        let mut ids: Vec<String> = Vec::new();
        for op in ops() {
            let op = match op {
                Op::AppendLabelChange { label, .. } => {
                    Op::AppendLabelChange { target_id: EntryRef::Id(Key::str(&ids[0])), label }
                }
                Op::Branch { .. } => Op::Branch { entry_id: EntryRef::Id(Key::str(&ids[0])) },
                op => op,
            };
            ids.push(m.apply(op, None).result.unwrap().id().unwrap_or_default().to_owned());
        }
        std::fs::read(file).unwrap()
    };
    let det = Deterministic::new();
    let (_dir, mut m, file) = created(det.env());
    let records = m.records().len();
    let outcome = m.apply(Op::Batch(ops()), None);
    let OpValue::Batch(values) = outcome.result.unwrap() else { panic!() };
    assert_eq!(values.len(), 6, "one value per op, in order");
    assert_eq!(values[3], OpValue::Done);
    assert_eq!(
        outcome.changes,
        vec![Change::Appended { records: records..records + 5, origin: Origin::Own }],
        "one change for the whole batch"
    );
    assert_eq!(std::fs::read(&file).unwrap(), one_by_one, "the same bytes as the ops one by one");
    let question = Key::str(values[0].id().unwrap());
    assert_eq!(m.label(&question), Some(&Json::str("asked")));
    let reopened = SessionManager::open(&file, None, None, Env::system()).unwrap();
    assert_eq!(reopened.entry_count(), m.entry_count());
    assert_eq!(reopened.leaf_id(), m.leaf_id());
}

#[test]
fn a_batch_with_an_op_that_fails_changes_neither_memory_nor_file() {
    let (_dir, mut m, file) = created(Env::system());
    let before = std::fs::read(&file).unwrap();
    let (records, leaf_before) = (m.records().len(), m.leaf_id().clone());
    let bad = [
        Op::AppendLabelChange { target_id: EntryRef::Id(Key::str("nope")), label: Some(Json::str("x")) },
        Op::Branch { entry_id: EntryRef::Earlier(5) },
        Op::NewSession(NewSessionOptions::default()),
    ];
    for bad_op in bad {
        let ops = vec![message(user("kept?")), Op::ResetLeaf, message(user("root?")), bad_op];
        let outcome = m.apply(Op::Batch(ops), None);
        let e = outcome.result.unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::EntryNotFound | ErrorKind::InvalidParams), "{e}");
        assert!(outcome.changes.is_empty(), "{:?}", outcome.changes);
        assert_eq!(m.records().len(), records, "{e}: nothing staged stays in memory");
        assert_eq!(m.leaf_id(), &leaf_before, "{e}: the leaf is back");
        assert_eq!(std::fs::read(&file).unwrap(), before, "{e}: nothing was written");
    }
    assert_eq!(m.entry_count(), 1);
}

#[test]
fn a_batch_whose_write_is_refused_changes_neither_memory_nor_file() {
    let (_dir, holder, file) = created(Env::system());
    let mut m = SessionManager::open(&file, None, None, Env::system()).unwrap();
    let before = std::fs::read(&file).unwrap();
    let outcome = m.apply(Op::Batch(vec![message(user("a")), message(user("b"))]), None);
    assert!(matches!(outcome.result, Err(Error::Locked { .. })), "{:?}", outcome.result);
    assert_eq!(m.entry_count(), 1);
    assert_eq!(m.records().len(), 2);
    assert_eq!(std::fs::read(&file).unwrap(), before);
    drop(holder);
    let outcome = m.apply(Op::Batch(vec![message(user("a")), message(user("b"))]), None);
    outcome.result.unwrap();
    assert_eq!(m.entry_count(), 3);
}

#[test]
fn a_batch_on_a_legacy_file_is_written_with_its_migration_in_one_rename() {
    let dir = temp_dir();
    let path = s(&dir.path().join("v1.jsonl"));
    write_v1_session(&path);
    let mut m = SessionManager::open(&path, None, None, Env::system()).unwrap();
    let compaction = Compaction {
        summary: Json::str("sum"),
        first_kept_entry_id: None,
        tokens_before: Json::number(1.0),
        details: None,
        from_hook: None,
        usage: None,
        system_message: None,
        retained_tail: None,
    };
    let ops = vec![message(user("b")), Op::AppendCompaction(Box::new(compaction))];
    let outcome = m.apply(Op::Batch(ops), None);
    outcome.result.unwrap();
    let reopened = SessionManager::open(&path, None, None, Env::system()).unwrap();
    assert_eq!(reopened.entry_count(), 3);
    assert!(reopened.warnings().iter().all(|w| w.kind != WarningKind::LegacyVersion), "migrated on disk");
    assert_eq!(reopened.leaf_id(), m.leaf_id());
}

#[test]
fn an_empty_session_file_that_is_a_symlink_is_written_through_the_link_issue_11() {
    let dir = temp_dir();
    let real = dir.path().join("real.jsonl");
    std::fs::write(&real, "").unwrap();
    let link = dir.path().join("link.jsonl");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let mut m = SessionManager::open(&s(&link), None, None, Env::system()).unwrap();
    m.apply(message(user("through the link")), None).result.unwrap();
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link stays a link");
    let text = std::fs::read_to_string(&real).unwrap();
    assert!(text.starts_with(r#"{"type":"session""#) && text.contains("through the link"), "{text}");
    let reopened = SessionManager::open(&s(&link), None, None, Env::system()).unwrap();
    assert_eq!(reopened.entry_count(), 1);
}

#[test]
fn a_migration_rewrite_of_a_symlinked_session_replaces_the_target_and_keeps_the_link_issue_11() {
    let dir = temp_dir();
    let elsewhere = temp_dir();
    let real = elsewhere.path().join("real.jsonl");
    write_v1_session(&s(&real));
    let link = dir.path().join("link.jsonl");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let mut m = SessionManager::open(&s(&link), None, None, Env::system()).unwrap();
    m.apply(message(user("after the migration")), None).result.unwrap();
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link stays a link");
    let reopened = SessionManager::open(&s(&real), None, None, Env::system()).unwrap();
    assert_eq!(reopened.entry_count(), 2, "the target holds the migrated file and the new entry");
    assert!(reopened.warnings().iter().all(|w| w.kind != WarningKind::LegacyVersion));
    for d in [dir.path(), elsewhere.path()] {
        let tmp =
            std::fs::read_dir(d).unwrap().filter(|e| e.as_ref().unwrap().path().to_string_lossy().ends_with(".tmp"));
        assert_eq!(tmp.count(), 0, "no temporary left in {}", d.display());
    }
}

#[test]
fn the_cli_and_the_sidecar_name_an_entry_pi_cannot_read_with_the_same_kind_from_one_table() {
    let dir = temp_dir();
    let path = s(&dir.path().join("no-message.jsonl"));
    std::fs::write(
        &path,
        concat!(
            r#"{"type":"session","version":3,"id":"x","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#,
            "\n",
            r#"{"type":"message","id":"aaaaaaaa","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z"}"#,
            "\n"
        ),
    )
    .unwrap();
    let cli = std::process::Command::new(crate::support::sidecar::binary()).args(["inspect", &path]).output().unwrap();
    let printed = Json::parse(&cli.stdout).unwrap();
    // pi's reads that throw on the entry are listed under `errors`, each with its kind.
    let cli_kind = str_of(printed.get("errors").and_then(|e| e.get("context")).and_then(|e| e.get("kind")).unwrap());
    let mut sc = Sidecar::new();
    let h = str_of(sc.call("session/open", json(&format!(r#"{{"path":"{path}"}}"#))).get("handle").unwrap());
    let e = sc.call_err("session/buildSessionContext", json(&format!(r#"{{"handle":"{h}"}}"#)));
    let rpc_kind = str_of(e.get("data").and_then(|d| d.get("kind")).unwrap());
    assert_eq!(cli_kind, rpc_kind);
    assert_eq!(rpc_kind, ErrorKind::InvalidEntry.as_str());
    // The protocol description lists the kind with the code the sidecar sent.
    let methods = Json::parse(&std::fs::read(crate::support::repo().join("protocol/methods.json")).unwrap()).unwrap();
    let Some(Json::Array(errors)) = methods.get("errors") else { panic!() };
    let listed = errors.iter().find(|x| x.get("kind") == Some(&Json::str(&rpc_kind))).expect("listed");
    assert_eq!(listed.get("code"), e.get("code"));
}

#[test]
fn an_append_with_the_id_and_timestamp_its_host_chose_writes_exactly_them_and_a_taken_id_writes_nothing() {
    let dir = temp_dir();
    let mut sc = Sidecar::new();
    let st = sc.call("session/create", json(&format!(r#"{{"cwd":"/p","sessionDir":"{}"}}"#, s(dir.path()))));
    let h = str_of(st.get("handle").unwrap());
    let file = str_of(st.get("sessionFile").unwrap());
    let chosen = r#""id":"c0ffee01","timestamp":"2026-01-02T03:04:05.678Z""#;
    let msg = r#""message":{"role":"user","content":"hi","timestamp":1}"#;
    let r = sc.call("session/appendMessage", json(&format!(r#"{{"handle":"{h}",{chosen},{msg}}}"#)));
    assert_eq!(r.get("id"), Some(&Json::str("c0ffee01")));
    // An op inside a batch chooses its entry's id too, and a later op may still name it by `{"op": n}`.
    let label = r#"{"method":"session/appendLabelChange","params":{"targetId":{"op":0},"label":"x","id":"b0000002"}}"#;
    let ops = format!(r#"[{{"method":"session/appendMessage","params":{{{msg},"id":"b0000001"}}}},{label}]"#);
    let r = sc.call("session/appendBatch", json(&format!(r#"{{"handle":"{h}","ops":{ops}}}"#)));
    assert_eq!(r.to_canonical_string(), r#"{"results":[{"id":"b0000001"},{"id":"b0000002"}]}"#);
    let lines = |file: &str| -> Vec<Json> {
        std::fs::read_to_string(file).unwrap().lines().map(|l| Json::parse(l.as_bytes()).unwrap()).collect()
    };
    let written = lines(&file);
    let first = &written[1];
    assert_eq!(
        (first.get("id"), first.get("parentId"), first.get("timestamp")),
        (Some(&Json::str("c0ffee01")), Some(&Json::Null), Some(&Json::str("2026-01-02T03:04:05.678Z")))
    );
    assert_eq!(written[2].get("parentId"), Some(&Json::str("c0ffee01")));
    assert_eq!(written[3].get("targetId"), Some(&Json::str("b0000001")));

    // Refused, each naming its param, and nothing reaches the file or moves the leaf.
    let before = std::fs::read(&file).unwrap();
    for (params, path) in [
        (format!(r#""id":"c0ffee01",{msg}"#), "id"),
        (format!(r#""id":"b0000002",{msg}"#), "id"),
        (format!(r#""id":"",{msg}"#), "id"),
        (format!(r#""timestamp":"yesterday",{msg}"#), "timestamp"),
        (format!(r#""timestamp":"2026-01-02T03:04:05Z",{msg}"#), "timestamp"),
    ] {
        let e = sc.call_err("session/appendMessage", json(&format!(r#"{{"handle":"{h}",{params}}}"#)));
        let data = e.get("data").unwrap();
        assert_eq!(
            (data.get("kind"), data.get("path")),
            (Some(&Json::str("invalid_params")), Some(&Json::str(path))),
            "{params}: {}",
            e.to_canonical_string()
        );
    }
    assert_eq!(std::fs::read(&file).unwrap(), before);
    let leaf = sc.call("session/getLeafId", json(&format!(r#"{{"handle":"{h}"}}"#)));
    assert_eq!(leaf, Json::str("b0000002"));
}
