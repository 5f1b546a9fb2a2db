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
}

/// The searchable text of a file's lines in `[from, to)`, to be stored.
pub(super) struct DocsChunk {
    pub(super) version: Version,
    pub(super) from: u64,
    pub(super) to: u64,
    pub(super) docs: Vec<Doc>,
}

pub(super) const SCAN_CHUNK: u64 = 64 * 1024;

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
pub(super) fn first_newline(file: &File, from: u64, to: u64, cancel: &Cancel) -> std::io::Result<Option<u64>> {
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
pub(super) fn chunk_end(file: &File, from: u64, limit: u64, cancel: &Cancel) -> Option<u64> {
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
    file: &File,
    from: u64,
    to: u64,
    cancel: &Cancel,
    mut feed: impl FnMut(&[u8]),
) -> std::io::Result<()> {
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
pub(super) fn extract_docs(file: &File, from: u64, to: u64, cancel: &Cancel) -> Option<Vec<Doc>> {
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

pub(super) fn fragment_docs(conn: &Connection, paths: &[String], cancel: &Cancel) -> IndexResult<Vec<(String, Doc)>> {
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
pub(super) const FRAGMENT_ORDER: u64 = 1 << 62;

/// The static role name for a stored role.
pub(super) fn role_name(role: &str) -> &'static str {
    const ROLES: [&str; 8] = ["user", "assistant", "toolResult", "custom", "bashExecution", "name", "label", "summary"];
    ROLES.iter().find(|r| **r == role).copied().unwrap_or("other")
}
