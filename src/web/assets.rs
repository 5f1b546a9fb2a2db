//! The page, compiled into the binary: its markup, styles and scripts are part of the project (no CDN, no
//! network at all). The live page loads them from this server; an export inlines them.

const PAGE: &str = include_str!("assets/page.html");
const CSS: &str = include_str!("assets/app.css");
const VIEW_JS: &str = include_str!("assets/view.js");
const LIVE_JS: &str = include_str!("assets/live.js");
const STATIC_JS: &str = include_str!("assets/static.js");
/// highlight.js 11.12.0 with its common languages (the `@highlightjs/cdn-assets` npm package's
/// `highlight.min.js`, unchanged; BSD-3-Clause, `assets/highlight.LICENSE`): the transcript's code blocks are
/// highlighted in the page, as they scroll into view, so neither the server nor an export spends time on code
/// nobody looks at. It only reads text and writes spans; the two addresses in it are in console warnings.
const HIGHLIGHT_JS: &str = include_str!("assets/highlight.min.js");

/// highlight.js as the page gets it, live or inline ([`inline_script`]).
static HIGHLIGHT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| inline_script(HIGHLIGHT_JS));

/// The live page: assets by URL from this server.
pub fn live_page() -> String {
    PAGE.replace("<!--HEAD-->", r#"<link rel="stylesheet" href="/assets/app.css">"#)
        .replace(
        "<!--SCRIPTS-->",
        r#"<script src="/assets/highlight.js"></script><script src="/assets/live.js"></script><script src="/assets/view.js"></script>"#,
    )
}

/// An asset by name: its content type and bytes.
pub fn get(name: &str) -> Option<(&'static str, &'static str)> {
    match name {
        "app.css" => Some(("text/css; charset=utf-8", CSS)),
        "view.js" => Some(("text/javascript; charset=utf-8", VIEW_JS)),
        "live.js" => Some(("text/javascript; charset=utf-8", LIVE_JS)),
        "highlight.js" => Some(("text/javascript; charset=utf-8", HIGHLIGHT.as_str())),
        _ => None,
    }
}

/// The page as one self-contained file: styles and scripts inline, `data_json` embedded, and a policy that
/// forbids the page from loading anything at all (images only from `data:`) and runs only its own scripts and
/// styles, named by their hashes: markup that somehow got into the page could not run a script of its own.
pub fn export_page(data_json: &str) -> String {
    let scripts = [STATIC_JS, HIGHLIGHT.as_str(), VIEW_JS];
    let hashes: Vec<String> = scripts.iter().map(|s| csp_hash(s)).collect();
    let head = format!(
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src {}; \
         script-src {}; img-src data:; base-uri 'none'; form-action 'none'\">\n<style>{CSS}</style>",
        csp_hash(CSS),
        hashes.join(" ")
    );
    let (before, after) = PAGE.split_once("<!--SCRIPTS-->").unwrap_or((PAGE, ""));
    let before = before.replace("<!--HEAD-->", &head);
    let mut page =
        String::with_capacity(before.len() + data_json.len() + scripts.iter().map(|s| s.len()).sum::<usize>() + 512);
    page.push_str(&before);
    page.push_str("<script type=\"application/json\" id=\"pi-sessiond-data\">");
    page.push_str(data_json);
    page.push_str("</script>");
    for s in &scripts {
        page.push_str("\n<script>");
        page.push_str(s);
        page.push_str("</script>");
    }
    page.push_str(after);
    page
}

/// A script's text as it can stand inside a `<script>` element, and with no address in it: highlight.js's HTML
/// grammar holds `<!--` and `<script` in its regular expressions, which an HTML parser would read as markup
/// inside the element, and two of its warnings name its web site. `\x3C` means `<`, and `\/` means `/`, in a
/// JavaScript string or regular expression alike (where alone these sequences occur in it).
fn inline_script(js: &str) -> String {
    js.replace("<!--", "\\x3C!--")
        .replace("<script", "\\x3Cscript")
        .replace("</script", "\\x3C/script")
        .replace("://", ":\\/\\/")
}

/// A CSP source naming an inline element's exact text.
fn csp_hash(text: &str) -> String {
    use base64::Engine as _;
    use sha2::Digest as _;
    format!("'sha256-{}'", base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(text.as_bytes())))
}

