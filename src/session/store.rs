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

use super::change::Commit;

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

    /// Every line the buffer holds now (at least one, reading more if needed), as (file offset, range in
    /// [`LineBatch::bytes`], had a newline), so they can be parsed together.
    pub fn next_batch(&mut self) -> std::io::Result<Option<LineBatch<'_>>> {
        let Some((offset, first, terminated)) = self.next_line()? else { return Ok(None) };
        let first_end = first.len();
        // `next_line` consumed the first line; the batch starts at it.
        let base = self.start - first_end - usize::from(terminated);
        let mut lines = vec![(offset, 0..first_end, terminated)];
        let mut at = self.start;
        let mut file_offset = self.offset;
        if terminated {
            while let Some(i) = memchr::memchr(b'\n', &self.buf[at..self.end]) {
                lines.push((file_offset, at - base..at - base + i, true));
                file_offset += i as u64 + 1;
                at += i + 1;
            }
            if self.eof && at < self.end {
                lines.push((file_offset, at - base..self.end - base, false));
                file_offset += (self.end - at) as u64;
                at = self.end;
            }
        }
        self.start = at;
        self.offset = file_offset;
        Ok(Some(LineBatch { bytes: &self.buf[base..at], lines }))
    }
}

/// Lines read together: the bytes they lie in, and each line's (file offset, range, had a newline).
pub struct LineBatch<'a> {
    /// The bytes of every line of the batch, newlines included.
    pub bytes: &'a [u8],
    /// The lines.
    pub lines: Vec<(u64, std::ops::Range<usize>, bool)>,
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
            .map(|((offset, r, _), i)| {
                parse_line(&batch.bytes[r.clone()], first_line_no + i as u32, body_at(*offset, r.len() as u64))
            })
            .collect()
    };
    let n = batch.lines.len();
    if n < 256 || batch.bytes.len() < (1 << 20) || parallelism() < 2 {
        return parse(0..n);
    }
    // Split by bytes, not lines: one huge line must not leave a thread idle.
    let half_bytes = batch.bytes.len() / 2;
    let split = batch.lines.partition_point(|(_, r, _)| r.start < half_bytes).clamp(1, n - 1);
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
        for ((offset, range, terminated), outcome) in batch.lines.iter().cloned().zip(outcomes) {
            let content = &batch.bytes[range];
            if !terminated && start.hold_back_partial {
                break;
            }
            line_no += 1;
            let len = content.len() as u64;
            let mut slot = LineSlot { offset, len, record: None };
            let mut last_outcome_malformed = false;
            match outcome {
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

/// What happened to a session file since it was last looked at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileState {
    /// Same file, same length.
    Same,
    /// Same file, longer: another process appended.
    Grew(u64),
    /// Same file, shorter: truncated.
    Shrunk,
    /// Another file now has the path (rewritten, or deleted and recreated).
    Replaced,
    /// The path no longer exists.
    Missing,
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
/// write numbered before it started, so the writers waiting meanwhile share it. It lives outside the session's
/// lock (each [`Commit`] holds it), so the fsync never holds up the next writer, and a waiter needs no thread of
/// its own: it leaves a callback, and one [`SyncJob`] at a time fsyncs and calls back every write it covered.
/// Once an fsync fails, or a failed write cannot be cut back, what is on disk is unknown: the point is poisoned,
/// every write it was to cover fails, and every later write is refused until the file is opened again
/// (PostgreSQL's lesson: retrying an fsync after a failure can report success for data the kernel already
/// dropped).
pub struct SyncPoint {
    /// A descriptor of the append handle's file, for fsync without the handle.
    file: File,
    path: String,
    state: Mutex<SyncState>,
    /// Held while an fsync runs, so two are never made at once (the second waits, then usually finds its write
    /// covered by the first).
    fsync_turn: Mutex<()>,
}

/// Called once a write is durable, or with why it is not.
type Durable = Box<dyn FnOnce(Result<()>) + Send>;

#[derive(Default)]
struct SyncState {
    /// Number of the last write made.
    written: u64,
    /// Number of the last write known durable.
    synced: u64,
    /// A [`SyncJob`] exists (handed out, running, or about to run): nobody else starts one.
    job: bool,
    /// Writes waiting for an fsync: their numbers and their callbacks.
    waiting: Vec<(u64, Durable)>,
    /// Why the file refuses writes: the failure, and its OS error code when it had one.
    poison: Option<(String, Option<i32>)>,
}

impl std::fmt::Debug for SyncPoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("SyncPoint")
            .field("path", &self.path)
            .field("written", &s.written)
            .field("synced", &s.synced)
            .field("waiting", &s.waiting.len())
            .field("poison", &s.poison)
            .finish()
    }
}

