//! Reading a session file once: the bounded in-place line reader, lines validated and reduced to records in
//! parallel batches, and the load that makes a [`LoadedFile`] of it.

use super::*;

/// Where a load starts: the beginning of a file, or (when following a file another process appends to) the end
/// of what was already read.
#[derive(Clone, Copy, Debug, Default)]
pub struct Start {
    /// File offset of the first byte the reader yields.
    pub offset: u64,
    /// Number of the line before the first one read.
    pub line: u32,
    /// A header was already seen (so another one is an extra header).
    pub seen_header: bool,
    /// Leave an unterminated last line unread (a writer may be in the middle of it).
    pub hold_back_partial: bool,
}

/// Splits a byte stream into lines in place: one read into a large buffer, lines handed out as slices of it, so a
/// multi-gigabyte session is copied once (kernel to buffer) and never line by line.
///
/// Memory is bounded whatever the input: a line longer than the reader's limit ([`MAX_LINE_BYTES`] by default)
/// is not buffered but skipped to its newline and handed out as [`Skipped::TooLong`], and a line longer than the
/// buffer whose beginning already cannot be JSON (a run of zeros, binary data) is skipped as soon as that is known
/// ([`Skipped::NotJson`]), so a multi-gigabyte line of garbage costs a few megabytes.
pub struct LineReader<R> {
    pub(super) reader: R,
    pub(super) buf: Vec<u8>,
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) eof: bool,
    /// File offset of `buf[start]`.
    pub(super) offset: u64,
    pub(super) limit: usize,
}

/// Why a line was not buffered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skipped {
    /// Longer than the reader's limit (pi cannot hold it in a string).
    TooLong,
    /// Its first bytes are already not JSON, whatever follows (the error is where they fail).
    NotJson(SyntaxError),
}

/// One line as [`LineReader`] hands it out.
#[derive(Debug)]
pub struct RawLine<'a> {
    /// File offset of the line.
    pub offset: u64,
    /// Its bytes without `\n` (empty when skipped).
    pub bytes: &'a [u8],
    /// Its length without `\n` (the real length, also when skipped).
    pub len: u64,
    /// True when it ended with `\n`.
    pub terminated: bool,
    /// Set when the line was not buffered.
    pub skipped: Option<Skipped>,
}

/// How much the buffer starts with; lines longer than this make it grow (up to the limit).
pub(super) const READ_BUFFER: usize = 4 << 20;

impl<R: Read> LineReader<R> {
    /// A reader with a 4 MiB buffer (it grows for longer lines, up to [`MAX_LINE_BYTES`]).
    pub fn new(reader: R) -> Self {
        Self::with_limit(reader, MAX_LINE_BYTES)
    }

    /// A reader that skips lines longer than `limit` bytes.
    pub fn with_limit(reader: R, limit: usize) -> Self {
        LineReader { reader, buf: vec![0; READ_BUFFER.min(limit + 1)], start: 0, end: 0, eof: false, offset: 0, limit }
    }

