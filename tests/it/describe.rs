//! One description of an entry everywhere (issue 25): what `pi-sessiond tree` prints for an entry is what a client
//! draws from the sidecar's skeleton of it (its role, `customType` and preview, cut shorter), and the web view's
//! row, made from the entry as a value, previews it as the skeleton does. Checked on entries of every type with
//! odd content: blocks of every kind, images, tool calls with odd names, huge and wide texts, escapes,
//! non-string fields.

use pi_sessiond::session::entry::EntryType;
use pi_sessiond::session::js::to_js_string;
use pi_sessiond::session::json::Json;

use crate::support::sidecar::{binary, Sidecar};
use crate::support::{json, s, temp_dir};

/// Values of the odd kinds an entry's fields may hold, as JSON text.
fn odd_values() -> Vec<String> {
    let huge = format!("{}  \\n end", "long words here ".repeat(700));
    [
        r#""plain""#.to_owned(),
        r#""  runs \n of\t white   space ""#.to_owned(),
        r#""caf\u00e9 \ud83d\ude00 日本語のテキストです""#.to_owned(),
        format!(r#""{}""#, "日本語".repeat(60)),
        format!(r#""{huge}""#),
        r#""""#.to_owned(),
        "7".to_owned(),
        "1e21".to_owned(),
        "null".to_owned(),
        "true".to_owned(),
        r#"["a",1,null]"#.to_owned(),
        r#"{"k":"v"}"#.to_owned(),
    ]
    .into()
}

/// Message contents: strings and blocks of every kind, including ones that are not objects.
fn odd_contents() -> Vec<String> {
    let mut contents = odd_values();
    contents.extend([
        r#"[{"type":"text","text":"first"},{"type":"toolCall","id":"t","name":"bash","arguments":{}},{"type":"image","data":"AAAA","mimeType":"image/png"}]"#.to_owned(),
        r#"[{"type":"toolCall","name":5},{"type":"toolCall"},{"type":"image"}]"#.to_owned(),
        r#"[{"type":"thinking","thinking":"hidden"},{"type":"text","text":7},"loose",3,null,{"type":"TEXT","text":"no"}]"#.to_owned(),
        format!(r#"[{{"type":"text","text":"{}"}},{{"type":"text","text":"after"}}]"#, "x".repeat(6000)),
        "[]".to_owned(),
    ]);
    contents
}

/// Entries of every type (`EntryType::ALL`, a made-up type and a non-string one for `Other`), each field and
/// content in turn odd, as bodies without id, parent and timestamp.
fn odd_bodies() -> Vec<String> {
    let values = odd_values();
    let contents = odd_contents();
    let mut bodies = Vec::new();
    for kind in EntryType::ALL {
        let field = |name: &str, v: &str| format!(r#""{name}":{v}"#);
        match kind {
            EntryType::Message => {
                for (i, content) in contents.iter().enumerate() {
                    let role = ["\"user\"", "\"assistant\"", "\"toolResult\"", "\"custom\"", "7"][i % 5];
                    bodies.push(format!(r#""type":"message","message":{{"role":{role},"content":{content}}}"#));
                }
                for v in &values {
                    bodies.push(format!(
                        r#""type":"message","message":{{"role":"bashExecution",{}}}"#,
                        field("command", v)
                    ));
                    bodies.push(format!(
                        r#""type":"message","message":{{"role":"branchSummary",{}}}"#,
                        field("summary", v)
                    ));
                }
                // Keys written with escapes (another JSON writer, a hand edit) are the names `JSON.parse` reads.
                bodies.push(
                    r#""typ\u0065":"message","m\u0065ssage":{"r\u006fle":"user","c\u006fntent":"escaped keys"}"#
                        .to_owned(),
                );
                bodies.push(
                    r#""type":"message","message":{"role":"assistant","c\u006fntent":[{"t\u0079pe":"text","t\u0065xt":"escaped blocks"},{"type":"toolCall","n\u0061me":"bash"}]}"#
                        .to_owned(),
                );
                bodies.push(r#""type":"message","message":"not an object""#.to_owned());
                bodies.push(r#""type":"message""#.to_owned());
            }
            EntryType::Session => bodies.push(r#""type":"session","version":3,"cwd":"/elsewhere""#.to_owned()),
            EntryType::Other => {
                bodies.push(r#""type":"someday","text":"x""#.to_owned());
                bodies.push(r#""type":["odd"]"#.to_owned());
            }
            _ => {
                let name = kind.name().expect("a named type");
                for v in &values {
                    let fields =
                        ["thinkingLevel", "provider", "modelId", "summary", "customType", "kind", "label", "name"]
                            .map(|f| field(f, v))
                            .join(",");
                    // Label and context-edit targets that are no entry's id, so no line gets a label.
                    bodies.push(format!(r#""type":"{name}",{fields},"targetId":{v},"content":{v}"#));
                }
                for content in &contents {
                    bodies.push(format!(r#""type":"{name}","customType":"ext","content":{content}"#));
                }
            }
        }
    }
    bodies
}

/// A session file of `bodies`, one chain: every entry is on the active path.
fn session_of(bodies: &[String]) -> String {
    let mut lines =
        vec![r#"{"type":"session","version":3,"id":"describe","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}"#
            .to_owned()];
    for (i, body) in bodies.iter().enumerate() {
        let parent = if i == 0 { "null".to_owned() } else { format!(r#""e{}""#, i - 1) };
        lines.push(format!(
            r#"{{"id":"e{i}","parentId":{parent},"timestamp":"2026-01-01T00:{:02}:{:02}.000Z",{body}}}"#,
            i / 60 % 60,
            i % 60
        ));
    }
    lines.join("\n") + "\n"
}

/// JavaScript's `String(v)`.
fn js_text(v: &Json) -> String {
    to_js_string(v).to_string_lossy()
}

/// White space runs made one space, cut after `max` characters (`…`): a custom type as the phrase holds it.
fn one_line_chars(text: &str, max: usize) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if joined.chars().count() > max {
        joined.chars().take(max).collect::<String>() + "…"
    } else {
        joined
    }
}

/// A preview cut again to `max` terminal columns, as a client with less room than the skeleton's does.
fn cut_to_columns(preview: &str, max: usize) -> String {
    let width = |c: char| unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
    if preview.chars().map(width).sum::<usize>() <= max {
        return preview.to_owned();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in preview.chars() {
        if used + width(c) > max {
            break;
        }
        out.push(c);
        used += width(c);
    }
    out + "…"
}

/// The phrase a client draws for a skeleton, from the rule the protocol documents, its preview cut to `max`
/// columns.
fn phrase_of_skeleton(skeleton: &Json, max: usize) -> String {
    let text = |k: &str| skeleton.get(k).and_then(Json::as_js_str).map(|t| t.to_string_lossy());
    let preview = cut_to_columns(&text("preview").unwrap_or_default(), max);
    match text("type").as_deref() {
        Some("message") => format!("{}: {preview}", text("role").unwrap_or_else(|| "message".into())),
        Some("thinking_level_change" | "model_change") => preview,
        Some("compaction") => format!("compaction: {preview}"),
        Some("branch_summary") => format!("branch summary: {preview}"),
        Some("custom_message") => {
            let custom_type = skeleton.get("customType").map(js_text).unwrap_or_default();
            format!("custom message ({}): {preview}", one_line_chars(&custom_type, 160))
        }
        Some("custom") => format!("custom ({preview})"),
        Some("label") => format!("label {preview}"),
        Some("session_info") => format!("name: {preview}"),
        Some("usage") => format!("usage ({preview})"),
        Some("context_edit") => format!("context edit of {preview}"),
        _ => skeleton.get("type").map(js_text).unwrap_or_default(),
    }
}

#[test]
fn the_tree_a_skeleton_and_the_web_view_describe_every_entry_type_alike_issue_25() {
    let bodies = odd_bodies();
    let file = session_of(&bodies);
    let dir = temp_dir();
    let path = dir.path().join("odd.jsonl");
    std::fs::write(&path, &file).unwrap();

    // What the command line prints, in a pipe: previews of 72 columns.
    let out = std::process::Command::new(binary())
        .args(["tree", "--filter", "all", &s(&path)])
        .env("PI_CODING_AGENT_DIR", dir.path().join("agent"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let printed: std::collections::HashMap<String, String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("• "))
        .map(|l| l.strip_suffix(" ◀ leaf").unwrap_or(l))
        .filter_map(|l| l.split_once(' ').map(|(id, phrase)| (id.to_owned(), phrase.to_owned())))
        .collect();

    // What the sidecar sends a client: the skeletons.
    let mut sc = Sidecar::new();
    let opened = sc.call("session/open", json(&format!(r#"{{"path":"{}","snapshot":"skeleton"}}"#, s(&path))));
    let skeletons = match opened.get("snapshot").and_then(|v| v.get("entries")) {
        Some(Json::Array(entries)) => entries.clone(),
        other => panic!("no snapshot: {other:?}"),
    };
    // pi reads a `session` line after the header as no entry; every other line is one.
    let lines: Vec<&str> = file.lines().skip(1).filter(|l| !l.contains(r#""type":"session""#)).collect();
    assert_eq!(skeletons.len(), lines.len());

    let mut kinds = std::collections::BTreeSet::new();
    for (skeleton, line) in skeletons.iter().zip(&lines) {
        let entry = Json::parse(line.as_bytes()).unwrap();
        assert_eq!(skeleton.get("id"), entry.get("id"));
        let kind = match entry.get("type") {
            Some(Json::String(t)) => EntryType::from_name(t.as_bytes()),
            _ => EntryType::Other,
        };
        kinds.insert(format!("{kind:?}"));
        let id = js_text(entry.get("id").unwrap());
        assert_eq!(printed.get(&id), Some(&phrase_of_skeleton(skeleton, 72)), "tree vs skeleton of {line:.300}");

        // The web view's row, from the entry as a value, against the skeleton from its line.
        let row = pi_sessiond::web::view::skeleton(&entry);
        let preview = skeleton.get("preview").cloned().unwrap_or_else(|| Json::str(""));
        assert_eq!(row.get("preview"), Some(&preview), "web row vs skeleton of {line:.300}");
        let has_text = skeleton.get("hasText").cloned().unwrap_or(Json::Bool(false));
        assert_eq!(row.get("hasText"), Some(&has_text), "web row vs skeleton of {line:.300}");
    }
    // A `session` line is a header, never an entry: no tree line, no skeleton in a snapshot. Its description is
    // still the one rule, checked through the library.
    let header = file.lines().skip(1).find(|l| l.contains(r#""type":"session""#)).expect("a session line");
    let doc = pi_sessiond::session::json::scan::scan_document(header.as_bytes()).unwrap();
    let skeleton = json(
        &String::from_utf8(pi_sessiond::session::skeleton::of_line(EntryType::Session, header.as_bytes(), &doc))
            .unwrap(),
    );
    let described = pi_sessiond::session::describe::Scanned::of_bytes(header.as_bytes().to_vec()).unwrap();
    let columns = |c: char| unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
    assert_eq!(described.describe().summary(72, columns).phrase, phrase_of_skeleton(&skeleton, 72));
    kinds.insert(format!("{:?}", EntryType::Session));

    assert_eq!(kinds.len(), EntryType::ALL.len(), "every entry type was described: {kinds:?}");
    // The odd contents were there to be seen: a wide text cut by columns, a tool call and an image shown.
    let all: Vec<&String> = printed.values().collect();
    assert!(all.iter().any(|p| p.contains("日本語") && p.ends_with('…')));
    assert!(all.iter().any(|p| p.contains("first → bash [image]")));
    assert!(all.iter().any(|p| p.starts_with("bashExecution: $ runs of white space")));
}
