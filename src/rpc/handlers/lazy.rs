//! Entries with their long strings left in the file: what a host that reads bodies only when it touches them
//! (pi's drop-in) holds instead of the session.
//!
//! A 2.7 GB session of screenshots is a few thousand entries whose every field but the base64 is small. pi walks
//! all of them (its footer sums `message.usage` over every entry) yet reads image data only for the few messages
//! in its context. So an entry goes to such a host as stored, except that each string whose stored literal is
//! longer than the host's threshold is `null`, with where the literal lies in the file: `{"entry": …, "line":
//! [offset, length], "lazy": [[path, offset, length], …]}`. The host puts a getter at each path that reads the
//! literal itself and checks it against the line. Entries the file does not hold as they are read (migrated or
//! re-chained records, entries not written yet) and entries whose objects repeat a key (where `JSON.parse`
//! keeps another value than a path names) come whole: `{"entry": …}`.

use std::ops::Range;

use crate::session::entry::BodySource;
use crate::session::json::scan::{Scanner, SyntaxError};
use crate::session::manager::trim_json_ws;
use crate::session::render::JsonOut;
use crate::session::{Error, SessionManager};

/// One step of a path from an entry to one of its strings.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// An object member: the key's literal (quotes included) in the line.
    Key(Range<usize>),
    /// An array element.
    Index(usize),
}

/// A string left out: its path and its literal's range in the line.
type Left = (Vec<Step>, Range<usize>);

/// Writes `[lazy entry, …]` for record indices, reading ahead in file order.
pub fn entries(m: &SessionManager, list: &[usize], over: usize, out: &mut JsonOut<'_>) -> crate::session::Result<()> {
    let bodies = m.bodies_in_order();
    out.raw(b"[")?;
    for (n, &i) in list.iter().enumerate() {
        if n > 0 {
            out.raw(b",")?;
        }
        let record = &m.records()[i];
        let bytes = crate::session::context::Bodies::bytes(&bodies, i)?;
        let line = trim_json_ws(&bytes);
        let at = match (&record.body.source, &record.body.patch) {
            (BodySource::File { offset, .. }, None) if record.is_object => {
                Some(offset + (line.as_ptr() as usize - bytes.as_ptr() as usize) as u64)
            }
            _ => None,
        };
        let left = match at {
            Some(_) => strings_over(line, over).map_err(|_| changed(m))?,
            None => None,
        };
        entry(line, at.zip(left), out)?;
    }
    out.raw(b"]")
}

/// The error for a line that no longer scans: another process rewrote the file under the handle.
fn changed(m: &SessionManager) -> Error {
    Error::io(
        "read",
        m.session_file().unwrap_or("session file"),
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "the session file changed on disk under this handle (an entry is no longer JSON); open it again",
        ),
    )
}

/// Writes one lazy entry: whole when `left` is `None`, else with those strings as `null` and where they are
/// (`left.0`: the line's offset in the file).
fn entry(line: &[u8], left: Option<(u64, Vec<Left>)>, out: &mut JsonOut<'_>) -> crate::session::Result<()> {
    out.raw(b"{\"entry\":")?;
    let Some((at, left)) = left.filter(|(_, l)| !l.is_empty()) else {
        out.stored(line)?;
        return out.raw(b"}");
    };
    let mut text = Vec::with_capacity(line.len().min(1 << 16));
    let mut from = 0;
    for (_, range) in &left {
        text.extend_from_slice(&line[from..range.start]);
        text.extend_from_slice(b"null");
        from = range.end;
    }
    text.extend_from_slice(&line[from..]);
    out.stored(&text)?;
    out.raw(format!(",\"line\":[{at},{}],\"lazy\":[", line.len()).as_bytes())?;
    for (n, (path, range)) in left.iter().enumerate() {
        let mut item = Vec::new();
        if n > 0 {
            item.push(b',');
        }
        item.extend_from_slice(b"[[");
        for (k, step) in path.iter().enumerate() {
            if k > 0 {
                item.push(b',');
            }
            match step {
                Step::Key(key) => item.extend_from_slice(&line[key.clone()]),
                Step::Index(i) => item.extend_from_slice(i.to_string().as_bytes()),
            }
        }
        item.extend_from_slice(format!("],{},{}]", at + range.start as u64, range.len()).as_bytes());
        out.stored(&item)?;
    }
    out.raw(b"]}")
}

