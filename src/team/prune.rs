//! Retention: `team prune --older-than DURATION` deletes, for every machine, the sessions whose file last changed
//! (as pushed) longer ago than that, with their entries; `push --prune` applies the same rule to one machine's
//! files as it pushes them (`push::Filter::with_max_age`).
//!
//! A session's rows go in one statement of one transaction, entries by the foreign key's `ON DELETE CASCADE`, so a
//! kill at any moment leaves either every old session or none of them deleted, and never an entry without its
//! session.

use postgres::Client;

use super::db::{DbResult, Target};

/// What a prune deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// Sessions (rows of `pi_sessions`).
    pub sessions: u64,
    /// Their entries (rows of `pi_entries`).
    pub entries: u64,
}

/// `--older-than`'s value (`90d`, `12h`, `2w 3d`): a positive duration.
pub fn parse_age(text: &str) -> Result<std::time::Duration, String> {
    match humantime::parse_duration(text.trim()) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err(format!("--older-than {text:?}: must be longer than nothing")),
        Err(e) => Err(format!("--older-than {text:?}: {e} (write it as 90d, 12h, 30m, 2w…)")),
    }
}

/// The time (ns since the epoch) `age` ago: files last changed before it are older than `age`.
pub fn cutoff_ns(age: std::time::Duration) -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    now.saturating_sub(age).as_nanos().min(i64::MAX as u128) as i64
}

/// Deletes every machine's sessions whose file last changed before `cutoff_ns`, with their entries, in one
/// transaction. A session whose push is between pieces (its row's stamp zeroed until the last piece) is left
/// for a later prune: its file's time is not known yet.
pub fn prune(client: &mut Client, target: &Target, cutoff_ns: i64) -> DbResult<PruneReport> {
    let err = |e| target.error(e);
    let mut tx = client.transaction().map_err(err)?;
    let row = tx
        .query_one(
            "WITH gone AS (
               DELETE FROM pi_sessions WHERE file_mtime_ns < $1 AND NOT (file_size = 0 AND file_mtime_ns = 0)
               RETURNING sid)
             SELECT (SELECT count(*) FROM gone),
                    (SELECT count(*) FROM pi_entries WHERE sid IN (SELECT sid FROM gone))",
            &[&cutoff_ns],
        )
        .map_err(err)?;
    let report = PruneReport { sessions: row.get::<_, i64>(0) as u64, entries: row.get::<_, i64>(1) as u64 };
    tx.commit().map_err(err)?;
    Ok(report)
}
