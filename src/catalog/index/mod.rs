//! The persistent catalog index: what a listing needs for every session file, and the searchable text of every
//! entry, in one SQLite database (FTS5, trigram) that every pi-sessiond process shares.
//!
//! The JSONL files stay the source of truth. Per file the index keeps the `SessionInfo` state after the last
//! complete line it read, keyed by path with the file's stamp (`identity::FileStamp`: device, inode, size, mtime
//! and ctime), the first and last bytes it read and when it looked. Whether the file is still what the row says is
//! `identity::Known::judge`'s to decide, here as for the engine and the team push; the index only acts on the
//! answer: a file that only grew is read from where the index stopped; one that shrank, was replaced or was
//! rewritten in place (even to the same length with its mtime set back: its ctime tells) is read again from the
//! start; one that vanished is forgotten. A listing therefore costs one `stat` per file when nothing changed, and
//! always equals what reading every file would give.
//!
//! Listing and search are indexed separately: a listing reads only what `SessionInfo` needs (it skips tool
//! output), so a cold listing costs what a plain scan costs. The searchable text is extracted when a search first
//! needs it (`catch_up_docs`), from `docs_offset` up to the listing's offset.
//!
//! Several processes share one file. Session files are read with no lock held, so a slow file never stalls
//! another process: from a row as one read saw it, a process computes the row's next state, then writes it in a
//! write transaction (`BEGIN IMMEDIATE`, so writers queue) only if the row is still the one it started from.
//! Every write of a row's listing gives the row a new generation, drawn from a counter in the same transaction; a
//! change whose row's generation moved meanwhile is dropped (the row another process wrote is at least as new, and
//! this process's answer, read from the file, is still right). Adding searchable text moves only the row's
//! `docs_offset`, checked where it starts, and leaves the generation alone: a search catching up must not make a
//! writer's listing of its own append look stale, or the append's text would wait for the next listing. A row whose columns do not decode, or contradict each
//! other, is read again from its file and replaced.
//!
//! The index only ever writes a database it knows as its own: one it created (marked by `PRAGMA application_id`
//! and a `pi_sessiond_catalog` table), one of the earlier schema, or an empty file. Anything else at the path — a
//! text file, another application's database — is refused with [`IndexError::Foreign`] and left as it is; the
//! listing then reads the files. A damaged index of ours is reset in place, under SQLite's own locks: it is never
//! deleted, so processes that hold it open go on sharing one file with everyone else. Contention past the busy
//! timeout, a full disk or an I/O error only make one request answer without the index.
//!
//! Here: the index as one connection sees it ([`CatalogIndex`]: listing, usage memo). Beside it: `schema` (the
//! file, known as ours or refused), `rows` (the `files` table's rows), `plan` (reading files for a listing, off
//! the lock), `text` (the searchable text, FTS5, and search's reads), `shared` (a process's pool and catch-up).
//!
//! Session files are opened and read through the index's [`Disk`] (the real one unless a test hands another to
//! [`CatalogIndex::open_on`]), so a read failing at any call is tested in-process. Outside that seam: `stat`,
//! identity's known-byte reads (a failed one makes a file look changed, which reads it again), the bounded
//! header read for session discovery (`read_header_bounded`), the damaged-index check and SQLite's own I/O
//! (its VFS).

