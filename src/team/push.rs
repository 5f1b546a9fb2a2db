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

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::time::Duration;

use postgres::binary_copy::BinaryCopyInWriter;
use postgres::types::{ToSql, Type};
use postgres::Client;

use super::db::{DbError, DbResult, Target};
use super::state;
use crate::catalog::index::{self, bytes_at};
use crate::catalog::info::{Doc, InfoState, SessionInfo};
use crate::catalog::Cancel;
use crate::session::dirscan::{self, FileStat};
use crate::session::json::scan::{find_member, scan_document};
use crate::session::json::string::decode_string_literal;
use crate::session::json::Json;
use crate::session::paths;
use crate::session::store::LineReader;

/// How many bytes at the start of a file and before the pushed offset tell an append from a rewrite.
const CHECK_BYTES: u64 = 64;

/// Raw line bytes per transaction: bounds memory and how much a kill can make the next pass redo.
const BYTES_PER_TRANSACTION: usize = 16 << 20;

/// Files per transaction (many small sessions share one commit, and so one fsync on the server).
const FILES_PER_TRANSACTION: usize = 256;

/// A file written this close to when it was pushed may change again without its `stat` changing (the same mtime
/// tick): its bytes are checked on the next pass.
const RACY_WINDOW_NS: i64 = 2_000_000_000;

/// What to push.
#[derive(Clone, Debug)]
pub struct PushOptions {
    /// This machine's name in the database.
    pub machine: String,
    /// pi's agent directory (sessions are under `<agentDir>/sessions`).
    pub agent_dir: String,
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
    stat: FileStat,
    offset: u64,
    lines: i32,
    head: Vec<u8>,
    tail: Vec<u8>,
    read_at_ns: i64,
}

impl Pushed {
    fn settled(&self) -> bool {
        self.stat.mtime_ns <= self.read_at_ns - RACY_WINDOW_NS
    }
}

/// A session file on disk.
struct Found {
    path: String,
    project_dir: String,
    file_name: String,
    stat: FileStat,
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

/// The session row's values.
struct SessionRow {
    info: SessionInfo,
    header: Json,
    stat: FileStat,
    offset: u64,
    lines: i32,
    head: Vec<u8>,
    tail: Vec<u8>,
    unterminated: Vec<u8>,
    resume_state: String,
    read_at_ns: i64,
}

fn now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
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
/// pi's `listAll` finds them.
fn scan(agent_dir: &str) -> DbResult<Scan> {
    let root = paths::join(&[agent_dir, "sessions"]);
    let entries = match std::fs::read_dir(&root) {
        Ok(e) => e,
        // No sessions yet: nothing to push, and nothing pushed before is there any more.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Scan::default()),
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
        let Ok(stats) = dirscan::stat_names(&dir, &names) else {
            scan.unreadable_dirs.insert(dir);
            continue;
        };
        for (name, stat) in names.into_iter().zip(stats) {
            let path = paths::join(&[&dir, &name]);
            match stat {
                Some(stat) => scan.found.push(Found { path, project_dir: project_dir.clone(), file_name: name, stat }),
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
                    read_at_ns
             FROM pi_sessions WHERE machine = $1",
            &[&machine],
        )
        .map_err(|e| target.error(e))?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let stat = FileStat {
                len: r.get::<_, i64>(2) as u64,
                mtime_ns: r.get(3),
                dev: r.get::<_, i64>(4) as u64,
                ino: r.get::<_, i64>(5) as u64,
                regular: true,
            };
            let pushed = Pushed {
                sid: r.get(1),
                stat,
                offset: r.get::<_, i64>(6) as u64,
                lines: r.get(7),
                head: r.get(8),
                tail: r.get(9),
                read_at_ns: r.get(10),
            };
            (r.get::<_, String>(0), pushed)
        })
        .collect())
}

