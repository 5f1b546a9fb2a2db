//! JavaScript strings, held as WTF-8.
//!
//! pi reads and writes its files with `JSON.parse`/`JSON.stringify`, whose strings are UTF-16 and may hold lone
//! surrogates (`"\ud83d"`, which pi really writes when a model's output is cut mid-emoji). A Rust `String` cannot
//! hold those, so a decoded JSON string is kept as WTF-8: UTF-8, plus three-byte sequences for lone surrogates.
//! Well-formed strings are plain UTF-8 and borrow as `&str` for free.

use std::fmt;

/// A JavaScript string value: UTF-8, except that lone surrogates are kept (as WTF-8) instead of being lost.
#[derive(Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JsString(Bytes16);

impl Clone for JsString {
    /// One copy of the bytes: smallvec's own `clone` pushes them one at a time, and every id an open indexes
    /// is cloned into the index.
    fn clone(&self) -> Self {
        JsString(Bytes16::from_slice(&self.0))
    }
}

/// A string's bytes, held inline up to 16 (every pi id, most keys, roles and names): an open makes two or three
/// of them per entry, and each would otherwise be an allocation.
type Bytes16 = smallvec::SmallVec<[u8; 16]>;

impl JsString {
    /// The empty string.
    pub fn new() -> Self {
        JsString(Bytes16::new())
    }

    /// [`JsString::from_wtf8`] of borrowed bytes: a short string is not allocated at all.
    #[inline]
    pub fn from_wtf8_slice(bytes: &[u8]) -> Self {
        // Ids and most keys are ASCII: checked in line, without the general validation's call.
        if bytes.is_ascii() {
            return JsString(Bytes16::from_slice(bytes));
        }
        Self::wtf8_or_lossy(bytes, Bytes16::from_slice)
    }

    /// A string from WTF-8 bytes previously taken from [`JsString::as_bytes`] (e.g. stored in the catalog index).
    /// Bytes that are not WTF-8 are decoded lossily, so a damaged store cannot produce an invalid string.
    pub fn from_wtf8(bytes: Vec<u8>) -> Self {
        Self::wtf8_or_lossy(bytes, Bytes16::from_vec)
    }

    /// `bytes` kept as they are (through `keep`, owned or copied) when they are WTF-8, else decoded lossily.
    fn wtf8_or_lossy<B: AsRef<[u8]>>(bytes: B, keep: impl FnOnce(B) -> Bytes16) -> Self {
        let b = bytes.as_ref();
        if std::str::from_utf8(b).is_ok() || is_wtf8(b) {
            JsString(keep(bytes))
        } else {
            let mut s = JsString::new();
            s.push_bytes_lossy(b);
            s
        }
    }

