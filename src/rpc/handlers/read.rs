//! pi's reads of one session. Results that can be large (entries, trees, contexts) are rendered by the engine
//! straight into the answer ([`Reply::rendered`](crate::rpc::reply::Reply::rendered)), which streams them from
//! the file when they are; small ones are values.

use jsonrpsee::types::ErrorObjectOwned;

use super::{any, key, key_json, lazy, rendered, snapshot, ReadCx, Res};
use crate::rpc::error::{from_session, invalid_params};
use crate::rpc::proto::*;
use crate::rpc::reply::Out;
use crate::session::json::Json;
use crate::session::render::{self, JsonOut};
use crate::session::SessionManager;

/// One record (entry or header) as stored.
pub fn entry_json(m: &SessionManager, i: usize) -> Result<EntryJson, ErrorObjectOwned> {
    rendered(|o| render::record(m, i, o)).map(EntryJson)
}

/// Records as stored, in the order given.
pub fn entries_json(m: &SessionManager, list: &[usize]) -> Result<Vec<EntryJson>, ErrorObjectOwned> {
    list.iter().map(|&i| entry_json(m, i)).collect()
}

/// Entries straight into the answer.
fn entries<T>(cx: &ReadCx<'_>, list: &[usize]) -> Res<T> {
    let m = cx.m;
    cx.reply.rendered(true, &|o| render::records(m, list, o))
}

/// `session/getLeafId`.
pub fn get_leaf_id(_p: HandleParams, cx: &ReadCx<'_>) -> Res<Option<AnyJson>> {
    Ok(Out::Value(key_json(cx.m.leaf_id())))
}

/// `session/getLeafEntry`.
pub fn get_leaf_entry(_p: HandleParams, cx: &ReadCx<'_>) -> Res<Option<EntryJson>> {
    cx.m.leaf_entry().map(|i| entry_json(cx.m, i)).transpose().map(Out::Value)
}

/// `session/getEntry`.
pub fn get_entry(p: EntryIdParams, cx: &ReadCx<'_>) -> Res<Option<EntryJson>> {
    cx.m.entry(&key(&p.id)).map(|i| entry_json(cx.m, i)).transpose().map(Out::Value)
}

/// `session/getChildren`.
pub fn get_children(p: ChildrenParams, cx: &ReadCx<'_>) -> Res<Vec<EntryJson>> {
    entries(cx, &cx.m.children(&key(&p.parent_id)))
}

/// `session/getLabel`.
pub fn get_label(p: EntryIdParams, cx: &ReadCx<'_>) -> Res<Option<AnyJson>> {
    Ok(Out::Value(cx.m.label(&key(&p.id)).map(any)))
}

/// `session/getBranch`.
pub fn get_branch(p: BranchPathParams, cx: &ReadCx<'_>) -> Res<Vec<EntryJson>> {
    let from = p.from_id.as_deref().map(key);
    entries(cx, &cx.m.branch_path(from.as_ref()))
}

/// `session/getHeader`.
pub fn get_header(_p: HandleParams, cx: &ReadCx<'_>) -> Res<Option<HeaderJson>> {
    let m = cx.m;
    m.header().map(|h| rendered(|o| render::record(m, h, o)).map(HeaderJson)).transpose().map(Out::Value)
}

/// `session/getEntryCount`.
pub fn get_entry_count(_p: HandleParams, cx: &ReadCx<'_>) -> Res<usize> {
    Ok(Out::Value(cx.m.entry_count()))
}

