//! Hosts that keep a live mirror (issue 13), through the real binary: a mirror built only from an open's snapshot
//! and the `session/changed` that follow stays equal to the server's reads — and to pi's — after every step of
//! own writes, external appends, branching, rebinding, truncation, replacement and deletion, and after a forced
//! gap repaired with `session/changesSince`, at both details. The mirror here is the host's side written out in
//! Rust, from the protocol alone: it never reads a session itself.

use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant};

use pi_sessiond::session::json::{Json, Object};

use crate::support::sidecar::Sidecar;
use crate::support::{finish_oracle, json, json_diff, oracle, s, spawn_oracle, str_of, temp_dir};

/// A host's mirror of one handle.
struct Mirror {
    handle: String,
    detail: &'static str,
    seq: u64,
    leaf: Json,
    entries: Vec<Json>,
    /// Drop the next notification (a lost message, to force a gap).
    lose_next: bool,
    /// How many times the mirror had to resynchronise, and how (changes given again, or a snapshot).
    resyncs: Vec<&'static str>,
}

fn num(v: Option<&Json>) -> u64 {
    match v {
        Some(Json::Number(n)) => n.parse().unwrap(),
        other => panic!("not a number: {other:?}"),
    }
}

fn entries_of(snapshot: &Json) -> Vec<Json> {
    match snapshot.get("entries") {
        Some(Json::Array(e)) => e.clone(),
        other => panic!("a snapshot has entries: {other:?}"),
    }
}

impl Mirror {
    /// From an opening method's result (opened with `snapshot: detail`).
    fn from_open(state: &Json, detail: &'static str) -> Mirror {
        let snapshot = state.get("snapshot").expect("the open returned a snapshot");
        assert_eq!(num(snapshot.get("seq")), num(state.get("seq")), "the snapshot is the state's");
        assert_eq!(state.get("detail"), Some(&Json::str(detail)));
        Mirror {
            handle: str_of(state.get("handle").unwrap()),
            detail,
            seq: num(state.get("seq")),
            leaf: state.get("leafId").cloned().unwrap_or(Json::Null),
            entries: entries_of(snapshot),
            lose_next: false,
            resyncs: Vec::new(),
        }
    }

    /// Applies every `session/changed` for this handle the host has received (repairing gaps as a host would).
    fn catch_up(&mut self, sc: &mut Sidecar) {
        for note in sc.take_notifications("session/changed") {
            let params = note.get("params").unwrap().clone();
            if params.get("handle") != Some(&Json::str(&self.handle)) {
                continue;
            }
            if std::mem::take(&mut self.lose_next) {
                continue;
            }
            self.receive(sc, &params);
        }
    }

    fn receive(&mut self, sc: &mut Sidecar, params: &Json) {
        let seq = num(params.get("seq"));
        if seq <= self.seq {
            return;
        }
        if seq > self.seq + 1 {
            self.resync(sc);
            if seq <= self.seq {
                return;
            }
            assert_eq!(seq, self.seq + 1, "after a resync the next change follows it");
        }
        self.apply(params);
    }

    fn apply(&mut self, params: &Json) {
        let change = params.get("change").unwrap();
        match str_of(change.get("kind").unwrap()).as_str() {
            "append" => self.entries.extend(entries_of(change)),
            "leaf" | "deleted" => {}
            "rebind" | "reset" => {
                let snapshot = change.get("snapshot").expect("a rebind or reset carries a snapshot at this detail");
                assert_eq!(num(snapshot.get("seq")), num(params.get("seq")));
                self.entries = entries_of(snapshot);
                assert_eq!(change.get("state").unwrap().get("leafId"), params.get("leafId"));
            }
            other => panic!("unknown change {other}"),
        }
        self.leaf = params.get("leafId").cloned().unwrap_or(Json::Null);
        self.seq = num(params.get("seq"));
    }

