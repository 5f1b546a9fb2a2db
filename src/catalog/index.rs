//! The persistent catalog index: what a listing needs for every session file, and the searchable text of every
//! entry, in one SQLite database (FTS5, trigram) that every pi-sessiond process shares.
//!
//! The JSONL files stay the source of truth. Per file the index keeps the `SessionInfo` state after the last
//! complete line it read, keyed by path with size, mtime, device and inode, plus the first and last bytes it read.
//! A file that only grew (same inode, same first bytes, same bytes just before the indexed offset) is read from
//! where the index stopped; a file that shrank, was replaced or was rewritten in place is read again from the
//! start; a file that vanished is forgotten. A listing therefore costs one `stat` per file when nothing changed,
//! and always equals what reading every file would give.
//!
//! Listing and search are indexed separately: a listing reads only what `SessionInfo` needs (it skips tool
//! output), so a cold listing costs what a plain scan costs. The searchable text is extracted when a search first
//! needs it (`catch_up_docs`), from `docs_offset` up to the listing's offset.
//!
//! Several processes share one file. Session files are read with no lock held, so a slow file never stalls
//! another process: from a row as one read saw it, a process computes the row's next state, then writes it in a
//! write transaction (`BEGIN IMMEDIATE`, so writers queue) only if the row is still the one it started from.
//! Every write gives the rows it changes a new generation, drawn from a counter in the same transaction; a change
//! whose row's generation moved meanwhile is dropped (the row another process wrote is at least as new, and this
//! process's answer, read from the file, is still right). A row whose columns do not decode, or contradict each
//! other, is read again from its file and replaced.
//!
//! The index only ever writes a database it knows as its own: one it created (marked by `PRAGMA application_id`
//! and a `pi_sessiond_catalog` table), one of the earlier schema, or an empty file. Anything else at the path — a
//! text file, another application's database — is refused with [`IndexError::Foreign`] and left as it is; the
//! listing then reads the files. A damaged index of ours is reset in place, under SQLite's own locks: it is never
//! deleted, so processes that hold it open go on sharing one file with everyone else. Contention past the busy
//! timeout, a full disk or an I/O error only make one request answer without the index.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::{params, Connection, ErrorCode, OptionalExtension, TransactionBehavior};

use super::cancel::{is_exhaustion, Cancel};
use super::info::{Doc, InfoState, ListedSession, ReadlineLines, SessionInfo};
use crate::session::dirscan::{self, FileStat};
use crate::session::identity::{self, continues, now_ns, settled, HEAD_CHECK, TAIL_CHECK};
use crate::session::json::{JsString, Json};
use crate::session::store;
use crate::session::store::{read_header_bounded, HEADER_SCAN_LIMIT};

/// Bumped whenever the schema or the meaning of what is stored changes: an index of another version is rebuilt.
/// (1 had no generations; its rows may hold the text of lines twice, from the race generations fix.)
const SCHEMA_VERSION: i64 = 2;

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
    /// Listing entries, rendered, by path: valid while the file's stat is unchanged (and the memo is not racily
    /// clean), whatever other processes did to the database meanwhile, so a warm listing needs no database read
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
}

/// A directory's `*.jsonl` names in load order, and the directory's `stat` when they were read.
struct DirNames {
    stat: FileStat,
    read_at_ns: i64,
    names: Arc<Vec<String>>,
}

/// Listing entries by path, with the total of `allMessagesText` they keep.
#[derive(Default)]
struct ListingMemo {
    entries: HashMap<String, Memo>,
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
        self.entries.insert(file.path.clone(), Memo::new(&file.stat, read_at_ns, listed));
    }

    fn forget(&mut self, path: &str) {
        if let Some(l) = self.entries.remove(path).and_then(|m| m.listed) {
            self.text_bytes -= l.text_len();
        }
    }
}

/// A remembered listing entry and the stat it was made from.
#[derive(Clone, Debug)]
struct Memo {
    stat: FileStat,
    /// When the file was read for it (before reading).
    read_at_ns: i64,
    /// `None`: not a session.
    listed: Option<Arc<ListedSession>>,
}

impl Memo {
    fn current(&self, stat: &FileStat) -> bool {
        self.stat == *stat && settled(self.stat.mtime_ns, self.read_at_ns)
    }

    fn new(stat: &FileStat, read_at_ns: i64, listed: Option<Arc<ListedSession>>) -> Memo {
        Memo { stat: *stat, read_at_ns, listed }
    }

