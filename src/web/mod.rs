//! The live web view (`pi-sessiond web`) and its offline twin (`pi-sessiond export --html`).
//!
//! The server listens on 127.0.0.1 only and prints its URL, with a random token, as the first line on stdout.
//! Every request must name this server in `Host` (so a DNS-rebinding page cannot reach it under another name),
//! must not come from another origin (`Origin`, when the browser sends one), and, for the page and its data, must
//! carry the token. The page's data comes from an in-process sidecar ([`bridge`]) through one seam ([`view`]);
//! the page itself ([`assets`]) is part of the binary, and nothing is fetched from anywhere else. With
//! `--catalog URL` the sidecar answers from the team catalog (every machine's sessions, opened read-only, as the
//! URL's role may see them), and the server tells the pages when a push changed it.

pub mod assets;
pub mod bridge;
pub mod export;
pub mod http;
pub mod pages;
pub mod transcript;
pub mod view;

use std::io::Write;
use std::sync::Arc;

use hyper::body::Bytes;

use crate::cli::output::{describe_io, Failure, FailureKind};
use crate::rpc::team::{unavailable, TeamServer};
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
    /// The team catalog (`web --catalog URL`): every machine's sessions, read-only, as the URL's role sees them.
    pub catalog: Option<String>,
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

/// How many bytes of notifications one event stream holds for a page that is not reading; past them the page
/// is told to load its session again.
const EVENTS_BUDGET: usize = 4 << 20;
/// The largest notification (in bytes of the sidecar's text) the event stream turns into rows.
const EVENT_MAX: usize = 1 << 20;
/// The event that tells the page to load what it shows again.
const LAGGED: Bytes = Bytes::from_static(b"data: {\"kind\":\"lagged\"}\n\n");
/// How often the sessions directory is looked for while there is none.
const SESSIONS_DIR_RETRY: std::time::Duration = std::time::Duration::from_secs(2);
/// How often an idle event stream says something, so a page that has gone is noticed.
const EVENTS_PING: std::time::Duration = std::time::Duration::from_secs(15);

/// Serves until the process is killed.
pub fn serve(config: WebConfig) -> Result<u8, Failure> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // The sidecar calls wait on its answers: at most this many at once, the rest queue.
        .max_blocking_threads(16)
        .thread_name("pi-sessiond-web")
        .enable_all()
        .build()
        .map_err(|e| Failure::io(format!("cannot start the web server: {}", describe_io(&e))))?;
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(("127.0.0.1", config.port)))
        .map_err(|e| Failure::io(format!("cannot listen on 127.0.0.1:{}: {}", config.port, describe_io(&e))))?;
    let port = listener.local_addr().map_err(|e| Failure::io(describe_io(&e)))?.port();
    // The team catalog is reached once before anything is served, so a wrong URL or a refused role is an error
    // now rather than a page that lists nothing. Two connections: the check for pushes must not wait behind an
    // overview that reads every machine's usage.
    let team = match &config.catalog {
        Some(url) => {
            let connect = || TeamServer::new(url).map(Arc::new).map_err(|e| Failure::invalid(e.to_string()));
            let (reader, watcher) = (connect()?, connect()?);
            let fingerprint = watcher.with(|c| c.fingerprint().map_err(unavailable)).map_err(view::team_failure)?;
            Some((reader, watcher, fingerprint))
        }
        None => None,
    };
    let bridge =
        bridge::Bridge::start_with_catalog(&config.agent_dir, config.index_path.clone(), true, config.catalog.clone())
            .map_err(|e| Failure::io(format!("cannot start the sidecar: {}", describe_io(&e))))?;
    let guard = Arc::new(Guard { port, token: uuid::Uuid::new_v4().simple().to_string() });
    let mut view = View::new(bridge.clone());
    if let Some((reader, watcher, fingerprint)) = team {
        // Over the team catalog the list follows pushes (a `sessions` event: list again), not this machine's files.
        view = view.with_team(reader);
        follow_catalog(watcher, fingerprint, bridge.clone())
            .map_err(|e| Failure::io(format!("cannot start the web server: {}", describe_io(&e))))?;
    } else if view.watch_sessions().is_err() {
        // No sessions directory yet (pi makes it with the first session): it is looked for every few seconds,
        // and once watched, the pages load their list again, which then follows it.
        let (view, bridge) = (view.clone(), bridge.clone());
        std::thread::Builder::new()
            .name("pi-sessiond-web-watch".into())
            .spawn(move || loop {
                std::thread::sleep(SESSIONS_DIR_RETRY);
                if view.watch_sessions().is_ok() {
                    bridge.resync_listeners();
                    return;
                }
            })
            .map_err(|e| Failure::io(format!("cannot start the web server: {}", describe_io(&e))))?;
    }
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "http://127.0.0.1:{port}/?token={}", guard.token)
            .and_then(|()| out.flush())
            .map_err(|e| Failure::output(&e))?;
    }
    match &config.catalog {
        Some(_) => eprintln!("pi-sessiond web: showing the team catalog, read-only; open the URL above (Ctrl-C stops)"),
        None => eprintln!(
            "pi-sessiond web: showing the sessions of {}; open the URL above (Ctrl-C stops)",
            config.agent_dir
        ),
    }
    runtime.block_on(http::serve(listener, move |request, body, busy| {
        let (guard, view, bridge) = (guard.clone(), view.clone(), bridge.clone());
        answer(request, body, busy, guard, view, bridge)
    }));
    Ok(0)
}

