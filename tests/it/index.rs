//! The catalog index: a listing answered from it equals a listing that reads every file, after every kind of
//! change a session file goes through (appends, torn and completed lines, truncation, rewrites in place,
//! replacement, deletion, new files); a damaged, foreign or unusable index never fails a request; several
//! processes share one index; and a search over the index finds what reading the files finds.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use pi_sessiond::catalog::index::{CatalogIndex, IndexError, SharedIndex};
use pi_sessiond::catalog::info::session_info_json;
use pi_sessiond::catalog::info::ListedSession;
use pi_sessiond::catalog::listing::{Cancel, Catalog};
use pi_sessiond::catalog::search::search_hit_json;
use pi_sessiond::catalog::search::{search_sessions, Hit, Phase, Scope};
use pi_sessiond::session::json::Json;
use pi_sessiond::session::Error;

use crate::corpus::{damage, session_lines, to_bytes, Rng, Shape, DAMAGE};
use crate::support::{json_diff, s, temp_dir};

pub(crate) fn infos_json(v: &[Arc<ListedSession>]) -> Json {
    Json::Array(v.iter().map(|s| session_info_json(s, true)).collect())
}

fn new_session(r: &mut Rng) -> Vec<u8> {
    let entries = r.below(25);
    let hand_written = r.chance(25);
    let bytes = to_bytes(&session_lines(r, Shape { entries, hand_written }));
    if r.chance(15) {
        let kind = r.pick(DAMAGE);
        damage(r, kind, bytes)
    } else {
        bytes
    }
}

/// Entry lines to append (the body of another generated session, without its header).
fn more_lines(r: &mut Rng) -> Vec<u8> {
    let entries = 1 + r.below(6);
    let lines = session_lines(r, Shape { entries, hand_written: false });
    to_bytes(&lines[1..])
}

fn append(path: &Path, bytes: &[u8]) {
    OpenOptions::new().append(true).open(path).unwrap().write_all(bytes).unwrap();
}

/// Applies one change to the directory and says what it was.
fn change(r: &mut Rng, dir: &Path, n: &mut usize) -> String {
    let mut files: Vec<_> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    if files.is_empty() || r.chance(8) {
        *n += 1;
        let p = dir.join(format!("2026-01-01T00-00-{:02}-000Z_new{n}.jsonl", *n % 60));
        fs::write(&p, new_session(r)).unwrap();
        return format!("add {}", p.display());
    }
    let p = r.pick(&files);
    let len = fs::metadata(&p).unwrap().len();
    let what = r.below(11);
    match what {
        0..=2 => append(&p, &more_lines(r)),
        3 => {
            // A write in progress: half a line, no newline.
            let line = more_lines(r);
            append(&p, &line[..line.len() / 2]);
        }
        4 => append(&p, b"\n"),
        5 => {
            // readline splits on a lone \r too; appended across the index's stopping point.
            let line = more_lines(r);
            let mut mixed = line.clone();
            if let Some(i) = mixed.iter().position(|&b| b == b'\n') {
                mixed[i] = b'\r';
            }
            append(&p, &mixed);
        }
        6 => {
            let to = r.below(len as usize + 1) as u64;
            OpenOptions::new().write(true).open(&p).unwrap().set_len(to).unwrap();
        }
        7 => fs::write(&p, new_session(r)).unwrap(), // rewritten in place: same inode, other content
        8 => {
            // Same size, last bytes changed (within one mtime tick, possibly).
            let mut bytes = fs::read(&p).unwrap();
            let k = bytes.len();
            for b in bytes.iter_mut().skip(k.saturating_sub(24)) {
                if b.is_ascii_digit() {
                    *b = b'0' + (*b - b'0' + 1) % 10;
                }
            }
            fs::write(&p, bytes).unwrap();
        }
        9 => {
            // Replaced by rename: a new inode under the same name.
            let tmp = dir.with_extension("tmp");
            fs::write(&tmp, new_session(r)).unwrap();
            fs::rename(&tmp, &p).unwrap();
        }
        _ => fs::remove_file(&p).unwrap(),
    }
    format!("change {what} to {}", p.display())
}

pub(crate) fn compare(what: &str, direct: &Json, indexed: &Json) {
    if let Some(d) = json_diff("", direct, indexed) {
        panic!("{what}: the index differs from reading the files: {d}");
    }
}

