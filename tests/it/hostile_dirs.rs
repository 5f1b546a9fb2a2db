//! Sessions directories holding what is not a session file — a FIFO, a device, a directory named `*.jsonl` — as a
//! fuzzer or an accident leaves them: every listing, lookup and search still answers (in every process sharing
//! the index), lists the real sessions, and never opens what is not a regular file (issue 11: a FIFO hung
//! `sessions/list`, `listAll`, `search` and `findById` and, holding the shared index, other processes' listings
//! too; a device was read until the process aborted).

use std::fs;
use std::path::Path;

use pi_sessiond::session::json::Json;

use crate::support::sidecar::{Sidecar, Wire};
use crate::support::{json, s, str_of, temp_dir};

fn session(dir: &Path, id: &str, text: &str, minute: u32) -> String {
    let path = dir.join(format!("2026-01-01T00-{minute:02}-00-000Z_{id}.jsonl"));
    let header = format!(
        r#"{{"type":"session","version":3,"id":"{id}","timestamp":"2026-01-01T00:{minute:02}:00.000Z","cwd":"/work/proj"}}"#
    );
    let message = format!(
        r#"{{"type":"message","id":"{id}-1","parentId":null,"timestamp":"2026-01-01T00:{minute:02}:01.000Z","message":{{"role":"user","content":"{text}","timestamp":1767225601000}}}}"#
    );
    fs::write(&path, format!("{header}\n{message}\n")).unwrap();
    let mtime = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_767_225_600 + 60 * minute as u64);
    fs::File::options().write(true).open(&path).unwrap().set_modified(mtime).unwrap();
    s(&path)
}

/// A project directory with two sessions, and beside them, named and dated to be read first: a FIFO nobody
/// writes to, `/dev/zero` through a symlink, and a directory.
fn hostile_project(agent: &Path) -> (String, Vec<String>) {
    let dir = agent.join("sessions/--work-proj--");
    fs::create_dir_all(&dir).unwrap();
    let sessions = vec![session(&dir, "aaaa", "the quiet harbour", 1), session(&dir, "bbbb", "a quiet meadow", 2)];
    rustix::fs::mkfifoat(rustix::fs::CWD, dir.join("2026-12-31T00-00-00-000Z_fifo.jsonl"), rustix::fs::Mode::RUSR)
        .unwrap();
    std::os::unix::fs::symlink("/dev/zero", dir.join("2026-12-30T00-00-00-000Z_zero.jsonl")).unwrap();
    fs::create_dir(dir.join("2026-12-29T00-00-00-000Z_dir.jsonl")).unwrap();
    (s(&dir), sessions)
}

fn paths_of(listing: &Json) -> Vec<String> {
    let Json::Array(items) = listing else { panic!("not a listing: {}", listing.to_canonical_string()) };
    let mut paths: Vec<String> = items.iter().map(|i| str_of(i.get("path").unwrap())).collect();
    paths.sort();
    paths
}

