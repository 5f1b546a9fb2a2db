//! The one seam between the page and the sidecar protocol: what the page asks for (sessions, a session's
//! skeleton rows, bodies by id, the context, usage, live changes) in terms of sidecar calls; the usage overview
//! reads the listed sessions itself, read-only, through the same count `pi-sessiond usage` makes.
//!
//! The page works on skeleton rows — `{id, parentId, type, timestamp, role?, customType?, targetId?, name?,
//! setsLabel?, label?, preview, hasText, bytes}` (the planned `snapshot: "skeleton"` shape, plus the resolved
//! `label` of the entry and, for label entries, the label they set) — and fetches bodies only for entries it
//! shows whole. The rows are made here from `session/getTreeFlat` (they carry more than the sidecar's skeleton
//! snapshot: pi's one-line summary, the stop reason); bodies come in one `session/getEntries {ids}` per batch.

use std::sync::{Arc, Mutex};

use crate::catalog::usage::{add_entry_usage, day_of, overview, Counted, Overview, UsageByModel};
use crate::catalog::Cancel;
use crate::cli::output::{Failure, FailureKind};
use crate::rpc::team::TeamServer;
use crate::session::describe::{chars, one_line, Scanned, PREVIEW_CHARS};
use crate::session::json::{JsString, Json, Object};
use crate::session::ErrorKind;

use super::bridge::{params, Bridge};
use super::pages::{PageStream, Pages};

/// How many search hits the page shows at a time; its "more" button asks for the next as many.
pub const SEARCH_SHOWN: usize = 100;
/// The web server's own notification (never the sidecar's) that the team catalog changed: the page lists again.
pub const CATALOG_CHANGED: &str = "web/catalogChanged";
/// How many characters of one context message the context view shows.
const CONTEXT_CHARS: usize = 4000;

/// The page's operations over one sidecar.
#[derive(Clone)]
pub struct View {
    bridge: Arc<Bridge>,
    /// The team catalog the sidecar answers from (`web --catalog`), read here only for the usage overview.
    team: Option<Arc<TeamServer>>,
    /// The team's last usage overview and the catalog's fingerprint when it was summed: until a push changes
    /// the catalog, the overview is that one again rather than every machine's sessions read once more.
    team_overview: Arc<Mutex<Option<(String, Json)>>>,
    /// The sessions root the sidecar watches whole ([`View::watch_sessions`]), once it does.
    watched_root: Arc<std::sync::OnceLock<String>>,
    /// The references each page holds, closed once the page is gone.
    pages: Arc<Pages>,
}

/// A team catalog failure as the page's failure.
pub fn team_failure(e: jsonrpsee::types::ErrorObjectOwned) -> Failure {
    Failure::new(FailureKind::CatalogUnavailable, e.message().to_owned())
}

fn obj(members: Vec<(&str, Json)>) -> Json {
    params(members)
}

fn text_of(v: Option<&Json>) -> Option<String> {
    v.and_then(Json::as_js_str).map(JsString::to_string_lossy)
}

impl View {
    /// A view over `bridge`.
    pub fn new(bridge: Arc<Bridge>) -> View {
        let closing = bridge.clone();
        let pages = Pages::new(
            move |handle| {
                let _ = closing.call("session/close", obj(vec![("handle", Json::str(handle))]));
            },
            super::pages::GRACE,
        );
        View { bridge, team: None, team_overview: Arc::default(), watched_root: Default::default(), pages }
    }

    /// [`View::open_listed`] for `page`, which then holds the reference until it closes it or is gone.
    pub fn open_for_page(&self, path: &str, machine: Option<&str>, page: Option<&str>) -> Result<Json, Failure> {
        let opened = self.open_listed(path, machine)?;
        if let (Some(page), Some(handle)) = (page, text_of(opened.get("state").and_then(|s| s.get("handle")))) {
            self.pages.opened(page, &handle);
        }
        Ok(opened)
    }

