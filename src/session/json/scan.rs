//! A validating JSON scanner over raw bytes that finds values without building them.
//!
//! Opening a session must not cost memory in proportion to its bodies (a 2.6 GB session of base64 images is a real
//! pi bug report), yet every line must be checked exactly as `JSON.parse` would check it, because pi silently skips
//! lines that do not parse and we must agree on which lines those are. This scanner validates a line with no
//! allocation beyond a small nesting stack and reports where the top-level members' values lie, so callers keep
//! byte ranges instead of values.
//!
//! Grammar is ECMAScript `JSON.parse`'s: white space is only space, tab, CR and LF; strings may not hold raw
//! control characters; `\u` escapes are not checked for surrogate pairing (lone surrogates are valid). Bytes that
//! are not valid UTF-8 are accepted inside strings, because Node decodes them to U+FFFD before parsing.

use std::ops::Range;

use super::string::find_string_special;

/// Why a line is not JSON, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    /// Byte offset within the scanned slice.
    pub offset: usize,
    /// What was expected or found.
    pub message: &'static str,
}

impl std::fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at byte {}", self.message, self.offset)
    }
}

/// One member of a JSON object, as byte ranges into the scanned slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The key's string literal, quotes included.
    pub key: Range<usize>,
    /// The value, without surrounding white space.
    pub value: Range<usize>,
    /// Whether the key's literal holds an escape (so its bytes are not its text).
    pub key_escaped: bool,
    /// The key, when it is one of the names every line is asked about.
    pub known: KnownName,
}

/// Member names an open asks about on every line (several times each: the record, the skeleton, the preview),
/// known by number once the scan has read the key: [`find_member`] then compares one byte per member, where
/// comparing keys was the open's costliest function of its own (4.6% of a cold open).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum KnownName {
    /// Any other name.
    Other,
    /// `type`
    Type,
    /// `id`
    Id,
    /// `parentId`
    ParentId,
    /// `timestamp`
    Timestamp,
    /// `message`
    Message,
    /// `role`
    Role,
    /// `content`
    Content,
    /// `stopReason`
    StopReason,
    /// `text`
    Text,
    /// `name`
    Name,
}

impl KnownName {
    /// The known name that `text` (a key's text, or a name asked for) is, if any.
    #[inline]
    pub fn of(text: &[u8]) -> KnownName {
        match text {
            b"type" => KnownName::Type,
            b"id" => KnownName::Id,
            b"parentId" => KnownName::ParentId,
            b"timestamp" => KnownName::Timestamp,
            b"message" => KnownName::Message,
            b"role" => KnownName::Role,
            b"content" => KnownName::Content,
            b"stopReason" => KnownName::StopReason,
            b"text" => KnownName::Text,
            b"name" => KnownName::Name,
            _ => KnownName::Other,
        }
    }

    /// The known name of the key whose literal (quotes included) is `bytes[key]`, decoded first when it holds an
    /// escape (`escaped`): `JSON.parse` reads `"m\u0065ssage"` as `message`, and so must every scan.
    #[inline]
    pub fn of_key(bytes: &[u8], key: Range<usize>, escaped: bool) -> KnownName {
        if escaped {
            KnownName::of(super::string::decode_string_literal(&bytes[key]).as_bytes())
        } else {
            KnownName::of(&bytes[key.start + 1..key.end - 1])
        }
    }
}

impl Member {
    /// The member whose key's literal is `bytes[key]` (`escaped` when it holds an escape) and whose value is
    /// `bytes[value]`.
    pub fn new(bytes: &[u8], key: Range<usize>, value: Range<usize>, escaped: bool) -> Member {
        let known = KnownName::of_key(bytes, key.clone(), escaped);
        Member { key, value, key_escaped: escaped, known }
    }

