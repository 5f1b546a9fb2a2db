//! JSON values with JavaScript's semantics, and `JSON.stringify`'s exact output.
//!
//! Values that pi builds (the entries it appends, the messages it derives while building context) must come out
//! byte for byte as `JSON.stringify` writes them, or a file we write would not be the file pi writes. So this
//! value type keeps what `JSON.parse` keeps (key order, last duplicate wins at the first position, strings as
//! UTF-16 with lone surrogates) and writes what `JSON.stringify` writes (array-index keys first, numbers in
//! JavaScript's shortest form). Number literals are kept as written, so a value that is only passed through can
//! also be written unchanged ([`Json::write_preserving`]).

use super::scan::{validate_document, SyntaxError};
use super::string::{decode_string_literal, JsString};

/// A parsed JSON value.
///
/// `JSON.parse` accepts any depth of nesting, so dropping, cloning and writing a value use a heap stack, never
/// recursion: a line holding `[[[…]]]` a million deep must not overflow a thread's stack (and abort the process
/// with every session it holds).
#[derive(Debug)]
pub enum Json {
    /// `null`
    Null,
    /// `true` / `false`
    Bool(bool),
    /// A number, as its literal text (always a valid JSON number).
    Number(Box<str>),
    /// A string.
    String(JsString),
    /// An array.
    Array(Vec<Json>),
    /// An object.
    Object(Object),
}

/// A JSON object: members in `JSON.parse` order (first position of each key), one value per key (the last).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Object {
    members: Vec<(JsString, Json)>,
}

impl Object {
    /// An empty object.
    pub fn new() -> Self {
        Object::default()
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&Json> {
        self.members.iter().find(|(k, _)| k.eq_str(key)).map(|(_, v)| v)
    }

    /// The value of `key`, mutably.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut Json> {
        self.members.iter_mut().find(|(k, _)| k.eq_str(key)).map(|(_, v)| v)
    }

    /// Sets `key`, keeping its position when it exists (as JS assignment does), else appending it.
    pub fn insert(&mut self, key: impl Into<JsString>, value: Json) {
        let key = key.into();
        match self.members.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.members.push((key, value)),
        }
    }

    /// Removes `key`, as JS `delete` does.
    pub fn remove(&mut self, key: &str) -> Option<Json> {
        let i = self.members.iter().position(|(k, _)| k.eq_str(key))?;
        Some(self.members.remove(i).1)
    }

    /// True when `key` is present (`key in obj`).
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The members in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&JsString, &Json)> {
        self.members.iter().map(|(k, v)| (k, v))
    }

    /// The members in insertion order, values mutable (keys are not: changing one could merge two members).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&JsString, &mut Json)> {
        self.members.iter_mut().map(|(k, v)| (&*k, v))
    }

    /// Renames the members whose key `rename` replaces, in place; returns how many. A new key that another member
    /// already has gets ` #2` (` #3`, …) added, so no two members merge and no value is lost.
    pub fn rename_keys(&mut self, mut rename: impl FnMut(&JsString) -> Option<JsString>) -> usize {
        let mut renamed = 0;
        for i in 0..self.members.len() {
            let Some(new) = rename(&self.members[i].0) else { continue };
            let taken = |key: &JsString| self.members.iter().enumerate().any(|(j, (k, _))| j != i && k == key);
            let mut key = new.clone();
            let mut n = 2;
            while taken(&key) {
                key = JsString::from(format!("{} #{n}", new.to_string_lossy()));
                n += 1;
            }
            self.members[i].0 = key;
            renamed += 1;
        }
        renamed
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// True when there are no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The members in the order JavaScript enumerates them: array-index keys ascending, then the rest in
    /// insertion order. `JSON.stringify`, `Object.entries` and object spread all use this order.
    pub fn js_order(&self) -> Vec<(&JsString, &Json)> {
        let mut indexed: Vec<(u32, &JsString, &Json)> = Vec::new();
        let mut named = Vec::new();
        for (k, v) in &self.members {
            match array_index(k) {
                Some(i) => indexed.push((i, k, v)),
                None => named.push((k, v)),
            }
        }
        indexed.sort_by_key(|(i, _, _)| *i);
        indexed.into_iter().map(|(_, k, v)| (k, v)).chain(named).collect()
    }
}

