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

mod follow;
mod read;
mod write;

use std::sync::{Arc, Mutex};

use super::change::{Change, EntryIdentity, NewSessionOptions, Origin};
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
use super::store::{self, Disk, Durability, LineSlot, LoadedFile, SessionFile, Warning, WarningKind};
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
    /// What session files (and kept skeletons) are read and written through: the real file system, or in a
    /// test one that fails on demand.
    pub disk: Arc<dyn Disk>,
    /// Records carry their skeleton (for snapshots and `session/changed` at skeleton detail, and the kept file);
    /// false for a host that never asks for them (pi's drop-in), whose opens then make and keep none.
    pub skeletons: bool,
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
            disk: store::real_disk(),
            skeletons: true,
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
    /// The id and timestamp the host chose for the entry being staged ([`Op::WithIdentity`]), taken by the one
    /// entry that op stages.
    chosen: Option<EntryIdentity>,
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
        LineOutcome::Record(r) => r,
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
            chosen: None,
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
                Some(keep) => keep.open_on(&env.disk, &resolved, Durability::None, env.skeletons)?,
                None => SessionFile::open_knowing(&env.disk, &resolved, Durability::None, env.skeletons, |_, _| None)?,
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
                    loaded.records.push(r);
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
        let (source_file, mut loaded) = SessionFile::open_on(&env.disk, &source, Durability::None)?;
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
        // Streamed into the new file, line by line: the copy of a 2.7 GB session is never whole in memory.
        let mut read_failed = None;
        let created = SessionFile::create_with(&env.disk, &new_file, Durability::Entry, |w| {
            let mut head = Vec::new();
            header.write_canonical(&mut head);
            head.push(b'\n');
            w.write_all(&head)?;
            for r in loaded.records.iter().filter(|r| !r.is_header()) {
                let bytes = src_file.body(&r.body).map_err(|e| {
                    let kind = e.kind();
                    read_failed = Some(e);
                    std::io::Error::from(kind)
                })?;
                w.write_all(trim_json_ws(&bytes))?;
                w.write_all(b"\n")?;
            }
            Ok(())
        });
        if let Some(e) = read_failed {
            return Err(Error::io("read", &source, e));
        }
        drop(created?);
        Self::construct(&target, &dir, Some(&new_file), true, NewSessionOptions::default(), None, env)
    }

    fn set_session_file_inner(&mut self, path: &str, preloaded: Option<(SessionFile, LoadedFile)>) -> Result<()> {
        let resolved = paths::resolve_path(path);
        let opened = match preloaded {
            Some(p) => Some(p),
            None if store::exists(&resolved) => Some(SessionFile::open_on(&self.env.disk, &resolved, self.durability)?),
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
        let LoadedFile { mut records, lines, warnings, needs_final_newline, tree_warnings, .. } = loaded;
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
        let as_read = session_id.is_some() && !migrated;
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
        // Warnings kept with the records are over these very records only when nothing changed them here.
        let tree_warnings = match tree_warnings {
            Some(kept) if as_read => {
                self.index = TreeIndex::build(&self.records);
                kept
            }
            _ => {
                let (index, warnings) = TreeIndex::build_diagnosed(&self.records);
                self.index = index;
                warnings
            }
        };
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
        let opened = if store::exists(&resolved) {
            Some(SessionFile::open_on(&self.env.disk, &resolved, self.durability)?)
        } else {
            None
        };
        self.pending = PendingRepairs::default();
        self.lines.clear();
        self.set_session_file_inner(&resolved, opened)
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
    let Detail::SessionInfo(name) = &r.detail else { return Ok(None) };
    match name.as_deref() {
        None | Some(Json::Null) => Ok(None),
        Some(Json::String(s)) => {
            let t = s.trim();
            Ok((!t.is_empty()).then_some(t))
        }
        Some(_) => Err(Error::InvalidEntry {
            line: r.line,
            message: format!(
                "{}: session_info name is not a string (pi 1.6.0 throws a TypeError here)",
                context::entry_name(r)
            ),
        }),
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
