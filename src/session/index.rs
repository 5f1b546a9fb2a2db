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
//! Robustness: WAL mode and a busy timeout let several processes share the file, and writes take the lock up
//! front (`BEGIN IMMEDIATE`) so two writers queue instead of failing. An index that cannot be opened, is not a
//! database, is corrupt or has another schema version is deleted and rebuilt. Callers fall back to reading the
//! files directly on any other error: the index can make a request faster, never make it fail.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use rusqlite::{params, Connection, ErrorCode, OptionalExtension, TransactionBehavior};

use super::dirscan::{self, FileStat};
use super::info::{read_header_bounded, Doc, InfoState, ListedSession, ReadlineLines, SessionInfo, HEADER_SCAN_LIMIT};
use super::json::{JsString, Json};

/// Bumped whenever the schema or the meaning of what is stored changes: an index of another version is rebuilt.
const SCHEMA_VERSION: &str = "1";

/// How many bytes at the start of the file and before the indexed offset are kept to recognise a file that was
/// rewritten rather than appended to.
const CHECK_BYTES: u64 = 64;

/// The full-text index's in-memory term hash (see where it is set).
const FTS_HASH_BYTES: i64 = 64 * 1024 * 1024;

/// Files refreshed per write transaction: other processes sharing the index get a turn between batches.
const FILES_PER_TRANSACTION: usize = 256;

/// Index failures. The catalog treats every one of them as "answer without the index".
pub type IndexResult<T> = rusqlite::Result<T>;

/// The shared catalog index.
pub struct CatalogIndex {
    path: String,
    conn: Connection,
    /// This process's memo of listing entries, rendered, by path: valid while the file's stat is unchanged (and
    /// the memo is not racily clean), whatever other processes did to the database meanwhile, so a warm listing
    /// needs no database read and no serialisation at all. Entries keep `allMessagesText` while the memo's total
    /// of it stays under [`MEMO_TEXT_BUDGET`].
    memo: ListingMemo,
    /// Each listed directory's names in load order, as of its last change (see `load_order`).
    dir_names: HashMap<String, DirNames>,
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
    super::paths::join(&[agent_dir, "pi-sessiond", "index.sqlite"])
}

/// A file to bring up to date: its path, the directory it was listed from, and its `stat`.
#[derive(Debug)]
pub struct FileToIndex<'a> {
    /// The file's path, as the listing builds it (`<dir>/<name>`).
    pub path: String,
    /// The directory the listing enumerated.
    pub dir: &'a str,
    /// `stat` of the file.
    pub stat: FileStat,
}

/// What the index knows about one file.
#[derive(Clone, Debug)]
struct Row {
    id: i64,
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
    /// False when the row was read without `all_text` (a listing that does not return it); it is fetched
    /// before the row is continued or stored.
    text_loaded: bool,
}

/// A file modified this close to its indexing may have changed again within the same mtime tick without any
/// stat field changing (git's "racily clean" entries): its bytes are checked on the next use.
const RACY_WINDOW_NS: i64 = 2_000_000_000;

/// Whether something last modified at `mtime_ns` and read at `read_at_ns` was read clean: its mtime is outside the
/// racy window, so a later change will show in its `stat`.
fn settled(mtime_ns: i64, read_at_ns: i64) -> bool {
    mtime_ns <= read_at_ns - RACY_WINDOW_NS
}

fn listed(info: SessionInfo) -> Arc<ListedSession> {
    Arc::new(ListedSession::new(info))
}

fn now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
}

