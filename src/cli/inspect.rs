//! `pi-sessiond inspect SESSION`: what pi's own read API returns after `SessionManager.open`, as one JSON
//! object, so a script (or a conformance check) can compare it with pi byte for byte after parsing. The tree is
//! flat by default (`--nested` gives pi's own shape, as deep as the longest branch, which many JSON decoders
//! refuse); `--only KEY` prints one member. Nothing is written to the session file.

use std::io::Write;

use crate::session::context::ContextOptions;
use crate::session::json::JsString;
use crate::session::key::Key;
use crate::session::render::{self, JsonOut, ObjectWriter};
use crate::session::store::Warning;
use crate::session::{Env, Error, SessionManager};

use super::output::{write_failed, Failure, EXIT_OK};
use super::pretty::Pretty;

/// The members `inspect` prints, in order (`--only` takes one of them).
pub const MEMBERS: [&str; 13] = [
    "header",
    "entries",
    "leafId",
    "tree",
    "branch",
    "contextEntries",
    "projection",
    "context",
    "sessionName",
    "sessionId",
    "cwd",
    "entryCount",
    "warnings",
];

/// How `inspect` prints.
#[derive(Clone, Debug, Default)]
pub struct InspectOptions {
    /// Which context pi builds (the seed's checkpoint or pi 1.6.0's own).
    pub context: ContextOptions,
    /// pi's nested `getTree` instead of the flat list.
    pub nested: bool,
    /// Only this member (one of [`MEMBERS`]).
    pub only: Option<String>,
    /// Indented, for a person.
    pub pretty: bool,
}

/// `pi-sessiond inspect FILE`, for the conformance tests: pi's exact shapes (nested tree), compact; a failure is
/// printed to `out` as `{"error": …}`. Returns the exit status: 0 when every read answered; 1 when some reads
/// failed on an entry (pi's throw too: those reads are left out and listed in `errors`, the rest printed); 2 when
/// the file cannot be opened.
pub fn inspect_with(path: &str, options: ContextOptions, env: Env, out: &mut dyn Write) -> i32 {
    let options = InspectOptions { context: options, nested: true, ..Default::default() };
    match run(path, &options, env, out) {
        Ok(status) => status as i32,
        Err(f) => {
            let _ = writeln!(out, "{}", f.to_json());
            2
        }
    }
}

/// `pi-sessiond inspect`: opens the existing session file `path` and prints pi's reads.
pub fn run(path: &str, options: &InspectOptions, env: Env, out: &mut dyn Write) -> Result<u8, Failure> {
    let resolved = crate::session::paths::resolve_path(path);
    if !std::path::Path::new(&resolved).exists() {
        let e = Error::io("open", resolved, std::io::Error::from(std::io::ErrorKind::NotFound));
        return Err(e.into());
    }
    let mut m = SessionManager::open(path, None, None, env)?;
    m.set_context_options(options.context);
    let reads = Reads::compute(&m);
    if let Some(member) = &options.only {
        // One member asked for and that read failed: nothing else to show, so it is the command's failure.
        if let Some((_, e)) = reads.errors().find(|(read, _)| read == member) {
            return Err(Failure::from_session_ref(e));
        }
    }
    let write = |sink: &mut dyn Write| -> crate::session::Result<()> {
        let mut o = JsonOut::streaming(sink);
        match &options.only {
            Some(member) => reads.write_member(&m, member, !options.nested, &mut o)?,
            None => reads.write_as(&m, true, !options.nested, &mut o)?,
        }
        o.raw(b"\n")?;
        o.flush()
    };
    let written = if options.pretty {
        let mut pretty = Pretty::new(&mut *out);
        write(&mut pretty).and_then(|()| pretty.flush().map_err(|e| Error::io("write", "output", e)))
    } else {
        write(out)
    };
    match written {
        Ok(()) if options.only.is_none() && reads.errors().next().is_some() => Ok(super::output::EXIT_NO_MATCH),
        Ok(()) => Ok(EXIT_OK),
        Err(Error::Io { path, source, .. }) if path == "output" => write_failed(source),
        Err(e) => Err(e.into()),
    }
}

/// Everything `inspect` reports that needs more than the index, computed before the first byte is written.
/// Each read that pi's own throws on fails alone (see [`Reads::errors`]); the others are still given.
pub struct Reads {
    tree: crate::session::tree::Tree,
    branch: Vec<usize>,
    context_entries: crate::session::Result<Vec<usize>>,
    projection: crate::session::Result<crate::session::context::Projection>,
    name: crate::session::Result<Option<JsString>>,
}

impl Reads {
    /// Runs pi's reads on `m`.
    pub fn compute(m: &SessionManager) -> Reads {
        Reads {
            tree: m.tree(),
            branch: m.branch_path(None),
            context_entries: m.build_context_entries(),
            projection: m.build_session_projection(),
            name: m.session_name(),
        }
    }

