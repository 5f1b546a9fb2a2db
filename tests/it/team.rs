//! The team catalog (issue 16) against a real PostgreSQL: agent directories standing for machines are pushed with
//! the real binary (`push`), and what the database answers is compared with pi's own answers on each directory
//! (through the oracle) and with the files themselves.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

use pi_sessiond::session::json::Json;
use pi_sessiond::session::SessionManager;
use pi_sessiond::team::catalog::TeamCatalog;
use pi_sessiond::team::Target;

use crate::corpus::Rng;
use crate::listing::{build, compare, tree};
use crate::support::postgres as pg_server;
use crate::support::sidecar::binary;
use crate::support::{json, oracle, s, str_of, temp_dir};

/// Runs the binary; returns stdout, panicking with stderr on failure.
fn run(args: &[&str]) -> String {
    let out = Command::new(binary()).args(args).stdin(Stdio::null()).output().expect("run pi-sessiond");
    assert!(
        out.status.success(),
        "pi-sessiond {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// A `search` of the binary: stdout, whether it found something (status 0) or nothing (status 1).
fn run_search(args: &[&str]) -> String {
    let out = Command::new(binary()).args(args).stdin(Stdio::null()).output().expect("run pi-sessiond");
    let found = out.status.code() == Some(0);
    let stdout = String::from_utf8(out.stdout).expect("UTF-8 output");
    assert!(
        found || (out.status.code() == Some(1) && stdout.trim() == "[]"),
        "pi-sessiond {args:?} failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// `push` of `agent` as `machine`; its report.
fn push(agent: &Path, url: &str, machine: &str) -> Json {
    let out = run(&["--agent-dir", &s(agent), "push", "--postgres", url, "--machine", machine]);
    json(out.trim())
}

fn number(v: &Json, k: &str) -> f64 {
    match v.get(k) {
        Some(Json::Number(n)) => n.parse().unwrap(),
        other => panic!("{k}: {other:?}"),
    }
}

/// pi's answer to one listing call.
fn pi_list(call: &str) -> Json {
    let request = json(&format!(r#"{{"command":"list","calls":[{call}]}}"#));
    let Ok(answers) = oracle(&request).into_array() else { panic!("oracle") };
    answers[0].get("ok").cloned().unwrap_or_else(|| panic!("pi failed: {}", answers[0].to_canonical_string()))
}

/// A catalog listing split by machine, each entry without its `machine` member (pi's `SessionInfo` again).
fn by_machine(listing: &Json) -> BTreeMap<String, Json> {
    let Json::Array(items) = listing else { panic!("not a listing: {}", listing.to_canonical_string()) };
    let mut out: BTreeMap<String, Vec<Json>> = BTreeMap::new();
    for item in items {
        let machine = str_of(item.get("machine").expect("every entry says its machine"));
        let Ok(mut o) = item.clone().into_object() else { panic!() };
        o.remove("machine");
        out.entry(machine).or_default().push(Json::Object(o));
    }
    out.into_iter().map(|(k, v)| (k, Json::Array(v))).collect()
}

#[test]
#[ignore = "needs PostgreSQL"]
fn two_machines_pushed_into_one_database_each_list_as_pi_lists_that_machine() {
    let pg = pg_server::server();
    let url = pg.database();
    let tmp = temp_dir();
    let roots = [tmp.path().join("laptop"), tmp.path().join("ci")];
    for (i, root) in roots.iter().enumerate() {
        let (files, links) = tree(&mut Rng::new(21 + i as u32));
        build(root, &files, &links);
    }
    let a = push(&roots[0].join("agent"), &url, "laptop");
    let b = push(&roots[1].join("agent"), &url, "ci-runner");
    assert!(number(&a, "entries") > 0.0 && number(&b, "entries") > 0.0, "{a:?} {b:?}");

    let all = by_machine(&json(&run(&["--catalog", &url, "ls", "--json", "--all"])));
    assert_eq!(all.keys().collect::<Vec<_>>(), ["ci-runner", "laptop"]);
    let mut problems = Vec::new();
    for (machine, root) in [("laptop", &roots[0]), ("ci-runner", &roots[1])] {
        let agent = s(&root.join("agent"));
        let pi = pi_list(&format!(r#"{{"kind":"listAll","agentDir":"{agent}"}}"#));
        compare(&format!("{machine} listAll"), &pi, &all[machine], &mut problems);
        // A project's listing: pi's list(cwd) on that machine.
        let ours = by_machine(&json(&run(&["--catalog", &url, "ls", "--json", "--cwd", "/proj/a"])));
        let pi = pi_list(&format!(r#"{{"kind":"list","cwd":"/proj/a","agentDir":"{agent}"}}"#));
        let mine = ours.get(machine).cloned().unwrap_or(Json::Array(Vec::new()));
        compare(&format!("{machine} list /proj/a"), &pi, &mine, &mut problems);
    }
    assert!(problems.is_empty(), "{} differences from pi:\n{}", problems.len(), problems.join("\n"));
}

/// A session file with a header and one user message per text.
fn session(dir: &Path, id: &str, texts: &[&str]) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(format!("2026-01-01T00-00-00-000Z_{id}.jsonl"));
    let mut bytes =
        format!(r#"{{"type":"session","version":3,"id":"{id}","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/proj"}}"#);
    bytes.push('\n');
    let mut parent = "null".to_owned();
    for (i, t) in texts.iter().enumerate() {
        let eid = format!("{id:.4}{i:04}");
        bytes.push_str(&message_line(&eid, &parent, t, i));
        parent = format!("\"{eid}\"");
    }
    std::fs::write(&path, bytes).unwrap();
    path
}

fn message_line(eid: &str, parent: &str, text: &str, i: usize) -> String {
    format!(
        r#"{{"type":"message","id":"{eid}","parentId":{parent},"timestamp":"2026-01-01T00:00:0{}.000Z","message":{{"role":"user","content":"{text}","timestamp":{}}}}}"#,
        i % 10,
        1_767_225_600_000u64 + i as u64
    ) + "\n"
}

/// Appends `line` to the session file at `path`, as pi appends an entry.
fn append_line(path: &Path, line: &str) {
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    std::io::Write::write_all(&mut f, line.as_bytes()).unwrap();
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_search_finds_a_phrase_from_either_machine_and_says_which() {
    let pg = pg_server::server();
    let url = pg.database();
    let tmp = temp_dir();
    let (a, b) = (tmp.path().join("a/agent"), tmp.path().join("b/agent"));
    session(&a.join("sessions/--proj--"), "aaaa1111", &["we fixed the checkout bug today", "unrelated"]);
    session(&b.join("sessions/--proj--"), "bbbb2222", &["the Checkout   Bug came back on ci", "more"]);
    session(&b.join("sessions/--proj--"), "cccc3333", &["nothing to see"]);
    push(&a, &url, "laptop");
    push(&b, &url, "ci");
    let hits = json(&run_search(&["--catalog", &url, "search", "--json", "\"checkout bug\""]));
    let Ok(hits) = hits.into_array() else { panic!() };
    let mut found: Vec<(String, String)> =
        hits.iter().map(|h| (str_of(h.get("machine").unwrap()), str_of(h.get("sessionId").unwrap()))).collect();
    found.sort();
    assert_eq!(found, [("ci".to_owned(), "bbbb2222".to_owned()), ("laptop".to_owned(), "aaaa1111".to_owned())]);
    // Every hit is an entry hit with the entry's id and a snippet around the phrase.
    for h in &hits {
        assert_eq!(str_of(h.get("role").unwrap()), "user");
        assert!(str_of(h.get("snippet").unwrap()).to_lowercase().contains("checkout"));
        assert!(matches!(h.get("entryId"), Some(Json::String(_))));
    }
    let none = json(&run_search(&["--catalog", &url, "search", "--json", "\"checkout bugs galore\""]));
    assert_eq!(none, Json::Array(Vec::new()));
    // For a person, ls is the command line's table, one per machine under its name.
    let table = run(&["--catalog", &url, "ls", "--all"]);
    let lines: Vec<&str> = table.lines().collect();
    let at = |heading: &str| lines.iter().position(|l| *l == heading).unwrap_or_else(|| panic!("{heading}\n{table}"));
    let (ci, laptop) = (at("ci:"), at("laptop:"));
    assert!(ci < laptop, "machines by name:\n{table}");
    let ci_rows = &lines[ci..laptop];
    assert!(
        ci_rows.iter().any(|l| l.contains("the Checkout Bug came back on ci") && l.contains("bbbb2222")),
        "{table}"
    );
    assert!(ci_rows.iter().any(|l| l.contains("cccc3333")), "{table}");
    assert!(lines[laptop..].iter().any(|l| l.contains("we fixed the checkout bug today") && l.contains("aaaa1111")));
}

/// A fresh database, and a temporary directory with the path of an agent directory in it (not yet made).
fn fresh(pg: &pg_server::Server) -> (String, tempfile::TempDir, std::path::PathBuf) {
    let tmp = temp_dir();
    let agent = tmp.path().join("agent");
    (pg.database(), tmp, agent)
}

/// A fresh database holding the test tree made from `seed`, pushed as `machine`; the tree's root and its agent
/// directory.
fn pushed_tree(pg: &pg_server::Server, seed: u32, machine: &str) -> (String, tempfile::TempDir, std::path::PathBuf) {
    let url = pg.database();
    let tmp = temp_dir();
    let (files, links) = tree(&mut Rng::new(seed));
    build(tmp.path(), &files, &links);
    let agent = tmp.path().join("agent");
    push(&agent, &url, machine);
    (url, tmp, agent)
}

/// `search --json --limit 50 QUERY` of the binary over the agent directory `agent` (no index) and over the
/// database at `url`, whose only machine is `only`: the local hits, and the team's without their `machine`.
fn local_and_team_search(agent: &Path, url: &str, query: &str) -> (Json, Vec<Json>) {
    let agent = s(agent);
    let local = json(&run_search(&["--no-index", "--agent-dir", &agent, "search", "--json", "--limit", "50", query]));
    let team = json(&run_search(&["--catalog", url, "search", "--json", "--limit", "50", query]));
    let Ok(team) = team.into_array() else { panic!() };
    let stripped = team
        .into_iter()
        .map(|h| {
            let Ok(mut o) = h.into_object() else { panic!() };
            assert_eq!(o.remove("machine").map(|m| str_of(&m)).as_deref(), Some("only"));
            Json::Object(o)
        })
        .collect();
    (local, stripped)
}

#[test]
#[ignore = "needs PostgreSQL"]
fn the_catalogs_search_of_one_machine_gives_the_local_search_of_its_directory() {
    let pg = pg_server::server();
    let (url, _tmp, agent) = pushed_tree(pg, 33, "only");
    for query in ["hello", "\"hello world\"", "re:h.l+o", "a b", "zzzz-not-there", "proj"] {
        let (local, stripped) = local_and_team_search(&agent, &url, query);
        assert_eq!(Json::Array(stripped), local, "query {query}");
    }
    // Every path of the search (the newest-first walk stopping early, running out, the trigram index after it)
    // gives the local answer: small windows make them all run on this small database.
    // And the same for a viewer role granted the machine, whose candidates past the walk come from the owner's
    // function under row-level security.
    create_roles(&url, &["rls_searcher"]);
    team_access("grant", &url, "rls_searcher", &["--machine", "only"]);
    let owner = Target::from_env(&url).unwrap();
    let viewer = Target::from_env(&as_role(&url, "rls_searcher")).unwrap();
    for (target, window) in [1, 7, 2000].into_iter().flat_map(|w| [(&owner, w), (&viewer, w)]) {
        let mut catalog = TeamCatalog::open(target).unwrap().with_search_window(window);
        for limit in [1, 3, 50] {
            for query in [
                "hello",
                "\"hello world\"",
                "re:h.l+o",
                "re:^HEL{1,2}o\\b|w[aeiou]rld?",
                "re:(x|)z*\\d{2}",
                "a b",
                "e",
                "proj hello",
                "hello proj zzzz-nowhere",
            ] {
                let mut index = None;
                let local = pi_sessiond::catalog::search::search_sessions(
                    query,
                    Default::default(),
                    None,
                    limit,
                    pi_sessiond::catalog::listing::Catalog::new(&s(&agent), index.as_mut()),
                    &mut |_, _, _| {},
                )
                .unwrap()
                .hits;
                let team: Vec<_> = catalog
                    .search(query, Default::default(), None, limit)
                    .unwrap()
                    .into_iter()
                    .map(|h| h.hit)
                    .collect();
                assert_eq!(team, local, "window {window}, limit {limit}, query {query}");
            }
        }
    }
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_team_search_finds_words_with_a_greek_final_sigma_as_the_local_search_does() {
    let pg = pg_server::server();
    let (url, _tmp, agent) = fresh(pg);
    let dir = agent.join("sessions/--proj--");
    session(&dir, "sigma001", &["ΟΔΟΣ ΑΘΗΝΩΝ 12", "nothing"]);
    session(&dir, "sigma002", &["στην οδος Πατησίων", "ΣΥΣΤΗΜΑ"]);
    session(&dir, "sigma003", &["μια οδοσ γραμμένη λάθος", "η ΟΔΟΣ"]);
    push(&agent, &url, "only");
    let mut counts = BTreeMap::new();
    for query in ["ΟΔΟΣ", "οδος", "οδοσ", "\"ΟΔΟΣ ΑΘΗΝΩΝ\"", "συστημα", "ΟΔΟΣ λάθος"]
    {
        let (local, stripped) = local_and_team_search(&agent, &url, query);
        counts.insert(query, stripped.len());
        // Hits of equal score and time may come in another order (a tie the ranking leaves open): compare as sets.
        let sorted = |mut hits: Vec<Json>| {
            hits.sort_by_key(|h| format!("{h:?}"));
            hits
        };
        let Ok(local) = local.into_array() else { panic!() };
        assert_eq!(sorted(stripped), sorted(local), "query {query}");
    }
    // The words are found at all (the local search lowercases the final capital sigma to `ς`).
    assert_eq!(counts["ΟΔΟΣ"], 3, "{counts:?}");
    assert_eq!(counts["συστημα"], 1, "{counts:?}");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_team_search_with_fewer_hits_than_its_limit_leaves_the_texts_that_do_not_match_in_the_database() {
    let pg = pg_server::server();
    let (url, _tmp, agent) = fresh(pg);
    // 3,000 entries of about 1 KB, every one holding "common" and "lorem": 3 MB of searchable text.
    let filler = "lorem ipsum dolor sit amet ".repeat(40);
    let texts: Vec<String> = (0..3000).map(|i| format!("common entry {i} {filler}")).collect();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    session(&agent.join("sessions/--proj--"), "bulk0001", &texts);
    push(&agent, &url, "only");
    let relay = pg_server::CountingRelay::start(pg.port());
    let through = relay.url(&url);
    let mut pulled = BTreeMap::new();
    for query in ["re:zq[0-9]+x", "re:common.*nowhere", "common lorem ipsum nowhere-to-be-found", "\"lorem common\""] {
        let before = relay.bytes_from_server();
        let hits = json(&run_search(&["--catalog", &through, "search", "--json", "--limit", "50", query]));
        assert_eq!(hits, Json::Array(Vec::new()), "query {query}");
        pulled.insert(query, relay.bytes_from_server() - before);
    }
    // What matches (a word that is there) still comes back, so the relay is on the path.
    let before = relay.bytes_from_server();
    let hits = json(&run_search(&["--catalog", &through, "search", "--json", "--limit", "5", "re:entry 29\\d\\d"]));
    assert!(matches!(&hits, Json::Array(h) if h.len() == 5), "{hits:?}");
    assert!(relay.bytes_from_server() > before);
    for (query, bytes) in &pulled {
        assert!(*bytes < 300_000, "{query:?} pulled {bytes} bytes of 3 MB of text that does not match: {pulled:?}");
    }
}

/// Every session of `machine` in the database against the session files under `agent`: the same files, and for
/// each exactly its complete lines, in order, at their offsets.
fn assert_database_holds_exactly_the_files(url: &str, machine: &str, agent: &Path) {
    let mut client = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let mut expected: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for dir in std::fs::read_dir(agent.join("sessions")).unwrap().flatten() {
        for f in std::fs::read_dir(dir.path()).unwrap().flatten() {
            let p = s(&f.path());
            // What pi lists is pushed; a file that is not a session is not.
            if p.ends_with(".jsonl")
                && pi_sessiond::catalog::info::session_info(&p, 0.0, false, &Default::default()).is_some()
            {
                let bytes = std::fs::read(&p).unwrap();
                let end = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
                expected.insert(p, bytes[..end].to_vec());
            }
        }
    }
    let rows = client
        .query(
            "SELECT s.path, s.pushed_offset, s.pushed_lines, e.line, e.byte_offset, e.raw
             FROM pi_sessions s LEFT JOIN pi_entries e ON e.sid = s.sid WHERE s.machine = $1
             ORDER BY s.path, e.line",
            &[&machine],
        )
        .unwrap();
    let mut got: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut recorded: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for r in rows {
        let path: String = r.get(0);
        recorded.insert(path.clone(), (r.get::<_, i64>(1) as usize, r.get::<_, i32>(2) as usize));
        let bytes = got.entry(path.clone()).or_default();
        let Some(line) = r.get::<_, Option<i32>>(3) else { continue };
        let at: i64 = r.get(4);
        assert_eq!(at as usize, bytes.len(), "{path}: line {line} is at the offset its predecessors end at");
        bytes.extend_from_slice(r.get::<_, &[u8]>(5));
        bytes.push(b'\n');
    }
    let missing: Vec<_> = expected.keys().filter(|k| !got.contains_key(*k)).collect();
    let extra: Vec<_> = got.keys().filter(|k| !expected.contains_key(*k)).collect();
    assert!(missing.is_empty() && extra.is_empty(), "missing {missing:?}, extra {extra:?}");
    for (path, bytes) in &expected {
        assert!(got[path] == *bytes, "{path}: the database's lines differ from the file's");
        let lines = bytes.iter().filter(|&&b| b == b'\n').count();
        assert_eq!(recorded[path], (bytes.len(), lines), "{path}: the recorded offset and line count");
    }
}

#[test]
#[ignore = "needs PostgreSQL"]
fn pushing_twice_adds_nothing() {
    let pg = pg_server::server();
    let (url, _tmp, agent) = fresh(pg);
    for i in 0..5 {
        session(&agent.join("sessions/--p--"), &format!("s{i}aaaaaaa"), &["one", "two", "three"]);
    }
    let first = push(&agent, &url, "m");
    assert_eq!((number(&first, "pushed"), number(&first, "entries")), (5.0, 20.0));
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let snapshot = |c: &mut postgres::Client| -> Vec<(i64, String)> {
        c.query("SELECT sid, pushed_at::text FROM pi_sessions ORDER BY sid", &[])
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect()
    };
    let before = snapshot(&mut client);
    // Old enough that nothing is racily clean: the second pass must decide from stats alone.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let second = push(&agent, &url, "m");
    assert_eq!((number(&second, "pushed"), number(&second, "entries"), number(&second, "deleted")), (0.0, 0.0, 0.0));
    assert_eq!(snapshot(&mut client), before, "no session row was written again");
    assert_database_holds_exactly_the_files(&url, "m", &agent);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn an_append_sends_only_the_new_lines_and_a_rewritten_or_deleted_session_is_reflected() {
    let pg = pg_server::server();
    let (url, tmp, agent) = fresh(pg);
    let dir = agent.join("sessions/--p--");
    let grown = session(&dir, "grown111", &["one", "two"]);
    let rewritten = session(&dir, "rewrite1", &["first version", "of this"]);
    let in_place = session(&dir, "inplace1", &["abcdef"]);
    let deleted = session(&dir, "deleted1", &["going away"]);
    let unsessioned = session(&dir, "nolonger", &["a session for now"]);
    push(&agent, &url, "m");

    let mut f = std::fs::OpenOptions::new().append(true).open(&grown).unwrap();
    std::io::Write::write_all(&mut f, message_line("grow0002", "\"grow0001\"", "three", 2).as_bytes()).unwrap();
    // A half-written line: not an entry yet.
    std::io::Write::write_all(&mut f, b"{\"type\":\"mess").unwrap();
    drop(f);
    // Rewritten through a new file (a new inode), and rewritten in place with the same size.
    let tmp_file = dir.join("new.tmp");
    std::fs::write(
        &tmp_file,
        std::fs::read(session(&tmp.path().join("x"), "rewrite1", &["second", "version", "!"])).unwrap(),
    )
    .unwrap();
    std::fs::rename(&tmp_file, &rewritten).unwrap();
    let bytes = std::fs::read(&in_place).unwrap();
    let changed = String::from_utf8(bytes).unwrap().replace("abcdef", "fedcba");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&in_place)
        .and_then(|mut f| std::io::Write::write_all(&mut f, changed.as_bytes()))
        .unwrap();
    std::fs::remove_file(&deleted).unwrap();
    // Rewritten into something that is not a session (its first line is not a header): pi no longer lists it.
    std::fs::write(&unsessioned, message_line("xxxx0000", "null", "no header", 0)).unwrap();

    let report = push(&agent, &url, "m");
    assert_eq!(number(&report, "deleted"), 2.0, "the deleted file and the one that is no longer a session: {report:?}");
    assert_eq!(number(&report, "entries"), 1.0 + 4.0 + 2.0, "one appended line, two sessions sent again: {report:?}");
    assert_eq!(number(&report, "rewritten"), 3.0, "{report:?}");
    assert_eq!(number(&report, "pushed"), 4.0, "{report:?}");
    assert_database_holds_exactly_the_files(&url, "m", &agent);

    // The listing says the same.
    let listing = by_machine(&json(&run(&["--catalog", &url, "ls", "--json", "--all"])));
    let pi = pi_list(&format!(r#"{{"kind":"listAll","agentDir":"{}"}}"#, s(&agent)));
    let mut problems = Vec::new();
    compare("after changes", &pi, &listing["m"], &mut problems);
    assert!(problems.is_empty(), "{problems:?}");
    let hits = json(&run_search(&["--catalog", &url, "search", "--json", "fedcba"]));
    assert!(matches!(&hits, Json::Array(h) if h.len() == 1), "{hits:?}");
    let old = json(&run_search(&["--catalog", &url, "search", "--json", "\"first version\""]));
    assert_eq!(old, Json::Array(Vec::new()), "the rewritten session's old text is gone");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_push_killed_at_random_moments_then_rerun_leaves_exactly_the_sessions_entries() {
    let pg = pg_server::server();
    let (url, _tmp, agent) = fresh(pg);
    let mut r = Rng::new(7);
    // Enough lines that a push takes a while: kills land before, inside and between transactions.
    let filler = "x".repeat(2000);
    let mut files = Vec::new();
    for i in 0..60 {
        let texts: Vec<String> = (0..(20 + r.below(80))).map(|j| format!("entry {j} of {i} {filler}")).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        files.push(session(&agent.join(format!("sessions/--p{}--", i % 3)), &format!("k{i:03}{}", r.hex8()), &refs));
    }
    // How long a whole push takes here, so that kills are spread over a push's lifetime.
    let started = std::time::Instant::now();
    push(&agent, &pg.database(), "m");
    let whole_ms = started.elapsed().as_millis() as usize;
    let mut kills = 0;
    for round in 0..24 {
        let mut child = Command::new(binary())
            .args(["--agent-dir", &s(&agent), "push", "--postgres", &url, "--machine", "m"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(r.below(whole_ms / 3 + 1) as u64));
        if child.try_wait().unwrap().is_none() {
            kills += 1;
        }
        let _ = child.kill();
        let _ = child.wait();
        // The files keep changing between kills: appends, rewrites in place (half the files, so that every push
        // has work to be killed in), and now and then a truncation.
        let f = &files[r.below(files.len())];
        let line = message_line(&format!("r{round:03}{}", r.below(10)), "null", "appended between kills", round);
        append_line(f, &line);
        for g in files.iter().filter(|_| r.chance(50)) {
            let mut bytes = std::fs::read(g).unwrap();
            let at = bytes.windows(4).position(|w| w == b"T00:").unwrap() + 2;
            bytes[at] = if bytes[at] == b'0' { b'1' } else { b'0' };
            std::fs::OpenOptions::new()
                .write(true)
                .open(g)
                .and_then(|mut h| std::io::Write::write_all(&mut h, &bytes))
                .unwrap();
        }
        if round % 6 == 5 {
            let g = &files[r.below(files.len())];
            let bytes = std::fs::read(g).unwrap();
            let cut = bytes[..bytes.len() / 2].iter().rposition(|&b| b == b'\n').unwrap() + 1;
            std::fs::write(g, &bytes[..cut]).unwrap();
        }
    }
    assert!(kills >= 20, "only {kills} pushes were killed while running");
    push(&agent, &url, "m");
    assert_database_holds_exactly_the_files(&url, "m", &agent);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_session_of_another_machine_reads_as_a_local_open_of_its_file_reads() {
    let pg = pg_server::server();
    // Sent as the files are (images and all), so that the database's bytes can be compared with the files'.
    let (url, tmp) = (pg.database(), temp_dir());
    let (files, links) = tree(&mut Rng::new(44));
    build(tmp.path(), &files, &links);
    let agent = s(&tmp.path().join("agent"));
    run(&["--agent-dir", &agent, "push", "--postgres", &url, "--machine", "far", "--keep-images", "--no-redact"]);
    let mut catalog = TeamCatalog::open(&Target::from_env(&url).unwrap()).unwrap();
    let listed = catalog.list_all(None, false).unwrap();
    assert!(listed.len() > 20);
    let reads = |m: pi_sessiond::session::Result<pi_sessiond::session::SessionManager>| match m {
        Ok(m) => {
            let r = pi_sessiond::cli::Reads::compute(&m);
            let mut o = pi_sessiond::session::render::JsonOut::memory();
            match r.write(&m, true, &mut o) {
                Ok(()) => String::from_utf8_lossy(&o.into_bytes()).into_owned(),
                Err(e) => format!("read error: {e}"),
            }
        }
        Err(e) => format!("error: {e}"),
    };
    let mut opened = 0;
    for s in &listed {
        let path = s.listed.info.path.clone();
        let file = catalog.read_file("far", &path).unwrap().expect("pushed");
        assert!(file.bytes == std::fs::read(&path).unwrap(), "{path}: the pushed bytes are the file's");
        let remote = SessionManager::open_pushed(&path, &file.bytes, Default::default());
        opened += usize::from(remote.is_ok());
        let local = SessionManager::open(&path, None, None, Default::default());
        let (ours, theirs) = (reads(remote), reads(local));
        assert!(ours == theirs, "{path}:\n{ours}\n{theirs}");
    }
    assert!(opened > 20, "only {opened} sessions opened");
    assert!(catalog.read_file("far", "/no/such.jsonl").unwrap().is_none());
    assert!(catalog.read_file("near", &listed[0].listed.info.path).unwrap().is_none());
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_phrase_appended_on_one_machine_is_found_through_the_other_within_2_s_with_watch() {
    use crate::support::sidecar::{Sidecar, Wire};
    let pg = pg_server::server();
    let url = pg.database();
    let tmp = temp_dir();
    let (laptop, ci) = (tmp.path().join("laptop/agent"), tmp.path().join("ci/agent"));
    let file = session(&laptop.join("sessions/--p--"), "watched1", &["before"]);
    session(&ci.join("sessions/--p--"), "ciside01", &["the ci runner's own session"]);
    push(&ci, &url, "ci");
    let mut watcher = Command::new(binary())
        .args([
            "--agent-dir",
            &s(&laptop),
            "push",
            "--poll-ms",
            "60000",
            "--postgres",
            &url,
            "--machine",
            "laptop",
            "--watch",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map(KilledAtEnd)
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(watcher.stdout.take().unwrap()));
    let first = json(&lines.next().unwrap().unwrap());
    assert_eq!(number(&first, "pushed"), 1.0);
    // The other machine: a sidecar on the CI runner's agent directory, looking through the team catalog.
    let mut other = Sidecar::spawn(Wire::Jsonl, &["--agent-dir", &s(&ci), "--catalog", &url], &[]);
    let search = |sc: &mut Sidecar, q: &str| -> Vec<(String, String)> {
        let Ok(hits) = sc
            .call("sessions/search", json(&format!(r#"{{"query":{}}}"#, Json::str(q).to_canonical_string())))
            .into_array()
        else {
            panic!("sessions/search did not answer a list")
        };
        hits.iter().map(|h| (str_of(h.get("machine").unwrap()), str_of(h.get("sessionId").unwrap()))).collect()
    };
    assert!(search(&mut other, "\"zebra migration\"").is_empty(), "the phrase is not there before it is written");
    // A phrase appended to the watched session, and a new session in a new project directory.
    let line = message_line("watc0001", "\"watc0000\"", "the zebra migration finished", 1);
    append_line(&file, &line);
    let appended = std::time::Instant::now();
    session(&laptop.join("sessions/--new--"), "brandnew", &["a whole new project"]);
    // The issue's promise is a deadline: found through the other machine within 2 s of the append. The poll is a
    // minute, so only the watcher's file notifications can meet it (bench/run --only team measures the latency).
    let deadline = appended + std::time::Duration::from_secs(2);
    let (mut phrase, mut project) = (Vec::new(), Vec::new());
    while std::time::Instant::now() < deadline {
        phrase = search(&mut other, "\"zebra migration\"");
        project = search(&mut other, "\"whole new project\"");
        if !phrase.is_empty() && !project.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = watcher.kill();
    let _ = watcher.wait();
    assert_eq!(phrase, [("laptop".to_owned(), "watched1".to_owned())], "the appended phrase, within 2 s");
    assert_eq!(project, [("laptop".to_owned(), "brandnew".to_owned())], "the new project's session, within 2 s");
}

/// Runs the binary with `env` added; (success, stdout, stderr).
fn run_env(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let out = Command::new(binary()).args(args).envs(env.iter().copied()).stdin(Stdio::null()).output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// Has the server end every pi-sessiond connection to the database at `url`, as a restart would; how many.
fn end_connections(url: &str) -> usize {
    let db = url.rsplit('/').next().unwrap().split('?').next().unwrap().to_owned();
    let mut admin = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let ended = admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = $1 AND application_name = 'pi-sessiond' AND pid <> pg_backend_pid()",
            &[&db],
        )
        .unwrap();
    assert!(ended.iter().all(|r| r.get::<_, bool>(0)), "every connection was ended");
    ended.len()
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_sidecar_with_a_catalog_answers_right_after_the_database_dropped_its_connection() {
    use crate::support::sidecar::{Sidecar, Wire};
    let pg = pg_server::server();
    let (url, _tmp, agent) = fresh(pg);
    session(&agent.join("sessions/--p--"), "survives", &["still here after the drop"]);
    push(&agent, &url, "laptop");
    let mut sc = Sidecar::spawn(Wire::Jsonl, &["--agent-dir", &s(&agent), "--catalog", &url], &[]);
    let before = sc.call("sessions/listAll", json("{}"));
    assert_eq!(end_connections(&url), 1, "the sidecar had one connection");
    // The first request after the drop is answered, not failed: the sidecar connects again and runs it.
    assert_eq!(sc.call("sessions/listAll", json("{}")), before);
    let hits = sc.call("sessions/search", json(r#"{"query":"\"after the drop\""}"#));
    assert!(matches!(&hits, Json::Array(h) if h.len() == 1), "{hits:?}");
}

/// pi-sessiond's statements the server is running in the database at `url`: their text.
fn running_statements(url: &str) -> Vec<String> {
    let db = url.rsplit('/').next().unwrap().split('?').next().unwrap().to_owned();
    let mut admin = postgres::Client::connect(url, postgres::NoTls).unwrap();
    admin
        .query(
            "SELECT query FROM pg_stat_activity WHERE datname = $1 AND application_name = 'pi-sessiond'
               AND state = 'active'",
            &[&db],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_cancelled_team_search_returns_promptly_and_leaves_no_statement_running_in_the_database() {
    use crate::support::sidecar::{Sidecar, Wire};
    let pg = pg_server::server();
    let (url, _tmp, agent) = fresh(pg);
    session(&agent.join("sessions/--p--"), "cancel01", &["a needle in the entries"]);
    push(&agent, &url, "laptop");
    let mut sc = Sidecar::spawn(Wire::Jsonl, &["--agent-dir", &s(&agent), "--catalog", &url], &[]);
    sc.call("sessions/listAll", json("{}"));
    // The entries are locked by another transaction: the search's statement waits on the server until it is
    // cancelled (or the lock goes, which this test never lets happen before the search is cancelled).
    let mut locker = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let mut lock = locker.transaction().unwrap();
    lock.batch_execute("LOCK TABLE pi_entries IN ACCESS EXCLUSIVE MODE").unwrap();
    let id = sc.start("sessions/search", json(r#"{"query":"needle"}"#));
    assert!(
        eventually(30, || running_statements(&url).iter().any(|q| q.contains("pi_entries"))),
        "the search never reached the database"
    );
    sc.notify("$/cancelRequest", json(&format!(r#"{{"id":{id}}}"#)));
    let e = sc.response(id);
    assert_eq!(
        str_of(e.get("error").and_then(|e| e.get("data")).and_then(|d| d.get("kind")).unwrap_or(&Json::Null)),
        "request_cancelled",
        "{e:?}"
    );
    assert!(
        eventually(10, || running_statements(&url).is_empty()),
        "the cancelled search still runs in the database: {:?}",
        running_statements(&url)
    );
    // The connection is free again: the next request is answered while the entries are still locked.
    let listed = sc.call("sessions/listAll", json("{}"));
    assert!(matches!(&listed, Json::Array(l) if l.len() == 1), "{listed:?}");
    lock.rollback().unwrap();
    let hits = sc.call("sessions/search", json(r#"{"query":"needle"}"#));
    assert!(matches!(&hits, Json::Array(h) if h.len() == 1), "{hits:?}");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_watching_push_whose_right_is_revoked_stops_saying_so_not_in_the_policy_s_words() {
    let pg = pg_server::server();
    let (url, _tmp, agent) = fresh(pg);
    let file = session(&agent.join("sessions/--p--"), "revoked1", &["before the revoke"]);
    push(&agent, &url, "laptop"); // the tables, set up by the admin
    create_roles(&url, &["rls_watcher"]);
    team_access("grant", &url, "rls_watcher", &["--machine", "laptop", "--push"]);
    let mut watcher = Command::new(binary())
        .args(["--agent-dir", &s(&agent), "push", "--postgres", &as_role(&url, "rls_watcher"), "--machine", "laptop"])
        .args(["--watch", "--poll-ms", "100"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map(KilledAtEnd)
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(watcher.stdout.take().unwrap()));
    assert!(lines.next().unwrap().unwrap().contains("\"pushed\""), "the first pass reports");
    team_access("revoke", &url, "rls_watcher", &["--machine", "laptop", "--push"]);
    append_line(&file, &message_line("revo0001", "\"revo0000\"", "after the revoke", 1));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(status) = watcher.try_wait().unwrap() {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "still pushing a minute after the revoke");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut watcher.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(r#"role "rls_watcher" may not push as machine "laptop""#), "{stderr}");
    assert!(!stderr.contains("row-level security"), "{stderr}");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_watching_push_connects_again_when_the_database_drops_its_connection() {
    let pg = pg_server::server();
    let (url, _tmp, agent) = fresh(pg);
    let file = session(&agent.join("sessions/--p--"), "dropped1", &["before the drop"]);
    let mut watcher = Command::new(binary())
        .args(["--agent-dir", &s(&agent), "push", "--postgres", &url, "--machine", "laptop", "--watch"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map(KilledAtEnd)
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(watcher.stdout.take().unwrap()));
    assert_eq!(number(&json(&lines.next().unwrap().unwrap()), "pushed"), 1.0);
    // The server ends the push's connection (a restart, a network change, an administrator).
    assert_eq!(end_connections(&url), 1, "the watching push had one connection");
    let line = message_line("drop0001", "\"drop0000\"", "written after the drop", 1);
    append_line(&file, &line);
    // Its next pass fails, it connects again, and the append arrives; the process is still running.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let hits = loop {
        let hits = json(&run_search(&["--catalog", &url, "search", "--json", "\"after the drop\""]));
        let exited = watcher.try_wait().unwrap().is_some();
        if matches!(&hits, Json::Array(h) if !h.is_empty()) || exited || std::time::Instant::now() > deadline {
            break hits;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let still_running = watcher.try_wait().unwrap().is_none();
    let _ = watcher.kill();
    let _ = watcher.wait();
    assert!(still_running, "the watching push exited when its connection was dropped");
    assert!(matches!(&hits, Json::Array(h) if h.len() == 1), "the append after the drop was never pushed: {hits:?}");
    assert_database_holds_exactly_the_files(&url, "laptop", &agent);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_url_that_asks_for_tls_gets_an_encrypted_connection_and_a_password_from_it_or_a_password_file_is_used_but_never_logged(
) {
    let pg = pg_server::server();
    let url = pg.database();
    let db = url.rsplit('/').next().unwrap().split('?').next().unwrap().to_owned();
    let role = pg_server::PASSWORD_ROLE;
    let password = "sesame-7Qx-open";
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    // The role owns this database and its schema, so that it creates pi-sessiond's tables itself.
    admin
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN PASSWORD '{password}'; ALTER DATABASE {db} OWNER TO {role};
             ALTER SCHEMA public OWNER TO {role}"
        ))
        .unwrap();
    let port = pg.port();
    let tls_url = format!("postgresql://{role}:{password}@127.0.0.1:{port}/{db}?sslmode=require");
    let mut client = Target::from_env(&tls_url).unwrap().connect().expect("a TLS connection with the password");
    let ssl: bool = client.query_one("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[]).unwrap().get(0);
    assert!(ssl, "sslmode=require gave an unencrypted connection");

    // A push and a listing over TLS, logging everything they can: the password is used, and appears nowhere.
    let tmp = temp_dir();
    let agent = tmp.path().join("agent");
    session(&agent.join("sessions/--p--"), "tlstls01", &["over tls"]);
    let trace = [("RUST_LOG", "trace")];
    let args = ["--agent-dir", &s(&agent), "push", "--postgres", &tls_url, "--machine", "m"];
    let (ok, out, err) = run_env(&args, &trace);
    assert!(ok, "{err}");
    assert_eq!(number(&json(out.trim()), "entries"), 2.0);
    assert!(!err.contains(password) && !out.contains(password), "the password was printed:\n{out}{err}");
    // The password from PGPASSWORD instead of the URL.
    let bare = format!("postgresql://{role}@127.0.0.1:{port}/{db}?sslmode=require");
    let (ok, out, err) = run_env(&["--catalog", &bare, "ls", "--json", "--all"], &[trace[0], ("PGPASSWORD", password)]);
    assert!(ok, "{err}");
    assert_eq!(by_machine(&json(&out)).keys().collect::<Vec<_>>(), ["m"]);
    assert!(!err.contains(password), "the password was logged:\n{err}");

    // The password from libpq's password file (PGPASSFILE, else ~/.pgpass), so that no command line holds it: the
    // first line matching host, port, database and user, `*` matching anything; ignored when others may read it.
    let home = temp_dir();
    let pgpass = home.path().join(".pgpass");
    let lines = format!(
        "# team database\n127.0.0.1:{port}:other_db:{role}:not-this-one\n*:{port}:{db}:{role}:{password}\n*:*:*:*:nor-this\n"
    );
    std::fs::write(&pgpass, lines).unwrap();
    let mode = |m| std::fs::set_permissions(&pgpass, std::os::unix::fs::PermissionsExt::from_mode(m)).unwrap();
    mode(0o600);
    let ls = ["--catalog", &bare, "ls", "--json", "--all"];
    let (ok, out, err) = run_env(&ls, &[trace[0], ("PGPASSFILE", &s(&pgpass))]);
    assert!(ok, "PGPASSFILE was not read: {err}");
    assert_eq!(by_machine(&json(&out)).keys().collect::<Vec<_>>(), ["m"]);
    assert!(!err.contains(password), "the password was logged:\n{err}");
    let (ok, out, err) = run_env(&ls, &[("HOME", &s(home.path()))]);
    assert!(ok, "~/.pgpass was not read: {err}");
    assert_eq!(by_machine(&json(&out)).keys().collect::<Vec<_>>(), ["m"]);
    mode(0o644);
    let (ok, out, err) = run_env(&ls, &[("HOME", &s(home.path()))]);
    assert!(!ok, "a password file others may read was used");
    assert!(err.contains("group or world access"), "{err}");
    assert!(out.contains("catalog_unavailable") && out.contains("password"), "{out}");

    // A wrong password is refused with an error naming the server, and neither password is in it.
    let wrong = "hunter2-wrong";
    let bad = format!("postgresql://{role}:{wrong}@127.0.0.1:{port}/{db}?sslmode=require");
    let (ok, out, err) = run_env(&["--catalog", &bad, "ls", "--all"], &trace);
    assert!(!ok, "a wrong password was accepted: {out}");
    assert!(err.contains(&format!("{role}@127.0.0.1:{port}/{db}")), "{err}");
    assert!(!err.contains(wrong) && !err.contains(password), "{err}");
    // With --json the failure is the command line's JSON error on stdout, with the sidecar's kind.
    let out = Command::new(binary()).args(["--json", "--catalog", &bad, "ls", "--all"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let failure = json(String::from_utf8_lossy(&out.stdout).trim());
    let error = failure.get("error").expect("an error object");
    assert_eq!(error.get("kind"), Some(&Json::str("catalog_unavailable")), "{failure:?}");
    assert!(str_of(error.get("message").unwrap()).contains("password authentication failed"), "{failure:?}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains(wrong));
    let (ok, _, err) = run_env(
        &["--agent-dir", &s(&agent), "push", "--postgres", &bare, "--machine", "m"],
        &[trace[0], ("PGPASSWORD", wrong)],
    );
    assert!(!ok && err.contains("password") && !err.contains(wrong), "{err}");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_role_that_may_only_read_lists_searches_and_opens_from_the_catalog() {
    use crate::support::sidecar::{Sidecar, Wire};
    let pg = pg_server::server();
    let (url, tmp, agent) = fresh(pg);
    let file = session(&agent.join("sessions/--proj--"), "readonly", &["the viewer reads this"]);
    push(&agent, &url, "laptop");
    // A viewer: it may read the tables and nothing else (no CREATE on the schema, no writes).
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    admin
        .batch_execute("CREATE ROLE team_viewer LOGIN; GRANT SELECT ON ALL TABLES IN SCHEMA public TO team_viewer")
        .unwrap();
    let viewer = url.replacen("postgres@", "team_viewer@", 1);
    // With no grant it sees nothing; granted the machine, it reads it.
    assert_eq!(json(&run(&["--catalog", &viewer, "ls", "--json", "--all"])), Json::Array(Vec::new()));
    team_access("grant", &url, "team_viewer", &["--machine", "laptop"]);
    let listing = by_machine(&json(&run(&["--catalog", &viewer, "ls", "--json", "--all"])));
    assert_eq!(listing.keys().collect::<Vec<_>>(), ["laptop"]);
    let hits = json(&run_search(&["--catalog", &viewer, "search", "--json", "\"viewer reads\""]));
    assert!(matches!(&hits, Json::Array(h) if h.len() == 1), "{hits:?}");
    let mut sc = Sidecar::spawn(Wire::Jsonl, &["--agent-dir", &s(tmp.path()), "--catalog", &viewer], &[]);
    let opened = sc.call("session/open", json(&format!(r#"{{"path":"{}","machine":"laptop"}}"#, s(&file))));
    let entries = sc.call(
        "session/getEntries",
        json(&format!(r#"{{"handle":{}}}"#, opened.get("handle").unwrap().to_canonical_string())),
    );
    assert!(entries.to_canonical_string().contains("the viewer reads this"), "{entries:?}");
    // It cannot push: the database refuses its writes, and the error says so.
    let out = Command::new(binary())
        .args(["--agent-dir", &s(&agent), "push", "--postgres", &viewer, "--machine", "viewer"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("permission denied"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_role_never_granted_and_a_database_never_set_up_are_told_what_an_admin_does() {
    let pg = pg_server::server();
    let (url, _tmp, agent) = fresh(pg);
    session(&agent.join("sessions/--proj--"), "setupnot", &["hello"]);
    create_roles(&url, &["rls_never"]);
    let fails = |args: &[&str]| {
        let out = Command::new(binary()).args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // The database is empty: a push by the role may not create the tables; reading, nobody creates them (not
    // even their would-be owner: a URL naming the wrong database is said to be one).
    let empty = as_role(&url, "rls_never");
    let args = ["--agent-dir", &s(&agent), "push", "--postgres", &empty, "--machine", "m"];
    let stderr = fails(&args);
    assert!(
        stderr
            .contains(r#"pi-sessiond's tables are not in this database yet, and role "rls_never" may not create them"#),
        "{stderr}"
    );
    for reader in [&empty, &url] {
        for command in [&["ls", "--all"][..], &["search", "hello"], &["usage"]] {
            let stderr = fails(&[&["--catalog", reader.as_str()][..], command].concat());
            assert!(
                stderr.contains("pi-sessiond's tables are not in this database: nothing has been pushed to it"),
                "{command:?}: {stderr}"
            );
        }
    }
    assert_eq!(
        psql(&url, "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'pi\\_%'"),
        ["0"],
        "nothing was created"
    );
    // Set up by the admin's push; a role never granted anything is told so, not "permission denied for table".
    push(&agent, &url, "m");
    let stderr = fails(&["--catalog", &empty, "ls", "--all"]);
    assert!(stderr.contains(r#"role "rls_never" has no grant in this team catalog"#), "{stderr}");
    assert!(stderr.contains("team grant --role rls_never"), "{stderr}");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_revoke_reaches_a_session_a_sidecar_already_holds_open_within_seconds() {
    use crate::support::sidecar::{Sidecar, Wire};
    let pg = pg_server::server();
    let (url, tmp, agent) = fresh(pg);
    let file = session(&agent.join("sessions/--proj--"), "heldopen", &["what the viewer held open"]);
    push(&agent, &url, "laptop");
    create_roles(&url, &["rls_held"]);
    team_access("grant", &url, "rls_held", &["--machine", "laptop"]);
    let mut sc =
        Sidecar::spawn(Wire::Jsonl, &["--agent-dir", &s(tmp.path()), "--catalog", &as_role(&url, "rls_held")], &[]);
    let opened = sc.call("session/open", json(&format!(r#"{{"path":"{}","machine":"laptop"}}"#, s(&file))));
    let read = json(&format!(r#"{{"handle":{}}}"#, opened.get("handle").unwrap().to_canonical_string()));
    assert!(sc.call("session/getEntries", read.clone()).to_canonical_string().contains("what the viewer held open"));

    // The session is in the sidecar's memory; the grant that let it be read goes.
    team_access("revoke", &url, "rls_held", &["--machine", "laptop"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let err = loop {
        match sc.call_result("session/getEntries", read.clone()) {
            Err(err) => break err,
            Ok(_) if std::time::Instant::now() < deadline => std::thread::sleep(std::time::Duration::from_millis(200)),
            Ok(entries) => panic!("still read 10 s after the revoke: {entries:?}"),
        }
    };
    assert_eq!(err.get("data").and_then(|d| d.get("kind")), Some(&Json::str("session_not_found")), "{err:?}");
    let message = str_of(err.get("message").unwrap());
    assert!(message.contains("no longer shows") && message.contains("laptop"), "{message}");
    // Granted again, the same handle reads again.
    team_access("grant", &url, "rls_held", &["--machine", "laptop"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while sc.call_result("session/getEntries", read.clone()).is_err() {
        assert!(std::time::Instant::now() < deadline, "not read again 10 s after the new grant");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[test]
#[ignore = "needs PostgreSQL"]
fn the_schema_is_created_once_however_many_machines_start_at_once_and_a_newer_one_is_refused() {
    let pg = pg_server::server();
    let url = pg.database();
    let target = Target::from_env(&url).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let t = target.clone();
            std::thread::spawn(move || pi_sessiond::team::schema::open(&t).map(drop))
        })
        .collect();
    for t in threads {
        t.join().unwrap().expect("a concurrent migration succeeds");
    }
    let mut client = pi_sessiond::team::schema::open(&target).unwrap();
    let versions: Vec<i32> = client
        .query("SELECT version FROM pi_sessiond_schema ORDER BY version", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(versions, (1..=pi_sessiond::team::schema::SCHEMA_VERSION).collect::<Vec<_>>());
    client.execute("INSERT INTO pi_sessiond_schema (version) VALUES (999)", &[]).unwrap();
    let err = pi_sessiond::team::schema::open(&target).map(drop).unwrap_err();
    assert!(matches!(err, pi_sessiond::team::DbError::NewerSchema { found: 999, .. }), "{err}");
    let tmp = temp_dir();
    std::fs::create_dir(tmp.path().join("sessions")).unwrap();
    let out =
        Command::new(binary()).args(["--agent-dir", &s(tmp.path()), "push", "--postgres", &url]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("version 999"));
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_sidecar_with_a_catalog_answers_across_machines_and_opens_another_machines_session_read_only() {
    use crate::support::sidecar::{Sidecar, Wire};
    let pg = pg_server::server();
    let url = pg.database();
    let tmp = temp_dir();
    let (a, b) = (tmp.path().join("a/agent"), tmp.path().join("b/agent"));
    let far = session(&a.join("sessions/--proj--"), "aaaa1111", &["the lighthouse keeper", "second"]);
    session(&b.join("sessions/--proj--"), "bbbb2222", &["the lighthouse is dark"]);
    session(&b.join("sessions/--other--"), "cccc3333", &["elsewhere"]);
    push(&a, &url, "laptop");
    push(&b, &url, "ci");
    let mut sc = Sidecar::spawn(Wire::Jsonl, &["--agent-dir", &s(&b), "--catalog", &url], &[]);
    let all = sc.call("sessions/listAll", json("{}"));
    assert_eq!(all, json(&run(&["--catalog", &url, "ls", "--json", "--all"])), "the sidecar lists what ls lists");
    let listed = by_machine(&sc.call("sessions/list", json(r#"{"cwd":"/proj"}"#)));
    assert_eq!(listed.keys().collect::<Vec<_>>(), ["ci", "laptop"]);
    let delta = sc.call("sessions/listDelta", json(r#"{"cwd":"/proj"}"#));
    assert!(delta.to_canonical_string().contains(r#""machine":"laptop""#), "{delta:?}");
    let found = sc.call("sessions/findById", json(r#"{"cwd":"/proj","id":"aaaa1111"}"#));
    assert_eq!(found, json(&format!(r#"{{"path":"{}","machine":"laptop"}}"#, s(&far))));
    let hits = sc.call("sessions/search", json(r#"{"query":"lighthouse"}"#));
    let Ok(hits) = hits.into_array() else { panic!() };
    let mut machines: Vec<String> = hits.iter().map(|h| str_of(h.get("machine").unwrap())).collect();
    machines.sort();
    assert_eq!(machines, ["ci", "laptop"]);

    // The laptop's session, opened from the database, reads as a local open of the same file reads.
    let remote = sc.call("session/open", json(&format!(r#"{{"path":"{}","machine":"laptop"}}"#, s(&far))));
    assert_eq!(remote.get("machine"), Some(&Json::str("laptop")));
    assert_eq!(remote.get("isPersisted"), Some(&Json::Bool(false)));
    let again = json(&format!(r#"{{"handle":{}}}"#, remote.get("handle").unwrap().to_canonical_string()));
    assert_eq!(sc.call("session/getState", again).get("machine"), Some(&Json::str("laptop")));
    let mut local_sc = Sidecar::spawn(Wire::Jsonl, &["--agent-dir", &s(&a)], &[]);
    let local = local_sc.call("session/open", json(&format!(r#"{{"path":"{}"}}"#, s(&far))));
    for method in [
        "session/getEntries",
        "session/getTree",
        "session/getBranch",
        "session/buildSessionContext",
        "session/getHeader",
    ] {
        let h = |st: &Json| json(&format!(r#"{{"handle":{}}}"#, st.get("handle").unwrap().to_canonical_string()));
        assert_eq!(sc.call(method, h(&remote)), local_sc.call(method, h(&local)), "{method}");
    }
    // Read-only: a mutation is refused with a clear kind, and nothing is written anywhere.
    let before = std::fs::read(&far).unwrap();
    let handle = remote.get("handle").unwrap().to_canonical_string();
    let err = sc.call_err(
        "session/appendMessage",
        json(&format!(r#"{{"handle":{handle},"message":{{"role":"user","content":"no","timestamp":1}}}}"#)),
    );
    assert_eq!(err.get("data").and_then(|d| d.get("kind")), Some(&Json::str("read_only")), "{err:?}");
    assert_eq!(std::fs::read(&far).unwrap(), before);
    let missing = sc.call_err("session/open", json(r#"{"path":"/nowhere.jsonl","machine":"laptop"}"#));
    assert_eq!(missing.get("data").and_then(|d| d.get("kind")), Some(&Json::str("session_not_found")));
    // The same path opened locally in the same sidecar is another handle, and writable; a host-chosen handle
    // name given to a read-only session and closed is an ordinary handle when used again.
    let local_here = sc.call("session/open", json(&format!(r#"{{"path":"{}"}}"#, s(&far))));
    assert_ne!(local_here.get("handle"), remote.get("handle"));
    assert_eq!(local_here.get("machine"), None);
    let named = sc.call("session/open", json(&format!(r#"{{"path":"{}","machine":"laptop","handle":"x"}}"#, s(&far))));
    assert_eq!(named.get("handle"), Some(&Json::str("x")));
    sc.call("session/close", json(r#"{"handle":"x"}"#));
    let fresh = tmp.path().join("fresh.jsonl");
    sc.call("session/open", json(&format!(r#"{{"path":"{}","handle":"x"}}"#, s(&fresh))));
    sc.call(
        "session/appendMessage",
        json(r#"{"handle":"x","message":{"role":"user","content":"mine","timestamp":1}}"#),
    );
    assert!(std::fs::read_to_string(&fresh).unwrap().contains("mine"));
    // Without a catalog, `machine` is refused rather than ignored.
    let err = local_sc.call_err("session/open", json(&format!(r#"{{"path":"{}","machine":"laptop"}}"#, s(&far))));
    assert_eq!(err.get("data").and_then(|d| d.get("kind")), Some(&Json::str("invalid_params")));
}

#[test]
#[ignore = "needs PostgreSQL"]
fn two_pushes_of_one_machine_at_once_take_turns_and_duplicate_nothing() {
    let pg = pg_server::server();
    let (url, _tmp, agent) = fresh(pg);
    let filler = "y".repeat(1000);
    for i in 0..40 {
        let texts: Vec<String> = (0..30).map(|j| format!("{j} {filler}")).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        session(&agent.join("sessions/--p--"), &format!("twice{i:03}"), &refs);
    }
    let spawn = || {
        Command::new(binary())
            .args(["--agent-dir", &s(&agent), "push", "--postgres", &url, "--machine", "m"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (first, second) = (spawn(), spawn());
    let reports: Vec<Json> = [first, second]
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            json(String::from_utf8_lossy(&out.stdout).trim())
        })
        .collect();
    // One of them pushed everything; the other, after waiting its turn, found nothing left to do.
    let mut entries: Vec<f64> = reports.iter().map(|r| number(r, "entries")).collect();
    entries.sort_by(f64::total_cmp);
    assert_eq!(entries, [0.0, 40.0 * 31.0]);
    assert_database_holds_exactly_the_files(&url, "m", &agent);
}

/// A `push` of the binary with `args` (after `push`); (exit status, stdout, stderr).
fn push_args(agent: &str, url: &str, args: &[&str], cwd: Option<&Path>) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(binary());
    cmd.args(["--agent-dir", agent, "push", "--postgres", url]).args(args).stdin(Stdio::null());
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    let out = cmd.output().expect("run pi-sessiond");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_push_of_a_mistyped_or_sessionless_agent_dir_exits_non_zero_and_deletes_nothing() {
    let pg = pg_server::server();
    let (url, tmp, agent) = fresh(pg);
    for i in 0..3 {
        session(&agent.join("sessions/--p--"), &format!("kept{i}aaa"), &["still pushed"]);
    }
    push(&agent, &url, "m");
    let typo = s(&tmp.path().join("agnet"));
    let (status, stdout, stderr) = push_args(&typo, &url, &["--machine", "m"], None);
    assert_eq!(status, Some(2), "a missing agent directory is an error: {stdout}{stderr}");
    assert!(stderr.contains("agnet") && stderr.contains("nothing was pushed or deleted"), "{stderr}");
    assert_database_holds_exactly_the_files(&url, "m", &agent);

    // A directory that exists but holds no sessions directory (an empty or wrong one): refused too, in JSON with
    // --json, unless --allow-empty says that this machine really has no sessions.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let (status, stdout, _) = push_args(&s(&empty), &url, &["--machine", "m", "--json"], None);
    assert_eq!(status, Some(2));
    let error = json(stdout.trim());
    assert_eq!(error.get("error").and_then(|e| e.get("kind")), Some(&Json::str("session_not_found")), "{stdout}");
    assert_database_holds_exactly_the_files(&url, "m", &agent);
    let (status, stdout, stderr) = push_args(&s(&empty), &url, &["--machine", "m", "--allow-empty"], None);
    assert_eq!(status, Some(0), "{stderr}");
    assert_eq!(number(&json(stdout.trim()), "deleted"), 3.0, "told so, the machine's sessions are deleted");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_relative_agent_dir_stores_absolute_paths() {
    let pg = pg_server::server();
    let (url, tmp, agent) = fresh(pg);
    session(&agent.join("sessions/--p--"), "relative", &["from a relative path"]);
    let (status, _, stderr) = push_args("agent", &url, &["--machine", "m"], Some(tmp.path()));
    assert_eq!(status, Some(0), "{stderr}");
    let canonical = std::fs::canonicalize(&agent).unwrap();
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let rows = client.query("SELECT path, agent_dir FROM pi_sessions", &[]).unwrap();
    let got: Vec<(String, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let file = canonical.join("sessions/--p--/2026-01-01T00-00-00-000Z_relative.jsonl");
    assert_eq!(got, [(s(&file), s(&canonical))]);
    // The same directory pushed by its absolute name is the same session: nothing to send, nothing deleted.
    let again = push(&canonical, &url, "m");
    assert_eq!((number(&again, "entries"), number(&again, "deleted")), (0.0, 0.0), "{again:?}");
    assert_database_holds_exactly_the_files(&url, "m", &canonical);
}

/// Waits until the file system's clock has moved past `path`'s last change, so that a write now shows in its
/// change time (timestamps tick every few milliseconds).
fn wait_past_last_change(path: &Path) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).unwrap();
    let changed = std::time::UNIX_EPOCH + std::time::Duration::new(m.ctime() as u64, m.ctime_nsec() as u32);
    while std::time::SystemTime::now() < changed + std::time::Duration::from_millis(50) {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// How many rows of `table` (pi_sessions or pi_entries) hold `needle` in any column, as text or as bytes.
fn rows_holding(client: &mut postgres::Client, table: &str, needle: &str) -> i64 {
    let hex: String = needle.bytes().map(|b| format!("{b:02x}")).collect();
    let sql = format!("SELECT count(*) FROM {table} t WHERE strpos(t::text, $1) > 0 OR strpos(t::text, $2) > 0");
    client.query_one(&sql, &[&needle, &hex]).unwrap().get(0)
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_same_length_rewrite_in_place_with_its_mtime_set_back_is_pushed_again_and_its_old_bytes_are_in_no_column() {
    let pg = pg_server::server();
    let (url, _tmp, agent) = fresh(pg);
    let long = "padding ".repeat(40);
    let texts = [long.as_str(), "my password is hunter2-swordfish", long.as_str(), long.as_str()];
    let file = session(&agent.join("sessions/--p--"), "secret01", &texts);
    push(&agent, &url, "m");
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    assert!(rows_holding(&mut client, "pi_entries", "hunter2-swordfish") > 0, "pushed: the secret is in the database");
    assert!(rows_holding(&mut client, "pi_sessions", "hunter2-swordfish") > 0, "and in the listing's text");

    // The secret overwritten in place, far from the first and last bytes, and the modification time set back.
    wait_past_last_change(&file);
    let before = std::fs::metadata(&file).unwrap();
    let bytes = std::fs::read(&file).unwrap();
    let at = bytes.windows(17).position(|w| w == b"hunter2-swordfish").unwrap();
    assert!(at > 256 && at + 17 < bytes.len() - 64, "the secret is neither in the head nor in the tail");
    std::os::unix::fs::FileExt::write_all_at(
        &std::fs::File::options().write(true).open(&file).unwrap(),
        b"*****************",
        at as u64,
    )
    .unwrap();
    {
        use std::os::unix::fs::MetadataExt;
        let ts = |secs: i64, nsec: i64| rustix::fs::Timespec { tv_sec: secs, tv_nsec: nsec as _ };
        let times = rustix::fs::Timestamps {
            last_access: ts(before.atime(), before.atime_nsec()),
            last_modification: ts(before.mtime(), before.mtime_nsec()),
        };
        rustix::fs::utimensat(rustix::fs::CWD, &file, &times, rustix::fs::AtFlags::empty()).unwrap();
        let after = std::fs::metadata(&file).unwrap();
        assert_eq!(
            (after.len(), after.mtime(), after.mtime_nsec()),
            (before.len(), before.mtime(), before.mtime_nsec())
        );
    }

    let report = push(&agent, &url, "m");
    assert_eq!((number(&report, "rewritten"), number(&report, "entries")), (1.0, 5.0), "{report:?}");
    assert_database_holds_exactly_the_files(&url, "m", &agent);
    assert_eq!(rows_holding(&mut client, "pi_entries", "hunter2-swordfish"), 0, "no entry column holds the old bytes");
    assert_eq!(rows_holding(&mut client, "pi_sessions", "hunter2-swordfish"), 0, "no session column holds them");
    let hits = json(&run_search(&["--catalog", &url, "search", "--json", "hunter2"]));
    assert_eq!(hits, Json::Array(Vec::new()), "team search no longer finds the secret");
}

/// A `push --watch` of the binary: its report lines and its stderr, collected as they come. Killed when dropped.
struct Watching {
    child: std::process::Child,
    reports: std::sync::mpsc::Receiver<String>,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Watching {
    fn start(agent: &Path, url: &str) -> Watching {
        let mut child = Command::new(binary())
            .args(["--agent-dir", &s(agent), "push", "--postgres", url, "--machine", "laptop", "--watch"])
            .args(["--poll-ms", "200"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, reports) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)).map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let collected = stderr.clone();
        let pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in std::io::BufRead::lines(std::io::BufReader::new(pipe)).map_while(Result::ok) {
                collected.lock().unwrap().push_str(&(line + "\n"));
            }
        });
        Watching { child, reports, stderr }
    }

    /// The next report line (within a minute).
    fn next_report(&self) -> Json {
        let line = self.reports.recv_timeout(std::time::Duration::from_secs(60));
        json(&line.unwrap_or_else(|_| panic!("no report from the watching push; stderr: {}", self.stderr())))
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits (up to `secs`) until its stderr holds `needle`.
    fn says(&mut self, needle: &str, secs: u64) {
        let ok = eventually(secs, || self.stderr().contains(needle) || self.exited());
        assert!(ok && !self.exited(), "the watching push never said {needle:?} (or exited): {}", self.stderr());
    }

    fn exited(&mut self) -> bool {
        self.child.try_wait().unwrap().is_some()
    }
}

/// A child that is killed when the test ends, passed or failed: a `push --watch` a failing assertion left behind
/// would go on running (and retrying its database) after the test and its PostgreSQL are gone.
struct KilledAtEnd(std::process::Child);

impl std::ops::Deref for KilledAtEnd {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for KilledAtEnd {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

impl Drop for KilledAtEnd {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `done` every 50 ms until it is true (true) or `secs` have passed (false).
fn eventually(secs: u64, mut done: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if done() {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// How many entry rows the database at `url` holds (None while it cannot be reached).
fn entry_rows(url: &str) -> Option<i64> {
    let mut client = postgres::Client::connect(url, postgres::NoTls).ok()?;
    client.query_one("SELECT count(*) FROM pi_entries", &[]).ok().map(|r| r.get(0))
}

/// How many complete lines the session files under `agent` hold.
fn lines_under(agent: &Path) -> i64 {
    let mut n = 0;
    for dir in std::fs::read_dir(agent.join("sessions")).unwrap().flatten() {
        for f in std::fs::read_dir(dir.path()).unwrap().flatten() {
            n += std::fs::read(f.path()).unwrap().iter().filter(|&&b| b == b'\n').count() as i64;
        }
    }
    n
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_watching_push_keeps_going_through_a_restart_of_the_database_server() {
    let mut own = pg_server::OwnServer::start();
    let url = own.database();
    let tmp = temp_dir();
    let agent = tmp.path().join("agent");
    let file = session(&agent.join("sessions/--p--"), "restart1", &["before the restart"]);
    let mut watcher = Watching::start(&agent, &url);
    assert_eq!(number(&watcher.next_report(), "pushed"), 1.0);
    own.stop();
    append_line(&file, &message_line("rest0001", "\"rest0000\"", "written while the server was down", 1));
    watcher.says("trying again", 60);
    own.start_again();
    let arrived = eventually(90, || entry_rows(&url) == Some(lines_under(&agent)) || watcher.exited());
    assert!(!watcher.exited(), "the watching push exited: {}", watcher.stderr());
    assert!(arrived, "the append never arrived after the restart: {}", watcher.stderr());
    assert_database_holds_exactly_the_files(&url, "laptop", &agent);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_watching_push_keeps_going_when_its_statement_is_cancelled() {
    let pg = pg_server::server();
    let (url, _tmp, agent) = fresh(pg);
    let file = session(&agent.join("sessions/--p--"), "cancel01", &["before the cancel"]);
    let mut watcher = Watching::start(&agent, &url);
    assert_eq!(number(&watcher.next_report(), "pushed"), 1.0);
    // Hold the entries table, so that the push's next write waits where it can be cancelled.
    let mut blocker = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let mut held = blocker.transaction().unwrap();
    held.batch_execute("LOCK TABLE pi_entries IN ACCESS EXCLUSIVE MODE").unwrap();
    append_line(&file, &message_line("canc0001", "\"canc0000\"", "written before the cancel", 1));
    let db = url.rsplit('/').next().unwrap().split('?').next().unwrap().to_owned();
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let mut cancelled = false;
    let waited = eventually(60, || {
        let rows = admin
            .query(
                "SELECT pg_cancel_backend(pid) FROM pg_stat_activity
                 WHERE datname = $1 AND application_name = 'pi-sessiond' AND wait_event_type = 'Lock'",
                &[&db],
            )
            .unwrap();
        cancelled |= rows.iter().any(|r| r.get::<_, bool>(0));
        cancelled
    });
    assert!(waited, "the push never waited for the table: {}", watcher.stderr());
    watcher.says("57014", 60);
    held.rollback().unwrap();
    let arrived = eventually(60, || entry_rows(&url) == Some(lines_under(&agent)) || watcher.exited());
    assert!(!watcher.exited(), "the watching push exited: {}", watcher.stderr());
    assert!(arrived, "the append never arrived after the cancel: {}", watcher.stderr());
    assert_database_holds_exactly_the_files(&url, "laptop", &agent);
}

/// A small tmpfs mounted (as root) on a temporary directory, owned by the server's user, holding a tablespace;
/// dropped and unmounted at the end.
struct SmallDisk {
    dir: tempfile::TempDir,
    tablespace: String,
    admin: postgres::Client,
}

impl SmallDisk {
    fn mount(pg: &pg_server::Server, size: &str) -> SmallDisk {
        let dir = temp_dir();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700,uid=65534,gid=65534"), "tmpfs"])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(status.success(), "mount a tmpfs");
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tablespace = format!("small_{}_{n}", std::process::id());
        let mut admin = pg.admin();
        admin.batch_execute(&format!("CREATE TABLESPACE {tablespace} LOCATION '{}'", s(dir.path()))).unwrap();
        SmallDisk { dir, tablespace, admin }
    }

    fn grow(&self, size: &str) {
        let status =
            Command::new("mount").args(["-o", &format!("remount,size={size}")]).arg(self.dir.path()).status().unwrap();
        assert!(status.success(), "grow the tmpfs");
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let db: Vec<String> = self
            .admin
            .query(
                "SELECT d.datname FROM pg_database d JOIN pg_tablespace t ON t.oid = d.dattablespace
                 WHERE t.spcname = $1",
                &[&self.tablespace],
            )
            .map(|rows| rows.iter().map(|r| r.get(0)).collect())
            .unwrap_or_default();
        for name in db {
            let _ = self.admin.batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)"));
        }
        let _ = self.admin.batch_execute(&format!("DROP TABLESPACE {}", self.tablespace));
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}

#[test]
#[ignore = "needs PostgreSQL and root"]
fn a_watching_push_keeps_going_through_a_full_disk() {
    let pg = pg_server::server();
    assert!(pg_server::is_root(), "the disk-full test mounts a tmpfs: run it as root (CI does)");
    // The database lives on a disk with room for its catalog, the schema and a small session, not much more.
    let disk = SmallDisk::mount(pg, "16m");
    let url = pg.database_in(&disk.tablespace);
    let tmp = temp_dir();
    let agent = tmp.path().join("agent");
    session(&agent.join("sessions/--p--"), "small001", &["fits on the disk"]);
    let mut watcher = Watching::start(&agent, &url);
    assert_eq!(number(&watcher.next_report(), "pushed"), 1.0, "{}", watcher.stderr());
    // Sessions that do not fit: text that does not compress, searched and so indexed.
    let mut r = Rng::new(53);
    for i in 0..4 {
        let texts: Vec<String> = (0..60).map(|_| (0..2000).map(|_| r.hex8()).collect::<Vec<_>>().join(" ")).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        session(&agent.join("sessions/--big--"), &format!("big{i:05}"), &refs);
    }
    watcher.says("53100", 120);
    disk.grow("1g");
    let arrived = eventually(120, || entry_rows(&url) == Some(lines_under(&agent)) || watcher.exited());
    assert!(!watcher.exited(), "the watching push exited: {}", watcher.stderr());
    assert!(arrived, "the sessions never arrived once there was room: {}", watcher.stderr());
    assert_database_holds_exactly_the_files(&url, "laptop", &agent);
    drop(watcher);
}

/// A deterministic string of `n` characters from `alphabet` (fake secrets in real formats: random enough to pass
/// the rules' entropy checks, and unique enough to be searched for).
fn fake(rng: &mut Rng, alphabet: &str, n: usize) -> String {
    let chars: Vec<char> = alphabet.chars().collect();
    (0..n).map(|_| chars[rng.below(chars.len())]).collect()
}

/// Fake secrets of many kinds in their real formats: (what the text holds, the part no stored byte may hold).
fn fake_secrets() -> Vec<(String, String)> {
    const UPPER: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    const B32: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    const URLSAFE: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const HEX: &str = "0123456789abcdef";
    const B64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let r = &mut Rng::new(2026);
    let whole = |v: String| (v.clone(), v);
    let mut out = vec![
        whole(format!("AKIA{}", fake(r, B32, 16))),
        whole(format!("ghp_{}", fake(r, ALNUM, 36))),
        whole(format!("github_pat_{}_{}", fake(r, ALNUM, 22), fake(r, ALNUM, 59))),
        whole(format!("glpat-{}", fake(r, URLSAFE, 20))),
        whole(format!("xoxb-{}-{}-{}", fake(r, "0123456789", 12), fake(r, "0123456789", 13), fake(r, ALNUM, 24))),
        whole(format!("sk_live_{}", fake(r, ALNUM, 24))),
        whole(format!("sk-ant-api03-{}-{}AA", fake(r, URLSAFE, 80), fake(r, URLSAFE, 11))),
        whole(format!("sk-proj-{}T3BlbkFJ{}", fake(r, URLSAFE, 58), fake(r, URLSAFE, 58))),
        whole(format!("AIza{}", fake(r, URLSAFE, 35))),
        whole(format!("npm_{}", fake(r, ALNUM, 36))),
        whole(format!("pypi-AgEIcHlwaS5vcmc{}", fake(r, URLSAFE, 70))),
        whole(format!("hf_{}", fake(r, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", 34))),
        whole(format!("SG.{}.{}", fake(r, URLSAFE, 22), fake(r, URLSAFE, 43))),
        whole(format!("dop_v1_{}", fake(r, HEX, 64))),
        whole(format!("dckr_pat_{}", fake(r, URLSAFE, 27))),
        whole(format!("shpat_{}", fake(r, HEX, 32))),
        whole(format!(
            "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiI{}.{}",
            fake(r, ALNUM, 30),
            fake(r, URLSAFE, 43)
        )),
    ];
    let slack = fake(r, UPPER, 24);
    out.push((
        format!("https://hooks.slack.com/services/T{}/B{}/{slack}", fake(r, UPPER, 8), fake(r, UPPER, 10)),
        slack,
    ));
    let aws_secret = fake(r, B64, 40);
    out.push((format!("aws_secret_access_key = {aws_secret}"), aws_secret));
    let url_password = format!("Pw{}", fake(r, ALNUM, 14));
    out.push((format!("postgres://admin:{url_password}@db.internal:5432/app"), url_password));
    let redis_password = format!("r3d{}", fake(r, ALNUM, 14));
    out.push((format!("redis://:{redis_password}@cache:6379/0"), redis_password));
    let env_password = format!("pw-{}", fake(r, ALNUM, 12));
    out.push((format!("DATABASE_PASSWORD={env_password}"), env_password));
    let key_body = fake(r, B64, 64);
    out.push((
        format!(
            "-----BEGIN OPENSSH PRIVATE KEY-----\n{key_body}\n{}\n-----END OPENSSH PRIVATE KEY-----",
            fake(r, B64, 64)
        ),
        key_body,
    ));
    let api_key = fake(r, ALNUM, 32);
    out.push((format!("config: {{\"api_key\": \"{api_key}\"}}"), api_key));
    out
}

/// Every text, bytea and jsonb column of every table in the database that holds `needle` (as text, or as bytes).
fn columns_holding(client: &mut postgres::Client, needle: &str) -> Vec<String> {
    let columns = client
        .query(
            "SELECT table_name::text, column_name::text, data_type::text FROM information_schema.columns
             WHERE table_schema = 'public' AND data_type IN ('text', 'bytea', 'jsonb', 'character varying', 'json')",
            &[],
        )
        .unwrap();
    assert!(columns.len() >= 20, "the columns of pi_sessions and pi_entries are looked at: {}", columns.len());
    let mut holding = Vec::new();
    for c in columns {
        let (table, column, kind): (String, String, String) = (c.get(0), c.get(1), c.get(2));
        let test = if kind == "bytea" {
            format!(r#"position(convert_to($1, 'UTF8') IN "{column}") > 0"#)
        } else {
            format!(r#"strpos("{column}"::text, $1) > 0"#)
        };
        let n: i64 =
            client.query_one(&format!(r#"SELECT count(*) FROM "{table}" WHERE {test}"#), &[&needle]).unwrap().get(0);
        if n > 0 {
            holding.push(format!("{table}.{column}"));
        }
    }
    holding
}

/// A password cut off before the `@` that makes it one: what the last line of [`secret_session`] stops in.
const CUT_PASSWORD: &str = "W4tchH4lfP4ssw0rdXyz";

/// A session whose every kind of entry text holds the fake secrets, each between ordinary words (an assistant's
/// tool call holds them as a member's name too); its last line is unterminated (a write in progress) and holds
/// one, then stops inside a URL's password ([`CUT_PASSWORD`]), where no rule can know it is one yet.
fn secret_session(dir: &Path, secrets: &[(String, String)]) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("2026-01-01T00-00-00-000Z_secrets01.jsonl");
    let header = serde_json::json!({"type":"session","version":3,"id":"secrets01","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/proj"});
    let mut lines = vec![header.to_string()];
    let mut parent = serde_json::Value::Null;
    for (i, (text, _)) in secrets.iter().enumerate() {
        let said = format!("ordinary words before {text} and plain words after {i}");
        let id = format!("e{i:07}");
        let message = match i % 4 {
            0 => serde_json::json!({"role":"user","content":said,"timestamp":1_767_225_600_000u64 + i as u64}),
            1 => serde_json::json!({"role":"assistant","content":[{"type":"text","text":said},
                    {"type":"toolCall","id":format!("call{i}"),"name":"bash","arguments":{"command":format!("echo {text}"),"env":{text.clone():"as a member's name"}}}],
                    "api":"x","provider":"x","model":"x","usage":{"input":1,"output":1,"cacheRead":0,"cacheWrite":0,"totalTokens":2,
                    "cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},"stopReason":"stop","timestamp":1_767_225_600_000u64 + i as u64}),
            2 => serde_json::json!({"role":"toolResult","toolCallId":format!("call{i}"),"toolName":"bash",
                    "content":[{"type":"text","text":said}],"isError":false,"timestamp":1_767_225_600_000u64 + i as u64}),
            _ => {
                serde_json::json!({"role":"user","content":[{"type":"text","text":said}],"timestamp":1_767_225_600_000u64 + i as u64})
            }
        };
        lines.push(
            serde_json::json!({"type":"message","id":id,"parentId":parent,"timestamp":"2026-01-01T00:00:01.000Z","message":message})
                .to_string(),
        );
        parent = serde_json::Value::String(id);
    }
    let name = serde_json::json!({"type":"session_info","id":"name0001","parentId":parent,"timestamp":"2026-01-01T00:00:02.000Z",
        "name":format!("deploy with {}", secrets[0].0)});
    lines.push(name.to_string());
    let mut bytes = lines.join("\n") + "\n";
    bytes.push_str(&format!(
        r#"{{"type":"message","id":"tail0001","parentId":"name0001","message":{{"role":"user","content":"half {} then postgres://admin:{CUT_PASSWORD}"#,
        secrets[1].0
    ));
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_push_stores_no_secret_of_24_kinds_nor_half_a_line_s_in_any_column_and_keeps_the_words_around_them() {
    let pg = pg_server::server();
    let (url, _tmp, agent) = fresh(pg);
    let secrets = fake_secrets();
    assert!(secrets.len() >= 15);
    let file = secret_session(&agent.join("sessions/--proj--"), &secrets);
    let before = std::fs::read(&file).unwrap();
    let report = push(&agent, &url, "m");
    assert_eq!(number(&report, "pushed"), 1.0, "{report:?}");
    assert_eq!(std::fs::read(&file).unwrap(), before, "the local session file is not changed");

    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    for (text, needle) in &secrets {
        let holding = columns_holding(&mut client, needle);
        assert!(holding.is_empty(), "{text:?} is stored in {holding:?}");
    }
    let holding = columns_holding(&mut client, CUT_PASSWORD);
    assert!(holding.is_empty(), "the line still being written is stored in {holding:?}");
    // What was around each secret is kept, with a marker naming the rule where the secret was.
    let hits = run_search(&["--catalog", &url, "search", "--json", "--limit", "100", "ordinary words before"]);
    assert_eq!(hits.matches("\"snippet\":\"ordinary words before ").count(), secrets.len(), "{hits}");
    for rule in ["aws-access-key", "private-key", "password-in-url", "env-secret", "jwt", "openai-key", "anthropic-key"]
    {
        assert!(!columns_holding(&mut client, &format!("[redacted: {rule}]")).is_empty(), "no marker of {rule}");
    }
    // Every stored line is still JSON, and the session opens from the database as its file opens here.
    let raws = client.query("SELECT raw FROM pi_entries", &[]).unwrap();
    for r in &raws {
        let raw: Vec<u8> = r.get(0);
        assert!(serde_json::from_slice::<serde_json::Value>(&raw).is_ok(), "{}", String::from_utf8_lossy(&raw));
    }
    let path = s(&file);
    let mut catalog = TeamCatalog::open(&Target::from_env(&url).unwrap()).unwrap();
    let pushed = catalog.read_file("m", &path).unwrap().expect("pushed");
    let remote = SessionManager::open_pushed(&path, &pushed.bytes, Default::default()).expect("opens");
    let local = SessionManager::open(&path, None, None, Default::default()).unwrap();
    assert_eq!(remote.entry_count(), local.entry_count());

    // Pushing again sends nothing: the file is judged unchanged though its stored lines differ from it.
    let again = push(&agent, &url, "m");
    assert_eq!((number(&again, "pushed"), number(&again, "entries")), (0.0, 0.0), "{again:?}");

    // The same push with --no-redact stores them: the search above can see a secret where there is one.
    let plain = pg.database();
    run(&["--agent-dir", &s(&agent), "push", "--postgres", &plain, "--machine", "m", "--no-redact"]);
    let mut client = postgres::Client::connect(&plain, postgres::NoTls).unwrap();
    assert!(!columns_holding(&mut client, &secrets[0].1).is_empty());
}

#[test]
fn an_export_holds_no_secret_unless_asked_and_a_team_rule_file_adds_its_own_patterns() {
    let tmp = temp_dir();
    let agent = tmp.path().join("agent");
    let mut secrets = fake_secrets();
    secrets.push(("ticket ACME-884211-SECRET".to_owned(), "ACME-884211".to_owned()));
    let file = secret_session(&agent.join("sessions/--proj--"), &secrets);
    let rules = tmp.path().join("team-rules.toml");
    std::fs::write(&rules, "[[rules]]\nid = \"acme-ticket\"\nregex = '''ACME-[0-9]{6}'''\nkeywords = [\"acme-\"]\n")
        .unwrap();
    let out = tmp.path().join("out.html");
    let export = |extra: &[&str]| {
        let mut args = vec!["--agent-dir".to_owned(), s(&agent), "export".to_owned(), s(&file)];
        args.extend(["--html", "-o", &s(&out)].map(str::to_owned));
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        run(&args.iter().map(String::as_str).collect::<Vec<_>>());
        std::fs::read_to_string(&out).unwrap()
    };
    // The page's JSON writes `/` as `\/`.
    let holds = |page: &str, needle: &str| page.contains(needle) || page.contains(&needle.replace('/', "\\/"));
    let page = export(&["--redact-rules", &s(&rules)]);
    for (text, needle) in &secrets {
        assert!(!holds(&page, needle), "{text:?} is in the export");
    }
    assert!(page.contains("[redacted: acme-ticket]") && page.contains("[redacted: github-token]"));
    assert!(page.matches("plain words after").count() >= secrets.len());
    let plain = export(&["--no-redact"]);
    assert!(secrets.iter().all(|(_, needle)| holds(&plain, needle)), "--no-redact exports them as they are");
    let (status, _, stderr) =
        push_args(&s(&agent), "postgres://127.0.0.1:1/x", &["--redact-rules", "/no/such/rules.toml"], None);
    assert_eq!(status, Some(2), "{stderr}");
    assert!(stderr.contains("/no/such/rules.toml"), "{stderr}");
}

/// A session file of `cwd` with one message, last modified at `modified` (seconds since the epoch).
fn session_of(agent: &Path, cwd: &str, id: &str, modified: u64) -> String {
    let dir = agent.join("sessions").join(format!("-{}-", cwd.trim_matches('/').replace('/', "-")));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("2026-01-01T00-00-00-000Z_{id}.jsonl"));
    let header =
        serde_json::json!({"type":"session","version":3,"id":id,"timestamp":"2026-01-01T00:00:00.000Z","cwd":cwd});
    std::fs::write(&path, format!("{header}\n{}", message_line(&format!("{id:.4}0000"), "null", "hello", 0))).unwrap();
    let f = std::fs::File::options().write(true).open(&path).unwrap();
    f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(modified)).unwrap();
    s(&path)
}

/// The (machine's) pushed session ids, sorted.
fn pushed_ids(url: &str) -> Vec<String> {
    let mut client = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let rows = client.query("SELECT session_id FROM pi_sessions ORDER BY session_id", &[]).unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_push_with_include_exclude_and_since_holds_exactly_the_chosen_projects_and_ages() {
    let pg = pg_server::server();
    let (url, _tmp, agent) = fresh(pg);
    let (old, new) = (1_700_000_000, 1_790_000_000); // 2023-11 and 2026-09
    session_of(&agent, "/work/shop", "shop-new", new);
    session_of(&agent, "/work/shop", "shop-old", old);
    session_of(&agent, "/work/shop/api", "api-new", new);
    session_of(&agent, "/work/blog", "blog-new", new);
    session_of(&agent, "/home/al/private", "private-new", new);
    let chosen = ["--include", "/work/**", "--exclude", "**/api", "--since", "2025-01-01"];
    let (status, _, stderr) = push_args(&s(&agent), &url, &chosen, None);
    assert_eq!(status, Some(0), "{stderr}");
    assert_eq!(pushed_ids(&url), ["blog-new", "shop-new"]);

    // Without filters everything goes; with them again, what they leave out is deleted.
    push_args(&s(&agent), &url, &[], None);
    assert_eq!(pushed_ids(&url).len(), 5);
    push_args(&s(&agent), &url, &["--include", "/work/shop", "--include", "/home/**"], None);
    assert_eq!(pushed_ids(&url), ["private-new", "shop-new", "shop-old"]);

    for bad in [["--since", "not a date"], ["--include", "a[b"]] {
        let (status, _, stderr) = push_args(&s(&agent), &url, &bad, None);
        assert_eq!(status, Some(2), "{bad:?} is refused: {stderr}");
        assert!(stderr.contains(bad[0]), "{stderr}");
    }
    assert_eq!(pushed_ids(&url).len(), 3, "a refused push deletes nothing");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_pushed_image_is_a_placeholder_with_its_type_size_and_hash_unless_kept() {
    let pg = pg_server::server();
    let (url, _tmp, agent) = fresh(pg);
    let file = session_of(&agent, "/work/shop", "img00001", 1_790_000_000);
    // 3,000 bytes of a fake PNG as base64 (4,000 characters, no padding).
    let data = fake(&mut Rng::new(7), "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", 4000);
    let line = serde_json::json!({"type":"message","id":"img1","parentId":"img00000","timestamp":"2026-01-01T00:00:01.000Z",
        "message":{"role":"user","content":[{"type":"text","text":"look at this"},{"type":"image","data":data,"mimeType":"image/png"}],"timestamp":1}});
    append_line(Path::new(&file), &format!("{line}\n"));
    let raw_of_image = |url: &str| -> String {
        let mut client = postgres::Client::connect(url, postgres::NoTls).unwrap();
        let raw: Vec<u8> = client.query_one("SELECT raw FROM pi_entries WHERE entry_id = 'img1'", &[]).unwrap().get(0);
        String::from_utf8(raw).unwrap()
    };
    push(&agent, &url, "m");
    let stored = json(&raw_of_image(&url));
    let block = &stored.get("message").unwrap().get("content").map(|c| match c {
        Json::Array(items) => items[1].clone(),
        other => panic!("{other:?}"),
    });
    let block = block.as_ref().unwrap();
    assert_eq!(str_of(block.get("mimeType").unwrap()), "image/png");
    assert_eq!(str_of(block.get("data").unwrap()), "");
    let omitted = block.get("omitted").expect("a placeholder");
    assert_eq!(number(omitted, "bytes"), 3000.0);
    let hash = str_of(omitted.get("sha256").unwrap());
    assert_eq!(hash.len(), 64);
    assert!(!raw_of_image(&url).contains(&data[..100]), "no pixels are stored");

    let kept = pg.database();
    run(&["--agent-dir", &s(&agent), "push", "--postgres", &kept, "--machine", "m", "--keep-images"]);
    assert!(raw_of_image(&kept).contains(&data), "--keep-images stores the image");
}

/// `count` sessions under `agent`'s project `--p--` named `{prefix}NNNN`, each with `entries` messages and its file
/// last changed `days_ago` days ago; their ids.
fn aged_sessions(agent: &Path, prefix: &str, count: usize, entries: usize, days_ago: u64) -> Vec<String> {
    let dir = agent.join("sessions/--p--");
    let texts: Vec<String> = (0..entries).map(|i| format!("retention entry {i}")).collect();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    (0..count)
        .map(|i| {
            let id = format!("{prefix}{i:04}");
            let path = session(&dir, &id, &texts);
            let when = std::time::SystemTime::now() - std::time::Duration::from_secs(days_ago * 86_400);
            std::fs::File::options().write(true).open(&path).unwrap().set_modified(when).unwrap();
            id
        })
        .collect()
}

/// The database's sessions as (machine, session id, entries), and how many entries have no session.
fn sessions_and_orphans(url: &str) -> (Vec<(String, String, i64)>, i64) {
    let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let sessions = c
        .query(
            "SELECT s.machine, s.session_id, (SELECT count(*) FROM pi_entries e WHERE e.sid = s.sid)
             FROM pi_sessions s ORDER BY 1, 2",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let orphans = c
        .query_one(
            "SELECT count(*) FROM pi_entries e WHERE NOT EXISTS (SELECT 1 FROM pi_sessions s WHERE s.sid = e.sid)",
            &[],
        )
        .unwrap()
        .get(0);
    (sessions, orphans)
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_prune_killed_at_random_moments_then_rerun_deletes_exactly_the_old_sessions_and_leaves_no_orphans() {
    let pg = pg_server::server();
    let url = pg.database();
    let tmp = temp_dir();
    let (a, b) = (tmp.path().join("a/agent"), tmp.path().join("b/agent"));
    let a_old = aged_sessions(&a, "aold", 3, 300, 200);
    let a_new = aged_sessions(&a, "anew", 2, 20, 2);
    let b_old = aged_sessions(&b, "bold", 6, 2000, 120);
    let b_new = aged_sessions(&b, "bnew", 3, 20, 0);
    push(&a, &url, "a");
    push(&b, &url, "b");
    let row = |m: &str, id: &String, n: usize| (m.to_owned(), id.clone(), n as i64 + 1);
    let (all, _) = sessions_and_orphans(&url);
    assert_eq!(all.len(), 14, "{all:?}");

    // push --prune: this machine's old sessions go (and are not sent again); another machine's stay.
    let pruning =
        ["--agent-dir", &s(&a), "push", "--postgres", &url, "--machine", "a", "--prune", "--older-than", "30d"];
    let (ok, out, err) = run_env(&pruning, &[]);
    assert!(ok, "{err}");
    assert_eq!(number(&json(out.trim()), "deleted"), 3.0, "{out}");
    let (ok, out, err) = run_env(&pruning, &[]);
    assert!(ok && number(&json(out.trim()), "pushed") == 0.0, "a second pruning push sent something: {out}{err}");
    let mut expected: Vec<_> = a_new.iter().map(|id| row("a", id, 20)).collect();
    expected.extend(b_old.iter().map(|id| row("b", id, 2000)));
    expected.extend(b_new.iter().map(|id| row("b", id, 20)));
    expected.sort();
    assert_eq!(sessions_and_orphans(&url), (expected.clone(), 0));
    drop(a_old);

    // A duration that is not one is refused, and nothing is deleted.
    let (ok, _, err) = run_env(&["team", "prune", "--postgres", &url, "--older-than", "soon"], &[]);
    assert!(!ok && err.contains("--older-than"), "{err}");
    assert_eq!(sessions_and_orphans(&url), (expected.clone(), 0));

    // team prune, killed at random moments: every time either all of the old sessions are gone or none, and no
    // entry is left without its session.
    let old_gone: Vec<_> = expected.iter().filter(|(m, id, _)| m == "a" || !id.starts_with("bold")).cloned().collect();
    let mut rng = Rng::new(23);
    for round in 0..10 {
        let mut child = Command::new(binary())
            .args(["team", "prune", "--postgres", &url, "--older-than", "30d"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(rng.below(120) as u64));
        let _ = child.kill();
        let _ = child.wait();
        let now = sessions_and_orphans(&url);
        assert!(now == (expected.clone(), 0) || now == (old_gone.clone(), 0), "round {round}: {now:?}");
        if now.0 == old_gone {
            break;
        }
    }
    let out = run(&["team", "prune", "--postgres", &url, "--older-than", "30d"]);
    let report = json(out.trim());
    assert!(number(&report, "deleted") == 0.0 || number(&report, "deleted") == 6.0, "{out}");
    assert_eq!(sessions_and_orphans(&url), (old_gone, 0));
}

/// `usage --json` with these global arguments (and `usage`'s own), as rows keyed by their group.
fn usage_rows(global: &[&str], own: &[&str], by: &str) -> BTreeMap<String, Json> {
    let mut all = global.to_vec();
    all.push("usage");
    all.extend(own);
    all.extend(["--by", by, "--json"]);
    let Ok(rows) = json(run(&all).trim()).into_array() else { panic!("usage --json is an array") };
    rows.into_iter().map(|r| (str_of(r.get(by).unwrap_or_else(|| panic!("a {by} member: {r:?}"))), r)).collect()
}

/// Rows of two machines added up group by group, as the team's sums should be.
fn added(a: &BTreeMap<String, Json>, b: &BTreeMap<String, Json>, by: &str) -> BTreeMap<String, Json> {
    let fields = ["input", "output", "cacheRead", "cacheWrite", "totalTokens", "cost"];
    let mut out = BTreeMap::new();
    for key in a.keys().chain(b.keys()) {
        let mut row = pi_sessiond::session::json::Object::new();
        row.insert(by, Json::str(key));
        for f in fields {
            let sum = [a.get(key), b.get(key)]
                .into_iter()
                .flatten()
                .map(|r| number(r, f))
                .fold(None, |acc, v| Some(acc.map_or(v, |t: f64| t + v)));
            row.insert(f, Json::number(sum.unwrap()));
        }
        out.insert(key.clone(), Json::Object(row));
    }
    out
}

#[test]
#[ignore = "needs PostgreSQL"]
fn usage_across_the_catalog_equals_each_machines_own_usage_added_up() {
    let pg = pg_server::server();
    let url = pg.database();
    let tmp = temp_dir();
    let laptop = crate::usage::agent(&tmp.path().join("laptop"));
    let ci = crate::usage::agent(&tmp.path().join("ci"));
    // The second machine differs: a project of its own, a tool result whose `usage` member is written with an
    // escape (JSON.parse reads it as `usage`, so pi counts it; the database must not leave it out), and a last
    // line with usage and no newline after it (pi reads it too).
    let third = ci.join("sessions").join(pi_sessiond::session::paths::encode_cwd("/work/third"));
    std::fs::create_dir_all(&third).unwrap();
    let id = "0193bbbb-0040-7000-8000-000000000000";
    let escaped = crate::usage::session(id, "/work/third", "2026-02-02", 40)
        .replace(r#""isError":false,"usage""#, r#""isError":false,"\u0075sage""#);
    assert!(escaped.contains(r#""\u0075sage""#));
    let last = format!(
        r#"{{"id":"z1","parentId":"b2","timestamp":"2026-02-02T10:00:30.000Z","type":"usage","provider":"other","model":"tail","usage":{}}}"#,
        crate::usage::usage_json(1, 2, 3, 4, "0.5")
    );
    let escaped = escaped + &last;
    std::fs::write(third.join(format!("2026-02-02T10-00-00-000Z_{id}.jsonl")), escaped).unwrap();
    push(&laptop, &url, "laptop");
    push(&ci, &url, "ci");

    for (by, since) in [("day", None), ("model", None), ("project", None), ("day", Some("2026-01-31"))] {
        let since_args: Vec<&str> = since.map(|d| vec!["--since", d]).unwrap_or_default();
        let local = |agent: &Path| usage_rows(&["--agent-dir", &s(agent)], &since_args, by);
        let expected = added(&local(&laptop), &local(&ci), by);
        let team = usage_rows(&["--catalog", &url], &since_args, by);
        assert_eq!(
            team.values().map(Json::to_canonical_string).collect::<Vec<_>>(),
            expected.values().map(Json::to_canonical_string).collect::<Vec<_>>(),
            "--by {by} --since {since:?}"
        );
        assert!(team.len() >= 3, "--by {by}: {team:?}");
    }
    assert!(usage_rows(&["--catalog", &url], &[], "project").contains_key("/work/third"));
    assert!(usage_rows(&["--catalog", &url], &[], "model").contains_key("other/tail"), "the unterminated last line");

    // By machine: each machine's total is its own usage's total (tokens are whole numbers; the cost is summed in
    // another order than the day rows, so it is compared to a billionth).
    let machines = usage_rows(&["--catalog", &url], &[], "machine");
    assert_eq!(machines.keys().collect::<Vec<_>>(), ["ci", "laptop"]);
    for (name, agent) in [("ci", &ci), ("laptop", &laptop)] {
        let own = usage_rows(&["--agent-dir", &s(agent)], &[], "day");
        for f in ["input", "output", "cacheRead", "cacheWrite", "totalTokens", "cost"] {
            let total: f64 = own.values().map(|r| number(r, f)).sum();
            let got = number(&machines[name], f);
            assert!((got - total).abs() <= total.abs() * 1e-9, "{name} {f}: {got} against {total}");
        }
    }
    // Each person sums what their role may read: a viewer granted both machines the same as the owner; a role
    // refused the entry rows gets an error, never sums that leave those rows out.
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    admin
        .batch_execute(
            "CREATE ROLE usage_viewer LOGIN; GRANT SELECT ON ALL TABLES IN SCHEMA public TO usage_viewer;
             CREATE ROLE usage_blind LOGIN; GRANT SELECT ON pi_sessions, pi_sessiond_schema TO usage_blind",
        )
        .unwrap();
    team_access("grant", &url, "usage_viewer", &["--machine", "laptop", "--machine", "ci"]);
    team_access("grant", &url, "usage_blind", &["--machine", "laptop", "--machine", "ci"]);
    admin.batch_execute("REVOKE SELECT ON pi_entries FROM usage_blind").unwrap();
    let canonical = |rows: BTreeMap<String, Json>| rows.values().map(Json::to_canonical_string).collect::<Vec<_>>();
    let viewer = url.replacen("postgres@", "usage_viewer@", 1);
    assert_eq!(
        canonical(usage_rows(&["--catalog", &viewer], &[], "model")),
        canonical(usage_rows(&["--catalog", &url], &[], "model"))
    );
    let blind = url.replacen("postgres@", "usage_blind@", 1);
    let out = Command::new(binary()).args(["--catalog", &blind, "usage", "--json"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    assert!(stdout.contains("catalog_unavailable") && stdout.contains("permission denied"), "{stdout}");

    let out = Command::new(binary()).args(["--agent-dir", &s(&laptop), "usage", "--by", "machine"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "--by machine without --catalog is refused");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--catalog"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `url` with `role` as its user (the tests' server trusts every role but one).
fn as_role(url: &str, role: &str) -> String {
    url.replacen("postgres@", &format!("{role}@"), 1)
}

/// Creates login roles with plain SQL, as an admin does (roles belong to the server: names are the test's own).
fn create_roles(url: &str, roles: &[&str]) {
    let mut admin = postgres::Client::connect(url, postgres::NoTls).unwrap();
    for r in roles {
        admin.batch_execute(&format!("CREATE ROLE {r} LOGIN")).unwrap();
    }
}

/// `team grant` (or `revoke`) of the binary; its JSON answer.
fn team_access(verb: &str, url: &str, role: &str, args: &[&str]) -> Json {
    let mut all = vec!["team", verb, "--postgres", url, "--role", role];
    all.extend_from_slice(args);
    json(run(&all).trim())
}

/// One query through `psql` as the URL's role: its rows, a line each, fields separated by `|`.
fn psql(url: &str, sql: &str) -> Vec<String> {
    let out = Command::new(pg_server::psql())
        .args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", sql])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "psql {sql}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(str::to_owned).collect()
}

/// The machines of a `--catalog ls --json --all` listing (as the role of `url` sees it), sorted.
fn listed_machines(url: &str) -> Vec<String> {
    by_machine(&json(&run(&["--catalog", url, "ls", "--json", "--all"]))).into_keys().collect()
}

/// The machines of the hits of a `--catalog search` for `query`, one per hit, sorted.
fn hit_machines(url: &str, query: &str) -> Vec<String> {
    let Ok(hits) = json(&run_search(&["--catalog", url, "search", "--json", query])).into_array() else { panic!() };
    let mut m: Vec<String> = hits.iter().map(|h| str_of(h.get("machine").unwrap())).collect();
    m.sort();
    m
}

#[test]
#[ignore = "needs PostgreSQL"]
fn two_viewer_roles_granted_different_machines_each_list_search_and_open_only_theirs_and_psql_shows_the_same() {
    use crate::support::sidecar::{Sidecar, Wire};
    let pg = pg_server::server();
    let url = pg.database();
    let tmp = temp_dir();
    let (a, b) = (tmp.path().join("a/agent"), tmp.path().join("b/agent"));
    let on_a = session(&a.join("sessions/--proj--"), "aaaa0001", &["lighthouse on the laptop", "more"]);
    let on_b = session(&b.join("sessions/--proj--"), "bbbb0001", &["lighthouse on the runner"]);
    session(&b.join("sessions/--other--"), "bbbb0002", &["another lighthouse"]);
    push(&a, &url, "laptop");
    push(&b, &url, "ci");
    create_roles(&url, &["rls_alice", "rls_bob", "rls_nobody"]);
    let granted = team_access("grant", &url, "rls_alice", &["--machine", "laptop"]);
    assert_eq!(granted, json(r#"{"role":"rls_alice","grants":[{"machine":"laptop","read":true,"push":false}]}"#));
    team_access("grant", &url, "rls_bob", &["--machine", "ci"]);
    // The owner (the admin, who pushed here) still sees every machine.
    assert_eq!(listed_machines(&url), ["ci", "laptop"]);
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let entries_of = |admin: &mut postgres::Client, m: &str| -> i64 {
        admin
            .query_one("SELECT count(*) FROM pi_entries JOIN pi_sessions USING (sid) WHERE machine = $1", &[&m])
            .unwrap()
            .get(0)
    };

    for (role, mine, theirs, their_file) in [("rls_alice", "laptop", "ci", &on_b), ("rls_bob", "ci", "laptop", &on_a)] {
        let as_it = as_role(&url, role);
        assert_eq!(listed_machines(&as_it), [mine], "{role} lists");
        let hits = hit_machines(&as_it, "lighthouse");
        assert!(!hits.is_empty() && hits.iter().all(|m| m == mine), "{role} searches: {hits:?}");
        // psql as the role sees exactly that machine's rows, and entries only of its sessions.
        assert_eq!(psql(&as_it, "SELECT DISTINCT machine FROM pi_sessions"), [mine], "{role} in psql");
        let entries = psql(&as_it, "SELECT count(*) FROM pi_entries");
        assert_eq!(entries, [entries_of(&mut admin, mine).to_string()], "{role}'s entries in psql");
        // The owner's search function, asked by the role for every session id there could be, finds only
        // entries of its own sessions.
        let matching = psql(
            &as_it,
            "SELECT count(*) FROM pi_sessiond_matching_entries(current_user,
               ARRAY(SELECT generate_series(1, 1000))::bigint[], ARRAY['%lighthouse%'], true, '{}')",
        );
        let own_matching: i64 = admin
            .query_one(
                "SELECT count(*) FROM pi_entries JOIN pi_sessions USING (sid)
                 WHERE machine = $1 AND search_text ILIKE '%lighthouse%'",
                &[&mine],
            )
            .unwrap()
            .get(0);
        assert_eq!(matching, [own_matching.to_string()], "{role}: the function's candidates");
        // Nor can it ask as a role it may not become.
        let out = Command::new(pg_server::psql())
            .args(["-X", "-At", "-d", &as_it, "-c"])
            .arg("SELECT count(*) FROM pi_sessiond_matching_entries('postgres', ARRAY[1]::bigint[], '{}', true, '{}')")
            .output()
            .unwrap();
        assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("permission denied"));
        // A read-only open through the sidecar: its own machine's session opens; the other's is not there.
        let mut sc = Sidecar::spawn(Wire::Jsonl, &["--agent-dir", &s(tmp.path()), "--catalog", &as_it], &[]);
        let own = if mine == "laptop" { &on_a } else { &on_b };
        let opened = sc.call("session/open", json(&format!(r#"{{"path":"{}","machine":"{mine}"}}"#, s(own))));
        let handle = opened.get("handle").unwrap().to_canonical_string();
        let read = sc.call("session/getEntries", json(&format!(r#"{{"handle":{handle}}}"#)));
        assert!(read
            .to_canonical_string()
            .contains(&format!("lighthouse on the {}", if mine == "ci" { "runner" } else { "laptop" })));
        let err = sc.call_err("session/open", json(&format!(r#"{{"path":"{}","machine":"{theirs}"}}"#, s(their_file))));
        assert_eq!(err.get("data").and_then(|d| d.get("kind")), Some(&Json::str("session_not_found")), "{err:?}");
    }

    // No grant, nothing seen, even with every table privilege a viewer had before grants existed: not through
    // pi-sessiond, not through psql.
    admin.batch_execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO rls_nobody").unwrap();
    let nobody = as_role(&url, "rls_nobody");
    assert_eq!(json(&run(&["--catalog", &nobody, "ls", "--json", "--all"])), Json::Array(Vec::new()));
    assert!(hit_machines(&nobody, "lighthouse").is_empty());
    assert_eq!(psql(&nobody, "SELECT count(*) FROM pi_sessions"), ["0"]);
    assert_eq!(psql(&nobody, "SELECT count(*) FROM pi_entries"), ["0"]);

    // Revoking takes it back at once; the other role keeps its own.
    let left = team_access("revoke", &url, "rls_alice", &["--machine", "laptop"]);
    assert_eq!(left, json(r#"{"role":"rls_alice","grants":[]}"#));
    assert!(listed_machines(&as_role(&url, "rls_alice")).is_empty());
    assert_eq!(psql(&as_role(&url, "rls_alice"), "SELECT count(*) FROM pi_entries"), ["0"]);
    assert_eq!(listed_machines(&as_role(&url, "rls_bob")), ["ci"]);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_role_that_makes_its_own_temporary_pi_grants_still_sees_and_changes_only_what_it_was_granted() {
    // Every role may create temporary tables, and an unqualified name is looked up in pg_temp first: a temporary
    // `pi_grants` granting itself every machine had opened the policies and the owner's search function to it.
    let pg = pg_server::server();
    let url = pg.database();
    let tmp = temp_dir();
    let (a, b) = (tmp.path().join("a/agent"), tmp.path().join("b/agent"));
    session(&a.join("sessions/--proj--"), "aaaa0001", &["lighthouse on the laptop"]);
    session(&b.join("sessions/--proj--"), "bbbb0001", &["lighthouse on the runner, confidential"]);
    push(&a, &url, "laptop");
    push(&b, &url, "ci");
    create_roles(&url, &["tmp_alice", "tmp_mallory"]);
    team_access("grant", &url, "tmp_alice", &["--machine", "laptop", "--push"]);
    // Table privileges an admin may well have given both: only the policies stand between them and the rows.
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    admin.batch_execute("GRANT SELECT, UPDATE ON ALL TABLES IN SCHEMA public TO tmp_alice, tmp_mallory").unwrap();
    let forged = "CREATE TEMP TABLE pi_grants (role text, kind text, target text, cwd_regex text,
                    may_read boolean, may_push boolean, granted_at timestamptz);
                  INSERT INTO pi_grants VALUES (current_user, 'machine', 'ci', NULL, true, true, now());";
    // psql prints the tags of the forging statements before the rows.
    let rows = |out: Vec<String>| -> Vec<String> {
        out.into_iter().filter(|l| l != "CREATE TABLE" && l != "INSERT 0 1").collect()
    };
    for (role, mine) in [("tmp_alice", vec!["laptop"]), ("tmp_mallory", vec![])] {
        let as_it = as_role(&url, role);
        let machines = rows(psql(&as_it, &format!("{forged} SELECT DISTINCT machine FROM pi_sessions ORDER BY 1")));
        assert_eq!(machines, mine, "{role} reads");
        let changed = rows(psql(&as_it, &format!("{forged} WITH u AS (UPDATE pi_sessions SET cwd = cwd RETURNING machine) SELECT count(*) FROM u WHERE machine = 'ci'")));
        assert_eq!(changed, ["0"], "{role} changes nothing of ci");
        let found = rows(psql(
            &as_it,
            &format!(
                "{forged} SELECT count(*) FROM pi_sessiond_matching_entries(current_user,
                   ARRAY(SELECT generate_series(1, 1000))::bigint[], ARRAY['%confidential%'], true, '{{}}')"
            ),
        ));
        assert_eq!(found, ["0"], "{role} finds nothing of ci through the search function");
    }
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_push_role_pushes_its_own_machine_and_is_refused_for_another_with_nothing_written() {
    let pg = pg_server::server();
    let (url, tmp, agent) = fresh(pg);
    let file = session(&agent.join("sessions/--proj--"), "pppp0001", &["built on the builder"]);
    // Another machine's rows, pushed by the admin, which the pusher must neither see nor touch.
    let other = tmp.path().join("other/agent");
    session(&other.join("sessions/--proj--"), "oooo0001", &["the laptop's own"]);
    push(&other, &url, "laptop");
    create_roles(&url, &["rls_builder"]);
    team_access("grant", &url, "rls_builder", &["--machine", "builder", "--push"]);
    let pusher = as_role(&url, "rls_builder");
    let report = push(&agent, &pusher, "builder");
    assert_eq!(number(&report, "entries"), 2.0, "{report:?}");
    // An append goes through the pusher's updates and inserts too.
    append_line(&file, &message_line("pppp0009", "\"pppp0000\"", "appended later", 1));
    assert_eq!(number(&push(&agent, &pusher, "builder"), "entries"), 1.0);
    assert_eq!(psql(&pusher, "SELECT DISTINCT machine FROM pi_sessions"), ["builder"], "it sees only its machine");

    let rows = |machine: &str| -> i64 {
        let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        admin.query_one("SELECT count(*) FROM pi_sessions WHERE machine = $1", &[&machine]).unwrap().get(0)
    };
    // Pushing as another machine: a clear refusal, exit status 2, and nothing written.
    for machine in ["intruder", "laptop"] {
        let before = rows(machine);
        let (status, stdout, stderr) = push_args(&s(&agent), &pusher, &["--machine", machine], None);
        assert_eq!(status, Some(2), "{stdout}{stderr}");
        assert!(stderr.contains(&format!("may not push as machine \"{machine}\"")), "{stderr}");
        assert_eq!(rows(machine), before, "{machine}: nothing written");
    }
    // The database itself refuses it, whoever asks: SQL as the pusher cannot write another machine's rows.
    let mut direct = postgres::Client::connect(&pusher, postgres::NoTls).unwrap();
    let insert = direct.execute(
        "INSERT INTO pi_sessions (machine, path, agent_dir, project_dir, file_name, header, info_id, info_cwd,
           info_created, info_modified, info_message_count, info_first_message, info_all_messages_text, cwd,
           file_size, file_mtime_ns, file_dev, file_ino, pushed_offset, pushed_lines, head, tail, unterminated,
           resume_state, read_at_ns)
         VALUES ('intruder', '/x', '/a', 'p', 'f', '{}', '\"x\"', '\"/\"', 0, 0, 0, '\"\"', '\"\"', '/', 0, 0, 0, 0, 0,
           0, '', '', '', '{}', 0)",
        &[],
    );
    let e = insert.expect_err("another machine's row is refused");
    assert_eq!(e.code(), Some(&postgres::error::SqlState::INSUFFICIENT_PRIVILEGE), "{e}");
    let moved = direct.execute("UPDATE pi_sessions SET machine = 'intruder' WHERE machine = 'builder'", &[]);
    assert_eq!(
        moved.expect_err("a row moved to another machine is refused").code(),
        Some(&postgres::error::SqlState::INSUFFICIENT_PRIVILEGE)
    );
    assert_eq!(direct.execute("DELETE FROM pi_sessions WHERE machine = 'laptop'", &[]).unwrap(), 0);
    // Deleting every entry deletes only its own.
    assert_eq!(direct.execute("DELETE FROM pi_entries", &[]).unwrap(), 3);
    drop(direct);
    assert_eq!(rows("laptop"), 1, "the laptop's session is untouched");
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let laptop_entries: i64 = admin
        .query_one("SELECT count(*) FROM pi_entries JOIN pi_sessions USING (sid) WHERE machine = 'laptop'", &[])
        .unwrap()
        .get(0);
    assert_eq!(laptop_entries, 2, "and its entries");

    // Revoking the push right: the next push is refused.
    team_access("revoke", &url, "rls_builder", &["--machine", "builder", "--push"]);
    let (status, _, stderr) = push_args(&s(&agent), &pusher, &["--machine", "builder"], None);
    assert_eq!(status, Some(2), "{stderr}");
    assert!(stderr.contains("may not push"), "{stderr}");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_project_grant_shows_the_sessions_whose_cwd_matches_its_glob_with_underscore_and_percent_literal() {
    let pg = pg_server::server();
    let (url, _tmp, agent) = fresh(pg);
    let now = 1_790_000_000;
    for (cwd, id) in [
        ("/work/a_b/x", "ab-x"),
        ("/work/aXb/x", "aXb-x"),
        ("/work/a_b/deep/z", "ab-deep"),
        ("/work/100%/y", "pct-y"),
        ("/work/100abc/y", "abc-y"),
    ] {
        session_of(&agent, cwd, id, now);
    }
    push(&agent, &url, "laptop");
    create_roles(&url, &["rls_project"]);
    let viewer = as_role(&url, "rls_project");
    let ids = |url: &str| psql(url, "SELECT session_id FROM pi_sessions ORDER BY session_id");
    let listed = |url: &str| -> Vec<String> {
        let Ok(items) = json(&run(&["--catalog", url, "ls", "--json", "--all"])).into_array() else { panic!() };
        let mut ids: Vec<String> = items.iter().map(|i| str_of(i.get("id").unwrap())).collect();
        ids.sort();
        ids
    };
    team_access("grant", &url, "rls_project", &["--project", "/work/a_b/*", "--project", "/work/100%/*"]);
    assert_eq!(ids(&viewer), ["ab-x", "pct-y"], "`_` and `%` are literal, `*` stays in its directory");
    assert_eq!(listed(&viewer), ["ab-x", "pct-y"]);
    team_access("grant", &url, "rls_project", &["--project", "/work/a_b/**"]);
    assert_eq!(ids(&viewer), ["ab-deep", "ab-x", "pct-y"], "`**` crosses directories");
    team_access("revoke", &url, "rls_project", &["--project", "/work/a_b/*", "--project", "/work/a_b/**"]);
    assert_eq!(listed(&viewer), ["pct-y"]);
    // A project grant cannot carry the right to push, and a glob this cannot translate faithfully, or that can
    // match no cwd (they are absolute), is refused, each saying what is wrong with it and not with the URL.
    let grant = |args: &[&str]| {
        let mut all = vec!["team", "grant", "--postgres", url.as_str(), "--role", "rls_project"];
        all.extend_from_slice(args);
        let out = Command::new(binary()).args(&all).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    for (args, why) in [
        (&["--project", "/work/**", "--push"][..], "--push is a right to push as a machine"),
        (&["--project", "/work/[ab]"][..], "'[' is not supported"),
        (&["--project", "work/a_b/*"][..], "a session's cwd is an absolute path"),
    ] {
        let (status, stderr) = grant(args);
        assert_eq!(status, Some(2), "{args:?}");
        assert!(stderr.contains(why) && !stderr.contains("connection string"), "{args:?}: {stderr}");
    }
    assert_eq!(listed(&viewer), ["pct-y"], "a refused grant changed nothing");
    // A machine that never pushed is granted (a new laptop before its first push), with a word in case of a typo.
    let (status, stderr) = grant(&["--machine", "laptpo"]);
    assert_eq!(status, Some(0), "{stderr}");
    assert!(stderr.contains(r#"no machine named "laptpo" has pushed yet"#), "{stderr}");
    let (status, stderr) = grant(&["--machine", "laptop"]);
    assert_eq!((status, stderr.as_str()), (Some(0), ""), "a machine that pushed: nothing to say");
    // Taking back the right to read from a role that may push as the machine: it reads on, and is told so.
    grant(&["--machine", "laptop", "--push"]);
    let out = Command::new(binary())
        .args(["team", "revoke", "--postgres", url.as_str(), "--role", "rls_project", "--machine", "laptop"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(r#"role "rls_project" still reads machine "laptop" through its right to push"#),
        "{stderr}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(r#"{"machine":"laptop","read":true,"push":true}"#));
}

/// Writes a session of about `bytes` bytes of user and assistant messages (their text is what pi's
/// `allMessagesText` joins, so it is nearly the whole file), with non-ASCII text and, when `unterminated`, a last
/// message without its newline.
fn wordy_session(dir: &Path, id: &str, bytes: usize, unterminated: bool) -> std::path::PathBuf {
    use std::io::Write;
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(format!("2026-01-01T00-00-00-000Z_{id}.jsonl"));
    let mut w = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let header =
        format!(r#"{{"type":"session","version":3,"id":"{id}","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/proj"}}"#);
    writeln!(w, "{header}").unwrap();
    let mut rng = Rng::new(7);
    let words = ["lighthouse", "keeper", "checkout", "bug", "mémoire", "bounded", "ΟΔΟΣ", "piece", "😀", "tab\\t"];
    let (mut written, mut n, mut parent) = (header.len() + 1, 0u64, "null".to_owned());
    while written < bytes {
        n += 1;
        let text: Vec<&str> = (0..300).map(|_| words[rng.below(words.len())]).collect();
        let text = format!("{n} {}", text.join(" "));
        let (role, content) = if n % 2 == 1 {
            ("user", format!("\"{text}\""))
        } else {
            ("assistant", format!(r#"[{{"type":"text","text":"{text}"}}]"#))
        };
        let line = format!(
            r#"{{"type":"message","id":"{n:08x}","parentId":{parent},"timestamp":"2026-01-01T00:00:00.000Z","message":{{"role":"{role}","content":{content},"timestamp":{}}}}}"#,
            1_767_225_600_000u64 + n
        );
        parent = format!("\"{n:08x}\"");
        written += line.len() + 1;
        w.write_all(line.as_bytes()).unwrap();
        if !(unterminated && written >= bytes) {
            w.write_all(b"\n").unwrap();
        }
    }
    w.flush().unwrap();
    path
}

/// Runs `push` of `agent` as `machine`, reading its peak resident memory (`VmHWM`) from `/proc` until it exits:
/// the report, and the peak in bytes.
fn push_peak(agent: &Path, url: &str, machine: &str) -> (Json, usize) {
    let mut child = Command::new(binary())
        .args(["--agent-dir", &s(agent), "push", "--postgres", url, "--machine", machine])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak = 0;
    // The high-water mark only grows: the last reading before the process exits is its peak (bar the instant
    // after it). Bounded: a push that never ends fails the test after ten minutes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(600);
    while child.try_wait().unwrap().is_none() {
        assert!(std::time::Instant::now() < deadline, "the push did not finish in ten minutes");
        let status = std::fs::read_to_string(&status_file).unwrap_or_default();
        if let Some(kb) = status.lines().find_map(|l| l.strip_prefix("VmHWM:")) {
            peak = peak.max(kb.trim().trim_end_matches("kB").trim().parse::<usize>().unwrap() * 1024);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "push failed: {stdout}{stderr}");
    assert!(peak > 0, "no reading of the push's memory");
    (json(stdout.trim()), peak)
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_push_of_a_session_three_times_larger_needs_no_more_memory_and_stays_under_200_mb() {
    let pg = pg_server::server();
    let url = pg.database();
    // The server's own work (the search indexes, write-ahead log, compression) is not what is measured here, and
    // would make this test minutes long: the test's database does without it. The push is the same.
    let target = Target::from_env(&url).unwrap();
    let mut client = pi_sessiond::team::schema::open(&target).unwrap();
    client
        .batch_execute(
            "DROP INDEX pi_entries_search_trgm, pi_entries_search_words;
             ALTER TABLE pi_entries SET UNLOGGED;
             ALTER TABLE pi_sessions SET UNLOGGED;
             ALTER TABLE pi_entries ALTER COLUMN raw SET STORAGE EXTERNAL,
               ALTER COLUMN search_text SET STORAGE EXTERNAL;
             ALTER TABLE pi_sessions ALTER COLUMN info_all_messages_text SET STORAGE EXTERNAL",
        )
        .unwrap();
    let tmp = temp_dir();
    const MB: usize = 1_000_000;
    let mut peaks = Vec::new();
    // Pushed in pieces of 16 MiB: the smaller session has two whole pieces and more, so both show the steady
    // state (buffers kept from one piece to the next included).
    for (machine, size) in [("small", 36 * MB), ("large", 108 * MB)] {
        let agent = tmp.path().join(machine).join("agent");
        let file = wordy_session(&agent.join("sessions/--proj--"), machine, size, machine == "small");
        let (report, peak) = push_peak(&agent, &url, machine);
        assert_eq!(number(&report, "pushed"), 1.0, "{report:?}");
        assert!(number(&report, "bytes") as usize > size * 9 / 10, "{report:?}");
        eprintln!(
            "{machine}: {} MB pushed with a peak of {} MB",
            std::fs::metadata(&file).unwrap().len() / 1_000_000,
            peak >> 20
        );
        peaks.push(peak);
        if machine == "small" {
            // Pushed in pieces with the text appended in the database: the listing is still the local one, byte
            // for byte (allMessagesText included, and the unterminated last message's text), and stays so when
            // the file grows and only its new lines go.
            let same_listing = || {
                let local = run(&["--agent-dir", &s(&agent), "ls", "--json", "--all"]);
                let team = run(&["--catalog", &url, "ls", "--json", "--all"]);
                assert_eq!(team.replace(r#","machine":"small""#, ""), local);
            };
            same_listing();
            append_line(&file, &format!("\n{}", message_line("ffff0001", "\"00000001\"", "appended at the end", 1)));
            assert_eq!(number(&push(&agent, &url, machine), "entries"), 2.0);
            same_listing();
        }
    }
    let limit = 200 << 20;
    assert!(peaks.iter().all(|&p| p < limit), "peaks {peaks:?} over 200 MB");
    // Before pieces appended their text in the database, memory was about eight times the session (406 MB for
    // 50 MB). Measured: 124 MB for 40 MB and for 120 MB.
    assert!(peaks[1] < peaks[0] + (16 << 20), "three times the session, more memory: {peaks:?}");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_session_pushed_before_its_text_was_appended_in_the_database_lists_as_the_local_one_after_it_grows() {
    let pg = pg_server::server();
    let (url, _tmp, agent) = fresh(pg);
    let file = session(&agent.join("sessions/--proj--"), "oldrow01", &["first words", "second wörds"]);
    push(&agent, &url, "laptop");
    // The row as a push before schema version 5 left it: the text in the resume state, no committed length.
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let (state, text): (String, String) = {
        let row = admin.query_one("SELECT resume_state, info_all_messages_text FROM pi_sessions", &[]).unwrap();
        (row.get(0), row.get(1))
    };
    assert!(!state.contains("allText"), "the state no longer holds the text: {state}");
    let legacy = state.replacen('{', &format!(r#"{{"allText":{text},"#), 1);
    admin.execute("UPDATE pi_sessions SET resume_state = $1, all_text_committed = NULL", &[&legacy]).unwrap();
    append_line(&file, &message_line("oldr0009", "\"oldr0001\"", "third words", 2));
    assert_eq!(number(&push(&agent, &url, "laptop"), "entries"), 1.0);
    let local = run(&["--agent-dir", &s(&agent), "ls", "--json", "--all"]);
    let team = run(&["--catalog", &url, "ls", "--json", "--all"]);
    assert_eq!(team.replace(r#","machine":"laptop""#, ""), local);
    assert!(local.contains("first words second wörds third words"), "{local}");
    // And it goes on by appending from there.
    append_line(&file, &message_line("oldr0010", "\"oldr0009\"", "fourth", 3));
    push(&agent, &url, "laptop");
    let team = run(&["--catalog", &url, "ls", "--json", "--all"]);
    assert!(team.contains("first words second wörds third words fourth"), "{team}");
}
