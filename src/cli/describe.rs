//! One entry in a few words, for people: what it is (a role or an entry type) and a one-line preview of its
//! text. The terminal tree, `show`, `search` and the web view's skeleton rows all describe entries this way, so
//! an entry reads the same everywhere.

use crate::session::entry::EntryType;
use crate::session::js::to_js_string;
use crate::session::json::Json;

/// What a row shows for one entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// The message role (`user`, `assistant`, `toolResult`, …) or the entry type (`compaction`, `label`, …).
    pub what: String,
    /// The text, on one line, cut after `max_chars` characters.
    pub preview: String,
    /// The whole description as the terminal tree (and the Python client's `format_tree`) prints it after the
    /// id: `user: hello`, `label e1 → start`, `model → anthropic/claude`, …
    pub phrase: String,
}

/// The text of a message's `content` (a string, or blocks: text, tool calls as `→ name`, images as `[image]`).
pub fn content_text(content: Option<&Json>) -> String {
    match content {
        Some(Json::String(s)) => s.to_string_lossy(),
        Some(Json::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| {
                let t = b.get("type").and_then(Json::as_js_str)?.to_string_lossy();
                match t.as_str() {
                    "text" => b.get("text").and_then(Json::as_js_str).map(|s| s.to_string_lossy()),
                    "toolCall" => Some(format!("→ {}", string_of(b.get("name")))),
                    "image" => Some("[image]".to_owned()),
                    _ => None,
                }
            })
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

/// `text` with runs of white space made one space, cut after `max_columns` terminal columns (with `…`).
pub fn one_line(text: &str, max_columns: usize) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if super::output::visible_len(&joined) > max_columns {
        super::output::cut_to_width(&joined, max_columns + 1)
    } else {
        joined
    }
}

fn string_of(v: Option<&Json>) -> String {
    v.map(|v| to_js_string(v).to_string_lossy()).unwrap_or_default()
}

/// Describes `entry` (a session entry as stored), previews cut at `max_chars`.
pub fn summarize(entry: &Json, max_chars: usize) -> Summary {
    let s = |k: &str| string_of(entry.get(k));
    let preview = |v: Option<&Json>| one_line(&content_text(v), max_chars);
    let summary_text = |v: Option<&Json>| match v {
        Some(Json::String(t)) => one_line(&t.to_string_lossy(), max_chars),
        _ => String::new(),
    };
    let kind = s("type");
    let (what, preview, phrase) = match EntryType::from_name(kind.as_bytes()) {
        EntryType::Message => {
            let msg = entry.get("message");
            let role = msg.and_then(|m| m.get("role")).and_then(Json::as_js_str).map(|r| r.to_string_lossy());
            let role = role.unwrap_or_else(|| "message".into());
            let text = preview(msg.and_then(|m| m.get("content")));
            let phrase = format!("{role}: {text}");
            (role, text, phrase)
        }
        EntryType::ThinkingLevelChange => {
            let t = format!("thinking level → {}", s("thinkingLevel"));
            (kind.clone(), t.clone(), t)
        }
        EntryType::ModelChange => {
            let t = format!("model → {}/{}", s("provider"), s("modelId"));
            (kind.clone(), t.clone(), t)
        }
        EntryType::Compaction => {
            let t = summary_text(entry.get("summary"));
            (kind.clone(), t.clone(), format!("compaction: {t}"))
        }
        EntryType::BranchSummary => {
            let t = summary_text(entry.get("summary"));
            (kind.clone(), t.clone(), format!("branch summary: {t}"))
        }
        EntryType::CustomMessage => {
            let t = preview(entry.get("content"));
            (kind.clone(), t.clone(), format!("custom message ({}): {t}", s("customType")))
        }
        EntryType::Custom => (kind.clone(), s("customType"), format!("custom ({})", s("customType"))),
        EntryType::Label => {
            let t = format!("{} → {}", s("targetId"), s("label"));
            (kind.clone(), t.clone(), format!("label {t}"))
        }
        EntryType::SessionInfo => (kind.clone(), s("name"), format!("name: {}", s("name"))),
        EntryType::Usage => (kind.clone(), s("kind"), format!("usage ({})", s("kind"))),
        EntryType::ContextEdit => (kind.clone(), s("targetId"), format!("context edit of {}", s("targetId"))),
        // A header, or a type pi 1.6.0 does not write (named, so a type pi adds is a decision here).
        EntryType::Session | EntryType::Other => {
            (if kind.is_empty() { "entry".to_owned() } else { kind.clone() }, String::new(), kind.clone())
        }
    };
    Summary { what, preview, phrase }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Json {
        Json::parse(s.as_bytes()).unwrap()
    }

    #[test]
    fn a_message_is_described_by_its_role_and_text_on_one_line() {
        let e = parse(r#"{"type":"message","id":"a","message":{"role":"user","content":"hello\n  world"}}"#);
        let s = summarize(&e, 80);
        assert_eq!(
            (s.what.as_str(), s.preview.as_str(), s.phrase.as_str()),
            ("user", "hello world", "user: hello world")
        );
    }

    #[test]
    fn tool_calls_and_images_show_as_markers_and_long_text_is_cut() {
        let e = parse(
            r#"{"type":"message","message":{"role":"assistant","content":[{"type":"text","text":"abcdefghij"},{"type":"toolCall","name":"bash"},{"type":"image"}]}}"#,
        );
        assert_eq!(summarize(&e, 100).preview, "abcdefghij → bash [image]");
        assert_eq!(summarize(&e, 5).preview, "abcde…");
    }

    #[test]
    fn entries_that_are_not_messages_are_described_by_their_type() {
        let e = parse(r#"{"type":"label","targetId":"x1","label":"keep"}"#);
        let s = summarize(&e, 80);
        assert_eq!((s.what.as_str(), s.preview.as_str(), s.phrase.as_str()), ("label", "x1 → keep", "label x1 → keep"));
    }
}
