//! The seam between the store and the file system: every operation the write path and a body read make on a
//! session file (open, write, read at an offset, truncate, fsync, rename, remove) goes through one small trait,
//! [`Disk`], after redb's `StorageBackend`. Production uses [`RealDisk`], which is the system call and nothing
//! else; a test hands in a disk that fails on demand (the N-th write, a short write, `ENOSPC`, a failed fsync or
//! rename), so what the write path leaves behind after each failure is tested in-process, call by call, beside
//! the `LD_PRELOAD` tests that fail the real binary's system calls.
//!
//! The trait works on `std::fs::File`s rather than owning them: a faulty disk wraps the real one (it decides
//! whether to fail, then calls it), so the bytes a failure leaves are real bytes in a real file that a fresh open
//! reads as pi would. What stays outside is what the write path cannot get wrong by failing: `stat`
//! (`metadata`), `flock`, `lseek`, `canonicalize`, listing a directory for stale temporaries, and the reads of
//! [`identity`] (a failed one makes a file look changed, which reads it again).
//!
//! The catalog index opens and reads session files through a disk too (chosen when it is opened: the real one
//! unless a test hands it another), for its listings and its catch-up of searchable text; SQLite's own I/O on the
//! index file stays outside (its VFS), as do the team push's reads.

use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, LazyLock};

#[cfg(doc)]
use super::identity;

/// The file operations of the store. Each method is one system call of the real file system (`sync_dir`: an
/// open and an fsync of a directory); an implementation may fail any of them, or (`write`) take fewer bytes than
/// it was given, as a kernel may.
pub trait Disk: Debug + Send + Sync {
    /// Opens `path` with `options` (`open(2)`).
    fn open(&self, path: &Path, options: &OpenOptions) -> std::io::Result<File>;
    /// One `write(2)` of `bytes` to `file` at its offset (at the end for an `O_APPEND` handle); returns how many
    /// bytes it took.
    fn write(&self, file: &File, bytes: &[u8]) -> std::io::Result<usize>;
    /// One `pread(2)` into `buf` at `offset`; returns how many bytes it read (0 at the end of the file).
    fn read_at(&self, file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize>;
    /// `ftruncate(2)`.
    fn set_len(&self, file: &File, len: u64) -> std::io::Result<()>;
    /// `fdatasync(2)`.
    fn sync_data(&self, file: &File) -> std::io::Result<()>;
    /// `fsync(2)`.
    fn sync_all(&self, file: &File) -> std::io::Result<()>;
    /// `rename(2)`.
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()>;
    /// `unlink(2)`.
    fn remove_file(&self, path: &Path) -> std::io::Result<()>;
    /// fsync of the directory `dir`, so a name created or renamed in it survives a power loss.
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()>;
    /// `mmap(2)` of the whole of `file`, read-only, its pages mapped at once (`MAP_POPULATE`). Only for files
    /// pi-sessiond itself replaces by renaming a new one over them and never changes in place (its kept
    /// skeletons): a file cut shorter while mapped would fault the process on the next read of its lost end.
    fn map(&self, file: &File) -> std::io::Result<memmap2::Mmap>;
}

/// The file system as it is: each method is the system call its doc names.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealDisk;

impl Disk for RealDisk {
    fn map(&self, file: &File) -> std::io::Result<memmap2::Mmap> {
        // SAFETY: callers map only files that are replaced by rename and never truncated or written in place
        // (see the trait), so the mapping's bytes stay as they were for as long as it lives.
        unsafe { memmap2::MmapOptions::new().populate().map(file) }
    }

    fn open(&self, path: &Path, options: &OpenOptions) -> std::io::Result<File> {
        options.open(path)
    }

    fn write(&self, mut file: &File, bytes: &[u8]) -> std::io::Result<usize> {
        file.write(bytes)
    }

    fn read_at(&self, file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        FileExt::read_at(file, buf, offset)
    }

    fn set_len(&self, file: &File, len: u64) -> std::io::Result<()> {
        file.set_len(len)
    }

    fn sync_data(&self, file: &File) -> std::io::Result<()> {
        file.sync_data()
    }

