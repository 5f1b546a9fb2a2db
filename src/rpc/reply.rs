//! One request's answer. A [`Reply`] is made when a request arrives and travels with its work; answering it frames
//! the response (once: a cancellation that answered first wins), and dropping it tells the event loop the request
//! is over. A result rendered from a session file goes out as one message when it is small and is streamed when it
//! is not, so a result larger than memory never has to be in memory. The envelope around a result or an error is
//! `envelope`'s (jsonrpsee's types, the host's id as written).

use crate::rpc::error::WireKind;
use crate::session::ErrorKind;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use jsonrpsee::types::ErrorObjectOwned;
use serde::Serialize;
use serde_json::value::RawValue;

use super::envelope;
use super::error::rpc_error;
use super::framing::{Framing, Message, StreamEscaper};
use super::transport::{Outbox, StreamSender};
use crate::catalog::listing::Cancel;
use crate::session::render::JsonOut;

/// A rendered result longer than this is streamed rather than sent as one message.
pub const STREAM_AT: usize = 4 << 20;

/// [`STREAM_AT`] for a result that need not be checked, in line framing: collecting it gains nothing, and growing
/// the buffer it is collected in touches and copies megabytes of fresh memory before the first byte goes out (a
/// skeleton snapshot of the 40 MB session is 1.7 MiB). In LSP framing a streamed result is rendered twice (its
/// length first), so there results stream from [`STREAM_AT`] on as before.
const STREAM_UNCHECKED_AT: usize = PIECE;

/// The size of the pieces a streamed result travels to the writer in.
const PIECE: usize = 256 << 10;

/// A handler's successful result: a value to serialise, JSON text already written, or nothing because the answer
/// was already sent (streamed, or cancelled). `T` is the result type the method table declares.
pub enum Out<T> {
    /// A value.
    Value(T),
    /// The result's JSON text.
    Json(Vec<u8>, PhantomData<T>),
    /// The answer is already on its way.
    Sent(PhantomData<T>),
}

impl<T> Out<T> {
    /// JSON text as the result.
    pub fn json(text: Vec<u8>) -> Out<T> {
        Out::Json(text, PhantomData)
    }

    fn from_rendered(r: Rendered) -> Out<T> {
        match r {
            Rendered::Json(b) => Out::json(b),
            Rendered::Sent => Out::Sent(PhantomData),
        }
    }
}

/// What [`Reply::render`] did.
pub enum Rendered {
    /// The result was small: here is its text.
    Json(Vec<u8>),
    /// The result was streamed (or the request was already answered).
    Sent,
}

/// Where an answer goes.
enum Target {
    /// Straight to the host.
    Direct(Outbox),
    /// Into a batch's array, at this position.
    Batch(Arc<Batch>, usize),
}

/// The part of a request's answer that the event loop keeps, to cancel it.
pub struct ReplyState {
    id: Box<RawValue>,
    key: u64,
    target: Target,
    answered: AtomicBool,
    cancel: Cancel,
    done: Arc<dyn Fn(u64) + Send + Sync>,
    /// The request's span (method, id, and the handle once known): work for it runs inside it, wherever it runs.
    span: tracing::Span,
}

impl std::fmt::Debug for ReplyState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplyState").field("id", &self.id).field("key", &self.key).finish_non_exhaustive()
    }
}

impl ReplyState {
    /// The request's id, as the host wrote it.
    pub fn id(&self) -> &RawValue {
        &self.id
    }

    /// Cancels the request: unless it already answered, the host gets `-32800` now; work not yet started skips
    /// itself (see [`Reply::is_answered`]) and catalog work under way stops at its next check.
    pub fn cancel(&self, why: &str) {
        self.cancel.cancel();
        let e = rpc_error(ErrorKind::Cancelled, why, serde_json::json!({}));
        // The event loop cancels, and it never waits on the host.
        self.deliver(error_message(&self.id, &e), false);
    }

    fn deliver(&self, msg: Message, may_wait: bool) {
        if self.answered.swap(true, Ordering::SeqCst) {
            return;
        }
        tracing::debug!(parent: &self.span, bytes = msg.len(), "answered");
        match &self.target {
            Target::Direct(out) if may_wait => out.send(msg),
            Target::Direct(out) => out.send_now(msg),
            Target::Batch(batch, i) => batch.put(*i, msg.into_bytes(), may_wait),
        }
    }
}

/// A request's answer, owned by the work that produces it.
pub struct Reply {
    state: Arc<ReplyState>,
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.state.fmt(f)
    }
}

