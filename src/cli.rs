//! The command-line tools: `inspect`, `ls` and `tree`, straight on the engine (no RPC).
//!
//! `inspect` and `ls` print what pi's own read API returns, as JSON, so a script (or a conformance check) can
//! compare them with pi byte for byte after parsing; `tree` is for people. None of them writes to a session file.

use std::io::Write;

use crate::catalog::index::CatalogIndex;
use crate::catalog::listing::Catalog;
use crate::catalog::search::{search_sessions, Scope};
use crate::session::context::ContextOptions;
use crate::session::js::date::to_iso_string;
use crate::session::json::{JsString, Json};
use crate::session::key::Key;
use crate::session::render::{self, JsonOut, ObjectWriter};
use crate::session::store::Warning;
use crate::session::{Env, Error, SessionManager};

/// Prints `{"error": {"kind", "message"}}` and returns exit status 1.
pub fn print_error(out: &mut dyn Write, e: &Error) -> i32 {
    let mut o = crate::session::json::Object::new();
    let mut inner = crate::session::json::Object::new();
    inner.insert("kind", Json::str(e.kind().as_str()));
    inner.insert("message", Json::str(&e.to_string()));
    o.insert("error", Json::Object(inner));
    let _ = writeln!(out, "{}", Json::Object(o).to_canonical_string());
    1
}

/// `pi-sessiond inspect FILE`: pi's reads after `SessionManager.open(FILE)`, as one JSON object.
pub fn inspect(path: &str, options: ContextOptions, out: &mut dyn Write) -> i32 {
    inspect_with(path, options, Env::system(), out)
}

/// [`inspect`] with a chosen source of ids and time (a legacy file gets new ids when it is migrated).
///
/// Exit status: 0 when every read answered; 1 when the file cannot be opened (`{"error": …}` alone) or when some
/// reads failed on an entry (pi's throw too: those reads are left out and listed in `errors`, the rest printed).
pub fn inspect_with(path: &str, options: ContextOptions, env: Env, out: &mut dyn Write) -> i32 {
    let resolved = crate::session::paths::resolve_path(path);
    if !std::path::Path::new(&resolved).exists() {
        let e = Error::io("open", resolved, std::io::Error::from(std::io::ErrorKind::NotFound));
        return print_error(out, &e);
    }
    let mut m = match SessionManager::open(path, None, None, env) {
        Ok(m) => m,
        Err(e) => return print_error(out, &e),
    };
    m.set_context_options(options);
    let reads = Reads::compute(&m);
    let mut o = JsonOut::streaming(out);
    let written = reads.write(&m, true, &mut o).and_then(|()| o.raw(b"\n")).and_then(|()| o.flush());
    match written {
        Ok(()) if reads.errors().next().is_some() => 1,
        Ok(()) => 0,
        Err(e) => {
            eprintln!("pi-sessiond: {e}");
            2
        }
    }
}

/// Everything `inspect` reports that needs more than the index, computed before the first byte is written.
/// Each read that pi's own throws on fails alone (see [`Reads::errors`]); the others are still given.
pub struct Reads {
    tree: crate::session::tree::Tree,
    branch: Vec<usize>,
    context_entries: crate::session::Result<Vec<usize>>,
    projection: crate::session::Result<crate::session::context::Projection>,
    name: crate::session::Result<Option<JsString>>,
}

impl Reads {
    /// Runs pi's reads on `m`.
    pub fn compute(m: &SessionManager) -> Reads {
        Reads {
            tree: m.tree(),
            branch: m.branch_path(None),
            context_entries: m.build_context_entries(),
            projection: m.build_session_projection(),
            name: m.session_name(),
        }
    }

    /// The reads that failed, by the name of their member in [`Reads::write`]'s output.
    pub fn errors(&self) -> impl Iterator<Item = (&'static str, &Error)> {
        let projection = self.projection.as_ref().err();
        [
            ("contextEntries", self.context_entries.as_ref().err()),
            ("projection", projection),
            ("context", projection),
            ("sessionName", self.name.as_ref().err()),
        ]
        .into_iter()
        .filter_map(|(read, e)| e.map(|e| (read, e)))
    }

