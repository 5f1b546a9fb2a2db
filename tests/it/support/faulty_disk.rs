//! A [`Disk`] that fails on demand, in-process: the real file system underneath, with one planned fault at a
//! chosen call (the N-th call of any kind, or the next call of one kind, optionally only on paths holding a
//! string). It counts every call and keeps a log of them, so a test can fail each call of a scripted sequence in
//! turn. The faults are what a disk does: `EIO`, `ENOSPC`, a short write (half the bytes taken, then `ENOSPC` on
//! the next write: a disk filling up), the same faults the `LD_PRELOAD` shim makes in the real binary, and a short
//! read (half the bytes asked for: what `pread` may give, which a reader must ask again for).

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use pi_sessiond::session::store::{Disk, RealDisk};

/// The kinds of call a [`Disk`] gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    Open,
    Write,
    ReadAt,
    SetLen,
    SyncData,
    SyncAll,
    Rename,
    Remove,
    SyncDir,
    Map,
}

/// What a planned fault does to the call it hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The call fails with this OS error and does nothing.
    Errno(i32),
    /// A write takes half its bytes (at least one) and returns; the next write fails with `ENOSPC`. On any other
    /// call: `EIO`.
    ShortWrite,
    /// A read gives half the bytes it was asked for (at least one) and succeeds. On any other call: `EIO`.
    ShortRead,
}

/// `EIO`, as a dying disk gives it.
pub const EIO: i32 = 5;
/// `ENOSPC`, as a full disk gives it.
pub const ENOSPC: i32 = 28;
/// `ENOMEM`: what `mmap` gives when the address space is full.
pub const ENOMEM: i32 = 12;

/// Which call a planned fault hits.
#[derive(Clone, Debug)]
enum Target {
    /// The call with this number (1-based, counted over every call since the disk was made).
    Number(u64),
    /// The next call of this kind on a path holding this text (any path when empty).
    Next(Call, String),
}

#[derive(Debug, Default)]
struct State {
    calls: u64,
    log: Vec<(Call, PathBuf)>,
    planned: Option<(Target, Fault)>,
    /// A short write was made: the next write fails with ENOSPC.
    full_after_short: bool,
    /// Calls pass uncounted and unfailed (a test looking at what the code under test did).
    aside: bool,
    /// The number of the call a fault hit, once one did.
    hit: Option<(u64, Call, PathBuf)>,
}

/// The disk: see the module doc.
#[derive(Debug, Default)]
pub struct FaultyDisk {
    state: Mutex<State>,
}

impl FaultyDisk {
    /// A disk that fails nothing until told to.
    pub fn new() -> Arc<FaultyDisk> {
        Arc::new(FaultyDisk::default())
    }

    /// Call number `n` (counted from the disk's making, 1-based) gets `fault`.
    pub fn fail_call(&self, n: u64, fault: Fault) {
        self.lock().planned = Some((Target::Number(n), fault));
    }

    /// The next call of kind `call` on a path holding `on` (any path when empty) gets `fault`.
    pub fn fail_next(&self, call: Call, on: &str, fault: Fault) {
        self.lock().planned = Some((Target::Next(call, on.to_owned()), fault));
    }

    /// Runs `look` with every call passing uncounted and unfailed: a test's own reads through the code under
    /// test (a handle's bodies) are not part of the sequence it fails call by call.
    pub fn aside<T>(&self, look: impl FnOnce() -> T) -> T {
        self.lock().aside = true;
        let seen = std::panic::catch_unwind(std::panic::AssertUnwindSafe(look));
        self.lock().aside = false;
        seen.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }

    /// How many calls were made.
    pub fn calls(&self) -> u64 {
        self.lock().calls
    }

    /// The call a planned fault hit (its number, kind and path), if one did.
    pub fn hit(&self) -> Option<(u64, Call, PathBuf)> {
        self.lock().hit.clone()
    }

