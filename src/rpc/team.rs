//! The sidecar's side of the team catalog (`--catalog URL`): one connection to the team database, opened on first
//! use and reopened after a failure, shared by requests one at a time; the handles opened read-only from it; and
//! the errors a host sees when the database is unavailable or a read-only session is asked to change.

use crate::rpc::error::WireKind;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jsonrpsee::types::ErrorObjectOwned;
use serde_json::json;

use super::error::{from_session, rpc_error};
use super::proto::{RawJson, SearchHitJson};
use crate::catalog::info::ListedSession;
use crate::catalog::search::search_hit_json;
use crate::session::json::Json;
use crate::team::catalog::SearchError;
use crate::team::{DbError, DbResult, Target, TeamCatalog};

/// The team database as the server uses it.
pub struct TeamServer {
    target: Target,
    catalog: Mutex<Option<TeamCatalog>>,
    /// Handles opened from the database: handle → whose session, and when the role was last seen to hold it.
    read_only: Mutex<HashMap<String, Held>>,
}

/// A session a handle holds, read from the database.
#[derive(Clone, Debug)]
struct Held {
    machine: String,
    path: String,
    /// When the database last showed this session to the role (at the open, then at reads).
    shown_at: Instant,
}

/// How long the database's word that the role may read a held session stands: a revoke (or the session's
/// deletion) reaches the reads of a handle opened before it within this time, at the cost of one small query
/// per handle per period while it is read.
const SHOWN_FOR: Duration = Duration::from_secs(2);

impl std::fmt::Debug for TeamServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TeamServer").field("server", &self.target.describe()).finish()
    }
}

impl TeamServer {
    /// The database at `url` (connected on first use; a string that cannot be parsed is an error now).
    pub fn new(url: &str) -> DbResult<TeamServer> {
        Ok(TeamServer {
            target: Target::from_env(url)?,
            catalog: Mutex::new(None),
            read_only: Mutex::new(HashMap::new()),
        })
    }

    /// Runs `f` with the catalog, connecting first if needed. When the connection turns out to be gone (the
    /// database restarted, the network changed since the last request), `f` runs once more on a new one, so the
    /// host sees no error for what a reconnect fixes; after any other database failure the connection is
    /// dropped, so the next request connects again. `f` only reads, so running it twice changes nothing.
    pub fn with<T>(
        &self,
        mut f: impl FnMut(&mut TeamCatalog) -> Result<T, ErrorObjectOwned>,
    ) -> Result<T, ErrorObjectOwned> {
        let mut slot = self.catalog.lock().unwrap_or_else(|e| e.into_inner());
        let mut retried = false;
        loop {
            let catalog = match slot.as_mut() {
                Some(c) => c,
                None => slot.insert(TeamCatalog::open(&self.target).map_err(unavailable)?),
            };
            let result = f(catalog);
            if !result.as_ref().is_err_and(|e| e.code() == WireKind::CatalogUnavailable.code()) {
                return result;
            }
            let lost = catalog.is_closed();
            *slot = None;
            if !lost || retried {
                return result;
            }
            tracing::warn!("team catalog {}: the connection was gone; connecting again", self.target.describe());
            retried = true;
        }
    }

    /// Notes that `handle` holds `machine`'s session `path`, just read from the database.
    pub fn mark_read_only(&self, handle: &str, machine: &str, path: &str) {
        let held = Held { machine: machine.to_owned(), path: path.to_owned(), shown_at: Instant::now() };
        self.read_only.lock().unwrap_or_else(|e| e.into_inner()).insert(handle.to_owned(), held);
    }

