//! `SessionManager`: pi 1.6.0's session operations over one session at a time.
//!
//! Every method mirrors the pi method of the same name (snake_case), with pi's arguments, results, errors and
//! file effects: lazy first write, exclusive create, key order, ids, migration, leaf rules. Two things differ on
//! purpose (both in `docs/compatibility.md`): opening never writes (pi's load-time repairs — the migration
//! rewrite, the missing final newline, the header of a 0-byte file — are held back and applied just before the
//! first write, so the bytes after open + append equal pi's), and bytes we did not write are never re-serialised.
//!
//! This file holds the session, its constructors and its reads; the write path — every mutation, the one entry
//! point [`SessionManager::apply`] and the write order — is in `manager/write.rs`.

mod write;

use std::sync::{Arc, Mutex};

use super::change::{Change, NewSessionOptions, Origin};
use super::context::{self, Bodies, ContextOptions, Projection};
use super::entry::{Body, BodySource, Detail, EntryType, Record};
use super::error::{Error, Result};
use super::identity;
use super::ids::{self, Clock, IdSource, OsRandom, SystemClock, UuidV7State};
use super::js::date::to_iso_string;
use super::json::{JsString, Json, Object};
use super::kept::Keep;
use super::key::Key;
use super::line::{parse_line, LineOutcome};
use super::migrate;
use super::paths;
use super::store::{self, Durability, LineSlot, LoadedFile, SessionFile, Warning, WarningKind};
use super::tree::{Tree, TreeIndex};

/// Where a manager gets randomness and time, and the UUID v7 generator state it shares.
pub struct Env {
    /// Random ids.
    pub ids: Box<dyn IdSource>,
    /// The clock.
    pub clock: Box<dyn Clock>,
    /// UUID v7 state; the process-wide one unless a test brings its own.
    pub v7: Arc<Mutex<UuidV7State>>,
    /// pi's agent directory for default session directories; None: `$PI_CODING_AGENT_DIR` or `~/.pi/agent`.
    pub agent_dir: Option<String>,
    /// Where what an open read is kept for the next open of the same file (`kept.rs`); None: nothing is kept.
    pub keep: Option<Arc<Keep>>,
}

static PROCESS_V7: std::sync::LazyLock<Arc<Mutex<UuidV7State>>> =
    std::sync::LazyLock::new(|| Arc::new(Mutex::new(UuidV7State::default())));

impl Env {
    /// The operating system's randomness and clock.
    pub fn system() -> Env {
        Env {
            ids: Box::new(OsRandom::default()),
            clock: Box::new(SystemClock),
            v7: PROCESS_V7.clone(),
            agent_dir: None,
            keep: None,
        }
    }

    /// The same, with default session directories under `agent_dir`.
    pub fn with_agent_dir(agent_dir: &str) -> Env {
        Env { agent_dir: Some(agent_dir.to_owned()), ..Env::system() }
    }

    /// The agent directory default session directories live under.
    pub fn agent_dir(&self) -> String {
        self.agent_dir.clone().unwrap_or_else(paths::agent_dir)
    }

    fn now_iso(&mut self) -> (f64, String) {
        let ms = self.clock.now_ms();
        (ms, to_iso_string(ms).unwrap_or_else(|| "Invalid Date".to_owned()))
    }

    fn session_id(&mut self) -> String {
        let now = self.clock.now_ms();
        let mut state = self.v7.lock().unwrap_or_else(|e| e.into_inner());
        ids::uuid_v7(&mut state, now, self.ids.as_mut())
    }
}

impl Default for Env {
    fn default() -> Self {
        Env::system()
    }
}

/// pi's load-time file repairs, held back until the first write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PendingRepairs {
    /// Rewrite the whole file (after a migration, or to give a 0-byte file its header).
    pub rewrite: bool,
    /// Append the missing final `\n`.
    pub final_newline: bool,
}

/// What a constructor already read: a file (and its handle), or entries given in memory.
enum Preloaded {
    File(Box<SessionFile>, LoadedFile),
    Entries(LoadedFile),
}

/// What an unterminated last line contributed when the file was loaded (it may be a write in progress, to be
/// read again once its newline arrives).
#[derive(Clone, Copy, Debug)]
struct Tail {
    offset: u64,
    records: usize,
    lines: usize,
}

