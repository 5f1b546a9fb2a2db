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
use crate::session::json::scan::{Scanner, SyntaxError, LONG_STRING};
use crate::session::manager::trim_json_ws;
use crate::session::render::JsonOut;
use crate::session::{Error, SessionManager};

/// One step of a path from an entry to one of its strings.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// An object member: the key's literal (quotes included) in the text walked.
    Key(Range<usize>),
    /// An array element.
    Index(usize),
}

/// A value left out: its path (keys in the text walked) and its literal's range in the file.
type Left = (Vec<Step>, Range<u64>);

/// Values a walk picked: each one's path and range in the text walked; `None` when a key repeats or is escaped.
type Picked = Option<Vec<(Vec<Step>, Range<usize>)>>;

/// Writes `[lazy entry, …]` for record indices, reading ahead in file order. At the engine's own threshold
/// ([`LONG_STRING`]), the long strings are already known from the open, and only the bytes around them are read:
/// a 2.7 GB session of images costs a few MB of reads here, not a second pass over its bytes.
pub fn entries(m: &SessionManager, list: &[usize], over: usize, out: &mut JsonOut<'_>) -> crate::session::Result<()> {
    let bodies = m.bodies_in_order();
    out.raw(b"[")?;
    for (n, &i) in list.iter().enumerate() {
        if n > 0 {
            out.raw(b",")?;
        }
        if over == LONG_STRING {
            if let Some((at, text)) = m.line_around_long_strings(i, b"null", &bodies)? {
                if around(m, i, at, &text, out)? {
                    continue;
                }
            }
        }
        let record = &m.records()[i];
        let bytes = crate::session::context::Bodies::bytes(&bodies, i)?;
        let line = trim_json_ws(&bytes);
        let lead = (line.as_ptr() as usize - bytes.as_ptr() as usize) as u64;
        let at = match (&record.body.source, &record.body.patch) {
            (BodySource::File { offset, .. }, None) if record.is_object => Some(offset + lead),
            _ => None,
        };
        from_line(line, at, over, out)?.map_err(|_| changed(m))?;
    }
    out.raw(b"]")
}

/// Writes one entry from its whole line, at `at` in the file (`None`: not the file's line as it lies there, so
/// it comes whole), with its strings longer than `over` left out.
fn from_line(
    line: &[u8],
    at: Option<u64>,
    over: usize,
    out: &mut JsonOut<'_>,
) -> crate::session::Result<Result<(), SyntaxError>> {
    let Some(at) = at else { return whole(line, out).map(Ok) };
    let found = match walk(line, |r| line[r.start] == b'"' && r.len() > over) {
        Ok(Some(found)) if !found.is_empty() => found,
        Ok(_) => return whole(line, out).map(Ok),
        Err(e) => return Ok(Err(e)),
    };
    let mut text = Vec::with_capacity(line.len().min(1 << 16));
    let mut from = 0;
    for (_, r) in &found {
        text.extend_from_slice(&line[from..r.start]);
        text.extend_from_slice(b"null");
        from = r.end;
    }
    text.extend_from_slice(&line[from..]);
    let left: Vec<Left> = found.into_iter().map(|(p, r)| (p, at + r.start as u64..at + r.end as u64)).collect();
    lazy(&text, line, (at, line.len()), &left, out).map(Ok)
}

/// Writes record `i` from `text`, its line (at `at` in the file) with each long string the open found as `null`;
/// false (nothing written) when an object in it repeats or escapes a key, so it must come whole.
fn around(m: &SessionManager, i: usize, at: u64, text: &[u8], out: &mut JsonOut<'_>) -> crate::session::Result<bool> {
    let holes = m.records()[i].long_strings.as_deref().unwrap_or_default();
    let line = trim_json_ws(text);
    let lead = (line.as_ptr() as usize - text.as_ptr() as usize) as u64;
    // Where each hole's `null` lies in the trimmed text: its place in the line, less what the holes before it
    // gave up.
    let mut shrunk = 0u64;
    let mut nulls = Vec::with_capacity(holes.len());
    for &(start, end) in holes {
        nulls.push((u64::from(start) - lead - shrunk) as usize);
        shrunk += u64::from(end - start) - 4;
    }
    let mut next = nulls.iter().peekable();
    let pick = |r: &Range<usize>| next.next_if(|&&p| p == r.start).is_some();
    let Some(found) = walk(line, pick).map_err(|_| changed(m))? else { return Ok(false) };
    if found.len() != holes.len() {
        return Err(changed(m));
    }
    let left: Vec<Left> = found
        .into_iter()
        .zip(holes)
        .map(|((p, _), &(start, end))| (p, at + u64::from(start)..at + u64::from(end)))
        .collect();
    let full_len = line.len() as u64 + shrunk;
    lazy(line, line, (at + lead, full_len as usize), &left, out)?;
    Ok(true)
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

/// Writes an entry whole: `{"entry": …}`.
fn whole(line: &[u8], out: &mut JsonOut<'_>) -> crate::session::Result<()> {
    out.raw(b"{\"entry\":")?;
    out.stored(line)?;
    out.raw(b"}")
}

/// Writes `{"entry": text, "line": [offset, length], "lazy": [[path, offset, length], …]}`; path keys are
/// ranges of `keys`.
fn lazy(
    text: &[u8],
    keys: &[u8],
    line: (u64, usize),
    left: &[Left],
    out: &mut JsonOut<'_>,
) -> crate::session::Result<()> {
    out.raw(b"{\"entry\":")?;
    out.stored(text)?;
    out.raw(format!(",\"line\":[{},{}],\"lazy\":[", line.0, line.1).as_bytes())?;
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
                Step::Key(key) => item.extend_from_slice(&keys[key.clone()]),
                Step::Index(i) => item.extend_from_slice(i.to_string().as_bytes()),
            }
        }
        item.extend_from_slice(format!("],{},{}]", range.start, range.end - range.start).as_bytes());
        out.stored(&item)?;
    }
    out.raw(b"]}")
}