/// The file still starts with the pushed first bytes and has the pushed bytes just before the offset.
fn continues(file: &File, pushed: &Pushed) -> bool {
    index::continues(file, &pushed.head, &pushed.tail, pushed.offset)
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

/// The pieces of one changed file: its new complete lines in stretches of at most [`BYTES_PER_TRANSACTION`],
/// each with the session row as of its end, handed to `emit` as they are read.
fn read_file(
    found_index: usize,
    found: &Found,
    known: Option<&Pushed>,
    client: &mut Client,
    target: &Target,
    emit: &mut dyn FnMut(&mut Client, Piece) -> DbResult<()>,
) -> DbResult<FileOutcome> {
    let file_err = |source| DbError::File { path: found.path.clone(), source };
    let f = match File::open(&found.path) {
        Ok(f) => f,
        // Vanished since the scan: the next pass deletes it.
        Err(_) => return Ok(FileOutcome::default()),
    };
    let read_at_ns = now_ns();
    let stat = found.stat;
    let resume =
        known.filter(|k| k.stat.dev == stat.dev && k.stat.ino == stat.ino && stat.len >= k.offset && continues(&f, k));
    if known.is_some() && resume.is_none() {
        tracing::info!("{}: rewritten since it was pushed; sending it again", found.path);
    }
    let (mut state, mut offset, mut line_no, mut head, mut tail) = match resume {
        Some(k) => {
            let text: String = client
                .query_one("SELECT resume_state FROM pi_sessions WHERE sid = $1", &[&k.sid])
                .map_err(|e| target.error(e))?
                .get(0);
            (state::decode(&text), k.offset, k.lines, k.head.clone(), k.tail.clone())
        }
        None => (InfoState::default(), 0, 0, Vec::new(), Vec::new()),
    };
    let restart = known.is_some() && resume.is_none();
    let sid = known.map(|k| k.sid);
    let end = complete_end(&f, offset, stat.len).map_err(file_err)?;
    let mut shared = &f;
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
        // The row as of `offset`: the listing counts the unterminated rest as pi does, the resume state does not.
        let mut unterminated = Vec::new();
        let rest_fed = if done && end < stat.len {
            let mut answer = state.clone();
            unterminated =
                bytes_at(&f, end, stat.len - end).ok_or_else(|| file_err(std::io::ErrorKind::UnexpectedEof.into()))?;
            feed_readline(&mut answer, &unterminated, None);
            answer
        } else {
            state.clone()
        };
        if head.len() < CHECK_BYTES as usize {
            head = bytes_at(&f, 0, CHECK_BYTES.min(offset)).unwrap_or_default();
        }
        let tail_len = CHECK_BYTES.min(offset);
        if offset > 0 {
            tail = bytes_at(&f, offset - tail_len, tail_len).unwrap_or_default();
        }
        let info = rest_fed.finish(&found.path, stat.mtime_ms(), true);
        let row = match (info, rest_fed.header.clone()) {
            (Some(info), Some(header)) if !state.rejected => Some(SessionRow {
                info,
                header,
                // Until the last piece, the stat stays "changed", so a kill between pieces is resumed.
                stat: if done { stat } else { FileStat { len: 0, mtime_ns: 0, ..stat } },
                offset,
                lines: line_no,
                head: head.clone(),
                tail: tail.clone(),
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
        let sink = tx
            .copy_in(
                "COPY pi_entries (sid, line, byte_offset, raw, entry_id, parent_id, type, timestamp, role,
                                  search_role, search_entry, search_text, search_ts) FROM STDIN BINARY",
            )
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
    let all = info.all_messages_text.as_ref().map(literal).unwrap_or_else(|| "\"\"".to_owned());
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
        &all,
        &cwd,
        &name,
        &(row.stat.len as i64),
        &row.stat.mtime_ns,
        &(row.stat.dev as i64),
        &(row.stat.ino as i64),
        &(row.offset as i64),
        &row.lines,
        &row.head,
        &row.tail,
        &row.resume_state,
    ];
    let mut params: Vec<&(dyn ToSql + Sync)> = values.to_vec();
    params.push(&row.read_at_ns);
    params.push(&row.unterminated);
    let r = tx.query_one(
        "INSERT INTO pi_sessions (machine, path, agent_dir, project_dir, file_name, session_id, header, info_id,
           info_cwd, info_name, info_parent_session, info_created, info_modified, info_message_count,
           info_first_message, info_all_messages_text, cwd, name, file_size, file_mtime_ns, file_dev, file_ino,
           pushed_offset, pushed_lines, head, tail, resume_state, read_at_ns, unterminated)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22,
           $23, $24, $25, $26, $27, $28, $29)
         ON CONFLICT (machine, path) DO UPDATE SET agent_dir = EXCLUDED.agent_dir,
           project_dir = EXCLUDED.project_dir, file_name = EXCLUDED.file_name, session_id = EXCLUDED.session_id,
           header = EXCLUDED.header, info_id = EXCLUDED.info_id, info_cwd = EXCLUDED.info_cwd,
           info_name = EXCLUDED.info_name, info_parent_session = EXCLUDED.info_parent_session,
           info_created = EXCLUDED.info_created, info_modified = EXCLUDED.info_modified,
           info_message_count = EXCLUDED.info_message_count, info_first_message = EXCLUDED.info_first_message,
           info_all_messages_text = EXCLUDED.info_all_messages_text, cwd = EXCLUDED.cwd, name = EXCLUDED.name,
           file_size = EXCLUDED.file_size, file_mtime_ns = EXCLUDED.file_mtime_ns, file_dev = EXCLUDED.file_dev,
           file_ino = EXCLUDED.file_ino, pushed_offset = EXCLUDED.pushed_offset,
           pushed_lines = EXCLUDED.pushed_lines, head = EXCLUDED.head, tail = EXCLUDED.tail,
           resume_state = EXCLUDED.resume_state, read_at_ns = EXCLUDED.read_at_ns,
           unterminated = EXCLUDED.unterminated, pushed_at = now()
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
    let scanned = scan(&options.agent_dir)?;
    let found = &scanned.found;
    let mut pushed = load_pushed(client, target, &options.machine)?;
    let mut writer = Writer {
        target,
        machine: &options.machine,
        agent_dir: &options.agent_dir,
        pending: Vec::new(),
        pending_bytes: 0,
        report: PushReport { files: found.len(), ..PushReport::default() },
    };
    let mut seen: HashSet<&str> = HashSet::new();
    for (i, f) in found.iter().enumerate() {
        seen.insert(&f.path);
        let known = pushed.remove(&f.path);
        if let Some(k) = &known {
            if k.stat == f.stat && k.settled() {
                continue;
            }
            if k.stat == f.stat && k.offset <= f.stat.len {
                // Racily clean: unchanged if its bytes say so.
                let same = File::open(&f.path).is_ok_and(|file| continues(&file, k));
                if same {
                    if f.stat.mtime_ns <= now_ns() - RACY_WINDOW_NS {
                        client
                            .execute("UPDATE pi_sessions SET read_at_ns = $1 WHERE sid = $2", &[&now_ns(), &k.sid])
                            .map_err(|e| target.error(e))?;
                    }
                    continue;
                }
            }
        }
        let mut emit = |client: &mut Client, piece: Piece| writer.add(client, found, piece);
        let outcome = read_file(i, f, known.as_ref(), client, target, &mut emit)?;
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
/// `poll` as a safety net), until `keep_going` says stop. `on_pass` sees each pass's report.
pub fn watch(
    client: &mut Client,
    target: &Target,
    options: &PushOptions,
    poll: Duration,
    keep_going: &dyn Fn() -> bool,
    on_pass: &mut dyn FnMut(&PushReport),
) -> DbResult<()> {
    let (tx, rx) = std::sync::mpsc::channel();
    let watcher = crate::rpc::watch::FsWatcher::new(move |event| {
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
            let report = push_once(client, target, options)?;
            if report.pushed > 0 || report.deleted > 0 {
                on_pass(&report);
            }
            if !added {
                break;
            }
        }
    }
    Ok(())
}