use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::io::{BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::{params, Connection, ErrorCode, OptionalExtension, TransactionBehavior};

use super::cancel::{is_exhaustion, Cancel};
use super::info::{Doc, InfoState, ListedSession, ReadlineLines, SessionInfo};
use crate::session::identity::{self, now_ns, FileStamp, FileState, Known, HEAD_CHECK, TAIL_CHECK};
use crate::session::json::{JsString, Json};
use crate::session::store;
use crate::session::store::{read_header_bounded, real_disk, Disk, DiskFile, HEADER_SCAN_LIMIT};

mod plan;
mod rows;
mod schema;
mod shared;
mod text;

use self::plan::*;
use self::rows::*;
use self::schema::*;
pub use self::shared::SharedIndex;
pub(crate) use self::text::last_newline;
use self::text::*;

/// Bumped whenever the schema or the meaning of what is stored changes: an index of another version is rebuilt.
/// (1 had no generations; its rows may hold the text of lines twice, from the race generations fix. 2 kept no
/// change time, so a same-length rewrite with its mtime set back went unseen once the row had settled: every row
/// of it would be read again anyway, so it is rebuilt rather than migrated. 3 read a key written with an escape,
/// `"m\u0065ssage"`, as another name than `JSON.parse` does, so a row of such a file lacks its messages.)
const SCHEMA_VERSION: i64 = 4;

/// `PRAGMA application_id` of every index this program creates: "pisd".
const APPLICATION_ID: i32 = 0x7069_7364;

/// The table that marks a database as ours and holds its schema version and write generation. Created first, so
/// its `CREATE TABLE` text sits at the start of the file, where [`damaged_file_is_ours`] can find it even when the
/// database header is destroyed.
const MARKER_TABLE: &str = "pi_sessiond_catalog";

/// The full-text index's in-memory term hash (see where it is set).
const FTS_HASH_BYTES: i64 = 64 * 1024 * 1024;

/// Files refreshed per write transaction: other processes sharing the index get a turn between batches.
const FILES_PER_TRANSACTION: usize = 256;

/// File bytes whose searchable text is extracted before it is written down: what a catch-up holds in memory.
const DOCS_CHUNK_BYTES: u64 = 32 << 20;

/// How long a writer waits for another process's write transaction before this request does without the index.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// How many times [`CatalogIndex::refresh_known_file`] reads a file's row again when another process stored its
/// own between our read and our write: each round is one more read of the file, so a file that two processes
/// keep writing is left to the next listing rather than read without end.
const REFRESH_ROUNDS: usize = 3;

/// Why the index could not answer. The catalog treats every one but `Cancelled` as "answer without the index".
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// SQLite failed: busy past the timeout, disk full, an I/O error, a damaged file that could not be reset.
    #[error("{0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The file at the index's path is not an index of ours; it was not changed.
    #[error("{path} is not a pi-sessiond catalog index ({why}); it is left as it is")]
    Foreign {
        /// The index path.
        path: String,
        /// What was found there.
        why: String,
    },
    /// The caller's [`Cancel`] was set.
    #[error("cancelled")]
    Cancelled,
}

impl IndexError {
    /// The database file is damaged (not a database, or corrupt), as opposed to busy, full or unreadable.
    fn is_damage(&self) -> bool {
        matches!(self, IndexError::Sqlite(e)
            if matches!(e.sqlite_error_code(), Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase)))
    }
}

/// The index's result type.
pub type IndexResult<T> = Result<T, IndexError>;

fn foreign(path: &str, why: impl Into<String>) -> IndexError {
    IndexError::Foreign { path: path.to_owned(), why: why.into() }
}

fn check(cancel: &Cancel) -> IndexResult<()> {
    if cancel.is_cancelled() {
        Err(IndexError::Cancelled)
    } else {
        Ok(())
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What one process remembers besides the database, shared by all of its connections.
#[derive(Default)]
struct ProcessMemory {
    /// Listing entries, rendered, by path: valid while the file's stamp vouches for them (`FileStamp::vouches_for`), whatever other processes did to the database meanwhile, so a warm listing needs no database read
    /// and no serialisation at all. Entries keep `allMessagesText` while the memo's total of it stays under
    /// [`MEMO_TEXT_BUDGET`].
    memo: Mutex<ListingMemo>,
    /// Each listed directory's names in load order, as of its last change (see `load_order`).
    dir_names: Mutex<HashMap<String, DirNames>>,
}

/// A connection to the shared catalog index, with its process's memory.
pub struct CatalogIndex {
    path: String,
    conn: Connection,
    memory: Arc<ProcessMemory>,
    /// Set once the file at `path` turned out not to be ours: nothing more is done through this connection.
    refused: bool,
    /// What session files are opened and read through.
    disk: Arc<dyn Disk>,
}

/// A directory's `*.jsonl` names in load order, and the directory's stamp when they were read.
struct DirNames {
    stamp: FileStamp,
    read_at_ns: i64,
    names: Arc<Vec<String>>,
}

/// Listing entries by path, with the total of `allMessagesText` they keep.
#[derive(Default)]
struct ListingMemo {
    /// By path. foldhash, randomly seeded per process, where SipHash was a tenth of a warm listing's time.
    entries: HashMap<String, Memo, foldhash::fast::RandomState>,
    /// Bytes of `allMessagesText` JSON the entries hold.
    text_bytes: usize,
}

impl ListingMemo {
    /// Memoises a file's listing entry (without its text once the memo holds [`MEMO_TEXT_BUDGET`] of text).
    fn remember(&mut self, file: &FileToIndex<'_>, read_at_ns: i64, listed: &Option<Arc<ListedSession>>) {
        self.forget(&file.path);
        let mut listed = listed.clone();
        if let Some(l) = listed.as_ref().filter(|l| self.text_bytes + l.text_len() > MEMO_TEXT_BUDGET) {
            listed = Some(Arc::new(l.without_text()));
        }
        self.text_bytes += listed.as_ref().map_or(0, |l| l.text_len());
        self.entries.insert(file.path.clone(), Memo { stamp: file.stamp, read_at_ns, listed });
    }

    fn forget(&mut self, path: &str) {
        if let Some(l) = self.entries.remove(path).and_then(|m| m.listed) {
            self.text_bytes -= l.text_len();
        }
    }
}

/// A remembered listing entry and the stamp it was made from.
#[derive(Clone, Debug)]
struct Memo {
    stamp: FileStamp,
    /// When the file was read for it (before reading).
    read_at_ns: i64,
    /// `None`: not a session.
    listed: Option<Arc<ListedSession>>,
}

impl Memo {
    /// Whether the memo answers a listing (`with_text`: one that returns `allMessagesText`) of the file as `now`
    /// stamps it.
    fn answers(&self, now: &FileStamp, with_text: bool) -> bool {
        self.stamp.vouches_for(now, self.read_at_ns)
            && (!with_text || self.listed.as_ref().is_none_or(|l| l.has_text()))
    }
}

/// The most `allMessagesText` JSON the memo keeps (beyond it, entries are memoised without it and a listing that
/// returns it reads it from the database): 10,000 sessions of a few hundred MB hold about 25 MiB.
const MEMO_TEXT_BUDGET: usize = 256 << 20;

impl std::fmt::Debug for CatalogIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatalogIndex").field("path", &self.path).finish()
    }
}

