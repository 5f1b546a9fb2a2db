//! Naming a session on the command line the way a person remembers it: a path, a full session id, a unique
//! prefix of one, or `latest` (the newest session of the current directory's project, as `pi --continue`
//! picks it, the project found from a directory below it too). Resolution only reads: it never creates the
//! project directory pi would create.

use crate::session::dirscan::find_most_recent_session;
use crate::session::json::Json;
use crate::session::store::read_header_bounded;
use crate::session::{dirscan, paths};

use super::output::{describe_io, Failure, FailureKind};
use crate::session::ErrorKind;

/// Where names are looked up.
#[derive(Clone, Debug)]
pub struct Places {
    /// pi's agent directory (sessions are under `<agentDir>/sessions/<project>/`).
    pub agent_dir: String,
    /// The working directory `latest` refers to.
    pub cwd: String,
}

/// The session file `name` refers to (an existing path), or why there is none.
pub fn session_path(name: &str, places: &Places) -> Result<String, Failure> {
    if name == "latest" {
        let cwd = project_cwd(&places.cwd, &places.agent_dir);
        let dir = paths::default_session_dir_path(&cwd, &places.agent_dir);
        return find_most_recent_session(&dir, Some(&cwd)).ok_or_else(|| {
            Failure::new(ErrorKind::SessionNotFound, format!("no session of {cwd} yet (looked in {dir})"))
        });
    }
    let resolved = paths::resolve_path(name);
    let looks_like_path = name.contains('/') || name.ends_with(".jsonl") || name.starts_with('.');
    match std::fs::metadata(&resolved) {
        // A directory, a pipe or a device is refused by the engine itself, which names what it is.
        Ok(_) => return Ok(resolved),
        Err(e) if looks_like_path || e.kind() != std::io::ErrorKind::NotFound => {
            let kind =
                if e.kind() == std::io::ErrorKind::NotFound { ErrorKind::SessionNotFound } else { ErrorKind::IoError };
            return Err(Failure::new(kind, format!("{resolved}: {}", describe_io(&e))));
        }
        Err(_) => {}
    }
    let IdMatches { found: matches, unreadable } = sessions_with_id_prefix(name, &places.agent_dir);
    let exact: Vec<&(String, String)> = matches.iter().filter(|(id, _)| id == name).collect();
    match (exact.as_slice(), matches.as_slice()) {
        ([(_, path)], _) | ([], [(_, path)]) => Ok(path.clone()),
        // A file named as the session asked for, that holds none: what is wrong with it, not "no such file".
        ([], []) if !unreadable.is_empty() => {
            let (path, why, kind) = &unreadable[0];
            let more = match unreadable.len() {
                1 => String::new(),
                n => format!(" ({} more files so named cannot be read either)", n - 1),
            };
            Err(Failure::new(*kind, format!("{name}: no session id starts with it; {path}, named so, {why}{more}")))
        }
        ([], []) => Err(Failure::new(
            ErrorKind::SessionNotFound,
            format!("{name}: no such file, and no session id starts with it (in {}/sessions)", places.agent_dir),
        )),
        _ => {
            // Copies of one session share its id: then only their files tell them apart.
            let copies = matches.windows(2).any(|w| w[0].0 == w[1].0);
            let shown: Vec<String> = matches
                .iter()
                .take(5)
                .map(|(id, path)| if copies { format!("{id} ({path})") } else { id.clone() })
                .collect();
            let more = if matches.len() > 5 { format!(", and {} more", matches.len() - 5) } else { String::new() };
            Err(Failure::new(
                FailureKind::AmbiguousSession,
                format!("{name}: {} sessions match: {}{more}", matches.len(), shown.join(", ")),
            ))
        }
    }
}

