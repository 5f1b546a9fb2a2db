//! The sidecar against pi itself: `session/open` plus every read gives pi's reads of the same file, and files
//! written through the sidecar open in pi to the reads the sidecar reports.

use pi_sessiond::session::json::{Json, Object};

use crate::corpus::{as_v2, damage, session_lines, to_bytes, with_unusable_entry, Rng, Shape, DAMAGE, UNUSABLE};
use crate::support::sidecar::{Sidecar, Wire};
use crate::support::{json, json_diff, oracle, s, temp_dir};

/// pi's reads, as the oracle reports them, gathered through the sidecar's methods: Err when the open fails or
/// any read does.
fn sidecar_reads(sc: &mut Sidecar, path: &str) -> Result<Json, Json> {
    let mut out = Object::new();
    for (read, answer) in sidecar_each_read(sc, path)? {
        if let Some(v) = answer? {
            out.insert(read, v);
        }
    }
    Ok(Json::Object(out))
}

/// Each of pi's reads on its own, through the sidecar's methods, by the oracle's name for it: Ok(None) where pi's
/// value is undefined (a null leaf or name), Err(error) where that method fails. Err when the open fails.
#[allow(clippy::type_complexity)]
fn sidecar_each_read(sc: &mut Sidecar, path: &str) -> Result<Vec<(&'static str, Result<Option<Json>, Json>)>, Json> {
    let id = sc.start("session/open", json(&format!(r#"{{"path":{}}}"#, Json::str(path).to_canonical_string())));
    let r = sc.response(id);
    let state = match (r.get("result"), r.get("error")) {
        (Some(st), _) => st.clone(),
        (None, Some(e)) => return Err(e.clone()),
        _ => panic!("{}", r.to_canonical_string()),
    };
    let h = state.get("handle").unwrap().to_canonical_string();
    let mut get = |method: &str| -> Result<Json, Json> {
        let id = sc.start(method, json(&format!(r#"{{"handle":{h}}}"#)));
        let r = sc.response(id);
        match (r.get("result"), r.get("error")) {
            (Some(v), _) => Ok(v.clone()),
            (_, Some(e)) => Err(e.clone()),
            _ => panic!(),
        }
    };
    let defined = |v: Result<Json, Json>| v.map(|v| (v != Json::Null).then_some(v));
    let reads = vec![
        ("header", get("session/getHeader").map(Some)),
        ("entries", get("session/getEntries").map(Some)),
        ("leafId", defined(get("session/getLeafId"))),
        ("tree", get("session/getTree").map(Some)),
        ("branch", get("session/getBranch").map(Some)),
        ("contextEntries", get("session/buildContextEntries").map(Some)),
        ("projection", get("session/buildSessionProjection").map(Some)),
        ("context", get("session/buildSessionContext").map(Some)),
        ("sessionName", defined(get("session/getSessionName"))),
        ("sessionId", Ok(state.get("sessionId").cloned())),
        ("cwd", Ok(state.get("cwd").cloned())),
        ("entryCount", get("session/getEntryCount").map(Some)),
    ];
    get("session/close").expect("close");
    Ok(reads)
}

fn pi_reads(paths: &[String]) -> Vec<Json> {
    let mut req = Object::new();
    req.insert("command", Json::str("reads"));
    req.insert("files", Json::Array(paths.iter().map(|p| Json::str(p)).collect()));
    match oracle(&Json::Object(req)).into_array() {
        Ok(a) => a,
        Err(other) => panic!("{other:?}"),
    }
}

fn without_undefined_leaf(mut v: Json) -> Json {
    if let Json::Object(o) = &mut v {
        if o.get("leafId") == Some(&Json::Null) {
            o.remove("leafId");
        }
    }
    v
}

#[test]
fn session_open_and_every_read_give_pis_reads_in_both_framings() {
    let tmp = temp_dir();
    let mut r = Rng::new(31);
    let mut names = Vec::new();
    for i in 0..50 {
        let lines = {
            let entries = 1 + r.below(25);
            let hand_written = r.chance(30);
            session_lines(&mut r, Shape { entries, hand_written })
        };
        let lines = if i % 7 == 3 { as_v2(&lines) } else { lines };
        let mut bytes = to_bytes(&lines);
        if i % 3 == 1 {
            bytes = damage(&mut r, DAMAGE[i % DAMAGE.len()], bytes);
        }
        // retainedTail is read differently on purpose (docs/compatibility.md #7); the engine tests cover it.
        if String::from_utf8_lossy(&bytes).contains("retainedTail") {
            continue;
        }
        let name = format!("f{i}.jsonl");
        std::fs::write(tmp.path().join("ours").join(&name), &bytes)
            .or_else(|_| {
                std::fs::create_dir_all(tmp.path().join("ours"))
                    .and_then(|()| std::fs::write(tmp.path().join("ours").join(&name), &bytes))
            })
            .unwrap();
        std::fs::create_dir_all(tmp.path().join("pi")).unwrap();
        std::fs::write(tmp.path().join("pi").join(&name), &bytes).unwrap();
        names.push(name);
    }
    // Files pi never returns on (parent cycles) cannot be asked of the oracle.
    names.retain(|n| {
        let p = s(&tmp.path().join("ours").join(n));
        match pi_sessiond::session::SessionManager::open(&p, None, None, pi_sessiond::session::Env::system()) {
            Ok(m) => {
                m.tree().cycles_broken == 0
                    && m.warnings().iter().all(|w| {
                        !matches!(
                            w.kind,
                            pi_sessiond::session::store::WarningKind::ParentCycle
                                | pi_sessiond::session::store::WarningKind::SelfParent
                        )
                    })
            }
            Err(_) => true,
        }
    });
    let pi = pi_reads(&names.iter().map(|n| s(&tmp.path().join("pi").join(n))).collect::<Vec<_>>());
    let mut problems = Vec::new();
    for wire in [Wire::Jsonl, Wire::Lsp] {
        let mut sc = Sidecar::spawn(wire, &[], &[]);
        for (name, pi) in names.iter().zip(&pi) {
            let ours = sidecar_reads(&mut sc, &s(&tmp.path().join("ours").join(name)));
            let pi = crate::support::replace_in_strings(pi, &s(&tmp.path().join("pi")), &s(&tmp.path().join("ours")));
            match (pi.get("ok"), ours) {
                (Some(p), Ok(o)) => {
                    if let Some(d) = json_diff("", &without_undefined_leaf(p.clone()), &o) {
                        problems.push(format!("{wire:?} {name}: {d}"));
                    }
                }
                (None, Err(_)) => {}
                (Some(_), Err(e)) => {
                    problems.push(format!("{wire:?} {name}: pi reads it, sidecar fails: {}", e.to_canonical_string()))
                }
                (None, Ok(_)) => problems.push(format!("{wire:?} {name}: pi fails, sidecar reads it")),
            }
        }
    }
    assert!(problems.is_empty(), "{} differences:\n{}", problems.len(), problems.join("\n"));
}

#[test]
fn sessions_written_through_the_sidecar_open_in_pi_to_the_same_reads() {
    let tmp = temp_dir();
    let dir = s(tmp.path());
    let mut sc = Sidecar::new();
    let st = sc.call("session/create", json(&format!(r#"{{"cwd":"/proj","sessionDir":"{dir}"}}"#)));
    let h = st.get("handle").unwrap().to_canonical_string();
    let call = |sc: &mut Sidecar, method: &str, params: &str| -> Json {
        sc.call(method, json(&format!(r#"{{"handle":{h}{params}}}"#)))
    };
    let id_of = |v: &Json| v.get("id").unwrap().to_canonical_string();
    call(&mut sc, "session/appendModelChange", r#","provider":"anthropic","modelId":"claude""#);
    call(
        &mut sc,
        "session/appendMessage",
        r#","message":{"role":"system","content":"base","sections":{"a":"A"},"toolsAdded":[{"name":"read"}],"timestamp":1}"#,
    );
    let u1 = id_of(&call(
        &mut sc,
        "session/appendMessage",
        r#","message":{"role":"user","content":"hello \ud83d","timestamp":2}"#,
    ));
    let a1 = id_of(&call(
        &mut sc,
        "session/appendMessage",
        r#","message":{"role":"assistant","content":[{"type":"text","text":"hi"}],"provider":"anthropic","model":"claude","usage":{"input":1},"stopReason":"stop","timestamp":3}"#,
    ));
    call(&mut sc, "session/appendLabelChange", &format!(r#","targetId":{u1},"label":"start""#));
    call(&mut sc, "session/appendThinkingLevelChange", r#","thinkingLevel":"high""#);
    let u2 =
        id_of(&call(&mut sc, "session/appendMessage", r#","message":{"role":"user","content":null,"timestamp":4}"#));
    call(
        &mut sc,
        "session/appendCompaction",
        &format!(r#","summary":"sum","firstKeptEntryId":{u2},"tokensBefore":100,"details":{{"readFiles":[]}}"#),
    );
    call(
        &mut sc,
        "session/appendMessage",
        r#","message":{"role":"toolResult","toolCallId":"c","toolName":"bash","content":[{"type":"text","text":"out"}],"isError":false,"timestamp":5}"#,
    );
    call(&mut sc, "session/appendContextEdit", &format!(r#","targetId":{a1},"replacement":{{"content":"edited"}}"#));
    call(&mut sc, "session/branch", &format!(r#","entryId":{a1}"#));
    call(
        &mut sc,
        "session/appendCustomMessageEntry",
        r#","customType":"ext","content":"injected","display":false,"details":{"k":1}"#,
    );
    call(&mut sc, "session/appendCustomEntry", r#","customType":"state","data":{"n":1}"#);
    call(&mut sc, "session/appendSessionInfo", r#","name":"  Named\nsession ""#);
    call(
        &mut sc,
        "session/appendUsage",
        r#","kind":"cache_warm","provider":"p","model":"m","usage":{"input":0},"note":"n""#,
    );
    call(&mut sc, "session/branchWithSummary", &format!(r#","entryId":{u1},"summary":"left it""#));
    call(&mut sc, "session/appendCompaction", r#","summary":"none kept","firstKeptEntryId":null,"tokensBefore":1"#);
    let first_file = sc
        .call("session/getState", json(&format!(r#"{{"handle":{h}}}"#)))
        .get("sessionFile")
        .unwrap()
        .as_js_str()
        .unwrap()
        .to_string_lossy();
    let branched = call(&mut sc, "session/createBranchedSession", &format!(r#","leafId":{a1}"#));
    let second_file = branched.get("path").unwrap().as_js_str().unwrap().to_string_lossy();
    sc.call("shutdown", json("{}"));
    let files = vec![first_file, second_file];
    let pi = pi_reads(&files);
    let mut fresh = Sidecar::new();
    let mut problems = Vec::new();
    for (file, pi) in files.iter().zip(pi) {
        let ours = sidecar_reads(&mut fresh, file).unwrap_or_else(|e| panic!("{file}: {}", e.to_canonical_string()));
        match pi.get("ok") {
            Some(p) => {
                if let Some(d) = json_diff("", &without_undefined_leaf(p.clone()), &ours) {
                    problems.push(format!("{file}: {d}"));
                }
            }
            None => problems.push(format!("pi cannot read {file}: {}", pi.to_canonical_string())),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn session_open_of_a_file_with_entries_pi_throws_on_gives_every_other_read_and_names_the_entry_issue_11() {
    let tmp = temp_dir();
    let mut r = Rng::new(32);
    let mut paths = Vec::new();
    for i in 0..16 {
        let entries = 1 + r.below(12);
        let lines = session_lines(&mut r, Shape { entries, hand_written: false });
        let bytes = to_bytes(&with_unusable_entry(&mut r, UNUSABLE[i % UNUSABLE.len()], lines));
        if String::from_utf8_lossy(&bytes).contains("retainedTail") {
            continue;
        }
        let path = s(&tmp.path().join(format!("u{i}.jsonl")));
        std::fs::write(&path, bytes).unwrap();
        paths.push(path);
    }
    // Ours first: pi's open repairs a file it opens, and these v3 files of complete lines need no repair.
    let mut sc = Sidecar::new();
    let ours: Vec<_> = paths.iter().map(|p| sidecar_each_read(&mut sc, p)).collect();
    let mut req = Object::new();
    req.insert("command", Json::str("eachRead"));
    req.insert("files", Json::Array(paths.iter().map(|p| Json::str(p)).collect()));
    let Ok(pi) = oracle(&Json::Object(req)).into_array() else { panic!("oracle") };
    let (mut problems, mut failed_reads) = (Vec::new(), 0);
    for ((path, ours), pi) in paths.iter().zip(ours).zip(pi) {
        let Ok(ours) = ours else { panic!("{path}: the sidecar refuses a file pi opens: {ours:?}") };
        let pi_reads = pi.get("reads").unwrap_or_else(|| panic!("{path}: pi cannot open it"));
        for (read, answer) in ours {
            let p = pi_reads.get(read).unwrap();
            match (p.get("error"), answer) {
                (Some(_), Err(e)) => {
                    failed_reads += 1;
                    let message = e.get("message").and_then(Json::as_js_str).unwrap().to_string_lossy();
                    if !message.contains(": entry ") {
                        problems.push(format!("{path}: {read}: the error does not name the entry: {message}"));
                    }
                }
                (Some(e), Ok(_)) => {
                    problems.push(format!("{path}: {read}: pi throws ({}), ours answers", e.to_canonical_string()))
                }
                (None, Err(e)) => {
                    problems.push(format!("{path}: {read}: pi answers, ours fails: {}", e.to_canonical_string()))
                }
                (None, Ok(v)) => {
                    if let Some(d) =
                        json_diff(read, &p.get("ok").cloned().unwrap_or(Json::Null), &v.unwrap_or(Json::Null))
                    {
                        problems.push(format!("{path}: {d}"));
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "{} differences:\n{}", problems.len(), problems.join("\n"));
    assert!(failed_reads >= 8, "the files exercise too few failing reads ({failed_reads})");
}
