//! Reading a session file once: the bounded in-place line reader, lines validated and reduced to records in
//! parallel batches, and the load that makes a [`LoadedFile`] of it.

use super::*;
use crate::memory::room_in_whole_huge_pages;
use crate::session::line::LineScanner;

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
    /// Make no skeletons: the process's host never asks for them (see `Env::skeletons`).
    pub without_skeletons: bool,
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
    /// The last batch's lines, the list kept from batch to batch.
    pub(super) batch_lines: Vec<BatchLine>,
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
        Self::with_buffer(reader, READ_BUFFER, limit)
    }

    /// A reader whose buffer starts at `initial` bytes (it grows for longer lines, up to `limit`).
    pub fn with_buffer(reader: R, initial: usize, limit: usize) -> Self {
        LineReader {
            reader,
            buf: vec![0; initial.min(limit + 1)],
            start: 0,
            end: 0,
            eof: false,
            offset: 0,
            limit,
            batch_lines: Vec::new(),
        }
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
        let mut lines = std::mem::take(&mut self.batch_lines);
        lines.clear();
        lines.push(BatchLine { offset, len: real_len, range: 0..len, terminated, skipped });
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
        self.batch_lines = lines;
        Ok(Some(LineBatch { bytes: &self.buf[base..at], lines: &self.batch_lines }))
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
    pub lines: &'a [BatchLine],
}

/// Parses lines, on two threads when there are enough of them to pay for it (opening a large session is mostly
/// this, and lines are independent). Outcomes are put in `outcomes` (emptied first: the list is kept from batch
/// to batch) in line order.
pub(super) fn parse_lines(
    batch: &LineBatch<'_>,
    first_line_no: u32,
    body_at: &(impl Fn(u64, u64) -> Body + Sync),
    parallel: bool,
    scanner: &mut LineScanner,
    outcomes: &mut Vec<LineOutcome>,
) {
    outcomes.clear();
    let parse = |range: std::ops::Range<usize>, scanner: &mut LineScanner, out: &mut Vec<LineOutcome>| {
        out.extend(batch.lines[range.clone()].iter().zip(range).map(|(line, i)| match &line.skipped {
            Some(Skipped::TooLong) => LineOutcome::TooLong,
            Some(Skipped::NotJson(e)) => LineOutcome::Malformed(e.clone()),
            None => parse_line_with(
                scanner,
                &batch.bytes[line.range.clone()],
                first_line_no + i as u32,
                body_at(line.offset, line.len),
            ),
        }))
    };
    let n = batch.lines.len();
    if !parallel || n < 256 || batch.bytes.len() < (1 << 20) || parallelism() < 2 {
        return parse(0..n, scanner, outcomes);
    }
    // Split by bytes, not lines: one huge line must not leave a thread idle.
    let half_bytes = batch.bytes.len() / 2;
    let split = batch.lines.partition_point(|l| l.range.start < half_bytes).clamp(1, n - 1);
    let mut second_scanner = scanner.fresh();
    std::thread::scope(|scope| {
        let second = scope.spawn(|| {
            let mut out = Vec::with_capacity(n - split);
            parse(split..n, &mut second_scanner, &mut out);
            out
        });
        parse(0..split, scanner, outcomes);
        outcomes.extend(second.join().expect("line parsing does not panic"));
    })
}

/// How many threads the process may run at once (cgroup quota and CPU affinity included), read once.
pub(crate) fn parallelism() -> usize {
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
    load_lines(reader, path, start, &body_at, Pass::Whole, None)
}

/// Files at least this large are read as two halves at once by [`load_file`]. From here on the second thread
/// pays for itself: a 4 MB session opened in a new process took 5–7 ms as halves against 10–11 ms read whole
/// with its batches parsed on two threads; at 1.5 MB the two are even.
pub const SPLIT_FROM_BYTES: u64 = 1 << 20;

/// How far past the middle [`load_file`] looks for the newline it splits at: a line longer than this around
/// the middle leaves the file read in one piece.
const SPLIT_SEARCH_BYTES: u64 = 1 << 20;

/// How much of it [`load_file`] reads at a time while looking: lines are mostly far shorter.
const SPLIT_PROBE_BYTES: usize = 64 << 10;

