//! One description of an entry, for every place that shows one in a line: what it is (a message's role or the
//! entry's type), a preview of its text, whether it has text a person reads, and the phrase a tree prints.
//!
//! Skeletons (made by the open from the line it has just scanned), the command line (`tree`, `show`), the web
//! view's rows and transcript notes all describe entries through this module, so an entry reads the same
//! everywhere and a rule (a tool call shown as `→ name`, a bash execution as `$ command`) is decided once. It
//! reads a scanned line — member ranges the validating scanner found — and never a parsed value: an entry held
//! as a value is written back to JSON and scanned ([`Scanned::of_value`]), which costs a pass over its bytes
//! but keeps one walker, so the two can never drift (a preview looks at the first [`TEXT_SCAN_BYTES`] of each
//! text as it is stored, which only the line knows). Only that much of each text is decoded, so a 5 MB tool
//! output costs no more than a short one.
//!
//! How long a preview may be is the caller's: characters for skeletons and the web view ([`chars`]), terminal
//! columns for the command line (it passes its own width of a character).

use super::entry::EntryType;
use super::js::to_js_string;
use super::json::scan::{array_elements, find_member, object_members, scan_document, Block, Document, Kind};
use super::json::string::{decode_string_body, literal_name_bytes};
use super::json::Json;
use std::ops::ControlFlow;

/// Characters of text a skeleton's preview (and the web view's row) shows, then `…`.
pub const PREVIEW_CHARS: usize = 160;

/// Bytes of each text looked at for a preview: enough for any one-line preview, and a 5 MB tool output costs no
/// more than a short one.
pub const TEXT_SCAN_BYTES: usize = 4096;

/// How much room a character takes in a preview: [`chars`] counts characters, the command line terminal columns.
/// A printable ASCII character takes one in every measure (previews copy runs of them without asking).
pub type Width = fn(char) -> usize;

/// Every character counts one: the measure of skeletons' and the web view's previews.
pub fn chars(_: char) -> usize {
    1
}

/// An entry described, as rows show it, its preview cut at a given length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// The message role (`user`, `assistant`, `toolResult`, …; `message` when it has none) or the entry type
    /// (`compaction`, `label`, …; `entry` when it has none).
    pub what: String,
    /// The entry's text on one line, cut.
    pub preview: String,
    /// The whole description as a tree prints it after the id: `user: hello`, `label e1 → start`,
    /// `model → anthropic/claude`, … (see [`Description::phrase`]).
    pub phrase: String,
}

/// An entry's line and the members the validating scanner found in it, owned: for an entry read or held
/// elsewhere than in the open's pass.
pub struct Scanned {
    bytes: Vec<u8>,
    doc: Document,
}

impl Scanned {
    /// The entry's stored bytes, scanned; None when they are not one JSON value.
    pub fn of_bytes(bytes: Vec<u8>) -> Option<Scanned> {
        let doc = scan_document(&bytes).ok()?;
        Some(Scanned { bytes, doc })
    }

    /// An entry held as a value, written as JSON (number literals and key order as parsed) and scanned.
    pub fn of_value(entry: &Json) -> Scanned {
        let mut bytes = Vec::new();
        entry.write_preserving(&mut bytes);
        Scanned::written(bytes)
    }

    /// A message (as `buildSessionContext` gives them) as the entry that holds it, scanned.
    pub fn of_message(message: &Json) -> Scanned {
        let mut bytes = br#"{"type":"message","message":"#.to_vec();
        message.write_preserving(&mut bytes);
        bytes.push(b'}');
        Scanned::written(bytes)
    }

    fn written(bytes: Vec<u8>) -> Scanned {
        let doc = scan_document(&bytes).expect("a value written as JSON scans as JSON");
        Scanned { bytes, doc }
    }

    /// The entry's JSON, as scanned.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes[self.doc.value.clone()]
    }

    /// The entry described; its type read from its `type` member.
    pub fn describe(&self) -> Description<'_> {
        let line = Line { bytes: &self.bytes, doc: &self.doc };
        Description { kind: EntryType::of_value(line.member("type")), line }
    }
}

/// One entry, described from its scanned line. Each part is computed when asked for, so the open's skeletons
/// pay only for the preview and `hasText` they write.
pub struct Description<'a> {
    kind: EntryType,
    line: Line<'a>,
}

