//! libpq's password file (`PGPASSFILE`, else `~/.pgpass`): where a password comes from when neither the URL nor
//! `PGPASSWORD` gives one, so that it need not be on a command line (readable by anyone from
//! `/proc/PID/cmdline`).
//!
//! Hand-written: the format is a dozen lines of libpq (`passwordFromFile` in `fe-connect.c`) and no maintained
//! crate reads it. As in libpq: a line is `host:port:database:user:password`, `#` starts a comment line, `\`
//! escapes the next character (`\:`, `\\`), `*` in one of the first four fields matches anything, the first
//! matching line wins, and a file that group or others may read or write is ignored with a warning.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// What a line is matched against.
#[derive(Clone, Copy, Debug)]
pub struct Wanted<'a> {
    /// The host name; a socket directory that is libpq's default counts as `localhost`, as libpq has it.
    pub host: &'a str,
    /// The port, as text.
    pub port: &'a str,
    /// The database.
    pub database: &'a str,
    /// The user.
    pub user: &'a str,
}

/// The password file to read: `PGPASSFILE`, else `$HOME/.pgpass`.
pub fn file(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let var = |k: &str| env(k).filter(|v| !v.is_empty());
    var("PGPASSFILE").map(PathBuf::from).or_else(|| var("HOME").map(|h| Path::new(&h).join(".pgpass")))
}

/// The password the file at `path` holds for `wanted`, if it exists, may be trusted and has a matching line.
pub fn lookup(path: &Path, wanted: Wanted<'_>) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() {
        tracing::warn!("password file {:?} is not a plain file", path.display().to_string());
        return None;
    }
    if meta.permissions().mode() & 0o077 != 0 {
        tracing::warn!(
            "password file {:?} has group or world access; permissions should be u=rw (0600) or less",
            path.display().to_string()
        );
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    find(&text, wanted)
}

/// The first line of `text` matching `wanted`: its password.
fn find(text: &str, wanted: Wanted<'_>) -> Option<String> {
    let want = [wanted.host, wanted.port, wanted.database, wanted.user];
    text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).find_map(|line| {
        let fields = split(line.trim_end_matches('\r'));
        if fields.len() < 5 {
            return None;
        }
        let matches = fields.iter().zip(want).all(|(f, w)| f == "*" || f == w);
        // A password holding `:` is the rest of the line, as libpq reads it.
        matches.then(|| fields[4..].join(":")).filter(|p| !p.is_empty())
    })
}

/// The `:`-separated fields of a line, `\` escapes taken off.
fn split(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    fields.last_mut().unwrap().push(next);
                }
            }
            ':' => fields.push(String::new()),
            c => fields.last_mut().unwrap().push(c),
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Wanted<'static> = Wanted { host: "db.example", port: "5432", database: "team", user: "alice" };

    #[test]
    fn the_first_line_matching_host_port_database_and_user_gives_the_password() {
        let text = "# comment\n\nother:5432:team:alice:no\ndb.example:5432:team:bob:no\n\
                    db.example:5432:team:alice:yes\n*:*:*:*:late\n";
        assert_eq!(find(text, W).as_deref(), Some("yes"));
        assert_eq!(find("*:*:*:alice:wild\n", W).as_deref(), Some("wild"));
        assert_eq!(find("*:6543:*:*:wrong-port\n", W), None);
        assert_eq!(find("db.example:5432:team\n", W), None);
    }

    #[test]
    fn escaped_colons_and_backslashes_are_part_of_a_field() {
        let w = Wanted { host: "h:1", ..W };
        assert_eq!(find("h\\:1:5432:team:alice:pa\\:ss\\\\word\n", w).as_deref(), Some("pa:ss\\word"));
    }

    #[test]
    fn a_file_others_may_read_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pgpass");
        std::fs::write(&path, "*:*:*:*:secret\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(lookup(&path, W), None);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(lookup(&path, W).as_deref(), Some("secret"));
        assert_eq!(lookup(&dir.path().join("missing"), W), None);
    }
}
