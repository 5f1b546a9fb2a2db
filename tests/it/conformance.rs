//! Differential conformance: the same operations run by pi 1.6.0 and by the engine must give the same results,
//! the same live reads and byte-identical files. Each test names the behaviour it pins; the edge-case numbers
//! refer to `shared/pi-session-spec.md` §10.

use crate::scenario::{run_and_compare, Scenario};

const U1: &str = r#"{"role":"user","content":"hello","timestamp":1000}"#;
const A1: &str = r#"{"role":"assistant","content":[{"type":"thinking","thinking":"hm"},{"type":"text","text":"reply"}],"api":"anthropic-messages","provider":"anthropic","model":"claude-test","usage":{"input":1,"output":2,"cacheRead":0,"cacheWrite":0,"totalTokens":3,"cost":{"input":0.001,"output":0.002,"cacheRead":0,"cacheWrite":0,"total":0.003}},"stopReason":"stop","timestamp":2000}"#;
const T1: &str = r#"{"role":"toolResult","toolCallId":"c1","toolName":"bash","content":[{"type":"text","text":"out"},{"type":"image","data":"aGVsbG8=","mimeType":"image/png"}],"isError":false,"timestamp":3000}"#;

fn s(name: &str, ops: String) -> Scenario {
    Scenario::new(name, &ops)
}

#[test]
fn lazy_first_write_waits_for_a_user_or_assistant_message() {
    // §10.1–3: setup entries alone write nothing; the first user message writes header + everything.
    run_and_compare(&[
        s(
            "lazy",
            format!(
                r#"[{{"op":"create","cwd":"$ROOT/proj","dir":"$ROOT/sessions"}},
            {{"op":"appendModelChange","provider":"anthropic","modelId":"claude"}},{{"op":"tick"}},
            {{"op":"appendThinkingLevelChange","thinkingLevel":"high"}},
            {{"op":"appendMessage","message":{{"role":"system","content":"sys","timestamp":5}}}},
            {{"op":"appendCustomMessageEntry","customType":"ext","content":"hi","display":false}},
            {{"op":"appendMessage","message":{{"role":"bashExecution","command":"ls","output":"x","exitCode":0,"cancelled":false,"truncated":false,"timestamp":6}}}},
            {{"op":"appendCustomEntry","customType":"state","data":{{"n":1}}}},
            {{"op":"appendSessionInfo","name":"n"}},
            {{"op":"appendUsage","kind":"cache_warm","provider":"p","model":"m","usage":{{"input":1}},"note":""}},
            {{"op":"reads"}},
            {{"op":"tick"}},{{"op":"appendMessage","message":{U1},"as":"u1"}},
            {{"op":"appendLabelChange","targetId":{{"$ref":"u1"}},"label":"first"}},
            {{"op":"state"}}]"#
            ),
        ),
        s(
            "assistant-first",
            format!(
                r#"[{{"op":"create","cwd":"$ROOT","dir":"$ROOT/s","options":{{"id":"good-id"}}}},{{"op":"appendMessage","message":{A1}}},{{"op":"reads"}}]"#
            ),
        ),
        s(
            "in-memory",
            format!(
                r#"[{{"op":"inMemory","cwd":"$ROOT"}},{{"op":"appendMessage","message":{U1}}},{{"op":"state"}},{{"op":"reads"}}]"#
            ),
        ),
    ]);
}

#[test]
fn every_append_type_writes_pis_key_order_and_values() {
    run_and_compare(&[s(
        "all-types",
        format!(
            r#"[{{"op":"create","cwd":"$ROOT","dir":"$ROOT"}},
        {{"op":"appendMessage","message":{U1},"as":"u1"}},{{"op":"tick","ms":7}},
        {{"op":"appendMessage","message":{A1},"as":"a1"}},
        {{"op":"appendMessage","message":{T1},"as":"t1"}},
        {{"op":"appendThinkingLevelChange","thinkingLevel":"medium"}},
        {{"op":"appendModelChange","provider":"openai","modelId":"gpt-4"}},
        {{"op":"appendUsage","kind":"cache_warm","provider":"p","model":"m","usage":{{"input":0,"output":0,"cacheRead":5,"cacheWrite":0,"totalTokens":5,"cost":{{"input":0,"output":0,"cacheRead":0.015,"cacheWrite":0,"total":0.015}}}},"note":"warm"}},
        {{"op":"appendUsage","kind":"k","provider":"p","model":"m","usage":{{}}}},
        {{"op":"appendCustomEntry","customType":"ext"}},
        {{"op":"appendCustomEntry","customType":"ext","data":null}},
        {{"op":"appendCustomMessageEntry","customType":"ext","content":[{{"type":"text","text":"t"}}],"display":true,"details":{{"k":[1,2]}}}},
        {{"op":"appendSessionInfo","name":"  line1\r\nline2\n\nline3  "}},
        {{"op":"appendSessionInfo","name":"   "}},
        {{"op":"appendLabelChange","targetId":{{"$ref":"a1"}},"label":"x"}},
        {{"op":"appendLabelChange","targetId":{{"$ref":"a1"}}}},
        {{"op":"appendLabelChange","targetId":{{"$ref":"a1"}},"label":""}},
        {{"op":"appendLabelChange","targetId":"missing","label":"x"}},
        {{"op":"appendCompaction","summary":"s","firstKeptEntryId":{{"$ref":"a1"}},"tokensBefore":42,"details":{{"readFiles":["a"],"modifiedFiles":[]}},"fromHook":true,"usage":{{"input":1}}}},
        {{"op":"appendMessage","message":{{"role":"user","content":"weird \u2028 \ud83d end","timestamp":-0}}}},
        {{"op":"appendMessage","message":{{"role":"user","content":"n","timestamp":12345678901234567890,"x":1e21,"y":1.50,"1":"idx","0":"first"}}}},
        {{"op":"reads"}}]"#
        ),
    )]);
}