    /// Whether the memo answers a listing (`with_text`: one that returns `allMessagesText`) of the file as `meta`
    /// describes it.
    fn answers(&self, stat: &FileStat, with_text: bool) -> bool {
        self.current(stat) && (!with_text || self.listed.as_ref().is_none_or(|l| l.has_text()))
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

/// A file to bring up to date: its path, the directory it was listed from, and its `stat`.
#[derive(Debug)]
pub struct FileToIndex<'a> {
    /// The file's path, as the listing builds it (`<dir>/<name>`).
    pub path: String,
    /// The directory the listing enumerated.
    pub dir: &'a str,
    /// `stat` of the file (a regular file: nothing else is indexed).
    pub stat: FileStat,
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
    /// The file's `stat` when it was indexed.
    stat: FileStat,
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
    fn empty(meta: &FileStat) -> Row {
        Row {
            stat: FileStat { len: 0, mtime_ns: 0, ..*meta },
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

    fn racy(&self) -> bool {
        !settled(self.stat.mtime_ns, self.indexed_at_ns)
    }

    fn unchanged(&self, meta: &FileStat) -> bool {
        self.stat == *meta
    }

    fn same_file(&self, meta: &FileStat) -> bool {
        self.stat.dev == meta.dev && self.stat.ino == meta.ino
    }

    /// Whether everything up to the file's size as indexed was read.
    fn complete(&self) -> bool {
        self.offset == self.stat.len
    }

    /// Whether the row answers for the file as `meta` describes it without reading the file.
    fn answers_unread(&self, meta: &FileStat) -> bool {
        self.unchanged(meta) && self.complete() && !self.racy()
    }

    /// Whether the columns agree with each other (a row that does not is read again from its file).
    fn consistent(&self) -> bool {
        let bounded = |b: &[u8], most: u64| b.len() as u64 <= most.min(self.offset);
        self.offset <= self.stat.len
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

/// The usage memo (`catalog::usage`): per session file, the usage objects pi counts in it, valid while the file's
/// stamp is the one stored. Not part of the schema version: a row whose stamp no longer matches is counted again.
const USAGE_MEMO_TABLE: &str =
    "CREATE TABLE IF NOT EXISTS usage_memo(path TEXT PRIMARY KEY, stamp TEXT NOT NULL, counted BLOB NOT NULL);";

/// The tables of schema 1 (which had no marker): such an index is ours and is rebuilt.
const LEGACY_TABLES: [&str; 5] = ["meta", "files", "texts", "docs", "docs_fts"];

const SCHEMA: &str = "
    DROP TABLE IF EXISTS docs_fts; DROP TABLE IF EXISTS docs; DROP TABLE IF EXISTS texts; DROP TABLE IF EXISTS files;
    DROP TABLE IF EXISTS meta;
    DELETE FROM pi_sessiond_catalog;
    CREATE TABLE files(
      id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, dir TEXT NOT NULL, gen INTEGER NOT NULL,
      size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, dev INTEGER NOT NULL, ino INTEGER NOT NULL,
      offset INTEGER NOT NULL, head BLOB NOT NULL, tail BLOB NOT NULL, bounded_header TEXT,
      header TEXT, rejected INTEGER NOT NULL, name BLOB, message_count INTEGER NOT NULL,
      first_message BLOB NOT NULL, has_text INTEGER NOT NULL, last_activity INTEGER,
      docs_offset INTEGER NOT NULL, indexed_at_ns INTEGER NOT NULL);
    CREATE INDEX files_dir ON files(dir);
    -- Apart from the rows: a listing that leaves allMessagesText out then never reads these pages.
    CREATE TABLE texts(id INTEGER PRIMARY KEY, all_text BLOB NOT NULL);
    CREATE TABLE docs(id INTEGER PRIMARY KEY, file_id INTEGER NOT NULL, entry_id TEXT NOT NULL, role TEXT NOT NULL,
      ts REAL, text TEXT NOT NULL);
    CREATE INDEX docs_file ON docs(file_id);
    CREATE INDEX docs_ts ON docs(ts, file_id);
    CREATE VIRTUAL TABLE docs_fts USING fts5(text, content = '', contentless_delete = 1, tokenize = 'trigram',
      detail = 'none');
";

/// What a database file holds, as far as the index is concerned.
#[derive(Debug, PartialEq)]
enum Found {
    /// Ours, with this schema version (None: the marker table or its version is missing).
    Ours(Option<i64>),
    /// Schema 1 of ours, from before the marker.
    Legacy,
    /// Nothing at all: a new or empty file.
    Empty,
    /// Something else, described.
    Foreign(String),
}

/// Reads what the database at `conn` is, without writing anything.
fn inspect(conn: &Connection) -> rusqlite::Result<Found> {
    let application_id: i32 = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let has = |name: &str| tables.iter().any(|t| t == name);
    if application_id == APPLICATION_ID {
        let version = if has(MARKER_TABLE) {
            conn.query_row("SELECT CAST(value AS INTEGER) FROM pi_sessiond_catalog WHERE key = 'schema'", [], |r| {
                r.get(0)
            })
            .optional()?
        } else {
            None
        };
        return Ok(Found::Ours(version));
    }
    if application_id != 0 {
        return Ok(Found::Foreign(format!("a database with application_id {application_id:#x}")));
    }
    if tables.is_empty() {
        let user_version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        return Ok(if user_version == 0 {
            Found::Empty
        } else {
            Found::Foreign(format!("a database with user_version {user_version}"))
        });
    }
    if LEGACY_TABLES.iter().all(|t| has(t)) {
        let marked: Option<String> =
            conn.query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| r.get(0)).optional().ok().flatten();
        if marked.is_some() {
            return Ok(Found::Legacy);
        }
    }
    let mut names: Vec<&str> = tables.iter().map(String::as_str).take(4).collect();
    if tables.len() > 4 {
        names.push("…");
    }
    Ok(Found::Foreign(format!("another application's database, with tables {}", names.join(", "))))
}

/// Makes the database at `conn` a current index of ours, if it is ours or empty; refuses anything else.
fn claim(conn: &mut Connection, path: &str) -> IndexResult<()> {
    match inspect(conn)? {
        Found::Ours(Some(SCHEMA_VERSION)) => return use_wal(conn),
        Found::Foreign(why) => return Err(foreign(path, why)),
        _ => {}
    }
    use_wal(conn)?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    // Again inside the write lock: another process may have claimed it meanwhile.
    match inspect(&tx)? {
        Found::Ours(Some(SCHEMA_VERSION)) => {}
        Found::Foreign(why) => return Err(foreign(path, why)),
        found => {
            match found {
                Found::Ours(Some(v)) => tracing::info!("catalog index {path} has schema {v}; rebuilding it"),
                Found::Legacy => tracing::info!("catalog index {path} has schema 1; rebuilding it"),
                _ => {}
            }
            tx.execute_batch(&format!("CREATE TABLE IF NOT EXISTS {MARKER_TABLE}(key TEXT PRIMARY KEY, value);"))?;
            tx.execute_batch(SCHEMA)?;
            // FTS5 flushes its in-memory term hash to a new segment whenever it outgrows `hashsize` (1 MiB by
            // default), and then merges segments: indexing a few hundred MB of sessions spends most of its time
            // there. A bigger hash makes fewer, larger segments.
            tx.execute("INSERT INTO docs_fts(docs_fts, rank) VALUES ('hashsize', ?1)", [FTS_HASH_BYTES])?;
            tx.execute(
                "INSERT INTO pi_sessiond_catalog(key, value) VALUES ('schema', ?1), ('generation', 0)",
                [SCHEMA_VERSION],
            )?;
            tx.pragma_update(None, "application_id", APPLICATION_ID)?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// WAL lets readers and one writer work at once across processes.
fn use_wal(conn: &Connection) -> IndexResult<()> {
    let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        conn.pragma_update(None, "journal_mode", "WAL")?;
    }
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    Ok(())
}

/// Whether a file SQLite cannot read as a database is a damaged index of ours: its header still carries our
/// application id, or its first pages (or its write-ahead log's) still hold our marker table's definition.
fn damaged_file_is_ours(path: &str) -> bool {
    const SCAN: u64 = 1 << 20;
    let start = |p: &str| -> Vec<u8> {
        let mut bytes = Vec::new();
        if let Ok(f) = store::open_regular(p) {
            let _ = f.take(SCAN).read_to_end(&mut bytes);
        }
        bytes
    };
    let main = start(path);
    let header_is_ours =
        main.starts_with(b"SQLite format 3\0") && main.get(68..72) == Some(&APPLICATION_ID.to_be_bytes());
    let marker = format!("CREATE TABLE {MARKER_TABLE}(");
    header_is_ours
        || memchr::memmem::find(&main, marker.as_bytes()).is_some()
        || memchr::memmem::find(&start(&format!("{path}-wal")), marker.as_bytes()).is_some()
}

/// Empties a damaged database in place, under SQLite's locks (SQLITE_DBCONFIG_RESET_DATABASE, then VACUUM): the
/// file stays the one every process has open.
fn reset_in_place(conn: &Connection) -> IndexResult<()> {
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_RESET_DATABASE, true)?;
    let vacuumed = conn.execute_batch("VACUUM");
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_RESET_DATABASE, false)?;
    Ok(vacuumed?)
}

/// Opens the database at `path` if it is ours (creating it when there is none, resetting it when it is ours and
/// damaged); refuses anything else without writing to it.
fn open_ours(path: &str) -> IndexResult<Connection> {
    if let Ok(meta) = fs::metadata(path) {
        if !meta.is_file() {
            return Err(foreign(path, "not a regular file"));
        }
    }
    let mut conn = Connection::open(path)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    match claim(&mut conn, path) {
        Err(e) if e.is_damage() => {
            if !damaged_file_is_ours(path) {
                return Err(foreign(path, "not a SQLite database"));
            }
            tracing::warn!("catalog index {path} is damaged ({e}); resetting it in place");
            reset_in_place(&conn)?;
            claim(&mut conn, path)?;
        }
        other => other?,
    }
    Ok(conn)
}

/// The next write generation (inside a write transaction).
fn next_generation(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached(
        "UPDATE pi_sessiond_catalog SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation' RETURNING value",
    )?
    .query_row([], |r| r.get(0))
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
        Self::connect(path, Arc::default())
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

    fn connect(path: &str, memory: Arc<ProcessMemory>) -> IndexResult<CatalogIndex> {
        if let Some(dir) = Path::new(path).parent() {
            let _ = fs::create_dir_all(dir);
        }
        let conn = open_ours(path)?;
        Ok(CatalogIndex { path: path.to_owned(), conn, memory, refused: false })
    }

    /// The `*.jsonl` names of `dir` in pi's load order: those `read` gave when the directory last changed, while
    /// its `stat` is the same (a name added, removed or renamed changes the directory's mtime) and was not racily
    /// clean, else `read`'s answer now.
    pub fn load_order(&mut self, dir: &str, read: impl FnOnce() -> Option<Vec<String>>) -> Option<Arc<Vec<String>>> {
        // Stat before reading: a change while reading leaves the snapshot older than the directory, not newer.
        let stat = dirscan::stat(dir);
        if let (Some(st), Some(snap)) = (stat, lock(&self.memory.dir_names).get(dir)) {
            if snap.stat == st && settled(st.mtime_ns, snap.read_at_ns) {
                return Some(snap.names.clone());
            }
        }
        let read_at_ns = now_ns();
        let names = Arc::new(read()?);
        let mut dir_names = lock(&self.memory.dir_names);
        match stat {
            Some(stat) => {
                dir_names.insert(dir.to_owned(), DirNames { stat, read_at_ns, names: names.clone() });
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
                match memo.entries.get(&file.path).filter(|m| m.answers(&file.stat, with_text)) {
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
                Some((_, Some(row))) if row.answers_unread(&file.stat) => {
                    out[i] = row.state.finish(&file.path, file.stat.mtime_ms(), with_text).map(listed);
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
            for (i, version, read_at, (answer, write)) in plan_all(files, batch, with_text, cancel) {
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
    ) -> IndexResult<()> {
        if writes.iter().all(|(_, _, w)| matches!(w, Write::Keep)) {
            return Ok(());
        }
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let gen = next_generation(&tx)?;
        // Each statement applies only where the row still has the version the change was computed from (another
        // process's newer row is left as it is).
        for (i, basis, write) in writes {
            match (write, basis) {
                (Write::Keep, _) | (Write::Forget | Write::Settle { .. }, None) => {}
                (Write::Settle { indexed_at_ns }, Some(b)) => {
                    tx.prepare_cached(&format!("UPDATE files SET indexed_at_ns = ?1 WHERE id = ?2 AND {GEN_IS}?3"))?
                        .execute(params![indexed_at_ns, b.id, b.gen])?;
                }
                (Write::Forget, Some(b)) => forget_if(&tx, b)?,
                (Write::Store { row, continued }, basis) => {
                    let stored = store(&tx, &files[i], &row, gen, basis)?;
                    if let (true, Some(b), false) = (stored, basis, continued) {
                        forget_docs(&tx, b.id)?;
                    }
                }
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Brings one file up to date, listing and searchable text both (after a write through this process), if the
    /// index follows it: it has a row for the file or for another file of its directory.
    pub fn refresh_known_file(&mut self, path: &str, cancel: &Cancel) -> IndexResult<()> {
        self.with_recovery(|index| {
            let dir = crate::session::paths::parent_dir(path);
            let known = row_of(&index.conn, path, true)?;
            let dir_known = known.is_some()
                || index.conn.prepare_cached("SELECT 1 FROM files WHERE dir = ?1 LIMIT 1")?.exists([&dir])?;
            if !dir_known {
                return Ok(());
            }
            let (version, row) = known.map_or((None, None), |(v, r)| (Some(v), r));
            let stat = dirscan::stat(path).filter(|s| s.regular);
            // (A file that is gone keeps no stat; only its path is used, to forget its row.)
            let gone = FileStat { len: 0, mtime_ns: 0, dev: 0, ino: 0, regular: false };
            let file = FileToIndex { path: path.to_owned(), dir: &dir, stat: stat.unwrap_or(gone) };
            let write = match stat {
                Some(_) => plan(&file, row, false, cancel).1,
                None => Write::Forget,
            };
            check(cancel)?;
            index.write_rows(std::slice::from_ref(&file), vec![(0, version, write)])?;
            index.catch_up_docs_inner(&[path.to_owned()], cancel, &mut |_, _| {})
        })
    }

    /// The header pi's session discovery would find in `path` (`Some(None)`: no valid header), if the index holds
    /// it for the file as it is now; None when the file changed since it was indexed.
    pub fn cached_headers(&mut self, dir: &str) -> IndexResult<HashMap<String, CachedHeader>> {
        let dir = dir.to_owned();
        self.with_recovery(|index| {
            let mut stmt = index
                .conn
                .prepare_cached("SELECT path, size, mtime_ns, dev, ino, bounded_header FROM files WHERE dir = ?1")?;
            let rows = stmt.query_map([&dir], |r| {
                let header: Option<String> = r.get(5)?;
                Ok((
                    r.get::<_, String>(0)?,
                    CachedHeader {
                        stat: stat_columns(r, 1)?,
                        header: header.and_then(|h| Json::parse(h.as_bytes()).ok()),
                    },
                ))
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    /// How many bytes of `paths` (as far as the listing indexed them) have no searchable text in the index yet,
    /// and how many bytes the index has listed of them in all.
    pub fn unindexed_bytes(&mut self, paths: &[String]) -> IndexResult<(u64, u64)> {
        self.with_recovery(|index| {
            let wanted: HashSet<&str> = paths.iter().map(String::as_str).collect();
            let mut stmt =
                index.conn.prepare_cached("SELECT path, docs_offset, offset FROM files WHERE rejected = 0")?;
            let rows =
                stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?)))?;
            let (mut behind, mut total) = (0u64, 0u64);
            for row in rows {
                let (path, docs_offset, offset) = row?;
                if wanted.contains(path.as_str()) {
                    behind += offset.saturating_sub(docs_offset).max(0) as u64;
                    total += offset.max(0) as u64;
                }
            }
            Ok((behind, total))
        })
    }

    /// Extracts the searchable text of `paths` up to what the listing indexed. `on_progress(done, total)` is
    /// called after each file. Files are read with no lock held; the text is written where the row is still as it
    /// was read.
    pub fn catch_up_docs(
        &mut self,
        paths: &[String],
        cancel: &Cancel,
        on_progress: &mut dyn FnMut(usize, usize),
    ) -> IndexResult<()> {
        self.with_recovery(|index| index.catch_up_docs_inner(paths, cancel, on_progress))
    }

    fn catch_up_docs_inner(
        &mut self,
        paths: &[String],
        cancel: &Cancel,
        on_progress: &mut dyn FnMut(usize, usize),
    ) -> IndexResult<()> {
        let wanted: HashSet<&str> = paths.iter().map(String::as_str).collect();
        let behind: Vec<Behind> = {
            let mut stmt = self.conn.prepare_cached(
                "SELECT id, CASE WHEN typeof(gen) = 'integer' THEN gen END, path, docs_offset, offset, head, tail
                 FROM files WHERE docs_offset < offset AND rejected = 0",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok(Behind {
                    version: Version { id: r.get(0)?, gen: r.get(1)? },
                    path: r.get(2)?,
                    docs_offset: r.get::<_, i64>(3)? as u64,
                    offset: r.get::<_, i64>(4)? as u64,
                    head: r.get(5)?,
                    tail: r.get(6)?,
                })
            })?;
            rows.collect::<rusqlite::Result<Vec<_>>>()?
                .into_iter()
                .filter(|b| wanted.contains(b.path.as_str()))
                .collect()
        };
        let total = behind.len();
        let mut batch: Vec<DocsChunk> = Vec::new();
        let mut batch_bytes = 0;
        for (k, mut file) in behind.into_iter().enumerate() {
            let Ok(f) = store::open_regular(&file.path).inspect_err(|e| cancel.note_failure(e)) else {
                on_progress(k + 1, total);
                continue;
            };
            let mut from = file.docs_offset;
            while from < file.offset {
                check(cancel)?;
                let Some(to) = chunk_end(&f, from, file.offset, cancel) else { break };
                let Some(docs) = extract_docs(&f, from, to, cancel) else { break };
                check(cancel)?;
                if !continues(&f, &file.head, &file.tail, file.offset) {
                    // Rewritten since it was indexed: the next listing starts it over.
                    break;
                }
                batch_bytes += to - from;
                batch.push(DocsChunk { version: file.version, from, to, docs });
                from = to;
                if from < file.offset || batch_bytes >= DOCS_CHUNK_BYTES || batch.len() >= FILES_PER_TRANSACTION {
                    let (gen, applied) = self.write_docs(&mut batch)?;
                    batch_bytes = 0;
                    if !applied.last().copied().unwrap_or(false) {
                        break;
                    }
                    file.version.gen = Some(gen);
                }
            }
            on_progress(k + 1, total);
        }
        self.write_docs(&mut batch)?;
        Ok(())
    }

    /// Stores the chunks' searchable text in one transaction, each only if its row is still the version it was
    /// read from and its text still ends where the chunk starts. Returns the transaction's generation and which
    /// chunks were stored.
    fn write_docs(&mut self, batch: &mut Vec<DocsChunk>) -> IndexResult<(i64, Vec<bool>)> {
        if batch.is_empty() {
            return Ok((0, Vec::new()));
        }
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let gen = next_generation(&tx)?;
        let mut applied = Vec::with_capacity(batch.len());
        {
            let mut now = tx.prepare_cached(
                "SELECT CASE WHEN typeof(gen) = 'integer' THEN gen END, docs_offset FROM files WHERE id = ?1",
            )?;
            let mut insert =
                tx.prepare_cached("INSERT INTO docs(file_id, entry_id, role, ts, text) VALUES (?1, ?2, ?3, ?4, ?5)")?;
            let mut insert_fts = tx.prepare_cached("INSERT INTO docs_fts(rowid, text) VALUES (?1, ?2)")?;
            let mut advance = tx.prepare_cached("UPDATE files SET docs_offset = ?1, gen = ?2 WHERE id = ?3")?;
            for chunk in batch.iter() {
                let id = chunk.version.id;
                let current: Option<(Option<i64>, i64)> =
                    now.query_row([id], |r| Ok((r.get(0)?, r.get(1)?))).optional()?;
                let ok = current == Some((chunk.version.gen, chunk.from as i64));
                if ok {
                    for d in &chunk.docs {
                        let ts = d.timestamp.is_finite().then_some(d.timestamp);
                        insert.execute(params![id, d.entry_id, d.role, ts, d.text])?;
                        insert_fts.execute(params![tx.last_insert_rowid(), d.text])?;
                    }
                    advance.execute(params![chunk.to as i64, gen, id])?;
                }
                applied.push(ok);
            }
        }
        tx.commit()?;
        batch.clear();
        Ok((gen, applied))
    }

    /// Calls `visit` with the searchable entries of `paths`, newest first, that contain (case-insensitively)
    /// every string in `needles` — or that may: the index narrows, callers check the text themselves. Needles
    /// shorter than three characters cannot narrow and are ignored; with none left, every entry is visited.
    /// Stops when `visit` returns false; returns true when every entry was visited. The unterminated last line of
    /// a file (which the index does not hold) is not visited: see [`CatalogIndex::fragment_docs`].
    pub fn for_each_doc_newest_first(
        &mut self,
        paths: &[String],
        needles: &[String],
        cancel: &Cancel,
        visit: &mut dyn FnMut(&str, Doc) -> bool,
    ) -> IndexResult<bool> {
        self.with_recovery(|index| {
            let ids = file_ids(&index.conn, paths)?;
            index
                .conn
                .execute_batch("CREATE TEMP TABLE IF NOT EXISTS scope(id INTEGER PRIMARY KEY); DELETE FROM scope;")?;
            {
                let mut insert = index.conn.prepare_cached("INSERT INTO temp.scope(id) VALUES (?1)")?;
                for id in ids.keys() {
                    insert.execute([id])?;
                }
            }
            let query = all_of(needles);
            let sql = if query.is_none() {
                "SELECT d.file_id, d.entry_id, d.role, d.text, d.ts, d.id FROM docs d INDEXED BY docs_ts
                  WHERE d.file_id IN temp.scope ORDER BY d.ts DESC"
            } else {
                "SELECT d.file_id, d.entry_id, d.role, d.text, d.ts, d.id FROM docs d INDEXED BY docs_ts
                  WHERE d.file_id IN temp.scope AND d.id IN (SELECT rowid FROM docs_fts WHERE docs_fts MATCH ?1)
                  ORDER BY d.ts DESC"
            };
            let mut stmt = index.conn.prepare_cached(sql)?;
            let mut rows = match &query {
                Some(q) => stmt.query([q])?,
                None => stmt.query([])?,
            };
            while let Some(r) = rows.next()? {
                check(cancel)?;
                let file_id: i64 = r.get(0)?;
                let Some(path) = ids.get(&file_id) else { continue };
                let role: String = r.get(2)?;
                let doc = Doc {
                    entry_id: r.get(1)?,
                    role: role_name(&role),
                    text: r.get(3)?,
                    timestamp: r.get::<_, Option<f64>>(4)?.unwrap_or(f64::NAN),
                    // A file's entries are stored in file order, so their row ids are in file order too.
                    order: r.get::<_, i64>(5)? as u64,
                };
                if !visit(path, doc) {
                    return Ok(false);
                }
            }
            Ok(true)
        })
    }

    /// The searchable text of each file's unterminated last line, as last seen by a listing: the index stores
    /// only complete lines (the rest may be a write in progress), but a reader of the file sees that line too.
    pub fn fragment_docs(&mut self, paths: &[String], cancel: &Cancel) -> IndexResult<Vec<(String, Doc)>> {
        self.with_recovery(|index| fragment_docs(&index.conn, paths, cancel))
    }

    /// The searchable entries of `paths` whose text may contain one of `needles` (case-insensitively; callers
    /// check the text themselves, the index only narrows). Every entry of `paths` when `needles` is empty or one
    /// of them is shorter than three characters (too short for the trigram index).
    pub fn docs(&mut self, paths: &[String], needles: &[String], cancel: &Cancel) -> IndexResult<Vec<(String, Doc)>> {
        self.with_recovery(|index| docs_matching(&index.conn, paths, needles, cancel))
    }

    /// [`CatalogIndex::docs`] one at a time, without the unterminated last lines (see
    /// [`CatalogIndex::fragment_docs`]): what a search that only counts and keeps the best reads, holding no more
    /// than one entry's text at once.
    pub fn for_each_doc_with_any(
        &mut self,
        paths: &[String],
        needles: &[String],
        cancel: &Cancel,
        visit: &mut dyn FnMut(&str, Doc),
    ) -> IndexResult<()> {
        self.with_recovery(|index| for_each_doc_matching(&index.conn, paths, needles, cancel, visit))
    }
}

/// A file whose searchable text is behind its listing, as read.
struct Behind {
    version: Version,
    path: String,
    docs_offset: u64,
    offset: u64,
    head: Vec<u8>,
    tail: Vec<u8>,
}

/// The searchable text of a file's lines in `[from, to)`, to be stored.
struct DocsChunk {
    version: Version,
    from: u64,
    to: u64,
    docs: Vec<Doc>,
}

/// What [`CatalogIndex::cached_headers`] returns for a file.
#[derive(Clone, Debug)]
pub struct CachedHeader {
    stat: FileStat,
    header: Option<Json>,
}

impl CachedHeader {
    /// The header pi's bounded discovery scan finds (None: the file has no valid header), if the file is still
    /// exactly as indexed.
    pub fn header_if_current(&self, stat: &FileStat) -> Option<Option<&Json>> {
        (self.stat == *stat).then_some(self.header.as_ref())
    }
}

const ROW_COLUMNS: &str = "id, path, CASE WHEN typeof(gen) = 'integer' THEN gen END, size, mtime_ns, dev, ino,
    offset, head, tail, bounded_header, header, rejected, name, message_count, first_message, {text}, has_text,
    last_activity, docs_offset, indexed_at_ns";

/// The row columns, with the listing text joined in (NULL when it is missing) or left empty.
fn row_columns(with_text: bool) -> String {
    let text = if with_text { "(SELECT all_text FROM texts WHERE texts.id = files.id)" } else { "X''" };
    ROW_COLUMNS.replace("{text}", text)
}

/// The `size, mtime_ns, dev, ino` columns starting at `first`.
fn stat_columns(r: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<FileStat> {
    Ok(FileStat {
        len: r.get::<_, i64>(first)? as u64,
        mtime_ns: r.get(first + 1)?,
        dev: r.get::<_, i64>(first + 2)? as u64,
        ino: r.get::<_, i64>(first + 3)? as u64,
        regular: true,
    })
}

/// A row's path and version, and its contents when they decode and agree with each other.
fn read_row(r: &rusqlite::Row<'_>, with_text: bool) -> rusqlite::Result<(String, (Version, Option<Row>))> {
    let version = Version { id: r.get(0)?, gen: r.get(2)? };
    Ok((r.get(1)?, (version, decode_row(r, with_text).filter(Row::consistent))))
}

fn decode_row(r: &rusqlite::Row<'_>, with_text: bool) -> Option<Row> {
    let json = |i: usize| -> Option<Option<Json>> {
        match r.get::<_, Option<String>>(i).ok()? {
            None => Some(None),
            Some(t) => Json::parse(t.as_bytes()).ok().map(Some),
        }
    };
    let unsigned = |i: usize| -> Option<u64> { u64::try_from(r.get::<_, i64>(i).ok()?).ok() };
    Some(Row {
        stat: stat_columns(r, 3).ok()?,
        offset: unsigned(7)?,
        head: r.get(8).ok()?,
        tail: r.get(9).ok()?,
        bounded_header: json(10)?,
        state: InfoState {
            header: json(11)?,
            rejected: r.get::<_, i64>(12).ok()? != 0,
            name: r.get::<_, Option<Vec<u8>>>(13).ok()?.map(JsString::from_wtf8),
            message_count: unsigned(14)?,
            first_message: JsString::from_wtf8(r.get(15).ok()?),
            // A listing row without its text row is damaged: NULL does not decode.
            all_text: JsString::from_wtf8(r.get::<_, Vec<u8>>(16).ok()?),
            has_text: r.get::<_, i64>(17).ok()? != 0,
            last_activity: r.get::<_, Option<i64>>(18).ok()?.map(|b| f64::from_bits(b as u64)),
        },
        docs_offset: unsigned(19)?,
        indexed_at_ns: r.get(20).ok()?,
        text_loaded: with_text,
    })
}

type KnownRow = (Version, Option<Row>);

fn rows_in(conn: &Connection, dir: &str, with_text: bool) -> IndexResult<HashMap<String, KnownRow>> {
    let mut stmt = conn.prepare_cached(&format!("SELECT {} FROM files WHERE dir = ?1", row_columns(with_text)))?;
    let rows = stmt.query_map([dir], |r| read_row(r, with_text))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

fn row_of(conn: &Connection, path: &str, with_text: bool) -> IndexResult<Option<KnownRow>> {
    let mut stmt = conn.prepare_cached(&format!("SELECT {} FROM files WHERE path = ?1", row_columns(with_text)))?;
    Ok(stmt.query_row([path], |r| read_row(r, with_text)).optional()?.map(|(_, known)| known))
}

/// `gen` as a version compares it: NULL for a damaged (non-integer) one. Followed by the parameter to compare
/// with.
const GEN_IS: &str = "(CASE WHEN typeof(gen) = 'integer' THEN gen END) IS ";

/// Stores `row` for `file` with generation `gen`, if the file's row is still `basis` (None: there is none); false
/// when another process's row is there instead.
fn store(conn: &Connection, file: &FileToIndex<'_>, row: &Row, gen: i64, basis: Option<Version>) -> IndexResult<bool> {
    debug_assert!(row.text_loaded, "a row is stored only with its text");
    let header = row.state.header.as_ref().map(Json::to_canonical_string);
    let bounded = row.bounded_header.as_ref().map(Json::to_canonical_string);
    let mut stmt = conn.prepare_cached(
        "INSERT INTO files(path, dir, gen, size, mtime_ns, dev, ino, offset, head, tail, bounded_header, header,
           rejected, name, message_count, first_message, has_text, last_activity, docs_offset, indexed_at_ns)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)
         ON CONFLICT(path) DO UPDATE SET dir = excluded.dir, gen = excluded.gen, size = excluded.size,
           mtime_ns = excluded.mtime_ns, dev = excluded.dev, ino = excluded.ino, offset = excluded.offset,
           head = excluded.head, tail = excluded.tail, bounded_header = excluded.bounded_header,
           header = excluded.header, rejected = excluded.rejected, name = excluded.name,
           message_count = excluded.message_count, first_message = excluded.first_message,
           has_text = excluded.has_text, last_activity = excluded.last_activity, docs_offset = excluded.docs_offset,
           indexed_at_ns = excluded.indexed_at_ns
         WHERE ?21 AND (CASE WHEN typeof(files.gen) = 'integer' THEN files.gen END) IS ?22
         RETURNING id",
    )?;
    let stored: Option<i64> = stmt
        .query_row(
            params![
                file.path,
                file.dir,
                gen,
                row.stat.len as i64,
                row.stat.mtime_ns,
                row.stat.dev as i64,
                row.stat.ino as i64,
                row.offset as i64,
                row.head,
                row.tail,
                bounded,
                header,
                row.state.rejected as i64,
                row.state.name.as_ref().map(JsString::as_bytes),
                row.state.message_count as i64,
                row.state.first_message.as_bytes(),
                row.state.has_text as i64,
                f64_bits(row.state.last_activity),
                row.docs_offset as i64,
                row.indexed_at_ns,
                basis.is_some(),
                basis.and_then(|b| b.gen),
            ],
            |r| r.get(0),
        )
        .optional()?;
    let Some(id) = stored else { return Ok(false) };
    conn.prepare_cached("INSERT OR REPLACE INTO texts(id, all_text) VALUES (?1, ?2)")?
        .execute(params![id, row.state.all_text.as_bytes()])?;
    Ok(true)
}

fn forget_docs(conn: &Connection, file_id: i64) -> IndexResult<()> {
    conn.prepare_cached("DELETE FROM docs_fts WHERE rowid IN (SELECT id FROM docs WHERE file_id = ?1)")?
        .execute([file_id])?;
    conn.prepare_cached("DELETE FROM docs WHERE file_id = ?1")?.execute([file_id])?;
    Ok(())
}

/// Drops the row (and its text and searchable text) if it is still `version`.
fn forget_if(conn: &Connection, version: Version) -> IndexResult<()> {
    let deleted = conn
        .prepare_cached(&format!("DELETE FROM files WHERE id = ?1 AND {GEN_IS}?2"))?
        .execute(params![version.id, version.gen])?;
    if deleted == 1 {
        forget_docs(conn, version.id)?;
        conn.prepare_cached("DELETE FROM texts WHERE id = ?1")?.execute([version.id])?;
    }
    Ok(())
}

fn row_continues(file: &File, row: &Row) -> bool {
    continues(file, &row.head, &row.tail, row.offset)
}

const SCAN_CHUNK: u64 = 64 * 1024;

/// Where the last `\n` of `file` lies in `[from, to)`, searching backwards (an error once cancelled).
pub(crate) fn last_newline(file: &File, from: u64, to: u64, cancel: &Cancel) -> std::io::Result<Option<u64>> {
    let mut end = to;
    let mut buf = vec![0u8; SCAN_CHUNK as usize];
    while end > from {
        if cancel.is_cancelled() {
            return Err(std::io::Error::other("cancelled"));
        }
        let start = end.saturating_sub(SCAN_CHUNK).max(from);
        let chunk = &mut buf[..(end - start) as usize];
        file.read_exact_at(chunk, start)?;
        if let Some(i) = memchr::memrchr(b'\n', chunk) {
            return Ok(Some(start + i as u64));
        }
        end = start;
    }
    Ok(None)
}

/// Where the first `\n` of `file` lies in `[from, to)` (an error once cancelled).
fn first_newline(file: &File, from: u64, to: u64, cancel: &Cancel) -> std::io::Result<Option<u64>> {
    let mut start = from;
    let mut buf = vec![0u8; SCAN_CHUNK as usize];
    while start < to {
        if cancel.is_cancelled() {
            return Err(std::io::Error::other("cancelled"));
        }
        let end = (start + SCAN_CHUNK).min(to);
        let chunk = &mut buf[..(end - start) as usize];
        file.read_exact_at(chunk, start)?;
        if let Some(i) = memchr::memchr(b'\n', chunk) {
            return Ok(Some(start + i as u64));
        }
        start = end;
    }
    Ok(None)
}

/// Where a chunk of searchable text starting at `from` (a line start) ends: after the last `\n` within
/// [`DOCS_CHUNK_BYTES`], else after the first one past it, else at `limit` (the listing's offset, a line end).
fn chunk_end(file: &File, from: u64, limit: u64, cancel: &Cancel) -> Option<u64> {
    if limit - from <= DOCS_CHUNK_BYTES {
        return Some(limit);
    }
    let want = from + DOCS_CHUNK_BYTES;
    if let Some(nl) = last_newline(file, from, want, cancel).ok()? {
        return Some(nl + 1);
    }
    Some(first_newline(file, want, limit, cancel).ok()?.map_or(limit, |nl| nl + 1))
}

/// Feeds the lines of `file` in `[from, to)` (which ends at a line boundary) to `feed`, streaming; an error once
/// `cancel` is set.
fn feed_lines(file: &File, from: u64, to: u64, cancel: &Cancel, mut feed: impl FnMut(&[u8])) -> std::io::Result<()> {
    // (Each caller opened `file` itself: nobody else depends on its position.)
    let mut reader = file;
    reader.seek(SeekFrom::Start(from))?;
    let mut lines = ReadlineLines::new(cancel.reader(BufReader::with_capacity(1 << 20, reader.take(to - from))));
    let mut buf = Vec::new();
    while lines.next_line(&mut buf)? {
        feed(&buf);
    }
    Ok(())
}

/// The searchable entries of the lines of `file` in `[from, to)`; None when it cannot be read.
fn extract_docs(file: &File, from: u64, to: u64, cancel: &Cancel) -> Option<Vec<Doc>> {
    // The state only tracks where the header is; past it, every line is an entry.
    let mut state = InfoState::default();
    if from > 0 {
        state.header = Some(Json::Null);
    }
    let mut docs = Vec::new();
    feed_lines(file, from, to, cancel, |line| state.feed(line, Some(&mut docs))).ok()?;
    Some(docs)
}

/// The most threads that read files for one listing.
const PLAN_THREADS: usize = 4;

/// A file's plan as [`plan_all`] returns it: its index, the row version it was planned from, when it was read
/// (ns), and [`plan`]'s answer and write.
type Planned = (usize, Option<Version>, i64, (Option<Option<SessionInfo>>, Write));

/// [`plan`] for each file of `batch` (its index in `files` and its row as read), a file at a time on each of a
/// few threads (reading is most of a cold listing, and the files are independent), in `batch`'s order.
fn plan_all(
    files: &[FileToIndex<'_>],
    batch: Vec<(usize, Option<KnownRow>)>,
    with_text: bool,
    cancel: &Cancel,
) -> Vec<Planned> {
    let one = |(i, basis): (usize, Option<KnownRow>)| {
        let read_at = now_ns();
        let (version, row) = basis.map_or((None, None), |(v, r)| (Some(v), r));
        (i, version, read_at, plan(&files[i], row, with_text, cancel))
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, PLAN_THREADS);
    if threads == 1 || batch.len() < 2 {
        return batch.into_iter().map(one).collect();
    }
    let count = batch.len();
    let work = Mutex::new(batch.into_iter().enumerate());
    let mut planned: Vec<Option<Planned>> = (0..count).map(|_| None).collect();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads.min(count))
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        // (The lock is let go before the file is read.)
                        let next = lock(&work).next();
                        let Some((k, item)) = next else { return mine };
                        mine.push((k, one(item)));
                    }
                })
            })
            .collect();
        for worker in workers {
            // A panic goes on to the request, as it would have without the threads.
            for (k, p) in worker.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)) {
                planned[k] = Some(p);
            }
        }
    });
    planned.into_iter().flatten().collect()
}

/// One file's next row and listing entry, from its row as read (`known`, with its text) and the file's bytes
/// (read with no lock held): answered from the row, continued from where the row stopped, or read again from the
/// start.
/// The answer is None when the file could not be read (it vanished, or changed while read): the listing leaves it
/// out this time, and nothing remembers that. When the process is out of descriptors, the failure is noted on
/// `cancel` (the listing fails) and the row is kept.
fn plan(
    file: &FileToIndex<'_>,
    known: Option<Row>,
    with_text: bool,
    cancel: &Cancel,
) -> (Option<Option<SessionInfo>>, Write) {
    let meta = &file.stat;
    let finish = |state: &InfoState| Some(state.finish(&file.path, meta.mtime_ms(), with_text));
    if let Some(row) = known.as_ref().filter(|r| r.answers_unread(meta)) {
        return (finish(&row.state), Write::Keep);
    }
    let f = match store::open_regular(&file.path) {
        Ok(f) => f,
        Err(e) => {
            cancel.note_failure(&e);
            let exhausted = matches!(&e, crate::session::Error::Io { source, .. } if is_exhaustion(source));
            return (None, if exhausted { Write::Keep } else { Write::Forget });
        }
    };
    let indexed_at_ns = now_ns();
    if let Some(row) = known.as_ref().filter(|r| r.unchanged(meta) && r.complete() && row_continues(&f, r)) {
        // Racily clean, and its bytes say it is unchanged: clean from now on if the tick has passed.
        let write =
            if settled(row.stat.mtime_ns, indexed_at_ns) { Write::Settle { indexed_at_ns } } else { Write::Keep };
        return (finish(&row.state), write);
    }
    let len = meta.len;
    let (mut row, continued) = match known {
        // Grew (or only its unterminated last line changed): continue, unless it was rewritten.
        Some(r)
            if r.same_file(meta)
                && len >= r.offset
                && (len != r.stat.len || !r.complete())
                && row_continues(&f, &r) =>
        {
            (r, true)
        }
        _ => (Row::empty(meta), false),
    };
    let was_short = row.offset == 0 || row.stat.len <= HEADER_SCAN_LIMIT;
    // Complete lines are remembered; a final line without `\n` is counted for this answer only (it may be a write
    // in progress, and pi's listing reads it as a line).
    let complete_end = match last_newline(&f, row.offset, len, cancel) {
        Ok(nl) => nl.map_or(row.offset, |i| i + 1),
        Err(_) => return (None, Write::Keep),
    };
    if complete_end > row.offset {
        let state = &mut row.state;
        if feed_lines(&f, row.offset, complete_end, cancel, |line| state.feed(line, None)).is_err() {
            return (None, Write::Keep);
        }
        row.offset = complete_end;
        (row.head, row.tail) = identity::known_bytes(&f, complete_end);
    }
    if was_short {
        // What discovery finds depends only on the first MiB: recompute it while the file is shorter than that.
        row.bounded_header = read_header_bounded(&file.path);
    }
    row.stat = *meta;
    row.indexed_at_ns = indexed_at_ns;
    let answer = if complete_end < len {
        let mut answer = row.state.clone();
        if feed_lines(&f, complete_end, len, cancel, |line| answer.feed(line, None)).is_err() {
            return (None, Write::Keep);
        }
        finish(&answer)
    } else {
        finish(&row.state)
    };
    (answer, Write::Store { row: Box::new(row), continued })
}

/// An FTS5 query that is true for every text containing `needle` (case-insensitively): its trigrams, at most
/// [`TRIGRAMS_PER_NEEDLE`] of them spread over it. The index has no positions (`detail=none` keeps it small), so
/// this over-approximates; callers check the text.
fn trigram_query(needle: &str) -> String {
    let chars: Vec<char> = needle.chars().collect();
    let mut grams: Vec<String> = chars.windows(3).map(|w| w.iter().collect()).collect();
    grams.sort();
    grams.dedup();
    if grams.len() > TRIGRAMS_PER_NEEDLE {
        // Any subset still narrows correctly; an even spread keeps most of the selectivity.
        let step = grams.len() as f64 / TRIGRAMS_PER_NEEDLE as f64;
        grams = (0..TRIGRAMS_PER_NEEDLE).map(|k| grams[(k as f64 * step) as usize].clone()).collect();
    }
    let quoted: Vec<String> = grams.iter().map(|g| format!("\"{}\"", g.replace('"', "\"\""))).collect();
    format!("({})", quoted.join(" AND "))
}

/// The most trigrams of one needle in an FTS5 query: enough to narrow to a handful of entries, few enough that a
/// long word costs the index no more than a short one.
const TRIGRAMS_PER_NEEDLE: usize = 12;

/// The FTS5 query for entries holding every needle of three characters or more (None: no needle narrows).
fn all_of(needles: &[String]) -> Option<String> {
    let mut usable: Vec<String> = needles.iter().filter(|n| n.chars().count() >= 3).map(|n| trigram_query(n)).collect();
    usable.sort();
    usable.dedup();
    (!usable.is_empty()).then(|| usable.join(" AND "))
}

fn docs_matching(
    conn: &Connection,
    paths: &[String],
    needles: &[String],
    cancel: &Cancel,
) -> IndexResult<Vec<(String, Doc)>> {
    let mut out = fragment_docs(conn, paths, cancel)?;
    for_each_doc_matching(conn, paths, needles, cancel, &mut |path, doc| out.push((path.to_owned(), doc)))?;
    Ok(out)
}

/// Calls `visit` with each stored entry of `paths` that may hold one of `needles` (every entry when one is too
/// short for the trigrams), in no particular order; the unterminated last lines are not visited.
fn for_each_doc_matching(
    conn: &Connection,
    paths: &[String],
    needles: &[String],
    cancel: &Cancel,
    visit: &mut dyn FnMut(&str, Doc),
) -> IndexResult<()> {
    let usable = !needles.is_empty() && needles.iter().all(|n| n.chars().count() >= 3);
    let ids = file_ids(conn, paths)?;
    let mut push = |(file_id, entry_id, role, text, ts, id): DocRow| {
        if let Some(path) = ids.get(&file_id) {
            let (role, timestamp, order) = (role_name(&role), ts.unwrap_or(f64::NAN), id as u64);
            visit(path, Doc { entry_id, role, text, timestamp, order });
        }
    };
    let row = |r: &rusqlite::Row<'_>| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?));
    if usable {
        let mut any: Vec<String> = needles.iter().map(|n| trigram_query(n)).collect();
        any.sort();
        any.dedup();
        let mut stmt = conn.prepare_cached(
            "SELECT d.file_id, d.entry_id, d.role, d.text, d.ts, d.id FROM docs_fts f JOIN docs d ON d.id = f.rowid
             WHERE docs_fts MATCH ?1",
        )?;
        for r in stmt.query_map([any.join(" OR ")], row)? {
            check(cancel)?;
            push(r?);
        }
    } else {
        let wanted: HashSet<i64> = ids.keys().copied().collect();
        let mut stmt =
            conn.prepare_cached("SELECT file_id, entry_id, role, text, ts, id FROM docs WHERE file_id = ?1")?;
        for id in wanted {
            check(cancel)?;
            for r in stmt.query_map([id], row)? {
                push(r?);
            }
        }
    }
    Ok(())
}

/// A stored entry as read: file id, entry id, role, text, time, row id.
type DocRow = (i64, String, String, String, Option<f64>, i64);

/// The row ids of those of `paths` the index holds.
fn file_ids(conn: &Connection, paths: &[String]) -> IndexResult<HashMap<i64, String>> {
    let wanted: HashSet<&str> = paths.iter().map(String::as_str).collect();
    let mut stmt = conn.prepare_cached("SELECT id, path FROM files")?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))?;
    let mut out = HashMap::new();
    for row in rows {
        let (id, path) = row?;
        if wanted.contains(path.as_str()) {
            out.insert(id, path);
        }
    }
    Ok(out)
}