    /// [`View::close`] of a reference `page` held.
    pub fn close_for_page(&self, handle: &str, page: Option<&str>) -> Result<Json, Failure> {
        if let Some(page) = page {
            self.pages.closed(page, handle);
        }
        self.close(handle)
    }

    /// The event stream of `page` (None: a client that names no page), open while the result lives.
    pub fn page_stream(&self, page: Option<&str>) -> Option<PageStream> {
        page.map(|p| self.pages.stream(p))
    }

    /// This view over the team catalog `team`, which its sidecar answers from too.
    pub fn with_team(self, team: Arc<TeamServer>) -> View {
        View { team: Some(team), ..self }
    }

    /// Asks the sidecar to report every session file appearing, growing or vanishing under the agent directory's
    /// `sessions/` (`sessions/watch {all}`), which [`View::event`] turns into the list's live events. Fails when
    /// there is no such directory yet.
    pub fn watch_sessions(&self) -> Result<(), Failure> {
        let watch = self.bridge.call("sessions/watch", obj(vec![("all", Json::Bool(true))]))?;
        if let Some(root) = text_of(watch.get("dir")) {
            let _ = self.watched_root.set(root);
        }
        Ok(())
    }

    /// The listing entry of one session file, as [`View::sessions`] lists it, or null when it is gone or is not
    /// a session: what the page asks after a `sessions` event, reading one project directory rather than the
    /// whole list. Only files in a project directory of the watched sessions root are answered.
    pub fn session_info(&self, path: &str) -> Result<Json, Failure> {
        let p = crate::session::paths::as_path(path);
        let dir = p.parent().map(|d| d.to_string_lossy().into_owned()).unwrap_or_default();
        let root = self.watched_root.get().map(String::as_str);
        let in_root = p.parent().and_then(std::path::Path::parent).map(|r| r.to_string_lossy());
        if root.is_none() || in_root.as_deref() != root || !path.ends_with(".jsonl") || path.contains("/../") {
            return Err(Failure::new(
                ErrorKind::SessionNotFound,
                format!("{path}: no such session in {}", self.place()),
            ));
        }
        let listing = self.bridge.call(
            "sessions/listAll",
            obj(vec![("sessionDir", Json::str(&dir)), ("includeAllMessagesText", Json::Bool(false))]),
        )?;
        let Ok(listed) = listing.into_array() else { return Ok(Json::Null) };
        Ok(listed.into_iter().find(|s| text_of(s.get("path")).as_deref() == Some(path)).unwrap_or(Json::Null))
    }

