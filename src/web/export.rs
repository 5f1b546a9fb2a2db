//! `pi-sessiond export SESSION --html -o OUT`: the web view of one session as a single file that opens
//! anywhere, offline. The data is what the live page would fetch — the same seam over the same in-process
//! sidecar — computed once and embedded: the skeleton rows, every entry's body, the context and the usage.

use std::io::Write;

use crate::catalog::redact::Redactor;
use crate::cli::output::{describe_io, Failure, EXIT_OK};
use crate::session::js::date::parse_date;
use crate::session::json::{Json, Object};

use super::assets::{export_page, script_safe_json};
use super::bridge::Bridge;
use super::transcript;
use super::view::{UsageTally, View};

/// Writes the HTML view of the session file `path` to `output` (stdout when None), with the secrets `redactor`
/// finds replaced in every text of it.
pub fn export_html(
    path: &str,
    agent_dir: &str,
    output: Option<&str>,
    redactor: Option<&Redactor>,
) -> Result<u8, Failure> {
    if let Some(file) = output {
        refuse_a_session_file(file)?;
    }
    let html = render(path, agent_dir, redactor)?;
    match output {
        Some(file) => {
            // Written beside the target and renamed, so a failed export never leaves half a page.
            let tmp = format!("{file}.tmp-{}", std::process::id());
            let written = std::fs::write(&tmp, html.as_bytes()).and_then(|()| std::fs::rename(&tmp, file));
            if let Err(e) = written {
                let _ = std::fs::remove_file(&tmp);
                return Err(Failure::io(format!("{file}: {}", describe_io(&e))));
            }
            Ok(EXIT_OK)
        }
        None => {
            let mut out = std::io::stdout().lock();
            match out.write_all(html.as_bytes()).and_then(|()| out.flush()) {
                Ok(()) => Ok(EXIT_OK),
                Err(e) => crate::cli::output::write_failed(e),
            }
        }
    }
}

/// Refuses an output that is a session file (its first line a session header) or named as one (`.jsonl`, there
/// or not yet): an export replaces whatever `-o` names with a page, a slip of the tab key (`-o` given the session
/// itself) must not turn a session into HTML, and a page named `.jsonl` in a sessions directory would be listed by
/// pi as a session it cannot read. Checked before anything is rendered, so nothing is written.
fn refuse_a_session_file(file: &str) -> Result<(), Failure> {
    let meta = std::fs::metadata(file).ok();
    if meta.as_ref().is_some_and(|meta| meta.is_dir()) {
        return Err(Failure::invalid(format!(
            "-o {file}: is a directory, so nothing was written (name the file to write)"
        )));
    }
    let session = meta.is_some_and(|meta| meta.is_file()) && crate::session::store::read_header_bounded(file).is_some();
    if session || file.to_ascii_lowercase().ends_with(".jsonl") {
        let what = if session { "a pi session file" } else { "named .jsonl, as pi's sessions are" };
        return Err(Failure::invalid(format!(
            "-o {file}: is {what}; export writes HTML and would replace it, so nothing was written (choose another \
             file)"
        )));
    }
    Ok(())
}

/// The session as the live page's list shows it: pi's `SessionInfo` of the file (its `modified` is the last
/// message's time, not the last entry's), or None when the file cannot be listed.
fn listed_as(path: &str) -> Option<Json> {
    let mtime_ms = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(f64::NAN, |d| d.as_millis() as f64);
    let info = crate::catalog::info::session_info(path, mtime_ms, false, &crate::catalog::Cancel::new())?;
    Json::parse(&crate::catalog::info::session_info_bytes(&info)).ok()
}

