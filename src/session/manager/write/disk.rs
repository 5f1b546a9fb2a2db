//! Writing what was staged: the lines appended after whatever another writer appended (read at the moment of the
//! write), a new file written whole, a migrated one rewritten, and what the file holds adopted.

use super::*;

/// How long a write waits for a line another writer is in the middle of (pi writes each line with one `write()`;
/// a writer flushing piece by piece takes longer, and one still writing after this is refused).
const WAIT_FOR_ANOTHER_WRITERS_LINE: std::time::Duration = std::time::Duration::from_secs(2);

impl SessionManager {
    // ----------------------------------------------------------------------------------------------------------
    // Writing what was staged

    /// pi's `_hasConversation`: any message entry with a user or assistant message, on any branch.
    pub(super) fn has_conversation(&self) -> Result<bool> {
        for r in &self.records {
            if r.kind == EntryType::Message {
                if r.message.property_access_throws() {
                    return Err(Error::InvalidEntry {
                        line: r.line,
                        message: "message entry has no message object (pi 1.6.0 throws a TypeError here)".into(),
                    });
                }
                if r.is_conversation() {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Writes records `first..` (staged, in memory) to the file in one write, with the held-back load repairs,
    /// and returns the commit and where the staged records are now (after records another writer appended in
    /// between, if one did). On failure nothing was written (a partial write is cut back) and memory is
    /// untouched, so the caller unstages.
    pub(super) fn write_staged(&mut self, first: usize, changes: &mut Vec<Change>) -> Result<(Commit, Range<usize>)> {
        let staged = first..self.records.len();
        if !self.persist {
            return Ok((Commit::done(), staged));
        }
        let Some(path) = self.session_file.clone() else { return Ok((Commit::done(), staged)) };
        if !self.flushed {
            // pi's lazy first write: nothing reaches the disk before the session has a conversation.
            if !self.has_conversation()? {
                return Ok((Commit::done(), staged));
            }
            self.write_new_file(&path, self.records.len())?;
            self.flushed = true;
            return Ok((Commit::done(), staged));
        }
        if let Some(refused) = self.file.as_ref().and_then(SessionFile::refusal) {
            return Err(refused);
        }
        if self.file.as_ref().is_some_and(|f| f.is_detached()) {
            // A write would land in a file another program is writing, or has emptied.
            return Err(self.conflict(store::DETACHED, true));
        }
        let seen = self.last_seen.take();
        let state = match (&self.file, seen) {
            (None, _) => FileState::Missing,
            (Some(_), Some(seen)) => seen,
            (Some(file), None) => file.state()?,
        };
        let known = self.file.as_ref().map_or(0, SessionFile::len);
        // Bytes past what we know are looked at as they are now: the state above may come from a `stat` that
        // another writer has overtaken since (its size may even be below what following the file then read).
        let mut torn = None;
        match state {
            FileState::Same => {}
            FileState::Grew(_) => {
                let file = self.file.as_ref().expect("a grown file is present");
                // A line another writer is still writing is waited for, a while: refused, a host's entries (and
                // its user's prompt) would have to be written again once the line is done, which a host does
                // not always manage; waited for, the line ends as whole lines (a conflict every host handles:
                // continue after them) or is left unfinished (ended by our newline).
                let waiting_since = std::time::Instant::now();
                loop {
                    let beyond = file.beyond(known)?;
                    let whole_lines = beyond.end > known && beyond.unterminated != Some(known);
                    if beyond.end < known || whole_lines {
                        // Lines we have not read (or bytes gone): the caller's picture is stale; following the
                        // file at the next look brings them in.
                        return Err(self.conflict("another process changed the session file since it was read", true));
                    }
                    let Some(from) = beyond.unterminated else { break };
                    if !file.still_growing(beyond.end)? {
                        // A line another writer left unfinished: our newline ends it, so ours is never fused with it.
                        torn = Some((from, beyond.end - from));
                        break;
                    }
                    if waiting_since.elapsed() >= WAIT_FOR_ANOTHER_WRITERS_LINE {
                        return Err(self.conflict(
                            "another process is writing a line to the session file right now; nothing was written",
                            true,
                        ));
                    }
                }
            }
            FileState::Missing => {
                // The file was deleted while open (pi #8939): write it again, header and all, never a headerless
                // file.
                tracing::warn!("{path} was deleted while open; writing it again with its header");
                self.write_new_file(&path, self.records.len())?;
                return Ok((Commit::done(), staged));
            }
            _ => return Err(self.conflict("another process changed the session file since it was read", true)),
        }
        let empty = known == 0 && self.lines.is_empty();
        if self.pending.rewrite && !empty {
            // A migration rewrite: the staged records go into the same temporary file, so one rename makes
            // both the repair and the new entries durable, or neither.
            self.rewrite_file()?;
            return Ok((Commit::done(), staged));
        }
        // A 0-byte file gets its header here, written through the path as pi writes it (a symlink stays one).
        let write_from = if self.pending.rewrite { 0 } else { first };
        let mut lines = Vec::new();
        let mut lens = Vec::with_capacity(self.records.len() - write_from);
        for i in write_from..self.records.len() {
            let body = self.bodies().bytes(i)?;
            lens.push(body.len() as u64);
            lines.extend_from_slice(&body);
            lines.push(b'\n');
        }
        let newline_first = torn.is_some() || self.pending.final_newline;
        let (landed, lines_start) = self.append_lines(&lines, newline_first, known)?;
        self.pending = PendingRepairs::default();
        self.tail = None;
        let contiguous = match torn {
            None => landed.offset == known,
            Some((from, len)) => from == known && landed.offset == from + len,
        } && lines_start == landed.offset + u64::from(newline_first);
        if !contiguous {
            let ours = if lines_start < known {
                // The file was cut short under us: read it again; our lines are whole lines in it.
                self.reload_finding_ours(self.index.leaf.clone(), lines_start, lens.len(), changes)?
            } else {
                self.adopt_interleaved(write_from, known, lines_start, &lens, changes)?
            };
            let staged_count = staged.len();
            return Ok((landed.commit, ours.end - staged_count..ours.end));
        }
        if let Some((offset, len)) = torn {
            self.note_torn_fragment(offset, len);
        }
        let mut offset = lines_start;
        for (i, len) in (write_from..self.records.len()).zip(lens) {
            self.records[i].body = Body::file(offset, len);
            self.lines.push(LineSlot { offset, len, record: Some(i) });
            offset += len + 1;
        }
        Ok((landed.commit, staged))
    }

    /// Appends whole `lines` in one write (after a newline of our own when `newline_first`) and returns where the
    /// write landed and where the lines start. Appending is atomic against other appends, but not against a line
    /// another writer is in the middle of: if one ended where ours began (its writer flushes piece by piece), the
    /// first of ours was fused into it, so the lines are written again after a newline of our own, which no other
    /// write can come between. The fused copy is a line pi skips as malformed; the lines after it in that first
    /// write stay in the file too (pi reads them twice, the later copy winning, as it reads any repeated id).
    pub(super) fn append_lines(
        &mut self,
        lines: &[u8],
        newline_first: bool,
        known: u64,
    ) -> Result<(store::Landed, u64)> {
        let file = self.file.as_mut().expect("a file to append to");
        let mut bytes = Vec::with_capacity(lines.len() + 1);
        if newline_first {
            bytes.push(b'\n');
        }
        bytes.extend_from_slice(lines);
        let landed = file.append(&bytes)?;
        let lines_start = landed.offset + u64::from(newline_first);
        if newline_first || landed.offset == known || file.starts_a_line(landed.offset)? {
            return Ok((landed, lines_start));
        }
        tracing::warn!(
            "{}: another writer's unfinished line was in the file where our line landed; writing it again after it",
            file.path()
        );
        bytes.insert(0, b'\n');
        let again = file.append(&bytes)?;
        let lines_start = again.offset + 1;
        Ok((again, lines_start))
    }

    /// The file changed under a write in a way that following it cannot explain (cut short, or lines that could
    /// not be read): reads it again as an open would, and finds our `count` lines, written at `lines_start`.
    pub(super) fn reload_finding_ours(
        &mut self,
        leaf: Key,
        lines_start: u64,
        count: usize,
        changes: &mut Vec<Change>,
    ) -> Result<Range<usize>> {
        self.reload()?;
        changes.push(Change::Reloaded);
        let first = self.records.iter().position(|r| {
            matches!(r.body.source, crate::session::entry::BodySource::File { offset, .. } if offset == lines_start)
        });
        match first {
            Some(first) if first + count <= self.records.len() => {
                if !leaf.truthy() || self.index.contains(&self.records, &leaf) {
                    self.index.leaf = leaf;
                }
                Ok(first..first + count)
            }
            _ => {
                Err(self
                    .conflict("another process changed the session file while it was written; it was read again", true))
            }
        }
    }

    /// Another writer (one that takes no lock: pi) appended between our look at the file and our write, so our
    /// lines landed after its: its lines become records first (reported as external appends), then ours, in file
    /// order, as a fresh open would read them. Returns where records `write_from..` (ours) are now.
    pub(super) fn adopt_interleaved(
        &mut self,
        write_from: usize,
        known: u64,
        lines_start: u64,
        lens: &[u64],
        changes: &mut Vec<Change>,
    ) -> Result<Range<usize>> {
        let leaf = self.index.leaf.clone();
        let ours = self.records.split_off(write_from);
        for (i, r) in ours.iter().enumerate().rev() {
            if !r.is_header() {
                self.index.remove_newest(write_from + i, &r.id, Key::Null);
            }
        }
        let file = self.file.as_ref().expect("just written");
        let start = Start {
            offset: known,
            line: self.lines.len() as u32,
            seen_header: self.records.iter().any(Record::is_header),
            hold_back_partial: true,
            ..Start::default()
        };
        let foreign = match file.read_between(start, lines_start) {
            Ok(loaded) if loaded.len == lines_start => loaded,
            other => {
                // Their bytes before ours could not be read as whole lines: read the whole file again rather
                // than guess.
                tracing::warn!(
                    "{}: another writer's bytes before ours could not be read as whole lines ({:?}); reading the \
                     file again",
                    file.path(),
                    other.err()
                );
                return self.reload_finding_ours(leaf, lines_start, lens.len(), changes);
            }
        };
        let foreign_first = self.records.len();
        self.absorb(foreign);
        let theirs = foreign_first..self.records.len();
        if theirs.clone().any(|i| !self.records[i].is_header()) {
            changes.push(Change::Appended { records: theirs, origin: Origin::External });
        }
        let ours_first = self.records.len();
        let mut offset = lines_start;
        for (mut r, &len) in ours.into_iter().zip(lens) {
            let i = self.records.len();
            r.body = Body::file(offset, len);
            self.lines.push(LineSlot { offset, len, record: Some(i) });
            let entry = !r.is_header();
            self.records.push(r);
            if entry {
                self.index.add(&self.records, i);
            }
            offset += len + 1;
        }
        self.index.leaf = leaf;
        Ok(ours_first..self.records.len())
    }

    /// Adds lines read from the file after what is known (records, line slots, warnings, index, labels).
    pub(super) fn absorb(&mut self, loaded: LoadedFile) {
        let first_new = self.records.len();
        let LoadedFile { records, lines, warnings, .. } = loaded;
        for mut slot in lines {
            slot.record = slot.record.map(|r| r + first_new);
            self.lines.push(slot);
        }
        self.records.extend(records);
        self.warnings.extend(warnings);
        for i in first_new..self.records.len() {
            let r = &self.records[i];
            if !r.is_header() {
                self.index.add(&self.records, i);
                self.index.apply_label(r);
            }
        }
    }

    /// A fragment another writer left unterminated was ended with `\n` before our line: keep it as a torn line.
    pub(super) fn note_torn_fragment(&mut self, offset: u64, len: u64) {
        let line = self.lines.len() as u32 + 1;
        self.lines.push(LineSlot { offset, len, record: None });
        self.warnings.push(Warning {
            line,
            kind: WarningKind::TornTail,
            message: "another writer left this line incomplete; it is kept and ended, and later lines start fresh"
                .to_owned(),
        });
    }

    /// Every line to write for a file holding records `..upto`: the loaded layout (lines pi would drop
    /// included) followed by records added since.
    pub(super) fn layout(&self, upto: usize) -> Vec<LineSlot> {
        let mut slots: Vec<LineSlot> =
            self.lines.iter().filter(|s| s.record.is_none_or(|r| r < upto)).copied().collect();
        let covered: std::collections::HashSet<usize> = slots.iter().filter_map(|s| s.record).collect();
        slots.extend((0..upto).filter(|r| !covered.contains(r)).map(|r| LineSlot {
            offset: 0,
            len: 0,
            record: Some(r),
        }));
        slots
    }

    /// Writes `slots` (record bodies, or raw lines read from the current file) and returns where each landed.
    pub(super) fn write_layout(
        &self,
        slots: &[LineSlot],
        reader: BodyReader<'_>,
        w: &mut dyn std::io::Write,
    ) -> std::io::Result<Vec<LineSlot>> {
        let mut placed = Vec::with_capacity(slots.len());
        let mut offset = 0u64;
        for slot in slots {
            let bytes = match slot.record {
                Some(r) => trim_json_ws(&reader.body(&self.records[r].body)?).to_vec(),
                None => reader.raw(slot.offset, slot.len)?,
            };
            w.write_all(&bytes)?;
            w.write_all(b"\n")?;
            placed.push(LineSlot { offset, len: bytes.len() as u64, record: slot.record });
            offset += bytes.len() as u64 + 1;
        }
        Ok(placed)
    }

    /// Creates `path` exclusively with records `..upto` (the lazy first write, or a deleted file written again)
    /// and makes it this session's file.
    pub(super) fn write_new_file(&mut self, path: &str, upto: usize) -> Result<()> {
        let slots = self.layout(upto);
        let reader = self.file.as_ref().map_or(BodyReader::NONE, SessionFile::lines);
        let mut placed = Vec::new();
        let file = SessionFile::create_with(&self.env.disk, path, self.durability, |w| {
            placed = self.write_layout(&slots, reader, w)?;
            Ok(())
        })?;
        self.adopt_layout(placed);
        self.file = Some(file);
        self.tail = None;
        Ok(())
    }

    /// Rewrites the whole file (every record, staged ones included) through a temporary file renamed over it.
    pub(super) fn rewrite_file(&mut self) -> Result<()> {
        let slots = self.layout(self.records.len());
        let mut placed = Vec::new();
        // The rewrite reads the old file through its own handle while the new one is written.
        let mut file = self.file.take().expect("a file to rewrite");
        let result = file.replace(|reader, w| {
            placed = self.write_layout(&slots, reader, w)?;
            Ok(())
        });
        self.file = Some(file);
        result?;
        self.adopt_layout(placed);
        self.pending = PendingRepairs::default();
        self.tail = None;
        Ok(())
    }

    /// Points every record at its place in the file just written.
    pub(super) fn adopt_layout(&mut self, placed: Vec<LineSlot>) {
        for slot in &placed {
            if let Some(r) = slot.record {
                self.records[r].body = Body::file(slot.offset, slot.len);
            }
        }
        self.lines = placed;
    }

    /// Applies pi's held-back load-time repairs now. Called before the first write to an opened file; callers
    /// that want pi's eager behaviour (rewrite on open) may call it right after opening.
    pub fn apply_pending_repairs(&mut self) -> Result<()> {
        if !self.persist || self.file.is_none() || !(self.pending.rewrite || self.pending.final_newline) {
            return Ok(());
        }
        self.last_seen = None;
        let mut changes = Vec::new();
        let first = self.records.len();
        self.write_staged(first, &mut changes).map(|_| ())
    }

    /// The pending load-time repairs.
    pub fn pending_repairs(&self) -> super::PendingRepairs {
        self.pending
    }

    /// How hard writes try to reach the disk (default: like pi, no fsync).
    pub fn set_durability(&mut self, durability: Durability) {
        self.durability = durability;
        if let Some(f) = self.file.as_mut() {
            f.set_durability(durability);
        }
    }

    /// True once a failed fsync, a failed write that could not be cut back, or a rewrite whose rename could not
    /// be made durable poisoned the file: writes are refused until it is opened again.
    pub fn is_poisoned(&self) -> bool {
        self.file.as_ref().is_some_and(|f| f.refusal().is_some())
    }

    /// fsyncs writes that group commit ([`Durability::Batch`]) left pending (those of pi's method names, whose
    /// commits are not returned).
    pub fn sync(&mut self) -> Result<()> {
        match self.file.as_mut() {
            Some(f) => f.sync(),
            None => Ok(()),
        }
    }
}
