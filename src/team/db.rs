//! Connecting to the team's PostgreSQL: the URL (or libpq key=value string) with the usual `PG*` variables filling
//! in what it leaves out, TLS as `sslmode` asks, and a description of the server that never carries credentials.
//!
//! tokio-postgres parses URLs but knows neither the `PG*` variables nor libpq's `verify-ca`/`verify-full` modes, so
//! both are handled here before it sees the string. As in libpq, `prefer` and `require` encrypt without checking
//! the server's certificate, `verify-ca` checks the chain (against `sslrootcert` when given, else the system's
//! roots), and `verify-full` also checks the host name.

use std::path::Path;
use std::str::FromStr;

use postgres::config::{Host, SslMode};
use postgres::{Client, Config};

/// Why the database could not be used.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The URL or a `PG*` variable is not understood.
    #[error("invalid PostgreSQL connection string: {0}")]
    Config(String),
    /// An argument other than the connection cannot be used as given (a flag's value, a glob, a rules file, a
    /// role that does not exist): the message names it.
    #[error("{0}")]
    Invalid(String),
    /// The server said no, or the connection broke.
    #[error("PostgreSQL ({server}): {detail}")]
    Postgres {
        /// Where the server is (no credentials).
        server: String,
        /// What went wrong, in the server's words when it answered (the driver's own `Display` says only
        /// "db error" for those).
        detail: String,
        /// What the driver reported.
        #[source]
        source: postgres::Error,
    },
    /// TLS could not be set up.
    #[error("TLS for PostgreSQL: {0}")]
    Tls(String),
    /// The database holds a schema this pi-sessiond does not know.
    #[error("the database's pi-sessiond schema is version {found}, newer than this pi-sessiond supports ({known}): upgrade pi-sessiond")]
    NewerSchema {
        /// The version in the database.
        found: i32,
        /// The newest version this build knows.
        known: i32,
    },
    /// The connected role may not use pi-sessiond's tables: they are not there and it may not create them, or it
    /// was never granted anything. `why` says which, and what an admin does about it.
    #[error("PostgreSQL ({server}): {why}")]
    NotSetUp {
        /// Where the server is (no credentials).
        server: String,
        /// Which of the two, with the role named.
        why: String,
    },
    /// Another push of the same machine holds the machine's lock.
    #[error("another push for machine {machine:?} is running (it holds the machine's lock)")]
    Busy {
        /// The machine.
        machine: String,
    },
    /// The connected role has no grant to push as this machine (`team grant --push`); nothing was written.
    #[error("permission denied: role {role:?} may not push as machine {machine:?}: nothing was pushed (an admin grants it with `pi-sessiond team grant --role {role} --machine {machine} --push`)")]
    Denied {
        /// The database role the push connected as.
        role: String,
        /// The machine it would push as.
        machine: String,
    },
    /// The agent directory to push does not exist, or holds no `sessions` directory: most likely a mistyped
    /// `--agent-dir`, which must not be taken for a machine whose sessions were all deleted.
    #[error("{path}: {why}; nothing was pushed or deleted (--allow-empty pushes an agent directory without sessions)")]
    NoSessions {
        /// The directory as given.
        path: String,
        /// What is wrong with it.
        why: String,
    },
    /// The work was cancelled (`$/cancelRequest`); the statement it was running was cancelled too.
    #[error("cancelled")]
    Cancelled,
    /// A session file could not be read while pushing it.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: String,
        /// What went wrong.
        #[source]
        source: std::io::Error,
    },
}

/// Results of team operations.
pub type DbResult<T> = std::result::Result<T, DbError>;

impl DbError {
    /// Whether waiting and trying again can get past this, so a watching push keeps going: the connection broke or
    /// could not be made (no SQLSTATE: refused, reset, timed out), the server could not do the work just now
    /// ([`sqlstate_is_transient`]), another push still holds the machine's lock, or the files could not be read
    /// this time. Not a URL, TLS setup, a newer schema, or the server's refusal (bad credentials, a missing
    /// database, a permission or schema error): those need a person.
    pub fn is_transient(&self) -> bool {
        match self {
            DbError::Postgres { source, .. } => source.code().is_none_or(|c| sqlstate_is_transient(c.code())),
            DbError::Busy { .. } | DbError::File { .. } | DbError::NoSessions { .. } => true,
            DbError::Config(_)
            | DbError::Invalid(_)
            | DbError::Tls(_)
            | DbError::NewerSchema { .. }
            | DbError::Denied { .. }
            | DbError::NotSetUp { .. }
            | DbError::Cancelled => false,
        }
    }
}