/// How often the team catalog is asked whether a push changed it.
const CATALOG_POLL: std::time::Duration = std::time::Duration::from_millis(500);
/// How long to wait after the catalog could not be asked, before asking again.
const CATALOG_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// Tells every page when a push changed what the team catalog shows this role (its [`TeamCatalog::fingerprint`]
/// moved since `seen`), so each lists its sessions again: one question per half second for the whole server,
/// however many pages are open, on a connection of its own. Runs for as long as the process.
///
/// [`TeamCatalog::fingerprint`]: crate::team::TeamCatalog::fingerprint
fn follow_catalog(team: Arc<TeamServer>, mut seen: String, bridge: Arc<bridge::Bridge>) -> std::io::Result<()> {
    // Empty params: JSON-RPC allows none or an object, and jsonrpsee's Notification always writes them.
    let changed = crate::rpc::envelope::notification(view::CATALOG_CHANGED, &serde_json::Map::new());
    std::thread::Builder::new().name("pi-sessiond-web-catalog".into()).spawn(move || loop {
        let wait = match team.with(|c| c.fingerprint().map_err(unavailable)) {
            Ok(now) => {
                if now != seen {
                    seen = now;
                    bridge.announce(&changed);
                }
                CATALOG_POLL
            }
            // Logged by `unavailable`; the pages keep what they show until the catalog answers again.
            Err(_) => CATALOG_RETRY,
        };
        std::thread::sleep(wait);
    })?;
    Ok(())
}

/// Answers one request: its head is checked before anything else, its body read only after that.
async fn answer(
    request: Request,
    body: hyper::body::Incoming,
    busy: http::Busy,
    guard: Arc<Guard>,
    view: View,
    bridge: Arc<bridge::Bridge>,
) -> Response {
    let is_asset = request.path.starts_with("/assets/");
    if let Some(why) = guard.refuse(&request, !is_asset) {
        return Response::text(403, why).closing();
    }
    if request.path == "/api/events" {
        return events(bridge, busy, view.page_stream(request.param("page")));
    }
    let body = if request.method == "POST" && (request.path == "/api/entries" || request.path == "/api/transcript") {
        match http::read_body(body).await {
            Ok(bytes) => bytes,
            Err(http::BodyError::TooLarge) => {
                return Response::text(413, &format!("the body is larger than {} bytes", http::MAX_BODY)).closing()
            }
            Err(http::BodyError::Incomplete) => return Response::text(400, "the body did not arrive").closing(),
        }
    } else {
        // Nothing here takes a body: whatever was sent is never read, so the connection ends with the answer.
        use hyper::body::Body as _;
        if !body.is_end_stream() {
            return Response::text(400, "this request takes no body").closing();
        }
        Default::default()
    };
    tokio::task::spawn_blocking(move || route(&request, &body, &view))
        .await
        .unwrap_or_else(|_| Response::text(500, "the request failed inside the server"))
}

