//! `push`: copying one machine's sessions into the team database, incrementally and crash-safely.
//!
//! Per session file the database keeps how far its complete lines were pushed, the file's `stat` then, its first
//! bytes and the bytes just before that offset, and the listing state after the last pushed line. A pass compares
//! every file under `<agentDir>/sessions/*/` with that: an unchanged file costs a `stat`; a file that only grew
//! (same inode, same first bytes, same bytes before the offset) sends its new lines; a file that shrank, was
//! replaced or was rewritten in place is sent again from the start; a file that is gone, or is no longer a
//! session, is deleted with its entries.
//!
//! Crash safety: the entries of a piece of a file and the session row that records the piece's end offset are
//! written in one transaction, so after a kill at any moment the database holds each file up to a line boundary
//! it knows, and the next pass continues from exactly there — nothing lost, nothing twice. The final line without
//! a newline (a write in progress, or a file that does not end in one) is never pushed as an entry: it is kept in
//! the session row as it is now, counted in the listing as pi counts it, and read back as the file's last bytes.
//!
//! Nothing of a file's text reaches the database unredacted (unless `--no-redact`): each line is redacted
//! (`catalog::redact`) before it feeds the entry row, the listing and the search text, and the bytes kept to
//! recognise a rewrite are stored as a SHA-256 digest, never as the file's own bytes.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;
use std::time::Duration;

use postgres::binary_copy::BinaryCopyInWriter;
use postgres::types::{ToSql, Type};
use postgres::Client;

use super::db::{DbError, DbResult, Target};
use super::state;
use crate::catalog::index;
use crate::catalog::info::{Doc, InfoState, SessionInfo};
use crate::catalog::redact::{self, Redactor};
use crate::catalog::Cancel;
use crate::session::dirscan;
use crate::session::identity::{self, now_ns, FileStamp, FileState, Known};
use crate::session::json::scan::{find_member, scan_document};
use crate::session::json::string::decode_string_literal;
use crate::session::json::Json;
use crate::session::paths;
use crate::session::store::{self, LineReader};

/// Raw line bytes per transaction: bounds memory and how much a kill can make the next pass redo.
const BYTES_PER_TRANSACTION: usize = 16 << 20;

/// Files per transaction (many small sessions share one commit, and so one fsync on the server).
const FILES_PER_TRANSACTION: usize = 256;

/// What to push.
#[derive(Clone, Debug)]
pub struct PushOptions {
    /// This machine's name in the database.
    pub machine: String,
    /// pi's agent directory (sessions are under `<agentDir>/sessions`), absolute: it names every pushed file.
    pub agent_dir: String,
    /// Push an agent directory without a `sessions` directory as one without sessions (deleting the machine's
    /// rows) instead of refusing it as a mistyped path.
    pub allow_empty: bool,
    /// Replaces secrets in every line before it leaves the machine (None: `--no-redact`).
    pub redactor: Option<Arc<Redactor>>,
    /// Which sessions are pushed: the database then holds exactly these (rows of others are deleted).
    pub filter: Filter,
    /// Push images as they are (`--keep-images`) instead of as placeholders.
    pub keep_images: bool,
}

/// `--include`/`--exclude` (globs over the session's cwd, from its header) and `--since` (its file's last
/// change): which of a machine's sessions go to the team.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// A session is pushed only if its cwd matches one of these (when there are any).
    pub include: Option<globset::GlobSet>,
    /// A session whose cwd matches one of these is not pushed.
    pub exclude: Option<globset::GlobSet>,
    /// Only files modified at or after this time (ms since the epoch).
    pub since_ms: Option<f64>,
    /// `--prune`: only files modified within this long before each pass (the retention rule of `team prune`).
    pub max_age: Option<std::time::Duration>,
}

impl Filter {
    /// The filter from the command line's globs and date; a glob or date that does not parse is refused.
    pub fn new(include: &[String], exclude: &[String], since: Option<&str>) -> DbResult<Filter> {
        let set = |globs: &[String]| -> DbResult<Option<globset::GlobSet>> {
            if globs.is_empty() {
                return Ok(None);
            }
            let mut b = globset::GlobSetBuilder::new();
            for g in globs {
                // `*` stays within one directory and `**` crosses them, as in a shell with globstar.
                let glob = globset::GlobBuilder::new(g).literal_separator(true).build();
                b.add(glob.map_err(|e| DbError::Config(format!("--include/--exclude {g:?}: {e}")))?);
            }
            b.build().map(Some).map_err(|e| DbError::Config(e.to_string()))
        };
        let since_ms = match since {
            None => None,
            Some(d) => {
                let ms = crate::session::js::date::parse_date(d);
                if !ms.is_finite() {
                    return Err(DbError::Config(format!("--since {d:?}: not a date (2026-01-31, or an ISO time)")));
                }
                Some(ms)
            }
        };
        Ok(Filter { include: set(include)?, exclude: set(exclude)?, since_ms, max_age: None })
    }

    /// Leaves out (and so deletes the rows of) sessions whose file last changed more than `age` before a pass.
    pub fn with_max_age(self, age: std::time::Duration) -> Filter {
        Filter { max_age: Some(age), ..self }
    }