/// Whether an error the server answered with SQLSTATE `code` may heal by itself: class 08 (connection
/// exception), class 53 (insufficient resources: a full disk, out of memory, too many connections), an operator
/// intervention that is not a dropped database (57014 query cancelled, 57P01 admin shutdown, 57P02 crash
/// shutdown, 57P03 cannot connect now, 57P05 idle session timeout), a transaction the server rolled back to
/// be tried again (40001 serialization failure, 40P01 deadlock, 55P03 lock not available, 25P03 idle in
/// transaction timeout), and an I/O error of the server (58000, 58030). Everything else (class 28 invalid
/// authorization, 3D000 a missing database, 42xxx permission and schema errors, 22xxx data errors…) is
/// permanent.
pub fn sqlstate_is_transient(code: &str) -> bool {
    let class = code.get(..2).unwrap_or_default();
    matches!(class, "08" | "53")
        || matches!(
            code,
            "57014" | "57P01" | "57P02" | "57P03" | "57P05" | "40001" | "40P01" | "55P03" | "25P03" | "58000" | "58030"
        )
}

/// How the server's certificate is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verify {
    /// Not at all (libpq's `prefer` and `require`).
    Nothing,
    /// The chain, not the host name (`verify-ca`).
    Chain,
    /// Chain and host name (`verify-full`).
    Full,
}

/// libpq's weaker modes in rustls's terms: `require` accepts any certificate (`chain` None), `verify-ca` checks the
/// chain but not the host name. The handshake's signatures are checked either way, so the connection is encrypted
/// to whoever holds the certificate's key.
#[derive(Debug)]
struct LibpqVerifier {
    chain: Option<std::sync::Arc<rustls::client::WebPkiServerVerifier>>,
    provider: std::sync::Arc<rustls::crypto::CryptoProvider>,
}