/// The fsync a group of waiting writes needs. Run it where blocking is fine: it makes one fsync covering every
/// write made so far and calls back each waiter it covered; if more waiters arrived meanwhile, it returns the job
/// for them, so the host can first let the writers already queued write (one fsync then covers them all). Dropped
/// unrun, it runs until nobody waits.
#[derive(Debug)]
#[must_use = "waiters are called back only once the job runs"]
pub struct SyncJob(Option<Arc<SyncPoint>>);

impl SyncJob {
    /// One fsync; blocks. Returns the job for the writes that came to wait meanwhile, if any.
    pub fn run(mut self) -> Option<SyncJob> {
        let point = self.0.take()?;
        point.fsync_once();
        point.next_job()
    }
}

impl Drop for SyncJob {
    fn drop(&mut self) {
        let mut next = self.0.take().map(|point| SyncJob(Some(point)));
        while let Some(job) = next {
            next = job.run();
        }
    }
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
        let ready = {
            let mut s = self.lock();
            s.synced = s.written;
            std::mem::take(&mut s.waiting)
        };
        ready.into_iter().for_each(|(_, done)| done(Ok(())));
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

    /// The error of a write that a failed fsync was to cover.
    fn not_durable(&self, poison: &(String, Option<i32>)) -> Error {
        let source = match poison.1 {
            Some(code) => std::io::Error::from_raw_os_error(code),
            None => std::io::Error::other(poison.0.clone()),
        };
        Error::io("sync", &self.path, source)
    }

    /// True when write number `generation` is durable.
    pub(crate) fn is_synced(&self, generation: u64) -> bool {
        self.lock().synced >= generation
    }

    /// Calls `done` once write number `generation` is durable (at once if it is, or if it never will be). Returns
    /// the job to run when no fsync is under way yet.
    pub(crate) fn on_durable(self: &Arc<Self>, generation: u64, done: Durable) -> Option<SyncJob> {
        let mut s = self.lock();
        if s.synced >= generation {
            drop(s);
            done(Ok(()));
            return None;
        }
        if let Some(poison) = s.poison.clone() {
            drop(s);
            done(Err(self.not_durable(&poison)));
            return None;
        }
        s.waiting.push((generation, done));
        if s.job {
            return None;
        }
        s.job = true;
        Some(SyncJob(Some(self.clone())))
    }

    /// Blocks until write number `generation` is durable, making the fsync on this thread if no fsync made since
    /// covers it (never waiting for a [`SyncJob`], which may be waiting for a lock this thread holds).
    pub(crate) fn sync_through(&self, generation: u64) -> Result<()> {
        loop {
            {
                let s = self.lock();
                if s.synced >= generation {
                    return Ok(());
                }
                if let Some(poison) = &s.poison {
                    return Err(self.not_durable(poison));
                }
            }
            self.fsync_once();
        }
    }

    /// The job for the writes still waiting, or None (and no job is out any more).
    fn next_job(self: &Arc<Self>) -> Option<SyncJob> {
        let mut s = self.lock();
        if s.waiting.is_empty() {
            s.job = false;
            return None;
        }
        Some(SyncJob(Some(self.clone())))
    }