    /// Whether the session file `f` is pushed. Its header is read only when globs ask for its cwd; a file whose
    /// header cannot be read has no cwd, so no `--include` chooses it.
    fn chooses(&self, f: &Found) -> bool {
        if self.since_ms.is_some_and(|since| (f.stamp.mtime_ns as f64) / 1e6 < since) {
            return false;
        }
        if self.max_age.is_some_and(|age| f.stamp.mtime_ns < super::prune::cutoff_ns(age)) {
            return false;
        }
        if self.include.is_none() && self.exclude.is_none() {
            return true;
        }
        let header = store::read_header_bounded(&f.path);
        let cwd = header.as_ref().and_then(|h| h.get("cwd")).and_then(Json::as_js_str).map(|c| c.to_string_lossy());
        let matches =
            |set: &Option<globset::GlobSet>| set.as_ref().map(|g| cwd.as_ref().is_some_and(|c| g.is_match(c)));
        matches(&self.include) != Some(false) && matches(&self.exclude) != Some(true)
    }
}

impl PushOptions {
    /// Options for pushing `agent_dir` as `machine`: the directory must exist (it is made absolute and canonical,
    /// so rows name files a reader on that machine can find whatever directory the push ran from) and, unless
    /// `allow_empty`, hold a `sessions` directory.
    pub fn new(machine: String, agent_dir: &str, allow_empty: bool) -> DbResult<PushOptions> {
        let refuse = |why: String| DbError::NoSessions { path: agent_dir.to_owned(), why };
        let canonical =
            std::fs::canonicalize(agent_dir).map_err(|e| refuse(format!("not an agent directory ({e})")))?;
        if !canonical.is_dir() {
            return Err(refuse("not a directory".to_owned()));
        }
        let agent_dir = canonical.to_str().ok_or_else(|| refuse("not a UTF-8 path".to_owned()))?.to_owned();
        let options = PushOptions {
            machine,
            agent_dir,
            allow_empty,
            redactor: Some(Arc::new(Redactor::builtin())),
            filter: Filter::default(),
            keep_images: false,
        };
        if !allow_empty {
            options.sessions_root()?;
        }
        Ok(options)
    }

    /// `<agentDir>/sessions`, checked to be a directory unless empty agent directories are allowed.
    fn sessions_root(&self) -> DbResult<String> {
        let root = paths::join(&[&self.agent_dir, "sessions"]);
        if !self.allow_empty && !std::path::Path::new(&root).is_dir() {
            return Err(DbError::NoSessions {
                path: self.agent_dir.clone(),
                why: "no sessions directory here (is --agent-dir right?)".to_owned(),
            });
        }
        Ok(root)
    }
}

/// What a pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PushReport {
    /// Session files found.
    pub files: usize,
    /// Files whose session row was written: new lines, a changed unterminated last line, sent again after a
    /// rewrite, or deleted because they are no longer sessions.
    pub pushed: usize,
    /// Files sent again from the start because they were rewritten, truncated or replaced.
    pub rewritten: usize,
    /// Sessions deleted from the database (their file is gone or no longer a session).
    pub deleted: usize,
    /// Entry rows written.
    pub entries: u64,
    /// Bytes of lines written.
    pub bytes: u64,
}

/// The default machine name: the host name.
pub fn host_name() -> String {
    let name = rustix::system::uname().nodename().to_string_lossy().trim().to_owned();
    if name.is_empty() {
        "localhost".to_owned()
    } else {
        name
    }
}

/// What the database knows of one pushed file.
struct Pushed {
    sid: i64,
    stamp: FileStamp,
    /// False for a row pushed before change times were kept: its `ctime` is taken from the file as it is now, and
    /// recorded once the file is found otherwise unchanged.
    ctime_known: bool,
    offset: u64,
    lines: i32,
    head: Vec<u8>,
    tail: Vec<u8>,
    /// `head` holds [`known_digest`] of the known bytes (and `tail` is empty), not the bytes themselves.
    hashed: bool,
    read_at_ns: i64,
}

/// What a row keeps of the bytes that tell a rewrite from an append: their digest, so the file's own bytes (the
/// end of its last line, often a message's text) never leave the machine.
fn known_digest(head: &[u8], tail: &[u8]) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update((head.len() as u64).to_le_bytes());
    h.update(head);
    h.update(tail);
    h.finalize().to_vec()
}

impl Pushed {
    /// What the push knew of the file, for [`Known::judge`]: read up to the pushed offset.
    fn known(&self) -> Known<'_> {
        Known {
            stamp: &self.stamp,
            len: self.offset,
            head: &self.head,
            tail: &self.tail,
            observed_at_ns: self.read_at_ns,
        }
    }
}

/// A session file on disk.
struct Found {
    path: String,
    project_dir: String,
    file_name: String,
    stamp: FileStamp,
}

/// One entry line, ready for the database.
struct EntryRow {
    line: i32,
    offset: i64,
    raw: Vec<u8>,
    entry_id: Option<String>,
    parent_id: Option<String>,
    kind: Option<String>,
    timestamp: Option<String>,
    role: Option<String>,
    search: Option<Doc>,
}