#[test]
fn branching_moves_only_the_leaf_and_trees_sort_children_by_time() {
    // §10.36–45.
    run_and_compare(&[s(
        "branching",
        format!(
            r#"[{{"op":"create","cwd":"$ROOT","dir":"$ROOT","as":"f"}},
        {{"op":"appendMessage","message":{U1},"as":"e1"}},{{"op":"tick"}},
        {{"op":"appendMessage","message":{A1},"as":"e2"}},{{"op":"tick"}},
        {{"op":"appendMessage","message":{U1},"as":"e3"}},{{"op":"tick"}},
        {{"op":"branch","entryId":{{"$ref":"e2"}}}},
        {{"op":"appendMessage","message":{U1},"as":"e4"}},
        {{"op":"children","parentId":{{"$ref":"e2"}}}},
        {{"op":"branch","entryId":"nope"}},
        {{"op":"resetLeaf"}},{{"op":"tick"}},
        {{"op":"appendMessage","message":{U1},"as":"root2"}},
        {{"op":"branchWithSummary","entryId":{{"$ref":"e1"}},"summary":"left","details":{{"readFiles":[]}},"fromHook":false}},
        {{"op":"resetLeaf"}},
        {{"op":"branchWithSummary","entryId":null,"summary":"from nothing"}},
        {{"op":"branchWithSummary","entryId":null,"summary":""}},
        {{"op":"branchWithSummary","entryId":"nope","summary":"x"}},
        {{"op":"getBranch","fromId":{{"$ref":"e3"}}}},
        {{"op":"getEntry","id":{{"$ref":"e4"}}}},
        {{"op":"reads"}},
        {{"op":"open","path":{{"$ref":"f"}}}},{{"op":"reads"}}]"#
        ),
    )]);
}

#[test]
fn compaction_context_keeps_the_right_range() {
    // §10.56–63: firstKept ranges, retain-none, two compactions, system messages and the replayed checkpoint.
    run_and_compare(&[
        s(
            "compaction",
            format!(
                r#"[{{"op":"inMemory","cwd":"$ROOT"}},
        {{"op":"appendMessage","message":{{"role":"system","content":"base","sections":{{"a":"A1","b":"B1"}},"toolsAdded":[{{"name":"read","description":"r","parameters":{{}}}}],"timestamp":11}}}},
        {{"op":"appendMessage","message":{U1},"as":"u1"}},
        {{"op":"appendMessage","message":{A1},"as":"a1"}},
        {{"op":"appendMessage","message":{{"role":"system","content":[{{"type":"text","text":"extra"}},{{"type":"image"}},{{"type":"text","text":"more"}}],"sections":{{"a":"A2","b":null}},"toolsAdded":[{{"name":"write"}}],"toolsRemoved":[{{"name":"read"}}],"timestamp":12}}}},
        {{"op":"appendMessage","message":{U1},"as":"u2"}},
        {{"op":"appendThinkingLevelChange","thinkingLevel":"high"}},
        {{"op":"appendMessage","message":{A1},"as":"a2"}},
        {{"op":"tick"}},
        {{"op":"appendCompaction","summary":"first","firstKeptEntryId":{{"$ref":"u2"}},"tokensBefore":100,"as":"c1"}},
        {{"op":"reads"}},
        {{"op":"appendMessage","message":{U1},"as":"u3"}},
        {{"op":"appendCompaction","summary":"second","firstKeptEntryId":{{"$ref":"a2"}},"tokensBefore":200}},
        {{"op":"reads"}},
        {{"op":"appendCompaction","summary":"none kept","firstKeptEntryId":null,"tokensBefore":1}},
        {{"op":"reads"}},
        {{"op":"appendMessage","message":{{"role":"user","content":"after","timestamp":9}}}},
        {{"op":"appendCompaction","summary":"missing target","firstKeptEntryId":"ghost","tokensBefore":1}},
        {{"op":"appendMessage","message":{{"role":"system","content":"late","timestamp":13}}}},
        {{"op":"reads"}}]"#
            ),
        ),
        s(
            "compaction-on-one-branch",
            format!(
                r#"[{{"op":"inMemory"}},
        {{"op":"appendMessage","message":{U1},"as":"u1"}},{{"op":"appendMessage","message":{A1},"as":"a1"}},
        {{"op":"appendCompaction","summary":"c","firstKeptEntryId":{{"$ref":"a1"}},"tokensBefore":1}},
        {{"op":"appendMessage","message":{U1}}},
        {{"op":"branch","entryId":{{"$ref":"a1"}}}},{{"op":"appendMessage","message":{T1}}},
        {{"op":"reads"}}]"#
            ),
        ),
    ]);
}

