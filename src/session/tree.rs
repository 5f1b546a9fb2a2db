//! The tree index: pi's `byId` map, resolved labels, the leaf, parent walks and `getTree`.
//!
//! pi keeps entries in file order and indexes them in a `Map` by id (a duplicate id replaces the value but keeps
//! the first insertion's position), resolves labels globally in file order, and takes the last line's id as the
//! leaf. Walks follow `parentId` through the map until a falsy or unknown parent. pi loops forever on a parent
//! cycle; our walks stop where an entry repeats. Everything else, including the order of `getChildren` (map
//! order) and of `getTree` children (V8's sort by timestamp), is pi's.

use std::collections::HashSet;
use std::hash::BuildHasher;

use indexmap::IndexMap;

/// The maps of ids: foldhash, randomly seeded per process, where the standard SipHash was a third of a kept open's
/// time (ids come from files anyone may write, so the seed stays random: a crafted file cannot choose collisions).
type IdMap<K, V> = IndexMap<K, V, foldhash::fast::RandomState>;

use super::entry::{Detail, LabelDetail, Record};
use super::js::sort::sort_like_v8;
use super::json::Json;
use super::key::Key;
use super::store::{Warning, WarningKind};

/// A resolved label: its value and the timestamp of the label entry that set it.
#[derive(Clone, Debug)]
pub struct ResolvedLabel {
    /// The label (any truthy JSON value; a string in files pi wrote).
    pub label: Json,
    /// The setting entry's `timestamp` value (None when that entry had none).
    pub timestamp: Option<Json>,
}

/// pi's in-memory index over the records of one session.
///
/// pi's `byId` is held as `latest` (for each distinct id, in the order it was first indexed, the record it maps
/// to now: a later duplicate takes its place, as `Map.set` keeps a key's position) and `slots` (positions in
/// `latest`, found by the hash of their record's id and compared through the records). The ids stay the records'
/// own: an index of copied ids cost a fifth of a kept open (each id cloned, a 48-byte bucket per entry). So every
/// lookup takes the records the index was built over.
#[derive(Clone, Debug, Default)]
pub struct TreeIndex {
    latest: Vec<usize>,
    slots: hashbrown::HashTable<usize>,
    hasher: foldhash::fast::RandomState,
    labels: IdMap<Key, ResolvedLabel>,
    /// The leaf id; [`Key::Null`] when there is no leaf (empty session, or after `resetLeaf`).
    pub leaf: Key,
    /// Whether an id was indexed twice: only then does [`TreeIndex::diagnose`] look for the first of each.
    has_duplicates: bool,
}

/// One node of [`TreeIndex::tree`]: a record index and its children, in pi's order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeNode {
    /// Index into the records.
    pub record: usize,
    /// Child node indices into [`Tree::nodes`].
    pub children: Vec<usize>,
}

/// pi's `getTree()` result as an arena: roots in file order; a node may be reachable twice when ids repeat,
/// exactly as pi's shared node objects are.
#[derive(Clone, Debug, Default)]
pub struct Tree {
    /// Every node.
    pub nodes: Vec<TreeNode>,
    /// Root node indices.
    pub roots: Vec<usize>,
    /// Child links dropped because they closed a cycle (pi 1.6.0 never returns from `getTree` on such files).
    pub cycles_broken: usize,
}

impl TreeIndex {
    /// pi's `_buildIndex` over `records` (headers are skipped).
    pub fn build(records: &[Record]) -> TreeIndex {
        Self::build_seeing(records, |_, _| {})
    }

    /// [`TreeIndex::build`], calling `indexed` with the index so far after each entry `i` is indexed.
    fn build_seeing(records: &[Record], mut indexed: impl FnMut(&TreeIndex, usize)) -> TreeIndex {
        let mut index = TreeIndex::default();
        // One allocation of the right size, not a rehash of every id at each doubling.
        index.latest.reserve(records.len());
        index.slots.reserve(records.len(), |_| unreachable!("empty"));
        let mut last = None;
        for (i, r) in records.iter().enumerate() {
            if !r.is_header() {
                index.insert(records, i);
                index.apply_label(r);
                last = Some(r);
                indexed(&index, i);
            }
        }
        // The leaf is the last entry's id: set once, not cloned for every entry on the way.
        if let Some(r) = last {
            index.leaf = r.id.clone();
        }
        index
    }

