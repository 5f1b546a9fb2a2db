//! The sidecar through its real binary: lifecycle, both framings, every method, change notifications, errors,
//! ordering, cancellation, and sizes.

use std::io::BufReader;
use std::process::Stdio;
use std::time::Duration;

use pi_sessiond::session::json::Json;

use crate::support::sidecar::{initialize_over, sidecar_writing_to, Sidecar, Wire};
use crate::support::{json, s, str_of, temp_dir, user_message};

fn num_of(v: &Json) -> f64 {
    pi_sessiond::session::js::to_number(Some(v))
}

fn code_of(e: &Json) -> f64 {
    num_of(e.get("code").expect("code"))
}

fn kind_of(e: &Json) -> String {
    str_of(e.get("data").and_then(|d| d.get("kind")).expect("data.kind"))
}

#[test]
fn initialize_reports_server_protocol_and_every_method() {
    let mut sc = Sidecar::new();
    let r = sc.call("initialize", json(r#"{"clientInfo":{"name":"test","version":"1"},"capabilities":{}}"#));
    assert_eq!(r.get("serverInfo").and_then(|s| s.get("name")), Some(&Json::str("pi-sessiond")));
    assert_eq!(r.get("protocolVersion"), Some(&Json::str("1.0")));
    let caps = r.get("capabilities").unwrap();
    assert_eq!(caps.get("framing"), Some(&Json::str("jsonl")));
    let Some(Json::Array(methods)) = caps.get("methods") else { panic!() };
    assert!(methods.contains(&Json::str("session/appendMessage")) && methods.contains(&Json::str("sessions/list")));
    sc.notify("initialized", json("{}"));
    assert_eq!(sc.finish(), 0);
}

#[test]
fn shutdown_then_exit_ends_with_status_0_and_exit_alone_with_1() {
    let mut sc = Sidecar::new();
    assert_eq!(sc.call("shutdown", json("{}")), Json::Null);
    let e = sc.call_err("session/inMemory", json("{}"));
    assert_eq!(code_of(&e), -32600.0, "requests after shutdown are refused");
    sc.notify("exit", json("{}"));
    assert_eq!(sc.wait(), 0);

    let mut sc = Sidecar::new();
    sc.notify("exit", json("{}"));
    assert_eq!(sc.wait(), 1, "exit without shutdown, as in LSP");

    // Everything received before shutdown is answered before it; what comes after is refused.
    let mut sc = Sidecar::new();
    let opened = sc.start("session/inMemory", json("{}"));
    let listed = sc.start("sessions/listAll", json("{}"));
    let shutdown = sc.start("shutdown", json("{}"));
    let late = sc.start("session/inMemory", json("{}"));
    let mut order = Vec::new();
    while order.len() < 4 {
        let m = sc.next_message(Duration::from_secs(30)).expect("an answer");
        if let Some(id) = m.get("id") {
            order.push((num_of(id) as u64, m.get("error").is_some()));
        }
    }
    let at = |id: u64| order.iter().position(|(i, _)| *i == id).unwrap();
    assert!(at(opened) < at(shutdown) && at(listed) < at(shutdown), "{order:?}");
    assert!(order[at(late)].1, "a request after shutdown is refused: {order:?}");
    sc.notify("exit", json("{}"));
    assert_eq!(sc.wait(), 0);

    // shutdown inside a batch answers with the batch (it does not wait for the array it is part of).
    let mut sc = Sidecar::new();
    sc.send_raw(
        br#"[{"jsonrpc":"2.0","id":1,"method":"session/inMemory","params":{}},{"jsonrpc":"2.0","id":2,"method":"shutdown"}]
"#,
    );
    let Some(Ok(batch)) = sc.next_message(Duration::from_secs(30)).map(Json::into_array) else {
        panic!("a batch answer")
    };
    assert_eq!(batch.len(), 2);
    sc.notify("exit", json("{}"));
    assert_eq!(sc.wait(), 0);

    // Pipelined, as a shell script sends them: shutdown is still answered, and the status is 0.
    let mut sc = Sidecar::new();
    let id = sc.start("shutdown", json("{}"));
    sc.notify("exit", json("{}"));
    assert_eq!(sc.response(id).get("result"), Some(&Json::Null));
    assert_eq!(sc.wait(), 0);
}

#[test]
fn end_of_input_is_an_orderly_shutdown_that_answers_what_was_sent() {
    let dir = temp_dir();
    let mut sc = Sidecar::new();
    let st = sc.call("session/create", json(&format!(r#"{{"cwd":"/p","sessionDir":"{}"}}"#, s(dir.path()))));
    let h = str_of(st.get("handle").unwrap());
    let file = str_of(st.get("sessionFile").unwrap());
    let id = sc.start(
        "session/appendMessage",
        json(&format!(r#"{{"handle":"{h}","message":{}}}"#, user_message("last words"))),
    );
    // Close stdin at once: the request must still be answered, and written, before the process exits.
    sc.close_stdin();
    let r = sc.response(id);
    assert!(r.get("result").is_some(), "{}", r.to_canonical_string());
    assert_eq!(sc.wait(), 0);
    assert!(std::fs::read_to_string(&file).unwrap().contains("last words"));
}

#[test]
fn sigterm_is_an_orderly_shutdown() {
    let mut sc = Sidecar::new();
    sc.call("session/inMemory", json("{}"));
    std::process::Command::new("kill").args(["-TERM", &sc.pid().to_string()]).status().unwrap();
    assert_eq!(sc.wait(), 0);
}

/// Processes spinning on the machine's cores until dropped (busy processes, not threads of the test: the scheduler
/// shares a process group's time among its threads).
struct BusyLoops(Vec<std::process::Child>);

impl BusyLoops {
    fn start(n: usize) -> BusyLoops {
        BusyLoops(
            (0..n)
                .map(|_| {
                    std::process::Command::new("sh").args(["-c", "while :; do :; done"]).spawn().expect("a busy loop")
                })
                .collect(),
        )
    }
}

impl Drop for BusyLoops {
    fn drop(&mut self) {
        for busy in &mut self.0 {
            let _ = busy.kill();
            let _ = busy.wait();
        }
    }
}

#[test]
fn sigterm_right_after_the_first_answer_is_an_orderly_shutdown_even_on_a_busy_machine() {
    // The handler was once installed by a task the runtime ran when its worker got to it, and an answer served
    // on the blocking pool could come first: on a loaded machine one such stop in six killed the process.
    let _load = BusyLoops::start(2);
    let statuses: Vec<i32> = (0..60)
        .map(|_| {
            let mut child = sidecar_writing_to(Stdio::piped());
            initialize_over(&mut child.stdin.take().unwrap(), &mut BufReader::new(child.stdout.take().unwrap()));
            // At once, as a host would: a `kill` command's start, or a test host checking the answer against the
            // protocol, gave the sidecar the time the old handler needed.
            let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("a pid");
            rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM sent");
            child.wait().unwrap().code().unwrap_or(-1)
        })
        .collect();
    assert!(statuses.iter().all(|&s| s == 0), "exit statuses after SIGTERM: {statuses:?}");
}

#[test]
fn closing_stdin_is_an_orderly_shutdown_with_status_0() {
    let mut sc = Sidecar::new();
    sc.call("session/inMemory", json("{}"));
    assert_eq!(sc.finish(), 0);
}

#[test]
fn lsp_framing_is_detected_and_answered_in_kind() {
    let mut sc = Sidecar::spawn(Wire::Lsp, &[], &[]);
    let r = sc.call("initialize", json("{}"));
    assert_eq!(r.get("capabilities").and_then(|c| c.get("framing")), Some(&Json::str("lsp")));
    let st = sc.call("session/inMemory", json("{}"));
    let h = str_of(st.get("handle").unwrap());
    sc.call("session/appendMessage", json(&format!(r#"{{"handle":"{h}","message":{}}}"#, user_message("over lsp"))));
    assert_eq!(num_of(&sc.call("session/getEntryCount", json(&format!(r#"{{"handle":"{h}"}}"#)))), 1.0);
    assert_eq!(sc.finish(), 0);
}

#[test]
fn the_framing_flag_overrides_detection() {
    let mut sc = Sidecar::spawn(Wire::Lsp, &["--framing", "lsp"], &[]);
    assert!(sc.call("initialize", json("{}")).get("serverInfo").is_some());
    drop(sc);
    let mut sc = Sidecar::spawn(Wire::Jsonl, &["--framing", "jsonl"], &[]);
    assert!(sc.call("initialize", json("{}")).get("serverInfo").is_some());
}

#[test]
fn output_escapes_u2028_and_lone_surrogates_are_stored_as_pi_stores_them() {
    let dir = temp_dir();
    let mut sc = Sidecar::new();
    let st = sc.call("session/create", json(&format!(r#"{{"cwd":"/p","sessionDir":"{}"}}"#, s(dir.path()))));
    let h = str_of(st.get("handle").unwrap());
    // The request carries a raw U+2028 and a lone surrogate escape.
    let id = sc.start(
        "session/appendMessage",
        json(&format!(r#"{{"handle":"{h}","message":{{"role":"user","content":"a\u2028b \ud83d","timestamp":1}}}}"#)),
    );
    let r = sc.response(id);
    assert!(r.get("result").is_some(), "{}", r.to_canonical_string());
    let file = str_of(st.get("sessionFile").unwrap());
    let text = std::fs::read_to_string(&file).unwrap();
    // pi's JSON.stringify writes U+2028 raw and the lone surrogate as an escape.
    assert!(text.contains("\"content\":\"a\u{2028}b \\ud83d\""), "{text}");
    // Raw bytes on the wire: no U+2028 may appear unescaped.
    let mut raw = std::process::Command::new(crate::support::sidecar::binary())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = {
        use std::io::{BufRead, Write};
        let mut stdin = raw.stdin.take().unwrap();
        let mut lines = std::io::BufReader::new(raw.stdout.take().unwrap());
        let mut line = String::new();
        writeln!(stdin, r#"{{"jsonrpc":"2.0","id":1,"method":"session/open","params":{{"path":"{file}"}}}}"#).unwrap();
        lines.read_line(&mut line).unwrap();
        writeln!(stdin, r#"{{"jsonrpc":"2.0","id":2,"method":"session/getEntries","params":{{"handle":"h1"}}}}"#)
            .unwrap();
        line.clear();
        lines.read_line(&mut line).unwrap();
        line
    };
    let _ = raw.wait();
    assert!(!stdout.contains('\u{2028}') && stdout.contains("\\u2028"), "{stdout}");
}

#[test]
fn malformed_frames_and_bad_requests_get_json_rpc_errors_and_the_process_lives_on() {
    let mut sc = Sidecar::new();
    let mut expect = |raw: &str, code: f64| {
        sc.send_raw(raw.as_bytes());
        let m = sc.next_message(Duration::from_secs(20)).expect("an answer");
        let e = m.get("error").unwrap_or_else(|| panic!("{raw} → {}", m.to_canonical_string()));
        assert_eq!(code_of(e), code, "{raw} → {}", m.to_canonical_string());
        m
    };
    expect("{not json\n", -32700.0);
    expect("42\n", -32600.0);
    expect("[]\n", -32600.0);
    expect("{\"id\":1,\"method\":\"initialize\"}\n", -32600.0);
    expect("{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"initialize\"}\n", -32600.0);
    expect("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":5}\n", -32600.0);
    expect("{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"nope\"}\n", -32601.0);
    let m = expect("{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"session/create\",\"params\":{\"cwd\":7}}\n", -32602.0);
    assert_eq!(m.get("error").unwrap().get("data").unwrap().get("path"), Some(&Json::str("cwd")));
    // The message names the member, not a line and column of a frame the host's library wrote.
    let message = str_of(m.get("error").unwrap().get("message").unwrap());
    assert_eq!(message, "invalid params: cwd: invalid type: integer `7`, expected a string");
    // A missing member is named too, not just a wrong one.
    let m = expect("{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"sessions/list\",\"params\":{}}\n", -32602.0);
    assert_eq!(m.get("error").unwrap().get("data").unwrap().get("path"), Some(&Json::str("cwd")));
    assert_eq!(str_of(m.get("error").unwrap().get("message").unwrap()), "invalid params: missing field `cwd`");
    let m = expect("{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"session/create\",\"params\":[\"/x\"]}\n", -32602.0);
    assert_eq!(m.get("id"), Some(&Json::number(5.0)));
    expect(
        "{\"jsonrpc\":\"2.0\",\"id\":-1.5,\"method\":\"session/getState\",\"params\":{\"handle\":\"nope\"}}\n",
        1003.0,
    );
    // A notification never gets an answer, even an unknown one; the next request still does.
    sc.send_raw(b"{\"jsonrpc\":\"2.0\",\"method\":\"nothing/here\"}\n");
    let r = sc.call("initialize", json("{}"));
    assert!(r.get("serverInfo").is_some());
    // A mixed batch: one array, notifications omitted, errors per element.
    sc.send_raw(b"[{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"initialize\"},{\"jsonrpc\":\"2.0\",\"method\":\"initialized\"},7]\n");
    let m = sc.next_message(Duration::from_secs(20)).unwrap();
    let items = m.into_array().unwrap_or_else(|m| panic!("batch answer is an array: {}", m.to_canonical_string()));
    assert_eq!(items.len(), 2);
    assert!(items[0].get("result").is_some());
    assert_eq!(code_of(items[1].get("error").unwrap()), -32600.0);
}

#[test]
fn ids_of_every_json_rpc_kind_are_echoed() {
    let mut sc = Sidecar::new();
    for id in [r#""str""#, "0", "-7", "1.5", "null", "18446744073709551615"] {
        sc.send_raw(format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"initialize\"}}\n").as_bytes());
        let m = sc.next_message(Duration::from_secs(20)).unwrap();
        assert_eq!(m.get("id"), Some(&json(id)), "{}", m.to_canonical_string());
        assert!(m.get("result").is_some());
    }
}

fn open_created(sc: &mut Sidecar, dir: &str) -> (String, String) {
    let st = sc.call("session/create", json(&format!(r#"{{"cwd":"/p","sessionDir":"{dir}"}}"#)));
    (str_of(st.get("handle").unwrap()), str_of(st.get("sessionFile").unwrap()))
}

#[test]
fn every_mutation_sends_one_session_changed_before_its_response_with_consecutive_seq() {
    let dir = temp_dir();
    let mut sc = Sidecar::new();
    let (h, _) = open_created(&mut sc, &s(dir.path()));
    let calls = [
        ("session/appendMessage", format!(r#"{{"handle":"{h}","message":{}}}"#, user_message("one")), "append"),
        ("session/appendThinkingLevelChange", format!(r#"{{"handle":"{h}","thinkingLevel":"high"}}"#), "append"),
        ("session/appendModelChange", format!(r#"{{"handle":"{h}","provider":"p","modelId":"m"}}"#), "append"),
        (
            "session/appendUsage",
            format!(r#"{{"handle":"{h}","kind":"k","provider":"p","model":"m","usage":{{"input":1}}}}"#),
            "append",
        ),
        ("session/appendCustomEntry", format!(r#"{{"handle":"{h}","customType":"x","data":null}}"#), "append"),
        ("session/appendSessionInfo", format!(r#"{{"handle":"{h}","name":"  named\n"}}"#), "append"),
        (
            "session/appendCustomMessageEntry",
            format!(r#"{{"handle":"{h}","customType":"x","content":"c","display":true}}"#),
            "append",
        ),
        ("session/resetLeaf", format!(r#"{{"handle":"{h}"}}"#), "leaf"),
        ("session/appendMessage", format!(r#"{{"handle":"{h}","message":{}}}"#, user_message("two")), "append"),
        ("session/branchWithSummary", format!(r#"{{"handle":"{h}","entryId":null,"summary":"s"}}"#), "append"),
        ("session/newSession", format!(r#"{{"handle":"{h}"}}"#), "rebind"),
    ];
    for (n, (method, params, kind)) in calls.iter().enumerate() {
        let id = sc.start(method, json(params));
        // The notification must arrive before the response.
        let first = sc.next_message(Duration::from_secs(20)).expect("a message");
        assert_eq!(
            first.get("method"),
            Some(&Json::str("session/changed")),
            "{method}: {}",
            first.to_canonical_string()
        );
        let params = first.get("params").unwrap();
        assert_eq!(params.get("seq"), Some(&Json::number(n as f64 + 1.0)), "{method}");
        assert_eq!(params.get("handle"), Some(&Json::str(&h)));
        let change = params.get("change").unwrap();
        assert_eq!(change.get("kind"), Some(&Json::str(kind)), "{method}");
        let r = sc.response(id);
        assert!(r.get("result").is_some(), "{method}: {}", r.to_canonical_string());
        if *kind == "append" {
            let Some(Json::Array(entries)) = change.get("entries") else { panic!() };
            assert_eq!(entries.len(), 1);
            // The entry is exactly what reads show.
            let id = entries[0].get("id").unwrap().clone();
            let read =
                sc.call("session/getEntry", json(&format!(r#"{{"handle":"{h}","id":{}}}"#, id.to_canonical_string())));
            assert_eq!(read, entries[0]);
        }
        if *kind == "rebind" {
            let state = change.get("state").unwrap();
            assert_eq!(*state, sc.call("session/getState", json(&format!(r#"{{"handle":"{h}"}}"#))));
        }
    }
    // Reads and failed mutations send nothing.
    sc.call("session/getTree", json(&format!(r#"{{"handle":"{h}"}}"#)));
    sc.call_err("session/branch", json(&format!(r#"{{"handle":"{h}","entryId":"nope"}}"#)));
    assert!(sc.take_notifications("session/changed").is_empty());
    assert!(sc.next_message(Duration::from_millis(200)).is_none());
}

#[test]
fn expected_leaf_id_guards_mutations_with_content_modified() {
    let mut sc = Sidecar::new();
    let h = str_of(sc.call("session/inMemory", json("{}")).get("handle").unwrap());
    let first =
        sc.call("session/appendMessage", json(&format!(r#"{{"handle":"{h}","message":{}}}"#, user_message("a"))));
    let first_id = str_of(first.get("id").unwrap());
    sc.take_notifications("session/changed");
    let e = sc.call_err(
        "session/appendMessage",
        json(&format!(r#"{{"handle":"{h}","expectedLeafId":"stale","message":{}}}"#, user_message("b"))),
    );
    assert_eq!(code_of(&e), -32801.0);
    assert_eq!(kind_of(&e), "content_modified");
    assert_eq!(e.get("data").unwrap().get("leafId"), Some(&Json::str(&first_id)));
    sc.call(
        "session/appendMessage",
        json(&format!(r#"{{"handle":"{h}","expectedLeafId":"{first_id}","message":{}}}"#, user_message("c"))),
    );
    assert_eq!(num_of(&sc.call("session/getEntryCount", json(&format!(r#"{{"handle":"{h}"}}"#)))), 2.0);
}

#[test]
fn opening_an_open_file_returns_the_same_handle_until_the_last_close() {
    let dir = temp_dir();
    let mut sc = Sidecar::new();
    let (h, file) = open_created(&mut sc, &s(dir.path()));
    sc.call("session/appendMessage", json(&format!(r#"{{"handle":"{h}","message":{}}}"#, user_message("x"))));
    let again = sc.call("session/open", json(&format!(r#"{{"path":"{file}"}}"#)));
    assert_eq!(str_of(again.get("handle").unwrap()), h);
    sc.call("session/close", json(&format!(r#"{{"handle":"{h}"}}"#)));
    assert_eq!(
        num_of(&sc.call("session/getEntryCount", json(&format!(r#"{{"handle":"{h}"}}"#)))),
        1.0,
        "one reference left"
    );
    sc.call("session/close", json(&format!(r#"{{"handle":"{h}"}}"#)));
    let e = sc.call_err("session/getEntryCount", json(&format!(r#"{{"handle":"{h}"}}"#)));
    assert_eq!(kind_of(&e), "handle_not_found");
}

#[test]
fn opening_an_open_file_with_a_cwd_override_gives_the_handle_that_cwd_as_pis_open_gives_its_manager() {
    // pi opens a session whose recorded cwd is gone, asks the user, then opens it again in the user's cwd while
    // its first manager (and so the handle) is still alive: that second manager's cwd is the override.
    let dir = temp_dir();
    let path = dir.path().join("gone-cwd.jsonl");
    let header =
        r#"{"type":"session","version":3,"id":"s1","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/gone/away"}"#;
    std::fs::write(&path, format!("{header}\n")).unwrap();
    let mut sc = Sidecar::new();
    let first = sc.call("session/open", json(&format!(r#"{{"path":"{}"}}"#, s(&path))));
    let h = str_of(first.get("handle").unwrap());
    assert_eq!(str_of(first.get("cwd").unwrap()), "/gone/away");
    let here = s(dir.path());
    let again = sc.call("session/open", json(&format!(r#"{{"path":"{}","cwdOverride":"{here}"}}"#, s(&path))));
    assert_eq!(str_of(again.get("handle").unwrap()), h, "the same handle");
    assert_eq!(str_of(again.get("cwd").unwrap()), here);
    let state = sc.call("session/getState", json(&format!(r#"{{"handle":"{h}"}}"#)));
    assert_eq!(str_of(state.get("cwd").unwrap()), here);
    // An open without an override leaves the handle's cwd as it is.
    let third = sc.call("session/open", json(&format!(r#"{{"path":"{}"}}"#, s(&path))));
    assert_eq!(str_of(third.get("cwd").unwrap()), here);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), format!("{header}\n"), "the file is as it was");
}

#[test]
fn opening_never_writes_and_every_read_method_answers() {
    let dir = temp_dir();
    let path = dir.path().join("v1.jsonl");
    let v1 = concat!(
        r#"{"type":"session","id":"legacy","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#,
        "\n",
        r#"{"type":"message","timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"a","timestamp":1}}"#,
        "\nnot json\n",
        r#"{"type":"message","timestamp":"2025-01-01T00:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"b"}],"provider":"p","model":"m","timestamp":2}}"#
    );
    std::fs::write(&path, v1).unwrap();
    let mut sc = Sidecar::new();
    let st = sc.call("session/open", json(&format!(r#"{{"path":"{}"}}"#, s(&path))));
    let h = str_of(st.get("handle").unwrap());
    let hp = |extra: &str| json(&format!(r#"{{"handle":"{h}"{extra}}}"#));
    let leaf = sc.call("session/getLeafId", hp(""));
    assert!(leaf.as_js_str().is_some());
    assert!(sc.call("session/getLeafEntry", hp("")).get("id").is_some());
    let entries = sc.call("session/getEntries", hp(""));
    let Json::Array(all) = &entries else { panic!() };
    assert_eq!(all.len(), 2);
    let page = sc.call("session/getEntries", hp(r#","offset":1,"limit":5"#));
    assert_eq!(page, Json::Array(vec![all[1].clone()]));
    let first_id = all[0].get("id").unwrap().to_canonical_string();
    assert!(sc.call("session/getEntry", hp(&format!(r#","id":{first_id}"#))).get("id").is_some());
    assert_eq!(
        sc.call("session/getChildren", hp(&format!(r#","parentId":{first_id}"#))),
        Json::Array(vec![all[1].clone()])
    );
    assert_eq!(sc.call("session/getLabel", hp(r#","id":"x""#)), Json::Null);
    assert_eq!(sc.call("session/getBranch", hp("")), entries);
    assert_eq!(sc.call("session/getHeader", hp("")).get("version"), Some(&Json::number(3.0)), "migrated in memory");
    assert_eq!(num_of(&sc.call("session/getEntryCount", hp(""))), 2.0);
    let Ok(tree) = sc.call("session/getTree", hp("")).into_array() else { panic!() };
    assert_eq!(tree.len(), 1);
    assert_eq!(sc.call("session/getSessionName", hp("")), Json::Null);
    let Ok(warnings) = sc.call("session/getWarnings", hp("")).into_array() else { panic!() };
    assert!(warnings
        .iter()
        .any(|w| w.get("line") == Some(&Json::number(3.0)) && w.get("kind") == Some(&Json::str("malformed_line"))));
    let Ok(ctx_entries) = sc.call("session/buildContextEntries", hp("")).into_array() else { panic!() };
    assert_eq!(ctx_entries.len(), 2);
    let projection = sc.call("session/buildSessionProjection", hp(""));
    assert!(projection.get("entries").is_some());
    let context = sc.call("session/buildSessionContext", hp(""));
    assert_eq!(context.get("model").and_then(|m| m.get("modelId")), Some(&Json::str("m")));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), v1, "nothing was written");
    // The first write applies the migration; the malformed line survives.
    sc.call("session/appendMessage", hp(&format!(r#","message":{}"#, user_message("c"))));
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(r#""version":3"#) && text.contains("not json"), "{text}");
}

#[test]
fn pipelined_appends_to_one_session_apply_in_arrival_order() {
    let dir = temp_dir();
    let mut sc = Sidecar::new();
    let (h, file) = open_created(&mut sc, &s(dir.path()));
    let ids: Vec<u64> = (0..60)
        .map(|n| {
            sc.start(
                "session/appendMessage",
                json(&format!(r#"{{"handle":"{h}","message":{}}}"#, user_message(&format!("m{n}")))),
            )
        })
        .collect();
    let mut returned = Vec::new();
    for id in ids {
        let r = sc.response(id);
        returned.push(str_of(r.get("result").unwrap().get("id").unwrap()));
    }
    let text = std::fs::read_to_string(&file).unwrap();
    let written: Vec<String> =
        text.lines().skip(1).map(|l| str_of(Json::parse(l.as_bytes()).unwrap().get("id").unwrap())).collect();
    assert_eq!(written, returned, "file order is request order");
    for (n, line) in text.lines().skip(1).enumerate() {
        assert!(line.contains(&format!("\"m{n}\"")), "line {n}: {line}");
    }
    let seqs: Vec<f64> = sc
        .take_notifications("session/changed")
        .iter()
        .map(|n| num_of(n.get("params").unwrap().get("seq").unwrap()))
        .collect();
    assert_eq!(seqs, (1..=60).map(f64::from).collect::<Vec<_>>());
}

/// A directory of many sessions, slow enough to list that a request can be cancelled or overtaken.
fn big_directory(n: usize) -> tempfile::TempDir {
    let dir = temp_dir();
    let body = "x".repeat(20_000);
    for i in 0..n {
        let content = format!(
            "{{\"type\":\"session\",\"version\":3,\"id\":\"s{i}\",\"timestamp\":\"2025-01-01T00:00:00.000Z\",\"cwd\":\"/p\"}}\n{}\n",
            (0..5).map(|k| format!(r#"{{"type":"message","id":"m{k}","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{{"role":"user","content":"{body}","timestamp":{k}}}}}"#)).collect::<Vec<_>>().join("\n")
        );
        std::fs::write(dir.path().join(format!("{i:05}.jsonl")), content).unwrap();
    }
    dir
}

#[test]
fn a_slow_listing_does_not_block_appends_and_can_be_cancelled() {
    let sessions = big_directory(1500);
    let dir = temp_dir();
    let mut sc = Sidecar::new();
    let (h, _) = open_created(&mut sc, &s(dir.path()));
    let list = sc.start("sessions/listAll", json(&format!(r#"{{"sessionDir":"{}"}}"#, s(sessions.path()))));
    let append = sc.start(
        "session/appendMessage",
        json(&format!(r#"{{"handle":"{h}","message":{}}}"#, user_message("meanwhile"))),
    );
    // The append is answered while the listing is still running.
    let mut order = Vec::new();
    while order.len() < 2 {
        let m = sc.next_message(Duration::from_secs(60)).expect("answers");
        if m.get("method").is_none() {
            order.push(m.get("id").cloned());
        }
    }
    assert_eq!(order[0], Some(Json::number(append as f64)), "the append does not wait for the listing");
    assert_eq!(order[1], Some(Json::number(list as f64)));
    // Cancelled while running: -32800.
    let id = sc.start("sessions/listAll", json(&format!(r#"{{"sessionDir":"{}"}}"#, s(sessions.path()))));
    sc.notify("$/cancelRequest", json(&format!(r#"{{"id":{id}}}"#)));
    let e = sc.response(id);
    assert_eq!(code_of(e.get("error").unwrap_or_else(|| panic!("{}", e.to_canonical_string()))), -32800.0);
    // The server is still fine.
    assert!(sc.call("initialize", json("{}")).get("serverInfo").is_some());
}

#[test]
fn a_cancelled_append_is_still_applied_whole() {
    let dir = temp_dir();
    let mut sc = Sidecar::new();
    let (h, file) = open_created(&mut sc, &s(dir.path()));
    let id =
        sc.start("session/appendMessage", json(&format!(r#"{{"handle":"{h}","message":{}}}"#, user_message("kept"))));
    sc.notify("$/cancelRequest", json(&format!(r#"{{"id":{id}}}"#)));
    let r = sc.response(id);
    assert!(r.get("result").is_some(), "mutations are not cancellable once sent: {}", r.to_canonical_string());
    assert!(std::fs::read_to_string(&file).unwrap().contains("kept"));
}

#[test]
fn list_reports_progress_with_the_callers_token() {
    let sessions = big_directory(30);
    let mut sc = Sidecar::new();
    let r = sc
        .call("sessions/listAll", json(&format!(r#"{{"sessionDir":"{}","progressToken":"tok"}}"#, s(sessions.path()))));
    let Ok(infos) = r.into_array() else { panic!() };
    assert_eq!(infos.len(), 30);
    let progress = sc.take_notifications("$/progress");
    let kinds: Vec<String> =
        progress.iter().map(|n| str_of(n.get("params").unwrap().get("value").unwrap().get("kind").unwrap())).collect();
    assert_eq!(kinds.first().map(String::as_str), Some("begin"));
    assert_eq!(kinds.last().map(String::as_str), Some("end"));
    assert!(progress.iter().all(|n| n.get("params").unwrap().get("token") == Some(&Json::str("tok"))));
}

#[test]
fn large_sessions_come_back_whole() {
    let dir = temp_dir();
    let path = dir.path().join("big.jsonl");
    let status = std::process::Command::new(env!("CARGO"))
        .args(["run", "--quiet", "--example", "gen_session", "--"])
        .arg(&path)
        .args(["--bytes", "40000000", "--image-kib", "200"])
        .status()
        .unwrap();
    assert!(status.success());
    let mut sc = Sidecar::new();
    let h = str_of(sc.call("session/open", json(&format!(r#"{{"path":"{}"}}"#, s(&path)))).get("handle").unwrap());
    let Ok(entries) = sc.call("session/getEntries", json(&format!(r#"{{"handle":"{h}"}}"#))).into_array() else {
        panic!()
    };
    let lines = std::fs::read_to_string(&path).unwrap().lines().count();
    assert_eq!(entries.len(), lines - 1);
    let Ok(tree) = sc.call("session/getTree", json(&format!(r#"{{"handle":"{h}"}}"#))).into_array() else { panic!() };
    assert!(!tree.is_empty());
}

#[test]
fn catalog_and_the_remaining_open_methods_work_through_the_sidecar() {
    let root = temp_dir();
    let agent = s(&root.path().join("agent"));
    let mut sc = Sidecar::spawn(Wire::Jsonl, &["--agent-dir", &agent], &[]);
    // create (default directory under --agent-dir), write, then find it every way there is.
    let st = sc.call("session/create", json(r#"{"cwd":"/work/proj","id":"my-id"}"#));
    let h = str_of(st.get("handle").unwrap());
    let file = str_of(st.get("sessionFile").unwrap());
    assert!(file.starts_with(&format!("{agent}/sessions/--work-proj--/")), "{file}");
    assert!(file.ends_with("_my-id.jsonl"));
    sc.call("session/appendMessage", json(&format!(r#"{{"handle":"{h}","message":{}}}"#, user_message("find me"))));
    let Ok(listed) = sc.call("sessions/list", json(r#"{"cwd":"/work/proj"}"#)).into_array() else { panic!() };
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].get("firstMessage"), Some(&Json::str("find me")));
    assert_eq!(listed[0].get("path"), Some(&Json::str(&file)));
    assert_eq!(listed[0].get("allMessagesText"), Some(&Json::str("find me")));
    // A host that searches with sessions/search can leave the bulk out.
    let Ok(lean) =
        sc.call("sessions/list", json(r#"{"cwd":"/work/proj","includeAllMessagesText":false}"#)).into_array()
    else {
        panic!()
    };
    let Ok(mut full) = listed[0].clone().into_object() else { panic!() };
    full.remove("allMessagesText");
    assert_eq!(lean, vec![Json::Object(full)]);
    let Ok(all) = sc.call("sessions/listAll", json("{}")).into_array() else { panic!() };
    assert_eq!(all.len(), 1);
    assert_eq!(
        sc.call("sessions/findById", json(r#"{"cwd":"/work/proj","id":"my-id"}"#)).get("path"),
        Some(&Json::str(&file))
    );
    assert_eq!(sc.call("sessions/findById", json(r#"{"cwd":"/work/proj","id":"my"}"#)).get("path"), Some(&Json::Null));
    // continueRecent finds the same file, hence the same handle.
    let recent = sc.call("session/continueRecent", json(r#"{"cwd":"/work/proj"}"#));
    assert_eq!(str_of(recent.get("handle").unwrap()), h);
    // forkFrom copies the history into another cwd.
    let fork = sc.call("session/forkFrom", json(&format!(r#"{{"sourcePath":"{file}","targetCwd":"/work/other"}}"#)));
    assert_eq!(num_of(fork.get("entryCount").unwrap()), 1.0);
    assert_eq!(fork.get("header").unwrap().get("parentSession"), Some(&Json::str(&file)));
    // setSessionFile to a new path starts a session there (lazily); to an open file is refused.
    let elsewhere = s(&root.path().join("elsewhere.jsonl"));
    let moved = sc.call(
        "session/setSessionFile",
        json(&format!(r#"{{"handle":"{}","path":"{elsewhere}"}}"#, str_of(fork.get("handle").unwrap()))),
    );
    assert_eq!(moved.get("sessionFile"), Some(&Json::str(&elsewhere)));
    assert_eq!(num_of(moved.get("entryCount").unwrap()), 0.0);
    let e = sc.call_err(
        "session/setSessionFile",
        json(&format!(r#"{{"handle":"{}","path":"{file}"}}"#, str_of(fork.get("handle").unwrap()))),
    );
    assert_eq!(kind_of(&e), "invalid_params");
    // inMemory with entries adopts their header.
    let mem = sc.call(
        "session/inMemory",
        json(r#"{"cwd":"/m","entries":[{"type":"session","version":3,"id":"adopted","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/x"},{"type":"message","id":"a","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"x","timestamp":1}}]}"#),
    );
    assert_eq!(mem.get("sessionId"), Some(&Json::str("adopted")));
    assert_eq!(mem.get("leafId"), Some(&Json::str("a")));
    assert_eq!(mem.get("isPersisted"), Some(&Json::Bool(false)));
    // A compaction with an explicit checkpoint and a retained tail.
    let mh = str_of(mem.get("handle").unwrap());
    sc.call(
        "session/appendCompaction",
        json(&format!(r#"{{"handle":"{mh}","summary":"s","firstKeptEntryId":null,"tokensBefore":5,"systemMessage":{{"role":"system","content":"given","timestamp":0}},"retainedTail":[{}]}}"#, user_message("tail"))),
    );
    let ctx = sc.call("session/buildSessionContext", json(&format!(r#"{{"handle":"{mh}"}}"#)));
    let Some(Json::Array(messages)) = ctx.get("messages") else { panic!() };
    let roles: Vec<String> = messages.iter().map(|m| str_of(m.get("role").unwrap())).collect();
    assert_eq!(roles, vec!["system", "compactionSummary", "user"]);
    // Errors of the session kinds.
    let e = sc.call_err("session/create", json(r#"{"cwd":"/x","id":"-bad"}"#));
    assert_eq!(kind_of(&e), "invalid_session_id");
    let bad = s(&root.path().join("bad.jsonl"));
    std::fs::write(&bad, "not a session\n").unwrap();
    let e = sc.call_err("session/open", json(&format!(r#"{{"path":"{bad}"}}"#)));
    assert_eq!(kind_of(&e), "invalid_session_file");
    let e =
        sc.call_err("session/appendLabelChange", json(&format!(r#"{{"handle":"{h}","targetId":"nope","label":"x"}}"#)));
    assert_eq!(kind_of(&e), "entry_not_found");
    let e = sc.call_err(
        "session/forkFrom",
        json(&format!(r#"{{"sourcePath":"{}/missing.jsonl","targetCwd":"/x"}}"#, s(root.path()))),
    );
    assert_eq!(kind_of(&e), "invalid_session_file");
}

#[test]
fn the_flat_tree_is_the_same_tree_without_nesting() {
    let dir = temp_dir();
    let mut sc = Sidecar::new();
    let (h, _) = open_created(&mut sc, &s(dir.path()));
    let append = |sc: &mut Sidecar, text: &str| {
        let r =
            sc.call("session/appendMessage", json(&format!(r#"{{"handle":"{h}","message":{}}}"#, user_message(text))));
        str_of(r.get("id").unwrap())
    };
    let first = append(&mut sc, "one");
    let second = append(&mut sc, "two");
    append(&mut sc, "three");
    sc.call("session/branch", json(&format!(r#"{{"handle":"{h}","entryId":"{first}"}}"#)));
    append(&mut sc, "two, again");
    append(&mut sc, "three, again");
    sc.call("session/appendLabelChange", json(&format!(r#"{{"handle":"{h}","targetId":"{second}","label":"kept"}}"#)));
    sc.call("session/resetLeaf", json(&format!(r#"{{"handle":"{h}"}}"#)));
    append(&mut sc, "a second root");
    let nested = sc.call("session/getTree", json(&format!(r#"{{"handle":"{h}"}}"#)));
    let Ok(flat) = sc.call("session/getTreeFlat", json(&format!(r#"{{"handle":"{h}"}}"#))).into_array() else {
        panic!()
    };
    // Rebuild pi's nesting from parent positions; it must be getTree exactly.
    let mut nodes: Vec<(Json, Vec<usize>)> = Vec::new();
    let mut roots = Vec::new();
    for (i, n) in flat.iter().enumerate() {
        let Json::Object(o) = n else { panic!() };
        let mut node = pi_sessiond::session::json::Object::new();
        node.insert("entry", o.get("entry").unwrap().clone());
        node.insert("children", Json::Array(Vec::new()));
        for k in ["label", "labelTimestamp"] {
            if let Some(v) = o.get(k) {
                node.insert(k, v.clone());
            }
        }
        nodes.push((Json::Object(node), Vec::new()));
        match o.get("parentIndex") {
            Some(Json::Null) => {
                assert_eq!(o.get("depth"), Some(&Json::number(0.0)));
                roots.push(i)
            }
            Some(p) => nodes[num_of(p) as usize].1.push(i),
            None => panic!("no parentIndex"),
        }
    }
    fn build(nodes: &[(Json, Vec<usize>)], i: usize) -> Json {
        let (Json::Object(o), children) = &nodes[i] else { panic!() };
        let mut o = o.clone();
        o.insert("children", Json::Array(children.iter().map(|&c| build(nodes, c)).collect()));
        Json::Object(o)
    }
    let rebuilt = Json::Array(roots.iter().map(|&r| build(&nodes, r)).collect());
    assert_eq!(rebuilt, nested);
    assert_eq!(flat.len(), 7, "every entry once (six messages and a label)");
}

#[test]
fn at_debug_level_each_request_logs_inside_a_span_naming_its_method_and_handle() {
    let dir = temp_dir();
    let log_path = dir.path().join("stderr.log");
    let mut cmd = std::process::Command::new(crate::support::sidecar::binary());
    cmd.args(["--log-level", "debug"]).stderr(std::fs::File::create(&log_path).unwrap());
    let mut sc = Sidecar::spawn_command(Wire::Jsonl, cmd, false);
    let (handle, _) = open_created(&mut sc, dir.path().to_str().unwrap());
    sc.call("session/appendMessage", json(&format!(r#"{{"handle":"{handle}","message":{}}}"#, user_message("hi"))));
    sc.call("session/getLeafId", json(&format!(r#"{{"handle":"{handle}"}}"#)));
    assert_eq!(sc.finish(), 0);
    let log = std::fs::read_to_string(&log_path).unwrap();
    for method in ["session/create", "session/appendMessage", "session/getLeafId"] {
        let line = log
            .lines()
            .find(|l| l.contains(&format!("method={method}")) && l.contains("answered"))
            .unwrap_or_else(|| panic!("no answer logged inside a {method} span:\n{log}"));
        assert!(line.contains(&format!("handle={handle}")), "the span names the handle: {line}");
    }
}

#[test]
fn a_lazy_page_leaves_long_strings_in_the_file_where_it_says_and_sends_migrated_entries_whole() {
    let dir = temp_dir();
    let long = "x".repeat(300);
    let v3 = dir.path().join("v3.jsonl");
    let lines = [
        r#"{"type":"session","version":3,"id":"s","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#.to_owned(),
        format!(
            r#"{{"type":"message","id":"a","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{{"role":"user","content":[{{"type":"text","text":"{long}"}}],"timestamp":1}}}}"#
        ),
        r#"{"type":"label","id":"b","parentId":"a","timestamp":"2025-01-01T00:00:02.000Z","targetId":"a","label":"short"}"#
            .to_owned(),
    ];
    let text = lines.join("\n") + "\n";
    std::fs::write(&v3, &text).unwrap();
    let mut sc = Sidecar::new();
    let st = sc.call("session/open", json(&format!(r#"{{"path":"{}"}}"#, s(&v3))));
    let h = str_of(st.get("handle").unwrap());
    let page =
        sc.call("session/getEntries", json(&format!(r#"{{"handle":"{h}","offset":0,"limit":10,"lazyOver":100}}"#)));
    let Ok(page) = page.into_array() else { panic!("an array") };
    assert_eq!(page.len(), 2);
    let [first, second] = [&page[0], &page[1]];
    let expected = Json::parse(lines[1].as_bytes()).unwrap();
    let num = |v: &Json| num_of(v) as usize;
    // The string is null in the entry, and its path and bytes say where it is: reading them gives it back.
    let Some(Json::Array(lazy)) = first.get("lazy") else { panic!("lazy strings: {first:?}") };
    assert_eq!(lazy.len(), 1);
    let Json::Array(item) = &lazy[0] else { panic!() };
    assert_eq!(item[0].to_canonical_string(), r#"["message","content",0,"text"]"#);
    let (at, len) = (num(&item[1]), num(&item[2]));
    assert_eq!(Json::parse(&text.as_bytes()[at..at + len]).unwrap(), Json::str(&long));
    let Some(Json::Array(line)) = first.get("line") else { panic!() };
    assert_eq!(&text[num(&line[0])..num(&line[0]) + num(&line[1])], lines[1]);
    let stub = first.get("entry").unwrap().to_canonical_string();
    assert_eq!(stub, expected.to_canonical_string().replace(&format!("\"{long}\""), "null"));
    // An entry without long strings comes whole.
    assert_eq!(second.get("entry").unwrap(), &Json::parse(lines[2].as_bytes()).unwrap());
    assert!(second.get("lazy").is_none());
    let e = sc.call_err("session/getEntries", json(&format!(r#"{{"handle":"{h}","ids":["a"],"lazyOver":100}}"#)));
    assert_eq!(kind_of(&e), "invalid_params");

    // A v1 file is migrated as it is read: its entries are not what the file holds, so they come whole.
    let v1 = dir.path().join("v1.jsonl");
    std::fs::write(
        &v1,
        format!(
            "{}\n{}\n",
            r#"{"type":"session","id":"legacy","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#,
            format_args!(
                r#"{{"type":"message","timestamp":"2025-01-01T00:00:01.000Z","message":{{"role":"user","content":"{long}","timestamp":1}}}}"#
            )
        ),
    )
    .unwrap();
    let st = sc.call("session/open", json(&format!(r#"{{"path":"{}"}}"#, s(&v1))));
    let h = str_of(st.get("handle").unwrap());
    let page =
        sc.call("session/getEntries", json(&format!(r#"{{"handle":"{h}","offset":0,"limit":10,"lazyOver":100}}"#)));
    let Ok(page) = page.into_array() else { panic!() };
    assert!(page[0].get("lazy").is_none(), "{page:?}");
    let entry = page[0].get("entry").unwrap();
    assert!(entry.get("id").is_some(), "migrated: the id pi gives it");
    assert_eq!(entry.get("message").and_then(|m| m.get("content")), Some(&Json::str(&long)));
}

#[test]
fn a_lazy_page_of_a_file_rewritten_under_the_handle_is_an_error_not_strings_from_the_wrong_place() {
    let dir = temp_dir();
    let path = dir.path().join("s.jsonl");
    let text = "word ".repeat(400);
    let head = r#"{"type":"session","version":3,"id":"s","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#;
    let entry = |id: &str, parent: &str| {
        format!(
            r#"{{"type":"message","id":"{id}","parentId":{parent},"timestamp":"2025-01-01T00:00:01.000Z","message":{{"role":"user","content":"{text}","timestamp":1}}}}"#
        )
    };
    let (a, b) = (entry("a", "null"), entry("b", r#""a""#));
    std::fs::write(&path, format!("{head}\n{a}\n{b}\n")).unwrap();
    let mut sc = Sidecar::new();
    let st = sc.call("session/open", json(&format!(r#"{{"path":"{}"}}"#, s(&path))));
    let h = str_of(st.get("handle").unwrap());
    // Another program rewrites the file in place, every line one byte later.
    std::fs::write(&path, format!("{head}\n {a}\n{b}\n")).unwrap();
    let e = sc
        .call_err("session/getEntries", json(&format!(r#"{{"handle":"{h}","offset":0,"limit":10,"lazyOver":1024}}"#)));
    let message = e.get("message").map(Json::to_canonical_string).unwrap_or_default();
    assert!(message.contains("no longer") || message.contains("changed on disk"), "{e:?}");
}

#[test]
fn a_lazy_page_at_the_opens_own_threshold_reads_around_the_long_strings_and_gives_the_same_entries() {
    let dir = temp_dir();
    let (image, text) = ("QUFB".repeat(2000), "t\\\"e\\u00e9xt ".repeat(300));
    let path = dir.path().join("s.jsonl");
    let lines = [
        r#"{"type":"session","version":3,"id":"s","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#.to_owned(),
        format!(
            r#"  {{"type":"message","id":"a","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{{"role":"user","content":[{{"type":"text","text":"{text}"}},{{"type":"image","data":"{image}","mimeType":"image/png"}}],"timestamp":1}}}} "#
        ),
        format!(
            r#"{{"type":"custom","id":"b","parentId":"a","timestamp":"2025-01-01T00:00:02.000Z","customType":"x","data":{{"k":"{image}","k":1}}}}"#
        ),
        format!(
            r#"{{"type":"custom","id":"c","parentId":"b","timestamp":"2025-01-01T00:00:03.000Z","customType":"x","data":[[["{image}"]],"short"]}}"#
        ),
        // Longer than a line the page reads whole (READ_AROUND_FROM): only the bytes around its strings are read.
        format!(
            r#"{{"type":"custom","id":"d","parentId":"c","timestamp":"2025-01-01T00:00:04.000Z","customType":"x","data":{{"big":"{}","small":"{text}"}}}}"#,
            image.repeat(12)
        ),
    ];
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let mut sc = Sidecar::new();
    let st = sc.call("session/open", json(&format!(r#"{{"path":"{}"}}"#, s(&path))));
    let h = str_of(st.get("handle").unwrap());
    let page = |sc: &mut Sidecar, over: usize| {
        sc.call("session/getEntries", json(&format!(r#"{{"handle":"{h}","offset":0,"limit":10,"lazyOver":{over}}}"#)))
    };
    // 1024 is the threshold the open found long strings at (read around them); 1000 reads and walks each line.
    // No string here is between the two, so both must give the same answer.
    let around = page(&mut sc, 1024);
    assert_eq!(around, page(&mut sc, 1000));
    let Ok(entries) = around.into_array() else { panic!() };
    let lazy_count = |e: &Json| match e.get("lazy") {
        Some(Json::Array(l)) => l.len(),
        _ => 0,
    };
    assert_eq!(entries.iter().map(lazy_count).collect::<Vec<_>>(), [2, 0, 1, 2], "a repeated key comes whole");
    let file = std::fs::read(&path).unwrap();
    for (entry, line_text) in [(&entries[0], &lines[1]), (&entries[3], &lines[4])] {
        let Some(Json::Array(line)) = entry.get("line") else { panic!() };
        let (at, len) = (num_of(&line[0]) as usize, num_of(&line[1]) as usize);
        assert_eq!(&file[at..at + len], line_text.trim().as_bytes());
    }
}