    /// Where the sessions this view shows are, as its messages name it.
    fn place(&self) -> &'static str {
        if self.team.is_some() {
            "the team catalog"
        } else {
            "this agent directory"
        }
    }

    /// Every session, newest activity first, without their full text: `[{path, id, name?, firstMessage,
    /// messageCount, modified, cwd}]`.
    pub fn sessions(&self) -> Result<Json, Failure> {
        let listing = self.bridge.call("sessions/listAll", obj(vec![("includeAllMessagesText", Json::Bool(false))]))?;
        Ok(listing)
    }

    /// One page of the entries matching `query` (pi's `/resume` language) across every session, best first:
    /// `{hits, total, sessions, offset}`, at most [`SEARCH_SHOWN`] hits from `offset` on, with the true count of
    /// hits and of the sessions they are in.
    pub fn search(&self, query: &str, offset: usize) -> Result<Json, Failure> {
        let limit = Json::number(SEARCH_SHOWN as f64);
        let offset = Json::number(offset as f64);
        self.bridge
            .call("sessions/searchPage", obj(vec![("query", Json::str(query)), ("limit", limit), ("offset", offset)]))
    }

    /// Opens `path` as [`View::open`] does, if it is one of the sessions [`View::sessions`] lists: the live page
    /// shows the agent directory's sessions and nothing else on the machine. A path that is not listed, whether or
    /// not it exists, gets the one answer a missing session gets, so the answer says nothing about other files.
    /// Over the team catalog a session is `machine`'s `path`, opened read-only from the database as last pushed.
    pub fn open_listed(&self, path: &str, machine: Option<&str>) -> Result<Json, Failure> {
        let listed = match &self.sessions()? {
            Json::Array(sessions) => sessions.iter().any(|s| {
                text_of(s.get("path")).as_deref() == Some(path) && text_of(s.get("machine")).as_deref() == machine
            }),
            _ => false,
        };
        if !listed {
            return Err(Failure::new(
                ErrorKind::SessionNotFound,
                format!("{path}: no such session in {}", self.place()),
            ));
        }
        match machine {
            Some(machine) => {
                let params = obj(vec![("path", Json::str(path)), ("machine", Json::str(machine))]);
                let state = self.bridge.call("session/open", params)?;
                self.snapshot(&text_of(state.get("handle")).unwrap_or_default())
            }
            None => self.open(path, true),
        }
    }

    /// Opens the session at `path`, following what other processes append, and returns its snapshot.
    pub fn open(&self, path: &str, watch: bool) -> Result<Json, Failure> {
        if !crate::session::paths::as_path(path).is_file() {
            return Err(Failure::new(ErrorKind::SessionNotFound, format!("{path}: no such session file")));
        }
        let state =
            self.bridge.call("session/open", obj(vec![("path", Json::str(path)), ("watch", Json::Bool(watch))]))?;
        let handle = text_of(state.get("handle")).unwrap_or_default();
        self.snapshot(&handle)
    }

    /// `{state, rows, warnings}` of an open handle: its state, every entry as a skeleton row in tree pre-order,
    /// and what reading the file found (`session/getWarnings`: lines pi skips, broken links, an old version).
    pub fn snapshot(&self, handle: &str) -> Result<Json, Failure> {
        let state = self.bridge.call("session/getState", obj(vec![("handle", Json::str(handle))]))?;
        // Skeletons, as the open made them: no line is read again (a 40 MB session's snapshot took 200-330 ms
        // through full entries), and a file emptied under the page still shows what was read of it.
        let asked = obj(vec![("handle", Json::str(handle)), ("detail", Json::str("skeleton"))]);
        let tree = self.bridge.call("session/getTreeFlat", asked)?;
        let Json::Array(nodes) = &tree else {
            return Err(Failure::new(FailureKind::Internal, "getTreeFlat did not return a list"));
        };
        let rows = nodes
            .iter()
            .filter_map(|n| {
                let mut row = row_of_skeleton(n.get("entry")?);
                if let (Json::Object(r), Some(label)) = (&mut row, n.get("label")) {
                    r.insert("label", label.clone());
                }
                Some(row)
            })
            .collect();
        let warnings = self.bridge.call("session/getWarnings", obj(vec![("handle", Json::str(handle))]))?;
        Ok(obj(vec![("state", state), ("rows", Json::Array(rows)), ("warnings", warnings)]))
    }

    /// Stops following `handle` (one reference of it).
    pub fn close(&self, handle: &str) -> Result<Json, Failure> {
        self.bridge.call("session/close", obj(vec![("handle", Json::str(handle))]))
    }

    /// The entries with these ids, as stored: `{id: entry | null}`.
    pub fn entries(&self, handle: &str, ids: &[String]) -> Result<Json, Failure> {
        let asked = Json::Array(ids.iter().map(|id| Json::str(id)).collect());
        let found = self.bridge.call("session/getEntries", obj(vec![("handle", Json::str(handle)), ("ids", asked)]))?;
        let Ok(entries) = found.into_array() else {
            return Err(Failure::new(FailureKind::Internal, "getEntries {ids} did not return a list"));
        };
        let mut out = Object::new();
        for (id, entry) in ids.iter().zip(entries) {
            out.insert(id.as_str(), entry);
        }
        Ok(Json::Object(out))
    }

    /// What the model sees: `{thinkingLevel, model, messages: [{role, text, images, toolCalls}]}`, each
    /// message's text bounded.
    pub fn context(&self, handle: &str) -> Result<Json, Failure> {
        let context = self.bridge.call("session/buildSessionContext", obj(vec![("handle", Json::str(handle))]))?;
        let messages = match context.get("messages") {
            Some(Json::Array(m)) => m.iter().map(context_message).collect(),
            _ => Vec::new(),
        };
        Ok(obj(vec![
            ("thinkingLevel", context.get("thinkingLevel").cloned().unwrap_or(Json::Null)),
            ("model", context.get("model").cloned().unwrap_or(Json::Null)),
            ("messages", Json::Array(messages)),
        ]))
    }

    /// Tokens and cost by model, and entries by type and role, read page by page.
    pub fn usage(&self, handle: &str) -> Result<Json, Failure> {
        let mut tally = UsageTally::default();
        self.each_entry(handle, |e| tally.add(&e))?;
        Ok(tally.to_json())
    }

    /// Calls `f` with every entry of an open handle as stored, in file order, fetched a page at a time (so a
    /// large session is never held whole).
    pub fn each_entry(&self, handle: &str, mut f: impl FnMut(Json)) -> Result<(), Failure> {
        const PAGE: usize = 500;
        let mut offset = 0usize;
        loop {
            let page = self.bridge.call(
                "session/getEntries",
                obj(vec![
                    ("handle", Json::str(handle)),
                    ("offset", Json::number(offset as f64)),
                    ("limit", Json::number(PAGE as f64)),
                ]),
            )?;
            let Ok(entries) = page.into_array() else { break };
            let n = entries.len();
            entries.into_iter().for_each(&mut f);
            if n < PAGE {
                return Ok(());
            }
            offset += PAGE;
        }
        Ok(())
    }

    /// Tokens and cost of every listed session by UTC day and model (the overview's chart):
    /// `{sessions, unreadable, rows: [{day, model, input, output, cacheRead, cacheWrite, totalTokens, cost}]}`,
    /// summed as `pi-sessiond usage` sums them (sessions in path order).
    /// Over the team catalog, every machine's sessions the role may read, each row also naming its `machine`
    /// (summed as `usage --catalog` sums them).
    pub fn usage_overview(&self) -> Result<Json, Failure> {
        if let Some(team) = &self.team {
            // Taken before the sums: a push meanwhile leaves a fingerprint the next request no longer matches.
            let fingerprint =
                team.with(|c| c.fingerprint().map_err(crate::rpc::team::unavailable)).map_err(team_failure)?;
            let memo = || self.team_overview.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((_, json)) = memo().as_ref().filter(|(f, _)| *f == fingerprint) {
                return Ok(json.clone());
            }
            let (o, days) = team
                .with(|c| {
                    let mut days = DaySums::default();
                    let key = |machine: &str, _: &_, c: &Counted| (days.add(c), c.key.clone(), machine.to_owned());
                    let o = crate::team::usage::overview(c, None, &Cancel::new(), key)
                        .map_err(crate::rpc::team::unavailable)?;
                    Ok((o, days))
                })
                .map_err(team_failure)?;
            let json = overview_json(&o, &days, |(day, model, machine), row| {
                row.insert("day", Json::str(day));
                row.insert("model", Json::str(model));
                row.insert("machine", Json::str(machine));
            });
            *memo() = Some((fingerprint, json.clone()));
            return Ok(json);
        }
        let listing = self.sessions()?;
        let Json::Array(listed) = &listing else { return Ok(Json::Array(Vec::new())) };
        let mut paths: Vec<String> = listed.iter().filter_map(|s| text_of(s.get("path"))).collect();
        paths.sort();
        let mut days = DaySums::default();
        let o = overview(&paths, None, &Cancel::new(), None, |_, c| (days.add(c), c.key.clone()))?;
        Ok(overview_json(&o, &days, |(day, model), row| {
            row.insert("day", Json::str(day));
            row.insert("model", Json::str(model));
        }))
    }

    /// A sidecar notification as the page's live event, or None when the page has no use for it:
    /// `{kind: "append", handle, seq, leafId, rows}`, `{kind: "leaf", handle, seq, leafId}`, or `{kind: "reset" |
    /// "rebind" | "deleted", handle, seq}` (the page reloads the snapshot); for the list, `{kind: "sessions",
    /// change: "created" | "changed" | "removed", path}` (the page asks for that session's listing entry), or
    /// [`CATALOG_CHANGED`] as `{kind: "sessions"}` without a path (the page lists the sessions again).
    pub fn event(notification: &Json) -> Option<Json> {
        if text_of(notification.get("method")).as_deref() == Some(CATALOG_CHANGED) {
            return Some(obj(vec![("kind", Json::str("sessions"))]));
        }
        let p = notification.get("params")?;
        if text_of(notification.get("method")).as_deref() == Some("sessions/changed") {
            return Some(obj(vec![
                ("kind", Json::str("sessions")),
                ("change", p.get("kind")?.clone()),
                ("path", p.get("path")?.clone()),
            ]));
        }
        if text_of(notification.get("method")).as_deref() != Some("session/changed") {
            return None;
        }
        let change = p.get("change")?;
        let kind = text_of(change.get("kind"))?;
        let mut out = vec![
            ("kind", Json::str(&kind)),
            ("handle", p.get("handle")?.clone()),
            ("seq", p.get("seq").cloned().unwrap_or(Json::Null)),
            ("leafId", p.get("leafId").cloned().unwrap_or(Json::Null)),
        ];
        if kind == "append" {
            let rows = match change.get("entries") {
                Some(Json::Array(entries)) => entries.iter().map(skeleton).collect(),
                _ => Vec::new(),
            };
            out.push(("rows", Json::Array(rows)));
        }
        Some(obj(out))
    }
}

