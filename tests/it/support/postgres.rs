//! A real PostgreSQL server for the team tests: one per test process, made with `initdb` in a temporary directory
//! and listening on a loopback port (with TLS, from a self-signed certificate), run as `nobody` when the tests
//! run as root. A watchdog shell holds the server: when the test process exits, its pipe closes and the shell
//! stops the server and removes the directory. Each test gets a database of its own.
//!
//! A test that must restart its server gets one of its own ([`OwnServer`]), stopped and started on one port.
//!
//! The tests that need one are marked `#[ignore = "needs PostgreSQL"]`, so `cargo test` lists them as ignored
//! where nobody asked for them, and they run with `cargo test --test it -- --ignored` (`tests/run-all` does, after
//! installing Debian's `postgresql`); asked for, a test whose server cannot start fails saying why, never skips.

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

/// PostgreSQL's own client, `psql`, from the server's installation (Debian's server package depends on it): the
/// tests that must see what a person at `psql` sees run it. Its absence beside a running server is a failure.
pub fn psql() -> PathBuf {
    let psql = bin_dir().expect("a running server has its bin directory").join("psql");
    assert!(psql.exists(), "psql is not installed beside PostgreSQL's server ({})", psql.display());
    psql
}

/// Whether the tests run as root (then the server runs as `nobody`, and a test may mount a file system).
pub fn is_root() -> bool {
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

/// A cluster made by `initdb`, not yet running.
struct Cluster {
    bin: PathBuf,
    /// The temporary directory holding it (removed by the watchdog).
    dir: PathBuf,
    data: PathBuf,
    /// `-c ssl=on` when a certificate could be made.
    tls: Vec<&'static str>,
}

fn init_cluster() -> Result<Cluster, String> {
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
    Ok(Cluster { bin, dir, data, tls })
}

impl Cluster {
    /// The shell command that runs the server on `port` in the background, its pid in `$pid`.
    fn run_command(&self, port: u16) -> String {
        format!(
            "'{}' -D '{}' -p {port} -k '{}' -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200 {} \
             >> '{}/log' 2>&1 & pid=$!",
            self.bin.join("postgres").display(),
            self.data.display(),
            self.dir.display(),
            self.tls.join(" "),
            self.dir.display(),
        )
    }

    /// Waits (up to a minute) until the server on `port` takes connections.
    fn wait_until_up(&self, port: u16, watchdog: &mut std::process::Child) -> Result<(), String> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            if postgres::Client::connect(&admin_url(port), postgres::NoTls).is_ok() {
                return Ok(());
            }
            if std::time::Instant::now() > deadline || watchdog.try_wait().ok().flatten().is_some() {
                let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
                return Err(format!("postgres did not start: {log}"));
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

fn start() -> Result<Server, String> {
    let cluster = init_cluster()?;
    let dir = &cluster.dir;
    let port = free_port();
    let script =
        format!("{}; read _; kill -INT $pid; wait $pid; rm -rf '{}'", cluster.run_command(port), dir.display(),);
    let mut watchdog = as_server_user(Path::new("/bin/sh"))
        .args(["-c", &script])
        .current_dir(dir)
        .stdin(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start postgres: {e}"))?;
    let stdin = watchdog.stdin.take().expect("watchdog stdin");
    cluster.wait_until_up(port, &mut watchdog)?;
    Ok(Server { port, _watchdog: Mutex::new(stdin) })
}

/// A server of one test's own, which the test stops and starts again on the same port (a database restart as
/// its clients see it). Its watchdog shell takes `stop` and `start` on stdin and answers each on stdout; when
/// the test process exits, the server is stopped and its directory removed, as for the shared one.
pub struct OwnServer {
    port: u16,
    cluster: Cluster,
    watchdog: std::process::Child,
    control: std::process::ChildStdin,
    answers: std::io::BufReader<std::process::ChildStdout>,
}

impl OwnServer {
    /// Starts one (a test that asks for one and cannot have it fails, as with [`server`]).
    pub fn start() -> OwnServer {
        OwnServer::try_start().unwrap_or_else(|e| no_server(&e))
    }

    fn try_start() -> Result<OwnServer, String> {
        let cluster = init_cluster()?;
        let port = free_port();
        let run = cluster.run_command(port);
        let script = format!(
            "{run}; while read cmd; do case \"$cmd\" in stop) kill -INT $pid; wait $pid; echo stopped;; \
             start) {run}; echo started;; esac; done; kill -INT $pid; wait $pid; rm -rf '{}'",
            cluster.dir.display(),
        );
        let mut watchdog = as_server_user(Path::new("/bin/sh"))
            .args(["-c", &script])
            .current_dir(&cluster.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start postgres: {e}"))?;
        let control = watchdog.stdin.take().expect("watchdog stdin");
        let answers = std::io::BufReader::new(watchdog.stdout.take().expect("watchdog stdout"));
        cluster.wait_until_up(port, &mut watchdog)?;
        Ok(OwnServer { port, cluster, watchdog, control, answers })
    }

    fn command(&mut self, cmd: &str) {
        writeln!(self.control, "{cmd}").expect("the watchdog takes commands");
        let mut answer = String::new();
        std::io::BufRead::read_line(&mut self.answers, &mut answer).expect("the watchdog answers");
        let done = if cmd == "stop" { "stopped" } else { "started" };
        assert_eq!(answer.trim(), done, "the watchdog did not {cmd} the server");
    }

    /// Stops the server (PostgreSQL's fast shutdown: clients get 57P01, then nothing answers on the port).
    pub fn stop(&mut self) {
        self.command("stop");
    }

    /// Starts it again on the same port and waits until it takes connections.
    pub fn start_again(&mut self) {
        self.command("start");
        self.cluster.wait_until_up(self.port, &mut self.watchdog).expect("the server starts again");
    }

    /// A new empty database, as a URL (without TLS).
    pub fn database(&self) -> String {
        new_database(self.port)
    }
}

/// A new empty database on the server at `port`, as a URL (without TLS).
fn new_database(port: u16) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let name = format!("t{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let mut admin = postgres::Client::connect(&admin_url(port), postgres::NoTls).expect("admin connection");
    admin.batch_execute(&format!("CREATE DATABASE {name}")).expect("create database");
    format!("postgresql://postgres@127.0.0.1:{port}/{name}?sslmode=disable")
}

fn admin_url(port: u16) -> String {
    format!("postgresql://postgres@127.0.0.1:{port}/postgres?sslmode=disable")
}

/// The shared server (a test that asks for one and cannot have it fails saying why).
pub fn server() -> &'static Server {
    static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();
    SERVER.get_or_init(start).as_ref().unwrap_or_else(|e| no_server(e))
}

fn no_server(why: &str) -> ! {
    panic!(
        "this test needs PostgreSQL (it is #[ignore]d unless asked for; tests/run-all installs Debian's \
         postgresql) and no server can be started here: {why}"
    )
}

impl Server {
    /// A new empty database, as a URL (without TLS).
    pub fn database(&self) -> String {
        new_database(self.port)
    }

    /// A new empty database whose files are all in `tablespace`, as a URL (without TLS).
    pub fn database_in(&self, tablespace: &str) -> String {
        let url = new_database(self.port);
        let name = url.rsplit('/').next().unwrap().split('?').next().unwrap().to_owned();
        let mut admin = postgres::Client::connect(&admin_url(self.port), postgres::NoTls).expect("admin connection");
        admin.batch_execute(&format!("ALTER DATABASE {name} SET TABLESPACE {tablespace}")).expect("move database");
        url
    }

    /// A connection as the superuser to the maintenance database.
    pub fn admin(&self) -> postgres::Client {
        postgres::Client::connect(&admin_url(self.port), postgres::NoTls).expect("admin connection")
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// A loopback TCP relay in front of the server that counts the bytes the server sends, so a test can tell how
/// much a command pulled out of the database.
pub struct CountingRelay {
    port: u16,
    from_server: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl CountingRelay {
    /// Relays connections to the server at `port` (at most 64 of them over its life).
    pub fn start(port: u16) -> CountingRelay {
        use std::sync::atomic::AtomicU64;
        use std::sync::Arc;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a relay port");
        let relay_port = listener.local_addr().unwrap().port();
        let from_server = Arc::new(AtomicU64::new(0));
        let counted = from_server.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().take(64) {
                let Ok(client) = client else { continue };
                let Ok(server) = std::net::TcpStream::connect(("127.0.0.1", port)) else { continue };
                let (mut c_read, mut s_write) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c_read, &mut s_write);
                    let _ = s_write.shutdown(std::net::Shutdown::Write);
                });
                let (mut s_read, mut c_write, counted) = (server, client, counted.clone());
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let n = match std::io::Read::read(&mut s_read, &mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        counted.fetch_add(n as u64, Ordering::Relaxed);
                        if std::io::Write::write_all(&mut c_write, &buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = c_write.shutdown(std::net::Shutdown::Write);
                });
            }
        });
        CountingRelay { port: relay_port, from_server }
    }

    /// `url` (a database of the server) through the relay.
    pub fn url(&self, url: &str) -> String {
        let (head, rest) = url.split_once("@127.0.0.1:").expect("a loopback URL");
        let (_, db) = rest.split_once('/').expect("a database in the URL");
        format!("{head}@127.0.0.1:{}/{db}", self.port)
    }

    /// Bytes the server has sent through the relay so far.
    pub fn bytes_from_server(&self) -> u64 {
        self.from_server.load(Ordering::Relaxed)
    }
}
