//! Frames on the byte stream: LF-delimited JSON (pi's own RPC mode, MCP, ACP) or LSP `Content-Length` headers,
//! detected from the first byte the host sends and answered in kind.
//!
//! Output always escapes U+2028 and U+2029: they are legal raw inside JSON strings, but Node's `readline` (from
//! Node 24) splits lines on them, which would cut a frame in two for a JavaScript host. Since they can only occur
//! inside strings, replacing them with `\u2028`/`\u2029` is lossless.

use std::io::{self, BufRead, Read};

/// How messages are delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// One JSON text per line, `\n`-terminated (`\r\n` accepted on input).
    Jsonl,
    /// `Content-Length: N\r\n\r\n` followed by N bytes, as LSP.
    Lsp,
}

impl Framing {
    /// The name used on the command line and in `initialize`.
    pub fn name(self) -> &'static str {
        match self {
            Framing::Jsonl => "jsonl",
            Framing::Lsp => "lsp",
        }
    }
}

/// What the reader found.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A message's bytes.
    Message(Vec<u8>),
    /// A header block that could not be understood (LSP). The reader skipped it; the host gets a parse error.
    Malformed(String),
}

/// The longest LSP header line accepted. Real headers are a few dozen bytes; a longer line is garbage to skip.
const MAX_HEADER_LINE: u64 = 8 << 10;

/// The header name the LSP reader resynchronises on after garbage, lower-cased.
const CONTENT_LENGTH: &[u8] = b"content-length:";

/// Reads frames from a byte stream. Memory follows the frames it returns: an oversized frame is skipped without
/// being held, and after a header it cannot understand the reader looks for the next `Content-Length` header
/// rather than reading the rest of the stream as headers.
pub struct FrameReader<R> {
    reader: R,
    framing: Option<Framing>,
    max_frame: usize,
    /// A header line the resynchronising scan already read (it starts with `Content-Length:`).
    pending_header: Option<Vec<u8>>,
}

impl<R: BufRead> FrameReader<R> {
    /// A reader that detects the framing from the first byte (`None`) or uses the given one.
    pub fn new(reader: R, framing: Option<Framing>, max_frame: usize) -> Self {
        FrameReader { reader, framing, max_frame, pending_header: None }
    }

    /// The framing in use (known after the first frame).
    pub fn framing(&self) -> Option<Framing> {
        self.framing
    }

    /// The next frame, or None at the end of the stream.
    pub fn next_frame(&mut self) -> io::Result<Option<Frame>> {
        let framing = match self.framing {
            Some(f) => f,
            None => {
                // Peek past leading white space without consuming anything meaningful.
                loop {
                    let buf = self.reader.fill_buf()?;
                    let Some(&first) = buf.first() else { return Ok(None) };
                    if first.is_ascii_whitespace() {
                        self.reader.consume(1);
                        continue;
                    }
                    let f = if first == b'C' || first == b'c' { Framing::Lsp } else { Framing::Jsonl };
                    self.framing = Some(f);
                    break f;
                }
            }
        };
        match framing {
            Framing::Jsonl => self.next_line(),
            Framing::Lsp => self.next_lsp(),
        }
    }

