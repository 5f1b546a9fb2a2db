//! Order through the real binary (issue 13.1, pinned by issue 11): a request that names a handle waits for the
//! request that opens it, whether the server or the host chose the name, so a host can pipeline "open, then use"
//! without waiting for an answer.

use std::io::{Read, Write};
use std::process::{Command, Stdio};

use pi_sessiond::session::json::Json;

use crate::support::sidecar::{binary, Sidecar};
use crate::support::{json, s, str_of, temp_dir, user_message};

fn kind_of(e: &Json) -> String {
    str_of(e.get("data").and_then(|d| d.get("kind")).expect("data.kind"))
}

#[test]
fn the_readme_example_succeeds_every_time_issue_11() {
    let agent = temp_dir();
    let example = concat!(
        r#"{"jsonrpc":"2.0","id":1,"method":"session/inMemory","params":{"cwd":"/tmp"}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":2,"method":"session/appendMessage","params":{"handle":"h1","message":{"role":"user","content":"hi","timestamp":1}}}"#,
        "\n"
    );
    for run in 0..200 {
        let mut child = Command::new(binary())
            .env("PI_CODING_AGENT_DIR", agent.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        // As `printf … | pi-sessiond` does: both lines at once, then end of input.
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(example.as_bytes()).unwrap();
        drop(stdin);
        let mut out = String::new();
        child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        assert!(child.wait().unwrap().success());
        let answers: Vec<Json> = out.lines().map(json).filter(|m| m.get("id").is_some()).collect();
        assert_eq!(answers.len(), 2, "run {run}: {out}");
        for a in &answers {
            assert!(a.get("result").is_some(), "run {run}: {out}");
        }
    }
}

#[test]
fn two_hundred_pipelined_create_then_append_pairs_all_succeed() {
    let dir = temp_dir();
    let mut sc = Sidecar::new();
    let mut pairs = Vec::new();
    for n in 1..=200 {
        let created = sc.start("session/create", json(&format!(r#"{{"cwd":"/p","sessionDir":"{}"}}"#, s(dir.path()))));
        // The handle the server will give, used before it has said so.
        let appended = sc.start(
            "session/appendMessage",
            json(&format!(r#"{{"handle":"h{n}","message":{}}}"#, user_message(&format!("pair {n}")))),
        );
        pairs.push((n, created, appended));
    }
    for (n, created, appended) in pairs {
        let c = sc.response(created);
        let state = c.get("result").unwrap_or_else(|| panic!("create {n}: {}", c.to_canonical_string()));
        assert_eq!(state.get("handle"), Some(&Json::str(&format!("h{n}"))));
        let a = sc.response(appended);
        assert!(a.get("result").is_some(), "append {n}: {}", a.to_canonical_string());
        let file = str_of(state.get("sessionFile").unwrap());
        assert!(std::fs::read_to_string(&file).unwrap().contains(&format!("\"pair {n}\"")), "pair {n} is in its file");
    }
}

#[test]
fn a_host_named_handle_is_usable_before_its_open_is_answered_and_free_again_after_close() {
    let dir = temp_dir();
    let path = s(&dir.path().join("mine.jsonl"));
    let mut sc = Sidecar::new();
    let opened = sc.start("session/open", json(&format!(r#"{{"path":"{path}","handle":"mine"}}"#)));
    let appended =
        sc.start("session/appendMessage", json(&format!(r#"{{"handle":"mine","message":{}}}"#, user_message("one"))));
    let counted = sc.start("session/getEntryCount", json(r#"{"handle":"mine"}"#));
    let again = sc.start("session/inMemory", json(r#"{"handle":"mine"}"#));
    let closed = sc.start("session/close", json(r#"{"handle":"mine"}"#));
    let reopened = sc.start("session/inMemory", json(r#"{"handle":"mine"}"#));
    let used = sc.start("session/getEntryCount", json(r#"{"handle":"mine"}"#));

    assert_eq!(sc.response(opened).get("result").unwrap().get("handle"), Some(&Json::str("mine")));
    assert!(sc.response(appended).get("result").is_some());
    assert_eq!(sc.response(counted).get("result"), Some(&Json::number(1.0)));
    let e = sc.response(again);
    let e = e.get("error").expect("a handle that is open cannot be chosen again");
    assert_eq!((kind_of(e), e.get("data").unwrap().get("path")), ("invalid_params".into(), Some(&Json::str("handle"))));
    assert!(sc.response(closed).get("result").is_some());
    assert_eq!(sc.response(reopened).get("result").unwrap().get("handle"), Some(&Json::str("mine")));
    assert_eq!(sc.response(used).get("result"), Some(&Json::number(0.0)), "the name now holds the new session");
    assert!(std::fs::read_to_string(&path).unwrap().contains("\"one\""));
}

#[test]
fn a_file_open_under_one_handle_cannot_be_opened_under_a_host_named_other() {
    let dir = temp_dir();
    let path = s(&dir.path().join("f.jsonl"));
    let mut sc = Sidecar::new();
    let h = str_of(sc.call("session/open", json(&format!(r#"{{"path":"{path}"}}"#))).get("handle").unwrap());
    let e = sc.call_err("session/open", json(&format!(r#"{{"path":"{path}","handle":"other"}}"#)));
    assert_eq!(kind_of(&e), "invalid_params");
    assert!(str_of(e.get("message").unwrap()).contains(&h), "{}", e.to_canonical_string());
    // Without a name, the open handle is reused (reference-counted), as before.
    let again = sc.call("session/open", json(&format!(r#"{{"path":"{path}"}}"#)));
    assert_eq!(str_of(again.get("handle").unwrap()), h);
}

#[test]
fn requests_queued_behind_a_failed_open_get_handle_not_found_and_the_name_is_released() {
    let dir = temp_dir();
    let bad = s(&dir.path().join("bad.jsonl"));
    std::fs::write(&bad, "not a session\n").unwrap();
    let mut sc = Sidecar::new();
    let opened = sc.start("session/open", json(&format!(r#"{{"path":"{bad}","handle":"x"}}"#)));
    let appended =
        sc.start("session/appendMessage", json(&format!(r#"{{"handle":"x","message":{}}}"#, user_message("lost"))));
    let e = sc.response(opened);
    assert_eq!(kind_of(e.get("error").unwrap()), "invalid_session_file");
    let e = sc.response(appended);
    assert_eq!(kind_of(e.get("error").unwrap()), "handle_not_found");
    assert_eq!(std::fs::read_to_string(&bad).unwrap(), "not a session\n", "nothing was written");
    // The name can be used at once.
    let st = sc.call("session/inMemory", json(r#"{"handle":"x"}"#));
    assert_eq!(st.get("handle"), Some(&Json::str("x")));
}

#[test]
fn pipelined_open_append_close_rounds_on_one_file_and_one_name_apply_in_arrival_order() {
    let dir = temp_dir();
    let path = s(&dir.path().join("f.jsonl"));
    let mut sc = Sidecar::new();
    let mut ids = Vec::new();
    for n in 0..20 {
        ids.push(sc.start("session/open", json(&format!(r#"{{"path":"{path}","handle":"f"}}"#))));
        ids.push(sc.start(
            "session/appendMessage",
            json(&format!(r#"{{"handle":"f","message":{}}}"#, user_message(&format!("m{n}")))),
        ));
        ids.push(sc.start("session/close", json(r#"{"handle":"f"}"#)));
    }
    for (i, id) in ids.iter().enumerate() {
        let r = sc.response(*id);
        assert!(r.get("result").is_some(), "request {i}: {}", r.to_canonical_string());
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let order: Vec<usize> = (0..20).map(|n| text.find(&format!("\"m{n}\"")).expect("every append")).collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "file order is request order");
}

#[test]
fn continue_recent_right_behind_closing_the_recent_file_opens_it_again() {
    let dir = temp_dir();
    let mut sc = Sidecar::new();
    for round in 0..300 {
        let st = sc.call("session/create", json(&format!(r#"{{"cwd":"/p","sessionDir":"{}"}}"#, s(dir.path()))));
        let h = str_of(st.get("handle").unwrap());
        sc.call("session/appendMessage", json(&format!(r#"{{"handle":"{h}","message":{}}}"#, user_message("x"))));
        let file =
            str_of(sc.call("session/getState", json(&format!(r#"{{"handle":"{h}"}}"#))).get("sessionFile").unwrap());
        // Files written within one clock tick share an mtime, and then either may be "the most recent" (as in pi):
        // each round's file is made the newest by a whole second.
        let newest = std::time::SystemTime::now() + std::time::Duration::from_secs(round + 1);
        std::fs::File::options().write(true).open(&file).unwrap().set_modified(newest).unwrap();
        // Pipelined: the close may or may not have run when continueRecent looks for the file.
        let closed = sc.start("session/close", json(&format!(r#"{{"handle":"{h}"}}"#)));
        let recent =
            sc.start("session/continueRecent", json(&format!(r#"{{"cwd":"/p","sessionDir":"{}"}}"#, s(dir.path()))));
        assert!(sc.response(closed).get("result").is_some());
        let r = sc.response(recent);
        let state = r.get("result").unwrap_or_else(|| panic!("round {round}: {}", r.to_canonical_string()));
        assert_eq!(state.get("sessionFile"), Some(&Json::str(&file)), "round {round}");
        let again = str_of(state.get("handle").unwrap());
        assert_eq!(num(&sc.call("session/getEntryCount", json(&format!(r#"{{"handle":"{again}"}}"#)))), 1.0);
        sc.call("session/close", json(&format!(r#"{{"handle":"{again}"}}"#)));
    }
}

fn num(v: &Json) -> f64 {
    pi_sessiond::session::js::to_number(Some(v))
}
