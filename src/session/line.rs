//! One line of a session file → a [`Record`], or the reason it is not one.
//!
//! pi reads a line with `JSON.parse(line)` after skipping blank lines, and keeps every *truthy* result: objects,
//! but also `42`, `"text"` or `[1]`. It skips lines that do not parse without a word. We classify each line the
//! same way ([`LineOutcome`]) so the entries agree with pi's, and keep the non-entries so they can be reported and
//! preserved rather than dropped.

use super::entry::{
    Body, CompactionDetail, ContextEditDetail, Detail, EntryType, LabelDetail, MessageShape, Record, Role,
};
use super::js::date;
use super::json::scan::{find_member, Document, DocumentScanner, Kind, Member, SyntaxError};
use super::json::string::is_js_whitespace;
use super::json::value::number_value;
use super::json::{JsString, Json};
use super::key::Key;
use super::skeleton;

/// What one physical line is, to pi.
// An entry's record is not boxed: outcomes are made and consumed a batch at a time, and a box was one more
// allocation and copy for every line of every open.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum LineOutcome {
    /// Empty or only white space (JavaScript's `trim()` leaves nothing): skipped, harmless.
    Blank,
    /// Not JSON: pi skips it silently; we report it.
    Malformed(SyntaxError),
    /// Longer than [`super::store::MAX_LINE_BYTES`]: never read (pi cannot hold it in a string and fails to open
    /// the file); we report it as malformed.
    TooLong,
    /// Valid JSON whose value is falsy (`null`, `false`, `0`, `""`): pi skips it.
    Falsy,
    /// An entry or header.
    Record(Record),
}

/// True when `bytes`, decoded as pi decodes them, is empty after JavaScript's `trim()`.
pub fn is_blank(bytes: &[u8]) -> bool {
    // Decide on the first byte that is not ASCII white space: almost always `{`, so no scan of the whole line.
    match bytes.iter().find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0B | 0x0C)) {
        None => return true,
        Some(b) if b.is_ascii() => return false,
        Some(_) => {}
    }
    let mut s = JsString::new();
    s.push_bytes_lossy(bytes);
    s.code_points().all(is_js_whitespace)
}

/// True when a valid JSON value is falsy to JavaScript (`null`, `false`, `0`, `""`), so pi skips its line.
pub fn is_falsy(value: &[u8]) -> bool {
    match Kind::of(value) {
        Kind::Object | Kind::Array => false,
        Kind::String => value.len() <= 2,
        Kind::Number => {
            let n = number_value(std::str::from_utf8(value).unwrap_or("0"));
            n == 0.0 || n.is_nan()
        }
        Kind::Bool => value != b"true",
        Kind::Null => true,
    }
}

/// Classifies one line (without its `\n`) and, for entries, extracts the skeleton.
pub fn parse_line(bytes: &[u8], line: u32, body: Body) -> LineOutcome {
    parse_line_with(&mut LineScanner::default(), bytes, line, body)
}

/// What [`parse_line_with`] reuses from line to line: the scanner's lists, the buffers a skeleton and its preview
/// are written in, the chunk skeletons are kept in; and whether it makes skeletons at all.
#[derive(Debug)]
pub struct LineScanner {
    scanner: DocumentScanner,
    skeleton: Vec<u8>,
    preview: String,
    kept: SkeletonChunks,
    skeletons: bool,
}

impl Default for LineScanner {
    fn default() -> Self {
        LineScanner::new(true)
    }
}

impl LineScanner {
    /// A scanner whose records carry their skeleton, or (`skeletons` false, for a host that never asks for them)
    /// none: a third of a cold open's work and most of what an open session holds beside its index.
    pub fn new(skeletons: bool) -> Self {
        LineScanner {
            scanner: DocumentScanner::default(),
            skeleton: Vec::new(),
            preview: String::new(),
            kept: SkeletonChunks::new(),
            skeletons,
        }
    }

    /// A new scanner making skeletons as this one does (for another thread).
    pub fn fresh(&self) -> Self {
        LineScanner::new(self.skeletons)
    }
}

