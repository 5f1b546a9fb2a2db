//! Just enough HTTP/1.1 for a page on loopback: requests with a `Content-Length` body, keep-alive, plain
//! responses and one event stream. A hand-written parser keeps the binary free of a web stack for what is a
//! handful of routes on 127.0.0.1; everything it does not understand is refused.

use std::io::{BufRead, Read, Write};

/// The largest request head (request line and headers) accepted.
const MAX_HEAD: usize = 64 * 1024;
/// The largest request body accepted.
const MAX_BODY: usize = 4 * 1024 * 1024;

/// One request.
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
    /// The body.
    pub body: Vec<u8>,
}

impl Request {
    /// The first header with this (lower-case) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The first query parameter with this name.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// True when the client asked to close the connection after this request.
    pub fn wants_close(&self) -> bool {
        self.header("connection").is_some_and(|c| c.eq_ignore_ascii_case("close"))
    }
}

/// Reads the next request; None at the end of the connection.
pub fn read_request(reader: &mut impl BufRead) -> std::io::Result<Option<Request>> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
    let mut head = Vec::new();
    loop {
        let before = head.len();
        let n = reader.by_ref().take((MAX_HEAD - head.len()) as u64 + 1).read_until(b'\n', &mut head)?;
        if n == 0 {
            return if head.is_empty() { Ok(None) } else { Err(bad("connection closed inside a request")) };
        }
        if head.len() > MAX_HEAD {
            return Err(bad("request head too large"));
        }
        let line = &head[before..];
        if line == b"\r\n" || line == b"\n" {
            if before == 0 {
                // Tolerate blank lines between requests.
                head.clear();
                continue;
            }
            break;
        }
    }
    let text = String::from_utf8(head).map_err(|_| bad("request head is not UTF-8"))?;
    let mut lines = text.lines();
    let request_line = lines.next().ok_or_else(|| bad("empty request"))?;
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad("malformed request line"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(bad("not HTTP/1.x"));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut request = Request {
        method: method.to_owned(),
        path: percent_decode(path),
        query: query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (percent_decode(k), percent_decode(v))
            })
            .collect(),
        ..Default::default()
    };
    for line in lines {
        if line.is_empty() {
            continue;
        }
        let (name, value) = line.split_once(':').ok_or_else(|| bad("malformed header"))?;
        request.headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    if request.header("transfer-encoding").is_some() {
        return Err(bad("chunked request bodies are not accepted"));
    }
    let length = match request.header("content-length") {
        Some(v) => v.parse::<usize>().map_err(|_| bad("bad content-length"))?,
        None => 0,
    };
    if length > MAX_BODY {
        return Err(bad("request body too large"));
    }
    request.body = vec![0; length];
    reader.read_exact(&mut request.body)?;
    Ok(Some(request))
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

/// One response.
pub struct Response {
    /// The status code.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// A response with this status and type.
    pub fn new(status: u16, content_type: &'static str, body: impl Into<Vec<u8>>) -> Response {
        Response { status, content_type, body: body.into() }
    }

    /// A plain-text error.
    pub fn text(status: u16, message: &str) -> Response {
        Response::new(status, "text/plain; charset=utf-8", format!("{message}\n"))
    }

    /// A JSON body.
    pub fn json(status: u16, body: Vec<u8>) -> Response {
        Response::new(status, "application/json; charset=utf-8", body)
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        500 => "Internal Server Error",
        _ => "Status",
    }
}

/// Headers every response carries: nothing is cached, nothing leaks the tokened URL, nothing is framed or
/// loaded from elsewhere.
pub const SECURITY_HEADERS: &str = "Cache-Control: no-store\r\nReferrer-Policy: no-referrer\r\n\
X-Content-Type-Options: nosniff\r\nX-Frame-Options: DENY\r\nContent-Security-Policy: default-src 'none'; \
script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action \
'none'; frame-ancestors 'none'\r\n";

/// Writes `response`; `close` adds `Connection: close`.
pub fn write_response(out: &mut impl Write, response: &Response, close: bool) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{SECURITY_HEADERS}{}\r\n",
        response.status,
        reason(response.status),
        response.content_type,
        response.body.len(),
        if close { "Connection: close\r\n" } else { "" }
    );
    out.write_all(head.as_bytes())?;
    out.write_all(&response.body)?;
    out.flush()
}

/// Starts an event stream (`text/event-stream`): the connection then carries only events.
pub fn start_events(out: &mut impl Write) -> std::io::Result<()> {
    let head =
        format!("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n{SECURITY_HEADERS}Connection: close\r\n\r\n");
    out.write_all(head.as_bytes())?;
    // A comment, so the browser sees the stream open at once.
    out.write_all(b": open\n\n")?;
    out.flush()
}

/// Writes one event (`data:` lines; the text must be one line, as JSON text is).
pub fn write_event(out: &mut impl Write, data: &[u8]) -> std::io::Result<()> {
    out.write_all(b"data: ")?;
    out.write_all(data)?;
    out.write_all(b"\n\n")?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_with_a_query_and_a_body_is_read_whole_and_the_next_one_after_it() {
        let raw = b"POST /api/x?token=a%20b&q=c+d HTTP/1.1\r\nHost: 127.0.0.1:9\r\nContent-Length: 2\r\n\r\n{}GET / HTTP/1.1\r\n\r\n";
        let mut reader = std::io::BufReader::new(&raw[..]);
        let r = read_request(&mut reader).unwrap().unwrap();
        assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/api/x"));
        assert_eq!((r.param("token"), r.param("q")), (Some("a b"), Some("c d")));
        assert_eq!((r.header("host"), r.body.as_slice()), (Some("127.0.0.1:9"), &b"{}"[..]));
        let next = read_request(&mut reader).unwrap().unwrap();
        assert_eq!(next.path, "/");
        assert!(read_request(&mut reader).unwrap().is_none());
    }

    #[test]
    fn a_malformed_or_oversized_request_is_refused() {
        for raw in
            [&b"GARBAGE\r\n\r\n"[..], b"GET / SPDY/3\r\n\r\n", b"POST / HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n"]
        {
            assert!(read_request(&mut std::io::BufReader::new(raw)).is_err(), "{}", String::from_utf8_lossy(raw));
        }
        let huge = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(MAX_HEAD));
        assert!(read_request(&mut std::io::BufReader::new(huge.as_bytes())).is_err());
    }

    #[test]
    fn percent_escapes_are_decoded_and_broken_ones_kept() {
        assert_eq!(percent_decode("%2Ftmp%2Fa.jsonl"), "/tmp/a.jsonl");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }
}
