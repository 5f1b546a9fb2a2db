//! Kept skeletons: what an open read of a session file, kept in a file pi-sessiond owns, so the next open of the
//! unchanged file (in this process or another) reads only what was appended since.
//!
//! Opening a 40 MB session reads and validates 40 MB; what the open keeps of it — each line's [`Record`] with its
//! skeleton, every line's place, the load warnings — is a few MB. That is written beside the catalog index
//! (`<dir>/<digest of the path>.skel`), and the next open asks [`Known::judge`], with the file's stamp and known
//! bytes as they were when it was read, whether the file is the same one: the same (never trusting `mtime` alone:
//! `ctime`, size, inode and the known bytes all count), so nothing is read; grown, so only the new bytes are read
//! on top; anything else (rewritten in place, truncated, replaced), so it is read whole and kept again.
//!
//! A kept file is only ever a cache: it carries a CRC-32 of all its bytes and the version of the program that
//! wrote it, and one that is missing, damaged, from another version or about another path is ignored and written
//! again. It is written to a temporary name and renamed, so a reader never sees half of one. Session files are
//! only read here. The bytes are the engine's own compact encoding, written by hand: the records hold the
//! engine's JavaScript-valued keys and values, which already have exact writers and parsers.

use std::fs::OpenOptions;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use sha2::Digest;

use super::entry::{
    Body, BodySource, CompactionDetail, ContextEditDetail, Detail, EntryType, LabelDetail, MessageShape, Record, Role,
};
use super::error::Result;
use super::identity::{now_ns, FileStamp, FileState, Known};
use super::json::{JsString, Json};
use super::key::Key;
use super::store::{Disk, DiskFile, Durability, LineSlot, LoadedFile, SessionFile, Warning, WarningKind};
use super::tree::TreeIndex;

/// Files smaller than this are read, not kept: reading them costs less than a kept file would.
pub const KEEP_FROM_BYTES: u64 = 256 << 10;

/// What a kept file starts with: the format and the program that wrote it (records mean what this build
/// means by them). The format's number goes up whenever what a record holds changes within a version (5: a key
/// written with an escape, `"m\u0065ssage"`, is the name `JSON.parse` reads, so such a message has its role and
/// preview).
const MAGIC: &str = concat!("pi-sessiond kept skeletons 5 ", env!("CARGO_PKG_VERSION"), "\n");

/// Where kept skeletons live: a directory pi-sessiond owns (beside the catalog index).
#[derive(Clone, Debug)]
pub struct Keep {
    dir: String,
}

impl Keep {
    /// Skeletons kept in `dir` (created when first needed).
    pub fn in_dir(dir: &str) -> Arc<Keep> {
        Arc::new(Keep { dir: dir.to_owned() })
    }

    /// Skeletons kept beside the catalog index at `index_path`: in `skeletons/` next to it.
    pub fn beside_index(index_path: &str) -> Arc<Keep> {
        let parent = std::path::Path::new(index_path).parent().map(|p| p.to_string_lossy().into_owned());
        let parent = parent.filter(|p| !p.is_empty()).unwrap_or_else(|| ".".to_owned());
        Keep::in_dir(&format!("{parent}/skeletons"))
    }

    /// The kept file for the session at `path` (which is absolute).
    pub fn file_for(&self, path: &str) -> String {
        let digest = sha2::Sha256::digest(path.as_bytes());
        let name: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
        format!("{}/{name}.skel", self.dir)
    }

    /// Opens the session file at `path` as [`SessionFile::open`] does, from what is kept of it when that is still
    /// the file's (reading only what was appended since), and keeps what was read when anything was.
    pub fn open(&self, path: &str, durability: Durability) -> Result<(SessionFile, LoadedFile)> {
        self.open_on(&super::store::real_disk(), path, durability, true)
    }