/// Walks the JSON value `text` once, whatever its nesting, and returns the path and range of each string or
/// scalar value (never a key, never the value itself) that `pick` takes, in document order; `None` when an object
/// repeats a key or a key has an escape (a path by key could then name another value than the one `JSON.parse`
/// keeps).
fn walk(text: &[u8], mut pick: impl FnMut(&Range<usize>) -> bool) -> Result<Picked, SyntaxError> {
    let bad = |offset, message| SyntaxError { offset, message };
    let mut s = Scanner::new(text);
    let mut found = Vec::new();
    // Per open container: the keys seen so far (objects) or None (arrays); and the path to the current value.
    let mut open: Vec<Option<Vec<Range<usize>>>> = Vec::new();
    let mut path: Vec<Step> = Vec::new();
    let key = |s: &mut Scanner<'_>| -> Result<Range<usize>, SyntaxError> {
        s.skip_ws();
        if text.get(s.pos) != Some(&b'"') {
            return Err(bad(s.pos, "expected a key"));
        }
        let start = s.pos;
        s.scan_string()?;
        let range = start..s.pos;
        s.skip_ws();
        if text.get(s.pos) != Some(&b':') {
            return Err(bad(s.pos, "expected ':'"));
        }
        s.pos += 1;
        Ok(range)
    };
    // Registers a key in the innermost object; false when it repeats one or is escaped.
    let fresh = |keys: &mut Vec<Range<usize>>, k: &Range<usize>| {
        let raw = &text[k.clone()];
        if raw.contains(&b'\\') || keys.iter().any(|o| &text[o.clone()] == raw) {
            return false;
        }
        keys.push(k.clone());
        true
    };
    'value: loop {
        s.skip_ws();
        match text.get(s.pos) {
            Some(b'{') => {
                s.pos += 1;
                s.skip_ws();
                if text.get(s.pos) == Some(&b'}') {
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
                if text.get(s.pos) == Some(&b']') {
                    s.pos += 1;
                } else {
                    open.push(None);
                    path.push(Step::Index(0));
                    continue 'value;
                }
            }
            Some(b) => {
                let start = s.pos;
                if *b == b'"' {
                    s.scan_string()?;
                } else {
                    s.skip_value()?;
                }
                let range = start..s.pos;
                if !path.is_empty() && pick(&range) {
                    found.push((path.clone(), range));
                }
            }
            None => return Err(bad(s.pos, "unexpected end")),
        }
        // After a value: the next member or element, or the end of containers.
        loop {
            let Some(top) = open.last_mut() else {
                return Ok(Some(found));
            };
            s.skip_ws();
            match (text.get(s.pos), top) {
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
        from_line(line.as_bytes(), Some(at), over, &mut out).unwrap().unwrap();
        Json::parse(&out.into_bytes()).unwrap()
    }

    fn long_over(line: &[u8], over: usize) -> Result<Picked, SyntaxError> {
        walk(line, |r| line[r.start] == b'"' && r.len() > over)
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
        assert_eq!(long_over(line.as_bytes(), 16).unwrap(), None);
    }

    #[test]
    fn strings_in_nested_arrays_get_every_index_on_their_path() {
        let long = "C".repeat(20);
        let line = format!(r#"{{"a":[[1,"{long}"],{{"b":["x","{long}"]}}],"k":"{long}"}}"#);
        let left = long_over(line.as_bytes(), 16).unwrap().unwrap();
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
        assert!(long_over(br#"{"a":"#, 16).is_err());
        assert!(long_over(br#"{"a":1"#, 16).is_err());
    }
}
