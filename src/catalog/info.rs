//! `SessionInfo`: what a session listing shows for one file, computed as pi's `buildSessionInfo` does.
//!
//! pi streams the file through `readline` (which also splits on a lone `\r`), takes the first parsed line as the
//! header, the latest `session_info` name in file order, counts every `message` line, and takes text from user and
//! assistant messages. Where pi hits a `TypeError` (a message entry without a message, `content: null`, a name
//! that is not a string) it silently drops the whole file from the listing; we list the file and skip only the
//! broken field (see `docs/compatibility.md`).

use std::io::{BufRead, BufReader};
use std::sync::Arc;

use super::cancel::Cancel;
use crate::session::entry::{EntryType, Role};
use crate::session::js::date::to_iso_string;
use crate::session::js::{convert, date};
use crate::session::json::scan::{find_member, scan_document, Kind};
use crate::session::json::{JsString, Json};
use crate::session::line::{is_blank, is_falsy, new_date_ms};
use crate::session::render::{JsonOut, ObjectWriter};
use crate::session::store;

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
    /// The text of every user and assistant message, space-separated (None when the caller did not ask for it:
    /// it is most of a listing's size, and only pi's own search reads it).
    pub all_messages_text: Option<JsString>,
}

/// A `SessionInfo` as a listing returns it, with its JSON written once: a warm listing of thousands of sessions
/// is a copy of these bytes (most of them `allMessagesText`), not a fresh serialisation. Shared (`Arc`) between
/// the catalog index's memo and the listings that return it.
#[derive(Debug, PartialEq)]
pub struct ListedSession {
    /// Every field but `all_messages_text`, which is always None here: only its JSON is kept.
    pub info: SessionInfo,
    /// The object as `JSON.stringify` writes it, without `allMessagesText` and without the closing brace.
    json_head: Box<[u8]>,
    /// `,"allMessagesText":"…"`, when the info was made with the text.
    json_text: Option<Box<[u8]>>,
}

impl ListedSession {
    /// Renders `info` (with its text, if it has it) and keeps the rendering.
    pub fn new(mut info: SessionInfo) -> ListedSession {
        let text = info.all_messages_text.take();
        let mut head = session_info_bytes(&info);
        head.pop(); // the closing brace: the text, if any, goes before it
        let json_text = text.map(|t| {
            let mut out = JsonOut::memory();
            out.raw(b",\"allMessagesText\":").and_then(|()| out.string(&t)).expect("memory output cannot fail");
            out.into_bytes().into_boxed_slice()
        });
        ListedSession { info, json_head: head.into_boxed_slice(), json_text }
    }

    /// Renders `info` with one more member after pi's fields (the team catalog's `machine`), so every listing
    /// renderer (plain or as a delta) writes it.
    pub fn with_member(info: SessionInfo, name: &str, value: &Json) -> ListedSession {
        let mut listed = ListedSession::new(info);
        let mut head = listed.json_head.into_vec();
        head.push(b',');
        Json::str(name).write_canonical(&mut head);
        head.push(b':');
        value.write_canonical(&mut head);
        listed.json_head = head.into_boxed_slice();
        listed
    }

    /// Whether `allMessagesText` is kept.
    pub fn has_text(&self) -> bool {
        self.json_text.is_some()
    }

    /// The size of the kept `allMessagesText` JSON, in bytes.
    pub fn text_len(&self) -> usize {
        self.json_text.as_ref().map_or(0, |t| t.len())
    }

    /// The length of the object's JSON, with or without `allMessagesText`.
    pub fn json_len(&self, with_text: bool) -> usize {
        self.json_head.len() + if with_text { self.text_len() } else { 0 } + 1
    }

    /// Whether both entries render the same JSON (with `allMessagesText` when `with_text`).
    pub fn same_json(&self, other: &ListedSession, with_text: bool) -> bool {
        self.json_head == other.json_head && (!with_text || self.json_text == other.json_text)
    }

    /// The same entry without `allMessagesText`.
    pub fn without_text(&self) -> ListedSession {
        ListedSession { info: self.info.clone(), json_head: self.json_head.clone(), json_text: None }
    }

    /// Appends the object's JSON to `out`, with `allMessagesText` when `with_text` and it is kept.
    pub fn write_json(&self, with_text: bool, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.json_head);
        if let Some(t) = self.json_text.as_ref().filter(|_| with_text) {
            out.extend_from_slice(t);
        }
        out.push(b'}');
    }
}

/// Splits a stream into lines as Node's `readline` does with `crlfDelay: Infinity`: on `\n`, `\r\n` or a lone
/// `\r`, with the final unterminated fragment as a line too. A line longer than [`store::MAX_LINE_BYTES`] is
/// given as an empty line (which every reader skips, as pi skips a line it cannot parse): its bytes are read
/// past, never held, so a file of zeros or a huge sparse file costs time but not memory.
pub struct ReadlineLines<R> {
    reader: R,
    pending_cr: bool,
    done: bool,
    max_line: usize,
}