impl<'a> Description<'a> {
    /// The entry of type `kind` whose line `bytes` was scanned as `doc`.
    pub fn of_line(kind: EntryType, bytes: &'a [u8], doc: &'a Document) -> Description<'a> {
        Description { kind, line: Line { bytes, doc } }
    }

    /// A top-level member's stored value (the last one, as `JSON.parse` keeps).
    pub fn member(&self, name: &str) -> Option<&'a [u8]> {
        self.line.member(name)
    }

    /// A member of a message entry's `message` object, as stored (None unless `message` is an object).
    pub fn message_member(&self, name: &str) -> Option<&'a [u8]> {
        if self.kind == EntryType::Message && self.line.has_message() {
            self.line.in_message(name)
        } else {
            None
        }
    }

    /// A message's role, when it is a string.
    pub fn role(&self) -> Option<String> {
        self.message_member("role").and_then(string_text)
    }

    /// A message's stop reason, when it is a string.
    pub fn stop_reason(&self) -> Option<String> {
        self.message_member("stopReason").and_then(string_text)
    }

    /// What the entry is: a message's role (`message` when it has none), else its type as `String(type)` gives
    /// it (`entry` when it has none).
    pub fn what(&self) -> String {
        if self.kind == EntryType::Message {
            return self.role().unwrap_or_else(|| "message".to_owned());
        }
        let kind = self.type_text();
        if kind.is_empty() {
            "entry".to_owned()
        } else {
            kind
        }
    }

    fn type_text(&self) -> String {
        self.member("type").map(value_text).unwrap_or_default()
    }

    /// Whether a message holds text that is not all white space (a string, or a `text` block): pi's `/tree`
    /// hides assistant messages without it.
    pub fn has_text(&self) -> bool {
        self.kind == EntryType::Message
            && self.line.has_message()
            && self.line.message_content().is_some_and(|c| c.has_text())
    }

    /// The entry's text before it is put on one line (each string's first [`TEXT_SCAN_BYTES`] or so): a
    /// message's content (text blocks as themselves, tool calls as `→ name`, images as `[image]`), a bash
    /// execution's `$ command`, a summary; for the other types the values that say what they changed.
    pub fn text(&self) -> String {
        self.text_within(TEXT_SCAN_BYTES)
    }

    /// [`Description::text`] with up to about `max_bytes` of each text (and of a message's content) rather than
    /// a preview's few KiB: for a view that shows a message's text whole, up to a bound.
    pub fn text_within(&self, max_bytes: usize) -> String {
        let mut text = String::new();
        let _ = self.text_to(max_bytes, &mut text);
        text
    }

    /// [`Description::text_within`], its pieces handed to `sink` as they are decoded, until it wants no more.
    fn text_to(&self, max_bytes: usize, sink: &mut dyn TextSink) -> ControlFlow<()> {
        let line = &self.line;
        let s = |v: Option<&[u8]>| v.map(value_text).unwrap_or_default();
        let raw = |name: &str| line.member(name);
        match self.kind {
            EntryType::Message => {
                if !line.has_message() {
                    return ControlFlow::Continue(());
                }
                let msg = |name: &str| line.in_message(name);
                // Compared where it lies: no string made for every message of an open.
                match (msg("role").is_some_and(|v| literal_is(v, "bashExecution")), msg("content")) {
                    (true, _) => sink.take(&format!("$ {}", s(msg("command")))),
                    (_, Some(content)) if !matches!(content, b"null") => match line.message_content() {
                        Some(c) => c.text_to(max_bytes, sink),
                        None => ControlFlow::Continue(()),
                    },
                    _ => sink.take(&s(msg("summary"))),
                }
            }
            EntryType::ThinkingLevelChange => sink.take(&format!("thinking level → {}", s(raw("thinkingLevel")))),
            EntryType::ModelChange => sink.take(&format!("model → {}/{}", s(raw("provider")), s(raw("modelId")))),
            EntryType::Compaction | EntryType::BranchSummary => match raw("summary") {
                Some(v) if v.first() == Some(&b'"') => feed_string_prefix(v, max_bytes, sink),
                _ => ControlFlow::Continue(()),
            },
            EntryType::CustomMessage => match raw("content") {
                Some(c) => Content::found(c).text_to(max_bytes, sink),
                None => ControlFlow::Continue(()),
            },
            EntryType::Custom => sink.take(&s(raw("customType"))),
            EntryType::Label => sink.take(&format!("{} → {}", s(raw("targetId")), s(raw("label")))),
            EntryType::SessionInfo => sink.take(&s(raw("name"))),
            EntryType::Usage => sink.take(&s(raw("kind"))),
            EntryType::ContextEdit => sink.take(&s(raw("targetId"))),
            // Named one by one, so an entry type pi adds is a decision here.
            EntryType::Session | EntryType::Other => ControlFlow::Continue(()),
        }
    }

    /// The text on one line, cut after `max` of `width` (with `…`): a skeleton's preview is
    /// `preview(PREVIEW_CHARS, chars)`.
    pub fn preview(&self, max: usize, width: Width) -> String {
        let mut preview = String::new();
        self.preview_into(max, width, &mut preview);
        preview
    }

    /// [`Description::preview`] written over `out`, whose room is reused: an open makes a preview of every entry.
    pub fn preview_into(&self, max: usize, width: Width, out: &mut String) {
        // Fed piece by piece, so a long text is decoded only as far as the preview shows: the same preview as
        // `one_line(&self.text(), …)`.
        out.clear();
        let mut line = OneLine::over(std::mem::take(out), max, width);
        let _ = self.text_to(TEXT_SCAN_BYTES, &mut line);
        *out = line.out;
    }

    /// The whole description around a `preview` of this entry, as a tree prints it after the id: `ROLE: TEXT`,
    /// `compaction: TEXT`, `branch summary: TEXT`, `custom message (TYPE): TEXT`, `custom (TYPE)`,
    /// `label TARGET → LABEL`, `name: NAME`, `usage (KIND)`, `context edit of TARGET`, the preview alone for
    /// model and thinking-level changes, the type alone for the rest. Only the preview, a message's role and a
    /// custom message's `customType` (on one line, at most [`PREVIEW_CHARS`] characters) go into it, which a
    /// skeleton carries too.
    pub fn phrase(&self, preview: &str) -> String {
        match self.kind {
            EntryType::Message => format!("{}: {preview}", self.what()),
            EntryType::ThinkingLevelChange | EntryType::ModelChange => preview.to_owned(),
            EntryType::Compaction => format!("compaction: {preview}"),
            EntryType::BranchSummary => format!("branch summary: {preview}"),
            EntryType::CustomMessage => {
                // An extension's name for its messages, put on one line too: it is no more than a name.
                let custom_type =
                    one_line(&self.member("customType").map(value_text).unwrap_or_default(), PREVIEW_CHARS, chars);
                format!("custom message ({custom_type}): {preview}")
            }
            EntryType::Custom => format!("custom ({preview})"),
            EntryType::Label => format!("label {preview}"),
            EntryType::SessionInfo => format!("name: {preview}"),
            EntryType::Usage => format!("usage ({preview})"),
            EntryType::ContextEdit => format!("context edit of {preview}"),
            EntryType::Session | EntryType::Other => self.type_text(),
        }
    }

    /// What, preview and phrase at once, the preview cut after `max` of `width`.
    pub fn summary(&self, max: usize, width: Width) -> Summary {
        let preview = self.preview(max, width);
        Summary { what: self.what(), phrase: self.phrase(&preview), preview }
    }
}