    /// [`Keep::open`] with the session file and the kept one read and written through `disk`. Without
    /// `skeletons` (see [`SessionFile::open_knowing`]) the records kept may have none; an open that makes them
    /// does not take such a kept file (its skeleton snapshot would read every line again) and keeps its own.
    pub fn open_on(
        &self,
        disk: &Arc<dyn Disk>,
        path: &str,
        durability: Durability,
        skeletons: bool,
    ) -> Result<(SessionFile, LoadedFile)> {
        let kept_at = self.file_for(path);
        let mut from_kept = None;
        let (file, loaded) = SessionFile::open_knowing(disk, path, durability, skeletons, |reader, now| {
            let kept = read_kept(disk, &kept_at, path)?;
            if skeletons && !kept.every_skeleton {
                return None;
            }
            let known = Known {
                stamp: &kept.stamp,
                len: kept.loaded.len,
                head: &kept.head,
                tail: &kept.tail,
                observed_at_ns: kept.observed_at_ns,
            };
            match known.judge(now, reader) {
                FileState::Same | FileState::Grew(_) => {
                    from_kept = Some((kept.loaded.len, kept.loaded.records.len()));
                    Some(kept.loaded)
                }
                _ => None,
            }
        })?;
        let unchanged = from_kept.is_some_and(|(len, _)| len == loaded.len);
        let mut loaded = loaded;
        if !unchanged && keepable(&loaded) {
            if loaded.tree_warnings.is_none() {
                loaded.tree_warnings = tree_warnings(&loaded.records);
            }
            // A cache: failing to keep costs the next open a read, never this one its answer.
            if let Err(e) = write_kept(disk, &self.dir, &kept_at, path, &file, &loaded) {
                tracing::debug!("skeletons of {path} not kept in {kept_at}: {e}");
            }
        }
        Ok((file, loaded))
    }
}

/// The tree's warnings over `records` as a session would show them once opened, when that does not depend on
/// the open: records of a file at pi's current version, under its first line's header (an older file is migrated
/// first, which may give entries new ids; a file without a header gets a new one). Found here, once, for the
/// kept file, so that every later open of the unchanged file skips the walk (a fifth of a kept open); the open
/// that keeps them uses them too.
fn tree_warnings(records: &[Record]) -> Option<Vec<Warning>> {
    let current = records.first().is_some_and(Record::is_header)
        && super::migrate::file_version(records) >= super::migrate::CURRENT_SESSION_VERSION;
    current.then(|| TreeIndex::build_diagnosed(records).1)
}

/// What is kept of a file: what its open read, and what tells whether it is still that file.
struct Kept {
    stamp: FileStamp,
    observed_at_ns: i64,
    head: Vec<u8>,
    tail: Vec<u8>,
    loaded: LoadedFile,
    /// [`LoadedFile::has_every_skeleton`], found while decoding rather than by another pass over every record
    /// (4% of a kept open).
    every_skeleton: bool,
}

/// Worth keeping, and keepable: large enough, ending with a complete line, every record's bytes in the file as
/// read (a load gives nothing else; checked, not assumed).
fn keepable(loaded: &LoadedFile) -> bool {
    loaded.len >= KEEP_FROM_BYTES
        && loaded.ends_a_line()
        && loaded.records.iter().all(|r| r.body.patch.is_none() && matches!(r.body.source, BodySource::File { .. }))
}

fn read_kept(disk: &Arc<dyn Disk>, kept_at: &str, path: &str) -> Option<Kept> {
    let file = DiskFile::open(disk, kept_at, OpenOptions::new().read(true)).ok()?;
    // Mapped, not read: the records' skeletons point into the mapping rather than each being copied out, and the
    // pages are the page cache's own, where a read copied them into as many fresh pages of this process (a third
    // of the faults of a kept open, 670 for the 40 MB session; 4.7 against 5.5 ms). Kept files are only ever
    // replaced by a rename (`write_kept`), so a mapping keeps the bytes it was made of.
    let bytes = Bytes::from_owner(file.map().ok()?);
    let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(4)?)?;
    if crc32fast::hash(body).to_le_bytes() != sum {
        return None;
    }
    let mut r = Reader { bytes: body, at: 0, shared: &bytes };
    if r.take(MAGIC.len())? != MAGIC.as_bytes() || r.bytes_field()? != path.as_bytes() {
        return None;
    }
    let stamp = FileStamp {
        dev: r.u64()?,
        ino: r.u64()?,
        size: r.u64()?,
        mtime_ns: r.u64()? as i64,
        ctime_ns: r.u64()? as i64,
        regular: r.u8()? == 1,
    };
    let observed_at_ns = r.u64()? as i64;
    let head = r.bytes_field()?.to_vec();
    let tail = r.bytes_field()?.to_vec();
    let (loaded, every_skeleton) = decode_loaded(&mut r)?;
    (r.at == body.len()).then_some(Kept { stamp, observed_at_ns, head, tail, loaded, every_skeleton })
}