fn fragment_docs(conn: &Connection, paths: &[String], cancel: &Cancel) -> IndexResult<Vec<(String, Doc)>> {
    let wanted: HashSet<&str> = paths.iter().map(String::as_str).collect();
    let fragments: Vec<(String, u64, u64)> = {
        let mut stmt =
            conn.prepare_cached("SELECT path, offset, size FROM files WHERE size > offset AND rejected = 0")?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64, r.get::<_, i64>(2)? as u64)))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()?
            .into_iter()
            .filter(|(p, _, _)| wanted.contains(p.as_str()))
            .collect()
    };
    let mut out = Vec::new();
    for (path, offset, size) in fragments {
        check(cancel)?;
        let Ok(f) = store::open_regular(&path).inspect_err(|e| cancel.note_failure(e)) else { continue };
        let mut state = InfoState::default();
        if offset > 0 {
            state.header = Some(Json::Null);
        }
        let mut docs = Vec::new();
        if feed_lines(&f, offset, size, cancel, |line| state.feed(line, Some(&mut docs))).is_ok() && !state.rejected {
            // After every stored entry of the file, as the line is after every stored line.
            let after = |d: Doc| Doc { order: FRAGMENT_ORDER + d.order, ..d };
            out.extend(docs.into_iter().map(|d| (path.clone(), after(d))));
        }
    }
    check(cancel)?;
    Ok(out)
}

