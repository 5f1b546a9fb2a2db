//! The live web view (`pi-sessiond web`) and its offline twin (`pi-sessiond export --html`).
//!
//! The server listens on 127.0.0.1 only and prints its URL, with a random token, as the first line on stdout.
//! Every request must name this server in `Host` (so a DNS-rebinding page cannot reach it under another name),
//! must not come from another origin (`Origin`, when the browser sends one), and, for the page and its data, must
//! carry the token. The page's data comes from an in-process sidecar ([`bridge`]) through one seam ([`view`]);
//! the page itself ([`assets`]) is part of the binary, and nothing is fetched from anywhere else.

pub mod assets;
pub mod bridge;
pub mod export;
pub mod http;
pub mod view;

use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

use crate::cli::output::{describe_io, Failure, FailureKind};
use crate::session::json::Json;
use crate::session::ErrorKind;

use http::{Request, Response};
use view::View;

/// What `pi-sessiond web` serves.
#[derive(Clone, Debug)]
pub struct WebConfig {
    /// pi's agent directory.
    pub agent_dir: String,
    /// The catalog index, if one is to be used.
    pub index_path: Option<String>,
    /// The port on 127.0.0.1 (0: any free one).
    pub port: u16,
}

/// The server's identity, checked on every request.
struct Guard {
    port: u16,
    token: String,
}

impl Guard {
    /// Why `request` is refused, if it is.
    fn refuse(&self, request: &Request, needs_token: bool) -> Option<&'static str> {
        let ours = |authority: &str| {
            [format!("127.0.0.1:{}", self.port), format!("localhost:{}", self.port)]
                .iter()
                .any(|a| a.eq_ignore_ascii_case(authority))
        };
        if !request.header("host").is_some_and(ours) {
            return Some("this server answers only to its own address (Host)");
        }
        if let Some(origin) = request.header("origin") {
            let authority = origin.strip_prefix("http://").unwrap_or("");
            if !ours(authority) {
                return Some("requests from other pages are refused (Origin)");
            }
        }
        if needs_token && !request.param("token").is_some_and(|t| same_secret(t, &self.token)) {
            return Some("a valid token is required: use the URL pi-sessiond web printed");
        }
        None
    }
}

/// Compares without stopping at the first difference, so response times do not reveal the token.
fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Serves until the process is killed.
pub fn serve(config: WebConfig) -> Result<u8, Failure> {
    let listener = TcpListener::bind(("127.0.0.1", config.port))
        .map_err(|e| Failure::io(format!("cannot listen on 127.0.0.1:{}: {}", config.port, describe_io(&e))))?;
    let port = listener.local_addr().map_err(|e| Failure::io(describe_io(&e)))?.port();
    let bridge = bridge::Bridge::start(&config.agent_dir, config.index_path.clone(), true)
        .map_err(|e| Failure::io(format!("cannot start the sidecar: {}", describe_io(&e))))?;
    let guard = Arc::new(Guard { port, token: uuid::Uuid::new_v4().simple().to_string() });
    let view = View::new(bridge.clone());
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "http://127.0.0.1:{port}/?token={}", guard.token)
            .and_then(|()| out.flush())
            .map_err(|e| Failure::output(&e))?;
    }
    eprintln!("pi-sessiond web: showing the sessions of {}; open the URL above (Ctrl-C stops)", config.agent_dir);
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let (guard, view, bridge) = (guard.clone(), view.clone(), bridge.clone());
        std::thread::spawn(move || {
            let _ = connection(stream, &guard, &view, &bridge);
        });
    }
    Ok(0)
}

/// Answers the requests of one connection until it closes.
fn connection(stream: TcpStream, guard: &Guard, view: &View, bridge: &bridge::Bridge) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    loop {
        let request = match http::read_request(&mut reader) {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(()),
            Err(e) => {
                let _ = http::write_response(&mut out, &Response::text(400, &e.to_string()), true);
                return Ok(());
            }
        };
        let is_asset = request.path.starts_with("/assets/");
        if let Some(why) = guard.refuse(&request, !is_asset) {
            http::write_response(&mut out, &Response::text(403, why), true)?;
            return Ok(());
        }
        if request.path == "/api/events" {
            return events(&mut out, bridge);
        }
        let response = route(&request, view);
        http::write_response(&mut out, &response, request.wants_close())?;
        if request.wants_close() {
            return Ok(());
        }
    }
}