/// A scanned line: its bytes and where its members are.
struct Line<'a> {
    bytes: &'a [u8],
    doc: &'a Document,
}

impl<'a> Line<'a> {
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
    /// an image as `[image]`, joined by spaces; at most about `max_bytes` of it; handed to `sink` piece by piece.
    fn text_to(&self, max_bytes: usize, sink: &mut dyn TextSink) -> ControlFlow<()> {
        match Kind::of(self.value) {
            Kind::String => feed_string_prefix(self.value, max_bytes, sink),
            Kind::Array => {
                let mut size = 0;
                let mut first = true;
                for member in self.objects() {
                    let mut part = Counted { sink: &mut *sink, bytes: 0, first: &mut first };
                    // Compared where it lies: no string made for every block of an open.
                    let block_type = member("type");
                    let is = |name: &str| block_type.is_some_and(|t| literal_is(t, name));
                    if is("text") {
                        let Some(v) = member("text").filter(|v| v.first() == Some(&b'"')) else { continue };
                        part.start()?;
                        feed_string_prefix(v, max_bytes, &mut part)?;
                    } else if is("toolCall") {
                        part.start()?;
                        // Fed as it lies, as a text is: formatting it made two strings for every tool call.
                        part.take("→ ")?;
                        match member("name") {
                            Some(name) if name.first() == Some(&b'"') => {
                                feed_string_prefix(name, TEXT_SCAN_BYTES, &mut part)?
                            }
                            Some(name) => part.take(&value_text(name))?,
                            None => {}
                        }
                    } else if is("image") {
                        part.start()?;
                        part.take("[image]")?;
                    } else {
                        continue;
                    }
                    size += part.bytes;
                    if size > max_bytes {
                        break;
                    }
                }
                ControlFlow::Continue(())
            }
            _ => ControlFlow::Continue(()),
        }
    }

