//! A deterministic corpus of session files: what pi writes, what people write by hand, and what crashes and
//! old versions leave behind. Generated at test time from a seed (nothing large is committed).

use pi_sessiond::session::json::{JsString, Json, Object};

use crate::support::Mulberry;

/// A seeded random source with the helpers the generator needs.
pub struct Rng(Mulberry);

impl Rng {
    pub fn new(seed: u32) -> Rng {
        Rng(Mulberry::new(seed))
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.0.next_u32() as usize) % n.max(1)
    }
    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
    pub fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())].clone()
    }
    pub fn hex8(&mut self) -> String {
        format!("{:08x}", self.0.next_u32())
    }
}

fn obj(members: Vec<(&str, Json)>) -> Json {
    let mut o = Object::new();
    for (k, v) in members {
        o.insert(k, v);
    }
    Json::Object(o)
}

fn st(s: &str) -> Json {
    Json::str(s)
}

fn num(n: f64) -> Json {
    Json::number(n)
}

const WORDS: &[&str] = &[
    "fix",
    "the",
    "parser",
    "please",
    "héllo",
    "wörld",
    "日本語",
    "emoji 😀",
    "line\nbreak",
    "tab\there",
    "quote\"d",
    "back\\slash",
    "",
    " spaced ",
    "\u{2028}sep",
    "ok",
];

fn text(r: &mut Rng) -> Json {
    let n = 1 + r.below(4);
    let words: Vec<&str> = (0..n).map(|_| r.pick(WORDS)).collect();
    let mut s = JsString::from(words.join(" ").as_str());
    if r.chance(3) {
        s.push_code_point(0xD83D); // a lone surrogate, as pi writes when a model's output is cut mid-emoji
    }
    Json::String(s)
}

fn blocks(r: &mut Rng, kinds: &[&str]) -> Json {
    let n = 1 + r.below(3);
    Json::Array(
        (0..n)
            .map(|_| match r.pick(kinds) {
                "text" => obj(vec![("type", st("text")), ("text", text(r))]),
                "image" => {
                    obj(vec![("type", st("image")), ("data", st("aGVsbG8gd29ybGQ=")), ("mimeType", st("image/png"))])
                }
                "thinking" => obj(vec![("type", st("thinking")), ("thinking", text(r))]),
                _ => obj(vec![
                    ("type", st("toolCall")),
                    ("id", st("call_1")),
                    ("name", st("bash")),
                    ("arguments", obj(vec![("cmd", st("ls"))])),
                ]),
            })
            .collect(),
    )
}

fn usage() -> Json {
    obj(vec![
        ("input", num(10.0)),
        ("output", num(5.0)),
        ("cacheRead", num(0.0)),
        ("cacheWrite", num(0.0)),
        ("totalTokens", num(15.0)),
        ("cost", obj(vec![("input", num(0.00003)), ("output", num(0.000075)), ("total", num(0.000105))])),
    ])
}

fn message(r: &mut Rng, role: &str, ts: f64) -> Json {
    let content = match r.below(12) {
        0 => Json::Null,
        1 => st("plain string"),
        _ => match role {
            "user" => {
                if r.chance(50) {
                    text(r)
                } else {
                    blocks(r, &["text", "image"])
                }
            }
            "assistant" => blocks(r, &["text", "thinking", "toolCall"]),
            "toolResult" => blocks(r, &["text", "image"]),
            "system" => {
                if r.chance(70) {
                    text(r)
                } else {
                    blocks(r, &["text"])
                }
            }
            _ => text(r),
        },
    };
    let mut m = vec![("role", st(role))];
    if !r.chance(4) {
        m.push(("content", content));
    }
    match role {
        "assistant" => {
            m.push(("provider", st(r.pick(&["anthropic", "openai"]))));
            m.push(("model", st(r.pick(&["claude-x", "gpt-y"]))));
            m.push(("usage", usage()));
            m.push(("stopReason", st("stop")));
        }
        "toolResult" => {
            m.push(("toolCallId", st("call_1")));
            m.push(("toolName", st("bash")));
            m.push(("isError", Json::Bool(false)));
        }
        "system" => {
            if r.chance(60) {
                m.push(("sections", obj(vec![("a", text(r)), ("b", if r.chance(30) { Json::Null } else { text(r) })])));
            }
            if r.chance(50) {
                m.push(("toolsAdded", Json::Array(vec![obj(vec![("name", st(r.pick(&["read", "write", "bash"])))])])));
            }
            if r.chance(30) {
                m.push(("toolsRemoved", Json::Array(vec![obj(vec![("name", st(r.pick(&["read", "write"])))])])));
            }
        }
        "bashExecution" => {
            m.push(("command", st("ls")));
            m.push(("output", st("a\nb")));
            m.push(("exitCode", num(0.0)));
        }
        "custom" | "hookMessage" => {
            m.push(("customType", st("ext")));
            m.push(("display", Json::Bool(true)));
        }
        _ => {}
    }
    match r.below(10) {
        0 => {}
        1 => m.push(("timestamp", st("not a number"))),
        2 => m.push(("timestamp", num(0.0))),
        _ => m.push(("timestamp", num(ts))),
    }
    obj(m)
}

