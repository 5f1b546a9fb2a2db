//! What a handle tells its host about every change to its session: one `session/changed` per change, carrying
//! what a mirror needs to stay equal to the session without a read (entries at the handle's detail, the leaf, a
//! snapshot after a rebind or a reset), and `session/changesSince`, which gives a host that missed some the
//! notifications again (or a fresh snapshot once they are no longer kept).
//!
//! Every notification goes through [`publish`], from the session's own queue (mutations, and follows of the file
//! for other processes' appends), so `seq` order is the order of changes and the order of the wire.

use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock};

use jsonrpsee::types::ErrorObjectOwned;
use serde::Serialize;

use super::snapshot;
use super::{any, key_json, state_at, state_of, ReadCx, Res, Server};
use crate::rpc::envelope;
use crate::rpc::error::invalid_params;
use crate::rpc::handles::Slot;
use crate::rpc::proto::{AnyJson, ChangesSinceParams, ChangesSinceResult, Detail, SessionState};
use crate::rpc::reply::{Rendered, Streamed};
use crate::session::change::{Change, Origin};
use crate::session::key::Key;
use crate::session::render::JsonOut;
use crate::session::SessionManager;

/// The members of a `session/changed` before its `change`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Head<'a> {
    handle: &'a str,
    session_id: AnyJson,
    seq: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    origin: Option<&'static str>,
    leaf_id: Option<AnyJson>,
}

/// `session/changed` up to its params, which are rendered (and streamed when they carry a large snapshot).
static NOTIFICATION_HEAD: LazyLock<Vec<u8>> = LazyLock::new(|| envelope::notification_head("session/changed"));

/// Sends one `session/changed` per engine change, in order, and keeps each for `session/changesSince`. The
/// engine's "deleted" at every look while the file is gone is told once until the file is back. (A rebind's new
/// path is registered by the mutation that made it, before this runs.)
///
/// The changes of one mutation are rendered after all of them happened, each as of its own moment ([`Then`]): a
/// reset found by the mutation's look at the file holds the records before the mutation's own, and the leaf
/// then, so a mirror applying the reset and then the append holds each entry once.
pub fn publish(server: &Server, slot: &Arc<Slot>, m: &SessionManager, changes: &[Change]) {
    for (i, change) in changes.iter().enumerate() {
        match change {
            Change::Deleted if slot.deleted_reported.swap(true, Ordering::SeqCst) => continue,
            Change::Deleted | Change::LeafMoved => {}
            // Appended (ours too: a write puts a deleted file back), reloaded or rebound: there is a file again.
            _ => slot.deleted_reported.store(false, Ordering::SeqCst),
        }
        publish_one(server, slot, m, change, &Then::of(m, changes.get(i + 1)));
    }
}

/// The session as it was right after a change, where a later change of the same mutation moved on from it.
struct Then {
    /// Records it had (the rest were appended after).
    records: usize,
    /// Its leaf.
    leaf: Key,
    /// Its distinct entry ids.
    entry_count: usize,
}

impl Then {
    /// The session after a change followed by `next`: before `next`'s records, at the leaf our append started
    /// from (its first entry's parent: the leaf then, unless the op moved the leaf first, as `branchWithSummary`
    /// does); before anything else, as it is now (a `leaf` change that follows sets the leaf anyway).
    fn of(m: &SessionManager, next: Option<&Change>) -> Then {
        let all = m.records().len();
        match next {
            Some(Change::Appended { records, origin }) => {
                let later = m.records()[records.clone()].iter().filter(|r| !r.is_header()).count();
                let leaf = match origin {
                    Origin::Own => m.records().get(records.start).map_or(m.leaf_id(), |r| &r.parent),
                    Origin::External => m.leaf_id(),
                };
                // Our appends have ids new to the session, so each is one more distinct id.
                Then { records: records.start, leaf: leaf.clone(), entry_count: m.entry_count().saturating_sub(later) }
            }
            _ => Then { records: all, leaf: m.leaf_id().clone(), entry_count: m.entry_count() },
        }
    }
}

/// Sends the `session/changed` for one change (numbered with the handle's next `seq`). A change whose entries
/// cannot be read (another process rewrote the file under the handle) is still announced, as a `reset` without
/// snapshot, so the host knows to take one.
fn publish_one(server: &Server, slot: &Slot, m: &SessionManager, happened: &Change, then: &Then) {
    let seq = slot.next_seq();
    let detail = slot.detail();
    let origin = match happened {
        Change::Appended { origin: Origin::Own, .. } | Change::LeafMoved | Change::Rebound => None,
        _ => Some("external"),
    };
    let head =
        Head { handle: &slot.handle, session_id: any(m.session_id()), seq, origin, leaf_id: key_json(&then.leaf) };
    let mut head = serde_json::to_vec(&head).expect("heads serialize");
    head.pop();
    let render = |out: &mut JsonOut<'_>| -> crate::session::Result<()> {
        out.raw(&head)?;
        out.raw(b",\"change\":")?;
        change(m, slot, seq, detail, happened, then, out)?;
        out.raw(b"}")
    };
    let fallback = || fallback(&head, slot, m, seq, then);
    let message =
        Streamed { head: NOTIFICATION_HEAD.clone(), claim: &|| true, failed: &|_| fallback(), fallback: &fallback };
    match message.render(&server.outbox, true, &render) {
        Ok(Rendered::Json(params)) => {
            server.outbox.send(crate::rpc::framing::Message(vec![
                NOTIFICATION_HEAD.clone(),
                params.clone(),
                b"}".to_vec(),
            ]));
            slot.recent().record(seq, Some(params));
        }
        Ok(Rendered::Sent) => slot.recent().record(seq, None),
        Err(e) => {
            // Nothing went out yet (a failure while streaming sent the fallback itself).
            tracing::warn!("{}: change {seq} could not be read ({}); announcing a reset", slot.handle, e.message());
            let text = fallback();
            if !text.is_empty() {
                server.outbox.send(text);
            }
            slot.recent().record(seq, None);
        }
    }
}

