//! `pi-sessiond stats SESSION`: what a session holds, for a person — entries by type and role, its branches,
//! labels and compactions, and the tokens and cost of every model that worked in it (counted by
//! [`crate::catalog::usage`], as pi's `/session` counts them). `--timing` adds how long the open
//! took and the peak memory (the numbers the large-session benchmark compares with pi); `--json` prints it all
//! as one object. Only the bodies that carry usage are read, so a gigabyte of images stays on disk.

use std::collections::BTreeMap;
use std::io::Write;

use crate::catalog::usage::{session_usage, Usage, UsageByModel};
use crate::session::entry::{EntryType, Role};
use crate::session::json::{Json, Object};
use crate::session::render::{self, JsonOut};
use crate::session::{Env, SessionManager};

use super::output::{count, emit, human_bytes, terminal_safe_output, thousands, Failure, Style};

/// A sum as `stats` prints it: the cost to the micro-dollar, so a sum of decimal prices reads as one.
fn usage_json(u: &Usage) -> Object {
    let mut o = u.to_json();
    o.insert("cost", Json::number((u.cost * 1e6).round() / 1e6));
    o
}

/// pi's name of an entry type ("other" for one pi does not write).
pub fn type_name(kind: EntryType) -> &'static str {
    kind.name().unwrap_or("other")
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::ToolResult => "toolResult",
        Role::System => "system",
        Role::BashExecution => "bashExecution",
        Role::Custom => "custom",
        Role::HookMessage => "hookMessage",
        Role::Other => "other",
    }
}

/// What `stats` measures besides the session's contents.
#[derive(Clone, Copy, Debug, Default)]
pub struct StatsOptions {
    /// Report the open time and peak memory.
    pub timing: bool,
    /// Also time buildSessionContext and getTree, rendered to JSON in memory as the sidecar sends them.
    pub reads: bool,
}

/// Peak resident memory of this process so far, in KiB (Linux `VmHWM`), if known.
pub fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Opens `path` and reports.
pub fn stats(path: &str, options: StatsOptions, json: bool, style: &Style, out: &mut dyn Write) -> Result<u8, Failure> {
    let started = std::time::Instant::now();
    let m = SessionManager::open(path, None, None, Env::system())?;
    let open_ms = started.elapsed().as_secs_f64() * 1000.0;
    let report = collect(&m, path)?;
    let mut timing = Object::new();
    if options.timing || options.reads {
        let timed = |f: &dyn Fn(&mut JsonOut<'static>) -> crate::session::Result<()>| -> Option<(f64, usize)> {
            let t = std::time::Instant::now();
            let mut o = JsonOut::memory();
            f(&mut o).ok()?;
            Some((t.elapsed().as_secs_f64() * 1000.0, o.into_bytes().len()))
        };
        // Rendered in memory whole: only when asked (a 2.6 GB session's tree is 2.6 GB of JSON).
        let context =
            options.reads.then(|| timed(&|o| render::context(&m, &m.build_session_projection()?, o))).flatten();
        let tree = options.reads.then(|| timed(&|o| render::tree(&m, &m.tree(), o))).flatten();
        let ms = |v: f64| Json::number((v * 100.0).round() / 100.0);
        timing.insert("openMs", ms(open_ms));
        timing.insert("contextMs", context.map_or(Json::Null, |c| ms(c.0)));
        timing.insert("contextBytes", context.map_or(Json::Null, |c| Json::number(c.1 as f64)));
        timing.insert("treeMs", tree.map_or(Json::Null, |t| ms(t.0)));
        timing.insert("peakRssKiB", peak_rss_kib().map_or(Json::Null, |k| Json::number(k as f64)));
    }
    if json {
        let mut o = report.to_json();
        for (k, v) in timing.iter() {
            o.insert(k.clone(), v.clone());
        }
        return emit(out, &format!("{}\n", Json::Object(o).to_canonical_string()));
    }
    let mut text = report.to_text(style);
    if !timing.is_empty() {
        text.push_str(&format!("\n{}\n", style.paint("1", "timing")));
        for (k, v) in timing.iter() {
            text.push_str(&format!("  {k:<13} {}\n", v.to_canonical_string()));
        }
    }
    emit(out, &terminal_safe_output(&text))
}

/// What a session holds.
struct Report {
    file: String,
    bytes: Option<u64>,
    lines: usize,
    entry_count: usize,
    branch_length: usize,
    warnings: usize,
    /// The header's id, or None when the file holds no header: pi then makes one up in memory, a new one at
    /// every open, which would read as the file's.
    session_id: Option<Json>,
    name: Option<String>,
    /// The header's cwd (None as for `session_id`).
    cwd: Option<String>,
    types: BTreeMap<&'static str, u64>,
    roles: BTreeMap<&'static str, u64>,
    leaves: usize,
    branch_points: usize,
    labels: usize,
    by_model: UsageByModel,
}

