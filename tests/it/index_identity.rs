//! The catalog index judged by `identity.rs`, as the engine and the team push are: once a row has settled (its
//! file unchanged past the racy window, so the row answers without reading the file), a rewrite in place to the
//! same length with the mtime set back (only the change time tells), a truncation and a replacement by rename are
//! each noticed, by the rows, by a process's memo and by the searchable text, with the answer of a fresh index.

use std::fs;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use pi_sessiond::catalog::index::CatalogIndex;
use pi_sessiond::catalog::listing::{Cancel, Catalog};
use pi_sessiond::catalog::search::{search_hit_json, search_sessions, Scope};
use pi_sessiond::session::json::Json;

use crate::index::{compare, infos_json};
use crate::support::{s, temp_dir};

/// A session of `n` user messages, each `word` followed by its number, every line of the same length whatever
/// the word (so a word can be swapped for another of its length in place).
fn worded_session(id: &str, word: &str, n: usize) -> String {
    let header =
        format!(r#"{{"type":"session","version":3,"id":"{id}","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/p"}}"#);
    let mut lines = vec![header];
    for k in 0..n {
        let parent = if k == 0 { "null".to_owned() } else { format!(r#""m{}""#, k - 1) };
        lines.push(format!(
            r#"{{"type":"message","id":"m{k}","parentId":{parent},"timestamp":"2026-01-01T00:00:{k:02}.000Z","message":{{"role":"user","content":"{word} number {k:02}","timestamp":1767225600000}}}}"#
        ));
    }
    lines.join("\n") + "\n"
}

/// Sets `path`'s mtime back to `mtime` after `write` changed it, repeating the write until the change time shows
/// it (the file system's clock ticks every few milliseconds): a change only `ctime` can tell.
fn write_keeping_mtime(path: &Path, write: impl Fn()) {
    let before = fs::metadata(path).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        write();
        fs::File::options().write(true).open(path).unwrap().set_modified(before.modified().unwrap()).unwrap();
        let after = fs::metadata(path).unwrap();
        assert_eq!(after.mtime_nsec(), before.mtime_nsec(), "the mtime is set back");
        if (after.ctime(), after.ctime_nsec()) != (before.ctime(), before.ctime_nsec()) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "the change time never moved");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

#[test]
fn a_settled_index_notices_a_same_length_rewrite_with_its_mtime_set_back_a_truncation_and_a_rename() {
    // Issue 25: the index kept no change time, so once a row had settled (its file unchanged past the racy
    // window), a rewrite in place to the same length with the mtime set back was answered from the stale row.
    let tmp = temp_dir();
    let dir = tmp.path().join("sessions");
    fs::create_dir(&dir).unwrap();
    let (rewritten, truncated, renamed) =
        (dir.join("rewritten.jsonl"), dir.join("truncated.jsonl"), dir.join("renamed.jsonl"));
    fs::write(&rewritten, worded_session("r", "alphabet", 8)).unwrap();
    fs::write(&truncated, worded_session("t", "truncate", 8)).unwrap();
    fs::write(&renamed, worded_session("n", "original", 8)).unwrap();
    let d = s(&dir);
    let path = s(&tmp.path().join("index.sqlite"));
    let list = |index: Option<&mut CatalogIndex>| {
        infos_json(&Catalog::new("/no-agent", index).list_all(Some(&d), &mut |_, _| {}).unwrap())
    };
    let scope = Scope { cwd: None, session_dir: Some(&d) };
    let searched = |index: Option<&mut CatalogIndex>, query: &str| {
        search_sessions(query, scope, None, 100, Catalog::new("/no-agent", index), &mut |_, _, _| {}).unwrap()
    };
    let search = |index: Option<&mut CatalogIndex>, query: &str| {
        let found = searched(index, query);
        (Json::Array(found.hits.iter().map(search_hit_json).collect()).to_canonical_string(), found.total)
    };
    // Listed, and the searchable text taken in, so later searches ask the index.
    let mut index = CatalogIndex::open(&path).unwrap();
    list(Some(&mut index));
    let paths: Vec<String> = [&rewritten, &truncated, &renamed].iter().map(|p| s(p)).collect();
    index.catch_up_docs(&paths, &Cancel::new(), &mut |_, _| {}).unwrap();
    // The rows as a listing that came back after the racy window settled them (it writes when it looked), here
    // moved 3 s on rather than waited for; and a name only the rows hold, to show they now answer unread.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("UPDATE files SET indexed_at_ns = indexed_at_ns + 3000000000, name = CAST('settled' AS BLOB)")
        .unwrap();
    let mut settled = CatalogIndex::open(&path).unwrap();
    let names = list(Some(&mut settled)).to_canonical_string();
    assert_eq!(names.matches(r#""name":"settled""#).count(), 3, "settled rows answer unread: {names}");

    // Rewritten in place, the same length, the mtime set back: only the change time moved.
    let body = fs::read_to_string(&rewritten).unwrap();
    let at = body.find("alphabet number 04").unwrap() as u64;
    assert!(at > 256 && at + 64 < body.len() as u64, "the change is outside the first and last bytes kept");
    write_keeping_mtime(&rewritten, || {
        fs::File::options().write(true).open(&rewritten).unwrap().write_all_at(b"zeppelin", at).unwrap()
    });
    // Truncated to its first lines, the mtime set back.
    let cut = worded_session("t", "truncate", 5).len() as u64;
    write_keeping_mtime(&truncated, || fs::File::options().write(true).open(&truncated).unwrap().set_len(cut).unwrap());
    // Replaced by rename with another session of the same length and the same mtime.
    let other = dir.with_extension("tmp");
    fs::write(&other, worded_session("n", "replaced", 8)).unwrap();
    let mtime = fs::metadata(&renamed).unwrap().modified().unwrap();
    fs::File::options().write(true).open(&other).unwrap().set_modified(mtime).unwrap();
    fs::rename(&other, &renamed).unwrap();
    assert_eq!(fs::metadata(&renamed).unwrap().len(), fs::metadata(&rewritten).unwrap().len());

    let expected = list(None);
    let fresh = |k: &str| CatalogIndex::open(&s(&tmp.path().join(format!("fresh-{k}.sqlite")))).unwrap();
    compare("a fresh index", &expected, &list(Some(&mut fresh("list"))));
    compare("the settled connection (its memo)", &expected, &list(Some(&mut settled)));
    compare("another connection (the rows)", &expected, &list(Some(&mut CatalogIndex::open(&path).unwrap())));
    let queries = ["zeppelin", "alphabet", "truncate number 06", "truncate number 03", "original", "replaced"];
    for query in queries {
        let want = search(Some(&mut fresh(query)), query);
        assert_eq!(search(None, query), want, "{query}: reading the files and a fresh index agree");
        assert_eq!(search(Some(&mut index), query), want, "{query}: the first connection");
        assert_eq!(search(Some(&mut CatalogIndex::open(&path).unwrap()), query), want, "{query}: a new connection");
    }
    // And once the index holds the new text, from the index alone.
    index.catch_up_docs(&paths, &Cancel::new(), &mut |_, _| {}).unwrap();
    assert_eq!(index.unindexed_bytes(&paths).unwrap().0, 0, "every listed byte has its text in the index");
    for query in queries {
        assert!(searched(Some(&mut index), query).unindexed.is_empty(), "{query}: answered from the index's text");
        assert_eq!(search(Some(&mut index), query), search(None, query), "{query}: the index's text, caught up");
    }
    assert_eq!(search(None, "zeppelin").1, 1, "the rewritten entry is found");
    assert_eq!(search(None, "original").1, 0, "the replaced file's entries are gone");
}
