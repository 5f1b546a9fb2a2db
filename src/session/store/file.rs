//! [`SessionFile`]: one open session file: following it, appending (with the append intent beside it),
//! creating, replacing, its lock, and what a write that failed half-way leaves.

use super::*;

/// One open session file: a handle for reading bodies, an append handle that holds the single-writer lock, and
/// what we know of its length and identity, so that another process's appends are noticed, never interleaved.
#[derive(Debug)]
pub struct SessionFile {
    pub(super) path: String,
    pub(super) reader: DiskFile,
    pub(super) writer: Option<DiskFile>,
    pub(super) len: u64,
    pub(super) id: (u64, u64),
    pub(super) durability: Durability,
    /// Group commit and poisoning for `writer` (present with it).
    pub(super) sync: Option<Arc<SyncPoint>>,
    /// The last bytes before `len`, as read or written: if they change, the file was rewritten in place (same
    /// inode), not appended to, even when it grew.
    pub(super) tail: Vec<u8>,
    /// The first bytes of the file (the header line, mostly), checked with `tail`.
    pub(super) head: Vec<u8>,
    /// The file's stamp when we last looked, and when that was.
    pub(super) stamp: FileStamp,
    pub(super) observed_at_ns: i64,
    /// The bytes at the offsets we read are gone or no longer ours (the file was truncated or rewritten in place
    /// into something that is not a session): bodies are refused rather than read from wherever they now point.
    pub(super) stale: bool,
    /// The path holds something that is not a session (its stamp when that was found, and when that stamp was
    /// taken); writes are refused.
    pub(super) detached: Option<(FileStamp, i64)>,
    /// Records read from it carry their skeleton (see [`SessionFile::open_knowing`]).
    pub(super) skeletons: bool,
}

/// Why a write to a file found holding something that is not a session is refused.
pub const DETACHED: &str = "the session file was emptied, or replaced or overwritten by something that is not a pi \
                            session; nothing was written (the handle reads the file again once it is a session; or \
                            reopen it)";