/// The strings of the object `line` whose literal is longer than `over` bytes, in document order, each with its
/// path; `None` when an object repeats a key or a key has an escape (a path by key could then name another
/// value than the one `JSON.parse` keeps). One pass over the line, whatever its nesting.
fn strings_over(line: &[u8], over: usize) -> Result<Option<Vec<Left>>, SyntaxError> {
    let bad = |offset, message| SyntaxError { offset, message };
    let mut s = Scanner::new(line);
    let mut left = Vec::new();
    // Per open container: the keys seen so far (objects) or None (arrays), and the path to the current value.
    let mut open: Vec<Option<Vec<Range<usize>>>> = Vec::new();
    let mut path: Vec<Step> = Vec::new();
    let key = |s: &mut Scanner<'_>| -> Result<Range<usize>, SyntaxError> {
        s.skip_ws();
        if line.get(s.pos) != Some(&b'"') {
            return Err(bad(s.pos, "expected a key"));
        }
        let start = s.pos;
        s.scan_string()?;
        let range = start..s.pos;
        s.skip_ws();
        if line.get(s.pos) != Some(&b':') {
            return Err(bad(s.pos, "expected ':'"));
        }
        s.pos += 1;
        Ok(range)
    };
    // Registers a key in the innermost object; false when it repeats one or is escaped.
    let fresh = |keys: &mut Vec<Range<usize>>, k: &Range<usize>| {
        let raw = &line[k.clone()];
        if raw.contains(&b'\\') || keys.iter().any(|o| &line[o.clone()] == raw) {
            return false;
        }
        keys.push(k.clone());
        true
    };
    'value: loop {
        s.skip_ws();
        match line.get(s.pos) {
            Some(b'{') => {
                s.pos += 1;
                s.skip_ws();
                if line.get(s.pos) == Some(&b'}') {
                    s.pos += 1;
                } else {
                    let k = key(&mut s)?;
                    let mut keys = Vec::new();
                    if !fresh(&mut keys, &k) {
                        return Ok(None);
                    }
                    open.push(Some(keys));
                    path.push(Step::Key(k));
                    continue 'value;
                }
            }
            Some(b'[') => {
                s.pos += 1;
                s.skip_ws();
                if line.get(s.pos) == Some(&b']') {
                    s.pos += 1;
                } else {
                    open.push(None);
                    path.push(Step::Index(0));
                    continue 'value;
                }
            }
            Some(b'"') => {
                let start = s.pos;
                s.scan_string()?;
                if s.pos - start > over && !path.is_empty() {
                    left.push((path.clone(), start..s.pos));
                }
            }
            Some(_) => s.skip_value()?,
            None => return Err(bad(s.pos, "unexpected end")),
        }
        // After a value: the next member or element, or the end of containers.
        loop {
            let Some(top) = open.last_mut() else {
                return Ok(Some(left));
            };
            s.skip_ws();
            match (line.get(s.pos), top) {
                (Some(b','), Some(keys)) => {
                    s.pos += 1;
                    let k = key(&mut s)?;
                    if !fresh(keys, &k) {
                        return Ok(None);
                    }
                    *path.last_mut().expect("a step per container") = Step::Key(k);
                    continue 'value;
                }
                (Some(b','), None) => {
                    s.pos += 1;
                    if let Some(Step::Index(i)) = path.last_mut() {
                        *i += 1;
                    }
                    continue 'value;
                }
                (Some(b'}'), Some(_)) | (Some(b']'), None) => {
                    s.pos += 1;
                    open.pop();
                    path.pop();
                }
                _ => return Err(bad(s.pos, "expected ',' or the container's end")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::json::Json;

    fn lazy_json(line: &str, at: u64, over: usize) -> Json {
        let mut out = JsonOut::memory();
        let left = strings_over(line.as_bytes(), over).unwrap();
        entry(line.as_bytes(), left.map(|l| (at, l)), &mut out).unwrap();
        Json::parse(&out.into_bytes()).unwrap()
    }

    #[test]
    fn long_strings_become_null_with_their_path_and_their_place_in_the_file() {
        let data = "A".repeat(40);
        let line = format!(
            r#"{{"type":"message","id":"a","message":{{"role":"user","content":[{{"type":"text","text":"hi"}},{{"type":"image","data":"{data}","mimeType":"image/png"}}]}}}}"#
        );
        let got = lazy_json(&line, 1000, 16);
        let start = line.find(&format!("\"{data}\"")).unwrap() as u64;
        assert_eq!(
            got.to_canonical_string(),
            Json::parse(
                format!(
                    r#"{{"entry":{{"type":"message","id":"a","message":{{"role":"user","content":[{{"type":"text","text":"hi"}},{{"type":"image","data":null,"mimeType":"image/png"}}]}}}},"line":[1000,{}],"lazy":[[["message","content",1,"data"],{},42]]}}"#,
                    line.len(),
                    1000 + start
                )
                .as_bytes()
            )
            .unwrap()
            .to_canonical_string()
        );
    }

    #[test]
    fn an_entry_without_long_strings_comes_whole() {
        let line = r#"{"type":"label","id":"l","targetId":"a","label":"short"}"#;
        assert_eq!(lazy_json(line, 7, 16).to_canonical_string(), format!(r#"{{"entry":{line}}}"#));
    }

    #[test]
    fn a_repeated_key_keeps_the_entry_whole() {
        let line = format!(r#"{{"type":"custom","id":"c","data":"{}","data":"x"}}"#, "B".repeat(40));
        assert_eq!(strings_over(line.as_bytes(), 16).unwrap(), None);
    }

    #[test]
    fn strings_in_nested_arrays_get_every_index_on_their_path() {
        let long = "C".repeat(20);
        let line = format!(r#"{{"a":[[1,"{long}"],{{"b":["x","{long}"]}}],"k":"{long}"}}"#);
        let left = strings_over(line.as_bytes(), 16).unwrap().unwrap();
        let paths: Vec<String> = left
            .iter()
            .map(|(p, _)| {
                p.iter()
                    .map(|s| match s {
                        Step::Key(k) => line[k.clone()].to_owned(),
                        Step::Index(i) => i.to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join("/")
            })
            .collect();
        assert_eq!(paths, [r#""a"/0/1"#, r#""a"/1/"b"/1"#, r#""k""#]);
        for (_, r) in &left {
            assert_eq!(&line[r.clone()], format!("\"{long}\""));
        }
    }

    #[test]
    fn a_line_that_is_not_json_is_an_error() {
        assert!(strings_over(br#"{"a":"#, 16).is_err());
        assert!(strings_over(br#"{"a":1"#, 16).is_err());
    }
}
