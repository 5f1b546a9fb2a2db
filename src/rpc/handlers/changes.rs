//! What a handle tells its host about every change to its session: one `session/changed` per change, carrying
//! what a mirror needs to stay equal to the session without a read (entries at the handle's detail, the leaf, a
//! snapshot after a rebind or a reset), and `session/changesSince`, which gives a host that missed some the
//! notifications again (or a fresh snapshot once they are no longer kept).
//!
//! Every notification goes through [`publish`], from the session's own queue (mutations, and follows of the file
//! for other processes' appends), so `seq` order is the order of changes and the order of the wire.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use jsonrpsee::types::ErrorObjectOwned;
use serde::Serialize;

use super::snapshot;
use super::{any, key_json, state_at, state_of, ReadCx, Res, Server};
use crate::rpc::error::invalid_params;
use crate::rpc::handles::Slot;
use crate::rpc::proto::{AnyJson, ChangesSinceParams, ChangesSinceResult, Detail};
use crate::rpc::reply::{Rendered, Streamed};
use crate::session::change::{Change, Origin};
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

const NOTIFICATION_HEAD: &[u8] = br#"{"jsonrpc":"2.0","method":"session/changed","params":"#;

/// Sends one `session/changed` per engine change, in order, and keeps each for `session/changesSince`. The
/// engine's "deleted" at every look while the file is gone is told once until the file is back. (A rebind's new
/// path is registered by the mutation that made it, before this runs.)
pub fn publish(server: &Server, slot: &Arc<Slot>, m: &SessionManager, changes: &[Change]) {
    for change in changes {
        match change {
            Change::Deleted if slot.deleted_reported.swap(true, Ordering::SeqCst) => continue,
            Change::Deleted | Change::LeafMoved => {}
            // Appended (ours too: a write puts a deleted file back), reloaded or rebound: there is a file again.
            _ => slot.deleted_reported.store(false, Ordering::SeqCst),
        }
        publish_one(server, slot, m, change);
    }
}

/// Sends the `session/changed` for one change (numbered with the handle's next `seq`). A change whose entries
/// cannot be read (another process rewrote the file under the handle) is still announced, as a `reset` without
/// snapshot, so the host knows to take one.
fn publish_one(server: &Server, slot: &Slot, m: &SessionManager, happened: &Change) {
    let seq = slot.next_seq();
    let detail = slot.detail();
    let origin = match happened {
        Change::Appended { origin: Origin::Own, .. } | Change::LeafMoved | Change::Rebound => None,
        _ => Some("external"),
    };
    let head =
        Head { handle: &slot.handle, session_id: any(m.session_id()), seq, origin, leaf_id: key_json(m.leaf_id()) };
    let mut head = serde_json::to_vec(&head).expect("heads serialize");
    head.pop();
    let render = |out: &mut JsonOut<'_>| -> crate::session::Result<()> {
        out.raw(&head)?;
        out.raw(b",\"change\":")?;
        change(m, slot, seq, detail, happened, out)?;
        out.raw(b"}")
    };
    let fallback = || fallback(&head, slot, m, seq);
    let message =
        Streamed { head: NOTIFICATION_HEAD.to_vec(), claim: &|| true, failed: &|_| fallback(), fallback: &fallback };
    match message.render(&server.outbox, true, &render) {
        Ok(Rendered::Json(params)) => {
            server.outbox.send(crate::rpc::framing::Message(vec![
                NOTIFICATION_HEAD.to_vec(),
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
            out.raw(serde_json::to_string(&key_json(m.leaf_id())).expect("JSON").as_bytes())?;
            out.raw(b"}")
        }
        Change::Rebound | Change::Reloaded => {
            let kind = if *happened == Change::Rebound { "rebind" } else { "reset" };
            out.raw(format!(r#"{{"kind":"{kind}","state":"#).as_bytes())?;
            let state = state_at(&slot.handle, slot.detail(), m, seq).map_err(rpc_to_session)?;
            out.raw(&serde_json::to_vec(&state).expect("states serialize"))?;
            if detail != Detail::None {
                out.raw(b",\"snapshot\":")?;
                snapshot::snapshot(m, seq, detail, out)?;
            }
            out.raw(b"}")
        }
        Change::Deleted => out.raw(br#"{"kind":"deleted"}"#),
    }
}

/// The message sent instead of a change that could not be rendered: a `reset` without snapshot, with the same
/// head (empty when not even the state can be read).
fn fallback(head: &[u8], slot: &Slot, m: &SessionManager, seq: u64) -> Vec<u8> {
    let Ok(state) = state_at(&slot.handle, slot.detail(), m, seq) else { return Vec::new() };
    let mut out = NOTIFICATION_HEAD.to_vec();
    out.extend_from_slice(head);
    out.extend_from_slice(br#","change":{"kind":"reset","state":"#);
    out.extend_from_slice(&serde_json::to_vec(&state).expect("states serialize"));
    out.extend_from_slice(b"}}}");
    out
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
    cx.reply.rendered(true, &|out| {
        out.raw(br#"{"state":"#)?;
        out.raw(&serde_json::to_vec(&state).expect("states serialize"))?;
        out.raw(b",\"snapshot\":")?;
        snapshot::snapshot(m, state.seq, detail, out)?;
        out.raw(b"}")
    })
}
