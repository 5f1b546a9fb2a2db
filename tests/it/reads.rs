//! Reads of existing files, against pi: every generated file (pi-shaped, hand-written, legacy, damaged) must give
//! pi's `getHeader`, `getEntries`, `getLeafId`, `getTree`, `getBranch`, `buildContextEntries`,
//! `buildSessionProjection`, `buildSessionContext`, `getSessionName`, `getSessionId`, `getCwd`, `getEntryCount`,
//! and fail where pi fails.

use pi_sessiond::cli::inspect_with;
use pi_sessiond::session::context::ContextOptions;
use pi_sessiond::session::json::{Json, Object};
use pi_sessiond::session::store::WarningKind;
use pi_sessiond::session::{Env, SessionManager};

use crate::corpus::{as_v1, as_v2, damage, session_lines, to_bytes, with_unusable_entry, Rng, Shape, DAMAGE, UNUSABLE};
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

/// Compares inspect with pi's reads on every file, read by read; panics listing every difference. Where pi's
/// `open` throws, ours must fail too (and refuse a file pi calls invalid as invalid); where pi opens the file,
/// every read pi answers must give pi's value, and every read pi throws on must fail alone, listed in
/// `errors`, while the others still answer. Returns how many files pi opened but failed some read on.
fn compare_reads(files: &[(String, Vec<u8>)]) -> usize {
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
    req.insert("command", Json::str("eachRead"));
    req.insert("files", Json::Array(names.iter().map(|n| Json::str(&s(&pi_dir.join(n)))).collect()));
    let Ok(answers) = oracle(&Json::Object(req)).into_array() else { panic!("oracle") };
    let det = Deterministic::new();
    let mut problems = Vec::new();
    let mut partly_read = 0;
    for (name, pi) in names.iter().zip(answers) {
        let path = s(&ours_dir.join(name));
        let before = std::fs::read(&path).unwrap();
        let mut out = Vec::new();
        inspect_with(&path, PI_CONTEXT, det.env(), &mut out);
        assert_eq!(std::fs::read(&path).unwrap(), before, "{name}: inspect must not modify the file");
        let mut ours = Json::parse(&out).unwrap_or_else(|e| panic!("{name}: inspect printed invalid JSON: {e}"));
        let pi = replace_in_strings(&pi, &s(&pi_dir), &s(&ours_dir));
        match (pi.get("reads").and_then(Json::as_object), ours.get("error")) {
            (Some(pi_reads), None) => {
                let our_errors = match &mut ours {
                    Json::Object(o) => {
                        o.remove("warnings");
                        o.remove("errors")
                    }
                    _ => None,
                };
                // pi's answers, as the one object inspect prints when every read answers.
                partly_read += usize::from(pi_reads.iter().any(|(_, a)| a.get("error").is_some()));
                let mut expected = Object::new();
                for (read, answer) in pi_reads.iter() {
                    let failed_here = our_errors.as_ref().and_then(|e| e.get(read.to_string_lossy().as_str()));
                    match (answer.get("ok"), answer.get("error"), failed_here) {
                        (Some(v), _, None) => expected.insert(read.clone(), v.clone()),
                        (None, None, None) => {} // undefined: the member is left out
                        (_, Some(_), Some(_)) => {}
                        (_, Some(e), None) => problems
                            .push(format!("{name}: {read}: pi throws ({}), ours answers", e.to_canonical_string())),
                        (_, None, Some(e)) => problems
                            .push(format!("{name}: {read}: pi answers, ours fails: {}", e.to_canonical_string())),
                    }
                }
                if let Some(d) = json_diff("", &Json::Object(expected), &ours) {
                    problems.push(format!("{name}: {d}"));
                }
            }
            (None, Some(_)) => {
                let pi_msg = pi.get("open").map(Json::to_canonical_string).unwrap_or_default();
                let ours_kind = ours.get("error").and_then(|e| e.get("kind")).map(Json::to_canonical_string);
                if pi_msg.contains("not a valid pi session") && ours_kind.as_deref() != Some("\"invalid_session_file\"")
                {
                    problems.push(format!("{name}: pi refuses it as invalid, ours fails with {ours_kind:?}"));
                }
            }
            (Some(_), Some(e)) => {
                problems.push(format!("{name}: pi opens it, ours fails: {}", e.to_canonical_string()))
            }
            (None, None) => problems.push(format!(
                "{name}: pi fails to open it ({}), ours reads it",
                pi.get("open").map(Json::to_canonical_string).unwrap_or_default()
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
    partly_read
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

#[test]
fn sessions_with_entries_some_reads_throw_on_open_and_give_pis_other_reads() {
    let partly_read = compare_reads(&corpus(15, 80, |r, i| {
        let lines = {
            let entries = 1 + r.below(25);
            let hand_written = r.chance(20);
            session_lines(r, Shape { entries, hand_written })
        };
        let kind = UNUSABLE[i % UNUSABLE.len()];
        let mut lines = with_unusable_entry(r, kind, lines);
        if r.chance(30) {
            let second = UNUSABLE[r.below(UNUSABLE.len())];
            lines = with_unusable_entry(r, second, lines);
        }
        (format!("unusable-{i}-{kind}.jsonl"), to_bytes(&lines))
    }));
    assert!(partly_read >= 20, "only {partly_read} of 80 files have a read pi throws on");
}

#[test]
fn a_context_edit_without_replacement_opens_and_only_the_reads_pi_throws_on_fail_h27() {
    let header = r#"{"type":"session","version":3,"id":"h27","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/x"}"#;
    let user = r#"{"type":"message","id":"aaaa","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"hi","timestamp":1}}"#;
    let edit = r#"{"type":"context_edit","id":"bbbb","parentId":"aaaa","timestamp":"2025-01-01T00:00:02.000Z","targetId":"aaaa"}"#;
    let file = ("h27.jsonl".to_owned(), format!("{header}\n{user}\n{edit}\n").into_bytes());
    assert_eq!(compare_reads(std::slice::from_ref(&file)), 1);
    let dir = temp_dir();
    let path = s(&dir.path().join(&file.0));
    std::fs::write(&path, &file.1).unwrap();
    let mut out = Vec::new();
    assert_eq!(inspect_with(&path, PI_CONTEXT, Env::system(), &mut out), 1, "not every read answered");
    let reads = Json::parse(&out).unwrap();
    assert_eq!(reads.get("leafId"), Some(&Json::str("bbbb")));
    let Some(Json::Array(warnings)) = reads.get("warnings") else { panic!() };
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].get("line"), Some(&Json::number(3.0)));
    assert_eq!(warnings[0].get("kind"), Some(&Json::str(WarningKind::UnusableEntry.as_str())));
    let message = |read: &str| {
        let e = reads.get("errors").and_then(|e| e.get(read)).unwrap_or_else(|| panic!("{read} did not fail"));
        e.get("message").and_then(Json::as_js_str).unwrap().to_string_lossy()
    };
    for read in ["projection", "context"] {
        assert!(
            message(read).starts_with(r#"line 3: entry "bbbb": context edit has no replacement"#),
            "{}",
            message(read)
        );
    }
}

#[test]
fn kept_skeletons_give_back_every_record_line_and_warning_as_read_odd_ids_and_values_included_issue_21() {
    use pi_sessiond::session::kept::{Keep, KEEP_FROM_BYTES};
    use pi_sessiond::session::store::{Durability, LoadedFile, SessionFile};
    let tmp = temp_dir();
    let path = s(&tmp.path().join("odd.jsonl"));
    let mut text = String::from(
        r#"{"type":"session","version":3,"id":"h","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p","x":[1,{"y":null}]}
{"type":"message","id":7,"parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"a \ud83d b"}}
{"type":"message","id":true,"parentId":7,"timestamp":"bad","message":null}
{"type":"message","id":{"o":1},"parentId":[1],"message":{"role":"assistant","content":null,"stopReason":"stop"}}
{"type":"label","id":"\ud800x","parentId":true,"targetId":7,"label":{"not":"a string"},"timestamp":12}
{"type":"session_info","id":"n","parentId":"\ud800x","name":1e400}
{"type":"compaction","id":"c","parentId":"n","firstKeptEntryId":7,"firstKeptEntryIndex":-0,"summary":"s"}
{"type":"context_edit","id":"e","parentId":"c","targetId":null}
{"type":"custom","id":"u","customType":"ext","data":{"big":[1,2,3]}}
not json at all
0
[1,2]
   
{"type":"session","version":3,"id":"second","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/q"}
"#,
    );
    let mut n = 0;
    while (text.len() as u64) < KEEP_FROM_BYTES + 4096 {
        text.push_str(&format!(
            r#"{{"type":"message","id":"m{n}","parentId":"e","message":{{"role":"toolResult","content":[{{"type":"text","text":"{}"}}]}}}}"#,
            "t".repeat(2000)
        ));
        text.push('\n');
        n += 1;
    }
    std::fs::write(&path, &text).unwrap();
    // Object ids are identities, new on every read; everything else must be exactly as read.
    let objects = regex::Regex::new(r"Object\(\d+\)").unwrap();
    let shown = |l: &LoadedFile| {
        objects
            .replace_all(
                &format!("{:?}\n{:?}\n{:?}\n{} {}", l.records, l.lines, l.warnings, l.len, l.needs_final_newline),
                "Object",
            )
            .into_owned()
    };
    let (_, read) = SessionFile::open(&path, Durability::None).unwrap();
    let keep = Keep::in_dir(&s(&tmp.path().join("kept")));
    let (_, first) = keep.open(&path, Durability::None).unwrap();
    assert!(std::path::Path::new(&keep.file_for(&path)).exists(), "the first open keeps what it read");
    // A mark only the kept file holds (its checksum made again), to see that the next open reads from it.
    let kept_at = keep.file_for(&path);
    let mut kept = std::fs::read(&kept_at).unwrap();
    let at = kept.windows(3).position(|w| w == b"ext").unwrap();
    kept[at..at + 3].copy_from_slice(b"EXT");
    let body = kept.len() - 4;
    let sum = crc32fast::hash(&kept[..body]).to_le_bytes();
    kept[body..].copy_from_slice(&sum);
    std::fs::write(&kept_at, &kept).unwrap();
    let (_, mut again) = keep.open(&path, Durability::None).unwrap();
    assert_eq!(shown(&first), shown(&read));
    let marked =
        again.records.iter_mut().filter_map(|r| r.skeleton.as_mut()).find(|k| k.windows(3).any(|w| w == b"EXT"));
    let marked = marked.expect("the second open comes from the kept file");
    let mut unmarked = marked.to_vec();
    let at = unmarked.windows(3).position(|w| w == b"EXT").unwrap();
    unmarked[at..at + 3].copy_from_slice(b"ext");
    *marked = unmarked.into();
    assert_eq!(shown(&again), shown(&read), "what comes back from the kept file is what was read");
    assert!(read.warnings.len() >= 4, "the odd lines are read as odd: {:?}", read.warnings);
}

#[test]
fn the_tree_warnings_kept_with_the_skeletons_are_the_walks_own_and_are_found_again_once_the_file_changes_issue_21() {
    use pi_sessiond::session::kept::{Keep, KEEP_FROM_BYTES};
    let tmp = temp_dir();
    let keep = Keep::in_dir(&s(&tmp.path().join("kept")));
    let warnings = |path: &str, keep: Option<&std::sync::Arc<Keep>>| {
        let env = Env { keep: keep.cloned(), ..Env::system() };
        let m = SessionManager::open(path, None, None, env).unwrap();
        m.warnings().iter().map(|w| format!("{} {:?} {}", w.line, w.kind, w.message)).collect::<Vec<_>>()
    };
    let line = |id: &str, parent: &str| {
        format!(
            r#"{{"type":"message","id":"{id}","parentId":{parent},"timestamp":"2025-01-01T00:00:01.000Z","message":{{"role":"user","content":"{}"}}}}"#,
            "w".repeat(3000)
        ) + "\n"
    };
    for version in [3, 2] {
        let path = s(&tmp.path().join(format!("tree-v{version}.jsonl")));
        let mut text = format!(
            r#"{{"type":"session","version":{version},"id":"h{version}","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}}"#
        ) + "\n";
        // Every problem the walk reports: a missing parent, a self-parent, a cycle of two, a repeated id.
        for l in
            [line("a", "null"), line("b", r#""gone""#), line("c", r#""c""#), line("d", r#""e""#), line("e", r#""d""#)]
        {
            text.push_str(&l);
        }
        let mut n = 0;
        while (text.len() as u64) < KEEP_FROM_BYTES + 4096 {
            text.push_str(&line(
                &format!("m{n}"),
                &format!(r#""{}""#, if n == 0 { "a".to_owned() } else { format!("m{}", n - 1) }),
            ));
            n += 1;
        }
        text.push_str(&line("a", r#""m0""#));
        std::fs::write(&path, &text).unwrap();
        let fresh = warnings(&path, None);
        for kind in ["MissingParent", "SelfParent", "ParentCycle", "DuplicateId"] {
            assert!(fresh.iter().any(|w| w.contains(kind)), "v{version}: no {kind} in {fresh:?}");
        }
        assert_eq!(warnings(&path, Some(&keep)), fresh, "v{version}: the open that keeps");
        assert_eq!(warnings(&path, Some(&keep)), fresh, "v{version}: the open from the kept file");

        // A mark only the kept file holds (its checksum made again): the next open must show it for a file at
        // pi's version, whose warnings are kept, and must not for an older one, which is migrated and walked again.
        let kept_at = keep.file_for(&path);
        let mut kept = std::fs::read(&kept_at).unwrap();
        let marks = kept.windows(5).filter(|w| w == b"shown").count();
        for at in (0..kept.len() - 5).filter(|&at| &kept[at..at + 5] == b"shown").collect::<Vec<_>>() {
            kept[at..at + 5].copy_from_slice(b"SHOWN");
        }
        let body = kept.len() - 4;
        let sum = crc32fast::hash(&kept[..body]).to_le_bytes();
        kept[body..].copy_from_slice(&sum);
        std::fs::write(&kept_at, &kept).unwrap();
        let marked = warnings(&path, Some(&keep));
        if version == 3 {
            assert!(marks >= 2, "the missing and the self-parent are kept: {marks}");
            assert!(marked.iter().any(|w| w.contains("SHOWN")), "v3 comes from the kept file: {marked:?}");
        } else {
            assert_eq!(marks, 0, "nothing is kept of an older file's tree");
            assert_eq!(marked, fresh);
        }

        // Grown: a new problem, and the kept ones are not believed any more.
        use std::io::Write;
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(line("z", r#""nowhere""#).as_bytes())
            .unwrap();
        let grown = warnings(&path, None);
        assert!(grown.iter().any(|w| w.contains("nowhere")));
        assert_eq!(warnings(&path, Some(&keep)), grown, "v{version}: grown");
        assert_eq!(warnings(&path, Some(&keep)), grown, "v{version}: grown, opened again");
    }
}

#[test]
fn a_message_contents_blocks_found_in_the_opens_pass_are_its_last_contents_and_fail_as_any_value_fails() {
    use pi_sessiond::session::json::scan::{scan_document, validate_document};
    fn blocks(line: &str) -> Vec<&str> {
        let doc = pi_sessiond::session::json::scan::scan_document(line.as_bytes()).unwrap();
        doc.content_blocks.iter().map(|b| &line[b.value.clone()]).collect()
    }
    let line = r#"{"message":{"content":[{"type":"text","text":"a"}, 7 ,[1]],"role":"user"}}"#;
    assert_eq!(blocks(line), [r#"{"type":"text","text":"a"}"#, "7", "[1]"]);
    let doc = scan_document(line.as_bytes()).unwrap();
    assert_eq!(doc.content_blocks[0].members.len(), 2);
    // The last `content` and the last `message` win, as JSON.parse keeps them; one that is no array leaves none.
    assert_eq!(blocks(r#"{"message":{"content":[1],"content":[2,3]}}"#), ["2", "3"]);
    assert!(blocks(r#"{"message":{"content":[1],"content":"text"}}"#).is_empty());
    assert!(blocks(r#"{"message":{"content":[1]},"message":{"role":"user"}}"#).is_empty());
    assert!(blocks(r#"{"message":{"content":[1]},"message":null}"#).is_empty());
    assert!(blocks(r#"{"content":[1],"message":{"x":{"content":[2]}}}"#).is_empty());
    // Broken arrays fail where and as the plain validator says.
    for bad in [
        r#"{"message":{"content":[,1]}}"#,
        r#"{"message":{"content":[1,]}}"#,
        r#"{"message":{"content":[1 2]}}"#,
        r#"{"message":{"content":[{"a":1,}]}}"#,
        r#"{"message":{"content":[{"a" 1}]}}"#,
        r#"{"message":{"content":[1"#,
        r#"{"message":{"content":["#,
        r#"{"message":{"content":[{"a":[1}]}}"#,
        r#"{"message":{"content":[]]}}"#,
    ] {
        assert_eq!(scan_document(bad.as_bytes()).err(), validate_document(bad.as_bytes()).err(), "{bad}");
        assert!(validate_document(bad.as_bytes()).is_err(), "{bad}");
    }
}
