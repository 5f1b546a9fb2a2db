//! Frames in, frames out: a reader thread that turns the host's bytes into frames, a writer thread that is the
//! only owner of the output, and the outbox between the server and the writer.
//!
//! The outbox is bounded: while more than [`Limits::queued_bytes`] are waiting to be written (a host that stopped
//! reading), producers wait and the reader takes no more input, as a language server's transport does, so memory
//! stays bounded however long the host stalls. The reader also pauses while [`Limits::in_flight`] requests are
//! unanswered. A large result can be streamed: the writer takes its chunks from a small bounded channel as they
//! are rendered, so it never has to exist in memory whole.

use std::collections::VecDeque;
use std::io::{self, BufReader, Read, Write};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use super::framing::{
    encode, escape_line_separators, needs_escaping, Frame, FrameReader, Framing, Message, StreamEscaper,
};

/// How much the channel to the host may hold: a pipe's depth or a local socket's send buffer; the most an
/// unprivileged process may ask for a pipe by default (`/proc/sys/fs/pipe-max-size`).
#[cfg(target_os = "linux")]
const OUTPUT_DEPTH: usize = 1 << 20;

/// Makes the channel to the host [`OUTPUT_DEPTH`] deep. The kernel makes pipes 64 KiB deep, so a result of megabytes
/// (a skeleton snapshot of a 40 MB session is 1.7 MiB) went out in 27 rounds of the writer filling the pipe and
/// waiting for the host to wake and drain it: measured from a reader in Python, 6.5 ms for 1.7 MiB against 3.4 ms
/// through a 1 MiB pipe. A Node host's child gets a socket instead (libuv makes stdio a socket pair), whose send
/// buffer is asked to be as large (the kernel caps it at `net.core.wmem_max`): the snapshot's bytes past the plain
/// open's in a Node host, 1.61–1.67 → 1.16–1.42 ms (medians of 41 alternated new processes). Best effort: output
/// that is neither, or a user over the kernel's limits, keeps what it has; a TCP socket is left as the host made it.
#[cfg(target_os = "linux")]
fn deepen_output(out: &impl std::os::fd::AsFd) {
    if let Ok(depth) = rustix::pipe::fcntl_getpipe_size(out) {
        if depth < OUTPUT_DEPTH {
            let _ = rustix::pipe::fcntl_setpipe_size(out, OUTPUT_DEPTH);
        }
    } else if rustix::net::sockopt::socket_domain(out) == Ok(rustix::net::AddressFamily::UNIX) {
        // Only a local socket: a TCP socket's buffer, once set, is no longer sized by the kernel's autotuning.
        if rustix::net::sockopt::socket_send_buffer_size(out).is_ok_and(|depth| depth < OUTPUT_DEPTH) {
            let _ = rustix::net::sockopt::set_socket_send_buffer_size(out, OUTPUT_DEPTH);
        }
    }
}

/// Pipes and sockets elsewhere are left as they are.
#[cfg(not(target_os = "linux"))]
fn deepen_output(_out: &impl std::os::fd::AsFd) {}

/// Standard output written as it is: the writer thread frames and collects what it writes itself, and `Stdout`'s
/// line buffer looked for a newline in every piece of a streamed result (256 KiB each, seven for a 40 MB session's
/// skeleton snapshot). A descriptor that cannot be duplicated (closed) is left to `Stdout`, which swallows writes
/// to it.
fn unbuffered_stdout() -> Box<dyn Write + Send> {
    use std::os::fd::AsFd;
    match io::stdout().as_fd().try_clone_to_owned() {
        Ok(fd) => Box::new(std::fs::File::from(fd)),
        Err(_) => Box::new(io::stdout()),
    }
}

/// Where the server's bytes come from and go to.
pub struct Connection {
    input: Box<dyn Read + Send>,
    output: Box<dyn Write + Send>,
}

impl Connection {
    /// The process's stdin and stdout: the real server.
    pub fn stdio() -> Connection {
        deepen_output(&io::stdout());
        Connection::new(io::stdin(), unbuffered_stdout())
    }

