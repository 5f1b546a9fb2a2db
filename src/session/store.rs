//! The only place that touches session files' bytes: load, read bodies, append, create, rewrite, fsync.
//!
//! Write order for every change, so a crash leaves either the old state or the new one and never a fused line:
//! the complete lines (each with its `\n`) are encoded first and handed to one `write` call on an `O_APPEND`
//! handle; a write that fails part-way is cut back to where it started (raft-engine's rule), and if even that
//! fails the file is poisoned; then the fsync the durability asks for, and only then does the caller advance what
//! it knows. A new file is created exclusively (`O_EXCL`, as pi's `wx`) and removed again if its first write
//! fails, so a retry is not refused with `EEXIST`. A whole-file rewrite (migration) goes to a temporary file beside
//! the real file (the target of a symlink, not the link) that is then renamed over it; temporary files a killed
//! process left are removed when their directory is next written. Loading never writes: pi's load-time repairs are
//! reported by [`LoadedFile`] and applied by the caller with its first write.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};

use super::entry::{Body, BodySource, Record};
use super::error::{Error, Result};
use super::identity::{self, now_ns, FileStamp, FileState, Known, TAIL_CHECK};
use super::json::patch;
use super::json::scan::{scan_document, SyntaxError};
use super::json::Json;
use super::line::{is_blank, is_falsy, parse_line, LineOutcome};

/// Something about a file that a reader should know: a line pi would silently skip, a torn tail, a broken link
/// in the tree. The file is never changed because of a warning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    /// 1-based line number (0 when the warning is about the file as a whole).
    pub line: u32,
    /// A stable machine-readable name (see [`WarningKind`]).
    pub kind: WarningKind,
    /// What is wrong, for a person.
    pub message: String,
}

/// The kinds of [`Warning`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WarningKind {
    /// A non-blank line that is not JSON. pi skips it; it stays in the file.
    MalformedLine,
    /// The last line has no `\n` and is not JSON (a write cut short). It stays; the next append starts on a new
    /// line.
    TornTail,
    /// The last line is complete JSON but has no `\n`; one is added before the next append (pi adds it on load).
    MissingFinalNewline,
    /// A line whose JSON value is not an object (`42`, `"x"`, `[1]`, `null`, …).
    NonObjectLine,
    /// A second header line (written by old pi's duplicate-flush bug); only the first counts.
    ExtraHeader,
    /// Two entries share an id; the later one wins, as in pi.
    DuplicateId,
    /// An entry's parent does not exist; it is shown as a root.
    MissingParent,
    /// An entry is its own parent; it is shown as a root.
    SelfParent,
    /// A chain of parents loops; walks stop where the loop closes (pi 1.6.0 hangs).
    ParentCycle,
    /// The file is an older format version; it is migrated in memory and rewritten before the first write.
    LegacyVersion,
    /// An entry pi loads but some of whose reads throw on (a message entry without a message, a context edit
    /// without a replacement, a session name that is not a string): those reads fail, naming it.
    UnusableEntry,
}

impl WarningKind {
    /// The snake_case name used on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            WarningKind::MalformedLine => "malformed_line",
            WarningKind::TornTail => "torn_tail",
            WarningKind::MissingFinalNewline => "missing_final_newline",
            WarningKind::NonObjectLine => "non_object_line",
            WarningKind::ExtraHeader => "extra_header",
            WarningKind::DuplicateId => "duplicate_id",
            WarningKind::MissingParent => "missing_parent",
            WarningKind::SelfParent => "self_parent",
            WarningKind::ParentCycle => "parent_cycle",
            WarningKind::LegacyVersion => "legacy_version",
            WarningKind::UnusableEntry => "unusable_entry",
        }
    }
}

/// One physical line of a loaded file.
#[derive(Clone, Copy, Debug)]
pub struct LineSlot {
    /// Byte offset of the line.
    pub offset: u64,
    /// Length without the `\n`.
    pub len: u64,
    /// Index into [`LoadedFile::records`] when the line is an entry or header.
    pub record: Option<usize>,
}

/// A file as read, before any interpretation beyond single lines.
#[derive(Debug, Default)]
pub struct LoadedFile {
    /// Entries and headers (every line whose JSON value is truthy), in file order.
    pub records: Vec<Record>,
    /// Every physical line, so a rewrite can keep the lines pi would drop.
    pub lines: Vec<LineSlot>,
    /// Line-level warnings.
    pub warnings: Vec<Warning>,
    /// The file's length in bytes.
    pub len: u64,
    /// True when the file is non-empty and does not end in `\n` (pi appends one on load).
    pub needs_final_newline: bool,
}

impl LoadedFile {
    /// True when pi would call the file a session: its first record is a header with a string id.
    pub fn has_valid_header(&self) -> bool {
        self.records.first().is_some_and(|r| r.is_header() && r.id.as_js_str().is_some())
    }

    /// True when what was read ends with a complete line, so lines read after it start a line of their own.
    pub fn ends_a_line(&self) -> bool {
        !self.needs_final_newline
    }

    /// Takes in the lines read after these (as `load_from` gives them from where these end).
    pub fn extend(&mut self, more: LoadedFile) {
        let first = self.records.len();
        self.records.extend(more.records);
        self.lines.extend(more.lines.into_iter().map(|l| LineSlot { record: l.record.map(|r| r + first), ..l }));
        self.warnings.extend(more.warnings);
        self.len = more.len;
        self.needs_final_newline = more.needs_final_newline;
    }
}

/// The longest line, in bytes, that is read as an entry: V8's maximum string length (`2^29 - 24` UTF-16 code
/// units on 64-bit builds, Node's `buffer.constants.MAX_STRING_LENGTH`). pi holds each line in one JavaScript
/// string, and a UTF-8 line never has more code units than bytes, so every line pi 1.6.0 can read fits; a longer
/// line makes pi's `open` throw `RangeError: Invalid string length` (when it has as many code units). Here such a
/// line is reported as malformed and kept, and it is never held in memory whole (see `docs/compatibility.md`).
pub const MAX_LINE_BYTES: usize = (1 << 29) - 24;

/// Opens `path` for reading if it is a regular file, without blocking: a named pipe with no writer, a device
/// (`/dev/zero`, `/dev/urandom`), a socket or a directory is refused with a clear error instead of hanging the
/// caller or feeding it bytes for ever. The path is checked with `stat` before it is opened (so no device is
/// even opened), then opened `O_NONBLOCK` (so a FIFO swapped in meanwhile cannot block the open) and checked
/// again with `fstat` on the descriptor itself.
pub fn open_regular(path: &str) -> Result<File> {
    use rustix::fs::OFlags;
    use std::os::unix::fs::OpenOptionsExt;
    let refuse = |t: &std::fs::FileType| -> Result<()> {
        match not_regular(t) {
            None => Ok(()),
            Some(what) => Err(Error::io(
                "open",
                path,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("not a regular file ({what}); only regular files are read as sessions"),
                ),
            )),
        }
    };
    refuse(&std::fs::metadata(path).map_err(|e| Error::io("open", path, e))?.file_type())?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(OFlags::NONBLOCK.bits() as i32)
        .open(path)
        .map_err(|e| Error::io("open", path, e))?;
    refuse(&file.metadata().map_err(|e| Error::io("stat", path, e))?.file_type())?;
    // Reads of a regular file never block anyway; clear the flag so the descriptor behaves as a plain open's.
    let flags = rustix::fs::fcntl_getfl(&file).map_err(|e| Error::io("open", path, e.into()))?;
    rustix::fs::fcntl_setfl(&file, flags - OFlags::NONBLOCK).map_err(|e| Error::io("open", path, e.into()))?;
    Ok(file)
}

