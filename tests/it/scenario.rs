//! Scenarios: one list of operations, run by pi (through the oracle) and by the engine, compared result by
//! result and byte by byte.
//!
//! An operation is a JSON object named after pi's `SessionManager` method (`{"op": "appendMessage", "message":
//! …}`), so the same scenario text drives both sides. `"as": "u1"` names the id an operation returns and
//! `{"$ref": "u1"}` uses it later; `$ROOT` in a string is the scenario's own directory. Members left out are
//! `undefined`, as in a JavaScript call.

use std::collections::HashMap;
use std::path::Path;

use pi_sessiond::cli::Reads;
use pi_sessiond::session::json::{Json, Object};
use pi_sessiond::session::key::Key;
use pi_sessiond::session::render::{self, JsonOut};
use pi_sessiond::session::{Error, NewSessionOptions, SessionManager};

use crate::support::{json_diff, oracle, replace_in_strings, temp_dir, Deterministic};

/// A named list of operations.
pub struct Scenario {
    pub name: String,
    pub ops: Vec<Json>,
}

impl Scenario {
    /// A scenario from JSON text of its operation list.
    pub fn new(name: &str, ops: &str) -> Scenario {
        let Ok(ops) = crate::support::json(ops).into_array() else { panic!("{name}: ops must be an array") };
        Scenario { name: name.to_owned(), ops }
    }

    fn to_json(&self) -> Json {
        let mut o = Object::new();
        o.insert("name", Json::str(&self.name));
        o.insert("ops", Json::Array(self.ops.clone()));
        Json::Object(o)
    }
}

/// The engine's side of a scenario run.
struct Runner {
    det: Deterministic,
    dir: String,
    refs: HashMap<String, Json>,
    m: Option<SessionManager>,
}

fn err(e: Error) -> String {
    err_text(&e)
}

fn err_text(e: &Error) -> String {
    match e {
        // pi fails these with a TypeError whose wording is V8's; only the fact of failing is compared.
        Error::InvalidEntry { .. } => "<TypeError>".to_owned(),
        other => other.to_string(),
    }
}

fn opt_str(o: &Object, k: &str) -> Option<String> {
    o.get(k).and_then(Json::as_js_str).map(|s| s.to_string_lossy())
}

fn options(o: &Object) -> NewSessionOptions {
    let opts = o.get("options").and_then(Json::as_object);
    NewSessionOptions {
        id: opts.and_then(|x| opt_str(x, "id")),
        parent_session: opts.and_then(|x| opt_str(x, "parentSession")),
    }
}

fn key(o: &Object, k: &str) -> Key {
    Key::from_json(o.get(k))
}

fn path_result(p: Option<String>) -> Json {
    p.map(|p| Json::str(&p)).unwrap_or(Json::Null)
}

impl Runner {
    fn sub(&self, v: &Json) -> Json {
        match v {
            Json::String(s) => match s.as_str() {
                Some(t) if t.contains("$ROOT") => Json::str(&t.replace("$ROOT", &self.dir)),
                _ => v.clone(),
            },
            Json::Array(items) => Json::Array(items.iter().map(|i| self.sub(i)).collect()),
            Json::Object(o) => {
                if let Some(Json::String(r)) = o.get("$ref") {
                    return self.refs.get(&r.to_string_lossy()).cloned().unwrap_or(Json::Null);
                }
                // A reference to an id that was never made is `undefined` in the oracle: leave the member out.
                let missing = |x: &Json| {
                    x.get("$ref")
                        .and_then(Json::as_js_str)
                        .is_some_and(|r| !self.refs.contains_key(&r.to_string_lossy()))
                };
                Json::Object(o.iter().filter(|(_, x)| !missing(x)).map(|(k, x)| (k.clone(), self.sub(x))).collect())
            }
            _ => v.clone(),
        }
    }

    /// Makes `m` the current session; context is built as pi 1.6.0 builds it (ignoring `retainedTail`).
    fn adopt(&mut self, mut m: SessionManager) {
        m.set_context_options(pi_sessiond::session::context::ContextOptions { honour_retained_tail: false });
        self.m = Some(m);
    }

    fn m(&mut self) -> &mut SessionManager {
        self.m.as_mut().expect("a session must be open")
    }

    fn reads(&self) -> Result<Json, String> {
        let m = self.m.as_ref().expect("open session");
        let reads = Reads::compute(m);
        // pi's `reads` op reads everything in one go, so one read that throws fails it whole.
        if let Some((_, e)) = reads.errors().next() {
            return Err(err_text(e));
        }
        let mut out = JsonOut::memory();
        reads.write(m, false, &mut out).map_err(err)?;
        Ok(Json::parse(&out.into_bytes()).expect("reads are JSON"))
    }