impl Row {
    fn empty(meta: &FileStat) -> Row {
        Row {
            id: 0,
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
}

/// SQLite turns NaN into NULL; the last-activity time can be NaN (and NaN sticks, as in `Math.max`), so it is
/// stored as its bit pattern.
fn f64_bits(v: Option<f64>) -> Option<i64> {
    v.map(|f| f.to_bits() as i64)
}

const SCHEMA: &str = "
    DROP TABLE IF EXISTS docs_fts; DROP TABLE IF EXISTS docs; DROP TABLE IF EXISTS texts; DROP TABLE IF EXISTS files;
    CREATE TABLE files(
      id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, dir TEXT NOT NULL,
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

impl CatalogIndex {
    /// Opens (or creates) the index at `path`, rebuilding it if it is not a usable index of this version.
    pub fn open(path: &str) -> IndexResult<CatalogIndex> {
        if let Some(dir) = Path::new(path).parent() {
            let _ = fs::create_dir_all(dir);
        }
        match Self::try_open(path) {
            Ok(index) => Ok(index),
            Err(e) => {
                tracing::warn!("catalog index {path} is unusable ({e}); rebuilding it");
                remove_database(path);
                Self::try_open(path)
            }
        }
    }

    fn try_open(path: &str) -> IndexResult<CatalogIndex> {
        let mut conn = Connection::open(path)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute_batch("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);")?;
        let version: Option<String> =
            tx.query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| r.get(0)).optional()?;
        if version.as_deref() != Some(SCHEMA_VERSION) {
            if let Some(v) = version {
                tracing::info!("catalog index {path} has schema {v}; rebuilding it as schema {SCHEMA_VERSION}");
            }
            tx.execute_batch(SCHEMA)?;
            // FTS5 flushes its in-memory term hash to a new segment whenever it outgrows `hashsize` (1 MiB by
            // default), and then merges segments: indexing a few hundred MB of sessions spends most of its time
            // there. A bigger hash makes fewer, larger segments.
            tx.execute("INSERT INTO docs_fts(docs_fts, rank) VALUES ('hashsize', ?1)", [FTS_HASH_BYTES])?;
            tx.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('schema', ?1)", [SCHEMA_VERSION])?;
        }
        tx.commit()?;
        Ok(CatalogIndex { path: path.to_owned(), conn, memo: ListingMemo::default(), dir_names: HashMap::new() })
    }

    /// The `*.jsonl` names of `dir` in pi's load order: those `read` gave when the directory last changed, while
    /// its `stat` is the same (a name added, removed or renamed changes the directory's mtime) and was not racily
    /// clean, else `read`'s answer now.
    pub fn load_order(&mut self, dir: &str, read: impl FnOnce() -> Option<Vec<String>>) -> Option<Arc<Vec<String>>> {
        // Stat before reading: a change while reading leaves the snapshot older than the directory, not newer.
        let stat = dirscan::stat(dir);
        if let (Some(st), Some(snap)) = (stat, self.dir_names.get(dir)) {
            if snap.stat == st && settled(st.mtime_ns, snap.read_at_ns) {
                return Some(snap.names.clone());
            }
        }
        let read_at_ns = now_ns();
        let names = Arc::new(read()?);
        match stat {
            Some(stat) => {
                self.dir_names.insert(dir.to_owned(), DirNames { stat, read_at_ns, names: names.clone() });
            }
            None => {
                self.dir_names.remove(dir);
            }
        }
        Some(names)
    }

    /// Runs `op`; if the database turns out to be damaged (not a database, corrupt), rebuilds it from nothing and
    /// runs `op` once more.
    fn with_recovery<T>(&mut self, mut op: impl FnMut(&mut Self) -> IndexResult<T>) -> IndexResult<T> {
        match op(self) {
            Err(e) if is_damage(&e) => {
                tracing::warn!("catalog index {} is damaged ({e}); rebuilding it", self.path);
                let path = self.path.clone();
                // Close our connection before deleting the files under it.
                let placeholder = Connection::open_in_memory()?;
                drop(std::mem::replace(&mut self.conn, placeholder));
                remove_database(&path);
                *self = Self::try_open(&path)?;
                op(self)
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
        on_progress: &mut dyn FnMut(usize, usize),
    ) -> IndexResult<Vec<Option<Arc<ListedSession>>>> {
        self.with_recovery(|index| index.refresh_inner(dirs, files, with_text, on_progress))
    }

    fn refresh_inner(
        &mut self,
        dirs: &[String],
        files: &[FileToIndex<'_>],
        with_text: bool,
        on_progress: &mut dyn FnMut(usize, usize),
    ) -> IndexResult<Vec<Option<Arc<ListedSession>>>> {
        let total = files.len();
        let mut done = 0;
        let mut out: Vec<Option<Arc<ListedSession>>> = vec![None; total];
        // 1. This process's memo.
        let mut pending = Vec::new();
        for (i, file) in files.iter().enumerate() {
            match self.memo.entries.get(&file.path).filter(|m| m.answers(&file.stat, with_text)) {
                Some(m) => {
                    out[i] = m.listed.clone();
                    done += 1;
                    on_progress(done, total);
                }
                None => pending.push(i),
            }
        }
        if pending.is_empty() {
            return Ok(out);
        }
        // 2. Rows of files unchanged since they were indexed: read, nothing written.
        let read_at = now_ns();
        let mut known: HashMap<String, Row> = HashMap::new();
        for dir in dirs {
            known.extend(rows_in(&self.conn, dir, with_text)?);
        }
        let present: HashSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
        let gone: Vec<(String, i64)> =
            known.iter().filter(|(p, _)| !present.contains(p.as_str())).map(|(p, r)| (p.clone(), r.id)).collect();
        let mut changed = Vec::new();
        for i in pending {
            let file = &files[i];
            match known.remove(&file.path) {
                Some(row) if row.unchanged(&file.stat) && row.complete() && !row.racy() => {
                    out[i] = row.state.finish(&file.path, file.stat.mtime_ms(), with_text).map(listed);
                    self.memo.remember(file, row.indexed_at_ns, &out[i]);
                    done += 1;
                    on_progress(done, total);
                }
                row => changed.push((i, row)),
            }
        }
        // 3. Files that changed (or are new): read what is new and write it down, a batch per transaction.
        let mut changed = changed.into_iter().peekable();
        while changed.peek().is_some() {
            let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            for (i, row) in changed.by_ref().take(FILES_PER_TRANSACTION) {
                let file = &files[i];
                out[i] = refresh_one(&tx, file, row, with_text)?.map(listed);
                self.memo.remember(file, read_at, &out[i]);
                done += 1;
                on_progress(done, total);
            }
            tx.commit()?;
        }
        // 4. Rows of files that are gone.
        if !gone.is_empty() {
            let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            for (path, id) in gone {
                forget(&tx, id)?;
                self.memo.forget(&path);
            }
            tx.commit()?;
        }
        Ok(out)
    }

    /// Brings one file up to date, listing and searchable text both (after a write through this process), if
    /// the index follows it: it has a row for the file or for another file of its directory.
    pub fn refresh_known_file(&mut self, path: &str) -> IndexResult<()> {
        let path = path.to_owned();
        self.with_recovery(|index| {
            let tx = index.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let dir = super::paths::parent_dir(&path);
            let known = row_of(&tx, &path, true)?;
            let dir_known =
                known.is_some() || tx.prepare_cached("SELECT 1 FROM files WHERE dir = ?1 LIMIT 1")?.exists([&dir])?;
            if !dir_known {
                return Ok(());
            }
            match dirscan::stat(&path) {
                Some(stat) => {
                    let file = FileToIndex { path: path.clone(), dir: &dir, stat };
                    refresh_one(&tx, &file, known, false)?;
                    if let Some(row) = row_of(&tx, &path, false)? {
                        catch_up_docs_of(&tx, &path, row)?;
                    }
                }
                None => {
                    if let Some(row) = known {
                        forget(&tx, row.id)?;
                    }
                }
            }
            tx.commit()
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
            rows.collect()
        })
    }

    /// Extracts the searchable text of `paths` up to what the listing indexed. `on_progress(done, total)` is
    /// called after each file.
    pub fn catch_up_docs(&mut self, paths: &[String], on_progress: &mut dyn FnMut(usize, usize)) -> IndexResult<()> {
        self.with_recovery(|index| {
            let wanted: HashSet<&str> = paths.iter().map(String::as_str).collect();
            let behind: Vec<String> = {
                let mut stmt = index.conn.prepare_cached("SELECT path FROM files WHERE docs_offset < offset")?;
                let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
                rows.collect::<IndexResult<Vec<_>>>()?.into_iter().filter(|p| wanted.contains(p.as_str())).collect()
            };
            let mut done = 0;
            for batch in behind.chunks(FILES_PER_TRANSACTION) {
                let tx = index.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                for path in batch {
                    if let Some(row) = row_of(&tx, path, false)? {
                        catch_up_docs_of(&tx, path, row)?;
                    }
                    done += 1;
                    on_progress(done, behind.len());
                }
                tx.commit()?;
            }
            Ok(())
        })
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
            let usable: Vec<String> =
                needles.iter().filter(|n| n.chars().count() >= 3).map(|n| trigram_query(n)).collect();
            let (sql, query) = if usable.is_empty() {
                (
                    "SELECT d.file_id, d.entry_id, d.role, d.text, d.ts FROM docs d INDEXED BY docs_ts
                  WHERE d.file_id IN temp.scope ORDER BY d.ts DESC",
                    None,
                )
            } else {
                (
                    "SELECT d.file_id, d.entry_id, d.role, d.text, d.ts FROM docs d INDEXED BY docs_ts
                  WHERE d.file_id IN temp.scope AND d.id IN (SELECT rowid FROM docs_fts WHERE docs_fts MATCH ?1)
                  ORDER BY d.ts DESC",
                    Some(usable.join(" AND ")),
                )
            };
            let mut stmt = index.conn.prepare_cached(sql)?;
            let mut rows = match &query {
                Some(q) => stmt.query([q])?,
                None => stmt.query([])?,
            };
            while let Some(r) = rows.next()? {
                let file_id: i64 = r.get(0)?;
                let Some(path) = ids.get(&file_id) else { continue };
                let role: String = r.get(2)?;
                let doc = Doc {
                    entry_id: r.get(1)?,
                    role: role_name(&role),
                    text: r.get(3)?,
                    timestamp: r.get::<_, Option<f64>>(4)?.unwrap_or(f64::NAN),
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
    pub fn fragment_docs(&mut self, paths: &[String]) -> IndexResult<Vec<(String, Doc)>> {
        self.with_recovery(|index| fragment_docs(&index.conn, paths))
    }

    /// The searchable entries of `paths` whose text may contain one of `needles` (case-insensitively; callers
    /// check the text themselves, the index only narrows). Every entry of `paths` when `needles` is empty or one
    /// of them is shorter than three characters (too short for the trigram index).
    pub fn docs(&mut self, paths: &[String], needles: &[String]) -> IndexResult<Vec<(String, Doc)>> {
        self.with_recovery(|index| docs_matching(&index.conn, paths, needles))
    }
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

fn is_damage(e: &rusqlite::Error) -> bool {
    matches!(e.sqlite_error_code(), Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase))
}

fn remove_database(path: &str) {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let _ = fs::remove_file(format!("{path}{suffix}"));
    }
}

const ROW_COLUMNS: &str =
    "id, path, size, mtime_ns, dev, ino, offset, head, tail, bounded_header, header, rejected, name,
    message_count, first_message, {text}, has_text, last_activity, docs_offset, indexed_at_ns";

/// The row columns, with the listing text joined in or left empty.
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
    })
}

fn read_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(String, Row)> {
    let json = |i: usize| -> rusqlite::Result<Option<Json>> {
        let text: Option<String> = r.get(i)?;
        Ok(text.and_then(|t| Json::parse(t.as_bytes()).ok()))
    };
    let name: Option<Vec<u8>> = r.get(12)?;
    Ok((
        r.get(1)?,
        Row {
            id: r.get(0)?,
            stat: stat_columns(r, 2)?,
            offset: r.get::<_, i64>(6)? as u64,
            head: r.get(7)?,
            tail: r.get(8)?,
            bounded_header: json(9)?,
            state: InfoState {
                header: json(10)?,
                rejected: r.get::<_, i64>(11)? != 0,
                name: name.map(JsString::from_wtf8),
                message_count: r.get::<_, i64>(13)? as u64,
                first_message: JsString::from_wtf8(r.get(14)?),
                all_text: JsString::from_wtf8(r.get::<_, Option<Vec<u8>>>(15)?.unwrap_or_default()),
                has_text: r.get::<_, i64>(16)? != 0,
                last_activity: r.get::<_, Option<i64>>(17)?.map(|b| f64::from_bits(b as u64)),
            },
            docs_offset: r.get::<_, i64>(18)? as u64,
            indexed_at_ns: r.get(19)?,
            text_loaded: true,
        },
    ))
}

fn rows_in(conn: &Connection, dir: &str, with_text: bool) -> IndexResult<HashMap<String, Row>> {
    let mut stmt = conn.prepare_cached(&format!("SELECT {} FROM files WHERE dir = ?1", row_columns(with_text)))?;
    let rows = stmt.query_map([dir], |r| {
        read_row(r).map(|(p, mut row)| {
            row.text_loaded = with_text;
            (p, row)
        })
    })?;
    rows.collect()
}

/// Fetches a row's `all_text` if it was read without it.
fn load_text(conn: &Connection, row: &mut Row) -> IndexResult<()> {
    if !row.text_loaded {
        let text: Vec<u8> =
            conn.prepare_cached("SELECT all_text FROM texts WHERE id = ?1")?.query_row([row.id], |r| r.get(0))?;
        row.state.all_text = JsString::from_wtf8(text);
        row.text_loaded = true;
    }
    Ok(())
}

fn row_of(conn: &Connection, path: &str, with_text: bool) -> IndexResult<Option<Row>> {
    let mut stmt = conn.prepare_cached(&format!("SELECT {} FROM files WHERE path = ?1", row_columns(with_text)))?;
    Ok(stmt.query_row([path], read_row).optional()?.map(|(_, mut row)| {
        row.text_loaded = with_text;
        row
    }))
}

fn store(conn: &Connection, file: &FileToIndex<'_>, row: &Row) -> IndexResult<i64> {
    let header = row.state.header.as_ref().map(Json::to_canonical_string);
    let bounded = row.bounded_header.as_ref().map(Json::to_canonical_string);
    let mut stmt = conn.prepare_cached(
        "INSERT INTO files(path, dir, size, mtime_ns, dev, ino, offset, head, tail, bounded_header, header, rejected,
           name, message_count, first_message, has_text, last_activity, docs_offset, indexed_at_ns)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)
         ON CONFLICT(path) DO UPDATE SET dir = excluded.dir, size = excluded.size, mtime_ns = excluded.mtime_ns,
           dev = excluded.dev, ino = excluded.ino, offset = excluded.offset, head = excluded.head,
           tail = excluded.tail, bounded_header = excluded.bounded_header, header = excluded.header,
           rejected = excluded.rejected, name = excluded.name, message_count = excluded.message_count,
           first_message = excluded.first_message, has_text = excluded.has_text,
           last_activity = excluded.last_activity, docs_offset = excluded.docs_offset,
           indexed_at_ns = excluded.indexed_at_ns
         RETURNING id",
    )?;
    let id: i64 = stmt.query_row(
        params![
            file.path,
            file.dir,
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
        ],
        |r| r.get(0),
    )?;
    debug_assert!(row.text_loaded, "a row is stored only with its text");
    conn.prepare_cached("INSERT OR REPLACE INTO texts(id, all_text) VALUES (?1, ?2)")?
        .execute(params![id, row.state.all_text.as_bytes()])?;
    Ok(id)
}

fn forget_docs(conn: &Connection, file_id: i64) -> IndexResult<()> {
    conn.prepare_cached("DELETE FROM docs_fts WHERE rowid IN (SELECT id FROM docs WHERE file_id = ?1)")?
        .execute([file_id])?;
    conn.prepare_cached("DELETE FROM docs WHERE file_id = ?1")?.execute([file_id])?;
    Ok(())
}

fn forget(conn: &Connection, file_id: i64) -> IndexResult<()> {
    forget_docs(conn, file_id)?;
    conn.prepare_cached("DELETE FROM texts WHERE id = ?1")?.execute([file_id])?;
    conn.prepare_cached("DELETE FROM files WHERE id = ?1")?.execute([file_id])?;
    Ok(())
}

/// The bytes of `file` in `[at, at + len)`, or None when they cannot all be read.
fn bytes_at(file: &File, at: u64, len: u64) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; len as usize];
    file.read_exact_at(&mut buf, at).ok()?;
    Some(buf)
}