/// What a file that is not a regular file is, for an error message (None for a regular file).
fn not_regular(t: &std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if t.is_file() {
        None
    } else if t.is_dir() {
        Some("a directory")
    } else if t.is_fifo() {
        Some("a named pipe")
    } else if t.is_char_device() {
        Some("a character device")
    } else if t.is_block_device() {
        Some("a block device")
    } else if t.is_socket() {
        Some("a socket")
    } else {
        Some("not a file")
    }
}

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
    reader: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
    /// File offset of `buf[start]`.
    offset: u64,
    limit: usize,
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
const READ_BUFFER: usize = 4 << 20;

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

    fn line(&self, offset: u64, range: std::ops::Range<usize>, terminated: bool) -> RawLine<'_> {
        let len = range.len() as u64;
        if range.len() > self.limit {
            return RawLine { offset, bytes: &[], len, terminated, skipped: Some(Skipped::TooLong) };
        }
        RawLine { offset, bytes: &self.buf[range], len, terminated, skipped: None }
    }

    /// Reads past the rest of the partial line at the front of the buffer without keeping it.
    fn skip_line(&mut self, why: Skipped) -> std::io::Result<RawLine<'_>> {
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
fn certainly_not_json(prefix: &[u8]) -> Option<SyntaxError> {
    if super::line::is_blank(prefix) {
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
    fn buffered(offset: u64, range: std::ops::Range<usize>, terminated: bool) -> BatchLine {
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
fn parse_lines(
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

fn parallelism() -> usize {
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
                    if let Some(problem) = super::line::unusable_entry(&record) {
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

/// Reads the bytes of a body (with its patch applied) from `file`, the session file its offsets refer to.
///
/// The line is checked to still be where it was read: a file truncated since fails with `UnexpectedEof`, and one
/// rewritten so that the line no longer ends where it did (the byte after it is not its `\n`) with
/// `InvalidData` ([`MOVED`]), instead of handing out a short buffer or another entry's bytes.
fn read_body(file: Option<&File>, body: &Body) -> std::io::Result<Vec<u8>> {
    let raw: std::borrow::Cow<'_, [u8]> = match &body.source {
        BodySource::Memory(bytes) => std::borrow::Cow::Borrowed(bytes),
        BodySource::File { offset, len } => {
            let file = file.ok_or_else(|| std::io::Error::other("the session file is not open"))?;
            std::borrow::Cow::Owned(read_line_at(file, *offset, *len)?)
        }
    };
    Ok(match &body.patch {
        Some(p) => patch::apply(&raw, p),
        None => raw.into_owned(),
    })
}

/// Whether anything is at `path`, following symlinks (pi's `existsSync`).
pub fn exists(path: &str) -> bool {
    super::paths::as_path(path).exists()
}

/// Whether `path` is a regular file, following symlinks.
pub fn is_file(path: &str) -> bool {
    super::paths::as_path(path).is_file()
}

/// Creates `dir` and its missing parents unless it exists (pi's `mkdirSync(dir, {recursive: true})`).
pub fn ensure_dir(dir: &str) -> Result<()> {
    if !exists(dir) {
        std::fs::create_dir_all(dir).map_err(|e| Error::io("create directory", dir, e))?;
    }
    Ok(())
}

/// Reads the lines of one session file for copying them elsewhere (a rewrite, a fork, the first write), so the
/// file's descriptor never leaves the store. [`BodyReader::NONE`] reads only bodies held in memory.
#[derive(Clone, Copy)]
pub struct BodyReader<'a>(Option<&'a File>);

impl BodyReader<'_> {
    /// A reader with no file: bodies held in memory only.
    pub const NONE: BodyReader<'static> = BodyReader(None);

    /// A body's bytes with its patch applied (see [`read_body`] for the checks).
    pub fn body(&self, body: &Body) -> std::io::Result<Vec<u8>> {
        read_body(self.0, body)
    }

    /// `len` bytes of the file at `offset`, as they are.
    pub fn raw(&self, offset: u64, len: u64) -> std::io::Result<Vec<u8>> {
        let file = self.0.ok_or_else(|| std::io::Error::other("no file to copy a line from"))?;
        let mut raw = vec![0u8; len as usize];
        file.read_exact_at(&mut raw, offset)?;
        Ok(raw)
    }
}

/// Reads bodies of one file in the order they lie in it, through one window of up to [`READ_AHEAD`] bytes: a
/// snapshot or a listing of every entry costs a few large reads, not one read per line. Each body is checked as
/// [`read_body`] checks it (its line must still end where it did).
pub struct ReadAhead<'a> {
    file: Option<&'a SessionFile>,
    window: Vec<u8>,
    window_start: u64,
}

/// The most a [`ReadAhead`] reads at once (more only for a longer line).
pub const READ_AHEAD: usize = 4 << 20;

/// What a [`ReadAhead`] reads first; each read after it reads twice as much, up to [`READ_AHEAD`].
const FIRST_READ: usize = 64 << 10;

impl<'a> ReadAhead<'a> {
    /// A reader of `file`'s bodies (None: bodies held in memory only).
    pub fn new(file: Option<&'a SessionFile>) -> Self {
        ReadAhead { file, window: Vec::new(), window_start: 0 }
    }

    /// A body's bytes with its patch applied.
    pub fn body(&mut self, body: &Body) -> std::io::Result<Vec<u8>> {
        let (BodySource::File { offset, len }, Some(file)) = (&body.source, self.file) else {
            return match self.file {
                Some(f) => f.read_body(body),
                None => read_body(None, body),
            };
        };
        if file.stale {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, MOVED));
        }
        let (offset, len) = (*offset, usize::try_from(*len).map_err(|_| std::io::ErrorKind::OutOfMemory)?);
        let in_window =
            |w: &Self| offset >= w.window_start && offset - w.window_start + (len as u64) < w.window.len() as u64;
        if !in_window(self) {
            // Read ahead only when going forward from the window (or starting): a jump back reads the one line.
            let window_end = self.window_start + self.window.len() as u64;
            let forward = self.window.is_empty() || (offset >= self.window_start && offset <= window_end);
            // The window grows from a small first read, so a few entries (a notification's) cost a small read.
            let ahead = (self.window.len() * 2).clamp(FIRST_READ, READ_AHEAD);
            self.window.resize(if forward { ahead.max(len + 1) } else { len + 1 }, 0);
            let got = read_up_to(&file.reader, &mut self.window, offset)?;
            self.window.truncate(got);
            self.window_start = offset;
        }
        let raw = line_in(&self.window[(offset - self.window_start) as usize..], len)?;
        Ok(match &body.patch {
            Some(p) => patch::apply(raw, p),
            None => raw.to_vec(),
        })
    }
}

