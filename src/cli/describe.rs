//! One entry in a few words, for people: what it is (a role or an entry type) and a one-line preview of its
//! text. The terminal tree, `show`, `search` and the web view's skeleton rows all describe entries this way, so
//! an entry reads the same everywhere.

use crate::session::js::to_js_string;
use crate::session::json::Json;

/// What a row shows for one entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// The message role (`user`, `assistant`, `toolResult`, …) or the entry type (`compaction`, `label`, …).
    pub what: String,
    /// The text, on one line, at most `max_chars` characters.
    pub preview: String,
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

/// `text` with runs of white space made one space, cut to `max_chars` characters (with `…`).
pub fn one_line(text: &str, max_chars: usize) -> String {
    let mut out = String::new();
    let mut count = 0;
    for word in text.split_whitespace() {
        if count > 0 {
            out.push(' ');
            count += 1;
        }
        for c in word.chars() {
            if count >= max_chars {
                out.pop();
                out.push('…');
                return out;
            }
            out.push(c);
            count += 1;
        }
    }
    out
}

fn string_of(v: Option<&Json>) -> String {
    v.map(|v| to_js_string(v).to_string_lossy()).unwrap_or_default()
}

/// Describes `entry` (a session entry as stored).
pub fn summarize(entry: &Json, max_chars: usize) -> Summary {
    let s = |k: &str| string_of(entry.get(k));
    let kind = s("type");
    let (what, text) = match kind.as_str() {
        "message" => {
            let msg = entry.get("message");
            let role = msg.and_then(|m| m.get("role")).and_then(Json::as_js_str).map(|r| r.to_string_lossy());
            let role = role.unwrap_or_else(|| "message".into());
            let mut text = content_text(msg.and_then(|m| m.get("content")));
            if role == "bashExecution" {
                text = format!("$ {}", string_of(msg.and_then(|m| m.get("command"))));
            }
            if text.is_empty() {
                if let Some(err) = msg.and_then(|m| m.get("errorMessage")).and_then(Json::as_js_str) {
                    text = format!("error: {}", err.to_string_lossy());
                }
            }
            (role, text)
        }
        "thinking_level_change" => (kind.clone(), format!("thinking level → {}", s("thinkingLevel"))),
        "model_change" => (kind.clone(), format!("model → {}/{}", s("provider"), s("modelId"))),
        "compaction" => (kind.clone(), s("summary")),
        "branch_summary" => (kind.clone(), s("summary")),
        "custom_message" => (kind.clone(), format!("({}) {}", s("customType"), content_text(entry.get("content")))),
        "custom" => (kind.clone(), format!("({})", s("customType"))),
        "label" => (kind.clone(), format!("{} → {}", s("targetId"), s("label"))),
        "session_info" => (kind.clone(), format!("name: {}", s("name"))),
        "usage" => (kind.clone(), format!("{} {}/{}", s("kind"), s("provider"), s("model"))),
        "context_edit" => (kind.clone(), format!("edit of {}", s("targetId"))),
        "" => ("entry".to_owned(), String::new()),
        _ => (kind.clone(), String::new()),
    };
    Summary { what, preview: one_line(&text, max_chars) }
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
        assert_eq!(summarize(&e, 80), Summary { what: "user".into(), preview: "hello world".into() });
    }

    #[test]
    fn tool_calls_and_images_show_as_markers_and_long_text_is_cut() {
        let e = parse(
            r#"{"type":"message","message":{"role":"assistant","content":[{"type":"text","text":"abcdefghij"},{"type":"toolCall","name":"bash"},{"type":"image"}]}}"#,
        );
        assert_eq!(summarize(&e, 100).preview, "abcdefghij → bash [image]");
        assert_eq!(summarize(&e, 5).preview, "abcd…");
    }

    #[test]
    fn entries_that_are_not_messages_are_described_by_their_type() {
        let e = parse(r#"{"type":"label","targetId":"x1","label":"keep"}"#);
        assert_eq!(summarize(&e, 80), Summary { what: "label".into(), preview: "x1 → keep".into() });
    }
}