/// Writes the `change` member.
fn change(
    m: &SessionManager,
    slot: &Slot,
    seq: u64,
    detail: Detail,
    happened: &Change,
    then: &Then,
    out: &mut JsonOut<'_>,
) -> crate::session::Result<()> {
    match happened {
        Change::Appended { records, .. } => {
            let list: Vec<usize> = records.clone().filter(|&i| !m.records()[i].is_header()).collect();
            out.raw(br#"{"kind":"append","entries":"#)?;
            snapshot::entries(m, &list, detail, out)?;
            out.raw(b"}")
        }
        Change::LeafMoved => {
            out.raw(br#"{"kind":"leaf","leafId":"#)?;
            out.raw(serde_json::to_string(&key_json(&then.leaf)).expect("JSON").as_bytes())?;
            out.raw(b"}")
        }
        Change::Rebound | Change::Reloaded => {
            let kind = if *happened == Change::Rebound { "rebind" } else { "reset" };
            out.raw(format!(r#"{{"kind":"{kind}","state":"#).as_bytes())?;
            let state = state_then(slot, m, seq, then).map_err(rpc_to_session)?;
            out.raw(&serde_json::to_vec(&state).expect("states serialize"))?;
            if detail != Detail::None {
                out.raw(b",\"snapshot\":")?;
                snapshot::snapshot_before(m, seq, detail, then.records, out)?;
            }
            out.raw(b"}")
        }
        Change::Deleted => out.raw(br#"{"kind":"deleted"}"#),
    }
}

/// The message sent instead of a change that could not be rendered: a `reset` without snapshot, with the same
/// head (empty when not even the state can be read).
fn fallback(head: &[u8], slot: &Slot, m: &SessionManager, seq: u64, then: &Then) -> Vec<u8> {
    let Ok(state) = state_then(slot, m, seq, then) else { return Vec::new() };
    let mut out = NOTIFICATION_HEAD.clone();
    out.extend_from_slice(head);
    out.extend_from_slice(br#","change":{"kind":"reset","state":"#);
    out.extend_from_slice(&serde_json::to_vec(&state).expect("states serialize"));
    out.extend_from_slice(b"}}}");
    out
}

/// The handle's state as of `then`.
fn state_then(slot: &Slot, m: &SessionManager, seq: u64, then: &Then) -> Result<SessionState, ErrorObjectOwned> {
    let mut state = state_at(&slot.handle, slot.detail(), m, seq)?;
    state.leaf_id = key_json(&then.leaf);
    state.entry_count = then.entry_count;
    Ok(state)
}

fn rpc_to_session(e: ErrorObjectOwned) -> crate::session::Error {
    crate::session::Error::io("read", "session file", std::io::Error::other(e.message().to_owned()))
}

/// `session/changesSince`: the notifications after `seq`, or (once they are no longer all kept) the state and a
/// snapshot at the handle's detail (`full` for a handle at `none`).
pub fn changes_since(p: ChangesSinceParams, cx: &ReadCx<'_>) -> Res<ChangesSinceResult> {
    let last = cx.slot.current_seq();
    if p.seq > last {
        return Err(invalid_params("seq", format!("seq {} is after the handle's last change ({last})", p.seq)));
    }
    let kept = cx.slot.recent().since(p.seq, last);
    if let Some(changes) = kept {
        return cx.reply.rendered(false, &|out| {
            out.raw(br#"{"changes":["#)?;
            for (n, c) in changes.iter().enumerate() {
                if n > 0 {
                    out.raw(b",")?;
                }
                out.raw(c)?;
            }
            out.raw(b"]}")
        });
    }
    let detail = match cx.slot.detail() {
        Detail::None => Detail::Full,
        d => d,
    };
    let state = state_of(cx.slot, cx.m)?;
    let m = cx.m;
    cx.reply.rendered(detail.copies_file_bytes(), &|out| {
        out.raw(br#"{"state":"#)?;
        out.raw(&serde_json::to_vec(&state).expect("states serialize"))?;
        out.raw(b",\"snapshot\":")?;
        snapshot::snapshot(m, state.seq, detail, out)?;
        out.raw(b"}")
    })
}