    /// Writes `{header, entries, leafId, tree, branch, contextEntries, projection, context, sessionName,
    /// sessionId, cwd, entryCount[, warnings][, errors]}`: members pi leaves undefined are omitted, and so are
    /// reads that failed, which are `errors: {member: {kind, message}}` instead.
    pub fn write(&self, m: &SessionManager, with_warnings: bool, o: &mut JsonOut<'_>) -> crate::session::Result<()> {
        let mut w = ObjectWriter::open(o)?;
        w.key(o, "header")?;
        match m.header() {
            Some(h) => render::record(m, h, o)?,
            None => o.raw(b"null")?,
        }
        w.key(o, "entries")?;
        render::records(m, &m.entries(), o)?;
        if *m.leaf_id() != Key::Undefined {
            w.key(o, "leafId")?;
            render::key(m.leaf_id(), o)?;
        }
        w.key(o, "tree")?;
        render::tree(m, &self.tree, o)?;
        w.key(o, "branch")?;
        render::records(m, &self.branch, o)?;
        if let Ok(entries) = &self.context_entries {
            w.key(o, "contextEntries")?;
            render::records(m, entries, o)?;
        }
        if let Ok(projection) = &self.projection {
            w.key(o, "projection")?;
            render::projection(m, projection, o)?;
            w.key(o, "context")?;
            render::context(m, projection, o)?;
        }
        if let Ok(Some(n)) = &self.name {
            w.key(o, "sessionName")?;
            o.string(n)?;
        }
        w.key(o, "sessionId")?;
        o.value(m.session_id())?;
        w.key(o, "cwd")?;
        o.string(&JsString::from(m.cwd()))?;
        w.key(o, "entryCount")?;
        o.raw(m.entry_count().to_string().as_bytes())?;
        if with_warnings {
            w.key(o, "warnings")?;
            warnings_json(m.warnings(), o)?;
        }
        if self.errors().next().is_some() {
            w.key(o, "errors")?;
            let mut ew = ObjectWriter::open(o)?;
            for (read, e) in self.errors() {
                ew.key(o, read)?;
                let mut one = ObjectWriter::open(o)?;
                one.key(o, "kind")?;
                o.str(e.kind().as_str())?;
                one.key(o, "message")?;
                o.str(&e.to_string())?;
                one.close(o)?;
            }
            ew.close(o)?;
        }
        w.close(o)
    }
}

/// Writes `[{line, kind, message}]`.
pub fn warnings_json(warnings: &[Warning], o: &mut JsonOut<'_>) -> crate::session::Result<()> {
    o.raw(b"[")?;
    for (i, w) in warnings.iter().enumerate() {
        if i > 0 {
            o.raw(b",")?;
        }
        let mut ow = ObjectWriter::open(o)?;
        ow.key(o, "line")?;
        o.raw(w.line.to_string().as_bytes())?;
        ow.key(o, "kind")?;
        o.string(&JsString::from(w.kind.as_str()))?;
        ow.key(o, "message")?;
        o.string(&JsString::from(w.message.as_str()))?;
        ow.close(o)?;
    }
    o.raw(b"]")
}

/// `pi-sessiond ls`: pi's `list(cwd, dir)`, or `listAll(dir)` with `all`, as a JSON array.
pub fn ls(
    cwd: Option<&str>,
    dir: Option<&str>,
    all: bool,
    agent_dir: &str,
    index: Option<&mut CatalogIndex>,
    out: &mut dyn Write,
) -> i32 {
    let mut catalog = Catalog::new(agent_dir, index);
    let listed = if all {
        catalog.list_all(dir, &mut |_, _| {})
    } else {
        let cwd = cwd.map(str::to_owned).unwrap_or_else(crate::session::paths::process_cwd);
        catalog.list(&cwd, dir, &mut |_, _| {})
    };
    let infos = match listed {
        Ok(i) => i,
        Err(e) => return print_error(out, &e),
    };
    let mut bytes = crate::catalog::info::session_infos(&infos, true);
    bytes.push(b'\n');
    match out.write_all(&bytes) {
        Ok(()) => 0,
        Err(_) => 2,
    }
}

fn print_json(out: &mut dyn Write, value: &Json) -> i32 {
    let mut bytes = Vec::new();
    value.write_preserving(&mut bytes);
    bytes.push(b'\n');
    match out.write_all(&bytes) {
        Ok(()) => 0,
        Err(_) => 2,
    }
}

/// What `pi-sessiond search` was asked.
#[derive(Debug)]
pub struct SearchRequest<'a> {
    /// The query (pi's `/resume` language).
    pub query: &'a str,
    /// Search this project's sessions only.
    pub cwd: Option<&'a str>,
    /// The session directory.
    pub dir: Option<&'a str>,
    /// At most this many results.
    pub limit: usize,
    /// Only these roles.
    pub roles: Option<Vec<String>>,
}