    /// Whether the content holds text that is not all white space: a string, or a `text` block.
    fn has_text(&self) -> bool {
        let blank = |lit: &[u8]| {
            // A text that starts with a printable ASCII character other than an escape's backslash is not blank:
            // nearly every text, known without setting out to decode it.
            if lit.get(1).is_some_and(|&b| b.is_ascii_graphic() && b != b'\\') && lit.len() > 2 {
                return false;
            }
            feed_string_prefix(lit, TEXT_SCAN_BYTES, &mut NonSpace).is_continue()
        };
        match Kind::of(self.value) {
            Kind::String => !blank(self.value),
            Kind::Array => self.objects().any(|member| {
                member("type").is_some_and(|t| literal_is(t, "text"))
                    && member("text").is_some_and(|t| t.first() == Some(&b'"') && !blank(t))
            }),
            _ => false,
        }
    }
}

/// True when the stored value `v` is a string whose text is `name` (ASCII), however it is escaped. A literal
/// longer than `name` with every character escaped (six bytes each, and the quotes) cannot be it, so it is not
/// decoded.
fn literal_is(v: &[u8], name: &str) -> bool {
    v.len() >= 2
        && v.first() == Some(&b'"')
        && v.len() <= name.len() * 6 + 2
        && *literal_name_bytes(v) == *name.as_bytes()
}

/// A stored value's text when it is a string (its first [`TEXT_SCAN_BYTES`] or so), else None.
fn string_text(v: &[u8]) -> Option<String> {
    (v.first() == Some(&b'"')).then(|| string_prefix(v, TEXT_SCAN_BYTES))
}

/// A small stored value as JavaScript's `String(v)` gives it (strings: their first [`TEXT_SCAN_BYTES`]).
fn value_text(v: &[u8]) -> String {
    if let Some(text) = string_text(v) {
        return text;
    }
    if v.len() > TEXT_SCAN_BYTES {
        // An object or array this large is no name or label a person reads.
        return "…".to_owned();
    }
    Json::parse(v).map(|j| to_js_string(&j).to_string_lossy()).unwrap_or_default()
}

/// The first `max_bytes` (about) of a valid string literal, decoded; the cut never splits an escape or a UTF-8
/// sequence.
pub fn string_prefix(literal: &[u8], max_bytes: usize) -> String {
    let mut text = String::new();
    let _ = feed_string_prefix(literal, max_bytes, &mut text);
    text
}

/// Bytes of a string decoded at a time for a [`TextSink`]: a preview's 160 characters are usually in the first
/// piece.
const DECODE_STEP: usize = 256;

/// Where a text goes as it is decoded, piece by piece: a preview stops taking pieces once it is full, so only as
/// much of a long text is decoded as it shows.
trait TextSink {
    /// Takes the next piece; `Break` when no more is wanted.
    fn take(&mut self, piece: &str) -> ControlFlow<()>;
}

impl TextSink for String {
    fn take(&mut self, piece: &str) -> ControlFlow<()> {
        self.push_str(piece);
        ControlFlow::Continue(())
    }
}

/// Looks for a character that is not white space (`String.prototype.trim`'s and `split_whitespace`'s: Unicode
/// White_Space), and stops at the first.
struct NonSpace;

impl TextSink for NonSpace {
    fn take(&mut self, piece: &str) -> ControlFlow<()> {
        if piece.chars().all(char::is_whitespace) {
            ControlFlow::Continue(())
        } else {
            ControlFlow::Break(())
        }
    }
}

/// One part of a content's text: a space before it unless it is the first, and the bytes it took.
struct Counted<'s> {
    sink: &'s mut dyn TextSink,
    bytes: usize,
    first: &'s mut bool,
}

impl Counted<'_> {
    fn start(&mut self) -> ControlFlow<()> {
        if std::mem::replace(self.first, false) {
            ControlFlow::Continue(())
        } else {
            self.sink.take(" ")
        }
    }
}

impl TextSink for Counted<'_> {
    fn take(&mut self, piece: &str) -> ControlFlow<()> {
        self.bytes += piece.len();
        self.sink.take(piece)
    }
}

