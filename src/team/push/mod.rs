//! `push`: copying one machine's sessions into the team database, incrementally and crash-safely.
//!
//! Per session file the database keeps how far its complete lines were pushed, the file's `stat` then, its first
//! bytes and the bytes just before that offset, and the listing state after the last pushed line. A pass compares
//! every file under `<agentDir>/sessions/*/` with that: an unchanged file costs a `stat`; a file that only grew
//! (same inode, same first bytes, same bytes before the offset) sends its new lines; a file that shrank, was
//! replaced or was rewritten in place is sent again from the start; a file that is gone, or is no longer a
//! session, is deleted with its entries.
//!
//! Crash safety: the entries of a piece of a file and the session row that records the piece's end offset are
//! written in one transaction, so after a kill at any moment the database holds each file up to a line boundary
//! it knows, and the next pass continues from exactly there — nothing lost, nothing twice. The final line without
//! a newline (a write in progress, or a file that does not end in one) is never pushed as an entry: it is kept in
//! the session row as it is now, counted in the listing as pi counts it, and read back as the file's last bytes.
//!
//! Nothing of a file's text reaches the database unredacted (unless `--no-redact`): each line is redacted
//! (`catalog::redact`) before it feeds the entry row, the listing and the search text, and the bytes kept to
//! recognise a rewrite are stored as a SHA-256 digest, never as the file's own bytes.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;
use std::time::Duration;

use postgres::binary_copy::BinaryCopyInWriter;
use postgres::types::{ToSql, Type};
use postgres::Client;

use super::db::{DbError, DbResult, Target};
use super::state;
use crate::catalog::index;
use crate::catalog::info::{Doc, InfoState, SessionInfo};
use crate::catalog::redact::{self, Redactor};
use crate::catalog::Cancel;
use crate::session::dirscan;
use crate::session::identity::{self, now_ns, FileStamp, FileState, Known};
use crate::session::json::scan::{find_member, scan_document};
use crate::session::json::string::decode_string_literal;
use crate::session::json::Json;
use crate::session::paths;
use crate::session::store::{self, LineReader};

mod options;
mod rows;
mod writer;

pub use self::options::*;
use self::rows::*;
use self::writer::*;

/// Raw line bytes per transaction: bounds memory and how much a kill can make the next pass redo.
const BYTES_PER_TRANSACTION: usize = 16 << 20;

/// Files per transaction (many small sessions share one commit, and so one fsync on the server).
const FILES_PER_TRANSACTION: usize = 256;

/// The default machine name: the host name.
pub fn host_name() -> String {
    let name = rustix::system::uname().nodename().to_string_lossy().trim().to_owned();
    if name.is_empty() {
        "localhost".to_owned()
    } else {
        name
    }
}

/// Takes `machine`'s push lock for as long as `client` stays connected, so two pushes of one machine never
/// interleave. Waits up to 30 s: a push killed a moment ago holds it until the server notices its connection is
/// gone.
pub fn lock_machine(client: &mut Client, target: &Target, machine: &str) -> DbResult<()> {
    let err = |e| target.error(e);
    // For bulk loading: the trigram index takes new rows into its pending list and merges them in batches of
    // `work_mem`, and bigger batches are much cheaper.
    client.batch_execute("SET work_mem = '64MB'; SET gin_pending_list_limit = '64MB'").map_err(err)?;
    client.batch_execute("SET lock_timeout = '30s'").map_err(err)?;
    let locked = client.execute("SELECT pg_advisory_lock(1886, hashtext($1))", &[&machine]);
    client.batch_execute("RESET lock_timeout").map_err(err)?;
    match locked {
        Ok(_) => Ok(()),
        Err(e) if e.code() == Some(&postgres::error::SqlState::LOCK_NOT_AVAILABLE) => {
            Err(DbError::Busy { machine: machine.to_owned() })
        }
        Err(e) => Err(err(e)),
    }
}

