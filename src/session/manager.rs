//! `SessionManager`: pi 1.6.0's session operations over one session at a time.
//!
//! Every method mirrors the pi method of the same name (snake_case), with pi's arguments, results, errors and
//! file effects: lazy first write, exclusive create, key order, ids, migration, leaf rules. Two things differ on
//! purpose (both in `docs/compatibility.md`): opening never writes (pi's load-time repairs — the migration
//! rewrite, the missing final newline, the header of a 0-byte file — are held back and applied just before the
//! first write, so the bytes after open + append equal pi's), and bytes we did not write are never re-serialised.

use std::fs::File;
use std::sync::{Arc, Mutex};

use super::context::{self, Bodies, ContextOptions, Projection};
use super::entry::{Body, Detail, EntryType, Record};
use super::error::{Error, Result};
use super::ids::{self, Clock, IdSource, OsRandom, SystemClock, UuidV7State};
use super::js::date::to_iso_string;
use super::json::{JsString, Json, Object};
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
}

static PROCESS_V7: std::sync::LazyLock<Arc<Mutex<UuidV7State>>> =
    std::sync::LazyLock::new(|| Arc::new(Mutex::new(UuidV7State::default())));

impl Env {
    /// The operating system's randomness and clock.
    pub fn system() -> Env {
        Env { ids: Box::new(OsRandom), clock: Box::new(SystemClock), v7: PROCESS_V7.clone(), agent_dir: None }
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

/// Options for a new session (`NewSessionOptions`).
#[derive(Clone, Debug, Default)]
pub struct NewSessionOptions {
    /// A caller-chosen session id (checked against pi's rule).
    pub id: Option<String>,
    /// The `parentSession` header field.
    pub parent_session: Option<String>,
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

/// What following a session file found (see [`SessionManager::refresh`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refresh {
    /// Nothing new.
    Unchanged,
    /// Another process appended these records (indices), in file order.
    Appended(Vec<usize>),
    /// The file was truncated, rewritten or replaced (or appeared where there was none) and was read again as an
    /// open reads it.
    Reset,
    /// The file is gone, or is no longer a session (emptied into something else, replaced by a file without a
    /// header or by something that is not a regular file). The session stays in memory; see
    /// [`SessionManager::refresh`] for what reads and writes do then.
    Deleted,
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
}

struct RecordBodies<'a> {
    records: &'a [Record],
    file: Option<&'a SessionFile>,
    path: &'a str,
}

impl Bodies for RecordBodies<'_> {
    fn bytes(&self, record: usize) -> Result<Vec<u8>> {
        let r = &self.records[record];
        let read = match self.file {
            Some(f) => f.read_body(&r.body),
            None => store::read_body(None, &r.body),
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
        };
        if persist && !m.session_dir.is_empty() && !paths::as_path(&m.session_dir).exists() {
            std::fs::create_dir_all(&m.session_dir).map_err(|e| Error::io("create directory", &m.session_dir, e))?;
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
            _ => super::catalog::default_session_dir(cwd, &env.agent_dir())?,
        };
        Self::construct(cwd, &dir, None, true, options, None, env)
    }

