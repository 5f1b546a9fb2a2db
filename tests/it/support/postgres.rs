//! A real PostgreSQL server for the team tests: one per test process, made with `initdb` in a temporary directory
//! and listening on a loopback port (with TLS, from a self-signed certificate), run as `nobody` when the tests
//! run as root. A watchdog shell holds the server: when the test process exits, its pipe closes and the shell
//! stops the server and removes the directory. Each test gets a database of its own.
//!
//! Where no server can be started (no PostgreSQL installed) the tests skip with a message saying so, except
//! under CI (`CI` set) and in `tests/run-all` (`PI_SESSIOND_REQUIRE_POSTGRES` set), where that is a failure:
//! `tests/run-all` installs Debian's `postgresql`.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// The one role that must log in with a password (all others are trusted); the test that uses it creates it.
pub const PASSWORD_ROLE: &str = "team_pw";

/// The running server.
pub struct Server {
    port: u16,
    /// The watchdog's stdin: dropped only when the process exits.
    _watchdog: Mutex<std::process::ChildStdin>,
}

/// Where PostgreSQL's server programs are.
fn bin_dir() -> Option<PathBuf> {
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if dir.join("initdb").exists() && dir.join("postgres").exists() {
            return Some(dir);
        }
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|d| d.join("initdb").exists())
        .collect();
    versions.sort();
    versions.pop()
}

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// A command run as the server's user.
fn as_server_user(program: &Path) -> Command {
    let mut cmd = Command::new(program);
    if is_root() {
        cmd.uid(65534).gid(65534);
    }
    cmd
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port").local_addr().unwrap().port()
}

fn start() -> Result<Server, String> {
    let bin = bin_dir().ok_or("PostgreSQL's initdb and postgres are not installed")?;
    let dir = tempfile::Builder::new().prefix("pi-sessiond-pg-").tempdir().map_err(|e| e.to_string())?.keep();
    if is_root() {
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).map_err(|e| e.to_string())?;
    }
    let data = dir.join("data");
    let out = as_server_user(&bin.join("initdb"))
        .args(["-D"])
        .arg(&data)
        .args(["-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C.UTF-8", "--no-sync"])
        .current_dir(&dir)
        .output()
        .map_err(|e| format!("initdb: {e}"))?;
    if !out.status.success() {
        return Err(format!("initdb failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    // Every role logs in without a password (trust), except PASSWORD_ROLE, which must give its password
    // (scram-sha-256): the first matching line of pg_hba.conf wins, and `host` lines cover TLS connections too.
    let hba = data.join("pg_hba.conf");
    let trusted = std::fs::read_to_string(&hba).map_err(|e| format!("pg_hba.conf: {e}"))?;
    let checked = format!("host all {PASSWORD_ROLE} 127.0.0.1/32 scram-sha-256\n");
    std::fs::write(&hba, checked + &trusted).map_err(|e| format!("pg_hba.conf: {e}"))?;
    // TLS from a self-signed certificate, so a test can connect with sslmode=require.
    let mut tls = Vec::new();
    let cert = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost"])
        .arg("-keyout")
        .arg(data.join("server.key"))
        .arg("-out")
        .arg(data.join("server.crt"))
        .stderr(Stdio::null())
        .status();
    if cert.is_ok_and(|s| s.success()) {
        if is_root() {
            for f in ["server.key", "server.crt"] {
                let _ = std::os::unix::fs::chown(data.join(f), Some(65534), Some(65534));
            }
        }
        let _ = std::fs::set_permissions(data.join("server.key"), std::os::unix::fs::PermissionsExt::from_mode(0o600));
        tls = vec!["-c", "ssl=on"];
    }
    let port = free_port();
    let script = format!(
        "'{}' -D '{}' -p {port} -k '{}' -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200 {} \
         > '{}/log' 2>&1 & pid=$!; read _; kill -INT $pid; wait $pid; rm -rf '{}'",
        bin.join("postgres").display(),
        data.display(),
        dir.display(),
        tls.join(" "),
        dir.display(),
        dir.display(),
    );
    let mut watchdog = as_server_user(Path::new("/bin/sh"))
        .args(["-c", &script])
        .current_dir(&dir)
        .stdin(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start postgres: {e}"))?;
    let stdin = watchdog.stdin.take().expect("watchdog stdin");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if postgres::Client::connect(&admin_url(port), postgres::NoTls).is_ok() {
            break;
        }
        if std::time::Instant::now() > deadline || watchdog.try_wait().ok().flatten().is_some() {
            let log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
            return Err(format!("postgres did not start: {log}"));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    Ok(Server { port, _watchdog: Mutex::new(stdin) })
}

fn admin_url(port: u16) -> String {
    format!("postgresql://postgres@127.0.0.1:{port}/postgres?sslmode=disable")
}

/// The shared server, or None (with a message) where none can be started outside CI.
pub fn server() -> Option<&'static Server> {
    static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();
    match SERVER.get_or_init(start) {
        Ok(s) => Some(s),
        Err(e) if ["CI", "PI_SESSIOND_REQUIRE_POSTGRES"].iter().any(|v| std::env::var_os(v).is_some()) => {
            panic!("CI and tests/run-all must run the PostgreSQL tests, and no server can be started: {e}")
        }
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "skipping a PostgreSQL test: no server can be started here ({e})");
            None
        }
    }
}

impl Server {
    /// A new empty database, as a URL (without TLS).
    pub fn database(&self) -> String {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!("t{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let mut admin = postgres::Client::connect(&admin_url(self.port), postgres::NoTls).expect("admin connection");
        admin.batch_execute(&format!("CREATE DATABASE {name}")).expect("create database");
        format!("postgresql://postgres@127.0.0.1:{}/{name}?sslmode=disable", self.port)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }
}