fn write_kept(
    disk: &Arc<dyn Disk>,
    dir: &str,
    kept_at: &str,
    path: &str,
    file: &SessionFile,
    loaded: &LoadedFile,
) -> std::io::Result<()> {
    let known = file.known();
    if known.len != loaded.len {
        return Ok(());
    }
    let mut w = Vec::with_capacity(64 + loaded.records.len() * 256 + loaded.lines.len() * 16);
    w.extend_from_slice(MAGIC.as_bytes());
    put_bytes(&mut w, path.as_bytes());
    let s = known.stamp;
    for v in [s.dev, s.ino, s.size, s.mtime_ns as u64, s.ctime_ns as u64] {
        put_u64(&mut w, v);
    }
    w.push(u8::from(s.regular));
    put_u64(&mut w, known.observed_at_ns as u64);
    put_bytes(&mut w, known.head);
    put_bytes(&mut w, known.tail);
    encode_loaded(&mut w, loaded);
    let sum = crc32fast::hash(&w);
    w.extend_from_slice(&sum.to_le_bytes());
    std::fs::create_dir_all(dir)?;
    let temp = format!("{kept_at}.{}.{}.tmp", std::process::id(), now_ns());
    let written = DiskFile::open(disk, &temp, OpenOptions::new().write(true).create(true).truncate(true))
        .and_then(|f| f.write_all(&w))
        .and_then(|()| disk.rename(Path::new(&temp), Path::new(kept_at)));
    if written.is_err() {
        let _ = disk.remove_file(Path::new(&temp));
    }
    written
}

fn put_u64(w: &mut Vec<u8>, v: u64) {
    w.extend_from_slice(&v.to_le_bytes());
}

fn put_bytes(w: &mut Vec<u8>, b: &[u8]) {
    put_u64(w, b.len() as u64);
    w.extend_from_slice(b);
}

/// `None` as `u64::MAX`.
fn put_opt(w: &mut Vec<u8>, v: Option<u64>) {
    put_u64(w, v.unwrap_or(u64::MAX));
}

/// The bytes of a kept file, read field by field; every read is checked, so a damaged file gives None.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    /// The buffer `bytes` lies in, for fields kept as slices of it.
    shared: &'a Bytes,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let b = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(b)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u64(&mut self) -> Option<u64> {
        self.take(8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    fn len(&mut self) -> Option<usize> {
        usize::try_from(self.u64()?).ok()
    }

    fn bytes_field(&mut self) -> Option<&'a [u8]> {
        let n = self.len()?;
        self.take(n)
    }

    /// A length-prefixed field as a slice of the shared buffer, not a copy.
    fn shared_field(&mut self) -> Option<Bytes> {
        let start = self.at + 8;
        let field = self.bytes_field()?;
        Some(self.shared.slice(start..start + field.len()))
    }

    fn opt(&mut self) -> Option<Option<u64>> {
        self.u64().map(|v| (v != u64::MAX).then_some(v))
    }
}

const ROLES: [Role; 8] = [
    Role::User,
    Role::Assistant,
    Role::ToolResult,
    Role::System,
    Role::BashExecution,
    Role::Custom,
    Role::HookMessage,
    Role::Other,
];
const SHAPES: [MessageShape; 4] =
    [MessageShape::Missing, MessageShape::Null, MessageShape::Object, MessageShape::Primitive];
const WARNING_KINDS: [WarningKind; 11] = [
    WarningKind::MalformedLine,
    WarningKind::TornTail,
    WarningKind::MissingFinalNewline,
    WarningKind::NonObjectLine,
    WarningKind::ExtraHeader,
    WarningKind::DuplicateId,
    WarningKind::MissingParent,
    WarningKind::SelfParent,
    WarningKind::ParentCycle,
    WarningKind::LegacyVersion,
    WarningKind::UnusableEntry,
];

/// The index of `v` in `all` (every variant is listed).
fn index_of<T: PartialEq>(all: &[T], v: &T) -> u8 {
    all.iter().position(|x| x == v).expect("every variant is listed") as u8
}

fn put_key(w: &mut Vec<u8>, k: &Key) {
    match k {
        Key::Undefined => w.push(0),
        Key::Null => w.push(1),
        Key::Bool(b) => w.push(2 + u8::from(*b)),
        Key::Number(bits) => {
            w.push(4);
            put_u64(w, *bits);
        }
        Key::Str(s) => {
            w.push(5);
            put_bytes(w, s.as_bytes());
        }
        // Each object id is its own key, as each `JSON.parse` makes a new object: a new identity when read back.
        Key::Object(_) => w.push(6),
    }
}