/// One session: pi's `SessionManager`.
pub struct SessionManager {
    session_id: Json,
    session_file: Option<String>,
    session_dir: String,
    cwd: String,
    persist: bool,
    flushed: bool,
    records: Vec<Record>,
    lines: Vec<LineSlot>,
    index: TreeIndex,
    file: Option<SessionFile>,
    tail: Option<Tail>,
    durability: Durability,
    pending: PendingRepairs,
    warnings: Vec<Warning>,
    context_options: ContextOptions,
    env: Env,
    /// What the latest [`SessionManager::refresh`] found the file to be, for the write that follows it (so a
    /// write after a follow costs no second `stat`).
    last_seen: Option<identity::FileState>,
}

struct RecordBodies<'a> {
    records: &'a [Record],
    file: Option<&'a SessionFile>,
    path: &'a str,
    /// Reads through a window instead, for callers that go through the entries in file order.
    ahead: Option<std::cell::RefCell<store::ReadAhead<'a>>>,
}

impl Bodies for RecordBodies<'_> {
    fn bytes(&self, record: usize) -> Result<Vec<u8>> {
        let r = &self.records[record];
        let read = match (&self.ahead, self.file) {
            (Some(ahead), _) => ahead.borrow_mut().body(&r.body),
            (None, Some(f)) => f.read_body(&r.body),
            (None, None) => store::BodyReader::NONE.body(&r.body),
        };
        read.or_else(|e| match r.header() {
            // The header's value is in memory: a header whose line is gone is still shown (in its parsed form).
            Some(h) if gone_from_file(&e) => {
                let mut bytes = Vec::new();
                h.write_preserving(&mut bytes);
                Ok(bytes)
            }
            _ => Err(body_error(self.path, r, e)),
        })
    }
}

/// True for the errors [`store::read_body`] gives for a line that is no longer where it was read.
fn gone_from_file(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::InvalidData)
}

/// A failed body read, naming the entry.
fn body_error(path: &str, r: &Record, e: std::io::Error) -> Error {
    let what = context::entry_name(r);
    let what = if r.line > 0 { format!("{what} (line {})", r.line) } else { what };
    if gone_from_file(&e) {
        let message = format!(
            "{what} is no longer in the session file: the file was truncated or rewritten since it was read \
             (it is read again when the handle next follows the file, or reopen it)"
        );
        return Error::io("read", path, std::io::Error::new(e.kind(), message));
    }
    Error::io("read", path, std::io::Error::new(e.kind(), format!("{what}: {e}")))
}

fn record_from_bytes(bytes: Vec<u8>) -> Record {
    match parse_line(&bytes, 0, Body::memory(bytes.clone())) {
        LineOutcome::Record(r) => *r,
        other => unreachable!("entries we build are objects: {other:?}"),
    }
}

fn key_text(k: &Key) -> Option<String> {
    k.to_json_text()
}

impl SessionManager {
    fn construct(
        cwd: &str,
        session_dir: &str,
        session_file: Option<&str>,
        persist: bool,
        options: NewSessionOptions,
        preloaded: Option<Preloaded>,
        env: Env,
    ) -> Result<SessionManager> {
        let mut m = SessionManager {
            session_id: Json::str(""),
            session_file: None,
            session_dir: if session_dir.is_empty() { String::new() } else { paths::normalize_path(session_dir) },
            cwd: paths::resolve_path(cwd),
            persist,
            flushed: false,
            records: Vec::new(),
            lines: Vec::new(),
            index: TreeIndex::default(),
            file: None,
            tail: None,
            durability: Durability::None,
            pending: PendingRepairs::default(),
            warnings: Vec::new(),
            context_options: ContextOptions::default(),
            env,
            last_seen: None,
        };
        if persist && !m.session_dir.is_empty() {
            store::ensure_dir(&m.session_dir)?;
        }
        match (session_file, preloaded) {
            (Some(file), Some(Preloaded::File(f, loaded))) => m.set_session_file_inner(file, Some((*f, loaded)))?,
            (Some(file), _) => m.set_session_file_inner(file, None)?,
            (None, Some(Preloaded::Entries(loaded))) if !loaded.records.is_empty() => {
                m.load_records(loaded, options)?
            }
            _ => {
                m.new_session(options)?;
            }
        }
        Ok(m)
    }

    /// `SessionManager.create(cwd, sessionDir?, options?)`: a new session, written once it has a conversation.
    pub fn create(cwd: &str, session_dir: Option<&str>, options: NewSessionOptions, env: Env) -> Result<Self> {
        let dir = match session_dir {
            Some(d) if !d.is_empty() => paths::normalize_path(d),
            _ => super::dirscan::default_session_dir(cwd, &env.agent_dir())?,
        };
        Self::construct(cwd, &dir, None, true, options, None, env)
    }