pub(super) fn file_id(meta: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

/// fsync of the directory holding `path`, so a created or renamed file's name survives a power loss.
pub(super) fn sync_dir_of(disk: &dyn Disk, path: &str) -> std::io::Result<()> {
    let dir =
        std::path::Path::new(path).parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    disk.sync_dir(dir)
}

impl SessionFile {
    /// Opens `path` and loads it from that very handle (so offsets refer to the file that was read).
    /// Only a regular file is opened ([`open_regular`]); lines longer than [`MAX_LINE_BYTES`] are skipped unread.
    pub fn open(path: &str, durability: Durability) -> Result<(SessionFile, LoadedFile)> {
        Self::open_on(&real_disk(), path, durability)
    }

    /// [`SessionFile::open`] through `disk`: every later operation on the file goes through it too.
    pub fn open_on(disk: &Arc<dyn Disk>, path: &str, durability: Durability) -> Result<(SessionFile, LoadedFile)> {
        Self::open_knowing(disk, path, durability, true, |_, _| None)
    }

    /// [`SessionFile::open`], starting from what `known` says the file's first bytes already hold (given the
    /// opened handle and its stamp; None: nothing known): only the bytes after them are read. What `known` gives
    /// must end with a complete line (see [`LoadedFile::ends_a_line`]) and be the caller's to vouch for. Without
    /// `skeletons`, the records read here and later (another writer's appends) carry none, but for lines read on
    /// top of known records that all have theirs.
    pub fn open_knowing(
        disk: &Arc<dyn Disk>,
        path: &str,
        durability: Durability,
        skeletons: bool,
        known: impl FnOnce(&File, &FileStamp) -> Option<LoadedFile>,
    ) -> Result<(SessionFile, LoadedFile)> {
        take_back_torn_append(disk, path);
        let reader = open_regular_on(disk, path)?;
        // Stamped before reading, so a change made while we read shows as a change afterwards.
        let observed_at_ns = now_ns();
        let meta = reader.metadata().map_err(|e| Error::io("stat", path, e))?;
        let loaded = match known(reader.file(), &FileStamp::of(&meta)).filter(LoadedFile::ends_a_line) {
            None => load_file(&reader, path, meta.len(), SPLIT_FROM_BYTES, skeletons, Body::file)?,
            Some(mut loaded) => {
                let start = Start {
                    offset: loaded.len,
                    line: loaded.lines.len() as u32,
                    seen_header: loaded.records.iter().any(Record::is_header),
                    hold_back_partial: false,
                    // On top of what has every skeleton, the few lines appended since get theirs too, so what
                    // is kept again still serves a host that reads skeletons.
                    without_skeletons: !skeletons && !loaded.has_every_skeleton(),
                };
                if meta.len() > loaded.len {
                    loaded.extend(load_from(reader.reader_at(start.offset), path, start, Body::file)?);
                }
                loaded
            }
        };
        let mut file = SessionFile {
            path: path.to_owned(),
            reader,
            writer: None,
            len: loaded.len,
            id: file_id(&meta),
            durability,
            sync: None,
            tail: Vec::new(),
            head: Vec::new(),
            stamp: FileStamp::of(&meta),
            observed_at_ns,
            stale: false,
            detached: None,
            skeletons,
        };
        file.remember_known_bytes();
        Ok((file, loaded))
    }

    /// Creates `path` exclusively (pi's `wx`) with `content`, locked for writing and synced as `durability` says.
    /// If anything fails after the file was created, the file is removed again (it is ours: `O_EXCL` made it), so
    /// a retry once the cause is gone (a full disk freed) does not fail with `EEXIST` on a 0-byte leftover.
    pub fn create(path: &str, content: &[u8], durability: Durability) -> Result<SessionFile> {
        Self::create_on(&real_disk(), path, content, durability)
    }

    /// [`SessionFile::create`] through `disk`: every later operation on the file goes through it too.
    pub fn create_on(disk: &Arc<dyn Disk>, path: &str, content: &[u8], durability: Durability) -> Result<SessionFile> {
        Self::create_with(disk, path, durability, |w| w.write_all(content))
    }

    /// [`SessionFile::create_on`] with the content `write` writes as it makes it, through a buffer of 1 MiB: a
    /// new file as large as a fork of a 2.7 GB session is never whole in memory.
    pub fn create_with(
        disk: &Arc<dyn Disk>,
        path: &str,
        durability: Durability,
        write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<SessionFile> {
        sweep_stale_temps(path);
        let writer =
            DiskFile::open(disk, path, OpenOptions::new().read(true).append(true).create_new(true)).map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    Error::AlreadyExists { path: path.to_owned() }
                } else {
                    Error::io("create", path, e)
                }
            })?;
        let made = (|| {
            lock_writer(writer.file(), path)?;
            let mut buffered = std::io::BufWriter::with_capacity(1 << 20, &writer);
            write(&mut buffered).map_err(|e| Error::io("write", path, e))?;
            buffered.into_inner().map_err(|e| Error::io("write", path, e.into_error()))?;
            if durability != Durability::None {
                writer.sync_all().map_err(|e| Error::io("sync", path, e))?;
                sync_dir_of(disk.as_ref(), path).map_err(|e| Error::io("sync", path, e))?;
            }
            let reader = writer.try_clone().map_err(|e| Error::io("open", path, e))?;
            let meta = reader.metadata().map_err(|e| Error::io("stat", path, e))?;
            Ok((reader, meta, SyncPoint::new(&writer, path)?))
        })();
        let (reader, meta, sync) = match made {
            Ok(m) => m,
            Err(e) => {
                drop(writer);
                if let Err(rm) = disk.remove_file(std::path::Path::new(path)) {
                    tracing::warn!("{path}: could not remove the file whose first write failed: {rm}");
                }
                return Err(e);
            }
        };
        let mut file = SessionFile {
            path: path.to_owned(),
            reader,
            writer: Some(writer),
            len: meta.len(),
            id: file_id(&meta),
            durability,
            sync: Some(sync),
            tail: Vec::new(),
            head: Vec::new(),
            stamp: FileStamp::of(&meta),
            observed_at_ns: now_ns(),
            stale: false,
            detached: None,
            // A file this process makes is small while it matters; only opens honour a host's choice.
            skeletons: true,
        };
        file.remember_known_bytes();
        Ok(file)
    }

    /// Reads the bytes just before `len` into `tail`, and stamps the file as it is now.
    pub(super) fn remember_tail(&mut self) {
        self.remember_stamp();
        self.remember_known_bytes();
    }

    /// Keeps the first bytes and the bytes before `len`, to recognise a rewrite later.
    pub(super) fn remember_known_bytes(&mut self) {
        (self.head, self.tail) = identity::known_bytes(self.reader.file(), self.len);
    }

    /// What this handle knows of its file, to tell later whether it is still the file that was read.
    pub fn known(&self) -> Known<'_> {
        Known {
            stamp: &self.stamp,
            len: self.len,
            head: &self.head,
            tail: &self.tail,
            observed_at_ns: self.observed_at_ns,
        }
    }

    /// Records the file's stamp as it is now (after a write or after following it).
    pub(super) fn remember_stamp(&mut self) {
        self.observed_at_ns = now_ns();
        if let Ok(meta) = self.reader.metadata() {
            self.stamp = FileStamp::of(&meta);
        }
    }

    /// Reads a body of this file (see [`read_body`]); refused once the file is known to have been rewritten
    /// under us.
    pub fn read_body(&self, body: &Body) -> std::io::Result<Vec<u8>> {
        if self.stale && matches!(body.source, BodySource::File { .. }) {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, MOVED));
        }
        read_body(Some(&self.reader), body)
    }

    /// The line of `len` bytes at `offset` with each of `holes` (ranges within it, each a string literal)
    /// replaced by `fill`, reading only the bytes around them. Each hole must still begin and end with a quote
    /// and the line still end where it did (as [`read_body`] checks), or the line is no longer where it was read.
    pub fn read_around(&self, offset: u64, len: u64, holes: &[(u32, u32)], fill: &[u8]) -> std::io::Result<Vec<u8>> {
        let moved = || std::io::Error::new(std::io::ErrorKind::InvalidData, MOVED);
        if self.stale {
            return Err(moved());
        }
        let mut out = Vec::new();
        let mut piece = Vec::new();
        let mut from = 0u64;
        // Each piece is read with the quote that starts the next hole and the one that ends the last, so the
        // holes are checked without a read of their own; the last piece with the byte after the line.
        for (n, &(start, end)) in holes.iter().chain([(len as u32 + 1, 0)].iter()).enumerate() {
            let last = n == holes.len();
            let to = if last { len + 1 } else { u64::from(start) + 1 };
            piece.resize((to - from) as usize, 0);
            let got = read_up_to(&self.reader, &mut piece, offset + from)?;
            let body: &[u8] = if last {
                line_in(&piece[..got], (len - from) as usize)?
            } else if got < piece.len() || piece[got - 1] != b'"' {
                return Err(moved());
            } else {
                &piece[..got - 1]
            };
            let body = if n > 0 { body.strip_prefix(b"\"").ok_or_else(moved)? } else { body };
            out.extend_from_slice(body);
            if !last {
                out.extend_from_slice(fill);
                from = u64::from(end) - 1;
            }
        }
        Ok(out)
    }

    /// Records that the path now holds `seen`, which is not a session. With `in_place` (it is the very file we
    /// read, truncated or rewritten), what was read from it is no longer on disk: later body reads fail with
    /// [`MOVED`] instead of reading whatever is there now. Appends are refused until the file is opened again.
    pub fn detach(&mut self, seen: FileStamp, seen_at_ns: i64, in_place: bool) {
        self.detached = Some((seen, seen_at_ns));
        self.stale |= in_place;
    }

    /// True when `stamp` is of this very file (same device and inode).
    pub fn is_file(&self, stamp: &FileStamp) -> bool {
        (stamp.dev, stamp.ino) == self.id
    }

    /// True when the path was found not to hold a session ([`SessionFile::detach`]).
    pub fn is_detached(&self) -> bool {
        self.detached.is_some()
    }

    /// True when the path, as `now` stamps it, provably still holds what was found not to be a session (its
    /// stamp vouches for it: `identity`), so there is nothing to read again.
    pub fn still_detached(&self, now: &FileStamp) -> bool {
        self.detached.is_some_and(|(seen, seen_at_ns)| seen.vouches_for(now, seen_at_ns))
    }

    /// The path holds nothing any more: the file counts as deleted (which the next write repairs) rather than
    /// replaced.
    pub fn reattach(&mut self) {
        self.detached = None;
    }

    /// The path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Reads this file's lines for copying them elsewhere (through the handle bodies are read from, which stays
    /// valid if the path is removed or replaced).
    pub fn lines(&self) -> BodyReader<'_> {
        BodyReader(Some(&self.reader))
    }

    /// Bytes known to be in the file (the end of the last complete line read or written).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when nothing is known to be in the file.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Records that the file is known up to `len` (after following another process's appends).
    pub fn set_len(&mut self, len: u64) {
        self.len = len;
        self.remember_tail();
    }

    /// Sets the durability of later writes.
    pub fn set_durability(&mut self, durability: Durability) {
        self.durability = durability;
    }

    /// Compares the path with what we know ([`Known::judge`]: one `stat` when its stamp is as we left it, the
    /// first and last known bytes when it changed; written to without growing is [`FileState::Rewritten`]).
    pub fn state(&self) -> Result<FileState> {
        let now = match FileStamp::of_path(&self.path) {
            Ok(Some(now)) => now,
            Ok(None) => return Ok(FileState::Missing),
            Err(e) => return Err(Error::io("stat", &self.path, e)),
        };
        // Our handle reads the known bytes: when the path names another file, the stamp says so first.
        Ok(self.known().judge(&now, self.reader.file()))
    }

    /// How lines after `start` are read: complete lines only (a line still being written stays for later),
    /// skeletons as at the open.
    fn reading_from(&self, start: Start) -> Start {
        Start { hold_back_partial: true, without_skeletons: !self.skeletons, ..start }
    }

    /// Lines appended by someone else since `from` (complete lines only; a line still being written stays
    /// for later).
    pub fn read_from(&self, start: Start) -> Result<LoadedFile> {
        let handle = self.reader.reader_at(start.offset);
        load_from(handle, &self.path, self.reading_from(start), Body::file)
    }

    /// The lines between `start` and `end` (bytes another writer put before ours; complete lines only).
    pub fn read_between(&self, start: Start, end: u64) -> Result<LoadedFile> {
        let bounded = self.reader.reader_at(start.offset).take(end.saturating_sub(start.offset));
        load_from(bounded, &self.path, self.reading_from(start), Body::file)
    }

    /// Takes the single-writer lock (once; it is held until the file is dropped). The first time, temporary files
    /// a killed process left beside the file are removed.
    pub fn lock(&mut self) -> Result<()> {
        if self.writer.is_none() {
            let writer = DiskFile::open(self.reader.disk(), &self.path, OpenOptions::new().append(true))
                .map_err(|e| Error::io("open", &self.path, e))?;
            lock_writer(writer.file(), &self.path)?;
            self.sync = Some(SyncPoint::new(&writer, &self.path)?);
            self.writer = Some(writer);
            sweep_stale_temps(&self.path);
        }
        Ok(())
    }

    /// Why writes are refused, once a failed fsync (or a failed write that could not be cut back) poisoned the
    /// file.
    pub fn refusal(&self) -> Option<Error> {
        self.sync.as_ref().and_then(|s| s.refusal())
    }

    /// Appends `bytes` (whole lines) in one `write` on the locked `O_APPEND` handle, then syncs as the durability
    /// says. A write that fails part-way is cut back to where it started, so no partial line of a refused entry
    /// is left; if that fails too, or an `Entry` fsync fails, the file is poisoned. The caller compares
    /// [`Landed::offset`] with [`SessionFile::len`] (as it was) to see whether another writer got in between.
    pub fn append(&mut self, bytes: &[u8]) -> Result<Landed> {
        if self.detached.is_some() {
            return Err(Error::Conflict { path: Some(self.path.clone()), leaf: None, message: DETACHED.to_owned() });
        }
        self.lock()?;
        if let Some(refused) = self.refusal() {
            return Err(refused);
        }
        let point = self.sync.clone().expect("a locked file has a sync point");
        let path = self.path.clone();
        let several_lines = memchr::memchr_iter(b'\n', bytes).nth(1).is_some();
        if several_lines {
            self.announce_append(bytes.len() as u64)?;
        }
        let writer = self.writer.as_ref().expect("locked");
        #[cfg(debug_assertions)]
        crash_test::maybe_tear(writer.file(), bytes);
        let written = write_appending(writer, bytes);
        if several_lines {
            self.clear_intent();
        }
        let writer = self.writer.as_ref().expect("locked");
        let start = match written {
            Ok(start) => start,
            Err(failed) => {
                cut_back(writer, &point, failed.landed_at, failed.lost_track);
                // Our own cut must not look like someone else's rewrite at the next look.
                self.remember_stamp();
                return Err(Error::io("append to", &path, failed.error));
            }
        };
        let commit = match self.durability {
            Durability::None => Commit::done(),
            Durability::Entry => match writer.sync_data() {
                Ok(()) => Commit::done(),
                Err(e) => {
                    cut_back(writer, &point, Some(start), false);
                    point.poison(format!("fsync failed: {e}"), e.raw_os_error());
                    self.remember_stamp();
                    return Err(Error::io("sync", &path, e));
                }
            },
            Durability::Batch | Durability::After => Commit::pending(point.clone(), point.wrote()),
        };
        let contiguous = start == self.len;
        self.len = start + bytes.len() as u64;
        if bytes.len() as u64 >= TAIL_CHECK {
            self.tail = bytes[bytes.len() - TAIL_CHECK as usize..].to_vec();
            self.remember_stamp();
        } else if contiguous {
            self.tail.extend_from_slice(bytes);
            let excess = self.tail.len().saturating_sub(TAIL_CHECK as usize);
            self.tail.drain(..excess);
            self.remember_stamp();
        } else {
            self.remember_tail();
        }
        Ok(Landed { offset: start, commit })
    }

    /// What lies past `known` bytes now, read from the file as it is at this moment (never from an earlier
    /// `stat`, which another writer may have overtaken): where it ends, and where a line nobody has ended yet
    /// starts, if there is one. Bytes are only read backwards from the end to the last newline, at most down to
    /// `known`.
    pub fn beyond(&self, known: u64) -> Result<Beyond> {
        let end = self.reader.metadata().map_err(|e| Error::io("stat", &self.path, e))?.len();
        let mut pos = end;
        let mut buf = vec![0u8; 64 * 1024];
        while pos > known {
            let n = (pos - known).min(buf.len() as u64) as usize;
            let chunk = &mut buf[..n];
            self.reader.read_exact_at(chunk, pos - n as u64).map_err(|e| Error::io("read", &self.path, e))?;
            if let Some(i) = memchr::memrchr(b'\n', chunk) {
                let line_start = pos - n as u64 + i as u64 + 1;
                return Ok(Beyond { end, unterminated: (line_start < end).then_some(line_start) });
            }
            pos -= n as u64;
        }
        Ok(Beyond { end, unterminated: (end > known).then_some(known) })
    }

    /// True when the file is no longer `end` bytes long after a moment's wait: a writer is in the middle of the
    /// line that ends there (one `write()` finishes within microseconds; a writer flushing piece by piece pauses
    /// longer, and is taken to be done after this).
    pub fn still_growing(&self, end: u64) -> Result<bool> {
        std::thread::sleep(std::time::Duration::from_millis(20));
        Ok(self.reader.metadata().map_err(|e| Error::io("stat", &self.path, e))?.len() != end)
    }

    /// True when a line written at `offset` starts a line of its own as pi splits the file: the bytes between
    /// the newline before `offset` (or the start of the file) and `offset` are JSON white space or nothing. False
    /// when another writer's unfinished line was there, so what was written at `offset` was fused into it.
    pub fn starts_a_line(&self, offset: u64) -> Result<bool> {
        let mut pos = offset;
        let mut buf = [0u8; 4096];
        while pos > 0 {
            let n = pos.min(buf.len() as u64) as usize;
            let chunk = &mut buf[..n];
            self.reader.read_exact_at(chunk, pos - n as u64).map_err(|e| Error::io("read", &self.path, e))?;
            for &b in chunk.iter().rev() {
                match b {
                    b'\n' => return Ok(true),
                    b' ' | b'\t' | b'\r' => {}
                    _ => return Ok(false),
                }
            }
            pos -= n as u64;
        }
        Ok(true)
    }

    /// Says beside the file, before a write of several lines, where that write starts and how long it is, so
    /// that if this process dies in the middle of it, the next open takes back the part that landed
    /// ([`take_back_torn_append`]): a batch is in the file whole or not at all. The intent exists only while the
    /// write is made. Not synced: a killed process leaves the page cache behind, and a sync would double the cost
    /// of a batch under `entry` for a power loss, after which only what was acknowledged is promised anyway.
    pub(super) fn announce_append(&mut self, len: u64) -> Result<()> {
        let intent = intent_path(&self.path);
        let start = self.writer.as_ref().expect("locked").metadata().map_err(|e| Error::io("stat", &self.path, e))?;
        let disk = self.reader.disk();
        let written = DiskFile::open(disk, &intent, OpenOptions::new().write(true).create(true).truncate(true))
            .and_then(|f| f.write_all(format!("{} {len}\n", start.len()).as_bytes()));
        if let Err(e) = written {
            // An intent cut short could name another write; the append is refused, so none is left behind.
            if let Err(rm) = disk.remove_file(std::path::Path::new(&intent)) {
                tracing::warn!("{intent}: could not remove the append intent whose write failed: {rm}");
            }
            return Err(Error::io("write", &intent, e));
        }
        Ok(())
    }

    /// The write announced is over (done, or cut back): the intent goes.
    pub(super) fn clear_intent(&mut self) {
        let intent = intent_path(&self.path);
        if let Err(e) = self.reader.disk().remove_file(std::path::Path::new(&intent)) {
            tracing::warn!("{intent}: could not remove the append intent: {e}");
        }
    }

    /// fsyncs what group commit left pending.
    pub fn sync(&mut self) -> Result<()> {
        match &self.sync {
            Some(point) => point.sync_all_written(),
            None => Ok(()),
        }
    }

    /// Replaces the file atomically with what `write` produces (temp file, locked, synced, renamed over the
    /// path), keeping the lock. Returns the new length. When the path is a symlink, the file it points to is
    /// replaced and the link stays (pi's `writeFileSync` writes through links too).
    pub fn replace(
        &mut self,
        write: impl FnOnce(BodyReader<'_>, &mut dyn Write) -> std::io::Result<()>,
    ) -> Result<u64> {
        self.lock()?;
        if let Some(refused) = self.refusal() {
            return Err(refused);
        }
        let target = std::fs::canonicalize(&self.path)
            .ok()
            .and_then(|p| p.to_str().map(str::to_owned))
            .unwrap_or_else(|| self.path.clone());
        sweep_stale_temps(&target);
        let tmp = temp_path(&target);
        let disk = self.reader.disk().clone();
        // Everything that can fail before the rename fails the rewrite and leaves the old file whole; after it,
        // the path holds the new file whatever happens, so the handle takes it up before anything else can fail.
        let prepared = (|| -> Result<(DiskFile, DiskFile, std::fs::Metadata, Arc<SyncPoint>)> {
            let io = |e| Error::io("rewrite", &self.path, e);
            // Appending handle: after the rename it is the writer, and appends must stay O_APPEND.
            let _ = disk.remove_file(std::path::Path::new(&tmp));
            let f =
                DiskFile::open(&disk, &tmp, OpenOptions::new().read(true).append(true).create_new(true)).map_err(io)?;
            f.file().try_lock().map_err(|e| io(std::io::Error::other(e.to_string())))?;
            let mut w = std::io::BufWriter::with_capacity(1 << 20, &f);
            write(BodyReader(Some(&self.reader)), &mut w).map_err(io)?;
            w.into_inner().map_err(|e| io(e.into_error()))?;
            f.sync_all().map_err(io)?;
            let meta = f.metadata().map_err(|e| Error::io("stat", &self.path, e))?;
            let reader = f.try_clone().map_err(|e| Error::io("open", &self.path, e))?;
            let sync = SyncPoint::new(&f, &self.path)?;
            disk.rename(std::path::Path::new(&tmp), std::path::Path::new(&target)).map_err(io)?;
            Ok((f, reader, meta, sync))
        })();
        let (new, reader, meta, sync) = match prepared {
            Ok(p) => p,
            Err(e) => {
                let _ = disk.remove_file(std::path::Path::new(&tmp));
                return Err(e);
            }
        };
        self.reader = reader;
        self.id = file_id(&meta);
        self.len = meta.len();
        self.stale = false;
        // What was written to the old file is in the new one, which is synced.
        if let Some(old) = self.sync.take() {
            old.all_synced();
        }
        self.sync = Some(sync.clone());
        self.writer = Some(new);
        self.remember_tail();
        if self.durability != Durability::None {
            if let Err(e) = sync_dir_of(disk.as_ref(), &target) {
                // The rename may not survive a power loss, and it cannot be taken back: the write is reported,
                // never acknowledged, and the session refuses writes until it is opened again.
                sync.poison(format!("fsync of the directory after a rewrite failed: {e}"), e.raw_os_error());
                return Err(Error::io("sync", &self.path, e));
            }
        }
        Ok(self.len)
    }
}

