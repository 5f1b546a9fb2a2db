//! Following files other processes write: `session/watch` and `sessions/watch`, and what the event loop does with
//! a file event or a poll tick. A watched session is refreshed by a job on its own queue, so what another process
//! appended is published in order with the handle's own changes.

use crate::session::ErrorKind;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::changes::publish;
use super::{null, Cx, Res, Server, WriteCx};
use crate::rpc::error::{self, invalid_params};
use crate::rpc::handles::{Job, Slot};
use crate::rpc::proto::*;
use crate::rpc::reply::Out;
use crate::session::{dirscan, paths, SessionManager};
use crate::watch::{dir_of, FsEvent};

/// Follows the file for what other processes did to it and publishes it (`session/changed`, origin
/// `external`); returns whether anything changed.
pub fn follow(server: &Server, slot: &Arc<Slot>, m: &mut SessionManager) -> bool {
    match m.refresh() {
        Ok(Some(change)) => {
            publish(server, slot, m, &[change]);
            true
        }
        Ok(None) => false,
        Err(e) => {
            // Reading the file failed (not what is in it: that is a change): the next refresh tries again.
            tracing::warn!("{}: cannot follow the file: {e}", slot.handle);
            false
        }
    }
}

/// Queues a refresh of a watched session (one at a time per session: events coalesce into it).
pub fn schedule_refresh(server: &Arc<Server>, slot: &Arc<Slot>) {
    if slot.refresh_queued.swap(true, Ordering::SeqCst) {
        return;
    }
    let job_server = server.clone();
    slot.push(
        Job::Write(Box::new(move |m, slot| {
            slot.refresh_queued.store(false, Ordering::SeqCst);
            if let Some(m) = m.as_mut() {
                if slot.watched.load(Ordering::SeqCst) {
                    follow(&job_server, slot, m);
                }
            }
            None
        })),
        &server.pool,
    );
}

/// What the event loop does with a file event: refresh the watched session it concerns, report session files
/// in watched directories, and follow project directories appearing under a sessions root watched whole.
pub fn on_fs_event(server: &Arc<Server>, event: &FsEvent) {
    for path in &event.paths {
        let p = path.to_string_lossy();
        if !p.ends_with(".jsonl") {
            project_dir_event(server, &p, event.kind.into());
            continue;
        }
        if let Some(slot) = server.registry.by_path(&p) {
            if slot.watched.load(Ordering::SeqCst) {
                schedule_refresh(server, &slot);
            }
        }
        let dir = dir_of(&p);
        let mut watches: Vec<String> = lock(&server.dir_watches)
            .iter()
            .filter(|(id, d)| std::path::Path::new(d.as_str()) == dir && !lock(&server.tree_watches).contains_key(*id))
            .map(|(id, _)| id.clone())
            .collect();
        watches.extend(
            lock(&server.tree_watches)
                .iter()
                .filter(|(_, dirs)| dirs.contains(dir.to_string_lossy().as_ref()))
                .map(|(id, _)| id.clone()),
        );
        for watch_id in watches {
            report(server, watch_id, p.to_string(), event.kind.into());
        }
    }
}

fn report(server: &Server, watch_id: String, path: String, kind: SessionsChangeKind) {
    let note = SessionsChanged { watch_id, path, kind };
    // Sent from the event loop, which never waits on the host.
    server.outbox.send_now(crate::rpc::envelope::notification("sessions/changed", &note));
}

/// A directory appearing in (or vanishing from) a sessions root watched whole: its watch starts (or ends), and
/// the session files already in a new one (pi creates the directory, then the file) are reported as created.
fn project_dir_event(server: &Arc<Server>, path: &str, kind: SessionsChangeKind) {
    let root = dir_of(path);
    let trees: Vec<String> = lock(&server.dir_watches)
        .iter()
        .filter(|(id, d)| std::path::Path::new(d.as_str()) == root && lock(&server.tree_watches).contains_key(*id))
        .map(|(id, _)| id.clone())
        .collect();
    for id in trees {
        let mut tree_watches = lock(&server.tree_watches);
        let Some(dirs) = tree_watches.get_mut(&id) else { continue };
        if kind == SessionsChangeKind::Removed || !paths::as_path(path).is_dir() {
            if dirs.remove(path) {
                server.watcher.unwatch_dir(std::path::Path::new(path));
            }
            continue;
        }
        if !dirs.insert(path.to_owned()) {
            continue;
        }
        server.watcher.watch_dir(std::path::Path::new(path));
        drop(tree_watches);
        // Watched first, listed after: a file made in between is reported twice, never missed.
        for name in dirscan::jsonl_names(path).unwrap_or_default() {
            report(server, id.clone(), paths::join(&[path, &name]), SessionsChangeKind::Created);
        }
    }
}

