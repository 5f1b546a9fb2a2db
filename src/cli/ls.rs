//! `pi-sessiond ls`: a project's sessions (or all of them) as a table a person scans — the name or first
//! message, how many messages, when it was last active, where, and the id to name it by — and, with `--json`,
//! exactly what pi's `list(cwd, dir)` / `listAll(dir)` return. Listing never creates a directory: a project
//! without sessions simply has none.

use std::io::Write;
use std::sync::Arc;

use crate::catalog::index::CatalogIndex;
use crate::catalog::info::{self, ListedSession};
use crate::catalog::listing::Catalog;
use crate::session::describe::one_line;
use crate::session::paths;
use crate::session::ErrorKind;

use super::output::{
    char_width, cut_start_to_width, emit, terminal_safe, terminal_safe_output, visible_len, Failure, Style,
};

/// The widest a cwd is shown in the table, in terminal columns.
const CWD_COLUMNS: usize = 60;

/// What `ls` was asked.
#[derive(Clone, Debug, Default)]
pub struct LsRequest {
    /// The project (default: the current directory).
    pub cwd: Option<String>,
    /// The session directory instead of the project's default one.
    pub dir: Option<String>,
    /// Every session (pi's `listAll`).
    pub all: bool,
}

/// The listing `request` asks for, read-only.
pub fn listing(
    request: &LsRequest,
    agent_dir: &str,
    index: Option<&mut CatalogIndex>,
) -> Result<Vec<Arc<ListedSession>>, Failure> {
    // A directory the user named must be there: "no sessions" would hide a typo. The project's own directory may
    // be missing (no session of it yet).
    if let Some(dir) = &request.dir {
        named_directory(dir)?;
    }
    let mut catalog = Catalog::new(agent_dir, index);
    if request.all {
        return Ok(catalog.list_all(request.dir.as_deref(), &mut |_, _| {})?);
    }
    let cwd = match &request.cwd {
        Some(cwd) => cwd.clone(),
        None => super::resolve::project_cwd(&paths::process_cwd(), agent_dir),
    };
    // pi's list() creates the project's directory when it is missing; a listing must not.
    let dir = match &request.dir {
        Some(d) => d.clone(),
        None => paths::default_session_dir_path(&cwd, agent_dir),
    };
    if !paths::as_path(&dir).exists() {
        return Ok(Vec::new());
    }
    Ok(catalog.list(&cwd, Some(&dir), &mut |_, _| {})?)
}

/// Ok when `dir` is a directory; else what it is instead, as an error naming it.
fn named_directory(dir: &str) -> Result<(), Failure> {
    let path = paths::resolve_path(dir);
    match std::fs::metadata(&path) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(Failure::invalid(format!("{path}: not a directory (--dir names a directory of sessions)"))),
        Err(e) => Err(Failure::new(
            if e.kind() == std::io::ErrorKind::NotFound { ErrorKind::SessionNotFound } else { ErrorKind::IoError },
            format!("{path}: {}", super::output::describe_io(&e)),
        )),
    }
}

/// Prints the listing: pi's JSON with `json`, else a table.
pub fn print(listing: &[Arc<ListedSession>], json: bool, style: &Style, out: &mut dyn Write) -> Result<u8, Failure> {
    print_among(listing, &[], json, style, out)
}

/// [`print`], where an id shown as a prefix must also stay distinct from `other_ids` (sessions not listed, which
/// `tree` and `show` look among all the same).
pub fn print_among(
    listing: &[Arc<ListedSession>],
    other_ids: &[String],
    json: bool,
    style: &Style,
    out: &mut dyn Write,
) -> Result<u8, Failure> {
    if json {
        let mut bytes = info::session_infos(listing, true);
        bytes.push(b'\n');
        return emit(out, &String::from_utf8_lossy(&bytes));
    }
    emit(out, &terminal_safe_output(&table(listing, other_ids, style, now_ms())))
}

/// The session ids pi's file names carry under `<agentDir>/sessions/*/`: the sessions of every project, found
/// without reading a file.
pub fn ids_in_file_names(agent_dir: &str) -> Vec<String> {
    super::resolve::session_files(agent_dir).into_iter().filter_map(|(_, id)| id).collect()
}

fn now_ms() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_millis() as f64)
}

/// How long ago `then` was, for people: `just now`, `5 min ago`, `3 h ago`, `2 days ago`, or the date.
pub fn ago(then: f64, now: f64) -> String {
    if then.is_nan() {
        return "-".into();
    }
    let secs = ((now - then) / 1000.0).max(0.0);
    match secs {
        s if s < 60.0 => "just now".into(),
        s if s < 3600.0 => format!("{} min ago", (s / 60.0) as u64),
        s if s < 86400.0 => format!("{} h ago", (s / 3600.0) as u64),
        s if s < 2.0 * 86400.0 => "1 day ago".into(),
        s if s < 7.0 * 86400.0 => format!("{} days ago", (s / 86400.0) as u64),
        _ => crate::session::js::date::to_iso_string(then).map(|d| d[..10].to_owned()).unwrap_or_else(|| "-".into()),
    }
}

/// `path` with the home directory written `~`.
pub fn tilde(path: &str) -> String {
    let home = paths::home_dir();
    match path.strip_prefix(&home) {
        Some(rest) if !home.is_empty() && (rest.is_empty() || rest.starts_with('/')) => format!("~{rest}"),
        _ => path.to_owned(),
    }
}

