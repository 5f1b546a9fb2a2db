//! Tokens and cost, summed as pi 1.6.0 sums them — the one place `stats`, `usage` and the web view count
//! usage, so the three never disagree with each other or with pi.
//!
//! pi's `getSessionStats` (the `/session` command) and the footer go over every entry of `getEntries()`:
//! `usage` entries, assistant messages' `usage`, tool results' `usage` when present, and compactions' and branch
//! summaries' `usage` when present; the cost is `usage.cost.total`, and the token total is
//! `input + output + cacheRead + cacheWrite` (not the provider's `totalTokens`). Its cost breakdown
//! (`getUsageCostBreakdown`) groups by `provider/(responseModel ?? model)`, and everything that names no model
//! (tool results, summaries) under `Tools/summaries`.

use std::collections::BTreeMap;

use crate::session::context::Bodies;
use crate::session::entry::{EntryType, Record, Role};
use crate::session::identity::{now_ns, FileStamp};
use crate::session::js::convert::to_js_string;
use crate::session::js::date::to_iso_string;
use crate::session::json::{Json, Object};
use crate::session::SessionManager;

use super::index::CatalogIndex;

/// pi's group for usage that names no model (tool results, compactions, branch summaries).
pub const UNATTRIBUTED: &str = "Tools/summaries";

/// Token counts and cost, summed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Usage {
    /// How many usage objects were added.
    pub responses: u64,
    /// Input tokens.
    pub input: f64,
    /// Output tokens.
    pub output: f64,
    /// Tokens read from the cache.
    pub cache_read: f64,
    /// Tokens written to the cache.
    pub cache_write: f64,
    /// Cost in US dollars (`usage.cost.total`).
    pub cost: f64,
}

impl Usage {
    /// Adds one pi `Usage` object. A field that is not a finite number counts as 0 (pi would turn the whole sum
    /// into `NaN`, or a string; one broken entry should not hide every other's tokens).
    pub fn add(&mut self, usage: &Json) {
        let n = |v: Option<&Json>| match v {
            Some(Json::Number(literal)) => crate::session::json::value::number_value(literal),
            _ => 0.0,
        };
        let n = |v: Option<&Json>| Some(n(v)).filter(|x| x.is_finite()).unwrap_or(0.0);
        self.responses += 1;
        self.input += n(usage.get("input"));
        self.output += n(usage.get("output"));
        self.cache_read += n(usage.get("cacheRead"));
        self.cache_write += n(usage.get("cacheWrite"));
        self.cost += n(usage.get("cost").and_then(|c| c.get("total")));
    }

    /// Adds another sum.
    pub fn merge(&mut self, other: &Usage) {
        self.responses += other.responses;
        self.input += other.input;
        self.output += other.output;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
        self.cost += other.cost;
    }

    /// pi's token total: `input + output + cacheRead + cacheWrite`.
    pub fn total_tokens(&self) -> f64 {
        self.input + self.output + self.cache_read + self.cache_write
    }

    /// `{responses, input, output, cacheRead, cacheWrite, totalTokens, cost}`, the cost as summed.
    pub fn to_json(&self) -> Object {
        let mut o = Object::new();
        o.insert("responses", Json::number(self.responses as f64));
        o.insert("input", Json::number(self.input));
        o.insert("output", Json::number(self.output));
        o.insert("cacheRead", Json::number(self.cache_read));
        o.insert("cacheWrite", Json::number(self.cache_write));
        o.insert("totalTokens", Json::number(self.total_tokens()));
        o.insert("cost", Json::number(self.cost));
        o
    }
}

/// Usage by pi's breakdown key (`provider/model`, or [`UNATTRIBUTED`]).
pub type UsageByModel = BTreeMap<String, Usage>;

/// Whether an entry of this shape may carry usage pi counts (so only those bodies are read).
pub fn may_carry_usage(r: &Record) -> bool {
    (r.kind == EntryType::Message && matches!(r.role, Role::Assistant | Role::ToolResult))
        || matches!(r.kind, EntryType::Usage | EntryType::Compaction | EntryType::BranchSummary)
}

