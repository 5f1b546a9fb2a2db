//! The team commands of the command line: `push`, `team prune|grant|revoke`, and `ls`/`search` answered from the team database
//! (`--catalog URL`). Output is JSON a script can read; errors go to stderr (or, with `--json`, stdout) with exit status 2.

use std::io::Write;
use std::time::Duration;

use super::catalog::{listing_json, TeamCatalog};
use super::db::{DbError, Target};
use super::push::{self, PushOptions, PushReport};
use crate::catalog::redact::Redactor;
use crate::catalog::search::search_hit_json;
use crate::catalog::search::Scope;
use crate::cli::output::{Failure, FailureKind};
use crate::session::json::{Json, Object};
use crate::session::ErrorKind;

/// Reports a team failure as every command reports its failures (with `json`, `{"error": {"kind", "message"}}` on
/// stdout, else one line on stderr) and returns the exit status for an error.
fn fail(e: DbError, json: bool) -> i32 {
    let kind = match &e {
        DbError::Config(_) | DbError::Invalid(_) => FailureKind::Session(ErrorKind::InvalidParams),
        DbError::File { .. } => FailureKind::Session(ErrorKind::IoError),
        DbError::NoSessions { .. } => FailureKind::Session(ErrorKind::SessionNotFound),
        _ => FailureKind::CatalogUnavailable,
    };
    i32::from(Failure::new(kind, e.to_string()).report(json))
}

fn report_json(machine: &str, r: &PushReport) -> String {
    let mut o = Object::new();
    o.insert("machine", Json::str(machine));
    o.insert("files", Json::number(r.files as f64));
    o.insert("pushed", Json::number(r.pushed as f64));
    o.insert("rewritten", Json::number(r.rewritten as f64));
    o.insert("deleted", Json::number(r.deleted as f64));
    o.insert("entries", Json::number(r.entries as f64));
    o.insert("bytes", Json::number(r.bytes as f64));
    Json::Object(o).to_canonical_string()
}

/// What `push` was asked to do.
#[derive(Clone, Debug)]
pub struct PushRequest<'a> {
    /// pi's agent directory, as given (relative to the current directory or absolute).
    pub agent_dir: &'a str,
    /// The database URL or key=value string.
    pub url: &'a str,
    /// The machine's name (default: the host name).
    pub machine: Option<&'a str>,
    /// Push an agent directory that holds no `sessions` directory (as a machine without sessions).
    pub allow_empty: bool,
    /// Keep running and push every change.
    pub watch: bool,
    /// With `watch`: how often files are checked without a notification.
    pub poll: Duration,
    /// Replace secrets before anything leaves the machine (`--no-redact` turns it off).
    pub redact: bool,
    /// A team's rules file (gitleaks' TOML format), added to the built-in rules.
    pub redact_rules: Option<&'a str>,
    /// Globs over a session's cwd: only these are pushed.
    pub include: &'a [String],
    /// Globs over a session's cwd: these are not pushed.
    pub exclude: &'a [String],
    /// Only sessions whose file changed at or after this date.
    pub since: Option<&'a str>,
    /// Push images as they are instead of as placeholders.
    pub keep_images: bool,
    /// `--prune`: the retention age (`--older-than`, or [`DEFAULT_RETENTION`]); sessions older are left out and
    /// their rows deleted.
    pub prune: Option<String>,
}

/// `push --prune` without `--older-than`.
pub const DEFAULT_RETENTION: &str = "90d";

/// `pi-sessiond team prune --postgres URL --older-than DURATION`: deletes every machine's sessions whose file last
/// changed longer ago than that, with their entries, in one transaction; prints `{"deleted","entries"}`.
pub fn prune(url: &str, older_than: &str, json: bool, out: &mut dyn Write) -> i32 {
    let result = super::prune::parse_age(older_than).map_err(DbError::Config).and_then(|age| {
        let target = Target::from_env(url)?;
        let mut client = super::schema::open(&target)?;
        super::prune::prune(&mut client, &target, super::prune::cutoff_ns(age))
    });
    match result {
        Ok(r) => {
            let mut o = Object::new();
            o.insert("deleted", Json::number(r.sessions as f64));
            o.insert("entries", Json::number(r.entries as f64));
            let _ = writeln!(out, "{}", Json::Object(o).to_canonical_string());
            0
        }
        Err(e) => fail(e, json),
    }
}