/// Skeletons kept side by side in shared chunks, each record's a slice of one: an allocation per skeleton was a
/// third of a cold open's 27,000 `malloc`s, and the two threads reading a file's halves share one of the
/// process's two malloc arenas (`main.rs`, `tune_malloc`), so they waited on its lock. A chunk is freed with
/// the last record pointing into it; records of one read live and go together. A scanner's first skeleton is
/// copied at its size, as every entry appended through `parse_line` is the only one its scanner makes (a chunk
/// for it kept a kilobyte for a 300-byte skeleton); chunks start with the second and grow from small.
#[derive(Debug)]
struct SkeletonChunks {
    chunk: bytes::BytesMut,
    next_capacity: usize,
    any_kept: bool,
}

impl SkeletonChunks {
    /// The first chunk's size; each next one is twice the last, up to [`SkeletonChunks::MOST`].
    const FIRST: usize = 1 << 10;
    /// The largest chunk: a 40 MB session's 1.7 MB of skeletons in 27 chunks.
    const MOST: usize = 64 << 10;

    fn new() -> Self {
        SkeletonChunks { chunk: bytes::BytesMut::new(), next_capacity: Self::FIRST, any_kept: false }
    }

    /// `skeleton`, copied at its size (the first) or into the current chunk (or a new one when it has no room).
    fn keep(&mut self, skeleton: &[u8]) -> bytes::Bytes {
        if !std::mem::replace(&mut self.any_kept, true) {
            return bytes::Bytes::copy_from_slice(skeleton);
        }
        if self.chunk.capacity() - self.chunk.len() < skeleton.len() {
            self.chunk = bytes::BytesMut::with_capacity(self.next_capacity.max(skeleton.len()));
            self.next_capacity = (self.next_capacity * 2).min(Self::MOST);
        }
        self.chunk.extend_from_slice(skeleton);
        self.chunk.split().freeze()
    }
}

/// [`parse_line`] reusing `scanner`, as a thread reading many lines does.
pub fn parse_line_with(scanner: &mut LineScanner, bytes: &[u8], line: u32, body: Body) -> LineOutcome {
    if is_blank(bytes) {
        return LineOutcome::Blank;
    }
    let LineScanner { scanner, skeleton: skeleton_buffer, preview, kept, skeletons } = scanner;
    let mut skeleton_of = |kind: EntryType, doc: &Document| {
        if !*skeletons {
            return None;
        }
        skeleton_buffer.clear();
        skeleton::write_line(kind, bytes, doc, skeleton_buffer, preview);
        Some(kept.keep(skeleton_buffer))
    };
    let doc = match scanner.scan(bytes) {
        Ok(doc) => doc,
        Err(e) => return LineOutcome::Malformed(e),
    };
    let value = &bytes[doc.value.clone()];
    let truthy = !is_falsy(value);
    if !truthy {
        return LineOutcome::Falsy;
    }
    let mut record = Record {
        line,
        body,
        is_object: false,
        is_array: Kind::of(value) == Kind::Array,
        kind: EntryType::Other,
        id: Key::Undefined,
        parent: Key::Undefined,
        time_ms: f64::NAN,
        message: MessageShape::Missing,
        role: Role::Other,
        content_nullish: false,
        detail: Detail::None,
        long_strings: None,
        skeleton: None,
    };
    if Kind::of(value) != Kind::Object {
        record.skeleton = skeleton_of(EntryType::Other, doc);
        // `42.id`, `"x".type`, `[1].parentId` are all undefined to pi, and `new Date(undefined)` is invalid.
        return LineOutcome::Record(record);
    }
    record.is_object = true;
    if !doc.long_strings.is_empty() && u32::try_from(bytes.len()).is_ok() {
        record.long_strings = Some(doc.long_strings.iter().map(|r| (r.start as u32, r.end as u32)).collect());
    }
    let members = &doc.members;
    let member = |name: &str| find_member(bytes, members, name).map(|r| &bytes[r]);
    record.kind = EntryType::of_value(member("type"));
    if record.kind == EntryType::Session {
        let header = Json::parse(value).expect("validated line");
        record.id = Key::from_json(header.get("id"));
        record.parent = Key::from_json(header.get("parentId"));
        record.time_ms = new_date_ms(header.get("timestamp"));
        record.detail = Detail::Header(Box::new(header));
        return LineOutcome::Record(record);
    }
    record.id = member("id").map(Key::from_raw).unwrap_or(Key::Undefined);
    record.parent = member("parentId").map(Key::from_raw).unwrap_or(Key::Undefined);
    let timestamp = member("timestamp");
    record.time_ms = date_ms_of_raw(timestamp);
    match record.kind {
        EntryType::Message => {
            let (shape, role) = message_shape(bytes, member("message"), &doc.message_members);
            record.message = shape;
            record.role = role;
            record.content_nullish = shape == MessageShape::Object
                && find_member(bytes, &doc.message_members, "content").is_none_or(|r| &bytes[r] == b"null");
        }
        EntryType::Label => {
            record.detail = Detail::Label(Box::new(LabelDetail {
                target: member("targetId").map(Key::from_raw).unwrap_or(Key::Undefined),
                label: member("label").map(parse_small),
                timestamp: timestamp.map(parse_small),
            }))
        }
        EntryType::SessionInfo => record.detail = Detail::SessionInfo(member("name").map(|v| Box::new(parse_small(v)))),
        EntryType::Compaction => {
            record.detail = Detail::Compaction(Box::new(CompactionDetail {
                first_kept: member("firstKeptEntryId").map(Key::from_raw).unwrap_or(Key::Undefined),
                first_kept_index: member("firstKeptEntryIndex")
                    .filter(|v| Kind::of(v) == Kind::Number)
                    .map(|v| number_value(std::str::from_utf8(v).unwrap_or("NaN"))),
            }))
        }
        EntryType::ContextEdit => {
            record.detail = Detail::ContextEdit(Box::new(ContextEditDetail {
                target: member("targetId").map(Key::from_raw).unwrap_or(Key::Undefined),
                has_replacement: member("replacement").is_some(),
            }))
        }
        // Named one by one, so an entry type pi adds is a decision about what its record keeps.
        EntryType::Session
        | EntryType::ThinkingLevelChange
        | EntryType::ModelChange
        | EntryType::Usage
        | EntryType::BranchSummary
        | EntryType::Custom
        | EntryType::CustomMessage
        | EntryType::Other => {}
    }
    record.skeleton = skeleton_of(record.kind, doc);
    LineOutcome::Record(record)
}

