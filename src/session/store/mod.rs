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
//!
//! Every operation on a session file goes through the [`Disk`] seam (`disk`): the system calls in production, a
//! disk that fails on demand in tests.
//!
//! Here: regular files only, load warnings, a header read bounded as pi's. Beside it: `disk` (the seam),
//! `reader` (reading a file once), `bodies` (reading an entry's bytes again), `commit` (durability, group
//! commit), `file` ([`SessionFile`]).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::sync::{Arc, Mutex};

use super::entry::{Body, BodySource, Record};
use super::error::{Error, Result};
use super::identity::{self, now_ns, FileStamp, FileState, Known, TAIL_CHECK};
use super::json::patch;
use super::json::scan::{scan_document, SyntaxError};
use super::json::Json;
use crate::session::line::{is_blank, is_falsy, parse_line_with, LineOutcome};

mod bodies;
mod commit;
mod disk;
mod file;
mod reader;

pub use self::bodies::*;
pub use self::commit::*;
pub use self::disk::*;
pub use self::file::*;
pub use self::reader::*;

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
    /// The tree's warnings over exactly these records as read (duplicate ids, missing parents, self-parents,
    /// cycles), when already known: kept beside the records by the open that kept them, so an open of the
    /// unchanged file does not walk the tree again. None when they are still to be found.
    pub tree_warnings: Option<Vec<Warning>>,
}

impl LoadedFile {
    /// True when pi would call the file a session: its first record is a header with a string id.
    pub fn has_valid_header(&self) -> bool {
        self.records.first().is_some_and(|r| r.is_header() && r.id.as_js_str().is_some())
    }

    /// True when every entry read carries its skeleton (none does when read for a host that declined them).
    pub fn has_every_skeleton(&self) -> bool {
        !self.records.iter().any(Record::lacks_skeleton)
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
        // Lines added may name parents, repeat ids or close cycles: the tree is looked at again.
        self.tree_warnings = None;
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
    open_regular_on(&real_disk(), path).map(DiskFile::into_file)
}

/// [`open_regular`] through `disk`.
pub fn open_regular_on(disk: &Arc<dyn Disk>, path: &str) -> Result<DiskFile> {
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
    let file = DiskFile::open(disk, path, OpenOptions::new().read(true).custom_flags(OFlags::NONBLOCK.bits() as i32))
        .map_err(|e| Error::io("open", path, e))?;
    refuse(&file.metadata().map_err(|e| Error::io("stat", path, e))?.file_type())?;
    // Reads of a regular file never block anyway; clear the flag so the descriptor behaves as a plain open's.
    let flags = rustix::fs::fcntl_getfl(file.file()).map_err(|e| Error::io("open", path, e.into()))?;
    rustix::fs::fcntl_setfl(file.file(), flags - OFlags::NONBLOCK).map_err(|e| Error::io("open", path, e.into()))?;
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
    fn a_detached_path_counts_as_unchanged_only_while_its_stamp_vouches_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl").to_str().unwrap().to_owned();
        let mut file = SessionFile::create(&path, b"{\"type\":\"session\",\"id\":\"x\"}\n", Durability::Batch).unwrap();
        let seen = FileStamp::of_path(&path).unwrap().unwrap();
        file.detach(seen, seen.changed_ns(), false);
        assert!(!file.still_detached(&seen), "looked at within the clock tick of its last change: read it again");
        file.detach(seen, seen.changed_ns() + identity::RACY_WINDOW_NS, false);
        assert!(file.still_detached(&seen));
        assert!(!file.still_detached(&FileStamp { ctime_ns: seen.ctime_ns + 1, ..seen }), "changed since");
    }

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
    fn a_line_read_around_its_strings_or_whole_is_checked_against_the_quotes_and_the_lines_end() {
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
        // A line read whole gives what reading around its strings gives, with the same check of the quotes.
        assert_eq!(fill_holes(line, &holes, b"null").unwrap(), read);
        let shifted = [&b" "[..], &line[..line.len() - 1]].concat();
        assert_eq!(fill_holes(&shifted, &holes, b"null").unwrap_err().to_string(), MOVED);
        let cut = &line[..holes[1].1 as usize - 1];
        assert_eq!(fill_holes(cut, &holes, b"null").unwrap_err().to_string(), MOVED);
    }
}