/// A stretch of one file to write in one transaction: its new lines, and the session row as of their end.
struct Piece {
    found_index: usize,
    /// The row to continue (None: a new session).
    sid: Option<i64>,
    /// Delete the session's entries first (it is being sent again from the start).
    restart: bool,
    entries: Vec<EntryRow>,
    /// The session row after this piece (None: the file is not a session; its row, if any, is deleted).
    row: Option<SessionRow>,
    /// The piece reaches the end of what the file has now (else more pieces of it follow).
    finishes: bool,
}

/// What one piece does to the row's `info_all_messages_text` (the JSON string literal of pi's
/// `allMessagesText`): the row keeps the literal of the complete lines' text, then that of the unterminated
/// rest, then the closing quote, and `all_text_committed` says how many characters the first part is.
struct TextPiece {
    /// The literal's body (escaped, without quotes) of the text the piece's lines add.
    added: String,
    /// The literal's body of the unterminated rest's text (counted by pi, so listed, but not yet committed).
    rest: String,
    /// Keep the committed text and append to it (else the piece's text is all there is).
    append: bool,
}

/// A string as the body of its JSON literal (JSON.stringify's escapes, without the quotes). Literals of strings
/// joined at a space are the joined bodies: escapes are per character, and no surrogate pair spans the join.
fn json_string_body(s: crate::session::json::JsString) -> String {
    let mut literal = Json::String(s).to_canonical_string();
    literal.pop();
    literal.remove(0);
    literal
}

/// The session row's values.
struct SessionRow {
    info: SessionInfo,
    /// `allMessagesText` (not in `info`, whose `all_messages_text` is None).
    text: TextPiece,
    header: Json,
    stamp: FileStamp,
    offset: u64,
    lines: i32,
    head: Vec<u8>,
    tail: Vec<u8>,
    unterminated: Vec<u8>,
    resume_state: String,
    read_at_ns: i64,
}

/// PostgreSQL text cannot hold NUL; a session string can (`\u0000`).
fn pg_text(s: String) -> String {
    if s.contains('\0') {
        s.replace('\0', "\u{FFFD}")
    } else {
        s
    }
}

/// A member's value for a readable column: a string's text, else the JSON as written.
fn member_text(line: &[u8], members: &[crate::session::json::scan::Member], name: &str) -> Option<String> {
    let v = &line[find_member(line, members, name)?];
    let text = if v.first() == Some(&b'"') {
        decode_string_literal(v).to_string_lossy()
    } else {
        String::from_utf8_lossy(v).into_owned()
    };
    Some(pg_text(text))
}

impl EntryRow {
    fn new(line: i32, offset: u64, raw: &[u8], search: Option<Doc>) -> EntryRow {
        let mut row = EntryRow {
            line,
            offset: offset as i64,
            raw: raw.to_vec(),
            entry_id: None,
            parent_id: None,
            kind: None,
            timestamp: None,
            role: None,
            search: search.map(|d| Doc { text: pg_text(d.text), ..d }),
        };
        if let Ok(doc) = scan_document(raw) {
            row.entry_id = member_text(raw, &doc.members, "id");
            row.parent_id = member_text(raw, &doc.members, "parentId");
            row.kind = member_text(raw, &doc.members, "type");
            row.timestamp = member_text(raw, &doc.members, "timestamp");
            row.role = member_text(raw, &doc.message_members, "role");
        }
        row
    }
}

/// What a scan found: the session files, and the paths it could not look at (a project directory it could not
/// read, a file it could not `stat`), whose rows must be kept rather than taken for deleted.
#[derive(Default)]
struct Scan {
    found: Vec<Found>,
    unreadable_dirs: HashSet<String>,
    unstatable: HashSet<String>,
}

impl Scan {
    /// Whether a pushed file missing from the scan may be gone rather than only unseen.
    fn is_gone(&self, path: &str) -> bool {
        !self.unstatable.contains(path) && !self.unreadable_dirs.contains(&paths::parent_dir(path))
    }
}

/// Every `*.jsonl` file one level under `<agentDir>/sessions` (project directories and symlinks to them), as
/// pi's `listAll` finds them. A missing `sessions` directory is refused (checked on every pass: a watched
/// directory on a volume that went away must not empty the machine's rows) unless empty agent directories are
/// allowed.
fn scan(options: &PushOptions) -> DbResult<Scan> {
    let root = options.sessions_root()?;
    let entries = match std::fs::read_dir(&root) {
        Ok(e) => e,
        // Allowed to be empty: nothing to push, and nothing pushed before is there any more.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && options.allow_empty => return Ok(Scan::default()),
        Err(source) => return Err(DbError::File { path: root, source }),
    };
    let mut scan = Scan::default();
    for entry in entries.flatten() {
        let Ok(ft) = entry.file_type() else { continue };
        if !(ft.is_dir() || ft.is_symlink()) {
            continue;
        }
        let project_dir = entry.file_name().to_string_lossy().into_owned();
        let dir = paths::join(&[&root, &project_dir]);
        let Ok(names) = dirscan::jsonl_names(&dir) else {
            scan.unreadable_dirs.insert(dir);
            continue;
        };
        let Ok(stamps) = dirscan::stamp_names(&dir, &names) else {
            scan.unreadable_dirs.insert(dir);
            continue;
        };
        for (name, stamp) in names.into_iter().zip(stamps) {
            let path = paths::join(&[&dir, &name]);
            match stamp {
                // Not a session file (a FIFO, a directory): never opened, and a row of it is deleted.
                Some(stamp) if !stamp.regular => {}
                Some(stamp) => {
                    scan.found.push(Found { path, project_dir: project_dir.clone(), file_name: name, stamp })
                }
                None => {
                    scan.unstatable.insert(path);
                }
            }
        }
    }
    Ok(scan)
}

