//! `pi-sessiond show SESSION ENTRY`: one entry, whole — its place in the tree, then its text (messages,
//! thinking, tool calls with their arguments, tool results, summaries) for a person, or with `--json` the entry
//! exactly as stored. ENTRY is an id or a unique prefix of one.

use std::io::Write;

use crate::session::context::Bodies;
use crate::session::describe::Scanned;
use crate::session::js::date::to_iso_string;
use crate::session::js::to_js_string;
use crate::session::json::Json;
use crate::session::{Env, ErrorKind, SessionManager};

use super::output::{emit, terminal_safe, terminal_safe_output, Failure, FailureKind, Style};
use super::pretty::Pretty;

/// Opens `path`, finds the entry `id` names and prints it.
pub fn show(path: &str, id: &str, json: bool, style: &Style, out: &mut dyn Write) -> Result<u8, Failure> {
    let m = SessionManager::open(path, None, None, Env::system())?;
    let matching: Vec<usize> =
        m.entries().into_iter().filter(|&i| m.records()[i].id.display().starts_with(id)).collect();
    let exact: Vec<usize> = matching.iter().copied().filter(|&i| m.records()[i].id.display() == id).collect();
    let i = match (exact.as_slice(), matching.as_slice()) {
        ([i], _) | ([], [i]) => *i,
        ([], []) => return Err(Failure::new(ErrorKind::EntryNotFound, format!("Entry {id} not found in {path}"))),
        _ => {
            let ids: Vec<String> = matching.iter().take(5).map(|&i| m.records()[i].id.display()).collect();
            let more = if matching.len() > 5 { format!(", and {} more", matching.len() - 5) } else { String::new() };
            return Err(Failure::new(
                FailureKind::AmbiguousEntry,
                format!("{id}: {} entries match: {}{more}", matching.len(), ids.join(", ")),
            ));
        }
    };
    let entry = m.bodies().json(i)?;
    if json {
        let mut bytes = Vec::new();
        entry.write_preserving(&mut bytes);
        bytes.push(b'\n');
        if style.tty {
            let mut p = Pretty::new(&mut *out);
            return match p.write_all(&bytes).and_then(|()| p.flush()) {
                Ok(()) => Ok(0),
                Err(e) => super::output::write_failed(e),
            };
        }
        return emit(out, &String::from_utf8_lossy(&bytes));
    }
    let r = &m.records()[i];
    let mut t = String::new();
    let field =
        |t: &mut String, k: &str, v: String| t.push_str(&format!("{} {v}\n", style.paint("1", &format!("{k:<8}"))));
    field(&mut t, "id", r.id.display());
    field(&mut t, "type", Scanned::of_value(&entry).describe().what());
    field(&mut t, "parent", if r.parent.display().is_empty() { "(root)".into() } else { r.parent.display() });
    field(&mut t, "time", to_iso_string(r.time_ms).unwrap_or_else(|| "-".into()));
    if let Some(label) = m.label(&r.id) {
        field(&mut t, "label", to_js_string(label).to_string_lossy());
    }
    let on_branch = m.branch_path(None).contains(&i);
    let place = match (m.leaf_entry() == Some(i), on_branch) {
        (true, _) => "the leaf",
        (false, true) => "on the active branch",
        (false, false) => "off the active branch",
    };
    field(&mut t, "place", format!("{place}, {}", super::output::count(m.children(&r.id).len(), "child", "children")));
    if let Some(msg) = entry.get("message") {
        let s = |k: &str| msg.get(k).map(|v| to_js_string(v).to_string_lossy());
        if let (Some(p), Some(model)) = (s("provider"), s("model")) {
            field(&mut t, "model", format!("{p}/{model}"));
        }
    }
    t.push('\n');
    body_text(&entry, style, &mut t);
    emit(out, &terminal_safe_output(&t))
}

/// The readable text of an entry.
fn body_text(entry: &Json, style: &Style, t: &mut String) {
    let text_of =
        |v: Option<&Json>| v.and_then(Json::as_js_str).map(|s| terminal_safe(&s.to_string_lossy()).into_owned());
    let blocks = |content: Option<&Json>, t: &mut String| match content {
        Some(Json::String(s)) => t.push_str(&format!("{}\n", terminal_safe(&s.to_string_lossy()))),
        Some(Json::Array(items)) => {
            for b in items {
                match text_of(b.get("type")).as_deref() {
                    Some("text") => t.push_str(&format!("{}\n", text_of(b.get("text")).unwrap_or_default())),
                    Some("thinking") => {
                        let thinking = text_of(b.get("thinking")).unwrap_or_default();
                        t.push_str(&format!("{}\n", style.paint("2;3", &format!("(thinking) {thinking}"))));
                    }
                    Some("toolCall") => {
                        let name = text_of(b.get("name")).unwrap_or_default();
                        let args = b.get("arguments").map(Json::to_canonical_string).unwrap_or_default();
                        t.push_str(&format!("{} {args}\n", style.paint("36", &format!("→ {name}"))));
                    }
                    Some("image") => {
                        let mime = text_of(b.get("mimeType")).unwrap_or_default();
                        let size = text_of(b.get("data")).map_or(0, |d| d.len() * 3 / 4);
                        t.push_str(&format!("[image {mime}, about {size} bytes]\n"));
                    }
                    _ => t.push_str(&format!("{}\n", b.to_canonical_string())),
                }
            }
        }
        _ => {}
    };
    if let Some(msg) = entry.get("message") {
        blocks(msg.get("content"), t);
        if let Some(cmd) = text_of(msg.get("command")) {
            t.push_str(&format!("$ {cmd}\n{}\n", text_of(msg.get("output")).unwrap_or_default()));
        }
        if let Some(err) = text_of(msg.get("errorMessage")) {
            t.push_str(&format!("{}\n", style.paint("31", &format!("error: {err}"))));
        }
        return;
    }
    if let Some(summary) = text_of(entry.get("summary")) {
        t.push_str(&format!("{summary}\n"));
        return;
    }
    if entry.get("content").is_some() {
        blocks(entry.get("content"), t);
        return;
    }
    let mut bytes = Vec::new();
    let mut p = Pretty::new(&mut bytes);
    let _ = p.write_all(entry.to_canonical_string().as_bytes()).and_then(|()| p.flush());
    drop(p);
    t.push_str(&String::from_utf8_lossy(&bytes));
    t.push('\n');
}