#[test]
fn context_edits_are_branch_relative_and_latest_wins() {
    // §10.70–72.
    run_and_compare(&[s(
        "edits",
        format!(
            r#"[{{"op":"inMemory"}},
        {{"op":"appendMessage","message":{U1},"as":"u1"}},
        {{"op":"appendMessage","message":{A1},"as":"a1"}},
        {{"op":"appendMessage","message":{T1},"as":"t1"}},
        {{"op":"appendCustomMessageEntry","customType":"c","content":"cm","display":true,"as":"cm"}},
        {{"op":"appendContextEdit","targetId":{{"$ref":"a1"}},"replacement":{{"content":"EDIT-A"}},"as":"e1"}},
        {{"op":"appendContextEdit","targetId":{{"$ref":"u1"}},"replacement":{{"content":"user edit"}}}},
        {{"op":"appendContextEdit","targetId":{{"$ref":"t1"}},"replacement":{{"content":[]}}}},
        {{"op":"appendContextEdit","targetId":{{"$ref":"cm"}},"replacement":{{"content":"custom edit"}}}},
        {{"op":"reads"}},
        {{"op":"appendContextEdit","targetId":{{"$ref":"a1"}},"replacement":null}},
        {{"op":"reads"}},
        {{"op":"branch","entryId":{{"$ref":"e1"}}}},
        {{"op":"reads"}},
        {{"op":"branch","entryId":{{"$ref":"t1"}}}},
        {{"op":"reads"}},
        {{"op":"appendContextEdit","targetId":{{"$ref":"a1"}}}},
        {{"op":"appendContextEdit","targetId":{{"$ref":"a1"}},"replacement":{{}}}},
        {{"op":"appendContextEdit","targetId":{{"$ref":"a1"}},"replacement":"s"}},
        {{"op":"appendContextEdit","targetId":{{"$ref":"a1"}},"replacement":{{"content":5}}}},
        {{"op":"appendContextEdit","targetId":"nope","replacement":null}},
        {{"op":"appendContextEdit","targetId":{{"$ref":"e1"}},"replacement":null}},
        {{"op":"appendContextEdit","targetId":{{"$ref":"cm"}},"replacement":null}},
        {{"op":"resetLeaf"}},
        {{"op":"appendContextEdit","targetId":{{"$ref":"u1"}},"replacement":null}}]"#
        ),
    )]);
}