    /// The string as `&str`, when it holds no lone surrogate.
    pub fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.0).ok()
    }

    /// The WTF-8 bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// True for `""`.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// True when the string equals `s` exactly.
    pub fn eq_str(&self, s: &str) -> bool {
        self.0.as_slice() == s.as_bytes()
    }

    /// Appends a Unicode scalar value.
    pub fn push_char(&mut self, c: char) {
        let mut buf = [0u8; 4];
        self.0.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
    }

    /// Appends `s`.
    pub fn push_str(&mut self, s: &str) {
        self.push_wtf8(s.as_bytes());
    }

    /// Appends another JavaScript string. A lone high surrogate at the end of `self` followed by a lone low
    /// surrogate at the start of `other` becomes one supplementary character, exactly as JS concatenation pairs
    /// UTF-16 code units.
    pub fn push_js(&mut self, other: &JsString) {
        self.push_wtf8(&other.0);
    }

    fn push_wtf8(&mut self, bytes: &[u8]) {
        if let (Some(high), Some(low)) = (trailing_high_surrogate(&self.0), leading_low_surrogate(bytes)) {
            self.0.truncate(self.0.len() - 3);
            self.push_code_point(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00));
            self.0.extend_from_slice(&bytes[3..]);
        } else {
            self.0.extend_from_slice(bytes);
        }
    }

    /// Appends a code point, which may be a lone surrogate (encoded as WTF-8).
    pub fn push_code_point(&mut self, cp: u32) {
        if let Some(c) = char::from_u32(cp) {
            self.push_char(c);
        } else {
            // A surrogate: the generalized UTF-8 three-byte form.
            self.0.push(0xE0 | (cp >> 12) as u8);
            self.0.push(0x80 | ((cp >> 6) & 0x3F) as u8);
            self.0.push(0x80 | (cp & 0x3F) as u8);
        }
    }

    /// Appends raw bytes from a file, replacing invalid UTF-8 the way a WHATWG/Node UTF-8 decoder does (one
    /// U+FFFD per maximal invalid subpart), since pi only ever sees the decoded text.
    pub fn push_bytes_lossy(&mut self, bytes: &[u8]) {
        if let Ok(s) = std::str::from_utf8(bytes) {
            self.push_str(s);
            return;
        }
        for chunk in bytes.utf8_chunks() {
            self.push_str(chunk.valid());
            if !chunk.invalid().is_empty() {
                self.push_char('\u{FFFD}');
            }
        }
    }

    /// Iterates over the code points (lone surrogates included as their values).
    pub fn code_points(&self) -> CodePoints<'_> {
        CodePoints { bytes: &self.0, pos: 0 }
    }

    /// The length in UTF-16 code units, as JavaScript's `length`.
    pub fn utf16_len(&self) -> usize {
        self.code_points().map(|cp| if cp >= 0x10000 { 2 } else { 1 }).sum()
    }

    /// A `String` with every lone surrogate replaced by U+FFFD.
    pub fn to_string_lossy(&self) -> String {
        match self.as_str() {
            Some(s) => s.to_owned(),
            None => self.code_points().map(|cp| char::from_u32(cp).unwrap_or('\u{FFFD}')).collect(),
        }
    }

    /// `String.prototype.trim`: removes JavaScript white space and line terminators from both ends.
    pub fn trim(&self) -> JsString {
        let mut start = 0;
        let mut end = self.0.len();
        let mut it = CodePoints { bytes: &self.0, pos: 0 };
        while let Some(cp) = it.next() {
            if !is_js_whitespace(cp) {
                break;
            }
            start = it.pos;
        }
        // Walk back from the end over whole code points.
        while end > start {
            let mut b = end - 1;
            while b > start && (self.0[b] & 0xC0) == 0x80 {
                b -= 1;
            }
            let cp = CodePoints { bytes: &self.0[b..end], pos: 0 }.next().unwrap_or(0);
            if !is_js_whitespace(cp) {
                break;
            }
            end = b;
        }
        JsString(Bytes16::from_slice(&self.0[start..end]))
    }

    /// `s.replace(/[\r\n]+/g, " ")`: every run of CR/LF becomes one space.
    pub fn collapse_line_breaks(&self) -> JsString {
        let mut out = Vec::with_capacity(self.0.len());
        let mut in_run = false;
        for &b in &self.0 {
            if b == b'\r' || b == b'\n' {
                if !in_run {
                    out.push(b' ');
                    in_run = true;
                }
            } else {
                in_run = false;
                out.push(b);
            }
        }
        JsString(Bytes16::from_vec(out))
    }

    /// Writes the string as `JSON.stringify` would quote it.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        write_json_string_bytes(&self.0, out);
    }

    /// The string quoted as `JSON.stringify` would.
    pub fn to_json(&self) -> String {
        let mut out = Vec::with_capacity(self.0.len() + 2);
        self.write_json(&mut out);
        String::from_utf8(out).expect("JSON quoting escapes every surrogate")
    }
}

impl From<&str> for JsString {
    fn from(s: &str) -> Self {
        JsString(Bytes16::from_slice(s.as_bytes()))
    }
}

impl From<String> for JsString {
    fn from(s: String) -> Self {
        JsString(Bytes16::from_vec(s.into_bytes()))
    }
}

impl fmt::Debug for JsString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_json())
    }
}

