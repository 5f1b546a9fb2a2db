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
use crate::session::js::convert::to_js_string;
use crate::session::js::date::to_iso_string;
use crate::session::json::{Json, Object};
use crate::session::SessionManager;

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
    let (key, usage) = match kind.as_str() {
        "message" => {
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
        "usage" => (format!("{}/{}", s(entry.get("provider")), s(entry.get("model"))), entry.get("usage")),
        "compaction" | "branch_summary" => (UNATTRIBUTED.to_owned(), entry.get("usage")),
        _ => return None,
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
pub struct Counted<'a> {
    /// The entry's `timestamp`, in ms (NaN when it is not a date).
    pub time_ms: f64,
    /// pi's breakdown key.
    pub key: String,
    /// The usage object.
    pub usage: &'a Json,
}

/// Calls `each` for every usage object of `m`'s entries pi counts, in file order; reads only bodies that may
/// carry usage.
pub fn for_each_usage(m: &SessionManager, mut each: impl FnMut(Counted<'_>)) -> crate::session::Result<()> {
    let bodies = m.bodies_in_order();
    for i in m.entries() {
        let r = &m.records()[i];
        if !may_carry_usage(r) {
            continue;
        }
        let entry = bodies.json(i)?;
        if let Some((key, usage)) = entry_usage(&entry) {
            each(Counted { time_ms: r.time_ms, key, usage });
        }
    }
    Ok(())
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
    /// The sessions that could not be read, and why (they count for nothing above).
    pub unreadable: Vec<(String, crate::session::Error)>,
}

/// Sums the usage of the sessions at `paths` (read-only, in this order) whose entries are dated at or after
/// `since_ms` (every entry when None; an undated entry never is), grouped by `key` of the session and the entry.
pub fn overview<K: Ord>(
    paths: &[String],
    since_ms: Option<f64>,
    cancel: &super::Cancel,
    mut key: impl FnMut(&SessionManager, &Counted<'_>) -> K,
) -> crate::session::Result<Overview<K>> {
    let mut out = Overview { groups: BTreeMap::new(), sessions: 0, unreadable: Vec::new() };
    for path in paths {
        cancel.check()?;
        // Held until the whole session was read, so one that fails halfway adds nothing.
        let mut counted = Vec::new();
        let read = SessionManager::open(path, None, None, crate::session::Env::system()).and_then(|m| {
            for_each_usage(&m, |c| {
                if since_ms.is_none_or(|since| c.time_ms >= since) {
                    counted.push((key(&m, &c), c.usage.clone()));
                }
            })
        });
        match read {
            Ok(()) => {
                out.sessions += 1;
                for (k, usage) in counted {
                    out.groups.entry(k).or_default().add(&usage);
                }
            }
            Err(e) => out.unreadable.push((path.clone(), e)),
        }
    }
    Ok(out)
}