fn load_pushed(client: &mut Client, target: &Target, machine: &str) -> DbResult<HashMap<String, Pushed>> {
    let rows = client
        .query(
            "SELECT path, sid, file_size, file_mtime_ns, file_dev, file_ino, pushed_offset, pushed_lines, head, tail,
                    read_at_ns, file_ctime_ns, known_hashed
             FROM pi_sessions WHERE machine = $1",
            &[&machine],
        )
        .map_err(|e| target.error(e))?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let ctime_ns: Option<i64> = r.get(11);
            let stamp = FileStamp {
                size: r.get::<_, i64>(2) as u64,
                mtime_ns: r.get(3),
                dev: r.get::<_, i64>(4) as u64,
                ino: r.get::<_, i64>(5) as u64,
                ctime_ns: ctime_ns.unwrap_or_default(),
                regular: true,
            };
            let pushed = Pushed {
                sid: r.get(1),
                stamp,
                ctime_known: ctime_ns.is_some(),
                offset: r.get::<_, i64>(6) as u64,
                lines: r.get(7),
                head: r.get(8),
                tail: r.get(9),
                hashed: r.get(12),
                read_at_ns: r.get(10),
            };
            (r.get::<_, String>(0), pushed)
        })
        .collect())
}

/// Where the file's complete lines end (just past the last `\n` at or after `from`), else `from`.
fn complete_end(file: &File, from: u64, len: u64) -> std::io::Result<u64> {
    Ok(index::last_newline(file, from, len, &Cancel::new())?.map_or(from, |i| i + 1))
}

/// Feeds one `\n`-terminated line to the listing state as Node's `readline` would split it (a lone `\r` ends a
/// line too; the empty pieces that splitting leaves are blank lines, which the state ignores).
fn feed_readline(state: &mut InfoState, line: &[u8], docs: Option<&mut Vec<Doc>>) {
    match docs {
        Some(docs) => line.split(|&b| b == b'\r').for_each(|piece| state.feed(piece, Some(docs))),
        None => line.split(|&b| b == b'\r').for_each(|piece| state.feed(piece, None)),
    }
}

/// What reading a changed file did.
#[derive(Clone, Copy, Debug, Default)]
struct FileOutcome {
    /// Pieces were written (new lines, a changed unterminated tail, the whole file again, or its deletion).
    wrote: bool,
    /// It was sent again from the start.
    restarted: bool,
}

/// One file whose stamp changed (or may have) as it is now: an open handle, its stamp taken through that handle
/// and when, and what [`Known::judge`] made of it against its row.
struct Opened {
    file: File,
    stamp: FileStamp,
    read_at_ns: i64,
    /// Its row still describes it: the stamp is the pushed one and the known bytes are intact.
    unchanged: bool,
    /// It only grew: the new lines continue the pushed row (else it is sent again from the start).
    resume: bool,
    /// What each line goes through before it leaves the machine (the push's redactor, and whether images stay).
    redactor: Option<Arc<Redactor>>,
    keep_images: bool,
}

/// Opens a file whose stamp changed, or may have (racily clean, or pushed before change times were kept), and
/// judges it against its row. None when it cannot be opened: it vanished since the scan or is no longer a
/// regular file, and the next pass sees to it.
fn open_changed(found: &Found, known: Option<&mut Pushed>) -> Option<Opened> {
    // Stamped before its bytes are read, so a write made while they are read shows on the next pass.
    let read_at_ns = now_ns();
    let file = store::open_regular(&found.path).ok()?;
    let stamp = FileStamp::of(&file.metadata().ok()?);
    let Some(k) = known else {
        return Some(Opened {
            file,
            stamp,
            read_at_ns,
            unchanged: false,
            resume: false,
            redactor: None,
            keep_images: true,
        });
    };
    if !k.ctime_known {
        // Judged on the rest of its stamp and its bytes, as pushes before change times were kept judged it.
        k.stamp.ctime_ns = stamp.ctime_ns;
    }
    if std::mem::take(&mut k.hashed) {
        // The file's bytes where the known ones were: judged as those when their digest is the kept one; else the
        // digest itself stands in, which the file's bytes do not match, and the file is sent again.
        let (head, tail) = identity::known_bytes(&file, k.offset.min(stamp.size));
        if known_digest(&head, &tail) == k.head {
            (k.head, k.tail) = (head, tail);
        }
    }
    let state = k.known().judge(&stamp, &file);
    // With an unterminated last line the file is longer than the pushed offset: "grew" with the very stamp that
    // was pushed is no change.
    let unchanged = stamp == k.stamp && matches!(state, FileState::Same | FileState::Grew(_));
    let resume = matches!(state, FileState::Same | FileState::Grew(_));
    if !resume {
        tracing::info!("{}: {state:?} since it was pushed; sending it again", found.path);
    }
    Some(Opened { file, stamp, read_at_ns, unchanged, resume, redactor: None, keep_images: true })
}