impl fmt::Display for JsString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_string_lossy())
    }
}

/// Code points of a WTF-8 string.
pub struct CodePoints<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Iterator for CodePoints<'_> {
    type Item = u32;
    fn next(&mut self) -> Option<u32> {
        let b = &self.bytes[self.pos..];
        let first = *b.first()?;
        let (cp, len) = if first < 0x80 {
            (first as u32, 1)
        } else if first < 0xE0 {
            (((first as u32 & 0x1F) << 6) | (b[1] as u32 & 0x3F), 2)
        } else if first < 0xF0 {
            (((first as u32 & 0x0F) << 12) | ((b[1] as u32 & 0x3F) << 6) | (b[2] as u32 & 0x3F), 3)
        } else {
            (
                ((first as u32 & 0x07) << 18)
                    | ((b[1] as u32 & 0x3F) << 12)
                    | ((b[2] as u32 & 0x3F) << 6)
                    | (b[3] as u32 & 0x3F),
                4,
            )
        };
        self.pos += len;
        Some(cp)
    }
}

fn trailing_high_surrogate(bytes: &[u8]) -> Option<u32> {
    let n = bytes.len();
    if n >= 3 && bytes[n - 3] == 0xED && (0xA0..=0xAF).contains(&bytes[n - 2]) {
        Some(0xD000 | ((bytes[n - 2] as u32 & 0x3F) << 6) | (bytes[n - 1] as u32 & 0x3F))
    } else {
        None
    }
}

fn leading_low_surrogate(bytes: &[u8]) -> Option<u32> {
    if bytes.len() >= 3 && bytes[0] == 0xED && (0xB0..=0xBF).contains(&bytes[1]) {
        Some(0xD000 | ((bytes[1] as u32 & 0x3F) << 6) | (bytes[2] as u32 & 0x3F))
    } else {
        None
    }
}

/// JavaScript's WhiteSpace and LineTerminator code points, which `trim` removes. Not Rust's `char::is_whitespace`:
/// JS includes U+FEFF and excludes U+0085.
pub fn is_js_whitespace(cp: u32) -> bool {
    matches!(
        cp,
        0x09 | 0x0A | 0x0B | 0x0C | 0x0D | 0x20 | 0xA0 | 0x1680 | 0x2000
            ..=0x200A | 0x2028 | 0x2029 | 0x202F | 0x205F | 0x3000 | 0xFEFF
    )
}

/// Quotes WTF-8 bytes as `JSON.stringify` does: `"` `\` and control characters escaped (short forms where JSON has
/// them, else `\u00xx`), lone surrogates as `\udxxx`, everything else (U+2028 included) as is.
pub fn write_json_string_bytes(bytes: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        // Skip plain text in bulk: strings here can be megabytes of tool output.
        match find_escape_candidate(&bytes[i..]) {
            Some(k) => i += k,
            None => break,
        }
        let b = bytes[i];
        let escape: Option<&[u8]> = match b {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            0x08 => Some(b"\\b"),
            0x0C => Some(b"\\f"),
            b'\n' => Some(b"\\n"),
            b'\r' => Some(b"\\r"),
            b'\t' => Some(b"\\t"),
            _ => None,
        };
        if let Some(e) = escape {
            out.extend_from_slice(&bytes[start..i]);
            out.extend_from_slice(e);
            i += 1;
            start = i;
        } else if b < 0x20 {
            out.extend_from_slice(&bytes[start..i]);
            out.extend_from_slice(b"\\u00");
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 0xF) as usize]);
            i += 1;
            start = i;
        } else if b == 0xED && i + 2 < bytes.len() && bytes[i + 1] >= 0xA0 {
            // A WTF-8 surrogate (ED A0..BF xx): write it as an escape, as JSON.stringify does for lone surrogates.
            out.extend_from_slice(&bytes[start..i]);
            let cp = 0xD000 | ((bytes[i + 1] as u32 & 0x3F) << 6) | (bytes[i + 2] as u32 & 0x3F);
            out.extend_from_slice(b"\\u");
            for shift in [12, 8, 4, 0] {
                out.push(HEX[((cp >> shift) & 0xF) as usize]);
            }
            i += 3;
            start = i;
        } else {
            i += 1;
        }
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// True when `bytes` is UTF-8 extended with three-byte encodings of surrogates (WTF-8 without paired surrogates).
fn is_wtf8(bytes: &[u8]) -> bool {
    let mut i = 0;
    while i < bytes.len() {
        let rest = &bytes[i..];
        match std::str::from_utf8(rest) {
            Ok(_) => return true,
            Err(e) => {
                let at = i + e.valid_up_to();
                let b = &bytes[at..];
                // A surrogate: ED A0..BF 80..BF.
                if b.len() >= 3 && b[0] == 0xED && (0xA0..=0xBF).contains(&b[1]) && (0x80..=0xBF).contains(&b[2]) {
                    i = at + 3;
                } else {
                    return false;
                }
            }
        }
    }
    true
}

