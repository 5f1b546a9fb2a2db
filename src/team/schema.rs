//! The team database's schema, created and migrated by pi-sessiond itself: an ordered list of migrations and a
//! version table, applied under an advisory lock so that several machines starting at once migrate it once.
//!
//! A database whose version is newer than this build knows is refused rather than written to: an older
//! pi-sessiond could otherwise store rows a newer one misreads.

use postgres::Client;

use super::db::{DbError, DbResult, Target};

/// The migrations, in order; migration `i` brings the schema to version `i + 1`. Never edit one that has shipped:
/// add another.
const MIGRATIONS: &[&str] = &[
    // 1: sessions (one row per session file of a machine) and entries (one row per line of it).
    "
    CREATE EXTENSION IF NOT EXISTS pg_trgm;
    CREATE TABLE pi_sessions (
      sid bigserial PRIMARY KEY,
      machine text NOT NULL,
      -- The file on its machine, and where it sits there: <agent_dir>/sessions/<project_dir>/<file_name>.
      path text NOT NULL,
      agent_dir text NOT NULL,
      project_dir text NOT NULL,
      file_name text NOT NULL,
      -- The header's id when it is a string (pi's findById matches only those).
      session_id text,
      header text NOT NULL,
      -- pi's SessionInfo, each field as JSON text (strings may hold what PostgreSQL text cannot: NUL, lone
      -- surrogates), so that a listing from here is byte for byte the one pi gives on that machine.
      info_id text NOT NULL,
      info_cwd text NOT NULL,
      info_name text,
      info_parent_session text,
      info_created double precision NOT NULL,
      info_modified double precision NOT NULL,
      info_message_count bigint NOT NULL,
      info_first_message text NOT NULL,
      info_all_messages_text text NOT NULL,
      -- Readable copies for SQL users.
      cwd text NOT NULL,
      name text,
      -- What was pushed: the file's stat then, how far its complete lines go, the bytes that tell an append from
      -- a rewrite, and the listing state after the last pushed line (to continue without reading it all again).
      file_size bigint NOT NULL,
      file_mtime_ns bigint NOT NULL,
      file_dev bigint NOT NULL,
      file_ino bigint NOT NULL,
      pushed_offset bigint NOT NULL,
      pushed_lines integer NOT NULL,
      head bytea NOT NULL,
      tail bytea NOT NULL,
      -- The bytes after the last complete line (a line being written, or a file that does not end in a
      -- newline): kept here, not as an entry, until their newline arrives.
      unterminated bytea NOT NULL,
      resume_state text NOT NULL,
      -- When the file was read for this row (ns since the epoch): a file modified within two seconds of it
      -- has its bytes checked on the next pass, as its stat may not show a change.
      read_at_ns bigint NOT NULL,
      pushed_at timestamptz NOT NULL DEFAULT now(),
      UNIQUE (machine, path)
    );
    CREATE INDEX pi_sessions_session_id ON pi_sessions (session_id);
    CREATE INDEX pi_sessions_project ON pi_sessions (project_dir);
    CREATE TABLE pi_entries (
      sid bigint NOT NULL REFERENCES pi_sessions (sid) ON DELETE CASCADE,
      line integer NOT NULL,
      byte_offset bigint NOT NULL,
      raw bytea NOT NULL,
      entry_id text,
      parent_id text,
      type text,
      timestamp text,
      role text,
      -- The entry's searchable text, as the local index extracts it.
      search_role text,
      -- The entry's id as JSON text, as search results give it.
      search_entry text,
      search_text text,
      search_ts double precision,
      PRIMARY KEY (sid, line)
    );
    -- Substring search (pi's /resume semantics, what pi-sessiond's own search uses).
    CREATE INDEX pi_entries_search_trgm ON pi_entries USING gin (search_text gin_trgm_ops);
    -- Word search for SQL users: WHERE to_tsvector('simple', coalesce(search_text, '')) @@ websearch_to_tsquery(…).
    -- pi-sessiond never relies on it, and docs/team.md tells teams they may drop it: no later migration may
    -- recreate it or depend on it.
    CREATE INDEX pi_entries_search_words ON pi_entries USING gin (to_tsvector('simple', coalesce(search_text, '')));
    CREATE INDEX pi_entries_entry_id ON pi_entries (sid, entry_id);
    -- Search walks the newest entries first.
    CREATE INDEX pi_entries_newest ON pi_entries (search_ts DESC NULLS LAST, sid, line) WHERE search_text IS NOT NULL;
    ",
    // 2: the file's change time when pushed. A rewrite that keeps the length and sets the modification time back
    // (a secret overwritten in place) moves only the change time; without it such a rewrite went unnoticed. NULL
    // in rows pushed before: the next push records it (judging those files as before, by their other stamp
    // fields and known bytes) instead of sending every session again.
    "ALTER TABLE pi_sessions ADD COLUMN file_ctime_ns bigint;",
    // 3: `head` may hold a SHA-256 digest of the known bytes (`tail` then empty) instead of the bytes, which are
    // the file's own text (the end of its last line) and must not leave the machine unredacted. False in rows
    // pushed before: they are judged by their bytes once, and their next write stores the digest.
    "ALTER TABLE pi_sessions ADD COLUMN known_hashed boolean NOT NULL DEFAULT false;",
    // 4: per-person access, enforced by PostgreSQL (row-level security), so `psql` as a role sees what
    // pi-sessiond shows it. `pi_grants` (written by `team grant`/`team revoke`, as the tables' owner) says which
    // machines or projects (a cwd glob, kept with its translation to an anchored regular expression) a role may
    // read, and which machine it may push as. The owner and superusers are not subject to the policies and see
    // everything; any other role sees only what it is granted, and nothing without a grant. Entries are visible
    // exactly when their session is. A role reads only its own grants, so the policies need no SECURITY DEFINER
    // function (inside one, `current_user` would be the definer).
    "
    CREATE TABLE pi_grants (
      role text NOT NULL,
      kind text NOT NULL CHECK (kind IN ('machine', 'project')),
      target text NOT NULL,
      cwd_regex text,
      may_read boolean NOT NULL DEFAULT false,
      may_push boolean NOT NULL DEFAULT false,
      granted_at timestamptz NOT NULL DEFAULT now(),
      CHECK ((kind = 'project') = (cwd_regex IS NOT NULL)),
      CHECK (kind = 'machine' OR NOT may_push),
      PRIMARY KEY (role, kind, target)
    );
    ALTER TABLE pi_grants ENABLE ROW LEVEL SECURITY;
    CREATE POLICY pi_own_grants ON pi_grants FOR SELECT USING (role = current_user);
    GRANT SELECT ON pi_grants TO PUBLIC;
    CREATE FUNCTION pi_sessiond_may_read(session_machine text, session_cwd text) RETURNS boolean
      LANGUAGE sql STABLE AS $$
        SELECT EXISTS (SELECT 1 FROM pi_grants g WHERE g.role = current_user AND (
          (g.kind = 'machine' AND g.target = session_machine AND (g.may_read OR g.may_push))
          OR (g.kind = 'project' AND g.may_read AND session_cwd ~ g.cwd_regex)))
      $$;
    CREATE FUNCTION pi_sessiond_may_push(session_machine text) RETURNS boolean
      LANGUAGE sql STABLE AS $$
        SELECT EXISTS (SELECT 1 FROM pi_grants g
          WHERE g.role = current_user AND g.kind = 'machine' AND g.target = session_machine AND g.may_push)
      $$;
    ALTER TABLE pi_sessions ENABLE ROW LEVEL SECURITY;
    CREATE POLICY pi_read ON pi_sessions FOR SELECT USING (pi_sessiond_may_read(machine, cwd));
    CREATE POLICY pi_push ON pi_sessions FOR ALL
      USING (pi_sessiond_may_push(machine)) WITH CHECK (pi_sessiond_may_push(machine));
    ALTER TABLE pi_entries ENABLE ROW LEVEL SECURITY;
    -- The subqueries read pi_sessions under its own policies: an entry is seen with its session.
    CREATE POLICY pi_read ON pi_entries FOR SELECT USING (sid IN (SELECT s.sid FROM pi_sessions s));
    CREATE POLICY pi_push ON pi_entries FOR ALL
      USING (sid IN (SELECT s.sid FROM pi_sessions s WHERE pi_sessiond_may_push(s.machine)))
      WITH CHECK (sid IN (SELECT s.sid FROM pi_sessions s WHERE pi_sessiond_may_push(s.machine)));
    ",
    // 5: a push appends each piece's text to `info_all_messages_text` in the database instead of holding the
    // session's whole text (and writing it again) at every piece: `all_text_committed` is how many characters of
    // the literal are the complete lines' (its opening quote included; the unterminated rest's text and the
    // closing quote follow). NULL in rows pushed before: their resume state holds the text, and their next piece
    // writes the column whole.
    "ALTER TABLE pi_sessions ADD COLUMN all_text_committed bigint;",
    // 6: a viewer's search through the trigram index. Under row-level security PostgreSQL uses no index for an
    // operator that is not leakproof, and ILIKE and ~ are not (their errors can depend on a row's text), so a
    // role bound by the policies would read every entry in scope to find a few. This function, run as the owner,
    // finds the entries through the index, but only in sessions that `as_role` may read by its grants, the very
    // rows the policies show it; `as_role` must be a role the logged-in user may become (the caller passes
    // `current_user`), so it tells nobody more than `SET ROLE` and a SELECT would. Patterns are quoted into the
    // statement (`%L`) so that each is planned as a constant.
    "
    CREATE FUNCTION pi_sessiond_matching_entries(as_role name, in_sids bigint[], patterns text[],
                                                 match_all boolean, regexes text[])
      RETURNS TABLE (sid bigint, search_entry text, search_role text, search_text text,
                     search_ts double precision, line integer)
      LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
      DECLARE
        q text := 'SELECT e.sid, e.search_entry, e.search_role, e.search_text, e.search_ts, e.line
          FROM pi_entries e WHERE e.sid = ANY($1) AND e.search_text IS NOT NULL
          AND e.sid IN (SELECT s.sid FROM pi_sessions s JOIN pi_grants g ON g.role = $2 AND (
            (g.kind = ''machine'' AND g.target = s.machine AND (g.may_read OR g.may_push))
            OR (g.kind = ''project'' AND g.may_read AND s.cwd ~ g.cwd_regex)))';
        conditions text[] := '{}';
        p text;
      BEGIN
        IF NOT pg_has_role(session_user, as_role, 'MEMBER') THEN
          RAISE EXCEPTION 'permission denied: % may not search as %', session_user, as_role
            USING ERRCODE = 'insufficient_privilege';
        END IF;
        FOREACH p IN ARRAY coalesce(patterns, '{}') LOOP
          conditions := conditions || format('e.search_text ILIKE %L', p);
        END LOOP;
        IF cardinality(conditions) > 0 THEN
          q := q || ' AND (' || array_to_string(conditions, CASE WHEN match_all THEN ' AND ' ELSE ' OR ' END) || ')';
        END IF;
        FOREACH p IN ARRAY coalesce(regexes, '{}') LOOP
          q := q || format(' AND e.search_text ~ %L', p);
        END LOOP;
        RETURN QUERY EXECUTE q USING in_sids, as_role::text;
      END $$;
    ",
    // 7: the functions behind the policies and the search find `pi_grants` where the tables are, never in the
    // caller's temporary schema. Unqualified, a name is looked up in `pg_temp` first, and every role may create
    // temporary tables: a role that made its own `pi_grants` granted itself every machine, in the policies and
    // in the owner's search function alike. The tables' schema first, `pg_temp` last, as PostgreSQL's manual
    // asks of SECURITY DEFINER functions.
    "
    DO $$
    DECLARE tables text := quote_ident(current_schema());
    BEGIN
      EXECUTE format('ALTER FUNCTION pi_sessiond_may_read(text, text) SET search_path = %s, pg_temp', tables);
      EXECUTE format('ALTER FUNCTION pi_sessiond_may_push(text) SET search_path = %s, pg_temp', tables);
      EXECUTE format('ALTER FUNCTION pi_sessiond_matching_entries(name, bigint[], text[], boolean, text[])
                      SET search_path = %s, pg_temp', tables);
    END $$;
    ",
];

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// An arbitrary constant: the advisory lock that serialises migrations.
const MIGRATION_LOCK: i64 = 0x7069_5f73_6573_7364; // "pi_sessd"