    /// The next line.
    pub fn next_line(&mut self) -> std::io::Result<Option<RawLine<'_>>> {
        let mut searched = 0;
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[self.start + searched..self.end]) {
                let line_start = self.start;
                let line_end = self.start + searched + i;
                let offset = self.offset;
                self.start = line_end + 1;
                self.offset += (line_end + 1 - line_start) as u64;
                return Ok(Some(self.line(offset, line_start..line_end, true)));
            }
            searched = self.end - self.start;
            if self.eof {
                if self.start == self.end {
                    return Ok(None);
                }
                let (line_start, line_end, offset) = (self.start, self.end, self.offset);
                self.offset += (line_end - line_start) as u64;
                self.start = self.end;
                return Ok(Some(self.line(offset, line_start..line_end, false)));
            }
            // Make room: move the partial line to the front, grow if it fills the buffer.
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.end > self.limit {
                return self.skip_line(Skipped::TooLong).map(Some);
            }
            if self.end == self.buf.len() {
                if let Some(e) = certainly_not_json(&self.buf[..self.end]) {
                    return self.skip_line(Skipped::NotJson(e)).map(Some);
                }
                // One byte past the limit is enough to know a line is too long.
                let len = (self.buf.len() * 2).min(self.limit + 1);
                self.buf.resize(len, 0);
            }
            let n = self.reader.read(&mut self.buf[self.end..])?;
            if n == 0 {
                self.eof = true;
            }
            self.end += n;
        }
    }

    pub(super) fn line(&self, offset: u64, range: std::ops::Range<usize>, terminated: bool) -> RawLine<'_> {
        let len = range.len() as u64;
        if range.len() > self.limit {
            return RawLine { offset, bytes: &[], len, terminated, skipped: Some(Skipped::TooLong) };
        }
        RawLine { offset, bytes: &self.buf[range], len, terminated, skipped: None }
    }

    /// Reads past the rest of the partial line at the front of the buffer without keeping it.
    pub(super) fn skip_line(&mut self, why: Skipped) -> std::io::Result<RawLine<'_>> {
        let offset = self.offset;
        let mut len = self.end as u64;
        self.start = 0;
        self.end = 0;
        loop {
            let n = self.reader.read(&mut self.buf)?;
            if n == 0 {
                self.eof = true;
                self.offset += len;
                return Ok(RawLine { offset, bytes: &[], len, terminated: false, skipped: Some(why) });
            }
            if let Some(i) = memchr::memchr(b'\n', &self.buf[..n]) {
                len += i as u64;
                self.start = i + 1;
                self.end = n;
                self.offset += len + 1;
                return Ok(RawLine { offset, bytes: &[], len, terminated: true, skipped: Some(why) });
            }
            len += n as u64;
        }
    }

    /// Every line the buffer holds now (at least one, reading more if needed), so they can be parsed together.
    pub fn next_batch(&mut self) -> std::io::Result<Option<LineBatch<'_>>> {
        let Some(first) = self.next_line()? else { return Ok(None) };
        let (offset, len, terminated, skipped) = (first.offset, first.bytes.len(), first.terminated, first.skipped);
        let real_len = first.len;
        // `next_line` consumed the first line; the batch starts at it (a skipped line is not in the buffer).
        let base = if skipped.is_some() { self.start } else { self.start - len - usize::from(terminated) };
        let mut lines = vec![BatchLine { offset, len: real_len, range: 0..len, terminated, skipped }];
        let mut at = self.start;
        let mut file_offset = self.offset;
        if terminated {
            while let Some(i) = memchr::memchr(b'\n', &self.buf[at..self.end]) {
                lines.push(BatchLine::buffered(file_offset, at - base..at - base + i, true));
                file_offset += i as u64 + 1;
                at += i + 1;
            }
            if self.eof && at < self.end {
                lines.push(BatchLine::buffered(file_offset, at - base..self.end - base, false));
                file_offset += (self.end - at) as u64;
                at = self.end;
            }
        }
        self.start = at;
        self.offset = file_offset;
        Ok(Some(LineBatch { bytes: &self.buf[base..at], lines }))
    }
}

/// A syntax error that `prefix` has whatever bytes follow it, if any: the scanner failed well before the end
/// (a failure caused by the end itself, such as a cut literal, escape or number, is within a few bytes of it).
pub(super) fn certainly_not_json(prefix: &[u8]) -> Option<SyntaxError> {
    if crate::session::line::is_blank(prefix) {
        return None;
    }
    match scan_document(prefix) {
        Err(e) if e.offset + 8 <= prefix.len() => Some(e),
        _ => None,
    }
}

/// One line of a [`LineBatch`].
#[derive(Clone, Debug)]
pub struct BatchLine {
    /// File offset of the line.
    pub offset: u64,
    /// Its real length without `\n`.
    pub len: u64,
    /// Its bytes in [`LineBatch::bytes`] (empty when skipped).
    pub range: std::ops::Range<usize>,
    /// True when it ended with `\n`.
    pub terminated: bool,
    /// Set when the line was not buffered.
    pub skipped: Option<Skipped>,
}

impl BatchLine {
    pub(super) fn buffered(offset: u64, range: std::ops::Range<usize>, terminated: bool) -> BatchLine {
        BatchLine { offset, len: range.len() as u64, range, terminated, skipped: None }
    }
}

/// Lines read together: the bytes they lie in, and each line's (file offset, range, had a newline).
pub struct LineBatch<'a> {
    /// The bytes of every line of the batch, newlines included.
    pub bytes: &'a [u8],
    /// The lines.
    pub lines: Vec<BatchLine>,
}

/// Parses lines, on two threads when there are enough of them to pay for it (opening a large session is mostly
/// this, and lines are independent). Outcomes come back in line order.
pub(super) fn parse_lines(
    batch: &LineBatch<'_>,
    first_line_no: u32,
    body_at: &(impl Fn(u64, u64) -> Body + Sync),
) -> Vec<LineOutcome> {
    let parse = |range: std::ops::Range<usize>| -> Vec<LineOutcome> {
        batch.lines[range.clone()]
            .iter()
            .zip(range)
            .map(|(line, i)| match &line.skipped {
                Some(Skipped::TooLong) => LineOutcome::TooLong,
                Some(Skipped::NotJson(e)) => LineOutcome::Malformed(e.clone()),
                None => parse_line(
                    &batch.bytes[line.range.clone()],
                    first_line_no + i as u32,
                    body_at(line.offset, line.len),
                ),
            })
            .collect()
    };
    let n = batch.lines.len();
    if n < 256 || batch.bytes.len() < (1 << 20) || parallelism() < 2 {
        return parse(0..n);
    }
    // Split by bytes, not lines: one huge line must not leave a thread idle.
    let half_bytes = batch.bytes.len() / 2;
    let split = batch.lines.partition_point(|l| l.range.start < half_bytes).clamp(1, n - 1);
    std::thread::scope(|scope| {
        let second = scope.spawn(|| parse(split..n));
        let mut out = parse(0..split);
        out.extend(second.join().expect("line parsing does not panic"));
        out
    })
}