/// The buffer a half's reader starts with. Each half is parsed by the thread that reads it, so its buffer is
/// sized to stay in that core's cache: the bytes are scanned right after the copy out of the page cache put them
/// there, and a new process touches 32 fresh pages per half, not 1,024. A 40 MB session opened in a new process:
/// 33–36 ms with 128 KiB, 43–47 ms with 4 MiB (the whole-file buffer, [`READ_BUFFER`]); 32 KiB and 64 KiB were
/// slower again (more reads), 256 KiB to 1 MiB in between.
const HALF_READ_BUFFER: usize = 128 << 10;

/// The most lines [`load_lines`] makes room for before it reads them, from the first batch's lengths. The room is
/// also never more than a quarter of the bytes the pass reads: a file whose first lines are short and the rest
/// long (images) must not reserve room for millions, as a process under an address-space limit (`ulimit -v`)
/// pays for room it never touches.
const RESERVE_LINES_MOST: usize = 16 << 10;

/// How many lines the first batch must hold for [`load_lines`] to guess the rest from them.
const RESERVE_SAMPLE_LINES: usize = 16;

/// How [`load_lines`] reads: the whole input with one reader whose batches are parsed on two threads, or one
/// half of a file on the thread that reads it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    Whole,
    Half,
}

/// Reads a whole session file as [`load_from`] reads it from its start, giving the same [`LoadedFile`]. A
/// file of at least `split_from` bytes is cut after the first newline past its middle, and each thread reads
/// and parses its own half (one pass over the bytes each, the copy out of the page cache included, where one
/// thread reading for two parsers left the second core idle while it read); the second half's lines are then
/// numbered after the first's. Each half's reader bounds its memory as the one reader does, so two lines over
/// its buffer, one in each half, are held at once.
pub fn load_file(
    file: &DiskFile,
    path: &str,
    size: u64,
    split_from: u64,
    skeletons: bool,
    body_at: impl Fn(u64, u64) -> Body + Sync,
) -> Result<LoadedFile> {
    let whole = Start { without_skeletons: !skeletons, ..Start::default() };
    let split = if size >= split_from && parallelism() >= 2 { newline_past(file, path, size / 2)? } else { None };
    let split = split.filter(|&at| at < size);
    let Some(split) = split else {
        return load_lines(file.reader_at(0), path, whole, &body_at, Pass::Whole, Some(size));
    };
    let (first, second) = std::thread::scope(|scope| {
        let second = scope.spawn(|| {
            // Numbered from 1 and counted as after a header; both are put right once the first half is known.
            let start = Start { offset: split, line: 0, seen_header: true, ..whole };
            load_lines(file.reader_at(split), path, start, &body_at, Pass::Half, Some(size - split))
        });
        // Room for the whole file's lines: the second half's are appended to these lists once both are read,
        // and growing them then copied every record into fresh pages on one thread while the other waited.
        let first = load_lines(file.reader_at(0).take(split), path, whole, &body_at, Pass::Half, Some(size));
        (first, second.join().expect("loading lines does not panic"))
    });
    let mut loaded = first?;
    let mut second = second?;
    let lines_before = loaded.lines.len() as u32;
    for record in &mut second.records {
        record.line += lines_before;
    }
    for warning in &mut second.warnings {
        warning.line += lines_before;
    }
    if !loaded.records.iter().any(Record::is_header) {
        // The second half's first header is the file's first: not the extra header it was counted as.
        if let Some(i) = second.warnings.iter().position(|w| w.kind == WarningKind::ExtraHeader) {
            second.warnings.remove(i);
        }
    }
    loaded.extend(second);
    Ok(loaded)
}

/// The offset just past the first newline at or after `from`, looking at most [`SPLIT_SEARCH_BYTES`]; None
/// when there is none there.
fn newline_past(file: &DiskFile, path: &str, from: u64) -> Result<Option<u64>> {
    let mut buf = vec![0; SPLIT_PROBE_BYTES];
    let mut at = from;
    while at - from < SPLIT_SEARCH_BYTES {
        let n = super::read_up_to(file, &mut buf, at).map_err(|e| Error::io("read", path, e))?;
        if let Some(i) = memchr::memchr(b'\n', &buf[..n]) {
            return Ok(Some(at + i as u64 + 1));
        }
        if n < buf.len() {
            return Ok(None);
        }
        at += n as u64;
    }
    Ok(None)
}

