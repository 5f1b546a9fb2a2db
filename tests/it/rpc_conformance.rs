//! The sidecar against pi itself: `session/open` plus every read gives pi's reads of the same file, and files
//! written through the sidecar open in pi to the reads the sidecar reports.

use pi_sessiond::session::json::{Json, Object};

use crate::corpus::{as_v2, damage, session_lines, to_bytes, with_unusable_entry, Rng, Shape, DAMAGE, UNUSABLE};
use crate::support::sidecar::{Sidecar, Wire};
use crate::support::{json, json_diff, oracle, s, temp_dir};
use std::io::Write;

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

/// Bytes the process read so far (`rchar` of `/proc/PID/io`).
fn read_bytes(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap();
    io.lines().find_map(|l| l.strip_prefix("rchar: ")).unwrap().trim().parse().unwrap()
}

/// Rewrites `len` bytes at `at` in place, with the file's `mtime` set back when asked, once the change time has
/// moved past the one the file had (a write within the file system's clock tick leaves it as it was, which is
/// what identity.rs says no stamp can see).
fn rewrite_in_place(path: &str, at: usize, bytes: &[u8], restore_mtime: bool) {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let before = f.metadata().unwrap();
    let ctime = |m: &std::fs::Metadata| (m.ctime(), m.ctime_nsec());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        f.write_all_at(bytes, at as u64).unwrap();
        if restore_mtime {
            f.set_modified(before.modified().unwrap()).unwrap();
        }
        let now = f.metadata().unwrap();
        if ctime(&now) != ctime(&before) || std::time::Instant::now() > deadline {
            assert_eq!(now.len(), before.len());
            if restore_mtime {
                assert_eq!(now.modified().unwrap(), before.modified().unwrap());
            }
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// The offset of the `n`th line's id value's first character, and that character changed.
fn an_id_changed(bytes: &[u8], n: usize) -> (usize, Vec<u8>) {
    let start: usize = bytes.split(|&b| b == b'\n').take(n).map(|l| l.len() + 1).sum();
    let line = &bytes[start..];
    let at = start + line.windows(6).position(|w| w == b"\"id\":\"").unwrap() + 6;
    (at, vec![if bytes[at] == b'a' { b'b' } else { b'a' }])
}

#[test]
fn a_session_opened_again_from_kept_skeletons_gives_pis_reads_after_every_change_to_it_issue_21() {
    use pi_sessiond::session::kept::KEEP_FROM_BYTES;
    let tmp = temp_dir();
    let agent = s(&tmp.path().join("agent"));
    let path = s(&tmp.path().join("kept.jsonl"));
    let mut r = Rng::new(21);
    let mut entries = 600;
    // Entries of a few KiB, as pi's are: what is kept of each is a few hundred bytes.
    let padded = |lines: Vec<Json>| -> Vec<u8> {
        let pad = |mut l: Json| {
            if let Json::Object(o) = &mut l {
                if o.get("type") != Some(&Json::str("session")) {
                    o.insert("details", Json::str(&"d".repeat(3000)));
                }
                // Read differently on purpose (docs/compatibility.md #7); the engine tests cover it.
                o.remove("retainedTail");
            }
            l
        };
        to_bytes(&lines.into_iter().map(pad).collect::<Vec<_>>())
    };
    let bytes = loop {
        let bytes = padded(session_lines(&mut r, Shape { entries, hand_written: false }));
        if bytes.len() as u64 >= KEEP_FROM_BYTES + (64 << 10) {
            break bytes;
        }
        entries *= 2;
    };
    let kept_dir = format!("{agent}/pi-sessiond/skeletons");
    let kept_size =
        || std::fs::read_dir(&kept_dir).map_or(0, |d| d.map(|e| e.unwrap().metadata().unwrap().len()).sum());
    std::fs::write(&path, &bytes).unwrap();
    let mut kept = Sidecar::spawn(Wire::Jsonl, &["--agent-dir", &agent], &[]);
    // Reads every file whole: what each skeleton snapshot must equal, byte for byte.
    let mut fresh = Sidecar::spawn(Wire::Jsonl, &["--no-index"], &[]);
    let skeletons = |sc: &mut Sidecar| -> (u64, String) {
        let before = read_bytes(sc.pid());
        let id = sc.start("session/open", json(&format!(r#"{{"path":"{path}","snapshot":"skeleton"}}"#)));
        let answer = sc.response(id);
        let read = read_bytes(sc.pid()) - before;
        let st = answer.get("result").unwrap_or_else(|| panic!("{}", answer.to_canonical_string()));
        let h = st.get("handle").unwrap().to_canonical_string();
        sc.call("session/close", json(&format!(r#"{{"handle":{h}}}"#)));
        (read, st.get("snapshot").unwrap().to_canonical_string())
    };
    // `from_kept`: how much of the session file the open may read besides the kept file (None: it must read it
    // whole).
    let mut check = |step: &str, from_kept: Option<u64>| {
        let kept_before = kept_size();
        let (read, snapshot) = skeletons(&mut kept);
        let size = std::fs::metadata(&path).unwrap().len();
        match from_kept {
            Some(most) => {
                assert!(kept_before < size / 4, "{step}: {kept_before} bytes kept of a {size}-byte file");
                assert!(
                    read <= kept_before + most,
                    "{step}: {read} bytes read of a {size}-byte file whose open kept {kept_before}"
                );
            }
            None => assert!(read >= size, "{step}: only {read} bytes read of a {size}-byte file that changed"),
        }
        assert_eq!(snapshot, skeletons(&mut fresh).1, "{step}: the skeleton snapshot differs from a fresh read's");
        let pi = pi_reads(std::slice::from_ref(&path)).remove(0);
        let ours = sidecar_reads(&mut kept, &path).unwrap_or_else(|e| panic!("{step}: {}", e.to_canonical_string()));
        let pi = pi.get("ok").unwrap_or_else(|| panic!("{step}: pi fails: {}", pi.to_canonical_string()));
        if let Some(d) = json_diff("", &without_undefined_leaf(pi.clone()), &ours) {
            panic!("{step}: {d}");
        }
    };
    let kept_files = || std::fs::read_dir(&kept_dir).map_or(0, |d| d.count());

    check("first open", None);
    assert_eq!(kept_files(), 1, "the first open keeps what it read");
    // Nothing to read but the header's and the known bytes' few hundred (and the request).
    check("opened again, unchanged", Some(4096));

    let lines = bytes.iter().filter(|&&b| b == b'\n').count();
    let (at, id) = an_id_changed(&std::fs::read(&path).unwrap(), lines / 2);
    rewrite_in_place(&path, at, &id, true);
    check("rewritten in place, same length, mtime set back", None);

    let (at, id) = an_id_changed(&std::fs::read(&path).unwrap(), lines / 3);
    rewrite_in_place(&path, at, &id, false);
    check("rewritten in place, same length, a few bytes in the middle", None);
    check("opened again after the rewrite", Some(4096));

    let now = std::fs::read(&path).unwrap();
    let cut: usize = now.split(|&b| b == b'\n').take(lines - lines / 4).map(|l| l.len() + 1).sum();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(cut as u64).unwrap();
    check("truncated to three quarters", None);

    let other = padded(session_lines(&mut Rng::new(22), Shape { entries, hand_written: false }));
    let temp = format!("{path}.new");
    std::fs::write(&temp, &other).unwrap();
    std::fs::rename(&temp, &path).unwrap();
    check("replaced by another file renamed over it", None);

    let appended = to_bytes(&session_lines(&mut Rng::new(23), Shape { entries: 40, hand_written: false }));
    let appended: Vec<u8> = appended.splitn(2, |&b| b == b'\n').nth(1).unwrap().to_vec();
    std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(&appended).unwrap();
    check("appended to", Some(appended.len() as u64 + 4096));

    let skel = std::fs::read_dir(&kept_dir).unwrap().next().unwrap().unwrap().path();
    let mut damaged = std::fs::read(&skel).unwrap();
    // A letter inside a skeleton's text, so the kept file still decodes: only its checksum can tell.
    let middle = damaged.len() / 2;
    let at = middle + damaged[middle..].windows(8).position(|w| w == br#""type":""#).unwrap() + 8;
    damaged[at] ^= 0x20;
    std::fs::write(&skel, &damaged).unwrap();
    check("its kept file damaged", None);
    check("opened again once kept anew", Some(4096));
    std::fs::write(&skel, &damaged[..damaged.len() / 3]).unwrap();
    check("its kept file cut short", None);
    assert_eq!(std::fs::read(&path).unwrap().len(), other.len() + appended.len(), "the session file is as written");
}