/// Brings the database's schema to [`SCHEMA_VERSION`] (creating it in an empty database); refuses a newer one.
pub fn migrate(client: &mut Client, target: &Target) -> DbResult<()> {
    let err = |e| target.error(e);
    // A schema already current needs no lock and no DDL, so a role that may only read (a viewer's `--catalog`)
    // can use the database; anything else is decided again under the lock below.
    match client.query_one("SELECT max(version) FROM pi_sessiond_schema", &[]) {
        Ok(row) => match row.get::<_, Option<i32>>(0) {
            Some(v) if v == SCHEMA_VERSION => return Ok(()),
            Some(v) if v > SCHEMA_VERSION => return Err(DbError::NewerSchema { found: v, known: SCHEMA_VERSION }),
            _ => {}
        },
        Err(e) if e.code() == Some(&postgres::error::SqlState::UNDEFINED_TABLE) => {}
        Err(e) if e.code() == Some(&postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) => {
            let role = current_role(client);
            return Err(DbError::NotSetUp {
                server: target.describe(),
                why: format!(
                    "role {role:?} has no grant in this team catalog (it may not read pi-sessiond's tables): an admin gives one with `pi-sessiond team grant --role {role} --machine NAME` (or --project GLOB)"
                ),
            });
        }
        Err(e) => return Err(err(e)),
    }
    let mut tx = client.transaction().map_err(err)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).map_err(err)?;
    let created = tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS pi_sessiond_schema (
           version integer PRIMARY KEY,
           applied_at timestamptz NOT NULL DEFAULT now())",
    );
    if let Err(e) = created {
        if e.code() == Some(&postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) {
            drop(tx);
            let role = current_role(client);
            return Err(DbError::NotSetUp {
                server: target.describe(),
                why: format!(
                    "pi-sessiond's tables are not in this database yet, and role {role:?} may not create them: the admin who is to own them sets them up (a first `pi-sessiond push`, or `pi-sessiond team grant`, connected as that role)"
                ),
            });
        }
        return Err(err(e));
    }
    let current: i32 =
        tx.query_one("SELECT coalesce(max(version), 0) FROM pi_sessiond_schema", &[]).map_err(err)?.get(0);
    if current > SCHEMA_VERSION {
        return Err(DbError::NewerSchema { found: current, known: SCHEMA_VERSION });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        let version = i as i32 + 1;
        tracing::info!("team database {}: migrating the schema to version {version}", target.describe());
        tx.batch_execute(sql).map_err(err)?;
        tx.execute("INSERT INTO pi_sessiond_schema (version) VALUES ($1)", &[&version]).map_err(err)?;
    }
    tx.commit().map_err(err)
}

