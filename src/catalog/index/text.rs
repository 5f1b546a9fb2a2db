//! The searchable text: extracting it from a session file's complete lines in chunks, and finding entries that
//! may hold words through FTS5's trigrams (and the unterminated last lines the index does not hold).

use super::*;

/// A file whose searchable text is behind its listing, as read.
pub(super) struct Behind {
    pub(super) version: Version,
    pub(super) path: String,
    pub(super) docs_offset: u64,
    pub(super) offset: u64,
    pub(super) head: Vec<u8>,
    pub(super) tail: Vec<u8>,
    pub(super) stamp: FileStamp,
    pub(super) indexed_at_ns: i64,
}

impl Behind {
    /// Whether the file (`f`, open at the row's path) still holds every line the listing indexed: as `identity`
    /// judges it against the row, the same or grown.
    fn still_indexed(&self, f: &DiskFile) -> bool {
        let Ok(meta) = f.metadata() else { return false };
        let known = Known {
            stamp: &self.stamp,
            len: self.offset,
            head: &self.head,
            tail: &self.tail,
            observed_at_ns: self.indexed_at_ns,
        };
        matches!(known.judge(&FileStamp::of(&meta), f.file()), FileState::Same | FileState::Grew(_))
    }
}

/// The searchable text of a file's lines in `[from, to)`, to be stored.
pub(super) struct DocsChunk {
    pub(super) version: Version,
    pub(super) from: u64,
    pub(super) to: u64,
    pub(super) docs: Vec<Doc>,
}

pub(super) const SCAN_CHUNK: u64 = 64 * 1024;

/// A file read at offsets: a session file through the index's [`Disk`], or a plain `File` (the team push reads
/// its files outside the seam). Generic rather than `dyn`, so the real disk stays a plain call.
pub(crate) trait ReadExactAt {
    /// Fills `buf` from `offset`; a file that ends first is `UnexpectedEof`.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()>;
}

impl ReadExactAt for File {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        FileExt::read_exact_at(self, buf, offset)
    }
}

impl ReadExactAt for DiskFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        DiskFile::read_exact_at(self, buf, offset)
    }
}