impl Reply {
    /// The answer to request `id` (as the host wrote it) numbered `key`, going straight to the host. `done(key)`
    /// runs when the reply is dropped.
    pub fn direct(
        id: &RawValue,
        key: u64,
        outbox: Outbox,
        done: Arc<dyn Fn(u64) + Send + Sync>,
        span: tracing::Span,
    ) -> Reply {
        Reply::with_target(id, key, Target::Direct(outbox), done, span)
    }

    /// The answer to request `id` inside a batch.
    pub fn in_batch(
        id: &RawValue,
        key: u64,
        batch: &Arc<Batch>,
        done: Arc<dyn Fn(u64) + Send + Sync>,
        span: tracing::Span,
    ) -> Reply {
        let index = batch.expect_one();
        Reply::with_target(id, key, Target::Batch(batch.clone(), index), done, span)
    }

    fn with_target(
        id: &RawValue,
        key: u64,
        target: Target,
        done: Arc<dyn Fn(u64) + Send + Sync>,
        span: tracing::Span,
    ) -> Reply {
        let state = ReplyState {
            id: id.to_owned(),
            key,
            target,
            answered: AtomicBool::new(false),
            cancel: Cancel::new(),
            done,
            span,
        };
        Reply { state: Arc::new(state) }
    }

    /// The request's span: work for the request enters it, so what it logs names the method and the handle.
    pub fn span(&self) -> &tracing::Span {
        &self.state.span
    }

    /// What the event loop keeps to cancel the request.
    pub fn state(&self) -> Arc<ReplyState> {
        self.state.clone()
    }

    /// The request's cancellation flag, for catalog work to check.
    pub fn cancel_token(&self) -> Cancel {
        self.state.cancel.clone()
    }

    /// Whether the answer went out already (a cancelled request's work can skip itself).
    pub fn is_answered(&self) -> bool {
        self.state.answered.load(Ordering::SeqCst)
    }

    /// Answers with a handler's outcome.
    pub fn answer<T: Serialize>(&self, outcome: Result<Out<T>, ErrorObjectOwned>) {
        match outcome {
            Ok(Out::Value(v)) => self.result(&v),
            Ok(Out::Json(text, _)) => self.result_json(text),
            Ok(Out::Sent(_)) => {}
            Err(e) => self.error(&e),
        }
    }

    /// Answers with a value.
    pub fn result<T: Serialize + ?Sized>(&self, value: &T) {
        if self.is_answered() {
            return;
        }
        match envelope::result(&self.state.id, value) {
            Ok(message) => self.state.deliver(message.into(), true),
            Err(e) => self.error(&internal(e)),
        }
    }

    /// Answers with JSON text this process produced (it goes out as it is, without a copy).
    pub fn result_json(&self, json: Vec<u8>) {
        if self.is_answered() {
            return;
        }
        self.state.deliver(Message(vec![envelope::result_head(&self.state.id), json, b"}".to_vec()]), true);
    }

    /// Answers with an error.
    pub fn error(&self, e: &ErrorObjectOwned) {
        self.state.deliver(error_message(&self.state.id, e), true);
    }