impl<R: BufRead> ReadlineLines<R> {
    /// Lines of `reader`.
    pub fn new(reader: R) -> Self {
        Self::with_max_line(reader, store::MAX_LINE_BYTES)
    }

    /// Lines of `reader`, lines over `max_line` bytes given as empty ones.
    pub fn with_max_line(reader: R, max_line: usize) -> Self {
        ReadlineLines { reader, pending_cr: false, done: false, max_line }
    }

    /// The next line (without its terminator) into `buf`; false at the end.
    pub fn next_line(&mut self, buf: &mut Vec<u8>) -> std::io::Result<bool> {
        buf.clear();
        if self.done {
            return Ok(false);
        }
        // Bytes of the current line seen (held in `buf` only while within the bound).
        let mut seen = 0usize;
        loop {
            let available = self.reader.fill_buf()?;
            if available.is_empty() {
                self.done = true;
                return Ok(seen > 0);
            }
            let mut start = 0;
            if self.pending_cr {
                self.pending_cr = false;
                if available[0] == b'\n' {
                    start = 1;
                }
            }
            let found = memchr::memchr2(b'\n', b'\r', &available[start..]);
            let end = found.map_or(available.len(), |i| start + i);
            seen = seen.saturating_add(end - start);
            if seen <= self.max_line {
                buf.extend_from_slice(&available[start..end]);
            } else {
                buf.clear();
            }
            match found {
                Some(_) => {
                    let is_cr = available[end] == b'\r';
                    self.reader.consume(end + 1);
                    if is_cr {
                        self.pending_cr = true;
                    }
                    return Ok(true);
                }
                None => {
                    let n = available.len();
                    self.reader.consume(n);
                }
            }
        }
    }
}

/// What `buildSessionInfo` has gathered after some lines: it is fed line by line, so the catalog index can keep
/// it and feed only the lines appended since.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InfoState {
    /// The header, once the first parsed line was one.
    pub header: Option<Json>,
    /// The first parsed line was not a header: the file is not a session.
    pub rejected: bool,
    /// The latest `session_info` name (None: unset or cleared).
    pub name: Option<JsString>,
    /// `message` lines after the header.
    pub message_count: u64,
    /// The first user text (empty until there is one).
    pub first_message: JsString,
    /// User and assistant texts joined with single spaces.
    pub all_text: JsString,
    /// True once `all_text` holds at least one text (an empty text is never added).
    pub has_text: bool,
    /// The newest user/assistant activity time, if any.
    pub last_activity: Option<f64>,
}

/// A searchable piece of a session: one entry's text.
#[derive(Clone, Debug, PartialEq)]
pub struct Doc {
    /// The entry's id (JSON text of the id value; entries without one use `null`).
    pub entry_id: String,
    /// `user`, `assistant`, `toolResult`, `custom`, `bashExecution`, `name`, `label` or `summary`.
    pub role: &'static str,
    /// The text.
    pub text: String,
    /// The entry's time in ms (NaN when unknown).
    pub timestamp: f64,
    /// Where the entry lies in its file: greater is later. It orders hits that tie on score and time, the same
    /// whether the file was read or the index asked, so it compares only entries of one file.
    pub order: u64,
}

/// Longest text kept for one searchable entry (tool output can be megabytes; the start is what people search).
const MAX_DOC_BYTES: usize = 256 * 1024;