/// JSON text made safe to sit inside a `<script>` element: `<`, `>` and `&` cannot end the element or start
/// markup, and `/` is escaped so no `http://…` in a session reads as a link to anything. All are legal JSON
/// escapes inside strings, where alone these characters can occur. Works on bytes: the characters it changes
/// are ASCII, or U+2028 and U+2029, whose UTF-8 bytes no other character's contain.
pub fn script_safe_json(json: &[u8]) -> String {
    // The bytes that need a look; runs of any other are copied whole (this is most of an export's work).
    const LOOK: [bool; 256] = {
        let mut t = [false; 256];
        let mut k = 0;
        let bytes = *b"\\<>&/\xE2";
        while k < bytes.len() {
            t[bytes[k] as usize] = true;
            k += 1;
        }
        t
    };
    let mut out = Vec::with_capacity(json.len() + json.len() / 16);
    let (mut start, mut i) = (0, 0);
    while i < json.len() {
        let b = json[i];
        if !LOOK[b as usize] {
            i += 1;
            continue;
        }
        out.extend_from_slice(&json[start..i]);
        let seq = &json[i..json.len().min(i + 3)];
        let (written, used): (&[u8], usize) = match b {
            // The character after a backslash belongs to its escape (`\/` stays `\/`).
            b'\\' => (&seq[..seq.len().min(2)], seq.len().min(2)),
            b'<' => (b"\\u003c", 1),
            b'>' => (b"\\u003e", 1),
            b'&' => (b"\\u0026", 1),
            b'/' => (b"\\/", 1),
            _ if seq == "\u{2028}".as_bytes() => (b"\\u2028", 3),
            _ if seq == "\u{2029}".as_bytes() => (b"\\u2029", 3),
            _ => (&seq[..1], 1),
        };
        out.extend_from_slice(written);
        i += used;
        start = i;
    }
    out.extend_from_slice(&json[start..]);
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_json_cannot_close_its_script_element_and_still_parses_the_same() {
        let json = "{\"a\":\"</script><!-- https://x & y \\/ \\\\/ \u{2028}\u{2029} é\"}";
        let safe = script_safe_json(json.as_bytes());
        assert!(!safe.contains("</") && !safe.contains("<!--") && !safe.contains("https://"), "{safe}");
        assert!(!safe.contains('\u{2028}') && !safe.contains('\u{2029}') && safe.contains('é'), "{safe}");
        let parsed = crate::session::json::Json::parse(safe.as_bytes()).unwrap();
        assert_eq!(parsed, crate::session::json::Json::parse(json.as_bytes()).unwrap());
    }

    #[test]
    fn an_exported_page_has_one_script_element_per_script_and_a_policy_naming_each() {
        assert!(HIGHLIGHT.contains("https:\\/\\/github.com"), "the warnings keep their text");
        let page = export_page("{}");
        // Each script's text and the data: nothing inside them reads as the end of their element or a comment.
        assert_eq!(page.matches("<script").count(), 4, "the data and three scripts");
        assert_eq!(page.matches("</script>").count(), 4);
        assert!(!page.contains("<!--SCRIPTS") && !page.contains("<!--HEAD"));
        let policy =
            page.split("Content-Security-Policy\" content=\"").nth(1).and_then(|p| p.split('"').next()).unwrap();
        assert!(!policy.contains("unsafe-inline"), "{policy}");
        assert_eq!(policy.matches("'sha256-").count(), 4, "three scripts and the styles: {policy}");
    }

    #[test]
    fn the_page_and_its_scripts_name_no_network_address() {
        for text in [PAGE, CSS, VIEW_JS, LIVE_JS, STATIC_JS, HIGHLIGHT.as_str()] {
            assert!(!text.contains("http://") && !text.contains("https://") && !text.contains("//cdn"));
        }
    }
}