    /// True when the key decodes to `name`.
    pub fn key_is(&self, bytes: &[u8], name: &str) -> bool {
        // Names asked for never contain a backslash, so a key without escapes matches only byte for byte. Names
        // other than the known ones (`KnownName`) are looked up this way on every line of an open (a label's
        // target, a compaction's first kept entry), so a mismatch must cost no more than comparing lengths: the
        // scan that found the key noted whether it had escapes.
        if !self.key_escaped {
            // Compared in line: names are a few bytes, and a call to memcmp for each was a tenth of an open. The
            // lengths first, before the key is sliced out: most keys asked about are not the name.
            return self.key.len() == name.len() + 2
                && bytes[self.key.start + 1..self.key.end - 1].iter().zip(name.as_bytes()).all(|(a, b)| a == b);
        }
        super::string::decode_string_literal(&bytes[self.key.clone()]).eq_str(name)
    }
}

/// The kind of a JSON value, from its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `{…}`
    Object,
    /// `[…]`
    Array,
    /// `"…"`
    String,
    /// A number literal.
    Number,
    /// `true` or `false`.
    Bool,
    /// `null`.
    Null,
}

impl Kind {
    /// The kind of the (valid) value starting at `bytes[0]`.
    pub fn of(bytes: &[u8]) -> Kind {
        match bytes.first() {
            Some(b'{') => Kind::Object,
            Some(b'[') => Kind::Array,
            Some(b'"') => Kind::String,
            Some(b't') | Some(b'f') => Kind::Bool,
            Some(b'n') => Kind::Null,
            _ => Kind::Number,
        }
    }
}

/// Validates that `bytes` is exactly one JSON value with optional white space around it, and returns the
/// value's range.
pub fn validate_document(bytes: &[u8]) -> Result<Range<usize>, SyntaxError> {
    let mut s = Scanner::new(bytes);
    s.skip_ws();
    let start = s.pos;
    s.skip_value()?;
    let end = s.pos;
    s.skip_ws();
    if s.pos != bytes.len() {
        return Err(s.err("unexpected text after the JSON value"));
    }
    Ok(start..end)
}

/// A validated line whose top-level value's members (and, for pi's `message` entries, the message object's
/// members) were found in the same pass, so a multi-megabyte tool result is read exactly once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Document {
    /// The value's range, without surrounding white space.
    pub value: Range<usize>,
    /// Top-level members, in order, duplicates included (empty unless the value is an object).
    pub members: Vec<Member>,
    /// Members of the value of the last top-level `message` member, when that value is an object.
    pub message_members: Vec<Member>,
    /// Every string value (not key) whose literal is longer than [`LONG_STRING`] bytes, in order, found in the
    /// same pass: a host can be sent the line without them and read each one where it lies.
    pub long_strings: Vec<Range<usize>>,
    /// The elements of that message's `content` (its last one) when it is an array, each object's members with
    /// it: what a skeleton's preview reads, found in the same pass, so a tool result is not scanned again.
    pub content_blocks: Vec<Block>,
}

/// One element of an array: where it is, and its members when it is an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// The element, without surrounding white space.
    pub value: Range<usize>,
    /// Its members, in order, duplicates included (empty unless it is an object).
    pub members: Vec<Member>,
}

/// Where in a line an object being scanned is, for what its members are collected.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    /// The line's value: a `message` member's object is scanned as [`Level::Message`].
    Top,
    /// A `message` object: its `content` array's elements are collected.
    Message,
    /// Anything deeper.
    Other,
}

/// Bytes of a string literal (quotes included) beyond which [`scan_document`] reports it in `long_strings`.
pub const LONG_STRING: usize = 1024;

/// Validates `bytes` as one JSON value (as [`validate_document`]) and collects its top-level members.
pub fn scan_document(bytes: &[u8]) -> Result<Document, SyntaxError> {
    let mut scanner = DocumentScanner::default();
    scanner.scan(bytes)?;
    Ok(scanner.doc)
}

/// [`scan_document`] for many lines in turn: each scan fills the same [`Document`] and nesting stack in place,
/// so a thread reading a session allocates its member lists once rather than a few times per line (on a
/// session of short lines that allocation was a quarter of an open's time).
#[derive(Debug, Default)]
pub struct DocumentScanner {
    doc: Document,
    stack: Vec<u8>,
    /// Member lists of content blocks from earlier scans, for the next scan's blocks.
    spare: Vec<Vec<Member>>,
}

