//! Writing a piece's rows: entries copied in (through a temporary table where row-level security refuses COPY),
//! the session's row upserted with its text appended in the database, one transaction per piece.

use super::*;

/// Writes pieces, several files per transaction.
pub(super) struct Writer<'a> {
    pub(super) target: &'a Target,
    pub(super) machine: &'a str,
    pub(super) agent_dir: &'a str,
    pub(super) pending: Vec<Piece>,
    pub(super) pending_bytes: usize,
    pub(super) report: PushReport,
    /// Whether row-level security binds the role (asked at the first write).
    pub(super) row_security: Option<bool>,
}

impl Writer<'_> {
    pub(super) fn add(&mut self, client: &mut Client, found: &[Found], piece: Piece) -> DbResult<()> {
        self.pending_bytes += piece.entries.iter().map(|e| e.raw.len() + 1).sum::<usize>();
        let finishes = piece.finishes;
        self.pending.push(piece);
        // A piece that does not finish its file is committed at once: the next one continues from its row.
        if !finishes || self.pending_bytes >= BYTES_PER_TRANSACTION || self.pending.len() >= FILES_PER_TRANSACTION {
            self.flush(client, found)?;
        }
        Ok(())
    }

    pub(super) fn flush(&mut self, client: &mut Client, found: &[Found]) -> DbResult<()> {
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

pub(super) fn upsert_session(
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