impl InfoState {
    /// Feeds one line (as `readline` splits them). `docs`, when given, receives the searchable text of the entry.
    pub fn feed(&mut self, line: &[u8], docs: Option<&mut Vec<Doc>>) {
        if self.rejected || is_blank(line) {
            return;
        }
        let Ok(doc) = scan_document(line) else { return };
        let value = &line[doc.value.clone()];
        if is_falsy(value) {
            return;
        }
        let is_object = Kind::of(value) == Kind::Object;
        let member = |name: &str| find_member(line, &doc.members, name).map(|r| &line[r]);
        let kind = EntryType::of_value(member("type"));
        if self.header.is_none() {
            match Json::parse(value) {
                Ok(h) if kind == EntryType::Session => self.header = Some(h),
                _ => self.rejected = true,
            }
            return;
        }
        if !is_object {
            return;
        }
        let entry_id = || member("id").map_or_else(|| "null".to_owned(), |v| String::from_utf8_lossy(v).into_owned());
        let entry_time = || new_date_ms(member("timestamp").and_then(|v| Json::parse(v).ok()).as_ref());
        if kind == EntryType::SessionInfo {
            self.name = match member("name").and_then(|v| Json::parse(v).ok()).as_ref() {
                Some(Json::String(s)) => Some(s.trim()).filter(|t| !t.is_empty()),
                _ => None,
            };
            if let (Some(d), Some(n)) = (docs, &self.name) {
                let order = d.len() as u64;
                d.push(Doc {
                    entry_id: entry_id(),
                    role: "name",
                    text: n.to_string_lossy(),
                    timestamp: entry_time(),
                    order,
                });
            }
            return;
        }
        if kind != EntryType::Message {
            if let Some(d) = docs {
                let text = match kind {
                    EntryType::Label => {
                        member("label").and_then(|v| Json::parse(v).ok()).map(|l| ("label", extract_text(Some(&l))))
                    }
                    EntryType::BranchSummary | EntryType::Compaction => {
                        member("summary").and_then(|v| Json::parse(v).ok()).map(|l| ("summary", extract_text(Some(&l))))
                    }
                    EntryType::CustomMessage => {
                        Json::parse(value).ok().map(|e| ("custom", extract_text(e.get("content"))))
                    }
                    // Named one by one, so an entry type pi adds is a decision here, not a silent None.
                    EntryType::Session
                    | EntryType::Message
                    | EntryType::ThinkingLevelChange
                    | EntryType::ModelChange
                    | EntryType::Usage
                    | EntryType::Custom
                    | EntryType::ContextEdit
                    | EntryType::SessionInfo
                    | EntryType::Other => None,
                };
                if let Some((role, text)) = text.filter(|(_, t)| !t.is_empty()) {
                    let order = d.len() as u64;
                    d.push(Doc { entry_id: entry_id(), role, text: capped(text), timestamp: entry_time(), order });
                }
            }
            return;
        }
        self.message_count += 1;
        let role = Role::of_value(find_member(line, &doc.message_members, "role").map(|r| &line[r]));
        let listed = matches!(role, Role::User | Role::Assistant);
        if !listed && docs.is_none() {
            // Only user and assistant messages matter to the listing; skip parsing the rest (tool results are
            // where the megabytes are).
            return;
        }
        let Some(message) = member("message").and_then(|v| Json::parse(v).ok()) else { return };
        let Some(m) = message.as_object() else { return };
        if let Some(d) = docs {
            let (role_name, text) = match role {
                Role::User => ("user", extract_text(m.get("content"))),
                Role::Assistant => ("assistant", extract_text(m.get("content"))),
                Role::ToolResult => ("toolResult", extract_text(m.get("content"))),
                Role::Custom | Role::HookMessage => ("custom", extract_text(m.get("content"))),
                Role::BashExecution => {
                    let mut t = extract_text(m.get("command"));
                    t.push_str("\n");
                    t.push_js(&extract_text(m.get("output")));
                    ("bashExecution", t)
                }
                _ => ("other", JsString::new()),
            };
            if !text.trim().is_empty() {
                let ts = match m.get("timestamp") {
                    Some(Json::Number(n)) => crate::session::json::value::number_value(n),
                    _ => entry_time(),
                };
                let order = d.len() as u64;
                d.push(Doc { entry_id: entry_id(), role: role_name, text: capped(text), timestamp: ts, order });
            }
        }
        if !listed || !m.contains_key("content") {
            return;
        }
        let activity = match m.get("timestamp") {
            Some(Json::Number(n)) => Some(crate::session::json::value::number_value(n)),
            _ => {
                let t = entry_time();
                (!t.is_nan()).then_some(t)
            }
        };
        if let Some(a) = activity {
            self.last_activity = Some(js_max(self.last_activity.unwrap_or(0.0), a));
        }
        let text = extract_text(m.get("content"));
        if text.is_empty() {
            return;
        }
        if self.first_message.is_empty() && role == Role::User {
            self.first_message = text.clone();
        }
        if self.has_text {
            self.all_text.push_str(" ");
        }
        self.all_text.push_js(&text);
        self.has_text = true;
    }

    /// The `SessionInfo` pi reports once every line was fed (with `allMessagesText` if `with_text`); None when
    /// the file is not a session.
    pub fn finish(&self, path: &str, mtime_ms: f64, with_text: bool) -> Option<SessionInfo> {
        let header = self.header.as_ref().filter(|_| !self.rejected)?;
        let header_time = match header.get("timestamp") {
            Some(Json::String(s)) => date::parse_date(&s.to_string_lossy()),
            _ => f64::NAN,
        };
        Some(SessionInfo {
            path: path.to_owned(),
            id: header.get("id").cloned().unwrap_or(Json::Null),
            cwd: header.get("cwd").and_then(Json::as_js_str).cloned().unwrap_or_default(),
            name: self.name.clone(),
            parent_session_path: header.get("parentSession").cloned(),
            created: new_date_ms(header.get("timestamp")),
            modified: match self.last_activity {
                Some(t) if t > 0.0 => date::time_clip(t),
                _ if !header_time.is_nan() => header_time,
                _ => date::time_clip(mtime_ms),
            },
            message_count: self.message_count,
            first_message: if self.first_message.is_empty() {
                JsString::from("(no messages)")
            } else {
                self.first_message.clone()
            },
            all_messages_text: with_text.then(|| self.all_text.clone()),
        })
    }
}