/// The message of the `InvalidData` error [`read_body`] gives for a line that is no longer where it was.
pub const MOVED: &str = "the line is no longer where it was read";

/// The `len` bytes at `offset` and the byte after them, which must be the line's `\n` or the end of the file.
fn read_line_at(file: &File, offset: u64, len: u64) -> std::io::Result<Vec<u8>> {
    let len = usize::try_from(len).map_err(|_| std::io::Error::from(std::io::ErrorKind::OutOfMemory))?;
    let mut buf = vec![0u8; len + 1];
    let got = read_up_to(file, &mut buf, offset)?;
    line_in(&buf[..got], len).map(<[u8]>::to_vec)
}

/// Fills `buf` from `offset` on, as far as the file goes; returns how much it read.
fn read_up_to(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// The first `len` bytes of `read` (what a read found at a line's offset), checked to still be that line: all
/// there, and followed by its `\n` or the end of the file.
fn line_in(read: &[u8], len: usize) -> std::io::Result<&[u8]> {
    if read.len() < len {
        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the line is no longer in the file"));
    }
    if read.len() > len && read[len] != b'\n' {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, MOVED));
    }
    Ok(&read[..len])
}

/// How hard a write tries to reach the disk before it counts as done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// No fsync (what pi does): survives a crash of this process, not of the machine.
    #[default]
    None,
    /// fsync after every write, before it is acknowledged (and of the directory when a file is created or
    /// renamed).
    Entry,
    /// Group commit: writes are made at once and acknowledged once one fsync covers them ([`Commit::wait`]), so
    /// a burst of writers shares one fsync.
    Batch,
}

/// What [`SessionFile::beyond`] found past the bytes we know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Beyond {
    /// The file's length now.
    pub end: u64,
    /// Where the bytes after the last newline start, when the file does not end with one: a line another writer
    /// is still writing, or one it left unfinished.
    pub unterminated: Option<u64>,
}

/// Where an append landed.
#[derive(Debug)]
pub struct Landed {
    /// File offset of the first byte written. It is the length known before the write unless another writer
    /// (one that takes no lock: pi) appended in between, whose bytes then lie before it.
    pub offset: u64,
    /// When the write is durable.
    pub commit: Commit,
}

/// Group commit and poisoning for one append handle. Writes are numbered as they are made; one fsync covers every
/// write numbered before it started, so writers waiting meanwhile share it (one fsync runs at a time; a waiter
/// whose write an fsync made since covers needs none of its own). It lives outside the session's lock (each
/// [`Commit`] holds it), so an fsync never has to hold up the next writer. Once an fsync fails, or a failed write
/// cannot be cut back, what is on disk is unknown: the point is poisoned, every write it was to cover fails, and
/// every later write is refused until the file is opened again (PostgreSQL's lesson: retrying an fsync after a
/// failure can report success for data the kernel already dropped).
#[derive(Debug)]
pub struct SyncPoint {
    /// A descriptor of the append handle's file, for fsync without the handle.
    file: File,
    path: String,
    state: Mutex<SyncState>,
    /// Held while an fsync runs, so two are never made at once (the second waits, then usually finds its write
    /// covered by the first).
    fsync_turn: Mutex<()>,
}

#[derive(Debug, Default)]
struct SyncState {
    /// Number of the last write made.
    written: u64,
    /// Number of the last write known durable.
    synced: u64,
    /// Why the file refuses writes: the failure, and its OS error code when it had one.
    poison: Option<(String, Option<i32>)>,
}

