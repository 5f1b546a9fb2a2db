//! The web view's HTTP: hyper (HTTP/1.1 only) on tokio, behind a bounded pool of connections, so no load can
//! make the process run out of threads, descriptors or memory.
//!
//! At most [`MAX_CONNECTIONS`] connections are served at once. When the pool is full, a new connection takes the
//! place of the one that has been idle longest (between requests, or still sending a request head: whoever is not
//! being answered); when every connection is being answered, the new one gets a `503` and is closed. A connection
//! idle for [`IDLE_TIMEOUT`] is closed. The handler sees each request as soon as its head is read, before any of
//! its body ([`read_body`] reads a bounded body when the handler wants it), so checks come first.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::header::{HeaderName, HeaderValue};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// How many connections are served at once (well under the usual 1,024 descriptors, with room for sessions).
pub const MAX_CONNECTIONS: usize = 128;
/// How long a connection may sit without a request being answered before it is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest request head (request line and headers) accepted: hyper's read buffer is held to it.
const MAX_HEAD: usize = 64 * 1024;
/// The largest request body accepted: the API takes only lists of entry ids.
pub const MAX_BODY: usize = 256 * 1024;
/// How long a body may take to arrive once the handler asks for it.
const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a new connection waits for the place of an idle one it pushed out.
const TAKEOVER_WAIT: Duration = Duration::from_secs(1);

/// One request's head.
#[derive(Debug, Default)]
pub struct Request {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The query's `name=value` pairs, percent-decoded.
    pub query: Vec<(String, String)>,
    /// Header names (lower case) and values.
    pub headers: Vec<(String, String)>,
}

impl Request {
    fn from_parts(parts: &hyper::http::request::Parts) -> Request {
        let query = parts.uri.query().unwrap_or("");
        Request {
            method: parts.method.as_str().to_owned(),
            path: percent_decode(parts.uri.path()),
            query: query
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap_or((p, ""));
                    (percent_decode(k), percent_decode(v))
                })
                .collect(),
            headers: parts
                .headers
                .iter()
                .map(|(n, v)| (n.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).trim().to_owned()))
                .collect(),
        }
    }

    /// The first header with this (lower-case) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The first query parameter with this name.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// `%XX` and `+` decoded (`+` is a space in query strings; paths here never contain one).
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                match u8::from_str_radix(std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz"), 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A response's body: whole, or a stream of pieces (the event stream).
pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// One response.
pub struct Response {
    /// The status code.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: Body,
    /// Whether the connection ends after it (refusals: the client's unread body is never read).
    pub close: bool,
}

impl Response {
    /// A response with this status and type.
    pub fn new(status: u16, content_type: &'static str, body: impl Into<Vec<u8>>) -> Response {
        Response { status, content_type, body: Full::new(Bytes::from(body.into())).boxed_unsync(), close: false }
    }

    /// A plain-text error.
    pub fn text(status: u16, message: &str) -> Response {
        Response::new(status, "text/plain; charset=utf-8", format!("{message}\n"))
    }

    /// A JSON body.
    pub fn json(status: u16, body: Vec<u8>) -> Response {
        Response::new(status, "application/json; charset=utf-8", body)
    }

    /// An event stream (`text/event-stream`) of these pieces; it ends when they do.
    pub fn events(pieces: impl futures_util::Stream<Item = Bytes> + Send + 'static) -> Response {
        use futures_util::StreamExt;
        let body = http_body_util::StreamBody::new(pieces.map(|b| Ok::<_, Infallible>(Frame::data(b))));
        Response { status: 200, content_type: "text/event-stream", body: body.boxed_unsync(), close: false }
    }

    /// The same response, ending the connection after it.
    pub fn closing(self) -> Response {
        Response { close: true, ..self }
    }

    fn into_hyper(self) -> hyper::Response<Body> {
        let mut response = hyper::Response::new(self.body);
        *response.status_mut() = hyper::StatusCode::from_u16(self.status).unwrap_or(hyper::StatusCode::OK);
        let headers = response.headers_mut();
        headers.insert(hyper::header::CONTENT_TYPE, HeaderValue::from_static(self.content_type));
        for (name, value) in SECURITY_HEADERS {
            headers.insert(HeaderName::from_static(name), HeaderValue::from_static(value));
        }
        if self.close {
            headers.insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

/// Headers every response carries: nothing is cached, nothing leaks the tokened URL, nothing is framed or
/// loaded from elsewhere.
pub const SECURITY_HEADERS: [(&str, &str); 5] = [
    ("cache-control", "no-store"),
    ("referrer-policy", "no-referrer"),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src data:; connect-src 'self'; \
         base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
];

/// Why a body could not be read.
#[derive(Debug)]
pub enum BodyError {
    /// Larger than [`MAX_BODY`] (or it said it would be).
    TooLarge,
    /// It did not arrive in time, or the connection failed.
    Incomplete,
}

/// The request's body, at most [`MAX_BODY`] bytes, refused before reading when it announces more.
pub async fn read_body(body: Incoming) -> Result<Bytes, BodyError> {
    use hyper::body::Body as _;
    if body.size_hint().lower() > MAX_BODY as u64 {
        return Err(BodyError::TooLarge);
    }
    match tokio::time::timeout(BODY_TIMEOUT, Limited::new(body, MAX_BODY).collect()).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => Err(BodyError::TooLarge),
        _ => Err(BodyError::Incomplete),
    }
}

/// Marks its connection as being answered while it lives (an event stream keeps it for as long as it runs):
/// such a connection is neither idle nor pushed out.
pub struct Busy {
    pool: Arc<Pool>,
    id: u64,
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(slot) = self.pool.lock().get_mut(&self.id) {
            slot.busy -= 1;
            slot.idle_since = Instant::now();
        }
    }
}

struct Slot {
    busy: usize,
    idle_since: Instant,
    kick: Arc<Notify>,
}

/// The connections being served.
struct Pool {
    slots: Mutex<HashMap<u64, Slot>>,
    free: Arc<Semaphore>,
    next_id: AtomicU64,
}

impl Pool {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Slot>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn busy(self: &Arc<Self>, id: u64) -> Busy {
        if let Some(slot) = self.lock().get_mut(&id) {
            slot.busy += 1;
        }
        Busy { pool: self.clone(), id }
    }

    /// How long connection `id` has been idle (zero while it is being answered).
    fn idle_for(&self, id: u64) -> Duration {
        match self.lock().get(&id) {
            Some(slot) if slot.busy == 0 => slot.idle_since.elapsed(),
            _ => Duration::ZERO,
        }
    }

    /// Tells the connection idle longest to close; false when every connection is being answered.
    fn push_out_idlest(&self) -> bool {
        let mut slots = self.lock();
        let idlest = slots.iter().filter(|(_, s)| s.busy == 0).min_by_key(|(_, s)| s.idle_since).map(|(id, _)| *id);
        match idlest.and_then(|id| slots.remove(&id)) {
            Some(slot) => {
                slot.kick.notify_one();
                true
            }
            None => false,
        }
    }
}

/// Serves `listener` with `handler` until the process ends. The handler gets each request's head, its unread
/// body and the connection's [`Busy`] mark (kept by a response that streams).
pub async fn serve<H, F>(listener: TcpListener, handler: H)
where
    H: Fn(Request, Incoming, Busy) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response> + Send + 'static,
{
    let pool = Arc::new(Pool {
        slots: Mutex::new(HashMap::new()),
        free: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
        next_id: AtomicU64::new(1),
    });
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors or memory for a moment: the connections being served still are.
                tracing::warn!("accepting a connection: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let permit = match pool.free.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) if pool.push_out_idlest() => {
                match tokio::time::timeout(TAKEOVER_WAIT, pool.free.clone().acquire_owned()).await {
                    Ok(Ok(permit)) => permit,
                    _ => {
                        refuse(stream);
                        continue;
                    }
                }
            }
            Err(_) => {
                refuse(stream);
                continue;
            }
        };
        tokio::spawn(connection(stream, permit, pool.clone(), handler.clone()));
    }
}

