//! Entries at a detail, and snapshots: what a host that mirrors a session receives instead of full bodies.
//!
//! A tree view needs, per entry, its links and a line of text — not the megabytes of tool output a session holds.
//! At `skeleton` detail each entry is what `session::skeleton` made of its line in the open's one pass over the
//! file, so a 40 MB session's skeleton snapshot reads nothing again and costs a few hundred bytes per entry on the
//! pipe; an entry patched since (migrated, re-chained) is described from its patched bytes.
//!
//! A snapshot is `{seq, entries}`: every entry in file order at a detail, as of the change numbered `seq`. It is
//! written through a [`JsonOut`], so a reply streams it from the file (see `reply.rs`).

use crate::rpc::proto::{Detail, SessionState};
use crate::session::context::Bodies;
use crate::session::entry::EntryType;
use crate::session::json::scan::scan_document;
use crate::session::manager::trim_json_ws;
use crate::session::render::{self, JsonOut};
use crate::session::skeleton;
use crate::session::{Error, SessionManager};

/// Writes record `i` at `detail` (`none` writes it as stored, as a handle at detail `none` sends it).
pub fn entry(m: &SessionManager, i: usize, detail: Detail, out: &mut JsonOut<'_>) -> crate::session::Result<()> {
    entry_from(m, &m.bodies(), i, detail, out)
}

/// [`entry`], its bytes read through `bodies`.
fn entry_from(
    m: &SessionManager,
    bodies: &dyn Bodies,
    i: usize,
    detail: Detail,
    out: &mut JsonOut<'_>,
) -> crate::session::Result<()> {
    match detail {
        Detail::Skeleton => skeleton_from(m, bodies, i, out),
        Detail::Full | Detail::None => render::record_from(bodies, i, out),
    }
}

/// Writes `[entry, …]` for record indices, at `detail`, reading ahead in file order (a skeleton snapshot of a
/// 40 MB session is a few large reads of it, not one read per line).
pub fn entries(
    m: &SessionManager,
    list: &[usize],
    detail: Detail,
    out: &mut JsonOut<'_>,
) -> crate::session::Result<()> {
    let bodies = m.bodies_in_order();
    out.raw(b"[")?;
    for (n, &i) in list.iter().enumerate() {
        if n > 0 {
            out.raw(b",")?;
        }
        entry_from(m, &bodies, i, detail, out)?;
    }
    out.raw(b"]")
}

/// Writes `{"seq":…,"entries":[…]}`: every entry of the session (header excluded), in file order.
pub fn snapshot(m: &SessionManager, seq: u64, detail: Detail, out: &mut JsonOut<'_>) -> crate::session::Result<()> {
    snapshot_before(m, seq, detail, m.records().len(), out)
}

/// [`snapshot`] of the entries among the first `records` records only (what the session held before later
/// records were appended).
pub fn snapshot_before(
    m: &SessionManager,
    seq: u64,
    detail: Detail,
    records: usize,
    out: &mut JsonOut<'_>,
) -> crate::session::Result<()> {
    out.raw(format!("{{\"seq\":{seq},\"entries\":").as_bytes())?;
    let list: Vec<usize> = m.entries().into_iter().filter(|&i| i < records).collect();
    entries(m, &list, detail, out)?;
    out.raw(b"}")
}

/// Writes a state with its snapshot at `detail` as one object: `{…state…, "snapshot": {seq, entries}}`.
pub fn state_with_snapshot(
    m: &SessionManager,
    state: &SessionState,
    detail: Detail,
    out: &mut JsonOut<'_>,
) -> crate::session::Result<()> {
    let mut head = serde_json::to_vec(state).expect("states serialize");
    debug_assert_eq!(head.last(), Some(&b'}'));
    head.pop();
    out.raw(&head)?;
    out.raw(b",\"snapshot\":")?;
    snapshot(m, state.seq, detail, out)?;
    out.raw(b"}")
}

/// Writes record `i` at skeleton detail: the skeleton the open made in its pass over the line, or, for an entry
/// edited since (migrated, re-chained) or made without one, from its bytes read through `bodies`.
fn skeleton_from(
    m: &SessionManager,
    bodies: &dyn Bodies,
    i: usize,
    out: &mut JsonOut<'_>,
) -> crate::session::Result<()> {
    let record = &m.records()[i];
    if let (Some(kept), None) = (&record.skeleton, &record.body.patch) {
        return out.raw(kept);
    }
    let bytes = bodies.bytes(i)?;
    let line = trim_json_ws(&bytes);
    skeleton_of_line(record.kind, line, m.session_file().unwrap_or("session file"), out)
}

/// Writes the skeleton of one stored line of the file at `path`.
fn skeleton_of_line(kind: EntryType, line: &[u8], path: &str, out: &mut JsonOut<'_>) -> crate::session::Result<()> {
    let Ok(doc) = scan_document(line) else {
        // Lines were JSON when read: these bytes were rewritten under the handle by another process.
        return Err(Error::io(
            "read",
            path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "the session file changed on disk under this handle (an entry is no longer JSON); open it again",
            ),
        ));
    };
    out.raw(&skeleton::of_line(kind, line, &doc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_that_are_no_longer_json_are_an_error_not_a_skeleton() {
        let mut out = JsonOut::memory();
        assert!(skeleton_of_line(EntryType::Message, b"{\"id\":", "test", &mut out).is_err());
    }
}