impl SyncPoint {
    fn new(writer: &File, path: &str) -> Result<Arc<SyncPoint>> {
        let file = writer.try_clone().map_err(|e| Error::io("open", path, e))?;
        Ok(Arc::new(SyncPoint {
            file,
            path: path.to_owned(),
            state: Mutex::new(SyncState::default()),
            fsync_turn: Mutex::new(()),
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SyncState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Numbers a write just made; returns its number.
    fn wrote(&self) -> u64 {
        let mut s = self.lock();
        s.written += 1;
        s.written
    }

    /// Records that everything written so far is durable (a synced rewrite replaced the file).
    fn all_synced(&self) {
        let mut s = self.lock();
        s.synced = s.written;
    }

    /// Poisons the file (see the type's doc).
    fn poison(&self, cause: String, os_error: Option<i32>) {
        tracing::error!("{}: {cause}; the session refuses writes until it is opened again", self.path);
        self.lock().poison.get_or_insert((cause, os_error));
    }

    /// The error a write gets once the file is poisoned.
    fn refusal(&self) -> Option<Error> {
        let s = self.lock();
        s.poison.as_ref().map(|(cause, _)| Error::Poisoned { path: self.path.clone(), cause: cause.clone() })
    }

    /// True when write number `generation` is durable.
    pub(crate) fn is_synced(&self, generation: u64) -> bool {
        self.lock().synced >= generation
    }

    /// Blocks until write number `generation` is durable, making the fsync on this thread unless one made since
    /// covers it. A write an fsync failed to cover gets that failure (it is not durable).
    pub(crate) fn sync_through(&self, generation: u64) -> Result<()> {
        loop {
            {
                let s = self.lock();
                if s.synced >= generation {
                    return Ok(());
                }
                if let Some((cause, os_error)) = &s.poison {
                    let source = match os_error {
                        Some(code) => std::io::Error::from_raw_os_error(*code),
                        None => std::io::Error::other(cause.clone()),
                    };
                    return Err(Error::io("sync", &self.path, source));
                }
            }
            let _turn = self.fsync_turn.lock().unwrap_or_else(|e| e.into_inner());
            let target = {
                let s = self.lock();
                if s.synced >= generation || s.poison.is_some() {
                    continue;
                }
                s.written
            };
            let result = self.file.sync_data();
            let mut s = self.lock();
            match result {
                Ok(()) => s.synced = s.synced.max(target),
                Err(e) => {
                    tracing::error!(
                        "{}: fsync failed: {e}; the session refuses writes until it is opened again",
                        self.path
                    );
                    s.poison.get_or_insert((format!("fsync failed: {e}"), e.raw_os_error()));
                }
            }
        }
    }

    /// fsyncs what is still owed (when the file is closed).
    fn sync_all_written(&self) -> Result<()> {
        let written = self.lock().written;
        self.sync_through(written)
    }
}

/// One open session file: a handle for reading bodies, an append handle that holds the single-writer lock, and
/// what we know of its length and identity, so that another process's appends are noticed, never interleaved.
#[derive(Debug)]
pub struct SessionFile {
    path: String,
    reader: File,
    writer: Option<File>,
    len: u64,
    id: (u64, u64),
    durability: Durability,
    /// Group commit and poisoning for `writer` (present with it).
    sync: Option<Arc<SyncPoint>>,
    /// The last bytes before `len`, as read or written: if they change, the file was rewritten in place (same
    /// inode), not appended to, even when it grew.
    tail: Vec<u8>,
    /// The first bytes of the file (the header line, mostly), checked with `tail`.
    head: Vec<u8>,
    /// The file's stamp when we last looked, and when that was.
    stamp: FileStamp,
    observed_at_ns: i64,
    /// The bytes at the offsets we read are gone or no longer ours (the file was truncated or rewritten in place
    /// into something that is not a session): bodies are refused rather than read from wherever they now point.
    stale: bool,
    /// The path holds something that is not a session (its stamp when that was found); writes are refused.
    detached: Option<FileStamp>,
}

/// Why a write to a file found holding something that is not a session is refused.
pub const DETACHED: &str = "the session file was emptied, or replaced or overwritten by something that is not a pi \
                            session; nothing was written (the handle reads the file again once it is a session; or \
                            reopen it)";

fn file_id(meta: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

/// fsync of a directory, so a created or renamed file's name survives a power loss.
fn sync_dir_of(path: &str) -> std::io::Result<()> {
    let dir =
        std::path::Path::new(path).parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    File::open(dir)?.sync_all()
}

impl SessionFile {
    /// Opens `path` and loads it from that very handle (so offsets refer to the file that was read).
    /// Only a regular file is opened ([`open_regular`]); lines longer than [`MAX_LINE_BYTES`] are skipped unread.
    pub fn open(path: &str, durability: Durability) -> Result<(SessionFile, LoadedFile)> {
        Self::open_knowing(path, durability, |_, _| None)
    }

    /// [`SessionFile::open`], starting from what `known` says the file's first bytes already hold (given the
    /// opened handle and its stamp; None: nothing known): only the bytes after them are read. What `known` gives
    /// must end with a complete line (see [`LoadedFile::ends_a_line`]) and be the caller's to vouch for.
    pub fn open_knowing(
        path: &str,
        durability: Durability,
        known: impl FnOnce(&File, &FileStamp) -> Option<LoadedFile>,
    ) -> Result<(SessionFile, LoadedFile)> {
        take_back_torn_append(path);
        let reader = open_regular(path)?;
        // Stamped before reading, so a change made while we read shows as a change afterwards.
        let observed_at_ns = now_ns();
        let meta = reader.metadata().map_err(|e| Error::io("stat", path, e))?;
        let loaded = match known(&reader, &FileStamp::of(&meta)).filter(LoadedFile::ends_a_line) {
            None => load_from(&reader, path, Start::default(), Body::file)?,
            Some(mut loaded) => {
                let start = Start {
                    offset: loaded.len,
                    line: loaded.lines.len() as u32,
                    seen_header: loaded.records.iter().any(Record::is_header),
                    hold_back_partial: false,
                };
                if meta.len() > loaded.len {
                    let mut handle = reader.try_clone().map_err(|e| Error::io("read", path, e))?;
                    handle.seek(std::io::SeekFrom::Start(start.offset)).map_err(|e| Error::io("read", path, e))?;
                    loaded.extend(load_from(handle, path, start, Body::file)?);
                }
                loaded
            }
        };
        let mut file = SessionFile {
            path: path.to_owned(),
            reader,
            writer: None,
            len: loaded.len,
            id: file_id(&meta),
            durability,
            sync: None,
            tail: Vec::new(),
            head: Vec::new(),
            stamp: FileStamp::of(&meta),
            observed_at_ns,
            stale: false,
            detached: None,
        };
        file.remember_known_bytes();
        Ok((file, loaded))
    }

    /// Creates `path` exclusively (pi's `wx`) with `content`, locked for writing and synced as `durability` says.
    /// If anything fails after the file was created, the file is removed again (it is ours: `O_EXCL` made it), so
    /// a retry once the cause is gone (a full disk freed) does not fail with `EEXIST` on a 0-byte leftover.
    pub fn create(path: &str, content: &[u8], durability: Durability) -> Result<SessionFile> {
        sweep_stale_temps(path);
        let writer = OpenOptions::new().read(true).append(true).create_new(true).open(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                Error::AlreadyExists { path: path.to_owned() }
            } else {
                Error::io("create", path, e)
            }
        })?;
        let made = (|| {
            lock_writer(&writer, path)?;
            writer.try_clone().and_then(|mut w| w.write_all(content)).map_err(|e| Error::io("write", path, e))?;
            if durability != Durability::None {
                writer.sync_all().map_err(|e| Error::io("sync", path, e))?;
                sync_dir_of(path).map_err(|e| Error::io("sync", path, e))?;
            }
            let reader = writer.try_clone().map_err(|e| Error::io("open", path, e))?;
            let meta = reader.metadata().map_err(|e| Error::io("stat", path, e))?;
            Ok((reader, meta, SyncPoint::new(&writer, path)?))
        })();
        let (reader, meta, sync) = match made {
            Ok(m) => m,
            Err(e) => {
                drop(writer);
                if let Err(rm) = std::fs::remove_file(path) {
                    tracing::warn!("{path}: could not remove the file whose first write failed: {rm}");
                }
                return Err(e);
            }
        };
        let mut file = SessionFile {
            path: path.to_owned(),
            reader,
            writer: Some(writer),
            len: content.len() as u64,
            id: file_id(&meta),
            durability,
            sync: Some(sync),
            tail: Vec::new(),
            head: Vec::new(),
            stamp: FileStamp::of(&meta),
            observed_at_ns: now_ns(),
            stale: false,
            detached: None,
        };
        file.remember_known_bytes();
        Ok(file)
    }

    /// Reads the bytes just before `len` into `tail`, and stamps the file as it is now.
    fn remember_tail(&mut self) {
        self.remember_stamp();
        self.remember_known_bytes();
    }

    /// Keeps the first bytes and the bytes before `len`, to recognise a rewrite later.
    fn remember_known_bytes(&mut self) {
        (self.head, self.tail) = identity::known_bytes(&self.reader, self.len);
    }

    /// What this handle knows of its file, to tell later whether it is still the file that was read.
    pub fn known(&self) -> Known<'_> {
        Known {
            stamp: &self.stamp,
            len: self.len,
            head: &self.head,
            tail: &self.tail,
            observed_at_ns: self.observed_at_ns,
        }
    }

    /// Records the file's stamp as it is now (after a write or after following it).
    fn remember_stamp(&mut self) {
        self.observed_at_ns = now_ns();
        if let Ok(meta) = self.reader.metadata() {
            self.stamp = FileStamp::of(&meta);
        }
    }

    /// Reads a body of this file (see [`read_body`]); refused once the file is known to have been rewritten
    /// under us.
    pub fn read_body(&self, body: &Body) -> std::io::Result<Vec<u8>> {
        if self.stale && matches!(body.source, BodySource::File { .. }) {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, MOVED));
        }
        read_body(Some(&self.reader), body)
    }