    /// `SessionManager.open(path, sessionDir?, cwdOverride?)`. Reads without writing (see the module doc).
    pub fn open(path: &str, session_dir: Option<&str>, cwd_override: Option<&str>, env: Env) -> Result<Self> {
        let resolved = paths::resolve_path(path);
        let mut preloaded = None;
        let mut header_cwd = None;
        if store::exists(&resolved) {
            let (file, loaded) = match &env.keep {
                Some(keep) => keep.open(&resolved, Durability::None)?,
                None => SessionFile::open(&resolved, Durability::None)?,
            };
            if loaded.has_valid_header() {
                header_cwd = loaded.records[0].header().and_then(|h| h.get("cwd")).and_then(Json::as_js_str).cloned();
            }
            preloaded = Some(Preloaded::File(Box::new(file), loaded));
        }
        let cwd = match cwd_override {
            Some(c) => c.to_owned(),
            None => header_cwd.map(|c| c.to_string_lossy()).unwrap_or_else(paths::process_cwd),
        };
        let dir = match session_dir {
            Some(d) if !d.is_empty() => paths::normalize_path(d),
            _ => paths::parent_dir(&resolved),
        };
        Self::construct(&cwd, &dir, Some(&resolved), true, NewSessionOptions::default(), preloaded, env)
    }

    /// A session whose lines came from elsewhere (another machine's copy in the team database): pi's reads over
    /// `bytes` as if they were the file at `path`, which need not exist here. Bodies are held in memory, nothing is
    /// ever written (the session is not persisted), and the caller refuses mutations. Refused as `open` refuses
    /// the file: bytes without a session header are not a session.
    pub fn open_pushed(path: &str, bytes: &[u8], env: Env) -> Result<Self> {
        let body_at = |offset: u64, len: u64| Body::memory(bytes[offset as usize..(offset + len) as usize].to_vec());
        let loaded = store::load_from(bytes, path, store::Start::default(), body_at)?;
        if !loaded.has_valid_header() {
            return Err(Error::InvalidSessionFile { path: path.to_owned() });
        }
        let cwd = loaded.records[0].header().and_then(|h| h.get("cwd")).and_then(Json::as_js_str);
        let cwd = cwd.map(|c| c.to_string_lossy()).unwrap_or_else(paths::process_cwd);
        let mut m = Self::construct(
            &cwd,
            "",
            None,
            false,
            NewSessionOptions::default(),
            Some(Preloaded::Entries(loaded)),
            env,
        )?;
        m.session_file = Some(path.to_owned());
        m.session_dir = paths::parent_dir(path);
        m.flushed = true;
        Ok(m)
    }

    /// `SessionManager.continueRecent(cwd, sessionDir?)`: the most recent session in the directory, or a new one.
    pub fn continue_recent(cwd: &str, session_dir: Option<&str>, env: Env) -> Result<Self> {
        let (dir, filter_cwd) = super::dirscan::directory_for(cwd, session_dir, &env.agent_dir())?;
        let recent = super::dirscan::find_most_recent_session(&dir, filter_cwd.then_some(cwd));
        match recent {
            Some(path) => Self::construct(cwd, &dir, Some(&path), true, NewSessionOptions::default(), None, env),
            None => Self::construct(cwd, &dir, None, true, NewSessionOptions::default(), None, env),
        }
    }

    /// `SessionManager.inMemory(cwd?, options?, entries?)`: a session that never touches the disk. `entries` are
    /// JSON lines (a header among them is adopted as is; without one, a new header is made from `options`).
    pub fn in_memory(
        cwd: Option<&str>,
        options: NewSessionOptions,
        entries: Option<Vec<Vec<u8>>>,
        env: Env,
    ) -> Result<Self> {
        let cwd = cwd.map(str::to_owned).unwrap_or_else(paths::process_cwd);
        let preloaded = entries.map(|lines| {
            let mut loaded = LoadedFile::default();
            for (i, bytes) in lines.into_iter().enumerate() {
                if let LineOutcome::Record(r) = parse_line(&bytes, i as u32 + 1, Body::memory(bytes.clone())) {
                    loaded.records.push(*r);
                }
            }
            Preloaded::Entries(loaded)
        });
        Self::construct(&cwd, "", None, false, options, preloaded, env)
    }

