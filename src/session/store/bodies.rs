//! Reading an entry's bytes again: one body at a time (checked to end where its line did), or many through a
//! read-ahead window; the descriptor never leaves the store.

use super::*;

/// Reads the bytes of a body (with its patch applied) from `file`, the session file its offsets refer to.
///
/// The line is checked to still be where it was read: a file truncated since fails with `UnexpectedEof`, and one
/// rewritten so that the line no longer ends where it did (the byte after it is not its `\n`) with
/// `InvalidData` ([`MOVED`]), instead of handing out a short buffer or another entry's bytes.
pub(super) fn read_body(file: Option<&DiskFile>, body: &Body) -> std::io::Result<Vec<u8>> {
    let raw: std::borrow::Cow<'_, [u8]> = match &body.source {
        BodySource::Memory(bytes) => std::borrow::Cow::Borrowed(bytes),
        BodySource::File { offset, len } => {
            let file = file.ok_or_else(|| std::io::Error::other("the session file is not open"))?;
            std::borrow::Cow::Owned(read_line_at(file, *offset, *len)?)
        }
    };
    Ok(match &body.patch {
        Some(p) => patch::apply(&raw, p),
        None => raw.into_owned(),
    })
}

/// Reads the lines of one session file for copying them elsewhere (a rewrite, a fork, the first write), so the
/// file's descriptor never leaves the store. [`BodyReader::NONE`] reads only bodies held in memory.
#[derive(Clone, Copy)]
pub struct BodyReader<'a>(pub(super) Option<&'a DiskFile>);

impl BodyReader<'_> {
    /// A reader with no file: bodies held in memory only.
    pub const NONE: BodyReader<'static> = BodyReader(None);

    /// A body's bytes with its patch applied (see [`read_body`] for the checks).
    pub fn body(&self, body: &Body) -> std::io::Result<Vec<u8>> {
        read_body(self.0, body)
    }

    /// `len` bytes of the file at `offset`, as they are.
    pub fn raw(&self, offset: u64, len: u64) -> std::io::Result<Vec<u8>> {
        let file = self.0.ok_or_else(|| std::io::Error::other("no file to copy a line from"))?;
        let mut raw = vec![0u8; len as usize];
        file.read_exact_at(&mut raw, offset)?;
        Ok(raw)
    }
}

/// Reads bodies of one file in the order they lie in it, through one window of up to [`READ_AHEAD`] bytes: a
/// snapshot or a listing of every entry costs a few large reads, not one read per line. Each body is checked as
/// [`read_body`] checks it (its line must still end where it did).
pub struct ReadAhead<'a> {
    pub(super) file: Option<&'a SessionFile>,
    pub(super) window: Vec<u8>,
    pub(super) window_start: u64,
}

/// The most a [`ReadAhead`] reads at once (more only for a longer line).
pub const READ_AHEAD: usize = 4 << 20;

/// What a [`ReadAhead`] reads first; each read after it reads twice as much, up to [`READ_AHEAD`].
pub(super) const FIRST_READ: usize = 64 << 10;

impl<'a> ReadAhead<'a> {
    /// A reader of `file`'s bodies (None: bodies held in memory only).
    pub fn new(file: Option<&'a SessionFile>) -> Self {
        ReadAhead { file, window: Vec::new(), window_start: 0 }
    }

    /// A body's bytes with its patch applied.
    pub fn body(&mut self, body: &Body) -> std::io::Result<Vec<u8>> {
        let (BodySource::File { offset, len }, Some(file)) = (&body.source, self.file) else {
            return match self.file {
                Some(f) => f.read_body(body),
                None => read_body(None, body),
            };
        };
        if file.stale {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, MOVED));
        }
        let (offset, len) = (*offset, usize::try_from(*len).map_err(|_| std::io::ErrorKind::OutOfMemory)?);
        let in_window =
            |w: &Self| offset >= w.window_start && offset - w.window_start + (len as u64) < w.window.len() as u64;
        if !in_window(self) {
            // Read ahead only when going forward from the window (or starting): a jump back reads the one line.
            let window_end = self.window_start + self.window.len() as u64;
            let forward = self.window.is_empty() || (offset >= self.window_start && offset <= window_end);
            // The window grows from a small first read, so a few entries (a notification's) cost a small read.
            let ahead = (self.window.len() * 2).clamp(FIRST_READ, READ_AHEAD);
            self.window.resize(if forward { ahead.max(len + 1) } else { len + 1 }, 0);
            let got = read_up_to(&file.reader, &mut self.window, offset)?;
            self.window.truncate(got);
            self.window_start = offset;
        }
        let raw = line_in(&self.window[(offset - self.window_start) as usize..], len)?;
        Ok(match &body.patch {
            Some(p) => patch::apply(raw, p),
            None => raw.to_vec(),
        })
    }
}

/// The message of the `InvalidData` error [`read_body`] gives for a line that is no longer where it was.
pub const MOVED: &str = "the line is no longer where it was read";

/// The `len` bytes at `offset` and the byte after them, which must be the line's `\n` or the end of the file.
pub(super) fn read_line_at(file: &DiskFile, offset: u64, len: u64) -> std::io::Result<Vec<u8>> {
    let len = usize::try_from(len).map_err(|_| std::io::Error::from(std::io::ErrorKind::OutOfMemory))?;
    let mut buf = vec![0u8; len + 1];
    let got = read_up_to(file, &mut buf, offset)?;
    line_in(&buf[..got], len).map(<[u8]>::to_vec)
}

/// The first `len` bytes of `read` (what a read found at a line's offset), checked to still be that line: all
/// there, and followed by its `\n` or the end of the file.
pub(super) fn line_in(read: &[u8], len: usize) -> std::io::Result<&[u8]> {
    if read.len() < len {
        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the line is no longer in the file"));
    }
    if read.len() > len && read[len] != b'\n' {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, MOVED));
    }
    Ok(&read[..len])
}
