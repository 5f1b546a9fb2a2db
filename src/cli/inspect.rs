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
/// printed to `out` as `{"error": …}`. Returns the exit status.
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
    if !std::path::Path::new(&resolved).is_file() {
        let e = Error::io("open", resolved, std::io::Error::from(std::io::ErrorKind::NotFound));
        return Err(e.into());
    }
    let mut m = SessionManager::open(path, None, None, env)?;
    m.set_context_options(options.context);
    let reads = Reads::compute(&m)?;
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
        Ok(()) => Ok(EXIT_OK),
        Err(Error::Io { path, source, .. }) if path == "output" => write_failed(source),
        Err(e) => Err(e.into()),
    }
}

/// Everything `inspect` reports that can fail, computed before the first byte is written so that a failure is
/// one clean error rather than half an object.
pub struct Reads {
    tree: crate::session::tree::Tree,
    branch: Vec<usize>,
    context_entries: Vec<usize>,
    projection: crate::session::context::Projection,
    name: Option<JsString>,
}

impl Reads {
    /// Runs pi's reads on `m`.
    pub fn compute(m: &SessionManager) -> crate::session::Result<Reads> {
        Ok(Reads {
            tree: m.tree(),
            branch: m.branch_path(None),
            context_entries: m.build_context_entries()?,
            projection: m.build_session_projection()?,
            name: m.session_name()?,
        })
    }

    /// Writes `{header, entries, leafId, tree, branch, contextEntries, projection, context, sessionName,
    /// sessionId, cwd, entryCount[, warnings]}` with pi's nested tree (members pi leaves undefined are omitted).
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
                "sessionName" => self.name.is_some(),
                "warnings" => with_warnings,
                _ => true,
            };
            if present {
                w.key(o, member)?;
                self.write_member(m, member, flat, o)?;
            }
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
            "contextEntries" => render::records(m, &self.context_entries, o),
            "projection" => render::projection(m, &self.projection, o),
            "context" => render::context(m, &self.projection, o),
            "sessionName" => match &self.name {
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