/// The default location: `<agentDir>/pi-sessiond/index.sqlite`.
pub fn default_index_path(agent_dir: &str) -> String {
    crate::session::paths::join(&[agent_dir, "pi-sessiond", "index.sqlite"])
}

/// A file to bring up to date: its path, the directory it was listed from, and its stamp.
#[derive(Debug)]
pub struct FileToIndex<'a> {
    /// The file's path, as the listing builds it (`<dir>/<name>`).
    pub path: String,
    /// The directory the listing enumerated.
    pub dir: &'a str,
    /// The file's stamp as the listing took it (a regular file: nothing else is indexed).
    pub stamp: FileStamp,
}

/// Which row, in which state: the row id and its generation when it was read. Every change to a row is made
/// only while its version is still the one the change was computed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Version {
    id: i64,
    /// None when the column holds something other than an integer (a damaged row).
    gen: Option<i64>,
}

/// What the index knows about one file.
#[derive(Clone, Debug)]
struct Row {
    /// The file's stamp when it was indexed.
    stamp: FileStamp,
    offset: u64,
    head: Vec<u8>,
    tail: Vec<u8>,
    bounded_header: Option<Json>,
    state: InfoState,
    docs_offset: u64,
    /// When the row was written (ns since the epoch), to tell a clean row from a racily clean one.
    indexed_at_ns: i64,
    /// False when the row was read without `all_text` (a listing that does not return it): such a row answers
    /// listings but is never continued or stored.
    text_loaded: bool,
}

fn listed(info: SessionInfo) -> Arc<ListedSession> {
    Arc::new(ListedSession::new(info))
}

impl Row {
    fn empty(now: &FileStamp) -> Row {
        Row {
            stamp: FileStamp { size: 0, mtime_ns: 0, ctime_ns: 0, ..*now },
            offset: 0,
            head: Vec::new(),
            tail: Vec::new(),
            bounded_header: None,
            state: InfoState::default(),
            docs_offset: 0,
            indexed_at_ns: 0,
            text_loaded: true,
        }
    }

    /// What the row knows of its file, for `identity` to judge the file by.
    fn known(&self) -> Known<'_> {
        Known {
            stamp: &self.stamp,
            len: self.offset,
            head: &self.head,
            tail: &self.tail,
            observed_at_ns: self.indexed_at_ns,
        }
    }

    /// Whether the row answers for the file as `now` stamps it without reading the file.
    fn answers_unread(&self, now: &FileStamp) -> bool {
        self.known().judge_stamp(now) == Some(FileState::Same)
    }

    /// Whether the columns agree with each other (a row that does not is read again from its file).
    fn consistent(&self) -> bool {
        let bounded = |b: &[u8], most: u64| b.len() as u64 <= most.min(self.offset);
        self.offset <= self.stamp.size
            && self.docs_offset <= self.offset
            && bounded(&self.head, HEAD_CHECK)
            && bounded(&self.tail, TAIL_CHECK)
            && !(self.state.rejected && self.state.header.is_some())
            && (self.state.has_text || !self.text_loaded || self.state.all_text.is_empty())
    }
}

/// SQLite turns NaN into NULL; the last-activity time can be NaN (and NaN sticks, as in `Math.max`), so it is
/// stored as its bit pattern.
fn f64_bits(v: Option<f64>) -> Option<i64> {
    v.map(|f| f.to_bits() as i64)
}