/// Each day's sums, added up as `pi-sessiond usage` adds them (every usage object of the day in the order the
/// overview meets them), so that the page's table shows the command's figures to the last digit: summing the
/// day's models instead rounds differently where a sum falls on a tie.
#[derive(Default)]
struct DaySums(std::collections::BTreeMap<String, crate::catalog::usage::Usage>);

impl DaySums {
    /// Adds `c` to its day; returns the day (the overview's key is made of it).
    fn add(&mut self, c: &Counted) -> String {
        let day = day_of(c.time_ms);
        self.0.entry(day.clone()).or_default().merge(&c.usage);
        day
    }
}

/// `{sessions, unreadable, rows, days, total}` of an overview: each row its sums and the members `name` gives its
/// group; `days` the sums of each day and `total` theirs, as `pi-sessiond usage` prints them.
fn overview_json<K>(o: &Overview<K>, days: &DaySums, name: impl Fn(&K, &mut Object)) -> Json {
    let rows = o
        .groups
        .iter()
        .map(|(k, u)| {
            let mut row = u.to_json();
            name(k, &mut row);
            Json::Object(row)
        })
        .collect();
    let mut total = crate::catalog::usage::Usage::default();
    let days = days
        .0
        .iter()
        .map(|(day, u)| {
            total.merge(u);
            let mut row = u.to_json();
            row.insert("day", Json::str(day));
            Json::Object(row)
        })
        .collect();
    obj(vec![
        ("sessions", Json::number(o.sessions as f64)),
        ("unreadable", Json::number(o.unreadable.len() as f64)),
        ("rows", Json::Array(rows)),
        ("days", Json::Array(days)),
        ("total", Json::Object(total.to_json())),
    ])
}

