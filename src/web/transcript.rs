//! The transcript: each entry of a session as a piece of HTML to read, as pi's own `--export` shows a
//! conversation — markdown rendered, each tool call with a place for its result, images inline, thinking and
//! long output folded, summaries, custom entries and bookkeeping as what they are.
//!
//! Session text is untrusted (tool output comes from the web), so every piece is made here, on the server, and
//! nothing in it can run: markdown goes through pulldown-cmark with its raw HTML turned into text, then through
//! ammonia (links only to http, https and mailto, no images by address, no attributes but a code block's
//! language); every other text is escaped; an image is only ever a `data:` URL of PNG, JPEG, GIF or WebP whose
//! payload is base64, never SVG. The page puts these pieces into the document as they are.
//!
//! Highlighting is the page's (a highlighter compiled into it, run on code blocks as they scroll into view), so
//! the server's work stays one pass over the text and an export of a large session stays fast.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::LazyLock;

use pulldown_cmark::{Event, Options, Parser};

use super::view::View;

use crate::cli::output::{control_picture, Failure, FailureKind};
use crate::session::describe::{chars, Scanned};
use crate::session::json::value::number_value;
use crate::session::json::{JsString, Json, Object};
use crate::session::ErrorKind;

/// Texts with more lines than this are folded (a `<details>` that opens on a click).
const FOLD_LINES: usize = 12;
/// Texts with more characters than this are folded.
const FOLD_CHARS: usize = 1500;
/// The image types shown inline: raster formats a browser only ever decodes (SVG can carry scripts).
const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// ammonia's defaults (the usual text tags, dangerous ones and every event attribute removed), made stricter:
/// links only to the web and mail, no relative links, no image fetched from an address, and code blocks keep
/// only a language class.
static SANITIZER: LazyLock<ammonia::Builder<'static>> = LazyLock::new(|| {
    let mut b = ammonia::Builder::default();
    b.url_schemes(HashSet::from(["http", "https", "mailto"]))
        .url_relative(ammonia::UrlRelative::Deny)
        .link_rel(Some("noopener noreferrer nofollow"))
        .add_tag_attributes("code", ["class"])
        .attribute_filter(|tag, attribute, value| match (tag, attribute) {
            ("img", "src") => None,
            ("code", "class") => language_class(value).map(Into::into),
            _ => Some(value.into()),
        });
    b
});

/// `language-NAME` when NAME is a plain language name (the page's highlighter looks it up), else None.
fn language_class(class: &str) -> Option<&str> {
    let name = class.strip_prefix("language-")?;
    let plain = !name.is_empty()
        && name.len() <= 32
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'#' | b'-' | b'_' | b'.'));
    plain.then_some(class)
}

/// One entry of the transcript.
#[derive(Clone, Debug, PartialEq)]
pub struct Piece {
    /// How the page styles it: `user`, `assistant`, `toolResult`, `bashExecution`, `custom`, `summary`,
    /// `system` or `note` (bookkeeping: a label, a name, a model or thinking-level change, …).
    pub kind: &'static str,
    /// The entry as HTML, safe to put into the page as it is.
    pub html: String,
    /// For a tool result, the id of the call it answers (the page shows it under that call).
    pub tool_call_id: Option<String>,
    /// For an assistant message, the ids of the tool calls it makes, in order (each has a
    /// `[data-call]` element with a `.call-result` for its result).
    pub calls: Vec<String>,
}

impl Piece {
    /// The piece as the page receives it: `{id, kind, html, toolCallId?, calls?}`.
    pub fn to_json(&self, id: &str) -> Json {
        let mut o = Object::new();
        o.insert("id", Json::str(id));
        o.insert("kind", Json::str(self.kind));
        o.insert("html", Json::str(&self.html));
        if let Some(call) = &self.tool_call_id {
            o.insert("toolCallId", Json::str(call));
        }
        if !self.calls.is_empty() {
            o.insert("calls", Json::Array(self.calls.iter().map(|c| Json::str(c)).collect()));
        }
        Json::Object(o)
    }
}

