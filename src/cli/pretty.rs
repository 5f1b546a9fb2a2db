//! Indented JSON for a person at a terminal, made on the fly from compact JSON text (as `jq .` shows it):
//! `inspect` of a large session streams hundreds of megabytes, so the text is re-indented as it passes rather
//! than parsed into a value first.

use std::io::Write;

/// A writer that indents the compact JSON written through it (two spaces per level) into `inner`.
pub struct Pretty<W: Write> {
    inner: W,
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// An opening bracket waits here until the next byte says whether the container is empty.
    pending_open: Option<u8>,
    buf: Vec<u8>,
}

impl<W: Write> Pretty<W> {
    /// Indents into `inner`.
    pub fn new(inner: W) -> Pretty<W> {
        Pretty {
            inner,
            depth: 0,
            in_string: false,
            escaped: false,
            pending_open: None,
            buf: Vec::with_capacity(1 << 16),
        }
    }

    fn newline(&mut self) {
        self.buf.push(b'\n');
        self.buf.extend(std::iter::repeat_n(b' ', self.depth * 2));
    }

    fn byte(&mut self, b: u8) {
        if let Some(open) = self.pending_open.take() {
            self.buf.push(open);
            if b == b']' || b == b'}' {
                self.buf.push(b);
                return;
            }
            self.depth += 1;
            self.newline();
        }
        if self.in_string {
            self.buf.push(b);
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
            }
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                self.buf.push(b);
            }
            b'{' | b'[' => self.pending_open = Some(b),
            b'}' | b']' => {
                self.depth = self.depth.saturating_sub(1);
                self.newline();
                self.buf.push(b);
            }
            b',' => {
                self.buf.push(b);
                self.newline();
            }
            b':' => self.buf.extend_from_slice(b": "),
            b' ' | b'\t' | b'\r' => {}
            b'\n' => {
                if self.depth == 0 {
                    self.buf.push(b'\n');
                }
            }
            _ => self.buf.push(b),
        }
    }
}

impl<W: Write> Write for Pretty<W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        for &b in bytes {
            self.byte(b);
        }
        if self.buf.len() >= 1 << 16 {
            self.inner.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if let Some(open) = self.pending_open.take() {
            self.buf.push(open);
        }
        self.inner.write_all(&self.buf)?;
        self.buf.clear();
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pretty(s: &str) -> String {
        let mut out = Vec::new();
        let mut p = Pretty::new(&mut out);
        p.write_all(s.as_bytes()).unwrap();
        p.flush().unwrap();
        drop(p);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn objects_and_arrays_are_indented_and_empty_ones_stay_on_one_line() {
        assert_eq!(
            pretty(r#"{"a":[1,2],"b":{},"c":[]}"#),
            "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {},\n  \"c\": []\n}"
        );
    }

    #[test]
    fn brackets_commas_and_escaped_quotes_inside_strings_are_left_alone() {
        assert_eq!(pretty(r#"["a,{b}\"[c]:"]"#), "[\n  \"a,{b}\\\"[c]:\"\n]");
    }
}