fn iso(ms: f64) -> String {
    pi_sessiond::session::js::date::to_iso_string(ms).unwrap()
}

/// The `timestamp` member of an entry: mostly ISO, sometimes what hand-edited files hold.
fn entry_timestamp(r: &mut Rng, ms: f64, base_ms: f64) -> Option<Json> {
    match r.below(40) {
        0 => None,
        1 => Some(st("garbage")),
        2 => Some(num(ms)),
        3 => Some(st(&iso(base_ms))), // ties with other entries
        4 => Some(st("2025-03-04")),
        5 => Some(st("Tue, 04 Mar 2025 10:00:00 GMT")),
        _ => Some(st(&iso(ms))),
    }
}

/// Options for one generated file.
#[derive(Clone, Copy)]
pub struct Shape {
    /// Entries to generate.
    pub entries: usize,
    /// Hand-edited oddities (missing/duplicate/numeric ids, odd timestamps, orphans).
    pub hand_written: bool,
}

/// One session as lines of JSON (header first), in v3 form.
pub fn session_lines(r: &mut Rng, shape: Shape) -> Vec<Json> {
    let base = 1_735_000_000_000.0 + (r.below(1000) as f64) * 86_400_000.0;
    let mut lines = vec![obj(vec![
        ("type", st("session")),
        ("version", num(3.0)),
        ("id", st(&format!("{}-0000-7000-8000-000000000000", r.hex8()))),
        ("timestamp", st(&iso(base))),
        ("cwd", st(r.pick(&["/home/u/proj", "/tmp/x", "", "relative/dir"]))),
    ])];
    if r.chance(20) {
        if let Json::Object(o) = &mut lines[0] {
            o.insert("parentSession", st("/somewhere/parent.jsonl"));
        }
    }
    let mut ids: Vec<Json> = Vec::new();
    let mut parent: Json = Json::Null;
    for n in 0..shape.entries {
        let ms = base + (n as f64 + 1.0) * 1000.0 + r.below(500) as f64;
        let mut id = st(&r.hex8());
        if shape.hand_written {
            match r.below(90) {
                0 if !ids.is_empty() => id = r.pick(&ids),
                1 => id = num(r.below(100) as f64),
                2 => id = st(""),
                _ => {}
            }
        }
        // Tree shape: mostly a chain, sometimes a branch from an earlier entry, a new root, or a missing parent.
        let parent_id = match r.below(20) {
            0 if !ids.is_empty() => r.pick(&ids),
            1 => Json::Null,
            2 if shape.hand_written => st("ffffffff"),
            3 if shape.hand_written => st(""),
            _ => parent.clone(),
        };
        let ts = if shape.hand_written { entry_timestamp(r, ms, base) } else { Some(st(&iso(ms))) };
        let kind = r.pick(&[
            "user",
            "assistant",
            "assistant",
            "toolResult",
            "user",
            "system",
            "bash",
            "custom_role",
            "thinking",
            "model",
            "usage",
            "compaction",
            "branch_summary",
            "custom",
            "custom_message",
            "context_edit",
            "label",
            "session_info",
        ]);
        let mut m: Vec<(&str, Json)> = Vec::new();
        let (ty, tail_first): (&str, bool) = match kind {
            "custom" | "custom_message" => (kind, true),
            "thinking" => ("thinking_level_change", false),
            "model" => ("model_change", false),
            "user" | "assistant" | "toolResult" | "system" | "bash" | "custom_role" => ("message", false),
            other => (other, false),
        };
        m.push(("type", st(ty)));
        let mut fields: Vec<(&str, Json)> = Vec::new();
        match kind {
            "user" | "assistant" | "toolResult" | "system" => fields.push(("message", message(r, kind, ms))),
            "bash" => fields.push(("message", message(r, "bashExecution", ms))),
            "custom_role" => fields.push(("message", message(r, "custom", ms))),
            "thinking" => fields.push(("thinkingLevel", st(r.pick(&["off", "low", "high"])))),
            "model" => {
                fields.push(("provider", st("openai")));
                fields.push(("modelId", st("gpt-4")));
            }
            "usage" => {
                fields.push(("kind", st("cache_warm")));
                fields.push(("provider", st("anthropic")));
                fields.push(("model", st("claude-x")));
                fields.push(("usage", usage()));
            }
            "compaction" => {
                fields.push(("summary", text(r)));
                let first_kept = match r.below(5) {
                    0 => id.clone(),
                    1 => st("nowhere1"),
                    _ if !ids.is_empty() => r.pick(&ids),
                    _ => id.clone(),
                };
                fields.push(("firstKeptEntryId", first_kept));
                fields.push(("tokensBefore", num(1234.0)));
                if r.chance(30) {
                    fields.push(("systemMessage", message(r, "system", ms)));
                }
                if r.chance(20) {
                    let tail = vec![message(r, "user", ms), message(r, "assistant", ms)];
                    fields.push(("retainedTail", Json::Array(tail)));
                }
            }
            "branch_summary" => {
                fields.push(("fromId", st("root")));
                fields.push(("summary", if r.chance(20) { st("") } else { text(r) }));
            }
            "custom" => {
                fields.push(("customType", st("ext")));
                if r.chance(70) {
                    fields.push(("data", obj(vec![("n", num(1.0))])));
                }
            }
            "custom_message" => {
                fields.push(("customType", st("ext")));
                if !r.chance(10) {
                    fields.push(("content", if r.chance(50) { text(r) } else { blocks(r, &["text", "image"]) }));
                }
                fields.push(("display", Json::Bool(r.chance(50))));
            }
            "context_edit" => {
                let target = if ids.is_empty() { st("x") } else { r.pick(&ids) };
                fields.push(("targetId", target));
                let replacement = match r.below(3) {
                    0 => Json::Null,
                    1 => obj(vec![("content", text(r))]),
                    _ => obj(vec![("content", blocks(r, &["text"]))]),
                };
                fields.push(("replacement", replacement));
            }
            "label" => {
                let target = if ids.is_empty() { st("x") } else { r.pick(&ids) };
                fields.push(("targetId", target));
                match r.below(5) {
                    0 => {}
                    1 => fields.push(("label", st(""))),
                    _ => fields.push(("label", st(r.pick(&["checkpoint", "  spaced  ", "v2"])))),
                }
            }
            "session_info" if !r.chance(10) => {
                fields.push(("name", st(r.pick(&["  My Session ", "", "Later name", "   "]))));
            }
            _ => {}
        }
        let mut common: Vec<(&str, Json)> = Vec::new();
        if !(shape.hand_written && r.chance(3)) {
            common.push(("id", id.clone()));
        }
        if !(shape.hand_written && r.chance(2)) {
            common.push(("parentId", parent_id));
        }
        if let Some(t) = ts {
            common.push(("timestamp", t));
        }
        if tail_first {
            m.extend(fields);
            m.extend(common);
        } else {
            m.extend(common);
            m.extend(fields);
        }
        lines.push(obj(m));
        ids.push(id.clone());
        parent = id;
    }
    lines
}