/// The project a working directory belongs to: `cwd` itself when pi has a session directory for it, else the
/// nearest directory above it that has one (a person in `app/src` means `app`), else `cwd`. The file system's
/// root is never chosen for a directory below it: its sessions are not a project of everything.
pub fn project_cwd(cwd: &str, agent_dir: &str) -> String {
    let has_sessions = |dir: &str| paths::as_path(&paths::default_session_dir_path(dir, agent_dir)).is_dir();
    let mut at = std::path::Path::new(cwd);
    loop {
        if has_sessions(&at.to_string_lossy()) {
            return at.to_string_lossy().into_owned();
        }
        match at.parent() {
            Some(up) if up.parent().is_some() => at = up,
            _ => return cwd.to_owned(),
        }
    }
}

/// What looking an id prefix up found.
struct IdMatches {
    /// `(id, path)` of every session whose header id starts with the prefix, in order.
    found: Vec<(String, String)>,
    /// Files whose name carries an id starting with the prefix but that hold no session header: `(path, why, kind)`.
    unreadable: Vec<(String, String, FailureKind)>,
}

/// Every session under `<agentDir>/sessions/*/` whose header id starts with `prefix` (the id `ls` shows). pi
/// names its files `<time>_<id>.jsonl`, so the files whose name carries such an id are read first, and a full id
/// found there is the answer. Otherwise every other file's header is read too: a file's name need not carry its
/// header's id (a copied or renamed file; an empty file, whose first write made a header with a new id, as pi's
/// does), and two sessions matching a prefix must be told apart, not one of them picked.
fn sessions_with_id_prefix(prefix: &str, agent_dir: &str) -> IdMatches {
    let mut named = Vec::new();
    let mut others = Vec::new();
    for (path, id_in_name) in session_files(agent_dir) {
        match id_in_name {
            Some(id) if id.starts_with(prefix) => named.push(path),
            _ => others.push(path),
        }
    }
    let header_id = |path: &str| -> Option<String> {
        let header = read_header_bounded(path)?;
        Some(header.get("id").and_then(Json::as_js_str)?.to_string_lossy())
    };
    let mut found = Vec::new();
    let mut unreadable = Vec::new();
    for path in named {
        match header_id(&path) {
            Some(id) if id.starts_with(prefix) => found.push((id, path)),
            Some(_) => {}
            None => {
                let (why, kind) = why_no_header(&path);
                unreadable.push((path, why, kind));
            }
        }
    }
    if !found.iter().any(|(id, _)| id == prefix) {
        found.extend(others.into_iter().filter_map(|path| {
            let id = header_id(&path)?;
            id.starts_with(prefix).then_some((id, path))
        }));
    }
    found.sort();
    IdMatches { found, unreadable }
}

/// Every session file under `<agentDir>/sessions/*/`, with the id its name carries (pi names them
/// `<time>_<id>.jsonl`; None for a file named otherwise): every project's sessions, found without reading a file.
pub fn session_files(agent_dir: &str) -> Vec<(String, Option<String>)> {
    let root = paths::join(&[agent_dir, "sessions"]);
    let Ok(projects) = std::fs::read_dir(&root) else { return Vec::new() };
    let mut files = Vec::new();
    for project in projects.flatten() {
        let dir = paths::join(&[&root, &project.file_name().to_string_lossy()]);
        let Ok(names) = dirscan::jsonl_names(&dir) else { continue };
        for name in names {
            let id = name.trim_end_matches(".jsonl").split_once('_').map(|(_, id)| id.to_owned());
            files.push((paths::join(&[&dir, &name]), id));
        }
    }
    files
}

/// Why the file at `path` gave no session header, for a person, and the kind of that failure.
fn why_no_header(path: &str) -> (String, FailureKind) {
    match std::fs::File::open(path).and_then(|f| f.metadata()) {
        Err(e) => (format!("cannot be read: {}", describe_io(&e)), ErrorKind::IoError.into()),
        Ok(m) if m.len() == 0 => ("is empty (no session header yet)".to_owned(), ErrorKind::InvalidSessionFile.into()),
        Ok(_) => ("does not start with a session header".to_owned(), ErrorKind::InvalidSessionFile.into()),
    }
}