    /// The line of `len` bytes at `offset` with each of `holes` (ranges within it, each a string literal)
    /// replaced by `fill`, reading only the bytes around them. Each hole must still begin and end with a quote
    /// and the line still end where it did (as [`read_body`] checks), or the line is no longer where it was read.
    pub fn read_around(&self, offset: u64, len: u64, holes: &[(u32, u32)], fill: &[u8]) -> std::io::Result<Vec<u8>> {
        let moved = || std::io::Error::new(std::io::ErrorKind::InvalidData, MOVED);
        if self.stale {
            return Err(moved());
        }
        let mut out = Vec::new();
        let mut piece = Vec::new();
        let mut from = 0u64;
        // Each piece is read with the quote that starts the next hole and the one that ends the last, so the
        // holes are checked without a read of their own; the last piece with the byte after the line.
        for (n, &(start, end)) in holes.iter().chain([(len as u32 + 1, 0)].iter()).enumerate() {
            let last = n == holes.len();
            let to = if last { len + 1 } else { u64::from(start) + 1 };
            piece.resize((to - from) as usize, 0);
            let got = read_up_to(&self.reader, &mut piece, offset + from)?;
            let body: &[u8] = if last {
                line_in(&piece[..got], (len - from) as usize)?
            } else if got < piece.len() || piece[got - 1] != b'"' {
                return Err(moved());
            } else {
                &piece[..got - 1]
            };
            let body = if n > 0 { body.strip_prefix(b"\"").ok_or_else(moved)? } else { body };
            out.extend_from_slice(body);
            if !last {
                out.extend_from_slice(fill);
                from = u64::from(end) - 1;
            }
        }
        Ok(out)
    }

    /// Records that the path now holds `seen`, which is not a session. With `in_place` (it is the very file we
    /// read, truncated or rewritten), what was read from it is no longer on disk: later body reads fail with
    /// [`MOVED`] instead of reading whatever is there now. Appends are refused until the file is opened again.
    pub fn detach(&mut self, seen: FileStamp, in_place: bool) {
        self.detached = Some(seen);
        self.stale |= in_place;
    }

    /// True when `stamp` is of this very file (same device and inode).
    pub fn is_file(&self, stamp: &FileStamp) -> bool {
        (stamp.dev, stamp.ino) == self.id
    }

    /// The path's stamp when it was found not to be a session ([`SessionFile::detach`]).
    pub fn detached(&self) -> Option<FileStamp> {
        self.detached
    }

    /// The path holds nothing any more: the file counts as deleted (which the next write repairs) rather than
    /// replaced.
    pub fn reattach(&mut self) {
        self.detached = None;
    }