    /// What a host does on a gap: asks for the changes since its last one.
    fn resync(&mut self, sc: &mut Sidecar) {
        let since =
            sc.call("session/changesSince", json(&format!(r#"{{"handle":"{}","seq":{}}}"#, self.handle, self.seq)));
        match (since.get("changes"), since.get("state"), since.get("snapshot")) {
            (Some(Json::Array(changes)), None, None) => {
                self.resyncs.push("changes");
                for c in changes {
                    assert_eq!(num(c.get("seq")), self.seq + 1, "changes come in order, none missing");
                    self.apply(c);
                }
            }
            (None, Some(state), Some(snapshot)) => {
                self.resyncs.push("snapshot");
                self.seq = num(snapshot.get("seq"));
                assert_eq!(self.seq, num(state.get("seq")));
                self.leaf = state.get("leafId").cloned().unwrap_or(Json::Null);
                self.entries = entries_of(snapshot);
            }
            _ => panic!("changesSince gives changes, or a state and a snapshot: {}", since.to_canonical_string()),
        }
    }

    /// Waits until the mirror has applied `n` more changes (another process's, which arrive on their own).
    fn wait_for(&mut self, sc: &mut Sidecar, n: u64) {
        let target = self.seq + n;
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.seq < target {
            assert!(Instant::now() < deadline, "{}: waited for change {target}, have {}", self.detail, self.seq);
            if let Some(m) = sc.next_message(Duration::from_millis(200)) {
                sc.backlog.push(m);
            }
            self.catch_up(sc);
        }
    }

    /// Waits until the mirror (from changes that arrive on their own) satisfies `done`.
    fn wait_until(&mut self, sc: &mut Sidecar, done: impl Fn(&Mirror) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done(self) {
            assert!(
                Instant::now() < deadline,
                "{}: the change never reached the mirror (at seq {})",
                self.detail,
                self.seq
            );
            if let Some(m) = sc.next_message(Duration::from_millis(200)) {
                sc.backlog.push(m);
            }
            self.catch_up(sc);
        }
    }

    /// True when the mirror holds an entry with this id.
    fn has(&self, id: &str) -> bool {
        self.entries.iter().any(|e| e.get("id") == Some(&Json::str(id)))
    }

    /// The mirror equals what the server reads now: its state, entries, leaf and tree.
    fn check(&mut self, sc: &mut Sidecar, step: &str) {
        self.catch_up(sc);
        let h = &self.handle;
        let state = sc.call("session/getState", json(&format!(r#"{{"handle":"{h}","snapshot":"{}"}}"#, self.detail)));
        let at = format!("{} detail, after {step}", self.detail);
        assert_eq!(num(state.get("seq")), self.seq, "{at}: the mirror has every change");
        assert_eq!(state.get("leafId").cloned().unwrap_or(Json::Null), self.leaf, "{at}: leaf");
        let fresh = Json::Array(entries_of(state.get("snapshot").unwrap()));
        assert_eq!(json_diff("", &fresh, &Json::Array(self.entries.clone())), None, "{at}: entries");
        // The skeleton's stored values are the entries' own, and its size their size.
        let full = sc.call("session/getEntries", json(&format!(r#"{{"handle":"{h}"}}"#)));
        let Json::Array(full) = &full else { panic!() };
        assert_eq!(full.len(), self.entries.len(), "{at}");
        for (f, m) in full.iter().zip(&self.entries) {
            for key in ["id", "parentId", "type", "timestamp"] {
                assert_eq!(f.get(key), m.get(key), "{at}: {key}");
            }
        }
        let tree = sc.call("session/getTreeFlat", json(&format!(r#"{{"handle":"{h}","detail":"none"}}"#)));
        let tree = without_label_timestamps(tree);
        assert_eq!(json_diff("", &tree, &flat_tree(&self.entries)), None, "{at}: the tree drawn from the mirror");
    }
}

/// pi's getTree as a flat pre-order list `{id, parentIndex, depth, label?}`, computed from entries as a host
/// holds them (full or skeleton): roots in file order, children by timestamp (stable), labels resolved in file
/// order. Timestamps here are all ISO strings of one format, so their order is their text's.
fn flat_tree(entries: &[Json]) -> Json {
    let id = |e: &Json| e.get("id").cloned().unwrap_or(Json::Null).to_canonical_string();
    let mut labels: HashMap<String, Json> = HashMap::new();
    for e in entries {
        if e.get("type") == Some(&Json::str("label")) {
            let target = e.get("targetId").unwrap().to_canonical_string();
            match e.get("label") {
                Some(l) if l.truthy() => labels.insert(target, l.clone()),
                _ => labels.remove(&target),
            };
        }
    }
    let by_id: HashMap<String, usize> = entries.iter().enumerate().map(|(i, e)| (id(e), i)).collect();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); entries.len()];
    let mut roots = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let parent = e.get("parentId").cloned().unwrap_or(Json::Null);
        match by_id.get(&parent.to_canonical_string()) {
            Some(&p) if parent != Json::Null && p != i => children[p].push(i),
            _ => roots.push(i),
        }
    }
    let stamp = |i: usize| entries[i].get("timestamp").map(Json::to_canonical_string).unwrap_or_default();
    for c in &mut children {
        c.sort_by_key(|&i| stamp(i));
    }
    let mut out = Vec::new();
    let mut stack: Vec<(usize, Option<usize>, usize)> = roots.iter().rev().map(|&r| (r, None, 0)).collect();
    while let Some((i, parent, depth)) = stack.pop() {
        let position = out.len();
        let mut node = Object::new();
        node.insert("id", entries[i].get("id").cloned().unwrap());
        node.insert("parentIndex", parent.map_or(Json::Null, |p| Json::number(p as f64)));
        node.insert("depth", Json::number(depth as f64));
        if let Some(l) = labels.get(&id(&entries[i])) {
            node.insert("label", l.clone());
        }
        out.push(Json::Object(node));
        stack.extend(children[i].iter().rev().map(|&c| (c, Some(position), depth + 1)));
    }
    Json::Array(out)
}

/// The server's flat tree without `labelTimestamp` (which [`flat_tree`] does not compute), for comparing.
fn without_label_timestamps(tree: Json) -> Json {
    let Json::Array(nodes) = &tree else { panic!("a flat tree is an array") };
    Json::Array(
        nodes
            .iter()
            .map(|n| {
                let Json::Object(o) = n else { panic!() };
                Json::Object(
                    o.iter()
                        .filter(|(k, _)| !k.eq_str("labelTimestamp"))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                )
            })
            .collect(),
    )
}

fn line(id: &str, parent: Option<&str>, ms: u32, text: &str) -> String {
    let parent = parent.map_or("null".to_owned(), |p| format!("\"{p}\""));
    format!(
        r#"{{"type":"message","id":"{id}","parentId":{parent},"timestamp":"2030-01-01T00:00:{:02}.{:03}Z","message":{{"role":"user","content":"{text}","timestamp":1}}}}"#,
        ms / 1000,
        ms % 1000
    )
}

fn append_to(path: &str, text: &str) {
    std::fs::OpenOptions::new().append(true).open(path).unwrap().write_all(text.as_bytes()).unwrap();
}

const HEADER: &str =
    r#"{"type":"session","version":3,"id":"mirrored","timestamp":"2030-01-01T00:00:00.000Z","cwd":"/p"}"#;

/// Calls a method on the mirror's handle with more params, returning its result.
fn on(sc: &mut Sidecar, h: &str, method: &str, rest: &str) -> Json {
    let sep = if rest.is_empty() { "" } else { "," };
    sc.call(method, json(&format!(r#"{{"handle":"{h}"{sep}{rest}}}"#)))
}

fn id_of(v: &Json) -> String {
    str_of(v.get("id").unwrap())
}

/// The differential scenario, at one detail.
fn mirror_stays_equal_to_the_server(detail: &'static str, declines_skeletons: bool) {
    let dir = temp_dir();
    let path = s(&dir.path().join("live.jsonl"));
    std::fs::write(&path, format!("{HEADER}\n{}\n", line("e0", None, 0, "start"))).unwrap();
    let mut sc = Sidecar::new();
    if declines_skeletons {
        sc.call("initialize", json(r#"{"capabilities":{"skeletons":false}}"#));
    }
    let opened = sc
        .call("session/open", json(&format!(r#"{{"path":"{path}","handle":"m","watch":true,"snapshot":"{detail}"}}"#)));
    let mut mirror = Mirror::from_open(&opened, detail);
    mirror.check(&mut sc, "open");

    // Own writes of every kind.
    let a = id_of(&on(
        &mut sc,
        "m",
        "session/appendMessage",
        r#""message":{"role":"user","content":"hello\nthere","timestamp":2}"#,
    ));
    let b = id_of(&on(
        &mut sc,
        "m",
        "session/appendMessage",
        r#""message":{"role":"assistant","content":[{"type":"text","text":"let me look"},{"type":"toolCall","id":"t1","name":"bash","arguments":{"command":"ls"}}],"stopReason":"toolUse","timestamp":3}"#,
    ));
    on(
        &mut sc,
        "m",
        "session/appendMessage",
        r#""message":{"role":"toolResult","toolCallId":"t1","toolName":"bash","content":[{"type":"text","text":"a\nb"}],"isError":false,"timestamp":4}"#,
    );
    on(&mut sc, "m", "session/appendLabelChange", &format!(r#""targetId":"{a}","label":"question""#));
    on(&mut sc, "m", "session/appendSessionInfo", r#""name":"  mirrored   session ""#);
    on(&mut sc, "m", "session/appendCustomEntry", r#""customType":"ext","data":{"k":[1,2]}"#);
    on(&mut sc, "m", "session/appendThinkingLevelChange", r#""thinkingLevel":"high""#);
    on(&mut sc, "m", "session/appendModelChange", r#""provider":"faux","modelId":"m1""#);
    on(&mut sc, "m", "session/appendUsage", r#""kind":"turn","provider":"faux","model":"m1","usage":{"input":1}"#);
    mirror.check(&mut sc, "own appends");

    // Branching: the leaf moves, and the next appends start a branch.
    on(&mut sc, "m", "session/branch", &format!(r#""entryId":"{b}""#));
    mirror.check(&mut sc, "branch");
    on(&mut sc, "m", "session/appendMessage", r#""message":{"role":"user","content":"instead","timestamp":5}"#);
    on(&mut sc, "m", "session/branchWithSummary", &format!(r#""entryId":"{a}","summary":"tried bash""#));
    on(&mut sc, "m", "session/appendLabelChange", &format!(r#""targetId":"{a}""#));
    on(&mut sc, "m", "session/resetLeaf", "");
    on(&mut sc, "m", "session/appendMessage", r#""message":{"role":"user","content":"a new root","timestamp":6}"#);
    mirror.check(&mut sc, "branchWithSummary, a cleared label, resetLeaf");

    // Another process appends (a line in two writes: held back until complete), then real pi does.
    let leaf = str_of(&mirror.leaf);
    let x1 = line("x1", Some(&leaf), 50_000, "from outside");
    let (first_half, second_half) = x1.split_at(40);
    append_to(&path, first_half);
    std::thread::sleep(Duration::from_millis(50));
    append_to(&path, &format!("{second_half}\n{}\n", line("x2", Some("x1"), 50_001, "and more")));
    mirror.wait_until(&mut sc, |m| m.has("x2"));
    mirror.check(&mut sc, "external appends");
    let written = pi_writes(&path, 6, "pi writes");
    mirror.wait_until(&mut sc, |m| written.iter().all(|w| m.has(&str_of(w))));
    mirror.check(&mut sc, "real pi's appends");
    same_as_pi(&mirror, &path, "real pi's appends");

    // A forced gap among own writes: the changes are given again.
    mirror.lose_next = true;
    on(&mut sc, "m", "session/appendMessage", r#""message":{"role":"user","content":"lost","timestamp":7}"#);
    on(&mut sc, "m", "session/appendMessage", r#""message":{"role":"user","content":"found","timestamp":8}"#);
    mirror.check(&mut sc, "a lost notification");
    assert_eq!(mirror.resyncs, ["changes"], "{detail}: the missed change was still kept");
    // A change too large to keep (a 5 MB label: skeletons copy labels too) lost: the gap is repaired by a snapshot.
    mirror.lose_next = true;
    let big = "L".repeat(5 << 20);
    on(&mut sc, "m", "session/appendLabelChange", &format!(r#""targetId":"{a}","label":"{big}""#));
    on(&mut sc, "m", "session/appendLabelChange", &format!(r#""targetId":"{a}","label":"small again""#));
    mirror.check(&mut sc, "a lost change too large to keep");
    assert_eq!(mirror.resyncs, ["changes", "snapshot"], "{detail}");

    // Truncated (read again), replaced by a rename, deleted, then written back.
    // Cut in one step (set_len): a rewrite in two (empty, then written) may be seen half done, as "no session".
    let text = std::fs::read_to_string(&path).unwrap();
    let kept: usize = text.split_inclusive('\n').take(4).map(str::len).sum();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(kept as u64).unwrap();
    mirror.wait_for(&mut sc, 1);
    mirror.check(&mut sc, "truncation");
    let other = s(&dir.path().join("other.jsonl.tmp"));
    std::fs::write(
        &other,
        format!("{HEADER}\n{}\n{}\n", line("r1", None, 1, "replaced"), line("r2", Some("r1"), 2, "twice")),
    )
    .unwrap();
    std::fs::rename(&other, &path).unwrap();
    mirror.wait_for(&mut sc, 1);
    mirror.check(&mut sc, "replacement");
    std::fs::remove_file(&path).unwrap();
    mirror.wait_for(&mut sc, 1);
    mirror.check(&mut sc, "deletion");
    on(&mut sc, "m", "session/appendMessage", r#""message":{"role":"user","content":"back","timestamp":9}"#);
    mirror.check(&mut sc, "writing a deleted file back");
    same_as_pi(&mirror, &path, "writing a deleted file back");

    // Rebinds: another file, a new session, a branched session.
    let second = s(&dir.path().join("second.jsonl"));
    std::fs::write(
        &second,
        format!("{HEADER}\n{}\n{}\n", line("s1", None, 1, "second"), line("s2", Some("s1"), 2, "file")),
    )
    .unwrap();
    on(&mut sc, "m", "session/setSessionFile", &format!(r#""path":"{second}""#));
    mirror.check(&mut sc, "setSessionFile");
    let branched = on(&mut sc, "m", "session/createBranchedSession", r#""leafId":"s1""#);
    mirror.check(&mut sc, "createBranchedSession");
    on(
        &mut sc,
        "m",
        "session/appendMessage",
        r#""message":{"role":"assistant","content":[{"type":"text","text":"on the branch"}],"timestamp":10}"#,
    );
    mirror.check(&mut sc, "appending to the branched session");
    same_as_pi(&mirror, &str_of(branched.get("path").unwrap()), "the branched session");
    on(&mut sc, "m", "session/newSession", "");
    mirror.check(&mut sc, "newSession");
    on(&mut sc, "m", "session/appendMessage", r#""message":{"role":"user","content":"fresh","timestamp":11}"#);
    mirror.check(&mut sc, "appending to the new session");
}

/// Real pi appends `count` messages to the session at `path` (10 ms apart), as a live pi does; returns their ids.
fn pi_writes(path: &str, count: usize, text: &str) -> Vec<Json> {
    let mut req = Object::new();
    req.insert("command", Json::str("write"));
    req.insert("file", Json::str(path));
    req.insert("count", Json::number(count as f64));
    req.insert("delayMs", Json::number(10.0));
    req.insert("text", Json::str(text));
    let Ok(written) = finish_oracle(spawn_oracle(&Json::Object(req))).into_array() else { panic!() };
    written
}

/// The mirror's entries and tree are pi's own reads of the file.
fn same_as_pi(mirror: &Mirror, path: &str, step: &str) {
    let mut req = Object::new();
    req.insert("command", Json::str("reads"));
    req.insert("files", Json::Array(vec![Json::str(path)]));
    let Ok(answers) = oracle(&Json::Object(req)).into_array() else { panic!() };
    let pi = answers[0].get("ok").unwrap_or_else(|| panic!("pi reads the file: {}", answers[0].to_canonical_string()));
    let Some(Json::Array(pi_entries)) = pi.get("entries") else { panic!() };
    let at = format!("{} detail, after {step}", mirror.detail);
    if mirror.detail == "full" {
        assert_eq!(json_diff("", &Json::Array(pi_entries.clone()), &Json::Array(mirror.entries.clone())), None, "{at}");
    } else {
        let ids = |v: &[Json]| v.iter().map(|e| e.get("id").cloned()).collect::<Vec<_>>();
        assert_eq!(ids(pi_entries), ids(&mirror.entries), "{at}");
    }
    // pi's nested tree, flattened, is the tree drawn from the mirror (pi's leaf is the file's last entry, so only
    // the tree is compared).
    let mut flat = Vec::new();
    let mut stack: Vec<(Json, Option<usize>, usize)> = match pi.get("tree") {
        Some(Json::Array(roots)) => roots.iter().rev().map(|r| (r.clone(), None, 0)).collect(),
        _ => panic!(),
    };
    while let Some((node, parent, depth)) = stack.pop() {
        let position = flat.len();
        let mut o = Object::new();
        o.insert("id", node.get("entry").unwrap().get("id").cloned().unwrap());
        o.insert("parentIndex", parent.map_or(Json::Null, |p| Json::number(p as f64)));
        o.insert("depth", Json::number(depth as f64));
        if let Some(l) = node.get("label") {
            o.insert("label", l.clone());
        }
        flat.push(Json::Object(o));
        if let Some(Json::Array(children)) = node.get("children") {
            stack.extend(children.iter().rev().map(|c| (c.clone(), Some(position), depth + 1)));
        }
    }
    assert_eq!(json_diff("", &Json::Array(flat), &flat_tree(&mirror.entries)), None, "{at}: pi's tree");
}

#[test]
fn a_full_mirror_from_the_snapshot_and_deltas_alone_stays_equal_to_the_server_and_to_pi() {
    mirror_stays_equal_to_the_server("full", false);
}

#[test]
fn a_skeleton_mirror_from_the_snapshot_and_deltas_alone_stays_equal_to_the_server_and_to_pi() {
    mirror_stays_equal_to_the_server("skeleton", false);
}

#[test]
fn a_skeleton_mirror_of_a_host_that_declined_skeletons_at_initialize_stays_equal_to_the_server_and_to_pi() {
    // Its opens make none, so every skeleton it is sent is made again from the entry's line.
    mirror_stays_equal_to_the_server("skeleton", true);
}

/// Every read a host can make of `path` on `sc`: the opening snapshot at skeleton detail, lazy pages, skeletons by
/// id and the flat tree at skeleton detail (handles left out: each sidecar names its own).
fn every_read(sc: &mut Sidecar, path: &str, ids: &[String]) -> Json {
    let mut opened = sc.call("session/open", json(&format!(r#"{{"path":"{path}","snapshot":"skeleton"}}"#)));
    let handle = str_of(opened.get("handle").unwrap());
    if let Json::Object(o) = &mut opened {
        o.remove("handle");
    }
    let ids = Json::Array(ids.iter().map(|i| Json::str(i)).collect()).to_canonical_string();
    let mut reads = vec![opened];
    for (method, rest) in [
        ("session/getEntries", r#""offset":0,"limit":100000,"lazyOver":1024"#.to_owned()),
        ("session/getEntries", format!(r#""ids":{ids},"detail":"skeleton""#)),
        ("session/getTreeFlat", r#""detail":"skeleton""#.to_owned()),
    ] {
        reads.push(sc.call(method, json(&format!(r#"{{"handle":"{handle}",{rest}}}"#))));
    }
    sc.call("session/close", json(&format!(r#"{{"handle":"{handle}"}}"#)));
    Json::Array(reads)
}

/// The one kept file under `agent`'s index directory, by inode (each keeping writes a new file and renames it),
/// or None.
fn kept_file(agent: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let files: Vec<_> = std::fs::read_dir(format!("{agent}/pi-sessiond/skeletons"))
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    assert!(files.len() <= 1, "{files:?}");
    files.first().map(|f| std::fs::metadata(f).unwrap().ino())
}

#[test]
fn a_host_that_declines_skeletons_reads_every_detail_as_one_that_does_and_what_it_keeps_serves_both() {
    let dir = temp_dir();
    let path = s(&dir.path().join("big.jsonl"));
    // Large enough to be kept, with strings long enough to be left in the file by lazy pages.
    let mut lines = vec![HEADER.to_owned()];
    let mut ids = Vec::new();
    let mut parent: Option<String> = None;
    for i in 0..400u32 {
        let id = format!("e{i}");
        let text = if i % 7 == 0 { "long text ".repeat(400) } else { format!("entry {i}") };
        lines.push(line(&id, parent.as_deref(), i, &text));
        ids.push(id.clone());
        parent = Some(id);
    }
    ids.push("missing".to_owned());
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    assert!(std::fs::metadata(&path).unwrap().len() > 256 << 10, "large enough to be kept");
    let sidecar = |agent: &str, declines: bool| {
        let mut sc = Sidecar::spawn(crate::support::sidecar::Wire::Jsonl, &["--agent-dir", agent], &[]);
        let capabilities = if declines { r#"{"skeletons":false}"# } else { "{}" };
        sc.call("initialize", json(&format!(r#"{{"capabilities":{capabilities}}}"#)));
        sc
    };
    // What a host that reads skeletons gets with nothing kept.
    let fresh = |ids: &[String]| every_read(&mut sidecar(&s(temp_dir().path()), false), &path, ids);
    let check = |got: Json, expected: &Json, what: &str| {
        assert!(got == *expected, "{what}: {:?}", json_diff("reads", &got, expected))
    };
    let agent_dir = temp_dir();
    let agent = s(agent_dir.path());

    let expected = fresh(&ids);
    check(every_read(&mut sidecar(&agent, true), &path, &ids), &expected, "declined, nothing kept");
    let without = kept_file(&agent).expect("the open keeps what it read, without skeletons");
    // A host that reads skeletons does not take records without them: it reads the file and keeps its own.
    check(every_read(&mut sidecar(&agent, false), &path, &ids), &expected, "not declined, after");
    let with = kept_file(&agent).expect("kept again");
    assert_ne!(with, without, "kept again, with skeletons");
    // After another process's append, a host that declined them reads on top of those, and keeps them whole: the
    // next host that reads skeletons takes the kept file as it is.
    append_to(&path, &format!("{}\n", line("after", Some("e399"), 500, "appended by pi")));
    ids.push("after".to_owned());
    let expected = fresh(&ids);
    check(every_read(&mut sidecar(&agent, true), &path, &ids), &expected, "declined, after an append");
    let grown = kept_file(&agent).expect("kept again");
    assert_ne!(grown, with, "kept again, the append with it");
    check(every_read(&mut sidecar(&agent, false), &path, &ids), &expected, "not declined, after the append");
    assert_eq!(kept_file(&agent), Some(grown), "taken as kept, not read again");
}

fn changes_of(sc: &mut Sidecar, h: &str) -> Vec<Json> {
    sc.take_notifications("session/changed")
        .into_iter()
        .map(|n| n.get("params").unwrap().clone())
        .filter(|p| p.get("handle") == Some(&Json::str(h)))
        .collect()
}

#[test]
fn a_watch_on_a_path_with_no_file_yet_reports_pis_first_write_and_every_append_after_it() {
    // pi reports a new session's path before it writes the file (at its first user or assistant message); a tree opened on
    // that path early stayed empty forever.
    let dir = temp_dir();
    let path = s(&dir.path().join("not-yet.jsonl"));
    let mut sc = Sidecar::new();
    let opened = sc
        .call("session/open", json(&format!(r#"{{"path":"{path}","handle":"n","watch":true,"snapshot":"skeleton"}}"#)));
    let mut mirror = Mirror::from_open(&opened, "skeleton");
    assert!(mirror.entries.is_empty());
    assert!(!std::path::Path::new(&path).exists(), "opening wrote nothing");
    let written = pi_writes(&path, 8, "pi's new session");
    assert_eq!(written.len(), 8);
    mirror.wait_until(&mut sc, |m| written.iter().all(|w| m.has(&str_of(w))));
    mirror.check(&mut sc, "pi's first write and its appends");
    same_as_pi(&mirror, &path, "pi's first write and its appends");
    // The file's own session, not the one the open started in memory.
    let state = on(&mut sc, "n", "session/getState", "");
    let header = std::fs::read_to_string(&path).unwrap();
    let header = json(header.lines().next().unwrap());
    assert_eq!(state.get("sessionId"), header.get("id"));
}

#[test]
fn get_entries_by_id_answers_in_the_order_asked_with_null_for_unknown_ids() {
    let dir = temp_dir();
    let path = s(&dir.path().join("ids.jsonl"));
    std::fs::write(
        &path,
        format!(
            "{HEADER}\n{}\n{}\n{}\n",
            line("a", None, 1, "one"),
            line("b", Some("a"), 2, "two"),
            line("c", Some("b"), 3, "three")
        ),
    )
    .unwrap();
    let mut sc = Sidecar::new();
    sc.call("session/open", json(&format!(r#"{{"path":"{path}","handle":"g"}}"#)));
    let got = on(&mut sc, "g", "session/getEntries", r#""ids":["c","nope","a","c"]"#);
    let lines: Vec<Json> = std::fs::read_to_string(&path).unwrap().lines().skip(1).map(json).collect();
    let expected = Json::Array(vec![lines[2].clone(), Json::Null, lines[0].clone(), lines[2].clone()]);
    assert_eq!(json_diff("", &expected, &got), None);
    let skeletons = on(&mut sc, "g", "session/getEntries", r#""ids":["b","zz"],"detail":"skeleton""#);
    let Ok(skeletons) = skeletons.into_array() else { panic!() };
    assert_eq!(skeletons[0].get("id"), Some(&Json::str("b")));
    assert_eq!(skeletons[0].get("parentId"), Some(&Json::str("a")));
    assert!(skeletons[0].get("message").is_none(), "a skeleton has no body");
    assert_eq!(skeletons[1], Json::Null);
    // Bad combinations are refused, naming the member.
    let e = sc.call_err("session/getEntries", json(r#"{"handle":"g","ids":["a"],"limit":1}"#));
    assert_eq!(e.get("data").unwrap().get("path"), Some(&Json::str("ids")));
    // Without ids, the default is pi's getEntries, unchanged.
    assert_eq!(json_diff("", &Json::Array(lines), &on(&mut sc, "g", "session/getEntries", "")), None);
}

#[test]
fn get_tree_flat_pages_at_detail_none_join_into_the_whole_tree_with_positions_in_the_whole_list() {
    let dir = temp_dir();
    let path = s(&dir.path().join("flat.jsonl"));
    let mut text = format!("{HEADER}\n");
    // Two roots, a fork under the first, and a label.
    for (id, parent, ms) in [("r1", None, 1), ("k1", Some("r1"), 2), ("k2", Some("r1"), 3), ("g1", Some("k2"), 4)] {
        text.push_str(&line(id, parent, ms, id));
        text.push('\n');
    }
    text.push_str(&line("r2", None, 5, "second root"));
    text.push('\n');
    text.push_str(r#"{"type":"label","id":"l1","parentId":"r2","timestamp":"2030-01-01T00:00:06.000Z","targetId":"k1","label":"kept"}"#);
    text.push('\n');
    std::fs::write(&path, text).unwrap();
    let mut sc = Sidecar::new();
    sc.call("session/open", json(&format!(r#"{{"path":"{path}","handle":"t"}}"#)));
    let whole = on(&mut sc, "t", "session/getTreeFlat", "");
    let Ok(whole) = whole.into_array() else { panic!() };
    assert_eq!(whole.len(), 6);
    let bare = on(&mut sc, "t", "session/getTreeFlat", r#""detail":"none""#);
    let mut pages = Vec::new();
    for offset in (0..8).step_by(2) {
        let page = on(&mut sc, "t", "session/getTreeFlat", &format!(r#""detail":"none","offset":{offset},"limit":2"#));
        let Ok(page) = page.into_array() else { panic!() };
        assert!(page.len() <= 2);
        pages.extend(page);
    }
    assert_eq!(json_diff("", &bare, &Json::Array(pages)), None, "pages join into the whole list");
    // Each bare node is the full node without its entry, with the entry's id instead.
    let Ok(bare) = bare.into_array() else { panic!() };
    for (full, bare) in whole.iter().zip(&bare) {
        assert_eq!(bare.get("id"), full.get("entry").unwrap().get("id"));
        assert!(bare.get("entry").is_none());
        for key in ["parentIndex", "depth", "label", "labelTimestamp"] {
            assert_eq!(bare.get(key), full.get(key), "{key}");
        }
    }
    let skeleton = on(&mut sc, "t", "session/getTreeFlat", r#""detail":"skeleton","offset":3,"limit":1"#);
    let node = &skeleton.into_array().unwrap()[0];
    assert_eq!(node.get("entry").unwrap().get("id"), whole[3].get("entry").unwrap().get("id"));
    assert_eq!(node.get("parentIndex"), whole[3].get("parentIndex"), "a page keeps positions in the whole list");
}

const USER: &str = r#"{"role":"user","content":"batched","timestamp":1}"#;

#[test]
fn append_batch_writes_every_op_as_one_change_and_answers_each_as_its_method_would() {
    let dir = temp_dir();
    let path = s(&dir.path().join("batch.jsonl"));
    std::fs::write(&path, format!("{HEADER}\n{}\n", line("e0", None, 0, "start"))).unwrap();
    let mut sc = Sidecar::new();
    sc.call("session/open", json(&format!(r#"{{"path":"{path}","handle":"b","snapshot":"full"}}"#)));
    let ops = format!(
        r#""ops":[
            {{"method":"session/appendMessage","params":{{"message":{USER}}}}},
            {{"method":"session/appendLabelChange","params":{{"targetId":"e0","label":"first"}}}},
            {{"method":"session/appendUsage","params":{{"kind":"turn","provider":"p","model":"m","usage":{{"input":3}}}}}},
            {{"method":"session/branch","params":{{"entryId":"e0"}}}},
            {{"method":"session/appendMessage","params":{{"message":{{"role":"assistant","content":[],"timestamp":2}}}}}},
            {{"method":"session/branchWithSummary","params":{{"entryId":"e0","summary":"left it"}}}},
            {{"method":"session/appendModelChange","params":{{"provider":"p","modelId":"m2"}}}}
        ]"#
    );
    let result = on(&mut sc, "b", "session/appendBatch", &ops);
    let Some(Json::Array(results)) = result.get("results") else { panic!("{}", result.to_canonical_string()) };
    assert_eq!(results.len(), 7);
    let lines: Vec<Json> = std::fs::read_to_string(&path).unwrap().lines().skip(2).map(json).collect();
    assert_eq!(lines.len(), 6, "every append reached the file (branch appends nothing)");
    // Results in order, each as its method answers alone.
    let appended = [0, 1, 2, 4, 5, 6];
    for (line, &op) in lines.iter().zip(&appended) {
        match op {
            2 => assert_eq!(json_diff("", line, results[2].get("entry").unwrap()), None, "appendUsage: {{entry}}"),
            _ => assert_eq!(results[op].get("id"), line.get("id"), "op {op}: {{id}}"),
        }
    }
    assert_eq!(results[3], Json::Null, "branch answers null");
    // The ops see each other: the branch moved the leaf under the next message.
    assert_eq!(lines[3].get("parentId"), Some(&Json::str("e0")));
    // One notification: every entry, as the file has them.
    let changes = changes_of(&mut sc, "b");
    assert_eq!(changes.len(), 1, "{changes:?}");
    let change = changes[0].get("change").unwrap();
    assert_eq!(change.get("kind"), Some(&Json::str("append")));
    assert_eq!(json_diff("", &Json::Array(lines.clone()), change.get("entries").unwrap()), None);
    assert_eq!(changes[0].get("leafId"), lines[5].get("id"));
    // What the batch wrote is what a fresh open reads.
    let reread = on(&mut sc, "b", "session/getEntries", r#""offset":1"#);
    assert_eq!(json_diff("", &Json::Array(lines), &reread), None);
}

#[test]
fn a_batch_with_a_bad_op_writes_nothing_notifies_nothing_and_names_the_op() {
    let dir = temp_dir();
    let path = s(&dir.path().join("refused.jsonl"));
    std::fs::write(&path, format!("{HEADER}\n{}\n", line("e0", None, 0, "start"))).unwrap();
    let before = std::fs::read(&path).unwrap();
    let mut sc = Sidecar::new();
    sc.call("session/open", json(&format!(r#"{{"path":"{path}","handle":"r"}}"#)));
    let good = format!(r#"{{"method":"session/appendMessage","params":{{"message":{USER}}}}}"#);
    let cases = [
        // The engine refuses op 2 (its target does not exist) after staging ops 0 and 1.
        (
            format!(
                r#"[{good},{good},{{"method":"session/appendLabelChange","params":{{"targetId":"nope","label":"x"}}}}]"#
            ),
            "entry_not_found",
            None,
        ),
        (
            format!(r#"[{good},{{"method":"session/appendMessage","params":{{}}}}]"#),
            "invalid_params",
            Some("ops[1].params.message"),
        ),
        (r#"[{"method":"session/getTree","params":{}}]"#.to_owned(), "invalid_params", Some("ops[0].method")),
        (
            format!(r#"[{{"method":"session/appendMessage","params":{{"handle":"r","message":{USER}}}}}]"#),
            "invalid_params",
            Some("ops[0].params.handle"),
        ),
        (
            format!(r#"[{{"method":"session/appendMessage","params":{{"expectedLeafId":"e0","message":{USER}}}}}]"#),
            "invalid_params",
            Some("ops[0].params.expectedLeafId"),
        ),
        ("[]".to_owned(), "invalid_params", Some("ops")),
    ];
    for (ops, kind, path_named) in cases {
        let e = sc.call_err("session/appendBatch", json(&format!(r#"{{"handle":"r","ops":{ops}}}"#)));
        let data = e.get("data").unwrap();
        assert_eq!(data.get("kind"), Some(&Json::str(kind)), "{}", e.to_canonical_string());
        if let Some(p) = path_named {
            assert_eq!(data.get("path"), Some(&Json::str(p)), "{}", e.to_canonical_string());
        }
        assert_eq!(std::fs::read(&path).unwrap(), before, "{ops}: nothing written");
        assert_eq!(on(&mut sc, "r", "session/getEntryCount", ""), Json::number(1.0), "{ops}: nothing in memory");
        assert_eq!(on(&mut sc, "r", "session/getLeafId", ""), Json::str("e0"));
    }
    // A stale expectedLeafId on the batch refuses all of it.
    let e = sc
        .call_err("session/appendBatch", json(&format!(r#"{{"handle":"r","expectedLeafId":"other","ops":[{good}]}}"#)));
    assert_eq!(e.get("data").unwrap().get("kind"), Some(&Json::str("content_modified")));
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert!(changes_of(&mut sc, "r").is_empty(), "a refused batch sends no session/changed");
}

#[test]
fn a_mirror_that_asks_for_changes_since_a_seq_after_the_last_is_refused() {
    let mut sc = Sidecar::new();
    sc.call("session/inMemory", json(r#"{"handle":"q","snapshot":"skeleton"}"#));
    on(&mut sc, "q", "session/appendMessage", &format!(r#""message":{USER}"#));
    let none = on(&mut sc, "q", "session/changesSince", r#""seq":1"#);
    assert_eq!(none.get("changes"), Some(&Json::Array(Vec::new())));
    let one = on(&mut sc, "q", "session/changesSince", r#""seq":0"#);
    let Some(Json::Array(one)) = one.get("changes") else { panic!() };
    assert_eq!(one.len(), 1);
    let e = sc.call_err("session/changesSince", json(r#"{"handle":"q","seq":5}"#));
    assert_eq!(e.get("data").unwrap().get("path"), Some(&Json::str("seq")));
}

#[test]
fn every_opening_method_and_rebind_returns_a_snapshot_at_the_detail_asked_and_keeps_it_for_later_changes() {
    let dir = temp_dir();
    let source = s(&dir.path().join("source.jsonl"));
    std::fs::write(&source, format!("{HEADER}\n{}\n{}\n", line("a", None, 1, "one"), line("b", Some("a"), 2, "two")))
        .unwrap();
    let mut sc = Sidecar::new();
    let d = s(dir.path());
    let opens = [
        ("session/create", format!(r#""cwd":"/p","sessionDir":"{d}""#), 0),
        // A directory per detail: the first round's append makes the recent session of the second.
        ("session/continueRecent", format!(r#""cwd":"/elsewhere","sessionDir":"{d}/recent-DETAIL""#), 0),
        ("session/inMemory", r#""cwd":"/p""#.to_owned(), 0),
        ("session/forkFrom", format!(r#""sourcePath":"{source}","targetCwd":"/q","sessionDir":"{d}/forks""#), 2),
        // Its count grows: each round appends to it. (usize::MAX: what the file holds then.)
        ("session/open", format!(r#""path":"{source}""#), usize::MAX),
    ];
    for (n, (method, rest, count)) in opens.iter().enumerate() {
        for detail in ["skeleton", "full"] {
            let h = format!("o{n}{detail}");
            let rest = rest.replace("DETAIL", detail);
            let st = sc.call(method, json(&format!(r#"{{"handle":"{h}","snapshot":"{detail}",{rest}}}"#)));
            assert_eq!(st.get("detail"), Some(&Json::str(detail)), "{method}");
            let entries = entries_of(st.get("snapshot").unwrap_or_else(|| panic!("{method}: a snapshot")));
            let lines: Vec<Json> = std::fs::read_to_string(&source).unwrap().lines().skip(1).map(json).collect();
            let count = if *count == usize::MAX { lines.len() } else { *count };
            assert_eq!(entries.len(), count, "{method}");
            if detail == "full" && *method == "session/open" {
                assert_eq!(json_diff("", &Json::Array(lines), &Json::Array(entries)), None, "{method}");
            }
            // The open's detail is the detail of its later changes.
            on(&mut sc, &h, "session/appendMessage", &format!(r#""message":{USER}"#));
            let change = changes_of(&mut sc, &h).pop().unwrap();
            let appended = &entries_of(change.get("change").unwrap())[0];
            assert_eq!(appended.get("message").is_some(), detail == "full", "{method} at {detail}");
            sc.call("session/close", json(&format!(r#"{{"handle":"{h}"}}"#)));
        }
    }
    // Rebinding methods take a snapshot of the session they move to, and may change the detail.
    sc.call("session/open", json(&format!(r#"{{"path":"{source}","handle":"r"}}"#)));
    let branched = on(&mut sc, "r", "session/createBranchedSession", r#""leafId":"a","snapshot":"skeleton""#);
    assert!(branched.get("path").is_some());
    let entries = entries_of(branched.get("snapshot").unwrap());
    assert_eq!(entries.iter().map(|e| e.get("id").cloned()).collect::<Vec<_>>(), [Some(Json::str("a"))]);
    assert!(entries[0].get("message").is_none(), "skeleton");
    let rebind = changes_of(&mut sc, "r").pop().unwrap();
    assert_eq!(rebind.get("change").unwrap().get("kind"), Some(&Json::str("rebind")));
    assert!(rebind.get("change").unwrap().get("snapshot").is_some(), "the rebind carries the new detail's snapshot");
    let fresh = on(&mut sc, "r", "session/newSession", r#""snapshot":"full""#);
    assert_eq!(fresh.get("detail"), Some(&Json::str("full")));
    assert_eq!(entries_of(fresh.get("snapshot").unwrap()).len(), 0);
    let state = on(&mut sc, "r", "session/getState", "");
    assert_eq!(state.get("detail"), Some(&Json::str("full")), "the rebind's detail stays");
    // A second open of a file open at one detail cannot ask for another.
    sc.call("session/open", json(&format!(r#"{{"path":"{source}","handle":"x","snapshot":"full"}}"#)));
    let e = sc.call_err("session/open", json(&format!(r#"{{"path":"{source}","snapshot":"skeleton"}}"#)));
    assert_eq!(e.get("data").unwrap().get("path"), Some(&Json::str("snapshot")), "{}", e.to_canonical_string());
}

#[test]
fn a_batched_op_may_name_the_entry_an_earlier_op_of_the_batch_appends() {
    let dir = temp_dir();
    let path = s(&dir.path().join("refs.jsonl"));
    std::fs::write(&path, format!("{HEADER}\n{}\n", line("e0", None, 0, "start"))).unwrap();
    let mut sc = Sidecar::new();
    sc.call("session/open", json(&format!(r#"{{"path":"{path}","handle":"f"}}"#)));
    let ops = format!(
        r#""ops":[
            {{"method":"session/appendMessage","params":{{"message":{USER}}}}},
            {{"method":"session/appendMessage","params":{{"message":{USER}}}}},
            {{"method":"session/appendLabelChange","params":{{"targetId":{{"op":0}},"label":"asked"}}}},
            {{"method":"session/branch","params":{{"entryId":{{"op":0}}}}}},
            {{"method":"session/appendMessage","params":{{"message":{USER}}}}}
        ]"#
    );
    let result = on(&mut sc, "f", "session/appendBatch", &ops);
    let Some(Json::Array(results)) = result.get("results") else { panic!() };
    let first = str_of(results[0].get("id").unwrap());
    assert_eq!(on(&mut sc, "f", "session/getLabel", &format!(r#""id":"{first}""#)), Json::str("asked"));
    let last = on(&mut sc, "f", "session/getEntry", &format!(r#""id":"{}""#, str_of(results[4].get("id").unwrap())));
    assert_eq!(last.get("parentId"), Some(&Json::str(&first)), "the branch went to op 0's entry");
    // A later op, an op that appended nothing, or a method without such a field: refused, nothing written.
    let before = std::fs::read(&path).unwrap();
    let bad = [
        format!(
            r#"[{{"method":"session/appendLabelChange","params":{{"targetId":{{"op":1}},"label":"x"}}}},{{"method":"session/appendMessage","params":{{"message":{USER}}}}}]"#
        ),
        r#"[{"method":"session/resetLeaf","params":{}},{"method":"session/branch","params":{"entryId":{"op":0}}}]"#
            .to_owned(),
        format!(r#"[{{"method":"session/appendMessage","params":{{"message":{USER},"entryId":{{"op":0}}}}}}]"#),
        r#"[{"method":"session/branch","params":{"entryId":{"op":"zero"}}}]"#.to_owned(),
    ];
    for ops in bad {
        let e = sc.call_err("session/appendBatch", json(&format!(r#"{{"handle":"f","ops":{ops}}}"#)));
        assert_eq!(
            e.get("data").unwrap().get("kind"),
            Some(&Json::str("invalid_params")),
            "{}",
            e.to_canonical_string()
        );
        assert_eq!(std::fs::read(&path).unwrap(), before, "{ops}");
    }
}

#[test]
fn an_append_right_after_the_file_was_read_again_arrives_in_the_reset_and_is_not_sent_twice() {
    // The append's follow of the file finds it rewritten (same length, same last entry, so the leaf stands and the
    // append goes ahead): the host hears one reset holding the append, not a reset and then the append again.
    let dir = temp_dir();
    let path = s(&dir.path().join("rewritten.jsonl"));
    let text = format!("{HEADER}\n{}\n{}\n", line("e0", None, 0, "start"), line("e1", Some("e0"), 1, "again"));
    std::fs::write(&path, &text).unwrap();
    let mut sc = Sidecar::new();
    let opened = sc.call("session/open", json(&format!(r#"{{"path":"{path}","handle":"w","snapshot":"full"}}"#)));
    let mut mirror = Mirror::from_open(&opened, "full");
    std::fs::write(&path, text.replace("start", "START")).unwrap();
    on(&mut sc, "w", "session/appendMessage", &format!(r#""message":{USER}"#));
    mirror.check(&mut sc, "an append right after a rewrite");
    assert_eq!(mirror.entries.len(), 3);
    assert_eq!(mirror.entries[0].get("message").unwrap().get("content"), Some(&Json::str("START")));
}

/// Bytes the process read so far (`rchar` of `/proc/PID/io`: through read calls, page cache or not).
fn read_bytes(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap();
    io.lines().find_map(|l| l.strip_prefix("rchar: ")).unwrap().trim().parse().unwrap()
}

/// Read calls the process made so far (`syscr` of `/proc/PID/io`: read, pread and their kin).
fn read_calls(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap();
    io.lines().find_map(|l| l.strip_prefix("syscr: ")).unwrap().trim().parse().unwrap()
}

#[test]
fn a_skeleton_or_full_snapshot_reads_the_file_in_large_pieces_not_once_per_line_issue_21() {
    let dir = temp_dir();
    let path = crate::support::big_session(dir.path(), 5000, 2000, "");
    for detail in ["skeleton", "full"] {
        let mut sc = Sidecar::new();
        sc.call("initialize", json("{}"));
        let before = read_calls(sc.pid());
        let st = sc.call("session/open", json(&format!(r#"{{"path":"{path}","snapshot":"{detail}"}}"#)));
        let reads = read_calls(sc.pid()) - before;
        assert_eq!(entries_of(st.get("snapshot").unwrap()).len(), 5000);
        // The open reads 10 MB in 4 MiB pieces, the snapshot the same again: a few dozen calls, where one per line
        // would be 5,000 more.
        assert!(reads < 200, "{detail}: {reads} read calls for a 5,000-line session");
    }
}

#[test]
fn a_skeleton_snapshot_reads_nothing_the_open_did_not_already_read_whatever_the_line_count_issue_21() {
    let dir = temp_dir();
    // Both past the size at which an open reads the file as two halves (and asks the system how many cores it
    // has), each half through a buffer of 128 KiB.
    for entries in [4_000, 10_000] {
        let sub = dir.path().join(entries.to_string());
        std::fs::create_dir(&sub).unwrap();
        let path = crate::support::big_session(&sub, entries, 250, "");
        let size = std::fs::metadata(&path).unwrap().len();
        let reads_of = |snapshot: &str| {
            let mut sc = Sidecar::new();
            sc.call("initialize", json("{}"));
            let before = (read_calls(sc.pid()), read_bytes(sc.pid()));
            let st = sc.call("session/open", json(&format!(r#"{{"path":"{path}"{snapshot}}}"#)));
            (read_calls(sc.pid()) - before.0, read_bytes(sc.pid()) - before.1, st)
        };
        let (plain, plain_bytes, _) = reads_of("");
        let (skeleton, skeleton_bytes, st) = reads_of(r#","snapshot":"skeleton""#);
        let snapshot = entries_of(st.get("snapshot").unwrap());
        assert_eq!(snapshot.len(), entries);
        assert_eq!(
            snapshot[entries - 1].get("preview").and_then(Json::as_js_str).map(|p| p.to_string_lossy().chars().count()),
            Some(161)
        );
        // The file's bytes are read once: what a skeleton open reads beyond a plain one is its request's few more
        // bytes of frame, not a second pass (not even in large windows), and its calls are a plain open's (a
        // frame now and then read from the pipe in two pieces aside).
        assert!(plain_bytes >= size, "{entries} lines: a plain open read {plain_bytes} bytes of a {size}-byte file");
        assert!(
            skeleton_bytes < plain_bytes + 4096,
            "{entries} lines: {skeleton_bytes} bytes read with a skeleton, {plain_bytes} without"
        );
        assert!(skeleton <= plain + 1, "{entries} lines: {skeleton} read calls with a skeleton, {plain} without");
        // Reads follow the file's size, never its lines: at most one per 64 KiB, and a few more for the frames.
        let bound = size / (64 << 10) + 16;
        assert!(skeleton <= bound, "{entries} lines, {size} bytes: {skeleton} read calls, more than {bound}");
    }
}