/// True when the file still starts with the bytes indexed and has the indexed bytes just before the offset:
/// it was appended to, not rewritten.
fn continues(file: &File, row: &Row) -> bool {
    let head_ok = bytes_at(file, 0, row.head.len() as u64).is_some_and(|b| b == row.head);
    let tail_ok =
        bytes_at(file, row.offset - row.tail.len() as u64, row.tail.len() as u64).is_some_and(|b| b == row.tail);
    head_ok && tail_ok
}

/// Where the last `\n` of `file` lies in `[from, len)`, searching backwards.
fn last_newline(file: &File, from: u64, len: u64) -> std::io::Result<Option<u64>> {
    const CHUNK: u64 = 64 * 1024;
    let mut end = len;
    let mut buf = vec![0u8; CHUNK as usize];
    while end > from {
        let start = end.saturating_sub(CHUNK).max(from);
        let chunk = &mut buf[..(end - start) as usize];
        file.read_exact_at(chunk, start)?;
        if let Some(i) = memchr::memrchr(b'\n', chunk) {
            return Ok(Some(start + i as u64));
        }
        end = start;
    }
    Ok(None)
}

/// Feeds the lines of `file` in `[from, to)` (which ends at a line boundary) to `feed`, streaming.
fn feed_lines(file: &mut File, from: u64, to: u64, mut feed: impl FnMut(&[u8])) -> std::io::Result<()> {
    file.seek(SeekFrom::Start(from))?;
    let mut lines = ReadlineLines::new(BufReader::with_capacity(1 << 20, (&mut *file).take(to - from)));
    let mut buf = Vec::new();
    while lines.next_line(&mut buf)? {
        feed(&buf);
    }
    Ok(())
}

