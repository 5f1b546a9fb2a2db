//! v1 → v2 → v3 migration, pi's `migrateToCurrentVersion`, step for step, as edits to the raw lines.
//!
//! v1 files are linear and id-less: every entry gets a fresh 8-hex id and the previous entry as parent (so a
//! version-less header over a branched file is flattened, exactly as pi does), and a compaction's
//! `firstKeptEntryIndex` becomes `firstKeptEntryId`. v2 renames the message role `hookMessage` to `custom`. The
//! version comes from the first header with JavaScript's coercions (`"2"` is 2, a missing version is 1, and a
//! version that is not a number at all makes pi "migrate" without changing anything). Changes are recorded as
//! [`Patch`](super::json::patch::Patch)es on each body, so bytes pi would not change stay as they are.

use super::entry::{CompactionDetail, Detail, EntryType, MessageShape, Record, Role};
use super::error::{Error, Result};
use super::ids::{generate_entry_id, IdSource};
use super::js::to_number;
use super::json::Json;
use super::key::Key;

/// The version pi writes.
pub const CURRENT_SESSION_VERSION: f64 = 3.0;

/// The version pi reads from `records` (`header?.version ?? 1`, as a number; NaN when it is not one).
pub fn file_version(records: &[Record]) -> f64 {
    let header = records.iter().find(|r| r.is_header()).and_then(Record::header);
    match header.and_then(|h| h.get("version")) {
        None | Some(Json::Null) => 1.0,
        v => to_number(v),
    }
}

/// Migrates `records` in place. Returns true when pi would rewrite the file (any version below 3, or one that
/// is not a number).
pub fn migrate(records: &mut [Record], ids: &mut dyn IdSource) -> Result<bool> {
    let version = file_version(records);
    if version >= CURRENT_SESSION_VERSION {
        return Ok(false);
    }
    if version < 2.0 {
        v1_to_v2(records, ids)?;
    }
    if version < 3.0 {
        v2_to_v3(records);
    }
    // A skeleton describes the bytes as read: a migrated entry's are described again from its patched bytes.
    for record in records.iter_mut().filter(|r| r.body.patch.is_some()) {
        record.skeleton = None;
    }
    Ok(true)
}

fn set_header_version(record: &mut Record, version: u32) {
    record.body.patch_mut().set("version", version.to_string());
    if let Detail::Header(h) = &mut record.detail {
        if let Json::Object(o) = h.as_mut() {
            o.insert("version", Json::number(f64::from(version)));
        }
    }
}

fn v1_to_v2(records: &mut [Record], ids: &mut dyn IdSource) -> Result<()> {
    let mut prev: Key = Key::Null;
    for i in 0..records.len() {
        if records[i].is_header() {
            set_header_version(&mut records[i], 2);
            continue;
        }
        // Migration draws from an empty set that is never filled, so ids are not checked against each other.
        // The id is drawn before it is assigned, as in pi, even when the assignment then fails.
        let id = generate_entry_id(ids, |_| false);
        if !records[i].is_object && !records[i].is_array {
            // pi assigns `entry.id` on whatever JSON.parse returned; on a number or string that is a TypeError
            // in strict mode. Arrays accept the property but never serialise it.
            return Err(Error::InvalidEntry {
                line: records[i].line,
                message: "Cannot create property 'id' on a primitive value (pi 1.6.0 fails to migrate this v1 file)"
                    .to_owned(),
            });
        }
        let record = &mut records[i];
        if record.is_object {
            let patch = record.body.patch_mut();
            patch.set("id", Json::str(&id).to_canonical_string());
            patch.set("parentId", prev.to_json_text().unwrap_or_else(|| "null".to_owned()));
        }
        record.id = Key::str(&id);
        record.parent = prev.clone();
        prev = record.id.clone();
        if record.kind == EntryType::Compaction {
            if let Some(index) = match &record.detail {
                Detail::Compaction(c) => c.first_kept_index,
                _ => None,
            } {
                let target = (index >= 0.0 && index.fract() == 0.0 && (index as usize) < records.len())
                    .then(|| &records[index as usize])
                    .filter(|t| !t.is_header())
                    .map(|t| t.id.clone());
                let record = &mut records[i];
                let patch = record.body.patch_mut();
                patch.remove("firstKeptEntryIndex");
                if let Some(target) = target {
                    // `comp.firstKeptEntryId = targetEntry.id`: undefined is a key that JSON.stringify drops.
                    match target.to_json_text() {
                        Some(text) => patch.set("firstKeptEntryId", text),
                        None => patch.remove("firstKeptEntryId"),
                    }
                    record.detail =
                        Detail::Compaction(Box::new(CompactionDetail { first_kept: target, first_kept_index: None }));
                } else if let Detail::Compaction(c) = &mut record.detail {
                    c.first_kept_index = None;
                }
            }
        }
    }
    Ok(())
}

fn v2_to_v3(records: &mut [Record]) {
    for record in records.iter_mut() {
        if record.is_header() {
            set_header_version(record, 3);
        } else if record.kind == EntryType::Message
            && record.message == MessageShape::Object
            && record.role == Role::HookMessage
        {
            record.body.patch_mut().nested_mut("message").set("role", "\"custom\"".to_owned());
            record.role = Role::Custom;
        }
    }
}
