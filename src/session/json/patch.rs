//! Surgical edits to a raw JSON object: set or remove top-level members and leave every other byte alone.
//!
//! pi rewrites a file by re-serialising every parsed entry, which silently changes what it did not mean to
//! change: `12345678901234567890` becomes `12345678901234567000`, `\u00e9` becomes `é`, duplicate keys vanish.
//! When we must change an entry that we did not write (migration adds `id`/`parentId`, a branched copy re-chains
//! `parentId`), we splice the new member values into the original bytes instead.

use super::scan::{object_members, validate_document};

/// Member edits to apply to one object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Patch {
    /// Members to set, as (key, JSON text of the value). An existing member keeps its position (every duplicate
    /// gets the new value); a missing one is appended, in this order — exactly where JavaScript assignment would
    /// put it.
    pub set: Vec<(String, String)>,
    /// Members to remove (every duplicate).
    pub remove: Vec<String>,
    /// Edits to apply inside the object value of a member (a v2 `hookMessage` role lives in `message.role`).
    pub nested: Vec<(String, Patch)>,
}

impl Patch {
    /// True when the patch changes nothing.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.remove.is_empty() && self.nested.iter().all(|(_, p)| p.is_empty())
    }

    /// The patch for the object value of member `key`, created on first use.
    pub fn nested_mut(&mut self, key: &str) -> &mut Patch {
        let i = match self.nested.iter().position(|(k, _)| k == key) {
            Some(i) => i,
            None => {
                self.nested.push((key.to_owned(), Patch::default()));
                self.nested.len() - 1
            }
        };
        &mut self.nested[i].1
    }

    /// Sets `key` to the JSON text `value`, replacing an earlier setting of the same key in this patch.
    pub fn set(&mut self, key: &str, value: String) {
        self.remove.retain(|k| k != key);
        match self.set.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.set.push((key.to_owned(), value)),
        }
    }

    /// Removes `key`.
    pub fn remove(&mut self, key: &str) {
        self.set.retain(|(k, _)| k != key);
        if !self.remove.iter().any(|k| k == key) {
            self.remove.push(key.to_owned());
        }
    }
}

/// Applies `patch` to `line`, which must hold one JSON object (white space around it is dropped). Returns the
/// object's text with the edits; bytes of members the patch does not name are copied unchanged.
pub fn apply(line: &[u8], patch: &Patch) -> Vec<u8> {
    let range = validate_document(line).expect("patch target must be valid JSON");
    assert_eq!(line[range.start], b'{', "patch target must be an object");
    if patch.is_empty() {
        return line[range].to_vec();
    }
    let members = object_members(line, range.clone());
    let mut out = Vec::with_capacity(range.len() + 64);
    let mut wrote_member = false;
    let mut prev_value_end: Option<usize> = None;
    let first_key_start = members.first().map(|m| m.key.start).unwrap_or(range.start + 1);
    out.extend_from_slice(&line[range.start..first_key_start]);
    for m in &members {
        let removed = patch.remove.iter().any(|k| m.key_is(line, k));
        if !removed {
            if wrote_member {
                // The separator that stood before this member in the source (`,` with its white space).
                let sep_start = prev_value_end.expect("previous member");
                out.extend_from_slice(&line[sep_start..m.key.start]);
            }
            out.extend_from_slice(&line[m.key.start..m.value.start]);
            let nested = patch.nested.iter().find(|(k, _)| m.key_is(line, k)).map(|(_, p)| p);
            match patch.set.iter().find(|(k, _)| m.key_is(line, k)) {
                Some((_, v)) => out.extend_from_slice(v.as_bytes()),
                None => match nested {
                    Some(p) if line[m.value.start] == b'{' => out.extend_from_slice(&apply(&line[m.value.clone()], p)),
                    _ => out.extend_from_slice(&line[m.value.clone()]),
                },
            }
            wrote_member = true;
        }
        prev_value_end = Some(m.value.end);
    }
    for (k, v) in &patch.set {
        if members.iter().any(|m| m.key_is(line, k)) {
            continue;
        }
        if wrote_member {
            out.push(b',');
        }
        super::string::write_json_string_bytes(k.as_bytes(), &mut out);
        out.push(b':');
        out.extend_from_slice(v.as_bytes());
        wrote_member = true;
    }
    // After the last member there is only white space and the closing brace.
    let tail_start = members.last().map(|m| m.value.end).unwrap_or(first_key_start);
    out.extend_from_slice(&line[tail_start..range.end]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patch(line: &str, set: &[(&str, &str)], remove: &[&str]) -> String {
        let mut p = Patch::default();
        for (k, v) in set {
            p.set(k, v.to_string());
        }
        for k in remove {
            p.remove(k);
        }
        String::from_utf8(apply(line.as_bytes(), &p)).unwrap()
    }

    #[test]
    fn appends_missing_members_in_assignment_order() {
        assert_eq!(
            patch(r#"{"type":"message","n":12345678901234567890}"#, &[("id", r#""ab""#), ("parentId", "null")], &[]),
            r#"{"type":"message","n":12345678901234567890,"id":"ab","parentId":null}"#
        );
        assert_eq!(patch("{}", &[("id", "1")], &[]), r#"{"id":1}"#);
        assert_eq!(patch("{ }\r", &[("id", "1")], &[]), r#"{"id":1 }"#);
    }

    #[test]
    fn replaces_existing_members_in_place_including_duplicates() {
        assert_eq!(
            patch(r#"{"id":"old","x":"\u00e9","id":"dup"}"#, &[("id", r#""new""#)], &[]),
            r#"{"id":"new","x":"\u00e9","id":"new"}"#
        );
    }

    #[test]
    fn nested_edits_change_only_the_named_inner_member() {
        let mut p = Patch::default();
        p.nested_mut("message").set("role", r#""custom""#.to_owned());
        let out = apply(br#"{"type":"message","message":{"role":"hookMessage","n":1.50}}"#, &p);
        assert_eq!(out, br#"{"type":"message","message":{"role":"custom","n":1.50}}"#);
    }

    #[test]
    fn removes_members_with_their_separator() {
        assert_eq!(patch(r#"{"a":1, "b":2 ,"c":3}"#, &[], &["b"]), r#"{"a":1 ,"c":3}"#);
        assert_eq!(patch(r#"{"a":1,"b":2}"#, &[], &["a"]), r#"{"b":2}"#);
        assert_eq!(patch(r#"{"a":1,"b":2}"#, &[], &["b"]), r#"{"a":1}"#);
        assert_eq!(patch(r#"{"a":1}"#, &[("c", "3")], &["a"]), r#"{"c":3}"#);
    }
}