/// One file: answered from its row, continued from where the row stopped, or read again from the start.
fn refresh_one(
    conn: &Connection,
    file: &FileToIndex<'_>,
    known: Option<Row>,
    with_text: bool,
) -> IndexResult<Option<SessionInfo>> {
    let meta = &file.stat;
    if let Some(row) = &known {
        if row.unchanged(meta) && row.complete() && !row.racy() {
            return Ok(row.state.finish(&file.path, meta.mtime_ms(), with_text));
        }
    }
    let Ok(mut f) = File::open(&file.path) else {
        if let Some(row) = known {
            forget(conn, row.id)?;
        }
        return Ok(None);
    };
    let indexed_at_ns = now_ns();
    if let Some(row) = &known {
        if row.unchanged(meta) && row.complete() && continues(&f, row) {
            // Racily clean, and its bytes say it is unchanged: clean from now on if the tick has passed.
            if settled(row.stat.mtime_ns, indexed_at_ns) {
                conn.prepare_cached("UPDATE files SET indexed_at_ns = ?1 WHERE id = ?2")?
                    .execute(params![indexed_at_ns, row.id])?;
            }
            return Ok(row.state.finish(&file.path, meta.mtime_ms(), with_text));
        }
    }
    let len = meta.len;
    let mut row = match known {
        // Grew (or only its unterminated last line changed): continue, unless it was rewritten.
        Some(mut r)
            if r.same_file(meta) && len >= r.offset && (len != r.stat.len || !r.complete()) && continues(&f, &r) =>
        {
            load_text(conn, &mut r)?;
            r
        }
        Some(r) => {
            forget_docs(conn, r.id)?;
            Row { id: r.id, ..Row::empty(meta) }
        }
        None => Row::empty(meta),
    };
    let was_short = row.offset == 0 || row.stat.len <= HEADER_SCAN_LIMIT;
    // Complete lines are remembered; a final line without `\n` is counted for this answer only (it may be a write
    // in progress, and pi's listing reads it as a line).
    let complete_end = match last_newline(&f, row.offset, len) {
        Ok(nl) => nl.map_or(row.offset, |i| i + 1),
        Err(_) => return Ok(None),
    };
    if complete_end > row.offset {
        let state = &mut row.state;
        if feed_lines(&mut f, row.offset, complete_end, |line| state.feed(line, None)).is_err() {
            return Ok(None);
        }
        row.offset = complete_end;
        let tail_len = CHECK_BYTES.min(complete_end);
        row.tail = bytes_at(&f, complete_end - tail_len, tail_len).unwrap_or_default();
    }
    if row.head.len() < CHECK_BYTES as usize {
        row.head = bytes_at(&f, 0, CHECK_BYTES.min(row.offset)).unwrap_or_default();
    }
    if was_short {
        // What discovery finds depends only on the first MiB: recompute it while the file is shorter than that.
        row.bounded_header = read_header_bounded(&file.path);
    }
    row.stat = *meta;
    row.indexed_at_ns = indexed_at_ns;
    row.id = store(conn, file, &row)?;
    let mut answer = row.state.clone();
    if complete_end < len && feed_lines(&mut f, complete_end, len, |line| answer.feed(line, None)).is_err() {
        return Ok(None);
    }
    Ok(answer.finish(&file.path, meta.mtime_ms(), with_text))
}

