//! An entry's skeleton: the few hundred bytes a tree view needs in place of a body that may be megabytes.
//!
//! At `skeleton` detail each entry is `{id, parentId, type, timestamp, role?, stopReason?, hasText?, customType?,
//! targetId?, label?, name?, preview?, bytes}`: the stored values copied byte for byte (so ids and labels are
//! exactly what reads give), a bounded preview, and the entry's size. It is made here, in the engine, from a line
//! the validating scanner has just scanned ([`of_line`]), so the open's one pass over a session's bytes also
//! makes every skeleton: a skeleton snapshot then reads nothing more (issue 21). The preview and `hasText` are
//! the entry's one description (`describe.rs`), which the command line and the web view show too.
//!
//! Skeletons are written as JSON text here, without the renderer's `JsonOut` (which sits above the manager): the
//! pieces are few, and text that is not UTF-8 is replaced as Node's decoder replaces it, as `JsonOut` does.

use super::describe::{chars, Description, PREVIEW_CHARS};
use super::entry::EntryType;
use super::json::scan::{Document, Kind};
use super::json::string::write_json_string_bytes;
use std::io::Write as _;

/// The skeleton of one line, scanned as `doc` (ranges into `bytes`), whose `type` is `kind`.
pub fn of_line(kind: EntryType, bytes: &[u8], doc: &Document) -> Vec<u8> {
    let mut out = Vec::with_capacity(160);
    write_line(kind, bytes, doc, &mut out, &mut String::new());
    out
}

/// [`of_line`] written to the end of `out`, so a thread making many skeletons reuses one buffer.
/// `preview` is where the preview is made before it is written (its room is kept from line to line).
pub fn write_line(kind: EntryType, bytes: &[u8], doc: &Document, out: &mut Vec<u8>, preview: &mut String) {
    let value = &bytes[doc.value.clone()];
    let mut o = Writer { out, first: true };
    o.out.push(b'{');
    if Kind::of(value) == Kind::Object {
        let entry = Description::of_line(kind, bytes, doc);
        for name in ["id", "parentId", "type", "timestamp"] {
            o.copy(name, entry.member(name));
        }
        let raw = |name: &str| entry.member(name);
        match kind {
            EntryType::Message => {
                o.copy("role", entry.message_member("role"));
                o.copy("stopReason", entry.message_member("stopReason"));
                o.key("hasText");
                o.out.extend_from_slice(if entry.has_text() { b"true" } else { b"false" });
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
        entry.preview_into(PREVIEW_CHARS, chars, preview);
        if !preview.is_empty() {
            o.key("preview");
            write_json_string_bytes(preview.as_bytes(), o.out);
        }
    }
    o.key("bytes");
    // Written as digits directly: `to_string` was an allocation per line of every open.
    let _ = write!(o.out, "{}", value.len());
    o.out.push(b'}');
}

/// An object being written: its bytes and whether a member was written yet.
struct Writer<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
}

impl Writer<'_> {
    /// Writes a member's key: one of the names above, which JSON quotes as they are. Inlined, so each name's
    /// bytes are copied as the constant they are, not by a call to `memcpy` (several on every line of an open).
    #[inline(always)]
    fn key(&mut self, name: &str) {
        debug_assert!(name.bytes().all(|b| b.is_ascii_alphabetic()), "{name} needs no escaping");
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        self.out.reserve(name.len() + 3);
        self.out.push(b'"');
        self.out.extend_from_slice(name.as_bytes());
        self.out.extend_from_slice(b"\":");
    }

    /// Writes `name: value` when the entry has the member (its stored bytes, with bytes that are not UTF-8
    /// replaced as Node's decoder replaces them).
    #[inline(always)]
    fn copy(&mut self, name: &str, value: Option<&[u8]>) {
        if let Some(v) = value {
            self.key(name);
            // Ids, timestamps and roles are ASCII: checked as such in line, where the UTF-8 validation was a call
            // for each of a skeleton's few values.
            if v.is_ascii() || std::str::from_utf8(v).is_ok() {
                self.out.extend_from_slice(v);
            } else {
                self.out.extend_from_slice(String::from_utf8_lossy(v).as_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::describe::{string_prefix, TEXT_SCAN_BYTES};
    use crate::session::json::scan::scan_document;
    use crate::session::json::string::decode_string_literal;
    use crate::session::json::Json;

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
            let prefix = string_prefix(lit.as_bytes(), TEXT_SCAN_BYTES);
            assert!(decode_string_literal(lit.as_bytes()).to_string_lossy().starts_with(&prefix));
        }
    }
}