    fn next_line(&mut self) -> io::Result<Option<Frame>> {
        loop {
            let mut line = Vec::new();
            let n = (&mut self.reader).take(self.max_frame as u64 + 1).read_until(b'\n', &mut line)?;
            if n == 0 {
                return Ok(None);
            }
            if line.len() > self.max_frame {
                // Skip the rest of an oversized line (without holding it) so the next one parses.
                drop(line);
                self.skip_through(b'\n')?;
                return Ok(Some(Frame::Malformed(format!("frame larger than {} bytes", self.max_frame))));
            }
            while matches!(line.last(), Some(b'\n' | b'\r')) {
                line.pop();
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return Ok(Some(Frame::Message(line)));
        }
    }

    /// Consumes input up to and including `byte` (or to the end), keeping nothing.
    fn skip_through(&mut self, byte: u8) -> io::Result<()> {
        loop {
            let buf = self.reader.fill_buf()?;
            if buf.is_empty() {
                return Ok(());
            }
            match memchr::memchr(byte, buf) {
                Some(i) => {
                    self.reader.consume(i + 1);
                    return Ok(());
                }
                None => {
                    let n = buf.len();
                    self.reader.consume(n);
                }
            }
        }
    }

    /// One header line, without its line end; None at the end of the stream. A line longer than
    /// [`MAX_HEADER_LINE`] is returned cut (the rest is skipped), which no header parser accepts.
    fn header_line(&mut self) -> io::Result<Option<Vec<u8>>> {
        if let Some(line) = self.pending_header.take() {
            return Ok(Some(line));
        }
        let mut line = Vec::new();
        let n = (&mut self.reader).take(MAX_HEADER_LINE).read_until(b'\n', &mut line)?;
        if n == 0 {
            return Ok(None);
        }
        if line.last() != Some(&b'\n') && n as u64 == MAX_HEADER_LINE {
            self.skip_through(b'\n')?;
        }
        while matches!(line.last(), Some(b'\n' | b'\r')) {
            line.pop();
        }
        Ok(Some(line))
    }

    /// After a header the reader could not understand: skips input up to the next `Content-Length:` (in any
    /// case, anywhere, since LSP frames follow each other without a separator) and keeps that header line for the
    /// next frame. Nothing skipped is held in memory.
    fn resynchronise(&mut self) -> io::Result<()> {
        let mut matched = 0;
        loop {
            let buf = self.reader.fill_buf()?;
            if buf.is_empty() {
                return Ok(());
            }
            let mut used = 0;
            let mut found = false;
            for &b in buf {
                used += 1;
                if b.to_ascii_lowercase() == CONTENT_LENGTH[matched] {
                    matched += 1;
                } else {
                    // The name's first letter appears nowhere else in it, so a mismatch restarts at this byte.
                    matched = usize::from(b.to_ascii_lowercase() == CONTENT_LENGTH[0]);
                }
                if matched == CONTENT_LENGTH.len() {
                    found = true;
                    break;
                }
            }
            self.reader.consume(used);
            if found {
                let mut rest = Vec::new();
                (&mut self.reader).take(MAX_HEADER_LINE).read_until(b'\n', &mut rest)?;
                while matches!(rest.last(), Some(b'\n' | b'\r')) {
                    rest.pop();
                }
                let mut line = b"Content-Length:".to_vec();
                line.extend(rest);
                self.pending_header = Some(line);
                return Ok(());
            }
        }
    }

    fn next_lsp(&mut self) -> io::Result<Option<Frame>> {
        let mut length: Option<usize> = None;
        let mut saw_header = false;
        let problem = loop {
            let Some(line) = self.header_line()? else {
                return Ok(saw_header.then(|| Frame::Malformed("stream ended inside a header".into())));
            };
            if line.is_empty() {
                if !saw_header {
                    continue;
                }
                break None;
            }
            saw_header = true;
            let text = String::from_utf8_lossy(&line);
            match text.split_once(':') {
                Some((name, value)) if name.trim().eq_ignore_ascii_case("content-length") => {
                    match value.trim().parse::<usize>() {
                        Ok(v) => length = Some(v),
                        Err(_) => break Some(format!("bad Content-Length: {}", value.trim())),
                    }
                }
                Some(_) => {}
                None => break Some(format!("not a header line: {}", text.chars().take(200).collect::<String>())),
            }
        };
        if let Some(p) = problem {
            self.resynchronise()?;
            return Ok(Some(Frame::Malformed(p)));
        }
        let Some(len) = length else {
            self.resynchronise()?;
            return Ok(Some(Frame::Malformed("no Content-Length header".into())));
        };
        if len > self.max_frame {
            // Exactly the announced body is skipped, so the frame after it parses.
            io::copy(&mut (&mut self.reader).take(len as u64), &mut io::sink())?;
            return Ok(Some(Frame::Malformed(format!("frame larger than {} bytes", self.max_frame))));
        }
        // Memory follows the bytes that arrive, not the length announced.
        let mut body = Vec::with_capacity(len.min(1 << 20));
        (&mut self.reader).take(len as u64).read_to_end(&mut body)?;
        if body.len() < len {
            return Ok(Some(Frame::Malformed("stream ended inside a body".into())));
        }
        Ok(Some(Frame::Message(body)))
    }
}

/// One outgoing message as the parts it was built from, in order. A large result is one part between a small
/// head and tail, and is written as it is rather than copied into one buffer to be framed.
#[derive(Debug, Default)]
pub struct Message(pub Vec<Vec<u8>>);

impl From<Vec<u8>> for Message {
    fn from(bytes: Vec<u8>) -> Message {
        Message(vec![bytes])
    }
}

impl Message {
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.0.iter().map(Vec::len).sum()
    }

