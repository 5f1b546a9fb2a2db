//! Reads of existing files, against pi: every generated file (pi-shaped, hand-written, legacy, damaged) must give
//! pi's `getHeader`, `getEntries`, `getLeafId`, `getTree`, `getBranch`, `buildContextEntries`,
//! `buildSessionProjection`, `buildSessionContext`, `getSessionName`, `getSessionId`, `getCwd`, `getEntryCount`,
//! and fail where pi fails.

use pi_sessiond::cli::inspect_with;
use pi_sessiond::session::context::ContextOptions;
use pi_sessiond::session::json::{Json, Object};
use pi_sessiond::session::store::WarningKind;
use pi_sessiond::session::{Env, SessionManager};

use crate::corpus::{as_v1, as_v2, damage, session_lines, to_bytes, Rng, Shape, DAMAGE};
use crate::support::{json_diff, oracle, replace_in_strings, s, temp_dir, Deterministic};

/// pi 1.6.0's own context (it ignores `retainedTail`).
const PI_CONTEXT: ContextOptions = ContextOptions { honour_retained_tail: false };

/// True when pi 1.6.0 would never return on this file (a parent cycle: its walks and `getTree` loop forever), so
/// the oracle cannot be asked. Such files are covered by the engine's own termination tests.
fn pi_would_hang(path: &str) -> bool {
    let Ok(m) = SessionManager::open(path, None, None, Env::system()) else { return false };
    m.tree().cycles_broken > 0
        || m.warnings().iter().any(|w| matches!(w.kind, WarningKind::ParentCycle | WarningKind::SelfParent))
}

/// Generates `count` files from `seed` with the given transformation.
fn corpus(seed: u32, count: usize, make: impl Fn(&mut Rng, usize) -> (String, Vec<u8>)) -> Vec<(String, Vec<u8>)> {
    let mut r = Rng::new(seed);
    (0..count).map(|i| make(&mut r, i)).collect()
}

/// Compares inspect with pi's reads on every file; panics listing every difference.
fn compare_reads(files: &[(String, Vec<u8>)]) {
    let tmp = temp_dir();
    let ours_dir = tmp.path().join("ours");
    let pi_dir = tmp.path().join("pi");
    std::fs::create_dir_all(&ours_dir).unwrap();
    std::fs::create_dir_all(&pi_dir).unwrap();
    let mut names = Vec::new();
    for (name, bytes) in files {
        std::fs::write(ours_dir.join(name), bytes).unwrap();
        std::fs::write(pi_dir.join(name), bytes).unwrap();
        if pi_would_hang(&s(&ours_dir.join(name))) {
            continue;
        }
        names.push(name.clone());
    }
    let mut req = Object::new();
    req.insert("command", Json::str("reads"));
    req.insert("files", Json::Array(names.iter().map(|n| Json::str(&s(&pi_dir.join(n)))).collect()));
    let Json::Array(answers) = oracle(&Json::Object(req)) else { panic!("oracle") };
    let det = Deterministic::new();
    let mut problems = Vec::new();
    for (name, pi) in names.iter().zip(answers) {
        let path = s(&ours_dir.join(name));
        let before = std::fs::read(&path).unwrap();
        let mut out = Vec::new();
        inspect_with(&path, PI_CONTEXT, det.env(), &mut out);
        assert_eq!(std::fs::read(&path).unwrap(), before, "{name}: inspect must not modify the file");
        let mut ours = Json::parse(&out).unwrap_or_else(|e| panic!("{name}: inspect printed invalid JSON: {e}"));
        let pi = replace_in_strings(&pi, &s(&pi_dir), &s(&ours_dir));
        match (pi.get("ok"), ours.get("error")) {
            (Some(pi_reads), None) => {
                if let Json::Object(o) = &mut ours {
                    o.remove("warnings");
                }
                if let Some(d) = json_diff("", pi_reads, &ours) {
                    problems.push(format!("{name}: {d}"));
                }
            }
            (None, Some(_)) => {
                let pi_msg = pi.get("error").map(Json::to_canonical_string).unwrap_or_default();
                let ours_kind = ours.get("error").and_then(|e| e.get("kind")).map(Json::to_canonical_string);
                if pi_msg.contains("not a valid pi session") && ours_kind.as_deref() != Some("\"invalid_session_file\"")
                {
                    problems.push(format!("{name}: pi refuses it as invalid, ours fails with {ours_kind:?}"));
                }
            }
            (Some(_), Some(e)) => {
                problems.push(format!("{name}: pi reads it, ours fails: {}", e.to_canonical_string()))
            }
            (None, None) => problems.push(format!(
                "{name}: pi fails ({}), ours reads it",
                pi.get("error").map(Json::to_canonical_string).unwrap_or_default()
            )),
        }
    }
    assert!(
        problems.is_empty(),
        "{} of {} files differ from pi:\n{}",
        problems.len(),
        names.len(),
        problems.join("\n")
    );
    assert!(
        names.len() * 10 >= files.len() * 8,
        "too many files skipped as cyclic: {} of {}",
        names.len(),
        files.len()
    );
}