/// `session/getEntries`: a page in file order, or the entries with the ids asked for (`null` for unknown ids).
pub fn get_entries(p: EntriesParams, cx: &ReadCx<'_>) -> Res<Vec<Option<EntryAtDetailJson>>> {
    let detail = match p.detail.unwrap_or(Detail::Full) {
        Detail::None => return Err(invalid_params("detail", "getEntries gives entries full or skeleton")),
        Detail::Skeleton if p.lazy_over.is_some() => {
            return Err(invalid_params("lazyOver", "lazyOver leaves strings out of full entries, not skeletons"))
        }
        d => d,
    };
    let m = cx.m;
    if let Some(ids) = &p.ids {
        if p.offset.is_some() || p.limit.is_some() {
            return Err(invalid_params("ids", "give ids, or offset and limit, not both"));
        }
        if p.lazy_over.is_some() {
            return Err(invalid_params("lazyOver", "lazyOver pages entries with offset and limit, not by ids"));
        }
        let found: Vec<Option<usize>> = ids.iter().map(|id| m.entry(&key(id))).collect();
        return cx.reply.rendered(detail.copies_file_bytes(), &|out| {
            out.raw(b"[")?;
            for (n, i) in found.iter().enumerate() {
                if n > 0 {
                    out.raw(b",")?;
                }
                match *i {
                    Some(i) => snapshot::entry(m, i, detail, out)?,
                    None => out.raw(b"null")?,
                }
            }
            out.raw(b"]")
        });
    }
    let all = m.entries();
    let page = &all[page_range(p.offset, p.limit, all.len())];
    if let Some(over) = p.lazy_over {
        return cx.reply.rendered(true, &|out| lazy::entries(m, page, over, out));
    }
    cx.reply.rendered(detail.copies_file_bytes(), &|out| snapshot::entries(m, page, detail, out))
}

/// The positions `offset`/`limit` select among `len`.
fn page_range(offset: Option<usize>, limit: Option<usize>, len: usize) -> std::ops::Range<usize> {
    let start = offset.unwrap_or(0).min(len);
    let end = limit.map_or(len, |l| start.saturating_add(l).min(len));
    start..end
}

/// `session/getTree`.
pub fn get_tree(_p: HandleParams, cx: &ReadCx<'_>) -> Res<TreeJson> {
    let m = cx.m;
    let tree = m.tree();
    cx.reply.rendered(true, &|o| render::tree(m, &tree, o))
}

/// `session/getTreeFlat`: nodes with their entries full (default), skeleton, or none (their ids only), paged.
pub fn get_tree_flat(p: TreeFlatParams, cx: &ReadCx<'_>) -> Res<FlatTreeJson> {
    let m = cx.m;
    let tree = m.tree();
    let positions = page_range(p.offset, p.limit, tree.nodes.len());
    let detail = p.detail.unwrap_or(Detail::Full);
    let entry = |i: usize, out: &mut JsonOut<'_>| snapshot::entry(m, i, detail, out);
    let entry: Option<render::EntryWriter<'_>> = if detail == Detail::None { None } else { Some(&entry) };
    cx.reply.rendered(true, &|o| render::tree_flat_with(m, &tree, positions.clone(), entry, o))
}

/// `session/getSessionName`.
pub fn get_session_name(_p: HandleParams, cx: &ReadCx<'_>) -> Res<Option<AnyJson>> {
    Ok(Out::Value(cx.m.session_name().map_err(from_session)?.map(|n| any(&Json::String(n)))))
}

/// `session/getWarnings`.
pub fn get_warnings(_p: HandleParams, cx: &ReadCx<'_>) -> Res<Vec<WarningJson>> {
    let warnings = cx.m.warnings().iter();
    Ok(Out::Value(
        warnings
            .map(|w| WarningJson { line: w.line, kind: w.kind.as_str().to_owned(), message: w.message.clone() })
            .collect(),
    ))
}

/// `session/buildContextEntries`.
pub fn build_context_entries(_p: HandleParams, cx: &ReadCx<'_>) -> Res<Vec<EntryJson>> {
    entries(cx, &cx.m.build_context_entries().map_err(from_session)?)
}

/// `session/buildSessionProjection`.
pub fn build_session_projection(_p: HandleParams, cx: &ReadCx<'_>) -> Res<ProjectionJson> {
    let m = cx.m;
    let projection = m.build_session_projection().map_err(from_session)?;
    cx.reply.rendered(true, &|o| render::projection(m, &projection, o))
}

/// `session/buildSessionContext`.
pub fn build_session_context(_p: HandleParams, cx: &ReadCx<'_>) -> Res<ContextJson> {
    let m = cx.m;
    let projection = m.build_session_projection().map_err(from_session)?;
    cx.reply.rendered(true, &|o| render::context(m, &projection, o))
}