    fn entries_json(&self, list: &[usize]) -> Json {
        let m = self.m.as_ref().expect("open session");
        let mut out = JsonOut::memory();
        render::records(m, list, &mut out).expect("render");
        Json::parse(&out.into_bytes()).expect("JSON")
    }

    /// pi repairs a file as it opens it; the engine holds repairs back. To compare bytes after every step, the
    /// runner applies them at once, as pi would.
    fn eager(&mut self) -> Result<(), String> {
        self.m().apply_pending_repairs().map_err(err)
    }

    fn run(&mut self, op: &Object) -> Result<Json, String> {
        let name = opt_str(op, "op").unwrap_or_default();
        let s = |k: &str| opt_str(op, k);
        let v = |k: &str| op.get(k).cloned();
        let need = |k: &str| op.get(k).cloned().unwrap_or(Json::Null);
        Ok(match name.as_str() {
            "tick" => {
                self.det.tick(op.get("ms").map(|m| pi_sessiond::session::js::to_number(Some(m))).unwrap_or(1000.0));
                Json::Null
            }
            "writeFile" => {
                let path = s("path").unwrap();
                std::fs::create_dir_all(Path::new(&path).parent().unwrap()).unwrap();
                let bytes = base64_decode(&s("base64").unwrap());
                std::fs::write(&path, bytes).unwrap();
                Json::Null
            }
            "touch" => {
                let path = s("path").unwrap();
                let ms = pi_sessiond::session::js::to_number(op.get("mtimeMs"));
                let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(ms / 1000.0);
                let f = std::fs::File::options().write(true).open(&path).unwrap();
                f.set_times(std::fs::FileTimes::new().set_modified(t).set_accessed(t)).unwrap();
                Json::Null
            }
            "remove" => {
                let path = s("path").unwrap();
                let _ = std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
                Json::Null
            }
            "create" => {
                let m = SessionManager::create(&s("cwd").unwrap(), s("dir").as_deref(), options(op), self.det.env())
                    .map_err(err)?;
                let f = m.session_file().map(str::to_owned);
                self.adopt(m);
                path_result(f)
            }
            "open" => {
                let m = SessionManager::open(
                    &s("path").ok_or("<TypeError>")?,
                    s("dir").as_deref(),
                    s("cwdOverride").as_deref(),
                    self.det.env(),
                )
                .map_err(err)?;
                self.adopt(m);
                // `"lazy": true` keeps the engine's own behaviour (repairs at the first write) to show it ends
                // in pi's bytes anyway; the oracle ignores the flag.
                if op.get("lazy") != Some(&Json::Bool(true)) {
                    self.eager()?;
                }
                path_result(self.m().session_file().map(str::to_owned))
            }
            "continueRecent" => {
                let m = SessionManager::continue_recent(&s("cwd").unwrap(), s("dir").as_deref(), self.det.env())
                    .map_err(err)?;
                self.adopt(m);
                self.eager()?;
                path_result(self.m().session_file().map(str::to_owned))
            }
            "inMemory" => {
                let entries = match op.get("entries") {
                    Some(Json::Array(items)) => {
                        Some(items.iter().map(|e| e.to_canonical_string().into_bytes()).collect())
                    }
                    _ => None,
                };
                let m = SessionManager::in_memory(s("cwd").as_deref(), options(op), entries, self.det.env())
                    .map_err(err)?;
                let id = m.session_id().clone();
                self.adopt(m);
                id
            }
            "forkFrom" => {
                let m = SessionManager::fork_from(
                    &s("source").unwrap(),
                    &s("targetCwd").unwrap(),
                    s("dir").as_deref(),
                    options(op),
                    self.det.env(),
                )
                .map_err(err)?;
                self.adopt(m);
                self.eager()?;
                path_result(self.m().session_file().map(str::to_owned))
            }
            "newSession" => path_result(self.m().new_session(options(op)).map_err(err)?),
            "setSessionFile" => {
                self.m().set_session_file(&s("path").unwrap()).map_err(err)?;
                self.eager()?;
                Json::Null
            }
            "appendMessage" => Json::str(&self.m().append_message(need("message")).map_err(err)?),
            "appendThinkingLevelChange" => {
                Json::str(&self.m().append_thinking_level_change(need("thinkingLevel")).map_err(err)?)
            }
            "appendModelChange" => {
                Json::str(&self.m().append_model_change(need("provider"), need("modelId")).map_err(err)?)
            }
            "appendUsage" => {
                let i = self
                    .m()
                    .append_usage(need("kind"), need("provider"), need("model"), need("usage"), v("note"))
                    .map_err(err)?;
                let Ok(mut one) = self.entries_json(&[i]).into_array() else { unreachable!() };
                one.remove(0)
            }
            "appendCompaction" => Json::str(
                &self
                    .m()
                    .append_compaction(
                        need("summary"),
                        v("firstKeptEntryId"),
                        need("tokensBefore"),
                        v("details"),
                        v("fromHook"),
                        v("usage"),
                        v("retainedTail"),
                    )
                    .map_err(err)?,
            ),
            "appendCustomEntry" => {
                Json::str(&self.m().append_custom_entry(need("customType"), v("data")).map_err(err)?)
            }
            "appendSessionInfo" => {
                let name = op.get("name").and_then(Json::as_js_str).cloned().ok_or("<TypeError>")?;
                Json::str(&self.m().append_session_info(&name).map_err(err)?)
            }
            "appendCustomMessageEntry" => Json::str(
                &self
                    .m()
                    .append_custom_message_entry(
                        need("customType"),
                        v("content").unwrap_or(Json::Null),
                        need("display"),
                        v("details"),
                    )
                    .map_err(err)?,
            ),
            "appendContextEdit" => {
                Json::str(&self.m().append_context_edit(&key(op, "targetId"), v("replacement")).map_err(err)?)
            }
            "appendLabelChange" => {
                Json::str(&self.m().append_label_change(&key(op, "targetId"), v("label")).map_err(err)?)
            }
            "branch" => {
                self.m().branch(&key(op, "entryId")).map_err(err)?;
                Json::Null
            }
            "resetLeaf" => {
                self.m().reset_leaf();
                Json::Null
            }
            "branchWithSummary" => {
                let from = match op.get("entryId") {
                    Some(Json::Null) => None,
                    other => Some(Key::from_json(other)),
                };
                Json::str(
                    &self
                        .m()
                        .branch_with_summary(from.as_ref(), need("summary"), v("details"), v("fromHook"), v("usage"))
                        .map_err(err)?,
                )
            }
            "createBranchedSession" => path_result(self.m().create_branched_session(&key(op, "leafId")).map_err(err)?),
            "reads" => self.reads()?,
            "children" => {
                let list = self.m.as_ref().unwrap().children(&key(op, "parentId"));
                self.entries_json(&list)
            }
            "getBranch" => {
                let from = op.get("fromId").map(|f| Key::from_json(Some(f)));
                let list = self.m.as_ref().unwrap().branch_path(from.as_ref());
                self.entries_json(&list)
            }
            "getEntry" => match self.m.as_ref().unwrap().entry(&key(op, "id")) {
                Some(i) => {
                    let Ok(mut one) = self.entries_json(&[i]).into_array() else { unreachable!() };
                    one.remove(0)
                }
                None => Json::Null,
            },
            "getLabel" => self.m.as_ref().unwrap().label(&key(op, "id")).cloned().unwrap_or(Json::Null),
            "state" => {
                let m = self.m.as_ref().unwrap();
                let mut o = Object::new();
                o.insert("sessionId", m.session_id().clone());
                o.insert("sessionFile", path_result(m.session_file().map(str::to_owned)));
                o.insert("sessionDir", Json::str(m.session_dir()));
                o.insert("cwd", Json::str(m.cwd()));
                o.insert("persisted", Json::Bool(m.is_persisted()));
                o.insert("leafId", m.leaf_id().to_json_text().map(|t| crate::support::json(&t)).unwrap_or(Json::Null));
                Json::Object(o)
            }
            other => panic!("unknown op {other}"),
        })
    }
}