pub(super) fn parallelism() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from))
}

/// Reads and classifies lines from `reader`, making each record's body with `body_at(offset, len)`.
pub fn load_from(
    reader: impl Read,
    path: &str,
    start: Start,
    body_at: impl Fn(u64, u64) -> Body + Sync,
) -> Result<LoadedFile> {
    let mut out = LoadedFile { len: start.offset, ..LoadedFile::default() };
    let mut lines = LineReader::new(reader);
    lines.offset = start.offset;
    let mut line_no = start.line;
    let mut seen_header = start.seen_header;
    while let Some(batch) = lines.next_batch().map_err(|e| Error::io("read", path, e))? {
        let outcomes = parse_lines(&batch, line_no + 1, &body_at);
        for (line, outcome) in batch.lines.iter().zip(outcomes) {
            let BatchLine { offset, len, terminated, .. } = *line;
            let content = &batch.bytes[line.range.clone()];
            if !terminated && start.hold_back_partial {
                break;
            }
            line_no += 1;
            let mut slot = LineSlot { offset, len, record: None };
            let mut last_outcome_malformed = false;
            let mut too_long = false;
            match outcome {
                LineOutcome::Blank => {}
                LineOutcome::TooLong => {
                    too_long = true;
                    out.warnings.push(Warning {
                        line: line_no,
                        kind: WarningKind::MalformedLine,
                        message: format!(
                            "line is {len} bytes, longer than the {MAX_LINE_BYTES} pi can hold in a string (pi 1.6.0 \
                             fails to open such a file); it is skipped unread and kept"
                        ),
                    });
                }
                LineOutcome::Malformed(e) => {
                    last_outcome_malformed = true;
                    let bom = content.starts_with("\u{feff}".as_bytes());
                    out.warnings.push(Warning {
                        line: line_no,
                        kind: WarningKind::MalformedLine,
                        message: if bom {
                            "line starts with a byte-order mark, so it is not JSON; pi skips it; it is kept".to_owned()
                        } else {
                            format!("line is not valid JSON ({e}); pi skips it; it is kept")
                        },
                    });
                }
                LineOutcome::Falsy => out.warnings.push(Warning {
                    line: line_no,
                    kind: WarningKind::NonObjectLine,
                    message: "line holds a falsy JSON value, not an entry; pi skips it; it is kept".to_owned(),
                }),
                LineOutcome::Record(record) => {
                    if !record.is_object {
                        out.warnings.push(Warning {
                            line: line_no,
                            kind: WarningKind::NonObjectLine,
                            message:
                                "line holds a JSON value that is not an object; pi treats it as an entry with no fields"
                                    .to_owned(),
                        });
                    }
                    if let Some(problem) = crate::session::line::unusable_entry(&record) {
                        out.warnings.push(Warning {
                            line: line_no,
                            kind: WarningKind::UnusableEntry,
                            message: problem.to_owned(),
                        });
                    }
                    if record.is_header() {
                        if seen_header {
                            out.warnings.push(Warning {
                                line: line_no,
                                kind: WarningKind::ExtraHeader,
                                message: "a second session header; only the first one counts".to_owned(),
                            });
                        }
                        seen_header = true;
                    }
                    slot.record = Some(out.records.len());
                    out.records.push(*record);
                }
            }
            out.lines.push(slot);
            out.len = offset + len + u64::from(terminated);
            if !terminated {
                out.needs_final_newline = true;
                if too_long {
                    // Its warning already says what it is; the next append still starts on a new line.
                } else if last_outcome_malformed {
                    let w = out.warnings.last_mut().expect("malformed warning");
                    w.kind = WarningKind::TornTail;
                    w.message =
                        "the last line is incomplete (no newline, not valid JSON): a write was cut short; it is \
                             kept, and the next append starts on a new line"
                            .to_owned();
                } else {
                    out.warnings.push(Warning {
                        line: line_no,
                        kind: WarningKind::MissingFinalNewline,
                        message: "the file does not end with a newline; one is added before the next append".to_owned(),
                    });
                }
            }
        }
    }
    Ok(out)
}