fn collect(m: &SessionManager, path: &str) -> Result<Report, Failure> {
    let mut types = BTreeMap::new();
    let mut roles = BTreeMap::new();
    let mut by_model = UsageByModel::new();
    for i in m.entries() {
        let r = &m.records()[i];
        *types.entry(type_name(r.kind)).or_insert(0) += 1;
        if r.kind == EntryType::Message {
            *roles.entry(role_name(r.role)).or_insert(0) += 1;
        }
    }
    for c in session_usage(m)?.counted {
        by_model.entry(c.key).or_default().merge(&c.usage);
    }
    let header_in_file = m.records().iter().any(|r| r.is_header() && r.line > 0);
    let tree = m.tree();
    let leaves = tree.nodes.iter().filter(|n| n.children.is_empty()).count();
    let branch_points = tree.nodes.iter().filter(|n| n.children.len() > 1).count();
    Ok(Report {
        file: m.session_file().unwrap_or(path).to_owned(),
        bytes: std::fs::metadata(path).ok().map(|md| md.len()),
        lines: m.records().iter().filter(|r| r.line > 0).count(),
        entry_count: m.entry_count(),
        branch_length: m.branch_path(None).len(),
        warnings: m.warnings().len(),
        session_id: header_in_file.then(|| m.session_id().clone()),
        name: m.session_name().ok().flatten().map(|n| n.to_string_lossy()),
        cwd: header_in_file.then(|| m.cwd().to_owned()),
        types,
        roles,
        leaves,
        branch_points,
        labels: m.index().labels().count(),
        by_model,
    })
}

impl Report {
    fn total(&self) -> Usage {
        let mut total = Usage::default();
        for u in self.by_model.values() {
            total.merge(u);
        }
        total
    }

    fn to_json(&self) -> Object {
        let mut o = Object::new();
        let num = |n: f64| Json::number(n);
        o.insert("file", Json::str(&self.file));
        o.insert("bytes", self.bytes.map_or(Json::Null, |b| num(b as f64)));
        o.insert("lines", num(self.lines as f64));
        o.insert("entryCount", num(self.entry_count as f64));
        o.insert("branchLength", num(self.branch_length as f64));
        o.insert("warnings", num(self.warnings as f64));
        o.insert("sessionId", self.session_id.clone().unwrap_or(Json::Null));
        o.insert("name", self.name.as_deref().map_or(Json::Null, Json::str));
        o.insert("cwd", self.cwd.as_deref().map_or(Json::Null, Json::str));
        let counts = |m: &BTreeMap<&'static str, u64>| {
            let mut c = Object::new();
            for (k, v) in m {
                c.insert(*k, num(*v as f64));
            }
            Json::Object(c)
        };
        o.insert("types", counts(&self.types));
        o.insert("roles", counts(&self.roles));
        o.insert("leaves", num(self.leaves as f64));
        o.insert("branchPoints", num(self.branch_points as f64));
        o.insert("labels", num(self.labels as f64));
        o.insert("compactions", num(*self.types.get("compaction").unwrap_or(&0) as f64));
        let models = self
            .by_model
            .iter()
            .map(|(model, u)| {
                let mut row = Object::new();
                row.insert("model", Json::str(model));
                for (k, v) in usage_json(u).iter() {
                    row.insert(k.clone(), v.clone());
                }
                Json::Object(row)
            })
            .collect();
        o.insert("models", Json::Array(models));
        o.insert("total", Json::Object(usage_json(&self.total())));
        o
    }

    fn to_text(&self, style: &Style) -> String {
        let mut t = String::new();
        let head =
            |t: &mut String, k: &str, v: String| t.push_str(&format!("{} {v}\n", style.paint("1", &format!("{k:<9}"))));
        if let Some(n) = &self.name {
            head(&mut t, "session", n.clone());
        }
        let size = self.bytes.map(human_bytes).unwrap_or_else(|| "?".into());
        head(&mut t, "file", format!("{} ({size})", self.file));
        match (&self.session_id, &self.cwd) {
            (Some(id), Some(cwd)) => {
                head(&mut t, "id", crate::session::js::to_js_string(id).to_string_lossy());
                head(&mut t, "cwd", cwd.clone());
            }
            _ => head(&mut t, "header", "none in the file (pi starts a new session in it at its first write)".into()),
        }
        let list = |m: &BTreeMap<&'static str, u64>| {
            let mut v: Vec<(&&str, &u64)> = m.iter().collect();
            v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            v.iter().map(|(k, n)| format!("{} {k}", thousands(**n))).collect::<Vec<_>>().join(", ")
        };
        let entries = thousands(self.entry_count as u64);
        head(
            &mut t,
            "entries",
            if self.types.is_empty() { entries } else { format!("{entries} ({})", list(&self.types)) },
        );
        if !self.roles.is_empty() {
            head(&mut t, "messages", list(&self.roles));
        }
        let compactions = *self.types.get("compaction").unwrap_or(&0);
        head(
            &mut t,
            "tree",
            format!(
                "{}, {}, active branch {}, {}, {}",
                count(self.leaves, "branch tip", "branch tips"),
                count(self.branch_points, "branch point", "branch points"),
                count(self.branch_length, "entry", "entries"),
                count(self.labels, "label", "labels"),
                count(compactions as usize, "compaction", "compactions")
            ),
        );
        if self.warnings > 0 {
            head(&mut t, "warnings", format!("{} (see `pi-sessiond inspect --only warnings`)", self.warnings));
        }
        if self.by_model.is_empty() {
            head(&mut t, "tokens", "none recorded".into());
            return t;
        }
        t.push('\n');
        let tok = |v: f64| thousands(v.max(0.0).round() as u64);
        let header = ["model", "responses", "input", "output", "cache read", "cache write", "cost"];
        let cells = |name: &str, u: &Usage| -> [String; 7] {
            [
                name.to_owned(),
                thousands(u.responses),
                tok(u.input),
                tok(u.output),
                tok(u.cache_read),
                tok(u.cache_write),
                format!("${:.4}", u.cost),
            ]
        };
        let mut rows: Vec<[String; 7]> = self.by_model.iter().map(|(model, u)| cells(model, u)).collect();
        if self.by_model.len() > 1 {
            rows.push(cells("total", &self.total()));
        }
        t.push_str(&super::output::table(&header, &rows, style));
        t
    }
}