    /// `SessionManager.forkFrom(sourcePath, targetCwd, sessionDir?, options?)`: a new session in `targetCwd` with
    /// the source's whole history. Unlike pi 1.6.0 the source is migrated first (pi #9950) and left untouched.
    pub fn fork_from(
        source_path: &str,
        target_cwd: &str,
        session_dir: Option<&str>,
        options: NewSessionOptions,
        mut env: Env,
    ) -> Result<Self> {
        let source = paths::resolve_path(source_path);
        let target = paths::resolve_path(target_cwd);
        let invalid = || Error::InvalidForkSource { path: source.clone() };
        if !store::exists(&source) {
            return Err(invalid());
        }
        let (source_file, mut loaded) = SessionFile::open(&source, Durability::None)?;
        if !loaded.has_valid_header() {
            return Err(invalid());
        }
        let dir = match session_dir {
            Some(d) if !d.is_empty() => paths::normalize_path(d),
            _ => super::dirscan::default_session_dir(&target, &env.agent_dir())?,
        };
        store::ensure_dir(&dir)?;
        if let Some(id) = &options.id {
            if !ids::is_valid_session_id(id) {
                return Err(Error::InvalidSessionId);
            }
        }
        let new_id = match &options.id {
            Some(id) => id.clone(),
            None => env.session_id(),
        };
        let (_, timestamp) = env.now_iso();
        let new_file = paths::join(&[&dir, &format!("{}_{}.jsonl", file_stamp(&timestamp), new_id)]);
        migrate::migrate(&mut loaded.records, env.ids.as_mut())?;
        let header = header_json(&new_id, &timestamp, &target, Some(&source));
        let src_file = source_file.lines();
        let mut content = Vec::new();
        header.write_canonical(&mut content);
        content.push(b'\n');
        for r in loaded.records.iter().filter(|r| !r.is_header()) {
            let bytes = src_file.body(&r.body).map_err(|e| Error::io("read", &source, e))?;
            content.extend_from_slice(trim_json_ws(&bytes));
            content.push(b'\n');
        }
        drop(SessionFile::create(&new_file, &content, Durability::Entry)?);
        Self::construct(&target, &dir, Some(&new_file), true, NewSessionOptions::default(), None, env)
    }

    fn set_session_file_inner(&mut self, path: &str, preloaded: Option<(SessionFile, LoadedFile)>) -> Result<()> {
        let resolved = paths::resolve_path(path);
        let opened = match preloaded {
            Some(p) => Some(p),
            None if store::exists(&resolved) => Some(SessionFile::open(&resolved, self.durability)?),
            None => None,
        };
        let Some((mut file, loaded)) = opened else {
            self.new_session(NewSessionOptions::default())?;
            self.session_file = Some(resolved);
            return Ok(());
        };
        file.set_durability(self.durability);
        if !loaded.has_valid_header() {
            if loaded.len > 0 {
                return Err(Error::InvalidSessionFile { path: resolved });
            }
            // A 0-byte file: pi writes a fresh header at once; we write it before the first entry.
            self.new_session(NewSessionOptions::default())?;
            self.session_file = Some(resolved);
            self.file = Some(file);
            self.flushed = true;
            self.pending.rewrite = true;
            return Ok(());
        }
        let final_newline = loaded.needs_final_newline;
        self.load_records(loaded, NewSessionOptions::default())?;
        self.session_file = Some(resolved);
        self.pending.final_newline = final_newline;
        self.file = Some(file);
        self.flushed = true;
        Ok(())
    }

    /// Makes `loaded` this session's records. A failure (a file pi cannot migrate, an invalid session id in
    /// `options`) leaves the session as it was.
    fn load_records(&mut self, loaded: LoadedFile, options: NewSessionOptions) -> Result<()> {
        let LoadedFile { mut records, lines, warnings, needs_final_newline, .. } = loaded;
        let session_id = records.iter().find(|r| r.is_header()).and_then(Record::header).map(|h| h.get("id").cloned());
        let version = migrate::file_version(&records);
        let migrated = session_id.is_some() && migrate::migrate(&mut records, self.env.ids.as_mut())?;
        if session_id.is_none() {
            self.new_session(options)?;
        }
        // An unterminated last line may be a write still in progress: remember what it contributed, so that
        // following the file can read it again once it is complete.
        self.tail = match lines.last() {
            Some(last) if needs_final_newline => Some(Tail {
                offset: last.offset,
                records: last.record.map_or(records.len(), |r| r),
                lines: lines.len() - 1,
            }),
            _ => None,
        };
        self.warnings = warnings;
        match session_id {
            Some(id) => {
                self.session_id = id.unwrap_or(Json::Null);
                if migrated {
                    self.warnings.push(Warning {
                        line: 0,
                        kind: WarningKind::LegacyVersion,
                        message: format!(
                            "session file version {} is migrated to 3 in memory; the file is rewritten before the \
                             first write",
                            if version.is_nan() { "(not a number)".to_owned() } else { version.to_string() }
                        ),
                    });
                    if self.persist && records.iter().any(|r| r.body.patch.is_some()) {
                        self.pending.rewrite = true;
                    }
                }
                self.records = records;
                self.lines = lines;
            }
            None => self.records.extend(records),
        }
        self.index = TreeIndex::build(&self.records);
        let tree_warnings = self.index.diagnose(&self.records);
        self.warnings.extend(tree_warnings);
        self.warnings.sort_by_key(|w| w.line);
        Ok(())
    }

