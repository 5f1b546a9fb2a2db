//! Who sees what: `team grant` and `team revoke` write the `pi_grants` rows that the database's row-level
//! security policies read (schema version 4), so PostgreSQL itself keeps each role to its machines and projects,
//! for pi-sessiond and for `psql` alike. Nothing here decides what a role may see; it only records grants.
//!
//! A project grant is a glob over a session's cwd with `--include`'s rules (`*` and `?` within a directory, `**`
//! across). The policies match it as an anchored PostgreSQL regular expression made here, in which every other
//! character is literal: `_` and `%` mean themselves (no `LIKE` is involved).

use postgres::Client;

use super::db::{DbError, DbResult, Target};

/// What a grant is about: a machine (by its exact name) or projects (by a glob over their cwd).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every session pushed as this machine.
    Machine(String),
    /// Every session whose cwd matches this glob.
    Project(String),
}

impl Scope {
    fn kind(&self) -> &'static str {
        match self {
            Scope::Machine(_) => "machine",
            Scope::Project(_) => "project",
        }
    }

    fn target(&self) -> &str {
        match self {
            Scope::Machine(m) | Scope::Project(m) => m,
        }
    }
}

/// One grant as the database holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The machine or project glob.
    pub scope: Scope,
    /// The role may read these sessions.
    pub read: bool,
    /// The role may push as this machine (and so read its sessions).
    pub push: bool,
}

/// A cwd glob as an anchored PostgreSQL regular expression, with `--include`'s rules: `*` and `?` stay within a
/// directory, `**` as a whole path component crosses any number of them (`/a/**/b` matches `/a/b`). Character
/// classes and alternatives (`[…]`, `{…}`) are refused rather than guessed at. Hand-written: no crate translates
/// a glob into PostgreSQL's regex dialect, and the translation needs only these four rules and an escape.
pub fn glob_regex(glob: &str) -> Result<String, String> {
    if glob.is_empty() {
        return Err("--project: the glob is empty".to_owned());
    }
    // Matched against whole cwds, which are absolute: a relative glob could never match one.
    if !(glob.starts_with('/') || glob == "**" || glob.starts_with("**/")) {
        return Err(format!(
            "--project {glob:?}: a session's cwd is an absolute path, which this glob can never match: start it with / (or **/ for any directory)"
        ));
    }
    if let Some(c) = glob.chars().find(|c| matches!(c, '[' | ']' | '{' | '}' | '\\')) {
        return Err(format!("--project {glob:?}: {c:?} is not supported (only *, ** and ? are special)"));
    }
    let parts: Vec<&str> = glob.split('/').collect();
    let mut re = String::from("^");
    let last = parts.len() - 1;
    for (i, part) in parts.iter().enumerate() {
        if *part == "**" {
            // `**` as a whole component: any number of components (with their slashes), none included.
            re.push_str(if i == last { ".*" } else { "(.*/)?" });
            continue;
        }
        if part.contains("**") {
            return Err(format!("--project {glob:?}: ** must be a whole path component (a/**/b)"));
        }
        for c in part.chars() {
            match c {
                '*' => re.push_str("[^/]*"),
                '?' => re.push_str("[^/]"),
                // In an ARE a backslash before any non-alphanumeric character makes it literal.
                c if c.is_ascii() && !c.is_ascii_alphanumeric() => {
                    re.push('\\');
                    re.push(c);
                }
                c => re.push(c),
            }
        }
        if i != last {
            re.push('/');
        }
    }
    // A trailing `/**` also matches the directory itself, as globset's does.
    if parts.len() > 1 && parts[last] == "**" {
        let without = re.len() - ".*".len();
        re.truncate(without);
        re.truncate(re.len() - 1);
        re.push_str("(/.*)?");
    }
    re.push('$');
    Ok(re)
}

/// A role name as an SQL identifier.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `team grant`: lets `role` read the sessions of each scope (`push`: push as each machine, which must then all
/// be machines). The role must exist (the admin creates it with `CREATE ROLE … LOGIN`); it is also given the
/// table privileges the grant needs, so a grant is the one step after creating the role. Run as the tables' owner.
pub fn grant(client: &mut Client, target: &Target, role: &str, scopes: &[Scope], push: bool) -> DbResult<Vec<Grant>> {
    change(client, target, role, scopes, push, true)
}

/// `team revoke`: takes back what `team grant` with the same arguments gave (with `push`, the right to push as
/// those machines; without, the right to read those scopes). A scope never granted is no error: the answer lists
/// what the role still has.
pub fn revoke(client: &mut Client, target: &Target, role: &str, scopes: &[Scope], push: bool) -> DbResult<Vec<Grant>> {
    change(client, target, role, scopes, push, false)
}