    /// The path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Reads this file's lines for copying them elsewhere (through the handle bodies are read from, which stays
    /// valid if the path is removed or replaced).
    pub fn lines(&self) -> BodyReader<'_> {
        BodyReader(Some(&self.reader))
    }

    /// Bytes known to be in the file (the end of the last complete line read or written).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when nothing is known to be in the file.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Records that the file is known up to `len` (after following another process's appends).
    pub fn set_len(&mut self, len: u64) {
        self.len = len;
        self.remember_tail();
    }

    /// Sets the durability of later writes.
    pub fn set_durability(&mut self, durability: Durability) {
        self.durability = durability;
    }

    /// Compares the path with what we know ([`Known::judge`]: one `stat` when its stamp is as we left it, the
    /// first and last known bytes when it changed; written to without growing is [`FileState::Rewritten`]).
    pub fn state(&self) -> Result<FileState> {
        let now = match FileStamp::of_path(&self.path) {
            Ok(Some(now)) => now,
            Ok(None) => return Ok(FileState::Missing),
            Err(e) => return Err(Error::io("stat", &self.path, e)),
        };
        // Our handle reads the known bytes: when the path names another file, the stamp says so first.
        Ok(self.known().judge(&now, &self.reader))
    }

    /// Lines appended by someone else since `from` (complete lines only; a line still being written stays
    /// for later).
    pub fn read_from(&self, start: Start) -> Result<LoadedFile> {
        let mut handle = self.reader.try_clone().map_err(|e| Error::io("read", &self.path, e))?;
        handle.seek(std::io::SeekFrom::Start(start.offset)).map_err(|e| Error::io("read", &self.path, e))?;
        load_from(handle, &self.path, Start { hold_back_partial: true, ..start }, Body::file)
    }

    /// The lines between `start` and `end` (bytes another writer put before ours; complete lines only).
    pub fn read_between(&self, start: Start, end: u64) -> Result<LoadedFile> {
        let mut handle = self.reader.try_clone().map_err(|e| Error::io("read", &self.path, e))?;
        handle.seek(std::io::SeekFrom::Start(start.offset)).map_err(|e| Error::io("read", &self.path, e))?;
        let bounded = handle.take(end.saturating_sub(start.offset));
        load_from(bounded, &self.path, Start { hold_back_partial: true, ..start }, Body::file)
    }

    /// Takes the single-writer lock (once; it is held until the file is dropped). The first time, temporary files
    /// a killed process left beside the file are removed.
    pub fn lock(&mut self) -> Result<()> {
        if self.writer.is_none() {
            let writer =
                OpenOptions::new().append(true).open(&self.path).map_err(|e| Error::io("open", &self.path, e))?;
            lock_writer(&writer, &self.path)?;
            self.sync = Some(SyncPoint::new(&writer, &self.path)?);
            self.writer = Some(writer);
            sweep_stale_temps(&self.path);
        }
        Ok(())
    }

    /// Why writes are refused, once a failed fsync (or a failed write that could not be cut back) poisoned the
    /// file.
    pub fn refusal(&self) -> Option<Error> {
        self.sync.as_ref().and_then(|s| s.refusal())
    }

    /// Appends `bytes` (whole lines) in one `write` on the locked `O_APPEND` handle, then syncs as the durability
    /// says. A write that fails part-way is cut back to where it started, so no partial line of a refused entry
    /// is left; if that fails too, or an `Entry` fsync fails, the file is poisoned. The caller compares
    /// [`Landed::offset`] with [`SessionFile::len`] (as it was) to see whether another writer got in between.
    pub fn append(&mut self, bytes: &[u8]) -> Result<Landed> {
        if self.detached.is_some() {
            return Err(Error::Conflict { path: Some(self.path.clone()), leaf: None, message: DETACHED.to_owned() });
        }
        self.lock()?;
        if let Some(refused) = self.refusal() {
            return Err(refused);
        }
        let point = self.sync.clone().expect("a locked file has a sync point");
        let path = self.path.clone();
        let several_lines = memchr::memchr_iter(b'\n', bytes).nth(1).is_some();
        if several_lines {
            self.announce_append(bytes.len() as u64)?;
        }
        let writer = self.writer.as_mut().expect("locked");
        #[cfg(debug_assertions)]
        crash_test::maybe_tear(writer, bytes);
        let written = write_appending(writer, bytes);
        if several_lines {
            self.clear_intent();
        }
        let writer = self.writer.as_mut().expect("locked");
        let start = match written {
            Ok(start) => start,
            Err(failed) => {
                cut_back(writer, &point, failed.landed_at, failed.lost_track);
                // Our own cut must not look like someone else's rewrite at the next look.
                self.remember_stamp();
                return Err(Error::io("append to", &path, failed.error));
            }
        };
        let commit = match self.durability {
            Durability::None => Commit::done(),
            Durability::Entry => match writer.sync_data() {
                Ok(()) => Commit::done(),
                Err(e) => {
                    cut_back(writer, &point, Some(start), false);
                    point.poison(format!("fsync failed: {e}"), e.raw_os_error());
                    self.remember_stamp();
                    return Err(Error::io("sync", &path, e));
                }
            },
            Durability::Batch => Commit::pending(point.clone(), point.wrote()),
        };
        let contiguous = start == self.len;
        self.len = start + bytes.len() as u64;
        if bytes.len() as u64 >= TAIL_CHECK {
            self.tail = bytes[bytes.len() - TAIL_CHECK as usize..].to_vec();
            self.remember_stamp();
        } else if contiguous {
            self.tail.extend_from_slice(bytes);
            let excess = self.tail.len().saturating_sub(TAIL_CHECK as usize);
            self.tail.drain(..excess);
            self.remember_stamp();
        } else {
            self.remember_tail();
        }
        Ok(Landed { offset: start, commit })
    }

    /// What lies past `known` bytes now, read from the file as it is at this moment (never from an earlier
    /// `stat`, which another writer may have overtaken): where it ends, and where a line nobody has ended yet
    /// starts, if there is one. Bytes are only read backwards from the end to the last newline, at most down to
    /// `known`.
    pub fn beyond(&self, known: u64) -> Result<Beyond> {
        let end = self.reader.metadata().map_err(|e| Error::io("stat", &self.path, e))?.len();
        let mut pos = end;
        let mut buf = vec![0u8; 64 * 1024];
        while pos > known {
            let n = (pos - known).min(buf.len() as u64) as usize;
            let chunk = &mut buf[..n];
            self.reader.read_exact_at(chunk, pos - n as u64).map_err(|e| Error::io("read", &self.path, e))?;
            if let Some(i) = memchr::memrchr(b'\n', chunk) {
                let line_start = pos - n as u64 + i as u64 + 1;
                return Ok(Beyond { end, unterminated: (line_start < end).then_some(line_start) });
            }
            pos -= n as u64;
        }
        Ok(Beyond { end, unterminated: (end > known).then_some(known) })
    }

    /// True when the file is no longer `end` bytes long after a moment's wait: a writer is in the middle of the
    /// line that ends there (one `write()` finishes within microseconds; a writer flushing piece by piece pauses
    /// longer, and is taken to be done after this).
    pub fn still_growing(&self, end: u64) -> Result<bool> {
        std::thread::sleep(std::time::Duration::from_millis(20));
        Ok(self.reader.metadata().map_err(|e| Error::io("stat", &self.path, e))?.len() != end)
    }

    /// True when a line written at `offset` starts a line of its own as pi splits the file: the bytes between
    /// the newline before `offset` (or the start of the file) and `offset` are JSON white space or nothing. False
    /// when another writer's unfinished line was there, so what was written at `offset` was fused into it.
    pub fn starts_a_line(&self, offset: u64) -> Result<bool> {
        let mut pos = offset;
        let mut buf = [0u8; 4096];
        while pos > 0 {
            let n = pos.min(buf.len() as u64) as usize;
            let chunk = &mut buf[..n];
            self.reader.read_exact_at(chunk, pos - n as u64).map_err(|e| Error::io("read", &self.path, e))?;
            for &b in chunk.iter().rev() {
                match b {
                    b'\n' => return Ok(true),
                    b' ' | b'\t' | b'\r' => {}
                    _ => return Ok(false),
                }
            }
            pos -= n as u64;
        }
        Ok(true)
    }

    /// Says beside the file, before a write of several lines, where that write starts and how long it is, so
    /// that if this process dies in the middle of it, the next open takes back the part that landed
    /// ([`take_back_torn_append`]): a batch is in the file whole or not at all. The intent exists only while the
    /// write is made. Not synced: a killed process leaves the page cache behind, and a sync would double the cost
    /// of a batch under `entry` for a power loss, after which only what was acknowledged is promised anyway.
    fn announce_append(&mut self, len: u64) -> Result<()> {
        let intent = intent_path(&self.path);
        let start = self.writer.as_ref().expect("locked").metadata().map_err(|e| Error::io("stat", &self.path, e))?;
        std::fs::write(&intent, format!("{} {len}\n", start.len())).map_err(|e| Error::io("write", &intent, e))
    }

    /// The write announced is over (done, or cut back): the intent goes.
    fn clear_intent(&mut self) {
        let intent = intent_path(&self.path);
        if let Err(e) = std::fs::remove_file(&intent) {
            tracing::warn!("{intent}: could not remove the append intent: {e}");
        }
    }

    /// fsyncs what group commit left pending.
    pub fn sync(&mut self) -> Result<()> {
        match &self.sync {
            Some(point) => point.sync_all_written(),
            None => Ok(()),
        }
    }

    /// Replaces the file atomically with what `write` produces (temp file, locked, synced, renamed over the
    /// path), keeping the lock. Returns the new length. When the path is a symlink, the file it points to is
    /// replaced and the link stays (pi's `writeFileSync` writes through links too).
    pub fn replace(
        &mut self,
        write: impl FnOnce(BodyReader<'_>, &mut dyn Write) -> std::io::Result<()>,
    ) -> Result<u64> {
        self.lock()?;
        if let Some(refused) = self.refusal() {
            return Err(refused);
        }
        let target = std::fs::canonicalize(&self.path)
            .ok()
            .and_then(|p| p.to_str().map(str::to_owned))
            .unwrap_or_else(|| self.path.clone());
        sweep_stale_temps(&target);
        let tmp = temp_path(&target);
        let result = (|| -> std::io::Result<File> {
            // Appending handle: after the rename it is the writer, and appends must stay O_APPEND.
            let _ = std::fs::remove_file(&tmp);
            let f = OpenOptions::new().read(true).append(true).create_new(true).open(&tmp)?;
            f.try_lock().map_err(|e| std::io::Error::other(e.to_string()))?;
            let mut w = std::io::BufWriter::with_capacity(1 << 20, &f);
            write(BodyReader(Some(&self.reader)), &mut w)?;
            w.into_inner().map_err(|e| e.into_error())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &target)?;
            if self.durability != Durability::None {
                sync_dir_of(&target)?;
            }
            Ok(f)
        })();
        let new = match result {
            Ok(f) => f,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(Error::io("rewrite", &self.path, e));
            }
        };
        let meta = new.metadata().map_err(|e| Error::io("stat", &self.path, e))?;
        self.reader = File::open(&self.path).map_err(|e| Error::io("open", &self.path, e))?;
        self.id = file_id(&meta);
        self.len = meta.len();
        self.stale = false;
        // What was written to the old file is in the new one, which is synced.
        if let Some(old) = self.sync.take() {
            old.all_synced();
        }
        self.sync = Some(SyncPoint::new(&new, &self.path)?);
        self.writer = Some(new);
        self.remember_tail();
        Ok(self.len)
    }
}

/// How a write on an `O_APPEND` handle failed.
struct FailedWrite {
    error: std::io::Error,
    /// Where this write's first bytes landed, when some did.
    landed_at: Option<u64>,
    /// Bytes landed but where is unknown (the offset could not be read).
    lost_track: bool,
}

