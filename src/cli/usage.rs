//! `pi-sessiond usage [--since DATE] [--by day|model|project]`: tokens and cost across every session of the agent
//! directory, summed as pi sums them ([`crate::catalog::usage`]), grouped by the UTC day of each entry, by model
//! (pi's `provider/model` key) or by project (the session's cwd). A table for people; with `--json`, an array of
//! `{day|model|project, input, output, cacheRead, cacheWrite, totalTokens, cost}`. With `--catalog URL` the team
//! catalog's sessions are summed instead (`team::cli::usage`, also `--by machine`), printed here the same way.

use std::io::Write;

use crate::catalog::index::CatalogIndex;
use crate::catalog::listing::Catalog;
use crate::catalog::usage::{day_of, overview, Counted, Overview, SessionUsage, Usage};
use crate::catalog::Cancel;
use crate::session::js::date::parse_date;
use crate::session::json::{Json, Object};

use super::output::{count, emit, terminal_safe_output, thousands, Failure, Style};

/// How `usage` groups.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum GroupBy {
    /// The UTC day of each entry's timestamp.
    #[default]
    Day,
    /// pi's `provider/model` (tool results and summaries under `Tools/summaries`).
    Model,
    /// The session's project (its cwd).
    Project,
    /// The machine that pushed the session (`--catalog` only: the team catalog's machines, one per person).
    Machine,
}

impl GroupBy {
    /// The group's member name in the JSON.
    pub fn name(self) -> &'static str {
        match self {
            GroupBy::Day => "day",
            GroupBy::Model => "model",
            GroupBy::Project => "project",
            GroupBy::Machine => "machine",
        }
    }
}

/// Parses `--since`: a date as JavaScript's `Date` reads it (`2026-01-31` is midnight UTC).
pub fn parse_since(text: &str) -> Result<f64, Failure> {
    let ms = parse_date(text);
    if ms.is_nan() {
        return Err(Failure::invalid(format!("--since {text:?} is not a date (try 2026-01-31)")));
    }
    Ok(ms)
}

/// Every session of the agent directory, as paths in byte order (the order sums are made in, so they are the
/// same whatever the files' times).
pub fn all_session_paths(agent_dir: &str, index: Option<&mut CatalogIndex>) -> Result<Vec<String>, Failure> {
    let mut paths: Vec<String> = Catalog::new(agent_dir, index)
        .without_text()
        .list_all(None, &mut |_, _| {})?
        .iter()
        .map(|s| s.info.path.clone())
        .collect();
    paths.sort();
    Ok(paths)
}

/// Sums the usage of every session of `agent_dir` grouped `by` (through the index's memo when there is one).
pub fn summarize(
    agent_dir: &str,
    mut index: Option<&mut CatalogIndex>,
    since_ms: Option<f64>,
    by: GroupBy,
) -> Result<Overview<String>, Failure> {
    if by == GroupBy::Machine {
        return Err(Failure::invalid("--by machine groups the team catalog's sessions: add --catalog URL"));
    }
    let paths = all_session_paths(agent_dir, index.as_deref_mut())?;
    Ok(overview(&paths, since_ms, &Cancel::new(), index, |s, c| by.key("", s, c))?)
}

impl GroupBy {
    /// The group of usage object `c` of session `s`, pushed by `machine`.
    pub fn key(self, machine: &str, s: &SessionUsage, c: &Counted) -> String {
        match self {
            GroupBy::Day => day_of(c.time_ms),
            GroupBy::Model => c.key.clone(),
            GroupBy::Project => s.cwd.clone(),
            GroupBy::Machine => machine.to_owned(),
        }
    }
}

/// Runs `usage` and prints it.
pub fn usage(
    agent_dir: &str,
    index: Option<&mut CatalogIndex>,
    since_ms: Option<f64>,
    by: GroupBy,
    json: bool,
    style: &Style,
    out: &mut dyn Write,
) -> Result<u8, Failure> {
    let o = summarize(agent_dir, index, since_ms, by)?;
    print(&o, by, json, style, out)
}

/// Prints sums grouped `by`: a table with a total, or with `json` the rows alone (local or team, one shape).
pub fn print(o: &Overview<String>, by: GroupBy, json: bool, style: &Style, out: &mut dyn Write) -> Result<u8, Failure> {
    for (path, e) in &o.unreadable {
        tracing::warn!("usage: {path} not counted: {e}");
    }
    if json {
        let rows = o
            .groups
            .iter()
            .map(|(k, u)| {
                let mut row = Object::new();
                row.insert(by.name(), Json::str(k));
                for (name, v) in u.to_json().iter().filter(|(name, _)| name.as_str() != Some("responses")) {
                    row.insert(name.clone(), v.clone());
                }
                Json::Object(row)
            })
            .collect();
        return emit(out, &format!("{}\n", Json::Array(rows).to_canonical_string()));
    }
    let mut t = String::new();
    let tok = |v: f64| thousands(v.max(0.0).round() as u64);
    let header = [by.name(), "input", "output", "cache read", "cache write", "total tokens", "cost"];
    let cells = |name: &str, u: &Usage| -> [String; 7] {
        [
            name.to_owned(),
            tok(u.input),
            tok(u.output),
            tok(u.cache_read),
            tok(u.cache_write),
            tok(u.total_tokens()),
            format!("${:.4}", u.cost),
        ]
    };
    let mut rows: Vec<[String; 7]> = o.groups.iter().map(|(k, u)| cells(k, u)).collect();
    if rows.is_empty() {
        t.push_str(&format!("no usage recorded in {}\n", count(o.sessions, "session", "sessions")));
    } else {
        let mut total = Usage::default();
        o.groups.values().for_each(|u| total.merge(u));
        rows.push(cells("total", &total));
        t.push_str(&super::output::table(&header, &rows, style));
        t.push_str(&format!("{}\n", count(o.sessions, "session", "sessions")));
    }
    if !o.unreadable.is_empty() {
        let unread = count(o.unreadable.len(), "session", "sessions");
        t.push_str(&format!(
            "{unread} could not be read and {} not counted\n",
            if o.unreadable.len() == 1 { "is" } else { "are" }
        ));
    }
    emit(out, &terminal_safe_output(&t))
}