/// What `team grant`/`team revoke` were asked for.
#[derive(Clone, Debug)]
pub struct AccessRequest<'a> {
    /// The admin's database URL (the tables' owner).
    pub url: &'a str,
    /// The PostgreSQL role the grant is for.
    pub role: &'a str,
    /// `--machine NAME`, repeatable.
    pub machines: &'a [String],
    /// `--project GLOB`, repeatable.
    pub projects: &'a [String],
    /// `--push`: the right to push as those machines.
    pub push: bool,
}

/// `pi-sessiond team grant|revoke --postgres ADMIN_URL --role ROLE (--machine NAME | --project GLOB)… [--push]`:
/// records (or takes back) what ROLE may read or push; prints `{"role","grants":[{"machine"|"project","read",
/// "push"}…]}`, what the role has afterwards.
pub fn access(request: &AccessRequest<'_>, give: bool, json: bool, out: &mut dyn Write) -> i32 {
    use super::access::Scope;
    let scopes: Vec<Scope> = request
        .machines
        .iter()
        .map(|m| Scope::Machine(m.clone()))
        .chain(request.projects.iter().map(|p| Scope::Project(p.clone())))
        .collect();
    let change = if give { super::access::grant } else { super::access::revoke };
    let result = Target::from_env(request.url).and_then(|target| {
        let mut client = super::schema::open(&target)?;
        let grants = change(&mut client, &target, request.role, &scopes, request.push)?;
        let unknown =
            if give { super::access::machines_never_pushed(&mut client, &target, request.machines)? } else { vec![] };
        Ok((grants, unknown))
    });
    match result {
        Ok((grants, unknown)) => {
            // A grant may come before a machine's first push, so a name never pushed is kept; but it is also
            // what a misspelt name looks like.
            for m in unknown {
                eprintln!("pi-sessiond: note: no machine named {m:?} has pushed yet: the grant waits for its first push (check the name)");
            }
            // Taking back the right to read leaves the reading that the right to push brings: said, since the
            // command succeeded and the role reads on.
            if !give && !request.push {
                for g in grants.iter().filter(|g| g.push && scopes.contains(&g.scope)) {
                    if let Scope::Machine(m) = &g.scope {
                        eprintln!(
                            "pi-sessiond: note: role {:?} still reads machine {m:?} through its right to push as it (revoke with --push to take that back)",
                            request.role
                        );
                    }
                }
            }
            let list = grants
                .iter()
                .map(|g| {
                    let mut o = Object::new();
                    match &g.scope {
                        Scope::Machine(m) => o.insert("machine", Json::str(m)),
                        Scope::Project(p) => o.insert("project", Json::str(p)),
                    };
                    o.insert("read", Json::Bool(g.read || g.push));
                    o.insert("push", Json::Bool(g.push));
                    Json::Object(o)
                })
                .collect();
            let mut o = Object::new();
            o.insert("role", Json::str(request.role));
            o.insert("grants", Json::Array(list));
            let _ = writeln!(out, "{}", Json::Object(o).to_canonical_string());
            0
        }
        Err(e) => fail(e, json),
    }
}

/// The redaction a push or an export asked for: None with `--no-redact`; else the built-in rules plus those of
/// `rules_file`. A rules file that cannot be read or compiled is refused before anything is sent.
pub fn redactor(redact: bool, rules_file: Option<&str>) -> Result<Option<Redactor>, DbError> {
    if !redact {
        return Ok(None);
    }
    let Some(file) = rules_file else { return Ok(Some(Redactor::builtin())) };
    let text = std::fs::read_to_string(file).map_err(|source| DbError::File { path: file.to_owned(), source })?;
    Redactor::with_team_rules(&text, file).map(Some).map_err(|e| DbError::Invalid(e.to_string()))
}