/// Serialises lines as pi does: compact JSON, one per line, `\n` after each.
pub fn to_bytes(lines: &[Json]) -> Vec<u8> {
    let mut out = Vec::new();
    for l in lines {
        l.write_canonical(&mut out);
        out.push(b'\n');
    }
    out
}

/// Turns v3 lines into a v1 file (no version, no ids, a linear log; compactions point by index).
pub fn as_v1(r: &mut Rng, lines: &[Json]) -> Vec<Json> {
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let Json::Object(o) = l else { continue };
        let mut o = o.clone();
        if i == 0 {
            o.remove("version");
            if r.chance(30) {
                o.insert("provider", st("anthropic"));
                o.insert("modelId", st("claude"));
                o.insert("thinkingLevel", st("off"));
            }
        } else {
            o.remove("id");
            o.remove("parentId");
            if o.get("type") == Some(&st("compaction")) {
                o.remove("firstKeptEntryId");
                let idx = match r.below(5) {
                    0 => num(0.0),
                    1 => num(999.0),
                    2 => st("2"),
                    3 => num(1.5),
                    _ => num((1 + r.below(i.max(1))) as f64),
                };
                o.insert("firstKeptEntryIndex", idx);
            }
        }
        out.push(Json::Object(o));
    }
    out
}