/// Where the entries of a file's unterminated last line are ordered: after any row id.
const FRAGMENT_ORDER: u64 = 1 << 62;

/// The static role name for a stored role.
fn role_name(role: &str) -> &'static str {
    const ROLES: [&str; 8] = ["user", "assistant", "toolResult", "custom", "bashExecution", "name", "label", "summary"];
    ROLES.iter().find(|r| **r == role).copied().unwrap_or("other")
}

/// One process's handle on the index: connections opened on first use (a host that never lists creates
/// nothing), one per request running at a time, kept for reuse; they share the process's memo of listing
/// entries. A request never waits for another request of its process to finish with the index.
pub struct SharedIndex {
    path: Option<String>,
    memory: Arc<ProcessMemory>,
    pool: Mutex<Pool>,
    written: Mutex<Written>,
}

/// Files this process wrote that the index has not caught up on yet.
#[derive(Default)]
struct Written {
    paths: HashSet<String>,
    /// Files a search read because the index held too little of their text.
    unindexed: Vec<String>,
    /// Someone is running [`SharedIndex::catch_up_written`] and will take new paths too.
    running: bool,
}

/// Idle connections, and why there are none to be had.
#[derive(Default)]
struct Pool {
    idle: Vec<Connection>,
    /// The file at the path is not ours: the process does without the index.
    refused: bool,
    /// The last reason an open failed (each new reason is logged once).
    last_failure: Option<String>,
}

