//! `pi-sessiond usage` against pi 1.6.0's own sums: the same sessions opened with pi's SessionManager in Node
//! (the oracle), every entry pi's `getSessionStats` counts added with pi's `addUsageToTotals`, and by model
//! pi's own `getUsageCostBreakdown` — compared exactly, cost bits included.

use std::path::Path;
use std::process::Command;

use pi_sessiond::session::json::Json;

use crate::support::sidecar::binary;
use crate::support::{oracle, temp_dir};

pub fn usage_json(input: u32, output: u32, cache_read: u32, cache_write: u32, cost: &str) -> String {
    format!(
        r#"{{"input":{input},"output":{output},"cacheRead":{cache_read},"cacheWrite":{cache_write},"totalTokens":{},"cost":{{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":{cost}}}}}"#,
        input + output + cache_read + cache_write + 7
    )
}

/// One session of `cwd` whose entries are dated `day`: every kind of entry pi counts (an assistant on an
/// abandoned branch, one naming its `responseModel`, a tool result with usage, a usage entry, a compaction and
/// a branch summary with usage) and kinds it does not (a user message, a tool result without usage).
pub fn session(id: &str, cwd: &str, day: &str, n: u32) -> String {
    let at = |s: u32| format!("{day}T10:00:{s:02}.000Z");
    let entry = |id: &str, parent: &str, s: u32, rest: String| {
        format!(r#"{{"id":"{id}","parentId":{parent},"timestamp":"{}",{rest}}}"#, at(s))
    };
    let assistant = |model: &str, extra: &str, usage: String| {
        format!(
            r#""type":"message","message":{{"role":"assistant","content":[{{"type":"text","text":"ok"}}],"api":"x","provider":"acme","model":"{model}"{extra},"usage":{usage},"stopReason":"stop","timestamp":1}}"#
        )
    };
    [
        format!(r#"{{"type":"session","version":3,"id":"{id}","timestamp":"{}","cwd":"{cwd}"}}"#, at(0)),
        entry("u1", "null", 1, r#""type":"message","message":{"role":"user","content":"hi","timestamp":1}"#.into()),
        entry("a1", r#""u1""#, 2, assistant("small", "", usage_json(100 + n, 20, 3, 1, "0.1"))),
        entry("a2", r#""a1""#, 3, assistant("small", "", usage_json(7, 9, 0, 0, "0.2"))),
        // A sibling of a2: off the active branch, still counted (pi sums getEntries(), not the branch).
        entry("a3", r#""a1""#, 4, assistant("large", r#","responseModel":"large-2026""#, usage_json(1000, 200 + n, 50, 0, "0.3"))),
        entry("t1", r#""a3""#, 5, format!(r#""type":"message","message":{{"role":"toolResult","toolCallId":"c","toolName":"x","content":[],"isError":false,"usage":{},"timestamp":1}}"#, usage_json(5, 5, 0, 0, "0.07"))),
        entry("t2", r#""t1""#, 6, r#""type":"message","message":{"role":"toolResult","toolCallId":"c","toolName":"x","content":[],"isError":false,"timestamp":1}"#.into()),
        entry("g1", r#""t2""#, 7, format!(r#""type":"usage","kind":"cache_warm","provider":"other","model":"warm","usage":{}"#, usage_json(0, 0, 400, 0, "0.015"))),
        entry("c1", r#""g1""#, 8, format!(r#""type":"compaction","summary":"s","firstKeptEntryId":"a3","tokensBefore":9,"usage":{}"#, usage_json(300, 30, 0, 0, "0.011"))),
        entry("b1", r#""c1""#, 9, format!(r#""type":"branch_summary","fromId":"a1","summary":"s","usage":{}"#, usage_json(40, 4, 0, 0, "0.013"))),
        entry("b2", r#""b1""#, 10, r#""type":"branch_summary","fromId":"a1","summary":"no usage""#.into()),
    ]
    .join("\n")
        + "\n"
}

/// An agent directory of sessions over three days, two projects and several models.
pub fn agent(root: &Path) -> std::path::PathBuf {
    let agent = root.join("agent");
    let days = ["2026-01-30", "2026-01-31", "2026-02-01"];
    for (k, cwd) in ["/work/app", "/work/other"].iter().enumerate() {
        let dir = agent.join("sessions").join(pi_sessiond::session::paths::encode_cwd(cwd));
        std::fs::create_dir_all(&dir).unwrap();
        for (d, day) in days.iter().enumerate() {
            let n = (k * 3 + d) as u32;
            let id = format!("0193aaaa-{n:04}-7000-8000-000000000000");
            std::fs::write(dir.join(format!("{day}T10-00-00-000Z_{id}.jsonl")), session(&id, cwd, day, n)).unwrap();
        }
    }
    agent
}

fn ours(agent: &Path, args: &[&str]) -> Json {
    let out = Command::new(binary()).arg("--agent-dir").arg(agent).arg("usage").args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    Json::parse(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

fn pis(agent: &Path, by: &str, since: Option<f64>) -> Json {
    let since = since.map_or(Json::Null, Json::number);
    let mut request = pi_sessiond::session::json::Object::new();
    request.insert("command", Json::str("usage"));
    request.insert("agentDir", Json::str(&agent.to_string_lossy()));
    request.insert("by", Json::str(by));
    request.insert("since", since);
    oracle(&Json::Object(request))
}

#[test]
fn usage_by_day_model_and_project_equals_pis_own_sums_exactly() {
    let tmp = temp_dir();
    let agent = agent(tmp.path());
    for by in ["day", "model", "project"] {
        let ours = ours(&agent, &["--by", by, "--json"]);
        let pi = pis(&agent, by, None);
        assert_eq!(ours.to_canonical_string(), pi.get("rows").unwrap().to_canonical_string(), "--by {by}");
        let Json::Array(rows) = &ours else { panic!("an array: {ours:?}") };
        assert!(rows.len() >= 2, "--by {by} groups: {rows:?}");
    }
}

#[test]
fn usage_by_model_keys_and_costs_are_those_of_pis_cost_breakdown() {
    let tmp = temp_dir();
    let agent = agent(tmp.path());
    let ours = ours(&agent, &["--by", "model", "--json"]);
    let pi = pis(&agent, "model", None);
    let Some(Json::Array(breakdown)) = pi.get("breakdown") else { panic!("{pi:?}") };
    let Json::Array(rows) = &ours else { panic!() };
    let keys: Vec<String> =
        rows.iter().map(|r| r.get("model").unwrap().as_js_str().unwrap().to_string_lossy()).collect();
    assert_eq!(keys, ["Tools/summaries", "acme/large-2026", "acme/small", "other/warm"]);
    assert_eq!(breakdown.len(), rows.len());
    for b in breakdown {
        let key = b.get("key").unwrap();
        let row = rows.iter().find(|r| r.get("model") == Some(key)).unwrap_or_else(|| panic!("{key:?} in {ours:?}"));
        assert_eq!(row.get("cost"), b.get("cost"), "{key:?}");
        assert_eq!(row.get("totalTokens"), b.get("tokens"), "{key:?}");
    }
}

#[test]
fn usage_since_a_day_counts_only_entries_from_that_day_on_as_pi_would() {
    let tmp = temp_dir();
    let agent = agent(tmp.path());
    let ours = ours(&agent, &["--since", "2026-01-31", "--by", "day", "--json"]);
    let pi = pis(&agent, "day", Some(1_769_817_600_000.0));
    assert_eq!(ours.to_canonical_string(), pi.get("rows").unwrap().to_canonical_string());
    let Json::Array(rows) = &ours else { panic!() };
    let days: Vec<_> = rows.iter().map(|r| r.get("day").unwrap().as_js_str().unwrap().to_string_lossy()).collect();
    assert_eq!(days, ["2026-01-31", "2026-02-01"]);
}

#[test]
fn usage_with_a_since_that_is_not_a_date_fails_with_a_clear_error() {
    let tmp = temp_dir();
    let agent = agent(tmp.path());
    let out =
        Command::new(binary()).arg("--agent-dir").arg(&agent).args(["usage", "--since", "soon"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--since \"soon\" is not a date"));
}

#[test]
fn stats_counts_tool_results_and_summaries_as_pis_session_stats_do() {
    let tmp = temp_dir();
    let agent = agent(tmp.path());
    let one = agent.join("sessions").join(pi_sessiond::session::paths::encode_cwd("/work/app"));
    let file = std::fs::read_dir(&one).unwrap().next().unwrap().unwrap().path();
    let out =
        Command::new(binary()).arg("--agent-dir").arg(&agent).arg("stats").arg(&file).arg("--json").output().unwrap();
    let stats = Json::parse(&out.stdout).unwrap();
    let total = stats.get("total").unwrap();
    // a1, a2, a3 (off the branch), t1, g1, c1, b1: not the user message, t2 or b2, which carry none.
    assert_eq!(total.get("responses"), Some(&Json::number(7.0)));
    let Json::Array(models) = stats.get("models").unwrap() else { panic!() };
    let summaries = models.iter().find(|m| m.get("model") == Some(&Json::str("Tools/summaries"))).unwrap();
    assert_eq!(
        summaries.get("input"),
        Some(&Json::number(345.0)),
        "tool result 5 + compaction 300 + branch summary 40"
    );
}

#[test]
fn usage_through_the_index_memo_stays_equal_to_pis_sums_when_a_session_grows() {
    let tmp = temp_dir();
    let agent = agent(tmp.path());
    let index = tmp.path().join("index.sqlite");
    let with_index = |args: &[&str]| {
        let mut all = vec!["--index", index.to_str().unwrap(), "usage"];
        all.extend_from_slice(args);
        let out = Command::new(binary()).arg("--agent-dir").arg(&agent).args(&all).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "stderr: {}", String::from_utf8_lossy(&out.stderr));
        Json::parse(&out.stdout).unwrap()
    };
    // Files changed within the racy window are never remembered: wait until these are settled.
    std::thread::sleep(std::time::Duration::from_nanos(
        pi_sessiond::session::identity::RACY_WINDOW_NS as u64 + 200_000_000,
    ));
    let first = with_index(&["--by", "model", "--json"]);
    let conn = rusqlite::Connection::open(&index).unwrap();
    let remembered: i64 = conn.query_row("SELECT count(*) FROM usage_memo", [], |r| r.get(0)).unwrap();
    assert_eq!(remembered, 6, "every settled session is remembered");
    assert_eq!(with_index(&["--by", "model", "--json"]), first, "the memo answers as the files did");
    // A session grows: its stamp changes, so it is counted again, not taken from the memo.
    let dir = agent.join("sessions").join(pi_sessiond::session::paths::encode_cwd("/work/app"));
    let file = std::fs::read_dir(&dir).unwrap().next().unwrap().unwrap().path();
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str(&format!(
        r#"{{"type":"usage","id":"g2","parentId":"b2","timestamp":"2026-01-30T11:00:00.000Z","kind":"cache_warm","provider":"other","model":"warm","usage":{}}}"#,
        usage_json(1, 2, 3, 4, "0.5")
    ));
    text.push('\n');
    std::fs::write(&file, text).unwrap();
    let after = with_index(&["--by", "model", "--json"]);
    assert_ne!(after, first);
    assert_eq!(after.to_canonical_string(), pis(&agent, "model", None).get("rows").unwrap().to_canonical_string());
}
