//! `SessionInfo`: what a session listing shows for one file, computed as pi's `buildSessionInfo` does.
//!
//! pi streams the file through `readline` (which also splits on a lone `\r`), takes the first parsed line as the
//! header, the latest `session_info` name in file order, counts every `message` line, and takes text from user and
//! assistant messages. Where pi hits a `TypeError` (a message entry without a message, `content: null`, a name
//! that is not a string) it silently drops the whole file from the listing; we list the file and skip only the
//! broken field (see `docs/compatibility.md`).

use std::fs::File;
use std::io::{BufRead, BufReader};

use super::entry::{EntryType, Role};
use super::js::{convert, date};
use super::json::scan::{find_member, scan_document, Kind};
use super::json::value::decode_string_literal;
use super::json::{JsString, Json};
use super::line::{is_blank, new_date_ms};

/// One session in a listing (pi's `SessionInfo`).
#[derive(Clone, Debug, PartialEq)]
pub struct SessionInfo {
    /// The file's path as the listing built it.
    pub path: String,
    /// The header's `id` (not type-checked, as in pi).
    pub id: Json,
    /// The header's `cwd` when it is a string, else `""`.
    pub cwd: JsString,
    /// The session name from the latest `session_info` line.
    pub name: Option<JsString>,
    /// The header's `parentSession`, as written.
    pub parent_session_path: Option<Json>,
    /// `new Date(header.timestamp)` in ms (NaN: an Invalid Date).
    pub created: f64,
    /// Last activity in ms: newest user/assistant message time, else the header time, else the file's mtime.
    pub modified: f64,
    /// Every `message` line after the header (all roles, all branches, duplicates included).
    pub message_count: u64,
    /// The first user message's text, or `"(no messages)"`.
    pub first_message: JsString,
    /// The text of every user and assistant message, space-separated.
    pub all_messages_text: JsString,
}

/// Splits a stream into lines as Node's `readline` does with `crlfDelay: Infinity`: on `\n`, `\r\n` or a lone
/// `\r`, with the final unterminated fragment as a line too.
pub struct ReadlineLines<R> {
    reader: R,
    pending_cr: bool,
    done: bool,
}

impl<R: BufRead> ReadlineLines<R> {
    /// Lines of `reader`.
    pub fn new(reader: R) -> Self {
        ReadlineLines { reader, pending_cr: false, done: false }
    }

    /// The next line (without its terminator) into `buf`; false at the end.
    pub fn next_line(&mut self, buf: &mut Vec<u8>) -> std::io::Result<bool> {
        buf.clear();
        if self.done {
            return Ok(false);
        }
        loop {
            let available = self.reader.fill_buf()?;
            if available.is_empty() {
                self.done = true;
                return Ok(!buf.is_empty());
            }
            let mut start = 0;
            if self.pending_cr {
                self.pending_cr = false;
                if available[0] == b'\n' {
                    start = 1;
                }
            }
            match memchr::memchr2(b'\n', b'\r', &available[start..]) {
                Some(i) => {
                    let end = start + i;
                    buf.extend_from_slice(&available[start..end]);
                    let is_cr = available[end] == b'\r';
                    self.reader.consume(end + 1);
                    if is_cr {
                        self.pending_cr = true;
                    }
                    return Ok(true);
                }
                None => {
                    let n = available.len();
                    buf.extend_from_slice(&available[start..]);
                    self.reader.consume(n);
                }
            }
        }
    }
}