/// `line` (a whole line, already read and checked to be where it was) with each of `holes` replaced by `fill`:
/// what [`SessionFile::read_around`] gives, for a line read whole anyway. Each hole must still begin and end with
/// a quote, or the line is no longer what the open read.
pub fn fill_holes(line: &[u8], holes: &[(u32, u32)], fill: &[u8]) -> std::io::Result<Vec<u8>> {
    let moved = || std::io::Error::new(std::io::ErrorKind::InvalidData, MOVED);
    let mut out = Vec::with_capacity(line.len());
    let mut from = 0;
    for &(start, end) in holes {
        let (start, end) = (start as usize, end as usize);
        if start < from || end < start + 2 || end > line.len() || line[start] != b'"' || line[end - 1] != b'"' {
            return Err(moved());
        }
        out.extend_from_slice(&line[from..start]);
        out.extend_from_slice(fill);
        from = end;
    }
    out.extend_from_slice(&line[from..]);
    Ok(out)
}

/// How a write on an `O_APPEND` handle failed.
pub(super) struct FailedWrite {
    pub(super) error: std::io::Error,
    /// Where this write's first bytes landed, when some did.
    pub(super) landed_at: Option<u64>,
    /// Bytes landed but where is unknown (the offset could not be read).
    pub(super) lost_track: bool,
}