    /// `SessionManager.open(path, sessionDir?, cwdOverride?)`. Reads without writing (see the module doc).
    pub fn open(path: &str, session_dir: Option<&str>, cwd_override: Option<&str>, env: Env) -> Result<Self> {
        let resolved = paths::resolve_path(path);
        let mut preloaded = None;
        let mut header_cwd = None;
        if paths::as_path(&resolved).exists() {
            let (file, loaded) = SessionFile::open(&resolved, Durability::None)?;
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
        let (dir, filter_cwd) = super::catalog::directory_for(cwd, session_dir, &env.agent_dir())?;
        let recent = super::catalog::find_most_recent_session(&dir, filter_cwd.then_some(cwd));
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
        if !paths::as_path(&source).exists() {
            return Err(invalid());
        }
        let (source_file, mut loaded) = SessionFile::open(&source, Durability::None)?;
        if !loaded.has_valid_header() {
            return Err(invalid());
        }
        let dir = match session_dir {
            Some(d) if !d.is_empty() => paths::normalize_path(d),
            _ => super::catalog::default_session_dir(&target, &env.agent_dir())?,
        };
        if !paths::as_path(&dir).exists() {
            std::fs::create_dir_all(&dir).map_err(|e| Error::io("create directory", &dir, e))?;
        }
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
        let src_file = source_file.reader();
        let mut content = Vec::new();
        header.write_canonical(&mut content);
        content.push(b'\n');
        for r in loaded.records.iter().filter(|r| !r.is_header()) {
            let bytes = store::read_body(Some(src_file), &r.body).map_err(|e| Error::io("read", &source, e))?;
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
            None if paths::as_path(&resolved).exists() => Some(SessionFile::open(&resolved, self.durability)?),
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
        let opened = if paths::as_path(&resolved).exists() {
            Some(SessionFile::open(&resolved, self.durability)?)
        } else {
            None
        };
        self.pending = PendingRepairs::default();
        self.lines.clear();
        self.set_session_file_inner(&resolved, opened)
    }

    // ----------------------------------------------------------------------------------------------------------
    // Appends

    fn new_entry_id(&mut self) -> String {
        let index = &self.index;
        ids::generate_entry_id(self.env.ids.as_mut(), |id| index.has_str(id))
    }

    /// The common fields of a new entry, in pi's order: type, id, parentId, timestamp.
    fn base_entry(&mut self, kind: &str) -> (Object, String) {
        let (_, timestamp) = self.env.now_iso();
        let id = self.new_entry_id();
        let mut o = Object::new();
        o.insert("type", Json::str(kind));
        o.insert("id", Json::str(&id));
        // `parentId: this.leafId`; an undefined leaf (an id-less last entry) writes no member at all.
        if let Some(parent) = key_json(&self.index.leaf) {
            o.insert("parentId", parent);
        }
        o.insert("timestamp", Json::str(&timestamp));
        (o, id)
    }

    fn append_entry(&mut self, entry: Json) -> Result<usize> {
        let mut bytes = Vec::new();
        entry.write_canonical(&mut bytes);
        let record = record_from_bytes(bytes);
        let previous_leaf = self.index.leaf.clone();
        let i = self.records.len();
        self.records.push(record);
        self.index.add(i, &self.records[i]);
        if let Err(e) = self.persist_entry(i) {
            let r = self.records.pop().expect("just pushed");
            self.index.remove_newest(&r.id, previous_leaf);
            return Err(e);
        }
        if self.records[i].kind == EntryType::Label {
            let r = self.records[i].clone();
            self.index.apply_label(&r);
        }
        Ok(i)
    }

    /// pi's `_hasConversation`: any message entry with a user or assistant message, on any branch.
    fn has_conversation(&self) -> Result<bool> {
        for r in &self.records {
            if r.kind == EntryType::Message {
                if r.message.property_access_throws() {
                    return Err(Error::InvalidEntry {
                        line: r.line,
                        message: "message entry has no message object (pi 1.6.0 throws a TypeError here)".into(),
                    });
                }
                if r.is_conversation() {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    fn persist_entry(&mut self, i: usize) -> Result<()> {
        if !self.persist {
            return Ok(());
        }
        let Some(path) = self.session_file.clone() else { return Ok(()) };
        if !self.flushed {
            if !self.has_conversation()? {
                return Ok(());
            }
            self.write_new_file(&path, self.records.len())?;
            self.flushed = true;
            return Ok(());
        }
        self.apply_repairs_before(i)?;
        let mut line = self.bodies().bytes(i)?;
        line.push(b'\n');
        let appended = match self.file.as_mut() {
            Some(file) => file.append_line(&line),
            None => Err(Error::io("append to", &path, std::io::ErrorKind::NotFound.into())),
        };
        match appended {
            Ok(a) => {
                if let Some((offset, len)) = a.terminated_fragment {
                    self.note_torn_fragment(offset, len);
                }
                let len = line.len() as u64 - 1;
                self.records[i].body = Body::file(a.offset, len);
                self.lines.push(LineSlot { offset: a.offset, len, record: Some(i) });
                Ok(())
            }
            // The file was deleted while open (pi #8939): write it again, header and all, never a headerless file.
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                tracing::warn!("{path} was deleted while open; writing it again with its header");
                self.write_new_file(&path, i + 1)
            }
            Err(e) => Err(e),
        }
    }

    /// A fragment another writer left unterminated was ended with `\n` before our line: keep it as a torn line.
    fn note_torn_fragment(&mut self, offset: u64, len: u64) {
        let line = self.lines.len() as u32 + 1;
        self.lines.push(LineSlot { offset, len, record: None });
        self.warnings.push(Warning {
            line,
            kind: WarningKind::TornTail,
            message: "another writer left this line incomplete; it is kept and ended, and later lines start fresh"
                .to_owned(),
        });
    }

    /// Every line to write for a file holding records `..upto`: the loaded layout (lines pi would drop
    /// included) followed by records added since.
    fn layout(&self, upto: usize) -> Vec<LineSlot> {
        let mut slots: Vec<LineSlot> =
            self.lines.iter().filter(|s| s.record.is_none_or(|r| r < upto)).copied().collect();
        let covered: std::collections::HashSet<usize> = slots.iter().filter_map(|s| s.record).collect();
        slots.extend((0..upto).filter(|r| !covered.contains(r)).map(|r| LineSlot {
            offset: 0,
            len: 0,
            record: Some(r),
        }));
        slots
    }

    /// Writes `slots` (record bodies, or raw lines read from the current file) and returns where each landed.
    fn write_layout(
        &self,
        slots: &[LineSlot],
        reader: Option<&File>,
        w: &mut dyn std::io::Write,
    ) -> std::io::Result<Vec<LineSlot>> {
        use std::os::unix::fs::FileExt;
        let mut placed = Vec::with_capacity(slots.len());
        let mut offset = 0u64;
        for slot in slots {
            let bytes = match slot.record {
                Some(r) => trim_json_ws(&store::read_body(reader, &self.records[r].body)?).to_vec(),
                None => {
                    let mut raw = vec![0u8; slot.len as usize];
                    reader
                        .ok_or_else(|| std::io::Error::other("no file to copy a line from"))?
                        .read_exact_at(&mut raw, slot.offset)?;
                    raw
                }
            };
            w.write_all(&bytes)?;
            w.write_all(b"\n")?;
            placed.push(LineSlot { offset, len: bytes.len() as u64, record: slot.record });
            offset += bytes.len() as u64 + 1;
        }
        Ok(placed)
    }

    /// Creates `path` exclusively with records `..upto` (the lazy first write, or a deleted file written again)
    /// and makes it this session's file.
    fn write_new_file(&mut self, path: &str, upto: usize) -> Result<()> {
        let slots = self.layout(upto);
        let mut content = Vec::new();
        let reader = self.file.as_ref().map(SessionFile::reader);
        let placed = self.write_layout(&slots, reader, &mut content).map_err(|e| Error::io("write", path, e))?;
        let file = SessionFile::create(path, &content, self.durability)?;
        self.adopt_layout(placed);
        self.file = Some(file);
        self.tail = None;
        Ok(())
    }

    /// Points every record at its place in the file just written.
    fn adopt_layout(&mut self, placed: Vec<LineSlot>) {
        for slot in &placed {
            if let Some(r) = slot.record {
                self.records[r].body = Body::file(slot.offset, slot.len);
            }
        }
        self.lines = placed;
    }

    /// Applies pi's held-back load-time repairs now. Called before the first write to an opened file; callers
    /// that want pi's eager behaviour (rewrite on open) may call it right after opening.
    pub fn apply_pending_repairs(&mut self) -> Result<()> {
        self.apply_repairs_before(self.records.len())
    }

    /// Applies the held-back repairs for the file as it was before record `upto` (the entry about to be appended
    /// is not part of what pi wrote at load).
    fn apply_repairs_before(&mut self, upto: usize) -> Result<()> {
        if !self.persist || self.session_file.is_none() || self.file.is_none() {
            return Ok(());
        }
        if self.pending.rewrite {
            let slots = self.layout(upto);
            let mut placed = Vec::new();
            // The rewrite reads the old file through its own handle while the new one is written.
            let mut file = self.file.take().expect("checked");
            let result = file.replace(|reader, w| {
                placed = self.write_layout(&slots, Some(reader), w)?;
                Ok(())
            });
            self.file = Some(file);
            result?;
            self.adopt_layout(placed);
            self.pending = PendingRepairs::default();
            self.tail = None;
        } else if self.pending.final_newline {
            self.file.as_mut().expect("checked").append_raw(b"\n")?;
            self.pending.final_newline = false;
            self.tail = None;
        }
        Ok(())
    }

    /// Follows the file as another process (pi itself) writes it: new complete lines become records, in file
    /// order, as a fresh open would read them (a line still being written is left for later). If the leaf was at
    /// the last entry it moves to the new last entry, as a fresh open would put it; a leaf the host moved
    /// elsewhere stays.
    ///
    /// A file truncated, rewritten in place or replaced is read again as an open would read it ([`Refresh::Reset`])
    /// when it is still a session (a shorter one, another one). A session file that appears where this session had
    /// nothing on disk yet (a new session, an empty file) is read the same way. When the path no longer holds a
    /// session ([`Refresh::Deleted`]: removed, emptied, or holding something else), the session stays in memory:
    /// bodies are still read from the old file if it was deleted or renamed over (its descriptor is kept), and
    /// fail with an error naming the entry if its bytes were overwritten or truncated in place; a write to a
    /// deleted file puts the whole session back, a write over anything else is refused (it would land in a file
    /// another program is writing, or has emptied). Each later refresh looks again (without reading the path
    /// while it stays as it was) and reads it as soon as it is a session again.
    pub fn refresh(&mut self) -> Result<Refresh> {
        if !self.persist {
            return Ok(Refresh::Unchanged);
        }
        if !self.flushed {
            return self.follow_appearance();
        }
        let Some(file) = self.file.as_mut() else { return Ok(Refresh::Unchanged) };
        if let Some(seen) = file.detached() {
            let path = self.session_file.as_deref().expect("a flushed session has a file");
            return match store::FileStamp::of_path(path).map_err(|e| Error::io("stat", path, e))? {
                None => {
                    // Gone altogether now: a deleted session file, which the next write puts back.
                    file.reattach();
                    Ok(Refresh::Deleted)
                }
                Some(now) if now == seen => Ok(Refresh::Deleted),
                Some(_) => self.reload(),
            };
        }
        match file.state()? {
            store::FileState::Same => Ok(Refresh::Unchanged),
            store::FileState::Missing => Ok(Refresh::Deleted),
            store::FileState::Replaced | store::FileState::Shrunk | store::FileState::Rewritten => self.reload(),
            // Nothing of ours is in the file (it was empty when opened): what is there now is read from scratch.
            store::FileState::Grew(_) if file.is_empty() => self.reload(),
            store::FileState::Grew(_) => self.follow_appends(),
        }
    }

    /// A new session that wrote nothing yet, watching its path: once another process writes a session there,
    /// it is read as an open would read it.
    fn follow_appearance(&mut self) -> Result<Refresh> {
        let Some(path) = self.session_file.clone() else { return Ok(Refresh::Unchanged) };
        let has_entries = self.records.iter().any(|r| !r.is_header());
        if has_entries || self.file.is_some() || !paths::as_path(&path).is_file() {
            return Ok(Refresh::Unchanged);
        }
        match SessionFile::open(&path, self.durability) {
            Ok((file, loaded)) if loaded.has_valid_header() => {
                self.lines.clear();
                self.pending = PendingRepairs::default();
                self.set_session_file_inner(&path, Some((file, loaded)))?;
                Ok(Refresh::Reset)
            }
            // Not (yet) a session: pi may be in the middle of writing it.
            Ok(_) => Ok(Refresh::Unchanged),
            Err(e) if e.is_not_found() => Ok(Refresh::Unchanged),
            Err(e) => Err(e),
        }
    }

    /// Reads the file again from scratch, as an open reads it (it was truncated, rewritten or replaced under us).
    fn reload(&mut self) -> Result<Refresh> {
        let path = self.session_file.clone().expect("a flushed session has a file");
        let Some(seen) = store::FileStamp::of_path(&path).map_err(|e| Error::io("stat", &path, e))? else {
            return Ok(Refresh::Deleted);
        };
        let opened =
            if paths::as_path(&path).is_file() { Some(SessionFile::open(&path, self.durability)) } else { None };
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
            Ok(()) => Ok(Refresh::Reset),
            Err(e) if e.is_not_found() => Ok(Refresh::Deleted),
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
                Ok(Refresh::Deleted)
            }
        }
    }

    /// True when the path held something that is not this session when it was last followed.
    pub fn is_detached(&self) -> bool {
        self.file.as_ref().is_some_and(|f| f.detached().is_some())
    }

    fn follow_appends(&mut self) -> Result<Refresh> {
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
            return Ok(Refresh::Unchanged);
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
        Ok(Refresh::Appended(
            (first_new + already_known..self.records.len()).filter(|&i| !self.records[i].is_header()).collect(),
        ))
    }

    /// The pending load-time repairs.
    pub fn pending_repairs(&self) -> PendingRepairs {
        self.pending
    }

    /// How hard writes try to reach the disk (default: like pi, no fsync).
    pub fn set_durability(&mut self, durability: Durability) {
        self.durability = durability;
        if let Some(f) = self.file.as_mut() {
            f.set_durability(durability);
        }
    }

    /// fsyncs writes that group commit ([`Durability::Batch`]) left pending.
    pub fn sync(&mut self) -> Result<()> {
        match self.file.as_mut() {
            Some(f) => f.sync(),
            None => Ok(()),
        }
    }

    /// `appendMessage(message)`. Returns the new entry's id.
    pub fn append_message(&mut self, message: Json) -> Result<String> {
        let (mut o, id) = self.base_entry("message");
        o.insert("message", message);
        self.append_entry(Json::Object(o))?;
        Ok(id)
    }

    /// `appendThinkingLevelChange(thinkingLevel)`.
    pub fn append_thinking_level_change(&mut self, thinking_level: Json) -> Result<String> {
        let (mut o, id) = self.base_entry("thinking_level_change");
        o.insert("thinkingLevel", thinking_level);
        self.append_entry(Json::Object(o))?;
        Ok(id)
    }

    /// `appendModelChange(provider, modelId)`.
    pub fn append_model_change(&mut self, provider: Json, model_id: Json) -> Result<String> {
        let (mut o, id) = self.base_entry("model_change");
        o.insert("provider", provider);
        o.insert("modelId", model_id);
        self.append_entry(Json::Object(o))?;
        Ok(id)
    }

    /// `appendUsage(kind, provider, model, usage, note?)`. Returns the entry's index (pi returns the entry).
    pub fn append_usage(
        &mut self,
        kind: Json,
        provider: Json,
        model: Json,
        usage: Json,
        note: Option<Json>,
    ) -> Result<usize> {
        let (mut o, _) = self.base_entry("usage");
        o.insert("kind", kind);
        o.insert("provider", provider);
        o.insert("model", model);
        o.insert("usage", usage);
        if let Some(note) = note.filter(Json::truthy) {
            o.insert("note", note);
        }
        self.append_entry(Json::Object(o))
    }

    /// `appendCompaction(summary, firstKeptEntryId | null, tokensBefore, details?, fromHook?, usage?)`, plus the
    /// seed's optional `retainedTail` (written last; `firstKeptEntryId` is always written too).
    #[allow(clippy::too_many_arguments)]
    pub fn append_compaction(
        &mut self,
        summary: Json,
        first_kept_entry_id: Option<Json>,
        tokens_before: Json,
        details: Option<Json>,
        from_hook: Option<Json>,
        usage: Option<Json>,
        retained_tail: Option<Json>,
    ) -> Result<String> {
        self.append_compaction_with(
            summary,
            first_kept_entry_id,
            tokens_before,
            details,
            from_hook,
            usage,
            None,
            retained_tail,
        )
    }

    /// [`SessionManager::append_compaction`] with an explicit checkpoint system message (written as given) instead
    /// of pi's replay of the current system messages.
    #[allow(clippy::too_many_arguments)]
    pub fn append_compaction_with(
        &mut self,
        summary: Json,
        first_kept_entry_id: Option<Json>,
        tokens_before: Json,
        details: Option<Json>,
        from_hook: Option<Json>,
        usage: Option<Json>,
        system_message: Option<Json>,
        retained_tail: Option<Json>,
    ) -> Result<String> {
        let (ms, timestamp) = self.env.now_iso();
        let system = match system_message {
            Some(given) => Some(given),
            None => {
                let projection = self.build_session_projection()?;
                let bodies = self.bodies();
                let messages: Vec<Json> =
                    projection.messages().map(|m| context::message_value(&bodies, m)).collect::<Result<_>>()?;
                context::current_system_message(&messages)?.map(|s| match s.into_object() {
                    Ok(mut sm) => {
                        sm.insert("timestamp", Json::number(ms));
                        Json::Object(sm)
                    }
                    Err(other) => other,
                })
            }
        };
        let id = self.new_entry_id();
        let mut o = Object::new();
        o.insert("type", Json::str("compaction"));
        o.insert("id", Json::str(&id));
        if let Some(parent) = key_json(&self.index.leaf) {
            o.insert("parentId", parent);
        }
        o.insert("timestamp", Json::str(&timestamp));
        o.insert("summary", summary);
        o.insert(
            "firstKeptEntryId",
            match first_kept_entry_id {
                None | Some(Json::Null) => Json::str(&id),
                Some(v) => v,
            },
        );
        o.insert("tokensBefore", tokens_before);
        for (k, v) in [("details", details), ("usage", usage), ("fromHook", from_hook)] {
            if let Some(v) = v {
                o.insert(k, v);
            }
        }
        if let Some(sm) = system {
            o.insert("systemMessage", sm);
        }
        if let Some(tail) = retained_tail {
            o.insert("retainedTail", tail);
        }
        self.append_entry(Json::Object(o))?;
        Ok(id)
    }

    /// `appendCustomEntry(customType, data?)`. Key order: type, customType, data, id, parentId, timestamp.
    pub fn append_custom_entry(&mut self, custom_type: Json, data: Option<Json>) -> Result<String> {
        let (base, id) = self.base_entry("custom");
        let mut o = Object::new();
        o.insert("type", Json::str("custom"));
        o.insert("customType", custom_type);
        if let Some(d) = data {
            o.insert("data", d);
        }
        for k in ["id", "parentId", "timestamp"] {
            o.insert(k, base.get(k).cloned().unwrap_or(Json::Null));
        }
        self.append_entry(Json::Object(o))?;
        Ok(id)
    }

    /// `appendSessionInfo(name)`: CR/LF runs become one space, then the name is trimmed (an empty name clears).
    pub fn append_session_info(&mut self, name: &JsString) -> Result<String> {
        let sanitized = name.collapse_line_breaks().trim();
        let (mut o, id) = self.base_entry("session_info");
        o.insert("name", Json::String(sanitized));
        self.append_entry(Json::Object(o))?;
        Ok(id)
    }

    /// `appendCustomMessageEntry(customType, content, display, details?)`. Key order: type, customType, content,
    /// display, details, id, parentId, timestamp.
    pub fn append_custom_message_entry(
        &mut self,
        custom_type: Json,
        content: Json,
        display: Json,
        details: Option<Json>,
    ) -> Result<String> {
        let (base, id) = self.base_entry("custom_message");
        let mut o = Object::new();
        o.insert("type", Json::str("custom_message"));
        o.insert("customType", custom_type);
        o.insert("content", content);
        o.insert("display", display);
        if let Some(d) = details {
            o.insert("details", d);
        }
        for k in ["id", "parentId", "timestamp"] {
            o.insert(k, base.get(k).cloned().unwrap_or(Json::Null));
        }
        self.append_entry(Json::Object(o))?;
        Ok(id)
    }

    /// `appendContextEdit(targetId, replacement)`: `replacement` is `null` (omit the target) or `{content}`
    /// (string or array). None stands for `undefined`, which pi rejects.
    pub fn append_context_edit(&mut self, target_id: &Key, replacement: Option<Json>) -> Result<String> {
        let valid = match &replacement {
            Some(Json::Null) => true,
            Some(Json::Object(o)) => matches!(o.get("content"), Some(Json::String(_) | Json::Array(_))),
            _ => false,
        };
        if !valid {
            return Err(Error::InvalidReplacement);
        }
        let Some(target) = self.index.get(target_id) else {
            return Err(Error::EntryNotFound { id: target_id.display() });
        };
        let branch = self.index.branch(&self.records, None);
        if !branch.iter().any(|&i| self.records[i].id == *target_id) {
            return Err(Error::NotOnActiveBranch { id: target_id.display() });
        }
        let t = &self.records[target];
        let role = if t.kind == EntryType::Message {
            if t.message.property_access_throws() {
                return Err(Error::InvalidEntry {
                    line: t.line,
                    message: "message entry has no message object (pi 1.6.0 throws a TypeError here)".into(),
                });
            }
            Some(if t.message == super::entry::MessageShape::Object { t.role } else { super::entry::Role::Other })
        } else {
            None
        };
        use super::entry::Role;
        let editable =
            t.kind == EntryType::CustomMessage || matches!(role, Some(Role::User | Role::Assistant | Role::ToolResult));
        if !editable {
            return Err(Error::NotEditable { id: target_id.display() });
        }
        let replacement = replacement.expect("validated");
        let normalized = match (&replacement, role) {
            (Json::Object(o), Some(Role::Assistant | Role::ToolResult)) => match o.get("content") {
                Some(Json::String(text)) => {
                    let mut n = Object::new();
                    n.insert("content", context::text_blocks(text.clone()));
                    Json::Object(n)
                }
                _ => replacement.clone(),
            },
            _ => replacement.clone(),
        };
        let (mut o, id) = self.base_entry("context_edit");
        if let Some(t) = key_json(target_id) {
            o.insert("targetId", t);
        }
        o.insert("replacement", normalized);
        self.append_entry(Json::Object(o))?;
        Ok(id)
    }

    /// `appendLabelChange(targetId, label?)`: a truthy label sets, anything else clears. None writes no `label`
    /// member (pi's `undefined`).
    pub fn append_label_change(&mut self, target_id: &Key, label: Option<Json>) -> Result<String> {
        if !self.index.contains(target_id) {
            return Err(Error::EntryNotFound { id: target_id.display() });
        }
        let (mut o, id) = self.base_entry("label");
        if let Some(t) = key_json(target_id) {
            o.insert("targetId", t);
        }
        if let Some(l) = label {
            o.insert("label", l);
        }
        self.append_entry(Json::Object(o))?;
        Ok(id)
    }

    // ----------------------------------------------------------------------------------------------------------
    // Branching

    /// `branch(entryId)`: move the leaf to an existing entry.
    pub fn branch(&mut self, entry_id: &Key) -> Result<()> {
        if !self.index.contains(entry_id) {
            return Err(Error::EntryNotFound { id: entry_id.display() });
        }
        self.index.leaf = entry_id.clone();
        Ok(())
    }

    /// `resetLeaf()`: the next append starts a new root.
    pub fn reset_leaf(&mut self) {
        self.index.leaf = Key::Null;
    }

    /// `branchWithSummary(branchFromId | null, summary, details?, fromHook?, usage?)`: move the leaf and append a
    /// `branch_summary` whose `fromId` is the abandoned leaf (`"root"` when there was none).
    pub fn branch_with_summary(
        &mut self,
        branch_from_id: Option<&Key>,
        summary: Json,
        details: Option<Json>,
        from_hook: Option<Json>,
        usage: Option<Json>,
    ) -> Result<String> {
        if let Some(id) = branch_from_id {
            if !self.index.contains(id) {
                return Err(Error::EntryNotFound { id: id.display() });
            }
        }
        let from_id = key_json(&self.index.leaf).filter(|v| *v != Json::Null).unwrap_or_else(|| Json::str("root"));
        self.index.leaf = branch_from_id.cloned().unwrap_or(Key::Null);
        let (mut o, id) = self.base_entry("branch_summary");
        o.insert("fromId", from_id);
        o.insert("summary", summary);
        for (k, v) in [("details", details), ("usage", usage), ("fromHook", from_hook)] {
            if let Some(v) = v {
                o.insert(k, v);
            }
        }
        self.append_entry(Json::Object(o))?;
        Ok(id)
    }

    /// `createBranchedSession(leafId)`: this manager becomes a new session holding only the path to `leafId`
    /// (labels dropped from the path and re-created after it, parents re-chained). Returns the new file path
    /// (None in memory). The old file is untouched.
    pub fn create_branched_session(&mut self, leaf_id: &Key) -> Result<Option<String>> {
        let previous_file = self.session_file.clone();
        let path = self.index.branch(&self.records, Some(leaf_id));
        if path.is_empty() {
            return Err(Error::EntryNotFound { id: leaf_id.display() });
        }
        // Re-chain the path without its labels; remember what each removed label "stood before".
        let mut kept: Vec<(usize, Key, Option<Key>)> = Vec::new(); // (record, new parent, new firstKeptEntryId)
        let mut replacement_by_label: indexmap::IndexMap<Key, Key> = indexmap::IndexMap::new();
        let mut pending_labels: Vec<Key> = Vec::new();
        let mut parent = Key::Null;
        for &i in &path {
            let r = &self.records[i];
            if r.kind == EntryType::Label {
                pending_labels.push(r.id.clone());
                continue;
            }
            for l in pending_labels.drain(..) {
                replacement_by_label.insert(l, r.id.clone());
            }
            let first_kept = match &r.detail {
                Detail::Compaction { first_kept, .. } if r.kind == EntryType::Compaction => {
                    if *first_kept == r.id {
                        None
                    } else {
                        replacement_by_label.get(first_kept).cloned()
                    }
                }
                _ => None,
            };
            kept.push((i, parent.clone(), first_kept));
            parent = r.id.clone();
        }
        let new_id = self.env.session_id();
        let (_, timestamp) = self.env.now_iso();
        let new_file = paths::join(&[&self.session_dir, &format!("{}_{}.jsonl", file_stamp(&timestamp), new_id)]);
        let parent_session = if self.persist { previous_file.as_deref() } else { None };
        let header = header_json(&new_id, &timestamp, &self.cwd, parent_session);

        // New records: the old bodies (still in the old file) with parentId and firstKeptEntryId spliced in.
        let mut new_records = vec![record_from_bytes(header.to_canonical_string().into_bytes())];
        let mut path_ids: std::collections::HashSet<Key> = std::collections::HashSet::new();
        for (i, new_parent, first_kept) in &kept {
            let r = &self.records[*i];
            let mut nr = r.clone();
            if r.is_object {
                let patch = nr.body.patch_mut();
                match key_text(new_parent) {
                    Some(t) => patch.set("parentId", t),
                    None => patch.remove("parentId"),
                }
                if let Some(fk) = first_kept {
                    match key_text(fk) {
                        Some(t) => patch.set("firstKeptEntryId", t),
                        None => patch.remove("firstKeptEntryId"),
                    }
                }
            }
            nr.parent = new_parent.clone();
            if let (Some(fk), Detail::Compaction { first_kept_index, .. }) = (first_kept, &r.detail) {
                nr.detail = Detail::Compaction { first_kept: fk.clone(), first_kept_index: *first_kept_index };
            }
            path_ids.insert(r.id.clone());
            new_records.push(nr);
        }
        let labels: Vec<(Key, Json, Option<Json>)> = self
            .index
            .labels()
            .filter(|(target, _)| path_ids.contains(*target))
            .map(|(t, l)| (t.clone(), l.label.clone(), l.timestamp.clone()))
            .collect();
        let mut label_parent = match kept.last().map(|(i, _, _)| &self.records[*i].id) {
            Some(k) if k.truthy() => k.clone(),
            _ => Key::Null,
        };
        for (target, label, ts) in labels {
            let label_id = ids::generate_entry_id(self.env.ids.as_mut(), |id| path_ids.contains(&Key::str(id)));
            let mut o = Object::new();
            o.insert("type", Json::str("label"));
            o.insert("id", Json::str(&label_id));
            o.insert("parentId", key_json(&label_parent).unwrap_or(Json::Null));
            if let Some(ts) = ts {
                o.insert("timestamp", ts);
            }
            if let Some(t) = key_json(&target) {
                o.insert("targetId", t);
            }
            o.insert("label", label);
            new_records.push(record_from_bytes(Json::Object(o).to_canonical_string().into_bytes()));
            path_ids.insert(Key::str(&label_id));
            label_parent = Key::str(&label_id);
        }
        self.records = new_records;
        self.session_id = Json::str(&new_id);
        self.index = TreeIndex::build(&self.records);
        self.lines.clear();
        self.tail = None;
        self.pending = PendingRepairs::default();
        self.warnings.clear();
        if self.persist && self.has_conversation()? {
            // Written at once, streamed from the old file (which stays untouched).
            self.session_file = Some(new_file.clone());
            self.write_new_file(&new_file, self.records.len())?;
            self.flushed = true;
            return Ok(Some(new_file));
        }
        // Not written yet: the bodies must outlive the old file, so they move into memory (a path without a user
        // or assistant message is small).
        for i in 0..self.records.len() {
            let bytes = self.bodies().bytes(i)?;
            self.records[i].body = Body::memory(bytes);
        }
        self.file = None;
        self.flushed = false;
        if !self.persist {
            return Ok(None);
        }
        self.session_file = Some(new_file.clone());
        Ok(Some(new_file))
    }

    // ----------------------------------------------------------------------------------------------------------
    // Reads

    /// Entry bodies of this session.
    pub fn bodies(&self) -> impl Bodies + '_ {
        RecordBodies {
            records: &self.records,
            file: self.file.as_ref(),
            path: self.session_file.as_deref().unwrap_or("session file"),
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
