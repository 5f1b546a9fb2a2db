//! One description of an entry, for every place that shows one in a line: what it is (a message's role or the
//! entry's type), a preview of its text, whether it has text a person reads, and the phrase a tree prints.
//!
//! Skeletons (made by the open from the line it has just scanned), the command line (`tree`, `show`), the web
//! view's rows and transcript notes all describe entries through this module, so an entry reads the same
//! everywhere and a rule (a tool call shown as `→ name`, a bash execution as `$ command`) is decided once. It
//! reads a scanned line — member ranges the validating scanner found — and never a parsed value: an entry held
//! as a value is written back to JSON and scanned ([`Scanned::of_value`]), which costs a pass over its bytes
//! but keeps one walker, so the two can never drift (a preview looks at the first [`TEXT_SCAN_BYTES`] of each
//! text as it is stored, which only the line knows). Only that much of each text is decoded, so a 5 MB tool
//! output costs no more than a short one.
//!
//! How long a preview may be is the caller's: characters for skeletons and the web view ([`chars`]), terminal
//! columns for the command line (it passes its own width of a character).

use super::entry::EntryType;
use super::js::to_js_string;
use super::json::scan::{array_elements, find_member, object_members, scan_document, Block, Document, Kind};
use super::json::string::decode_string_literal;
use super::json::Json;

/// Characters of text a skeleton's preview (and the web view's row) shows, then `…`.
pub const PREVIEW_CHARS: usize = 160;

/// Bytes of each text looked at for a preview: enough for any one-line preview, and a 5 MB tool output costs no
/// more than a short one.
pub const TEXT_SCAN_BYTES: usize = 4096;

/// How much room a character takes in a preview: [`chars`] counts characters, the command line terminal columns.
pub type Width = fn(char) -> usize;

/// Every character counts one: the measure of skeletons' and the web view's previews.
pub fn chars(_: char) -> usize {
    1
}

/// An entry described, as rows show it, its preview cut at a given length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// The message role (`user`, `assistant`, `toolResult`, …; `message` when it has none) or the entry type
    /// (`compaction`, `label`, …; `entry` when it has none).
    pub what: String,
    /// The entry's text on one line, cut.
    pub preview: String,
    /// The whole description as a tree prints it after the id: `user: hello`, `label e1 → start`,
    /// `model → anthropic/claude`, … (see [`Description::phrase`]).
    pub phrase: String,
}

/// An entry's line and the members the validating scanner found in it, owned: for an entry read or held
/// elsewhere than in the open's pass.
pub struct Scanned {
    bytes: Vec<u8>,
    doc: Document,
}

impl Scanned {
    /// The entry's stored bytes, scanned; None when they are not one JSON value.
    pub fn of_bytes(bytes: Vec<u8>) -> Option<Scanned> {
        let doc = scan_document(&bytes).ok()?;
        Some(Scanned { bytes, doc })
    }

    /// An entry held as a value, written as JSON (number literals and key order as parsed) and scanned.
    pub fn of_value(entry: &Json) -> Scanned {
        let mut bytes = Vec::new();
        entry.write_preserving(&mut bytes);
        Scanned::written(bytes)
    }

    /// A message (as `buildSessionContext` gives them) as the entry that holds it, scanned.
    pub fn of_message(message: &Json) -> Scanned {
        let mut bytes = br#"{"type":"message","message":"#.to_vec();
        message.write_preserving(&mut bytes);
        bytes.push(b'}');
        Scanned::written(bytes)
    }

    fn written(bytes: Vec<u8>) -> Scanned {
        let doc = scan_document(&bytes).expect("a value written as JSON scans as JSON");
        Scanned { bytes, doc }
    }