impl DocumentScanner {
    /// Validates `bytes` as [`scan_document`] does and gives what it gives, in place of the previous scan's.
    pub fn scan(&mut self, bytes: &[u8]) -> Result<&Document, SyntaxError> {
        let doc = &mut self.doc;
        doc.members.clear();
        doc.message_members.clear();
        recycle(&mut doc.content_blocks, &mut self.spare);
        doc.long_strings.clear();
        let mut s = Scanner::new(bytes);
        s.stack = std::mem::take(&mut self.stack);
        s.long = Some(std::mem::take(&mut doc.long_strings));
        let scanned = scan_into(&mut s, doc, &mut self.spare);
        self.stack = std::mem::take(&mut s.stack);
        doc.long_strings = s.long.take().unwrap_or_default();
        scanned?;
        Ok(doc)
    }
}

fn scan_into(s: &mut Scanner<'_>, doc: &mut Document, spare: &mut Vec<Vec<Member>>) -> Result<(), SyntaxError> {
    s.skip_ws();
    let start = s.pos;
    if s.peek() == Some(b'{') {
        let mut found =
            Found { message_members: &mut doc.message_members, content_blocks: &mut doc.content_blocks, spare };
        s.scan_object_members(Level::Top, &mut found, &mut doc.members)?;
    } else {
        s.skip_value()?;
    }
    doc.value = start..s.pos;
    s.skip_ws();
    if s.pos != s.bytes.len() {
        return Err(s.err("unexpected text after the JSON value"));
    }
    Ok(())
}

/// Empties `blocks`, keeping their member lists' memory in `spare`.
fn recycle(blocks: &mut Vec<Block>, spare: &mut Vec<Vec<Member>>) {
    spare.extend(blocks.drain(..).map(|mut block| {
        block.members.clear();
        block.members
    }));
}

/// The members of the object at `range` (which must be a valid object, e.g. from [`validate_document`]), in
/// order, duplicates included.
pub fn object_members(bytes: &[u8], range: Range<usize>) -> Vec<Member> {
    let mut members = Vec::new();
    let mut s = Scanner::new(&bytes[..range.end]);
    s.pos = range.start + 1;
    s.skip_ws();
    if s.peek() == Some(b'}') {
        return members;
    }
    loop {
        s.skip_ws();
        let key_start = s.pos;
        s.scan_string().expect("object_members on a validated object");
        let key = key_start..s.pos;
        let key_escaped = s.string_escaped;
        s.skip_ws();
        s.pos += 1; // ':'
        s.skip_ws();
        let value_start = s.pos;
        s.skip_value().expect("object_members on a validated object");
        members.push(Member::new(bytes, key, value_start..s.pos, key_escaped));
        s.skip_ws();
        match s.peek() {
            Some(b',') => s.pos += 1,
            _ => return members,
        }
    }
}

/// The elements of the array at `range` (a valid array), in order.
pub fn array_elements(bytes: &[u8], range: Range<usize>) -> Vec<Range<usize>> {
    let mut elements = Vec::new();
    let mut s = Scanner::new(&bytes[..range.end]);
    s.pos = range.start + 1;
    s.skip_ws();
    if s.peek() == Some(b']') {
        return elements;
    }
    loop {
        s.skip_ws();
        let start = s.pos;
        s.skip_value().expect("array_elements on a validated array");
        elements.push(start..s.pos);
        s.skip_ws();
        match s.peek() {
            Some(b',') => s.pos += 1,
            _ => return elements,
        }
    }
}

/// The value of the last member named `name` (JSON.parse keeps the last duplicate), if any.
pub fn find_member(bytes: &[u8], members: &[Member], name: &str) -> Option<Range<usize>> {
    let member = match KnownName::of(name.as_bytes()) {
        KnownName::Other => members.iter().rev().find(|m| m.key_is(bytes, name)),
        known => members.iter().rev().find(|m| m.known == known),
    };
    member.map(|m| m.value.clone())
}

/// What a scan collects beside an object's own members (see [`Document`]), and member lists to reuse.
struct Found<'a> {
    message_members: &'a mut Vec<Member>,
    content_blocks: &'a mut Vec<Block>,
    spare: &'a mut Vec<Vec<Member>>,
}

