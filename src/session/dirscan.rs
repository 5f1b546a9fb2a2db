//! Session directories: pi's default session directory (created when missing) and the directory a cwd-scoped
//! call uses, pi's `findMostRecentSession`, and the stamps (`identity::FileStamp`) of many names in one directory
//! through its descriptor. The engine's second file-system room beside `store` (the catalog builds its listings
//! and the team push its scans on these).
//!
//! A warm listing of thousands of sessions is mostly these stats, so they avoid both the path walk of a full-path
//! `stat` and `std::fs::Metadata` (which can only come from a path or a `DirEntry`, and so would tie the stats to a
//! fresh `readdir`).

use std::fs;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::error::Result;
use super::identity::{epoch_ns, FileStamp};
use super::js::sort::sort_like_v8;
use super::json::Json;
use super::paths;
use super::store::{self, read_header_bounded};

/// The stamp ([`FileStamp`]: identity, size, `mtime`, `ctime`, regular or not) of each of `names` in `dir`, in
/// order, following symlinks as pi's `statSync` does; None where it failed. Fails when `dir` cannot be opened (the
/// caller tells a vanished directory from a process out of descriptors).
///
/// Many names are stat'ed on two threads: a warm listing is these system calls and little else (the kernel's
/// path lookup of each name), and they take no lock that the other thread would wait on.
pub fn stamp_names<S: AsRef<str> + Sync>(dir: &str, names: &[S]) -> std::io::Result<Vec<Option<FileStamp>>> {
    let fd = rustix::fs::open(dir, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    let stamp_all = |names: &[S]| names.iter().map(|name| stamp_at(&fd, name.as_ref())).collect::<Vec<_>>();
    if names.len() < PARALLEL_STATS_FROM || store::parallelism() < 2 {
        return Ok(stamp_all(names));
    }
    let (first, second) = names.split_at(names.len() / 2);
    Ok(std::thread::scope(|s| {
        let later = std::thread::Builder::new().spawn_scoped(s, || stamp_all(second));
        let mut stamps = stamp_all(first);
        match later {
            Ok(later) => stamps.extend(later.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))),
            // No thread to be had: this one does the rest.
            Err(_) => stamps.extend(stamp_all(second)),
        }
        stamps
    }))
}

/// How many names make [`stamp_names`] use a second thread: below this, starting it costs more than it saves.
const PARALLEL_STATS_FROM: usize = 128;

/// The stamp of `name` in the directory `dir`, following symlinks; None when it cannot be stat'ed.
// The casts are no-ops on Linux; `struct stat`'s fields are narrower or signed elsewhere (macOS).
#[allow(clippy::unnecessary_cast)]
fn stamp_at(dir: &rustix::fd::OwnedFd, name: &str) -> Option<FileStamp> {
    let st = rustix::fs::statat(dir, name, AtFlags::empty()).ok()?;
    Some(FileStamp {
        dev: st.st_dev as u64,
        ino: st.st_ino as u64,
        size: st.st_size as u64,
        mtime_ns: epoch_ns(st.st_mtime as i64, st.st_mtime_nsec as i64),
        ctime_ns: epoch_ns(st.st_ctime as i64, st.st_ctime_nsec as i64),
        regular: FileType::from_raw_mode(st.st_mode as _) == FileType::RegularFile,
    })
}

/// The directories in `dir` (and symbolic links, which may name one), as paths, in Node's `readdir` order: the
/// project directories of a sessions root, as pi's `listAll` walks them.
pub fn subdirectories(dir: &str) -> std::io::Result<Vec<String>> {
    let names = names_like_node(dir, |entry, _| entry.file_type().is_ok_and(|ft| ft.is_dir() || ft.is_symlink()))?;
    Ok(names.iter().map(|name| super::paths::join(&[dir, name])).collect())
}

/// The `*.jsonl` names in `dir`, in Node's `readdir` order.
pub fn jsonl_names(dir: &str) -> std::io::Result<Vec<String>> {
    names_like_node(dir, |_, name| name.as_encoded_bytes().ends_with(b".jsonl"))
}

/// The names in `dir` that `keep` keeps, in the order Node's `readdir` gives them: libuv sorts a directory's names
/// by their bytes (`strcmp`), whatever order the file system keeps them in, and pi's orders break their ties in
/// that one. Names that are not UTF-8 come out as Node decodes them (with U+FFFD), sorted by their bytes.
fn names_like_node(dir: &str, keep: impl Fn(&fs::DirEntry, &std::ffi::OsStr) -> bool) -> std::io::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if keep(&entry, &name) {
            names.push(name);
        }
    }
    names.sort_unstable_by(|a, b| a.as_encoded_bytes().cmp(b.as_encoded_bytes()));
    Ok(names.into_iter().map(|n| n.to_string_lossy().into_owned()).collect())
}

/// pi's exported `getDefaultSessionDir(cwd, agentDir)`: the default directory for `cwd`, created if missing.
pub fn default_session_dir(cwd: &str, agent_dir: &str) -> Result<String> {
    let dir = paths::default_session_dir_path(cwd, agent_dir);
    store::ensure_dir(&dir)?;
    Ok(dir)
}