    /// `newSession(options?)`: replaces this session with a new, empty one (the old file is untouched). Returns
    /// the new file path (None in memory).
    pub fn new_session(&mut self, options: NewSessionOptions) -> Result<Option<String>> {
        if let Some(id) = &options.id {
            if !ids::is_valid_session_id(id) {
                return Err(Error::InvalidSessionId);
            }
        }
        let id = match &options.id {
            Some(id) => id.clone(),
            None => self.env.session_id(),
        };
        let (_, timestamp) = self.env.now_iso();
        let header = header_json(&id, &timestamp, &self.cwd, options.parent_session.as_deref());
        self.session_id = Json::str(&id);
        self.records = vec![record_from_bytes(header.to_canonical_string().into_bytes())];
        self.lines.clear();
        self.index = TreeIndex::default();
        self.flushed = false;
        self.file = None;
        self.tail = None;
        self.pending = PendingRepairs::default();
        self.warnings.clear();
        if self.persist {
            self.session_file =
                Some(paths::join(&[&self.session_dir, &format!("{}_{}.jsonl", file_stamp(&timestamp), id)]));
        }
        Ok(self.session_file.clone())
    }

    /// `setSessionFile(path)`: switch to another file (opened, or started lazily if it does not exist).
    pub fn set_session_file(&mut self, path: &str) -> Result<()> {
        let resolved = paths::resolve_path(path);
        let opened = if store::exists(&resolved) { Some(SessionFile::open(&resolved, self.durability)?) } else { None };
        self.pending = PendingRepairs::default();
        self.lines.clear();
        self.set_session_file_inner(&resolved, opened)
    }

    /// Follows the file as another process (pi itself) writes it: new complete lines become records, in file
    /// order, as a fresh open would read them (a line still being written is left for later). If the leaf was at
    /// the last entry it moves to the new last entry, as a fresh open would put it; a leaf the host moved
    /// elsewhere stays. A last line without its newline that already read as an entry and then grew into another
    /// line is [`Change::Reloaded`]: what was reported of it is no longer true.
    ///
    /// A file truncated, rewritten in place or replaced is read again as an open would read it ([`Change::Reloaded`])
    /// when it is still a session (a shorter one, another one). A session file that appears where this session had
    /// nothing on disk yet (a new session, an empty file) is read the same way. When the path no longer holds a
    /// session ([`Change::Deleted`]: removed, emptied, or holding something else), the session stays in memory:
    /// bodies are still read from the old file if it was deleted or renamed over (its descriptor is kept), and
    /// fail with an error naming the entry if its bytes were overwritten or truncated in place; a write to a
    /// deleted file puts the whole session back, a write over anything else is refused (it would land in a file
    /// another program is writing, or has emptied). Each later refresh looks again (without reading the path
    /// while it stays as it was) and reads it as soon as it is a session again; until then every refresh
    /// reports [`Change::Deleted`] (a host that mirrors the session reports it once).
    pub fn refresh(&mut self) -> Result<Option<Change>> {
        self.last_seen = None;
        if !self.persist {
            return Ok(None);
        }
        if !self.flushed {
            return self.follow_appearance();
        }
        let Some(file) = self.file.as_mut() else { return Ok(None) };
        if let Some(seen) = file.detached() {
            let path = self.session_file.as_deref().expect("a flushed session has a file");
            return match identity::FileStamp::of_path(path).map_err(|e| Error::io("stat", path, e))? {
                None => {
                    // Gone altogether now: a deleted session file, which the next write puts back.
                    file.reattach();
                    Ok(Some(Change::Deleted))
                }
                Some(now) if now == seen => Ok(Some(Change::Deleted)),
                Some(_) => self.reload(),
            };
        }
        let state = file.state()?;
        let change = match state {
            identity::FileState::Same => None,
            identity::FileState::Missing => Some(Change::Deleted),
            identity::FileState::Replaced | identity::FileState::Shrunk | identity::FileState::Rewritten => {
                return self.reload()
            }
            // Nothing of ours is in the file (it was empty when opened): what is there now is read from scratch.
            identity::FileState::Grew(_) if file.is_empty() => return self.reload(),
            identity::FileState::Grew(_) => self.follow_appends()?,
        };
        // What the write that may follow needs to know about the file (so it needs no `stat` of its own).
        self.last_seen = Some(state);
        Ok(change)
    }