/// Writes all of `bytes` (one `write`, more only if the kernel takes less) and returns the offset they start at.
fn write_appending(writer: &mut File, bytes: &[u8]) -> std::result::Result<u64, FailedWrite> {
    let mut start = None;
    let mut done = 0;
    while done < bytes.len() {
        match writer.write(&bytes[done..]) {
            Ok(0) => {
                let error = std::io::ErrorKind::WriteZero.into();
                return Err(FailedWrite { error, landed_at: start, lost_track: false });
            }
            Ok(n) => {
                if start.is_none() {
                    // O_APPEND leaves the offset at the end of what this write put at the end of the file.
                    match writer.stream_position() {
                        Ok(end) => start = Some(end - n as u64),
                        Err(error) => return Err(FailedWrite { error, landed_at: None, lost_track: true }),
                    }
                }
                done += n;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => return Err(FailedWrite { error, landed_at: start, lost_track: false }),
        }
    }
    match start {
        Some(s) => Ok(s),
        None => writer.stream_position().map_err(|error| FailedWrite { error, landed_at: None, lost_track: true }),
    }
}

/// Cuts a failed write back to where it started, so no partial line of a refused entry stays in the file; if
/// that is impossible, poisons the file.
fn cut_back(writer: &File, point: &SyncPoint, landed_at: Option<u64>, lost_track: bool) {
    if lost_track {
        point.poison("a write failed and where it landed is unknown".to_owned(), None);
    } else if let Some(start) = landed_at {
        if let Err(e) = writer.set_len(start) {
            point.poison(format!("a failed write could not be cut back to {start} bytes: {e}"), e.raw_os_error());
        }
    }
}

/// The temporary file a rewrite of `path` goes to (this process's id in it, so a leftover names its maker).
/// Where a session file's append intent lives: `"<start> <length>\n"` of a write of several lines in progress,
/// or nothing.
fn intent_path(path: &str) -> String {
    format!("{path}.pi-sessiond-append")
}

/// Takes back the landed part of a write of several lines that its process did not finish (killed in the middle
/// of it: the append intent still names it and the file ends inside it), so that pi, and anyone after, reads the
/// batch whole or not at all. Done only when no process holds the session's write lock (a live writer is in the
/// middle of its write, which it will finish or cut back itself); the intent is removed once the file is known
/// to hold the write whole or not at all. Until a pi-sessiond opens the file, pi alone reads the lines that
/// landed (docs/durability.md).
fn take_back_torn_append(path: &str) {
    let intent = intent_path(path);
    let Ok(text) = std::fs::read_to_string(&intent) else { return };
    let Ok(file) = OpenOptions::new().read(true).write(true).open(path) else { return };
    if file.try_lock().is_err() {
        return;
    }
    let announced = text.split_whitespace().map(str::parse::<u64>).collect::<std::result::Result<Vec<u64>, _>>();
    if let (Ok(&[start, len]), Ok(meta)) = (announced.as_deref(), file.metadata()) {
        let end = meta.len();
        if end > start && end < start + len {
            tracing::warn!(
                "{path}: a write of {len} bytes at {start} was cut short by its process's end after {} bytes; \
                 taking back what landed, so the file holds all of it or none",
                end - start
            );
            if let Err(e) = file.set_len(start).and_then(|()| file.sync_all()) {
                tracing::error!("{path}: could not take back a torn write: {e}");
                return;
            }
        }
    }
    if let Err(e) = std::fs::remove_file(&intent) {
        tracing::warn!("{intent}: could not remove: {e}");
    }
}

fn temp_path(path: &str) -> String {
    format!("{path}.pi-sessiond-{}.tmp", std::process::id())
}

/// Removes the rewrite temporaries (`*.pi-sessiond-PID.tmp`) in the directory of `path` whose process is gone:
/// a process killed during a rewrite leaves one, and nothing else would ever remove it. A temporary of a live
/// process (or one whose pid was reused) is left alone.
fn sweep_stale_temps(path: &str) {
    let dir = std::path::Path::new(path).parent().filter(|d| !d.as_os_str().is_empty());
    let Ok(entries) = std::fs::read_dir(dir.unwrap_or(std::path::Path::new("."))) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(temp_owner) else { continue };
        if pid == std::process::id() || process_alive(pid) {
            continue;
        }
        match std::fs::remove_file(entry.path()) {
            Ok(()) => tracing::info!("removed {}, left by process {pid}, which is gone", entry.path().display()),
            Err(e) => tracing::debug!("could not remove stale {}: {e}", entry.path().display()),
        }
    }
}

/// The pid in a rewrite temporary's name (`<file>.pi-sessiond-<pid>.tmp`).
fn temp_owner(name: &str) -> Option<u32> {
    let rest = name.strip_suffix(".tmp")?;
    let (_, pid) = rest.rsplit_once(".pi-sessiond-")?;
    pid.parse().ok()
}

fn process_alive(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) else { return false };
    // EPERM means it exists but belongs to someone else.
    !matches!(rustix::process::test_kill_process(pid), Err(rustix::io::Errno::SRCH))
}

impl Drop for SessionFile {
    fn drop(&mut self) {
        // A poisoned file was reported when it was poisoned; there is nothing left to sync.
        if self.refusal().is_some() {
            return;
        }
        if let Err(e) = self.sync() {
            tracing::warn!("{}: closing: {e}", self.path);
        }
    }
}

/// Test hooks, compiled into debug builds only, each killing the process at the N-th append: with
/// `PI_SESSIOND_TEST_TEAR_AT=N` it writes half of its line and aborts, which is what a crash in the middle of a
/// write leaves behind; with `PI_SESSIOND_TEST_DIE_AFTER=N` it writes the whole line and aborts before anyone is
/// told, so a host sees a write in flight that did land (the pi drop-in must not write it twice).
#[cfg(debug_assertions)]
mod crash_test {
    use std::sync::atomic::{AtomicU64, Ordering};

    static APPENDS: AtomicU64 = AtomicU64::new(0);

    pub fn maybe_tear(writer: &mut std::fs::File, bytes: &[u8]) {
        use std::io::Write;
        let at = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
        let (tear, die) = (at("PI_SESSIOND_TEST_TEAR_AT"), at("PI_SESSIOND_TEST_DIE_AFTER"));
        if tear.is_none() && die.is_none() {
            return;
        }
        let count = APPENDS.fetch_add(1, Ordering::SeqCst) + 1;
        if tear == Some(count) {
            let _ = writer.write_all(&bytes[..bytes.len() / 2]);
            std::process::abort();
        }
        if die == Some(count) {
            let _ = writer.write_all(bytes);
            std::process::abort();
        }
    }
}

/// Takes the advisory exclusive lock (`flock`) on an append handle, or says who holds it. The lock lives on the
/// session file itself, so no lock file is left beside sessions, and it dies with its process, so a crashed
/// writer never leaves a stale lock. pi 1.6.0 takes no lock; the manager follows the file before each write
/// instead.
///
/// A lock that seems held by this very process, or by nobody by the time `/proc/locks` is read, is tried again for
/// a moment: a child being started by any thread of this process holds a copy of our descriptors from `fork` to
/// `exec`, so a lock just released by closing a descriptor can outlive it by that long.
fn lock_writer(writer: &File, path: &str) -> Result<()> {
    let mut pause = std::time::Duration::from_millis(1);
    loop {
        match writer.try_lock() {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) => {
                let pid = writer.metadata().ok().and_then(|m| lock_holder(&m));
                let transient = pid.is_none_or(|p| p == std::process::id());
                if !transient || pause > std::time::Duration::from_millis(64) {
                    return Err(Error::Locked { path: path.to_owned(), pid });
                }
                std::thread::sleep(pause);
                pause *= 2;
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(Error::io("lock", path, e)),
        }
    }
}