    /// Renders a result with `render`. A result under [`STREAM_AT`] (under a piece when unchecked in line framing)
    /// is collected and, when `check` is set (text copied from a session file, which another process may have
    /// rewritten), checked to be JSON before it is returned. A longer one is streamed to the host as it is
    /// rendered: in LSP framing `render` runs once more first, to count the length the header announces. If
    /// rendering fails after streaming began, the frame is cut off and an error response with the request's id
    /// follows it; the error is returned too (the request is answered already, so answering it again does nothing).
    pub fn render(
        &self,
        check: bool,
        render: &dyn Fn(&mut JsonOut<'_>) -> crate::session::Result<()>,
    ) -> Result<Rendered, ErrorObjectOwned> {
        if self.is_answered() {
            return Ok(Rendered::Sent);
        }
        let outbox = match &self.state.target {
            Target::Direct(out) => out.clone(),
            Target::Batch(..) => {
                // A batch's answers go out together in one array: nothing to stream into.
                let mut out = JsonOut::memory();
                render(&mut out).map_err(super::error::from_session)?;
                return checked(out.into_bytes(), check).map(Rendered::Json);
            }
        };
        let id = self.state.id.clone();
        let message = Streamed {
            head: envelope::result_head(&id),
            claim: &|| !self.state.answered.swap(true, Ordering::SeqCst),
            failed: &|e| error_message(&id, e).into_bytes(),
            fallback: &|| self.fallback(),
        };
        message.render(&outbox, check, render)
    }

    fn fallback(&self) -> Vec<u8> {
        let e = rpc_error(
            WireKind::InternalError,
            "the result could not be completed; the frame before this one is cut off",
            serde_json::json!({}),
        );
        error_message(&self.state.id, &e).into_bytes()
    }

    /// Renders a result (see [`Reply::render`]) as a handler's outcome.
    pub fn rendered<T>(
        &self,
        check: bool,
        render: &dyn Fn(&mut JsonOut<'_>) -> crate::session::Result<()>,
    ) -> Result<Out<T>, ErrorObjectOwned> {
        self.render(check, render).map(Out::from_rendered)
    }
}

/// A message whose last member is rendered, collected while it is small and streamed once it is not: a
/// result, or a notification that carries a snapshot.
pub struct Streamed<'a> {
    /// The message up to the rendered part ([`envelope::result_head`] or [`envelope::notification_head`]); a `}`
    /// closes it.
    pub head: Vec<u8>,
    /// Called once streaming starts; false means the message must not go out (the request was answered
    /// meanwhile).
    pub claim: &'a dyn Fn() -> bool,
    /// The complete message that follows a stream cut off by this error.
    pub failed: &'a dyn Fn(&ErrorObjectOwned) -> Vec<u8>,
    /// The complete message that follows a stream cut off for another reason (the renderer stopped).
    pub fallback: &'a dyn Fn() -> Vec<u8>,
}

impl Streamed<'_> {
    /// Renders the message's last part with `render`: under [`STREAM_AT`] (under a piece when unchecked in line
    /// framing) it is returned, checked to be JSON when `check` is set, for the caller to send; longer, it is
    /// streamed to `outbox` (in LSP framing after rendering it once to count its length). A render that fails
    /// after streaming began cuts the frame off, sends `failed`'s message, and returns the error.
    pub fn render(
        &self,
        outbox: &Outbox,
        check: bool,
        render: &dyn Fn(&mut JsonOut<'_>) -> crate::session::Result<()>,
    ) -> Result<Rendered, ErrorObjectOwned> {
        let framing = outbox.framing();
        let stream_at = if check || framing == Framing::Lsp { STREAM_AT } else { STREAM_UNCHECKED_AT };
        let mut sink =
            ResultSink { state: SinkState::Collecting(Vec::new()), message: self, outbox, framing, stream_at };
        let outcome = {
            let mut out = JsonOut::streaming(&mut sink);
            out.flush_at = PIECE;
            render(&mut out).and_then(|()| out.flush())
        };
        match (outcome, sink.state) {
            (Ok(()), SinkState::Collecting(bytes)) => checked(bytes, check).map(Rendered::Json),
            (Err(e), SinkState::Collecting(_)) => Err(super::error::from_session(e)),
            (Ok(()), SinkState::Streaming(stream)) => {
                stream.end();
                Ok(Rendered::Sent)
            }
            (Err(e), SinkState::Streaming(stream)) => {
                let e = super::error::from_session(e);
                stream.fail((self.failed)(&e));
                Err(e)
            }
            (_, SinkState::NeedsLength) => self.render_counted(outbox, render),
            (_, SinkState::Gone) => Ok(Rendered::Sent),
        }
    }

    /// LSP: counts the escaped length, then streams.
    fn render_counted(
        &self,
        outbox: &Outbox,
        render: &dyn Fn(&mut JsonOut<'_>) -> crate::session::Result<()>,
    ) -> Result<Rendered, ErrorObjectOwned> {
        let mut counter = Counter::default();
        {
            let mut out = JsonOut::streaming(&mut counter);
            out.flush_at = PIECE;
            render(&mut out).and_then(|()| out.flush()).map_err(super::error::from_session)?;
        }
        let mut head_len = Counter::default();
        std::io::Write::write_all(&mut head_len, &self.head).expect("counting cannot fail");
        let length = head_len.finish() + counter.finish() + 1;
        if !(self.claim)() {
            return Ok(Rendered::Sent);
        }
        let mut stream = outbox.stream(&self.head, Some(length), (self.fallback)());
        let outcome = {
            let mut sink = StreamWriter(&mut stream);
            let mut out = JsonOut::streaming(&mut sink);
            out.flush_at = PIECE;
            render(&mut out).and_then(|()| out.flush())
        };
        match outcome {
            Ok(()) => {
                stream.end();
                Ok(Rendered::Sent)
            }
            Err(e) => {
                let e = super::error::from_session(e);
                stream.fail((self.failed)(&e));
                Err(e)
            }
        }
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        if !self.is_answered() {
            tracing::error!("request {} ended without an answer", self.state.id);
            self.error(&rpc_error(WireKind::InternalError, "the server failed to answer", serde_json::json!({})));
        }
        (self.state.done)(self.state.key);
    }
}

fn internal(e: impl std::fmt::Display) -> ErrorObjectOwned {
    rpc_error(WireKind::InternalError, e.to_string(), serde_json::json!({}))
}

fn checked(bytes: Vec<u8>, check: bool) -> Result<Vec<u8>, ErrorObjectOwned> {
    if check {
        if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(&bytes) {
            return Err(rpc_error(
                ErrorKind::IoError,
                format!("the session file changed on disk under this handle ({e}); open it again"),
                serde_json::json!({}),
            ));
        }
    }
    Ok(bytes)
}

/// A complete error response to request `id` (`null` when it had none).
pub fn error_message(id: &RawValue, e: &ErrorObjectOwned) -> Message {
    envelope::error(id, e).into()
}

enum SinkState {
    Collecting(Vec<u8>),
    Streaming(StreamSender),
    /// LSP: the result outgrew [`STREAM_AT`] and its length must be counted first.
    NeedsLength,
    /// The output is gone, or the request was answered meanwhile.
    Gone,
}

/// Where a message's last part is rendered: collected while small, then streamed.
struct ResultSink<'a> {
    state: SinkState,
    message: &'a Streamed<'a>,
    outbox: &'a Outbox,
    framing: Framing,
    /// Collected bytes past which the result is streamed.
    stream_at: usize,
}

impl std::io::Write for ResultSink<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let stop = || std::io::Error::other("result not collected");
        match &mut self.state {
            SinkState::Collecting(bytes) if bytes.len() + buf.len() <= self.stream_at => bytes.extend_from_slice(buf),
            SinkState::Collecting(bytes) => {
                if self.framing == Framing::Lsp {
                    self.state = SinkState::NeedsLength;
                    return Err(stop());
                }
                if !(self.message.claim)() {
                    self.state = SinkState::Gone;
                    return Err(stop());
                }
                let collected = std::mem::take(bytes);
                let mut stream = self.outbox.stream(&self.message.head, None, (self.message.fallback)());
                let sent = stream.send(&collected).and_then(|()| stream.send(buf));
                self.state = SinkState::Streaming(stream);
                sent?;
            }
            SinkState::Streaming(stream) => stream.send(buf)?,
            SinkState::NeedsLength | SinkState::Gone => return Err(stop()),
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

struct StreamWriter<'a>(&'a mut StreamSender);

impl std::io::Write for StreamWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.send(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Counts the escaped length of what is written to it.
#[derive(Default)]
struct Counter {
    escaper: StreamEscaper,
    scratch: Vec<u8>,
    total: usize,
}

impl Counter {
    fn finish(mut self) -> usize {
        self.scratch.clear();
        self.escaper.finish(&mut self.scratch);
        self.total + self.scratch.len()
    }
}

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.scratch.clear();
        self.escaper.push(buf, &mut self.scratch);
        self.total += self.scratch.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A batch's answers, sent together as one array once every request in it has answered.
pub struct Batch {
    outbox: Outbox,
    state: Mutex<BatchState>,
}

#[derive(Default)]
struct BatchState {
    answers: Vec<Option<Vec<u8>>>,
    given: usize,
    sealed: bool,
}

impl Batch {
    /// An empty batch.
    pub fn new(outbox: Outbox) -> Arc<Batch> {
        Arc::new(Batch { outbox, state: Mutex::new(BatchState::default()) })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BatchState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn expect_one(&self) -> usize {
        let mut s = self.lock();
        s.answers.push(None);
        s.answers.len() - 1
    }

    /// An answer that is ready now (an invalid element).
    pub fn answer_now(&self, msg: Message) {
        let i = self.expect_one();
        self.put(i, msg.into_bytes(), false);
    }

    /// No more answers will be expected; the array goes out once they are all in (or now, if none is missing).
    pub fn seal(&self) {
        let array = {
            let mut s = self.lock();
            s.sealed = true;
            complete(&mut s)
        };
        if let Some(a) = array {
            self.outbox.send_now(a);
        }
    }

    fn put(&self, index: usize, bytes: Vec<u8>, may_wait: bool) {
        let array = {
            let mut s = self.lock();
            if s.answers[index].is_none() {
                s.answers[index] = Some(bytes);
                s.given += 1;
            }
            complete(&mut s)
        };
        match array {
            Some(a) if may_wait => self.outbox.send(a),
            Some(a) => self.outbox.send_now(a),
            None => {}
        }
    }
}

/// The batch's array, once every answer is in.
fn complete(s: &mut BatchState) -> Option<Vec<u8>> {
    if !s.sealed || s.given < s.answers.len() || s.answers.is_empty() {
        return None;
    }
    let mut array = b"[".to_vec();
    for (n, a) in s.answers.drain(..).enumerate() {
        if n > 0 {
            array.push(b',');
        }
        array.extend(a.unwrap_or_default());
    }
    array.push(b']');
    s.given = 0;
    Some(array)
}
