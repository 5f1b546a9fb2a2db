//! pi's reads of a session: entries, the tree, labels, the leaf, the branch, the context, with their bodies read
//! from the file only when they are output.

use super::*;

/// Lines from this long on are read around their long strings ([`SessionManager::line_around_long_strings`]).
pub const READ_AROUND_FROM: u64 = 64 << 10;

impl SessionManager {
    /// Entry bodies of this session.
    pub fn bodies(&self) -> impl Bodies + '_ {
        RecordBodies {
            records: &self.records,
            file: self.file.as_ref(),
            path: self.session_file.as_deref().unwrap_or("session file"),
            ahead: None,
        }
    }

    /// Record `i`'s line as it lies in the file, with each string the open found longer than
    /// [`LONG_STRING`](super::json::scan::LONG_STRING) bytes replaced by `fill`; with the line's offset. `None`
    /// when the record has no such strings or is not the file's line as read (migrated, re-chained, not written
    /// yet). A line of at least [`READ_AROUND_FROM`] bytes is read without those strings' bytes (a screenshot's
    /// base64 is never read); a shorter one is taken whole from `in_order` (bodies read in file order, through
    /// one large window), as one read per piece of every line of a text session cost more than its bytes.
    pub fn line_around_long_strings(
        &self,
        i: usize,
        fill: &[u8],
        in_order: &impl Bodies,
    ) -> Result<Option<(u64, Vec<u8>)>> {
        let r = &self.records[i];
        let (Some(holes), BodySource::File { offset, len }, None, Some(file)) =
            (&r.long_strings, &r.body.source, &r.body.patch, self.file.as_ref())
        else {
            return Ok(None);
        };
        let path = self.session_file.as_deref().unwrap_or("session file");
        let line = if *len < READ_AROUND_FROM {
            store::fill_holes(&in_order.bytes(i)?, holes, fill)
        } else {
            file.read_around(*offset, *len, holes, fill)
        };
        Ok(Some((*offset, line.map_err(|e| body_error(path, r, e))?)))
    }

    /// Entry bodies for a caller that reads many of them in file order (a snapshot, every entry): read through
    /// one large window ([`store::ReadAhead`]) rather than one read per line. Same bytes and checks as
    /// [`SessionManager::bodies`].
    pub fn bodies_in_order(&self) -> impl Bodies + '_ {
        RecordBodies {
            records: &self.records,
            file: self.file.as_ref(),
            path: self.session_file.as_deref().unwrap_or("session file"),
            ahead: Some(std::cell::RefCell::new(store::ReadAhead::new(self.file.as_ref()))),
        }
    }

    /// Every record (headers included), in file order.
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// The tree index.
    pub fn index(&self) -> &TreeIndex {
        &self.index
    }

    /// Warnings found while loading (malformed lines, torn tail, tree problems, legacy version).
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// How context is built for this session.
    pub fn set_context_options(&mut self, options: ContextOptions) {
        self.context_options = options;
    }

    /// `isPersisted()`.
    pub fn is_persisted(&self) -> bool {
        self.persist
    }

    /// `getCwd()`.
    pub fn cwd(&self) -> &str {
        &self.cwd
    }

    /// Makes `cwd` the session's working directory, as a later `open(path, dir, cwdOverride)` of the same file
    /// gives it (pi's instance made by that open has that cwd; the handle is shared).
    pub fn set_cwd(&mut self, cwd: &str) {
        cwd.clone_into(&mut self.cwd);
    }

    /// `getSessionDir()` (`""` in memory).
    pub fn session_dir(&self) -> &str {
        &self.session_dir
    }

    /// `getSessionId()` (a string unless an in-memory header said otherwise).
    pub fn session_id(&self) -> &Json {
        &self.session_id
    }

    /// `getSessionFile()`.
    pub fn session_file(&self) -> Option<&str> {
        self.session_file.as_deref()
    }

    /// True once the file holds this session (pi's `flushed`).
    pub fn is_flushed(&self) -> bool {
        self.flushed
    }

    /// `getLeafId()`.
    pub fn leaf_id(&self) -> &Key {
        &self.index.leaf
    }

    /// `getLeafEntry()`.
    pub fn leaf_entry(&self) -> Option<usize> {
        if self.index.leaf.truthy() {
            self.index.get(&self.records, &self.index.leaf)
        } else {
            None
        }
    }

    /// `getEntry(id)`.
    pub fn entry(&self, id: &Key) -> Option<usize> {
        self.index.get(&self.records, id)
    }

    /// `getChildren(parentId)`.
    pub fn children(&self, parent_id: &Key) -> Vec<usize> {
        self.index.children(&self.records, parent_id)
    }

    /// `getLabel(id)`.
    pub fn label(&self, id: &Key) -> Option<&Json> {
        self.index.label(id).map(|l| &l.label)
    }

    /// `getBranch(fromId?)`.
    pub fn branch_path(&self, from_id: Option<&Key>) -> Vec<usize> {
        self.index.branch(&self.records, from_id)
    }

    /// `getHeader()`: the first header record.
    pub fn header(&self) -> Option<usize> {
        self.records.iter().position(Record::is_header)
    }

    /// `getEntryCount()`: distinct ids.
    pub fn entry_count(&self) -> usize {
        self.index.len()
    }

    /// `getEntries()`: every non-header record, in file order (duplicates included).
    pub fn entries(&self) -> Vec<usize> {
        (0..self.records.len()).filter(|&i| !self.records[i].is_header()).collect()
    }

    /// `getTree()`.
    pub fn tree(&self) -> Tree {
        self.index.tree(&self.records)
    }

    /// `getSessionName()`: the latest `session_info` in file order, trimmed; empty clears. Fails where pi throws
    /// (a name that is not a string).
    pub fn session_name(&self) -> Result<Option<JsString>> {
        for r in self.records.iter().rev() {
            if r.kind == EntryType::SessionInfo {
                return session_info_name(r);
            }
        }
        Ok(None)
    }

    /// `buildContextEntries()`.
    pub fn build_context_entries(&self) -> Result<Vec<usize>> {
        context::context_entries(&self.records, &self.index, &self.bodies(), self.context_options)
    }

    /// `buildSessionProjection()` (and `buildSessionContext()`, which is its messages and settings).
    pub fn build_session_projection(&self) -> Result<Projection> {
        context::projection(&self.records, &self.index, &self.bodies(), self.context_options)
    }
}