/// The pid holding an flock on this file, from Linux's `/proc/locks` (`1: FLOCK ADVISORY WRITE <pid>
/// <major>:<minor>:<inode> 0 EOF`).
fn lock_holder(meta: &std::fs::Metadata) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let dev = meta.dev();
    let (major, minor) =
        (((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff), ((dev >> 12) & 0xffff_ff00) | (dev & 0xff));
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(1) != Some(&"FLOCK") || fields.get(3) != Some(&"WRITE") {
            return None;
        }
        let mut id = fields.get(5)?.split(':');
        let (maj, min, ino) = (id.next()?, id.next()?, id.next()?);
        let matches = u64::from_str_radix(maj, 16).ok()? == major
            && u64::from_str_radix(min, 16).ok()? == minor
            && ino.parse::<u64>().ok()? == meta.ino();
        matches.then(|| fields.get(4)?.parse().ok()).flatten()
    })
}

/// The durability of one write: [`Commit::wait`] returns once the write is on disk as the session's durability
/// asks. Under `Durability::Batch` the fsync happens there, without the session (a `&mut SessionManager` is not
/// needed), and one fsync covers every write made before it, so a burst of writers shares one
/// ([`SessionManager::sync`](super::SessionManager::sync) does the same for everything written). Under `None` and
/// `Entry` there is nothing to wait for (an `Entry` write was synced before it was applied to memory).
#[derive(Debug, Default)]
#[must_use = "a write is not durable until its commit is waited for"]
pub struct Commit(Option<(Arc<SyncPoint>, u64)>);

impl Commit {
    /// A commit with nothing to wait for.
    pub fn done() -> Commit {
        Commit(None)
    }

    pub(crate) fn pending(point: Arc<SyncPoint>, generation: u64) -> Commit {
        Commit(Some((point, generation)))
    }

    /// True when [`Commit::wait`] may block (an fsync is still owed).
    pub fn is_pending(&self) -> bool {
        self.0.as_ref().is_some_and(|(point, generation)| !point.is_synced(*generation))
    }

    /// Blocks until the write is durable. The first waiter fsyncs everything written so far; the others wait
    /// for it. A failed fsync fails every write it was to cover (none of them is durable) and poisons the
    /// session: later writes fail until the file is opened again.
    pub fn wait(self) -> Result<()> {
        match self.0 {
            None => Ok(()),
            Some((point, generation)) => point.sync_through(generation),
        }
    }
}

/// How far into a file pi looks for its header when discovering sessions (1 MiB).
pub const HEADER_SCAN_LIMIT: u64 = 1024 * 1024;

/// The header a discovery scan finds: the first parsed line, if it is a header with a string id and it lies
/// within the first MiB (pi's bounded `readSessionHeader`).
pub fn read_header_bounded(path: &str) -> Option<Json> {
    let mut f = open_regular(path).ok()?;
    let mut buf = Vec::with_capacity(16 * 1024);
    let mut start = 0;
    let mut searched = 0;
    // Read in growing steps: the header is nearly always the first line, and a full MiB per file would make
    // discovering thousands of sessions read gigabytes.
    let mut step = 16 * 1024;
    let mut at_end = false;
    while !at_end && (buf.len() as u64) < HEADER_SCAN_LIMIT {
        let want = (HEADER_SCAN_LIMIT - buf.len() as u64).min(step);
        let got = (&mut f).take(want).read_to_end(&mut buf).ok()?;
        at_end = (got as u64) < want;
        step *= 4;
        while let Some(i) = memchr::memchr(b'\n', &buf[searched..]) {
            let line = &buf[start..searched + i];
            start = searched + i + 1;
            searched = start;
            if let Some(decision) = header_candidate(line) {
                return decision;
            }
        }
        searched = buf.len();
    }
    // The rest has no newline: it is the final line only if the file ends within the limit.
    if !at_end {
        let mut probe = [0u8; 1];
        if f.read(&mut probe).ok()? != 0 {
            return None;
        }
    }
    header_candidate(&buf[start..]).flatten()
}

/// None: keep scanning (blank, malformed or falsy). Some(header or None): the first parsed line decides.
fn header_candidate(line: &[u8]) -> Option<Option<Json>> {
    if is_blank(line) {
        return None;
    }
    let doc = scan_document(line).ok()?;
    let value = &line[doc.value.clone()];
    if is_falsy(value) {
        return None;
    }
    let parsed = Json::parse(value).ok()?;
    let is_header = parsed.get("type").and_then(Json::as_js_str).is_some_and(|t| t.eq_str("session"))
        && matches!(parsed.get("id"), Some(Json::String(_)));
    Some(is_header.then_some(parsed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_fsync_covers_every_write_made_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl").to_str().unwrap().to_owned();
        let mut file = SessionFile::create(&path, b"{\"type\":\"session\",\"id\":\"x\"}\n", Durability::Batch).unwrap();
        let commits: Vec<Commit> =
            (0..3).map(|n| file.append(format!("{{\"n\":{n}}}\n").as_bytes()).unwrap().commit).collect();
        assert!(commits.iter().all(Commit::is_pending), "nothing is durable before an fsync");
        let mut commits = commits.into_iter();
        let first = commits.next().unwrap();
        first.wait().unwrap();
        assert!(commits.all(|c| !c.is_pending()), "the fsync for the first write covered the later ones too");
        let later = file.append(b"{\"n\":3}\n").unwrap().commit;
        assert!(later.is_pending(), "a write after the fsync needs another");
        later.wait().unwrap();
    }

    #[test]
    fn a_line_read_around_its_strings_is_checked_against_the_quotes_and_the_lines_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl").to_str().unwrap().to_owned();
        let line = br#"{"a":"LONG","b":["MORE"],"c":1}"#;
        let head = b"{\"type\":\"session\",\"id\":\"x\"}\n";
        let mut file = SessionFile::create(&path, head, Durability::None).unwrap();
        file.append(&[&line[..], b"\n"].concat()).unwrap();
        let at = head.len() as u64;
        let find = |s: &[u8]| {
            let start = line.windows(s.len()).position(|w| w == s).unwrap() as u32;
            (start, start + s.len() as u32)
        };
        let holes = [find(br#""LONG""#), find(br#""MORE""#)];
        let read = file.read_around(at, line.len() as u64, &holes, b"null").unwrap();
        assert_eq!(read, br#"{"a":null,"b":[null],"c":1}"#);
        // The same bytes one place later: the holes no longer begin and end with quotes.
        let moved = file.read_around(at + 1, line.len() as u64, &holes, b"null").unwrap_err();
        assert_eq!(moved.to_string(), MOVED);
        // A line that no longer ends where it did.
        let short = file.read_around(at, line.len() as u64 - 1, &holes, b"null").unwrap_err();
        assert_eq!(short.to_string(), MOVED);
    }
}