    /// Every call made, in order, with the path it was about.
    pub fn log(&self) -> Vec<(Call, PathBuf)> {
        self.lock().log.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where a descriptor's file is now (Linux's `/proc/self/fd`), for the log and for faults aimed at a path.
    fn path_of(file: &File) -> PathBuf {
        use std::os::fd::AsRawFd;
        std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).unwrap_or_default()
    }

    /// Counts a call and says which fault, if any, it gets.
    fn enter(&self, call: Call, path: PathBuf) -> Option<Fault> {
        let mut s = self.lock();
        if s.aside {
            return None;
        }
        s.calls += 1;
        s.log.push((call, path.clone()));
        if call == Call::Write && s.full_after_short {
            s.full_after_short = false;
            return Some(Fault::Errno(ENOSPC));
        }
        let hits = match &s.planned {
            Some((Target::Number(n), _)) => *n == s.calls,
            Some((Target::Next(kind, on), _)) => *kind == call && path.to_string_lossy().contains(on.as_str()),
            None => false,
        };
        if !hits {
            return None;
        }
        let (_, fault) = s.planned.take().expect("planned");
        s.hit = Some((s.calls, call, path));
        if fault == Fault::ShortWrite && call == Call::Write {
            s.full_after_short = true;
        }
        Some(fault)
    }

    fn on_file(&self, call: Call, file: &File) -> Option<Fault> {
        self.enter(call, Self::path_of(file))
    }
}

fn error(fault: Fault) -> std::io::Error {
    match fault {
        Fault::Errno(code) => std::io::Error::from_raw_os_error(code),
        Fault::ShortWrite | Fault::ShortRead => std::io::Error::from_raw_os_error(EIO),
    }
}

impl Disk for FaultyDisk {
    fn open(&self, path: &Path, options: &OpenOptions) -> std::io::Result<File> {
        if let Some(fault) = self.enter(Call::Open, path.to_owned()) {
            return Err(error(fault));
        }
        RealDisk.open(path, options)
    }

    fn write(&self, file: &File, bytes: &[u8]) -> std::io::Result<usize> {
        match self.on_file(Call::Write, file) {
            None => RealDisk.write(file, bytes),
            Some(Fault::ShortWrite) if bytes.len() > 1 => RealDisk.write(file, &bytes[..bytes.len() / 2]),
            Some(Fault::ShortWrite) => Err(error(Fault::Errno(ENOSPC))),
            Some(fault) => Err(error(fault)),
        }
    }

    fn read_at(&self, file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        match self.on_file(Call::ReadAt, file) {
            None => RealDisk.read_at(file, buf, offset),
            Some(Fault::ShortRead) => {
                let half = buf.len().div_ceil(2);
                RealDisk.read_at(file, &mut buf[..half], offset)
            }
            Some(fault) => Err(error(fault)),
        }
    }

    fn set_len(&self, file: &File, len: u64) -> std::io::Result<()> {
        match self.on_file(Call::SetLen, file) {
            None => RealDisk.set_len(file, len),
            Some(fault) => Err(error(fault)),
        }
    }

    fn sync_data(&self, file: &File) -> std::io::Result<()> {
        match self.on_file(Call::SyncData, file) {
            None => RealDisk.sync_data(file),
            Some(fault) => Err(error(fault)),
        }
    }

    fn sync_all(&self, file: &File) -> std::io::Result<()> {
        match self.on_file(Call::SyncAll, file) {
            None => RealDisk.sync_all(file),
            Some(fault) => Err(error(fault)),
        }
    }

    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        match self.enter(Call::Rename, to.to_owned()) {
            None => RealDisk.rename(from, to),
            Some(fault) => Err(error(fault)),
        }
    }

    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        match self.enter(Call::Remove, path.to_owned()) {
            None => RealDisk.remove_file(path),
            Some(fault) => Err(error(fault)),
        }
    }

    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        match self.enter(Call::SyncDir, dir.to_owned()) {
            None => RealDisk.sync_dir(dir),
            Some(fault) => Err(error(fault)),
        }
    }

    fn map(&self, file: &File) -> std::io::Result<memmap2::Mmap> {
        match self.on_file(Call::Map, file) {
            None => RealDisk.map(file),
            Some(fault) => Err(error(fault)),
        }
    }
}