impl rustls::client::danger::ServerCertVerifier for LibpqVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        intermediates: &[rustls::pki_types::CertificateDer<'_>],
        server_name: &rustls::pki_types::ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        use rustls::CertificateError::{NotValidForName, NotValidForNameContext};
        let Some(chain) = &self.chain else { return Ok(rustls::client::danger::ServerCertVerified::assertion()) };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(NotValidForName | NotValidForNameContext { .. })) => {
                Ok(rustls::client::danger::ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// A parsed connection target: the driver's config plus what the driver cannot express.
#[derive(Clone)]
pub struct Target {
    config: Config,
    verify: Verify,
    root_cert: Option<String>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

/// Splits `sslmode` and `sslrootcert` out of a URL's query or a key=value string: tokio-postgres refuses the
/// verify modes and the root certificate option.
fn take_tls_options(conn: &str) -> (String, Option<String>, Option<String>) {
    let mut mode = None;
    let mut root = None;
    if conn.starts_with("postgres://") || conn.starts_with("postgresql://") {
        let Some((base, query)) = conn.split_once('?') else { return (conn.to_owned(), None, None) };
        let mut kept = Vec::new();
        for pair in query.split('&') {
            match pair.split_once('=') {
                Some(("sslmode", v)) => mode = Some(v.to_owned()),
                Some(("sslrootcert", v)) => root = Some(crate::session::paths::percent_decode(v)),
                _ => kept.push(pair),
            }
        }
        let rebuilt = if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) };
        return (rebuilt, mode, root);
    }
    let mut kept = Vec::new();
    for pair in conn.split_whitespace() {
        match pair.split_once('=') {
            Some(("sslmode", v)) => mode = Some(v.trim_matches('\'').to_owned()),
            Some(("sslrootcert", v)) => root = Some(v.trim_matches('\'').to_owned()),
            _ => kept.push(pair),
        }
    }
    (kept.join(" "), mode, root)
}

impl Target {
    /// Parses `conn` (a `postgres://` URL or a libpq key=value string); what it leaves out comes from `env`
    /// (`PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE`, `PGSSLMODE`, `PGSSLROOTCERT`,
    /// `PGAPPNAME`, `PGCONNECT_TIMEOUT`), a password missing from both from libpq's password file (`PGPASSFILE`, else
    /// `~/.pgpass`), then libpq's defaults (the OS user; a local socket).
    pub fn parse(conn: &str, env: &dyn Fn(&str) -> Option<String>) -> DbResult<Target> {
        let (rest, mode, root) = take_tls_options(conn.trim());
        let mut config = if rest.is_empty() {
            Config::new()
        } else {
            Config::from_str(&rest).map_err(|e| DbError::Config(e.to_string()))?
        };
        let var = |k: &str| env(k).filter(|v| !v.is_empty());
        if config.get_hosts().is_empty() {
            match var("PGHOST") {
                Some(h) => {
                    for host in h.split(',') {
                        config.host(host);
                    }
                }
                None => {
                    config.host(DEFAULT_SOCKET_DIR);
                }
            }
        }
        if config.get_ports().is_empty() {
            if let Some(p) = var("PGPORT") {
                config.port(p.parse().map_err(|_| DbError::Config(format!("PGPORT is not a port: {p}")))?);
            }
        }
        if config.get_user().is_none() {
            let user = var("PGUSER").or_else(|| var("USER")).unwrap_or_else(|| "postgres".to_owned());
            config.user(&user);
        }
        if config.get_password().is_none() {
            if let Some(p) = var("PGPASSWORD") {
                config.password(p);
            }
        }
        if config.get_dbname().is_none() {
            if let Some(d) = var("PGDATABASE") {
                config.dbname(&d);
            }
        }
        if config.get_password().is_none() {
            if let Some(password) = password_from_file(&config, env) {
                config.password(password);
            }
        }
        if config.get_application_name().is_none() {
            config.application_name(&var("PGAPPNAME").unwrap_or_else(|| "pi-sessiond".to_owned()));
        }
        if config.get_connect_timeout().is_none() {
            let secs = var("PGCONNECT_TIMEOUT").and_then(|s| s.parse::<u64>().ok()).unwrap_or(10);
            config.connect_timeout(std::time::Duration::from_secs(secs.max(1)));
        }
        let mode = mode.or_else(|| var("PGSSLMODE")).unwrap_or_else(|| "prefer".to_owned());
        let (ssl, verify) = match mode.as_str() {
            "disable" => (SslMode::Disable, Verify::Nothing),
            "allow" | "prefer" => (SslMode::Prefer, Verify::Nothing),
            "require" => (SslMode::Require, Verify::Nothing),
            "verify-ca" => (SslMode::Require, Verify::Chain),
            "verify-full" => (SslMode::Require, Verify::Full),
            other => return Err(DbError::Config(format!("unknown sslmode {other:?}"))),
        };
        config.ssl_mode(ssl);
        Ok(Target { config, verify, root_cert: root.or_else(|| var("PGSSLROOTCERT")) })
    }

    /// [`Target::parse`] with the process's environment.
    pub fn from_env(conn: &str) -> DbResult<Target> {
        Target::parse(conn, &|k| std::env::var(k).ok())
    }

    /// `user@host:port/dbname`, for messages and logs: never the password.
    pub fn describe(&self) -> String {
        let hosts: Vec<String> = self
            .config
            .get_hosts()
            .iter()
            .map(|h| match h {
                Host::Tcp(name) => name.clone(),
                Host::Unix(path) => path.display().to_string(),
            })
            .collect();
        let port = self.config.get_ports().first().copied().unwrap_or(5432);
        let user = self.config.get_user().unwrap_or("");
        let db = self.config.get_dbname().unwrap_or(user);
        format!("{user}@{}:{port}/{db}", hosts.join(","))
    }

    /// The TLS connector `sslmode` asks for (also what a cancel request is sent with): rustls (so the binary
    /// needs no system OpenSSL), with the roots of `sslrootcert` when given, else the system's.
    pub(super) fn tls(&self) -> DbResult<tokio_postgres_rustls::MakeRustlsConnect> {
        use std::sync::Arc;
        let tls_error = |e: &dyn std::fmt::Display| DbError::Tls(e.to_string());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        match &self.root_cert {
            Some(path) => {
                use rustls::pki_types::pem::PemObject;
                let certs = rustls::pki_types::CertificateDer::pem_file_iter(path)
                    .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| DbError::Tls(format!("sslrootcert {path}: {e}")))?;
                for cert in certs {
                    roots.add(cert).map_err(|e| DbError::Tls(format!("{path}: {e}")))?;
                }
            }
            None if self.verify != Verify::Nothing => {
                // Certificates the system store holds that rustls cannot use are left out, as a browser would.
                for cert in rustls_native_certs::load_native_certs().certs {
                    let _ = roots.add(cert);
                }
            }
            None => {}
        }
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_error(&e))?;
        let config = match self.verify {
            Verify::Full => builder.with_root_certificates(roots).with_no_client_auth(),
            verify => {
                let chain = match verify {
                    Verify::Chain => Some(
                        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                            .build()
                            .map_err(|e| tls_error(&e))?,
                    ),
                    _ => None,
                };
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(LibpqVerifier { chain, provider }))
                    .with_no_client_auth()
            }
        };
        Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
    }

    /// Opens a connection.
    pub fn connect(&self) -> DbResult<Client> {
        let tls = self.tls()?;
        self.config.connect(tls).map_err(|e| self.error(e))
    }

    /// A driver error, with where the server is.
    pub fn error(&self, source: postgres::Error) -> DbError {
        DbError::Postgres { server: self.describe(), detail: error_detail(&source), source }
    }
}