/// `pi-sessiond search QUERY`: hits as a JSON array (`json`), or one block per hit for a person.
pub fn search(
    request: &SearchRequest<'_>,
    agent_dir: &str,
    index: Option<&mut CatalogIndex>,
    json: bool,
    out: &mut dyn Write,
) -> i32 {
    let scope = Scope { cwd: request.cwd, session_dir: request.dir };
    let hits = match search_sessions(
        request.query,
        scope,
        request.roles.as_deref(),
        request.limit,
        Catalog::new(agent_dir, index),
        &mut |_, _, _| {},
    ) {
        Ok(h) => h,
        Err(e) => return print_error(out, &e),
    };
    if json {
        return print_json(out, &Json::Array(hits.iter().map(crate::catalog::search::search_hit_json).collect()));
    }
    let mut text = String::new();
    for h in &hits {
        let when = to_iso_string(h.timestamp).unwrap_or_else(|| "-".into());
        let entry = h.entry_id.as_deref().map(|e| format!(" #{}", e.trim_matches('"'))).unwrap_or_default();
        text.push_str(&format!("{when}  {:<13} {}{entry}\n    {}\n", h.role, h.path, h.snippet));
    }
    if hits.is_empty() {
        text.push_str("no matches\n");
    }
    match out.write_all(text.as_bytes()) {
        Ok(()) => 0,
        Err(_) => 2,
    }
}

/// `pi-sessiond tree FILE`: the session drawn for a person.
pub fn tree(path: &str, out: &mut dyn Write) -> i32 {
    let m = match SessionManager::open(path, None, None, Env::system()) {
        Ok(m) => m,
        Err(e) => return print_error(out, &e),
    };
    let tree = m.tree();
    let mut text = String::new();
    if let Ok(Some(name)) = m.session_name() {
        text.push_str(&format!("{name}\n"));
    }
    let leaf = m.leaf_entry();
    // (node, prefix for its line, prefix for its children, is last sibling)
    let mut stack: Vec<(usize, String, bool, bool)> =
        tree.roots.iter().rev().enumerate().map(|(i, &n)| (n, String::new(), i == 0, true)).collect();
    while let Some((n, prefix, last, root)) = stack.pop() {
        let node = &tree.nodes[n];
        let connector = if root {
            ""
        } else if last {
            "└─ "
        } else {
            "├─ "
        };
        let r = &m.records()[node.record];
        let marker = if Some(node.record) == leaf { " ◀ leaf" } else { "" };
        let label = m.label(&r.id).map(|l| format!(" [{}]", crate::session::js::to_js_string(l))).unwrap_or_default();
        text.push_str(&format!("{prefix}{connector}{}{label}{marker}\n", describe(&m, node.record)));
        let child_prefix =
            if root { prefix.clone() } else { format!("{prefix}{}", if last { "   " } else { "│  " }) };
        // A single child continues the line of conversation without another level of indentation.
        let single = node.children.len() == 1;
        for (i, &c) in node.children.iter().enumerate().rev() {
            if single {
                stack.push((c, child_prefix.clone(), true, true));
            } else {
                stack.push((c, child_prefix.clone(), i == node.children.len() - 1, false));
            }
        }
    }
    match out.write_all(text.as_bytes()) {
        Ok(()) => 0,
        Err(_) => 2,
    }
}

