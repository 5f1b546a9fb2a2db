//! Following the file: another process's appends read as they land, and a file truncated, rewritten, replaced,
//! deleted or created since it was read noticed by its stamp and known bytes (`identity.rs`) and read again.

use super::*;

impl SessionManager {
    /// Follows the file as another process (pi itself) writes it: new complete lines become records, in file
    /// order, as a fresh open would read them (a line still being written is left for later). If the leaf was at
    /// the last entry it moves to the new last entry, as a fresh open would put it; a leaf the host moved
    /// elsewhere stays. A last line without its newline that already read as an entry and then grew into another
    /// line is [`Change::Reloaded`]: what was reported of it is no longer true.
    ///
    /// A file truncated, rewritten in place or replaced is read again as an open would read it ([`Change::Reloaded`])
    /// when it is still a session (a shorter one, another one). A session file that appears where this session had
    /// nothing on disk yet (a new session, an empty file) is read the same way. When the path no longer holds a
    /// session ([`Change::Deleted`]: removed, emptied, or holding something else), the session stays in memory:
    /// bodies are still read from the old file if it was deleted or renamed over (its descriptor is kept), and
    /// fail with an error naming the entry if its bytes were overwritten or truncated in place; a write to a
    /// deleted file puts the whole session back, a write over anything else is refused (it would land in a file
    /// another program is writing, or has emptied). Each later refresh looks again (without reading the path
    /// while it stays as it was) and reads it as soon as it is a session again; until then every refresh
    /// reports [`Change::Deleted`] (a host that mirrors the session reports it once).
    pub fn refresh(&mut self) -> Result<Option<Change>> {
        self.last_seen = None;
        if !self.persist {
            return Ok(None);
        }
        if !self.flushed {
            return self.follow_appearance();
        }
        let Some(file) = self.file.as_mut() else { return Ok(None) };
        if file.is_detached() {
            let path = self.session_file.as_deref().expect("a flushed session has a file");
            return match identity::FileStamp::of_path(path).map_err(|e| Error::io("stat", path, e))? {
                None => {
                    // Gone altogether now: a deleted session file, which the next write puts back.
                    file.reattach();
                    Ok(Some(Change::Deleted))
                }
                Some(now) if file.still_detached(&now) => Ok(Some(Change::Deleted)),
                Some(_) => self.reload(),
            };
        }
        let state = file.state()?;
        let change = match state {
            identity::FileState::Same => None,
            identity::FileState::Missing => Some(Change::Deleted),
            identity::FileState::Replaced | identity::FileState::Shrunk | identity::FileState::Rewritten => {
                return self.reload()
            }
            // Nothing of ours is in the file (it was empty when opened): what is there now is read from scratch.
            identity::FileState::Grew(_) if file.is_empty() => return self.reload(),
            identity::FileState::Grew(_) => self.follow_appends()?,
        };
        // What the write that may follow needs to know about the file (so it needs no `stat` of its own).
        self.last_seen = Some(state);
        Ok(change)
    }

