//! The catalog index against a disk that fails on demand, in-process: the index reads session files through the
//! `store::Disk` it was opened on (`CatalogIndex::open_on`), and `support/faulty_disk.rs` fails the call a test
//! chooses. A listing, or a catch-up of the searchable text, is failed at each of its calls in turn (`EIO`, and
//! a short read that a reader must ask again for); after each, the index must hold no row or text claiming bytes
//! it did not read: a fresh index on the real disk lists what reading the files lists, a search finds exactly
//! what reading the files finds (no entry twice, none missing), and so does it once the text is caught up.
//! SQLite's own I/O is not behind the seam: `index.rs` fails it through a page limit.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use pi_sessiond::catalog::index::CatalogIndex;
use pi_sessiond::catalog::listing::{Cancel, Catalog};
use pi_sessiond::catalog::search::{search_hit_json, search_sessions, Scope};
use pi_sessiond::session::store::Disk;

use crate::index::{compare, infos_json};
use crate::support::faulty_disk::{Call, Fault, FaultyDisk, EIO};
use crate::support::{s, temp_dir};

/// Words the sessions hold, each somewhere else: a first file's entries, a big entry, appended entries, and the
/// unterminated last line a write in progress leaves.
const QUERIES: [&str; 5] = ["alpha", "bravo", "charlie", "grown", "unfinished"];

fn header(id: &str) -> String {
    format!(
        "{{\"type\":\"session\",\"version\":3,\"id\":\"{id}\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\
         \"cwd\":\"/home/u/proj\"}}\n"
    )
}

fn message(id: &str, parent: Option<&str>, second: u32, text: &str) -> String {
    let parent = parent.map_or("null".to_owned(), |p| format!("\"{p}\""));
    format!(
        "{{\"type\":\"message\",\"id\":\"{id}\",\"parentId\":{parent},\"timestamp\":\"2026-01-01T00:{:02}:{:02}.000Z\",\
         \"message\":{{\"role\":\"user\",\"content\":\"{text}\",\"timestamp\":{second}}}}}\n",
        second / 60,
        second % 60
    )
}

/// Four sessions: small ones, and one over a MiB (its lines take more than one read).
fn lay_out(dir: &Path) {
    let small = |name: &str, word: &str, start: u32| {
        let mut text = header(name);
        let mut parent = None;
        for k in 0..5 {
            let id = format!("{name}{k}");
            text += &message(&id, parent.as_deref(), start + k, &format!("{word} number {k} of {name}"));
            parent = Some(id);
        }
        fs::write(dir.join(format!("2026-01-01T00-00-0{start}-000Z_{name}.jsonl")), text).unwrap();
    };
    small("a", "alpha", 1);
    small("b", "bravo", 2);
    small("c", "alpha bravo", 3);
    let mut big = header("big");
    let filler: String = (0..150_000).map(|k| format!("w{} ", k % 97)).collect();
    big += &message("big0", None, 10, &format!("charlie begins {filler}"));
    big += &message("big1", Some("big0"), 11, &format!("{filler} charlie ends"));
    big += &message("big2", Some("big1"), 12, "alpha after the big ones");
    // (The index reads a file's lines a MiB at a time: this one takes two reads, and can fail between them.)
    assert!(big.len() > 1 << 20, "the big session is over a MiB");
    fs::write(dir.join("2026-01-01T00-00-09-000Z_big.jsonl"), big).unwrap();
}

fn append(path: &Path, bytes: &str) {
    OpenOptions::new().append(true).open(path).unwrap().write_all(bytes.as_bytes()).unwrap();
}