#[test]
fn a_fifo_or_a_device_in_a_sessions_directory_is_skipped_and_no_process_hangs_on_it() {
    let root = temp_dir();
    let agent = s(&root.path().join("agent"));
    let (dir, sessions) = hostile_project(root.path().join("agent").as_path());
    for args in [vec!["--agent-dir", agent.as_str()], vec!["--agent-dir", agent.as_str(), "--no-index"]] {
        // Two processes at once on one index: neither waits on the other.
        let mut sidecars = [Sidecar::spawn(Wire::Jsonl, &args, &[]), Sidecar::spawn(Wire::Jsonl, &args, &[])];
        let requests = [
            ("sessions/list", r#"{"cwd":"/work/proj"}"#.to_owned()),
            ("sessions/listAll", "{}".to_owned()),
            ("sessions/listAll", format!(r#"{{"sessionDir":"{dir}","includeAllMessagesText":false}}"#)),
            ("sessions/search", r#"{"query":"quiet"}"#.to_owned()),
            ("sessions/findById", r#"{"cwd":"/work/proj","id":"bbbb"}"#.to_owned()),
            ("sessions/findById", format!(r#"{{"cwd":"/work/proj","id":"nothing","sessionDir":"{dir}"}}"#)),
            ("session/continueRecent", format!(r#"{{"cwd":"/work/proj","sessionDir":"{dir}"}}"#)),
        ];
        let ids: Vec<Vec<u64>> = sidecars
            .iter_mut()
            .map(|sc| requests.iter().map(|(method, params)| sc.start(method, json(params))).collect())
            .collect();
        for (sc, ids) in sidecars.iter_mut().zip(ids) {
            let answers: Vec<Json> = ids
                .into_iter()
                .zip(&requests)
                .map(|(id, (method, _))| {
                    let r = sc.response(id);
                    r.get("result").unwrap_or_else(|| panic!("{args:?} {method}: {}", r.to_canonical_string())).clone()
                })
                .collect();
            for listing in &answers[..3] {
                assert_eq!(paths_of(listing), sessions, "{args:?}: only the regular session files are listed");
            }
            let Json::Array(hits) = &answers[3] else { panic!("search") };
            let mut hit_paths: Vec<String> = hits.iter().map(|h| str_of(h.get("path").unwrap())).collect();
            hit_paths.sort();
            assert_eq!(hit_paths, sessions, "{args:?}: search");
            assert_eq!(answers[4].get("path"), Some(&Json::str(&sessions[1])), "{args:?}: findById");
            assert_eq!(answers[5].get("path"), Some(&Json::Null), "{args:?}: findById of an unknown id");
            // The FIFO is the newest file; the most recent *session* is continued.
            assert_eq!(answers[6].get("sessionFile"), Some(&Json::str(&sessions[1])), "{args:?}: continueRecent");
        }
    }
}

#[test]
fn find_by_id_looks_only_in_the_directory_it_is_given_as_pi_does_even_at_the_root() {
    // Issue 11: `findById` with `sessionDir: "/"` ran for more than 30 s. pi reads the one directory's `*.jsonl`
    // headers (the first MiB of each), not the tree below it.
    let root = temp_dir();
    let dir = root.path().join("outer");
    fs::create_dir_all(dir.join("inner")).unwrap();
    session(&dir.join("inner"), "nested", "deep down", 3);
    let top = session(&dir, "top", "up here", 4);
    let agent = s(&root.path().join("agent"));
    let calls: Vec<(String, String)> = vec![
        ("/".into(), "x-no-such-session".into()),
        (s(&dir), "nested".into()),
        (s(&dir), "top".into()),
        (s(&dir.join("inner")), "nested".into()),
    ];
    let mut req = pi_sessiond::session::json::Object::new();
    req.insert("command", Json::str("list"));
    let oracle_calls = calls
        .iter()
        .map(|(d, id)| {
            json(&format!(
                r#"{{"kind":"findById","cwd":"/work/proj","id":"{id}","dir":{},"agentDir":"{agent}"}}"#,
                Json::str(d).to_canonical_string()
            ))
        })
        .collect();
    req.insert("calls", Json::Array(oracle_calls));
    let Ok(pi) = crate::support::oracle(&Json::Object(req)).into_array() else { panic!("oracle") };
    let mut sc = Sidecar::spawn(Wire::Jsonl, &["--agent-dir", &agent], &[]);
    for ((d, id), pi) in calls.iter().zip(pi) {
        let params =
            format!(r#"{{"cwd":"/work/proj","id":"{id}","sessionDir":{}}}"#, Json::str(d).to_canonical_string());
        let ours = sc.call("sessions/findById", json(&params));
        assert_eq!(ours.get("path"), pi.get("ok"), "findById {id} in {d}");
    }
    assert_eq!(
        sc.call("sessions/findById", json(&format!(r#"{{"cwd":"/work/proj","id":"top","sessionDir":"{}"}}"#, s(&dir))))
            .get("path"),
        Some(&Json::str(&top))
    );
}
