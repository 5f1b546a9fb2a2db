//! `protocol/` is the contract: it must be exactly what the code generates, and it must describe exactly the
//! methods the server answers.

use pi_sessiond::session::json::Json;

use crate::support::repo;
use crate::support::sidecar::Sidecar;
use crate::support::wire_check::WireCheck;

#[test]
fn committed_protocol_files_match_the_generated_ones() {
    let (methods, schema) = pi_sessiond::rpc::protocol::generate();
    let dir = repo().join("protocol");
    if std::env::var_os("UPDATE_PROTOCOL").is_some() {
        std::fs::write(dir.join("methods.json"), &methods).unwrap();
        std::fs::write(dir.join("schema.json"), &schema).unwrap();
    }
    for (name, generated) in [("methods.json", &methods), ("schema.json", &schema)] {
        let committed = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
        if committed != *generated {
            let line = committed.lines().zip(generated.lines()).position(|(a, b)| a != b).unwrap_or(0);
            panic!(
                "protocol/{name} is out of date (first difference at line {}); regenerate with \
                 `UPDATE_PROTOCOL=1 cargo test --test it protocol` or `cargo run -- protocol --write protocol`",
                line + 1
            );
        }
    }
}

#[test]
fn every_served_method_is_described_and_every_described_request_is_served() {
    let table = Json::parse(&std::fs::read(repo().join("protocol/methods.json")).unwrap()).unwrap();
    let Some(Json::Array(methods)) = table.get("methods") else { panic!("methods.json has methods") };
    let described: Vec<String> = methods
        .iter()
        .filter(|m| m.get("kind") == Some(&Json::str("request")))
        .map(|m| m.get("name").unwrap().as_js_str().unwrap().to_string_lossy())
        .collect();
    let mut sc = Sidecar::new();
    let init = sc.call("initialize", Json::parse(b"{}").unwrap());
    let Some(Json::Array(served)) = init.get("capabilities").and_then(|c| c.get("methods")) else { panic!() };
    let mut served: Vec<String> = served.iter().map(|m| m.as_js_str().unwrap().to_string_lossy()).collect();
    let mut described_sorted = described.clone();
    served.sort();
    described_sorted.sort();
    assert_eq!(served, described_sorted);
    // The notifications the server announces are exactly the server-to-client ones described.
    let mut announced: Vec<String> = match init.get("capabilities").and_then(|c| c.get("notifications")) {
        Some(Json::Array(n)) => n.iter().map(|m| m.as_js_str().unwrap().to_string_lossy()).collect(),
        _ => panic!("capabilities.notifications"),
    };
    let mut outgoing: Vec<String> = methods
        .iter()
        .filter(|m| m.get("kind") == Some(&Json::str("notification")))
        .filter(|m| m.get("direction") == Some(&Json::str("server-to-client")))
        .map(|m| m.get("name").unwrap().as_js_str().unwrap().to_string_lossy())
        .collect();
    announced.sort();
    outgoing.sort();
    assert_eq!(announced, outgoing);
    // And each described method really answers (not method-not-found), even if its params are wrong.
    for name in &described {
        if name == "shutdown" {
            continue;
        }
        let id = sc.start(name, Json::parse(b"{}").unwrap());
        let r = sc.response(id);
        let code = r.get("error").and_then(|e| e.get("code")).cloned();
        assert_ne!(code, Some(Json::number(-32601.0)), "{name} is described but not served");
    }
    // Nothing undescribed answers: a made-up name is method-not-found.
    let id = sc.start("session/undescribed", Json::parse(b"{}").unwrap());
    assert_eq!(sc.response(id).get("error").and_then(|e| e.get("code")), Some(&Json::number(-32601.0)));
}

/// Feeds one exchange to a fresh wire check and returns what it found.
fn wire_violations(request: &str, answer: &Json) -> Vec<String> {
    let check = WireCheck::new();
    check.sent(&Json::parse(request.as_bytes()).unwrap());
    check.received(answer);
    check.take_violations()
}

#[test]
fn the_wire_check_that_every_test_host_runs_catches_renamed_fields_unknown_methods_and_mispaired_errors() {
    let mut sc = Sidecar::new();
    let request = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
    let id = sc.start("initialize", Json::parse(b"{}").unwrap());
    let answer = sc.response(id);
    let mut answer =
        Json::parse(answer.to_canonical_string().replace(&format!("\"id\":{id}"), "\"id\":1").as_bytes()).unwrap();
    assert_eq!(wire_violations(request, &answer), Vec::<String>::new(), "the real answer passes");

    let renamed = answer.to_canonical_string().replace("\"protocolVersion\"", "\"protocolVerison\"");
    let found = wire_violations(request, &Json::parse(renamed.as_bytes()).unwrap());
    assert!(found.iter().any(|v| v.contains("protocolVerison")), "a renamed field is caught: {found:?}");

    let changed = r#"{"jsonrpc":"2.0","method":"session/changed","params":{"handle":"h1","sessionId":"s","sequence":1,
        "change":{"kind":"leaf","leafId":null}}}"#;
    let found = wire_violations(request, &Json::parse(changed.as_bytes()).unwrap());
    assert!(found.iter().any(|v| v.contains("session/changed")), "a notification with a renamed field: {found:?}");

    let unknown = r#"{"jsonrpc":"2.0","method":"session/renamed","params":{}}"#;
    let found = wire_violations(request, &Json::parse(unknown.as_bytes()).unwrap());
    assert!(found.iter().any(|v| v.contains("does not list")), "an unlisted notification: {found:?}");

    let mispaired = r#"{"jsonrpc":"2.0","id":1,"error":{"code":1003,"message":"x","data":{"kind":"entry_not_found"}}}"#;
    let found = wire_violations(request, &Json::parse(mispaired.as_bytes()).unwrap());
    assert!(found.iter().any(|v| v.contains("handle_not_found")), "a code with another code's kind: {found:?}");

    if let Json::Object(o) = &mut answer {
        o.insert("id", Json::number(2.0));
    }
    let found = wire_violations(request, &answer);
    assert!(found.iter().any(|v| v.contains("no request had")), "a result nobody asked for: {found:?}");
}