#[test]
fn pi_shaped_sessions_read_exactly_as_pi_reads_them() {
    compare_reads(&corpus(11, 60, |r, i| {
        let lines = {
            let entries = 1 + r.below(40);
            let hand_written = false;
            session_lines(r, Shape { entries, hand_written })
        };
        (format!("pi-{i}.jsonl"), to_bytes(&lines))
    }));
}

#[test]
fn hand_written_sessions_with_odd_ids_and_timestamps_read_as_pi_reads_them() {
    compare_reads(&corpus(12, 80, |r, i| {
        let lines = {
            let entries = 1 + r.below(30);
            let hand_written = true;
            session_lines(r, Shape { entries, hand_written })
        };
        (format!("hand-{i}.jsonl"), to_bytes(&lines))
    }));
}

#[test]
fn legacy_v1_and_v2_files_migrate_as_pi_migrates_them() {
    compare_reads(&corpus(13, 60, |r, i| {
        let lines = {
            let entries = 1 + r.below(25);
            let hand_written = false;
            session_lines(r, Shape { entries, hand_written })
        };
        let lines = if i % 2 == 0 { as_v1(r, &lines) } else { as_v2(&lines) };
        (format!("legacy-{i}.jsonl"), to_bytes(&lines))
    }));
}

#[test]
fn damaged_files_read_as_pi_reads_them() {
    compare_reads(&corpus(14, 24 * DAMAGE.len() / 2, |r, i| {
        let lines = {
            let entries = 1 + r.below(20);
            let hand_written = r.chance(30);
            session_lines(r, Shape { entries, hand_written })
        };
        let kind = DAMAGE[i % DAMAGE.len()];
        let mut bytes = to_bytes(&lines);
        bytes = damage(r, kind, bytes);
        if r.chance(25) {
            let second = DAMAGE[r.below(DAMAGE.len())];
            bytes = damage(r, second, bytes);
        }
        (format!("damaged-{i}-{kind}.jsonl"), bytes)
    }));
}

#[test]
fn files_pi_refuses_or_cannot_read_fail_here_too() {
    let header = r#"{"type":"session","version":3,"id":"abc","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/x"}"#;
    let files: Vec<(String, Vec<u8>)> = vec![
        ("only-blank.jsonl", "\n\n  \n".to_owned()),
        ("message-first.jsonl", format!("{{\"type\":\"message\",\"id\":\"a\",\"parentId\":null}}\n{header}\n")),
        ("numeric-id.jsonl", r#"{"type":"session","version":3,"id":42,"timestamp":"x","cwd":"/"}"#.to_owned() + "\n"),
        ("garbage-then-header.jsonl", format!("garbage\n{header}\n")),
        ("bom-header.jsonl", format!("\u{feff}{header}\n")),
        ("null-message.jsonl", format!("{header}\n{{\"type\":\"message\",\"id\":\"m\",\"parentId\":null,\"timestamp\":\"2025-01-01T00:00:01.000Z\",\"message\":null}}\n")),
        ("numeric-name.jsonl", format!("{header}\n{{\"type\":\"session_info\",\"id\":\"n\",\"parentId\":null,\"timestamp\":\"2025-01-01T00:00:01.000Z\",\"name\":5}}\n")),
        ("v1-with-number-line.jsonl", "{\"type\":\"session\",\"id\":\"old\",\"timestamp\":\"2025-01-01T00:00:00.000Z\",\"cwd\":\"/\"}\n42\n".to_owned()),
        ("version-string.jsonl", r#"{"type":"session","version":"2","id":"v","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/"}"#.to_owned() + "\n"),
        ("version-nan.jsonl", r#"{"type":"session","version":"abc","id":"v","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/"}"#.to_owned() + "\n"),
        ("version-future.jsonl", r#"{"type":"session","version":99,"id":"v","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/"}"#.to_owned() + "\n{\"type\":\"message\",\"message\":{\"role\":\"user\",\"content\":\"no id\"}}\n"),
        ("empty.jsonl", String::new()),
    ]
    .into_iter()
    .map(|(n, c)| (n.to_owned(), c.into_bytes()))
    .collect();
    compare_reads(&files);
}