/// Idle connections kept for reuse (more requests at once each open their own).
const IDLE_CONNECTIONS: usize = 4;

impl std::fmt::Debug for SharedIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedIndex").field("path", &self.path).finish()
    }
}

impl SharedIndex {
    /// An index at `path`, or none at all (every request reads the files).
    pub fn new(path: Option<String>) -> SharedIndex {
        SharedIndex { path, memory: Arc::default(), pool: Mutex::default(), written: Mutex::default() }
    }

    /// Notes that this process wrote `path`, so that a search finds what was just written even before anyone
    /// lists again (listings stat every file anyway). Returns true when the caller should now run
    /// [`SharedIndex::catch_up_written`] on a thread of its own (the engine starts none); false when there is no
    /// index or a catch-up already running will take `path` too, so a burst of writes costs one catch-up.
    pub fn note_written(&self, path: &str) -> bool {
        if self.path.is_none() {
            return false;
        }
        let mut written = lock(&self.written);
        written.paths.insert(path.to_owned());
        !std::mem::replace(&mut written.running, true)
    }

    /// Notes that a search read `paths` because the index did not hold their text yet (see
    /// [`crate::catalog::search::Searched`]). Returns true when the caller should now run
    /// [`SharedIndex::catch_up_written`] on a thread of its own, as [`SharedIndex::note_written`] does.
    pub fn note_unindexed(&self, paths: Vec<String>) -> bool {
        if self.path.is_none() || paths.is_empty() {
            return false;
        }
        let mut written = lock(&self.written);
        written.unindexed.extend(paths);
        !std::mem::replace(&mut written.running, true)
    }