/// The usage `entry` (a session entry as stored) carries, with pi's breakdown key, if pi counts it.
pub fn entry_usage(entry: &Json) -> Option<(String, &Json)> {
    // `${value}` in JavaScript: a missing member reads "undefined".
    let s = |v: Option<&Json>| v.map_or_else(|| "undefined".to_owned(), |v| to_js_string(v).to_string_lossy());
    let kind = entry.get("type").and_then(Json::as_js_str)?.to_string_lossy();
    let (key, usage) = match EntryType::from_name(kind.as_bytes()) {
        EntryType::Message => {
            let msg = entry.get("message")?;
            match msg.get("role").and_then(Json::as_js_str)?.to_string_lossy().as_str() {
                "assistant" => {
                    let model = msg.get("responseModel").filter(|m| !matches!(m, Json::Null)).or(msg.get("model"));
                    (format!("{}/{}", s(msg.get("provider")), s(model)), msg.get("usage"))
                }
                "toolResult" => (UNATTRIBUTED.to_owned(), msg.get("usage")),
                _ => return None,
            }
        }
        EntryType::Usage => (format!("{}/{}", s(entry.get("provider")), s(entry.get("model"))), entry.get("usage")),
        EntryType::Compaction | EntryType::BranchSummary => (UNATTRIBUTED.to_owned(), entry.get("usage")),
        // What pi's getSessionStats does not count, named so an entry type pi adds is a decision here.
        EntryType::Session
        | EntryType::ThinkingLevelChange
        | EntryType::ModelChange
        | EntryType::Custom
        | EntryType::CustomMessage
        | EntryType::ContextEdit
        | EntryType::Label
        | EntryType::SessionInfo
        | EntryType::Other => return None,
    };
    usage.filter(|u| matches!(u, Json::Object(_))).map(|u| (key, u))
}

/// Adds the usage `entry` carries, if any, to `by_model`.
pub fn add_entry_usage(entry: &Json, by_model: &mut UsageByModel) {
    if let Some((key, usage)) = entry_usage(entry) {
        by_model.entry(key).or_default().add(usage);
    }
}

/// One counted usage object of a session, in file order.
#[derive(Clone, Debug, PartialEq)]
pub struct Counted {
    /// The entry's `timestamp`, in ms (NaN when it is not a date).
    pub time_ms: f64,
    /// pi's breakdown key.
    pub key: String,
    /// The usage object's numbers (adding it is adding the object: `0 + x` is `x`).
    pub usage: Usage,
}

/// What one session contributes to an overview.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SessionUsage {
    /// The session's cwd.
    pub cwd: String,
    /// Every usage object pi counts, in file order.
    pub counted: Vec<Counted>,
}

/// The usage objects of `m`'s entries pi counts, in file order; reads only bodies that may carry usage.
pub fn session_usage(m: &SessionManager) -> crate::session::Result<SessionUsage> {
    let bodies = m.bodies_in_order();
    let mut counted = Vec::new();
    for i in m.entries() {
        let r = &m.records()[i];
        if !may_carry_usage(r) {
            continue;
        }
        let entry = bodies.json(i)?;
        if let Some((key, json)) = entry_usage(&entry) {
            let mut usage = Usage::default();
            usage.add(json);
            counted.push(Counted { time_ms: r.time_ms, key, usage });
        }
    }
    Ok(SessionUsage { cwd: m.cwd().to_owned(), counted })
}

impl SessionUsage {
    /// The memo's bytes: the cwd, then per usage object its time, key and five numbers (little-endian; strings
    /// length-prefixed). Hand-written: a flat record list the memo alone reads, not worth a format crate.
    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(16 + self.counted.len() * 64);
        let text = |b: &mut Vec<u8>, t: &str| {
            b.extend_from_slice(&(t.len() as u32).to_le_bytes());
            b.extend_from_slice(t.as_bytes());
        };
        text(&mut b, &self.cwd);
        for c in &self.counted {
            b.extend_from_slice(&c.time_ms.to_le_bytes());
            text(&mut b, &c.key);
            let u = &c.usage;
            for v in [u.input, u.output, u.cache_read, u.cache_write, u.cost] {
                b.extend_from_slice(&v.to_le_bytes());
            }
        }
        b
    }

    /// Reads [`SessionUsage::encode`]'s bytes; None when they are not such bytes.
    fn decode(mut b: &[u8]) -> Option<SessionUsage> {
        fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
            let (head, rest) = (b.get(..n)?, b.get(n..)?);
            *b = rest;
            Some(head)
        }
        let f64_of = |b: &mut &[u8]| Some(f64::from_le_bytes(take(b, 8)?.try_into().ok()?));
        let text = |b: &mut &[u8]| {
            let n = u32::from_le_bytes(take(b, 4)?.try_into().ok()?) as usize;
            String::from_utf8(take(b, n)?.to_vec()).ok()
        };
        let cwd = text(&mut b)?;
        let mut counted = Vec::new();
        while !b.is_empty() {
            let time_ms = f64_of(&mut b)?;
            let key = text(&mut b)?;
            let mut n = [0.0; 5];
            for v in &mut n {
                *v = f64_of(&mut b)?;
            }
            let [input, output, cache_read, cache_write, cost] = n;
            let usage = Usage { responses: 1, input, output, cache_read, cache_write, cost };
            counted.push(Counted { time_ms, key, usage });
        }
        Some(SessionUsage { cwd, counted })
    }
}