    /// [`TreeIndex::build`] and [`TreeIndex::diagnose`] in one pass where no id repeats and every parent comes
    /// before its child (every file pi writes): a parent is the line before or found among the ids indexed so
    /// far, and those not found are looked up once more at the end. A repeated id or a parent after its child
    /// (a cycle may close through it) is diagnosed by [`TreeIndex::diagnose`] instead. Diagnosing apart was a
    /// second pass over every record and a list of every record's parent, after the whole file was read.
    pub fn build_diagnosed(records: &[Record]) -> (TreeIndex, Vec<Warning>) {
        // Self-parents and parents not (yet) indexed, in record order.
        let mut flagged = Vec::new();
        let index = Self::build_seeing(records, |index, i| {
            let r = &records[i];
            if !r.is_object || !r.parent.truthy() {
                return;
            }
            if r.parent == r.id {
                flagged.push((i, WarningKind::SelfParent));
            } else if !parent_is_line_before(records, i) && index.get(records, &r.parent).is_none() {
                flagged.push((i, WarningKind::MissingParent));
            }
        });
        let later_parent = || {
            flagged
                .iter()
                .any(|&(i, kind)| kind == WarningKind::MissingParent && index.contains(records, &records[i].parent))
        };
        if index.has_duplicates || later_parent() {
            let warnings = index.diagnose(records);
            return (index, warnings);
        }
        let warnings = flagged
            .into_iter()
            .map(|(i, kind)| {
                let r = &records[i];
                Warning {
                    line: r.line,
                    kind,
                    message: if kind == WarningKind::SelfParent {
                        SELF_PARENT.to_owned()
                    } else {
                        missing_parent(&r.parent)
                    },
                }
            })
            .collect();
        (index, warnings)
    }

    fn insert(&mut self, records: &[Record], i: usize) {
        let id = &records[i].id;
        let (hasher, latest) = (&self.hasher, &mut self.latest);
        // One probe whether the id is new or not.
        let entry = self.slots.entry(
            hasher.hash_one(id),
            |&slot| records[latest[slot]].id == *id,
            |&slot| hasher.hash_one(&records[latest[slot]].id),
        );
        match entry {
            hashbrown::hash_table::Entry::Occupied(found) => {
                latest[*found.get()] = i;
                self.has_duplicates = true;
            }
            hashbrown::hash_table::Entry::Vacant(place) => {
                place.insert(latest.len());
                latest.push(i);
            }
        }
    }

    /// Indexes record `i` of `records` and makes it the leaf (pi's `byId.set`, `leafId = id`). Labels are applied
    /// separately ([`TreeIndex::apply_label`]) because an append applies them only once its write succeeded.
    pub fn add(&mut self, records: &[Record], i: usize) {
        self.insert(records, i);
        self.leaf = records[i].id.clone();
    }

    /// Applies a label record to the resolved labels (a truthy label sets, anything else clears).
    pub fn apply_label(&mut self, r: &Record) {
        if let Detail::Label(label_detail) = &r.detail {
            let LabelDetail { target, label, timestamp } = &**label_detail;
            match label {
                Some(l) if l.truthy() => {
                    let resolved = ResolvedLabel { label: l.clone(), timestamp: timestamp.clone() };
                    // Map.set keeps an existing key's position.
                    self.labels.insert(target.clone(), resolved);
                }
                _ => {
                    // Map.delete: a later set of the same target goes to the end.
                    self.labels.shift_remove(target);
                }
            }
        }
    }