    /// Any pair of byte streams.
    pub fn new(input: impl Read + Send + 'static, output: impl Write + Send + 'static) -> Connection {
        Connection { input: Box::new(input), output: Box::new(output) }
    }

    /// An in-memory pair: the server's end and the host's. Use this to drive the server from a test without a
    /// process; the host's end reads as slowly as a pipe would let it (the server's output is held back while the
    /// host does not read).
    pub fn memory() -> (Connection, MemoryHost) {
        let (to_server, from_host) = mpsc::channel();
        // One write in the channel at a time: a host that stops reading stops the writer at once, as a full pipe
        // does.
        let (to_host, from_server) = mpsc::sync_channel(1);
        let connection =
            Connection::new(ChannelReader { rx: from_host, buf: Vec::new(), pos: 0 }, ChannelWriter { tx: to_host });
        (connection, MemoryHost { input: Some(to_server), output: from_server, pending: Vec::new() })
    }

    /// Starts the reader and the writer. `deliver` gets every frame, then [`Incoming::Closed`] once; it returns
    /// false when the server no longer listens.
    pub fn start(
        self,
        framing: Option<Framing>,
        max_frame: usize,
        limits: Limits,
        mut deliver: impl FnMut(Incoming) -> bool + Send + 'static,
    ) -> Transport {
        let outbox = Outbox(Arc::new(OutboxShared {
            state: Mutex::new(OutState::default()),
            wake_writer: Condvar::new(),
            room: Condvar::new(),
            framing: OnceLock::new(),
            limits,
        }));
        if let Some(f) = framing {
            let _ = outbox.0.framing.set(f);
        }
        let writer_box = outbox.clone();
        let output = self.output;
        let writer = std::thread::Builder::new()
            .name("pi-sessiond-writer".into())
            .spawn(move || write_loop(&writer_box, output))
            .expect("writer thread");
        let reader_box = outbox.clone();
        let input = self.input;
        std::thread::Builder::new()
            .name("pi-sessiond-reader".into())
            .spawn(move || {
                let mut frames = FrameReader::new(BufReader::with_capacity(1 << 16, input), framing, max_frame);
                loop {
                    reader_box.wait_to_read();
                    match frames.next_frame() {
                        Ok(Some(frame)) => {
                            if let Some(f) = frames.framing() {
                                let _ = reader_box.0.framing.set(f);
                            }
                            if !deliver(Incoming::Frame(frame)) {
                                return;
                            }
                        }
                        Ok(None) => break,
                        Err(e) => {
                            tracing::debug!("input failed: {e}");
                            break;
                        }
                    }
                }
                deliver(Incoming::Closed);
            })
            .expect("reader thread");
        Transport { outbox, writer }
    }
}

/// What the reader delivers.
#[derive(Debug)]
pub enum Incoming {
    /// A frame.
    Frame(Frame),
    /// The input ended (or failed).
    Closed,
}

/// How much the transport lets pile up before it holds the host back.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Bytes waiting to be written above which producers wait and the reader stops reading.
    pub queued_bytes: usize,
    /// Unanswered requests at which the reader stops reading.
    pub in_flight: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { queued_bytes: 8 << 20, in_flight: 4096 }
    }
}

/// A started connection.
pub struct Transport {
    /// Where everything the server sends goes.
    pub outbox: Outbox,
    writer: JoinHandle<()>,
}

impl Transport {
    /// Writes everything queued so far, then stops the writer.
    pub fn finish(self) {
        {
            let mut s = self.outbox.lock();
            s.stop = true;
        }
        self.outbox.0.wake_writer.notify_all();
        let _ = self.writer.join();
    }
}

/// The queue of outgoing messages, shared by every producer and the one writer.
#[derive(Clone)]
pub struct Outbox(Arc<OutboxShared>);

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox").field("framing", &self.0.framing.get()).finish_non_exhaustive()
    }
}

struct OutboxShared {
    state: Mutex<OutState>,
    wake_writer: Condvar,
    /// Signalled whenever bytes are written or a request finishes: producers and the reader wait on it.
    room: Condvar,
    framing: OnceLock<Framing>,
    limits: Limits,
}