/// The sidecar's notifications as the page's live events, for as long as the page reads them. A page that falls
/// behind by more than [`EVENTS_BUDGET`] gets `{"kind":"lagged"}` in place of what it missed, and loads its
/// session again; when the page goes, the stream and everything it held go with it.
fn events(bridge: Arc<bridge::Bridge>, busy: http::Busy, page: Option<pages::PageStream>) -> Response {
    use bridge::Heard;
    let feed = bridge.listen(EVENTS_BUDGET);
    let opened = futures_util::stream::once(async { Bytes::from_static(b": open\n\n") });
    // `page` lives as long as the stream: when the page is gone, the server drops it, and the page's sessions
    // are closed after a while (`pages`).
    let heard = futures_util::stream::unfold((feed, (busy, page)), |(feed, busy)| async move {
        loop {
            let piece = match tokio::time::timeout(EVENTS_PING, feed.next()).await {
                Err(_) => Bytes::from_static(b": ping\n\n"),
                Ok(Heard::Closed) => return None,
                Ok(Heard::Lagged) => LAGGED.clone(),
                // A notification too large to turn into rows cheaply is a reload for the page, as a lag is.
                Ok(Heard::Notification(n)) if n.len() > EVENT_MAX => LAGGED.clone(),
                Ok(Heard::Notification(n)) => {
                    let Some(event) = Json::parse(&n).ok().as_ref().and_then(View::event) else { continue };
                    let mut piece = b"data: ".to_vec();
                    event.write_preserving(&mut piece);
                    piece.extend_from_slice(b"\n\n");
                    Bytes::from(piece)
                }
            };
            return Some((piece, (feed, busy)));
        }
    });
    Response::events(futures_util::StreamExt::chain(opened, heard))
}

fn route(request: &Request, body: &[u8], view: &View) -> Response {
    let method = request.method.as_str();
    let asset = |name: &str| assets::get(name).map(|(kind, body)| Response::new(200, kind, body));
    let result: Option<Result<Json, Failure>> = match (method, request.path.as_str()) {
        ("GET", "/") => return Response::new(200, "text/html; charset=utf-8", assets::live_page()),
        ("GET", p) if p.starts_with("/assets/") => {
            return asset(&p["/assets/".len()..]).unwrap_or_else(|| Response::text(404, "no such asset"))
        }
        ("GET", "/api/sessions") => Some(view.sessions()),
        ("GET", "/api/session-info") => Some(view.session_info(request.param("path").unwrap_or(""))),
        ("GET", "/api/search") => {
            let offset = request.param("offset").unwrap_or("0");
            let Ok(offset) = offset.parse::<usize>() else {
                return Response::text(400, "offset must be a whole number");
            };
            Some(view.search(request.param("q").unwrap_or(""), offset))
        }
        ("POST", "/api/open") => Some(view.open_for_page(
            request.param("path").unwrap_or(""),
            request.param("machine"),
            request.param("page"),
        )),
        ("GET", "/api/snapshot") => Some(view.snapshot(request.param("handle").unwrap_or(""))),
        ("POST", "/api/close") => {
            Some(view.close_for_page(request.param("handle").unwrap_or(""), request.param("page")))
        }
        ("POST", path @ ("/api/entries" | "/api/transcript")) => {
            let body = Json::parse(body);
            let ids: Vec<String> = match &body {
                Ok(Json::Array(ids)) => ids.iter().filter_map(|i| i.as_js_str().map(|s| s.to_string_lossy())).collect(),
                _ => return Response::text(400, "the body must be a JSON array of entry ids"),
            };
            let handle = request.param("handle").unwrap_or("");
            Some(if path == "/api/entries" { view.entries(handle, &ids) } else { transcript::page(view, handle, &ids) })
        }
        ("GET", "/api/context") => Some(view.context(request.param("handle").unwrap_or(""))),
        ("GET", "/api/usage") => Some(view.usage(request.param("handle").unwrap_or(""))),
        ("GET", "/api/usage-overview") => Some(view.usage_overview()),
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