    /// Brings the index up to date on every file noted by [`SharedIndex::note_written`] (only files the index
    /// follows: those of directories it has listed) and extracts the text of those noted by
    /// [`SharedIndex::note_unindexed`], until none is left. Blocks while it reads and writes.
    pub fn catch_up_written(&self) {
        loop {
            let (paths, mut unindexed) = {
                let mut written = lock(&self.written);
                if written.paths.is_empty() && written.unindexed.is_empty() {
                    written.running = false;
                    return;
                }
                (std::mem::take(&mut written.paths), std::mem::take(&mut written.unindexed))
            };
            unindexed.sort();
            unindexed.dedup();
            self.with(|ix| {
                let Some(ix) = ix else { return };
                for p in paths {
                    if let Err(e) = ix.refresh_known_file(&p, &Cancel::new()) {
                        tracing::warn!("catalog index: cannot follow {p}: {e}");
                    }
                }
                if let Err(e) = ix.catch_up_docs(&unindexed, &Cancel::new(), &mut |_, _| {}) {
                    tracing::warn!("catalog index: the searchable text was not stored ({e})");
                }
            });
        }
    }

    /// Runs `f` with a connection of its own to the index (opening one if none is idle), or with None when there
    /// is no index, the file at its path is not ours, or it cannot be opened now (a later request tries again).
    pub fn with<T>(&self, f: impl FnOnce(Option<&mut CatalogIndex>) -> T) -> T {
        let Some(path) = &self.path else { return f(None) };
        let idle = {
            let mut pool = lock(&self.pool);
            if pool.refused {
                drop(pool);
                return f(None);
            }
            pool.idle.pop()
        };
        let mut index = match idle {
            Some(conn) => Some(CatalogIndex { path: path.clone(), conn, memory: self.memory.clone(), refused: false }),
            None => match CatalogIndex::connect(path, self.memory.clone()) {
                Ok(ix) => Some(ix),
                Err(e) => {
                    self.note_failure(path, &e);
                    None
                }
            },
        };
        let out = f(index.as_mut());
        if let Some(ix) = index {
            let mut pool = lock(&self.pool);
            if ix.refused {
                if !pool.refused {
                    tracing::warn!("catalog index {path} is no longer ours; listing without it from now on");
                }
                pool.refused = true;
                pool.idle.clear();
            } else if pool.idle.len() < IDLE_CONNECTIONS {
                pool.idle.push(ix.conn);
            }
        }
        out
    }

    /// Says once why the index cannot be used; a file that is not ours is never tried again.
    fn note_failure(&self, path: &str, e: &IndexError) {
        let mut pool = lock(&self.pool);
        let reason = e.to_string();
        if pool.last_failure.as_deref() != Some(reason.as_str()) {
            match e {
                IndexError::Foreign { .. } => tracing::warn!("catalog index: {reason}; listing without it"),
                _ => tracing::warn!("catalog index {path} cannot be opened ({reason}); listing without it for now"),
            }
            pool.last_failure = Some(reason);
        }
        if matches!(e, IndexError::Foreign { .. }) {
            pool.refused = true;
        }
    }
}