#[derive(Default)]
struct OutState {
    queue: VecDeque<Outgoing>,
    /// Bytes queued and not yet written.
    bytes: usize,
    /// The output failed: everything sent from now on is dropped.
    gone: bool,
    /// Write what is queued, then end.
    stop: bool,
    in_flight: usize,
}

enum Outgoing {
    Message(Message),
    Stream(Stream),
}

/// A message whose body arrives in chunks.
struct Stream {
    /// `{"jsonrpc":"2.0","id":…,"result":`, escaped.
    head: Vec<u8>,
    /// LSP: the body's length (head, chunks and the closing brace, escaped), counted beforehand.
    length: Option<usize>,
    chunks: Receiver<Piece>,
    /// Where each piece's buffer goes back once written, for the sender's next piece.
    written: Sender<Vec<u8>>,
    /// The response that replaces it if it fails before its end (the frame so far is cut off).
    fallback: Vec<u8>,
}

enum Piece {
    Bytes(Vec<u8>),
    End,
    Fail(Vec<u8>),
}

impl Outbox {
    fn lock(&self) -> MutexGuard<'_, OutState> {
        self.0.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The framing in use (JSONL until the host's first frame says otherwise).
    pub fn framing(&self) -> Framing {
        self.0.framing.get().copied().unwrap_or(Framing::Jsonl)
    }

    /// Queues a message, first waiting while the queue is over its limit (call from worker threads).
    pub fn send(&self, msg: impl Into<Message>) {
        let msg = msg.into();
        let mut s = self.wait_for_room(self.lock());
        self.push(&mut s, msg);
    }

    /// Queues a message at once, whatever the queue holds (the event loop, which must never wait on the host).
    pub fn send_now(&self, msg: impl Into<Message>) {
        let msg = msg.into();
        let mut s = self.lock();
        self.push(&mut s, msg);
    }

    fn push(&self, s: &mut OutState, msg: Message) {
        if s.gone {
            return;
        }
        s.bytes += msg.len();
        s.queue.push_back(Outgoing::Message(msg));
        self.0.wake_writer.notify_one();
    }

    fn wait_for_room<'a>(&self, mut s: MutexGuard<'a, OutState>) -> MutexGuard<'a, OutState> {
        while s.bytes > self.0.limits.queued_bytes && !s.gone {
            s = self.0.room.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s
    }

    /// Starts a streamed message: `head` (JSON, escaped here) goes out first, then what the returned sender is
    /// given, then `}`. In LSP framing `length` must be the whole body's escaped length. If the sender fails or is
    /// dropped before [`StreamSender::end`], the frame is cut off and `fallback` (a complete response) follows it.
    pub fn stream(&self, head: &[u8], length: Option<usize>, fallback: Vec<u8>) -> StreamSender {
        // Two chunks in flight: memory stays at a few chunks whatever the result's size.
        let (tx, rx) = mpsc::sync_channel(2);
        let (written, reusable) = mpsc::channel();
        let mut escaped = Vec::with_capacity(head.len());
        escape_line_separators(head, &mut escaped);
        let mut s = self.wait_for_room(self.lock());
        if !s.gone {
            s.queue.push_back(Outgoing::Stream(Stream { head: escaped, length, chunks: rx, written, fallback }));
            self.0.wake_writer.notify_one();
        }
        StreamSender { tx, escaper: StreamEscaper::default(), reusable, ended: false }
    }

    /// Counts a request in flight (the reader pauses at [`Limits::in_flight`]).
    pub fn request_started(&self) {
        self.lock().in_flight += 1;
    }

    /// A request was answered.
    pub fn request_finished(&self) {
        let mut s = self.lock();
        s.in_flight = s.in_flight.saturating_sub(1);
        drop(s);
        self.0.room.notify_all();
    }