#[test]
fn listings_from_the_index_equal_reading_the_files_after_every_kind_of_change() {
    let tmp = temp_dir();
    let dir = tmp.path().join("sessions");
    fs::create_dir(&dir).unwrap();
    let mut r = Rng::new(5);
    let mut n = 0;
    for i in 0..24 {
        fs::write(dir.join(format!("2026-01-01T00-00-00-{i:03}Z_s{i}.jsonl")), new_session(&mut r)).unwrap();
    }
    let d = s(&dir);
    let mut index = CatalogIndex::open(&s(&tmp.path().join("index.sqlite"))).unwrap();
    let mut history = Vec::new();
    for round in 0..120 {
        let direct = Catalog::new("/no-agent", None).list_all(Some(&d), &mut |_, _| {}).unwrap();
        let indexed = Catalog::new("/no-agent", Some(&mut index)).list_all(Some(&d), &mut |_, _| {}).unwrap();
        compare(&format!("round {round} after {history:?}: listAll"), &infos_json(&direct), &infos_json(&indexed));
        // Without allMessagesText (alternating, so rows are read and continued both ways): the same listing,
        // minus that one field.
        let lean =
            Catalog::new("/no-agent", Some(&mut index)).without_text().list_all(Some(&d), &mut |_, _| {}).unwrap();
        let stripped = Json::Array(direct.iter().map(|s| session_info_json(s, false)).collect());
        // (The entries may keep their text, shared with listings that return it: rendering leaves it out.)
        let lean = Json::Array(lean.iter().map(|s| session_info_json(s, false)).collect());
        compare(&format!("round {round}: listAll without text"), &stripped, &lean);
        let cwd = "/home/u/proj";
        let direct = Catalog::new("/no-agent", None).list(cwd, Some(&d), &mut |_, _| {}).unwrap();
        let indexed = Catalog::new("/no-agent", Some(&mut index)).list(cwd, Some(&d), &mut |_, _| {}).unwrap();
        compare(&format!("round {round}: list"), &infos_json(&direct), &infos_json(&indexed));
        for info in direct.iter().take(3) {
            let Json::String(id) = &info.info.id else { continue };
            let id = id.to_string_lossy();
            let a = Catalog::new("/no-agent", None).find_by_id(cwd, &id, Some(&d)).unwrap();
            let b = Catalog::new("/no-agent", Some(&mut index)).find_by_id(cwd, &id, Some(&d)).unwrap();
            assert_eq!(a, b, "round {round}: findById {id}");
        }
        if round % 10 == 0 {
            for query in ["hello", "re:t[aeiou]st", "\"the answer\"", "a", "user proj", "parser please", "sep"] {
                let hits = |ix: Option<&mut CatalogIndex>, limit: usize| {
                    let scope = Scope { cwd: None, session_dir: Some(&d) };
                    let catalog = Catalog::new("/no-agent", ix);
                    search_sessions(query, scope, None, limit, catalog, &mut |_, _, _| {}).unwrap().hits
                };
                let texts = |h: &[Hit]| {
                    let mut v: Vec<String> = h.iter().map(|h| search_hit_json(h).to_canonical_string()).collect();
                    v.sort();
                    v
                };
                let (direct, indexed) = (texts(&hits(None, 10_000)), texts(&hits(Some(&mut index), 10_000)));
                let only_direct: Vec<_> = direct.iter().filter(|h| !indexed.contains(h)).collect();
                let only_indexed: Vec<_> = indexed.iter().filter(|h| !direct.contains(h)).collect();
                assert!(
                    only_direct.is_empty() && only_indexed.is_empty(),
                    "round {round} after {history:?}: search {query}: only when reading the files: {only_direct:#?}\n\
                     only from the index: {only_indexed:#?}"
                );
                // With a limit the index stops early; the ranking must still be the full search's: the same
                // scores and times in the same order (entries that tie on both may come in another order).
                for limit in [1, 4] {
                    let rank = |h: &[Hit]| h.iter().map(|h| (h.score, h.timestamp.to_bits())).collect::<Vec<_>>();
                    let (a, b) = (hits(None, limit), hits(Some(&mut index), limit));
                    assert_eq!(
                        rank(&a),
                        rank(&b),
                        "round {round}: search {query} limit {limit}: {:?} {:?}",
                        texts(&a),
                        texts(&b)
                    );
                    for h in texts(&b) {
                        assert!(direct.contains(&h), "round {round}: {query} limit {limit}: {h} is not a hit");
                    }
                }
            }
        }
        history.push(change(&mut r, &dir, &mut n));
        if history.len() > 4 {
            history.remove(0);
        }
    }
}