/// A poll tick: every watched session is looked at, even without an event (the safety net for missed ones).
pub fn on_poll(server: &Arc<Server>) {
    for slot in server.registry.watched() {
        schedule_refresh(server, &slot);
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Marks a slot as following its file and watches the file's directory; anything written since the open is
/// picked up at once.
pub fn start(server: &Arc<Server>, slot: &Arc<Slot>) {
    if slot.watched.swap(true, Ordering::SeqCst) {
        return;
    }
    if let Some(p) = slot.path() {
        server.watcher.watch_dir(&dir_of(&p));
    }
    schedule_refresh(server, slot);
}

/// Stops following a slot's file.
pub fn stop(server: &Server, slot: &Slot) {
    if slot.watched.swap(false, Ordering::SeqCst) {
        if let Some(p) = slot.path() {
            server.watcher.unwatch_dir(&dir_of(&p));
        }
    }
}

/// Moves a watched slot's directory watch from its old file to its new one (a rebind).
pub fn moved(server: &Server, slot: &Slot, old: Option<&str>, new: Option<&str>) {
    if slot.watched.load(Ordering::SeqCst) && old != new {
        if let Some(old) = old {
            server.watcher.unwatch_dir(&dir_of(old));
        }
        if let Some(new) = new {
            server.watcher.watch_dir(&dir_of(new));
        }
    }
}

/// `session/watch`.
pub fn watch_session(_p: HandleParams, cx: &mut WriteCx<'_>) -> Res<Null> {
    if let Some(machine) = cx.server.read_only(&cx.slot.handle) {
        return Err(crate::rpc::team::read_only(&cx.slot.handle, &machine));
    }
    start(cx.server, cx.slot);
    Ok(Out::Value(null()))
}

/// `session/unwatch`.
pub fn unwatch_session(_p: HandleParams, cx: &mut WriteCx<'_>) -> Res<Null> {
    stop(cx.server, cx.slot);
    Ok(Out::Value(null()))
}

/// `sessions/watch`.
pub fn watch_sessions(p: SessionsWatchParams, cx: &Cx<'_>) -> Res<SessionsWatchResult> {
    let server = cx.server;
    let all = p.all == Some(true);
    let dir = match (&p.session_dir, &p.cwd) {
        (None, None) if all => paths::join(&[&paths::resolve_path(&server.agent_dir), "sessions"]),
        (Some(_), _) | (_, Some(_)) if all => {
            return Err(invalid_params("all", "give all, or sessionDir or cwd, not both"))
        }
        (Some(d), _) => paths::resolve_path(d),
        (None, Some(cwd)) => paths::default_session_dir_path(cwd, &server.agent_dir),
        (None, None) => return Err(invalid_params("sessionDir", "give sessionDir, cwd or all")),
    };
    if !paths::as_path(&dir).is_dir() {
        return Err(error::rpc_error(
            ErrorKind::SessionNotFound,
            format!("no directory {dir}"),
            serde_json::json!({ "path": dir }),
        ));
    }
    let id = format!("w{}", server.next_watch_id.fetch_add(1, Ordering::SeqCst) + 1);
    server.watcher.watch_dir(std::path::Path::new(&dir));
    if all {
        // The root first, so a project directory made while these are listed is noticed by its event.
        let projects: std::collections::BTreeSet<String> =
            dirscan::subdirectories(&dir).unwrap_or_default().into_iter().collect();
        for project in &projects {
            server.watcher.watch_dir(std::path::Path::new(project));
        }
        lock(&server.tree_watches).insert(id.clone(), projects);
    }
    lock(&server.dir_watches).insert(id.clone(), dir.clone());
    Ok(Out::Value(SessionsWatchResult { watch_id: id, dir }))
}

/// `sessions/unwatch`.
pub fn unwatch_sessions(p: SessionsUnwatchParams, cx: &Cx<'_>) -> Res<Null> {
    let dir = lock(&cx.server.dir_watches).remove(&p.watch_id);
    let Some(dir) = dir else { return Err(invalid_params("watchId", format!("no watch {}", p.watch_id))) };
    cx.server.watcher.unwatch_dir(std::path::Path::new(&dir));
    for project in lock(&cx.server.tree_watches).remove(&p.watch_id).unwrap_or_default() {
        cx.server.watcher.unwatch_dir(std::path::Path::new(&project));
    }
    Ok(Out::Value(null()))
}