/// `pi-sessiond --agent-dir DIR push --postgres URL [--machine NAME] [--allow-empty] [--watch] [--no-redact]
/// [--redact-rules FILE]`: one pass (a JSON
/// report line on stdout), or with `watch` a pass whenever a session changes (a line per pass that changed
/// something), until killed. Killing it at any moment loses nothing: the next run continues where the database
/// says. An agent directory that does not exist or has no `sessions` directory is refused before connecting.
pub fn push(request: &PushRequest<'_>, json: bool, out: &mut dyn Write) -> i32 {
    let machine = request.machine.map(str::to_owned).unwrap_or_else(push::host_name);
    let (target, mut options, redactor) = match Target::from_env(request.url).and_then(|t| {
        let options = PushOptions::new(machine, request.agent_dir, request.allow_empty)?;
        let mut filter = push::Filter::new(request.include, request.exclude, request.since)?;
        if let Some(age) = &request.prune {
            filter = filter.with_max_age(super::prune::parse_age(age).map_err(DbError::Config)?);
        }
        Ok((
            t,
            PushOptions { filter, keep_images: request.keep_images, ..options },
            redactor(request.redact, request.redact_rules)?,
        ))
    }) {
        Ok(all) => all,
        Err(e) => return fail(e, json),
    };
    options.redactor = redactor.map(std::sync::Arc::new);
    let (watch, poll) = (request.watch, request.poll);
    // The first connection's faults (a wrong URL, a refused login, a newer schema) end the command at once.
    let mut client = match connect_and_lock(&target, &options.machine) {
        Ok(c) => c,
        Err(e) => return fail(e, json),
    };
    let mut print = |r: &PushReport| {
        let _ = writeln!(out, "{}", report_json(&options.machine, r));
        let _ = out.flush();
    };
    if !watch {
        return match push::push_once(&mut client, &target, &options).map(|r| print(&r)) {
            Ok(()) => 0,
            Err(e) => fail(e, json),
        };
    }
    // A watching push outlives what heals by itself: a laptop that sleeps or changes networks, a database restarted,
    // a statement cancelled, a full disk. It says so on stderr, waits (longer each time, up to a minute; from the
    // start again once a pass goes through), connects again if the connection is gone, and goes on; the pass that
    // failed left the database at a line boundary it knows, so nothing is lost or sent twice. What will not heal
    // (credentials refused, a newer schema, a permission the role lacks) ends it with exit status 2.
    let mut client = Some(client);
    let mut wait = FIRST_RETRY_WAIT;
    loop {
        let e = match client.as_mut() {
            Some(c) => {
                let mut first = true;
                let result = push::watch(c, &target, &options, poll, &|| true, &mut |r: &PushReport| {
                    wait = FIRST_RETRY_WAIT;
                    // The first pass after starting (or after a fault) always reports; later ones when they
                    // changed something.
                    if std::mem::take(&mut first) || r.pushed > 0 || r.deleted > 0 {
                        print(r);
                    }
                });
                let Err(e) = result else { return 0 };
                e
            }
            None => match connect_and_lock(&target, &options.machine) {
                Ok(c) => {
                    tracing::warn!("team database {}: connected again", target.describe());
                    client = Some(c);
                    continue;
                }
                Err(e) => e,
            },
        };
        if !e.is_transient() {
            return fail(revoked_meanwhile(e, &target, &options.machine), json);
        }
        if matches!(e, DbError::Postgres { .. }) {
            // A connection that failed mid-statement may be out of step with the server (a cancelled COPY leaves
            // it so) and still holds the machine's lock: it is closed, and the next attempt connects afresh.
            client = None;
        }
        tracing::warn!("team push: {e}; trying again in {wait:?}");
        std::thread::sleep(wait);
        wait = (wait * 2).min(MAX_RETRY_WAIT);
    }
}

/// `e`, or the refusal that explains it: when a watching push's right to push is revoked, the policies refuse
/// its next row in PostgreSQL's words ("new row violates row-level security policy"); the check a push makes at
/// its start says which role may no longer push as which machine, and what gives the right back.
fn revoked_meanwhile(e: DbError, target: &Target, machine: &str) -> DbError {
    let refused = matches!(&e, DbError::Postgres { source, .. }
        if source.code() == Some(&postgres::error::SqlState::INSUFFICIENT_PRIVILEGE));
    if !refused {
        return e;
    }
    match super::schema::open(target).and_then(|mut c| super::access::check_push(&mut c, target, machine)) {
        Err(denied @ DbError::Denied { .. }) => denied,
        _ => e,
    }
}

/// How long a watching push first waits after a fault that may heal.
const FIRST_RETRY_WAIT: Duration = Duration::from_secs(1);

/// The longest a watching push waits between attempts.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(60);

/// Connects, migrates, and takes the machine's push lock.
fn connect_and_lock(target: &Target, machine: &str) -> super::db::DbResult<postgres::Client> {
    let mut client = super::schema::open(target)?;
    super::access::check_push(&mut client, target, machine)?;
    push::lock_machine(&mut client, target, machine)?;
    Ok(client)
}