/// Tokens and cost by model and entries by kind, added up an entry at a time (the session's usage tab).
#[derive(Default)]
pub struct UsageTally {
    by_model: UsageByModel,
    kinds: std::collections::BTreeMap<String, u64>,
}

impl UsageTally {
    /// Counts one entry as stored.
    pub fn add(&mut self, entry: &Json) {
        add_entry_usage(entry, &mut self.by_model);
        *self.kinds.entry(Scanned::of_value(entry).describe().what()).or_default() += 1;
    }

    /// `{models: [{model, responses, input, …, cost}], kinds: {what: count}}`.
    pub fn to_json(&self) -> Json {
        let models = self
            .by_model
            .iter()
            .map(|(model, u)| {
                let mut row = u.to_json();
                row.insert("model", Json::str(model));
                Json::Object(row)
            })
            .collect();
        let mut counts = Object::new();
        for (k, n) in &self.kinds {
            counts.insert(k.as_str(), Json::number(*n as f64));
        }
        obj(vec![("models", Json::Array(models)), ("kinds", Json::Object(counts))])
    }
}

/// An entry's skeleton row (see the module doc): its preview and `hasText` are the sidecar's skeleton's, from
/// the same description.
pub fn skeleton(entry: &Json) -> Json {
    let scanned = Scanned::of_value(entry);
    let described = scanned.describe();
    let summary = described.summary(PREVIEW_CHARS, chars);
    let mut row = Object::new();
    let copy = |row: &mut Object, key: &str| {
        if let Some(v) = entry.get(key) {
            row.insert(key, v.clone());
        }
    };
    copy(&mut row, "id");
    row.insert("parentId", entry.get("parentId").cloned().unwrap_or(Json::Null));
    copy(&mut row, "type");
    copy(&mut row, "timestamp");
    let message = entry.get("message");
    if let Some(role) = message.and_then(|m| m.get("role")) {
        row.insert("role", role.clone());
    }
    copy(&mut row, "customType");
    copy(&mut row, "targetId");
    copy(&mut row, "name");
    if text_of(entry.get("type")).as_deref() == Some("label") {
        row.insert("setsLabel", entry.get("label").cloned().unwrap_or(Json::Null));
    }
    row.insert("what", Json::str(&summary.what));
    row.insert("preview", Json::str(&summary.preview));
    // pi's /tree hides assistant messages that only call tools, unless they ended in an error or were aborted.
    row.insert("hasText", Json::Bool(described.has_text()));
    if let Some(stop) = message.and_then(|m| m.get("stopReason")) {
        row.insert("stopReason", stop.clone());
    }
    row.insert("bytes", Json::number(scanned.bytes().len() as f64));
    Json::Object(row)
}

