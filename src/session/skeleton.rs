//! An entry's skeleton: the few hundred bytes a tree view needs in place of a body that may be megabytes.
//!
//! At `skeleton` detail each entry is `{id, parentId, type, timestamp, role?, stopReason?, hasText?, customType?,
//! targetId?, label?, name?, preview?, bytes}`: the stored values copied byte for byte (so ids and labels are
//! exactly what reads give), a bounded preview, and the entry's size. It is made here, in the engine, from a line
//! the validating scanner has just scanned ([`of_line`]), so the open's one pass over a session's bytes also
//! makes every skeleton: a skeleton snapshot then reads nothing more (issue 21). Only the first few KiB of each
//! text are decoded for the preview, so a 5 MB tool output costs no more than a short one.
//!
//! Skeletons are written as JSON text here, without the renderer's `JsonOut` (which sits above the manager): the
//! pieces are few, and text that is not UTF-8 is replaced as Node's decoder replaces it, as `JsonOut` does.

use super::entry::EntryType;
use super::js::to_js_string;
use super::json::scan::{array_elements, find_member, object_members, Block, Document, Kind};
use super::json::string::{decode_string_literal, write_json_string_bytes};
use super::json::Json;

/// Characters of text a skeleton's preview shows (then `…`).
pub const PREVIEW_CHARS: usize = 160;

/// Bytes of each text looked at for a preview: enough for any one-line preview, and a 5 MB tool output costs no
/// more than a short one.
pub const TEXT_SCAN_BYTES: usize = 4096;

/// The skeleton of one line, scanned as `doc` (ranges into `bytes`), whose `type` is `kind`.
pub fn of_line(kind: EntryType, bytes: &[u8], doc: &Document) -> Vec<u8> {
    let value = &bytes[doc.value.clone()];
    let mut o = Writer { out: Vec::with_capacity(160), first: true };
    o.out.push(b'{');
    if Kind::of(value) == Kind::Object {
        let l = Line { bytes, doc };
        let raw = |name: &str| l.member(name);
        for name in ["id", "parentId", "type", "timestamp"] {
            o.copy(name, raw(name));
        }
        let is_message = l.has_message();
        let in_message = |name: &str| l.in_message(name);
        match kind {
            EntryType::Message => {
                if is_message {
                    o.copy("role", in_message("role"));
                    o.copy("stopReason", in_message("stopReason"));
                }
                let text = is_message && l.message_content().is_some_and(|c| c.has_text());
                o.key("hasText");
                o.out.extend_from_slice(if text { b"true" } else { b"false" });
            }
            EntryType::Custom | EntryType::CustomMessage => o.copy("customType", raw("customType")),
            EntryType::Label => {
                o.copy("targetId", raw("targetId"));
                o.copy("label", raw("label"));
            }
            EntryType::ContextEdit => o.copy("targetId", raw("targetId")),
            EntryType::SessionInfo => o.copy("name", raw("name")),
            // Named one by one, so an entry type pi adds is a decision here.
            EntryType::Session
            | EntryType::ThinkingLevelChange
            | EntryType::ModelChange
            | EntryType::Usage
            | EntryType::Compaction
            | EntryType::BranchSummary
            | EntryType::Other => {}
        }
        let preview = one_line(&preview_text(kind, &l), PREVIEW_CHARS);
        if !preview.is_empty() {
            o.key("preview");
            write_json_string_bytes(preview.as_bytes(), &mut o.out);
        }
    }
    o.key("bytes");
    o.out.extend_from_slice(value.len().to_string().as_bytes());
    o.out.push(b'}');
    o.out
}

/// An object being written: its bytes and whether a member was written yet.
struct Writer {
    out: Vec<u8>,
    first: bool,
}

impl Writer {
    fn key(&mut self, name: &str) {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        write_json_string_bytes(name.as_bytes(), &mut self.out);
        self.out.push(b':');
    }

    /// Writes `name: value` when the entry has the member (its stored bytes, with bytes that are not UTF-8
    /// replaced as Node's decoder replaces them).
    fn copy(&mut self, name: &str, value: Option<&[u8]>) {
        if let Some(v) = value {
            self.key(name);
            match std::str::from_utf8(v) {
                Ok(_) => self.out.extend_from_slice(v),
                Err(_) => self.out.extend_from_slice(String::from_utf8_lossy(v).as_bytes()),
            }
        }
    }
}

/// A scanned line: its bytes and where its members are.
struct Line<'a> {
    bytes: &'a [u8],
    doc: &'a Document,
}