fn key(r: &mut Reader<'_>) -> Option<Key> {
    Some(match r.u8()? {
        0 => Key::Undefined,
        1 => Key::Null,
        2 => Key::Bool(false),
        3 => Key::Bool(true),
        4 => Key::Number(r.u64()?),
        5 => Key::Str(JsString::from_wtf8_slice(r.bytes_field()?)),
        6 => Key::fresh_object(),
        _ => return None,
    })
}

/// A parsed value, as the JSON text that parses back to it (`None` as empty text).
fn put_json(w: &mut Vec<u8>, v: Option<&Json>) {
    let mut text = Vec::new();
    if let Some(v) = v {
        v.write_preserving(&mut text);
    }
    put_bytes(w, &text);
}

fn json(r: &mut Reader<'_>) -> Option<Option<Json>> {
    let text = r.bytes_field()?;
    if text.is_empty() {
        return Some(None);
    }
    Json::parse(text).ok().map(Some)
}

/// Tag of a parent that is the previous record's id, as nearly every parent is: read back as a copy of that id
/// (no length, no validation), a tenth of a kept open's decoding.
const PARENT_IS_PREVIOUS_ID: u8 = 7;

fn put_record(w: &mut Vec<u8>, rec: &Record, previous_id: Option<&Key>) {
    let BodySource::File { offset, len } = rec.body.source else { unreachable!("kept records are in the file") };
    put_u64(w, u64::from(rec.line));
    put_u64(w, offset);
    put_u64(w, len);
    w.push(u8::from(rec.is_object) | u8::from(rec.is_array) << 1 | u8::from(rec.content_nullish) << 2);
    w.push(index_of(&EntryType::ALL, &rec.kind));
    w.push(index_of(&SHAPES, &rec.message));
    w.push(index_of(&ROLES, &rec.role));
    put_key(w, &rec.id);
    match previous_id {
        Some(previous) if matches!(previous, Key::Str(_)) && *previous == rec.parent => w.push(PARENT_IS_PREVIOUS_ID),
        _ => put_key(w, &rec.parent),
    }
    put_u64(w, rec.time_ms.to_bits());
    match &rec.detail {
        Detail::None => w.push(0),
        Detail::Header(h) => {
            w.push(1);
            put_json(w, Some(h));
        }
        Detail::Label(label_detail) => {
            let LabelDetail { target, label, timestamp } = &**label_detail;
            w.push(2);
            put_key(w, target);
            put_json(w, label.as_ref());
            put_json(w, timestamp.as_ref());
        }
        Detail::SessionInfo(name) => {
            w.push(3);
            put_json(w, name.as_deref());
        }
        Detail::Compaction(c) => {
            w.push(4);
            put_key(w, &c.first_kept);
            put_opt(w, c.first_kept_index.map(f64::to_bits));
        }
        Detail::ContextEdit(e) => {
            w.push(5);
            put_key(w, &e.target);
            w.push(u8::from(e.has_replacement));
        }
    }
    match &rec.skeleton {
        Some(s) => {
            w.push(1);
            put_bytes(w, s);
        }
        None => w.push(0),
    }
    // Where the line's long strings are: a lazy page of a kept open leaves them in the file as a fresh open's does.
    match &rec.long_strings {
        Some(ranges) => {
            w.push(1);
            put_u64(w, ranges.len() as u64);
            for &(start, end) in ranges.iter() {
                put_u64(w, u64::from(start));
                put_u64(w, u64::from(end));
            }
        }
        None => w.push(0),
    }
}