/// One line about an entry: id, type or role, and a text preview.
fn describe(m: &SessionManager, i: usize) -> String {
    use crate::session::context::Bodies;
    let r = &m.records()[i];
    let id = r.id.display();
    let body = m.bodies().json(i).unwrap_or(Json::Null);
    let preview = |v: Option<&Json>| -> String {
        let text = match v {
            Some(Json::String(s)) => s.to_string_lossy(),
            Some(Json::Array(blocks)) => blocks
                .iter()
                .filter_map(|b| {
                    let t = b.get("type").and_then(Json::as_js_str)?.to_string_lossy();
                    match t.as_str() {
                        "text" => b.get("text").and_then(Json::as_js_str).map(|s| s.to_string_lossy()),
                        "toolCall" => Some(format!(
                            "→ {}",
                            b.get("name").and_then(Json::as_js_str).map(|s| s.to_string_lossy()).unwrap_or_default()
                        )),
                        "image" => Some("[image]".to_owned()),
                        _ => None,
                    }
                })
                .collect::<Vec<_>>()
                .join(" "),
            _ => String::new(),
        };
        let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
        if one_line.chars().count() > 72 {
            format!("{}…", one_line.chars().take(72).collect::<String>())
        } else {
            one_line
        }
    };
    let s = |k: &str| body.get(k).map(|v| crate::session::js::to_js_string(v).to_string_lossy()).unwrap_or_default();
    use crate::session::entry::EntryType as T;
    let what = match r.kind {
        T::Message => {
            let msg = body.get("message");
            let role = msg.and_then(|m| m.get("role")).and_then(Json::as_js_str).map(|s| s.to_string_lossy());
            format!("{}: {}", role.unwrap_or_else(|| "message".into()), preview(msg.and_then(|m| m.get("content"))))
        }
        T::ThinkingLevelChange => format!("thinking level → {}", s("thinkingLevel")),
        T::ModelChange => format!("model → {}/{}", s("provider"), s("modelId")),
        T::Compaction => format!("compaction: {}", preview(body.get("summary"))),
        T::BranchSummary => format!("branch summary: {}", preview(body.get("summary"))),
        T::CustomMessage => format!("custom message ({}): {}", s("customType"), preview(body.get("content"))),
        T::Custom => format!("custom ({})", s("customType")),
        T::Label => format!("label {} → {}", s("targetId"), s("label")),
        T::SessionInfo => format!("name: {}", s("name")),
        T::Usage => format!("usage ({})", s("kind")),
        T::ContextEdit => format!("context edit of {}", s("targetId")),
        T::Session | T::Other => s("type"),
    };
    format!("{id} {what}")
}

/// Peak resident memory of this process so far, in KiB (Linux `VmHWM`), if known.
pub fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// `pi-sessiond stats FILE`: open the file as `SessionManager.open` would and report its shape, how long the
/// open took and the peak memory — the numbers the large-session benchmark compares with pi.
pub fn stats(path: &str, reads: bool, out: &mut dyn Write) -> i32 {
    let started = std::time::Instant::now();
    let m = match SessionManager::open(path, None, None, Env::system()) {
        Ok(m) => m,
        Err(e) => return print_error(out, &e),
    };
    let open_ms = started.elapsed().as_secs_f64() * 1000.0;
    // What a host asks for next, rendered to JSON text as the sidecar would send it.
    let timed = |f: &dyn Fn(&mut JsonOut<'static>) -> crate::session::Result<()>| -> Option<(f64, usize)> {
        let t = std::time::Instant::now();
        let mut o = JsonOut::memory();
        f(&mut o).ok()?;
        Some((t.elapsed().as_secs_f64() * 1000.0, o.into_bytes().len()))
    };
    // Rendered in memory whole: only when asked (a 2.6 GB session's tree is 2.6 GB of JSON).
    let context = reads.then(|| timed(&|o| render::context(&m, &m.build_session_projection()?, o))).flatten();
    let tree = reads.then(|| timed(&|o| render::tree(&m, &m.tree(), o))).flatten();
    let branch = m.branch_path(None).len();
    let mut o = crate::session::json::Object::new();
    o.insert("file", Json::str(m.session_file().unwrap_or_default()));
    o.insert("bytes", Json::number(std::fs::metadata(path).map(|md| md.len() as f64).unwrap_or(f64::NAN)));
    o.insert("lines", Json::number(m.records().len() as f64));
    o.insert("entryCount", Json::number(m.entry_count() as f64));
    o.insert("branchLength", Json::number(branch as f64));
    o.insert("warnings", Json::number(m.warnings().len() as f64));
    let ms = |v: f64| Json::number((v * 100.0).round() / 100.0);
    o.insert("openMs", ms(open_ms));
    o.insert("contextMs", context.map_or(Json::Null, |c| ms(c.0)));
    o.insert("contextBytes", context.map_or(Json::Null, |c| Json::number(c.1 as f64)));
    o.insert("treeMs", tree.map_or(Json::Null, |t| ms(t.0)));
    o.insert("peakRssKiB", peak_rss_kib().map_or(Json::Null, |k| Json::number(k as f64)));
    match writeln!(out, "{}", Json::Object(o).to_canonical_string()) {
        Ok(()) => 0,
        Err(_) => 2,
    }
}