#[test]
fn a_first_search_on_an_empty_index_answers_byte_for_byte_as_a_warm_index_and_as_reading_the_files() {
    // Issue 21: the first search reads the files (the index holds no text yet) and the index takes the text
    // afterwards. Copies of sessions under other names make hits that tie on score and time, so the order
    // between them is pinned too, and one file ends in half a line (a write in progress).
    let tmp = temp_dir();
    let dir = tmp.path().join("sessions");
    fs::create_dir(&dir).unwrap();
    let mut r = Rng::new(21);
    for i in 0..16 {
        let bytes = new_session(&mut r);
        fs::write(dir.join(format!("2026-01-01T00-00-00-{i:03}Z_s{i}.jsonl")), &bytes).unwrap();
        if i % 3 == 0 {
            fs::write(dir.join(format!("2026-01-02T00-00-00-{i:03}Z_copy{i}.jsonl")), &bytes).unwrap();
        }
    }
    let half = more_lines(&mut r);
    append(&dir.join("2026-01-01T00-00-00-001Z_s1.jsonl"), &half[..half.len() / 2]);
    let d = s(&dir);
    let scope = Scope { cwd: None, session_dir: Some(&d) };
    let queries = ["hello", "re:t[aeiou]st", "\"the answer\"", "a", "user proj", "parser please", "sep", "e"];
    let limits = [1, 2, 4, 10, 10_000];
    let json = |h: &[Hit]| Json::Array(h.iter().map(search_hit_json).collect()).to_canonical_string();
    let ask = |ix: Option<&mut CatalogIndex>, query: &str, limit: usize| {
        search_sessions(query, scope, None, limit, Catalog::new("/no-agent", ix), &mut |_, _, _| {}).unwrap()
    };
    let mut direct = Vec::new();
    let mut counted = Vec::new();
    for query in queries {
        for limit in limits {
            let found = ask(None, query, limit);
            direct.push(json(&found.hits));
            counted.push((found.total, found.sessions));
        }
    }
    assert!(direct.iter().any(|h| h.len() > 2), "some query finds something");
    let mut index = CatalogIndex::open(&s(&tmp.path().join("index.sqlite"))).unwrap();
    let mut k = 0;
    for query in queries {
        for limit in limits {
            // A fresh index each time: every one of these is a first search.
            let mut cold_index = CatalogIndex::open(&s(&tmp.path().join(format!("cold-{k}.sqlite")))).unwrap();
            let cold = ask(Some(&mut cold_index), query, limit);
            assert!(!cold.unindexed.is_empty(), "{query} limit {limit}: the first search reads the files");
            assert_eq!(json(&cold.hits), direct[k], "{query} limit {limit}: first search against reading the files");
            assert_eq!((cold.total, cold.sessions), counted[k], "{query} limit {limit}: the totals, first search");
            k += 1;
        }
    }
    // The index takes the text the first search read; later searches ask it.
    let first = ask(Some(&mut index), "hello", 10);
    index.catch_up_docs(&first.unindexed, &Cancel::new(), &mut |_, _| {}).unwrap();
    let mut k = 0;
    for query in queries {
        for limit in limits {
            let warm = ask(Some(&mut index), query, limit);
            assert!(warm.unindexed.is_empty(), "{query} limit {limit}: a warm search asks the index");
            assert_eq!(json(&warm.hits), direct[k], "{query} limit {limit}: warm index against reading the files");
            assert_eq!(
                (warm.total, warm.sessions),
                counted[k],
                "{query} limit {limit}: the totals, warm and from the files"
            );
            k += 1;
        }
    }
}

/// A directory of six generated sessions under `tmp`, and its listing read from the files.
fn six_sessions(tmp: &Path) -> (String, Json) {
    let dir = tmp.join("sessions");
    fs::create_dir(&dir).unwrap();
    let mut r = Rng::new(9);
    for i in 0..6 {
        fs::write(dir.join(format!("s{i}.jsonl")), new_session(&mut r)).unwrap();
    }
    let d = s(&dir);
    let expected = infos_json(&Catalog::new("/no-agent", None).list_all(Some(&d), &mut |_, _| {}).unwrap());
    (d, expected)
}