    /// A new session that wrote nothing yet, watching its path: once another process writes a session there,
    /// it is read as an open would read it.
    fn follow_appearance(&mut self) -> Result<Option<Change>> {
        let Some(path) = self.session_file.clone() else { return Ok(None) };
        let has_entries = self.records.iter().any(|r| !r.is_header());
        if has_entries || self.file.is_some() || !store::is_file(&path) {
            return Ok(None);
        }
        match SessionFile::open(&path, self.durability) {
            Ok((file, loaded)) if loaded.has_valid_header() => {
                self.lines.clear();
                self.pending = PendingRepairs::default();
                self.set_session_file_inner(&path, Some((file, loaded)))?;
                Ok(Some(Change::Reloaded))
            }
            // Not (yet) a session: pi may be in the middle of writing it.
            Ok(_) => Ok(None),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Reads the file again from scratch, as an open reads it (it was truncated, rewritten or replaced under us).
    fn reload(&mut self) -> Result<Option<Change>> {
        let path = self.session_file.clone().expect("a flushed session has a file");
        let Some(seen) = identity::FileStamp::of_path(&path).map_err(|e| Error::io("stat", &path, e))? else {
            return Ok(Some(Change::Deleted));
        };
        let opened = if store::is_file(&path) { Some(SessionFile::open(&path, self.durability)) } else { None };
        let read_again = match opened {
            Some(Ok((file, loaded))) if loaded.has_valid_header() => {
                let pending = std::mem::take(&mut self.pending);
                let result = self.set_session_file_inner(&path, Some((file, loaded)));
                if result.is_err() {
                    self.pending = pending;
                }
                result
            }
            Some(Ok(_)) => Err(Error::InvalidSessionFile { path: path.clone() }),
            Some(Err(e)) => Err(e),
            None => Err(Error::InvalidSessionFile { path: path.clone() }),
        };
        match read_again {
            Ok(()) => Ok(Some(Change::Reloaded)),
            Err(e) if e.is_not_found() => Ok(Some(Change::Deleted)),
            // Reading failed for another reason than what is in the file: try again at the next refresh.
            Err(e @ Error::Io { op: "read", .. }) => Err(e),
            // Not a session: no header, not a regular file, unreadable, or a legacy file pi cannot migrate.
            Err(e) => {
                tracing::warn!("{path} is no longer a pi session ({e}); the handle keeps what it read");
                if let Some(f) = self.file.as_mut() {
                    // Still the inode we read, yet no longer a session: our bytes were overwritten in place.
                    let in_place = f.is_file(&seen);
                    f.detach(seen, in_place);
                }
                Ok(Some(Change::Deleted))
            }
        }
    }

    /// True when the path held something that is not this session when it was last followed.
    pub fn is_detached(&self) -> bool {
        self.file.as_ref().is_some_and(|f| f.detached().is_some())
    }

    fn follow_appends(&mut self) -> Result<Option<Change>> {
        let file = self.file.as_ref().expect("checked");
        let tail = self.tail;
        let start = store::Start {
            offset: tail.map_or(file.len(), |t| t.offset),
            line: tail.map_or(self.lines.len(), |t| t.lines) as u32,
            seen_header: self.records.iter().any(Record::is_header),
            hold_back_partial: true,
        };
        let loaded = file.read_from(start)?;
        if loaded.lines.is_empty() {
            return Ok(None);
        }
        let old_leaf = self.index.leaf.clone();
        let last_entry = self.records.iter().rposition(|r| !r.is_header());
        let following = match last_entry {
            Some(i) => self.records[i].id == old_leaf,
            None => old_leaf == Key::Null,
        };
        // The unterminated line read at open is read again now that it is complete; if it already was a whole
        // entry, it is not new.
        let mut already_known = 0;
        let mut replaced = false;
        if let Some(t) = tail {
            let was_entry = t.records < self.records.len();
            let same = was_entry
                && loaded.records.first().is_some_and(|n| {
                    let span = source_span(&n.body.source);
                    span.is_some() && span == source_span(&self.records[t.records].body.source)
                });
            if same {
                already_known = 1;
            }
            // The entry read from the unfinished line is not what the line became: a mirror told of it must
            // read the session again, not add to it.
            replaced = was_entry && !same;
            self.records.truncate(t.records);
            self.lines.truncate(t.lines);
            self.warnings.retain(|w| w.line <= t.lines as u32);
            self.tail = None;
        }
        let first_new = self.records.len();
        let LoadedFile { records, lines, warnings, len, .. } = loaded;
        for mut slot in lines {
            slot.record = slot.record.map(|r| r + first_new);
            self.lines.push(slot);
        }
        self.records.extend(records);
        self.warnings.extend(warnings);
        self.file.as_mut().expect("checked").set_len(len);
        self.pending.final_newline = false;
        if tail.is_some() {
            self.index = TreeIndex::build(&self.records);
        } else {
            for i in first_new..self.records.len() {
                let r = &self.records[i];
                if !r.is_header() {
                    self.index.add(i, r);
                    self.index.apply_label(r);
                }
            }
        }
        if !following {
            self.index.leaf = old_leaf;
        }
        if replaced {
            return Ok(Some(Change::Reloaded));
        }
        let records = first_new + already_known..self.records.len();
        Ok(records
            .clone()
            .any(|i| !self.records[i].is_header())
            .then_some(Change::Appended { records, origin: Origin::External }))
    }

    // ----------------------------------------------------------------------------------------------------------
    // Reads

    /// Entry bodies of this session.
    pub fn bodies(&self) -> impl Bodies + '_ {
        RecordBodies {
            records: &self.records,
            file: self.file.as_ref(),
            path: self.session_file.as_deref().unwrap_or("session file"),
            ahead: None,
        }
    }

    /// Record `i`'s line as it lies in the file, with each string the open found longer than
    /// [`LONG_STRING`](super::json::scan::LONG_STRING) bytes replaced by `fill`, read without those strings'
    /// bytes; with the line's offset. `None` when the record has no such strings or is not the file's line as
    /// read (migrated, re-chained, not written yet).
    pub fn line_around_long_strings(&self, i: usize, fill: &[u8]) -> Result<Option<(u64, Vec<u8>)>> {
        let r = &self.records[i];
        let (Some(holes), BodySource::File { offset, len }, None, Some(file)) =
            (&r.long_strings, &r.body.source, &r.body.patch, self.file.as_ref())
        else {
            return Ok(None);
        };
        let path = self.session_file.as_deref().unwrap_or("session file");
        let line = file.read_around(*offset, *len, holes, fill).map_err(|e| body_error(path, r, e))?;
        Ok(Some((*offset, line)))
    }

    /// Entry bodies for a caller that reads many of them in file order (a snapshot, every entry): read through
    /// one large window ([`store::ReadAhead`]) rather than one read per line. Same bytes and checks as
    /// [`SessionManager::bodies`].
    pub fn bodies_in_order(&self) -> impl Bodies + '_ {
        RecordBodies {
            records: &self.records,
            file: self.file.as_ref(),
            path: self.session_file.as_deref().unwrap_or("session file"),
            ahead: Some(std::cell::RefCell::new(store::ReadAhead::new(self.file.as_ref()))),
        }
    }