    /// One fsync covering every write made so far; then every waiter it covered is called back (all of them,
    /// with the error, if it failed).
    fn fsync_once(&self) {
        let _turn = self.fsync_turn.lock().unwrap_or_else(|e| e.into_inner());
        let target = {
            let mut s = self.lock();
            if let Some(poison) = s.poison.clone() {
                // Poisoned meanwhile (a failed fsync, or a failed write that could not be cut back): nothing
                // waiting will be made durable.
                let failed = std::mem::take(&mut s.waiting);
                drop(s);
                for (_, done) in failed {
                    done(Err(self.not_durable(&poison)));
                }
                return;
            }
            s.written
        };
        let result = self.file.sync_data();
        let (ready, outcome) = {
            let mut s = self.lock();
            match result {
                Ok(()) => {
                    s.synced = s.synced.max(target);
                    let synced = s.synced;
                    let (ready, later): (Vec<_>, Vec<_>) =
                        std::mem::take(&mut s.waiting).into_iter().partition(|(g, _)| *g <= synced);
                    s.waiting = later;
                    (ready, Ok(()))
                }
                Err(e) => {
                    tracing::error!(
                        "{}: fsync failed: {e}; the session refuses writes until it is opened again",
                        self.path
                    );
                    let poison = s.poison.get_or_insert((format!("fsync failed: {e}"), e.raw_os_error())).clone();
                    (std::mem::take(&mut s.waiting), Err(poison))
                }
            }
        };
        for (_, done) in ready {
            done(outcome.as_ref().map(|_| ()).map_err(|poison| self.not_durable(poison)));
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
}

/// How many bytes before the known end are kept to recognise an in-place rewrite.
const TAIL_CHECK: u64 = 64;

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
    pub fn open(path: &str, durability: Durability) -> Result<(SessionFile, LoadedFile)> {
        let reader = File::open(path).map_err(|e| Error::io("open", path, e))?;
        let meta = reader.metadata().map_err(|e| Error::io("stat", path, e))?;
        let loaded = load_from(&reader, path, Start::default(), Body::file)?;
        let file = SessionFile {
            path: path.to_owned(),
            reader,
            writer: None,
            len: loaded.len,
            id: file_id(&meta),
            durability,
            sync: None,
            tail: Vec::new(),
        };
        let mut file = file;
        file.remember_tail();
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
        Ok(SessionFile {
            path: path.to_owned(),
            reader,
            writer: Some(writer),
            len: content.len() as u64,
            id: file_id(&meta),
            durability,
            sync: Some(sync),
            tail: content[content.len().saturating_sub(TAIL_CHECK as usize)..].to_vec(),
        })
    }

    /// Reads the bytes just before `len` into `tail`.
    fn remember_tail(&mut self) {
        self.tail = self.bytes_before(self.len, TAIL_CHECK.min(self.len)).unwrap_or_default();
    }

    fn bytes_before(&self, end: u64, n: u64) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; n as usize];
        self.reader.read_exact_at(&mut buf, end - n).ok()?;
        Some(buf)
    }

    /// The path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The handle bodies are read from (it stays valid if the path is removed or replaced).
    pub fn reader(&self) -> &File {
        &self.reader
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

    /// Compares the path with what we know.
    pub fn state(&self) -> Result<FileState> {
        let meta = match std::fs::metadata(&self.path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(FileState::Missing),
            Err(e) => return Err(Error::io("stat", &self.path, e)),
        };
        let rewritten = || {
            meta.len() >= self.len && self.bytes_before(self.len, self.tail.len() as u64).as_ref() != Some(&self.tail)
        };
        Ok(if file_id(&meta) != self.id {
            FileState::Replaced
        } else if meta.len() < self.len {
            FileState::Shrunk
        } else if rewritten() {
            // Same inode and at least as long, but not what we read: rewritten in place (`writeFileSync`).
            FileState::Replaced
        } else if meta.len() < self.len {
            FileState::Shrunk
        } else if meta.len() > self.len {
            FileState::Grew(meta.len())
        } else {
            FileState::Same
        })
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
        self.lock()?;
        if let Some(refused) = self.refusal() {
            return Err(refused);
        }
        let point = self.sync.clone().expect("a locked file has a sync point");
        let path = self.path.clone();
        let writer = self.writer.as_mut().expect("locked");
        #[cfg(debug_assertions)]
        crash_test::maybe_tear(writer, bytes);
        let start = match write_appending(writer, bytes) {
            Ok(start) => start,
            Err(failed) => {
                cut_back(writer, &point, failed.landed_at, failed.lost_track);
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
                    return Err(Error::io("sync", &path, e));
                }
            },
            Durability::Batch => Commit::pending(point.clone(), point.wrote()),
        };
        let contiguous = start == self.len;
        self.len = start + bytes.len() as u64;
        if bytes.len() as u64 >= TAIL_CHECK {
            self.tail = bytes[bytes.len() - TAIL_CHECK as usize..].to_vec();
        } else if contiguous {
            self.tail.extend_from_slice(bytes);
            let excess = self.tail.len().saturating_sub(TAIL_CHECK as usize);
            self.tail.drain(..excess);
        } else {
            self.remember_tail();
        }
        Ok(Landed { offset: start, commit })
    }

    /// True when the bytes after what we know (up to `size`) hold no newline and stop growing: a write someone
    /// else cut short, which our next line must not be fused with.
    pub fn is_torn_fragment(&self, size: u64) -> Result<bool> {
        let mut extra = vec![0u8; (size - self.len) as usize];
        self.reader.read_exact_at(&mut extra, self.len).map_err(|e| Error::io("read", &self.path, e))?;
        if extra.contains(&b'\n') {
            return Ok(false);
        }
        // A writer in the middle of one write() finishes within microseconds; give it a moment.
        std::thread::sleep(std::time::Duration::from_millis(20));
        Ok(self.state()? == FileState::Grew(size))
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
    pub fn replace(&mut self, write: impl FnOnce(&File, &mut dyn Write) -> std::io::Result<()>) -> Result<u64> {
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
            write(&self.reader, &mut w)?;
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

/// A test hook, compiled into debug builds only: with `PI_SESSIOND_TEST_TEAR_AT=N`, the N-th append writes half
/// of its line and the process aborts, which is what a crash in the middle of a write leaves behind.
#[cfg(debug_assertions)]
mod crash_test {
    use std::sync::atomic::{AtomicU64, Ordering};

    static APPENDS: AtomicU64 = AtomicU64::new(0);

    pub fn maybe_tear(writer: &mut std::fs::File, bytes: &[u8]) {
        use std::io::Write;
        let Some(at) = std::env::var("PI_SESSIOND_TEST_TEAR_AT").ok().and_then(|v| v.parse::<u64>().ok()) else {
            return;
        };
        if APPENDS.fetch_add(1, Ordering::SeqCst) + 1 == at {
            let _ = writer.write_all(&bytes[..bytes.len() / 2]);
            std::process::abort();
        }
    }
}

/// Takes the advisory exclusive lock (`flock`) on an append handle, or says who holds it. The lock lives on the
/// session file itself, so no lock file is left beside sessions, and it dies with its process, so a crashed
/// writer never leaves a stale lock. pi 1.6.0 takes no lock; the manager follows the file before each write
/// instead.
fn lock_writer(writer: &File, path: &str) -> Result<()> {
    match writer.try_lock() {
        Ok(()) => Ok(()),
        Err(std::fs::TryLockError::WouldBlock) => {
            let pid = writer.metadata().ok().and_then(|m| lock_holder(&m));
            Err(Error::Locked { path: path.to_owned(), pid })
        }
        Err(std::fs::TryLockError::Error(e)) => Err(Error::io("lock", path, e)),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn batch_file() -> (tempfile::TempDir, SessionFile) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl").to_str().unwrap().to_owned();
        let file = SessionFile::create(&path, b"{\"type\":\"session\",\"id\":\"x\"}\n", Durability::Batch).unwrap();
        (dir, file)
    }

    #[test]
    fn one_sync_job_serves_every_write_waiting_before_it_runs() {
        let (_dir, mut file) = batch_file();
        let commits: Vec<Commit> =
            (0..3).map(|n| file.append(format!("{{\"n\":{n}}}\n").as_bytes()).unwrap().commit).collect();
        assert!(commits.iter().all(Commit::is_pending), "nothing is durable before an fsync");
        let called = Arc::new(AtomicUsize::new(0));
        let jobs: Vec<SyncJob> = commits
            .into_iter()
            .filter_map(|c| {
                let called = called.clone();
                c.on_durable(move |r| {
                    r.unwrap();
                    called.fetch_add(1, Ordering::SeqCst);
                })
            })
            .collect();
        assert_eq!(jobs.len(), 1, "the first waiter gets the job, the others wait for it");
        assert_eq!(called.load(Ordering::SeqCst), 0);
        let next: Vec<SyncJob> = jobs.into_iter().filter_map(SyncJob::run).collect();
        assert!(next.is_empty(), "nobody is left waiting");
        assert_eq!(called.load(Ordering::SeqCst), 3, "one fsync called every waiter back");
        let later = file.append(b"{\"n\":3}\n").unwrap().commit;
        assert!(later.is_pending(), "a write after the fsync needs another");
        later.wait().unwrap();
    }

    #[test]
    fn a_commit_waited_on_while_a_job_is_handed_out_does_not_wait_for_the_job() {
        let (_dir, mut file) = batch_file();
        let first = file.append(b"{\"n\":0}\n").unwrap().commit;
        let job = first.on_durable(|r| r.unwrap()).expect("the first waiter gets the job");
        // The job's holder may be waiting for a lock this thread holds: waiting must not depend on it.
        let second = file.append(b"{\"n\":1}\n").unwrap().commit;
        second.wait().unwrap();
        assert!(job.run().is_none(), "the wait's fsync covered the job's waiter too");
    }
}