#[test]
fn a_damaged_or_unusable_index_never_fails_a_listing() {
    let tmp = temp_dir();
    let (d, expected) = six_sessions(tmp.path());
    let list_with = |index: &mut CatalogIndex| {
        infos_json(&Catalog::new("/no-agent", Some(index)).list_all(Some(&d), &mut |_, _| {}).unwrap())
    };
    let path = s(&tmp.path().join("index.sqlite"));
    let mut index = CatalogIndex::open(&path).unwrap();
    compare("new index", &expected, &list_with(&mut index));
    drop(index);

    // An index written by another version: its rows are not trusted, it is rebuilt.
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute("UPDATE pi_sessiond_catalog SET value = 'from-the-future' WHERE key = 'schema'", []).unwrap();
        conn.execute("UPDATE files SET message_count = 4242", []).unwrap();
    }
    let mut index = CatalogIndex::open(&path).unwrap();
    compare("other schema version", &expected, &list_with(&mut index));
    drop(index);

    // A damaged header page: still ours (its schema says so), so it is reset in place and rebuilt.
    let mut bytes = fs::read(&path).unwrap();
    for b in bytes.iter_mut().take(100) {
        *b ^= 0x5a;
    }
    fs::write(&path, bytes).unwrap();
    let inode = fs::metadata(&path).unwrap().ino();
    let mut index = CatalogIndex::open(&path).unwrap();
    compare("damaged header", &expected, &list_with(&mut index));
    drop(index);
    assert_eq!(fs::metadata(&path).unwrap().ino(), inode, "the damaged index was reset in place, not replaced");

    // Somewhere no index can be created: the listing reads the files.
    let blocked = s(&tmp.path().join("a-file").join("index.sqlite"));
    fs::write(tmp.path().join("a-file"), b"x").unwrap();
    let shared = SharedIndex::new(Some(blocked));
    let listed = shared.with(|ix| {
        assert!(ix.is_none(), "an index under a regular file cannot exist");
        infos_json(&Catalog::new("/no-agent", ix).list_all(Some(&d), &mut |_, _| {}).unwrap())
    });
    compare("no index possible", &expected, &listed);
}

#[test]
fn an_index_path_holding_someone_elses_file_is_refused_and_left_as_it_is() {
    // Issue 11: `--index PATH` turned a text file into a SQLite database and dropped another application's
    // `files` table.
    let tmp = temp_dir();
    let (d, expected) = six_sessions(tmp.path());
    let listed_through = |path: &str| {
        let shared = SharedIndex::new(Some(path.to_owned()));
        shared.with(|ix| {
            assert!(ix.is_none(), "{path} is not ours: no index");
            infos_json(&Catalog::new("/no-agent", ix).list_all(Some(&d), &mut |_, _| {}).unwrap())
        })
    };

    let text = s(&tmp.path().join("notes.txt"));
    let grocery_list = b"this is not an index, it is a grocery list\n".repeat(200);
    fs::write(&text, &grocery_list).unwrap();
    let refused = CatalogIndex::open(&text).unwrap_err();
    assert!(matches!(refused, IndexError::Foreign { .. }), "{refused}");
    compare("a text file", &expected, &listed_through(&text));
    assert_eq!(fs::read(&text).unwrap(), grocery_list, "the text file is unchanged");

    let theirs = s(&tmp.path().join("their.db"));
    {
        let conn = rusqlite::Connection::open(&theirs).unwrap();
        conn.execute_batch("CREATE TABLE files(name TEXT); INSERT INTO files VALUES ('keep me');").unwrap();
    }
    let before = fs::read(&theirs).unwrap();
    let refused = CatalogIndex::open(&theirs).unwrap_err();
    assert!(refused.to_string().contains("another application's database"), "{refused}");
    compare("another application's database", &expected, &listed_through(&theirs));
    assert_eq!(fs::read(&theirs).unwrap(), before, "their database is unchanged");
    let siblings: Vec<String> = fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("notes.txt") || n.starts_with("their.db"))
        .collect();
    assert_eq!(siblings.len(), 2, "no journal, WAL or shared-memory file was made beside them: {siblings:?}");

    let marked = s(&tmp.path().join("marked.db"));
    {
        let conn = rusqlite::Connection::open(&marked).unwrap();
        conn.execute_batch("PRAGMA application_id = 42;").unwrap();
    }
    assert!(matches!(CatalogIndex::open(&marked), Err(IndexError::Foreign { .. })), "an empty database of theirs");

    // Damaged, and nothing says it was ever ours: left alone too.
    let damaged = s(&tmp.path().join("damaged.db"));
    let mut bytes = before.clone();
    for b in bytes.iter_mut().take(100) {
        *b ^= 0x5a;
    }
    fs::write(&damaged, &bytes).unwrap();
    assert!(matches!(CatalogIndex::open(&damaged), Err(IndexError::Foreign { .. })));
    assert_eq!(fs::read(&damaged).unwrap(), bytes);

    // An empty file, and an index of the first schema (before databases were marked), are ours to use.
    let empty = s(&tmp.path().join("empty.sqlite"));
    fs::write(&empty, b"").unwrap();
    let mut index = CatalogIndex::open(&empty).unwrap();
    compare(
        "an empty file",
        &expected,
        &infos_json(&Catalog::new("/no-agent", Some(&mut index)).list_all(Some(&d), &mut |_, _| {}).unwrap()),
    );
    let legacy = s(&tmp.path().join("legacy.sqlite"));
    {
        let conn = rusqlite::Connection::open(&legacy).unwrap();
        conn.execute_batch(
            "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL); INSERT INTO meta VALUES ('schema', '1');
             CREATE TABLE files(id INTEGER PRIMARY KEY, path TEXT); CREATE TABLE texts(id INTEGER PRIMARY KEY);
             CREATE TABLE docs(id INTEGER PRIMARY KEY);
             CREATE VIRTUAL TABLE docs_fts USING fts5(text, content = '', tokenize = 'trigram');",
        )
        .unwrap();
    }
    let mut index = CatalogIndex::open(&legacy).unwrap();
    compare(
        "a schema 1 index",
        &expected,
        &infos_json(&Catalog::new("/no-agent", Some(&mut index)).list_all(Some(&d), &mut |_, _| {}).unwrap()),
    );
}