/// Where the last `\n` of `file` lies in `[from, to)`, searching backwards (an error once cancelled).
pub(crate) fn last_newline(
    file: &impl ReadExactAt,
    from: u64,
    to: u64,
    cancel: &Cancel,
) -> std::io::Result<Option<u64>> {
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
pub(super) fn first_newline(file: &DiskFile, from: u64, to: u64, cancel: &Cancel) -> std::io::Result<Option<u64>> {
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
pub(super) fn chunk_end(file: &DiskFile, from: u64, limit: u64, cancel: &Cancel) -> Option<u64> {
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
pub(super) fn feed_lines(
    file: &DiskFile,
    from: u64,
    to: u64,
    cancel: &Cancel,
    mut feed: impl FnMut(&[u8]),
) -> std::io::Result<()> {
    let reader = file.reader_at(from).take(to - from);
    let mut lines = ReadlineLines::new(cancel.reader(BufReader::with_capacity(1 << 20, reader)));
    let mut buf = Vec::new();
    while lines.next_line(&mut buf)? {
        feed(&buf);
    }
    Ok(())
}

/// The searchable entries of the lines of `file` in `[from, to)`; None when it cannot be read.
pub(super) fn extract_docs(file: &DiskFile, from: u64, to: u64, cancel: &Cancel) -> Option<Vec<Doc>> {
    // The state only tracks where the header is; past it, every line is an entry.
    let mut state = InfoState::default();
    if from > 0 {
        state.header = Some(Json::Null);
    }
    let mut docs = Vec::new();
    feed_lines(file, from, to, cancel, |line| state.feed(line, Some(&mut docs))).ok()?;
    Some(docs)
}

/// An FTS5 query that is true for every text containing `needle` (case-insensitively): its trigrams, at most
/// [`TRIGRAMS_PER_NEEDLE`] of them spread over it. The index has no positions (`detail=none` keeps it small), so
/// this over-approximates; callers check the text.
pub(super) fn trigram_query(needle: &str) -> String {
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
pub(super) const TRIGRAMS_PER_NEEDLE: usize = 12;

/// The FTS5 query for entries holding every needle of three characters or more (None: no needle narrows).
pub(super) fn all_of(needles: &[String]) -> Option<String> {
    let mut usable: Vec<String> = needles.iter().filter(|n| n.chars().count() >= 3).map(|n| trigram_query(n)).collect();
    usable.sort();
    usable.dedup();
    (!usable.is_empty()).then(|| usable.join(" AND "))
}

pub(super) fn docs_matching(
    conn: &Connection,
    disk: &Arc<dyn Disk>,
    paths: &[String],
    needles: &[String],
    cancel: &Cancel,
) -> IndexResult<Vec<(String, Doc)>> {
    let mut out = fragment_docs(conn, disk, paths, cancel)?;
    for_each_doc_matching(conn, paths, needles, cancel, &mut |path, doc| out.push((path.to_owned(), doc)))?;
    Ok(out)
}

/// Calls `visit` with each stored entry of `paths` that may hold one of `needles` (every entry when one is too
/// short for the trigrams), in no particular order; the unterminated last lines are not visited.
pub(super) fn for_each_doc_matching(
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
pub(super) type DocRow = (i64, String, String, String, Option<f64>, i64);

/// The row ids of those of `paths` the index holds.
pub(super) fn file_ids(conn: &Connection, paths: &[String]) -> IndexResult<HashMap<i64, String>> {
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

pub(super) fn fragment_docs(
    conn: &Connection,
    disk: &Arc<dyn Disk>,
    paths: &[String],
    cancel: &Cancel,
) -> IndexResult<Vec<(String, Doc)>> {
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
        let Ok(f) = store::open_regular_on(disk, &path).inspect_err(|e| cancel.note_failure(e)) else { continue };
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
pub(super) const FRAGMENT_ORDER: u64 = 1 << 62;

/// The static role name for a stored role.
pub(super) fn role_name(role: &str) -> &'static str {
    const ROLES: [&str; 8] = ["user", "assistant", "toolResult", "custom", "bashExecution", "name", "label", "summary"];
    ROLES.iter().find(|r| **r == role).copied().unwrap_or("other")
}

/// The searchable text as a connection reads and writes it.
impl CatalogIndex {
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

    pub(super) fn catch_up_docs_inner(
        &mut self,
        paths: &[String],
        cancel: &Cancel,
        on_progress: &mut dyn FnMut(usize, usize),
    ) -> IndexResult<()> {
        let wanted: HashSet<&str> = paths.iter().map(String::as_str).collect();
        let behind: Vec<Behind> = {
            let mut stmt = self.conn.prepare_cached(
                "SELECT id, CASE WHEN typeof(gen) = 'integer' THEN gen END, path, docs_offset, offset, head, tail,
                   size, mtime_ns, ctime_ns, dev, ino, indexed_at_ns
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
                    stamp: stamp_columns(r, 7)?,
                    indexed_at_ns: r.get(12)?,
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
        for (k, file) in behind.into_iter().enumerate() {
            let Ok(f) = store::open_regular_on(&self.disk, &file.path).inspect_err(|e| cancel.note_failure(e)) else {
                on_progress(k + 1, total);
                continue;
            };
            let mut from = file.docs_offset;
            while from < file.offset {
                check(cancel)?;
                let Some(to) = chunk_end(&f, from, file.offset, cancel) else { break };
                let Some(docs) = extract_docs(&f, from, to, cancel) else { break };
                check(cancel)?;
                if !file.still_indexed(&f) {
                    // Rewritten or replaced since it was indexed: the next listing starts it over.
                    break;
                }
                batch_bytes += to - from;
                batch.push(DocsChunk { version: file.version, from, to, docs });
                from = to;
                if from < file.offset || batch_bytes >= DOCS_CHUNK_BYTES || batch.len() >= FILES_PER_TRANSACTION {
                    let applied = self.write_docs(&mut batch)?;
                    batch_bytes = 0;
                    if !applied.last().copied().unwrap_or(false) {
                        break;
                    }
                }
            }
            on_progress(k + 1, total);
        }
        self.write_docs(&mut batch)?;
        Ok(())
    }

    /// Stores the chunks' searchable text in one transaction, each only if its row is still the version it was
    /// read from and its text still ends where the chunk starts. Returns which chunks were stored. The row's
    /// generation stays: its listing did not change (see the module's doc in `mod.rs`).
    fn write_docs(&mut self, batch: &mut Vec<DocsChunk>) -> IndexResult<Vec<bool>> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut applied = Vec::with_capacity(batch.len());
        {
            let mut now = tx.prepare_cached(
                "SELECT CASE WHEN typeof(gen) = 'integer' THEN gen END, docs_offset FROM files WHERE id = ?1",
            )?;
            let mut insert =
                tx.prepare_cached("INSERT INTO docs(file_id, entry_id, role, ts, text) VALUES (?1, ?2, ?3, ?4, ?5)")?;
            let mut insert_fts = tx.prepare_cached("INSERT INTO docs_fts(rowid, text) VALUES (?1, ?2)")?;
            let mut advance = tx.prepare_cached("UPDATE files SET docs_offset = ?1 WHERE id = ?2")?;
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
                    advance.execute(params![chunk.to as i64, id])?;
                }
                applied.push(ok);
            }
        }
        tx.commit()?;
        batch.clear();
        Ok(applied)
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
        self.with_recovery(|index| fragment_docs(&index.conn, &index.disk, paths, cancel))
    }

    /// The searchable entries of `paths` whose text may contain one of `needles` (case-insensitively; callers
    /// check the text themselves, the index only narrows). Every entry of `paths` when `needles` is empty or one
    /// of them is shorter than three characters (too short for the trigram index).
    pub fn docs(&mut self, paths: &[String], needles: &[String], cancel: &Cancel) -> IndexResult<Vec<(String, Doc)>> {
        self.with_recovery(|index| docs_matching(&index.conn, &index.disk, paths, needles, cancel))
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
