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
    /// A regular file (after following symlinks). Only regular files are listed or read: opening a FIFO blocks
    /// until a writer comes, and a device can be read without end.
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
            mtime_ns: epoch_ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: epoch_ns(meta.ctime(), meta.ctime_nsec()),
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

    /// pi's `stats.mtime.getTime()`, which orders its listings (see [`mtime_ms_of`]).
    pub fn mtime_ms(&self) -> f64 {
        mtime_ms_of(self.mtime_ns)
    }

    /// When the file last changed, as far as its stamp can tell: the later of `mtime` (which a program may set
    /// back) and `ctime` (which it cannot).
    pub fn changed_ns(&self) -> i64 {
        self.mtime_ns.max(self.ctime_ns)
    }

    /// Whether this stamp, taken at `observed_at_ns`, was taken clean: outside the racy window of the file's last
    /// change, so any later change shows in the stamp.
    pub fn settled_at(&self, observed_at_ns: i64) -> bool {
        self.changed_ns().saturating_add(RACY_WINDOW_NS) <= observed_at_ns
    }

    /// Whether `now` proves, without reading a byte, that the file is as it was when this stamp was taken at
    /// `observed_at_ns`: the same stamp, taken clean. The one test by which every reader (the engine, the catalog
    /// index and its memo, the usage memo, the team push) answers from what it kept.
    pub fn vouches_for(&self, now: &FileStamp, observed_at_ns: i64) -> bool {
        self == now && self.settled_at(observed_at_ns)
    }
}

/// Nanoseconds since the epoch from `stat`'s seconds and nanoseconds (saturating: a far-future time set by hand
/// must not overflow).
pub fn epoch_ns(secs: i64, nsec: i64) -> i64 {
    secs.saturating_mul(1_000_000_000).saturating_add(nsec)
}

/// pi's `stats.mtime.getTime()` for an `mtime` in nanoseconds: Node builds it from seconds and nanoseconds as
/// below (so it may carry a fraction of a millisecond, and the result must be computed the same way to compare
/// equal).
pub fn mtime_ms_of(mtime_ns: i64) -> f64 {
    let secs = mtime_ns.div_euclid(1_000_000_000);
    let nsec = mtime_ns.rem_euclid(1_000_000_000);
    secs as f64 * 1000.0 + nsec as f64 / 1e6
}

/// Now, in nanoseconds since the epoch: when a file was looked at, for [`Known::racy`].
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// The bytes of `file` in `[at, at + len)`, or None when they cannot all be read.
pub fn bytes_at(file: &File, at: u64, len: u64) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; usize::try_from(len).ok()?];
    file.read_exact_at(&mut buf, at).ok()?;
    Some(buf)
}

/// True when `file` still starts with `head` and has `tail` just before `end`: what was read is still there.
fn continues(file: &File, head: &[u8], tail: &[u8], end: u64) -> bool {
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
        !self.stamp.settled_at(self.observed_at_ns)
    }

    /// What the file's stamp `now` tells without reading it, when that is enough: another file or no regular file
    /// ([`FileState::Replaced`]), shorter than what was read ([`FileState::Shrunk`]), or a stamp that vouches for
    /// what was read ([`FileState::Same`], or [`FileState::Grew`] when the file goes on past `len`, as with an
    /// unfinished last line). None when only the known bytes can tell: [`Known::judge`] reads them.
    pub fn judge_stamp(&self, now: &FileStamp) -> Option<FileState> {
        if !now.same_file(self.stamp) || !now.regular {
            Some(FileState::Replaced)
        } else if now.size < self.len {
            Some(FileState::Shrunk)
        } else if self.stamp.vouches_for(now, self.observed_at_ns) {
            Some(self.grew_or_same(now))
        } else {
            None
        }
    }

    /// Compares the file as `now` stamps it with what we know, as cheaply as that can be told: nothing is read
    /// when [`Known::judge_stamp`] can tell; else the known bytes are read (through `file`, a handle of the file
    /// `now` describes), and when it was written to (`mtime` or `ctime` moved) without growing, it is
    /// [`FileState::Rewritten`], since only reading it again can say what changed (a `chmod` also moves `ctime`:
    /// it costs a read, never a missed rewrite).
    pub fn judge(&self, now: &FileStamp, file: &File) -> FileState {
        if let Some(state) = self.judge_stamp(now) {
            return state;
        }
        let stamp = self.stamp;
        let written = now.mtime_ns != stamp.mtime_ns || now.ctime_ns != stamp.ctime_ns;
        if !continues(file, self.head, self.tail, self.len) || (now.size <= stamp.size && written) {
            // Known bytes that changed, or a write that did not make it longer: only reading it again can tell
            // what changed.
            FileState::Rewritten
        } else {
            self.grew_or_same(now)
        }
    }

    fn grew_or_same(&self, now: &FileStamp) -> FileState {
        if now.size > self.len {
            FileState::Grew(now.size)
        } else {
            FileState::Same
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
    fn mtime_ms_is_nodes_sum_of_seconds_and_nanoseconds() {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata("/").unwrap();
        let expected = meta.mtime() as f64 * 1000.0 + meta.mtime_nsec() as f64 / 1e6;
        assert_eq!(FileStamp::of(&meta).mtime_ms(), expected);
        let stamp = FileStamp { mtime_ns: 1_767_225_600_123_456_789, ..FileStamp::default() };
        assert_eq!(stamp.mtime_ms(), 1_767_225_600.0 * 1000.0 + 123_456_789.0 / 1e6);
    }

    #[test]
    fn a_stamp_vouches_only_for_the_same_stamp_taken_outside_the_racy_window() {
        let kept =
            FileStamp { dev: 1, ino: 2, size: 10, mtime_ns: 5_000_000_000, ctime_ns: 7_000_000_000, regular: true };
        let clean = kept.ctime_ns + RACY_WINDOW_NS;
        assert!(kept.vouches_for(&kept, clean));
        assert!(!kept.vouches_for(&kept, clean - 1), "taken within the window of the later of mtime and ctime");
        // A same-length rewrite whose mtime was set back: only the change time says so.
        let rewritten = FileStamp { ctime_ns: kept.ctime_ns + 1, ..kept };
        assert!(!kept.vouches_for(&rewritten, clean + RACY_WINDOW_NS));
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