/// Decodes a validated string literal (quotes included).
pub fn decode_string_literal(lit: &[u8]) -> JsString {
    decode_string_body(&lit[1..lit.len() - 1])
}

/// A validated string literal's text as bytes to compare with an ASCII name (an entry's type, a role, a block's
/// type): the literal's inside as it lies when it holds no escape, decoded when it does. Bytes that are not UTF-8
/// match no ASCII name either way (decoded, they are U+FFFD). Decoding made a string for each of these on every
/// line of an open.
pub fn literal_name_bytes(lit: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let body = &lit[1..lit.len() - 1];
    if body.contains(&b'\\') {
        std::borrow::Cow::Owned(decode_string_body(body).as_bytes().to_vec())
    } else {
        std::borrow::Cow::Borrowed(body)
    }
}

/// Decodes the inside of a validated string literal (no quotes), or a piece of it that splits no escape.
pub fn decode_string_body(body: &[u8]) -> JsString {
    let mut out = JsString::new();
    let mut i = 0;
    let mut start = 0;
    // From escape to escape: the bytes between are copied as they are.
    while let Some(plain) = memchr::memchr(b'\\', &body[i..]) {
        i += plain;
        out.push_bytes_lossy(&body[start..i]);
        let c = body[i + 1];
        i += 2;
        match c {
            b'"' => out.push_char('"'),
            b'\\' => out.push_char('\\'),
            b'/' => out.push_char('/'),
            b'b' => out.push_char('\u{8}'),
            b'f' => out.push_char('\u{c}'),
            b'n' => out.push_char('\n'),
            b'r' => out.push_char('\r'),
            b't' => out.push_char('\t'),
            _ => {
                let hex = std::str::from_utf8(&body[i..i + 4]).expect("validated hex");
                let unit = u32::from_str_radix(hex, 16).expect("validated hex");
                i += 4;
                // push_code_point + push_js pairing is done by JsString when halves meet.
                let mut unit_str = JsString::new();
                unit_str.push_code_point(unit);
                out.push_js(&unit_str);
            }
        }
        start = i;
    }
    out.push_bytes_lossy(&body[start..]);
    out
}

/// The first byte that ends a run of plain string content: `"`, `\\`, or a control character (which JSON forbids
/// raw in strings). This is the loop every multi-megabyte base64 image goes through, so it looks at 16 bytes at a
/// time with SSE2 (part of every x86-64 CPU) and falls back to bytes elsewhere.
#[inline]
pub fn find_string_special(bytes: &[u8]) -> Option<usize> {
    find_special::<b'"'>(bytes)
}

/// The first byte a JSON string writer must look at: what [`find_string_special`] finds, or 0xED (the lead byte
/// of a WTF-8 surrogate, which is written as an escape).
#[inline]
pub fn find_escape_candidate(bytes: &[u8]) -> Option<usize> {
    find_special::<0xED>(bytes)
}