    /// Whether it has no bytes (the writer's stop signal).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its bytes in one buffer.
    pub fn into_bytes(self) -> Vec<u8> {
        let mut parts = self.0.into_iter();
        let mut out = parts.next().unwrap_or_default();
        parts.for_each(|p| out.extend_from_slice(&p));
        out
    }

    /// Frames it onto `out` (see [`encode`]).
    pub fn encode(&self, framing: Framing, out: &mut Vec<u8>) {
        match (framing, self.0.as_slice()) {
            (_, [one]) => encode(framing, one, out),
            (Framing::Jsonl, parts) => {
                parts.iter().for_each(|p| escape_line_separators(p, out));
                out.push(b'\n');
            }
            (Framing::Lsp, parts) => encode(framing, &parts.concat(), out),
        }
    }
}

/// Frames a message for output, escaping U+2028/U+2029.
pub fn encode(framing: Framing, json: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    if framing == Framing::Lsp {
        out.extend_from_slice(b"Content-Length: ");
        // The length is of the escaped body; reserve and patch it after escaping.
    }
    let body_start = out.len();
    escape_line_separators(json, out);
    if framing == Framing::Lsp {
        let body = out.split_off(body_start);
        out.truncate(start);
        out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
        out.extend_from_slice(&body);
    } else {
        out.push(b'\n');
    }
}

/// Whether `json` holds a raw U+2028 or U+2029 (which [`encode`] escapes).
pub fn needs_escaping(json: &[u8]) -> bool {
    memchr::memmem::find_iter(json, b"\xE2\x80").any(|i| matches!(json.get(i + 2), Some(0xA8 | 0xA9)))
}

/// Replaces raw U+2028/U+2029 (E2 80 A8/A9) with their JSON escapes.
pub fn escape_line_separators(json: &[u8], out: &mut Vec<u8>) {
    let mut rest = json;
    while let Some(i) = memchr::memmem::find(rest, b"\xE2\x80") {
        match rest.get(i + 2) {
            Some(&b @ (0xA8 | 0xA9)) => {
                out.extend_from_slice(&rest[..i]);
                out.extend_from_slice(if b == 0xA8 { b"\\u2028" } else { b"\\u2029" });
                rest = &rest[i + 3..];
            }
            _ => {
                out.extend_from_slice(&rest[..i + 2]);
                rest = &rest[i + 2..];
            }
        }
    }
    out.extend_from_slice(rest);
}

/// Escapes U+2028/U+2029 in output that arrives in chunks (a streamed result), carrying a sequence that a chunk
/// boundary cuts to the next chunk.
#[derive(Debug, Default)]
pub struct StreamEscaper {
    carry: Vec<u8>,
}