/// The pieces of one changed file: its new complete lines in stretches of at most [`BYTES_PER_TRANSACTION`],
/// each with the session row as of its end, handed to `emit` as they are read.
fn read_file(
    found_index: usize,
    found: &Found,
    opened: &Opened,
    known: Option<&Pushed>,
    client: &mut Client,
    target: &Target,
    emit: &mut dyn FnMut(&mut Client, Piece) -> DbResult<()>,
) -> DbResult<FileOutcome> {
    let file_err = |source| DbError::File { path: found.path.clone(), source };
    let redactor = opened.redactor.as_deref();
    let (f, stat, read_at_ns) = (&opened.file, opened.stamp, opened.read_at_ns);
    let resume = known.filter(|_| opened.resume);
    // Whether the row's `allMessagesText` so far is to be kept and appended to (else the next piece writes it).
    let mut append_text = false;
    let (mut state, mut offset, mut line_no) = match resume {
        Some(k) => {
            let text: String = client
                .query_one("SELECT resume_state FROM pi_sessions WHERE sid = $1", &[&k.sid])
                .map_err(|e| target.error(e))?
                .get(0);
            let decoded = state::decode(&text);
            append_text = decoded.text_in_column;
            (decoded.state, k.offset, k.lines)
        }
        None => (InfoState::default(), 0, 0),
    };
    let restart = known.is_some() && resume.is_none();
    let sid = known.map(|k| k.sid);
    let end = complete_end(f, offset, stat.size).map_err(file_err)?;
    let mut shared = f;
    shared.seek(SeekFrom::Start(offset)).map_err(file_err)?;
    let mut reader = LineReader::new(shared.take(end - offset));
    let mut entries = Vec::new();
    let mut piece_bytes = 0usize;
    let mut first_piece = true;
    let mut wrote = false;
    let mut docs = Vec::new();
    let start = offset;
    loop {
        let next = reader.next_line().map_err(file_err)?;
        let mut done = next.is_none();
        if let Some(raw) = next {
            let (at, line) = (raw.offset, raw.bytes);
            line_no += 1;
            docs.clear();
            let redacted = redact::outgoing_line(line, redactor, opened.keep_images);
            let line = redacted.as_deref().unwrap_or(line);
            // A line the reader skipped (longer than pi can hold, or binary past its first megabytes) is not
            // JSON to pi either: it is stored as an empty line, its length kept by the offsets around it.
            feed_readline(&mut state, line, Some(&mut docs));
            let doc = docs.drain(..).reduce(|mut a, b| {
                a.text.push('\n');
                a.text.push_str(&b.text);
                a
            });
            let line_at = start + at;
            entries.push(EntryRow::new(line_no, line_at, line, doc));
            piece_bytes += line.len() + 1;
            offset = line_at + raw.len + 1;
            // Not a session (any more): the piece below deletes what the database has of it.
            done |= state.rejected;
        }
        if !(done || piece_bytes >= BYTES_PER_TRANSACTION) {
            continue;
        }
        // The text this piece adds to `allMessagesText` leaves the state: the state then holds no more than a
        // piece, whatever the session's length (texts are joined by spaces, so pieces join as the texts do).
        let added = std::mem::take(&mut state.all_text);
        // The row as of `offset`: the listing counts the unterminated rest as pi does, the resume state does not.
        let mut unterminated = Vec::new();
        let mut rest_fed = if done && end < stat.size {
            let mut answer = state.clone();
            unterminated = identity::bytes_at(f, end, stat.size - end)
                .ok_or_else(|| file_err(std::io::ErrorKind::UnexpectedEof.into()))?;
            if let Some(r) = redactor.and_then(|r| r.redact_line(&unterminated)) {
                unterminated = r;
            }
            feed_readline(&mut answer, &unterminated, None);
            answer
        } else {
            state.clone()
        };
        let (head, tail) = identity::known_bytes(f, offset);
        let (head, tail) = (known_digest(&head, &tail), Vec::new());
        let text = TextPiece {
            added: json_string_body(added),
            rest: json_string_body(std::mem::take(&mut rest_fed.all_text)),
            append: std::mem::replace(&mut append_text, true),
        };
        let info = rest_fed.finish(&found.path, dirscan::mtime_ms_of(stat.mtime_ns), false);
        let row = match (info, rest_fed.header.clone()) {
            (Some(info), Some(header)) if !state.rejected => Some(SessionRow {
                info,
                text,
                header,
                // Until the last piece, the stat stays "changed", so a kill between pieces is resumed.
                stamp: if done { stat } else { FileStamp { size: 0, mtime_ns: 0, ctime_ns: 0, ..stat } },
                offset,
                lines: line_no,
                head,
                tail,
                unterminated,
                resume_state: state::encode(&state),
                read_at_ns,
            }),
            _ => None,
        };
        let last = done || row.is_none();
        let piece = Piece {
            found_index,
            sid,
            restart: restart && first_piece,
            entries: std::mem::take(&mut entries),
            row,
            finishes: last,
        };
        wrote |= piece.row.is_some() || piece.sid.is_some();
        emit(client, piece)?;
        first_piece = false;
        piece_bytes = 0;
        if last {
            break;
        }
    }
    Ok(FileOutcome { wrote, restarted: restart })
}