/// [`load_from`], read as `pass` says; `expected_bytes`, when known, is how many bytes of lines its lists make
/// room for: what it reads, or for a file's first half the whole file, whose second half's lines are appended to
/// them.
fn load_lines(
    reader: impl Read,
    path: &str,
    start: Start,
    body_at: &(impl Fn(u64, u64) -> Body + Sync),
    pass: Pass,
    expected_bytes: Option<u64>,
) -> Result<LoadedFile> {
    let mut out = LoadedFile { len: start.offset, ..LoadedFile::default() };
    let buffer = if pass == Pass::Half { HALF_READ_BUFFER } else { READ_BUFFER };
    let mut lines = LineReader::with_buffer(reader, buffer, MAX_LINE_BYTES);
    let mut scanner = LineScanner::new(!start.without_skeletons);
    let mut outcomes = Vec::new();
    lines.offset = start.offset;
    let mut line_no = start.line;
    let mut seen_header = start.seen_header;
    let mut sized = false;
    while let Some(batch) = lines.next_batch().map_err(|e| Error::io("read", path, e))? {
        // Room for the lines to come, guessed from the first batch's: growing the lists as they fill copied them
        // into fresh memory again and again (a new process's first touch of each page is a fault).
        if !sized && !batch.lines.is_empty() {
            sized = true;
            match expected_bytes {
                // Too few lines to say what the rest are like (a header, then images): grown as they come.
                Some(expected) if batch.lines.len() >= RESERVE_SAMPLE_LINES => {
                    let read: u64 = batch.lines.iter().map(|l| l.len + 1).sum();
                    let estimate = expected / (read / batch.lines.len() as u64).max(1);
                    let room_per_line = (size_of::<Record>() + size_of::<LineSlot>()) as u64;
                    let estimate = estimate.saturating_add(estimate / 4).min(expected / 4 / room_per_line);
                    let estimate = usize::try_from(estimate).unwrap_or(usize::MAX).min(RESERVE_LINES_MOST);
                    // Lists read from a file's start become the session's, and are rounded to fill their huge
                    // pages; the lists of a second half or of appended lines are copied onto those and freed, and
                    // a huge page zeroed whole for them cost more than the faults it saved (13.24 against 13.05
                    // ms, 81 alternated rounds).
                    let room =
                        |size| if start.offset == 0 { room_in_whole_huge_pages(estimate, size) } else { estimate };
                    out.lines.reserve_exact(room(size_of::<LineSlot>()));
                    out.records.reserve_exact(room(size_of::<Record>()));
                }
                _ => {}
            }
        }
        parse_lines(&batch, line_no + 1, body_at, pass == Pass::Whole, &mut scanner, &mut outcomes);
        for (line, outcome) in batch.lines.iter().zip(outcomes.drain(..)) {
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
                    out.records.push(record);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Loads `bytes` as a file both ways: in one piece, and split in two halves.
    fn both_ways(bytes: &[u8]) -> (String, String) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        std::fs::write(&path, bytes).unwrap();
        let path = path.to_str().unwrap();
        let file = DiskFile::open(&real_disk(), path, std::fs::OpenOptions::new().read(true)).unwrap();
        let size = bytes.len() as u64;
        let whole = load_file(&file, path, size, u64::MAX, true, Body::file).unwrap();
        let halves = load_file(&file, path, size, 0, true, Body::file).unwrap();
        (format!("{whole:#?}"), format!("{halves:#?}"))
    }

    #[test]
    fn a_file_read_in_two_halves_gives_what_reading_it_in_one_piece_gives_wherever_the_middle_falls() {
        let odd = [
            r#"{"type":"message","id":"b1","parentId":"a1","timestamp":"2025-01-01T00:00:00.000Z","message":{"role":"user","content":"hello"}}"#,
            "not json at all",
            "",
            "   ",
            "0",
            "[1,2]",
            r#"{"type":"session","version":3,"id":"second-header","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/x"}"#,
            r#"{"type":"label","id":"l1","parentId":"b1","targetId":"b1","label":"here"}"#,
            "\u{feff}{\"type\":\"custom\"}",
            r#"{"type":"message","id":"c1","parentId":"b1","message":null}"#,
        ];
        let header = r#"{"type":"session","version":3,"id":"s","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/x"}"#;
        let mut tried = 0;
        for with_header in [true, false] {
            for pad in 0..40 {
                let mut file = String::new();
                if with_header {
                    file.push_str(header);
                    file.push('\n');
                }
                for (i, line) in odd.iter().enumerate() {
                    // Lines of varying length, so the middle falls on each kind of line in turn.
                    file.push_str(&format!(r#"{{"type":"custom","id":"p{i}","pad":"{}"}}"#, "x".repeat(pad * 7 + i)));
                    file.push('\n');
                    file.push_str(line);
                    file.push('\n');
                }
                for torn_tail in [false, true] {
                    let mut bytes = file.clone().into_bytes();
                    if torn_tail {
                        bytes.extend_from_slice(br#"{"type":"message","id":"torn"#);
                    }
                    let (whole, halves) = both_ways(&bytes);
                    assert_eq!(whole, halves, "header {with_header}, pad {pad}, torn {torn_tail}");
                    tried += 1;
                }
            }
        }
        assert_eq!(tried, 160);
    }

    #[test]
    fn a_line_longer_than_the_probe_across_the_middle_is_split_after_and_one_longer_than_the_search_is_not() {
        let header = r#"{"type":"session","version":3,"id":"s","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/x"}"#;
        for (middle_kib, splits) in [(300, true), (2600, false)] {
            let small = |i: usize| format!(r#"{{"type":"custom","id":"e{i}","pad":"{}"}}"#, "y".repeat(900));
            let mut lines = vec![header.to_owned()];
            lines.extend((0..200).map(small));
            let long = format!(r#"{{"type":"custom","id":"long","pad":"{}"}}"#, "x".repeat(middle_kib << 10));
            lines.push(long.clone());
            lines.extend((200..400).map(small));
            let text = lines.join("\n") + "\n";
            let long_at = text.find(&long).unwrap() as u64;
            let after_long = long_at + long.len() as u64 + 1;
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("s.jsonl");
            std::fs::write(&path, &text).unwrap();
            let path = path.to_str().unwrap();
            let file = DiskFile::open(&real_disk(), path, std::fs::OpenOptions::new().read(true)).unwrap();
            let middle = text.len() as u64 / 2;
            assert!(long_at < middle && middle < after_long, "the long line lies across the middle");
            let split = newline_past(&file, path, middle).unwrap();
            assert_eq!(split, splits.then_some(after_long), "a {middle_kib} KiB line");
            // Either way, and with each half's buffer grown for the long line, the file reads as in one piece.
            let (whole, halves) = both_ways(text.as_bytes());
            assert_eq!(whole, halves, "a {middle_kib} KiB line");
        }
    }

    #[test]
    fn the_halves_are_numbered_as_one_file_and_only_a_second_header_is_extra() {
        let header = r#"{"type":"session","version":3,"id":"s","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/x"}"#;
        let entry = |i: usize| format!(r#"{{"type":"custom","id":"e{i}","parentId":null}}"#);
        // No header in the first half, one in the second: that one is the file's first.
        let mut bytes: Vec<String> = (0..50).map(entry).collect();
        bytes.push(header.to_owned());
        bytes.extend((50..60).map(entry));
        let text = bytes.join("\n") + "\n";
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        std::fs::write(&path, &text).unwrap();
        let path = path.to_str().unwrap();
        let file = DiskFile::open(&real_disk(), path, std::fs::OpenOptions::new().read(true)).unwrap();
        let halves = load_file(&file, path, text.len() as u64, 0, true, Body::file).unwrap();
        assert!(halves.warnings.iter().all(|w| w.kind != WarningKind::ExtraHeader), "{:?}", halves.warnings);
        let header_record = halves.records.iter().find(|r| r.is_header()).unwrap();
        assert_eq!(header_record.line, 51);
        assert_eq!(halves.records.last().unwrap().line, 61);
    }
}