    /// Undoes [`TreeIndex::add`] of the newest record, record `i` with `id`, after a failed write (pi's rollback:
    /// delete the id, restore the leaf); the record itself may already be gone from the records. Label state is
    /// only changed by callers after a successful write.
    pub fn remove_newest(&mut self, i: usize, id: &Key, previous_leaf: Key) {
        let latest = &self.latest;
        if let Ok(found) = self.slots.find_entry(self.hasher.hash_one(id), |&slot| latest[slot] == i) {
            let (slot, _) = found.remove();
            self.latest.remove(slot);
            // Positions after it move down one (only when a rollback is not of the newest id: rare).
            if slot < self.latest.len() {
                self.slots.iter_mut().filter(|s| **s > slot).for_each(|s| *s -= 1);
            }
        }
        self.leaf = previous_leaf;
    }

    /// The record `id` maps to in `records` (the last duplicate).
    pub fn get(&self, records: &[Record], id: &Key) -> Option<usize> {
        let hash = self.hasher.hash_one(id);
        self.slots.find(hash, |&slot| records[self.latest[slot]].id == *id).map(|&slot| self.latest[slot])
    }

    /// True when `id` is a key of the map.
    pub fn contains(&self, records: &[Record], id: &Key) -> bool {
        self.get(records, id).is_some()
    }

    /// `getEntryCount()`: distinct ids.
    pub fn len(&self) -> usize {
        self.latest.len()
    }

    /// True when no entry is indexed.
    pub fn is_empty(&self) -> bool {
        self.latest.is_empty()
    }

    /// True when a string id is taken (for new-id collision checks).
    pub fn has_str(&self, records: &[Record], id: &str) -> bool {
        self.contains(records, &Key::str(id))
    }

    /// The resolved label of `id`.
    pub fn label(&self, id: &Key) -> Option<&ResolvedLabel> {
        self.labels.get(id)
    }

    /// Resolved labels in map order (the order targets were labelled, a clear and re-set moving to the end).
    pub fn labels(&self) -> impl Iterator<Item = (&Key, &ResolvedLabel)> {
        self.labels.iter()
    }