    /// The reads that failed, by the name of their member in [`Reads::write`]'s output.
    pub fn errors(&self) -> impl Iterator<Item = (&'static str, &Error)> {
        let projection = self.projection.as_ref().err();
        [
            ("contextEntries", self.context_entries.as_ref().err()),
            ("projection", projection),
            ("context", projection),
            ("sessionName", self.name.as_ref().err()),
        ]
        .into_iter()
        .filter_map(|(read, e)| e.map(|e| (read, e)))
    }

    /// Writes `{header, entries, leafId, tree, branch, contextEntries, projection, context, sessionName,
    /// sessionId, cwd, entryCount[, warnings][, errors]}` with pi's nested tree: members pi leaves undefined are
    /// omitted, and so are reads that failed, which are `errors: {member: {kind, message}}` instead.
    pub fn write(&self, m: &SessionManager, with_warnings: bool, o: &mut JsonOut<'_>) -> crate::session::Result<()> {
        self.write_as(m, with_warnings, false, o)
    }

    /// [`Reads::write`], with the tree flat (`{entry, parentIndex, depth, label?}` in pre-order) when `flat`.
    pub fn write_as(
        &self,
        m: &SessionManager,
        with_warnings: bool,
        flat: bool,
        o: &mut JsonOut<'_>,
    ) -> crate::session::Result<()> {
        let mut w = ObjectWriter::open(o)?;
        for member in MEMBERS {
            let present = match member {
                "leafId" => *m.leaf_id() != Key::Undefined,
                "sessionName" => matches!(self.name, Ok(Some(_))),
                "warnings" => with_warnings,
                _ => !self.errors().any(|(read, _)| read == member),
            };
            if present {
                w.key(o, member)?;
                self.write_member(m, member, flat, o)?;
            }
        }
        if self.errors().next().is_some() {
            w.key(o, "errors")?;
            let mut ew = ObjectWriter::open(o)?;
            for (read, e) in self.errors() {
                ew.key(o, read)?;
                let mut one = ObjectWriter::open(o)?;
                one.key(o, "kind")?;
                o.str(e.kind().as_str())?;
                one.key(o, "message")?;
                o.str(&e.to_string())?;
                one.close(o)?;
            }
            ew.close(o)?;
        }
        w.close(o)
    }

    /// Writes one member's value (`null` for one pi leaves undefined).
    pub fn write_member(
        &self,
        m: &SessionManager,
        member: &str,
        flat: bool,
        o: &mut JsonOut<'_>,
    ) -> crate::session::Result<()> {
        match member {
            "header" => match m.header() {
                Some(h) => render::record(m, h, o),
                None => o.raw(b"null"),
            },
            "entries" => render::records(m, &m.entries(), o),
            "leafId" => render::key(m.leaf_id(), o),
            "tree" if flat => render::tree_flat(m, &self.tree, o),
            "tree" => render::tree(m, &self.tree, o),
            "branch" => render::records(m, &self.branch, o),
            "contextEntries" => render::records(m, self.context_entries.as_ref().map_err(clone_error)?, o),
            "projection" => render::projection(m, self.projection.as_ref().map_err(clone_error)?, o),
            "context" => render::context(m, self.projection.as_ref().map_err(clone_error)?, o),
            "sessionName" => match self.name.as_ref().map_err(clone_error)? {
                Some(n) => o.string(n),
                None => o.raw(b"null"),
            },
            "sessionId" => o.value(m.session_id()),
            "cwd" => o.string(&JsString::from(m.cwd())),
            "entryCount" => o.raw(m.entry_count().to_string().as_bytes()),
            "warnings" => warnings_json(m.warnings(), o),
            other => Err(Error::InvalidQuery { message: format!("inspect has no member {other}") }),
        }
    }
}

/// A read's failure again, for a caller that asked for that read alone (errors hold an `io::Error`, so they are
/// not `Clone`; the kind and the message are what is reported).
fn clone_error(e: &Error) -> Error {
    match e {
        Error::EntryNotFound { id } => Error::EntryNotFound { id: id.clone() },
        other => Error::InvalidEntry { line: 0, message: other.to_string() },
    }
}

/// Writes `[{line, kind, message}]`.
pub fn warnings_json(warnings: &[Warning], o: &mut JsonOut<'_>) -> crate::session::Result<()> {
    o.raw(b"[")?;
    for (i, w) in warnings.iter().enumerate() {
        if i > 0 {
            o.raw(b",")?;
        }
        let mut ow = ObjectWriter::open(o)?;
        ow.key(o, "line")?;
        o.raw(w.line.to_string().as_bytes())?;
        ow.key(o, "kind")?;
        o.string(&JsString::from(w.kind.as_str()))?;
        ow.key(o, "message")?;
        o.string(&JsString::from(w.message.as_str()))?;
        ow.close(o)?;
    }
    o.raw(b"]")
}
