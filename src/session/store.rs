//! The only place that touches session files' bytes: load, read bodies, append, create, rewrite.
//!
//! Write order for every change, so a crash leaves either the old state or the new one and never a fused line:
//! the complete line (with its `\n`) is encoded first and handed to one `write` call; a new file is created
//! exclusively (`O_EXCL`, as pi's `wx`); a whole-file rewrite (migration) goes to a temporary file in the same
//! directory that is then renamed over the original. Loading never writes: pi's load-time repairs are reported
//! by [`LoadedFile`] and applied by the caller just before its first write.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;

use super::entry::{Body, BodySource, Record};
use super::error::{Error, Result};
use super::json::patch;
use super::line::{parse_line, LineOutcome};

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
}

/// Reads and classifies every line of `path`. Never writes.
pub fn load(path: &str) -> Result<LoadedFile> {
    let file = File::open(path).map_err(|e| Error::io("open", path, e))?;
    load_from(file, path, Body::file)
}

/// Splits a byte stream into lines in place: one read into a large buffer, lines handed out as slices of it, so a
/// multi-gigabyte session is copied once (kernel to buffer) and never line by line.
pub struct LineReader<R> {
    reader: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
    /// File offset of `buf[start]`.
    offset: u64,
}

impl<R: Read> LineReader<R> {
    /// A reader with a 4 MiB buffer (it grows for longer lines).
    pub fn new(reader: R) -> Self {
        LineReader { reader, buf: vec![0; 4 << 20], start: 0, end: 0, eof: false, offset: 0 }
    }

    /// The next line: its file offset, its bytes without `\n`, and whether it had one.
    pub fn next_line(&mut self) -> std::io::Result<Option<(u64, &[u8], bool)>> {
        let mut searched = 0;
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[self.start + searched..self.end]) {
                let line_start = self.start;
                let line_end = self.start + searched + i;
                let offset = self.offset;
                self.start = line_end + 1;
                self.offset += (line_end + 1 - line_start) as u64;
                return Ok(Some((offset, &self.buf[line_start..line_end], true)));
            }
            searched = self.end - self.start;
            if self.eof {
                if self.start == self.end {
                    return Ok(None);
                }
                let (line_start, line_end, offset) = (self.start, self.end, self.offset);
                self.offset += (line_end - line_start) as u64;
                self.start = self.end;
                return Ok(Some((offset, &self.buf[line_start..line_end], false)));
            }
            // Make room: move the partial line to the front, grow if it fills the buffer.
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.end == self.buf.len() {
                let len = self.buf.len();
                self.buf.resize(len * 2, 0);
            }
            let n = self.reader.read(&mut self.buf[self.end..])?;
            if n == 0 {
                self.eof = true;
            }
            self.end += n;
        }
    }
}

/// Reads and classifies lines from `reader`, making each record's body with `body_at(offset, len)`.
pub fn load_from(reader: impl Read, path: &str, body_at: impl Fn(u64, u64) -> Body) -> Result<LoadedFile> {
    let mut out = LoadedFile::default();
    let mut lines = LineReader::new(reader);
    let mut line_no = 0u32;
    let mut seen_header = false;
    while let Some((offset, content, terminated)) = lines.next_line().map_err(|e| Error::io("read", path, e))? {
        line_no += 1;
        let len = content.len() as u64;
        let mut slot = LineSlot { offset, len, record: None };
        let mut last_outcome_malformed = false;
        match parse_line(content, line_no, body_at(offset, len)) {
            LineOutcome::Blank => {}
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
            if last_outcome_malformed {
                let w = out.warnings.last_mut().expect("malformed warning");
                w.kind = WarningKind::TornTail;
                w.message = "the last line is incomplete (no newline, not valid JSON): a write was cut short; it is \
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
    Ok(out)
}

/// Reads the bytes of a body (with its patch applied) from `file`, the session file its offsets refer to.
pub fn read_body(file: Option<&File>, body: &Body) -> std::io::Result<Vec<u8>> {
    let raw: std::borrow::Cow<'_, [u8]> = match &body.source {
        BodySource::Memory(bytes) => std::borrow::Cow::Borrowed(bytes),
        BodySource::File { offset, len } => {
            let file = file.ok_or_else(|| std::io::Error::other("the session file is not open"))?;
            let mut buf = vec![0u8; *len as usize];
            file.read_exact_at(&mut buf, *offset)?;
            std::borrow::Cow::Owned(buf)
        }
    };
    Ok(match &body.patch {
        Some(p) => patch::apply(&raw, p),
        None => raw.into_owned(),
    })
}

/// Appends `bytes` (whole lines, each ending in `\n`) to an existing file in one write. Fails if the file does
/// not exist: re-creating a deleted session file without its header is how pi #8939 loses sessions.
pub fn append(path: &str, bytes: &[u8]) -> Result<()> {
    let mut f = OpenOptions::new().append(true).open(path).map_err(|e| Error::io("append to", path, e))?;
    f.write_all(bytes).map_err(|e| Error::io("append to", path, e))
}

/// Creates `path`, failing if it exists (pi's `wx`), and writes `bytes`.
pub fn create_exclusive(path: &str, bytes: &[u8]) -> Result<()> {
    let mut f = OpenOptions::new().write(true).create_new(true).open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            Error::AlreadyExists { path: path.to_owned() }
        } else {
            Error::io("create", path, e)
        }
    })?;
    f.write_all(bytes).map_err(|e| Error::io("write", path, e))
}

/// Replaces `path` atomically with what `write` produces: a temporary file in the same directory, synced, then
/// renamed over the original, so a crash leaves the old file or the new one, never a mix. The contents are
/// streamed, so rewriting a multi-gigabyte session does not hold it in memory.
pub fn replace_with(path: &str, write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<()> {
    let tmp = format!("{path}.pi-sessiond-{}.tmp", std::process::id());
    let result = (|| {
        let f = OpenOptions::new().write(true).create(true).truncate(true).open(&tmp)?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        write(&mut w)?;
        let f = w.into_inner().map_err(|e| e.into_error())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(|e| Error::io("rewrite", path, e))
}

/// The whole contents of a file (for small files and tests).
pub fn read_all(path: &str) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    File::open(path).and_then(|mut f| f.read_to_end(&mut v)).map_err(|e| Error::io("read", path, e))?;
    Ok(v)
}