/// Extracts and stores the searchable text of a file's lines between `docs_offset` and the listing's offset.
fn catch_up_docs_of(conn: &Connection, path: &str, row: Row) -> IndexResult<()> {
    if row.docs_offset >= row.offset || row.state.rejected {
        return Ok(());
    }
    let Ok(mut f) = File::open(path) else { return Ok(()) };
    // The state only tracks where the header is; past it, every line is an entry.
    let mut state = InfoState::default();
    if row.docs_offset > 0 {
        state.header = Some(Json::Null);
    }
    let mut docs = Vec::new();
    let mut insert =
        conn.prepare_cached("INSERT INTO docs(file_id, entry_id, role, ts, text) VALUES (?1, ?2, ?3, ?4, ?5)")?;
    let mut insert_fts = conn.prepare_cached("INSERT INTO docs_fts(rowid, text) VALUES (?1, ?2)")?;
    let mut failed = None;
    let read = feed_lines(&mut f, row.docs_offset, row.offset, |line| {
        state.feed(line, Some(&mut docs));
        for d in docs.drain(..) {
            let ts = d.timestamp.is_finite().then_some(d.timestamp);
            let result = insert
                .execute(params![row.id, d.entry_id, d.role, ts, d.text])
                .and_then(|_| insert_fts.execute(params![conn.last_insert_rowid(), d.text]));
            if let Err(e) = result {
                failed.get_or_insert(e);
            }
        }
    });
    if let Some(e) = failed {
        return Err(e);
    }
    if read.is_err() {
        // The file changed under us; the next listing notices and starts over.
        return Ok(());
    }
    conn.prepare_cached("UPDATE files SET docs_offset = offset WHERE id = ?1")?.execute([row.id])?;
    Ok(())
}