    /// Every record (headers included), in file order.
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// The tree index.
    pub fn index(&self) -> &TreeIndex {
        &self.index
    }

    /// Warnings found while loading (malformed lines, torn tail, tree problems, legacy version).
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// How context is built for this session.
    pub fn set_context_options(&mut self, options: ContextOptions) {
        self.context_options = options;
    }

    /// `isPersisted()`.
    pub fn is_persisted(&self) -> bool {
        self.persist
    }

    /// `getCwd()`.
    pub fn cwd(&self) -> &str {
        &self.cwd
    }

    /// `getSessionDir()` (`""` in memory).
    pub fn session_dir(&self) -> &str {
        &self.session_dir
    }

    /// `getSessionId()` (a string unless an in-memory header said otherwise).
    pub fn session_id(&self) -> &Json {
        &self.session_id
    }

    /// `getSessionFile()`.
    pub fn session_file(&self) -> Option<&str> {
        self.session_file.as_deref()
    }

    /// True once the file holds this session (pi's `flushed`).
    pub fn is_flushed(&self) -> bool {
        self.flushed
    }

    /// `getLeafId()`.
    pub fn leaf_id(&self) -> &Key {
        &self.index.leaf
    }

    /// `getLeafEntry()`.
    pub fn leaf_entry(&self) -> Option<usize> {
        if self.index.leaf.truthy() {
            self.index.get(&self.index.leaf)
        } else {
            None
        }
    }

    /// `getEntry(id)`.
    pub fn entry(&self, id: &Key) -> Option<usize> {
        self.index.get(id)
    }

    /// `getChildren(parentId)`.
    pub fn children(&self, parent_id: &Key) -> Vec<usize> {
        self.index.children(&self.records, parent_id)
    }

    /// `getLabel(id)`.
    pub fn label(&self, id: &Key) -> Option<&Json> {
        self.index.label(id).map(|l| &l.label)
    }