    /// Blocks the reader while the host is not reading or too much is in flight.
    fn wait_to_read(&self) {
        let limits = self.0.limits;
        let mut s = self.lock();
        while (s.bytes > limits.queued_bytes || s.in_flight >= limits.in_flight) && !s.gone {
            s = self.0.room.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// The producer's end of a streamed message.
pub struct StreamSender {
    tx: SyncSender<Piece>,
    escaper: StreamEscaper,
    /// Buffers of pieces already written: a streamed result of megabytes reuses the few in flight, where a fresh
    /// buffer for every piece was fresh memory to fault in and give back each time.
    reusable: Receiver<Vec<u8>>,
    ended: bool,
}

impl StreamSender {
    /// Sends bytes of the body (waits while the writer is behind). Fails once the output is gone.
    pub fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        let mut out = self.reusable.try_recv().unwrap_or_default();
        out.clear();
        out.reserve(bytes.len());
        self.escaper.push(bytes, &mut out);
        self.tx.send(Piece::Bytes(out)).map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))
    }

    /// The body is complete.
    pub fn end(mut self) {
        let mut rest = Vec::new();
        self.escaper.finish(&mut rest);
        if !rest.is_empty() {
            let _ = self.tx.send(Piece::Bytes(rest));
        }
        let _ = self.tx.send(Piece::End);
        self.ended = true;
    }

    /// The body cannot be completed: the frame is cut off and `response` (a complete message) follows it.
    pub fn fail(mut self, response: Vec<u8>) {
        let _ = self.tx.send(Piece::Fail(response));
        self.ended = true;
    }
}