impl FromIterator<(JsString, Json)> for Object {
    fn from_iter<I: IntoIterator<Item = (JsString, Json)>>(iter: I) -> Self {
        let mut o = Object::new();
        for (k, v) in iter {
            o.insert(k, v);
        }
        o
    }
}

/// The array index a property key denotes (a canonical decimal below 2^32 - 1), if any.
fn array_index(key: &JsString) -> Option<u32> {
    let b = key.as_bytes();
    if b.is_empty() || b.len() > 10 || !b.iter().all(u8::is_ascii_digit) || (b.len() > 1 && b[0] == b'0') {
        return None;
    }
    let n: u64 = std::str::from_utf8(b).ok()?.parse().ok()?;
    (n < u32::MAX as u64).then_some(n as u32)
}

impl Json {
    /// Parses one JSON document exactly as `JSON.parse` would accept it.
    pub fn parse(bytes: &[u8]) -> Result<Json, SyntaxError> {
        let range = validate_document(bytes)?;
        Ok(build(&bytes[range]))
    }

    /// A string value.
    pub fn str(s: &str) -> Json {
        Json::String(JsString::from(s))
    }

    /// A number value from an `f64`, written as JavaScript would; NaN and the infinities become `null`, which is
    /// what `JSON.stringify` writes for them.
    pub fn number(n: f64) -> Json {
        if n.is_finite() {
            Json::Number(format_js_number(n).into())
        } else {
            Json::Null
        }
    }

    /// The object itself, if this is one (else the value back).
    pub fn into_object(mut self) -> Result<Object, Json> {
        match &mut self {
            Json::Object(o) => Ok(std::mem::take(o)),
            _ => Err(self),
        }
    }

    /// The elements themselves, if this is an array (else the value back).
    pub fn into_array(mut self) -> Result<Vec<Json>, Json> {
        match &mut self {
            Json::Array(items) => Ok(std::mem::take(items)),
            _ => Err(self),
        }
    }

    /// The string itself, if this is one (else the value back).
    pub fn into_string(mut self) -> Result<JsString, Json> {
        match &mut self {
            Json::String(s) => Ok(std::mem::take(s)),
            _ => Err(self),
        }
    }

    /// The object, if this is one.
    pub fn as_object(&self) -> Option<&Object> {
        match self {
            Json::Object(o) => Some(o),
            _ => None,
        }
    }