fn text_of(v: Option<&Json>) -> Option<String> {
    v.and_then(Json::as_js_str).map(JsString::to_string_lossy)
}

/// Whether `c` is one of Unicode's explicit directional marks, embeddings, overrides or isolates (UAX #9). The
/// page shows marks too, where the terminal leaves them (they reorder nothing on their own).
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// A control character's picture as the page shows it (`␛` for ESC, as the command line does); a carriage
/// return, white space to HTML, is kept.
fn picture(c: char) -> Option<char> {
    if c == '\r' {
        return None;
    }
    control_picture(c)
}

/// `text` with its directional controls shown as what they are (`⟨U+202E⟩`) and its other control characters
/// as their pictures, as the page shows every other text of a session: "invoice\u{202E}fdp.exe" cannot pass for
/// "invoiceexe.pdf", and a tool's ESC or BEL is seen, not dropped by the browser.
fn visible(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| is_bidi_control(c) || picture(c).is_some()) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match picture(c) {
            Some(p) => out.push(p),
            None if is_bidi_control(c) => out.push_str(&format!("⟨U+{:04X}⟩", c as u32)),
            None => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn escape(text: &str, out: &mut String) {
    // Writing to a String cannot fail.
    let _ = pulldown_cmark_escape::escape_html(&mut *out, &visible(text));
}

fn escaped(text: &str) -> String {
    let mut s = String::with_capacity(text.len());
    escape(text, &mut s);
    s
}

/// `text` as markdown, sanitised.
pub fn markdown(text: &str, out: &mut String) {
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH;
    // Raw HTML in markdown is shown as the text it is, never as markup.
    let text = visible(text);
    let events = Parser::new_ext(&text, options).map(|e| match e {
        Event::Html(h) | Event::InlineHtml(h) => Event::Text(h),
        e => e,
    });
    let mut html = String::with_capacity(text.len() + text.len() / 4 + 16);
    pulldown_cmark::html::push_html(&mut html, events);
    out.push_str("<div class=\"md\">");
    out.push_str(&SANITIZER.clean(&html).to_string());
    out.push_str("</div>");
}

/// Plain text (tool output, a command's output) in a `<pre>`, folded under `title` when long.
fn plain(text: &str, class: &str, title: &str, out: &mut String) {
    let lines = text.lines().count();
    let long = lines > FOLD_LINES || text.len() > FOLD_CHARS;
    if long {
        out.push_str("<details class=\"fold\"><summary>");
        escape(title, out);
        out.push_str(&format!(" · {} lines</summary>", fmt_count(lines as f64)));
    }
    out.push_str(&format!("<pre class=\"{class}\">"));
    escape(text, out);
    out.push_str("</pre>");
    if long {
        out.push_str("</details>");
    }
}

/// Code in a `<pre><code>` the page's highlighter reads (`lang` a language name or a file extension).
fn code(text: &str, lang: &str, out: &mut String) {
    let class = format!("language-{lang}");
    out.push_str("<pre class=\"code\"><code");
    if let Some(c) = language_class(&class) {
        out.push_str(&format!(" class=\"{c}\""));
    }
    out.push('>');
    escape(text, out);
    out.push_str("</code></pre>");
}

/// An image block as an `<img>` the page loads when it scrolls into view, or a note saying why it is not shown.
fn image(block: &Json, out: &mut String) {
    let mime = text_of(block.get("mimeType")).unwrap_or_default().to_ascii_lowercase();
    // The payload is checked and copied as bytes: it is most of a large session's size.
    let data = block.get("data").and_then(Json::as_js_str).map(JsString::as_bytes).unwrap_or_default();
    let base64 = !data.is_empty()
        && data.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=' | b'\n' | b'\r'));
    if !IMAGE_TYPES.contains(&mime.as_str()) || !base64 {
        let what = if mime.is_empty() { "no type".to_owned() } else { mime };
        out.push_str("<div class=\"note\">[image not shown: ");
        escape(&what, out);
        out.push_str(", only PNG, JPEG, GIF and WebP in base64 are]</div>");
        return;
    }
    let size = data.len() / 4 * 3;
    out.push_str(&format!(
        "<img class=\"image\" alt=\"{mime}, {}\" data-src=\"data:{mime};base64,",
        escaped(&fmt_bytes(size as f64))
    ));
    // Base64 needs no escaping in an attribute; line breaks are dropped (a data URL has none).
    for line in data.split(|b| *b == b'\n' || *b == b'\r') {
        // Only ASCII was let through above.
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
    }
    out.push_str("\">");
}

/// A message's content blocks (a string is one text block), with `calls` collecting tool call ids.
fn blocks(content: Option<&Json>, text_as: TextAs, out: &mut String, calls: &mut Vec<String>) {
    let text = |t: &str, out: &mut String| match text_as {
        TextAs::Markdown => markdown(t, out),
        TextAs::Output(title) => plain(t, "out", title, out),
    };
    match content {
        Some(Json::String(s)) => text(&s.to_string_lossy(), out),
        Some(Json::Array(items)) => {
            for b in items {
                match text_of(b.get("type")).as_deref() {
                    Some("text") => text(&text_of(b.get("text")).unwrap_or_default(), out),
                    Some("thinking") => {
                        let t = text_of(b.get("thinking")).unwrap_or_default();
                        let redacted = b.get("redacted").is_some_and(Json::truthy);
                        if t.trim().is_empty() && !redacted {
                            continue;
                        }
                        out.push_str("<details class=\"thinking\"><summary>thinking</summary>");
                        if redacted {
                            out.push_str("<p class=\"note\">(redacted by the provider)</p>");
                        }
                        markdown(&t, out);
                        out.push_str("</details>");
                    }
                    Some("toolCall") => tool_call(b, out, calls),
                    Some("image") => image(b, out),
                    _ => folded_json("block", b, out),
                }
            }
        }
        _ => {}
    }
}

#[derive(Clone, Copy)]
enum TextAs {
    Markdown,
    Output(&'static str),
}

/// A tool call: its name, its arguments (a command as code, long strings folded), and a place for its result.
fn tool_call(b: &Json, out: &mut String, calls: &mut Vec<String>) {
    let id = text_of(b.get("id")).unwrap_or_default();
    let name = text_of(b.get("name")).unwrap_or_default();
    out.push_str("<div class=\"call\" data-call=\"");
    escape(&id, out);
    out.push_str("\"><div class=\"call-head\"><span class=\"tool\">");
    escape(&name, out);
    out.push_str("</span></div>");
    let args = b.get("arguments");
    let path = args.and_then(|a| text_of(a.get("path")).or_else(|| text_of(a.get("file_path"))));
    // The language of a file's content, from its name, for the highlighter.
    let ext = path.as_deref().and_then(|p| p.rsplit_once('.')).map(|(_, e)| e.to_ascii_lowercase());
    match args {
        Some(Json::Object(members)) => {
            out.push_str("<div class=\"args\">");
            for (k, v) in members.iter() {
                let key = k.to_string_lossy();
                match v {
                    Json::String(s) => {
                        let s = s.to_string_lossy();
                        if key == "command" {
                            code(&s, "bash", out);
                        } else if s.contains('\n') || s.len() > 200 {
                            let long = s.lines().count() > FOLD_LINES || s.len() > FOLD_CHARS;
                            if long {
                                out.push_str("<details class=\"fold\"><summary>");
                            } else {
                                out.push_str("<div class=\"arg\">");
                            }
                            out.push_str("<span class=\"k\">");
                            escape(&key, out);
                            out.push_str("</span>");
                            if long {
                                out.push_str(&format!(" · {} lines</summary>", fmt_count(s.lines().count() as f64)));
                            }
                            code(&s, ext.as_deref().unwrap_or("plaintext"), out);
                            out.push_str(if long { "</details>" } else { "</div>" });
                        } else {
                            out.push_str("<div class=\"arg\"><span class=\"k\">");
                            escape(&key, out);
                            out.push_str("</span> ");
                            escape(&s, out);
                            out.push_str("</div>");
                        }
                    }
                    other => {
                        out.push_str("<div class=\"arg\"><span class=\"k\">");
                        escape(&key, out);
                        out.push_str("</span> <code>");
                        escape(&compact(other), out);
                        out.push_str("</code></div>");
                    }
                }
            }
            out.push_str("</div>");
        }
        Some(other) => code(&compact(other), "json", out),
        None => {}
    }
    out.push_str("<div class=\"call-result\"></div></div>");
    calls.push(id);
}

fn compact(v: &Json) -> String {
    let mut bytes = Vec::new();
    v.write_preserving(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A value shown whole but folded, as JSON, under `title`.
fn folded_json(title: &str, v: &Json, out: &mut String) {
    out.push_str("<details class=\"fold\"><summary>");
    escape(title, out);
    out.push_str("</summary>");
    code(&compact(v), "json", out);
    out.push_str("</details>");
}

fn head(parts: &[&str], out: &mut String) {
    out.push_str("<div class=\"who\">");
    let mut first = true;
    for p in parts.iter().filter(|p| !p.is_empty()) {
        if !first {
            out.push_str(" · ");
        }
        first = false;
        escape(p, out);
    }
    out.push_str("</div>");
}

/// `n` with thousands separated, as the page writes numbers.
fn fmt_count(n: f64) -> String {
    let digits = format!("{}", n.round().max(0.0) as u64);
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn fmt_bytes(n: f64) -> String {
    if n >= 1024.0 * 1024.0 {
        format!("{:.1} MiB", n / 1024.0 / 1024.0)
    } else if n >= 1024.0 {
        format!("{:.0} KiB", n / 1024.0)
    } else {
        format!("{n} B")
    }
}

fn number(v: Option<&Json>) -> Option<f64> {
    match v {
        Some(Json::Number(n)) => Some(number_value(n)),
        _ => None,
    }
}

/// An assistant message's tokens and cost, in a line.
fn usage_line(usage: &Json, out: &mut String) {
    let n = |k: &str| number(usage.get(k)).unwrap_or(0.0);
    let cost = number(usage.get("cost").and_then(|c| c.get("total"))).unwrap_or(0.0);
    let mut line = format!("{} in · {} out", fmt_count(n("input")), fmt_count(n("output")));
    if n("cacheRead") > 0.0 || n("cacheWrite") > 0.0 {
        line.push_str(&format!(" · cache {} read, {} written", fmt_count(n("cacheRead")), fmt_count(n("cacheWrite"))));
    }
    line.push_str(&format!(" · ${cost:.4}"));
    out.push_str("<div class=\"usage\">");
    escape(&line, out);
    out.push_str("</div>");
}

/// The transcript's piece for one entry as stored.
pub fn render(entry: &Json) -> Piece {
    let mut out = String::new();
    let mut calls = Vec::new();
    let mut tool_call_id = None;
    let kind = match text_of(entry.get("type")).as_deref() {
        Some("message") => {
            let null = Json::Null;
            let m = entry.get("message").unwrap_or(&null);
            let role = text_of(m.get("role")).unwrap_or_default();
            match role.as_str() {
                "user" => {
                    head(&["user"], &mut out);
                    blocks(m.get("content"), TextAs::Markdown, &mut out, &mut calls);
                    "user"
                }
                "assistant" => {
                    let model = match (text_of(m.get("provider")), text_of(m.get("model"))) {
                        (Some(p), Some(model)) => format!("{p}/{model}"),
                        (_, Some(model)) => model,
                        _ => String::new(),
                    };
                    head(&["assistant", &model], &mut out);
                    blocks(m.get("content"), TextAs::Markdown, &mut out, &mut calls);
                    let stop = text_of(m.get("stopReason")).unwrap_or_default();
                    if let Some(error) = text_of(m.get("errorMessage")) {
                        out.push_str("<pre class=\"error\">");
                        escape(&error, &mut out);
                        out.push_str("</pre>");
                    } else if stop == "aborted" || stop == "error" {
                        out.push_str(&format!("<div class=\"error\">{stop}</div>"));
                    }
                    if let Some(u) = m.get("usage") {
                        usage_line(u, &mut out);
                    }
                    "assistant"
                }
                "toolResult" => {
                    let name = text_of(m.get("toolName")).unwrap_or_default();
                    let error = m.get("isError").is_some_and(Json::truthy);
                    out.push_str(if error { "<div class=\"result error\">" } else { "<div class=\"result\">" });
                    head(&["result", &name, if error { "error" } else { "" }], &mut out);
                    blocks(m.get("content"), TextAs::Output("output"), &mut out, &mut calls);
                    out.push_str("</div>");
                    tool_call_id = text_of(m.get("toolCallId"));
                    "toolResult"
                }
                "bashExecution" => {
                    let mut notes = Vec::new();
                    if let Some(code) = number(m.get("exitCode")) {
                        notes.push(format!("exit {code}"));
                    }
                    if m.get("cancelled").is_some_and(Json::truthy) {
                        notes.push("cancelled".into());
                    }
                    if m.get("truncated").is_some_and(Json::truthy) {
                        notes.push("output truncated".into());
                    }
                    if m.get("excludeFromContext").is_some_and(Json::truthy) {
                        notes.push("not sent to the model".into());
                    }
                    let notes = notes.join(", ");
                    head(&["bash", &notes], &mut out);
                    code(&text_of(m.get("command")).unwrap_or_default(), "bash", &mut out);
                    plain(&text_of(m.get("output")).unwrap_or_default(), "out", "output", &mut out);
                    "bashExecution"
                }
                "custom" | "hookMessage" => {
                    let t = text_of(m.get("customType")).unwrap_or_default();
                    let hidden = m.get("display").is_some_and(|d| !d.truthy());
                    head(&[&t, if hidden { "not displayed in pi" } else { "" }], &mut out);
                    blocks(m.get("content"), TextAs::Markdown, &mut out, &mut calls);
                    "custom"
                }
                "branchSummary" | "compactionSummary" => {
                    head(&[&role], &mut out);
                    markdown(&text_of(m.get("summary")).unwrap_or_default(), &mut out);
                    "summary"
                }
                "system" => {
                    out.push_str("<details class=\"fold\"><summary>system prompt</summary>");
                    blocks(m.get("content"), TextAs::Output("system"), &mut out, &mut calls);
                    out.push_str("</details>");
                    "system"
                }
                _ => {
                    head(&[if role.is_empty() { "message" } else { &role }], &mut out);
                    folded_json("as stored", m, &mut out);
                    "note"
                }
            }
        }
        Some("compaction") => {
            let before = number(entry.get("tokensBefore")).map(|n| format!("{} tokens before", fmt_count(n)));
            head(&["compaction", &before.unwrap_or_default()], &mut out);
            markdown(&text_of(entry.get("summary")).unwrap_or_default(), &mut out);
            "summary"
        }
        Some("branch_summary") => {
            let from = text_of(entry.get("fromId")).map(|f| format!("from {f}"));
            head(&["branch summary", &from.unwrap_or_default()], &mut out);
            markdown(&text_of(entry.get("summary")).unwrap_or_default(), &mut out);
            "summary"
        }
        Some("custom_message") => {
            let t = text_of(entry.get("customType")).unwrap_or_default();
            let hidden = entry.get("display").is_some_and(|d| !d.truthy());
            head(&[&t, if hidden { "not displayed in pi" } else { "" }], &mut out);
            blocks(entry.get("content"), TextAs::Markdown, &mut out, &mut calls);
            "custom"
        }
        Some("custom") => {
            let t = text_of(entry.get("customType")).unwrap_or_default();
            out.push_str("<div class=\"note\"><span class=\"tag\">");
            escape(&t, &mut out);
            out.push_str("</span>");
            if let Some(data) = entry.get("data") {
                folded_json("data", data, &mut out);
            }
            out.push_str("</div>");
            "note"
        }
        _ => {
            // Bookkeeping, said in words as the tree's rows say it.
            out.push_str("<div class=\"note\">");
            escape(&Scanned::of_value(entry).describe().summary(200, chars).phrase, &mut out);
            out.push_str("</div>");
            "note"
        }
    };
    Piece { kind, html: out, tool_call_id, calls }
}

/// How many entries one page of the transcript may ask for.
pub const PAGE_IDS: usize = 256;
/// Past this many bytes of HTML a page ends, so a page of large entries is answered in pieces.
const PAGE_BYTES: usize = 2 << 20;

/// The pieces of the entries `ids` of an open session, in order, as `[{id, kind, html, …}]`: at least one, and
/// after that only while the page stays under [`PAGE_BYTES`] (the page asks again for the rest). An id the
/// session does not have is left out.
pub fn page(view: &View, handle: &str, ids: &[String]) -> Result<Json, Failure> {
    if ids.len() > PAGE_IDS {
        return Err(Failure::new(
            FailureKind::Session(ErrorKind::InvalidParams),
            format!("at most {PAGE_IDS} entries per page"),
        ));
    }
    let entries = view.entries(handle, ids)?;
    let mut out = Vec::new();
    let mut bytes = 0;
    for id in ids {
        let Some(entry) = entries.get(id).filter(|e| !matches!(e, Json::Null)) else { continue };
        if bytes > PAGE_BYTES {
            break;
        }
        let piece = render(entry);
        bytes += piece.html.len();
        out.push(piece.to_json(id));
    }
    Ok(Json::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(s: &str) -> Json {
        Json::parse(s.as_bytes()).unwrap()
    }

    fn user(text: &str) -> Piece {
        let mut e = Object::new();
        e.insert("type", Json::str("message"));
        let mut m = Object::new();
        m.insert("role", Json::str("user"));
        m.insert("content", Json::str(text));
        e.insert("message", Json::Object(m));
        render(&Json::Object(e))
    }

    #[test]
    fn markdown_is_rendered_and_a_fenced_block_keeps_its_language() {
        let html = user("# Title\n\n**bold** and `code`\n\n```rust\nfn main() {}\n```\n").html;
        assert!(html.contains("<h1>Title</h1>"), "{html}");
        assert!(html.contains("<strong>bold</strong>"), "{html}");
        assert!(html.contains("<code class=\"language-rust\">fn main() {}"), "{html}");
    }

    #[test]
    fn raw_html_scripts_and_active_links_in_markdown_come_out_inert() {
        let html = user(concat!(
            "<script>window.__pwned=1</script>\n\n<img src=x onerror=\"window.__pwned=1\">\n\n",
            "[a](javascript:window.__pwned=1) [b](data:text/html,<script>x</script>) [c](https://example.com) ",
            "![d](https://example.com/x.png) <svg onload=\"window.__pwned=1\"></svg>\n\n",
            "```\"><script>x</script>\nx\n```\n"
        ))
        .html;
        for bad in ["<script", "<img src", "<svg", "javascript:", "href=\"data:", "\"><"] {
            assert!(!html.contains(bad), "{bad} in {html}");
        }
        // The one image left is the markdown image's alt text, with nothing to fetch.
        assert_eq!(html.matches("<img").count(), 1, "{html}");
        assert!(html.contains("<img alt=\"d\">"), "{html}");
        assert!(html.contains("&lt;script&gt;"), "raw HTML is shown as text: {html}");
        assert!(html.contains("href=\"https://example.com\""), "{html}");
        assert!(html.contains("rel=\"noopener noreferrer nofollow\""), "{html}");
    }

    #[test]
    fn directional_controls_are_shown_as_what_they_are_in_markdown_and_in_output() {
        assert!(user("invoice\u{202E}fdp.exe").html.contains("invoice⟨U+202E⟩fdp.exe"));
        let out = render(&entry(r#"{"type":"message","message":{"role":"toolResult","content":"a\u2066b"}}"#));
        assert!(out.html.contains("a⟨U+2066⟩b"), "{}", out.html);
    }

    #[test]
    fn only_raster_images_in_base64_are_shown_and_svg_never_is() {
        let piece = render(&entry(
            r#"{"type":"message","message":{"role":"toolResult","toolCallId":"c1","content":[
              {"type":"image","mimeType":"image/png","data":"iVBORw0KGgo="},
              {"type":"image","mimeType":"image/svg+xml","data":"PHN2Zz48L3N2Zz4="},
              {"type":"image","mimeType":"image/png","data":"x\" onerror=\"alert(1)"}]}}"#,
        ));
        assert_eq!(piece.tool_call_id.as_deref(), Some("c1"));
        assert_eq!(piece.html.matches("<img").count(), 1, "{}", piece.html);
        assert!(piece.html.contains("data-src=\"data:image/png;base64,iVBORw0KGgo=\""), "{}", piece.html);
        assert!(!piece.html.contains("onerror") && !piece.html.contains("svg+xml;"), "{}", piece.html);
    }

    #[test]
    fn an_assistant_message_names_its_tool_calls_and_folds_its_thinking() {
        let piece = render(&entry(
            r#"{"type":"message","message":{"role":"assistant","provider":"p","model":"m","content":[
              {"type":"thinking","thinking":"hmm"},{"type":"text","text":"Let me look."},
              {"type":"toolCall","id":"call\"1","name":"bash","arguments":{"command":"ls -la"}}],
              "usage":{"input":1200,"output":80,"cost":{"total":0.0048}}}}"#,
        ));
        assert_eq!(piece.kind, "assistant");
        assert_eq!(piece.calls, vec!["call\"1".to_owned()]);
        let h = &piece.html;
        assert!(h.contains("<details class=\"thinking\"><summary>thinking</summary>"), "{h}");
        assert!(h.contains("data-call=\"call&quot;1\""), "{h}");
        assert!(h.contains("<code class=\"language-bash\">ls -la</code>"), "{h}");
        assert!(h.contains("1,200 in · 80 out · $0.0048"), "{h}");
    }

    #[test]
    fn long_tool_output_is_folded_and_short_output_is_not() {
        let long = (0..40).map(|i| format!("line {i}")).collect::<Vec<_>>().join("\n");
        let e = |text: &str| {
            let mut m = Object::new();
            m.insert("role", Json::str("toolResult"));
            m.insert("content", Json::str(text));
            let mut o = Object::new();
            o.insert("type", Json::str("message"));
            o.insert("message", Json::Object(m));
            render(&Json::Object(o)).html
        };
        assert!(e(&long).contains("<details class=\"fold\"><summary>output · 40 lines</summary>"));
        assert!(!e("ok").contains("<details"));
    }

    #[test]
    fn summaries_custom_entries_and_bookkeeping_say_what_they_are() {
        let c = render(&entry(r#"{"type":"compaction","summary":"Did *things*.","tokensBefore":150000}"#));
        assert_eq!(c.kind, "summary");
        assert!(c.html.contains("compaction · 150,000 tokens before") && c.html.contains("<em>things</em>"));
        let custom = render(&entry(r#"{"type":"custom","customType":"<b>plan</b>","data":{"x":1}}"#));
        assert!(custom.html.contains("&lt;b&gt;plan&lt;/b&gt;"), "{}", custom.html);
        let m = render(&entry(r#"{"type":"custom_message","customType":"notes","content":"hi","display":false}"#));
        assert!(m.html.contains("notes · not displayed in pi"), "{}", m.html);
        let label = render(&entry(r#"{"type":"label","targetId":"a1","label":"<i>x</i>"}"#));
        assert_eq!(label.kind, "note");
        assert!(label.html.contains("label a1 → &lt;i&gt;x&lt;/i&gt;"), "{}", label.html);
    }
}