/// `pi-sessiond --catalog URL ls [--cwd C] [--dir D] [--all] [--json]`: pi's `list`/`listAll` across every
/// machine. With `json`, pi's listing with a `machine` member in each session; else the command line's table of
/// sessions, one per machine under its name.
pub fn ls(
    url: &str,
    request: &crate::cli::ls::LsRequest,
    json: bool,
    style: &crate::cli::output::Style,
    out: &mut dyn Write,
) -> i32 {
    let mut catalog = match Target::from_env(url).and_then(|t| TeamCatalog::open(&t)) {
        Ok(c) => c,
        Err(e) => return fail(e, json),
    };
    let sessions = if request.all {
        catalog.list_all(request.dir.as_deref(), true)
    } else {
        let cwd = request.cwd.clone().unwrap_or_else(crate::session::paths::process_cwd);
        catalog.list(&cwd, request.dir.as_deref(), true)
    };
    let sessions = match sessions {
        Ok(s) => s,
        Err(e) => return fail(e, json),
    };
    if json {
        let mut bytes = listing_json(&sessions, true);
        bytes.push(b'\n');
        return if out.write_all(&bytes).is_ok() { 0 } else { 2 };
    }
    if sessions.is_empty() {
        eprintln!("no sessions in the team catalog for this scope");
        return 0;
    }
    // The listing is in pi's order across machines; the table groups it by machine, each in that order.
    let mut machines: Vec<&str> = sessions.iter().map(|s| s.machine.as_str()).collect();
    machines.sort_unstable();
    machines.dedup();
    for (i, machine) in machines.into_iter().enumerate() {
        let mine: Vec<_> = sessions.iter().filter(|s| s.machine == machine).map(|s| s.listed.clone()).collect();
        let heading = format!("{}{machine}:\n", if i == 0 { "" } else { "\n" });
        if out.write_all(heading.as_bytes()).is_err() {
            return 2;
        }
        match crate::cli::ls::print(&mine, false, style, out) {
            Ok(0) => {}
            Ok(status) => return i32::from(status),
            Err(failure) => return i32::from(failure.report(false)),
        }
    }
    0
}

/// `pi-sessiond --catalog URL search QUERY …`: the search across every machine; with `json`, the shape of
/// `sessions/search` plus `machine`.
pub fn search(url: &str, request: &crate::cli::search::SearchRequest<'_>, json: bool, out: &mut dyn Write) -> i32 {
    let mut catalog = match Target::from_env(url).and_then(|t| TeamCatalog::open(&t)) {
        Ok(c) => c,
        Err(e) => return fail(e, json),
    };
    let scope = Scope { cwd: request.cwd, session_dir: request.dir };
    let keep = request.offset.saturating_add(request.limit);
    let hits = match catalog.search(request.query, scope, request.roles.as_deref(), keep) {
        Ok(h) => h.into_iter().skip(request.offset).collect::<Vec<_>>(),
        Err(super::catalog::SearchError::Db(e)) => return fail(e, json),
        Err(e @ super::catalog::SearchError::Query(_)) => {
            return i32::from(Failure::invalid(e.to_string()).report(json));
        }
    };
    let text = if json {
        let list: Vec<Json> = hits
            .iter()
            .map(|h| {
                let mut v = search_hit_json(&h.hit);
                if let Json::Object(o) = &mut v {
                    o.insert("machine", Json::str(&h.machine));
                }
                v
            })
            .collect();
        format!("{}\n", Json::Array(list).to_canonical_string())
    } else if hits.is_empty() {
        "no matches\n".to_owned()
    } else {
        hits.iter()
            .map(|h| {
                let when = crate::session::js::date::to_iso_string(h.hit.timestamp).unwrap_or_else(|| "-".into());
                format!("{when}  {:<13} {}:{}\n    {}\n", h.hit.role, h.machine, h.hit.path, h.hit.snippet)
            })
            .collect()
    };
    match out.write_all(text.as_bytes()) {
        Ok(()) if hits.is_empty() => i32::from(crate::cli::output::EXIT_NO_MATCH),
        Ok(()) => 0,
        Err(_) => 2,
    }
}

/// `pi-sessiond --catalog URL usage [--since DATE] [--by day|model|project|machine] [--json]`: tokens and cost of
/// every machine's sessions the role may read, summed as `usage` sums one machine's ([`super::usage`]) and printed
/// as it prints them.
pub fn usage(
    url: &str,
    since_ms: Option<f64>,
    by: crate::cli::usage::GroupBy,
    json: bool,
    style: &crate::cli::output::Style,
    out: &mut dyn Write,
) -> i32 {
    let summed = Target::from_env(url).and_then(|t| TeamCatalog::open(&t)).and_then(|mut catalog| {
        super::usage::overview(&mut catalog, since_ms, &crate::catalog::Cancel::new(), |machine, s, c| {
            by.key(machine, s, c)
        })
    });
    match summed {
        Ok(o) => match crate::cli::usage::print(&o, by, json, style, out) {
            Ok(status) => i32::from(status),
            Err(failure) => i32::from(failure.report(json)),
        },
        Err(e) => fail(e, json),
    }
}
