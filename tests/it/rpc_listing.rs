//! `sessions/listDelta`: a listing sent as a change to one the host holds, which the host turns back into exactly
//! what `sessions/list` / `sessions/listAll` answer.

use std::fs;
use std::path::Path;

use pi_sessiond::session::json::Json;

use crate::support::sidecar::{Sidecar, Wire};
use crate::support::{json, s, temp_dir};

/// A session file of `messages` user/assistant messages, each `text_len` bytes long (so a listing of a few
/// dozen of them is larger than the sidecar's threshold for framing results itself).
fn write_session(dir: &Path, n: usize, messages: usize, text_len: usize) -> String {
    let id = format!("s{n:03}");
    let path = dir.join(format!("2026-01-01T00-00-{:02}-000Z_{id}.jsonl", n % 60));
    let mut text = format!(
        r#"{{"type":"session","version":3,"id":"{id}","timestamp":"2026-01-01T00:00:{:02}.000Z","cwd":"/work/proj"}}"#,
        n % 60
    );
    let mut parent = "null".to_owned();
    for m in 0..messages {
        let role = if m % 2 == 0 { "user" } else { "assistant" };
        let body = format!("{id} message {m} ").repeat(text_len / 16 + 1);
        let content =
            if role == "user" { format!(r#""{body}""#) } else { format!(r#"[{{"type":"text","text":"{body}"}}]"#) };
        let ts = 1767225600000u64 + (n * 1000 + m) as u64;
        text.push_str(&format!(
            "\n{{\"type\":\"message\",\"id\":\"{id}-{m}\",\"parentId\":{parent},\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"message\":{{\"role\":\"{role}\",\"content\":{content},\"timestamp\":{ts}}}}}"
        ));
        parent = format!(r#""{id}-{m}""#);
    }
    text.push('\n');
    fs::write(&path, text).unwrap();
    s(&path)
}

/// An agent directory under `root` and its sessions directory for `/work/proj`.
fn project(root: &Path) -> (String, std::path::PathBuf) {
    let dir = root.join("agent/sessions/--work-proj--");
    fs::create_dir_all(&dir).unwrap();
    (s(&root.join("agent")), dir)
}

fn array(v: Json) -> Vec<Json> {
    match v.into_array() {
        Ok(a) => a,
        Err(other) => panic!("not an array: {}", other.to_canonical_string()),
    }
}

/// The listing a delta describes (given the listing its `since` named), and how many entries it referred to.
fn rebuild(delta: &Json, base: &[Json]) -> (Vec<Json>, usize) {
    let mut refs = 0;
    let sessions = array(delta.get("sessions").unwrap().clone())
        .into_iter()
        .map(|e| match e {
            Json::Number(_) => {
                refs += 1;
                let i: usize = e.to_canonical_string().parse().expect("an index");
                base.get(i).unwrap_or_else(|| panic!("index {i} is outside the base listing")).clone()
            }
            info => info,
        })
        .collect();
    (sessions, refs)
}

fn token(delta: &Json) -> String {
    delta.get("token").and_then(Json::as_js_str).unwrap().to_string_lossy()
}

#[test]
fn a_listing_delta_rebuilds_pis_listing_after_files_change_appear_and_vanish() {
    let root = temp_dir();
    let (agent, dir) = project(root.path());
    let paths: Vec<String> = (0..40).map(|n| write_session(&dir, n, 4, 800)).collect();
    let mut sc = Sidecar::spawn(Wire::Jsonl, &["--agent-dir", &agent], &[]);
    let scope = r#""cwd":"/work/proj""#;
    let list = |sc: &mut Sidecar| array(sc.call("sessions/list", json(&format!("{{{scope}}}"))));

    // Without `since`, every entry comes in full.
    let expected = list(&mut sc);
    assert_eq!(expected.len(), 40);
    let first = sc.call("sessions/listDelta", json(&format!("{{{scope}}}")));
    let (rebuilt, refs) = rebuild(&first, &[]);
    assert_eq!((rebuilt.as_slice(), refs), (expected.as_slice(), 0));

    // Nothing changed: every entry is a reference.
    let same = sc.call("sessions/listDelta", json(&format!(r#"{{{scope},"since":"{}"}}"#, token(&first))));
    let (again, refs) = rebuild(&same, &rebuilt);
    assert_eq!((again.as_slice(), refs), (expected.as_slice(), 40));
    assert_ne!(token(&same), token(&first), "every answer names a new listing");

    // One file grows (and so moves to the top), one appears, one vanishes.
    let mut grown = fs::read_to_string(&paths[3]).unwrap();
    grown.push_str(
        r#"{"type":"message","id":"late","parentId":"s003-3","timestamp":"2026-01-02T00:00:00.000Z","message":{"role":"user","content":"a late question","timestamp":1767312000000}}"#,
    );
    grown.push('\n');
    fs::write(&paths[3], grown).unwrap();
    write_session(&dir, 41, 2, 100);
    fs::remove_file(&paths[7]).unwrap();
    let expected = list(&mut sc);
    let changed = sc.call("sessions/listDelta", json(&format!(r#"{{{scope},"since":"{}"}}"#, token(&same))));
    let (after, refs) = rebuild(&changed, &again);
    assert_eq!(after, expected);
    assert_eq!(refs, 38, "all but the grown and the new file are references");
    assert_eq!(after[0].get("firstMessage"), expected[0].get("firstMessage"));

    // listAll's scope (no cwd) and the lean form work the same way.
    let all = array(sc.call("sessions/listAll", json(r#"{"includeAllMessagesText":false}"#)));
    let lean = sc.call("sessions/listDelta", json(r#"{"includeAllMessagesText":false}"#));
    let (lean_rebuilt, _) = rebuild(&lean, &[]);
    assert_eq!(lean_rebuilt, all);
    let lean_again = sc
        .call("sessions/listDelta", json(&format!(r#"{{"includeAllMessagesText":false,"since":"{}"}}"#, token(&lean))));
    assert_eq!(rebuild(&lean_again, &lean_rebuilt), (all.clone(), all.len()));
}

#[test]
fn a_listing_delta_since_an_unknown_or_mismatched_token_comes_in_full() {
    let root = temp_dir();
    let (agent, dir) = project(root.path());
    for n in 0..3 {
        write_session(&dir, n, 2, 50);
    }
    let mut sc = Sidecar::spawn(Wire::Jsonl, &["--agent-dir", &agent], &[]);
    let expected = array(sc.call("sessions/list", json(r#"{"cwd":"/work/proj"}"#)));
    let unknown = sc.call("sessions/listDelta", json(r#"{"cwd":"/work/proj","since":"from-another-process-1"}"#));
    assert_eq!(rebuild(&unknown, &[]), (expected.clone(), 0));
    // A token for a listing without allMessagesText cannot stand for entries with it.
    let lean = sc.call("sessions/listDelta", json(r#"{"cwd":"/work/proj","includeAllMessagesText":false}"#));
    let full = sc.call("sessions/listDelta", json(&format!(r#"{{"cwd":"/work/proj","since":"{}"}}"#, token(&lean))));
    assert_eq!(rebuild(&full, &[]), (expected, 0));
    // Tokens are remembered for the last few listings only; older ones are answered in full, never wrongly.
    let old = token(&full);
    for _ in 0..10 {
        sc.call("sessions/listDelta", json(r#"{"cwd":"/work/proj"}"#));
    }
    let late = sc.call("sessions/listDelta", json(&format!(r#"{{"cwd":"/work/proj","since":"{old}"}}"#)));
    assert_eq!(rebuild(&late, &[]).1, 0);
}

#[test]
fn a_large_result_is_the_same_over_both_framings_in_a_batch_and_under_any_id() {
    let root = temp_dir();
    let (agent, dir) = project(root.path());
    for n in 0..40 {
        write_session(&dir, n, 4, 800);
    }
    // One session whose text holds U+2028, which the framing must escape even in a result it does not copy.
    let odd = write_session(&dir, 40, 2, 10);
    let text = fs::read_to_string(&odd).unwrap().replace("message 0", "line\u{2028}separator");
    fs::write(&odd, text).unwrap();
    let params = json(r#"{"cwd":"/work/proj"}"#);
    let mut jsonl = Sidecar::spawn(Wire::Jsonl, &["--agent-dir", &agent], &[]);
    let expected = jsonl.call("sessions/list", params.clone());
    assert!(expected.to_canonical_string().len() > 100_000, "large enough to be framed past jsonrpsee");
    assert!(expected.to_canonical_string().contains('\u{2028}'));
    let mut lsp = Sidecar::spawn(Wire::Lsp, &["--agent-dir", &agent], &[]);
    assert_eq!(lsp.call("sessions/list", params.clone()), expected);
    // In a batch, and under a string id and an id jsonrpsee cannot take (negative): the host's id comes back.
    jsonl.send_raw(
        br#"[{"jsonrpc":"2.0","id":"list-1","method":"sessions/list","params":{"cwd":"/work/proj"}},{"jsonrpc":"2.0","id":-5,"method":"sessions/list","params":{"cwd":"/work/proj"}}]
"#,
    );
    let batch = array(jsonl.next_message(std::time::Duration::from_secs(30)).expect("a batch answer"));
    assert_eq!(batch.len(), 2);
    let by_id = |id: &Json| batch.iter().find(|m| m.get("id") == Some(id)).unwrap_or_else(|| panic!("no answer"));
    assert_eq!(by_id(&Json::str("list-1")).get("result"), Some(&expected));
    assert_eq!(by_id(&Json::number(-5.0)).get("result"), Some(&expected));
}

/// A change to make to the files, by name.
type Change<'a> = Box<dyn Fn() + 'a>;

#[test]
fn a_held_listing_answered_unread_while_its_directories_are_quiet_is_pis_after_every_kind_of_change_issue_21() {
    let root = temp_dir();
    let (agent, dir) = project(root.path());
    let paths: Vec<String> = (0..12).map(|n| write_session(&dir, n, 2, 40)).collect();
    let elsewhere = root.path().join("elsewhere");
    fs::create_dir_all(&elsewhere).unwrap();
    let log = root.path().join("sidecar.log");
    let mut cmd = std::process::Command::new(crate::support::sidecar::binary());
    cmd.args(["--agent-dir", &agent])
        .env("RUST_LOG", "pi_sessiond::rpc::handlers::catalog=debug")
        .stderr(fs::File::create(&log).unwrap());
    let mut sc = Sidecar::spawn_command(Wire::Jsonl, cmd, true);
    // Two hosts' scopes, each holding its last listing: the project's (`list`) and every project's (`listAll`).
    let scopes = [(r#""cwd":"/work/proj""#, "sessions/list"), (r#""includeAllMessagesText":true"#, "sessions/listAll")];
    let mut held: Vec<(String, Vec<Json>)> = scopes
        .iter()
        .map(|(scope, _)| {
            let first = sc.call("sessions/listDelta", json(&format!("{{{scope}}}")));
            (token(&first), rebuild(&first, &[]).0)
        })
        .collect();
    let append = |path: &Path, id: &str, text: &str| {
        use std::io::Write;
        let line = format!(
            "{{\"type\":\"message\",\"id\":\"{id}\",\"parentId\":null,\"timestamp\":\"2026-02-01T00:00:00.000Z\",\"message\":{{\"role\":\"user\",\"content\":\"{text}\",\"timestamp\":1769904000000}}}}\n"
        );
        fs::OpenOptions::new().append(true).open(path).unwrap().write_all(line.as_bytes()).unwrap();
    };
    let set_mtime = |path: &str, secs: u64| {
        let f = fs::File::options().write(true).open(path).unwrap();
        f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs)).unwrap();
    };
    let other_project = root.path().join("agent/sessions/--work-other--");
    let linked_project = root.path().join("linked-project");
    let steps: Vec<(&str, Change<'_>)> = vec![
        ("nothing", Box::new(|| {})),
        ("an append", Box::new(|| append(Path::new(&paths[0]), "a1", "appended"))),
        ("nothing again", Box::new(|| {})),
        (
            "a same-length rewrite with its mtime set back",
            Box::new(|| {
                let before = fs::metadata(&paths[1]).unwrap().modified().unwrap();
                let text = fs::read_to_string(&paths[1]).unwrap().replace("s001 message 0", "s001 MESSAGE 0");
                fs::write(&paths[1], text).unwrap();
                fs::File::options().write(true).open(&paths[1]).unwrap().set_modified(before).unwrap();
            }),
        ),
        ("a new mtime", Box::new(|| set_mtime(&paths[2], 1_900_000_000))),
        ("a new session", Box::new(|| drop(write_session(&dir, 20, 2, 40)))),
        (
            "a session renamed",
            Box::new(|| fs::rename(&paths[3], dir.join("2026-03-01T00-00-00-000Z_s003.jsonl")).unwrap()),
        ),
        ("a session removed", Box::new(|| fs::remove_file(&paths[4]).unwrap())),
        (
            "a symlinked session",
            Box::new(|| {
                let target = elsewhere.join("target.jsonl");
                fs::copy(&paths[5], &target).unwrap();
                std::os::unix::fs::symlink(&target, dir.join("2026-04-01T00-00-00-000Z_link.jsonl")).unwrap();
            }),
        ),
        (
            "its target written, which is no event of the directory",
            Box::new(|| append(&elsewhere.join("target.jsonl"), "t1", "through the link")),
        ),
        (
            "the symlink removed, a session given a second name elsewhere",
            Box::new(|| {
                fs::remove_file(dir.join("2026-04-01T00-00-00-000Z_link.jsonl")).unwrap();
                fs::hard_link(&paths[6], elsewhere.join("second-name.jsonl")).unwrap();
            }),
        ),
        (
            "written through its other name",
            Box::new(|| append(&elsewhere.join("second-name.jsonl"), "h1", "through the other name")),
        ),
        (
            "another project",
            Box::new(|| {
                fs::create_dir_all(&other_project).unwrap();
                write_session(&other_project, 30, 2, 40);
            }),
        ),
        (
            "a project that is a symlink",
            Box::new(|| {
                fs::create_dir_all(&linked_project).unwrap();
                write_session(&linked_project, 31, 2, 40);
                std::os::unix::fs::symlink(&linked_project, root.path().join("agent/sessions/--work-linked--"))
                    .unwrap();
            }),
        ),
        (
            "a session written in it",
            Box::new(|| {
                append(&linked_project.join("2026-01-01T00-00-31-000Z_s031.jsonl"), "l1", "in the linked project")
            }),
        ),
        (
            "another project removed and made anew",
            Box::new(|| {
                fs::remove_dir_all(&other_project).unwrap();
                fs::create_dir_all(&other_project).unwrap();
                write_session(&other_project, 32, 3, 40);
            }),
        ),
        ("the other name removed", Box::new(|| fs::remove_file(elsewhere.join("second-name.jsonl")).unwrap())),
        ("nothing at the end", Box::new(|| {})),
    ];
    for (what, change) in &steps {
        change();
        for ((scope, method), (since, base)) in scopes.iter().zip(held.iter_mut()) {
            let expected = array(sc.call(method, json(&format!("{{{scope}}}"))));
            let delta = sc.call("sessions/listDelta", json(&format!(r#"{{{scope},"since":"{since}"}}"#)));
            let (rebuilt, _) = rebuild(&delta, base);
            assert_eq!(rebuilt, expected, "{method} after {what}");
            *since = token(&delta);
            *base = rebuilt;
        }
    }
    assert_eq!(sc.finish(), 0);
    // Unread answers came where nothing changed (each scope, at least the three quiet steps), so the checks above
    // were of them too.
    let unread = fs::read_to_string(&log).unwrap().matches("answered unread").count();
    assert!(unread >= 2 * 3, "{unread} listings were answered unread:\n{}", fs::read_to_string(&log).unwrap());
}