/// A cursor over bytes that validates as it skips.
pub struct Scanner<'a> {
    bytes: &'a [u8],
    /// The current byte offset.
    pub pos: usize,
    stack: Vec<u8>,
    key_end: usize,
    /// Whether the last string scanned held an escape.
    string_escaped: bool,
    /// When collecting: the string values longer than [`LONG_STRING`] skipped so far.
    long: Option<Vec<Range<usize>>>,
}

impl<'a> Scanner<'a> {
    /// A scanner at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Scanner { bytes, pos: 0, stack: Vec::new(), key_end: 0, string_escaped: false, long: None }
    }

    fn err(&self, message: &'static str) -> SyntaxError {
        SyntaxError { offset: self.pos, message }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    /// Skips JSON white space.
    pub fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    /// Skips one value, validating it. Nesting is tracked on a heap stack, so depth is unbounded like V8's.
    pub fn skip_value(&mut self) -> Result<(), SyntaxError> {
        self.stack.clear();
        'value: loop {
            self.skip_ws();
            match self.peek() {
                Some(b'{') => {
                    self.pos += 1;
                    self.skip_ws();
                    if self.peek() == Some(b'}') {
                        self.pos += 1;
                    } else {
                        self.member_key()?;
                        self.stack.push(b'{');
                        continue 'value;
                    }
                }
                Some(b'[') => {
                    self.pos += 1;
                    self.skip_ws();
                    if self.peek() == Some(b']') {
                        self.pos += 1;
                    } else {
                        self.stack.push(b'[');
                        continue 'value;
                    }
                }
                Some(b'"') => {
                    let start = self.pos;
                    self.scan_string()?;
                    if let Some(long) = self.long.as_mut().filter(|_| self.pos - start > LONG_STRING) {
                        long.push(start..self.pos);
                    }
                }
                Some(b'-' | b'0'..=b'9') => self.scan_number()?,
                Some(b't') => self.scan_literal(b"true")?,
                Some(b'f') => self.scan_literal(b"false")?,
                Some(b'n') => self.scan_literal(b"null")?,
                Some(_) => return Err(self.err("unexpected character where a value should start")),
                None => return Err(self.err("unexpected end of input where a value should start")),
            }
            // After a complete value: close containers or move to the next element.
            loop {
                let Some(&top) = self.stack.last() else {
                    return Ok(());
                };
                self.skip_ws();
                match (top, self.peek()) {
                    (_, Some(b',')) => {
                        self.pos += 1;
                        if top == b'{' {
                            self.skip_ws();
                            self.member_key()?;
                        }
                        continue 'value;
                    }
                    (b'{', Some(b'}')) | (b'[', Some(b']')) => {
                        self.pos += 1;
                        self.stack.pop();
                    }
                    (_, None) => return Err(self.err("unexpected end of input inside a container")),
                    _ => return Err(self.err("expected ',' or a closing bracket")),
                }
            }
        }
    }

    /// Scans the object at the current `{`, validating it, and returns its members. At [`Level::Top`], the members
    /// of each `message` member's object value go to `found` (the last one wins), and at [`Level::Message`] the
    /// elements of its `content` array (the last `content` wins; one that is not an array leaves none).
    fn scan_object_members(
        &mut self,
        level: Level,
        found: &mut Found<'_>,
        members: &mut Vec<Member>,
    ) -> Result<(), SyntaxError> {
        self.pos += 1;
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(());
        }
        loop {
            self.skip_ws();
            let key_start = self.pos;
            self.member_key()?;
            let key_end = self.key_end;
            // Noted before the value's own strings are scanned.
            let key_escaped = self.string_escaped;
            self.skip_ws();
            let value_start = self.pos;
            let member_key = key_start..key_end;
            let known = KnownName::of_key(self.bytes, member_key.clone(), key_escaped);
            match (level, known) {
                (Level::Top, KnownName::Message) => {
                    found.message_members.clear();
                    recycle(found.content_blocks, found.spare);
                    if self.peek() == Some(b'{') {
                        let mut inner = Found {
                            message_members: &mut Vec::new(),
                            content_blocks: found.content_blocks,
                            spare: found.spare,
                        };
                        self.scan_object_members(Level::Message, &mut inner, found.message_members)?;
                    } else {
                        self.skip_value()?;
                    }
                }
                (Level::Message, KnownName::Content) => {
                    recycle(found.content_blocks, found.spare);
                    if self.peek() == Some(b'[') {
                        self.scan_blocks(found.content_blocks, found.spare)?;
                    } else {
                        self.skip_value()?;
                    }
                }
                _ => self.skip_value()?,
            }
            members.push(Member { key: member_key, value: value_start..self.pos, key_escaped, known });
            if self.closed_after_element(b'}')? {
                return Ok(());
            }
        }
    }

    /// After an element of a container closed by `close`: past the `,` (false) or the closing bracket (true), or
    /// the error `skip_value` gives there.
    fn closed_after_element(&mut self, close: u8) -> Result<bool, SyntaxError> {
        self.skip_ws();
        match self.peek() {
            Some(b',') => {
                self.pos += 1;
                Ok(false)
            }
            Some(c) if c == close => {
                self.pos += 1;
                Ok(true)
            }
            None => Err(self.err("unexpected end of input inside a container")),
            _ => Err(self.err("expected ',' or a closing bracket")),
        }
    }

    /// Scans the array at the current `[`, validating it as [`Scanner::skip_value`] would (the same errors at
    /// the same places), and returns its elements with each object's members.
    fn scan_blocks(&mut self, blocks: &mut Vec<Block>, spare: &mut Vec<Vec<Member>>) -> Result<(), SyntaxError> {
        self.pos += 1;
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(());
        }
        loop {
            self.skip_ws();
            let start = self.pos;
            let mut members = spare.pop().unwrap_or_default();
            if self.peek() == Some(b'{') {
                let mut nothing =
                    Found { message_members: &mut Vec::new(), content_blocks: &mut Vec::new(), spare: &mut Vec::new() };
                self.scan_object_members(Level::Other, &mut nothing, &mut members)?;
            } else {
                self.skip_value()?;
            }
            blocks.push(Block { value: start..self.pos, members });
            if self.closed_after_element(b']')? {
                return Ok(());
            }
        }
    }

    /// A member key and its colon.
    fn member_key(&mut self) -> Result<(), SyntaxError> {
        if self.peek() != Some(b'"') {
            return Err(self.err("expected a string key"));
        }
        self.scan_string()?;
        self.key_end = self.pos;
        self.skip_ws();
        if self.peek() != Some(b':') {
            return Err(self.err("expected ':' after a key"));
        }
        self.pos += 1;
        Ok(())
    }

    /// Skips a string literal starting at the current `"`.
    pub fn scan_string(&mut self) -> Result<(), SyntaxError> {
        self.pos += 1;
        self.string_escaped = false;
        loop {
            let rest = &self.bytes[self.pos..];
            let Some(i) = find_string_special(rest) else {
                return Err(SyntaxError { offset: self.bytes.len(), message: "unterminated string" });
            };
            if rest[i] < 0x20 {
                return Err(SyntaxError { offset: self.pos + i, message: "raw control character in a string" });
            }
            self.pos += i;
            if rest[i] == b'"' {
                self.pos += 1;
                return Ok(());
            }
            // An escape.
            self.string_escaped = true;
            match self.bytes.get(self.pos + 1) {
                Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => self.pos += 2,
                Some(b'u') => {
                    let hex = self.bytes.get(self.pos + 2..self.pos + 6);
                    if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                        return Err(self.err("bad \\u escape"));
                    }
                    self.pos += 6;
                }
                _ => return Err(self.err("bad escape")),
            }
        }
    }

    fn scan_number(&mut self) -> Result<(), SyntaxError> {
        let b = self.bytes;
        let digits = |p: &mut usize| {
            let s = *p;
            while b.get(*p).is_some_and(u8::is_ascii_digit) {
                *p += 1;
            }
            *p > s
        };
        let mut p = self.pos;
        if b.get(p) == Some(&b'-') {
            p += 1;
        }
        match b.get(p) {
            Some(b'0') => p += 1,
            Some(b'1'..=b'9') => {
                digits(&mut p);
            }
            _ => {
                self.pos = p;
                return Err(self.err("bad number"));
            }
        }
        if b.get(p) == Some(&b'.') {
            p += 1;
            if !digits(&mut p) {
                self.pos = p;
                return Err(self.err("bad number fraction"));
            }
        }
        if let Some(b'e' | b'E') = b.get(p) {
            p += 1;
            if let Some(b'+' | b'-') = b.get(p) {
                p += 1;
            }
            if !digits(&mut p) {
                self.pos = p;
                return Err(self.err("bad number exponent"));
            }
        }
        self.pos = p;
        Ok(())
    }

    fn scan_literal(&mut self, word: &'static [u8]) -> Result<(), SyntaxError> {
        if self.bytes[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(())
        } else {
            Err(self.err("bad literal"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(s: &str) -> bool {
        validate_document(s.as_bytes()).is_ok()
    }

    #[test]
    fn accepts_what_json_parse_accepts() {
        for s in [
            "{}",
            " {\"a\":[1,-0.5e+3,true,false,null,\"x\\u00e9\\ud83d\"]}\r",
            "42",
            "\"s\"",
            "[[[]]]",
            "-0",
            "{\"a\":{\"b\":{}}, \"c\" : [ ] }",
        ] {
            assert!(valid(s), "{s}");
        }
    }

    #[test]
    fn rejects_what_json_parse_rejects() {
        for s in [
            "",
            "   ",
            "{",
            "{\"a\":1,}",
            "[1,]",
            "01",
            "1.",
            ".5",
            "+1",
            "1e",
            "tru",
            "\"a\tb\"",
            "\"\\x\"",
            "\"\\u12g4\"",
            "{'a':1}",
            "\u{feff}{}",
            "\u{a0}{}",
            "{} {}",
            "{\"a\" 1}",
            "NaN",
            "{\"a\":1}}",
            "[1 2]",
        ] {
            assert!(!valid(s), "{s:?}");
        }
    }

    #[test]
    fn string_special_search_finds_the_first_quote_backslash_or_control_byte() {
        // Past 16 + 64 + 32 bytes: the first 16 looked at alone, then rounds of 64 and 32, then the rest.
        for len in 0..200 {
            for special in [b'"', b'\\', 0x00, 0x1f] {
                for at in 0..len {
                    let mut v = vec![b'a'; len];
                    v[at] = special;
                    if at + 1 < len {
                        v[at + 1] = b'"';
                    }
                    assert_eq!(find_string_special(&v), Some(at), "len {len} at {at} byte {special}");
                }
            }
            assert_eq!(find_string_special(&vec![0x80u8; len]), None, "high bytes are content");
            assert_eq!(find_string_special(&vec![b' '; len]), None);
        }
    }

    #[test]
    fn deep_nesting_does_not_overflow_the_stack() {
        let s = "[".repeat(200_000) + &"]".repeat(200_000);
        assert!(valid(&s));
    }

    #[test]
    fn one_scanner_reused_across_lines_gives_what_a_fresh_scan_of_each_gives() {
        let long = "L".repeat(LONG_STRING + 10);
        let lines = [
            format!(r#"{{"type":"message","message":{{"role":"user","content":[{{"type":"text","text":"{long}"}},{{"type":"image","data":"x"}},3]}}}}"#),
            r#"{"type":"message","message":{"role":"assistant","content":"plain"}}"#.to_owned(),
            r#"{"type":"message","message":{"role":"toolResult","content":[{"a":1},{"b":2},{"c":3},{"d":4}]},"message":null}"#.to_owned(),
            r#"{"type":"message","message":{"content":[{"x":1}],"content":[{"y":2}]}}"#.to_owned(),
            format!(r#"{{"type":"message","message":{{"content":[{{"t":"{long}"}}]}},"k":[[[[1]]]]}}"#),
            r#"{"type":"message","message":{"content":[{"x":1},"#.to_owned(),
            r#"{"type":"custom"} trailing"#.to_owned(),
            "[1,{\"a\":2}]".to_owned(),
            "\"just a string\"".to_owned(),
            "{}".to_owned(),
            r#"{"message":{"content":[]}}"#.to_owned(),
            format!(r#"{{"id":"{long}","message":{{"content":[{{"a":"{long}"}},{{}}]}}}}"#),
        ];
        let mut scanner = DocumentScanner::default();
        // Every order of neighbours: each line after each other one, errors included.
        for first in &lines {
            for second in &lines {
                let _ = scanner.scan(first.as_bytes());
                let reused = scanner.scan(second.as_bytes()).cloned();
                assert_eq!(reused, scan_document(second.as_bytes()), "{second} after {first}");
            }
        }
    }

    #[test]
    fn a_key_is_found_by_its_text_whether_or_not_it_is_written_with_escapes() {
        let line = br#"{"a":"x\ny","\u0074ype":"m","id":"\u0041","p\u0061rentId":{"i\u0064":1},"t\\":2,"typ":3}"#;
        let doc = scan_document(line).unwrap();
        let by_object = object_members(line, doc.value.clone());
        for members in [&doc.members, &by_object] {
            let value = |name: &str| find_member(line, members, name).map(|r| &line[r]);
            assert_eq!(value("type"), Some(&br#""m""#[..]));
            assert_eq!(value("id"), Some(&br#""\u0041""#[..]), "an escape in the value does not touch the key");
            assert_eq!(value("parentId"), Some(&br#"{"i\u0064":1}"#[..]));
            assert_eq!(value("t\\"), Some(&b"2"[..]), "the key decodes to t and a backslash");
            assert_eq!(value("a"), Some(&br#""x\ny""#[..]));
            assert_eq!(value("i"), None);
            let escaped: Vec<bool> = members.iter().map(|m| m.key_escaped).collect();
            assert_eq!(escaped, [false, true, false, true, true, false]);
        }
    }

    #[test]
    fn every_known_name_is_found_by_its_number_the_last_duplicate_winning_and_near_misses_are_not() {
        let names = ["type", "id", "parentId", "timestamp", "message", "role", "content", "stopReason", "text", "name"];
        for name in names {
            assert_ne!(KnownName::of(name.as_bytes()), KnownName::Other, "{name}");
            let line = format!(r#"{{"{name}":1,"{name}s":2,"{}":3,"{name}":4}}"#, &name[1..]);
            let doc = scan_document(line.as_bytes()).unwrap();
            assert_eq!(find_member(line.as_bytes(), &doc.members, name).map(|r| &line.as_bytes()[r]), Some(&b"4"[..]));
            let near = format!("{name}s");
            assert_eq!(find_member(line.as_bytes(), &doc.members, &near).map(|r| &line.as_bytes()[r]), Some(&b"2"[..]));
            assert_eq!(KnownName::of(near.as_bytes()), KnownName::Other);
        }
        // All in one object, each with its own value: no two names share a number.
        let line = format!(
            "{{{}}}",
            names.iter().enumerate().map(|(i, n)| format!(r#""{n}":{i}"#)).collect::<Vec<_>>().join(",")
        );
        let doc = scan_document(line.as_bytes()).unwrap();
        for (i, name) in names.iter().enumerate() {
            let found = find_member(line.as_bytes(), &doc.members, name).map(|r| line.as_bytes()[r].to_vec());
            assert_eq!(found, Some(i.to_string().into_bytes()), "{name}");
        }
    }

    #[test]
    fn members_report_key_and_value_ranges_in_order() {
        let s = br#"{ "a" : 1, "b":{"x":[1]} ,"a":"z"}"#;
        let r = validate_document(s).unwrap();
        let m = object_members(s, r);
        let got: Vec<(&str, &str)> = m
            .iter()
            .map(|m| {
                (std::str::from_utf8(&s[m.key.clone()]).unwrap(), std::str::from_utf8(&s[m.value.clone()]).unwrap())
            })
            .collect();
        assert_eq!(got, vec![("\"a\"", "1"), ("\"b\"", "{\"x\":[1]}"), ("\"a\"", "\"z\"")]);
        assert_eq!(find_member(s, &m, "a").map(|r| &s[r]), Some(&b"\"z\""[..]));
    }
}
