//! The command line as a person (and a script) meets it: exit statuses, what goes to stderr, tables and
//! colours on a terminal (a real pseudo-terminal), plain text in a pipe, the pager only on a terminal, JSON
//! with `--json`, and nothing created by commands that only read. Each test pins one friction point of
//! issue #15.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pi_sessiond::session::json::Json;

use crate::support::pty::run_on_terminal;
use crate::support::sidecar::binary;
use crate::support::temp_dir;

/// A project directory's name under `<agentDir>/sessions/`, as pi encodes a cwd.
fn project_dir(agent: &Path, cwd: &str) -> PathBuf {
    agent.join("sessions").join(pi_sessiond::session::paths::encode_cwd(cwd))
}

fn header(id: &str, cwd: &str) -> String {
    format!(r#"{{"type":"session","version":3,"id":"{id}","timestamp":"2026-01-01T00:00:00.000Z","cwd":"{cwd}"}}"#)
}

fn message(id: &str, parent: Option<&str>, second: u32, message: &str) -> String {
    let parent = parent.map(|p| format!("\"{p}\"")).unwrap_or_else(|| "null".into());
    format!(
        r#"{{"type":"message","id":"{id}","parentId":{parent},"timestamp":"2026-01-01T00:00:{second:02}.000Z","message":{message}}}"#
    )
}

fn user(text: &str) -> String {
    format!(r#"{{"role":"user","content":"{text}","timestamp":1767225600000}}"#)
}

/// A session of `cwd` with header `id` and one user message `text` (entry `entry`), as file text.
fn one_message_session(id: &str, cwd: &str, entry: &str, text: &str) -> String {
    [header(id, cwd), message(entry, None, 1, &user(text))].join("\n") + "\n"
}

fn assistant(text: &str, model: &str, input: u32, output: u32, cost: f64) -> String {
    format!(
        r#"{{"role":"assistant","content":[{{"type":"text","text":"{text}"}}],"api":"x","provider":"acme","model":"{model}","usage":{{"input":{input},"output":{output},"cacheRead":0,"cacheWrite":0,"totalTokens":{},"cost":{{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":{cost}}}}},"stopReason":"stop","timestamp":1767225600000}}"#,
        input + output
    )
}

/// A session with a branch, a label and two models:
/// u1 → a1 → u2 → a2 (leaf), and u1 → a1 → u3 (an abandoned branch); a1 labelled "checkpoint".
fn branched_session(id: &str, cwd: &str) -> String {
    [
        header(id, cwd),
        message("u1", None, 1, &user("how do I parse a tokenizer")),
        message("a1", Some("u1"), 2, &assistant("use a state machine", "small", 100, 20, 0.001)),
        message("u3", Some("a1"), 3, &user("abandoned question")),
        r#"{"type":"label","id":"l1","parentId":"u3","timestamp":"2026-01-01T00:00:04.000Z","targetId":"a1","label":"checkpoint"}"#.to_owned(),
        message("u2", Some("a1"), 5, &user("and then what")),
        message("a2", Some("u2"), 6, &assistant("then you test it", "large", 1000, 200, 0.25)),
    ]
    .join("\n")
        + "\n"
}

/// An agent directory with two sessions of `/work/app` and one of `/work/other`.
struct Agent {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    app_session: PathBuf,
}

const APP_ID: &str = "0193aaaa-1111-7000-8000-000000000001";
const APP_ID2: &str = "0193aaaa-2222-7000-8000-000000000002";
const OTHER_ID: &str = "0193bbbb-3333-7000-8000-000000000003";

fn agent() -> Agent {
    let tmp = temp_dir();
    let dir = tmp.path().join("agent");
    let app = project_dir(&dir, "/work/app");
    let other = project_dir(&dir, "/work/other");
    std::fs::create_dir_all(&app).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    let app_session = app.join(format!("2026-01-01T00-00-00-000Z_{APP_ID}.jsonl"));
    std::fs::write(&app_session, branched_session(APP_ID, "/work/app")).unwrap();
    let second = one_message_session(APP_ID2, "/work/app", "x1", "a second session");
    std::fs::write(app.join(format!("2026-01-01T00-00-01-000Z_{APP_ID2}.jsonl")), second).unwrap();
    let third = one_message_session(OTHER_ID, "/work/other", "y1", "elsewhere");
    std::fs::write(other.join(format!("2026-01-01T00-00-02-000Z_{OTHER_ID}.jsonl")), third).unwrap();
    Agent { _tmp: tmp, dir, app_session }
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// The binary with a clean environment for output decisions (no colour or pager settings inherited).
fn cmd(agent: &Path) -> Command {
    let mut c = Command::new(binary());
    c.arg("--agent-dir").arg(agent).env_remove("NO_COLOR").env_remove("PAGER").env_remove("PI_SESSIOND_PAGER");
    c.env_remove("COLUMNS").env("TERM", "xterm-256color");
    c
}

fn run(agent: &Path, args: &[&str]) -> Output {
    cmd(agent).args(args).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Asserts a failure: status 2, nothing on stdout, one line on stderr containing every `needle`.
fn assert_fails_with_one_line(out: &Output, needles: &[&str]) {
    assert_eq!(out.status.code(), Some(2), "stderr: {}", text(&out.stderr));
    assert!(out.stdout.is_empty(), "stdout: {}", text(&out.stdout));
    let err = text(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "one line on stderr: {err}");
    for n in needles {
        assert!(err.contains(n), "stderr {err:?} should contain {n:?}");
    }
}

/// The `{"error": {"kind", "message"}}` object a `--json` failure prints, with its status.
fn json_error(out: &Output) -> (Option<i32>, String, String) {
    let v = Json::parse(out.stdout.trim_ascii()).unwrap_or_else(|_| panic!("JSON on stdout: {}", text(&out.stdout)));
    let e = v.get("error").expect("an error member");
    let field = |k: &str| e.get(k).and_then(Json::as_js_str).expect(k).to_string_lossy();
    (out.status.code(), field("kind"), field("message"))
}

#[test]
fn a_missing_session_file_is_an_error_naming_it_not_an_empty_success() {
    let a = agent();
    for command in ["tree", "stats", "inspect", "show"] {
        let mut args = vec![command, "/nope.jsonl"];
        if command == "show" {
            args.push("u1");
        }
        let out = run(&a.dir, &args);
        assert_fails_with_one_line(&out, &["/nope.jsonl", "no such file"]);
    }
    let out = run(&a.dir, &["stats", "/nope", "--json"]);
    let (status, kind, message) = json_error(&out);
    assert_eq!((status, kind.as_str()), (Some(2), "session_not_found"));
    assert!(message.contains("/nope"), "{message}");
    assert!(out.stderr.is_empty(), "--json keeps stderr quiet: {}", text(&out.stderr));
}

#[test]
fn a_file_that_is_not_a_session_is_refused_by_every_reading_command() {
    let a = agent();
    let bogus = a.dir.join("notes.jsonl");
    std::fs::write(&bogus, "{\"hello\":1}\n").unwrap();
    let before = std::fs::read(&bogus).unwrap();
    for command in ["tree", "stats", "inspect"] {
        let out = run(&a.dir, &[command, &s(&bogus)]);
        assert_fails_with_one_line(&out, &["not a valid pi session", "notes.jsonl", "without a type"]);
        let (status, kind, _) = json_error(&run(&a.dir, &[command, &s(&bogus), "--json"]));
        assert_eq!((status, kind.as_str()), (Some(2), "invalid_session_file"));
    }
    assert_eq!(std::fs::read(&bogus).unwrap(), before, "a refused file is left as it was");
    // Each says why, from its first line.
    for (bytes, why) in [
        (&b"{\"type\":\"message\",\"id\":\"a\"}\n"[..], "a \"message\" entry, not a session header"),
        (b"{\"type\":\"session\"}\n", "no string id"),
        (b"root:x:0:0:root:/root:/bin/bash\n", "first line is not JSON"),
        (b"\x7fELF\x02\x01\x01\0\0\0", "not text"),
    ] {
        std::fs::write(&bogus, bytes).unwrap();
        assert_fails_with_one_line(&run(&a.dir, &["stats", &s(&bogus)]), &["not a valid pi session", why]);
    }
    let out = run(&a.dir, &["tree", &s(&a.dir)]);
    assert_fails_with_one_line(&out, &["a directory"]);
}

#[test]
fn search_exits_0_when_it_finds_1_when_nothing_matches_and_2_on_bad_input() {
    let a = agent();
    let found = run(&a.dir, &["search", "tokenizer"]);
    assert_eq!(found.status.code(), Some(0), "{}", text(&found.stderr));
    let none = run(&a.dir, &["search", "xylophone"]);
    assert_eq!(none.status.code(), Some(1));
    assert!(none.stdout.is_empty());
    let none_json = run(&a.dir, &["search", "xylophone", "--json"]);
    assert_eq!((none_json.status.code(), text(&none_json.stdout).trim()), (Some(1), "[]"));
    for bad in [&["search", ""][..], &["search", "   "], &["search", "x", "--limit", "0"], &["search", "re:("]] {
        let out = run(&a.dir, bad);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", text(&out.stderr));
        assert!(out.stdout.is_empty(), "{bad:?}");
    }
    let role = run(&a.dir, &["search", "x", "--role", "usr"]);
    assert_eq!(role.status.code(), Some(2));
    let err = text(&role.stderr);
    assert!(err.contains("usr") && err.contains("user, assistant, toolResult"), "lists the accepted roles: {err}");
    let (status, kind, message) = json_error(&run(&a.dir, &["search", "x", "--role", "usr", "--json"]));
    assert_eq!((status, kind.as_str()), (Some(2), "invalid_params"));
    assert!(message.contains("possible values") && message.contains("bashExecution"), "{message}");
}

#[test]
fn search_groups_hits_by_session_and_counts_them() {
    let a = agent();
    let out = run(&a.dir, &["search", "then"]);
    let t = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0));
    let headings: Vec<&str> = t.lines().filter(|l| !l.is_empty() && !l.starts_with(' ')).collect();
    assert_eq!(headings.len(), 2, "one heading per session, then the count: {t}");
    assert!(headings[0].contains(APP_ID) && headings[0].ends_with("2 matches"), "{t}");
    assert!(t.contains("#u2") && t.contains("#a2") && t.trim_end().ends_with("2 matches in 1 session"), "{t}");
    assert!(!t.contains('\x1b'), "no colour into a pipe: {t:?}");
    let screen = run_on_terminal(cmd(&a.dir).args(["search", "then", "--no-pager"]), 100, 40, b"");
    assert!(screen.text.contains("\x1b[1;31mthen\x1b[0m"), "matches highlighted on a terminal: {:?}", screen.text);
}

#[test]
fn ls_of_a_named_directory_that_is_missing_or_a_file_says_so_instead_of_listing_nothing() {
    let a = agent();
    let missing = s(&a.dir.join("sesions-typo"));
    let file = s(&a.app_session);
    for all in [false, true] {
        let with = |dir: &str| {
            let mut args = vec!["ls", "--dir", dir];
            if all {
                args.push("--all");
            }
            run(&a.dir, &args)
        };
        assert_fails_with_one_line(&with(&missing), &[&missing, "no such file or directory"]);
        assert_fails_with_one_line(&with(&file), &[&file, "not a directory"]);
        let (code, kind, _) = json_error(&cmd(&a.dir).args(["ls", "--json", "--dir", &missing]).output().unwrap());
        assert_eq!((code, kind.as_str()), (Some(2), "session_not_found"));
    }
    // The project's own directory, not named, may be missing: no session of it yet.
    let out = run(&a.dir, &["ls", "--cwd", "/work/a-new-project"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn a_command_that_reads_only_local_files_refuses_catalog_instead_of_answering_from_them() {
    let a = agent();
    let file = s(&a.app_session);
    // Nothing listens there: a command that tried the database would fail differently, after a while.
    let url = "postgres://nobody@127.0.0.1:1/none";
    let page = s(&a.dir.join("page.html"));
    for args in [
        &["tree", &file][..],
        &["show", &file, "u1"],
        &["stats", &file],
        &["inspect", &file],
        &["export", &file, "--html", "-o", &page],
    ] {
        let command = args[0];
        let out = run(&a.dir, &[&["--catalog", url][..], args].concat());
        assert_fails_with_one_line(&out, &[&format!("--catalog: `{command}` reads this machine's session files")]);
        let out = cmd(&a.dir).args(["--json", "--catalog", url]).args(args).output().unwrap();
        let (code, kind, _) = json_error(&out);
        assert_eq!((code, kind.as_str()), (Some(2), "invalid_params"), "{command}");
        let out = run(&a.dir, args);
        assert_eq!(out.status.code(), Some(0), "{command} without --catalog: {}", text(&out.stderr));
    }
}

#[test]
fn stats_of_a_file_without_a_header_says_so_and_reads_the_same_every_time() {
    // pi's open of an empty file makes a header up in memory, a new id each time: shown, it read as the file's.
    let a = agent();
    let file = a.dir.join("empty.jsonl");
    std::fs::write(&file, "").unwrap();
    let first = run(&a.dir, &["stats", &s(&file)]);
    let again = run(&a.dir, &["stats", &s(&file)]);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    assert_eq!(text(&first.stdout), text(&again.stdout), "the same report twice");
    let t = text(&first.stdout);
    assert!(t.contains("header    none in the file") && !t.contains("\nid ") && !t.contains("cwd "), "{t}");
    let json = Json::parse(run(&a.dir, &["stats", "--json", &s(&file)]).stdout.trim_ascii()).unwrap();
    assert_eq!((json.get("sessionId"), json.get("cwd")), (Some(&Json::Null), Some(&Json::Null)), "{json:?}");
    assert_eq!(json.get("entryCount").map(Json::to_canonical_string).as_deref(), Some("0"));
    assert_eq!(json.get("lines").map(Json::to_canonical_string).as_deref(), Some("0"));
    assert_eq!(std::fs::read(&file).unwrap(), b"", "the file is unchanged");
    // A session's own header is shown as it is.
    let t = text(&run(&a.dir, &["stats", &s(&a.app_session)]).stdout);
    assert!(t.contains("\nid ") && t.contains("\ncwd "), "{t}");
}

#[test]
fn commands_that_only_read_create_no_directory_and_no_index() {
    let tmp = temp_dir();
    let missing = tmp.path().join("does/not/exist");
    for args in [
        &["ls", "--all"][..],
        &["ls"],
        &["search", "x"],
        &["tree", "latest"],
        &["ls", "--cwd", "/work/app"],
        &["usage"],
        // A script's --json answer is still JSON on stdout; the missing directory is said on stderr.
        &["ls", "--all", "--json"],
        &["search", "x", "--json"],
        &["usage", "--json"],
    ] {
        let out = run(&missing, args);
        assert!(out.status.code() != Some(0) || ["ls", "usage"].contains(&args[0]), "{args:?}");
        if args.contains(&"--json") {
            assert_eq!(text(&out.stdout), "[]\n", "{args:?}");
        }
        // A mistyped --agent-dir is named as missing, not taken for an empty one.
        if args[0] != "tree" {
            assert!(
                text(&out.stderr).contains(&format!("{} does not exist", s(&missing))),
                "{args:?}: {}",
                text(&out.stderr)
            );
        }
        assert!(!tmp.path().join("does").exists(), "{args:?} created {}", s(&missing));
    }
    // An existing agent directory is not written to either: no index, no project directory.
    let a = agent();
    let before: Vec<_> = walk(&a.dir);
    for args in [&["ls"][..], &["ls", "--all"], &["search", "tokenizer"], &["ls", "--cwd", "/work/new-project"]] {
        run(&a.dir, args);
    }
    run(&a.dir, &["stats", &s(&a.app_session)]);
    assert_eq!(walk(&a.dir), before, "the agent directory is unchanged");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        out.push(d.clone());
        if let Ok(entries) = std::fs::read_dir(&d) {
            for e in entries.flatten() {
                stack.push(e.path());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn protocol_write_into_an_impossible_directory_says_why() {
    let out = Command::new(binary()).args(["protocol", "--write", "/proc/nope"]).output().unwrap();
    assert_fails_with_one_line(&out, &["/proc/nope"]);
}

#[test]
fn server_flags_are_accepted_after_serve_and_bad_values_list_the_accepted_ones() {
    let tmp = temp_dir();
    let out = Command::new(binary())
        .args(["serve", "--durability", "batch", "--framing", "jsonl", "--no-index", "--agent-dir"])
        .arg(tmp.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let bad = Command::new(binary()).args(["serve", "--durability", "sometimes"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let err = text(&bad.stderr);
    assert!(err.contains("sometimes") && err.contains("none, entry, batch"), "{err}");
}

#[test]
fn the_server_started_on_a_terminal_says_what_it_is_and_in_a_pipe_stays_silent() {
    let tmp = temp_dir();
    // Ctrl-D on the terminal ends its input.
    let screen = run_on_terminal(Command::new(binary()).arg("--agent-dir").arg(tmp.path()), 200, 24, b"\x04");
    assert_eq!(screen.status.code(), Some(0));
    let lines: Vec<&str> = screen.text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('^')).collect();
    assert_eq!(lines.len(), 1, "{:?}", screen.text);
    assert!(lines[0].contains("JSON-RPC") && lines[0].contains("stdin") && lines[0].contains("--help"), "{}", lines[0]);
    let piped = Command::new(binary()).arg("--agent-dir").arg(tmp.path()).stdin(std::process::Stdio::null()).output();
    assert!(piped.unwrap().stderr.is_empty());
}

#[test]
fn ls_prints_a_table_for_people_and_pis_listing_with_json() {
    let a = agent();
    let out = cmd(&a.dir).args(["ls"]).current_dir("/").env("PWD", "/").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty() && text(&out.stderr).contains("no sessions"), "{}", text(&out.stderr));
    let out = run(&a.dir, &["ls", "--cwd", "/work/app"]);
    let t = text(&out.stdout);
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), 3, "a header and one row per session: {t}");
    assert!(lines[0].starts_with("SESSION") && lines[0].contains("MSGS") && lines[0].contains("MODIFIED"));
    assert!(lines[0].contains("CWD") && lines[0].ends_with("ID"), "{}", lines[0]);
    assert!(t.contains(APP_ID) && t.contains(APP_ID2) && !t.contains(OTHER_ID), "{t}");
    assert!(t.contains("how do I parse a tokenizer") && t.contains("/work/app"), "{t}");
    let all = run(&a.dir, &["ls", "--all", "--json"]);
    let listing = Json::parse(&all.stdout).unwrap();
    let Json::Array(infos) = &listing else { panic!("an array") };
    assert_eq!(infos.len(), 3);
    assert!(infos.iter().all(|i| i.get("allMessagesText").is_some() && i.get("firstMessage").is_some()));
}

#[test]
fn ls_on_a_terminal_fits_its_width_and_names_each_session_by_its_id_or_a_prefix_of_it() {
    let a = agent();
    for width in [90, 76] {
        let screen = run_on_terminal(cmd(&a.dir).args(["ls", "--all", "--no-pager"]), width, 40, b"");
        assert_eq!(screen.status.code(), Some(0), "{}", screen.text);
        let rows: Vec<&str> = screen.text.lines().collect();
        assert_eq!(rows.len(), 4, "{}", screen.text);
        for row in &rows {
            let visible = strip_ansi(row);
            assert!(visible.chars().count() <= width as usize, "{visible:?} is wider than the terminal");
        }
        // Whole ids would leave the titles a few columns: the prefixes that name them (see the test below).
        let (app, other) = (&APP_ID[..13], &OTHER_ID[..13]);
        assert!(screen.text.contains(app) && screen.text.contains(other), "at {width} columns: {}", screen.text);
    }
    // A search's heading names the session by its path and id: the path gives way, from its start.
    let screen = run_on_terminal(cmd(&a.dir).args(["search", "then", "--no-pager"]), 70, 40, b"");
    let heading = strip_ansi(screen.text.lines().next().unwrap_or_default());
    assert!(heading.contains(APP_ID) && heading.ends_with("2 matches"), "{heading:?}");
    assert!(heading.chars().count() <= 70, "{heading:?}");
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::new();
    let mut escape = false;
    for c in s.chars() {
        if escape {
            escape = !c.is_ascii_alphabetic();
        } else if c == '\x1b' {
            escape = true;
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn tree_marks_the_leaf_and_labels_and_draws_the_branch_holding_the_leaf_first_as_pis_tree_does() {
    let a = agent();
    let out = run(&a.dir, &["tree", &s(&a.app_session)]);
    assert_eq!(out.status.code(), Some(0));
    let t = text(&out.stdout);
    // The abandoned branch (u3) is the earlier one: pi's /tree puts the one holding the leaf before it.
    assert_eq!(
        t,
        "• u1 user: how do I parse a tokenizer\n• a1 assistant: use a state machine [checkpoint]\n\
         ├─ • u2 user: and then what\n│  • a2 assistant: then you test it ◀ leaf\n└─ u3 user: abandoned question\n"
    );
}

#[test]
fn a_label_with_line_breaks_stays_on_its_entrys_line_in_the_tree() {
    let a = agent();
    let mut session = branched_session(APP_ID, "/work/app");
    session.push_str(r#"{"type":"label","id":"l2","parentId":"a2","timestamp":"2026-01-01T00:00:07.000Z","targetId":"u2","label":"two\nlines\r\n and more"}"#);
    session.push('\n');
    std::fs::write(&a.app_session, session).unwrap();
    let t = text(&run(&a.dir, &["tree", &s(&a.app_session)]).stdout);
    assert!(t.contains("• u2 user: and then what [two lines and more]\n"), "{t}");
    assert_eq!(t.lines().count(), 5, "one line per entry: {t}");
}

#[test]
fn a_leaf_that_is_a_label_is_marked_on_the_entry_it_hangs_from_as_hidden_below_it_and_the_active_path_in_a_pipe() {
    let a = agent();
    let mut session = branched_session(APP_ID, "/work/app");
    // pi resumed the session and labelled an entry: the label entry is the leaf, hidden by the default filter.
    session.push_str(r#"{"type":"label","id":"l2","parentId":"a2","timestamp":"2026-01-01T00:00:07.000Z","targetId":"u2","label":"resumed"}"#);
    session.push('\n');
    std::fs::write(&a.app_session, session).unwrap();
    let t = text(&run(&a.dir, &["tree", &s(&a.app_session)]).stdout);
    assert_eq!(
        t,
        "• u1 user: how do I parse a tokenizer\n• a1 assistant: use a state machine [checkpoint]\n\
         ├─ • u2 user: and then what [resumed]\n│  • a2 assistant: then you test it ◀ leaf below (hidden label)\n\
         └─ u3 user: abandoned question\n"
    );
    let all = text(&run(&a.dir, &["tree", &s(&a.app_session), "--filter", "all"]).stdout);
    assert!(all.contains("• l2 label u2 → resumed ◀ leaf\n"), "{all}");
    assert_eq!(all.matches("◀ leaf").count(), 1, "{all}");
}

#[test]
fn tree_is_coloured_on_a_terminal_but_not_in_a_pipe_or_under_no_color() {
    let a = agent();
    let piped = text(&run(&a.dir, &["tree", &s(&a.app_session)]).stdout);
    assert!(!piped.contains('\x1b'));
    let screen = run_on_terminal(cmd(&a.dir).args(["tree", &s(&a.app_session), "--no-pager"]), 120, 40, b"");
    assert!(screen.text.contains("\x1b[1;32m◀ leaf\x1b[0m"), "{:?}", screen.text);
    // The abandoned branch is dimmed; the active one is not.
    let dim_line = screen.text.lines().find(|l| l.contains("abandoned")).unwrap();
    assert!(dim_line.contains("\x1b[2m"), "{dim_line:?}");
    let active_line = screen.text.lines().find(|l| l.contains("and then what")).unwrap();
    assert!(!active_line.contains("\x1b[2m"), "{active_line:?}");
    let no_color = run_on_terminal(
        cmd(&a.dir).env("NO_COLOR", "1").args(["tree", &s(&a.app_session), "--no-pager"]),
        120,
        40,
        b"",
    );
    assert!(!no_color.text.contains('\x1b'), "{:?}", no_color.text);
    assert_eq!(no_color.text, piped);
}

#[test]
fn tree_lines_are_cut_to_the_terminal_width() {
    let a = agent();
    let screen =
        run_on_terminal(cmd(&a.dir).args(["tree", &s(&a.app_session), "--no-pager", "--color", "never"]), 30, 40, b"");
    assert!(screen.text.lines().all(|l| l.chars().count() <= 30), "{}", screen.text);
    assert!(screen.text.contains("• u1 user: how do I parse a t…"), "{}", screen.text);
}

#[test]
fn tree_filters_as_pis_tree_does_and_folds_deep_branches() {
    let a = agent();
    let lines = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["tree", a.app_session.to_str().unwrap()];
        all.extend_from_slice(args);
        text(&run(&a.dir, &all).stdout)
            .lines()
            .map(|l| l.trim_start_matches(['├', '└', '─', ' ', '│', '•']).to_owned())
            .collect()
    };
    assert_eq!(
        lines(&["--filter", "user-only"]),
        [
            "u1 user: how do I parse a tokenizer",
            "u2 user: and then what ◀ leaf below (hidden assistant)",
            "u3 user: abandoned question"
        ],
        "the leaf, hidden, is marked on its nearest shown ancestor, as below it"
    );
    assert_eq!(
        lines(&["--filter", "labeled-only"]),
        ["a1 assistant: use a state machine [checkpoint] ◀ leaf below (hidden assistant)"]
    );
    let all = lines(&["--filter", "all"]);
    assert!(all.iter().any(|l| l.starts_with("l1 label a1 → checkpoint")), "{all:?}");
    assert!(!lines(&[]).iter().any(|l| l.starts_with("l1")), "pi's default view hides label entries");
    // --json is pi's whole getTree: a filter or depth it would ignore is refused, not dropped without a word.
    for args in [&["--filter", "user-only"][..], &["--depth", "1"]] {
        let mut all = vec!["tree", a.app_session.to_str().unwrap(), "--json"];
        all.extend_from_slice(args);
        let (code, kind, message) = json_error(&run(&a.dir, &all));
        assert_eq!((code, kind.as_str()), (Some(2), "invalid_params"), "{args:?}");
        assert!(message.starts_with("tree --json is pi's whole getTree"), "{message}");
    }
    let whole = run(&a.dir, &["tree", a.app_session.to_str().unwrap(), "--json", "--filter", "all"]);
    assert_eq!(whole.status.code(), Some(0), "{}", text(&whole.stderr));
    let folded = lines(&["--depth", "0"]);
    // The branch holding the leaf (u2, a2) first, then the abandoned one (u3).
    assert_eq!(folded[2..], ["… 2 entries folded", "… 1 entry folded"], "{folded:?}");
    let named = temp_dir();
    let file = named.path().join("named.jsonl");
    let mut text_of_file = branched_session(APP_ID, "/work/app");
    text_of_file.push_str(r#"{"type":"session_info","id":"n1","parentId":"a2","timestamp":"2026-01-01T00:00:07.000Z","name":"Parser work"}"#);
    text_of_file.push('\n');
    std::fs::write(&file, text_of_file).unwrap();
    let first = text(&run(&a.dir, &["tree", &s(&file)]).stdout).lines().next().unwrap().to_owned();
    assert_eq!(first, "Parser work", "a named session's tree starts with its name");
    // A filter that leaves nothing says so, rather than printing nothing (or the name alone) and ending well.
    let unlabelled = named.path().join("unlabelled.jsonl");
    std::fs::write(&unlabelled, one_message_session(APP_ID, "/work/app", "u1", "hello")).unwrap();
    let none = run(&a.dir, &["tree", &s(&unlabelled), "--filter", "labeled-only"]);
    assert_eq!((none.status.code(), text(&none.stdout)), (Some(0), String::new()));
    assert_eq!(text(&none.stderr), "nothing to show: none of the session's 1 entry passes --filter labeled-only\n");
    let bad = run(&a.dir, &["tree", &s(&a.app_session), "--filter", "tools"]);
    assert!(bad.status.code() == Some(2) && text(&bad.stderr).contains("no-tools, user-only, labeled-only"));
}

#[test]
fn long_output_goes_through_the_pager_on_a_terminal_and_never_into_a_pipe() {
    let a = agent();
    let tmp = temp_dir();
    let paged = tmp.path().join("paged.txt");
    let pager = format!("cat > '{}'", s(&paged));
    let screen = run_on_terminal(cmd(&a.dir).env("PAGER", &pager).args(["tree", &s(&a.app_session)]), 120, 40, b"");
    assert_eq!(screen.status.code(), Some(0));
    let through_pager = std::fs::read_to_string(&paged).expect("the pager ran");
    assert!(through_pager.contains("◀ leaf") && !screen.text.contains("◀ leaf"));
    std::fs::remove_file(&paged).unwrap();
    let out = cmd(&a.dir).env("PAGER", &pager).args(["tree", &s(&a.app_session)]).output().unwrap();
    assert!(text(&out.stdout).contains("◀ leaf"));
    assert!(!paged.exists(), "no pager when stdout is a pipe");
    run_on_terminal(cmd(&a.dir).env("PAGER", &pager).args(["tree", &s(&a.app_session), "--no-pager"]), 120, 40, b"");
    assert!(!paged.exists(), "--no-pager");
    // less writes ~/.lesshst after every page, but a command that reads creates no file: it is told not to,
    // unless its user chose a history file.
    let told = tmp.path().join("told.txt");
    let pager = format!("printf %s \"$LESSHISTFILE\" > '{}'; cat > /dev/null", s(&told));
    run_on_terminal(
        cmd(&a.dir).env("PAGER", &pager).env_remove("LESSHISTFILE").args(["tree", &s(&a.app_session)]),
        120,
        40,
        b"",
    );
    assert_eq!(std::fs::read_to_string(&told).unwrap(), "-");
    run_on_terminal(
        cmd(&a.dir).env("PAGER", &pager).env("LESSHISTFILE", "/mine").args(["tree", &s(&a.app_session)]),
        120,
        40,
        b"",
    );
    assert_eq!(std::fs::read_to_string(&told).unwrap(), "/mine");
}

#[test]
fn ls_on_an_80_column_terminal_names_sessions_by_id_prefixes_that_resolve_leaving_the_title_room() {
    let a = agent();
    let ls = |cols: u16| {
        let screen = run_on_terminal(
            cmd(&a.dir).current_dir("/").args(["--no-pager", "ls", "--cwd", "/work/app"]),
            cols,
            40,
            b"",
        );
        assert_eq!(screen.status.code(), Some(0), "{}", screen.text);
        let rows: Vec<String> =
            screen.text.lines().skip(1).filter(|l| !l.trim().is_empty()).map(str::to_owned).collect();
        (screen.text, rows)
    };
    let shown_ids = |rows: &[String]| -> Vec<String> {
        rows.iter().map(|l| l.split_whitespace().last().unwrap().to_owned()).collect()
    };
    let (narrow, rows) = ls(80);
    assert!(narrow.lines().all(|l| l.chars().count() <= 80), "fits: {narrow}");
    assert!(narrow.contains("a second session"), "the title keeps room: {narrow}");
    let mut shown = shown_ids(&rows);
    shown.sort();
    assert_eq!(shown, [&APP_ID[..13], &APP_ID2[..13]], "{narrow}");
    let (wide, rows) = ls(200);
    let mut shown = shown_ids(&rows);
    shown.sort();
    assert_eq!(shown, [APP_ID, APP_ID2], "wide enough, whole ids: {wide}");
    // A session of another project, not listed, made in the same millisecond as a listed one: `stats` looks among
    // every project's, so the listed one's prefix goes on until it differs from that one's too.
    let other = project_dir(&a.dir, "/work/other");
    let neighbour = "0193aaaa-2222-7000-8000-0000000000ee";
    let body = one_message_session(neighbour, "/work/other", "n1", "next door");
    std::fs::write(other.join(format!("2026-01-01T00-00-04-000Z_{neighbour}.jsonl")), body).unwrap();
    let (narrow, rows) = ls(80);
    let shown = shown_ids(&rows);
    let second = shown.iter().find(|p| APP_ID2.starts_with(p.as_str())).expect("the second session's prefix");
    assert!(second.len() > 13 && !neighbour.starts_with(second.as_str()), "{narrow}");
    std::fs::remove_file(other.join(format!("2026-01-01T00-00-04-000Z_{neighbour}.jsonl"))).unwrap();
    // A session created in the same millisecond as another: both prefixes go on until they differ.
    let app = project_dir(&a.dir, "/work/app");
    let twin = "0193aaaa-1111-7000-8000-0000000000ff";
    let body = one_message_session(twin, "/work/app", "t1", "a twin");
    std::fs::write(app.join(format!("2026-01-01T00-00-03-000Z_{twin}.jsonl")), body).unwrap();
    let (narrow, rows) = ls(80);
    let shown = shown_ids(&rows);
    assert_eq!(shown.len(), 3, "{narrow}");
    for prefix in &shown {
        let id = [APP_ID, APP_ID2, twin].into_iter().find(|id| id.starts_with(prefix.as_str())).expect(prefix);
        let out = run(&a.dir, &["stats", prefix, "--json"]);
        let stats = Json::parse(&out.stdout).unwrap_or_else(|_| panic!("{prefix}: {}", text(&out.stderr)));
        assert_eq!(
            stats.get("sessionId").and_then(Json::as_js_str).unwrap().to_string_lossy(),
            id,
            "{prefix} names it"
        );
    }
}

#[test]
fn a_pager_that_cannot_be_run_is_an_error_not_a_silent_success() {
    let a = agent();
    for pager in ["/nonexistent/pager", "/etc/hostname"] {
        let screen = run_on_terminal(cmd(&a.dir).env("PAGER", pager).args(["tree", &s(&a.app_session)]), 120, 40, b"");
        assert_eq!(screen.status.code(), Some(2), "PAGER={pager}: {}", screen.text);
        assert!(screen.text.contains(&format!("the pager `{pager}` could not be run")), "{}", screen.text);
        assert!(screen.text.contains("--no-pager"), "{}", screen.text);
    }
}

#[test]
fn sessions_are_named_by_full_id_unique_prefix_or_latest() {
    let a = agent();
    let by_id = run(&a.dir, &["stats", APP_ID, "--json"]);
    let stats = Json::parse(&by_id.stdout).unwrap();
    assert_eq!(stats.get("file").and_then(Json::as_js_str).unwrap().to_string_lossy(), s(&a.app_session));
    let by_prefix = run(&a.dir, &["stats", "0193aaaa-1", "--json"]);
    assert_eq!(Json::parse(&by_prefix.stdout).unwrap().get("file"), stats.get("file"));
    let ambiguous = run(&a.dir, &["stats", "0193aaaa"]);
    assert_fails_with_one_line(&ambiguous, &["2 sessions match", APP_ID, APP_ID2]);
    let (_, kind, _) = json_error(&run(&a.dir, &["stats", "0193aaaa", "--json"]));
    assert_eq!(kind, "ambiguous_session");
    let unknown = run(&a.dir, &["stats", "0193ffff"]);
    assert_fails_with_one_line(&unknown, &["0193ffff", "no session id starts with it"]);
    // `latest` is the newest session of the current directory's project.
    std::fs::create_dir_all("/tmp/pi-sessiond-cli-latest").unwrap();
    let app2 = project_dir(&a.dir, "/tmp/pi-sessiond-cli-latest");
    std::fs::create_dir_all(&app2).unwrap();
    let newest = app2.join("b.jsonl");
    std::fs::write(&newest, one_message_session("n1", "/tmp/pi-sessiond-cli-latest", "z1", "newest")).unwrap();
    let latest = cmd(&a.dir).current_dir("/tmp/pi-sessiond-cli-latest").args(["tree", "latest"]).output().unwrap();
    assert!(text(&latest.stdout).contains("z1 user: newest"), "{}", text(&latest.stderr));
    let none = cmd(&a.dir).current_dir("/").args(["tree", "latest"]).output().unwrap();
    assert_fails_with_one_line(&none, &["no session of /"]);
}

#[test]
fn show_prints_one_entry_for_people_and_as_stored_with_json() {
    let a = agent();
    let out = run(&a.dir, &["show", &s(&a.app_session), "a1"]);
    let t = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0));
    assert!(t.contains("assistant") && t.contains("use a state machine") && t.contains("checkpoint"), "{t}");
    assert!(t.contains("acme/small") && t.contains("on the active branch"), "{t}");
    let stored = run(&a.dir, &["show", &s(&a.app_session), "a1", "--json"]);
    let line = branched_session(APP_ID, "/work/app").lines().nth(2).unwrap().to_owned();
    assert_eq!(text(&stored.stdout), line + "\n");
    let (status, kind, _) = json_error(&run(&a.dir, &["show", &s(&a.app_session), "zz", "--json"]));
    assert_eq!((status, kind.as_str()), (Some(2), "entry_not_found"));
}

/// How deeply nested a JSON text is.
fn nesting(bytes: &[u8]) -> usize {
    let (mut depth, mut max, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                max = max.max(depth);
            }
            b'}' | b']' => depth -= 1,
            _ => {}
        }
    }
    max
}

#[test]
fn inspect_of_a_long_session_stays_shallow_enough_for_any_json_tool_and_only_prints_one_member() {
    let tmp = temp_dir();
    let file = tmp.path().join("long.jsonl");
    let mut lines = vec![header("long", "/work")];
    for i in 0..3000 {
        let parent = (i > 0).then(|| format!("e{}", i - 1));
        lines.push(message(&format!("e{i}"), parent.as_deref(), i % 60, &user("step")));
    }
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let flat = run(tmp.path(), &["inspect", &s(&file)]);
    assert_eq!(flat.status.code(), Some(0));
    assert!(nesting(&flat.stdout) < 10, "flat tree: nesting {}", nesting(&flat.stdout));
    let nested = run(tmp.path(), &["inspect", &s(&file), "--nested"]);
    assert!(nesting(&nested.stdout) > 3000, "pi's own shape on request");
    let only = run(tmp.path(), &["inspect", &s(&file), "--only", "leafId"]);
    assert_eq!(text(&only.stdout), "\"e2999\"\n");
    let tree = Json::parse(&run(tmp.path(), &["inspect", &s(&file), "--only", "tree"]).stdout).unwrap();
    let Json::Array(nodes) = &tree else { panic!("a flat list") };
    assert_eq!(nodes.len(), 3000);
    assert_eq!(nodes[2999].get("depth"), Some(&Json::number(2999.0)));
    assert_eq!(nodes[2999].get("parentIndex"), Some(&Json::number(2998.0)));
    let bad = run(tmp.path(), &["inspect", &s(&file), "--only", "bogus"]);
    assert!(bad.status.code() == Some(2) && text(&bad.stderr).contains("contextEntries"), "{}", text(&bad.stderr));
}

#[test]
fn inspect_on_a_terminal_is_indented() {
    let a = agent();
    let screen = run_on_terminal(
        cmd(&a.dir).args(["inspect", &s(&a.app_session), "--only", "header", "--no-pager"]),
        120,
        40,
        b"",
    );
    assert!(screen.text.starts_with("{\n  \"type\": \"session\",\n"), "{:?}", screen.text);
}

#[test]
fn stats_reports_tokens_and_cost_by_model_and_timing_only_when_asked() {
    let a = agent();
    let out = run(&a.dir, &["stats", &s(&a.app_session)]);
    let t = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0));
    assert!(t.contains("6 (5 message, 1 label)") && t.contains("3 user, 2 assistant"), "{t}");
    assert!(
        t.contains("2 branch tips, 1 branch point,") && t.contains(", 1 label,") && t.contains("0 compactions"),
        "{t}"
    );
    let row = |model: &str| {
        t.lines()
            .find(|l| l.starts_with(model))
            .unwrap_or_else(|| panic!("{model} in {t}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(row("acme/large"), ["acme/large", "1", "1,000", "200", "0", "0", "$0.2500"]);
    assert_eq!(row("acme/small"), ["acme/small", "1", "100", "20", "0", "0", "$0.0010"]);
    assert_eq!(row("total"), ["total", "2", "1,100", "220", "0", "0", "$0.2510"]);
    assert!(!t.contains("openMs"));
    let json = Json::parse(&run(&a.dir, &["stats", &s(&a.app_session), "--json", "--timing"]).stdout).unwrap();
    assert!(json.get("openMs").is_some() && json.get("peakRssKiB").is_some());
    assert_eq!(json.get("entryCount"), Some(&Json::number(6.0)));
    assert_eq!(json.get("total").and_then(|t| t.get("cost")), Some(&Json::number(0.251)));
}

#[test]
fn version_names_the_pi_release_it_follows() {
    let out = Command::new(binary()).arg("--version").output().unwrap();
    let v = text(&out.stdout);
    assert!(v.starts_with("pi-sessiond ") && v.contains("pi 1.6.0"), "{v}");
}

#[test]
fn shell_completions_and_the_man_page_come_from_the_same_flags() {
    let bash = text(&Command::new(binary()).args(["completions", "bash"]).output().unwrap().stdout);
    assert!(bash.contains("pi-sessiond") && bash.contains("--filter") && bash.contains("user-only"), "bash completion");
    let zsh = Command::new(binary()).args(["completions", "zsh"]).output().unwrap();
    assert!(zsh.status.success() && text(&zsh.stdout).contains("#compdef pi-sessiond"));
    let man = text(&Command::new(binary()).arg("man").output().unwrap().stdout);
    assert!(man.contains(".TH pi-sessiond") && man.contains("search") && man.contains("Exit status"), "{man}");
}

#[test]
fn every_command_takes_json_and_then_reports_errors_as_json_on_stdout() {
    let a = agent();
    let cases: [&[&str]; 7] = [
        &["tree", "/nope.jsonl"],
        &["stats", "/nope.jsonl"],
        &["inspect", "/nope.jsonl"],
        &["show", "/nope.jsonl", "x"],
        &["export", "/nope.jsonl", "--html", "-o", "/tmp/never.html"],
        &["search", "re:("],
        &["ls", "--all", "--bogus-flag"],
    ];
    for args in cases {
        let mut with_json = args.to_vec();
        with_json.push("--json");
        let out = run(&a.dir, &with_json);
        let (status, kind, message) = json_error(&out);
        assert_eq!(status, Some(2), "{args:?}");
        assert!(!kind.is_empty() && !message.is_empty(), "{args:?}");
        assert!(out.stderr.is_empty(), "{args:?}: {}", text(&out.stderr));
    }
}

/// What bash offers for `words` (the last one being completed), through the completion `pi-sessiond completions
/// bash` registers: the script is sourced, and the function `complete -p pi-sessiond` names is called as bash's
/// programmable completion calls it (COMP_WORDS, COMP_CWORD, COMP_LINE; the command, the word and the one before).
fn bash_completes(words: &[&str]) -> Vec<String> {
    let dir = temp_dir();
    let script = dir.path().join("pi-sessiond.bash");
    let out = Command::new(binary()).args(["completions", "bash"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    std::fs::write(&script, &out.stdout).unwrap();
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let driver = format!(
        r#"source "$1" || exit 3
COMP_WORDS=({words})
COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
COMP_LINE="${{COMP_WORDS[*]}}"
COMP_POINT=${{#COMP_LINE}}
fn=$(complete -p pi-sessiond | sed -n 's/.*-F \([^ ]*\) .*/\1/p')
[ -n "$fn" ] || exit 4
"$fn" pi-sessiond "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"
printf '%s\n' "${{COMPREPLY[@]}}""#,
        words = quoted.join(" ")
    );
    let out =
        Command::new("bash").args(["--norc", "--noprofile", "-c", &driver, "bash"]).arg(&script).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "bash: {}", text(&out.stderr));
    text(&out.stdout).lines().filter(|l| !l.is_empty()).map(str::to_string).collect()
}

#[test]
fn bash_completes_a_subcommands_flags_and_their_values_despite_the_hyphen_in_the_name() {
    assert_eq!(bash_completes(&["pi-sessiond", "tree", "--fil"]), ["--filter"]);
    assert_eq!(
        bash_completes(&["pi-sessiond", "tree", "--filter", ""]),
        ["default", "no-tools", "user-only", "labeled-only", "all"]
    );
    assert_eq!(bash_completes(&["pi-sessiond", "tree", "--filter", "user"]), ["user-only"]);
    // The top level, which worked before, still does.
    assert_eq!(bash_completes(&["pi-sessiond", "tre"]), ["tree"]);
}

#[test]
fn ls_and_latest_from_a_subdirectory_of_a_project_find_the_projects_sessions() {
    let a = agent();
    let work = temp_dir();
    let app = work.path().join("app");
    let deep = app.join("src").join("parser");
    std::fs::create_dir_all(&deep).unwrap();
    let app_cwd = s(&app);
    let sessions = project_dir(&a.dir, &app_cwd);
    std::fs::create_dir_all(&sessions).unwrap();
    let id = "0193cccc-4444-7000-8000-000000000004";
    let session = one_message_session(id, &app_cwd, "p1", "parser session");
    std::fs::write(sessions.join(format!("2026-01-01T00-00-03-000Z_{id}.jsonl")), session).unwrap();
    let from_deep = |args: &[&str]| cmd(&a.dir).args(args).current_dir(&deep).env("PWD", &deep).output().unwrap();
    let ls = from_deep(&["ls"]);
    assert_eq!(ls.status.code(), Some(0), "{}", text(&ls.stderr));
    let t = text(&ls.stdout);
    assert!(t.contains(id) && t.contains("parser session"), "{t}{}", text(&ls.stderr));
    assert!(!t.contains(APP_ID), "only the project's sessions: {t}");
    let latest = from_deep(&["tree", "latest"]);
    assert!(text(&latest.stdout).contains("p1 user: parser session"), "{}", text(&latest.stderr));
    // A project of its own under another one is its own project.
    let inner_sessions = project_dir(&a.dir, &s(&deep));
    std::fs::create_dir_all(&inner_sessions).unwrap();
    let ls = from_deep(&["ls"]);
    assert!(ls.stdout.is_empty() && text(&ls.stderr).contains("no sessions"), "{}", text(&ls.stdout));
}

#[test]
fn a_session_with_a_megabyte_cwd_does_not_widen_every_row_of_a_piped_listing() {
    let a = agent();
    let huge = format!("/work/{}", "deep/".repeat(220_000));
    let sessions = project_dir(&a.dir, "/work/huge");
    std::fs::create_dir_all(&sessions).unwrap();
    let id = "0193dddd-5555-7000-8000-000000000005";
    let session = one_message_session(id, &huge, "h1", "huge cwd");
    std::fs::write(sessions.join(format!("2026-01-01T00-00-04-000Z_{id}.jsonl")), session).unwrap();
    let out = run(&a.dir, &["ls", "--all"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    assert_eq!(t.lines().count(), 5, "a header and four sessions: {}", &t[..t.len().min(2000)]);
    assert!(t.contains(id) && t.contains(OTHER_ID), "{}", &t[..t.len().min(2000)]);
    for line in t.lines() {
        assert!(line.chars().count() < 200, "a row of {} characters", line.chars().count());
    }
    assert!(t.contains("/deep/deep/  0193dddd"), "the cwd keeps its end: {t}");
}

#[test]
fn wide_characters_take_their_two_columns_in_a_table_on_a_terminal() {
    let a = agent();
    let sessions = project_dir(&a.dir, "/work/app");
    let id = "0193eeee-6666-7000-8000-000000000006";
    let title = "日本語の質問について詳しく説明してください。トークナイザーの状態機械を作りたい";
    let session = one_message_session(id, "/work/app", "w1", title);
    std::fs::write(sessions.join(format!("2026-01-01T00-00-05-000Z_{id}.jsonl")), session).unwrap();
    let screen = run_on_terminal(cmd(&a.dir).args(["ls", "--cwd", "/work/app", "--no-pager"]), 90, 40, b"");
    let columns =
        |l: &str| strip_ansi(l).chars().map(|c| if c > '\u{2e80}' && c != '…' { 2 } else { 1 }).sum::<usize>();
    for line in screen.text.lines() {
        assert!(columns(line) <= 90, "{line:?} takes {} columns of 90", columns(line));
    }
    // Every row's id starts in the same column.
    let id_at: Vec<usize> = screen
        .text
        .lines()
        .skip(1)
        .map(|l| {
            let l = strip_ansi(l);
            columns(&l[..l.find("0193").unwrap()])
        })
        .collect();
    assert!(id_at.windows(2).all(|w| w[0] == w[1]), "ids start at columns {id_at:?}:\n{}", screen.text);
}

#[test]
fn a_search_cut_at_its_limit_says_how_many_matches_there_are_and_which_it_shows() {
    let a = agent();
    // "a" is in more than two messages.
    let every = text(&run(&a.dir, &["search", "a", "--json", "--limit", "1000"]).stdout);
    let Ok(every) = Json::parse(every.as_bytes()).unwrap().into_array() else { panic!() };
    let paths: std::collections::HashSet<String> =
        every.iter().map(|h| h.get("path").unwrap().to_canonical_string()).collect();
    assert!(every.len() > 4, "{} matches", every.len());
    let cut = text(&run(&a.dir, &["search", "a", "--limit", "2"]).stdout);
    assert_eq!(
        cut.lines().last().unwrap(),
        format!("{} matches in {} sessions; these are 1–2 (--offset 2 shows the next 2)", every.len(), paths.len()),
        "{cut}"
    );
    let whole = text(&run(&a.dir, &["search", "abandoned", "--limit", "2"]).stdout);
    assert_eq!(whole.lines().last().unwrap(), "1 match in 1 session", "{whole}");
    let exact = text(&run(&a.dir, &["search", "then", "--json"]).stdout);
    let parsed = Json::parse(exact.as_bytes()).unwrap();
    let Json::Array(all) = &parsed else { panic!("{exact}") };
    let limited = text(&run(&a.dir, &["search", "then", "--limit", &all.len().to_string()]).stdout);
    assert_eq!(
        limited.lines().last().unwrap(),
        format!("{} matches in 1 session", all.len()),
        "exactly the limit: {limited}"
    );
}

/// Text a session holds as its author wrote it: a tool's output with a screen clear, a window title, a bell, a
/// clipboard write (OSC 52), a colour, a C1 control sequence introducer, a DEL and a right-to-left override.
const HOSTILE: &str = r"hi \u001b[31mRED\u001b]0;pwned\u0007 \u001b]52;c;c2VjcmV0\u0007 \u009b2J \u007f \u202eend";

/// The controls of [`HOSTILE`] as the command line shows them.
const HOSTILE_SHOWN: &str = "hi ␛[31mRED␛]0;pwned␇ ␛]52;c;c2VjcmV0␇ �2J ␡ <U+202E>end";

/// Every byte that a terminal acts on, other than line breaks, tabs and the command line's own colours.
fn terminal_controls(screen: &str) -> Vec<char> {
    let mut rest = screen;
    let mut found = Vec::new();
    while let Some(c) = rest.chars().next() {
        if c == '\x1b' {
            let params = &rest[2.min(rest.len())..];
            let digits = params.bytes().take_while(|b| b.is_ascii_digit() || *b == b';').count();
            if rest.as_bytes().get(1) == Some(&b'[') && params.as_bytes().get(digits) == Some(&b'm') {
                rest = &params[digits + 1..];
                continue;
            }
        }
        let bidi = matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if (c < ' ' && !matches!(c, '\n' | '\t' | '\r')) || ('\u{7f}'..='\u{9f}').contains(&c) || bidi {
            found.push(c);
        }
        rest = &rest[c.len_utf8()..];
    }
    found
}

#[test]
fn control_sequences_in_session_text_are_shown_as_pictures_by_every_command_never_sent_to_the_terminal() {
    let tmp = temp_dir();
    let dir = tmp.path().join("agent");
    let project = project_dir(&dir, "/work/app");
    std::fs::create_dir_all(&project).unwrap();
    let id = "0193cccc-4444-7000-8000-000000000004";
    let file = project.join(format!("2026-01-01T00-00-00-000Z_{id}.jsonl"));
    let lines = [
        header(id, "/work/app"),
        message("u1", None, 1, &user(HOSTILE)),
        message("a1", Some("u1"), 2, &assistant(HOSTILE, "small", 1, 1, 0.0)),
        r#"{"type":"label","id":"l1","parentId":"a1","timestamp":"2026-01-01T00:00:03.000Z","targetId":"a1","label":"\u001b[2Jlabel"}"#.to_owned(),
    ];
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let commands: [&[&str]; 5] =
        [&["tree", id], &["show", id, "u1"], &["show", id, "a1"], &["ls", "--all"], &["search", "RED"]];
    for args in commands {
        let piped = run(&dir, args);
        assert_eq!(piped.status.code(), Some(0), "{args:?}: {}", text(&piped.stderr));
        let piped = text(&piped.stdout);
        assert_eq!(terminal_controls(&piped), Vec::<char>::new(), "{args:?} in a pipe: {piped:?}");
        let mut with_no_pager = args.to_vec();
        with_no_pager.push("--no-pager");
        let screen = run_on_terminal(cmd(&dir).args(&with_no_pager), 200, 40, b"");
        assert_eq!(terminal_controls(&screen.text), Vec::<char>::new(), "{args:?} on a terminal: {:?}", screen.text);
        assert!(screen.text.contains("\x1b[0m"), "{args:?}: still coloured on a terminal: {:?}", screen.text);
        if args[0] != "ls" {
            // (ls cuts its titles to 60 columns.)
            assert!(strip_ansi(&screen.text).contains(HOSTILE_SHOWN), "{args:?}: {:?}", screen.text);
        }
    }
    let json = text(&run(&dir, &["show", id, "u1", "--json"]).stdout);
    assert!(json.contains(r"\u001b[31mRED"), "--json keeps the text exactly, escaped as JSON: {json}");
}

#[test]
fn export_refuses_to_write_its_page_over_a_session_file_and_writes_nothing() {
    let a = agent();
    let file = s(&a.app_session);
    let before = std::fs::read(&a.app_session).unwrap();
    let other = project_dir(&a.dir, "/work/other").join(format!("2026-01-01T00-00-02-000Z_{OTHER_ID}.jsonl"));
    let other_before = std::fs::read(&other).unwrap();
    let empty_jsonl = a.dir.join("notes.jsonl");
    std::fs::write(&empty_jsonl, "").unwrap();
    // Named as a session where pi would list it: the page would be a session pi cannot read.
    let new_jsonl = other.with_file_name("2026-01-02T00-00-00-000Z_page.jsonl");
    for (target, what) in [
        (file.clone(), "is a pi session file"),
        (s(&other), "is a pi session file"),
        (s(&empty_jsonl), "is named .jsonl"),
        (s(&new_jsonl), "is named .jsonl"),
        (s(&new_jsonl.with_extension("JSONL")), "is named .jsonl"),
        (s(&a.dir), "is a directory"),
    ] {
        let out = run(&a.dir, &["export", &file, "--html", "-o", &target]);
        assert_fails_with_one_line(&out, &[&target, what, "nothing was written"]);
        let out = cmd(&a.dir).args(["--json", "export", &file, "--html", "-o", &target]).output().unwrap();
        let (code, kind, _) = json_error(&out);
        assert_eq!((code, kind.as_str()), (Some(2), "invalid_params"), "{target}");
    }
    assert_eq!(std::fs::read(&a.app_session).unwrap(), before, "the session exported is as it was");
    assert_eq!(std::fs::read(&other).unwrap(), other_before, "the other session too");
    assert_eq!(std::fs::read(&empty_jsonl).unwrap(), b"", "and the .jsonl file");
    assert!(!new_jsonl.exists(), "no page is written under a session's name");
    // An earlier page is replaced, as `-o` says.
    let page = a.dir.join("page.html");
    std::fs::write(&page, "old page").unwrap();
    let out = run(&a.dir, &["export", &file, "--html", "-o", &s(&page)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(std::fs::read_to_string(&page).unwrap().starts_with("<!doctype html>"));
    // HTML is the one format: naming it is not needed.
    std::fs::write(&page, "old page").unwrap();
    let out = run(&a.dir, &["export", &file, "-o", &s(&page)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(std::fs::read_to_string(&page).unwrap().starts_with("<!doctype html>"));
    // `-o -` is stdout, not a file named `-`.
    let out = cmd(&a.dir).current_dir(&a.dir).args(["export", &file, "-o", "-"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("<!doctype html>"));
    assert!(!a.dir.join("-").exists());
}

#[test]
fn an_argument_that_is_not_utf8_is_refused_with_status_2_not_a_crash() {
    use std::os::unix::ffi::OsStrExt;
    let a = agent();
    let bytes = std::ffi::OsStr::from_bytes(b"/tmp/bad\xffname.jsonl");
    for args in [vec![std::ffi::OsStr::new("tree"), bytes], vec![std::ffi::OsStr::new("search"), bytes]] {
        let out = cmd(&a.dir).args(&args).output().unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(err.contains("invalid UTF-8"), "{args:?}: {err}");
    }
}

#[test]
fn a_session_is_found_by_the_id_in_its_header_whatever_its_file_is_named_and_two_matches_are_both_named() {
    let a = agent();
    let app = project_dir(&a.dir, "/work/app");
    let session = |id: &str, text: &str| one_message_session(id, "/work/app", "z1", text);
    // Named after one id, holding another (a copied or renamed file; an empty file pi wrote a header into).
    let renamed_id = "0193dddd-4444-7000-8000-000000000004";
    std::fs::write(
        app.join("2026-01-02T00-00-00-000Z_0193eeee-5555-7000-8000-000000000005.jsonl"),
        session(renamed_id, "renamed"),
    )
    .unwrap();
    let out = run(&a.dir, &["tree", renamed_id]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("renamed"), "{}", text(&out.stdout));
    let out = run(&a.dir, &["tree", "0193dddd"]);
    assert!(text(&out.stdout).contains("renamed"), "a prefix of it: {}", text(&out.stderr));
    // A prefix one file's name matches and another file's header matches: both, not the one the name showed.
    std::fs::write(
        app.join("2026-01-03T00-00-00-000Z_0193ffff-6666-7000-8000-000000000006.jsonl"),
        session("0193ffff-6666-7000-8000-000000000006", "named"),
    )
    .unwrap();
    std::fs::write(
        app.join("2026-01-03T00-00-01-000Z_0194aaaa-7777-7000-8000-000000000007.jsonl"),
        session("0193ffff-6666-7000-8000-000000000099", "copied"),
    )
    .unwrap();
    let out = run(&a.dir, &["tree", "0193ffff-6666"]);
    assert_fails_with_one_line(
        &out,
        &["2 sessions match", "0193ffff-6666-7000-8000-000000000006", "0193ffff-6666-7000-8000-000000000099"],
    );
    // Copies of one session share its id: the files are named, since nothing typed can pick one by id.
    let copy = app.join("2026-01-03T00-00-02-000Z_0193ffff-6666-7000-8000-0000000000aa.jsonl");
    std::fs::copy(app.join("2026-01-03T00-00-00-000Z_0193ffff-6666-7000-8000-000000000006.jsonl"), &copy).unwrap();
    let out = run(&a.dir, &["tree", "0193ffff-6666-7000-8000-00000000000"]);
    assert_fails_with_one_line(&out, &["2 sessions match", &s(&copy), "2026-01-03T00-00-00-000Z_0193ffff-6666"]);
    std::fs::remove_file(&copy).unwrap();
    // A file named as the session asked for that holds none says what is wrong with it.
    let empty = app.join("2026-01-04T00-00-00-000Z_0195eeee-8888-7000-8000-000000000008.jsonl");
    std::fs::write(&empty, "").unwrap();
    let out = run(&a.dir, &["tree", "0195eeee"]);
    assert_fails_with_one_line(&out, &[&s(&empty), "is empty (no session header yet)"]);
    let out = cmd(&a.dir).args(["--json", "tree", "0195eeee"]).output().unwrap();
    assert_eq!(json_error(&out).1, "invalid_session_file");
}

#[test]
fn a_command_s_warning_is_one_plain_line_to_the_person_not_a_timestamped_log_record() {
    let a = agent();
    let index = a.dir.join("garbage.sqlite");
    std::fs::write(&index, "not a database").unwrap();
    let out = cmd(&a.dir).args(["--index", &s(&index), "ls", "--cwd", "/work/app"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    let first = err.lines().next().unwrap_or_default();
    assert!(first.starts_with("pi-sessiond: warning: catalog index: "), "{err}");
    assert!(first.contains(&s(&index)) && !first.contains("WARN"), "{err}");
}

#[test]
fn a_regex_that_does_not_compile_is_refused_in_one_line_naming_the_fault() {
    let a = agent();
    let out = run(&a.dir, &["search", "re:(unclosed"]);
    assert_fails_with_one_line(&out, &["invalid search query: re:(unclosed: unclosed group"]);
}