fn change(
    client: &mut Client,
    target: &Target,
    role: &str,
    scopes: &[Scope],
    push: bool,
    give: bool,
) -> DbResult<Vec<Grant>> {
    if scopes.is_empty() {
        return Err(DbError::Invalid("name at least one --machine or --project".to_owned()));
    }
    if push && scopes.iter().any(|s| matches!(s, Scope::Project(_))) {
        return Err(DbError::Invalid("--push is a right to push as a machine: use it with --machine only".to_owned()));
    }
    let mut regexes = Vec::with_capacity(scopes.len());
    for s in scopes {
        regexes.push(match s {
            Scope::Project(glob) => Some(glob_regex(glob).map_err(DbError::Invalid)?),
            Scope::Machine(m) if m.is_empty() => return Err(DbError::Invalid("--machine: the name is empty".into())),
            Scope::Machine(_) => None,
        });
    }
    let err = |e| target.error(e);
    let mut tx = client.transaction().map_err(err)?;
    let exists = tx.query_opt("SELECT 1 FROM pg_roles WHERE rolname = $1", &[&role]).map_err(err)?.is_some();
    if give && !exists {
        return Err(DbError::Invalid(format!(
            "role {role:?} does not exist: create it first (CREATE ROLE {} LOGIN PASSWORD '…')",
            quote_ident(role)
        )));
    }
    let column = if push { "may_push" } else { "may_read" };
    for (scope, regex) in scopes.iter().zip(&regexes) {
        if give {
            tx.execute(
                &format!(
                    "INSERT INTO pi_grants (role, kind, target, cwd_regex, {column}) VALUES ($1, $2, $3, $4, true)
                     ON CONFLICT (role, kind, target) DO UPDATE SET {column} = true, cwd_regex = EXCLUDED.cwd_regex"
                ),
                &[&role, &scope.kind(), &scope.target(), regex],
            )
            .map_err(err)?;
        } else {
            tx.execute(
                &format!("UPDATE pi_grants SET {column} = false WHERE role = $1 AND kind = $2 AND target = $3"),
                &[&role, &scope.kind(), &scope.target()],
            )
            .map_err(err)?;
        }
    }
    tx.execute("DELETE FROM pi_grants WHERE role = $1 AND NOT may_read AND NOT may_push", &[&role]).map_err(err)?;
    if give {
        // The policies decide which rows; these privileges let the role ask at all. Never taken back by a revoke:
        // without a grant row they show nothing.
        let who = quote_ident(role);
        let mut sql = format!("GRANT SELECT ON pi_sessions, pi_entries, pi_sessiond_schema, pi_grants TO {who};");
        if push {
            sql.push_str(&format!(
                "GRANT INSERT, UPDATE, DELETE ON pi_sessions, pi_entries TO {who};
                 GRANT USAGE ON SEQUENCE pi_sessions_sid_seq TO {who};"
            ));
        }
        tx.batch_execute(&sql).map_err(err)?;
    }
    let grants = grants_of(&mut tx, role).map_err(err)?;
    tx.commit().map_err(err)?;
    Ok(grants)
}

/// Those of `machines` of which the database holds no session (as its owner sees it): never pushed, or misspelt.
pub fn machines_never_pushed(client: &mut Client, target: &Target, machines: &[String]) -> DbResult<Vec<String>> {
    let mut never = Vec::new();
    for m in machines {
        let row = client
            .query_one("SELECT EXISTS (SELECT 1 FROM pi_sessions WHERE machine = $1)", &[m])
            .map_err(|e| target.error(e))?;
        if !row.get::<_, bool>(0) {
            never.push(m.clone());
        }
    }
    Ok(never)
}

fn grants_of(tx: &mut postgres::Transaction<'_>, role: &str) -> Result<Vec<Grant>, postgres::Error> {
    let rows = tx.query(
        "SELECT kind, target, may_read, may_push FROM pi_grants WHERE role = $1 ORDER BY kind, target",
        &[&role],
    )?;
    Ok(rows
        .iter()
        .map(|r| {
            let target: String = r.get(1);
            let scope = if r.get::<_, &str>(0) == "machine" { Scope::Machine(target) } else { Scope::Project(target) };
            Grant { scope, read: r.get(2), push: r.get(3) }
        })
        .collect())
}

/// Refuses a push as `machine` by a role without a grant to push as it ([`DbError::Denied`]); the owner (whom the
/// policies do not bind) always may. Asked before a push so that the refusal is clear and comes before anything
/// is read; the database's policies would refuse the first row all the same.
pub fn check_push(client: &mut Client, target: &Target, machine: &str) -> DbResult<()> {
    let row = client
        .query_one(
            "SELECT NOT row_security_active('pi_sessions') OR pi_sessiond_may_push($1), current_user::text",
            &[&machine],
        )
        .map_err(|e| target.error(e))?;
    if row.get(0) {
        return Ok(());
    }
    Err(DbError::Denied { role: row.get(1), machine: machine.to_owned() })
}

#[cfg(test)]
mod tests {
    use super::glob_regex;

    #[test]
    fn a_glob_becomes_an_anchored_regex_whose_other_characters_are_literal() {
        assert_eq!(glob_regex("/home/al/work/*").unwrap(), r"^/home/al/work/[^/]*$");
        assert_eq!(glob_regex("/srv/a_b%c.d").unwrap(), r"^/srv/a\_b\%c\.d$");
        assert_eq!(glob_regex("**/scratch?").unwrap(), r"^(.*/)?scratch[^/]$");
        assert_eq!(glob_regex("/a/**/b").unwrap(), r"^/a/(.*/)?b$");
        assert_eq!(glob_regex("/a/**").unwrap(), r"^/a(/.*)?$");
        assert_eq!(glob_regex("**").unwrap(), r"^.*$");
        assert!(glob_regex("/a/[bc]").is_err());
        assert!(glob_regex("/a/b**").is_err());
        let relative = glob_regex("src/shop").unwrap_err();
        assert!(relative.contains("absolute path"), "{relative}");
        assert!(glob_regex("*/shop").is_err(), "matches no absolute path: [^/]* before the first /");
        assert!(glob_regex("").is_err());
    }
}
