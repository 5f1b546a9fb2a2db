//! The shared catalog index under several real `pi-sessiond` processes at once (not threads of one process: each
//! has its own connection, memo and timing, as two pi windows running the extension do): listing with and without
//! `allMessagesText`, searching, and files growing and being rewritten meanwhile. Afterwards the index must list
//! exactly what pi 1.6.0's own `listAll` lists, session by session, and search exactly what reading the files
//! finds (issue 11).

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::PathBuf;

use pi_sessiond::session::json::{Json, Object};

use crate::corpus::Rng;
use crate::support::sidecar::{binary, Sidecar, Wire};
use crate::support::{json, json_diff, oracle, s, temp_dir};

const WORDS: &[&str] = &[
    "parser",
    "borrow",
    "lifetime",
    "tokenizer",
    "session",
    "branch",
    "refactor",
    "handler",
    "async",
    "module",
    "index",
    "sqlite",
    "listing",
    "search",
    "append",
    "rewrite",
    "process",
    "window",
    "answer",
    "question",
];

fn words(r: &mut Rng, n: usize) -> String {
    (0..n).map(|_| r.pick(WORDS)).collect::<Vec<_>>().join(" ")
}

/// One message line (user or assistant, alternating by `n`), with text from the vocabulary.
fn message(r: &mut Rng, id: &str, parent: Option<&str>, n: usize, ts: u64) -> String {
    let role = if n.is_multiple_of(2) { "user" } else { "assistant" };
    let n_words = 3 + r.below(12);
    let text = words(r, n_words);
    let content =
        if role == "user" { format!("\"{text}\"") } else { format!(r#"[{{"type":"text","text":"{text}"}}]"#) };
    let parent = parent.map_or("null".to_owned(), |p| format!("\"{p}\""));
    format!(
        r#"{{"type":"message","id":"{id}","parentId":{parent},"timestamp":"2026-01-01T00:00:00.000Z","message":{{"role":"{role}","content":{content},"timestamp":{ts}}}}}"#
    )
}

/// A generated agent directory: `sessions` sessions spread over three projects, each a header and a few messages.
struct Tree {
    _tmp: tempfile::TempDir,
    agent: PathBuf,
    files: Vec<PathBuf>,
    /// Messages in each file so far (for ids and parents of appended lines).
    counts: Vec<usize>,
}

impl Tree {
    fn new(sessions: usize, r: &mut Rng) -> Tree {
        let tmp = temp_dir();
        let agent = tmp.path().join("agent");
        let mut files = Vec::new();
        let mut counts = Vec::new();
        for i in 0..sessions {
            let dir = agent.join("sessions").join(["--proj-a--", "--proj-b--", "--proj-c--"][i % 3]);
            fs::create_dir_all(&dir).unwrap();
            let path = dir.join(format!("2026-01-01T00-00-{:02}-{:03}Z_s{i:04}.jsonl", i % 60, i % 1000));
            let mut text = format!(
                r#"{{"type":"session","version":3,"id":"s{i:04}","timestamp":"2026-01-01T00:00:{:02}.000Z","cwd":"/proj/{}"}}"#,
                i % 60,
                i % 3
            );
            text.push('\n');
            let n = r.below(4);
            for m in 0..n {
                let parent = (m > 0).then(|| format!("s{i}-{}", m - 1));
                text.push_str(&message(r, &format!("s{i}-{m}"), parent.as_deref(), m, 1_767_225_600_000 + i as u64));
                text.push('\n');
            }
            fs::write(&path, text).unwrap();
            files.push(path);
            counts.push(n);
        }
        Tree { _tmp: tmp, agent, files, counts }
    }

    /// Appends one message to file `i`, as pi does (one complete line).
    fn append(&mut self, i: usize, r: &mut Rng) {
        let m = self.counts[i];
        let parent = (m > 0).then(|| format!("s{i}-{}", m - 1));
        let line = message(r, &format!("s{i}-{m}"), parent.as_deref(), m, 1_767_300_000_000 + (i * 100 + m) as u64);
        OpenOptions::new()
            .append(true)
            .open(&self.files[i])
            .unwrap()
            .write_all(format!("{line}\n").as_bytes())
            .unwrap();
        self.counts[i] += 1;
    }

    /// Rewrites file `i` in place with other content (same inode), as a tool that edits sessions would.
    fn rewrite(&mut self, i: usize, r: &mut Rng) {
        let bytes = fs::read(&self.files[i]).unwrap();
        let header_end = bytes.iter().position(|&b| b == b'\n').unwrap() + 1;
        let mut text = String::from_utf8(bytes[..header_end].to_vec()).unwrap();
        text.push_str(&message(r, &format!("s{i}-r"), None, 0, 1_767_400_000_000 + i as u64));
        text.push('\n');
        fs::write(&self.files[i], text).unwrap();
        self.counts[i] = 0;
    }

    fn agent(&self) -> String {
        s(&self.agent)
    }
}

/// pi 1.6.0's `SessionManager.listAll()` over the agent directory.
fn pi_list_all(agent: &str) -> Json {
    let mut call = Object::new();
    call.insert("kind", Json::str("listAll"));
    call.insert("agentDir", Json::str(agent));
    let mut req = Object::new();
    req.insert("command", Json::str("list"));
    req.insert("calls", Json::Array(vec![Json::Object(call)]));
    let Ok(answers) = oracle(&Json::Object(req)).into_array() else { panic!("oracle") };
    answers[0].get("ok").unwrap_or_else(|| panic!("pi failed: {}", answers[0].to_canonical_string())).clone()
}

fn sessions_of(v: &Json) -> &[Json] {
    match v {
        Json::Array(a) => a,
        other => panic!("not a listing: {}", other.to_canonical_string()),
    }
}

/// Asserts that `ours` lists exactly pi's sessions, in pi's order, field by field; names each session that differs.
fn assert_same_as_pi(what: &str, pi: &Json, ours: &Json) {
    let (pi, ours) = (sessions_of(pi), sessions_of(ours));
    let mut problems = Vec::new();
    let path = |v: &Json| v.get("path").map(Json::to_canonical_string).unwrap_or_default();
    for (i, p) in pi.iter().enumerate() {
        match ours.iter().find(|o| path(o) == path(p)) {
            None => problems.push(format!("{}: missing", path(p))),
            Some(o) => {
                if let Some(d) = json_diff("", p, o) {
                    problems.push(format!("{}: {d}", path(p)));
                } else if ours.get(i).map(path) != Some(path(p)) {
                    problems.push(format!("{}: at another position", path(p)));
                }
            }
        }
    }
    if ours.len() != pi.len() {
        problems.push(format!("{} sessions listed, pi lists {}", ours.len(), pi.len()));
    }
    let shown: Vec<&String> = problems.iter().take(5).collect();
    assert!(problems.is_empty(), "{what}: {} sessions differ from pi's listAll, e.g. {shown:#?}", problems.len());
}

/// A sidecar on `agent`'s default index.
fn sidecar(agent: &str) -> Sidecar {
    Sidecar::spawn(Wire::Jsonl, &["--agent-dir", agent], &[])
}

/// `listAll` from a process that has never listed (no memo of its own): what the index holds, with the text.
fn fresh_list_all(agent: &str) -> Json {
    sidecar(agent).call("sessions/listAll", json("{}"))
}

#[test]
fn two_processes_listing_without_text_after_files_grew_keep_each_rows_text_once() {
    // Issue 11: each row's allMessagesText held the new lines twice, and kept them, because rows were read outside
    // the write transaction and continued from their old offset onto text the other process had already extended.
    let mut r = Rng::new(11);
    let mut tree = Tree::new(1000, &mut r);
    let agent = tree.agent();
    fresh_list_all(&agent);
    for i in 0..tree.files.len() {
        tree.append(i, &mut r);
    }
    let mut a = sidecar(&agent);
    let mut b = sidecar(&agent);
    let lean = json(r#"{"includeAllMessagesText":false}"#);
    let (ia, ib) = (a.start("sessions/listAll", lean.clone()), b.start("sessions/listAll", lean));
    for (sc, id) in [(&mut a, ia), (&mut b, ib)] {
        let answer = sc.response(id);
        assert!(answer.get("result").is_some(), "listAll failed: {}", answer.to_canonical_string());
    }
    assert_same_as_pi("listAll after two lean listings at once", &pi_list_all(&agent), &fresh_list_all(&agent));
}

/// Every hit of a search over the agent directory, as text, sorted (reading the files, or through the index).
fn search_hits(agent: &str, query: &str, use_index: bool) -> Vec<String> {
    let mut cmd = std::process::Command::new(binary());
    cmd.args(["search", query, "--json", "--limit", "100000", "--agent-dir", agent]);
    if !use_index {
        cmd.arg("--no-index");
    }
    let out = cmd.output().unwrap();
    // Status 1 is "no match" (as grep's), with `[]` printed.
    assert!(matches!(out.status.code(), Some(0 | 1)), "search {query}: {}", String::from_utf8_lossy(&out.stderr));
    let mut hits: Vec<String> =
        sessions_of(&Json::parse(&out.stdout).unwrap()).iter().map(|h| h.to_canonical_string()).collect();
    hits.sort();
    hits
}

/// `processes` sidecars at once, for `rounds` rounds: each lists (with and without text, all and one project) and
/// searches, pipelined, while this process appends to and rewrites files under them.
fn processes_list_search_and_append_at_once(processes: usize, rounds: usize, seed: u32) {
    let mut r = Rng::new(seed);
    let mut tree = Tree::new(1000, &mut r);
    let agent = tree.agent();
    for round in 0..rounds {
        let mut sidecars: Vec<Sidecar> = (0..processes).map(|_| sidecar(&agent)).collect();
        let mut pending = Vec::new();
        for (k, sc) in sidecars.iter_mut().enumerate() {
            let requests = [
                ("sessions/listAll", r#"{"includeAllMessagesText":false}"#.to_owned()),
                ("sessions/search", format!(r#"{{"query":"{}"}}"#, WORDS[(round + k) % WORDS.len()])),
                ("sessions/listAll", "{}".to_owned()),
                ("sessions/list", r#"{"cwd":"/proj/1"}"#.to_owned()),
                ("sessions/search", r#"{"query":"borrow lifetime","limit":5}"#.to_owned()),
                ("sessions/listAll", r#"{"includeAllMessagesText":false}"#.to_owned()),
            ];
            let mut ids = Vec::new();
            for i in 0..requests.len() {
                let (method, params) = &requests[(i + k) % requests.len()];
                ids.push((*method, sc.start(method, json(params))));
            }
            pending.push(ids);
        }
        // Meanwhile, files grow (complete lines, as pi writes them) and a few are rewritten in place.
        for _ in 0..300 {
            let i = r.below(tree.files.len());
            if r.chance(5) {
                tree.rewrite(i, &mut r);
            } else {
                tree.append(i, &mut r);
            }
        }
        for (sc, ids) in sidecars.iter_mut().zip(pending) {
            for (method, id) in ids {
                let answer = sc.response(id);
                assert!(
                    answer.get("result").is_some(),
                    "round {round}: {method} failed: {}",
                    answer.to_canonical_string()
                );
            }
        }
    }
    // A lean listing first, so that rows continued without their text are what the last listing reads.
    sidecar(&agent).call("sessions/listAll", json(r#"{"includeAllMessagesText":false}"#));
    assert_same_as_pi(
        &format!("{processes} processes, {rounds} rounds"),
        &pi_list_all(&agent),
        &fresh_list_all(&agent),
    );
    for query in ["borrow", "lifetime parser"] {
        let (direct, indexed) = (search_hits(&agent, query, false), search_hits(&agent, query, true));
        assert!(
            direct == indexed,
            "{processes} processes: search {query}: {} hits reading the files, {} through the index",
            direct.len(),
            indexed.len()
        );
    }
}

#[test]
fn two_processes_listing_searching_and_appending_at_once_leave_an_index_that_lists_as_pi_does() {
    processes_list_search_and_append_at_once(2, 3, 21);
}

#[test]
fn four_processes_listing_searching_and_appending_at_once_leave_an_index_that_lists_as_pi_does() {
    processes_list_search_and_append_at_once(4, 3, 22);
}