/// An FTS5 query that is true for every text containing `needle` (case-insensitively): all of its trigrams. The
/// index has no positions (`detail=none` keeps it small), so this over-approximates; callers check the text.
fn trigram_query(needle: &str) -> String {
    let chars: Vec<char> = needle.chars().collect();
    let mut grams: Vec<String> = chars.windows(3).map(|w| w.iter().collect()).collect();
    grams.sort();
    grams.dedup();
    let quoted: Vec<String> = grams.iter().map(|g| format!("\"{}\"", g.replace('"', "\"\""))).collect();
    format!("({})", quoted.join(" AND "))
}

fn docs_matching(conn: &Connection, paths: &[String], needles: &[String]) -> IndexResult<Vec<(String, Doc)>> {
    let usable = !needles.is_empty() && needles.iter().all(|n| n.chars().count() >= 3);
    let ids = file_ids(conn, paths)?;
    let mut out = fragment_docs(conn, paths)?;
    let mut push = |file_id: i64, entry_id: String, role: String, text: String, ts: Option<f64>| {
        if let Some(path) = ids.get(&file_id) {
            out.push((path.clone(), Doc { entry_id, role: role_name(&role), text, timestamp: ts.unwrap_or(f64::NAN) }));
        }
    };
    let row = |r: &rusqlite::Row<'_>| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?));
    if usable {
        let query = needles.iter().map(|n| trigram_query(n)).collect::<Vec<_>>().join(" OR ");
        let mut stmt = conn.prepare_cached(
            "SELECT d.file_id, d.entry_id, d.role, d.text, d.ts FROM docs_fts f JOIN docs d ON d.id = f.rowid
             WHERE docs_fts MATCH ?1",
        )?;
        for r in stmt.query_map([query], row)? {
            let (f, e, ro, t, ts) = r?;
            push(f, e, ro, t, ts);
        }
    } else {
        let wanted: HashSet<i64> = ids.keys().copied().collect();
        let mut stmt = conn.prepare_cached("SELECT file_id, entry_id, role, text, ts FROM docs WHERE file_id = ?1")?;
        for id in wanted {
            for r in stmt.query_map([id], row)? {
                let (f, e, ro, t, ts) = r?;
                push(f, e, ro, t, ts);
            }
        }
    }
    Ok(out)
}

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