/// Appends entries to two files and leaves a long unterminated line (a write in progress, longer than one of the
/// index's backward scans) at the end of one.
fn grow(dir: &Path) {
    append(&dir.join("2026-01-01T00-00-01-000Z_a.jsonl"), &message("a5", Some("a4"), 30, "grown alpha entry"));
    let big = dir.join("2026-01-01T00-00-09-000Z_big.jsonl");
    append(&big, &message("big3", Some("big2"), 31, "grown bravo entry"));
    let long: String = (0..30_000).map(|k| format!("u{} ", k % 89)).collect();
    let line = message("big4", Some("big3"), 32, &format!("unfinished {long}"));
    append(&big, &line[..line.len() - 10]);
}

fn session_paths(dir: &Path) -> Vec<String> {
    let mut paths: Vec<String> = fs::read_dir(dir).unwrap().map(|e| s(&e.unwrap().path())).collect();
    paths.sort();
    paths
}

/// Every hit of `query` over `dir` (through `index`, or reading the files), as canonical JSON, sorted.
fn hits(index: Option<&mut CatalogIndex>, dir: &str, query: &str) -> Vec<String> {
    let scope = Scope { cwd: None, session_dir: Some(dir) };
    let found =
        search_sessions(query, scope, None, 10_000, Catalog::new("/no-agent", index), &mut |_, _, _| {}).unwrap();
    let mut texts: Vec<String> = found.hits.iter().map(|h| search_hit_json(h).to_canonical_string()).collect();
    texts.sort();
    assert_eq!(texts.len(), found.total, "search {query}: the total counts the hits");
    texts
}

/// What must hold after any failure: a fresh index on the real disk lists and finds what reading the files does,
/// before and after its text is caught up, and afterwards no text is left behind.
fn check_index_against_files(what: &str, dir: &Path, index_path: &str) {
    let d = s(dir);
    let direct = Catalog::new("/no-agent", None).list_all(Some(&d), &mut |_, _| {}).unwrap();
    let mut index = CatalogIndex::open(index_path).unwrap();
    let listed = Catalog::new("/no-agent", Some(&mut index)).list_all(Some(&d), &mut |_, _| {}).unwrap();
    compare(&format!("{what}: the next listing"), &infos_json(&direct), &infos_json(&listed));
    let paths = session_paths(dir);
    let mut found = 0;
    for query in QUERIES {
        let from_files = hits(None, &d, query);
        found += from_files.len();
        assert_eq!(hits(Some(&mut index), &d, query), from_files, "{what}: search {query} before a catch-up");
    }
    assert!(found >= 10, "{what}: the queries find entries in the files");
    index.catch_up_docs(&paths, &Cancel::new(), &mut |_, _| {}).unwrap();
    let (behind, total) = index.unindexed_bytes(&paths).unwrap();
    assert_eq!(behind, 0, "{what}: every listed byte's text is caught up ({total} listed)");
    for query in QUERIES {
        assert_eq!(hits(Some(&mut index), &d, query), hits(None, &d, query), "{what}: search {query} caught up");
    }
}

/// A session directory and an index over it, made fresh for each failed call.
struct Setup {
    tmp: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        let tmp = temp_dir();
        fs::create_dir(tmp.path().join("sessions")).unwrap();
        lay_out(&tmp.path().join("sessions"));
        Setup { tmp }
    }

    fn dir(&self) -> std::path::PathBuf {
        self.tmp.path().join("sessions")
    }

    fn index_path(&self) -> String {
        s(&self.tmp.path().join("index.sqlite"))
    }

    /// Lists and catches up the text on the real disk.
    fn index_fully(&self) {
        let mut index = CatalogIndex::open(&self.index_path()).unwrap();
        Catalog::new("/no-agent", Some(&mut index)).list_all(Some(&s(&self.dir())), &mut |_, _| {}).unwrap();
        index.catch_up_docs(&session_paths(&self.dir()), &Cancel::new(), &mut |_, _| {}).unwrap();
    }
}