/// One file's planned change, computed from its row as read (with no lock held) and written only if the row is
/// still that version.
#[derive(Debug)]
enum Write {
    /// Nothing to change.
    Keep,
    /// The file's bytes say the row is still right: record when that was checked (it is no longer racily clean).
    Settle { indexed_at_ns: i64 },
    /// The file cannot be read now (gone, not a regular file): drop the row.
    Forget,
    /// Store this row. `continued`: it extends the row it was computed from; else it replaces it (and the old
    /// row's searchable text).
    Store { row: Box<Row>, continued: bool },
}

impl CatalogIndex {
    /// The usage memo's rows for `paths` that have one: `(stamp, counted)` as `catalog::usage` wrote them. The
    /// memo is a table of its own beside the files' rows, created when first used.
    pub fn usage_memo(&mut self, paths: &[String]) -> IndexResult<HashMap<String, (String, Vec<u8>)>> {
        if self.refused {
            return Ok(HashMap::new());
        }
        self.conn.execute_batch(USAGE_MEMO_TABLE)?;
        let mut out = HashMap::with_capacity(paths.len());
        let mut stmt = self.conn.prepare_cached("SELECT stamp, counted FROM usage_memo WHERE path = ?1")?;
        for path in paths {
            if let Some(row) = stmt.query_row([path], |r| Ok((r.get(0)?, r.get(1)?))).optional()? {
                out.insert(path.clone(), row);
            }
        }
        Ok(out)
    }

    /// Stores usage memo rows `(path, stamp, counted)`, replacing older ones of the same paths, in one transaction.
    pub fn put_usage_memo(&mut self, rows: &[(String, String, Vec<u8>)]) -> IndexResult<()> {
        if self.refused || rows.is_empty() {
            return Ok(());
        }
        self.conn.execute_batch(USAGE_MEMO_TABLE)?;
        let tx = self.conn.transaction()?;
        {
            let mut stmt = tx.prepare_cached(
                "INSERT INTO usage_memo(path, stamp, counted) VALUES (?1, ?2, ?3)
                 ON CONFLICT(path) DO UPDATE SET stamp = excluded.stamp, counted = excluded.counted",
            )?;
            for (path, stamp, counted) in rows {
                stmt.execute(rusqlite::params![path, stamp, counted])?;
            }
        }
        Ok(tx.commit()?)
    }

    /// Opens (or creates) the index at `path`. An index of ours with another schema version is rebuilt, a damaged
    /// one is reset; anything else at `path` is refused ([`IndexError::Foreign`]) and left as it is.
    pub fn open(path: &str) -> IndexResult<CatalogIndex> {
        Self::open_on(path, real_disk())
    }

    /// [`CatalogIndex::open`], reading session files through `disk` (a test's failing disk).
    pub fn open_on(path: &str, disk: Arc<dyn Disk>) -> IndexResult<CatalogIndex> {
        Self::connect(path, Arc::default(), disk)
    }

    /// How long a write waits for another process's write transaction before the request answers without the
    /// index (10 s by default).
    pub fn set_busy_timeout(&mut self, timeout: Duration) -> IndexResult<()> {
        Ok(self.conn.busy_timeout(timeout)?)
    }

    /// The SQLite connection, for tests that inject faults (a page limit standing for a full disk).
    #[doc(hidden)]
    pub fn connection_for_tests(&self) -> &Connection {
        &self.conn
    }

    fn connect(path: &str, memory: Arc<ProcessMemory>, disk: Arc<dyn Disk>) -> IndexResult<CatalogIndex> {
        if let Some(dir) = Path::new(path).parent() {
            let _ = fs::create_dir_all(dir);
        }
        let conn = open_ours(path)?;
        Ok(CatalogIndex { path: path.to_owned(), conn, memory, refused: false, disk })
    }

    /// The `*.jsonl` names of `dir` in pi's load order: those `read` gave when the directory last changed, while
    /// its stamp vouches for them (a name added, removed or renamed changes the directory's mtime and ctime), else
    /// `read`'s answer now.
    pub fn load_order(&mut self, dir: &str, read: impl FnOnce() -> Option<Vec<String>>) -> Option<Arc<Vec<String>>> {
        // Stat before reading: a change while reading leaves the snapshot older than the directory, not newer.
        let stamp = FileStamp::of_path(dir).ok().flatten();
        if let (Some(now), Some(snap)) = (stamp, lock(&self.memory.dir_names).get(dir)) {
            if snap.stamp.vouches_for(&now, snap.read_at_ns) {
                return Some(snap.names.clone());
            }
        }
        let read_at_ns = now_ns();
        let names = Arc::new(read()?);
        let mut dir_names = lock(&self.memory.dir_names);
        match stamp {
            Some(stamp) => {
                dir_names.insert(dir.to_owned(), DirNames { stamp, read_at_ns, names: names.clone() });
            }
            None => {
                dir_names.remove(dir);
            }
        }
        Some(names)
    }

