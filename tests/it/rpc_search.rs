//! `sessions/search` and `pi-sessiond search`: pi's `/resume` query forms, ranked entry-level hits, roles and
//! limits, progress while the index catches up, text written a moment ago by another process, and a first search
//! answered from the files while the index takes their text afterwards.

use std::io::Write;
use std::time::{Duration, Instant};

use pi_sessiond::catalog::index::CatalogIndex;
use pi_sessiond::session::json::Json;

use crate::support::sidecar::{Sidecar, Wire};
use crate::support::{json, s, str_of, temp_dir};

fn user(text: &str) -> String {
    format!(r#"{{"role":"user","content":"{text}","timestamp":1767225600000}}"#)
}

fn hits(v: Json) -> Vec<Json> {
    match v.into_array() {
        Ok(h) => h,
        Err(other) => panic!("not an array: {}", other.to_canonical_string()),
    }
}

fn field(h: &Json, k: &str) -> String {
    h.get(k).map(|v| v.as_js_str().map(|s| s.to_string_lossy()).unwrap_or_else(|| v.to_canonical_string())).unwrap()
}

#[test]
fn a_search_finds_a_phrase_written_moments_ago_by_another_process() {
    let root = temp_dir();
    let agent = s(&root.path().join("agent"));
    let mut searcher = Sidecar::spawn(Wire::Jsonl, &["--agent-dir", &agent], &[]);
    let mut writer = Sidecar::spawn(Wire::Jsonl, &["--agent-dir", &agent], &[]);
    let st = writer.call("session/create", json(r#"{"cwd":"/work/proj"}"#));
    let h = str_of(st.get("handle").unwrap());
    let file = str_of(st.get("sessionFile").unwrap());
    writer.call("session/appendMessage", json(&format!(r#"{{"handle":"{h}","message":{}}}"#, user("warming up"))));
    // The searcher's index now knows the directory.
    assert_eq!(hits(searcher.call("sessions/search", json(r#"{"query":"warming","cwd":"/work/proj"}"#))).len(), 1);
    assert!(hits(searcher.call("sessions/search", json(r#"{"query":"hippopotamus"}"#))).is_empty());

    // Another sidecar writes; the search finds the new entry by its id.
    let id = writer.call(
        "session/appendMessage",
        json(&format!(r#"{{"handle":"{h}","message":{}}}"#, user("the violet   hippopotamus sings at dawn"))),
    );
    // The writer brings the shared index up to date by itself, without anyone listing or searching.
    let index = rusqlite::Connection::open(format!("{agent}/pi-sessiond/index.sqlite")).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let n: i64 =
            index.query_row("SELECT count(*) FROM docs WHERE text LIKE '%hippopotamus%'", [], |r| r.get(0)).unwrap();
        if n == 1 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the writer never indexed its append");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let found = hits(searcher.call("sessions/search", json(r#"{"query":"\"violet hippopotamus\""}"#)));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].get("entryId"), id.get("id"));
    assert_eq!(field(&found[0], "path"), file);
    assert_eq!(field(&found[0], "role"), "user");
    assert!(field(&found[0], "snippet").contains("hippopotamus sings"));
    assert_eq!(found[0].get("sessionId"), st.get("sessionId"));

    // A process that is not a sidecar at all (pi itself appends this way) writes a line; searched right after.
    let line = r#"{"type":"message","id":"feedbeef","parentId":null,"timestamp":"2026-01-01T00:00:05.000Z","message":{"role":"assistant","content":[{"type":"text","text":"Quartz obelisk located"}],"timestamp":1767225605000}}"#;
    std::fs::OpenOptions::new().append(true).open(&file).unwrap().write_all(format!("{line}\n").as_bytes()).unwrap();
    let found = hits(searcher.call("sessions/search", json(r#"{"query":"obelisk quartz"}"#)));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].get("entryId"), Some(&Json::str("feedbeef")));
    assert_eq!(field(&found[0], "role"), "assistant");
    assert_eq!(field(&found[0], "timestamp"), "2026-01-01T00:00:05.000Z");
}

/// A directory with one session holding one entry of each searchable kind.
fn fixture(dir: &std::path::Path) -> String {
    let path = dir.join("2026-01-01T00-00-00-000Z_fixture.jsonl");
    let lines = [
        r#"{"type":"session","version":3,"id":"fixture-id","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/work/zoo"}"#,
        r#"{"type":"message","id":"u1","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"Why does the Parser choke on tabs?","timestamp":1767225601000}}"#,
        r#"{"type":"message","id":"a1","parentId":"u1","timestamp":"2026-01-01T00:00:02.000Z","message":{"role":"assistant","content":[{"type":"thinking","thinking":"secret musing"},{"type":"text","text":"The parser treats a tab\nas a separator."}],"timestamp":1767225602000}}"#,
        r#"{"type":"message","id":"t1","parentId":"a1","timestamp":"2026-01-01T00:00:03.000Z","message":{"role":"toolResult","toolCallId":"c","toolName":"bash","content":[{"type":"text","text":"grep: parser.rs: 12 matches"}],"isError":false,"timestamp":1767225603000}}"#,
        r#"{"type":"label","id":"l1","parentId":"t1","timestamp":"2026-01-01T00:00:04.000Z","targetId":"a1","label":"tab bug"}"#,
        r#"{"type":"session_info","id":"n1","parentId":"l1","timestamp":"2026-01-01T00:00:05.000Z","name":"Tabs versus spaces"}"#,
    ];
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    s(&path)
}

/// A temporary root with `sessions/` holding the fixture and five copies of it under other ids: the same
/// entries at the same times in other files, so hits tie on score and time.
fn fixture_and_copies() -> (tempfile::TempDir, std::path::PathBuf) {
    let root = temp_dir();
    let dir = root.path().join("sessions");
    std::fs::create_dir(&dir).unwrap();
    fixture(&dir);
    let body = std::fs::read_to_string(dir.join("2026-01-01T00-00-00-000Z_fixture.jsonl")).unwrap();
    for i in 0..5 {
        std::fs::write(dir.join(format!("copy{i}.jsonl")), body.replace("fixture-id", &format!("copy-{i}"))).unwrap();
    }
    (root, dir)
}

#[test]
fn search_speaks_pis_query_forms_down_to_the_entry() {
    let root = temp_dir();
    let dir = root.path().join("sessions");
    std::fs::create_dir(&dir).unwrap();
    fixture(&dir);
    let d = s(&dir);
    let mut sc = Sidecar::new();
    let mut search = |query: &str, extra: &str| {
        let params = format!(r#"{{"query":{},"sessionDir":"{d}"{extra}}}"#, Json::str(query).to_canonical_string());
        hits(sc.call("sessions/search", json(&params)))
    };
    let ids = |hs: &[Json]| -> Vec<String> { hs.iter().map(|h| field(h, "entryId")).collect() };

    // A word matches case-insensitively as a substring, in every kind of text; thinking is not searched.
    let parser = search("parser", "");
    let mut got = ids(&parser);
    got.sort();
    assert_eq!(got, ["a1", "t1", "u1"]);
    assert!(search("musing", "").is_empty(), "thinking blocks are not message text");
    // Every word must match; a phrase keeps its words together, across line breaks.
    // Ranked: both words in the entry first (newest first among equals), then a word found only in the
    // session's name ("Tabs versus spaces").
    assert_eq!(ids(&search("parser tab", "")), ["a1", "u1", "t1"]);
    assert_eq!(ids(&search("\"tab as a separator\"", "")), ["a1"]);
    assert!(search("\"separator tab\"", "").is_empty());
    // A regex, case-insensitive.
    assert_eq!(ids(&search("re:\\d+ MATCHES", "")), ["t1"]);
    // Labels and names are searchable; the name also makes the session itself a hit.
    assert_eq!(ids(&search("bug", "")), ["l1"]);
    let versus = search("versus", "");
    let roles: Vec<String> = versus.iter().map(|h| field(h, "role")).collect();
    assert!(roles.contains(&"name".to_string()) && roles.contains(&"session".to_string()), "{roles:?}");
    // A word may be satisfied by the session's cwd while another is found in the entry.
    assert_eq!(ids(&search("zoo choke", "")), ["u1"]);
    // roles and limit.
    assert_eq!(ids(&search("parser", r#","roles":["toolResult"]"#)), ["t1"]);
    assert_eq!(search("parser", r#","limit":1"#).len(), 1);
    // A hit carries the session and the entry's time.
    let t1 = search("grep", "").remove(0);
    assert_eq!(field(&t1, "sessionId"), "fixture-id");
    assert_eq!(field(&t1, "timestamp"), "2026-01-01T00:00:03.000Z");
}

#[test]
fn an_invalid_query_is_an_invalid_params_error() {
    let mut sc = Sidecar::new();
    for query in ["re:(", "re:"] {
        let e = sc.call_err("sessions/search", json(&format!(r#"{{"query":"{query}"}}"#)));
        assert_eq!(e.get("code"), Some(&Json::number(-32602.0)), "{}", e.to_canonical_string());
        assert!(str_of(e.get("message").unwrap()).contains("query"), "{}", e.to_canonical_string());
    }
    let e = sc.call_err("sessions/search", json(r#"{"cwd":"/x"}"#));
    assert_eq!(e.get("code"), Some(&Json::number(-32602.0)));
}

#[test]
fn a_query_past_the_size_or_word_bound_is_refused_at_once_and_one_within_it_is_answered() {
    // Issue 11: 32,000 words took 7.4 s and a 1 MB query more than 60 s, blocking every other catalog call.
    let root = temp_dir();
    let dir = root.path().join("agent/sessions/--work-proj--");
    std::fs::create_dir_all(&dir).unwrap();
    let vocabulary = ["harbour", "quiet", "lantern", "meadow", "orchard", "pebble", "willow", "ember"];
    let text: Vec<&str> = (0..64).map(|i| vocabulary[i % vocabulary.len()]).collect();
    let header = r#"{"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/work/proj"}"#;
    let message = format!(
        r#"{{"type":"message","id":"m","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{}}}"#,
        user(&text.join(" "))
    );
    std::fs::write(dir.join("2026-01-01T00-00-00-000Z_s.jsonl"), format!("{header}\n{message}\n")).unwrap();
    let agent = s(&root.path().join("agent"));
    let mut sc = Sidecar::spawn(Wire::Jsonl, &["--agent-dir", &agent], &[]);
    let words = |n: usize| (0..n).map(|i| vocabulary[i % vocabulary.len()]).collect::<Vec<_>>().join(" ");
    let quoted = |q: &str| Json::str(q).to_canonical_string();
    for (query, what) in [
        (words(32_000), "bytes"),
        ("ab ".repeat(65), "words"),
        ("x".repeat(1 << 20), "bytes"),
        (format!("\"{}\"", words(65)), "words"),
        (format!("re:{}", "a".repeat(5000)), "bytes"),
    ] {
        let e = sc.call_err("sessions/search", json(&format!(r#"{{"query":{}}}"#, quoted(&query))));
        assert_eq!(e.get("code"), Some(&Json::number(-32602.0)), "{}", e.to_canonical_string());
        let message = str_of(e.get("message").unwrap());
        assert!(message.contains(what) && message.contains("at most"), "{message}");
    }
    // At the bound: every word, and the phrase of all 64, are found in the one entry that has them.
    for query in [words(64), format!("\"{}\"", words(64))] {
        let found = hits(sc.call("sessions/search", json(&format!(r#"{{"query":{}}}"#, quoted(&query)))));
        assert_eq!(found.len(), 1, "{query}: {found:?}");
        assert_eq!(field(&found[0], "entryId"), "m");
    }
}

#[test]
fn search_reports_progress_while_the_index_catches_up() {
    let (_root, dir) = fixture_and_copies();
    let mut sc = Sidecar::new();
    let params = format!(r#"{{"query":"parser","sessionDir":"{}","progressToken":7}}"#, s(&dir));
    assert_eq!(hits(sc.call("sessions/search", json(&params))).len(), 18);
    let progress = sc.take_notifications("$/progress");
    let values: Vec<(String, String)> = progress
        .iter()
        .map(|n| {
            let v = n.get("params").unwrap().get("value").unwrap();
            (field(v, "kind"), v.get("stage").map(str_of).unwrap_or_default())
        })
        .collect();
    let begins: Vec<&str> = values.iter().filter(|(k, _)| k == "begin").map(|(_, s)| s.as_str()).collect();
    assert_eq!(begins, ["listing", "indexing"], "{values:?}");
    assert_eq!(values.last().map(|(k, _)| k.as_str()), Some("end"));
    assert!(progress.iter().all(|n| n.get("params").unwrap().get("token") == Some(&Json::number(7.0))));
}

#[test]
fn a_first_search_answers_from_the_files_and_the_sidecar_then_gives_the_index_their_text() {
    // Issue 21: the first search does not wait for the index to take every file's text; the sidecar's index
    // thread takes it after the answer, and the search that then asks the index answers the same bytes.
    let (root, dir) = fixture_and_copies();
    let index = s(&root.path().join("index.sqlite"));
    let mut sc = Sidecar::spawn(Wire::Jsonl, &["--index", &index], &[]);
    let params = format!(r#"{{"query":"parser","sessionDir":"{}","limit":7}}"#, s(&dir));
    let first = sc.call("sessions/search", json(&params));
    assert_eq!(hits(first.clone()).len(), 7);
    let paths: Vec<String> = std::fs::read_dir(&dir).unwrap().map(|e| s(&e.unwrap().path())).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (behind, total) = CatalogIndex::open(&index).unwrap().unindexed_bytes(&paths).unwrap();
        if behind == 0 && total > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the index still lacks {behind} of {total} bytes after a minute");
        std::thread::sleep(Duration::from_millis(20));
    }
    let again = sc.call("sessions/search", json(&params));
    assert_eq!(again.to_canonical_string(), first.to_canonical_string());
}

#[test]
fn the_search_command_prints_hits_for_people_and_for_programs() {
    let root = temp_dir();
    let dir = root.path().join("sessions");
    std::fs::create_dir(&dir).unwrap();
    let file = fixture(&dir);
    let output = |args: &[&str]| {
        std::process::Command::new(crate::support::sidecar::binary())
            .args(["search", "--agent-dir", &s(&root.path().join("agent")), "--dir", &s(&dir)])
            .args(args)
            .output()
            .unwrap()
    };
    let run = |args: &[&str]| {
        let out = output(args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let text = run(&["grep"]);
    assert!(text.contains(&file) && text.contains("#t1") && text.contains("grep: parser.rs: 12 matches"), "{text}");
    let Ok(h) = Json::parse(run(&["--json", "parser", "--limit", "2"]).as_bytes()).unwrap().into_array() else {
        panic!()
    };
    assert_eq!(h.len(), 2);
    // No match is not an error, but it is not a success either (grep's and ripgrep's status 1).
    let none = output(&["nothing-like-this"]);
    assert_eq!(none.status.code(), Some(1));
    assert!(none.stdout.is_empty() && String::from_utf8_lossy(&none.stderr).contains("no matches"));
}

/// Writes one session file per `(id, time, texts)` into `dir` (cwd `/work/p`), each text a user message one
/// second after the one before, as pi writes them; returns the paths.
fn sessions_of(dir: &std::path::Path, specs: &[(String, String, Vec<String>)]) -> Vec<String> {
    specs
        .iter()
        .map(|(id, at, texts)| {
            let t0 = chrono_free_ms(at);
            // A message's own timestamp is a number of milliseconds, as pi writes it.
            let number = |ms: u64| Json::number(ms as f64);
            let mut lines = vec![format!(r#"{{"type":"session","version":3,"id":"{id}","timestamp":"{at}","cwd":"/work/p"}}"#)];
            let mut parent = "null".to_owned();
            for (k, text) in texts.iter().enumerate() {
                let ms = t0 + 1000 * (k as u64 + 1);
                let entry = format!(
                    r#"{{"type":"message","id":"{id}e{k}","parentId":{parent},"timestamp":"{at}","message":{{"role":"user","content":{},"timestamp":{}}}}}"#,
                    Json::str(text).to_canonical_string(),
                    number(ms).to_canonical_string()
                );
                parent = format!(r#""{id}e{k}""#);
                lines.push(entry);
            }
            let path = dir.join(format!("{}_{id}.jsonl", at.replace([':', '.'], "-")));
            std::fs::write(&path, lines.join("\n") + "\n").unwrap();
            s(&path)
        })
        .collect()
}

/// Milliseconds since 1970 of an ISO time `YYYY-MM-DDT00:00:00.000Z` (midnight only: enough for these tests).
fn chrono_free_ms(iso: &str) -> u64 {
    let (y, m, d): (i64, i64, i64) =
        (iso[0..4].parse().unwrap(), iso[5..7].parse().unwrap(), iso[8..10].parse().unwrap());
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    ((era * 146097 + doe - 719468) * 86_400_000) as u64
}

fn page(sc: &mut Sidecar, dir: &str, query: &str, offset: usize, limit: usize) -> (Vec<Json>, usize, usize) {
    let params = format!(
        r#"{{"query":{},"sessionDir":"{dir}","offset":{offset},"limit":{limit}}}"#,
        Json::str(query).to_canonical_string()
    );
    let p = sc.call("sessions/searchPage", json(&params));
    assert_eq!(p.get("offset"), Some(&Json::number(offset as f64)));
    let n = |k: &str| p.get(k).unwrap().to_canonical_string().parse::<usize>().unwrap();
    (hits(p.get("hits").unwrap().clone()), n("total"), n("sessions"))
}

/// A temporary agent directory and a sessions directory beside it.
fn agent_and_sessions() -> (tempfile::TempDir, String, std::path::PathBuf) {
    let root = temp_dir();
    let agent = s(&root.path().join("agent"));
    let dir = root.path().join("sessions");
    std::fs::create_dir(&dir).unwrap();
    (root, agent, dir)
}

/// Waits until the sidecar's index holds the text of `entries` entries (its index thread takes it after a
/// first search read the files).
fn wait_for_index(agent: &str, entries: i64) {
    let index = rusqlite::Connection::open(format!("{agent}/pi-sessiond/index.sqlite")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let n: i64 = index.query_row("SELECT count(*) FROM docs", [], |r| r.get(0)).unwrap_or(0);
        if n >= entries {
            return;
        }
        assert!(Instant::now() < deadline, "the index holds {n} of {entries} entries' text");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_denser_match_in_an_older_session_ranks_above_a_newer_weak_one_from_the_files_and_from_the_index() {
    let (_root, agent, dir) = agent_and_sessions();
    let filler = "the meeting notes cover many other subjects at length, ".repeat(12);
    let specs = vec![
        // Old, short, and about the tokenizer: three whole-word matches.
        (
            "dense".to_owned(),
            "2025-01-01T00:00:00.000Z".to_owned(),
            vec!["the Tokenizer breaks on emoji; fix the tokenizer and test the tokenizer".to_owned()],
        ),
        // Newer: one whole-word match in a long text.
        ("once".to_owned(), "2026-05-01T00:00:00.000Z".to_owned(), vec![format!("{filler} and the tokenizer once")]),
        // Newest: the word only inside another word, in a long text.
        (
            "inside".to_owned(),
            "2026-06-01T00:00:00.000Z".to_owned(),
            vec![format!("{filler} see the detokenizers module")],
        ),
    ];
    let paths = sessions_of(&dir, &specs);
    let mut sc = Sidecar::spawn(Wire::Jsonl, &["--agent-dir", &agent], &[]);
    let d = s(&dir);
    let order = |hits: &[Json]| hits.iter().map(|h| field(h, "path")).collect::<Vec<_>>();
    let (from_files, total, sessions) = page(&mut sc, &d, "tokenizer", 0, 10);
    assert_eq!(order(&from_files), paths, "best first: dense, then once, then inside");
    assert_eq!((total, sessions), (3, 3));
    let score = |h: &Json| h.get("score").unwrap().to_canonical_string().parse::<f64>().unwrap();
    assert!(score(&from_files[0]) > score(&from_files[1]) && score(&from_files[1]) > score(&from_files[2]));
    wait_for_index(&agent, 3);
    let (from_index, ..) = page(&mut sc, &d, "tokenizer", 0, 10);
    assert_eq!(Json::Array(from_index).to_canonical_string(), Json::Array(from_files).to_canonical_string());
}

#[test]
fn the_total_is_every_match_counted_and_the_pages_continue_one_another_without_repeats() {
    let (_root, agent, dir) = agent_and_sessions();
    let words = ["alpha", "beta", "Alphabet", "gamma", "delta", "ALPHA", "epsilon"];
    let mut rng = crate::corpus::Rng::new(22);
    let mut next = |n: usize| rng.below(n);
    let specs: Vec<(String, String, Vec<String>)> = (0..40)
        .map(|i| {
            let texts = (0..next(7))
                .map(|_| (0..1 + next(6)).map(|_| words[next(words.len())]).collect::<Vec<_>>().join(" "))
                .collect();
            (format!("s{i:02}"), format!("2026-{:02}-{:02}T00:00:00.000Z", 1 + i % 12, 1 + i % 28), texts)
        })
        .collect();
    sessions_of(&dir, &specs);
    let d = s(&dir);
    let mut sc = Sidecar::spawn(Wire::Jsonl, &["--agent-dir", &agent], &[]);
    for query in ["alpha", "alpha beta", "re:^gamma"] {
        // Counted here from the texts written, as the query reads them.
        let holds = |t: &str| {
            let t = t.to_lowercase();
            match query.strip_prefix("re:") {
                Some(_) => t.starts_with("gamma"),
                None => query.split(' ').all(|w| t.contains(w)),
            }
        };
        let expected_total: usize = specs.iter().map(|(_, _, texts)| texts.iter().filter(|t| holds(t)).count()).sum();
        let expected_sessions = specs.iter().filter(|(_, _, texts)| texts.iter().any(|t| holds(t))).count();
        assert!(expected_total > 2 * 7, "{query}: the corpus has more matches than two pages ({expected_total})");
        let (all, total, sessions) = page(&mut sc, &d, query, 0, 10_000);
        assert_eq!((total, sessions), (expected_total, expected_sessions), "{query}");
        assert_eq!(all.len(), expected_total);
        let mut paged = Vec::new();
        for offset in (0..total + 7).step_by(7) {
            let (hits, t, n) = page(&mut sc, &d, query, offset, 7);
            assert_eq!((t, n), (total, sessions), "{query} offset {offset}: the same totals on every page");
            paged.extend(hits);
        }
        let text = |h: &[Json]| h.iter().map(Json::to_canonical_string).collect::<Vec<_>>();
        assert_eq!(text(&paged), text(&all), "{query}: the pages, one after another, are the whole answer");
        let distinct: std::collections::HashSet<(String, String)> =
            paged.iter().map(|h| (field(h, "path"), field(h, "entryId"))).collect();
        assert_eq!(distinct.len(), total, "{query}: no hit on two pages");
    }

    // The command line says the same totals, and which page it shows.
    let run = |args: &[&str]| {
        let out = std::process::Command::new(crate::support::sidecar::binary())
            .args(["search", "--agent-dir", &agent, "--dir", &d])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let (_, total, sessions) = page(&mut sc, &d, "alpha", 0, 0);
    let last = |text: &str| text.lines().last().unwrap().to_owned();
    assert_eq!(
        last(&run(&["alpha", "--limit", "5"])),
        format!("{total} matches in {sessions} sessions; these are 1–5 (--offset 5 shows the next 5)")
    );
    assert_eq!(
        last(&run(&["alpha", "--limit", "5", "--offset", "5"])),
        format!("{total} matches in {sessions} sessions; these are 6–10 (--offset 10 shows the next 5)")
    );
    assert_eq!(last(&run(&["alpha", "--limit", "10000"])), format!("{total} matches in {sessions} sessions"));
}
