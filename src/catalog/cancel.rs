//! Cancelling catalog work: a flag every loop of a listing, lookup or search checks, so a host that gives up on a
//! request stops its work (and a file of gigabytes stops mid-read). The same check stops work that hit a failure
//! it must not skip: a listing that could not open a file because the process ran out of descriptors fails
//! instead of answering without that file.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::session::error::{Error, Result};

/// A request's cancellation flag, cheap to check in every loop of catalog work: whoever runs the request (the
/// RPC layer on `$/cancelRequest` or at shutdown) sets it, and the listing, lookup or search stops at its next
/// check with [`Error::Cancelled`]. Clones share the flag.
///
/// It also carries the first failure that says nothing about the file it happened on
/// ([`Cancel::note_failure`]): the calls skip files pi skips (one that vanished, one pi cannot read), but once
/// the process itself ran out of descriptors or memory, skipping would answer "no sessions" for sessions that
/// are there, so the next check fails the call with that error instead.
#[derive(Clone, Debug, Default)]
pub struct Cancel(Arc<AtomicBool>, Arc<Mutex<Option<Failure>>>);

/// What [`Cancel::note_failure`] kept: enough to say it again.
#[derive(Debug)]
struct Failure {
    op: &'static str,
    path: String,
    errno: i32,
}

/// Whether a failure is the process's, not the file's: no descriptor or no memory left for it.
pub fn is_exhaustion(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::OutOfMemory
        || e.raw_os_error().is_some_and(|n| {
            [rustix::io::Errno::MFILE, rustix::io::Errno::NFILE, rustix::io::Errno::NOMEM, rustix::io::Errno::NOBUFS]
                .iter()
                .any(|e| e.raw_os_error() == n)
        })
}

impl Cancel {
    /// A flag nobody has set yet.
    pub fn new() -> Cancel {
        Cancel::default()
    }

    /// Asks every holder of the flag to stop.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether the work was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// `Err(Error::Cancelled)` once the work was cancelled; the noted failure once there is one.
    pub fn check(&self) -> Result<()> {
        if self.is_cancelled() {
            return Err(Error::Cancelled);
        }
        match &*self.1.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(f) => Err(Error::io(f.op, f.path.clone(), std::io::Error::from_raw_os_error(f.errno))),
            None => Ok(()),
        }
    }

    /// Notes why a file or directory could not be read, if it is a failure that must not be skipped
    /// ([`is_exhaustion`]): the next [`Cancel::check`] fails with it. Other failures are left to the caller.
    pub fn note_failure(&self, e: &Error) {
        if let Error::Io { op, path, source } = e {
            self.note_io_failure(op, path, source);
        }
    }

    /// [`Cancel::note_failure`] for a failure from `std::io`.
    pub fn note_io_failure(&self, op: &'static str, path: &str, e: &std::io::Error) {
        let Some(errno) = e.raw_os_error().filter(|_| is_exhaustion(e)) else { return };
        let mut failure = self.1.lock().unwrap_or_else(|e| e.into_inner());
        failure.get_or_insert_with(|| Failure { op, path: path.to_owned(), errno });
    }

    /// `reader`, failing its next refill once the work is cancelled: a single file of gigabytes stops too.
    pub fn reader<R: std::io::BufRead>(&self, reader: R) -> CancellableRead<'_, R> {
        CancellableRead { reader, cancel: self }
    }
}

/// See [`Cancel::reader`]. The check sits in `fill_buf`, so the buffered reader underneath keeps reading straight
/// into its buffer.
pub struct CancellableRead<'a, R> {
    reader: R,
    cancel: &'a Cancel,
}

impl<R: std::io::BufRead> std::io::Read for CancellableRead<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let available = std::io::BufRead::fill_buf(self)?;
        let n = available.len().min(buf.len());
        buf[..n].copy_from_slice(&available[..n]);
        self.reader.consume(n);
        Ok(n)
    }
}

impl<R: std::io::BufRead> std::io::BufRead for CancellableRead<'_, R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        if self.cancel.is_cancelled() {
            return Err(std::io::Error::other("cancelled"));
        }
        self.reader.fill_buf()
    }

    fn consume(&mut self, amount: usize) {
        self.reader.consume(amount)
    }
}