/// A page's row from the sidecar's skeleton of an entry: what [`skeleton`] makes of the full entry, from the fields
/// the skeleton carries (the label an entry sets is `setsLabel`, as `label` is the label the entry has).
fn row_of_skeleton(skeleton: &Json) -> Json {
    let mut row = match skeleton {
        Json::Object(fields) => fields.clone(),
        _ => Object::new(),
    };
    let kind = row.get("type").cloned();
    if kind.as_ref().and_then(Json::as_js_str).is_some_and(|k| k.eq_str("label")) {
        let sets = row.remove("label").unwrap_or(Json::Null);
        row.insert("setsLabel", sets);
    }
    // `Description::what`: a message's role when it is a string (else `message`), else the type as `String(type)`
    // gives it (`entry` when it has none).
    let what = match &kind {
        Some(Json::String(k)) if k.eq_str("message") => text_of(row.get("role")).unwrap_or_else(|| "message".into()),
        Some(v) => crate::session::js::convert::to_js_string(v).to_string_lossy(),
        None => String::new(),
    };
    row.insert("what", Json::str(if what.is_empty() { "entry" } else { &what }));
    // Fields a skeleton leaves out where they say nothing; the page's rows always have them.
    if row.get("hasText").is_none() {
        row.insert("hasText", Json::Bool(false));
    }
    if row.get("preview").is_none() {
        row.insert("preview", Json::str(""));
    }
    Json::Object(row)
}

