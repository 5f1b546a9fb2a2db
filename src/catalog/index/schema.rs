//! The index's SQLite file: its schema, how a database is known as ours (or refused as someone else's), WAL,
//! a damaged one of ours reset in place, and the generation counter every write draws from.

use super::*;

/// The usage memo (`catalog::usage`): per session file, the usage objects pi counts in it, valid while the file's
/// stamp is the one stored. Not part of the schema version: a row whose stamp no longer matches is counted again.
pub(super) const USAGE_MEMO_TABLE: &str =
    "CREATE TABLE IF NOT EXISTS usage_memo(path TEXT PRIMARY KEY, stamp TEXT NOT NULL, counted BLOB NOT NULL);";

/// The tables of schema 1 (which had no marker): such an index is ours and is rebuilt.
pub(super) const LEGACY_TABLES: [&str; 5] = ["meta", "files", "texts", "docs", "docs_fts"];

pub(super) const SCHEMA: &str = "
    DROP TABLE IF EXISTS docs_fts; DROP TABLE IF EXISTS docs; DROP TABLE IF EXISTS texts; DROP TABLE IF EXISTS files;
    DROP TABLE IF EXISTS meta;
    DELETE FROM pi_sessiond_catalog;
    CREATE TABLE files(
      id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, dir TEXT NOT NULL, gen INTEGER NOT NULL,
      size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, ctime_ns INTEGER NOT NULL, dev INTEGER NOT NULL,
      ino INTEGER NOT NULL,
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
pub(super) enum Found {
    /// Ours, with this schema version (None: the marker table or its version is missing).
    Ours(Option<i64>),
    /// Schema 1 of ours, from before the marker.
    Legacy,
    /// Nothing at all: a new or empty file.
    Empty,
    /// Something else, described.
    Foreign(String),
}

/// Reads what the database at `conn` is, without writing anything. Run inside a transaction: its facts (the
/// header's application id, the tables) must come from one snapshot, or another process's claim committed between
/// two reads shows our tables without our id, which reads as someone else's database.
pub(super) fn inspect(conn: &rusqlite::Transaction<'_>) -> rusqlite::Result<Found> {
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
pub(super) fn claim(conn: &mut Connection, path: &str) -> IndexResult<()> {
    let found = {
        let snapshot = conn.transaction_with_behavior(TransactionBehavior::Deferred)?;
        inspect(&snapshot)?
    };
    match found {
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
pub(super) fn use_wal(conn: &Connection) -> IndexResult<()> {
    let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        conn.pragma_update(None, "journal_mode", "WAL")?;
    }
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    Ok(())
}

/// Whether a file SQLite cannot read as a database is a damaged index of ours: its header still carries our
/// application id, or its first pages (or its write-ahead log's) still hold our marker table's definition.
pub(super) fn damaged_file_is_ours(path: &str) -> bool {
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
pub(super) fn reset_in_place(conn: &Connection) -> IndexResult<()> {
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_RESET_DATABASE, true)?;
    let vacuumed = conn.execute_batch("VACUUM");
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_RESET_DATABASE, false)?;
    Ok(vacuumed?)
}

/// Opens the database at `path` if it is ours (creating it when there is none, resetting it when it is ours and
/// damaged); refuses anything else without writing to it.
pub(super) fn open_ours(path: &str) -> IndexResult<Connection> {
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
pub(super) fn next_generation(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached(
        "UPDATE pi_sessiond_catalog SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation' RETURNING value",
    )?
    .query_row([], |r| r.get(0))
}
