//! Finding sessions on disk: pi's `list`, `listAll`, `findById`, `findMostRecentSession` and the default session
//! directory, with pi's directory rules, cwd filter and ordering.
//!
//! Orders matter as much as contents: `list` loads files in filename-descending order (`localeCompare`, i.e. ICU
//! root collation, not byte order) and then sorts by `modified` descending with V8's stable sort, so ties keep
//! the load order; `listAll` orders candidates by mtime then basename. The same comparators are used here.
//!
//! Only regular files are read (a FIFO or a device named `*.jsonl` is skipped, where pi hangs or reads without
//! end), and every loop checks a [`Cancel`] flag, so a host that gives up on a listing stops its work.

use std::collections::HashMap;
use std::sync::Arc;

use icu_collator::options::CollatorOptions;
use icu_collator::{Collator, CollatorBorrowed};

pub use super::cancel::{Cancel, CancellableRead};
use super::index::{CatalogIndex, FileToIndex, IndexError};
use super::info::{session_info, ListedSession};
use crate::session::dirscan::{self, cwd_matches, directory_for, jsonl_entries};
use crate::session::error::{Error, Result};
use crate::session::identity::FileStamp;
use crate::session::js::sort::sort_like_v8;
use crate::session::json::{JsString, Json};
use crate::session::paths;
use crate::session::store::read_header_bounded;

/// The root-locale collator behind [`locale_compare`].
pub fn collator() -> CollatorBorrowed<'static> {
    Collator::try_new(Default::default(), CollatorOptions::default()).expect("root collation data is compiled in")
}

/// `a.localeCompare(b)` under the root locale (what Node's default `en-US` collation is).
pub fn locale_compare(collator: &CollatorBorrowed<'_>, a: &str, b: &str) -> f64 {
    match collator.compare(a, b) {
        std::cmp::Ordering::Less => -1.0,
        std::cmp::Ordering::Equal => 0.0,
        std::cmp::Ordering::Greater => 1.0,
    }
}

/// A file's listing entry, read from the file (None: not a session, or not a regular file).
fn listed(path: &str, stamp: &FileStamp, with_text: bool, cancel: &Cancel) -> Option<Arc<ListedSession>> {
    if !stamp.regular {
        return None;
    }
    session_info(path, stamp.mtime_ms(), with_text, cancel).map(|i| Arc::new(ListedSession::new(i)))
}

/// Sorts infos by `modified` descending, V8-stably (ties keep their order).
fn sort_infos(infos: &mut [Arc<ListedSession>]) {
    sort_like_v8(infos, |a, b| b.info.modified - a.info.modified);
}

/// pi's load order of `dir`'s sessions (`listSessionsFromDir`): `readdir` order, stably sorted by filename
/// descending with `localeCompare`.
fn read_load_order(dir: &str, cancel: &Cancel) -> Option<Vec<String>> {
    let mut names = read_load_order_unsorted(dir, cancel)?;
    let c = collator();
    sort_like_v8(&mut names, |a, b| locale_compare(&c, b, a));
    Some(names)
}

/// Answers pi's listing calls (`list`, `listAll`, `findById`) for one agent directory: from the catalog index
/// when there is one (falling back to the files on any index failure), else by reading every file.
pub struct Catalog<'a> {
    agent_dir: &'a str,
    index: Option<&'a mut CatalogIndex>,
    with_text: bool,
    cancel: Cancel,
}