fn record(r: &mut Reader<'_>, previous_id: Option<&Key>) -> Option<Record> {
    let line = u32::try_from(r.u64()?).ok()?;
    let body = Body::file(r.u64()?, r.u64()?);
    let flags = r.u8()?;
    let kind = *EntryType::ALL.get(usize::from(r.u8()?))?;
    let message = *SHAPES.get(usize::from(r.u8()?))?;
    let role = *ROLES.get(usize::from(r.u8()?))?;
    let id = key(r)?;
    let parent = match r.bytes.get(r.at) {
        Some(&PARENT_IS_PREVIOUS_ID) => {
            r.at += 1;
            previous_id?.clone()
        }
        _ => key(r)?,
    };
    let time_ms = f64::from_bits(r.u64()?);
    let detail = match r.u8()? {
        0 => Detail::None,
        1 => Detail::Header(Box::new(json(r)??)),
        2 => Detail::Label(Box::new(LabelDetail { target: key(r)?, label: json(r)?, timestamp: json(r)? })),
        3 => Detail::SessionInfo(json(r)?.map(Box::new)),
        4 => Detail::Compaction(Box::new(CompactionDetail {
            first_kept: key(r)?,
            first_kept_index: r.opt()?.map(f64::from_bits),
        })),
        5 => Detail::ContextEdit(Box::new(ContextEditDetail { target: key(r)?, has_replacement: r.u8()? == 1 })),
        _ => return None,
    };
    let skeleton = match r.u8()? {
        0 => None,
        1 => Some(r.shared_field()?),
        _ => return None,
    };
    let long_strings = match r.u8()? {
        0 => None,
        1 => {
            let n = usize::try_from(r.u64()?).ok()?;
            // A count no record could have is damage: the file is rebuilt, not believed.
            let mut ranges = Vec::with_capacity(n.min(1 << 16));
            for _ in 0..n {
                ranges.push((u32::try_from(r.u64()?).ok()?, u32::try_from(r.u64()?).ok()?));
            }
            Some(ranges.into_boxed_slice())
        }
        _ => return None,
    };
    Some(Record {
        line,
        body,
        is_object: flags & 1 != 0,
        is_array: flags & 2 != 0,
        kind,
        id,
        parent,
        time_ms,
        message,
        role,
        content_nullish: flags & 4 != 0,
        detail,
        skeleton,
        long_strings,
    })
}

fn encode_loaded(w: &mut Vec<u8>, loaded: &LoadedFile) {
    put_u64(w, loaded.len);
    put_u64(w, loaded.records.len() as u64);
    let mut previous_id = None;
    for rec in &loaded.records {
        put_record(w, rec, previous_id);
        previous_id = Some(&rec.id);
    }
    put_u64(w, loaded.lines.len() as u64);
    for l in &loaded.lines {
        put_u64(w, l.offset);
        put_u64(w, l.len);
        put_opt(w, l.record.map(|r| r as u64));
    }
    put_warnings(w, &loaded.warnings);
    match &loaded.tree_warnings {
        None => w.push(0),
        Some(tree) => {
            w.push(1);
            put_warnings(w, tree);
        }
    }
}

fn put_warnings(w: &mut Vec<u8>, warnings: &[Warning]) {
    put_u64(w, warnings.len() as u64);
    for warning in warnings {
        put_u64(w, u64::from(warning.line));
        w.push(index_of(&WARNING_KINDS, &warning.kind));
        put_bytes(w, warning.message.as_bytes());
    }
}

/// The loaded file, and whether every record but the headers has its skeleton.
fn decode_loaded(r: &mut Reader<'_>) -> Option<(LoadedFile, bool)> {
    let len = r.u64()?;
    // Counts are checked against the bytes left, so a damaged count cannot ask for a huge allocation.
    let count = |r: &mut Reader<'_>, least: usize| r.len().filter(|n| n.saturating_mul(least) <= r.bytes.len() - r.at);
    let n = count(r, 20)?;
    let mut records: Vec<Record> = Vec::with_capacity(n);
    let mut every_skeleton = true;
    for _ in 0..n {
        let rec = record(r, records.last().map(|previous| &previous.id))?;
        every_skeleton &= !rec.lacks_skeleton();
        records.push(rec);
    }
    let n = count(r, 24)?;
    let mut lines = Vec::with_capacity(n);
    for _ in 0..n {
        let (offset, len, record) = (r.u64()?, r.u64()?, r.opt()?);
        let record = record.map(usize::try_from).transpose().ok()?.filter(|&i| i < records.len());
        lines.push(LineSlot { offset, len, record });
    }
    let warnings = read_warnings(r)?;
    let tree_warnings = match r.u8()? {
        0 => None,
        1 => Some(read_warnings(r)?),
        _ => return None,
    };
    Some((LoadedFile { records, lines, warnings, len, needs_final_newline: false, tree_warnings }, every_skeleton))
}

fn read_warnings(r: &mut Reader<'_>) -> Option<Vec<Warning>> {
    let n = r.len().filter(|n| n.saturating_mul(17) <= r.bytes.len() - r.at)?;
    let mut warnings = Vec::with_capacity(n);
    for _ in 0..n {
        let line = u32::try_from(r.u64()?).ok()?;
        let kind = *WARNING_KINDS.get(usize::from(r.u8()?))?;
        let message = String::from_utf8(r.bytes_field()?.to_vec()).ok()?;
        warnings.push(Warning { line, kind, message });
    }
    Some(warnings)
}