fn capped(text: JsString) -> String {
    let s = text.to_string_lossy();
    if s.len() <= MAX_DOC_BYTES {
        return s;
    }
    let mut end = MAX_DOC_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// pi's `buildSessionInfo` for the file at `path`; None when the file is not a session (its first parsed line is
/// not a header), is not a regular file, cannot be read, or `cancel` was set. `mtime_ms` is the file's
/// modification time (for sessions with no activity).
pub fn session_info(path: &str, mtime_ms: f64, with_text: bool, cancel: &Cancel) -> Option<SessionInfo> {
    let file = store::open_regular(path).inspect_err(|e| cancel.note_failure(e)).ok()?;
    let mut lines = ReadlineLines::new(cancel.reader(BufReader::with_capacity(1 << 20, file)));
    let mut buf = Vec::new();
    let mut state = InfoState::default();
    while lines.next_line(&mut buf).inspect_err(|e| cancel.note_io_failure("read", path, e)).ok()? {
        state.feed(&buf, None);
        if state.rejected {
            return None;
        }
    }
    state.finish(path, mtime_ms, with_text)
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

/// Writes a `SessionInfo` as `JSON.stringify` writes it (undefined members omitted, dates as ISO strings).
/// Written straight to bytes: a listing is thousands of these.
pub fn write_session_info(s: &SessionInfo, out: &mut JsonOut<'_>) -> crate::session::Result<()> {
    let date = |out: &mut JsonOut<'_>, ms: f64| match to_iso_string(ms) {
        Some(iso) => out.str(&iso),
        None => out.raw(b"null"),
    };
    let mut o = ObjectWriter::open(out)?;
    o.key(out, "path")?;
    out.str(&s.path)?;
    o.key(out, "id")?;
    out.value(&s.id)?;
    o.key(out, "cwd")?;
    out.string(&s.cwd)?;
    if let Some(n) = &s.name {
        o.key(out, "name")?;
        out.string(n)?;
    }
    if let Some(p) = &s.parent_session_path {
        o.key(out, "parentSessionPath")?;
        out.value(p)?;
    }
    o.key(out, "created")?;
    date(out, s.created)?;
    o.key(out, "modified")?;
    date(out, s.modified)?;
    o.key(out, "messageCount")?;
    out.raw(s.message_count.to_string().as_bytes())?;
    o.key(out, "firstMessage")?;
    out.string(&s.first_message)?;
    if let Some(text) = &s.all_messages_text {
        o.key(out, "allMessagesText")?;
        out.string(text)?;
    }
    o.close(out)
}

/// A `SessionInfo`'s JSON (what [`write_session_info`] writes).
pub fn session_info_bytes(s: &SessionInfo) -> Vec<u8> {
    let mut out = JsonOut::memory();
    write_session_info(s, &mut out).expect("memory output cannot fail");
    out.into_bytes()
}

/// A listing's JSON, `[SessionInfo, …]`, from the renderings its entries keep (`allMessagesText` included when
/// `with_text` and kept).
pub fn session_infos(listing: &[Arc<ListedSession>], with_text: bool) -> Vec<u8> {
    let size: usize = listing.iter().map(|s| s.json_len(with_text) + 1).sum();
    let mut out = Vec::with_capacity(size + 2);
    out.push(b'[');
    for (i, s) in listing.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        s.write_json(with_text, &mut out);
    }
    out.push(b']');
    out
}

/// A listing entry as a JSON value (what [`session_infos`] writes for it).
pub fn session_info_json(s: &ListedSession, with_text: bool) -> Json {
    let mut out = Vec::new();
    s.write_json(with_text, &mut out);
    Json::parse(&out).expect("rendered JSON parses")
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

    #[test]
    fn a_line_over_the_bound_is_read_past_as_an_empty_line_and_the_next_lines_are_kept() {
        let split = |input: &[u8]| {
            let mut r = ReadlineLines::with_max_line(std::io::BufReader::with_capacity(3, input), 5);
            let mut buf = Vec::new();
            let mut out = Vec::new();
            while r.next_line(&mut buf).unwrap() {
                out.push(String::from_utf8(buf.clone()).unwrap());
            }
            out
        };
        assert_eq!(split(b"12345\n123456\r\nabc\n0123456789"), vec!["12345", "", "abc", ""]);
        assert_eq!(split(b"0123456789\rx"), vec!["", "x"]);
    }
}
