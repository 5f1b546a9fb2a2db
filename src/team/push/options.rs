//! What a push is asked: its options, the filter choosing which sessions the database holds (`--include`,
//! `--exclude`, `--since`), and the report it gives.

use super::*;

/// What to push.
#[derive(Clone, Debug)]
pub struct PushOptions {
    /// This machine's name in the database.
    pub machine: String,
    /// pi's agent directory (sessions are under `<agentDir>/sessions`), absolute: it names every pushed file.
    pub agent_dir: String,
    /// Push an agent directory without a `sessions` directory as one without sessions (deleting the machine's
    /// rows) instead of refusing it as a mistyped path.
    pub allow_empty: bool,
    /// Replaces secrets in every line before it leaves the machine (None: `--no-redact`).
    pub redactor: Option<Arc<Redactor>>,
    /// Which sessions are pushed: the database then holds exactly these (rows of others are deleted).
    pub filter: Filter,
    /// Push images as they are (`--keep-images`) instead of as placeholders.
    pub keep_images: bool,
}

/// `--include`/`--exclude` (globs over the session's cwd, from its header) and `--since` (its file's last
/// change): which of a machine's sessions go to the team.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// A session is pushed only if its cwd matches one of these (when there are any).
    pub include: Option<globset::GlobSet>,
    /// A session whose cwd matches one of these is not pushed.
    pub exclude: Option<globset::GlobSet>,
    /// Only files modified at or after this time (ms since the epoch).
    pub since_ms: Option<f64>,
    /// `--prune`: only files modified within this long before each pass (the retention rule of `team prune`).
    pub max_age: Option<std::time::Duration>,
}

impl Filter {
    /// The filter from the command line's globs and date; a glob or date that does not parse is refused.
    pub fn new(include: &[String], exclude: &[String], since: Option<&str>) -> DbResult<Filter> {
        let set = |globs: &[String]| -> DbResult<Option<globset::GlobSet>> {
            if globs.is_empty() {
                return Ok(None);
            }
            let mut b = globset::GlobSetBuilder::new();
            for g in globs {
                // `*` stays within one directory and `**` crosses them, as in a shell with globstar.
                let glob = globset::GlobBuilder::new(g).literal_separator(true).build();
                b.add(glob.map_err(|e| DbError::Invalid(format!("--include/--exclude {g:?}: {e}")))?);
            }
            b.build().map(Some).map_err(|e| DbError::Invalid(e.to_string()))
        };
        let since_ms = match since {
            None => None,
            Some(d) => {
                let ms = crate::session::js::date::parse_date(d);
                if !ms.is_finite() {
                    return Err(DbError::Invalid(format!("--since {d:?}: not a date (2026-01-31, or an ISO time)")));
                }
                Some(ms)
            }
        };
        Ok(Filter { include: set(include)?, exclude: set(exclude)?, since_ms, max_age: None })
    }

    /// Leaves out (and so deletes the rows of) sessions whose file last changed more than `age` before a pass.
    pub fn with_max_age(self, age: std::time::Duration) -> Filter {
        Filter { max_age: Some(age), ..self }
    }

    /// Whether the session file `f` is pushed. Its header is read only when globs ask for its cwd; a file whose
    /// header cannot be read has no cwd, so no `--include` chooses it.
    pub(super) fn chooses(&self, f: &Found) -> bool {
        if self.since_ms.is_some_and(|since| (f.stamp.mtime_ns as f64) / 1e6 < since) {
            return false;
        }
        if self.max_age.is_some_and(|age| f.stamp.mtime_ns < crate::team::prune::cutoff_ns(age)) {
            return false;
        }
        if self.include.is_none() && self.exclude.is_none() {
            return true;
        }
        let header = store::read_header_bounded(&f.path);
        let cwd = header.as_ref().and_then(|h| h.get("cwd")).and_then(Json::as_js_str).map(|c| c.to_string_lossy());
        let matches =
            |set: &Option<globset::GlobSet>| set.as_ref().map(|g| cwd.as_ref().is_some_and(|c| g.is_match(c)));
        matches(&self.include) != Some(false) && matches(&self.exclude) != Some(true)
    }
}

impl PushOptions {
    /// Options for pushing `agent_dir` as `machine`: the directory must exist (it is made absolute and canonical,
    /// so rows name files a reader on that machine can find whatever directory the push ran from) and, unless
    /// `allow_empty`, hold a `sessions` directory.
    pub fn new(machine: String, agent_dir: &str, allow_empty: bool) -> DbResult<PushOptions> {
        let refuse = |why: String| DbError::NoSessions { path: agent_dir.to_owned(), why };
        let canonical =
            std::fs::canonicalize(agent_dir).map_err(|e| refuse(format!("not an agent directory ({e})")))?;
        if !canonical.is_dir() {
            return Err(refuse("not a directory".to_owned()));
        }
        let agent_dir = canonical.to_str().ok_or_else(|| refuse("not a UTF-8 path".to_owned()))?.to_owned();
        let options = PushOptions {
            machine,
            agent_dir,
            allow_empty,
            redactor: Some(Arc::new(Redactor::builtin())),
            filter: Filter::default(),
            keep_images: false,
        };
        if !allow_empty {
            options.sessions_root()?;
        }
        Ok(options)
    }

    /// `<agentDir>/sessions`, checked to be a directory unless empty agent directories are allowed.
    pub(super) fn sessions_root(&self) -> DbResult<String> {
        let root = paths::join(&[&self.agent_dir, "sessions"]);
        if !self.allow_empty && !std::path::Path::new(&root).is_dir() {
            return Err(DbError::NoSessions {
                path: self.agent_dir.clone(),
                why: "no sessions directory here (is --agent-dir right?)".to_owned(),
            });
        }
        Ok(root)
    }
}

/// What a pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PushReport {
    /// Session files found.
    pub files: usize,
    /// Files whose session row was written: new lines, a changed unterminated last line, sent again after a
    /// rewrite, or deleted because they are no longer sessions.
    pub pushed: usize,
    /// Files sent again from the start because they were rewritten, truncated or replaced.
    pub rewritten: usize,
    /// Sessions deleted from the database (their file is gone or no longer a session).
    pub deleted: usize,
    /// Entry rows written.
    pub entries: u64,
    /// Bytes of lines written.
    pub bytes: u64,
}
