//! The page, compiled into the binary: its markup, styles and scripts are part of the project (no CDN, no
//! network at all). The live page loads them from this server; an export inlines them.

const PAGE: &str = include_str!("assets/page.html");
const CSS: &str = include_str!("assets/app.css");
const VIEW_JS: &str = include_str!("assets/view.js");
const LIVE_JS: &str = include_str!("assets/live.js");
const STATIC_JS: &str = include_str!("assets/static.js");

/// The live page: assets by URL from this server.
pub fn live_page() -> String {
    PAGE.replace("<!--HEAD-->", r#"<link rel="stylesheet" href="/assets/app.css">"#)
        .replace("<!--SCRIPTS-->", r#"<script src="/assets/live.js"></script><script src="/assets/view.js"></script>"#)
}

/// An asset by name: its content type and bytes.
pub fn get(name: &str) -> Option<(&'static str, &'static str)> {
    match name {
        "app.css" => Some(("text/css; charset=utf-8", CSS)),
        "view.js" => Some(("text/javascript; charset=utf-8", VIEW_JS)),
        "live.js" => Some(("text/javascript; charset=utf-8", LIVE_JS)),
        _ => None,
    }
}

/// The page as one self-contained file: styles and scripts inline, `data_json` embedded, and a policy that
/// forbids the page from loading anything at all (images only from `data:`).
pub fn export_page(data_json: &str) -> String {
    let head = format!(
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; \
         script-src 'unsafe-inline'; img-src data:\">\n<style>\n{CSS}</style>"
    );
    let scripts = format!(
        "<script type=\"application/json\" id=\"pi-sessiond-data\">{data_json}</script>\n<script>\n{STATIC_JS}</script>\n<script>\n{VIEW_JS}</script>"
    );
    PAGE.replace("<!--HEAD-->", &head).replace("<!--SCRIPTS-->", &scripts)
}

/// JSON text made safe to sit inside a `<script>` element: `<`, `>` and `&` cannot end the element or start
/// markup, and `/` is escaped so no `http://…` in a session reads as a link to anything. All are legal JSON
/// escapes inside strings, where alone these characters can occur.
pub fn script_safe_json(json: &str) -> String {
    let mut out = String::with_capacity(json.len() + json.len() / 16);
    let mut escaped = false;
    for c in json.chars() {
        // The character after a backslash belongs to its escape (`\/` stays `\/`).
        if std::mem::take(&mut escaped) {
            out.push(c);
            continue;
        }
        match c {
            '\\' => {
                escaped = true;
                out.push(c);
            }
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '/' => out.push_str("\\/"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_json_cannot_close_its_script_element_and_still_parses_the_same() {
        let json = r#"{"a":"</script><!-- https://x & y \/ \\/"}"#;
        let safe = script_safe_json(json);
        assert!(!safe.contains("</") && !safe.contains("<!--") && !safe.contains("https://"), "{safe}");
        let parsed = crate::session::json::Json::parse(safe.as_bytes()).unwrap();
        assert_eq!(parsed, crate::session::json::Json::parse(json.as_bytes()).unwrap());
    }

    #[test]
    fn the_page_and_its_scripts_name_no_network_address() {
        for text in [PAGE, CSS, VIEW_JS, LIVE_JS, STATIC_JS] {
            assert!(!text.contains("http://") && !text.contains("https://") && !text.contains("//cdn"));
        }
    }
}