    /// The entry's JSON, as scanned.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes[self.doc.value.clone()]
    }

    /// The entry described; its type read from its `type` member.
    pub fn describe(&self) -> Description<'_> {
        let line = Line { bytes: &self.bytes, doc: &self.doc };
        let kind = match line.member("type") {
            Some(t) if t.first() == Some(&b'"') => EntryType::from_name(decode_string_literal(t).as_bytes()),
            _ => EntryType::Other,
        };
        Description { kind, line }
    }
}

/// One entry, described from its scanned line. Each part is computed when asked for, so the open's skeletons
/// pay only for the preview and `hasText` they write.
pub struct Description<'a> {
    kind: EntryType,
    line: Line<'a>,
}

impl<'a> Description<'a> {
    /// The entry of type `kind` whose line `bytes` was scanned as `doc`.
    pub fn of_line(kind: EntryType, bytes: &'a [u8], doc: &'a Document) -> Description<'a> {
        Description { kind, line: Line { bytes, doc } }
    }

    /// A top-level member's stored value (the last one, as `JSON.parse` keeps).
    pub fn member(&self, name: &str) -> Option<&'a [u8]> {
        self.line.member(name)
    }

    /// A member of a message entry's `message` object, as stored (None unless `message` is an object).
    pub fn message_member(&self, name: &str) -> Option<&'a [u8]> {
        if self.kind == EntryType::Message && self.line.has_message() {
            self.line.in_message(name)
        } else {
            None
        }
    }

    /// A message's role, when it is a string.
    pub fn role(&self) -> Option<String> {
        self.message_member("role").and_then(string_text)
    }

    /// A message's stop reason, when it is a string.
    pub fn stop_reason(&self) -> Option<String> {
        self.message_member("stopReason").and_then(string_text)
    }

    /// What the entry is: a message's role (`message` when it has none), else its type as `String(type)` gives
    /// it (`entry` when it has none).
    pub fn what(&self) -> String {
        if self.kind == EntryType::Message {
            return self.role().unwrap_or_else(|| "message".to_owned());
        }
        let kind = self.type_text();
        if kind.is_empty() {
            "entry".to_owned()
        } else {
            kind
        }
    }

    fn type_text(&self) -> String {
        self.member("type").map(value_text).unwrap_or_default()
    }

    /// Whether a message holds text that is not all white space (a string, or a `text` block): pi's `/tree`
    /// hides assistant messages without it.
    pub fn has_text(&self) -> bool {
        self.kind == EntryType::Message
            && self.line.has_message()
            && self.line.message_content().is_some_and(|c| c.has_text())
    }

    /// The entry's text before it is put on one line (each string's first [`TEXT_SCAN_BYTES`] or so): a
    /// message's content (text blocks as themselves, tool calls as `→ name`, images as `[image]`), a bash
    /// execution's `$ command`, a summary; for the other types the values that say what they changed.
    pub fn text(&self) -> String {
        self.text_within(TEXT_SCAN_BYTES)
    }

    /// [`Description::text`] with up to about `max_bytes` of each text (and of a message's content) rather than
    /// a preview's few KiB: for a view that shows a message's text whole, up to a bound.
    pub fn text_within(&self, max_bytes: usize) -> String {
        let line = &self.line;
        let s = |v: Option<&[u8]>| v.map(value_text).unwrap_or_default();
        let raw = |name: &str| line.member(name);
        match self.kind {
            EntryType::Message => {
                if !line.has_message() {
                    return String::new();
                }
                let msg = |name: &str| line.in_message(name);
                let role = msg("role").and_then(string_text).unwrap_or_default();
                match (role.as_str(), msg("content")) {
                    ("bashExecution", _) => format!("$ {}", s(msg("command"))),
                    (_, Some(content)) if !matches!(content, b"null") => {
                        line.message_content().map(|c| c.text(max_bytes)).unwrap_or_default()
                    }
                    _ => s(msg("summary")),
                }
            }
            EntryType::ThinkingLevelChange => format!("thinking level → {}", s(raw("thinkingLevel"))),
            EntryType::ModelChange => format!("model → {}/{}", s(raw("provider")), s(raw("modelId"))),
            EntryType::Compaction | EntryType::BranchSummary => raw("summary")
                .filter(|v| v.first() == Some(&b'"'))
                .map(|v| string_prefix(v, max_bytes))
                .unwrap_or_default(),
            EntryType::CustomMessage => raw("content").map(|c| Content::found(c).text(max_bytes)).unwrap_or_default(),
            EntryType::Custom => s(raw("customType")),
            EntryType::Label => format!("{} → {}", s(raw("targetId")), s(raw("label"))),
            EntryType::SessionInfo => s(raw("name")),
            EntryType::Usage => s(raw("kind")),
            EntryType::ContextEdit => s(raw("targetId")),
            // Named one by one, so an entry type pi adds is a decision here.
            EntryType::Session | EntryType::Other => String::new(),
        }
    }

    /// The text on one line, cut after `max` of `width` (with `…`): a skeleton's preview is
    /// `preview(PREVIEW_CHARS, chars)`.
    pub fn preview(&self, max: usize, width: Width) -> String {
        one_line(&self.text(), max, width)
    }

    /// The whole description around a `preview` of this entry, as a tree prints it after the id: `ROLE: TEXT`,
    /// `compaction: TEXT`, `branch summary: TEXT`, `custom message (TYPE): TEXT`, `custom (TYPE)`,
    /// `label TARGET → LABEL`, `name: NAME`, `usage (KIND)`, `context edit of TARGET`, the preview alone for
    /// model and thinking-level changes, the type alone for the rest. Only the preview, a message's role and a
    /// custom message's `customType` (on one line, at most [`PREVIEW_CHARS`] characters) go into it, which a
    /// skeleton carries too.
    pub fn phrase(&self, preview: &str) -> String {
        match self.kind {
            EntryType::Message => format!("{}: {preview}", self.what()),
            EntryType::ThinkingLevelChange | EntryType::ModelChange => preview.to_owned(),
            EntryType::Compaction => format!("compaction: {preview}"),
            EntryType::BranchSummary => format!("branch summary: {preview}"),
            EntryType::CustomMessage => {
                // An extension's name for its messages, put on one line too: it is no more than a name.
                let custom_type =
                    one_line(&self.member("customType").map(value_text).unwrap_or_default(), PREVIEW_CHARS, chars);
                format!("custom message ({custom_type}): {preview}")
            }
            EntryType::Custom => format!("custom ({preview})"),
            EntryType::Label => format!("label {preview}"),
            EntryType::SessionInfo => format!("name: {preview}"),
            EntryType::Usage => format!("usage ({preview})"),
            EntryType::ContextEdit => format!("context edit of {preview}"),
            EntryType::Session | EntryType::Other => self.type_text(),
        }
    }

    /// What, preview and phrase at once, the preview cut after `max` of `width`.
    pub fn summary(&self, max: usize, width: Width) -> Summary {
        let preview = self.preview(max, width);
        Summary { what: self.what(), phrase: self.phrase(&preview), preview }
    }
}