/// The first `"`, `\\`, control character or `EXTRA`.
#[inline]
fn find_special<const EXTRA: u8>(bytes: &[u8]) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    {
        // Most strings (keys, ids, short values) end within their first 16 bytes: those are looked at here, in
        // line, and only a longer run goes to the wider loop (a call, as it is compiled for AVX2).
        if let Some(first) = bytes.get(..16) {
            // SAFETY: SSE2 is part of the x86-64 baseline.
            let mask = unsafe { special_mask_sse2::<EXTRA>(first) };
            if mask != 0 {
                return Some(mask.trailing_zeros() as usize);
            }
            if bytes.len() >= 16 + 64 && std::is_x86_feature_detected!("avx2") {
                // SAFETY: AVX2 was just detected.
                return unsafe { find_special_avx2::<EXTRA>(bytes, 16) };
            }
        }
        // (Shorter than 16 bytes: all of it is looked at byte by byte.)
        find_special_sse2::<EXTRA>(bytes, if bytes.len() >= 16 { 16 } else { 0 })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        bytes.iter().position(|&b| is_special::<EXTRA>(b))
    }
}

/// Whether `b` is `"`, `\\`, a control character or `EXTRA`: what the searches below look for, a byte at a time.
#[inline(always)]
fn is_special<const EXTRA: u8>(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < 0x20 || b == EXTRA
}

/// [`find_special`] from `start` on, 16 bytes a round with SSE2: where AVX2 is missing, and for runs too short
/// for it.
#[cfg(target_arch = "x86_64")]
fn find_special_sse2<const EXTRA: u8>(bytes: &[u8], start: usize) -> Option<usize> {
    let mut base = start;
    let mut chunks = bytes[start..].chunks_exact(16);
    for chunk in &mut chunks {
        // SAFETY: SSE2 is part of the x86-64 baseline.
        let mask = unsafe { special_mask_sse2::<EXTRA>(chunk) };
        if mask != 0 {
            return Some(base + mask.trailing_zeros() as usize);
        }
        base += 16;
    }
    chunks.remainder().iter().position(|&b| is_special::<EXTRA>(b)).map(|i| base + i)
}

/// A bit for each of the first 16 bytes of `chunk` that is `"`, `\\`, a control character or `EXTRA`.
///
/// # Safety
/// `chunk` holds at least 16 bytes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn special_mask_sse2<const EXTRA: u8>(chunk: &[u8]) -> u32 {
    use std::arch::x86_64::*;
    debug_assert!(chunk.len() >= 16);
    let v = _mm_loadu_si128(chunk.as_ptr().cast());
    let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
    let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
    let extra = _mm_cmpeq_epi8(v, _mm_set1_epi8(EXTRA as i8));
    // Unsigned v <= 0x1f, as max(v, 0x1f) == 0x1f.
    let limit = _mm_set1_epi8(0x1f);
    let control = _mm_cmpeq_epi8(_mm_max_epu8(v, limit), limit);
    let any = _mm_or_si128(_mm_or_si128(quote, backslash), _mm_or_si128(control, extra));
    _mm_movemask_epi8(any) as u32
}