/// One context message as the context view shows it.
fn context_message(m: &Json) -> Json {
    let role = text_of(m.get("role")).unwrap_or_else(|| "message".into());
    let mut text = match m.get("summary") {
        Some(Json::String(s)) => s.to_string_lossy(),
        // Each text is read up to as many bytes as CONTEXT_CHARS characters can take in JSON (`\ud83d\ude00`
        // is twelve), so the cut below is what bounds it.
        _ => Scanned::of_message(m).describe().text_within(CONTEXT_CHARS * 12),
    };
    if let Some(cmd) = text_of(m.get("command")) {
        text = format!("$ {cmd}\n{}", text_of(m.get("output")).unwrap_or_default());
    }
    let (images, tools) = match m.get("content") {
        Some(Json::Array(blocks)) => {
            let kind = |b: &Json| text_of(b.get("type")).unwrap_or_default();
            let images = blocks.iter().filter(|b| kind(b) == "image").count();
            let tools =
                blocks.iter().filter(|b| kind(b) == "toolCall").filter_map(|b| b.get("name").cloned()).collect();
            (images, tools)
        }
        _ => (0, Vec::new()),
    };
    let cut = text.chars().count() > CONTEXT_CHARS;
    let shown: String = if cut { text.chars().take(CONTEXT_CHARS).collect::<String>() + "…" } else { text };
    obj(vec![
        ("role", Json::str(&role)),
        (
            "title",
            Json::str(&one_line(
                &text_of(m.get("customType")).or_else(|| text_of(m.get("toolName"))).unwrap_or_default(),
                80,
                chars,
            )),
        ),
        ("text", Json::str(&shown)),
        ("images", Json::number(images as f64)),
        ("toolCalls", Json::Array(tools)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::entry::Body;
    use crate::session::line::{parse_line, LineOutcome};

    #[test]
    fn a_row_made_from_the_sidecars_skeleton_is_the_row_made_from_the_full_entry() {
        let lines = [
            r#"{"type":"message","id":"u","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"hello\nthere"}}"#,
            r#"{"type":"message","id":"a","parentId":"u","timestamp":"t","message":{"role":"assistant","content":[{"type":"toolCall","id":"c","name":"read","arguments":{}}],"stopReason":"toolUse"}}"#,
            r#"{"type":"message","id":"r","parentId":"a","message":{"role":"toolResult","toolCallId":"c","toolName":"read","content":[{"type":"text","text":"x"}]}}"#,
            r#"{"type":"message","id":"n","parentId":"r","message":{"content":"no role"}}"#,
            r#"{"type":"message","id":"s","parentId":"n","message":{"role":5,"content":"a number"}}"#,
            r#"{"type":"label","id":"l","parentId":"s","targetId":"u","label":"start"}"#,
            r#"{"type":"label","id":"k","parentId":"l","targetId":"u"}"#,
            r#"{"type":"session_info","id":"i","parentId":"k","name":"my session"}"#,
            r#"{"type":"custom","id":"c1","parentId":"i","customType":"ext","data":{}}"#,
            r#"{"type":"custom_message","id":"c2","parentId":"c1","customType":"ext","content":"shown","display":true}"#,
            r#"{"type":"compaction","id":"k1","parentId":"c2","summary":"before","firstKeptEntryId":"u","tokensBefore":9}"#,
            r#"{"type":"model_change","id":"m","parentId":"k1","provider":"p","modelId":"x"}"#,
            r#"{"type":"context_edit","id":"e","parentId":"m","targetId":"u"}"#,
            r#"{"type":7,"id":"o","parentId":"e"}"#,
            r#"{"id":"t","parentId":"o"}"#,
        ];
        for (n, line) in lines.iter().enumerate() {
            let LineOutcome::Record(record) =
                parse_line(line.as_bytes(), n as u32 + 1, Body::memory(line.as_bytes().to_vec()))
            else {
                panic!("{line}")
            };
            let sidecars = Json::parse(record.skeleton.as_deref().expect("a skeleton")).unwrap();
            let from_entry = skeleton(&Json::parse(line.as_bytes()).unwrap());
            assert_eq!(sorted(&row_of_skeleton(&sidecars)), sorted(&from_entry), "{line}");
        }
    }

    /// The row with its keys in one order: the page reads rows by key.
    fn sorted(row: &Json) -> serde_json::Value {
        serde_json::from_str(&row.to_canonical_string()).unwrap()
    }
}