/// Writes all of `bytes` (one `write`, more only if the kernel takes less) and returns the offset they start at.
pub(super) fn write_appending(writer: &DiskFile, bytes: &[u8]) -> std::result::Result<u64, FailedWrite> {
    let mut start = None;
    let mut done = 0;
    while done < bytes.len() {
        match writer.write(&bytes[done..]) {
            Ok(0) => {
                let error = std::io::ErrorKind::WriteZero.into();
                return Err(FailedWrite { error, landed_at: start, lost_track: false });
            }
            Ok(n) => {
                if start.is_none() {
                    // O_APPEND leaves the offset at the end of what this write put at the end of the file.
                    match position(writer) {
                        Ok(end) => start = Some(end - n as u64),
                        Err(error) => return Err(FailedWrite { error, landed_at: None, lost_track: true }),
                    }
                }
                done += n;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => return Err(FailedWrite { error, landed_at: start, lost_track: false }),
        }
    }
    match start {
        Some(s) => Ok(s),
        None => position(writer).map_err(|error| FailedWrite { error, landed_at: None, lost_track: true }),
    }
}

/// The handle's offset (`lseek`, outside the seam): on an `O_APPEND` handle, the end of its last write.
fn position(writer: &DiskFile) -> std::io::Result<u64> {
    use std::io::Seek;
    writer.file().stream_position()
}

/// Cuts a failed write back to where it started, so no partial line of a refused entry stays in the file; if
/// that is impossible, poisons the file.
pub(super) fn cut_back(writer: &DiskFile, point: &SyncPoint, landed_at: Option<u64>, lost_track: bool) {
    if lost_track {
        point.poison("a write failed and where it landed is unknown".to_owned(), None);
    } else if let Some(start) = landed_at {
        if let Err(e) = writer.set_len(start) {
            point.poison(format!("a failed write could not be cut back to {start} bytes: {e}"), e.raw_os_error());
        }
    }
}

/// The temporary file a rewrite of `path` goes to (this process's id in it, so a leftover names its maker).
/// Where a session file's append intent lives: `"<start> <length>\n"` of a write of several lines in progress,
/// or nothing.
pub(super) fn intent_path(path: &str) -> String {
    format!("{path}.pi-sessiond-append")
}

/// Takes back the landed part of a write of several lines that its process did not finish (killed in the middle
/// of it: the append intent still names it and the file ends inside it), so that pi, and anyone after, reads the
/// batch whole or not at all. Done only when no process holds the session's write lock (a live writer is in the
/// middle of its write, which it will finish or cut back itself); the intent is removed once the file is known
/// to hold the write whole or not at all. Until a pi-sessiond opens the file, pi alone reads the lines that
/// landed (docs/durability.md).
pub(super) fn take_back_torn_append(disk: &Arc<dyn Disk>, path: &str) {
    let intent = intent_path(path);
    let Ok(text) = std::fs::read_to_string(&intent) else { return };
    let Ok(file) = DiskFile::open(disk, path, OpenOptions::new().read(true).write(true)) else { return };
    if file.file().try_lock().is_err() {
        return;
    }
    // Only a whole intent counts: one cut short by a full disk may name another write than the one made.
    let whole = text.strip_suffix('\n').ok_or(());
    let announced = whole.and_then(|t| {
        t.split_whitespace().map(str::parse::<u64>).collect::<std::result::Result<Vec<u64>, _>>().map_err(|_| ())
    });
    if let (Ok(&[start, len]), Ok(meta)) = (announced.as_deref(), file.metadata()) {
        let end = meta.len();
        if end > start && end < start + len {
            tracing::warn!(
                "{path}: a write of {len} bytes at {start} was cut short by its process's end after {} bytes; \
                 taking back what landed, so the file holds all of it or none",
                end - start
            );
            if let Err(e) = file.set_len(start).and_then(|()| file.sync_all()) {
                tracing::error!("{path}: could not take back a torn write: {e}");
                return;
            }
        }
    }
    if let Err(e) = disk.remove_file(std::path::Path::new(&intent)) {
        tracing::warn!("{intent}: could not remove: {e}");
    }
}

pub(super) fn temp_path(path: &str) -> String {
    format!("{path}.pi-sessiond-{}.tmp", std::process::id())
}

/// Removes the rewrite temporaries (`*.pi-sessiond-PID.tmp`) in the directory of `path` whose process is gone:
/// a process killed during a rewrite leaves one, and nothing else would ever remove it. A temporary of a live
/// process (or one whose pid was reused) is left alone.
pub(super) fn sweep_stale_temps(path: &str) {
    let dir = std::path::Path::new(path).parent().filter(|d| !d.as_os_str().is_empty());
    let Ok(entries) = std::fs::read_dir(dir.unwrap_or(std::path::Path::new("."))) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(temp_owner) else { continue };
        if pid == std::process::id() || process_alive(pid) {
            continue;
        }
        match std::fs::remove_file(entry.path()) {
            Ok(()) => tracing::info!("removed {}, left by process {pid}, which is gone", entry.path().display()),
            Err(e) => tracing::debug!("could not remove stale {}: {e}", entry.path().display()),
        }
    }
}