/// Writes pieces, several files per transaction.
struct Writer<'a> {
    target: &'a Target,
    machine: &'a str,
    agent_dir: &'a str,
    pending: Vec<Piece>,
    pending_bytes: usize,
    report: PushReport,
    /// Whether row-level security binds the role (asked at the first write).
    row_security: Option<bool>,
}

impl Writer<'_> {
    fn add(&mut self, client: &mut Client, found: &[Found], piece: Piece) -> DbResult<()> {
        self.pending_bytes += piece.entries.iter().map(|e| e.raw.len() + 1).sum::<usize>();
        let finishes = piece.finishes;
        self.pending.push(piece);
        // A piece that does not finish its file is committed at once: the next one continues from its row.
        if !finishes || self.pending_bytes >= BYTES_PER_TRANSACTION || self.pending.len() >= FILES_PER_TRANSACTION {
            self.flush(client, found)?;
        }
        Ok(())
    }

    fn flush(&mut self, client: &mut Client, found: &[Found]) -> DbResult<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let target = self.target;
        let err = |e| target.error(e);
        let mut tx = client.transaction().map_err(err)?;
        let mut sids = Vec::with_capacity(self.pending.len());
        for piece in &self.pending {
            let f = &found[piece.found_index];
            if piece.restart {
                if let Some(sid) = piece.sid {
                    tx.execute("DELETE FROM pi_entries WHERE sid = $1", &[&sid]).map_err(err)?;
                }
            }
            let Some(row) = &piece.row else {
                if let Some(sid) = piece.sid {
                    tx.execute("DELETE FROM pi_sessions WHERE sid = $1", &[&sid]).map_err(err)?;
                    self.report.deleted += 1;
                }
                sids.push(None);
                continue;
            };
            let sid = upsert_session(&mut tx, self.machine, self.agent_dir, f, row).map_err(err)?;
            sids.push(Some(sid));
        }
        // PostgreSQL refuses COPY into a table whose row-level security applies to the role (a machine pushing
        // under its grant): its rows go through a temporary table and one INSERT, which the policies check.
        let through_temp = match self.row_security {
            Some(on) => on,
            None => *self
                .row_security
                .insert(tx.query_one("SELECT row_security_active('pi_entries')", &[]).map_err(err)?.get(0)),
        };
        if through_temp {
            // In the transaction: a rolled-back one takes the table with it, and the next makes it again.
            tx.batch_execute(
                "CREATE TEMPORARY TABLE IF NOT EXISTS pi_entries_incoming
                   (LIKE pi_entries INCLUDING DEFAULTS) ON COMMIT DELETE ROWS",
            )
            .map_err(err)?;
        }
        let sink = tx
            .copy_in(&format!(
                "COPY {} (sid, line, byte_offset, raw, entry_id, parent_id, type, timestamp, role,
                          search_role, search_entry, search_text, search_ts) FROM STDIN BINARY",
                if through_temp { "pi_entries_incoming" } else { "pi_entries" }
            ))
            .map_err(err)?;
        let types = [
            Type::INT8,
            Type::INT4,
            Type::INT8,
            Type::BYTEA,
            Type::TEXT,
            Type::TEXT,
            Type::TEXT,
            Type::TEXT,
            Type::TEXT,
            Type::TEXT,
            Type::TEXT,
            Type::TEXT,
            Type::FLOAT8,
        ];
        let mut writer = BinaryCopyInWriter::new(sink, &types);
        for (piece, sid) in self.pending.iter().zip(&sids) {
            let Some(sid) = sid else { continue };
            for e in &piece.entries {
                let (search_role, search_entry, search_text, search_ts) = match &e.search {
                    Some(d) => (
                        Some(d.role),
                        Some(d.entry_id.as_str()),
                        Some(d.text.as_str()),
                        d.timestamp.is_finite().then_some(d.timestamp),
                    ),
                    None => (None, None, None, None),
                };
                let values: [&(dyn ToSql + Sync); 13] = [
                    sid,
                    &e.line,
                    &e.offset,
                    &e.raw,
                    &e.entry_id,
                    &e.parent_id,
                    &e.kind,
                    &e.timestamp,
                    &e.role,
                    &search_role,
                    &search_entry,
                    &search_text,
                    &search_ts,
                ];
                writer.write(&values).map_err(err)?;
                self.report.entries += 1;
                self.report.bytes += e.raw.len() as u64 + 1;
            }
        }
        writer.finish().map_err(err)?;
        if through_temp {
            tx.batch_execute("INSERT INTO pi_entries SELECT * FROM pi_entries_incoming").map_err(err)?;
        }
        tx.commit().map_err(err)?;
        self.pending.clear();
        self.pending_bytes = 0;
        Ok(())
    }
}