    /// `getBranch(fromId?)`.
    pub fn branch_path(&self, from_id: Option<&Key>) -> Vec<usize> {
        self.index.branch(&self.records, from_id)
    }

    /// `getHeader()`: the first header record.
    pub fn header(&self) -> Option<usize> {
        self.records.iter().position(Record::is_header)
    }

    /// `getEntryCount()`: distinct ids.
    pub fn entry_count(&self) -> usize {
        self.index.len()
    }

    /// `getEntries()`: every non-header record, in file order (duplicates included).
    pub fn entries(&self) -> Vec<usize> {
        (0..self.records.len()).filter(|&i| !self.records[i].is_header()).collect()
    }

    /// `getTree()`.
    pub fn tree(&self) -> Tree {
        self.index.tree(&self.records)
    }

    /// `getSessionName()`: the latest `session_info` in file order, trimmed; empty clears. Fails where pi throws
    /// (a name that is not a string).
    pub fn session_name(&self) -> Result<Option<JsString>> {
        for r in self.records.iter().rev() {
            if r.kind == EntryType::SessionInfo {
                return session_info_name(r);
            }
        }
        Ok(None)
    }

    /// `buildContextEntries()`.
    pub fn build_context_entries(&self) -> Result<Vec<usize>> {
        context::context_entries(&self.records, &self.index, &self.bodies(), self.context_options)
    }

    /// `buildSessionProjection()` (and `buildSessionContext()`, which is its messages and settings).
    pub fn build_session_projection(&self) -> Result<Projection> {
        context::projection(&self.records, &self.index, &self.bodies(), self.context_options)
    }
}

impl std::fmt::Debug for SessionManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionManager")
            .field("file", &self.session_file)
            .field("entries", &self.records.len())
            .finish_non_exhaustive()
    }
}

/// Where a body lies in the file, for comparing two reads of the same line.
fn source_span(source: &super::entry::BodySource) -> Option<(u64, u64)> {
    match source {
        super::entry::BodySource::File { offset, len } => Some((*offset, *len)),
        super::entry::BodySource::Memory(_) => None,
    }
}

/// The name a `session_info` record sets: `name?.trim() || undefined`.
pub fn session_info_name(r: &Record) -> Result<Option<JsString>> {
    match &r.detail {
        Detail::SessionInfo(None | Some(Json::Null)) => Ok(None),
        Detail::SessionInfo(Some(Json::String(s))) => {
            let t = s.trim();
            Ok((!t.is_empty()).then_some(t))
        }
        Detail::SessionInfo(Some(_)) => Err(Error::InvalidEntry {
            line: r.line,
            message: format!(
                "{}: session_info name is not a string (pi 1.6.0 throws a TypeError here)",
                context::entry_name(r)
            ),
        }),
        _ => Ok(None),
    }
}

/// A key as the JSON value pi would write for it; None for `undefined`, which `JSON.stringify` leaves out.
fn key_json(k: &Key) -> Option<Json> {
    match k {
        Key::Undefined => None,
        // An object id cannot be reproduced from a key; such files are hand-made and get null.
        Key::Null | Key::Object(_) => Some(Json::Null),
        Key::Bool(b) => Some(Json::Bool(*b)),
        Key::Number(bits) => Some(Json::number(f64::from_bits(*bits))),
        Key::Str(s) => Some(Json::String(s.clone())),
    }
}

/// The header pi writes: type, version, id, timestamp, cwd, parentSession (when set).
fn header_json(id: &str, timestamp: &str, cwd: &str, parent_session: Option<&str>) -> Json {
    let mut o = Object::new();
    o.insert("type", Json::str("session"));
    o.insert("version", Json::number(3.0));
    o.insert("id", Json::str(id));
    o.insert("timestamp", Json::str(timestamp));
    o.insert("cwd", Json::str(cwd));
    if let Some(p) = parent_session {
        o.insert("parentSession", Json::str(p));
    }
    Json::Object(o)
}

/// The file-name form of a timestamp: `:` and `.` become `-`.
pub fn file_stamp(iso: &str) -> String {
    iso.replace([':', '.'], "-")
}

/// A line without surrounding JSON white space (a CRLF file's `\r`, stray spaces).
pub fn trim_json_ws(bytes: &[u8]) -> &[u8] {
    let is_ws = |b: &u8| matches!(b, b' ' | b'\t' | b'\r' | b'\n');
    let start = bytes.iter().position(|b| !is_ws(b)).unwrap_or(bytes.len());
    let end = bytes.iter().rposition(|b| !is_ws(b)).map_or(start, |e| e + 1);
    &bytes[start..end]
}