/// Standard base64 decoding (test data only).
pub fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a' + 26) as u32,
            b'0'..=b'9' => (c - b'0' + 52) as u32,
            b'+' => 62,
            b'/' => 63,
            _ => 0,
        }
    };
    let clean: Vec<u8> = s.bytes().filter(|&c| c != b'=' && !c.is_ascii_whitespace()).collect();
    let mut out = Vec::new();
    for chunk in clean.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= val(c) << (18 - 6 * i);
        }
        let n = chunk.len() * 6 / 8;
        for i in 0..n {
            out.push((acc >> (16 - 8 * i)) as u8);
        }
    }
    out
}

/// Standard base64 encoding (test data only).
pub fn base64_encode(bytes: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = ((b[0] as u32) << 16) | ((b[1] as u32) << 8) | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Runs every scenario through pi and through the engine and panics with every difference found.
pub fn run_and_compare(scenarios: &[Scenario]) {
    let tmp = temp_dir();
    let root_pi = tmp.path().join("pi");
    let root_rs = tmp.path().join("rs");
    std::fs::create_dir_all(&root_pi).unwrap();
    std::fs::create_dir_all(&root_rs).unwrap();
    let (pi_root, rs_root) = (crate::support::s(&root_pi), crate::support::s(&root_rs));
    let mut req = Object::new();
    req.insert("command", Json::str("scenarios"));
    req.insert("root", Json::str(&pi_root));
    req.insert("scenarios", Json::Array(scenarios.iter().map(Scenario::to_json).collect()));
    let Ok(answers) = oracle(&Json::Object(req)).into_array() else { panic!("oracle answer") };
    let det = Deterministic::new();
    let mut problems = Vec::new();
    for (scenario, answer) in scenarios.iter().zip(answers) {
        let dir = format!("{rs_root}/{}", scenario.name);
        std::fs::create_dir_all(&dir).unwrap();
        let mut runner = Runner { det: det.clone(), dir: dir.clone(), refs: HashMap::new(), m: None };
        let answer = replace_in_strings(&answer, &pi_root, &rs_root);
        let Some(Json::Array(pi_results)) = answer.get("results") else { panic!("results") };
        for (n, (raw, pi_result)) in scenario.ops.iter().zip(pi_results).enumerate() {
            let op = runner.sub(raw);
            let ours = runner.run(op.as_object().expect("op object"));
            let ours_json = match &ours {
                Ok(v) => {
                    let mut o = Object::new();
                    o.insert("ok", v.clone());
                    Json::Object(o)
                }
                Err(e) => {
                    let mut o = Object::new();
                    o.insert("error", Json::str(e));
                    Json::Object(o)
                }
            };
            if let Some(alias) = raw.get("as").and_then(Json::as_js_str) {
                if let Ok(v) = &ours {
                    let id = v.get("id").cloned().unwrap_or_else(|| v.clone());
                    runner.refs.insert(alias.to_string_lossy(), id);
                }
            }
            let both_type_errors = ours_json.get("error").is_some_and(|e| *e == Json::str("<TypeError>"))
                && pi_result.get("error").is_some();
            if both_type_errors {
                continue;
            }
            if let Some(d) = json_diff("", pi_result, &ours_json) {
                let outcome =
                    |v: &Json| if v.get("error").is_some() { v.to_canonical_string() } else { "ok".to_owned() };
                problems.push(format!(
                    "{} op #{n} {}: pi vs ours differ at {d} (pi: {}, ours: {})",
                    scenario.name,
                    raw.get("op").map(Json::to_canonical_string).unwrap_or_default(),
                    outcome(pi_result),
                    outcome(&ours_json)
                ));
            }
        }
        // Files, byte for byte.
        let Some(Json::Object(pi_files)) = answer.get("files") else { panic!("files") };
        let mut ours_files = Vec::new();
        collect_files(Path::new(&dir), Path::new(&dir), &mut ours_files);
        for (rel, b64) in pi_files.iter() {
            let rel = rel.to_string_lossy();
            let pi_bytes = base64_decode(&b64.as_js_str().unwrap().to_string_lossy());
            let pi_bytes = String::from_utf8_lossy(&pi_bytes).replace(&pi_root, &rs_root).into_bytes();
            match std::fs::read(Path::new(&dir).join(&rel)) {
                Err(_) => problems.push(format!("{}: pi wrote {rel}, we did not", scenario.name)),
                Ok(ours) if ours != pi_bytes => problems.push(format!(
                    "{}: {rel} differs:\n  pi:   {}\n  ours: {}",
                    scenario.name,
                    String::from_utf8_lossy(&pi_bytes).replace('\n', "\n        "),
                    String::from_utf8_lossy(&ours).replace('\n', "\n        ")
                )),
                Ok(_) => {}
            }
        }
        for rel in ours_files {
            if !pi_files.iter().any(|(k, _)| k.to_string_lossy() == rel) {
                problems.push(format!("{}: we wrote {rel}, pi did not", scenario.name));
            }
        }
    }
    assert!(problems.is_empty(), "{} differences from pi 1.6.0:\n{}", problems.len(), problems.join("\n"));
}

fn collect_files(root: &Path, dir: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            collect_files(root, &p, out);
        } else {
            out.push(p.strip_prefix(root).unwrap().to_string_lossy().into_owned());
        }
    }
}