/// Turns v3 lines into a v2 file (version 2; custom-role messages were `hookMessage`).
pub fn as_v2(lines: &[Json]) -> Vec<Json> {
    lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let Json::Object(o) = l else { return l.clone() };
            let mut o = o.clone();
            if i == 0 {
                o.insert("version", num(2.0));
            }
            if let Some(Json::Object(m)) = o.get_mut("message") {
                if m.get("role") == Some(&st("custom")) {
                    m.insert("role", st("hookMessage"));
                }
            }
            Json::Object(o)
        })
        .collect()
}

/// The kinds of damage applied to files.
pub const DAMAGE: &[&str] = &[
    "malformed-middle",
    "truncated-tail",
    "no-final-newline",
    "bom",
    "crlf",
    "blank-lines",
    "non-object-lines",
    "garbage-before-header",
    "duplicate-header",
    "invalid-utf8",
    "raw-u2028",
    "spaced-json",
    "escaped-keys",
];

/// Applies one kind of damage to a file's bytes.
pub fn damage(r: &mut Rng, kind: &str, bytes: Vec<u8>) -> Vec<u8> {
    let mut lines: Vec<Vec<u8>> = bytes.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
    if lines.last().is_some_and(Vec::is_empty) {
        lines.pop();
    }
    let join = |lines: &[Vec<u8>]| {
        let mut out = Vec::new();
        for l in lines {
            out.extend_from_slice(l);
            out.push(b'\n');
        }
        out
    };
    match kind {
        "malformed-middle" => {
            let at = 1 + r.below(lines.len());
            let garbage: &[u8] =
                r.pick(&[&b"{\"type\":\"message\",\"id\":"[..], b"not json at all", b"{\"a\":1,}", b"[1,2"]);
            lines.insert(at.min(lines.len()), garbage.to_vec());
            join(&lines)
        }
        "truncated-tail" => {
            let mut out = join(&lines);
            if let Some(last) = lines.last() {
                let cut = 1 + r.below(last.len().saturating_sub(1).max(1));
                out.truncate(out.len() - 1 - (last.len() - cut));
            }
            out
        }
        "no-final-newline" => {
            let mut out = join(&lines);
            out.pop();
            out
        }
        "bom" => {
            let mut out = "\u{feff}".as_bytes().to_vec();
            out.extend(join(&lines));
            out
        }
        "crlf" => lines.iter().flat_map(|l| l.iter().copied().chain(*b"\r\n")).collect(),
        "blank-lines" => {
            for _ in 0..3 {
                let at = r.below(lines.len() + 1);
                lines.insert(at, r.pick(&[&b""[..], b"   ", b"\t", "\u{a0}".as_bytes()]).to_vec());
            }
            join(&lines)
        }
        "non-object-lines" => {
            for _ in 0..2 {
                let at = 1 + r.below(lines.len());
                lines.insert(
                    at.min(lines.len()),
                    r.pick(&[&b"42"[..], b"\"str\"", b"[1,2]", b"null", b"0", b"true", b"\"\""]).to_vec(),
                );
            }
            join(&lines)
        }
        "garbage-before-header" => {
            lines.insert(0, r.pick(&[&b"garbage"[..], b"", b"null"]).to_vec());
            join(&lines)
        }
        "duplicate-header" => {
            let header = lines[0].clone();
            let at = 1 + r.below(lines.len());
            lines.insert(at.min(lines.len()), header);
            join(&lines)
        }
        "invalid-utf8" => {
            // Bytes that are not UTF-8 inside string values: still JSON once decoded (they become U+FFFD).
            let out = join(&lines);
            let pat = b"\"text\":\"";
            let mut res = Vec::with_capacity(out.len() + 64);
            let mut i = 0;
            while i < out.len() {
                if out[i..].starts_with(pat) {
                    res.extend_from_slice(pat);
                    res.extend_from_slice(b"\xff\xfe\xed\xa0\x80");
                    i += pat.len();
                } else {
                    res.push(out[i]);
                    i += 1;
                }
            }
            res
        }
        "raw-u2028" => String::from_utf8_lossy(&join(&lines)).replace("\\u2028", "\u{2028}").into_bytes(),
        "spaced-json" => {
            let out = join(&lines);
            String::from_utf8_lossy(&out).replace("\",\"", "\" , \"").replace("{\"", "{ \"").into_bytes()
        }
        "escaped-keys" => escape_keys(r, &join(&lines), 50),
        _ => unreachable!("{kind}"),
    }
}