/// How wide a title `ls` wants on a terminal before it shortens ids to prefixes.
const TITLE_COLUMNS_WANTED: usize = 30;

/// The shortest id prefix `ls` shows: a UUIDv7's first 13 characters are its creation time to the millisecond.
const ID_PREFIX_CHARS: usize = 13;

/// Cuts each row's id (its last cell) to [`ID_PREFIX_CHARS`], or longer where another row's id, or one of
/// `other_ids`, starts the same, so each still names its session.
fn shorten_ids(rows: &mut [[String; 5]], other_ids: &[String]) {
    let ids: Vec<String> = rows.iter().map(|r| r[4].clone()).chain(other_ids.iter().cloned()).collect();
    for row in rows.iter_mut() {
        let id = &row[4];
        let shared = ids
            .iter()
            .filter(|other| *other != id)
            .map(|other| other.chars().zip(id.chars()).take_while(|(a, b)| a == b).count())
            .max()
            .unwrap_or(0);
        let keep = (shared + 1).max(ID_PREFIX_CHARS);
        if id.chars().count() > keep {
            row[4] = id.chars().take(keep).collect();
        }
    }
}

fn table(listing: &[Arc<ListedSession>], other_ids: &[String], style: &Style, now: f64) -> String {
    let rows: Vec<[String; 5]> = listing
        .iter()
        .map(|s| {
            let i = &s.info;
            let title = match &i.name {
                Some(n) if !n.to_string_lossy().trim().is_empty() => n.to_string_lossy(),
                _ => i.first_message.to_string_lossy(),
            };
            [
                terminal_safe(&one_line(&title, 60, char_width)).into_owned(),
                i.message_count.to_string(),
                ago(i.modified, now),
                // A cwd can be any length (one of a megabyte was seen): every row is padded to the widest, so
                // the column keeps the end of each, as a title keeps its start.
                cut_start_to_width(&terminal_safe(&tilde(&i.cwd.to_string_lossy())), CWD_COLUMNS),
                crate::session::js::to_js_string(&i.id).to_string_lossy(),
            ]
        })
        .collect();
    let header = ["SESSION", "MSGS", "MODIFIED", "CWD", "ID"];
    let widths_of = |rows: &[[String; 5]]| {
        let mut widths = header.map(str::len);
        for r in rows {
            for (w, cell) in widths.iter_mut().zip(r) {
                *w = (*w).max(visible_len(cell));
            }
        }
        widths
    };
    let mut rows = rows;
    let mut widths = widths_of(&rows);
    // On a terminal too narrow for whole ids beside a readable title (80 columns left a title of 9), ids are
    // shown as the prefixes that name them (what `tree`, `show` and `stats` take).
    if let Some(width) = style.width {
        let others: usize = widths[1..].iter().sum::<usize>() + 2 * 4;
        if width.saturating_sub(others) < TITLE_COLUMNS_WANTED && widths[4] > ID_PREFIX_CHARS {
            shorten_ids(&mut rows, other_ids);
            widths = widths_of(&rows);
        }
    }
    // On a terminal, the title gives way first, then the cwd (from its start), so that the id (what names the
    // session) stays whole.
    if let Some(width) = style.width {
        let others: usize = widths[1..].iter().sum::<usize>() + 2 * 4;
        widths[0] = widths[0].min(width.saturating_sub(others).max(10));
        let over = (widths.iter().sum::<usize>() + 2 * 4).saturating_sub(width);
        widths[3] = widths[3].saturating_sub(over).max(8);
    }
    let line = |cells: [&str; 5]| -> String {
        let mut l = String::new();
        for (k, (cell, w)) in cells.iter().zip(widths).enumerate() {
            let cell = match k {
                0 => super::output::cut_to_width(cell, w),
                3 => cut_start_to_width(cell, w),
                _ => (*cell).to_owned(),
            };
            let pad = w.saturating_sub(visible_len(&cell));
            if k == 1 {
                l.push_str(&" ".repeat(pad));
                l.push_str(&cell);
            } else {
                l.push_str(&cell);
                if k < 4 {
                    l.push_str(&" ".repeat(pad));
                }
            }
            if k < 4 {
                l.push_str("  ");
            }
        }
        l
    };
    let mut text = style.fit(&style.paint("1", &line(header))) + "\n";
    for r in &rows {
        text.push_str(&style.fit(&line([&r[0], &r[1], &r[2], &r[3], &r[4]])));
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_said_as_people_say_them() {
        let now = 1_700_000_000_000.0;
        assert_eq!(ago(now - 5_000.0, now), "just now");
        assert_eq!(ago(now - 5.0 * 60_000.0, now), "5 min ago");
        assert_eq!(ago(now - 3.0 * 3_600_000.0, now), "3 h ago");
        assert_eq!(ago(now - 1.5 * 86_400_000.0, now), "1 day ago");
        assert_eq!(ago(now - 2.0 * 86_400_000.0, now), "2 days ago");
        assert_eq!(ago(now - 30.0 * 86_400_000.0, now), "2023-10-15");
        assert_eq!(ago(f64::NAN, now), "-");
    }
}