/// Says "busy" to a connection there is no room for, if its buffer takes it at once, and closes it.
fn refuse(stream: TcpStream) {
    let body = "too many connections: try again in a moment\n";
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
         Connection: close\r\nRetry-After: 1\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.try_write(head.as_bytes());
}

async fn connection<H, F>(stream: TcpStream, permit: OwnedSemaphorePermit, pool: Arc<Pool>, handler: H)
where
    H: Fn(Request, Incoming, Busy) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response> + Send + 'static,
{
    let _ = stream.set_nodelay(true);
    let id = pool.next_id.fetch_add(1, Ordering::Relaxed);
    let kick = Arc::new(Notify::new());
    pool.lock().insert(id, Slot { busy: 0, idle_since: Instant::now(), kick: kick.clone() });
    let service = {
        let pool = pool.clone();
        hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let busy = pool.busy(id);
            let handler = handler.clone();
            async move {
                let (parts, body) = request.into_parts();
                let response = handler(Request::from_parts(&parts), body, busy).await;
                Ok::<_, Infallible>(response.into_hyper())
            }
        })
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .max_buf_size(MAX_HEAD)
        .header_read_timeout(None)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    loop {
        let idle = pool.idle_for(id);
        if idle >= IDLE_TIMEOUT {
            break;
        }
        tokio::select! {
            _ = &mut conn => break,
            _ = kick.notified() => break,
            _ = tokio::time::sleep(IDLE_TIMEOUT - idle) => {}
        }
    }
    pool.lock().remove(&id);
    drop(permit);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_escapes_are_decoded_and_broken_ones_kept() {
        assert_eq!(percent_decode("%2Ftmp%2Fa.jsonl"), "/tmp/a.jsonl");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }

    #[test]
    fn a_full_pool_pushes_out_the_connection_idle_longest_and_never_one_being_answered() {
        let pool = Arc::new(Pool {
            slots: Mutex::new(HashMap::new()),
            free: Arc::new(Semaphore::new(3)),
            next_id: AtomicU64::new(1),
        });
        let start = Instant::now();
        for (id, idle_for) in [(1, 5), (2, 9), (3, 7)] {
            let slot =
                Slot { busy: 0, idle_since: start - Duration::from_secs(idle_for), kick: Arc::new(Notify::new()) };
            pool.lock().insert(id, slot);
        }
        let answering = pool.busy(2);
        assert!(pool.push_out_idlest());
        assert_eq!(pool.lock().keys().copied().collect::<std::collections::BTreeSet<_>>(), [1, 2].into());
        assert!(pool.push_out_idlest());
        assert!(!pool.push_out_idlest(), "the one being answered stays");
        drop(answering);
        assert!(pool.push_out_idlest(), "and can go once answered");
    }
}