/// Runs `step` on an index opened on a faulty disk (failing call `n` with `fault`, or nothing when None) and
/// returns the disk.
fn on_faulty_disk(setup: &Setup, fail: Option<(u64, Fault)>, step: impl FnOnce(&mut CatalogIndex)) -> Arc<FaultyDisk> {
    let faulty = FaultyDisk::new();
    if let Some((n, fault)) = fail {
        faulty.fail_call(n, fault);
    }
    let disk: Arc<dyn Disk> = faulty.clone();
    let mut index = CatalogIndex::open_on(&setup.index_path(), disk).unwrap();
    step(&mut index);
    faulty
}

/// Fails each call `step` makes in turn, after `prepare` laid out the directory and index, checking the index
/// against the files after each; returns how many calls a healthy run makes.
fn fail_each_call(what: &str, prepare: impl Fn(&Setup), step: impl Fn(&mut CatalogIndex, &Path)) -> u64 {
    let healthy = Setup::new();
    prepare(&healthy);
    let disk = on_faulty_disk(&healthy, None, |ix| step(ix, &healthy.dir()));
    let calls = disk.calls();
    let reads = disk.log().iter().filter(|(call, _)| *call == Call::ReadAt).count();
    assert!(reads >= 2, "{what}: a healthy run reads the files in more than one call ({:?})", disk.log());
    check_index_against_files(&format!("{what}, healthy"), &healthy.dir(), &healthy.index_path());
    for fault in [Fault::Errno(EIO), Fault::ShortRead] {
        for n in 1..=calls {
            let setup = Setup::new();
            prepare(&setup);
            let disk = on_faulty_disk(&setup, Some((n, fault)), |ix| step(ix, &setup.dir()));
            let hit = disk.hit();
            assert!(hit.is_some(), "{what}: call {n} of {calls} was made");
            check_index_against_files(&format!("{what}, {fault:?} at {hit:?}"), &setup.dir(), &setup.index_path());
        }
    }
    calls
}

#[test]
fn a_listing_whose_read_of_a_session_fails_at_any_call_leaves_no_row_claiming_it() {
    let list = |index: &mut CatalogIndex, dir: &Path| {
        let d = s(dir);
        let direct = Catalog::new("/no-agent", None).list_all(Some(&d), &mut |_, _| {}).unwrap();
        let direct: Vec<String> =
            direct.iter().map(|e| infos_json(std::slice::from_ref(e)).to_canonical_string()).collect();
        // A listing that failed to read a file may leave it out or fail; what it does answer is what the file says.
        if let Ok(listed) = Catalog::new("/no-agent", Some(index)).list_all(Some(&d), &mut |_, _| {}) {
            for entry in &listed {
                let entry = infos_json(std::slice::from_ref(entry)).to_canonical_string();
                assert!(direct.contains(&entry), "a listing on a failing disk answered {entry}");
            }
        }
    };
    // A cold index reads every file from the start; a warm one goes on from where its rows stopped.
    let cold = fail_each_call("cold listing", |_| {}, list);
    let warm = fail_each_call(
        "listing of grown files",
        |setup| {
            setup.index_fully();
            grow(&setup.dir());
        },
        list,
    );
    assert!(cold > 0 && warm > 0);
}

#[test]
fn a_text_catch_up_failing_at_any_read_leaves_the_searchable_text_whole() {
    let catch_up = |index: &mut CatalogIndex, dir: &Path| {
        // A failed read stops that file's catch-up; the call itself may answer either way.
        let _ = index.catch_up_docs(&session_paths(dir), &Cancel::new(), &mut |_, _| {});
    };
    // From nothing, and from the middle of files whose listing went on past their text.
    let listed = |setup: &Setup| {
        let mut index = CatalogIndex::open(&setup.index_path()).unwrap();
        Catalog::new("/no-agent", Some(&mut index)).list_all(Some(&s(&setup.dir())), &mut |_, _| {}).unwrap();
    };
    fail_each_call("catch-up of listed files", listed, catch_up);
    fail_each_call(
        "catch-up of grown files",
        |setup| {
            setup.index_fully();
            grow(&setup.dir());
            listed(setup);
        },
        catch_up,
    );
}