    /// A new session that wrote nothing yet, watching its path: once another process writes a session there,
    /// it is read as an open would read it.
    pub(super) fn follow_appearance(&mut self) -> Result<Option<Change>> {
        let Some(path) = self.session_file.clone() else { return Ok(None) };
        let has_entries = self.records.iter().any(|r| !r.is_header());
        if has_entries || self.file.is_some() || !store::is_file(&path) {
            return Ok(None);
        }
        match SessionFile::open_on(&self.env.disk, &path, self.durability) {
            Ok((file, loaded)) if loaded.has_valid_header() => {
                self.lines.clear();
                self.pending = PendingRepairs::default();
                self.set_session_file_inner(&path, Some((file, loaded)))?;
                Ok(Some(Change::Reloaded))
            }
            // Not (yet) a session: pi may be in the middle of writing it.
            Ok(_) => Ok(None),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Reads the file again from scratch, as an open reads it (it was truncated, rewritten or replaced under us).
    pub(super) fn reload(&mut self) -> Result<Option<Change>> {
        let path = self.session_file.clone().expect("a flushed session has a file");
        // Taken before the stamp, so a change within the same clock tick cannot pass for none.
        let seen_at_ns = identity::now_ns();
        let Some(seen) = identity::FileStamp::of_path(&path).map_err(|e| Error::io("stat", &path, e))? else {
            return Ok(Some(Change::Deleted));
        };
        let opened = if store::is_file(&path) {
            Some(SessionFile::open_on(&self.env.disk, &path, self.durability))
        } else {
            None
        };
        let read_again = match opened {
            Some(Ok((file, loaded))) if loaded.has_valid_header() => {
                let pending = std::mem::take(&mut self.pending);
                let result = self.set_session_file_inner(&path, Some((file, loaded)));
                if result.is_err() {
                    self.pending = pending;
                }
                result
            }
            Some(Ok(_)) => Err(Error::InvalidSessionFile { path: path.clone() }),
            Some(Err(e)) => Err(e),
            None => Err(Error::InvalidSessionFile { path: path.clone() }),
        };
        match read_again {
            Ok(()) => Ok(Some(Change::Reloaded)),
            Err(e) if e.is_not_found() => Ok(Some(Change::Deleted)),
            // Reading failed for another reason than what is in the file: try again at the next refresh.
            Err(e @ Error::Io { op: "read", .. }) => Err(e),
            // Not a session: no header, not a regular file, unreadable, or a legacy file pi cannot migrate.
            Err(e) => {
                // Said once: while a file's stamp is too fresh to vouch for it, each refresh reads it again.
                if self.is_detached() {
                    tracing::debug!("{path} is still not a pi session ({e})");
                } else {
                    tracing::warn!("{path} is no longer a pi session ({e}); the handle keeps what it read");
                }
                if let Some(f) = self.file.as_mut() {
                    // Still the inode we read, yet no longer a session: our bytes were overwritten in place.
                    let in_place = f.is_file(&seen);
                    f.detach(seen, seen_at_ns, in_place);
                }
                Ok(Some(Change::Deleted))
            }
        }
    }

    /// True when the path held something that is not this session when it was last followed.
    pub fn is_detached(&self) -> bool {
        self.file.as_ref().is_some_and(|f| f.is_detached())
    }

    pub(super) fn follow_appends(&mut self) -> Result<Option<Change>> {
        let file = self.file.as_ref().expect("checked");
        let tail = self.tail;
        let start = store::Start {
            offset: tail.map_or(file.len(), |t| t.offset),
            line: tail.map_or(self.lines.len(), |t| t.lines) as u32,
            seen_header: self.records.iter().any(Record::is_header),
            hold_back_partial: true,
            ..store::Start::default()
        };
        let loaded = file.read_from(start)?;
        if loaded.lines.is_empty() {
            return Ok(None);
        }
        let old_leaf = self.index.leaf.clone();
        let last_entry = self.records.iter().rposition(|r| !r.is_header());
        let following = match last_entry {
            Some(i) => self.records[i].id == old_leaf,
            None => old_leaf == Key::Null,
        };
        // The unterminated line read at open is read again now that it is complete; if it already was a whole
        // entry, it is not new.
        let mut already_known = 0;
        let mut replaced = false;
        if let Some(t) = tail {
            let was_entry = t.records < self.records.len();
            let same = was_entry
                && loaded.records.first().is_some_and(|n| {
                    let span = source_span(&n.body.source);
                    span.is_some() && span == source_span(&self.records[t.records].body.source)
                });
            if same {
                already_known = 1;
            }
            // The entry read from the unfinished line is not what the line became: a mirror told of it must
            // read the session again, not add to it.
            replaced = was_entry && !same;
            self.records.truncate(t.records);
            self.lines.truncate(t.lines);
            self.warnings.retain(|w| w.line <= t.lines as u32);
            self.tail = None;
        }
        let first_new = self.records.len();
        let LoadedFile { records, lines, warnings, len, .. } = loaded;
        for mut slot in lines {
            slot.record = slot.record.map(|r| r + first_new);
            self.lines.push(slot);
        }
        self.records.extend(records);
        self.warnings.extend(warnings);
        self.file.as_mut().expect("checked").set_len(len);
        self.pending.final_newline = false;
        if tail.is_some() {
            self.index = TreeIndex::build(&self.records);
        } else {
            for i in first_new..self.records.len() {
                let r = &self.records[i];
                if !r.is_header() {
                    self.index.add(&self.records, i);
                    self.index.apply_label(r);
                }
            }
        }
        if !following {
            self.index.leaf = old_leaf;
        }
        if replaced {
            return Ok(Some(Change::Reloaded));
        }
        let records = first_new + already_known..self.records.len();
        Ok(records
            .clone()
            .any(|i| !self.records[i].is_header())
            .then_some(Change::Appended { records, origin: Origin::External }))
    }
}