/// The password file's password for the first host of `config` (libpq reads it per host; one password is all the
/// driver takes), matched as libpq matches: a socket in the default directory is `localhost`, the port defaults to
/// 5432 and the database to the user.
fn password_from_file(config: &Config, env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let path = super::pgpass::file(env)?;
    let host = match config.get_hosts().first()? {
        Host::Tcp(name) => name.clone(),
        Host::Unix(dir) if dir == Path::new(DEFAULT_SOCKET_DIR) || dir == Path::new("/tmp") => "localhost".to_owned(),
        Host::Unix(dir) => dir.display().to_string(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432).to_string();
    let user = config.get_user().unwrap_or_default();
    let database = config.get_dbname().unwrap_or(user);
    super::pgpass::lookup(&path, super::pgpass::Wanted { host: &host, port: &port, database, user })
}

/// Where the server's socket is when nothing says otherwise (Debian's libpq).
const DEFAULT_SOCKET_DIR: &str = "/var/run/postgresql";

/// A driver error as a sentence: the server's severity, SQLSTATE and message (with its detail and hint) when the
/// server answered, else the driver's message and its causes (a refused connection, a TLS failure…).
fn error_detail(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut text = format!("{} {}: {}", db.severity(), db.code().code(), db.message());
        for extra in [db.detail(), db.hint()].into_iter().flatten() {
            text.push_str("; ");
            text.push_str(extra);
        }
        return text;
    }
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn what_a_watching_push_waits_out_and_what_stops_it_are_told_apart_by_sqlstate() {
        for code in ["08006", "08001", "53100", "53200", "53300", "57014", "57P01", "57P03", "40P01", "55P03", "58030"]
        {
            assert!(sqlstate_is_transient(code), "{code} heals by itself");
        }
        for code in ["28P01", "28000", "3D000", "42501", "42P01", "42703", "22021", "57P04", "XX000", "0A000", ""] {
            assert!(!sqlstate_is_transient(code), "{code} needs a person");
        }
    }

    #[test]
    fn pg_variables_fill_in_what_the_url_leaves_out() {
        let vars = [("PGHOST", "db.example"), ("PGPORT", "6543"), ("PGUSER", "alice"), ("PGDATABASE", "team")];
        let t = Target::parse("postgresql://", &env(&vars)).unwrap();
        assert_eq!(t.describe(), "alice@db.example:6543/team");
        let t = Target::parse("postgresql://bob@other:7000/x", &env(&vars)).unwrap();
        assert_eq!(t.describe(), "bob@other:7000/x");
    }

    #[test]
    fn the_description_of_a_server_never_holds_its_password() {
        let t = Target::parse("postgresql://carol:s3cret@h:1/db?sslmode=verify-full", &env(&[])).unwrap();
        assert!(!t.describe().contains("s3cret"));
        assert!(!format!("{t:?}").contains("s3cret"));
        let t = Target::parse("host=h user=u dbname=d", &env(&[("PGPASSWORD", "hunter2")])).unwrap();
        assert!(!format!("{t:?}").contains("hunter2"));
        assert_eq!(t.config.get_password(), Some(&b"hunter2"[..]));
    }

    #[test]
    fn verify_modes_are_accepted_though_the_driver_does_not_know_them() {
        for (mode, verify) in
            [("verify-ca", Verify::Chain), ("verify-full", Verify::Full), ("require", Verify::Nothing)]
        {
            let t = Target::parse(&format!("postgres://u@h/d?sslmode={mode}&sslrootcert=%2Ftmp%2Fca.pem"), &env(&[]))
                .unwrap();
            assert_eq!(t.verify, verify);
            assert_eq!(t.config.get_ssl_mode(), SslMode::Require);
            assert_eq!(t.root_cert.as_deref(), Some("/tmp/ca.pem"));
        }
        assert!(matches!(Target::parse("postgres://u@h/d?sslmode=bogus", &env(&[])), Err(DbError::Config(_))));
    }
}