/// The pid in a rewrite temporary's name (`<file>.pi-sessiond-<pid>.tmp`).
pub(super) fn temp_owner(name: &str) -> Option<u32> {
    let rest = name.strip_suffix(".tmp")?;
    let (_, pid) = rest.rsplit_once(".pi-sessiond-")?;
    pid.parse().ok()
}

pub(super) fn process_alive(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) else { return false };
    // EPERM means it exists but belongs to someone else.
    !matches!(rustix::process::test_kill_process(pid), Err(rustix::io::Errno::SRCH))
}

impl Drop for SessionFile {
    fn drop(&mut self) {
        // A poisoned file was reported when it was poisoned; there is nothing left to sync.
        if self.refusal().is_some() {
            return;
        }
        if let Err(e) = self.sync() {
            tracing::warn!("{}: closing: {e}", self.path);
        }
    }
}

/// Test hooks, compiled into debug builds only, each killing the process at the N-th append: with
/// `PI_SESSIOND_TEST_TEAR_AT=N` it writes half of its line and aborts, which is what a crash in the middle of a
/// write leaves behind; with `PI_SESSIOND_TEST_DIE_AFTER=N` it writes the whole line and aborts before anyone is
/// told, so a host sees a write in flight that did land (the pi drop-in must not write it twice).
#[cfg(debug_assertions)]
mod crash_test {
    use std::sync::atomic::{AtomicU64, Ordering};

