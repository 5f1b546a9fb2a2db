//! `usage --catalog` and the team web view's usage chart: tokens and cost of every machine's pushed sessions,
//! counted by the one count `pi-sessiond usage` makes on a machine (`catalog::usage`), so the team's sums are
//! the machines' own sums added up.
//!
//! Counting happens in a streaming read, not in a table filled at push time: a table would be a second copy of
//! what the entry rows already hold, filled by a second count that could drift from pi's, for every machine and
//! every row-level policy to cover, and empty for sessions pushed before it existed. Here each session is opened
//! as the sidecar opens a pushed session (`SessionManager::open_pushed`) from its header and only the lines that
//! may carry usage, narrowed by the entry rows' `type` and `role` columns (and what follows its last newline, as
//! that open reads it): user messages, labels and the like never leave the database, nor does a tool result that
//! cannot name `usage`. The lines come through a cursor a
//! batch at a time, in file order, so the client holds one session's usage lines at once; a role sees what its
//! policies let it see, as in every other read.

use std::collections::HashMap;

use postgres::IsolationLevel;

use super::catalog::TeamCatalog;
use super::db::{DbError, DbResult};
use crate::catalog::cancel::Cancel;
use crate::catalog::usage::{session_usage, Counted, Overview, SessionUsage};
use crate::session::{Env, SessionManager};

/// Rows fetched from the cursor at a time.
const FETCH_ROWS: i32 = 2000;

/// The lines a session's usage is counted from, in file order, session after session: its header, and every
/// line whose stored `type` (and `role`) may carry usage as `catalog::usage::may_carry_usage` judges. A tool
/// result carries usage only under a member named `usage`, which its line spells out, or writes with a `\u`
/// escape; a line with neither is left in the database.
const USAGE_LINES: &str = r"
    SELECT e.sid, e.raw FROM pi_entries e
    WHERE e.type = 'session'
       OR e.type IN ('usage', 'compaction', 'branch_summary')
       OR (e.type = 'message' AND e.role = 'assistant')
       OR (e.type = 'message' AND e.role = 'toolResult'
           AND (position('usage'::bytea IN e.raw) > 0 OR position('\x5c75'::bytea IN e.raw) > 0))
    ORDER BY e.sid, e.line";

/// Sums the usage of every session the database shows this role, as [`crate::catalog::usage::overview`] sums a
/// machine's: each machine's sessions in path order (byte order, as `usage` orders a directory), summed into that
/// machine's groups, and the machines' sums added in name order. Entries dated before `since_ms` are left out;
/// `key` names each usage object's group from the machine, the session and the object. A session whose lines
/// cannot be opened is counted as unreadable (`machine:path`), as a local file would be.
pub fn overview<K: Ord>(
    catalog: &mut TeamCatalog,
    since_ms: Option<f64>,
    cancel: &Cancel,
    mut key: impl FnMut(&str, &SessionUsage, &Counted) -> K,
) -> DbResult<Overview<K>> {
    let (client, target) = catalog.connection();
    let err = |e| target.error(e);
    let cancelled = |_| DbError::Cancelled;
    // One snapshot for the listing and the lines: a push committing meanwhile shows in neither or both.
    let mut tx = client
        .build_transaction()
        .read_only(true)
        .isolation_level(IsolationLevel::RepeatableRead)
        .start()
        .map_err(err)?;
    let mut sessions: Vec<(String, String, i64)> = Vec::new();
    // What follows a session's last newline: pi reads it as a last line, and so does a read-only open.
    let mut unterminated: HashMap<i64, Vec<u8>> = HashMap::new();
    for r in tx.query("SELECT machine, path, sid, unterminated FROM pi_sessions", &[]).map_err(err)? {
        let (sid, rest): (i64, Vec<u8>) = (r.get(2), r.get(3));
        if !rest.is_empty() {
            unterminated.insert(sid, rest);
        }
        sessions.push((r.get(0), r.get(1), sid));
    }
    sessions.sort_by(|a, b| (a.0.as_bytes(), a.1.as_bytes()).cmp(&(b.0.as_bytes(), b.1.as_bytes())));
    let path_of: HashMap<i64, &str> = sessions.iter().map(|(_, p, sid)| (*sid, p.as_str())).collect();

    let mut read: HashMap<i64, crate::session::Result<SessionUsage>> = HashMap::new();
    let mut open = |sid: i64, mut bytes: Vec<u8>| {
        bytes.extend_from_slice(unterminated.get(&sid).map_or(&[][..], Vec::as_slice));
        let path = path_of.get(&sid).copied().unwrap_or_default();
        let counted = SessionManager::open_pushed(path, &bytes, Env::system()).and_then(|m| session_usage(&m));
        read.insert(sid, counted);
    };
    let portal = tx.bind(USAGE_LINES, &[]).map_err(err)?;
    let mut current: Option<(i64, Vec<u8>)> = None;
    loop {
        cancel.check().map_err(cancelled)?;
        let rows = tx.query_portal(&portal, FETCH_ROWS).map_err(err)?;
        for r in &rows {
            let (sid, raw): (i64, &[u8]) = (r.get(0), r.get(1));
            if current.as_ref().is_some_and(|(s, _)| *s != sid) {
                if let Some((s, bytes)) = current.take() {
                    open(s, bytes);
                }
            }
            let (_, bytes) = current.get_or_insert_with(|| (sid, Vec::new()));
            bytes.extend_from_slice(raw);
            bytes.push(b'\n');
        }
        if rows.len() < FETCH_ROWS as usize {
            break;
        }
    }
    if let Some((s, bytes)) = current.take() {
        open(s, bytes);
    }
    drop(portal);
    tx.commit().map_err(err)?;

    let mut total = Overview::new();
    let mut machine = Overview::new();
    for (i, (name, path, sid)) in sessions.iter().enumerate() {
        cancel.check().map_err(cancelled)?;
        // A session with no line that may carry usage has none (its header is always read, unless the row
        // went missing between the two reads of one snapshot, which it cannot).
        match read.remove(sid).unwrap_or_else(|| Ok(SessionUsage::default())) {
            Ok(s) => machine.add_session(&s, since_ms, &mut |s, c| key(name, s, c)),
            Err(e) => machine.unreadable.push((format!("{name}:{path}"), e)),
        }
        if sessions.get(i + 1).is_none_or(|next| next.0 != *name) {
            total.merge(std::mem::take(&mut machine));
        }
    }
    Ok(total)
}
