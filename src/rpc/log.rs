//! Logging that can never stop or kill the server.
//!
//! Log lines are handed to one logging thread through a bounded queue; only that thread writes to stderr. A host
//! that never reads the server's stderr pipe stalls that thread alone, and a stderr that fails (closed, a full
//! disk, `/dev/full`) loses log lines, never requests. What cannot be queued or written is dropped and counted;
//! the count is reported on stderr as soon as a write succeeds again.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use tracing_subscriber::fmt::MakeWriter;

/// Bytes of log lines that may wait for stderr; beyond this, lines are dropped.
const QUEUED_BYTES: usize = 256 << 10;

/// Where log lines go: a queue in front of stderr. Cloning shares it.
#[derive(Clone)]
pub struct LogWriter(Arc<Shared>);

struct Shared {
    state: Mutex<Queue>,
    wake: Condvar,
    drained: Condvar,
    dropped: AtomicU64,
}

#[derive(Default)]
struct Queue {
    lines: VecDeque<Vec<u8>>,
    bytes: usize,
    writing: bool,
}

impl std::fmt::Debug for LogWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogWriter").field("dropped", &self.dropped()).finish()
    }
}

impl LogWriter {
    /// Starts the logging thread, writing to `sink` (stderr in the binary).
    pub fn start(sink: impl Write + Send + 'static) -> LogWriter {
        let shared = Arc::new(Shared {
            state: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            drained: Condvar::new(),
            dropped: AtomicU64::new(0),
        });
        let thread_shared = shared.clone();
        let started =
            std::thread::Builder::new().name("pi-sessiond-log".into()).spawn(move || write_loop(&thread_shared, sink));
        if started.is_err() {
            // No thread, no logs: every line is dropped (and counted) rather than written from a request's thread.
            shared.state.lock().unwrap_or_else(|e| e.into_inner()).writing = true;
        }
        LogWriter(shared)
    }

    /// Log lines lost so far (queue full, or stderr failing).
    pub fn dropped(&self) -> u64 {
        self.0.dropped.load(Ordering::Relaxed)
    }

    /// Waits (at most `timeout`) until every queued line is written: before the process exits.
    pub fn flush(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let mut q = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
        while !q.lines.is_empty() || q.writing {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            q = self.0.drained.wait_timeout(q, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    fn enqueue(&self, line: Vec<u8>) {
        if line.is_empty() {
            return;
        }
        let mut q = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
        if q.bytes + line.len() > QUEUED_BYTES {
            drop(q);
            self.0.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        q.bytes += line.len();
        q.lines.push_back(line);
        drop(q);
        self.0.wake.notify_one();
    }
}

fn write_loop(shared: &Shared, mut sink: impl Write) {
    let mut reported = 0;
    loop {
        let lines: Vec<Vec<u8>> = {
            let mut q = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            q.writing = false;
            shared.drained.notify_all();
            while q.lines.is_empty() {
                q = shared.wake.wait(q).unwrap_or_else(|e| e.into_inner());
            }
            q.writing = true;
            q.bytes = 0;
            q.lines.drain(..).collect()
        };
        let mut buf = Vec::with_capacity(lines.iter().map(Vec::len).sum::<usize>() + 80);
        let dropped = shared.dropped.load(Ordering::Relaxed);
        if dropped > reported {
            buf.extend_from_slice(
                format!(
                    "pi-sessiond: {} log lines were dropped (stderr was full, failing or not read)\n",
                    dropped - reported
                )
                .as_bytes(),
            );
        }
        let count = lines.len() as u64;
        lines.iter().for_each(|l| buf.extend_from_slice(l));
        if sink.write_all(&buf).and_then(|()| sink.flush()).is_ok() {
            reported = dropped;
        } else {
            shared.dropped.fetch_add(count, Ordering::Relaxed);
        }
    }
}

/// One log line being formatted; it is queued whole when dropped.
pub struct LogLine {
    writer: LogWriter,
    buf: Vec<u8>,
}

impl Write for LogLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LogLine {
    fn drop(&mut self) {
        self.writer.enqueue(std::mem::take(&mut self.buf));
    }
}

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = LogLine;

    fn make_writer(&'a self) -> LogLine {
        LogLine { writer: self.clone(), buf: Vec::new() }
    }
}

/// Installs the process's logging: `filter` (`RUST_LOG` wins), to stderr through a [`LogWriter`]. Never prints
/// its own errors (that would be a write to stderr from a request's thread).
pub fn init(filter: &str) -> LogWriter {
    init_as(filter, Lines::Timed)
}

/// How [`init_as`] writes each line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lines {
    /// Time, level, where it comes from, the message: a server's log, read later beside other logs.
    Timed,
    /// `pi-sessiond: warning: …`: a command's remark to the person who just ran it.
    Said,
}

/// [`init`], its lines written as `lines` says.
pub fn init_as(filter: &str, lines: Lines) -> LogWriter {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter));
    let writer = LogWriter::start(std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(false).log_internal_errors(false);
    let _ = match lines {
        Lines::Timed => builder.with_writer(writer.clone()).try_init(),
        Lines::Said => builder.event_format(Said).with_writer(writer.clone()).try_init(),
    };
    writer
}

/// The [`Lines::Said`] format.
struct Said;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for Said
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let level = match *event.metadata().level() {
            tracing::Level::ERROR => "error",
            tracing::Level::WARN => "warning",
            tracing::Level::INFO => "note",
            _ => "debug",
        };
        write!(writer, "pi-sessiond: {level}: ")?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Failing;

    impl Write for Failing {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from_raw_os_error(28))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A sink that blocks until told to go on, like a pipe nobody reads.
    struct Stalled(std::sync::mpsc::Receiver<()>, Arc<Mutex<Vec<u8>>>);

    impl Write for Stalled {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let _ = self.0.recv();
            self.1.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_failing_stderr_drops_and_counts_lines_instead_of_failing_the_logger() {
        let w = LogWriter::start(Failing);
        for _ in 0..10 {
            writeln!(w.make_writer(), "a line").unwrap();
        }
        w.flush(Duration::from_secs(10));
        assert_eq!(w.dropped(), 10);
    }

    #[test]
    fn an_unread_stderr_never_blocks_the_logging_thread_s_callers() {
        let (go, wait) = std::sync::mpsc::channel();
        let out = Arc::new(Mutex::new(Vec::new()));
        let w = LogWriter::start(Stalled(wait, out.clone()));
        // Far more than the queue holds: every call returns at once, the excess is dropped.
        let line = vec![b'x'; 1000];
        for _ in 0..2000 {
            let mut l = w.make_writer();
            l.write_all(&line).unwrap();
        }
        assert!(w.dropped() > 1000, "{}", w.dropped());
        // Once stderr moves again, the drop is reported.
        for _ in 0..4000 {
            let _ = go.send(());
        }
        writeln!(w.make_writer(), "after").unwrap();
        w.flush(Duration::from_secs(10));
        let text = String::from_utf8_lossy(&out.lock().unwrap()).into_owned();
        assert!(text.contains("log lines were dropped"), "{}", &text[text.len().saturating_sub(200)..]);
    }
}