/// Hands the first `max_bytes` (about) of a valid string literal to `sink`, decoded, in pieces of about
/// [`DECODE_STEP`] bytes. The cut never splits an escape or a UTF-8 sequence, and no piece ends inside a UTF-8
/// sequence or between the two escapes of a surrogate pair, so the pieces together are exactly the decoded
/// prefix.
fn feed_string_prefix(literal: &[u8], max_bytes: usize, sink: &mut dyn TextSink) -> ControlFlow<()> {
    let body = &literal[1..literal.len() - 1];
    // Units are one byte but for escapes, so the walks below leap from escape to escape (memchr) and step unit by
    // unit only over escapes: a preview reads a few KiB of every long text in an open, and stepping each byte
    // of those was a fifth of a cold open. Where the prefix is cut is found only once a piece could reach it:
    // most sinks want a hundred characters or one, and finding the cut first read the whole prefix.
    let mut cut = (body.len() <= max_bytes).then_some(body.len());
    let mut from = 0;
    loop {
        if cut.is_none() && from + DECODE_STEP + PIECE_OVERRUN >= max_bytes {
            cut = Some(prefix_cut(body, max_bytes));
        }
        // Until the cut is known, pieces end well before `max_bytes`, where any end past it bounds them alike.
        let mut end = cut.unwrap_or(body.len());
        if from >= end {
            break;
        }
        let mut to = from;
        let mut after_high_surrogate = false;
        let mut escaped = false;
        while to < end && (to - from < DECODE_STEP || after_high_surrogate || (body[to] & 0xC0) == 0x80) {
            if cut.is_none() && to + PIECE_OVERRUN >= max_bytes {
                // A piece that runs on (over lone high surrogates, each waiting for its pair) nears the cut.
                end = *cut.insert(prefix_cut(body, max_bytes));
                continue;
            }
            if to - from < DECODE_STEP && !after_high_surrogate {
                let limit = (from + DECODE_STEP).min(end);
                let plain = memchr::memchr(b'\\', &body[to..limit]).unwrap_or(limit - to);
                if plain > 0 {
                    to += plain;
                    continue;
                }
            }
            let len = unit_len(body, to);
            escaped |= len > 1;
            after_high_surrogate =
                len == 6 && matches!(&body[to + 2..to + 4], [b'd' | b'D', b'8'..=b'9' | b'a' | b'b' | b'A' | b'B']);
            to += len;
        }
        // A piece without escapes that is valid UTF-8 is its own text: nothing to decode or copy.
        match std::str::from_utf8(&body[from..to]) {
            Ok(text) if !escaped => sink.take(text)?,
            _ => sink.take(&decode_string_body(&body[from..to]).to_string_lossy())?,
        }
        from = to;
    }
    ControlFlow::Continue(())
}

/// How close to `max_bytes` [`feed_string_prefix`] walks before it finds where the prefix is cut: more than the
/// longest unit (an escape, 6 bytes) plus the UTF-8 sequence the cut may back off over.
const PIECE_OVERRUN: usize = 16;

/// Where [`feed_string_prefix`] cuts `body` (a string's inside, longer than `max_bytes`): after the unit that
/// reaches `max_bytes`, backed off to the start of a UTF-8 sequence it would split.
fn prefix_cut(body: &[u8], max_bytes: usize) -> usize {
    let mut cut = 0;
    while cut < max_bytes {
        match memchr::memchr(b'\\', &body[cut..max_bytes]) {
            None => cut = max_bytes,
            Some(plain) => cut += plain + unit_len(body, cut + plain),
        }
    }
    while cut < body.len() && (body[cut] & 0xC0) == 0x80 {
        cut -= 1;
    }
    cut
}

/// The length of the unit of a string's inside that starts at `at`: an escape, or one byte.
fn unit_len(body: &[u8], at: usize) -> usize {
    match body[at] {
        b'\\' if body[at + 1] == b'u' => 6,
        b'\\' => 2,
        _ => 1,
    }
}

/// `text` on one line: runs of white space made one space, ends trimmed, cut where the next character would
/// take it past `max` of `width` (with `…`).
pub fn one_line(text: &str, max: usize, width: Width) -> String {
    let mut line = OneLine::new(max, width);
    let _ = line.take(text);
    line.out
}

/// [`one_line`] made as the text comes, piece by piece; it wants no more once it is cut.
struct OneLine {
    out: String,
    used: usize,
    max: usize,
    width: Width,
    /// White space was seen since the last character written.
    space: bool,
}

impl OneLine {
    fn new(max: usize, width: Width) -> OneLine {
        OneLine::over(String::new(), max, width)
    }