fn fragment_docs(conn: &Connection, paths: &[String]) -> IndexResult<Vec<(String, Doc)>> {
    let wanted: HashSet<&str> = paths.iter().map(String::as_str).collect();
    let mut stmt = conn.prepare_cached("SELECT path, offset, size, rejected FROM files WHERE size > offset")?;
    let rows = stmt.query_map([], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64, r.get::<_, i64>(2)? as u64, r.get::<_, i64>(3)? != 0))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (path, offset, size, rejected) = row?;
        if rejected || !wanted.contains(path.as_str()) {
            continue;
        }
        let Ok(mut f) = File::open(&path) else { continue };
        let mut state = InfoState::default();
        if offset > 0 {
            state.header = Some(Json::Null);
        }
        let mut docs = Vec::new();
        if feed_lines(&mut f, offset, size, |line| state.feed(line, Some(&mut docs))).is_ok() && !state.rejected {
            out.extend(docs.into_iter().map(|d| (path.clone(), d)));
        }
    }
    Ok(out)
}

/// The static role name for a stored role.
fn role_name(role: &str) -> &'static str {
    const ROLES: [&str; 8] = ["user", "assistant", "toolResult", "custom", "bashExecution", "name", "label", "summary"];
    ROLES.iter().find(|r| **r == role).copied().unwrap_or("other")
}