    /// Record indices in map order (`byId.values()`).
    pub fn values(&self) -> impl Iterator<Item = usize> + '_ {
        self.latest.iter().copied()
    }

    /// Follows parent links from `start` to a root and returns the path root first. Stops where an entry would
    /// repeat (pi 1.6.0 loops forever there).
    pub fn walk_from(&self, records: &[Record], start: usize) -> Vec<usize> {
        let mut path = vec![start];
        let mut seen: HashSet<usize> = HashSet::from([start]);
        let mut current = start;
        loop {
            let parent = &records[current].parent;
            if !parent.truthy() {
                break;
            }
            match self.get(records, parent) {
                Some(p) if seen.insert(p) => {
                    path.push(p);
                    current = p;
                }
                _ => break,
            }
        }
        path.reverse();
        path
    }

    /// `getBranch(fromId?)`: the path from the root to `from` (default: the leaf); empty for an unknown or
    /// falsy start.
    pub fn branch(&self, records: &[Record], from: Option<&Key>) -> Vec<usize> {
        // `fromId ?? this.leafId`: null and undefined both fall back to the leaf.
        let start = from.filter(|k| !k.is_nullish()).unwrap_or(&self.leaf);
        if !start.truthy() {
            return Vec::new();
        }
        match self.get(records, start) {
            Some(i) => self.walk_from(records, i),
            None => Vec::new(),
        }
    }

    /// The path context building uses (`buildSessionPath`): empty when the leaf is null; the leaf's path when the
    /// leaf is a known truthy id; otherwise the last entry's path.
    pub fn context_path(&self, records: &[Record]) -> Vec<usize> {
        if self.leaf == Key::Null {
            return Vec::new();
        }
        let start = if self.leaf.truthy() { self.get(records, &self.leaf) } else { None };
        let start = start.or_else(|| records.iter().rposition(|r| !r.is_header()));
        match start {
            Some(i) => self.walk_from(records, i),
            None => Vec::new(),
        }
    }

    /// `getChildren(parentId)`: entries in map order whose `parentId` is `parent`.
    pub fn children(&self, records: &[Record], parent: &Key) -> Vec<usize> {
        self.values().filter(|&i| records[i].parent == *parent).collect()
    }

    /// `getTree()`.
    pub fn tree(&self, records: &[Record]) -> Tree {
        let entries: Vec<usize> = (0..records.len()).filter(|&i| !records[i].is_header()).collect();
        // One node per entry; the map from id to node keeps the last duplicate's node.
        let mut tree = Tree::default();
        let mut node_of: IdMap<&Key, usize> = IdMap::default();
        for &i in &entries {
            tree.nodes.push(TreeNode { record: i, children: Vec::new() });
            node_of.insert(&records[i].id, tree.nodes.len() - 1);
        }
        for &i in &entries {
            let r = &records[i];
            let node = node_of[&r.id];
            if r.parent == Key::Null || r.parent == r.id {
                tree.roots.push(node);
            } else {
                match node_of.get(&r.parent) {
                    Some(&p) => tree.nodes[p].children.push(node),
                    None => tree.roots.push(node),
                }
            }
        }
        break_cycles(&mut tree);
        // Sort every reachable node's children by timestamp, in pi's order of visits (a stack), since V8's sort
        // with NaN timestamps depends on the order it is applied in.
        let mut stack: Vec<usize> = tree.roots.clone();
        while let Some(n) = stack.pop() {
            let mut children = std::mem::take(&mut tree.nodes[n].children);
            sort_like_v8(&mut children, |&a, &b| {
                records[tree.nodes[a].record].time_ms - records[tree.nodes[b].record].time_ms
            });
            stack.extend_from_slice(&children);
            tree.nodes[n].children = children;
        }
        tree
    }

    /// Each record's parent, looked up once (None: a header, no parent, itself, or missing). Most entries hang
    /// under the line before them (a conversation goes on from its leaf); while no id repeats, that line is the
    /// only one with the id, so with `previous_first` it is taken as the parent without a lookup.
    fn parents(&self, records: &[Record], previous_first: bool) -> Vec<Option<usize>> {
        let previous_first = previous_first && !self.has_duplicates;
        records
            .iter()
            .enumerate()
            .map(|(i, r)| {
                if r.is_header() || !r.parent.truthy() || r.parent == r.id {
                    return None;
                }
                if previous_first && parent_is_line_before(records, i) {
                    Some(i - 1)
                } else {
                    self.get(records, &r.parent)
                }
            })
            .collect()
    }

    /// Tree problems a reader should know about: duplicate ids, missing parents, self-parents and cycles.
    pub fn diagnose(&self, records: &[Record]) -> Vec<Warning> {
        let mut out = Vec::new();
        let mut first_line: IdMap<&Key, u32> = IdMap::default();
        for r in records.iter().filter(|r| self.has_duplicates && !r.is_header() && r.is_object) {
            if let Some(&line) = first_line.get(&r.id) {
                out.push(Warning {
                    line: r.line,
                    kind: WarningKind::DuplicateId,
                    message: format!("id {} was already used on line {line}; this later entry wins", r.id.display()),
                });
            } else {
                first_line.insert(&r.id, r.line);
            }
        }
        let parent_of = self.parents(records, true);
        for (r, parent) in records.iter().zip(&parent_of).filter(|(r, _)| !r.is_header() && r.is_object) {
            if r.parent == r.id && r.parent.truthy() {
                out.push(Warning { line: r.line, kind: WarningKind::SelfParent, message: SELF_PARENT.to_owned() });
            } else if r.parent.truthy() && parent.is_none() {
                out.push(Warning {
                    line: r.line,
                    kind: WarningKind::MissingParent,
                    message: missing_parent(&r.parent),
                });
            }
        }
        // A chain of parents can loop back only through a parent later in the file than its child: when every
        // parent comes before its child (every file pi writes), there is no cycle to look for.
        if parent_of.iter().enumerate().all(|(i, parent)| parent.is_none_or(|p| p < i)) {
            return out;
        }
        // Cycles through two or more entries: colour the parent graph in one linear pass.
        let mut state = vec![0u8; records.len()];
        let mut walk = Vec::new();
        for start in self.values() {
            let mut current = start;
            while state[current] == 0 {
                state[current] = 1;
                walk.push(current);
                match parent_of[current] {
                    Some(p) if state[p] == 1 => {
                        out.push(Warning {
                            line: records[current].line,
                            kind: WarningKind::ParentCycle,
                            message: "the chain of parents loops back through this entry; walks stop where it repeats"
                                .to_owned(),
                        });
                        break;
                    }
                    Some(p) => current = p,
                    None => break,
                }
            }
            for i in walk.drain(..) {
                state[i] = 2;
            }
        }
        out
    }
}