impl<'a> Line<'a> {
    /// A top-level member's stored value (the last one, as `JSON.parse` keeps).
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

/// The text a tree view shows for an entry (before it is made one line), as `pi-sessiond tree` describes it.
fn preview_text(kind: EntryType, line: &Line<'_>) -> String {
    let s = |v: Option<&[u8]>| v.map(value_text).unwrap_or_default();
    let raw = |name: &str| line.member(name);
    match kind {
        EntryType::Message => {
            if !line.has_message() {
                return String::new();
            }
            let msg = |name: &str| line.in_message(name);
            let role = msg("role").filter(|v| v.first() == Some(&b'"')).map(decode_string_literal);
            let role = role.map(|r| r.to_string_lossy()).unwrap_or_default();
            match (role.as_str(), msg("content")) {
                ("bashExecution", _) => format!("$ {}", s(msg("command"))),
                (_, Some(content)) if !matches!(content, b"null") => {
                    line.message_content().map(|c| c.text()).unwrap_or_default()
                }
                _ => s(msg("summary")),
            }
        }
        EntryType::ThinkingLevelChange => format!("thinking level → {}", s(raw("thinkingLevel"))),
        EntryType::ModelChange => format!("model → {}/{}", s(raw("provider")), s(raw("modelId"))),
        EntryType::Compaction | EntryType::BranchSummary => match raw("summary") {
            Some(v) if v.first() == Some(&b'"') => string_prefix(v),
            _ => String::new(),
        },
        EntryType::CustomMessage => raw("content").map(|c| Content::found(c).text()).unwrap_or_default(),
        EntryType::Custom => s(raw("customType")),
        EntryType::Label => format!("{} → {}", s(raw("targetId")), s(raw("label"))),
        EntryType::SessionInfo => s(raw("name")),
        EntryType::Usage => s(raw("kind")),
        EntryType::ContextEdit => s(raw("targetId")),
        EntryType::Session | EntryType::Other => String::new(),
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
    /// an image as `[image]`, joined by spaces; at most about [`TEXT_SCAN_BYTES`] of it.
    fn text(&self) -> String {
        match Kind::of(self.value) {
            Kind::String => string_prefix(self.value),
            Kind::Array => {
                let mut parts: Vec<String> = Vec::new();
                let mut size = 0;
                for member in self.objects() {
                    let piece = match member("type").filter(|t| t.first() == Some(&b'"')).map(decode_string_literal) {
                        Some(t) if t.eq_str("text") => match member("text") {
                            Some(text) if text.first() == Some(&b'"') => Some(string_prefix(text)),
                            _ => None,
                        },
                        Some(t) if t.eq_str("toolCall") => {
                            Some(format!("→ {}", member("name").map(value_text).unwrap_or_default()))
                        }
                        Some(t) if t.eq_str("image") => Some("[image]".to_owned()),
                        _ => None,
                    };
                    if let Some(p) = piece {
                        size += p.len();
                        parts.push(p);
                        if size > TEXT_SCAN_BYTES {
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
        let blank = |lit: &[u8]| string_prefix(lit).trim().is_empty();
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

/// A small stored value as JavaScript's `String(v)` gives it (strings: their first [`TEXT_SCAN_BYTES`]).
fn value_text(v: &[u8]) -> String {
    if v.first() == Some(&b'"') {
        return string_prefix(v);
    }
    if v.len() > TEXT_SCAN_BYTES {
        // An object or array this large is no name or label a person reads.
        return "…".to_owned();
    }
    Json::parse(v).map(|j| to_js_string(&j).to_string_lossy()).unwrap_or_default()
}

/// The first [`TEXT_SCAN_BYTES`] (about) of a valid string literal, decoded; the cut never splits an escape or
/// a UTF-8 sequence.
pub fn string_prefix(literal: &[u8]) -> String {
    let body = &literal[1..literal.len() - 1];
    if body.len() <= TEXT_SCAN_BYTES {
        return decode_string_literal(literal).to_string_lossy();
    }
    let mut cut = 0;
    while cut < TEXT_SCAN_BYTES {
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

/// `text` on one line: runs of white space made one space, ends trimmed, cut after `max_chars` characters
/// (with `…`).
pub fn one_line(text: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_chars * 4 + 4));
    let mut chars = 0;
    for word in text.split_whitespace() {
        if chars > 0 {
            if chars == max_chars {
                out.push('…');
                return out;
            }
            out.push(' ');
            chars += 1;
        }
        for c in word.chars() {
            if chars == max_chars {
                out.push('…');
                return out;
            }
            out.push(c);
            chars += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::json::scan::scan_document;

    fn skeleton_json(line: &str) -> Json {
        let parsed = Json::parse(line.as_bytes()).ok();
        let kind = match parsed.as_ref().and_then(|v| v.get("type")) {
            Some(Json::String(t)) => EntryType::from_name(t.as_bytes()),
            _ => EntryType::Other,
        };
        let doc = scan_document(line.as_bytes()).unwrap();
        Json::parse(&of_line(kind, line.as_bytes(), &doc)).unwrap()
    }

    fn text(v: &Json, key: &str) -> Option<String> {
        v.get(key).map(|x| x.to_canonical_string())
    }

    #[test]
    fn a_message_skeleton_copies_links_as_stored_and_previews_its_text_on_one_line() {
        let line = r#"{"type":"message","id":"a1","parentId":null,"timestamp":"2025-01-01T00:00:00.000Z","message":{"role":"user","content":"hello\n  world","timestamp":1}}"#;
        let s = skeleton_json(line);
        assert_eq!(
            s.to_canonical_string(),
            format!(
                r#"{{"id":"a1","parentId":null,"type":"message","timestamp":"2025-01-01T00:00:00.000Z","role":"user","hasText":true,"preview":"hello world","bytes":{}}}"#,
                line.len()
            )
        );
    }

    #[test]
    fn tool_calls_and_images_show_as_markers_and_a_tool_only_message_has_no_text() {
        let line = r#"{"type":"message","id":"b","message":{"role":"assistant","content":[{"type":"toolCall","id":"t","name":"bash","arguments":{}},{"type":"image","data":"AAAA"}],"stopReason":"toolUse"}}"#;
        let s = skeleton_json(line);
        assert_eq!(text(&s, "preview").as_deref(), Some(r#""→ bash [image]""#));
        assert_eq!(s.get("hasText"), Some(&Json::Bool(false)));
        assert_eq!(text(&s, "stopReason").as_deref(), Some(r#""toolUse""#));
    }

    #[test]
    fn a_huge_text_is_previewed_from_its_start_and_cut_with_an_ellipsis() {
        let big = format!("{}{}", "\\u00e9\\n".repeat(3000), "z".repeat(5_000_000));
        let line = format!(
            r#"{{"type":"message","id":"c","message":{{"role":"toolResult","content":[{{"type":"text","text":"{big}"}}]}}}}"#
        );
        let s = skeleton_json(&line);
        let preview = s.get("preview").and_then(Json::as_js_str).unwrap().to_string_lossy();
        assert_eq!(preview, format!("{}…", vec!["é"; 160].join(" ").chars().take(160).collect::<String>()));
        assert_eq!(s.get("bytes"), Some(&Json::number(line.len() as f64)));
    }

    #[test]
    fn label_session_info_and_custom_entries_keep_what_a_tree_resolves() {
        let s = skeleton_json(
            r#"{"type":"label","id":"l","parentId":"a","targetId":"a","label":"keep \ud83d","timestamp":"t"}"#,
        );
        assert_eq!(text(&s, "targetId").as_deref(), Some(r#""a""#));
        // Copied as stored: a lone surrogate survives.
        assert_eq!(text(&s, "label").as_deref(), Some(r#""keep \ud83d""#));
        let s = skeleton_json(r#"{"type":"session_info","id":"n","name":"  my   session "}"#);
        assert_eq!(text(&s, "name").as_deref(), Some(r#""  my   session ""#));
        assert_eq!(text(&s, "preview").as_deref(), Some(r#""my session""#));
        let s = skeleton_json(r#"{"type":"custom","id":"x","customType":"ext","data":{"big":[1,2,3]}}"#);
        assert_eq!(text(&s, "customType").as_deref(), Some(r#""ext""#));
        assert!(s.get("data").is_none());
    }

    #[test]
    fn an_entry_that_is_not_an_object_has_only_its_size() {
        assert_eq!(skeleton_json("[1,2]").to_canonical_string(), r#"{"bytes":5}"#);
    }

    #[test]
    fn a_cut_never_splits_an_escape_or_a_character() {
        for pad in 0..8 {
            let body = format!("{}{}", "a".repeat(TEXT_SCAN_BYTES - 3 + pad % 4), "\\u00e9é\\\\".repeat(10));
            let lit = format!("\"{body}\"");
            let prefix = string_prefix(lit.as_bytes());
            assert!(decode_string_literal(lit.as_bytes()).to_string_lossy().starts_with(&prefix));
        }
    }
}