/// What is wrong with an entry that pi loads but some of whose reads throw on it (a `TypeError` in pi 1.6.0), for
/// a load warning; None for an entry every read can use. Such entries do not stop a file from opening: only the
/// reads that meet them fail, and they fail naming the entry.
pub fn unusable_entry(record: &Record) -> Option<&'static str> {
    match (&record.kind, &record.detail) {
        (EntryType::Message, _) if record.message.property_access_throws() => Some(
            "message entry has no message object: pi 1.6.0's buildSessionProjection and buildSessionContext (and \
             buildContextEntries after a compaction) throw while it is on the active path, and so does the first \
             write of a session holding it; those fail here with an error naming it",
        ),
        (EntryType::ContextEdit, Detail::ContextEdit(e)) if !e.has_replacement => Some(
            "context edit has no replacement: pi 1.6.0's buildSessionProjection and buildSessionContext throw while \
             it applies to a message on the active path; those fail here with an error naming it",
        ),
        (EntryType::SessionInfo, Detail::SessionInfo(Some(name)))
            if !matches!(**name, Json::Null | Json::String(_)) =>
        {
            Some(
                "session_info name is not a string: pi 1.6.0's getSessionName throws while it is the latest \
                 session_info; it fails here with an error naming it",
            )
        }
        _ => None,
    }
}

fn message_shape(bytes: &[u8], message: Option<&[u8]>, members: &[Member]) -> (MessageShape, Role) {
    match message.map(Kind::of) {
        None => (MessageShape::Missing, Role::Other),
        Some(Kind::Null) => (MessageShape::Null, Role::Other),
        Some(Kind::Object) => {
            (MessageShape::Object, Role::of_value(find_member(bytes, members, "role").map(|r| &bytes[r])))
        }
        Some(_) => (MessageShape::Primitive, Role::Other),
    }
}

/// Parses a small validated value (a timestamp, a label, a name).
fn parse_small(raw: &[u8]) -> Json {
    Json::parse(raw).expect("validated member")
}