/// Whether record `i`'s parent id is the id of the entry on the line before it (a header is no entry).
fn parent_is_line_before(records: &[Record], i: usize) -> bool {
    i > 0 && !records[i - 1].is_header() && records[i - 1].id == records[i].parent
}

/// The warning on an entry that is its own parent.
const SELF_PARENT: &str = "entry is its own parent; it is shown as a root";

/// The warning on an entry whose parent is no entry's id.
fn missing_parent(parent: &Key) -> String {
    format!("parent {} does not exist; the entry is shown as a root", parent.display())
}

/// Drops child links that would make a node its own ancestor, so that walking the tree terminates. Trees built
/// from well-formed files have none; pi hangs on files that do.
fn break_cycles(tree: &mut Tree) {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Active,
        Done,
    }
    let mut mark = vec![Mark::New; tree.nodes.len()];
    for root in tree.roots.clone() {
        if mark[root] != Mark::New {
            continue;
        }
        // Iterative DFS with an explicit (node, next child) stack.
        let mut stack = vec![(root, 0usize)];
        mark[root] = Mark::Active;
        while let Some(&mut (n, ref mut next)) = stack.last_mut() {
            if *next < tree.nodes[n].children.len() {
                let c = tree.nodes[n].children[*next];
                if mark[c] == Mark::Active {
                    tree.nodes[n].children.remove(*next);
                    tree.cycles_broken += 1;
                    continue;
                }
                *next += 1;
                if mark[c] == Mark::New {
                    mark[c] = Mark::Active;
                    stack.push((c, 0));
                }
            } else {
                mark[n] = Mark::Done;
                stack.pop();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::entry::Body;
    use crate::session::line::{parse_line, LineOutcome};

    /// Files of a few records with ids from a small alphabet, so repeated ids, missing parents, self-parents,
    /// cycles, headers in the middle and entries without ids all come up; half of them with unique ids, mostly
    /// under the entry before, as pi writes them. A fixed generator, so a failure repeats.
    fn odd_files() -> Vec<Vec<Record>> {
        let mut next = crate::session::draws_below(0x9e37_79b9_u32);
        let ids = ["a", "b", "c", "d", "e", "f"];
        (0..400)
            .map(|file| {
                let len = 1 + next(10) as usize;
                (0..len)
                    .map(|i| {
                        let line = match next(10) {
                            0 => r#"{"type":"session","version":3,"id":"h"}"#.to_owned(),
                            1 => r#"{"type":"custom"}"#.to_owned(),
                            _ => {
                                let id = if file % 2 == 0 { format!("n{i}") } else { ids[next(6) as usize].to_owned() };
                                let parent = match next(6) {
                                    0 => "null".to_owned(),
                                    4 => r#""h""#.to_owned(),
                                    1 => format!(r#""{}""#, ids[next(6) as usize]),
                                    5 if file % 2 == 0 => format!(r#""n{}""#, next(len as u32)),
                                    _ if file % 2 == 0 => format!(r#""n{}""#, i.saturating_sub(1)),
                                    _ => format!(r#""{}""#, ids[next(6) as usize]),
                                };
                                format!(r#"{{"type":"custom","id":"{id}","parentId":{parent}}}"#)
                            }
                        };
                        match parse_line(line.as_bytes(), i as u32 + 1, Body::memory(line.clone().into_bytes())) {
                            LineOutcome::Record(r) => r,
                            other => panic!("{line}: {other:?}"),
                        }
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn taking_the_line_before_as_the_parent_gives_what_looking_every_parent_up_gives() {
        for (file, records) in odd_files().iter().enumerate() {
            let index = TreeIndex::build(records);
            assert_eq!(index.parents(records, true), index.parents(records, false), "file {file}");
        }
    }

    #[test]
    fn building_and_diagnosing_in_one_pass_gives_what_building_then_diagnosing_gives() {
        let mut kinds = HashSet::new();
        for (file, records) in odd_files().iter().enumerate() {
            let built = TreeIndex::build(records);
            let (index, warnings) = TreeIndex::build_diagnosed(records);
            assert_eq!(format!("{warnings:?}"), format!("{:?}", built.diagnose(records)), "file {file}");
            assert_eq!(
                format!("{:?}", (&index.latest, &index.labels, &index.leaf, index.has_duplicates)),
                format!("{:?}", (&built.latest, &built.labels, &built.leaf, built.has_duplicates)),
                "file {file}"
            );
            kinds.extend(warnings.iter().map(|w| format!("{:?}", w.kind)));
        }
        // Every kind the one pass finds itself, and those it leaves to the diagnosis, came up.
        for kind in ["SelfParent", "MissingParent", "DuplicateId", "ParentCycle"] {
            assert!(kinds.contains(kind), "no {kind} among {kinds:?}");
        }
    }

    /// A record of an entry with `id` (and no parent), parsed as a file line is.
    fn entry(id: &str, line: u32) -> Record {
        let text = format!(r#"{{"type":"custom","id":"{id}","parentId":null}}"#);
        match parse_line(text.as_bytes(), line, Body::memory(text.clone().into_bytes())) {
            LineOutcome::Record(r) => r,
            other => panic!("{text}: {other:?}"),
        }
    }

    /// What the index must agree with: a JavaScript `Map` from id to record, as an insertion-ordered map.
    fn map_model(records: &[Record]) -> IndexMap<Key, usize> {
        let mut model = IndexMap::new();
        for (i, r) in records.iter().enumerate() {
            model.insert(r.id.clone(), i);
        }
        model
    }

    fn assert_agrees(index: &TreeIndex, records: &[Record], model: &IndexMap<Key, usize>, what: &str) {
        assert_eq!(index.values().collect::<Vec<_>>(), model.values().copied().collect::<Vec<_>>(), "{what}");
        assert_eq!(index.len(), model.len(), "{what}");
        for id in ["a", "b", "c", "d", "e", "f", "g", "h", "absent"] {
            let key = Key::str(id);
            assert_eq!(index.get(records, &key), model.get(&key).copied(), "{what}: {id}");
        }
    }

    #[test]
    fn the_index_answers_as_a_map_through_duplicates_appends_and_rollbacks() {
        let mut next = crate::session::draws_below(0x2545_f491_u32);
        let ids = ["a", "b", "c", "d", "e", "f", "g", "h"];
        for file in 0..300 {
            let len = next(12) as usize;
            let mut records: Vec<Record> = (0..len).map(|i| entry(ids[next(8) as usize], i as u32 + 1)).collect();
            let mut index = TreeIndex::build(&records);
            assert_agrees(&index, &records, &map_model(&records), &format!("file {file} built"));
            // Appends staged one by one, then rolled back newest first, as after a failed write.
            let staged = 1 + next(4) as usize;
            for _ in 0..staged {
                records.push(entry(ids[next(8) as usize], records.len() as u32 + 1));
                index.add(&records, records.len() - 1);
            }
            let mut model = map_model(&records);
            assert_agrees(&index, &records, &model, &format!("file {file} appended"));
            // pi's rollback deletes each id (`byId.delete`): an earlier entry with it is then not found either.
            for i in (len..records.len()).rev() {
                let id = records[i].id.clone();
                index.remove_newest(i, &id, Key::Null);
                model.shift_remove(&id);
            }
            records.truncate(len);
            assert_agrees(&index, &records, &model, &format!("file {file} rolled back"));
        }
    }
}