#[test]
fn several_processes_share_one_index_and_each_lists_exactly() {
    let tmp = temp_dir();
    let dir = tmp.path().join("sessions");
    fs::create_dir(&dir).unwrap();
    let mut r = Rng::new(13);
    for i in 0..40 {
        fs::write(dir.join(format!("s{i:02}.jsonl")), new_session(&mut r)).unwrap();
    }
    let d = s(&dir);
    let index = s(&tmp.path().join("shared.sqlite"));
    for round in 0..3 {
        let expected = {
            let out = std::process::Command::new(crate::support::sidecar::binary())
                .args(["ls", "--json", "--all", "--dir", &d, "--no-index"])
                .output()
                .unwrap();
            Json::parse(&out.stdout).unwrap()
        };
        // Four processes list at once through one index file (cold in round 0, then after appends).
        let children: Vec<_> = (0..4)
            .map(|_| {
                let mut c = std::process::Command::new(crate::support::sidecar::binary());
                c.args(["ls", "--json", "--all", "--dir", &d, "--index", &index]).stdout(std::process::Stdio::piped());
                c.spawn().unwrap()
            })
            .collect();
        for c in children {
            let out = c.wait_with_output().unwrap();
            assert!(out.status.success(), "round {round}: ls failed");
            compare(&format!("round {round}: concurrent ls"), &expected, &Json::parse(&out.stdout).unwrap());
        }
        for _ in 0..10 {
            let mut n = 100 + round * 10;
            change(&mut r, &dir, &mut n);
        }
    }
}

#[test]
fn a_same_size_rewrite_within_one_mtime_tick_is_still_noticed() {
    let tmp = temp_dir();
    let dir = tmp.path().join("sessions");
    fs::create_dir(&dir).unwrap();
    let file = dir.join("s.jsonl");
    let header = r#"{"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/p"}"#;
    let user = |text: &str| {
        format!(
            r#"{{"type":"message","id":"a","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{{"role":"user","content":"{text}","timestamp":1767225601000}}}}"#
        )
    };
    fs::write(&file, format!("{header}\n{}\n", user("first draft"))).unwrap();
    let mtime = fs::metadata(&file).unwrap().modified().unwrap();
    let d = s(&dir);
    let mut index = CatalogIndex::open(&s(&tmp.path().join("index.sqlite"))).unwrap();
    let listed = Catalog::new("/no-agent", Some(&mut index)).list_all(Some(&d), &mut |_, _| {}).unwrap();
    assert_eq!(listed[0].info.first_message.to_string_lossy(), "first draft");
    // Rewritten in place to the same size, and the clock has not ticked: size, mtime and inode all match.
    fs::write(&file, format!("{header}\n{}\n", user("final draft"))).unwrap();
    fs::File::options().write(true).open(&file).unwrap().set_modified(mtime).unwrap();
    let listed = Catalog::new("/no-agent", Some(&mut index)).list_all(Some(&d), &mut |_, _| {}).unwrap();
    assert_eq!(listed[0].info.first_message.to_string_lossy(), "final draft");
}

/// Sets a file's or directory's mtime to `secs_ago` seconds before now (past the racy window).
fn age(path: &Path, secs_ago: u64) {
    let t = std::time::SystemTime::now() - std::time::Duration::from_secs(secs_ago);
    fs::File::open(path).unwrap().set_modified(t).unwrap();
}