/// The directory a cwd-scoped call uses and whether it filters by cwd: the given directory (filtered unless it is
/// the cwd's default one) or the default directory (created).
pub fn directory_for(cwd: &str, session_dir: Option<&str>, agent_dir: &str) -> Result<(String, bool)> {
    match session_dir {
        Some(d) if !d.is_empty() => {
            let dir = paths::normalize_path(d);
            let filter = !paths::paths_equal(&dir, &paths::default_session_dir_path(cwd, agent_dir));
            Ok((dir, filter))
        }
        _ => Ok((default_session_dir(cwd, agent_dir)?, false)),
    }
}

/// The `*.jsonl` entries of `dir` in Node's `readdir` order, each with `stat`'s answer (followed
/// through symlinks, as pi's `statSync`; None if it failed).
pub fn jsonl_entries(dir: &str) -> std::io::Result<Vec<(String, Option<FileStamp>)>> {
    let names = jsonl_names(dir)?;
    let stats = stamp_names(dir, &names)?;
    Ok(names.into_iter().zip(stats).collect())
}

/// pi's `sessionCwdMatches`: a non-empty cwd that resolves to `resolved_cwd`.
pub fn cwd_matches(cwd: &str, resolved_cwd: &str) -> bool {
    !cwd.is_empty() && paths::resolve_path(cwd) == resolved_cwd
}

/// pi's `findMostRecentSession(sessionDir, cwd?)`: the newest-mtime file with a valid header (and, with `cwd`,
/// a matching header cwd).
pub fn find_most_recent_session(dir: &str, cwd: Option<&str>) -> Option<String> {
    let dir = paths::normalize_path(dir);
    let resolved_cwd = cwd.map(paths::resolve_path);
    let mut files = Vec::new();
    for (name, meta) in jsonl_entries(&dir).ok()? {
        // pi's statSync throws on a vanished file, and the whole lookup gives up. A file that is not regular keeps
        // its place in the order but is never read (pi would wait on a FIFO for ever).
        let meta = meta?;
        files.push((paths::join(&[&dir, &name]), meta.regular, meta.mtime_ms()));
    }
    sort_like_v8(&mut files, |a, b| b.2 - a.2);
    files.into_iter().filter(|(_, regular, _)| *regular).map(|(p, _, _)| p).find(|p| {
        let Some(header) = read_header_bounded(p) else { return false };
        match &resolved_cwd {
            None => true,
            Some(rc) => {
                let c = header.get("cwd").and_then(Json::as_js_str).map(|c| c.to_string_lossy());
                c.is_some_and(|c| cwd_matches(&c, rc))
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_through_the_directory_equal_stamps_by_path_and_follow_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        fs::write(dir.path().join("a.jsonl"), b"hello\n").unwrap();
        std::os::unix::fs::symlink(dir.path().join("a.jsonl"), dir.path().join("link.jsonl")).unwrap();
        let got = stamp_names(d, &["a.jsonl", "link.jsonl", "missing.jsonl"]).unwrap();
        let by_path = FileStamp::of_path(&format!("{d}/a.jsonl")).unwrap().unwrap();
        assert_eq!(got, vec![Some(by_path), Some(by_path), None]);
        assert_eq!(by_path.size, 6);
        assert_eq!(stamp_names(&format!("{d}/nope"), &["a.jsonl"]).unwrap_err().kind(), std::io::ErrorKind::NotFound);
    }

    #[test]
    fn a_fifo_or_a_directory_is_stamped_as_not_regular_without_being_opened() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        rustix::fs::mkfifoat(rustix::fs::CWD, dir.path().join("pipe.jsonl"), Mode::RUSR | Mode::WUSR).unwrap();
        fs::create_dir(dir.path().join("dir.jsonl")).unwrap();
        fs::write(dir.path().join("file.jsonl"), b"x").unwrap();
        let got: Vec<bool> = stamp_names(d, &["pipe.jsonl", "dir.jsonl", "file.jsonl"])
            .unwrap()
            .into_iter()
            .map(|s| s.unwrap().regular)
            .collect();
        assert_eq!(got, vec![false, false, true]);
        assert!(!FileStamp::of_path(&format!("{d}/pipe.jsonl")).unwrap().unwrap().regular);
    }

    #[test]
    fn many_names_are_stamped_in_their_order_on_two_threads_each_with_its_own_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_string_lossy().into_owned();
        // Sizes tell the files apart; a missing name and a directory sit among them, in both halves.
        let mut names = Vec::new();
        for i in 0..(PARALLEL_STATS_FROM * 3) {
            let name = match i {
                7 | 300 => format!("missing-{i}.jsonl"),
                200 => {
                    std::fs::create_dir(format!("{d}/dir-{i}.jsonl")).unwrap();
                    format!("dir-{i}.jsonl")
                }
                _ => {
                    std::fs::write(format!("{d}/{i}.jsonl"), vec![b'x'; i]).unwrap();
                    format!("{i}.jsonl")
                }
            };
            names.push(name);
        }
        let stamps = stamp_names(&d, &names).unwrap();
        assert_eq!(stamps.len(), names.len());
        for (i, stamp) in stamps.iter().enumerate() {
            match i {
                7 | 300 => assert!(stamp.is_none(), "{i}"),
                200 => assert!(!stamp.unwrap().regular, "{i}"),
                _ => assert_eq!(stamp.map(|s| (s.size, s.regular)), Some((i as u64, true)), "{i}"),
            }
        }
    }
}