impl StreamEscaper {
    /// Escapes `chunk` onto `out`, holding back a trailing `E2` or `E2 80` until the next chunk decides it.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        if self.carry.is_empty() {
            let keep = chunk.len() - trailing_partial(chunk);
            escape_line_separators(&chunk[..keep], out);
            self.carry.extend_from_slice(&chunk[keep..]);
        } else {
            let mut joined = std::mem::take(&mut self.carry);
            joined.extend_from_slice(chunk);
            let keep = joined.len() - trailing_partial(&joined);
            escape_line_separators(&joined[..keep], out);
            self.carry.extend_from_slice(&joined[keep..]);
        }
    }

    /// Writes what is held back (the output ended).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        out.append(&mut self.carry);
    }
}

/// How many bytes at the end of `b` could start a U+2028/U+2029 sequence completed by what follows.
fn trailing_partial(b: &[u8]) -> usize {
    match b {
        [.., 0xE2, 0x80] => 2,
        [.., 0xE2] => 1,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(input: &[u8], framing: Option<Framing>) -> (Vec<Frame>, Option<Framing>) {
        let mut r = FrameReader::new(io::BufReader::with_capacity(3, input), framing, 1024);
        let mut out = Vec::new();
        while let Some(f) = r.next_frame().unwrap() {
            out.push(f);
        }
        (out, r.framing())
    }

    #[test]
    fn jsonl_is_detected_and_split_on_lf_only() {
        let (f, framing) = frames("\n {\"a\":\"x\u{2028}y\"}\r\n\n[1]\n{\"tail\":1}".as_bytes(), None);
        assert_eq!(framing, Some(Framing::Jsonl));
        assert_eq!(
            f,
            vec![
                Frame::Message("{\"a\":\"x\u{2028}y\"}".as_bytes().to_vec()),
                Frame::Message(b"[1]".to_vec()),
                Frame::Message(b"{\"tail\":1}".to_vec())
            ]
        );
    }

    #[test]
    fn lsp_is_detected_from_the_header() {
        let (f, framing) = frames(b"Content-Length: 2\r\nContent-Type: x\r\n\r\n{}content-length:3\n\n[1]", None);
        assert_eq!(framing, Some(Framing::Lsp));
        assert_eq!(f, vec![Frame::Message(b"{}".to_vec()), Frame::Message(b"[1]".to_vec())]);
    }

    #[test]
    fn bad_lsp_headers_are_reported_and_skipped() {
        let (f, _) = frames(b"Content-Length: x\r\n\r\nContent-Length: 2\r\n\r\n{}", Some(Framing::Lsp));
        assert!(matches!(&f[0], Frame::Malformed(m) if m.contains("bad Content-Length")));
        assert_eq!(f[1], Frame::Message(b"{}".to_vec()));
    }

    #[test]
    fn after_garbage_the_lsp_reader_finds_the_next_content_length_and_loses_nothing_after_it() {
        let good = |body: &str| format!("Content-Length: {}\r\n\r\n{body}", body.len());
        let input = [
            "no colon here\r\n".to_owned(),
            good("[1]"),
            "Content-Length: x\r\n\r\n{\"body\":\"of unknown length\"}".to_owned(),
            good("[2]"),
            "Content-Length: 99999999999999999999999999\r\n\r\n[\"huge\"]".to_owned(),
            "CONTENT-LENGTH: 3\r\n\r\n[3]".to_owned(),
        ]
        .concat();
        let (f, _) = frames(input.as_bytes(), Some(Framing::Lsp));
        let messages: Vec<&Frame> = f.iter().filter(|f| matches!(f, Frame::Message(_))).collect();
        assert_eq!(
            messages,
            [&Frame::Message(b"[1]".to_vec()), &Frame::Message(b"[2]".to_vec()), &Frame::Message(b"[3]".to_vec())]
        );
        assert_eq!(f.len(), 6, "one error per garbage: {f:?}");
    }

    #[test]
    fn an_lsp_body_over_the_limit_is_skipped_exactly_even_when_it_holds_headers() {
        let inner = "Content-Length: 2\r\n\r\n{}".repeat(100);
        let input = format!("Content-Length: {}\r\n\r\n{inner}Content-Length: 3\r\n\r\n[9]", inner.len());
        let (f, _) = frames(input.as_bytes(), Some(Framing::Lsp));
        assert!(matches!(&f[0], Frame::Malformed(m) if m.contains("larger than")));
        assert_eq!(f[1..], [Frame::Message(b"[9]".to_vec())]);
    }

    #[test]
    fn a_body_cut_by_the_end_of_input_is_reported_not_returned() {
        let (f, _) = frames(b"Content-Length: 10\r\n\r\n[1,2", Some(Framing::Lsp));
        assert!(matches!(&f[..], [Frame::Malformed(m)] if m.contains("ended inside a body")));
    }

    #[test]
    fn escaping_a_stream_in_pieces_matches_escaping_it_whole() {
        let text = "a\u{2028}b\u{2029}\u{20ac}c\u{2028}".as_bytes();
        let mut whole = Vec::new();
        escape_line_separators(text, &mut whole);
        for cut in 0..=text.len() {
            for cut2 in cut..=text.len() {
                let mut e = StreamEscaper::default();
                let mut out = Vec::new();
                e.push(&text[..cut], &mut out);
                e.push(&text[cut..cut2], &mut out);
                e.push(&text[cut2..], &mut out);
                e.finish(&mut out);
                assert_eq!(out, whole, "cut at {cut} and {cut2}");
            }
        }
    }

    #[test]
    fn oversized_frames_are_skipped_with_an_error() {
        let mut input = vec![b'{'; 2000];
        input.extend_from_slice(b"\n{}\n");
        let (f, _) = frames(&input, Some(Framing::Jsonl));
        assert!(matches!(&f[0], Frame::Malformed(_)));
        assert_eq!(f[1], Frame::Message(b"{}".to_vec()));
    }

    #[test]
    fn output_escapes_line_separators_and_counts_escaped_bytes() {
        let mut out = Vec::new();
        encode(Framing::Lsp, "\"a\u{2028}b\u{2029}\u{20ac}\"".as_bytes(), &mut out);
        let expected_body = "\"a\\u2028b\\u2029\u{20ac}\"";
        assert_eq!(out, format!("Content-Length: {}\r\n\r\n{expected_body}", expected_body.len()).into_bytes());
        let mut out = Vec::new();
        encode(Framing::Jsonl, "[\"\u{2028}\"]".as_bytes(), &mut out);
        assert_eq!(out, b"[\"\\u2028\"]\n");
    }

    #[test]
    fn a_message_in_parts_frames_as_its_bytes_joined_with_line_separators_escaped() {
        let parts = || Message(vec![b"{\"a\":".to_vec(), "\"x\u{2028}y\"".as_bytes().to_vec(), b"}".to_vec()]);
        for framing in [Framing::Jsonl, Framing::Lsp] {
            let (mut split, mut joined) = (Vec::new(), Vec::new());
            parts().encode(framing, &mut split);
            encode(framing, &parts().into_bytes(), &mut joined);
            assert_eq!(split, joined, "{framing:?}");
        }
        let whole = Message(vec![b"{\"a\":".to_vec(), "\"x\u{2028}y\"".as_bytes().to_vec(), b"}".to_vec()]);
        let mut out = Vec::new();
        whole.encode(Framing::Jsonl, &mut out);
        assert_eq!(out, b"{\"a\":\"x\\u2028y\"}\n");
        assert!(needs_escaping("x\u{2029}".as_bytes()) && !needs_escaping("x\u{2027}\u{20AC}".as_bytes()));
        assert_eq!(Message::from(b"ab".to_vec()).len(), 2);
        assert!(Message::default().is_empty());
    }
}