/// One pass: brings the database's copy of `options.machine`'s sessions up to date with the files.
pub fn push_once(client: &mut Client, target: &Target, options: &PushOptions) -> DbResult<PushReport> {
    let mut scanned = scan(options)?;
    // Sessions the filters leave out are as good as gone: their rows, if any, are deleted below.
    scanned.found.retain(|f| options.filter.chooses(f));
    let found = &scanned.found;
    let mut pushed = load_pushed(client, target, &options.machine)?;
    let mut writer = Writer {
        target,
        machine: &options.machine,
        agent_dir: &options.agent_dir,
        pending: Vec::new(),
        pending_bytes: 0,
        report: PushReport { files: found.len(), ..PushReport::default() },
        row_security: None,
    };
    let mut seen: HashSet<&str> = HashSet::new();
    for (i, f) in found.iter().enumerate() {
        seen.insert(&f.path);
        let mut known = pushed.remove(&f.path);
        // Unchanged as its stamp proves (outside the racy window): a `stat`, nothing read.
        if known.as_ref().is_some_and(|k| k.ctime_known && k.stamp.vouches_for(&f.stamp, k.read_at_ns)) {
            continue;
        }
        let Some(mut opened) = open_changed(f, known.as_mut()) else { continue };
        if let Some(k) = known.as_ref().filter(|_| opened.unchanged) {
            // Its bytes say it is unchanged (racily clean, or a row without a change time): record what was
            // learnt, so later passes decide from the stamp alone.
            let now_settled = Known { observed_at_ns: opened.read_at_ns, ..k.known() };
            if !k.ctime_known || (k.known().racy() && !now_settled.racy()) {
                client
                    .execute(
                        "UPDATE pi_sessions SET read_at_ns = $1, file_ctime_ns = $2 WHERE sid = $3",
                        &[&opened.read_at_ns, &opened.stamp.ctime_ns, &k.sid],
                    )
                    .map_err(|e| target.error(e))?;
            }
            continue;
        }
        (opened.redactor, opened.keep_images) = (options.redactor.clone(), options.keep_images);
        let mut emit = |client: &mut Client, piece: Piece| writer.add(client, found, piece);
        let outcome = read_file(i, f, &opened, known.as_ref(), client, target, &mut emit)?;
        writer.report.pushed += usize::from(outcome.wrote);
        writer.report.rewritten += usize::from(outcome.restarted);
    }
    writer.flush(client, found)?;
    let mut report = writer.report;
    // Rows of files that are gone (not of those the scan could not see this time: an unreadable directory or a
    // failed stat may pass, and the next pass decides).
    let gone: Vec<i64> = pushed.iter().filter(|(path, _)| scanned.is_gone(path)).map(|(_, p)| p.sid).collect();
    if !gone.is_empty() {
        let n = client.execute("DELETE FROM pi_sessions WHERE sid = ANY($1)", &[&gone]).map_err(|e| target.error(e))?;
        report.deleted += n as usize;
    }
    Ok(report)
}

/// Pushes once, then again whenever a session file changes (file-system notifications, with a poll every
/// `poll` as a safety net), until `keep_going` says stop or a pass fails. `on_pass` sees every pass's report,
/// whether or not it changed something.
pub fn watch(
    client: &mut Client,
    target: &Target,
    options: &PushOptions,
    poll: Duration,
    keep_going: &dyn Fn() -> bool,
    on_pass: &mut dyn FnMut(&PushReport),
) -> DbResult<()> {
    let (tx, rx) = std::sync::mpsc::channel();
    let watcher = crate::watch::FsWatcher::new(move |event| {
        let _ = tx.send(event);
    });
    let root = std::path::PathBuf::from(paths::join(&[&options.agent_dir, "sessions"]));
    let mut watched: HashSet<std::path::PathBuf> = HashSet::new();
    // Whether a directory was added: its files may have been written before its watch began.
    let watch_dirs = |watched: &mut HashSet<std::path::PathBuf>| -> bool {
        let mut dirs = vec![root.clone()];
        if let Ok(entries) = std::fs::read_dir(&root) {
            dirs.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
        }
        let mut added = false;
        for d in dirs {
            if d.is_dir() && watched.insert(d.clone()) {
                watcher.watch_dir(&d);
                added = true;
            }
        }
        added
    };
    watch_dirs(&mut watched);
    on_pass(&push_once(client, target, options)?);
    while keep_going() {
        // Wait for an event or the poll; then let a burst of events settle briefly into one pass.
        let deadline = std::time::Instant::now() + poll;
        let mut woke = false;
        while !woke && keep_going() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            match rx.recv_timeout(left.min(Duration::from_millis(200))) {
                Ok(_) => woke = true,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => std::thread::sleep(left),
            }
        }
        std::thread::sleep(Duration::from_millis(20));
        while rx.try_recv().is_ok() {}
        loop {
            let added = watch_dirs(&mut watched);
            on_pass(&push_once(client, target, options)?);
            if !added {
                break;
            }
        }
    }
    Ok(())
}