    /// A line written into `out` (empty), keeping its room.
    fn over(mut out: String, max: usize, width: Width) -> OneLine {
        debug_assert!(out.is_empty());
        // Room for a skeleton's preview of ASCII and the `…`, so it is one allocation, not six as the string
        // grows (a caller's `max` may be any width a terminal asks for: past this the string grows as it must).
        out.reserve(max.min(PREVIEW_CHARS) + '…'.len_utf8());
        OneLine { out, used: 0, max, width, space: false }
    }

    /// Writes the space that stands for the white space seen before the next character, if any is due.
    fn space_before_next(&mut self) -> ControlFlow<()> {
        if std::mem::replace(&mut self.space, false) && !self.out.is_empty() {
            if self.used + 1 > self.max {
                self.out.push('…');
                return ControlFlow::Break(());
            }
            self.out.push(' ');
            self.used += 1;
        }
        ControlFlow::Continue(())
    }
}

impl TextSink for OneLine {
    fn take(&mut self, piece: &str) -> ControlFlow<()> {
        let bytes = piece.as_bytes();
        let mut at = 0;
        while at < bytes.len() {
            // A run of printable ASCII (one column each, whatever the width) is copied whole: previews of every
            // long text are made on each open, and going character by character was most of their cost.
            let run = bytes[at..].iter().take_while(|b| b.is_ascii_graphic()).count();
            if run > 0 {
                self.space_before_next()?;
                let room = self.max.saturating_sub(self.used);
                if run > room {
                    self.out.push_str(&piece[at..at + room]);
                    self.out.push('…');
                    return ControlFlow::Break(());
                }
                self.out.push_str(&piece[at..at + run]);
                self.used += run;
                at += run;
                continue;
            }
            let c = piece[at..].chars().next().expect("a character starts here");
            at += c.len_utf8();
            if c.is_whitespace() {
                self.space = true;
                continue;
            }
            self.space_before_next()?;
            let w = (self.width)(c);
            if self.used + w > self.max {
                self.out.push('…');
                return ControlFlow::Break(());
            }
            self.out.push(c);
            self.used += w;
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::json::string::decode_string_literal;

    fn described(line: &str) -> Summary {
        Scanned::of_bytes(line.as_bytes().to_vec()).expect("JSON").describe().summary(PREVIEW_CHARS, chars)
    }

    /// The decoded prefix as it was made before texts were fed in pieces: the whole prefix cut, then decoded.
    fn whole_prefix(literal: &[u8], max_bytes: usize) -> String {
        let body = &literal[1..literal.len() - 1];
        if body.len() <= max_bytes {
            return decode_string_literal(literal).to_string_lossy();
        }
        let mut cut = 0;
        while cut < max_bytes {
            cut += unit_len(body, cut);
        }
        while cut < body.len() && (body[cut] & 0xC0) == 0x80 {
            cut -= 1;
        }
        decode_string_body(&body[..cut]).to_string_lossy()
    }

    /// Literals of every kind of unit a piece could be cut at: escapes, surrogate pairs (escaped and lone),
    /// multi-byte and broken UTF-8, runs of white space; long enough for several pieces.
    fn awkward_literals() -> Vec<Vec<u8>> {
        let units: [&[u8]; 14] = [
            b"a",
            b" ",
            b"\\n",
            b"\\t",
            b"\\u0041",
            b"\\ud83d\\ude00",
            b"\\uD83D",
            b"\\udE00",
            "é".as_bytes(),
            "😀".as_bytes(),
            b"\xe2\x82",
            b"\xff",
            "\u{3000}".as_bytes(),
            b"\\u2028",
        ];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        (0..400)
            .map(|_| {
                let len = (next() % 1400) as usize;
                let mut lit = b"\"".to_vec();
                while lit.len() < len {
                    let unit = units[(next() % units.len() as u64) as usize];
                    for _ in 0..=(next() % 40) {
                        lit.extend_from_slice(unit);
                    }
                }
                lit.push(b'"');
                lit
            })
            .collect()
    }

    #[test]
    fn a_text_fed_in_pieces_is_the_same_text_as_its_whole_prefix_decoded() {
        // A piece that would end between the halves of a pair, and one that would end inside a character.
        let pair = format!("\"{}\\ud83d\\ude00{}\"", "a".repeat(DECODE_STEP - 6), "b".repeat(DECODE_STEP));
        let wide = format!("\"{}😀{}\"", "a".repeat(DECODE_STEP - 2), "b".repeat(DECODE_STEP));
        for lit in awkward_literals().into_iter().chain([pair.into_bytes(), wide.into_bytes()]) {
            for max in [0, 1, 5, 100, 255, 256, 257, 300, 511, 1000, TEXT_SCAN_BYTES] {
                assert_eq!(
                    string_prefix(&lit, max),
                    whole_prefix(&lit, max),
                    "{max} of {:?}",
                    String::from_utf8_lossy(&lit)
                );
            }
        }
    }

    #[test]
    fn a_preview_fed_in_pieces_is_the_one_line_of_the_whole_text() {
        for lit in awkward_literals() {
            let text = whole_prefix(&lit, TEXT_SCAN_BYTES);
            let line = format!(
                r#"{{"type":"message","message":{{"role":"user","content":[{{"type":"text","text":{lit}}},{{"type":"image"}},{{"type":"text","text":{lit}}}]}}}}"#,
                lit = String::from_utf8_lossy(&lit)
            );
            let Some(scanned) = Scanned::of_bytes(line.into_bytes()) else { continue };
            let whole = format!("{text} [image] {text}");
            // Characters counted, and columns as a terminal counts them (what is not ASCII taking two).
            let columns: Width = |c| if c.is_ascii() { 1 } else { 2 };
            for max in [1, 3, 40, PREVIEW_CHARS, 600] {
                for width in [chars, columns] {
                    assert_eq!(scanned.describe().preview(max, width), one_line_whole(&whole, max, width));
                }
            }
            assert_eq!(scanned.describe().has_text(), !text.trim().is_empty());
        }
    }

    /// `one_line` as it was written before it could take a text in pieces.
    fn one_line_whole(text: &str, max: usize, width: Width) -> String {
        let mut out = String::new();
        let mut used = 0;
        for word in text.split_whitespace() {
            if !out.is_empty() {
                if used + 1 > max {
                    out.push('…');
                    return out;
                }
                out.push(' ');
                used += 1;
            }
            for c in word.chars() {
                let w = width(c);
                if used + w > max {
                    out.push('…');
                    return out;
                }
                out.push(c);
                used += w;
            }
        }
        out
    }

    fn phrase(line: &str) -> String {
        described(line).phrase
    }

    #[test]
    fn a_bash_execution_is_its_command_and_a_summary_message_its_summary() {
        let bash = r#"{"type":"message","message":{"role":"bashExecution","command":"ls  -la\n","output":"x"}}"#;
        assert_eq!(phrase(bash), "bashExecution: $ ls -la");
        // The role as pi reads it, however it is written.
        let escaped = r#"{"type":"message","message":{"role":"b\u0061shExecution","command":"ls","content":"c"}}"#;
        assert_eq!(phrase(escaped), "bashExecution: $ ls");
        let every = r#"\u0062\u0061\u0073\u0068\u0045\u0078\u0065\u0063\u0075\u0074\u0069\u006f\u006e"#;
        let escaped = format!(r#"{{"type":"message","message":{{"role":"{every}","command":"ls","content":"c"}}}}"#);
        assert_eq!(phrase(&escaped), "bashExecution: $ ls");
        let other = r#"{"type":"message","message":{"role":"bashExecutio","command":"ls","content":"c"}}"#;
        assert_eq!(phrase(other), "bashExecutio: c");
        let summary = r#"{"type":"message","message":{"role":"branchSummary","summary":"went\nelsewhere"}}"#;
        assert_eq!(phrase(summary), "branchSummary: went elsewhere");
        // Content wins over a summary, unless it is null.
        let both = r#"{"type":"message","message":{"role":"user","content":"hi","summary":"s"}}"#;
        assert_eq!(phrase(both), "user: hi");
        let null = r#"{"type":"message","message":{"role":"user","content":null,"summary":"s"}}"#;
        assert_eq!(phrase(null), "user: s");
    }

    #[test]
    fn every_type_has_its_phrase_and_a_message_without_a_role_is_a_message() {
        for (line, what, expected) in [
            (r#"{"type":"message","message":{"content":"x"}}"#, "message", "message: x"),
            (r#"{"type":"message","message":"not an object"}"#, "message", "message: "),
            (
                r#"{"type":"thinking_level_change","thinkingLevel":"high"}"#,
                "thinking_level_change",
                "thinking level → high",
            ),
            (r#"{"type":"model_change","provider":"p","modelId":7}"#, "model_change", "model → p/7"),
            (r#"{"type":"compaction","summary":"short"}"#, "compaction", "compaction: short"),
            (r#"{"type":"branch_summary","summary":{"not":"text"}}"#, "branch_summary", "branch summary: "),
            (
                r#"{"type":"custom_message","customType":"a\nb","content":[{"type":"image"},"x",{"type":"text","text":"t"}]}"#,
                "custom_message",
                "custom message (a b): [image] t",
            ),
            (r#"{"type":"custom","customType":["x",1]}"#, "custom", "custom (x,1)"),
            (r#"{"type":"label","targetId":"e1","label":null}"#, "label", "label e1 → null"),
            (r#"{"type":"session_info","name":"  my   name "}"#, "session_info", "name: my name"),
            (r#"{"type":"usage","kind":"turn"}"#, "usage", "usage (turn)"),
            (r#"{"type":"context_edit","targetId":"e2"}"#, "context_edit", "context edit of e2"),
            (r#"{"type":"session","id":"s"}"#, "session", "session"),
            (r#"{"type":"someday","text":"x"}"#, "someday", "someday"),
            (r#"{"type":3}"#, "3", "3"),
            (r#"{"id":"no type"}"#, "entry", ""),
        ] {
            let d = described(line);
            assert_eq!((d.what.as_str(), d.phrase.as_str()), (what, expected), "{line}");
        }
    }

    #[test]
    fn a_preview_is_cut_by_characters_or_by_the_columns_the_caller_counts() {
        let line = r#"{"type":"message","message":{"role":"user","content":"日本語 text"}}"#;
        let entry = Scanned::of_bytes(line.as_bytes().to_vec()).unwrap();
        let d = entry.describe();
        assert_eq!(d.preview(4, chars), "日本語 …");
        let columns: Width = |c| if c.is_ascii() { 1 } else { 2 };
        assert_eq!(d.preview(4, columns), "日本…");
        assert_eq!(d.preview(5, columns), "日本…", "a wide character that does not fit is left out whole");
        assert_eq!(d.preview(100, columns), "日本語 text");
        assert_eq!(d.preview(0, chars), "…");
    }

    #[test]
    fn has_text_needs_a_text_that_is_not_white_space() {
        let has = |content: &str| {
            let line = format!(r#"{{"type":"message","message":{{"role":"assistant","content":{content}}}}}"#);
            Scanned::of_bytes(line.into_bytes()).unwrap().describe().has_text()
        };
        assert!(has(r#""hi""#));
        assert!(!has(r#"" \n\t""#));
        assert!(!has(r#"[{"type":"toolCall","name":"bash"},{"type":"image"}]"#));
        assert!(has(r#"[{"type":"toolCall","name":"bash"},{"type":"text","text":" ok "}]"#));
        // Block types and texts however they are written: escaped, empty, white space written as escapes, a
        // backslash that is the text itself.
        assert!(has(r#"[{"type":"t\u0065xt","text":"x"}]"#));
        assert!(!has(r#"[{"type":"t\u0065xt","text":"\n\t \u0020"}]"#));
        assert!(!has(r#"[{"type":"text","text":""}]"#));
        assert!(!has(r#"[{"type":"text","text":" "}]"#));
        assert!(has(r#"[{"type":"text","text":"\\"}]"#));
        assert!(has(r#"[{"type":"text","text":"\u0041"}]"#));
        assert!(has(r#"[{"type":"text","text":"\n x"}]"#));
        assert!(!has(r#"[{"type":"tex","text":"x"},{"type":"texts","text":"x"},{"type":"Text","text":"x"}]"#));
        assert!(!has(r#"[{"type":"text","text":7}]"#));
        let not_a_message = r#"{"type":"custom_message","content":"text"}"#;
        assert!(!Scanned::of_bytes(not_a_message.as_bytes().to_vec()).unwrap().describe().has_text());
    }

    #[test]
    fn an_entry_held_as_a_value_is_described_as_its_line() {
        let line = "{ \"type\" : \"message\", \"message\": {\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"caf\\u00e9 \\ud83d\"}]}, \"n\": 1.50 }";
        let value = Json::parse(line.as_bytes()).unwrap();
        assert_eq!(Scanned::of_value(&value).describe().summary(10, chars), described(line));
        assert_eq!(described(line).preview, "café \u{fffd}");
    }

    #[test]
    fn a_context_message_text_is_read_further_than_a_preview() {
        let long = "word ".repeat(2000);
        let message = Json::parse(format!(r#"{{"role":"user","content":"{long}"}}"#).as_bytes()).unwrap();
        let entry = Scanned::of_message(&message);
        assert!(entry.describe().text().len() <= TEXT_SCAN_BYTES + 8);
        assert_eq!(entry.describe().text_within(20_000), long);
    }
}
