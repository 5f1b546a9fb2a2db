//! One answer, for the engine, the catalog index and the team push, to "is the file at this path still the one we
//! read, and did it only grow?": its `stat` stamp against the one we kept, then a few known bytes (its first bytes
//! and the bytes just before where we stopped reading) against the file's, with one set of constants.
//!
//! Each reader keeps what it knows in its own place (the engine in memory, the catalog in SQLite, the push in
//! PostgreSQL) and asks [`Known::judge`]; what to do about the answer (follow appends, read again, send again) is
//! its own business. What a stamp and a few bytes cannot see, nobody here claims to: a rewrite that keeps every
//! stamp field (made within the file system's clock tick of our look, inside [`RACY_WINDOW_NS`]) and the known
//! bytes, or a rewrite that also grows the file and keeps the known bytes.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// How many bytes at the start of a file are kept to recognise an in-place rewrite (a header line is about 150).
pub const HEAD_CHECK: u64 = 256;

/// How many bytes before the known end are kept to recognise an in-place rewrite (and tell it from an append).
pub const TAIL_CHECK: u64 = 64;

/// How long after a file's last change its timestamps cannot prove that nothing changed since: a write within the
/// same clock tick may leave `mtime` and `ctime` as they were (ext4 without multigrain timestamps ticks every few
/// milliseconds; FAT and some network file systems every one or two seconds). Within this window the known bytes
/// are checked even when the stamp is unchanged.
pub const RACY_WINDOW_NS: i64 = 2_000_000_000;

/// What happened to a file since it was last looked at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileState {
    /// Same file, same length.
    Same,
    /// Same file, longer: another process appended.
    Grew(u64),
    /// Same file, shorter: truncated.
    Shrunk,
    /// Same file (inode), but the bytes we read are not what they were: rewritten in place (`writeFileSync`,
    /// an editor saving over it, a secret overwritten and its `mtime` set back), whatever its length now.
    Rewritten,
    /// Another file now has the path (renamed over it, or deleted and recreated), or something that is not a
    /// regular file.
    Replaced,
    /// The path no longer exists.
    Missing,
}

/// What `stat` says of a file, to tell whether it changed without reading it: identity, size, and the
/// modification and change times in nanoseconds (`ctime` moves on every write and cannot be set back by a
/// program, unlike `mtime`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FileStamp {
    /// Device.
    pub dev: u64,
    /// Inode.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// `st_mtime` in nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// `st_ctime` in nanoseconds since the epoch.
    pub ctime_ns: i64,
    /// A regular file (after following symlinks): only those are read.
    pub regular: bool,
}

impl FileStamp {
    /// The stamp of `meta`.
    pub fn of(meta: &std::fs::Metadata) -> FileStamp {
        use std::os::unix::fs::MetadataExt;
        FileStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.len(),
            mtime_ns: meta.mtime().saturating_mul(1_000_000_000).saturating_add(meta.mtime_nsec()),
            ctime_ns: meta.ctime().saturating_mul(1_000_000_000).saturating_add(meta.ctime_nsec()),
            regular: meta.is_file(),
        }
    }

    /// The stamp of what `path` names now (following symlinks), or None when there is nothing there.
    pub fn of_path(path: &str) -> std::io::Result<Option<FileStamp>> {
        match std::fs::metadata(path) {
            Ok(m) => Ok(Some(FileStamp::of(&m))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// True when `other` is of the same file (device and inode).
    pub fn same_file(&self, other: &FileStamp) -> bool {
        (self.dev, self.ino) == (other.dev, other.ino)
    }
}

/// Now, in nanoseconds since the epoch: when a file was looked at, for [`Known::racy`].
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// Whether something last changed at `changed_ns` and looked at at `observed_at_ns` was seen clean: the change is
/// outside the racy window, so a later one will show in its stamp.
pub fn settled(changed_ns: i64, observed_at_ns: i64) -> bool {
    changed_ns.saturating_add(RACY_WINDOW_NS) <= observed_at_ns
}

/// The bytes of `file` in `[at, at + len)`, or None when they cannot all be read.
pub fn bytes_at(file: &File, at: u64, len: u64) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; usize::try_from(len).ok()?];
    file.read_exact_at(&mut buf, at).ok()?;
    Some(buf)
}

/// True when `file` still starts with `head` and has `tail` just before `end`: what was read is still there.
pub fn continues(file: &File, head: &[u8], tail: &[u8], end: u64) -> bool {
    let Some(tail_at) = end.checked_sub(tail.len() as u64) else { return false };
    bytes_at(file, 0, head.len() as u64).is_some_and(|b| b == head)
        && bytes_at(file, tail_at, tail.len() as u64).is_some_and(|b| b == tail)
}

/// The bytes to keep of a file read up to `end`: its first [`HEAD_CHECK`] (at most `end`) and the
/// [`TAIL_CHECK`] before `end` (empty when they cannot be read: the next look then reads the file again).
pub fn known_bytes(file: &File, end: u64) -> (Vec<u8>, Vec<u8>) {
    let head = bytes_at(file, 0, HEAD_CHECK.min(end)).unwrap_or_default();
    let tail_len = TAIL_CHECK.min(end);
    let tail = bytes_at(file, end - tail_len, tail_len).unwrap_or_default();
    (head, tail)
}

/// What a reader knows of a file it read up to `len`: the file's stamp then, when it looked, and the bytes it
/// kept ([`known_bytes`]).
#[derive(Clone, Copy, Debug)]
pub struct Known<'a> {
    /// The stamp when it was read.
    pub stamp: &'a FileStamp,
    /// Where what was read ends (the end of its last complete line).
    pub len: u64,
    /// The file's first bytes.
    pub head: &'a [u8],
    /// The bytes just before `len`.
    pub tail: &'a [u8],
    /// When the stamp was taken (ns since the epoch).
    pub observed_at_ns: i64,
}