#[test]
fn a_directorys_remembered_names_are_used_only_while_its_mtime_is_unchanged() {
    let tmp = temp_dir();
    let dir = tmp.path().join("sessions");
    fs::create_dir(&dir).unwrap();
    let mut r = Rng::new(11);
    for i in 0..5 {
        let f = dir.join(format!("2026-01-01T00-00-00-00{i}Z_s{i}.jsonl"));
        fs::write(&f, new_session(&mut r)).unwrap();
        age(&f, 3600);
    }
    let d = s(&dir);
    let mut index = CatalogIndex::open(&s(&tmp.path().join("index.sqlite"))).unwrap();
    // Each step changes the set of names, then ages the directory to a new, settled mtime: the names are read
    // again because the mtime differs from the remembered one, not because it is recent.
    type Step<'a> = (&'a str, Box<dyn Fn() + 'a>);
    let steps: Vec<Step> = vec![
        ("nothing", Box::new(|| {})),
        (
            "add",
            Box::new(|| {
                fs::write(dir.join("2026-02-01T00-00-00-000Z_new.jsonl"), new_session(&mut Rng::new(12))).unwrap()
            }),
        ),
        ("remove", Box::new(|| fs::remove_file(dir.join("2026-01-01T00-00-00-002Z_s2.jsonl")).unwrap())),
        (
            "rename",
            Box::new(|| {
                fs::rename(dir.join("2026-01-01T00-00-00-000Z_s0.jsonl"), dir.join("2026-03-01T00-00-00-000Z_s0.jsonl"))
                    .unwrap()
            }),
        ),
    ];
    for (i, (what, step)) in steps.iter().enumerate() {
        step();
        age(&dir, 3600 - 60 * i as u64);
        for _ in 0..2 {
            let direct = Catalog::new("/no-agent", None).list("/home/u/proj", Some(&d), &mut |_, _| {});
            let indexed = Catalog::new("/no-agent", Some(&mut index)).list("/home/u/proj", Some(&d), &mut |_, _| {});
            compare(&format!("after {what}"), &infos_json(&direct.unwrap()), &infos_json(&indexed.unwrap()));
        }
    }
    let names: Vec<String> = Catalog::new("/no-agent", Some(&mut index))
        .list_all(Some(&d), &mut |_, _| {})
        .unwrap()
        .iter()
        .map(|s| s.info.path.rsplit('/').next().unwrap().to_owned())
        .collect();
    assert!(names.contains(&"2026-03-01T00-00-00-000Z_s0.jsonl".to_owned()), "{names:?}");
    assert!(!names.iter().any(|n| n.ends_with("_s2.jsonl") || n == "2026-01-01T00-00-00-000Z_s0.jsonl"), "{names:?}");
    assert_eq!(names.len(), 5);
}

#[test]
fn an_index_is_kept_when_another_process_holds_its_write_lock_or_the_disk_is_full() {
    // Issue 11: the index was deleted on lock contention or a full disk, while other processes held it open.
    let tmp = temp_dir();
    let (d, _) = six_sessions(tmp.path());
    let dir = tmp.path().join("sessions");
    let direct = || infos_json(&Catalog::new("/no-agent", None).list_all(Some(&d), &mut |_, _| {}).unwrap());
    let through = |ix: &mut CatalogIndex| {
        infos_json(&Catalog::new("/no-agent", Some(ix)).list_all(Some(&d), &mut |_, _| {}).unwrap())
    };
    let path = s(&tmp.path().join("index.sqlite"));
    let mut index = CatalogIndex::open(&path).unwrap();
    compare("first listing", &direct(), &through(&mut index));
    let inode = fs::metadata(&path).unwrap().ino();
    let other = rusqlite::Connection::open(&path).unwrap();
    let rows = |conn: &rusqlite::Connection| -> i64 {
        conn.query_row("SELECT count(*) FROM files", [], |r| r.get(0)).unwrap()
    };
    assert_eq!(rows(&other), 6);
    let mut r = Rng::new(31);

    // Another process holds the write lock for longer than this one waits.
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    index.set_busy_timeout(std::time::Duration::from_millis(20)).unwrap();
    fs::write(dir.join("s6.jsonl"), new_session(&mut r)).unwrap();
    compare("while another process holds the write lock", &direct(), &through(&mut index));
    assert_eq!(rows(&other), 6, "the other process's view of the index is intact");
    // A process starting meanwhile opens the index as it is (it needs no write to do so).
    let mut late = CatalogIndex::open(&path).unwrap();
    late.set_busy_timeout(std::time::Duration::from_millis(20)).unwrap();
    compare("a process opening the index meanwhile", &direct(), &through(&mut late));
    assert_eq!(fs::metadata(&path).unwrap().ino(), inode, "the index file was not replaced");
    other.execute_batch("COMMIT").unwrap();
    compare("after the lock is released", &direct(), &through(&mut index));
    assert_eq!(rows(&other), 7);

    // The disk is full: the database cannot grow by a page.
    let conn = index.connection_for_tests();
    let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap();
    conn.pragma_update(None, "max_page_count", pages).unwrap();
    for i in 0..40 {
        fs::write(dir.join(format!("more{i}.jsonl")), new_session(&mut r)).unwrap();
    }
    compare("with the disk full", &direct(), &through(&mut index));
    assert_eq!(rows(&other), 7, "nothing was lost or deleted");
    index.connection_for_tests().pragma_update(None, "max_page_count", 1 << 30).unwrap();
    compare("with space again", &direct(), &through(&mut index));
    assert_eq!(rows(&other), 47);
    assert_eq!(fs::metadata(&path).unwrap().ino(), inode, "the index file was never replaced");
}

