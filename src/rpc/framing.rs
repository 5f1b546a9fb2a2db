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

/// Reads frames from a byte stream.
pub struct FrameReader<R> {
    reader: R,
    framing: Option<Framing>,
    max_frame: usize,
}

impl<R: BufRead> FrameReader<R> {
    /// A reader that detects the framing from the first byte (`None`) or uses the given one.
    pub fn new(reader: R, framing: Option<Framing>, max_frame: usize) -> Self {
        FrameReader { reader, framing, max_frame }
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
                // Skip the rest of an oversized line so the next one parses.
                let mut rest = Vec::new();
                self.reader.read_until(b'\n', &mut rest)?;
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

    fn next_lsp(&mut self) -> io::Result<Option<Frame>> {
        let mut length: Option<usize> = None;
        let mut problem: Option<String> = None;
        let mut saw_header = false;
        loop {
            let mut line = Vec::new();
            let n = (&mut self.reader).take(64 * 1024).read_until(b'\n', &mut line)?;
            if n == 0 {
                return Ok(if saw_header {
                    Some(Frame::Malformed("stream ended inside a header".into()))
                } else {
                    None
                });
            }
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end_matches(['\r', '\n']);
            if text.is_empty() {
                if !saw_header {
                    continue;
                }
                break;
            }
            saw_header = true;
            match text.split_once(':') {
                Some((name, value)) if name.trim().eq_ignore_ascii_case("content-length") => {
                    match value.trim().parse::<usize>() {
                        Ok(v) => length = Some(v),
                        Err(_) => problem = Some(format!("bad Content-Length: {}", value.trim())),
                    }
                }
                Some(_) => {}
                None => problem = Some(format!("not a header line: {text}")),
            }
        }
        if let Some(p) = problem {
            return Ok(Some(Frame::Malformed(p)));
        }
        let Some(len) = length else { return Ok(Some(Frame::Malformed("no Content-Length header".into()))) };
        if len > self.max_frame {
            io::copy(&mut (&mut self.reader).take(len as u64), &mut io::sink())?;
            return Ok(Some(Frame::Malformed(format!("frame larger than {} bytes", self.max_frame))));
        }
        let mut body = vec![0u8; len];
        self.reader.read_exact(&mut body)?;
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
