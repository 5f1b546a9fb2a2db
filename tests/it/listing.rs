//! Listing and discovery against pi: `list`, `listAll`, `findById`, `findMostRecentSession` on the same
//! directories must return pi's sessions, with pi's fields, in pi's order — except that a file pi drops because
//! its own code throws on it (pi hides sessions with `content: null`) is listed here (docs/compatibility.md).

use std::path::Path;

use pi_sessiond::catalog::index::CatalogIndex;
use pi_sessiond::catalog::info::session_info_json;
use pi_sessiond::catalog::info::ListedSession;
use pi_sessiond::catalog::listing::Catalog;
use pi_sessiond::session::dirscan;
use pi_sessiond::session::json::{Json, Object};
use std::sync::Arc;

use crate::corpus::{damage, session_lines, to_bytes, Rng, Shape};
use crate::support::{json, json_diff, oracle, replace_in_strings, s, temp_dir};

/// One file of a test tree: path relative to the root, contents, mtime.
pub(crate) struct FileSpec {
    path: String,
    bytes: Vec<u8>,
    mtime_ms: u64,
}

fn header(id: &str, ts: &str, cwd: &str) -> String {
    format!(r#"{{"type":"session","version":3,"id":"{id}","timestamp":"{ts}","cwd":"{cwd}"}}"#)
}

/// The tree both sides list: project directories under `agent/sessions`, a symlinked one, stray files, and a
/// custom session directory shared by two cwds.
pub(crate) fn tree(r: &mut Rng) -> (Vec<FileSpec>, Vec<(String, String)>) {
    let mut files = Vec::new();
    let mut t = 1_767_000_000_000u64;
    let mut add = |path: String, bytes: Vec<u8>| {
        t += 1000 + (path.len() as u64 % 7) * 13;
        files.push(FileSpec { path, bytes, mtime_ms: t });
    };
    let projects = ["--proj-a--", "--proj-b--"];
    for (p, dir) in projects.iter().enumerate() {
        for i in 0..12 {
            let lines = {
                let entries = r.below(12);
                let hand_written = r.chance(30);
                session_lines(r, Shape { entries, hand_written })
            };
            let mut bytes = to_bytes(&lines);
            if i % 5 == 4 {
                bytes = damage(r, crate::corpus::DAMAGE[(i + p) % crate::corpus::DAMAGE.len()], bytes);
            }
            add(format!("agent/sessions/{dir}/2026-01-0{p}T00-00-{i:02}-000Z_{:08x}.jsonl", r.below(1 << 30)), bytes);
        }
    }
    // Every key another JSON writer may escape, escaped: the first message, the count, the text, the name and
    // the activity time are pi's.
    let lines = [
        header("escaped", "2025-04-01T00:00:00.000Z", "/proj/b"),
        r#"{"type":"message","id":"e1","parentId":null,"timestamp":"2025-04-01T00:00:01.000Z","message":{"role":"user","content":"first words","timestamp":1743465601000}}"#.into(),
        r#"{"type":"message","id":"e2","parentId":"e1","timestamp":"2025-04-01T00:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"an answer"}],"stopReason":"stop","timestamp":1743465602000}}"#.into(),
        r#"{"type":"session_info","id":"e3","parentId":"e2","timestamp":"2025-04-01T00:00:03.000Z","name":"escaped keys"}"#.into(),
    ];
    let bytes = crate::corpus::escape_keys(r, format!("{}\n", lines.join("\n")).as_bytes(), 100);
    add("agent/sessions/--proj-b--/2025-04-01T00-00-00-000Z_escaped.jsonl".into(), bytes);
    // Ties: no messages and the same header time, names that byte order and ICU collation sort differently.
    for name in ["a-b", "a_b", "A", "B", "a.b", "a"] {
        let h = header(name, "2025-06-01T00:00:00.000Z", "/proj/a");
        add(format!("agent/sessions/--proj-a--/2025-06-01T00-00-00-000Z_{name}.jsonl"), format!("{h}\n").into_bytes());
    }
    // Odd files.
    add("agent/sessions/--proj-a--/notes.txt".into(), b"not a session".to_vec());
    add("agent/sessions/--proj-a--/empty.jsonl".into(), Vec::new());
    add(
        "agent/sessions/--proj-a--/numeric-id.jsonl".into(),
        br#"{"type":"session","id":42,"timestamp":"2025-01-01T00:00:00.000Z","cwd":5}"#.to_vec(),
    );
    add("agent/sessions/--proj-a--/not-session.jsonl".into(), b"{\"type\":\"message\"}\n".to_vec());
    add(
        "agent/sessions/top-level.jsonl".into(),
        format!("{}\n", header("top", "2025-01-01T00:00:00.000Z", "/")).into_bytes(),
    );
    add(
        "agent/sessions/--proj-a--/deeper/nested.jsonl".into(),
        format!("{}\n", header("nested", "2025-01-01T00:00:00.000Z", "/")).into_bytes(),
    );
    // A project directory that is a symlink (added after writing), and a custom directory shared by two cwds.
    for (i, cwd) in ["/work/one", "/work/two", "/work/one/", ""].iter().enumerate() {
        let msg = format!(
            r#"{{"type":"message","id":"m{i}","parentId":null,"timestamp":"2025-02-0{}T00:00:00.000Z","message":{{"role":"user","content":"hi {i}","timestamp":{}}}}}"#,
            i + 1,
            1_740_000_000_000u64 + i as u64
        );
        add(
            format!("custom/2025-02-0{i}T00-00-00-000Z_c{i}.jsonl"),
            format!("{}\n{msg}\n", header(&format!("c{i}"), "2025-02-01T00:00:00.000Z", cwd)).into_bytes(),
        );
    }
    for i in 0..3 {
        add(
            format!("elsewhere/linked/2025-03-0{i}T00-00-00-000Z_l{i}.jsonl"),
            format!("{}\n", header(&format!("l{i}"), &format!("2025-03-0{}T00:00:00.000Z", i + 1), "/linked"))
                .into_bytes(),
        );
    }
    // Ties broken by Node's `readdir` order (libuv sorts names by their bytes, whatever the file system's order):
    // one file name with one mtime in several project directories, and two files of one directory with one id.
    for project in ["--tie-q--", "--tie-B--", "--tie-a--", "--tie-z--", "--tie-_--", "--tie-0--", "--tie-m--"] {
        files.push(FileSpec {
            path: format!("agent/sessions/{project}/2026-02-02T00-00-00-000Z_tie.jsonl"),
            bytes: format!("{}\n", header("tie", "2026-02-02T00:00:00.000Z", "/proj/tie")).into_bytes(),
            mtime_ms: 1_767_500_000_000,
        });
    }
    for name in ["2026-02-03T00-00-00-000Z_dup-b.jsonl", "2026-02-03T00-00-00-000Z_dup-A.jsonl"] {
        files.push(FileSpec {
            path: format!("agent/sessions/--proj-a--/{name}"),
            bytes: format!("{}\n", header("dupid", "2026-02-03T00:00:00.000Z", "/proj/a")).into_bytes(),
            mtime_ms: 1_767_600_000_000,
        });
    }
    let links = vec![("elsewhere/linked".to_owned(), "agent/sessions/--linked--".to_owned())];
    (files, links)
}

pub(crate) fn build(root: &Path, files: &[FileSpec], links: &[(String, String)]) {
    for f in files {
        let p = root.join(&f.path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, &f.bytes).unwrap();
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(f.mtime_ms);
        let file = std::fs::File::options().write(true).open(&p).unwrap();
        file.set_times(std::fs::FileTimes::new().set_modified(t).set_accessed(t)).unwrap();
    }
    for (target, link) in links {
        std::os::unix::fs::symlink(root.join(target), root.join(link)).unwrap();
    }
}

/// True when pi's `buildSessionInfo` throws on this file (so pi drops it and we do not).
fn pi_listing_throws(path: &str) -> bool {
    let Ok(bytes) = std::fs::read(path) else { return false };
    let text = String::from_utf8_lossy(&bytes);
    let mut seen_header = false;
    for line in text.split(['\n', '\r']) {
        let Ok(v) = Json::parse(line.as_bytes()) else { continue };
        if !v.truthy() {
            continue;
        }
        if !seen_header {
            seen_header = true;
            continue;
        }
        let ty = v.get("type").and_then(Json::as_js_str).map(|t| t.to_string_lossy());
        if ty.as_deref() == Some("session_info") && !matches!(v.get("name"), None | Some(Json::Null | Json::String(_)))
        {
            return true;
        }
        if ty.as_deref() != Some("message") {
            continue;
        }
        let Some(m) = v.get("message").filter(|m| **m != Json::Null) else { return true };
        let role = m.get("role").and_then(Json::as_js_str).map(|r| r.to_string_lossy());
        let Some(o) = m.as_object() else { continue };
        if !matches!(role.as_deref(), Some("user" | "assistant")) || !o.contains_key("content") {
            continue;
        }
        match o.get("content") {
            Some(Json::String(_)) => {}
            Some(Json::Array(blocks)) if blocks.iter().all(|b| *b != Json::Null) => {}
            _ => return true,
        }
    }
    false
}

/// Compares one call's result from pi and from us.
pub(crate) fn compare(what: &str, pi: &Json, ours: &Json, problems: &mut Vec<String>) {
    let (Json::Array(pi_list), Json::Array(our_list)) = (pi, ours) else {
        if let Some(d) = json_diff("", pi, ours) {
            problems.push(format!("{what}: {d}"));
        }
        return;
    };
    let path_of = |v: &Json| v.get("path").map(Json::to_canonical_string).unwrap_or_default();
    let pi_paths: Vec<String> = pi_list.iter().map(path_of).collect();
    let mut kept = Vec::new();
    for v in our_list {
        if pi_paths.contains(&path_of(v)) {
            kept.push(v.clone());
        } else {
            let p = v.get("path").and_then(Json::as_js_str).unwrap().to_string_lossy();
            if !pi_listing_throws(&p) {
                problems.push(format!("{what}: we list {p}, pi does not"));
            }
        }
    }
    if let Some(d) = json_diff("", pi, &Json::Array(kept)) {
        problems.push(format!("{what}: {d}"));
    }
}

#[test]
fn listings_and_lookups_match_pi_on_the_same_directories() {
    let tmp = temp_dir();
    let (pi_root, rs_root) = (tmp.path().join("pi"), tmp.path().join("rs"));
    let mut r = Rng::new(21);
    let (files, links) = tree(&mut r);
    build(&pi_root, &files, &links);
    build(&rs_root, &files, &links);
    let calls = |root: &Path| -> Vec<Json> {
        let agent = s(&root.join("agent"));
        let custom = s(&root.join("custom"));
        let a = format!("{agent}/sessions/--proj-a--");
        vec![
            json(&format!(r#"{{"kind":"listAll","agentDir":"{agent}"}}"#)),
            json(&format!(r#"{{"kind":"list","cwd":"/proj/a","agentDir":"{agent}"}}"#)),
            json(&format!(r#"{{"kind":"list","cwd":"/proj/a","dir":"{a}","agentDir":"{agent}"}}"#)),
            json(&format!(r#"{{"kind":"list","cwd":"/work/one","dir":"{custom}","agentDir":"{agent}"}}"#)),
            json(&format!(r#"{{"kind":"list","cwd":"/nowhere","dir":"{custom}/missing","agentDir":"{agent}"}}"#)),
            json(&format!(r#"{{"kind":"listAll","dir":"{custom}","agentDir":"{agent}"}}"#)),
            json(&format!(r#"{{"kind":"findById","cwd":"/proj/a","id":"a_b","dir":"{a}","agentDir":"{agent}"}}"#)),
            json(&format!(r#"{{"kind":"findById","cwd":"/proj/a","id":"a_","dir":"{a}","agentDir":"{agent}"}}"#)),
            json(&format!(r#"{{"kind":"findById","cwd":"/proj/a","id":"dupid","dir":"{a}","agentDir":"{agent}"}}"#)),
            json(&format!(
                r#"{{"kind":"findById","cwd":"/work/two","id":"c1","dir":"{custom}","agentDir":"{agent}"}}"#
            )),
            json(&format!(
                r#"{{"kind":"findById","cwd":"/work/one","id":"c1","dir":"{custom}","agentDir":"{agent}"}}"#
            )),
            json(&format!(r#"{{"kind":"findMostRecentSession","dir":"{a}"}}"#)),
            json(&format!(r#"{{"kind":"findMostRecentSession","dir":"{custom}","cwd":"/work/one"}}"#)),
        ]
    };
    let mut req = Object::new();
    req.insert("command", Json::str("list"));
    req.insert("calls", Json::Array(calls(&pi_root)));
    let Ok(pi_answers) = oracle(&Json::Object(req)).into_array() else { panic!("oracle") };
    // Three ways to answer: reading every file, from an empty index, and from the index it left.
    let index_path = s(&tmp.path().join("index.sqlite"));
    let mut index = CatalogIndex::open(&index_path).unwrap();
    let mut problems = Vec::new();
    for mode in ["direct", "cold index", "warm index"] {
        for (call, pi) in calls(&rs_root).iter().zip(&pi_answers) {
            let pi = replace_in_strings(pi, &s(&pi_root), &s(&rs_root));
            let ix = (mode != "direct").then_some(&mut index);
            let ours = our_answer(call, ix);
            let Some(pi_ok) = pi.get("ok") else {
                panic!("pi failed on {}: {}", call.to_canonical_string(), pi.to_canonical_string())
            };
            compare(&format!("{mode}: {}", call.to_canonical_string()), pi_ok, &ours, &mut problems);
        }
    }
    assert!(problems.is_empty(), "{} differences from pi:\n{}", problems.len(), problems.join("\n"));
}

/// Our answer to one oracle call (`kind`, `cwd`, `dir`, `id`, `agentDir`), with or without an index.
fn our_answer(call: &Json, index: Option<&mut CatalogIndex>) -> Json {
    let st = |k: &str| call.get(k).and_then(Json::as_js_str).map(|v| v.to_string_lossy());
    let agent = st("agentDir").unwrap_or_default();
    let infos = |v: Vec<Arc<ListedSession>>| Json::Array(v.iter().map(|s| session_info_json(s, true)).collect());
    let path = |p: Option<String>| p.map(|p| Json::str(&p)).unwrap_or(Json::Null);
    let mut catalog = Catalog::new(&agent, index);
    match st("kind").unwrap().as_str() {
        "list" => infos(catalog.list(&st("cwd").unwrap(), st("dir").as_deref(), &mut |_, _| {}).unwrap()),
        "listAll" => infos(catalog.list_all(st("dir").as_deref(), &mut |_, _| {}).unwrap()),
        "findById" => path(catalog.find_by_id(&st("cwd").unwrap(), &st("id").unwrap(), st("dir").as_deref()).unwrap()),
        "findMostRecentSession" => path(dirscan::find_most_recent_session(&st("dir").unwrap(), st("cwd").as_deref())),
        other => panic!("{other}"),
    }
}