#[test]
fn a_cancelled_listing_lookup_or_search_stops_at_its_next_check() {
    let tmp = temp_dir();
    let dir = tmp.path().join("sessions");
    fs::create_dir(&dir).unwrap();
    let mut r = Rng::new(41);
    for i in 0..30 {
        fs::write(dir.join(format!("s{i:02}.jsonl")), new_session(&mut r)).unwrap();
    }
    let d = s(&dir);
    let expected = infos_json(&Catalog::new("/no-agent", None).list_all(Some(&d), &mut |_, _| {}).unwrap());
    for with_index in [false, true] {
        let mut index = with_index.then(|| CatalogIndex::open(&s(&tmp.path().join("index.sqlite"))).unwrap());
        fn catalog<'a>(index: &'a mut Option<CatalogIndex>, cancel: &Cancel) -> Catalog<'a> {
            Catalog::new("/no-agent", index.as_mut()).with_cancel(cancel.clone())
        }
        // Cancelled at the first progress report: no further file is read, and the answer is an error.
        let cancel = Cancel::new();
        let mut reports = 0;
        let got = catalog(&mut index, &cancel).list_all(Some(&d), &mut |_, _| {
            reports += 1;
            cancel.cancel();
        });
        assert!(matches!(got, Err(Error::Cancelled)), "index {with_index}: listAll");
        assert_eq!(reports, 1, "index {with_index}: files read after the cancel");
        let cancel = Cancel::new();
        let got = catalog(&mut index, &cancel).list("/home/u/proj", Some(&d), &mut |_, _| cancel.cancel());
        assert!(matches!(got, Err(Error::Cancelled)), "index {with_index}: list");
        let cancel = Cancel::new();
        let scope = Scope { cwd: None, session_dir: Some(&d) };
        let got =
            search_sessions("hello", scope, None, 10, catalog(&mut index, &cancel), &mut |_, _, _| cancel.cancel());
        assert!(matches!(got, Err(Error::Cancelled)), "index {with_index}: search");
        let cancel = Cancel::new();
        cancel.cancel();
        let got = catalog(&mut index, &cancel).find_by_id("/home/u/proj", "x", Some(&d));
        assert!(matches!(got, Err(Error::Cancelled)), "index {with_index}: findById");
        // What the cancelled work left behind does not change the next listing.
        let listed = infos_json(&catalog(&mut index, &Cancel::new()).list_all(Some(&d), &mut |_, _| {}).unwrap());
        compare(&format!("index {with_index}: after cancelled work"), &expected, &listed);
    }
}

#[test]
fn a_search_in_progress_holds_up_no_other_catalog_call_of_its_process() {
    // Issue 11: a search held the process's one index handle for its whole run, so every other listing,
    // lookup and search of the process waited for it.
    let tmp = temp_dir();
    let (d, expected) = six_sessions(tmp.path());
    let shared = Arc::new(SharedIndex::new(Some(s(&tmp.path().join("index.sqlite")))));
    let (paused_tx, paused) = std::sync::mpsc::channel();
    let (resume, resume_rx) = std::sync::mpsc::channel::<()>();
    let searcher = {
        let (shared, d) = (shared.clone(), d.clone());
        std::thread::spawn(move || {
            shared.with(|ix| {
                let scope = Scope { cwd: None, session_dir: Some(&d) };
                let mut paused_once = false;
                search_sessions("hello", scope, None, 10, Catalog::new("/no-agent", ix), &mut |phase, _, _| {
                    if phase == Phase::Indexing && !paused_once {
                        paused_once = true;
                        paused_tx.send(()).unwrap();
                        resume_rx.recv().unwrap();
                    }
                })
                .unwrap()
            })
        })
    };
    paused.recv_timeout(std::time::Duration::from_secs(60)).expect("the search reached its indexing phase");
    let (listed_tx, listed) = std::sync::mpsc::channel();
    {
        let (shared, d) = (shared.clone(), d.clone());
        std::thread::spawn(move || {
            let json = shared.with(|ix| {
                assert!(ix.is_some(), "the listing has an index connection of its own");
                infos_json(&Catalog::new("/no-agent", ix).list_all(Some(&d), &mut |_, _| {}).unwrap())
            });
            listed_tx.send(json).unwrap();
        });
    }
    let got =
        listed.recv_timeout(std::time::Duration::from_secs(60)).expect("a listing ran while the search was paused");
    compare("listing beside a search", &expected, &got);
    resume.send(()).unwrap();
    searcher.join().unwrap();
}