    static APPENDS: AtomicU64 = AtomicU64::new(0);

    pub fn maybe_tear(mut writer: &std::fs::File, bytes: &[u8]) {
        use std::io::Write;
        let at = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
        let (tear, die) = (at("PI_SESSIOND_TEST_TEAR_AT"), at("PI_SESSIOND_TEST_DIE_AFTER"));
        if tear.is_none() && die.is_none() {
            return;
        }
        let count = APPENDS.fetch_add(1, Ordering::SeqCst) + 1;
        if tear == Some(count) {
            let _ = writer.write_all(&bytes[..bytes.len() / 2]);
            std::process::abort();
        }
        if die == Some(count) {
            let _ = writer.write_all(bytes);
            std::process::abort();
        }
    }
}

/// Takes the advisory exclusive lock (`flock`) on an append handle, or says who holds it. The lock lives on the
/// session file itself, so no lock file is left beside sessions, and it dies with its process, so a crashed
/// writer never leaves a stale lock. pi 1.6.0 takes no lock; the manager follows the file before each write
/// instead.
///
/// A lock that seems held by this very process, or by nobody by the time `/proc/locks` is read, is tried again for
/// a moment: a child being started by any thread of this process holds a copy of our descriptors from `fork` to
/// `exec`, so a lock just released by closing a descriptor can outlive it by that long.
pub(super) fn lock_writer(writer: &File, path: &str) -> Result<()> {
    let mut pause = std::time::Duration::from_millis(1);
    loop {
        match writer.try_lock() {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) => {
                let pid = writer.metadata().ok().and_then(|m| lock_holder(&m));
                let transient = pid.is_none_or(|p| p == std::process::id());
                if !transient || pause > std::time::Duration::from_millis(64) {
                    return Err(Error::Locked { path: path.to_owned(), pid });
                }
                std::thread::sleep(pause);
                pause *= 2;
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(Error::io("lock", path, e)),
        }
    }
}