/// The writer thread: the only owner of the output.
fn write_loop(outbox: &Outbox, mut output: Box<dyn Write + Send>) {
    let mut buf = Vec::new();
    loop {
        let mut s = outbox.lock();
        while s.queue.is_empty() && !s.stop {
            s = outbox.0.wake_writer.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        let Some(first) = s.queue.pop_front() else { return };
        let framing = outbox.framing();
        let result = match first {
            Outgoing::Stream(stream) => {
                drop(s);
                write_stream(&mut output, framing, stream)
            }
            Outgoing::Message(msg) => {
                // Coalesce what is already queued into one write.
                let mut taken = msg.len();
                let mut batch = vec![msg];
                while taken < 1 << 20 {
                    match s.queue.front() {
                        Some(Outgoing::Message(m)) => taken += m.len(),
                        _ => break,
                    }
                    let Some(Outgoing::Message(m)) = s.queue.pop_front() else { unreachable!() };
                    batch.push(m);
                }
                drop(s);
                let written = write_messages(&mut output, framing, &batch, &mut buf);
                let mut s = outbox.lock();
                s.bytes = s.bytes.saturating_sub(taken);
                drop(s);
                outbox.0.room.notify_all();
                written
            }
        };
        if let Err(e) = result {
            tracing::debug!("output failed: {e}; dropping what is left");
            let mut s = outbox.lock();
            s.gone = true;
            s.queue.clear();
            s.bytes = 0;
            drop(s);
            outbox.0.room.notify_all();
            return;
        }
        // A huge answer must not pin its size in memory for the process's life.
        if buf.capacity() > 8 << 20 {
            buf = Vec::new();
        }
    }
}

fn write_messages(output: &mut dyn Write, framing: Framing, batch: &[Message], buf: &mut Vec<u8>) -> io::Result<()> {
    buf.clear();
    for msg in batch {
        if framing == Framing::Jsonl && msg.len() >= 1 << 20 && !msg.0.iter().any(|p| needs_escaping(p)) {
            // A large message that needs no escaping is written as it is, not copied into the buffer first.
            output.write_all(buf)?;
            buf.clear();
            for part in &msg.0 {
                output.write_all(part)?;
            }
            output.write_all(b"\n")?;
        } else {
            if let Some(first) = msg.0.first() {
                tracing::trace!("> {}", String::from_utf8_lossy(&first[..first.len().min(2000)]));
            }
            msg.encode(framing, buf);
        }
    }
    output.write_all(buf)?;
    output.flush()
}

fn write_stream(output: &mut dyn Write, framing: Framing, stream: Stream) -> io::Result<()> {
    let Stream { head, length, chunks, written, fallback } = stream;
    // LSP: what is left of the announced length; the body may never exceed it.
    let mut left = match (framing, length) {
        (Framing::Lsp, Some(n)) => {
            output.write_all(format!("Content-Length: {n}\r\n\r\n").as_bytes())?;
            Some(n)
        }
        _ => None,
    };
    let put = |output: &mut dyn Write, bytes: &[u8], left: &mut Option<usize>| -> io::Result<bool> {
        match left {
            Some(n) if bytes.len() > *n => {
                output.write_all(&bytes[..*n])?;
                *n = 0;
                Ok(false)
            }
            Some(n) => {
                *n -= bytes.len();
                output.write_all(bytes).map(|()| true)
            }
            None => output.write_all(bytes).map(|()| true),
        }
    };
    let mut ok = put(output, &head, &mut left)?;
    let mut failure = None;
    while ok {
        match chunks.recv() {
            Ok(Piece::Bytes(b)) => {
                ok = put(output, &b, &mut left)?;
                // The sender may be gone already (its last piece): the buffer is then simply dropped.
                let _ = written.send(b);
            }
            Ok(Piece::End) => break,
            Ok(Piece::Fail(response)) => {
                failure = Some(response);
                ok = false;
            }
            Err(_) => ok = false,
        }
    }
    if left == Some(0) {
        // No room left for the closing brace: the body was longer than counted.
        ok = false;
    }
    if ok {
        // A body shorter than announced is padded with white space, which JSON allows before the closing brace.
        if let Some(n) = left {
            let pad = n.saturating_sub(1);
            output.write_all(&vec![b' '; pad])?;
        }
        // One write for the brace and the newline: the host reads the frame's end once, not its last byte alone.
        output.write_all(if framing == Framing::Jsonl { b"}\n" } else { b"}" })?;
    } else {
        tracing::warn!("a streamed result failed before its end; the frame is cut off and an error follows");
        match left {
            Some(n) => output.write_all(&vec![b' '; n])?,
            None => output.write_all(b"\n")?,
        }
        let mut buf = Vec::new();
        encode(framing, &failure.unwrap_or(fallback), &mut buf);
        output.write_all(&buf)?;
    }
    output.flush()
}

/// The host's end of [`Connection::memory`].
pub struct MemoryHost {
    input: Option<mpsc::Sender<Vec<u8>>>,
    output: Receiver<Vec<u8>>,
    pending: Vec<u8>,
}

impl MemoryHost {
    /// Sends bytes to the server.
    pub fn write(&self, bytes: &[u8]) {
        if let Some(tx) = &self.input {
            let _ = tx.send(bytes.to_vec());
        }
    }

    /// Ends the server's input.
    pub fn close_input(&mut self) {
        self.input = None;
    }

    /// The next bytes the server wrote (what is pending first), or None if nothing came within `timeout`.
    pub fn read_bytes(&mut self, timeout: Duration) -> Option<Vec<u8>> {
        if !self.pending.is_empty() {
            return Some(std::mem::take(&mut self.pending));
        }
        self.output.recv_timeout(timeout).ok()
    }

    /// The next LF-delimited frame the server wrote (without its `\n`), or None if none came within `timeout`
    /// (or the server's output ended).
    pub fn read_line(&mut self, timeout: Duration) -> Option<Vec<u8>> {
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.pending) {
                let mut line: Vec<u8> = self.pending.drain(..=i).collect();
                line.pop();
                return Some(line);
            }
            let chunk = self.output.recv_timeout(timeout).ok()?;
            self.pending.extend_from_slice(&chunk);
        }
    }
}

struct ChannelReader {
    rx: Receiver<Vec<u8>>,
    buf: Vec<u8>,
    pos: usize,
}

impl Read for ChannelReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.buf.len() {
            match self.rx.recv() {
                Ok(b) => {
                    self.buf = b;
                    self.pos = 0;
                }
                Err(_) => return Ok(0),
            }
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

struct ChannelWriter {
    tx: SyncSender<Vec<u8>>,
}

impl Write for ChannelWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.tx.send(buf.to_vec()).map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