/// `bytes` with the keys of [`ESCAPABLE_KEYS`] spelled as another JSON writer (or a hand edit) may spell them,
/// each with `percent` chance: `"m\u0065ssage"` is `message` to `JSON.parse`. An unescaped `"` always starts or
/// ends a string, so `"name":` not after a backslash is a key.
pub fn escape_keys(r: &mut Rng, bytes: &[u8], percent: usize) -> Vec<u8> {
    let mut res = Vec::with_capacity(bytes.len() + 256);
    let mut i = 0;
    while i < bytes.len() {
        let key = ESCAPABLE_KEYS.iter().find(|k| {
            bytes[i..].starts_with(b"\"")
                && bytes[i + 1..].starts_with(k.as_bytes())
                && bytes[i + 1 + k.len()..].starts_with(b"\":")
                && (i == 0 || bytes[i - 1] != b'\\')
        });
        match key {
            Some(k) if r.chance(percent) => {
                res.push(b'"');
                res.push(k.as_bytes()[0]);
                res.extend_from_slice(format!("\\u{:04x}", k.as_bytes()[1]).as_bytes());
                res.extend_from_slice(&k.as_bytes()[2..]);
                i += 1 + k.len();
            }
            _ => {
                res.push(bytes[i]);
                i += 1;
            }
        }
    }
    res
}

/// Keys [`escape_keys`] spells with an escape: the ones every read looks for, on entries, messages and blocks.
const ESCAPABLE_KEYS: &[&str] = &[
    "type",
    "id",
    "parentId",
    "timestamp",
    "message",
    "role",
    "content",
    "text",
    "name",
    "stopReason",
    "cwd",
    "version",
    "summary",
    "targetId",
    "label",
    "customType",
    "firstKeptEntryId",
];

/// Entries pi 1.6.0 loads but some of whose reads throw on (a `TypeError` in pi): a context edit without
/// `replacement` (the private corpus's h27), a message entry without `message` or with `message: null`, a
/// session name that is not a string. Kept out of [`session_lines`], so the other corpora stay as they are.
pub const UNUSABLE: &[&str] =
    &["context-edit-without-replacement", "message-without-message", "null-message", "non-string-name"];

/// Adds one entry of `kind` (one of [`UNUSABLE`]) to a session's lines: appended as the new leaf, or put in the
/// middle of the chain (its successor re-parented under it), so it is on the active path about half the time.
pub fn with_unusable_entry(r: &mut Rng, kind: &str, mut lines: Vec<Json>) -> Vec<Json> {
    let ids: Vec<Json> = lines.iter().skip(1).filter_map(|l| l.get("id").cloned()).collect();
    let id = st(&format!("u{}", &r.hex8()[..7]));
    let at = if r.chance(50) { lines.len() } else { 1 + r.below(lines.len()) };
    let parent = lines[at - 1].get("id").cloned().filter(|_| at > 1).unwrap_or(Json::Null);
    let timestamp = lines[at - 1].get("timestamp").cloned().unwrap_or_else(|| st("2025-01-01T00:00:00.000Z"));
    let mut m = vec![("type", st("message")), ("id", id.clone()), ("parentId", parent), ("timestamp", timestamp)];
    match kind {
        "context-edit-without-replacement" => {
            m[0].1 = st("context_edit");
            m.push(("targetId", if ids.is_empty() { st("x") } else { r.pick(&ids) }));
        }
        "message-without-message" => {}
        "null-message" => m.push(("message", Json::Null)),
        "non-string-name" => {
            m[0].1 = st("session_info");
            let name = r.pick(&[num(5.0), Json::Bool(true), obj(vec![("a", num(1.0))]), Json::Array(vec![st("x")])]);
            m.push(("name", name));
        }
        _ => unreachable!("{kind}"),
    }
    if let Some(Json::Object(next)) = lines.get_mut(at) {
        next.insert("parentId", id);
    }
    lines.insert(at, obj(m));
    lines
}