    /// Runs `op`; if the database turns out to be damaged (not a database, corrupt) and is ours, resets it in
    /// place and runs `op` once more. If it is no longer ours, refuses it from now on.
    fn with_recovery<T>(&mut self, mut op: impl FnMut(&mut Self) -> IndexResult<T>) -> IndexResult<T> {
        if self.refused {
            return Err(foreign(&self.path, "refused earlier"));
        }
        match op(self) {
            Err(e) if e.is_damage() => {
                if !damaged_file_is_ours(&self.path) {
                    self.refused = true;
                    return Err(foreign(&self.path, "no longer a database of ours"));
                }
                tracing::warn!("catalog index {} is damaged ({e}); resetting it in place", self.path);
                reset_in_place(&self.conn)?;
                claim(&mut self.conn, &self.path)?;
                op(self)
            }
            Err(e @ IndexError::Foreign { .. }) => {
                self.refused = true;
                Err(e)
            }
            other => other,
        }
    }

    /// Brings the index up to date for `files` and returns each one's listing entry (None for a file that is not a
    /// session or cannot be read), in the order given. Rows of files in `dirs` that are not in `files` are dropped:
    /// those files are gone. `on_progress(done, total)` is called after each file.
    pub fn refresh(
        &mut self,
        dirs: &[String],
        files: &[FileToIndex<'_>],
        with_text: bool,
        cancel: &Cancel,
        on_progress: &mut dyn FnMut(usize, usize),
    ) -> IndexResult<Vec<Option<Arc<ListedSession>>>> {
        self.with_recovery(|index| index.refresh_inner(dirs, files, with_text, cancel, on_progress))
    }

    fn refresh_inner(
        &mut self,
        dirs: &[String],
        files: &[FileToIndex<'_>],
        with_text: bool,
        cancel: &Cancel,
        on_progress: &mut dyn FnMut(usize, usize),
    ) -> IndexResult<Vec<Option<Arc<ListedSession>>>> {
        let total = files.len();
        let mut done = 0;
        let mut out: Vec<Option<Arc<ListedSession>>> = vec![None; total];
        // 1. This process's memo.
        let mut pending = Vec::new();
        {
            let memo = lock(&self.memory.memo);
            for (i, file) in files.iter().enumerate() {
                match memo.entries.get(&file.path).filter(|m| m.answers(&file.stamp, with_text)) {
                    Some(m) => out[i] = m.listed.clone(),
                    None => pending.push(i),
                }
            }
        }
        for _ in 0..total - pending.len() {
            done += 1;
            on_progress(done, total);
        }
        if pending.is_empty() {
            return Ok(out);
        }
        check(cancel)?;
        // 2. Rows of files unchanged since they were indexed: read, nothing written.
        let mut known: HashMap<String, (Version, Option<Row>)> = HashMap::new();
        for dir in dirs {
            known.extend(rows_in(&self.conn, dir, with_text)?);
        }
        let present: HashSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
        let gone: Vec<(String, Version)> =
            known.iter().filter(|(p, _)| !present.contains(p.as_str())).map(|(p, (v, _))| (p.clone(), *v)).collect();
        let mut changed = Vec::new();
        let mut answered = Vec::new();
        for i in pending {
            let file = &files[i];
            match known.remove(&file.path) {
                Some((_, Some(row))) if row.answers_unread(&file.stamp) => {
                    out[i] = row.state.finish(&file.path, file.stamp.mtime_ms(), with_text).map(listed);
                    answered.push((i, row.indexed_at_ns));
                    done += 1;
                    on_progress(done, total);
                }
                row => changed.push((i, row)),
            }
        }
        self.remember(files, &out, &answered);
        // 3. Files that changed (or are new): read what is new with no lock held, then write it down, a batch per
        // transaction, where the rows are still as read.
        let mut changed = changed.into_iter().peekable();
        while changed.peek().is_some() {
            let mut batch = Vec::with_capacity(FILES_PER_TRANSACTION);
            for (i, known) in changed.by_ref().take(FILES_PER_TRANSACTION) {
                check(cancel)?;
                // The row to continue from needs its text: read again with it if the listing left it out.
                let basis = match known {
                    Some((_, Some(row))) if !row.text_loaded => row_of(&self.conn, &files[i].path, true)?,
                    known => known,
                };
                batch.push((i, basis));
            }
            let mut writes = Vec::with_capacity(batch.len());
            let mut answered = Vec::with_capacity(batch.len());
            for (i, version, read_at, (answer, write)) in plan_all(files, batch, with_text, &self.disk, cancel) {
                // A cancelled read stops part-way: its answer is neither returned nor stored.
                check(cancel)?;
                if let Some(answer) = answer {
                    out[i] = answer.map(listed);
                    answered.push((i, read_at));
                }
                writes.push((i, version, write));
                done += 1;
                on_progress(done, total);
            }
            self.write_rows(files, writes)?;
            self.remember(files, &out, &answered);
        }
        // 4. Rows of files that are gone.
        if !gone.is_empty() {
            let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            for (_, version) in &gone {
                forget_if(&tx, *version)?;
            }
            tx.commit()?;
            let mut memo = lock(&self.memory.memo);
            for (path, _) in &gone {
                memo.forget(path);
            }
        }
        Ok(out)
    }

    /// Memoises the answers for `files[i]` read at `read_at` (ns) for each `(i, read_at)` of `answered`.
    fn remember(&self, files: &[FileToIndex<'_>], out: &[Option<Arc<ListedSession>>], answered: &[(usize, i64)]) {
        let mut memo = lock(&self.memory.memo);
        for &(i, read_at) in answered {
            memo.remember(&files[i], read_at, &out[i]);
        }
    }

    /// Writes the planned changes in one transaction, each only if its row is still the version it was planned
    /// from.
    fn write_rows(
        &mut self,
        files: &[FileToIndex<'_>],
        writes: Vec<(usize, Option<Version>, Write)>,
    ) -> IndexResult<bool> {
        if writes.iter().all(|(_, _, w)| matches!(w, Write::Keep)) {
            return Ok(true);
        }
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let gen = next_generation(&tx)?;
        // Each statement applies only where the row still has the version the change was computed from (another
        // process's newer row is left as it is).
        let mut all_applied = true;
        for (i, basis, write) in writes {
            let applied = match (write, basis) {
                (Write::Keep, _) | (Write::Forget | Write::Settle { .. }, None) => true,
                (Write::Settle { indexed_at_ns }, Some(b)) => {
                    tx.prepare_cached(&format!("UPDATE files SET indexed_at_ns = ?1 WHERE id = ?2 AND {GEN_IS}?3"))?
                        .execute(params![indexed_at_ns, b.id, b.gen])?
                        == 1
                }
                (Write::Forget, Some(b)) => forget_if(&tx, b)?,
                (Write::Store { row, continued }, basis) => {
                    let stored = store(&tx, &files[i], &row, gen, basis, continued)?;
                    if let (true, Some(b), false) = (stored, basis, continued) {
                        forget_docs(&tx, b.id)?;
                    }
                    stored
                }
            };
            all_applied &= applied;
        }
        tx.commit()?;
        Ok(all_applied)
    }

    /// Brings one file up to date, listing and searchable text both (after a write through this process), if the
    /// index follows it: it has a row for the file or for another file of its directory.
    pub fn refresh_known_file(&mut self, path: &str, cancel: &Cancel) -> IndexResult<()> {
        self.with_recovery(|index| {
            let dir = crate::session::paths::parent_dir(path);
            // Another process may store its row between our read of the row and our write (ours is then left
            // out); theirs may describe the file before our write, so the row is read and judged again.
            for _ in 0..REFRESH_ROUNDS {
                let known = row_of(&index.conn, path, true)?;
                let dir_known = known.is_some()
                    || index.conn.prepare_cached("SELECT 1 FROM files WHERE dir = ?1 LIMIT 1")?.exists([&dir])?;
                if !dir_known {
                    return Ok(());
                }
                let (version, row) = known.map_or((None, None), |(v, r)| (Some(v), r));
                let stamp = FileStamp::of_path(path).ok().flatten().filter(|s| s.regular);
                // (A file that is gone has no stamp; only its path is used, to forget its row.)
                let file = FileToIndex { path: path.to_owned(), dir: &dir, stamp: stamp.unwrap_or_default() };
                let write = match stamp {
                    Some(_) => plan(&file, row, false, &index.disk, cancel).1,
                    None => Write::Forget,
                };
                check(cancel)?;
                if index.write_rows(std::slice::from_ref(&file), vec![(0, version, write)])? {
                    break;
                }
            }
            index.catch_up_docs_inner(&[path.to_owned()], cancel, &mut |_, _| {})
        })
    }

    /// The header pi's session discovery would find in `path` (`Some(None)`: no valid header), if the index holds
    /// it for the file as it is now; None when the file changed since it was indexed.
    pub fn cached_headers(&mut self, dir: &str) -> IndexResult<HashMap<String, CachedHeader>> {
        let dir = dir.to_owned();
        self.with_recovery(|index| {
            let mut stmt = index.conn.prepare_cached(
                "SELECT path, size, mtime_ns, ctime_ns, dev, ino, indexed_at_ns, bounded_header FROM files
                 WHERE dir = ?1",
            )?;
            let rows = stmt.query_map([&dir], |r| {
                let header: Option<String> = r.get(7)?;
                Ok((
                    r.get::<_, String>(0)?,
                    CachedHeader {
                        stamp: stamp_columns(r, 1)?,
                        indexed_at_ns: r.get(6)?,
                        header: header.and_then(|h| Json::parse(h.as_bytes()).ok()),
                    },
                ))
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }
}

/// What [`CatalogIndex::cached_headers`] returns for a file.
#[derive(Clone, Debug)]
pub struct CachedHeader {
    stamp: FileStamp,
    indexed_at_ns: i64,
    header: Option<Json>,
}

impl CachedHeader {
    /// The header pi's bounded discovery scan finds (None: the file has no valid header), if the file's stamp
    /// `now` vouches that it is still exactly as indexed.
    pub fn header_if_current(&self, now: &FileStamp) -> Option<Option<&Json>> {
        self.stamp.vouches_for(now, self.indexed_at_ns).then_some(self.header.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::store::RealDisk;
    use std::io::Write as _;

    fn message(id: &str, parent: &str, text: &str) -> String {
        format!(
            "{{\"type\":\"message\",\"id\":\"{id}\",\"parentId\":{parent},\"timestamp\":\"2026-01-01T00:00:01.000Z\",\
             \"message\":{{\"role\":\"user\",\"content\":\"{text}\",\"timestamp\":1}}}}\n"
        )
    }

    fn searchable_texts(index: &mut CatalogIndex, path: &str) -> Vec<String> {
        let docs = index.docs(&[path.to_owned()], &[], &Cancel::default()).expect("the searchable text");
        docs.into_iter().map(|(_, d)| d.text).collect()
    }

    fn stamp_of(path: &str) -> FileStamp {
        FileStamp::of_path(path).ok().flatten().expect("the session file exists")
    }

    // The race behind a search missing a phrase another process had just appended: a writer plans its listing of
    // its own append from the row as it was, a search catches the row's text up meanwhile, and the writer's
    // listing must still land (and keep the text the search added), or the append's text waits for whoever lists
    // next.
    #[test]
    fn a_listing_planned_before_a_search_caught_the_text_up_still_lands_and_keeps_that_text() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let sessions = dir.path().to_string_lossy().into_owned();
        let path = format!("{sessions}/s.jsonl");
        let header = "{\"type\":\"session\",\"version\":3,\"id\":\"s\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/p\"}\n";
        std::fs::write(&path, format!("{header}{}", message("a", "null", "alpha words"))).expect("written");
        let index_path = format!("{sessions}/index.sqlite");
        let mut writer = CatalogIndex::open(&index_path).expect("the writer's connection");
        let mut searcher = CatalogIndex::open(&index_path).expect("the searcher's connection");
        let cancel = Cancel::default();
        let file = FileToIndex { path: path.clone(), dir: &sessions, stamp: stamp_of(&path) };
        writer
            .refresh(std::slice::from_ref(&sessions), std::slice::from_ref(&file), true, &cancel, &mut |_, _| {})
            .expect("listed");

        // The writer appends, and plans its listing from the row as it is now.
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).expect("opened for appending");
        f.write_all(message("b", "\"a\"", "zeppelin").as_bytes()).expect("appended");
        let grown = FileToIndex { path: path.clone(), dir: &sessions, stamp: stamp_of(&path) };
        let (basis, row) = row_of(&writer.conn, &path, true).expect("read").expect("a row");
        let (_, write) = plan(&grown, row, true, &real_disk(), &cancel);
        assert!(matches!(write, Write::Store { continued: true, .. }), "the row continues");

        // Meanwhile a search catches the row's text up (to where the row's listing had read).
        searcher.catch_up_docs(std::slice::from_ref(&path), &cancel, &mut |_, _| {}).expect("caught up");

        writer.write_rows(std::slice::from_ref(&grown), vec![(0, Some(basis), write)]).expect("written");
        let (_, stored) = row_of(&writer.conn, &path, true).expect("read").expect("a row");
        let stored = stored.expect("the row decodes");
        assert_eq!(stored.offset, grown.stamp.size, "the writer's listing of its append landed");

        searcher.catch_up_docs(std::slice::from_ref(&path), &cancel, &mut |_, _| {}).expect("caught up");
        let texts = searchable_texts(&mut writer, &path);
        assert_eq!(texts.iter().filter(|t| t.contains("zeppelin")).count(), 1, "{texts:?}");
        assert_eq!(texts.iter().filter(|t| t.contains("alpha")).count(), 1, "no text counted twice: {texts:?}");
    }

    /// A disk that runs a step of another process once, the first time a session file is opened through it:
    /// the moment between a refresh's read of the row and its write.
    struct InterruptedOnce(Mutex<Option<Box<dyn FnOnce() + Send>>>);

    impl std::fmt::Debug for InterruptedOnce {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("InterruptedOnce")
        }
    }

    impl Disk for InterruptedOnce {
        fn open(&self, path: &Path, options: &fs::OpenOptions) -> std::io::Result<fs::File> {
            let step = lock(&self.0).take();
            if let Some(step) = step {
                step();
            }
            RealDisk.open(path, options)
        }
        fn write(&self, file: &fs::File, bytes: &[u8]) -> std::io::Result<usize> {
            RealDisk.write(file, bytes)
        }
        fn read_at(&self, file: &fs::File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
            RealDisk.read_at(file, buf, offset)
        }
        fn set_len(&self, file: &fs::File, len: u64) -> std::io::Result<()> {
            RealDisk.set_len(file, len)
        }
        fn sync_data(&self, file: &fs::File) -> std::io::Result<()> {
            RealDisk.sync_data(file)
        }
        fn sync_all(&self, file: &fs::File) -> std::io::Result<()> {
            RealDisk.sync_all(file)
        }
        fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
            RealDisk.rename(from, to)
        }
        fn remove_file(&self, path: &Path) -> std::io::Result<()> {
            RealDisk.remove_file(path)
        }
        fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
            RealDisk.sync_dir(dir)
        }
        fn map(&self, file: &fs::File) -> std::io::Result<memmap2::Mmap> {
            RealDisk.map(file)
        }
    }

    // The flake of `rpc_search::a_search_finds_a_phrase_written_moments_ago_by_another_process`: another process
    // stores its row for a file (read before our append) between our refresh's read of the row and its write, so
    // our write is left out, and the index kept their older row: the append's text waited for the next listing.
    #[test]
    fn a_refresh_whose_write_lost_to_an_older_row_of_another_process_reads_the_file_again() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let sessions = dir.path().to_string_lossy().into_owned();
        let header = "{\"type\":\"session\",\"version\":3,\"id\":\"s\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/p\"}\n";
        let other = format!("{sessions}/other.jsonl");
        std::fs::write(&other, header).expect("written");
        let path = format!("{sessions}/s.jsonl");
        std::fs::write(&path, format!("{header}{}", message("a", "null", "alpha words"))).expect("written");
        let index_path = format!("{sessions}/index.sqlite");
        let cancel = Cancel::default();

        // The other process knows the directory (not yet this file) and plans this file's row before our append.
        let mut lister = CatalogIndex::open(&index_path).expect("the other process's connection");
        let known = FileToIndex { path: other.clone(), dir: &sessions, stamp: stamp_of(&other) };
        lister
            .refresh(std::slice::from_ref(&sessions), std::slice::from_ref(&known), true, &cancel, &mut |_, _| {})
            .expect("listed");
        let before = FileToIndex { path: path.clone(), dir: &sessions, stamp: stamp_of(&path) };
        let (_, their_write) = plan(&before, None, true, &real_disk(), &cancel);
        assert!(matches!(their_write, Write::Store { .. }), "they store a row for the file as it was");

        let mut f = std::fs::OpenOptions::new().append(true).open(&path).expect("opened for appending");
        f.write_all(message("b", "\"a\"", "zeppelin").as_bytes()).expect("appended");
        let their_path = path.clone();
        let their_dir = sessions.clone();
        let their_stamp = before.stamp;
        let interrupted = InterruptedOnce(Mutex::new(Some(Box::new(move || {
            let before = FileToIndex { path: their_path, dir: &their_dir, stamp: their_stamp };
            assert!(lister.write_rows(std::slice::from_ref(&before), vec![(0, None, their_write)]).expect("stored"));
        }))));
        let mut writer = CatalogIndex::open_on(&index_path, Arc::new(interrupted)).expect("our connection");
        writer.refresh_known_file(&path, &cancel).expect("refreshed");

        let (_, stored) = row_of(&writer.conn, &path, true).expect("read").expect("a row");
        assert_eq!(stored.expect("the row decodes").offset, stamp_of(&path).size, "our append is in the row");
        let texts = searchable_texts(&mut writer, &path);
        assert_eq!(texts.iter().filter(|t| t.contains("zeppelin")).count(), 1, "{texts:?}");
    }
}