fn upsert_session(
    tx: &mut postgres::Transaction<'_>,
    machine: &str,
    agent_dir: &str,
    f: &Found,
    row: &SessionRow,
) -> Result<i64, postgres::Error> {
    let info = &row.info;
    let literal = |s: &crate::session::json::JsString| Json::String(s.clone()).to_canonical_string();
    let session_id = match &info.id {
        Json::String(s) => Some(pg_text(s.to_string_lossy())),
        _ => None,
    };
    let header = row.header.to_canonical_string();
    let info_id = info.id.to_canonical_string();
    let info_cwd = literal(&info.cwd);
    let info_name = info.name.as_ref().map(literal);
    let info_parent = info.parent_session_path.as_ref().map(Json::to_canonical_string);
    let first = literal(&info.first_message);
    let cwd = pg_text(info.cwd.to_string_lossy());
    let name = info.name.as_ref().map(|n| pg_text(n.to_string_lossy()));
    let values: [&(dyn ToSql + Sync); 27] = [
        &machine,
        &f.path,
        &agent_dir,
        &f.project_dir,
        &f.file_name,
        &session_id,
        &header,
        &info_id,
        &info_cwd,
        &info_name,
        &info_parent,
        &info.created,
        &info.modified,
        &(info.message_count as i64),
        &first,
        &row.text.added,
        &cwd,
        &name,
        &(row.stamp.size as i64),
        &row.stamp.mtime_ns,
        &(row.stamp.dev as i64),
        &(row.stamp.ino as i64),
        &(row.offset as i64),
        &row.lines,
        &row.head,
        &row.tail,
        &row.resume_state,
    ];
    let mut params: Vec<&(dyn ToSql + Sync)> = values.to_vec();
    params.push(&row.read_at_ns);
    params.push(&row.unterminated);
    params.push(&row.stamp.ctime_ns);
    params.push(&row.text.rest);
    params.push(&row.text.append);
    let r = tx.query_one(
        "INSERT INTO pi_sessions (machine, path, agent_dir, project_dir, file_name, session_id, header, info_id,
           info_cwd, info_name, info_parent_session, info_created, info_modified, info_message_count,
           info_first_message, info_all_messages_text, cwd, name, file_size, file_mtime_ns, file_dev, file_ino,
           pushed_offset, pushed_lines, head, tail, resume_state, read_at_ns, unterminated, file_ctime_ns, known_hashed,
           all_text_committed)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, '\"' || $16::text || $31::text || '\"', $17, $18,
           $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, true, 1 + char_length($16::text))
         ON CONFLICT (machine, path) DO UPDATE SET agent_dir = EXCLUDED.agent_dir,
           project_dir = EXCLUDED.project_dir, file_name = EXCLUDED.file_name, session_id = EXCLUDED.session_id,
           header = EXCLUDED.header, info_id = EXCLUDED.info_id, info_cwd = EXCLUDED.info_cwd,
           info_name = EXCLUDED.info_name, info_parent_session = EXCLUDED.info_parent_session,
           info_created = EXCLUDED.info_created, info_modified = EXCLUDED.info_modified,
           info_message_count = EXCLUDED.info_message_count, info_first_message = EXCLUDED.info_first_message,
           info_all_messages_text = CASE WHEN $32::boolean THEN
               left(pi_sessions.info_all_messages_text, pi_sessions.all_text_committed::integer) || $16 || $31 || '\"'
             ELSE EXCLUDED.info_all_messages_text END,
           all_text_committed = CASE WHEN $32::boolean THEN pi_sessions.all_text_committed + char_length($16)
             ELSE EXCLUDED.all_text_committed END,
           cwd = EXCLUDED.cwd, name = EXCLUDED.name,
           file_size = EXCLUDED.file_size, file_mtime_ns = EXCLUDED.file_mtime_ns, file_dev = EXCLUDED.file_dev,
           file_ino = EXCLUDED.file_ino, pushed_offset = EXCLUDED.pushed_offset,
           pushed_lines = EXCLUDED.pushed_lines, head = EXCLUDED.head, tail = EXCLUDED.tail,
           resume_state = EXCLUDED.resume_state, read_at_ns = EXCLUDED.read_at_ns,
           unterminated = EXCLUDED.unterminated, file_ctime_ns = EXCLUDED.file_ctime_ns, known_hashed = true,
           pushed_at = now()
         RETURNING sid",
        &params,
    )?;
    Ok(r.get(0))
}

/// Takes `machine`'s push lock for as long as `client` stays connected, so two pushes of one machine never
/// interleave. Waits up to 30 s: a push killed a moment ago holds it until the server notices its connection is
/// gone.
pub fn lock_machine(client: &mut Client, target: &Target, machine: &str) -> DbResult<()> {
    let err = |e| target.error(e);
    // For bulk loading: the trigram index takes new rows into its pending list and merges them in batches of
    // `work_mem`, and bigger batches are much cheaper.
    client.batch_execute("SET work_mem = '64MB'; SET gin_pending_list_limit = '64MB'").map_err(err)?;
    client.batch_execute("SET lock_timeout = '30s'").map_err(err)?;
    let locked = client.execute("SELECT pg_advisory_lock(1886, hashtext($1))", &[&machine]);
    client.batch_execute("RESET lock_timeout").map_err(err)?;
    match locked {
        Ok(_) => Ok(()),
        Err(e) if e.code() == Some(&postgres::error::SqlState::LOCK_NOT_AVAILABLE) => {
            Err(DbError::Busy { machine: machine.to_owned() })
        }
        Err(e) => Err(err(e)),
    }
}