#[test]
fn created_branched_sessions_rechain_labels_and_remap_compactions() {
    // §10.46–50.
    run_and_compare(&[
        s(
            "branched",
            format!(
                r#"[{{"op":"create","cwd":"$ROOT","dir":"$ROOT"}},
        {{"op":"appendMessage","message":{U1},"as":"u1"}},
        {{"op":"appendLabelChange","targetId":{{"$ref":"u1"}},"label":"one","as":"l1"}},
        {{"op":"tick"}},
        {{"op":"appendMessage","message":{A1},"as":"a1"}},
        {{"op":"appendLabelChange","targetId":{{"$ref":"a1"}},"label":"two","as":"l2"}},
        {{"op":"tick"}},
        {{"op":"appendLabelChange","targetId":{{"$ref":"u1"}},"label":"renamed"}},
        {{"op":"appendCompaction","summary":"c","firstKeptEntryId":{{"$ref":"l2"}},"tokensBefore":5}},
        {{"op":"appendMessage","message":{U1},"as":"u2"}},
        {{"op":"branch","entryId":{{"$ref":"u1"}}}},
        {{"op":"appendMessage","message":{T1},"as":"off"}},
        {{"op":"appendLabelChange","targetId":{{"$ref":"off"}},"label":"off-path"}},
        {{"op":"tick"}},
        {{"op":"createBranchedSession","leafId":{{"$ref":"u2"}}}},
        {{"op":"state"}},{{"op":"reads"}},
        {{"op":"createBranchedSession","leafId":"nope"}}]"#
            ),
        ),
        s(
            "branched-lazy",
            format!(
                r#"[{{"op":"create","cwd":"$ROOT","dir":"$ROOT"}},
        {{"op":"appendModelChange","provider":"p","modelId":"m","as":"mc"}},
        {{"op":"appendMessage","message":{U1}}},
        {{"op":"tick"}},
        {{"op":"createBranchedSession","leafId":{{"$ref":"mc"}}}},
        {{"op":"appendThinkingLevelChange","thinkingLevel":"low"}},
        {{"op":"state"}},
        {{"op":"appendMessage","message":{U1}}},{{"op":"state"}}]"#
            ),
        ),
        s(
            "branched-memory",
            format!(
                r#"[{{"op":"inMemory"}},{{"op":"appendMessage","message":{U1},"as":"u"}},
        {{"op":"appendLabelChange","targetId":{{"$ref":"u"}},"label":"L"}},
        {{"op":"createBranchedSession","leafId":{{"$ref":"u"}}}},{{"op":"reads"}}]"#
            ),
        ),
    ]);
}

#[test]
fn sessions_reopen_to_the_same_reads_and_new_sessions_start_fresh() {
    run_and_compare(&[s(
        "reopen",
        format!(
            r#"[{{"op":"create","cwd":"$ROOT/p","dir":"$ROOT/s","options":{{"parentSession":"/old.jsonl"}}}},
        {{"op":"appendMessage","message":{U1},"as":"u1"}},
        {{"op":"appendMessage","message":{A1}}},
        {{"op":"branch","entryId":{{"$ref":"u1"}}}},
        {{"op":"state"}},
        {{"op":"setSessionFile","path":"$ROOT/s/elsewhere.jsonl"}},
        {{"op":"state"}},
        {{"op":"newSession","options":{{"id":"a..b"}}}},
        {{"op":"newSession","options":{{"id":"-bad"}}}},
        {{"op":"newSession"}},
        {{"op":"state"}},
        {{"op":"appendMessage","message":{U1}}},
        {{"op":"inMemory","cwd":"$ROOT","options":{{"id":"x"}},"entries":[{{"type":"session","version":3,"id":"has space","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/elsewhere"}},{{"type":"message","id":"aa","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{U1}}}]}},
        {{"op":"state"}},{{"op":"reads"}},
        {{"op":"inMemory","cwd":"$ROOT","entries":[{{"type":"message","id":"bb","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{U1}}}]}},
        {{"op":"state"}},{{"op":"reads"}}]"#
        ),
    )]);
}

#[test]
fn held_back_load_repairs_end_in_pis_bytes_after_the_first_append() {
    use crate::scenario::base64_encode;
    let v1 = concat!(
        r#"{"type":"session","id":"legacy","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p","provider":"x"}"#,
        "\n",
        r#"{"type":"message","timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"a","timestamp":1}}"#,
        "\n",
        r#"{"type":"message","timestamp":"2025-01-01T00:00:02.000Z","message":{"role":"hookMessage","customType":"h","content":"b","display":true,"timestamp":2}}"#,
        "\n",
        r#"{"type":"compaction","timestamp":"2025-01-01T00:00:03.000Z","summary":"s","firstKeptEntryIndex":2,"tokensBefore":3}"#,
        "\n"
    );
    let v3_no_newline = concat!(
        r#"{"type":"session","version":3,"id":"nl","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#,
        "\n",
        r#"{"type":"message","id":"aaaaaaaa","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"a","timestamp":1}}"#
    );
    let mut ops = Vec::new();
    for (name, content) in [("v1", v1), ("nl", v3_no_newline), ("empty", "")] {
        ops.push(format!(
            r#"{{"op":"writeFile","path":"$ROOT/{name}.jsonl","base64":"{}"}}"#,
            base64_encode(content.as_bytes())
        ));
        ops.push(format!(r#"{{"op":"open","path":"$ROOT/{name}.jsonl","lazy":true}}"#));
        ops.push(format!(r#"{{"op":"appendMessage","message":{U1}}}"#));
        ops.push(r#"{"op":"reads"}"#.to_owned());
    }
    run_and_compare(&[Scenario::new("lazy-repairs", &format!("[{}]", ops.join(",")))]);
}
