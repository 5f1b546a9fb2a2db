//! Cancelling catalog work: a flag every loop of a listing, lookup or search checks, so a host that gives up on a
//! request stops its work (and a file of gigabytes stops mid-read).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::session::error::{Error, Result};

/// A request's cancellation flag, cheap to check in every loop of catalog work: whoever runs the request (the
/// RPC layer on `$/cancelRequest` or at shutdown) sets it, and the listing, lookup or search stops at its next
/// check with [`Error::Cancelled`]. Clones share the flag.
#[derive(Clone, Debug, Default)]
pub struct Cancel(Arc<AtomicBool>);

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

    /// `Err(Error::Cancelled)` once the work was cancelled.
    pub fn check(&self) -> Result<()> {
        if self.is_cancelled() {
            Err(Error::Cancelled)
        } else {
            Ok(())
        }
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