/// The UTC day (`YYYY-MM-DD`) of a time in ms, or `(no date)`.
pub fn day_of(time_ms: f64) -> String {
    to_iso_string(time_ms).and_then(|s| s.get(..10).map(str::to_owned)).unwrap_or_else(|| "(no date)".to_owned())
}

/// Usage of many sessions, summed by the group `key` names.
#[derive(Debug)]
pub struct Overview<K> {
    /// Sums by group, each summed in the order of the paths and then of the entries (as pi's `+=` would).
    pub groups: BTreeMap<K, Usage>,
    /// How many sessions were read.
    pub sessions: usize,
    /// How many of them the memo answered for, unread.
    pub from_memo: usize,
    /// The sessions that could not be read, and why (they count for nothing above).
    pub unreadable: Vec<(String, crate::session::Error)>,
}

impl<K: Ord> Overview<K> {
    /// An overview of no sessions yet.
    pub fn new() -> Overview<K> {
        Overview { groups: BTreeMap::new(), sessions: 0, from_memo: 0, unreadable: Vec::new() }
    }

    /// Adds one session's usage objects dated at or after `since_ms` (every one when None; an undated one never
    /// is), each to the group `key` names, in file order: every source of sessions sums through here, so a
    /// session counts the same read from its file, the memo or the team catalog.
    pub fn add_session(
        &mut self,
        session: &SessionUsage,
        since_ms: Option<f64>,
        key: &mut impl FnMut(&SessionUsage, &Counted) -> K,
    ) {
        self.sessions += 1;
        for c in &session.counted {
            if since_ms.is_none_or(|since| c.time_ms >= since) {
                self.groups.entry(key(session, c)).or_default().merge(&c.usage);
            }
        }
    }

    /// Adds another overview's sums after this one's (group by group: this one's sum, then the other's).
    pub fn merge(&mut self, other: Overview<K>) {
        for (k, u) in other.groups {
            self.groups.entry(k).or_default().merge(&u);
        }
        self.sessions += other.sessions;
        self.from_memo += other.from_memo;
        self.unreadable.extend(other.unreadable);
    }
}

impl<K: Ord> Default for Overview<K> {
    fn default() -> Self {
        Overview::new()
    }
}

/// A file's stamp as the memo keeps it, when the file is settled (a later change will show in its stamp).
fn settled_stamp(path: &str, now_ns: i64) -> Option<String> {
    let st = FileStamp::of_path(path).ok()??;
    st.settled_at(now_ns).then(|| format!("{}:{}:{}:{}:{}", st.dev, st.ino, st.size, st.mtime_ns, st.ctime_ns))
}

/// Sums the usage of the sessions at `paths` (read-only, in this order) whose entries are dated at or after
/// `since_ms` (every entry when None; an undated entry never is), grouped by `key` of the session and the entry.
/// With a catalog index, each file's counted usage is kept in its memo under the file's stamp, so a file that did
/// not change since is not read again.
pub fn overview<K: Ord>(
    paths: &[String],
    since_ms: Option<f64>,
    cancel: &super::Cancel,
    mut index: Option<&mut CatalogIndex>,
    mut key: impl FnMut(&SessionUsage, &Counted) -> K,
) -> crate::session::Result<Overview<K>> {
    let mut out = Overview::new();
    // A memo that cannot be read or written costs speed, never an answer.
    let memo = index.as_deref_mut().map(|ix| ix.usage_memo(paths)).transpose().unwrap_or_else(|e| {
        tracing::warn!("usage memo not read: {e}");
        None
    });
    let now = now_ns();
    let mut fresh = Vec::new();
    for path in paths {
        cancel.check()?;
        let stamp = memo.as_ref().and_then(|_| settled_stamp(path, now));
        let remembered = memo
            .as_ref()
            .and_then(|m| m.get(path))
            .filter(|(s, _)| Some(s) == stamp.as_ref())
            .and_then(|(_, bytes)| SessionUsage::decode(bytes));
        let session = match remembered {
            Some(s) => {
                out.from_memo += 1;
                s
            }
            None => match SessionManager::open(path, None, None, crate::session::Env::system())
                .and_then(|m| session_usage(&m))
            {
                Ok(s) => {
                    // Stamped before the read: a change during it leaves a stamp that no longer matches.
                    if let Some(stamp) = stamp {
                        fresh.push((path.clone(), stamp, s.encode()));
                    }
                    s
                }
                Err(e) => {
                    out.unreadable.push((path.clone(), e));
                    continue;
                }
            },
        };
        out.add_session(&session, since_ms, &mut key);
    }
    if let Some(ix) = index {
        if let Err(e) = ix.put_usage_memo(&fresh) {
            tracing::warn!("usage memo not written: {e}");
        }
    }
    Ok(out)
}