/// What the live list says of a session, made from its rows, for a file that cannot be listed: its messages
/// (not its entries), its latest entry's time, its first user message.
fn listed_from_rows(path: &str, state: &Json, rows: &Json) -> Json {
    let mut session = Object::new();
    session.insert("path", Json::str(path));
    session.insert("id", state.get("sessionId").cloned().unwrap_or(Json::Null));
    session.insert("name", state.get("sessionName").cloned().unwrap_or(Json::Null));
    session.insert("cwd", state.get("cwd").cloned().unwrap_or(Json::Null));
    let all_rows: &[Json] = match rows {
        Json::Array(r) => r,
        _ => &[],
    };
    let field = |r: &Json, k: &str| r.get(k).and_then(Json::as_js_str).map(|s| s.to_string_lossy());
    let messages = all_rows.iter().filter(|r| field(r, "type").as_deref() == Some("message")).count();
    let latest = all_rows
        .iter()
        .filter_map(|r| field(r, "timestamp"))
        .map(|t| (parse_date(&t), t))
        .filter(|(ms, _)| !ms.is_nan())
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, t)| t);
    let first_user = all_rows.iter().find(|r| field(r, "role").as_deref() == Some("user"));
    session.insert("messageCount", Json::number(messages as f64));
    session.insert("modified", latest.map_or(Json::Null, |t| Json::str(&t)));
    session.insert("firstMessage", Json::str(&first_user.and_then(|r| field(r, "preview")).unwrap_or_default()));
    Json::Object(session)
}

/// The page for `path`; with a `redactor`, every string of its data is redacted (entries before they are
/// rendered, the context, names).
///
/// The session is read in two passes through the sidecar — its tree (the skeleton rows) and its entries a page at
/// a time, each counted for the usage and rendered into its transcript piece as it comes, then dropped — plus the
/// context; the page's data is written as JSON text as it is made, never held as a value.
pub fn render(path: &str, agent_dir: &str, redactor: Option<&Redactor>) -> Result<String, Failure> {
    let bridge = Bridge::start(agent_dir, None, false)
        .map_err(|e| Failure::io(format!("cannot start the sidecar: {}", describe_io(&e))))?;
    let view = View::new(bridge);
    let snapshot = view.open(path, false)?;
    let state = snapshot.get("state").cloned().unwrap_or(Json::Null);
    let rows = snapshot.get("rows").cloned().unwrap_or(Json::Array(Vec::new()));
    drop(snapshot);
    let handle = state.get("handle").and_then(Json::as_js_str).map(|h| h.to_string_lossy()).unwrap_or_default();
    let mut tally = UsageTally::default();
    let mut pieces = Vec::with_capacity(1 << 20);
    pieces.push(b'{');
    view.each_entry(&handle, |mut entry| {
        tally.add(&entry);
        let Some(id) = entry.get("id").and_then(Json::as_js_str).cloned() else { return };
        if let Some(r) = redactor {
            r.redact_json(&mut entry);
        }
        if pieces.len() > 1 {
            pieces.push(b',');
        }
        Json::String(id.clone()).write_preserving(&mut pieces);
        pieces.push(b':');
        transcript::render(&entry).to_json(&id.to_string_lossy()).write_preserving(&mut pieces);
    })?;
    pieces.push(b'}');
    let context = view.context(&handle)?;
    let session = listed_as(path).unwrap_or_else(|| listed_from_rows(path, &state, &rows));
    let mut data = Object::new();
    data.insert("session", session);
    data.insert("state", state);
    data.insert("rows", rows);
    data.insert("context", context);
    data.insert("usage", tally.to_json());
    let mut data = Json::Object(data);
    if let Some(r) = redactor {
        r.redact_json(&mut data);
    }
    let mut bytes = Vec::with_capacity(pieces.len() + (4 << 20));
    data.write_preserving(&mut bytes);
    // The transcript goes in as the object's last member, as it was written.
    bytes.pop();
    bytes.extend_from_slice(b",\"transcript\":");
    bytes.extend_from_slice(&pieces);
    drop(pieces);
    bytes.push(b'}');
    Ok(export_page(&script_safe_json(&bytes)))
}