/// [`new_date_ms`] of a member's raw JSON value. A string literal without escapes (every timestamp pi writes) is
/// parsed where it lies: making a value of it first was an allocation for every line of every open.
fn date_ms_of_raw(raw: Option<&[u8]>) -> f64 {
    let literal = raw.and_then(|r| r.strip_prefix(b"\"")).and_then(|r| r.strip_suffix(b"\""));
    if let Some(text) = literal.filter(|t| !t.contains(&b'\\')).and_then(|t| std::str::from_utf8(t).ok()) {
        return date::parse_date(text);
    }
    new_date_ms(raw.map(parse_small).as_ref())
}

/// `new Date(value).getTime()` for a JSON value (`undefined` when None).
pub fn new_date_ms(value: Option<&Json>) -> f64 {
    match value {
        None => f64::NAN,
        Some(Json::Null) => 0.0,
        Some(Json::Bool(b)) => f64::from(u8::from(*b)),
        Some(Json::Number(n)) => date::time_clip(number_value(n)),
        Some(Json::String(s)) => date::parse_date(&s.to_string_lossy()),
        // ToPrimitive: arrays become their joined elements, plain objects "[object Object]".
        Some(v @ Json::Array(_)) => date::parse_date(&super::js::to_js_string(v).to_string_lossy()),
        Some(Json::Object(_)) => f64::NAN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(s: &str) -> Record {
        match parse_line(s.as_bytes(), 1, Body::memory(s.as_bytes().to_vec())) {
            LineOutcome::Record(r) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_scanner_told_to_make_no_skeletons_gives_the_same_record_without_one() {
        let line = r#"{"type":"message","id":"a","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z","message":{"role":"user","content":"hi","timestamp":1}}"#;
        let with = record(line);
        let LineOutcome::Record(without) =
            parse_line_with(&mut LineScanner::new(false), line.as_bytes(), 1, Body::memory(line.as_bytes().to_vec()))
        else {
            panic!("a record")
        };
        assert!(with.skeleton.is_some());
        assert!(without.skeleton.is_none());
        assert_eq!(format!("{:?}", Record { skeleton: None, ..with }), format!("{without:?}"));
    }

    #[test]
    fn skeletons_kept_in_shared_chunks_are_each_lines_own_across_chunks_and_past_the_largest() {
        let mut scanner = LineScanner::default();
        let mut kept = Vec::new();
        // Small skeletons fill and spill several chunks; a label of 100 KB makes one larger than any chunk.
        let lines: Vec<String> = (0..600)
            .map(|i| {
                let label = if i == 300 { "x".repeat(100_000) } else { format!("label {i}") };
                format!(
                    r#"{{"type":"label","id":"e{i}","parentId":"e{}","timestamp":"2026-01-01T00:00:00.000Z","targetId":"e0","label":"{label}"}}"#,
                    i.max(1) - 1
                )
            })
            .collect();
        for (i, line) in lines.iter().enumerate() {
            match parse_line_with(&mut scanner, line.as_bytes(), i as u32 + 1, Body::memory(line.as_bytes().to_vec())) {
                LineOutcome::Record(r) => kept.push(r.skeleton.expect("a skeleton")),
                other => panic!("{other:?}"),
            }
        }
        for (line, skeleton) in lines.iter().zip(&kept) {
            let doc = DocumentScanner::default().scan(line.as_bytes()).unwrap().clone();
            assert_eq!(&skeleton[..], &skeleton::of_line(EntryType::Label, line.as_bytes(), &doc)[..]);
        }
        assert!(kept[300].len() > SkeletonChunks::MOST);
    }

    #[test]
    fn the_skeleton_of_an_entry_parsed_alone_holds_no_more_than_its_size() {
        // Every entry appended is parsed alone (`parse_line`); a chunk for it would keep a kilobyte.
        let line = r#"{"type":"message","id":"a","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z","message":{"role":"user","content":"hi","timestamp":1}}"#;
        let skeleton = record(line).skeleton.expect("a skeleton");
        let len = skeleton.len();
        let held = skeleton.try_into_mut().expect("the only reference").capacity();
        assert_eq!(held, len);
    }

    #[test]
    fn a_timestamp_read_where_it_lies_is_the_date_its_value_gives() {
        let raws: [&[u8]; 16] = [
            br#""2025-10-09T08:53:21.500Z""#,
            br#""2025-10-09T08:53:21.500+02:00""#,
            br#""2025\u002d10-09T08:53:21.500Z""#,
            br#""Thu, 09 Oct 2025 08:53:21 GMT""#,
            br#""2025-10-09""#,
            br#""not a date""#,
            br#""""#,
            br#"" 2025-10-09T08:53:21Z ""#,
            br#""\ud800""#,
            b"\"2025-10-09T08:53:21.500Z\xff\"",
            b"1760000001500",
            b"-0",
            b"null",
            b"true",
            b"[2025,10]",
            br#"{"a":1}"#,
        ];
        for raw in raws {
            let by_value = new_date_ms(Some(&parse_small(raw)));
            let in_place = date_ms_of_raw(Some(raw));
            assert!(
                by_value.to_bits() == in_place.to_bits(),
                "{}: {by_value} by value, {in_place} in place",
                String::from_utf8_lossy(raw)
            );
        }
        assert!(date_ms_of_raw(None).is_nan());
        assert_eq!(date_ms_of_raw(Some(br#""2025-10-09T08:53:21.500Z""#)), 1_760_000_001_500.0);
    }

    #[test]
    fn blank_lines_include_javascript_white_space() {
        assert!(is_blank(b""));
        assert!(is_blank(b" \r"));
        assert!(is_blank("\u{feff}\u{a0}".as_bytes()));
        assert!(!is_blank(b"{}"));
    }

    #[test]
    fn falsy_json_values_are_not_entries() {
        for s in ["null", "false", "0", "-0.0", "\"\"", "1e-400"] {
            assert!(matches!(parse_line(s.as_bytes(), 1, Body::memory(vec![])), LineOutcome::Falsy), "{s}");
        }
    }

    #[test]
    fn malformed_lines_are_reported_not_dropped() {
        assert!(matches!(parse_line(b"{\"type\":", 1, Body::memory(vec![])), LineOutcome::Malformed(_)));
        assert!(matches!(parse_line("\u{feff}{}".as_bytes(), 1, Body::memory(vec![])), LineOutcome::Malformed(_)));
    }

    #[test]
    fn skeleton_reads_ids_type_role_and_last_duplicate() {
        let r = record(
            r#"{"type":"message","id":"a","id":"b","parentId":null,"timestamp":"2025-01-02T00:00:00.000Z","message":{"role":"user","content":"x"}}"#,
        );
        assert_eq!(r.kind, EntryType::Message);
        assert_eq!(r.id, Key::str("b"));
        assert_eq!(r.parent, Key::Null);
        assert_eq!(r.time_ms, 1735776000000.0);
        assert_eq!((r.message, r.role), (MessageShape::Object, Role::User));
    }

    #[test]
    fn a_type_and_a_role_are_read_as_json_parse_reads_them_however_they_are_written() {
        let r = record(r#"{"type":"m\u0065ssage","id":"a","message":{"role":"\u0075\u0073er","content":"x"}}"#);
        assert_eq!((r.kind, r.role), (EntryType::Message, Role::User));
        let r = record(r#"{"type":"label","id":"a","targetId":"b","label":"x"}"#);
        assert_eq!(r.kind, EntryType::Label);
        // Near misses, and bytes that are not UTF-8 (U+FFFD to pi), are no known type or role.
        for (kind, role) in [("messages", "use"), ("Message", "User"), (r"mess\u00e1ge", r"us\u0000er")] {
            let r = record(&format!(r#"{{"type":"{kind}","id":"a","message":{{"role":"{role}","content":"x"}}}}"#));
            assert_eq!((r.kind, r.role), (EntryType::Other, Role::Other), "{kind} {role}");
        }
        let mut bytes = br#"{"type":"messag","id":"a"}"#.to_vec();
        bytes.insert(15, 0xE9);
        match parse_line(&bytes, 1, Body::memory(vec![])) {
            LineOutcome::Record(r) => assert_eq!(r.kind, EntryType::Other),
            _ => panic!("an entry"),
        }
    }

    #[test]
    fn non_object_values_are_entries_with_undefined_fields() {
        let r = record("[1,2]");
        assert!(!r.is_object);
        assert_eq!(r.id, Key::Undefined);
        assert_eq!(r.kind, EntryType::Other);
    }
}