/// One process's handle on the index: opened on first use (a host that never lists creates nothing), shared
/// between request threads, and kept current after this process's own writes.
#[derive(Debug)]
pub struct SharedIndex {
    path: Option<String>,
    slot: std::sync::Mutex<Slot>,
    pending: std::sync::Mutex<Pending>,
}

#[derive(Debug)]
enum Slot {
    Unopened,
    Open(Box<CatalogIndex>),
    Unavailable,
}

#[derive(Debug, Default)]
struct Pending {
    paths: HashSet<String>,
    worker: bool,
}

impl SharedIndex {
    /// An index at `path`, or none at all (every request reads the files).
    pub fn new(path: Option<String>) -> SharedIndex {
        SharedIndex { path, slot: std::sync::Mutex::new(Slot::Unopened), pending: Default::default() }
    }

    /// Runs `f` with the index (opening it if needed), or with None when there is none or it cannot be opened.
    /// Callers hold it for the whole request, so requests that use the index run one at a time per process.
    pub fn with<T>(&self, f: impl FnOnce(Option<&mut CatalogIndex>) -> T) -> T {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        if let (Slot::Unopened, Some(path)) = (&*slot, &self.path) {
            *slot = match CatalogIndex::open(path) {
                Ok(ix) => Slot::Open(Box::new(ix)),
                Err(e) => {
                    tracing::warn!("catalog index {path} cannot be opened ({e}); listing without it");
                    Slot::Unavailable
                }
            };
        }
        match &mut *slot {
            Slot::Open(ix) => f(Some(ix)),
            _ => f(None),
        }
    }

    /// Notes that this process wrote `path`: the index catches up on it in the background, so a search finds
    /// what was just written. Writes in a burst are coalesced. Only files the index already knows (or whose
    /// directory it knows) are followed: the index covers the directories that were listed.
    pub fn touch(self: &std::sync::Arc<Self>, path: &str) {
        if self.path.is_none() {
            return;
        }
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.paths.insert(path.to_owned());
        if pending.worker {
            return;
        }
        pending.worker = true;
        let this = self.clone();
        std::thread::spawn(move || loop {
            let paths = {
                let mut pending = this.pending.lock().unwrap_or_else(|e| e.into_inner());
                if pending.paths.is_empty() {
                    pending.worker = false;
                    return;
                }
                std::mem::take(&mut pending.paths)
            };
            this.with(|ix| {
                let Some(ix) = ix else { return };
                for p in paths {
                    if let Err(e) = ix.refresh_known_file(&p) {
                        tracing::warn!("catalog index: cannot follow {p}: {e}");
                    }
                }
            });
        });
    }
}