/// pi's `buildSessionInfo` for the file at `path`; None when the file is not a session (its first parsed line is
/// not a header) or cannot be read. `mtime_ms` is the file's modification time (for sessions with no activity).
pub fn session_info(path: &str, mtime_ms: f64) -> Option<SessionInfo> {
    let file = File::open(path).ok()?;
    let mut lines = ReadlineLines::new(BufReader::with_capacity(1 << 20, file));
    let mut buf = Vec::new();
    let mut header: Option<Json> = None;
    let mut info = SessionInfo {
        path: path.to_owned(),
        id: Json::Null,
        cwd: JsString::new(),
        name: None,
        parent_session_path: None,
        created: f64::NAN,
        modified: f64::NAN,
        message_count: 0,
        first_message: JsString::new(),
        all_messages_text: JsString::new(),
    };
    let mut texts: Vec<JsString> = Vec::new();
    let mut last_activity: Option<f64> = None;
    while lines.next_line(&mut buf).ok()? {
        if is_blank(&buf) {
            continue;
        }
        let Ok(doc) = scan_document(&buf) else { continue };
        let value = &buf[doc.value.clone()];
        if crate::session::line::is_falsy(value) {
            continue;
        }
        let is_object = Kind::of(value) == Kind::Object;
        let member = |name: &str| find_member(&buf, &doc.members, name).map(|r| &buf[r]);
        let kind = match member("type") {
            Some(v) if v.first() == Some(&b'"') => EntryType::from_name(decode_string_literal(v).as_bytes()),
            _ => EntryType::Other,
        };
        if header.is_none() {
            if kind != EntryType::Session {
                return None;
            }
            header = Some(Json::parse(value).ok()?);
            continue;
        }
        if !is_object {
            continue;
        }
        if kind == EntryType::SessionInfo {
            info.name = match member("name").map(|v| Json::parse(v).ok()) {
                Some(Some(Json::String(s))) => Some(s.trim()).filter(|t| !t.is_empty()),
                _ => None,
            };
        }
        if kind != EntryType::Message {
            continue;
        }
        info.message_count += 1;
        // Only user and assistant messages matter beyond the count; skip parsing anything else (tool results are
        // where the megabytes are).
        let role = find_member(&buf, &doc.message_members, "role")
            .map(|r| &buf[r])
            .filter(|v| v.first() == Some(&b'"'))
            .map(|v| Role::from_name(decode_string_literal(v).as_bytes()));
        if !matches!(role, Some(Role::User | Role::Assistant)) {
            continue;
        }
        let Some(message) = member("message").and_then(|v| Json::parse(v).ok()) else { continue };
        let Some(m) = message.as_object() else { continue };
        if !m.contains_key("content") {
            continue;
        }
        let activity = match m.get("timestamp") {
            Some(Json::Number(n)) => Some(crate::session::json::value::number_value(n)),
            _ => {
                let t = new_date_ms(member("timestamp").and_then(|v| Json::parse(v).ok()).as_ref());
                (!t.is_nan()).then_some(t)
            }
        };
        if let Some(a) = activity {
            last_activity = Some(js_max(last_activity.unwrap_or(0.0), a));
        }
        let text = extract_text(m.get("content"));
        if text.is_empty() {
            continue;
        }
        if info.first_message.is_empty() && role == Some(Role::User) {
            info.first_message = text.clone();
        }
        texts.push(text);
    }
    let header = header?;
    info.id = header.get("id").cloned().unwrap_or(Json::Null);
    info.cwd = header.get("cwd").and_then(Json::as_js_str).cloned().unwrap_or_default();
    info.parent_session_path = header.get("parentSession").cloned();
    info.created = new_date_ms(header.get("timestamp"));
    let header_time = match header.get("timestamp") {
        Some(Json::String(s)) => date::parse_date(&s.to_string_lossy()),
        _ => f64::NAN,
    };
    info.modified = match last_activity {
        Some(t) if t > 0.0 => date::time_clip(t),
        _ if !header_time.is_nan() => header_time,
        _ => date::time_clip(mtime_ms),
    };
    if info.first_message.is_empty() {
        info.first_message = JsString::from("(no messages)");
    }
    let mut all = JsString::new();
    for (i, t) in texts.iter().enumerate() {
        if i > 0 {
            all.push_str(" ");
        }
        all.push_js(t);
    }
    info.all_messages_text = all;
    Some(info)
}

/// `Math.max(a, b)` (NaN wins, as in JavaScript).
fn js_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// The text pi's listing takes from a message's content: a string as is; for an array, the `text` of its
/// `type: "text"` blocks joined with a space. Content pi would crash on (null, a number, null blocks) gives no
/// text instead.
fn extract_text(content: Option<&Json>) -> JsString {
    match content {
        Some(Json::String(s)) => s.clone(),
        Some(Json::Array(blocks)) => {
            let texts = blocks
                .iter()
                .filter(|b| b.get("type").and_then(Json::as_js_str).is_some_and(|t| t.eq_str("text")))
                .map(|b| b.get("text"));
            convert::join(texts, " ")
        }
        _ => JsString::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8]) -> Vec<String> {
        let mut r = ReadlineLines::new(std::io::BufReader::with_capacity(2, input));
        let mut buf = Vec::new();
        let mut out = Vec::new();
        while r.next_line(&mut buf).unwrap() {
            out.push(String::from_utf8(buf.clone()).unwrap());
        }
        out
    }

    #[test]
    fn readline_splits_on_lf_crlf_and_lone_cr() {
        assert_eq!(lines(b"a\nb\r\nc\rd"), vec!["a", "b", "c", "d"]);
        assert_eq!(lines(b"a\r\n\r\nb\n"), vec!["a", "", "b"]);
        assert_eq!(lines(b""), Vec::<String>::new());
    }
}
