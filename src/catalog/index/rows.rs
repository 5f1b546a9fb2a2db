//! The `files` table's rows: their columns, decoding them (a row that does not decode is read again from its
//! file), storing one only where it is still the version it was read from, and forgetting one.

use super::*;

pub(super) const ROW_COLUMNS: &str =
    "id, path, CASE WHEN typeof(gen) = 'integer' THEN gen END, size, mtime_ns, ctime_ns, dev, ino,
    offset, head, tail, bounded_header, header, rejected, name, message_count, first_message, {text}, has_text,
    last_activity, docs_offset, indexed_at_ns";

/// The row columns, with the listing text joined in (NULL when it is missing) or left empty.
pub(super) fn row_columns(with_text: bool) -> String {
    let text = if with_text { "(SELECT all_text FROM texts WHERE texts.id = files.id)" } else { "X''" };
    ROW_COLUMNS.replace("{text}", text)
}

/// The stamp in the `size, mtime_ns, ctime_ns, dev, ino` columns starting at `first` (only regular files have
/// rows).
pub(super) fn stamp_columns(r: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<FileStamp> {
    Ok(FileStamp {
        size: r.get::<_, i64>(first)? as u64,
        mtime_ns: r.get(first + 1)?,
        ctime_ns: r.get(first + 2)?,
        dev: r.get::<_, i64>(first + 3)? as u64,
        ino: r.get::<_, i64>(first + 4)? as u64,
        regular: true,
    })
}

/// A row's path and version, and its contents when they decode and agree with each other.
pub(super) fn read_row(r: &rusqlite::Row<'_>, with_text: bool) -> rusqlite::Result<(String, (Version, Option<Row>))> {
    let version = Version { id: r.get(0)?, gen: r.get(2)? };
    Ok((r.get(1)?, (version, decode_row(r, with_text).filter(Row::consistent))))
}

pub(super) fn decode_row(r: &rusqlite::Row<'_>, with_text: bool) -> Option<Row> {
    let json = |i: usize| -> Option<Option<Json>> {
        match r.get::<_, Option<String>>(i).ok()? {
            None => Some(None),
            Some(t) => Json::parse(t.as_bytes()).ok().map(Some),
        }
    };
    let unsigned = |i: usize| -> Option<u64> { u64::try_from(r.get::<_, i64>(i).ok()?).ok() };
    Some(Row {
        stamp: stamp_columns(r, 3).ok()?,
        offset: unsigned(8)?,
        head: r.get(9).ok()?,
        tail: r.get(10).ok()?,
        bounded_header: json(11)?,
        state: InfoState {
            header: json(12)?,
            rejected: r.get::<_, i64>(13).ok()? != 0,
            name: r.get::<_, Option<Vec<u8>>>(14).ok()?.map(JsString::from_wtf8),
            message_count: unsigned(15)?,
            first_message: JsString::from_wtf8(r.get(16).ok()?),
            // A listing row without its text row is damaged: NULL does not decode.
            all_text: JsString::from_wtf8(r.get::<_, Vec<u8>>(17).ok()?),
            has_text: r.get::<_, i64>(18).ok()? != 0,
            last_activity: r.get::<_, Option<i64>>(19).ok()?.map(|b| f64::from_bits(b as u64)),
        },
        docs_offset: unsigned(20)?,
        indexed_at_ns: r.get(21).ok()?,
        text_loaded: with_text,
    })
}

pub(super) type KnownRow = (Version, Option<Row>);

pub(super) fn rows_in(conn: &Connection, dir: &str, with_text: bool) -> IndexResult<HashMap<String, KnownRow>> {
    let mut stmt = conn.prepare_cached(&format!("SELECT {} FROM files WHERE dir = ?1", row_columns(with_text)))?;
    let rows = stmt.query_map([dir], |r| read_row(r, with_text))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub(super) fn row_of(conn: &Connection, path: &str, with_text: bool) -> IndexResult<Option<KnownRow>> {
    let mut stmt = conn.prepare_cached(&format!("SELECT {} FROM files WHERE path = ?1", row_columns(with_text)))?;
    Ok(stmt.query_row([path], |r| read_row(r, with_text)).optional()?.map(|(_, known)| known))
}

/// `gen` as a version compares it: NULL for a damaged (non-integer) one. Followed by the parameter to compare
/// with.
pub(super) const GEN_IS: &str = "(CASE WHEN typeof(gen) = 'integer' THEN gen END) IS ";

/// Stores `row` for `file` with generation `gen`, if the file's row is still `basis` (None: there is none); false
/// when another process's row is there instead. A `continued` row (the file only grew since `basis`) keeps the
/// searchable text's offset the database has: text a search added since the row was read stays counted, since
/// adding text leaves the row's generation alone.
pub(super) fn store(
    conn: &Connection,
    file: &FileToIndex<'_>,
    row: &Row,
    gen: i64,
    basis: Option<Version>,
    continued: bool,
) -> IndexResult<bool> {
    debug_assert!(row.text_loaded, "a row is stored only with its text");
    let header = row.state.header.as_ref().map(Json::to_canonical_string);
    let bounded = row.bounded_header.as_ref().map(Json::to_canonical_string);
    let mut stmt = conn.prepare_cached(
        "INSERT INTO files(path, dir, gen, size, mtime_ns, ctime_ns, dev, ino, offset, head, tail, bounded_header,
           header, rejected, name, message_count, first_message, has_text, last_activity, docs_offset, indexed_at_ns)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)
         ON CONFLICT(path) DO UPDATE SET dir = excluded.dir, gen = excluded.gen, size = excluded.size,
           mtime_ns = excluded.mtime_ns, ctime_ns = excluded.ctime_ns, dev = excluded.dev, ino = excluded.ino,
           offset = excluded.offset,
           head = excluded.head, tail = excluded.tail, bounded_header = excluded.bounded_header,
           header = excluded.header, rejected = excluded.rejected, name = excluded.name,
           message_count = excluded.message_count, first_message = excluded.first_message,
           has_text = excluded.has_text, last_activity = excluded.last_activity,
           docs_offset = CASE WHEN ?24 THEN files.docs_offset ELSE excluded.docs_offset END,
           indexed_at_ns = excluded.indexed_at_ns
         WHERE ?22 AND (CASE WHEN typeof(files.gen) = 'integer' THEN files.gen END) IS ?23
         RETURNING id",
    )?;
    let stored: Option<i64> = stmt
        .query_row(
            params![
                file.path,
                file.dir,
                gen,
                row.stamp.size as i64,
                row.stamp.mtime_ns,
                row.stamp.ctime_ns,
                row.stamp.dev as i64,
                row.stamp.ino as i64,
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
                continued,
            ],
            |r| r.get(0),
        )
        .optional()?;
    let Some(id) = stored else { return Ok(false) };
    conn.prepare_cached("INSERT OR REPLACE INTO texts(id, all_text) VALUES (?1, ?2)")?
        .execute(params![id, row.state.all_text.as_bytes()])?;
    Ok(true)
}

pub(super) fn forget_docs(conn: &Connection, file_id: i64) -> IndexResult<()> {
    conn.prepare_cached("DELETE FROM docs_fts WHERE rowid IN (SELECT id FROM docs WHERE file_id = ?1)")?
        .execute([file_id])?;
    conn.prepare_cached("DELETE FROM docs WHERE file_id = ?1")?.execute([file_id])?;
    Ok(())
}

/// Drops the row (and its text and searchable text) if it is still `version`.
pub(super) fn forget_if(conn: &Connection, version: Version) -> IndexResult<bool> {
    let deleted = conn
        .prepare_cached(&format!("DELETE FROM files WHERE id = ?1 AND {GEN_IS}?2"))?
        .execute(params![version.id, version.gen])?;
    if deleted == 1 {
        forget_docs(conn, version.id)?;
        conn.prepare_cached("DELETE FROM texts WHERE id = ?1")?.execute([version.id])?;
    }
    Ok(deleted == 1)
}