    fn sync_all(&self, file: &File) -> std::io::Result<()> {
        file.sync_all()
    }

    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        std::fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

/// The process's one [`RealDisk`], shared (an open costs a reference count, not an allocation).
pub fn real_disk() -> Arc<dyn Disk> {
    static REAL: LazyLock<Arc<dyn Disk>> = LazyLock::new(|| Arc::new(RealDisk));
    REAL.clone()
}

/// An open file and the disk its operations go through: the store's handle type, so no call on a session file
/// can bypass the seam by accident.
#[derive(Debug)]
pub struct DiskFile {
    file: File,
    disk: Arc<dyn Disk>,
}

impl DiskFile {
    /// Opens `path` with `options` on `disk`.
    pub fn open(disk: &Arc<dyn Disk>, path: &str, options: &OpenOptions) -> std::io::Result<DiskFile> {
        Ok(DiskFile { file: disk.open(Path::new(path), options)?, disk: disk.clone() })
    }

    /// A file opened elsewhere, from now on used through `disk`.
    pub fn new(file: File, disk: Arc<dyn Disk>) -> DiskFile {
        DiskFile { file, disk }
    }

    /// The file, no longer used through the seam (for a caller outside the store).
    pub fn into_file(self) -> File {
        self.file
    }

    /// The whole file mapped read-only ([`Disk::map`]: only for files that are never changed in place).
    pub fn map(&self) -> std::io::Result<memmap2::Mmap> {
        self.disk.map(&self.file)
    }

    /// The file itself, for what is outside the seam (`stat`, `flock`, `lseek`, identity's reads).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The disk this file's operations go through.
    pub fn disk(&self) -> &Arc<dyn Disk> {
        &self.disk
    }

    /// Another descriptor of the same open file (`dup(2)`), on the same disk.
    pub fn try_clone(&self) -> std::io::Result<DiskFile> {
        Ok(DiskFile { file: self.file.try_clone()?, disk: self.disk.clone() })
    }

    /// One write ([`Disk::write`]).
    pub fn write(&self, bytes: &[u8]) -> std::io::Result<usize> {
        self.disk.write(&self.file, bytes)
    }

    /// Writes all of `bytes`, in as many writes as the disk needs.
    pub fn write_all(&self, mut bytes: &[u8]) -> std::io::Result<()> {
        while !bytes.is_empty() {
            match self.write(bytes) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => bytes = &bytes[n..],
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// One read at `offset` ([`Disk::read_at`]).
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.disk.read_at(&self.file, buf, offset)
    }

    /// Fills `buf` from `offset`; a file that ends first is `UnexpectedEof`.
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        let got = read_up_to(self, buf, offset)?;
        if got < buf.len() {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "failed to fill whole buffer"));
        }
        Ok(())
    }

    /// A sequential reader of the file from `offset` on, each read a [`Disk::read_at`].
    pub fn reader_at(&self, offset: u64) -> DiskReader<'_> {
        DiskReader { file: self, offset }
    }

    /// Truncates or extends the file ([`Disk::set_len`]).
    pub fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.disk.set_len(&self.file, len)
    }

    /// [`Disk::sync_data`].
    pub fn sync_data(&self) -> std::io::Result<()> {
        self.disk.sync_data(&self.file)
    }

    /// [`Disk::sync_all`].
    pub fn sync_all(&self) -> std::io::Result<()> {
        self.disk.sync_all(&self.file)
    }

    /// The file's metadata (`fstat`, outside the seam).
    pub fn metadata(&self) -> std::io::Result<std::fs::Metadata> {
        self.file.metadata()
    }
}

/// Writes through [`DiskFile::write`], so a `BufWriter` over a file of the store stays on its disk.
impl Write for &DiskFile {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        DiskFile::write(self, bytes)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Reads a [`DiskFile`] in order from an offset (see [`DiskFile::reader_at`]).
pub struct DiskReader<'a> {
    file: &'a DiskFile,
    offset: u64,
}

impl Read for DiskReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read_at(buf, self.offset)?;
        self.offset += n as u64;
        Ok(n)
    }
}

/// Fills `buf` from `offset` on, as far as the file goes; returns how much it read.
pub fn read_up_to(file: &DiskFile, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}