    /// Refuses a read of `handle` when it holds a session the database no longer shows this role (a grant
    /// revoked, the session deleted, since the open): the session was read into memory at the open, and
    /// without this a page left open would go on showing what the role may no longer read. Asked again at
    /// most every [`SHOWN_FOR`]; when the database cannot answer, the read is refused too (it fails closed).
    /// Handles of this machine's own files pass.
    pub fn check_still_shown(&self, handle: &str) -> Result<(), ErrorObjectOwned> {
        let held = self.read_only.lock().unwrap_or_else(|e| e.into_inner()).get(handle).cloned();
        let Some(held) = held.filter(|h| h.shown_at.elapsed() >= SHOWN_FOR) else { return Ok(()) };
        let asked_at = Instant::now();
        if !self.with(|c| c.shows(&held.machine, &held.path).map_err(unavailable))? {
            return Err(rpc_error(
                crate::session::ErrorKind::SessionNotFound,
                format!(
                    "the team catalog no longer shows {} of machine {} to this role (a grant was revoked, or the session deleted)",
                    held.path, held.machine
                ),
                json!({ "path": held.path, "machine": held.machine }),
            ));
        }
        if let Some(h) = self.read_only.lock().unwrap_or_else(|e| e.into_inner()).get_mut(handle) {
            h.shown_at = asked_at;
        }
        Ok(())
    }

    /// Forgets `handle` (closed: the host may give its name to another session).
    pub fn forget(&self, handle: &str) {
        self.read_only.lock().unwrap_or_else(|e| e.into_inner()).remove(handle);
    }

    /// The machine whose session `handle` holds, when it was opened from the database.
    pub fn read_only(&self, handle: &str) -> Option<String> {
        self.read_only.lock().unwrap_or_else(|e| e.into_inner()).get(handle).map(|h| h.machine.clone())
    }

    /// A listing across machines: `list(cwd, dir)` with a cwd, `listAll(dir)` without.
    pub fn listing(
        &self,
        cwd: Option<&str>,
        dir: Option<&str>,
        with_text: bool,
    ) -> Result<Vec<Arc<ListedSession>>, ErrorObjectOwned> {
        let sessions = self.with(|c| {
            match cwd {
                Some(cwd) => c.list(cwd, dir, with_text),
                None => c.list_all(dir, with_text),
            }
            .map_err(unavailable)
        })?;
        Ok(sessions.into_iter().map(|s| s.listed).collect())
    }
}

/// `sessions/search` across machines: the hits with their `machine`.
pub fn search(
    team: &TeamServer,
    query: &str,
    scope: crate::catalog::search::Scope<'_>,
    roles: Option<&[String]>,
    limit: usize,
    cancel: &crate::catalog::cancel::Cancel,
) -> Result<Vec<SearchHitJson>, ErrorObjectOwned> {
    let hits = team.with(|c| {
        c.search_cancellable(query, scope, roles, limit, cancel).map_err(|e| match e {
            SearchError::Query(message) => from_session(crate::session::Error::InvalidQuery { message }),
            SearchError::Db(DbError::Cancelled) => from_session(crate::session::Error::Cancelled),
            SearchError::Db(e) => unavailable(e),
        })
    })?;
    Ok(hits
        .iter()
        .map(|h| {
            let mut v = search_hit_json(&h.hit);
            if let Json::Object(o) = &mut v {
                o.insert("machine", Json::str(&h.machine));
            }
            SearchHitJson(RawJson::from_json(&v))
        })
        .collect())
}

/// The database failed (or cannot be reached): `data.kind: "catalog_unavailable"`. The message names the server,
/// never its credentials.
pub fn unavailable(e: DbError) -> ErrorObjectOwned {
    tracing::warn!("team catalog: {e}");
    rpc_error(WireKind::CatalogUnavailable, e.to_string(), json!({}))
}

/// A mutation of a session opened read-only from the team database.
pub fn read_only(handle: &str, machine: &str) -> ErrorObjectOwned {
    rpc_error(
        WireKind::ReadOnly,
        format!("{handle} is {machine}'s session, opened read-only from the team catalog"),
        json!({ "handle": handle, "machine": machine }),
    )
}