/// The process other than this one holding the write lock on the session file at `path`, if any: what a host
/// tells its user before they type into a session another pi writes. None for a missing file, one that is not a
/// regular file, or nobody holding it.
///
/// Asked as a writer asks: a shared `flock` on a descriptor of our own, given back at once, fails only while
/// someone holds the exclusive one, and only then is `/proc/locks` read for the holder's pid. That table is read
/// under a kernel-wide lock whose first taking after a quiet spell waits out an RCU grace period (10–17 ms
/// measured here, and as long again for every process that reads it then), where the `flock` costs a system
/// call. A writer that tries its lock in the instant ours is held finds no WRITE holder in the table and tries
/// again ([`lock_writer`]); pi's lock extension counts only WRITE locks.
pub fn other_lock_holder(path: &str) -> Result<Option<u32>> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => {}
        Ok(_) => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("stat", path, e)),
    }
    let file = super::open_regular(path)?;
    match file.try_lock_shared() {
        Ok(()) => Ok(None),
        // Held exclusively, or a file system without `flock`: the table says by whom, if anyone.
        Err(_) => {
            let meta = file.metadata().map_err(|e| Error::io("stat", path, e))?;
            Ok(lock_holder(&meta).filter(|&pid| pid != std::process::id()))
        }
    }
}

/// The pid holding an flock on this file, from Linux's `/proc/locks` (`1: FLOCK ADVISORY WRITE <pid>
/// <major>:<minor>:<inode> 0 EOF`).
pub(super) fn lock_holder(meta: &std::fs::Metadata) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let dev = meta.dev();
    let (major, minor) =
        (((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff), ((dev >> 12) & 0xffff_ff00) | (dev & 0xff));
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(1) != Some(&"FLOCK") || fields.get(3) != Some(&"WRITE") {
            return None;
        }
        let mut id = fields.get(5)?.split(':');
        let (maj, min, ino) = (id.next()?, id.next()?, id.next()?);
        let matches = u64::from_str_radix(maj, 16).ok()? == major
            && u64::from_str_radix(min, 16).ok()? == minor
            && ino.parse::<u64>().ok()? == meta.ino();
        matches.then(|| fields.get(4)?.parse().ok()).flatten()
    })
}