/// [`find_special`] from `start` on, 64 bytes a round with AVX2: the long strings of a session (tool output,
/// file contents, base64 images) are most of its bytes, and this is the one pass over them an open makes.
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn find_special_avx2<const EXTRA: u8>(bytes: &[u8], start: usize) -> Option<usize> {
    use std::arch::x86_64::*;
    let quote = _mm256_set1_epi8(b'"' as i8);
    let backslash = _mm256_set1_epi8(b'\\' as i8);
    let extra = _mm256_set1_epi8(EXTRA as i8);
    let limit = _mm256_set1_epi8(0x1f);
    let mask_of = |at: usize| {
        // SAFETY: callers pass `at` with 32 bytes after it in `bytes`.
        let v = unsafe { _mm256_loadu_si256(bytes.as_ptr().add(at).cast()) };
        let control = _mm256_cmpeq_epi8(_mm256_max_epu8(v, limit), limit);
        let any = _mm256_or_si256(
            _mm256_or_si256(_mm256_cmpeq_epi8(v, quote), _mm256_cmpeq_epi8(v, backslash)),
            _mm256_or_si256(control, _mm256_cmpeq_epi8(v, extra)),
        );
        _mm256_movemask_epi8(any) as u32 as u64
    };
    let mut at = start;
    while at + 64 <= bytes.len() {
        let mask = mask_of(at) | (mask_of(at + 32) << 32);
        if mask != 0 {
            return Some(at + mask.trailing_zeros() as usize);
        }
        at += 64;
    }
    if at + 32 <= bytes.len() {
        let mask = mask_of(at);
        if mask != 0 {
            return Some(at + mask.trailing_zeros() as usize);
        }
        at += 32;
    }
    bytes[at..].iter().position(|&b| is_special::<EXTRA>(b)).map(|i| at + i)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Each of the ways the search can go, whatever this machine's CPU would choose: the SSE2 rounds and the
    // AVX2 ones (when the CPU has AVX2), from the start and from 16.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn every_way_of_searching_a_string_finds_the_same_first_special_byte() {
        let naive = |v: &[u8], start: usize| v[start..].iter().position(|&b| is_special::<0xED>(b)).map(|i| start + i);
        for len in 0..200 {
            for at in 0..len {
                for special in [b'"', b'\\', 0x00, 0x1f, 0xED] {
                    let mut v = vec![b'a'; len];
                    v[at] = special;
                    for start in [0, 16.min(len)] {
                        let want = naive(&v, start);
                        assert_eq!(find_special_sse2::<0xED>(&v, start), want, "SSE2 len {len} at {at} from {start}");
                        if std::is_x86_feature_detected!("avx2") {
                            // SAFETY: AVX2 was just detected.
                            let avx2 = unsafe { find_special_avx2::<0xED>(&v, start) };
                            assert_eq!(avx2, want, "AVX2 len {len} at {at} from {start}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn an_escape_candidate_is_found_at_any_place_in_any_length() {
        for len in 0..200 {
            for special in [b'"', b'\\', 0x00, 0x1f, 0xED] {
                for at in 0..len {
                    let mut v = vec![b'a'; len];
                    v[at] = special;
                    if at + 1 < len {
                        v[at + 1] = 0xED;
                    }
                    assert_eq!(find_escape_candidate(&v), Some(at), "len {len} at {at} byte {special}");
                }
            }
            assert_eq!(find_escape_candidate(&vec![0xEEu8; len]), None);
        }
    }

    #[test]
    fn surrogate_halves_pair_up_when_concatenated() {
        let mut a = JsString::new();
        a.push_code_point(0xD83D);
        let mut b = JsString::new();
        b.push_code_point(0xDE00);
        a.push_js(&b);
        assert_eq!(a.as_str(), Some("😀"));
        assert_eq!(a.utf16_len(), 2);
    }

    #[test]
    fn lone_surrogates_are_quoted_as_escapes_like_json_stringify() {
        let mut s = JsString::from("a");
        s.push_code_point(0xD83D);
        s.push_str("\u{2028}\u{7f}\u{1}\"/");
        assert_eq!(s.to_json(), "\"a\\ud83d\u{2028}\u{7f}\\u0001\\\"/\"");
    }

    #[test]
    fn trim_uses_javascript_white_space() {
        let s = JsString::from("\u{feff}\u{3000} x \u{85}");
        assert_eq!(s.trim().as_str(), Some("x \u{85}"));
        assert_eq!(JsString::from(" \t\n").trim().as_str(), Some(""));
    }

    #[test]
    fn line_break_runs_collapse_to_one_space() {
        let s = JsString::from("  line1\r\nline2\n\nline3  ");
        assert_eq!(s.collapse_line_breaks().trim().as_str(), Some("line1 line2 line3"));
    }

    #[test]
    fn invalid_utf8_is_replaced_per_maximal_subpart() {
        let mut s = JsString::new();
        s.push_bytes_lossy(b"a\xED\xA0\x80b\xF0\x9F\x98");
        assert_eq!(s.as_str(), Some("a\u{FFFD}\u{FFFD}\u{FFFD}b\u{FFFD}"));
    }
}