/// The role connected, for a message (`?` if even that cannot be asked).
fn current_role(client: &mut Client) -> String {
    client.query_one("SELECT current_user::text", &[]).map_or_else(|_| "?".to_owned(), |r| r.get(0))
}

/// Connects and migrates: what every command that writes to the team database does first (a push, `team grant`,
/// `team revoke`, `team prune`), creating the tables in a database that has none.
pub fn open(target: &Target) -> DbResult<Client> {
    let mut client = target.connect()?;
    migrate(&mut client, target)?;
    Ok(client)
}

/// Connects for reading (`--catalog`): brings an older schema up to date as [`open`] does, but never creates the
/// tables in a database that has none, as a command that reads never creates a file. A URL pointing at the
/// wrong database is then said to be one, rather than answered with an empty catalog made on the spot.
pub fn open_for_reading(target: &Target) -> DbResult<Client> {
    let mut client = target.connect()?;
    let present: bool = client
        .query_one("SELECT to_regclass('pi_sessiond_schema') IS NOT NULL", &[])
        .map_err(|e| target.error(e))?
        .get(0);
    if !present {
        return Err(DbError::NotSetUp {
            server: target.describe(),
            why: "pi-sessiond's tables are not in this database: nothing has been pushed to it (check the URL's \
                  database; a first `pi-sessiond push` sets them up)"
                .to_owned(),
        });
    }
    migrate(&mut client, target)?;
    Ok(client)
}
