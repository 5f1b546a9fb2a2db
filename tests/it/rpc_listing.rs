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