impl Known<'_> {
    /// The stamp was taken so soon after the file's last change that a change within the same clock tick would
    /// not show in it: only the bytes can say the file is unchanged.
    pub fn racy(&self) -> bool {
        !settled(self.stamp.mtime_ns.max(self.stamp.ctime_ns), self.observed_at_ns)
    }

    /// Compares the file as `now` stamps it with what we know, as cheaply as that can be told: nothing is read
    /// when its stamp is as we kept it (outside the racy window); the known bytes are read (through `file`, a
    /// handle of the file `now` describes) when it changed; and when it was written to (`mtime` or `ctime`
    /// moved) without growing, it is [`FileState::Rewritten`], since only reading it again can say what changed
    /// (a `chmod` also moves `ctime`: it costs a read, never a missed rewrite).
    pub fn judge(&self, now: &FileStamp, file: &File) -> FileState {
        let stamp = self.stamp;
        let grew_or_same = || if now.size > self.len { FileState::Grew(now.size) } else { FileState::Same };
        let written = now.mtime_ns != stamp.mtime_ns || now.ctime_ns != stamp.ctime_ns;
        if !now.same_file(stamp) || !now.regular {
            FileState::Replaced
        } else if now.size < self.len {
            FileState::Shrunk
        } else if now == stamp && !self.racy() {
            grew_or_same()
        } else if !continues(file, self.head, self.tail, self.len) || (now.size <= stamp.size && written) {
            // Known bytes that changed, or a write that did not make it longer: only reading it again can tell
            // what changed.
            FileState::Rewritten
        } else {
            grew_or_same()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn stamp_of(f: &File) -> FileStamp {
        FileStamp::of(&f.metadata().unwrap())
    }

    /// A file written, read (its stamp and known bytes kept as long ago as `age_ns`), and a way to look again.
    fn read_file(content: &[u8], age_ns: i64) -> (tempfile::NamedTempFile, FileStamp, Vec<u8>, Vec<u8>, i64) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(content).unwrap();
        let stamp = stamp_of(f.as_file());
        let (head, tail) = known_bytes(f.as_file(), content.len() as u64);
        (f, stamp, head, tail, stamp.mtime_ns.max(stamp.ctime_ns) + age_ns)
    }

    #[test]
    fn an_untouched_file_is_the_same_and_an_appended_one_grew() {
        let (mut f, stamp, head, tail, seen) = read_file(b"line one\nline two\n", RACY_WINDOW_NS);
        let known = Known { stamp: &stamp, len: 18, head: &head, tail: &tail, observed_at_ns: seen };
        assert_eq!(known.judge(&stamp_of(f.as_file()), f.as_file()), FileState::Same);
        f.write_all(b"three\n").unwrap();
        assert_eq!(known.judge(&stamp_of(f.as_file()), f.as_file()), FileState::Grew(24));
    }

    #[test]
    fn a_same_length_rewrite_in_the_middle_with_its_mtime_set_back_is_a_rewrite() {
        let body = format!("{}\nsecret=hunter2\n{}\n", "h".repeat(300), "t".repeat(100));
        let (f, stamp, head, tail, seen) = read_file(body.as_bytes(), RACY_WINDOW_NS);
        let mtime = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(stamp.mtime_ns as u64);
        // The file system's clock ticks every few milliseconds: rewrite until the change time shows the write.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let now = loop {
            f.as_file().write_all_at(b"XXXXXXX", 308).unwrap();
            f.as_file().set_modified(mtime).unwrap();
            let now = stamp_of(f.as_file());
            if now.ctime_ns != stamp.ctime_ns || std::time::Instant::now() > deadline {
                break now;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        };
        assert_eq!((now.size, now.mtime_ns), (stamp.size, stamp.mtime_ns), "only ctime tells");
        let known = Known { stamp: &stamp, len: body.len() as u64, head: &head, tail: &tail, observed_at_ns: seen };
        assert_eq!(known.judge(&now, f.as_file()), FileState::Rewritten);
    }

    #[test]
    fn a_rewrite_of_the_known_bytes_is_seen_even_when_the_stamp_is_unchanged_within_the_racy_window() {
        let (f, stamp, head, tail, seen) = read_file(b"abcdef\n", 0);
        f.as_file().write_all_at(b"fedcba", 0).unwrap();
        // As if the file system's clock had not ticked: the stamp is what was kept.
        let known = Known { stamp: &stamp, len: 7, head: &head, tail: &tail, observed_at_ns: seen };
        assert_eq!(known.judge(&stamp, f.as_file()), FileState::Rewritten);
        let settled = Known { observed_at_ns: seen + RACY_WINDOW_NS, ..known };
        assert_eq!(settled.judge(&stamp, f.as_file()), FileState::Same, "outside the window the stamp is trusted");
    }

    #[test]
    fn a_shorter_file_shrank_and_another_inode_or_a_non_regular_file_replaced_it() {
        let (f, stamp, head, tail, seen) = read_file(b"one\ntwo\n", RACY_WINDOW_NS);
        let known = Known { stamp: &stamp, len: 8, head: &head, tail: &tail, observed_at_ns: seen };
        f.as_file().set_len(4).unwrap();
        assert_eq!(known.judge(&stamp_of(f.as_file()), f.as_file()), FileState::Shrunk);
        let other = FileStamp { ino: stamp.ino + 1, ..stamp };
        assert_eq!(known.judge(&other, f.as_file()), FileState::Replaced);
        let fifo = FileStamp { regular: false, ..stamp };
        assert_eq!(known.judge(&fifo, f.as_file()), FileState::Replaced);
    }
}