/// A scanned line: its bytes and where its members are.
struct Line<'a> {
    bytes: &'a [u8],
    doc: &'a Document,
}

impl<'a> Line<'a> {
    fn member(&self, name: &str) -> Option<&'a [u8]> {
        find_member(self.bytes, &self.doc.members, name).map(|r| &self.bytes[r])
    }

    /// True when the entry's `message` is an object.
    fn has_message(&self) -> bool {
        self.member("message").is_some_and(|v| Kind::of(v) == Kind::Object)
    }

    /// A member of the entry's `message` object.
    fn in_message(&self, name: &str) -> Option<&'a [u8]> {
        find_member(self.bytes, &self.doc.message_members, name).map(|r| &self.bytes[r])
    }

    /// The entry's message's `content`, with the elements the scan found in it.
    fn message_content(&self) -> Option<Content<'a>> {
        self.in_message("content").map(|value| Content::scanned(self.bytes, value, &self.doc.content_blocks))
    }
}

/// Message content: its stored value, and, when it is an array, its elements with each object's members
/// (ranges into `bytes`).
struct Content<'a> {
    bytes: &'a [u8],
    value: &'a [u8],
    blocks: std::borrow::Cow<'a, [Block]>,
}

impl<'a> Content<'a> {
    /// The content `value` (within `bytes`), whose elements the scan already found (`blocks`).
    fn scanned(bytes: &'a [u8], value: &'a [u8], blocks: &'a [Block]) -> Content<'a> {
        Content { bytes, value, blocks: std::borrow::Cow::Borrowed(blocks) }
    }

    /// The content `value`, its elements found now (a custom message's: rare, and small).
    fn found(value: &'a [u8]) -> Content<'a> {
        let blocks = match Kind::of(value) {
            Kind::Array => array_elements(value, 0..value.len())
                .into_iter()
                .map(|r| {
                    let members = if Kind::of(&value[r.clone()]) == Kind::Object {
                        object_members(value, r.clone())
                    } else {
                        Vec::new()
                    };
                    Block { value: r, members }
                })
                .collect(),
            _ => Vec::new(),
        };
        Content { bytes: value, value, blocks: std::borrow::Cow::Owned(blocks) }
    }

    /// Each object element's members, as a lookup of a member's stored value.
    fn objects(&self) -> impl Iterator<Item = impl Fn(&str) -> Option<&'a [u8]> + '_> + '_ {
        let bytes = self.bytes;
        self.blocks
            .iter()
            .filter(move |b| Kind::of(&bytes[b.value.clone()]) == Kind::Object)
            .map(move |b| move |name: &str| find_member(bytes, &b.members, name).map(|r| &bytes[r]))
    }

    /// The text of the content: a string, or blocks of which text shows as itself, a tool call as `→ name` and
    /// an image as `[image]`, joined by spaces; at most about `max_bytes` of it.
    fn text(&self, max_bytes: usize) -> String {
        match Kind::of(self.value) {
            Kind::String => string_prefix(self.value, max_bytes),
            Kind::Array => {
                let mut parts: Vec<String> = Vec::new();
                let mut size = 0;
                for member in self.objects() {
                    let piece = match member("type").filter(|t| t.first() == Some(&b'"')).map(decode_string_literal) {
                        Some(t) if t.eq_str("text") => {
                            member("text").filter(|v| v.first() == Some(&b'"')).map(|v| string_prefix(v, max_bytes))
                        }
                        Some(t) if t.eq_str("toolCall") => {
                            Some(format!("→ {}", member("name").map(value_text).unwrap_or_default()))
                        }
                        Some(t) if t.eq_str("image") => Some("[image]".to_owned()),
                        _ => None,
                    };
                    if let Some(p) = piece {
                        size += p.len();
                        parts.push(p);
                        if size > max_bytes {
                            break;
                        }
                    }
                }
                parts.join(" ")
            }
            _ => String::new(),
        }
    }

    /// Whether the content holds text that is not all white space: a string, or a `text` block.
    fn has_text(&self) -> bool {
        let blank = |lit: &[u8]| string_prefix(lit, TEXT_SCAN_BYTES).trim().is_empty();
        match Kind::of(self.value) {
            Kind::String => !blank(self.value),
            Kind::Array => self.objects().any(|member| {
                let is_text =
                    member("type").is_some_and(|t| t.first() == Some(&b'"') && decode_string_literal(t).eq_str("text"));
                is_text && member("text").is_some_and(|t| t.first() == Some(&b'"') && !blank(t))
            }),
            _ => false,
        }
    }
}

/// A stored value's text when it is a string (its first [`TEXT_SCAN_BYTES`] or so), else None.
fn string_text(v: &[u8]) -> Option<String> {
    (v.first() == Some(&b'"')).then(|| string_prefix(v, TEXT_SCAN_BYTES))
}

/// A small stored value as JavaScript's `String(v)` gives it (strings: their first [`TEXT_SCAN_BYTES`]).
fn value_text(v: &[u8]) -> String {
    if let Some(text) = string_text(v) {
        return text;
    }
    if v.len() > TEXT_SCAN_BYTES {
        // An object or array this large is no name or label a person reads.
        return "…".to_owned();
    }
    Json::parse(v).map(|j| to_js_string(&j).to_string_lossy()).unwrap_or_default()
}

/// The first `max_bytes` (about) of a valid string literal, decoded; the cut never splits an escape or a UTF-8
/// sequence.
pub fn string_prefix(literal: &[u8], max_bytes: usize) -> String {
    let body = &literal[1..literal.len() - 1];
    if body.len() <= max_bytes {
        return decode_string_literal(literal).to_string_lossy();
    }
    let mut cut = 0;
    while cut < max_bytes {
        cut += match body[cut] {
            b'\\' if body[cut + 1] == b'u' => 6,
            b'\\' => 2,
            _ => 1,
        };
    }
    while cut < body.len() && (body[cut] & 0xC0) == 0x80 {
        cut -= 1;
    }
    let mut lit = Vec::with_capacity(cut + 2);
    lit.push(b'"');
    lit.extend_from_slice(&body[..cut]);
    lit.push(b'"');
    decode_string_literal(&lit).to_string_lossy()
}

/// `text` on one line: runs of white space made one space, ends trimmed, cut where the next character would
/// take it past `max` of `width` (with `…`).
pub fn one_line(text: &str, max: usize, width: Width) -> String {
    let mut out = String::with_capacity(text.len().min(max * 4 + 4));
    let mut used = 0;
    for word in text.split_whitespace() {
        if !out.is_empty() {
            if used + 1 > max {
                out.push('…');
                return out;
            }
            out.push(' ');
            used += 1;
        }
        for c in word.chars() {
            let w = width(c);
            if used + w > max {
                out.push('…');
                return out;
            }
            out.push(c);
            used += w;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn described(line: &str) -> Summary {
        Scanned::of_bytes(line.as_bytes().to_vec()).expect("JSON").describe().summary(PREVIEW_CHARS, chars)
    }

    fn phrase(line: &str) -> String {
        described(line).phrase
    }

    #[test]
    fn a_bash_execution_is_its_command_and_a_summary_message_its_summary() {
        let bash = r#"{"type":"message","message":{"role":"bashExecution","command":"ls  -la\n","output":"x"}}"#;
        assert_eq!(phrase(bash), "bashExecution: $ ls -la");
        let summary = r#"{"type":"message","message":{"role":"branchSummary","summary":"went\nelsewhere"}}"#;
        assert_eq!(phrase(summary), "branchSummary: went elsewhere");
        // Content wins over a summary, unless it is null.
        let both = r#"{"type":"message","message":{"role":"user","content":"hi","summary":"s"}}"#;
        assert_eq!(phrase(both), "user: hi");
        let null = r#"{"type":"message","message":{"role":"user","content":null,"summary":"s"}}"#;
        assert_eq!(phrase(null), "user: s");
    }

    #[test]
    fn every_type_has_its_phrase_and_a_message_without_a_role_is_a_message() {
        for (line, what, expected) in [
            (r#"{"type":"message","message":{"content":"x"}}"#, "message", "message: x"),
            (r#"{"type":"message","message":"not an object"}"#, "message", "message: "),
            (
                r#"{"type":"thinking_level_change","thinkingLevel":"high"}"#,
                "thinking_level_change",
                "thinking level → high",
            ),
            (r#"{"type":"model_change","provider":"p","modelId":7}"#, "model_change", "model → p/7"),
            (r#"{"type":"compaction","summary":"short"}"#, "compaction", "compaction: short"),
            (r#"{"type":"branch_summary","summary":{"not":"text"}}"#, "branch_summary", "branch summary: "),
            (
                r#"{"type":"custom_message","customType":"a\nb","content":[{"type":"image"},"x",{"type":"text","text":"t"}]}"#,
                "custom_message",
                "custom message (a b): [image] t",
            ),
            (r#"{"type":"custom","customType":["x",1]}"#, "custom", "custom (x,1)"),
            (r#"{"type":"label","targetId":"e1","label":null}"#, "label", "label e1 → null"),
            (r#"{"type":"session_info","name":"  my   name "}"#, "session_info", "name: my name"),
            (r#"{"type":"usage","kind":"turn"}"#, "usage", "usage (turn)"),
            (r#"{"type":"context_edit","targetId":"e2"}"#, "context_edit", "context edit of e2"),
            (r#"{"type":"session","id":"s"}"#, "session", "session"),
            (r#"{"type":"someday","text":"x"}"#, "someday", "someday"),
            (r#"{"type":3}"#, "3", "3"),
            (r#"{"id":"no type"}"#, "entry", ""),
        ] {
            let d = described(line);
            assert_eq!((d.what.as_str(), d.phrase.as_str()), (what, expected), "{line}");
        }
    }

    #[test]
    fn a_preview_is_cut_by_characters_or_by_the_columns_the_caller_counts() {
        let line = r#"{"type":"message","message":{"role":"user","content":"日本語 text"}}"#;
        let entry = Scanned::of_bytes(line.as_bytes().to_vec()).unwrap();
        let d = entry.describe();
        assert_eq!(d.preview(4, chars), "日本語 …");
        let columns: Width = |c| if c.is_ascii() { 1 } else { 2 };
        assert_eq!(d.preview(4, columns), "日本…");
        assert_eq!(d.preview(5, columns), "日本…", "a wide character that does not fit is left out whole");
        assert_eq!(d.preview(100, columns), "日本語 text");
        assert_eq!(d.preview(0, chars), "…");
    }

    #[test]
    fn has_text_needs_a_text_that_is_not_white_space() {
        let has = |content: &str| {
            let line = format!(r#"{{"type":"message","message":{{"role":"assistant","content":{content}}}}}"#);
            Scanned::of_bytes(line.into_bytes()).unwrap().describe().has_text()
        };
        assert!(has(r#""hi""#));
        assert!(!has(r#"" \n\t""#));
        assert!(!has(r#"[{"type":"toolCall","name":"bash"},{"type":"image"}]"#));
        assert!(has(r#"[{"type":"toolCall","name":"bash"},{"type":"text","text":" ok "}]"#));
        assert!(!has(r#"[{"type":"text","text":7}]"#));
        let not_a_message = r#"{"type":"custom_message","content":"text"}"#;
        assert!(!Scanned::of_bytes(not_a_message.as_bytes().to_vec()).unwrap().describe().has_text());
    }

    #[test]
    fn an_entry_held_as_a_value_is_described_as_its_line() {
        let line = "{ \"type\" : \"message\", \"message\": {\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"caf\\u00e9 \\ud83d\"}]}, \"n\": 1.50 }";
        let value = Json::parse(line.as_bytes()).unwrap();
        assert_eq!(Scanned::of_value(&value).describe().summary(10, chars), described(line));
        assert_eq!(described(line).preview, "café \u{fffd}");
    }

    #[test]
    fn a_context_message_text_is_read_further_than_a_preview() {
        let long = "word ".repeat(2000);
        let message = Json::parse(format!(r#"{{"role":"user","content":"{long}"}}"#).as_bytes()).unwrap();
        let entry = Scanned::of_message(&message);
        assert!(entry.describe().text().len() <= TEXT_SCAN_BYTES + 8);
        assert_eq!(entry.describe().text_within(20_000), long);
    }
}