/// One pass: brings the database's copy of `options.machine`'s sessions up to date with the files.
pub fn push_once(client: &mut Client, target: &Target, options: &PushOptions) -> DbResult<PushReport> {
    let mut scanned = scan(options)?;
    // Sessions the filters leave out are as good as gone: their rows, if any, are deleted below.
    scanned.found.retain(|f| options.filter.chooses(f));
    let found = &scanned.found;
    let mut pushed = load_pushed(client, target, &options.machine)?;
    let mut writer = Writer {
        target,
        machine: &options.machine,
        agent_dir: &options.agent_dir,
        pending: Vec::new(),
        pending_bytes: 0,
        report: PushReport { files: found.len(), ..PushReport::default() },
        row_security: None,
    };
    let mut seen: HashSet<&str> = HashSet::new();
    for (i, f) in found.iter().enumerate() {
        seen.insert(&f.path);
        let mut known = pushed.remove(&f.path);
        // Unchanged as its stamp proves (outside the racy window): a `stat`, nothing read.
        if known.as_ref().is_some_and(|k| k.ctime_known && k.stamp == f.stamp && !k.known().racy()) {
            continue;
        }
        let Some(mut opened) = open_changed(f, known.as_mut()) else { continue };
        if let Some(k) = known.as_ref().filter(|_| opened.unchanged) {
            // Its bytes say it is unchanged (racily clean, or a row without a change time): record what was
            // learnt, so later passes decide from the stamp alone.
            let now_settled = Known { observed_at_ns: opened.read_at_ns, ..k.known() };
            if !k.ctime_known || (k.known().racy() && !now_settled.racy()) {
                client
                    .execute(
                        "UPDATE pi_sessions SET read_at_ns = $1, file_ctime_ns = $2 WHERE sid = $3",
                        &[&opened.read_at_ns, &opened.stamp.ctime_ns, &k.sid],
                    )
                    .map_err(|e| target.error(e))?;
            }
            continue;
        }
        (opened.redactor, opened.keep_images) = (options.redactor.clone(), options.keep_images);
        let mut emit = |client: &mut Client, piece: Piece| writer.add(client, found, piece);
        let outcome = read_file(i, f, &opened, known.as_ref(), client, target, &mut emit)?;
        writer.report.pushed += usize::from(outcome.wrote);
        writer.report.rewritten += usize::from(outcome.restarted);
    }
    writer.flush(client, found)?;
    let mut report = writer.report;
    // Rows of files that are gone (not of those the scan could not see this time: an unreadable directory or a
    // failed stat may pass, and the next pass decides).
    let gone: Vec<i64> = pushed.iter().filter(|(path, _)| scanned.is_gone(path)).map(|(_, p)| p.sid).collect();
    if !gone.is_empty() {
        let n = client.execute("DELETE FROM pi_sessions WHERE sid = ANY($1)", &[&gone]).map_err(|e| target.error(e))?;
        report.deleted += n as usize;
    }
    Ok(report)
}

/// Pushes once, then again whenever a session file changes (file-system notifications, with a poll every
/// `poll` as a safety net), until `keep_going` says stop or a pass fails. `on_pass` sees every pass's report,
/// whether or not it changed something.
pub fn watch(
    client: &mut Client,
    target: &Target,
    options: &PushOptions,
    poll: Duration,
    keep_going: &dyn Fn() -> bool,
    on_pass: &mut dyn FnMut(&PushReport),
) -> DbResult<()> {
    let (tx, rx) = std::sync::mpsc::channel();
    let watcher = crate::watch::FsWatcher::new(move |event| {
        let _ = tx.send(event);
    });
    let root = std::path::PathBuf::from(paths::join(&[&options.agent_dir, "sessions"]));
    let mut watched: HashSet<std::path::PathBuf> = HashSet::new();
    // Whether a directory was added: its files may have been written before its watch began.
    let watch_dirs = |watched: &mut HashSet<std::path::PathBuf>| -> bool {
        let mut dirs = vec![root.clone()];
        if let Ok(entries) = std::fs::read_dir(&root) {
            dirs.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
        }
        let mut added = false;
        for d in dirs {
            if d.is_dir() && watched.insert(d.clone()) {
                watcher.watch_dir(&d);
                added = true;
            }
        }
        added
    };
    watch_dirs(&mut watched);
    on_pass(&push_once(client, target, options)?);
    while keep_going() {
        // Wait for an event or the poll; then let a burst of events settle briefly into one pass.
        let deadline = std::time::Instant::now() + poll;
        let mut woke = false;
        while !woke && keep_going() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            match rx.recv_timeout(left.min(Duration::from_millis(200))) {
                Ok(_) => woke = true,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => std::thread::sleep(left),
            }
        }
        std::thread::sleep(Duration::from_millis(20));
        while rx.try_recv().is_ok() {}
        loop {
            let added = watch_dirs(&mut watched);
            on_pass(&push_once(client, target, options)?);
            if !added {
                break;
            }
        }
    }
    Ok(())
}