    /// The string, if this is one.
    pub fn as_js_str(&self) -> Option<&JsString> {
        match self {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    /// `value.key` in JavaScript: a member of an object, `undefined` (None) otherwise. (Property access on
    /// primitives and arrays never finds the keys pi reads.)
    pub fn get(&self, key: &str) -> Option<&Json> {
        self.as_object().and_then(|o| o.get(key))
    }

    /// JavaScript truthiness.
    pub fn truthy(&self) -> bool {
        match self {
            Json::Null => false,
            Json::Bool(b) => *b,
            Json::Number(n) => {
                let v = number_value(n);
                v != 0.0 && !v.is_nan()
            }
            Json::String(s) => !s.is_empty(),
            Json::Array(_) | Json::Object(_) => true,
        }
    }

    /// Writes the value exactly as `JSON.stringify` would.
    pub fn write_canonical(&self, out: &mut Vec<u8>) {
        self.write(out, true);
    }

    /// Writes the value keeping number literals and key order as parsed (still valid JSON, still the same value
    /// to any reader), for values that are only passed through.
    pub fn write_preserving(&self, out: &mut Vec<u8>) {
        self.write(out, false);
    }

    /// `JSON.stringify(value)`.
    pub fn to_canonical_string(&self) -> String {
        let mut out = Vec::new();
        self.write_canonical(&mut out);
        String::from_utf8(out).expect("JSON output is UTF-8")
    }

    fn write(&self, out: &mut Vec<u8>, canonical: bool) {
        // Containers being written, each with the members still to write (a heap stack: see the type's doc).
        enum Open<'a> {
            Array(std::slice::Iter<'a, Json>, bool),
            Object(std::vec::IntoIter<(&'a JsString, &'a Json)>, bool),
        }
        let mut stack: Vec<Open<'_>> = Vec::new();
        let mut next = Some(self);
        loop {
            if let Some(v) = next.take() {
                match v {
                    Json::Null => out.extend_from_slice(b"null"),
                    Json::Bool(true) => out.extend_from_slice(b"true"),
                    Json::Bool(false) => out.extend_from_slice(b"false"),
                    Json::Number(n) if canonical => out.extend_from_slice(format_js_number(number_value(n)).as_bytes()),
                    Json::Number(n) => out.extend_from_slice(n.as_bytes()),
                    Json::String(s) => s.write_json(out),
                    Json::Array(items) => {
                        out.push(b'[');
                        stack.push(Open::Array(items.iter(), true));
                    }
                    Json::Object(o) => {
                        out.push(b'{');
                        let members: Vec<(&JsString, &Json)> =
                            if canonical { o.js_order() } else { o.members.iter().map(|(k, v)| (k, v)).collect() };
                        stack.push(Open::Object(members.into_iter(), true));
                    }
                }
            }
            let Some(top) = stack.last_mut() else { return };
            match top {
                Open::Array(items, first) => match items.next() {
                    Some(item) => {
                        if !std::mem::take(first) {
                            out.push(b',');
                        }
                        next = Some(item);
                    }
                    None => {
                        out.push(b']');
                        stack.pop();
                    }
                },
                Open::Object(members, first) => match members.next() {
                    Some((k, v)) => {
                        if !std::mem::take(first) {
                            out.push(b',');
                        }
                        k.write_json(out);
                        out.push(b':');
                        next = Some(v);
                    }
                    None => {
                        out.push(b'}');
                        stack.pop();
                    }
                },
            }
        }
    }

    /// Moves the children of a container out onto `stack` (for [`Drop`]).
    fn take_children(&mut self, stack: &mut Vec<Json>) {
        match self {
            Json::Array(items) => stack.append(items),
            Json::Object(o) => stack.extend(std::mem::take(&mut o.members).into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
}

impl Drop for Json {
    fn drop(&mut self) {
        let mut stack = Vec::new();
        self.take_children(&mut stack);
        while let Some(mut v) = stack.pop() {
            v.take_children(&mut stack);
        }
    }
}

impl PartialEq for Json {
    fn eq(&self, other: &Json) -> bool {
        let mut pairs = vec![(self, other)];
        while let Some(pair) = pairs.pop() {
            match pair {
                (Json::Null, Json::Null) => {}
                (Json::Bool(a), Json::Bool(b)) if a == b => {}
                (Json::Number(a), Json::Number(b)) if a == b => {}
                (Json::String(a), Json::String(b)) if a == b => {}
                (Json::Array(a), Json::Array(b)) if a.len() == b.len() => pairs.extend(a.iter().zip(b)),
                (Json::Object(a), Json::Object(b)) if a.members.len() == b.members.len() => {
                    for ((ka, va), (kb, vb)) in a.members.iter().zip(&b.members) {
                        if ka != kb {
                            return false;
                        }
                        pairs.push((va, vb));
                    }
                }
                _ => return false,
            }
        }
        true
    }
}

impl Clone for Json {
    fn clone(&self) -> Json {
        // A container being copied: what is built so far, the source members still to copy, and (for an object)
        // the key of the member whose value is being copied below it.
        enum Copy<'a> {
            Array(Vec<Json>, std::slice::Iter<'a, Json>),
            Object(Vec<(JsString, Json)>, std::slice::Iter<'a, (JsString, Json)>, JsString),
        }
        fn leaf_or_open(v: &Json) -> Result<Copy<'_>, Json> {
            Err(match v {
                Json::Null => Json::Null,
                Json::Bool(b) => Json::Bool(*b),
                Json::Number(n) => Json::Number(n.clone()),
                Json::String(s) => Json::String(s.clone()),
                Json::Array(items) => return Ok(Copy::Array(Vec::with_capacity(items.len()), items.iter())),
                Json::Object(o) => {
                    return Ok(Copy::Object(Vec::with_capacity(o.members.len()), o.members.iter(), JsString::new()))
                }
            })
        }
        let mut stack = match leaf_or_open(self) {
            Err(leaf) => return leaf,
            Ok(open) => vec![open],
        };
        loop {
            let top = stack.last_mut().expect("an open container");
            let child = match top {
                Copy::Array(_, items) => items.next(),
                Copy::Object(_, members, key) => members.next().map(|(k, v)| {
                    *key = k.clone();
                    v
                }),
            };
            let done = match child.map(leaf_or_open) {
                Some(Ok(open)) => {
                    stack.push(open);
                    continue;
                }
                Some(Err(leaf)) => leaf,
                None => match stack.pop().expect("an open container") {
                    Copy::Array(items, _) => Json::Array(items),
                    Copy::Object(members, _, _) => Json::Object(Object { members }),
                },
            };
            match stack.last_mut() {
                None => return done,
                Some(Copy::Array(items, _)) => items.push(done),
                Some(Copy::Object(members, _, key)) => members.push((std::mem::take(key), done)),
            }
        }
    }
}

/// The value of a JSON number literal, as `JSON.parse` computes it (correctly rounded; overflow is ±Infinity).
pub fn number_value(literal: &str) -> f64 {
    literal.parse().unwrap_or(f64::NAN)
}

/// `String(n)` / `JSON.stringify(n)` for finite numbers; `null` for NaN and infinities, as `JSON.stringify`.
pub fn format_js_number(n: f64) -> String {
    if !n.is_finite() {
        return "null".to_owned();
    }
    if n == 0.0 {
        return "0".to_owned();
    }
    ryu_js::Buffer::new().format(n).to_owned()
}

enum Frame {
    Array(Vec<Json>),
    Object(Object, Option<JsString>),
}

/// Builds a value from bytes already validated as exactly one JSON value. Iterative, so nesting depth is only
/// bounded by memory, as with V8.
fn build(bytes: &[u8]) -> Json {
    let mut stack: Vec<Frame> = Vec::new();
    let mut pos = 0;
    let skip_ws = |pos: &mut usize| {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = bytes.get(*pos) {
            *pos += 1;
        }
    };
    loop {
        skip_ws(&mut pos);
        // Parse a value (or open a container).
        let mut value = match bytes[pos] {
            b'{' => {
                pos += 1;
                skip_ws(&mut pos);
                if bytes[pos] == b'}' {
                    pos += 1;
                    Json::Object(Object::new())
                } else {
                    let key = read_key(bytes, &mut pos);
                    stack.push(Frame::Object(Object::new(), Some(key)));
                    continue;
                }
            }
            b'[' => {
                pos += 1;
                skip_ws(&mut pos);
                if bytes[pos] == b']' {
                    pos += 1;
                    Json::Array(Vec::new())
                } else {
                    stack.push(Frame::Array(Vec::new()));
                    continue;
                }
            }
            b'"' => {
                let end = string_end(bytes, pos);
                let s = decode_string_literal(&bytes[pos..end]);
                pos = end;
                Json::String(s)
            }
            b't' => {
                pos += 4;
                Json::Bool(true)
            }
            b'f' => {
                pos += 5;
                Json::Bool(false)
            }
            b'n' => {
                pos += 4;
                Json::Null
            }
            _ => {
                let start = pos;
                while bytes.get(pos).is_some_and(|b| matches!(b, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')) {
                    pos += 1;
                }
                Json::Number(std::str::from_utf8(&bytes[start..pos]).expect("ASCII").into())
            }
        };
        // Attach the finished value to its container, closing containers as they end.
        loop {
            let Some(frame) = stack.last_mut() else {
                return value;
            };
            match frame {
                Frame::Array(items) => items.push(value),
                Frame::Object(obj, key) => obj.insert(key.take().expect("key before value"), value),
            }
            skip_ws(&mut pos);
            let b = bytes[pos];
            pos += 1;
            if b == b',' {
                if let Some(Frame::Object(_, key)) = stack.last_mut() {
                    skip_ws(&mut pos);
                    *key = Some(read_key(bytes, &mut pos));
                }
                break;
            }
            // A closing bracket.
            value = match stack.pop().expect("frame") {
                Frame::Array(items) => Json::Array(items),
                Frame::Object(obj, _) => Json::Object(obj),
            };
        }
    }
}

fn read_key(bytes: &[u8], pos: &mut usize) -> JsString {
    let end = string_end(bytes, *pos);
    let key = decode_string_literal(&bytes[*pos..end]);
    *pos = end;
    while bytes[*pos] != b':' {
        *pos += 1;
    }
    *pos += 1;
    key
}

/// The end (exclusive) of the validated string literal starting at `start`.
fn string_end(bytes: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    loop {
        let j = i + memchr::memchr2(b'"', b'\\', &bytes[i..]).expect("validated string");
        if bytes[j] == b'"' {
            return j + 1;
        }
        i = j + 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_nested_far_deeper_than_a_stack_parse_clone_write_and_drop() {
        // Run on a small stack, as a sidecar's worker thread is, so recursion anywhere would overflow it.
        std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(|| {
                let depth = 300_000;
                let text = format!("{}{{\"a\":[1,{{\"b\":null}}]}}{}", "[{\"k\":".repeat(depth), "}]".repeat(depth));
                let v = Json::parse(text.as_bytes()).unwrap();
                let copy = v.clone();
                assert_eq!(copy, v);
                let mut out = Vec::new();
                copy.write_preserving(&mut out);
                assert_eq!(out, text.as_bytes());
                drop(copy);
                drop(v);
            })
            .unwrap()
            .join()
            .unwrap();
    }

    fn roundtrip(s: &str) -> String {
        Json::parse(s.as_bytes()).unwrap().to_canonical_string()
    }

    #[test]
    fn canonical_output_matches_json_stringify() {
        // Expected strings are what Node 20 prints for JSON.stringify(JSON.parse(input)).
        assert_eq!(
            roundtrip(r#"{"b":1,"1":2,"a":3,"0":4,"4294967295":5,"4294967294":6,"01":7}"#),
            r#"{"0":4,"1":2,"4294967294":6,"b":1,"a":3,"4294967295":5,"01":7}"#
        );
        assert_eq!(roundtrip(r#"{"a":1,"a":2,"b":3}"#), r#"{"a":2,"b":3}"#);
        assert_eq!(
            roundtrip(r#"[-0, 1e21, 12345678901234567890, 1.0, 1e400, 0.1, 1e-7, 5e-324]"#),
            "[0,1e+21,12345678901234567000,1,null,0.1,1e-7,5e-324]"
        );
        assert_eq!(roundtrip(r#""\ud83d\ude00 \ud83d \u00e9\/""#), "\"😀 \\ud83d é/\"");
    }

    #[test]
    fn preserving_output_keeps_number_spelling() {
        let v = Json::parse(br#"{"n":12345678901234567890,"f":1.50}"#).unwrap();
        let mut out = Vec::new();
        v.write_preserving(&mut out);
        assert_eq!(out, br#"{"n":12345678901234567890,"f":1.50}"#);
    }

    #[test]
    fn truthiness_follows_javascript() {
        for (s, t) in [
            ("0", false),
            ("-0.0", false),
            ("0e5", false),
            ("1", true),
            ("\"\"", false),
            ("\"0\"", true),
            ("[]", true),
            ("{}", true),
            ("null", false),
            ("false", false),
        ] {
            assert_eq!(Json::parse(s.as_bytes()).unwrap().truthy(), t, "{s}");
        }
    }
}