#[test]
fn a_damaged_row_is_read_again_from_its_file_on_the_next_listing() {
    // A row the index cannot trust (its text row gone, columns that do not decode or contradict each other, a
    // generation that is not a number) must not answer for its file, even though the file's stat matches it.
    let tmp = temp_dir();
    let dir = tmp.path().join("sessions");
    fs::create_dir(&dir).unwrap();
    let mut r = Rng::new(51);
    for i in 0..8 {
        let f = dir.join(format!("s{i}.jsonl"));
        fs::write(&f, to_bytes(&session_lines(&mut r, Shape { entries: 3 + i, hand_written: false }))).unwrap();
        age(&f, 3600);
    }
    let d = s(&dir);
    let expected = infos_json(&Catalog::new("/no-agent", None).list_all(Some(&d), &mut |_, _| {}).unwrap());
    let path = s(&tmp.path().join("index.sqlite"));
    let through = |lean: bool| {
        // A new connection each time, so no memo answers in the index's place.
        let mut index = CatalogIndex::open(&path).unwrap();
        let catalog = Catalog::new("/no-agent", Some(&mut index));
        let mut catalog = if lean { catalog.without_text() } else { catalog };
        infos_json(&catalog.list_all(Some(&d), &mut |_, _| {}).unwrap())
    };
    compare("first listing", &expected, &through(false));
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(&format!(
            "DELETE FROM texts WHERE id = (SELECT id FROM files WHERE path = '{d}/s0.jsonl');
             UPDATE files SET header = '{{not json' WHERE path = '{d}/s1.jsonl';
             UPDATE files SET offset = size + 10 WHERE path = '{d}/s2.jsonl';
             UPDATE files SET message_count = 'many' WHERE path = '{d}/s3.jsonl';
             UPDATE files SET gen = 'soon', head = X'00' WHERE path = '{d}/s4.jsonl';
             UPDATE files SET rejected = 1 WHERE path = '{d}/s5.jsonl';"
        ))
        .unwrap();
    }
    let stripped = Json::Array(
        Catalog::new("/no-agent", None)
            .list_all(Some(&d), &mut |_, _| {})
            .unwrap()
            .iter()
            .map(|s| session_info_json(s, false))
            .collect(),
    );
    let lean = |v: Json| match v.into_array() {
        Ok(items) => Json::Array(
            items
                .into_iter()
                .map(|mut i| {
                    if let Json::Object(o) = &mut i {
                        o.remove("allMessagesText");
                    }
                    i
                })
                .collect(),
        ),
        Err(other) => other,
    };
    compare("lean listing over damaged rows", &stripped, &lean(through(true)));
    compare("listing over damaged rows", &expected, &through(false));
    compare("listing after the rows were replaced", &expected, &through(false));
}

/// Processes that start at once on a machine with no index yet race to create it. Each must take the one that
/// wins as ours: one taken for "another application's database" is never used by that process again, whose
/// searches then miss what it writes (seen once as a failure of `rpc_search`'s writer test).
#[test]
fn processes_creating_the_index_at_the_same_moment_each_take_it_as_theirs() {
    const OPENERS: usize = 6;
    for round in 0..60 {
        let tmp = temp_dir();
        let path = s(&tmp.path().join("index.sqlite"));
        let start = Arc::new(std::sync::Barrier::new(OPENERS));
        let openers: Vec<_> = (0..OPENERS)
            .map(|_| {
                let (path, start) = (path.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    CatalogIndex::open(&path).map(drop)
                })
            })
            .collect();
        for opener in openers {
            match opener.join().unwrap() {
                Ok(()) => {}
                // Busy past the timeout is a fault a later request recovers from; a refusal is not.
                Err(e) => assert!(!matches!(e, IndexError::Foreign { .. }), "round {round}: {e}"),
            }
        }
    }
}
