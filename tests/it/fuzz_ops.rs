//! Random operation sequences, run by pi and by the engine: every result, every live read and every byte written
//! must agree. Seeded, so a failure names a scenario that can be replayed.

use pi_sessiond::session::json::Json;

use crate::corpus::{session_lines, to_bytes, Rng, Shape};
use crate::scenario::{base64_encode, run_and_compare, Scenario};

fn message(r: &mut Rng, n: usize) -> String {
    let ts = 1000 + n * 10;
    match r.below(9) {
        0 | 1 => format!(r#"{{"role":"user","content":"u{n} text","timestamp":{ts}}}"#),
        2 => format!(
            r#"{{"role":"user","content":[{{"type":"text","text":"u{n}"}},{{"type":"image","data":"aGk=","mimeType":"image/png"}}],"timestamp":{ts}}}"#
        ),
        3 | 4 => format!(
            r#"{{"role":"assistant","content":[{{"type":"text","text":"a{n}"}},{{"type":"toolCall","id":"c","name":"bash","arguments":{{}}}}],"provider":"{}","model":"m{n}","usage":{{"input":1,"output":1,"totalTokens":2}},"stopReason":"toolUse","timestamp":{ts}}}"#,
            r.pick(&["anthropic", "openai"])
        ),
        5 => format!(
            r#"{{"role":"toolResult","toolCallId":"c","toolName":"bash","content":[{{"type":"text","text":"t{n}"}}],"isError":false,"timestamp":{ts}}}"#
        ),
        6 => format!(
            r#"{{"role":"system","content":"sys{n}","sections":{{"s{}":"v{n}","gone":null}},"toolsAdded":[{{"name":"tool{}"}}],"toolsRemoved":[{{"name":"tool{}"}}],"timestamp":{ts}}}"#,
            r.below(3),
            r.below(3),
            r.below(3)
        ),
        7 => format!(r#"{{"role":"user","content":null,"timestamp":{ts}}}"#),
        _ => format!(
            r#"{{"role":"bashExecution","command":"ls","output":"o","exitCode":1,"cancelled":false,"truncated":false,"timestamp":{ts}}}"#
        ),
    }
}

fn scenario(seed: u32) -> Scenario {
    let mut r = Rng::new(seed);
    let mut ops: Vec<String> = Vec::new();
    let mut refs: Vec<String> = Vec::new();
    let mut files: Vec<String> = Vec::new();
    match r.below(4) {
        0 => ops.push(r#"{"op":"inMemory","cwd":"$ROOT"}"#.to_owned()),
        1 => {
            let lines = session_lines(&mut r, Shape { entries: 1 + (seed as usize % 12), hand_written: false });
            ops.push(format!(
                r#"{{"op":"writeFile","path":"$ROOT/s/pre.jsonl","base64":"{}"}}"#,
                base64_encode(&to_bytes(&lines))
            ));
            ops.push(r#"{"op":"open","path":"$ROOT/s/pre.jsonl","as":"f0"}"#.to_owned());
            files.push("f0".into());
            for l in &lines[1..] {
                if let Some(Json::String(id)) = l.get("id") {
                    refs.push(format!(r#""{}""#, id.to_string_lossy()));
                }
            }
        }
        _ => {
            ops.push(r#"{"op":"create","cwd":"$ROOT/p","dir":"$ROOT/s","as":"f0"}"#.to_owned());
            files.push("f0".into());
        }
    }
    let target = |r: &mut Rng, refs: &[String]| -> String {
        if refs.is_empty() || r.chance(5) {
            r#""nope""#.to_owned()
        } else {
            r.pick(refs)
        }
    };
    for n in 0..(20 + r.below(30)) {
        if r.chance(30) {
            ops.push(format!(r#"{{"op":"tick","ms":{}}}"#, r.pick(&[0, 1, 1000, 60000])));
        }
        let alias = format!("e{n}");
        let as_ref = format!(r#"{{"$ref":"{alias}"}}"#);
        let op = match r.below(24) {
            0..=6 => format!(r#"{{"op":"appendMessage","message":{},"as":"{alias}"}}"#, message(&mut r, n)),
            7 => format!(
                r#"{{"op":"appendThinkingLevelChange","thinkingLevel":"{}","as":"{alias}"}}"#,
                r.pick(&["off", "high"])
            ),
            8 => format!(r#"{{"op":"appendModelChange","provider":"p{n}","modelId":"m{n}","as":"{alias}"}}"#),
            9 => format!(
                r#"{{"op":"appendUsage","kind":"k","provider":"p","model":"m","usage":{{"input":{n}}},"note":"{}","as":"{alias}"}}"#,
                r.pick(&["", "n"])
            ),
            10 => {
                let first = if r.chance(30) { "null".to_owned() } else { target(&mut r, &refs) };
                format!(
                    r#"{{"op":"appendCompaction","summary":"c{n}","firstKeptEntryId":{first},"tokensBefore":{n},"as":"{alias}"}}"#
                )
            }
            11 => format!(r#"{{"op":"appendCustomEntry","customType":"x","data":{{"n":{n}}},"as":"{alias}"}}"#),
            12 => format!(
                r#"{{"op":"appendSessionInfo","name":"{}","as":"{alias}"}}"#,
                r.pick(&["  name one ", "", "two\\nlines"])
            ),
            13 => format!(
                r#"{{"op":"appendCustomMessageEntry","customType":"x","content":"cm{n}","display":{},"as":"{alias}"}}"#,
                r.pick(&["true", "false"])
            ),
            14 => {
                let rep = r.pick(&["null", r#"{"content":"edited"}"#, r#"{"content":[{"type":"text","text":"e"}]}"#]);
                format!(
                    r#"{{"op":"appendContextEdit","targetId":{},"replacement":{rep},"as":"{alias}"}}"#,
                    target(&mut r, &refs)
                )
            }
            15 | 16 => {
                let label = r.pick(&[r#","label":"L""#, r#","label":"""#, "", r#","label":"other""#]);
                format!(r#"{{"op":"appendLabelChange","targetId":{}{label},"as":"{alias}"}}"#, target(&mut r, &refs))
            }
            17 | 18 => format!(r#"{{"op":"branch","entryId":{}}}"#, target(&mut r, &refs)),
            19 => r#"{"op":"resetLeaf"}"#.to_owned(),
            20 => {
                let from = if r.chance(20) { "null".to_owned() } else { target(&mut r, &refs) };
                format!(
                    r#"{{"op":"branchWithSummary","entryId":{from},"summary":"{}","as":"{alias}"}}"#,
                    r.pick(&["bs", ""])
                )
            }
            21 => {
                let f = format!("f{n}");
                files.push(f.clone());
                format!(r#"{{"op":"createBranchedSession","leafId":{},"as":"{f}"}}"#, target(&mut r, &refs))
            }
            22 if !files.is_empty() => format!(r#"{{"op":"open","path":{{"$ref":"{}"}}}}"#, files.last().unwrap()),
            _ => r#"{"op":"reads"}"#.to_owned(),
        };
        if op.contains(&format!(r#""as":"{alias}""#)) {
            refs.push(as_ref);
        }
        ops.push(op);
    }
    ops.push(r#"{"op":"reads"}"#.to_owned());
    ops.push(r#"{"op":"state"}"#.to_owned());
    Scenario::new(&format!("fuzz-{seed}"), &format!("[{}]", ops.join(",")))
}

#[test]
fn random_operation_sequences_match_pi_result_for_result_and_byte_for_byte() {
    let scenarios: Vec<Scenario> = (1..=400).map(scenario).collect();
    run_and_compare(&scenarios);
}