/// Forwards the sidecar's notifications, as the page's live events, until the page goes away.
fn events(out: &mut TcpStream, bridge: &bridge::Bridge) -> std::io::Result<()> {
    let notifications = bridge.listen();
    http::start_events(out)?;
    loop {
        match notifications.recv_timeout(std::time::Duration::from_secs(15)) {
            Ok(n) => {
                if let Some(event) = View::event(&n) {
                    let mut bytes = Vec::new();
                    event.write_preserving(&mut bytes);
                    http::write_event(out, &bytes)?;
                }
            }
            // A comment now and then finds out when the page has gone.
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                out.write_all(b": ping\n\n")?;
                out.flush()?;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return Ok(()),
        }
    }
}

fn route(request: &Request, view: &View) -> Response {
    let method = request.method.as_str();
    let asset = |name: &str| assets::get(name).map(|(kind, body)| Response::new(200, kind, body));
    let result: Option<Result<Json, Failure>> = match (method, request.path.as_str()) {
        ("GET", "/") => return Response::new(200, "text/html; charset=utf-8", assets::live_page()),
        ("GET", p) if p.starts_with("/assets/") => {
            return asset(&p["/assets/".len()..]).unwrap_or_else(|| Response::text(404, "no such asset"))
        }
        ("GET", "/api/sessions") => Some(view.sessions()),
        ("GET", "/api/search") => Some(view.search(request.param("q").unwrap_or(""))),
        ("POST", "/api/open") => Some(view.open(request.param("path").unwrap_or(""), true)),
        ("GET", "/api/snapshot") => Some(view.snapshot(request.param("handle").unwrap_or(""))),
        ("POST", "/api/close") => Some(view.close(request.param("handle").unwrap_or(""))),
        ("POST", "/api/entries") => {
            let body = Json::parse(&request.body);
            let ids: Vec<String> = match &body {
                Ok(Json::Array(ids)) => ids.iter().filter_map(|i| i.as_js_str().map(|s| s.to_string_lossy())).collect(),
                _ => return Response::text(400, "the body must be a JSON array of entry ids"),
            };
            Some(view.entries(request.param("handle").unwrap_or(""), &ids))
        }
        ("GET", "/api/context") => Some(view.context(request.param("handle").unwrap_or(""))),
        ("GET", "/api/usage") => Some(view.usage(request.param("handle").unwrap_or(""))),
        (_, p) if p == "/" || p.starts_with("/api/") => return Response::text(405, "method not allowed"),
        _ => None,
    };
    match result {
        None => Response::text(404, "not found"),
        Some(Ok(value)) => {
            let mut body = Vec::new();
            value.write_preserving(&mut body);
            Response::json(200, body)
        }
        Some(Err(f)) => {
            let not_found = [FailureKind::Session(ErrorKind::SessionNotFound), FailureKind::HandleNotFound];
            let status = if not_found.contains(&f.kind) { 404 } else { 400 };
            Response::json(status, f.to_json().into_bytes())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(host: Option<&str>, origin: Option<&str>, token: Option<&str>) -> Request {
        let mut r = Request { method: "GET".into(), path: "/".into(), ..Default::default() };
        if let Some(h) = host {
            r.headers.push(("host".into(), h.into()));
        }
        if let Some(o) = origin {
            r.headers.push(("origin".into(), o.into()));
        }
        if let Some(t) = token {
            r.query.push(("token".into(), t.into()));
        }
        r
    }

    #[test]
    fn only_requests_naming_this_server_from_its_own_pages_with_the_token_are_served() {
        let g = Guard { port: 4000, token: "secret".into() };
        assert_eq!(g.refuse(&request(Some("127.0.0.1:4000"), None, Some("secret")), true), None);
        assert_eq!(
            g.refuse(&request(Some("localhost:4000"), Some("http://localhost:4000"), Some("secret")), true),
            None
        );
        assert!(g.refuse(&request(Some("evil.example:4000"), None, Some("secret")), true).is_some(), "DNS rebinding");
        assert!(g.refuse(&request(None, None, Some("secret")), true).is_some(), "no Host");
        assert!(g.refuse(&request(Some("127.0.0.1:4001"), None, Some("secret")), true).is_some(), "another port");
        let other_page = request(Some("127.0.0.1:4000"), Some("http://evil.example"), Some("secret"));
        assert!(g.refuse(&other_page, true).is_some(), "another origin");
        assert!(g.refuse(&request(Some("127.0.0.1:4000"), None, Some("secreT")), true).is_some(), "wrong token");
        assert!(g.refuse(&request(Some("127.0.0.1:4000"), None, None), true).is_some(), "no token");
        assert_eq!(g.refuse(&request(Some("127.0.0.1:4000"), None, None), false), None, "assets need no token");
    }
}