impl<'a> Catalog<'a> {
    /// Listings of `agent_dir`'s sessions, through `index` if given, with every `SessionInfo` field.
    pub fn new(agent_dir: &'a str, index: Option<&'a mut CatalogIndex>) -> Catalog<'a> {
        Catalog { agent_dir, index, with_text: true, cancel: Cancel::new() }
    }

    /// Stops every call at its next check once `cancel` is set, with [`Error::Cancelled`].
    pub fn with_cancel(mut self, cancel: Cancel) -> Catalog<'a> {
        self.cancel = cancel;
        self
    }

    /// The cancellation flag the calls check.
    pub fn cancel(&self) -> &Cancel {
        &self.cancel
    }

    /// Leaves `allMessagesText` out of the listings: it is most of their size (every user and assistant text),
    /// and a host that searches with `sessions/search` does not need it.
    pub fn without_text(mut self) -> Catalog<'a> {
        self.with_text = false;
        self
    }

    /// The index, if there is one.
    pub fn index(&mut self) -> Option<&mut CatalogIndex> {
        self.index.as_deref_mut()
    }

    /// Answers through the index with `run`, or says (once per call, in the log) why it cannot and gives None:
    /// the caller then reads the files. A cancellation is not a reason to read the files.
    fn through_index<T>(
        &mut self,
        what: &str,
        run: impl FnOnce(&mut CatalogIndex, &Cancel) -> Result<T, IndexError>,
    ) -> Result<Option<T>> {
        let cancel = self.cancel.clone();
        let Some(index) = self.index() else { return Ok(None) };
        match run(index, &cancel) {
            // A file the index could not read for want of descriptors fails the call, not just the file.
            Ok(v) => cancel.check().map(|()| Some(v)),
            Err(IndexError::Cancelled) => Err(Error::Cancelled),
            Err(e) => {
                tracing::warn!("catalog index unavailable ({e}); reading {what} directly");
                cancel.check()?;
                Ok(None)
            }
        }
    }

    /// pi's `listSessionsFromDir`: every `*.jsonl` session in `dir`, loaded in filename-descending order.
    fn list_dir(&mut self, dir: &str, on_progress: &mut dyn FnMut(usize, usize)) -> Result<Vec<Arc<ListedSession>>> {
        self.cancel.check()?;
        if !paths::as_path(dir).exists() {
            return Ok(Vec::new());
        }
        // The names in load order: from the index's snapshot while the directory is unchanged (collating
        // thousands of names is a large part of a warm listing), else read now.
        let cancel = self.cancel.clone();
        let names = match self.index() {
            Some(ix) => ix.load_order(dir, || read_load_order(dir, &cancel)),
            None => read_load_order(dir, &cancel).map(Arc::new),
        };
        self.cancel.check()?;
        let Some(names) = names else { return Ok(Vec::new()) };
        let stamps = self.stamps(dir, &names)?;
        let ordered: Vec<(&String, Option<FileStamp>)> = names.iter().zip(stamps).collect();
        let with_text = self.with_text;
        let files: Vec<FileToIndex<'_>> = ordered
            .iter()
            .filter_map(|&(name, stamp)| {
                Some(FileToIndex { path: paths::join(&[dir, name]), dir, stamp: stamp.filter(|s| s.regular)? })
            })
            .collect();
        let dirs = [dir.to_owned()];
        let indexed =
            self.through_index(dir, |ix, cancel| ix.refresh(&dirs, &files, with_text, cancel, on_progress))?;
        if let Some(infos) = indexed {
            return Ok(infos.into_iter().flatten().collect());
        }
        let total = ordered.len();
        let mut out = Vec::new();
        for (i, (name, meta)) in ordered.iter().enumerate() {
            self.cancel.check()?;
            let path = paths::join(&[dir, name]);
            out.extend(meta.as_ref().and_then(|m| listed(&path, m, with_text, &self.cancel)));
            on_progress(i + 1, total);
        }
        self.cancel.check()?;
        Ok(out)
    }

    /// `SessionManager.list(cwd, sessionDir?)`: the sessions of `cwd`, newest activity first.
    pub fn list(
        &mut self,
        cwd: &str,
        session_dir: Option<&str>,
        on_progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Vec<Arc<ListedSession>>> {
        let (dir, filter) = directory_for(cwd, session_dir, self.agent_dir)?;
        let resolved_cwd = paths::resolve_path(cwd);
        // A project's sessions mostly share one cwd: resolve each distinct one once.
        let mut matches: HashMap<JsString, bool> = HashMap::new();
        let mut infos: Vec<Arc<ListedSession>> = self
            .list_dir(&dir, on_progress)?
            .into_iter()
            .filter(|s| {
                !filter
                    || *matches
                        .entry(s.info.cwd.clone())
                        .or_insert_with(|| cwd_matches(&s.info.cwd.to_string_lossy(), &resolved_cwd))
            })
            .collect();
        sort_infos(&mut infos);
        Ok(infos)
    }

    /// `SessionManager.listAll(sessionDir?)`: with a directory, every session in it (no cwd filter); without,
    /// every session in every project directory under `<agentDir>/sessions` (one level, symlinked directories
    /// included).
    pub fn list_all(
        &mut self,
        session_dir: Option<&str>,
        on_progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Vec<Arc<ListedSession>>> {
        self.cancel.check()?;
        if let Some(d) = session_dir.filter(|d| !d.is_empty()) {
            let mut infos = self.list_dir(&paths::normalize_path(d), on_progress)?;
            sort_infos(&mut infos);
            return Ok(infos);
        }
        let root = paths::join(&[self.agent_dir, "sessions"]);
        let project_dirs = match dirscan::subdirectories(&root) {
            Ok(dirs) => dirs,
            Err(e) => {
                self.cancel.note_io_failure("read directory", &root, &e);
                self.cancel.check()?;
                return Ok(Vec::new());
            }
        };
        let mut dirs = Vec::new();
        let mut candidates: Vec<(String, String, Option<FileStamp>)> = Vec::new();
        for dir in project_dirs {
            self.cancel.check()?;
            match jsonl_entries(&dir) {
                Ok(files) => {
                    candidates.extend(files.into_iter().map(|(n, meta)| (paths::join(&[&dir, &n]), dir.clone(), meta)));
                    dirs.push(dir);
                }
                Err(e) => self.cancel.note_io_failure("read directory", &dir, &e),
            }
        }
        let c = collator();
        let mtime = |m: &Option<FileStamp>| m.as_ref().map_or(f64::NEG_INFINITY, FileStamp::mtime_ms);
        sort_like_v8(&mut candidates, |a, b| {
            let diff = mtime(&b.2) - mtime(&a.2);
            if diff != 0.0 && !diff.is_nan() {
                diff
            } else {
                locale_compare(&c, paths::basename(&b.0), paths::basename(&a.0))
            }
        });
        let with_text = self.with_text;
        let files: Vec<FileToIndex<'_>> = candidates
            .iter()
            .filter_map(|(path, dir, stamp)| {
                stamp.filter(|s| s.regular).map(|stamp| FileToIndex { path: path.clone(), dir, stamp })
            })
            .collect();
        let indexed =
            self.through_index(&root, |ix, cancel| ix.refresh(&dirs, &files, with_text, cancel, on_progress))?;
        let mut infos: Vec<Arc<ListedSession>> = match indexed {
            Some(infos) => infos.into_iter().flatten().collect(),
            None => {
                let total = candidates.len();
                let mut infos = Vec::new();
                for (i, (path, _, meta)) in candidates.iter().enumerate() {
                    self.cancel.check()?;
                    if let Some(m) = meta {
                        infos.extend(listed(path, m, with_text, &self.cancel));
                    }
                    on_progress(i + 1, total);
                }
                infos
            }
        };
        self.cancel.check()?;
        sort_infos(&mut infos);
        Ok(infos)
    }

    /// `SessionManager.findById(cwd, id, sessionDir?)`: the first file (in Node's `readdir` order) whose header id is
    /// exactly `id`. Like pi, it looks in that one directory only (not below it), and reads at most the first MiB
    /// of each file; files that are not regular are skipped (pi would wait on a FIFO for ever).
    pub fn find_by_id(&mut self, cwd: &str, id: &str, session_dir: Option<&str>) -> Result<Option<String>> {
        self.cancel.check()?;
        let (dir, filter) = directory_for(cwd, session_dir, self.agent_dir)?;
        let resolved_cwd = paths::resolve_path(cwd);
        let Some(names) = read_load_order_unsorted(&dir, &self.cancel) else {
            self.cancel.check()?;
            return Ok(None);
        };
        // Headers of files unchanged since they were indexed need no reading.
        let cached = self.through_index(&dir, |ix, _| ix.cached_headers(&dir))?.unwrap_or_default();
        let stamps = self.stamps(&dir, &names)?;
        for (name, stamp) in names.iter().zip(stamps) {
            self.cancel.check()?;
            let Some(stamp) = stamp.filter(|s| s.regular) else { continue };
            let path = paths::join(&[&dir, name]);
            let known = cached.get(&path).and_then(|c| c.header_if_current(&stamp).map(|h| h.cloned()));
            let Some(header) = known.unwrap_or_else(|| read_header_bounded(&path)) else { continue };
            if !header.get("id").and_then(Json::as_js_str).is_some_and(|h| h.eq_str(id)) {
                continue;
            }
            if filter {
                let cwd = header.get("cwd").and_then(Json::as_js_str).map(|c| c.to_string_lossy());
                if !cwd.is_some_and(|c| cwd_matches(&c, &resolved_cwd)) {
                    continue;
                }
            }
            return Ok(Some(path));
        }
        self.cancel.check()?;
        Ok(None)
    }

    /// The stamps of `names` in `dir`; a directory that cannot be opened for want of descriptors fails the call
    /// (any other failure leaves every name without a stamp, as if it vanished).
    fn stamps(&self, dir: &str, names: &[String]) -> Result<Vec<Option<FileStamp>>> {
        match dirscan::stamp_names(dir, names) {
            Ok(stamps) => Ok(stamps),
            Err(e) => {
                self.cancel.note_io_failure("open directory", dir, &e);
                self.cancel.check()?;
                Ok(vec![None; names.len()])
            }
        }
    }
}

/// The `*.jsonl` names of `dir` in Node's `readdir` order; None when it cannot be read (noted on `cancel` when the
/// process is out of descriptors).
fn read_load_order_unsorted(dir: &str, cancel: &Cancel) -> Option<Vec<String>> {
    dirscan::jsonl_names(dir).inspect_err(|e| cancel.note_io_failure("read directory", dir, e)).ok()
}
