//! A long mixed load on one sidecar process, the way a busy host and pi beside it would drive it: opens, closes,
//! appends, batches, `changesSince`, reads, listings, searches and watches over a few handles, while another
//! thread appends raw lines to some of the same files (as pi does when it writes a session the sidecar follows).
//! The process's RSS and thread count are sampled from `/proc/PID/status` as it runs; at the end the files are
//! checked against what was acknowledged and what the handles hold. `tests/it/soak.rs` runs it briefly under the
//! debug build; `bench/run --only soak` runs it for an hour on the release binary.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pi_sessiond::session::json::Json;

use super::sidecar::{Sidecar, Wire};
use super::{json, str_of, Mulberry as Rng};

/// What the load does and for how long.
#[derive(Clone, Debug)]
pub struct SoakConfig {
    /// The `pi-sessiond` binary to run.
    pub binary: String,
    /// How long the load runs.
    pub duration: Duration,
    /// Requests sent at most (a second bound beside the duration).
    pub max_requests: u64,
    /// Handles open at once.
    pub handles: usize,
    /// Session files the load writes to (created at the start).
    pub sessions: usize,
    /// Of those, how many the raw appender writes to as well.
    pub raw_sessions: usize,
    /// A session file past this size is checked, closed, deleted and replaced by a new one, so the data stays
    /// bounded however long the load runs (what grows after that is the process's own doing).
    pub rotate_bytes: u64,
    /// How often RSS and threads are sampled.
    pub sample_every: Duration,
    /// Seed of every choice the load makes.
    pub seed: u32,
}

/// How long the load waits, once over, before its last look: tokio ends a blocking thread idle for 10 s (its
/// default keep-alive, which the sidecar keeps), so a thread still there after this is one that never ends.
const IDLE_THREADS_END: Duration = Duration::from_secs(12);

/// One look at the process.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// Seconds since the load began.
    pub secs: f64,
    /// Requests answered so far.
    pub requests: u64,
    /// Resident set, KiB.
    pub rss_kib: u64,
    /// Threads of the process.
    pub threads: u64,
    /// Open descriptors of the process.
    pub fds: u64,
}

/// What a soak found.
#[derive(Debug, Default)]
pub struct SoakReport {
    /// The process over time.
    pub samples: Vec<Sample>,
    /// Requests answered.
    pub requests: u64,
    /// Lines the raw appender wrote.
    pub raw_lines: u64,
    /// Error answers, by method and kind (none are expected).
    pub errors: HashMap<String, u64>,
    /// Broken invariants, each said in a sentence.
    pub violations: Vec<String>,
    /// Entries acknowledged by the sidecar.
    pub acknowledged: usize,
    /// Session files checked, deleted and replaced on the way.
    pub rotated: usize,
    /// The process once the load is over, every handle and watch released and the blocking pool's idle threads
    /// given time to end.
    pub idle: Option<Sample>,
}

impl SoakReport {
    /// The samples as JSON lines (for `bench/run`).
    pub fn samples_jsonl(&self) -> String {
        self.samples
            .iter()
            .map(|s| {
                format!(
                    "{{\"secs\":{:.1},\"requests\":{},\"rssKiB\":{},\"threads\":{},\"fds\":{}}}\n",
                    s.secs, s.requests, s.rss_kib, s.threads, s.fds
                )
            })
            .collect()
    }
}

/// A look at process `pid` now: RSS and threads from `/proc/PID/status`, descriptors from `/proc/PID/fd`.
fn sample(pid: u32, secs: f64, requests: u64) -> Sample {
    let (rss_kib, threads) = proc_status(pid);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
    Sample { secs, requests, rss_kib, threads, fds }
}

/// The inotify watches a process holds (`inotify wd:` lines of its descriptors' fdinfo).
fn inotify_watches(pid: u32) -> usize {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else { return 0 };
    fds.flatten()
        .map(|fd| std::fs::read_to_string(fd.path()).unwrap_or_default())
        .map(|info| info.lines().filter(|l| l.starts_with("inotify wd:")).count())
        .sum()
}

/// Resident set (KiB) and thread count of a process, from `/proc/PID/status`.
fn proc_status(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("Threads:"))
}

const WORDS: &[&str] = &[
    "refactor",
    "parser",
    "borrow",
    "lifetime",
    "tokio",
    "sqlite",
    "index",
    "render",
    "branch",
    "compaction",
    "label",
    "thinking",
    "model",
    "usage",
    "deploy",
    "cache",
    "socket",
    "watcher",
    "mirror",
    "snapshot",
];

fn text(rng: &mut Rng, words: usize) -> String {
    (0..words).map(|_| WORDS[rng.next_u32() as usize % WORDS.len()]).collect::<Vec<_>>().join(" ")
}

fn message(rng: &mut Rng) -> String {
    let words = 4 + rng.next_u32() as usize % 40;
    format!(r#"{{"role":"user","content":"{}","timestamp":1}}"#, text(rng, words))
}

/// The raw appender: pi-shaped message lines, each a child of the file's last entry, in one `write` each.
struct RawAppender {
    /// The files it appends to (the load replaces a rotated one in place).
    files: Arc<std::sync::Mutex<Vec<PathBuf>>>,
    stop: Arc<AtomicBool>,
    lines: Arc<AtomicU64>,
}

impl RawAppender {
    fn run(self, seed: u32) {
        let mut rng = Rng::new(seed);
        let started = Instant::now();
        while !self.stop.load(Ordering::SeqCst) && started.elapsed() < Duration::from_secs(4 * 3600) {
            let file = {
                let files = self.files.lock().unwrap();
                files[rng.next_u32() as usize % files.len()].clone()
            };
            let file = &file;
            let parent = last_entry_id(file);
            let id = format!("{:08x}", rng.next_u32());
            let parent = parent.map(|p| format!("\"{p}\"")).unwrap_or_else(|| "null".into());
            let line = format!(
                "{{\"type\":\"message\",\"id\":\"{id}\",\"parentId\":{parent},\"timestamp\":\"2026-01-01T00:00:00.000Z\",\
                 \"message\":{{\"role\":\"assistant\",\"content\":[{{\"type\":\"text\",\"text\":\"raw {}\"}}],\
                 \"timestamp\":1}}}}\n",
                text(&mut rng, 8)
            );
            if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(file) {
                if f.write_all(line.as_bytes()).is_ok() {
                    self.lines.fetch_add(1, Ordering::SeqCst);
                }
            }
            std::thread::sleep(Duration::from_millis(15));
        }
    }
}

/// The id of the last complete entry line of a session file.
fn last_entry_id(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    let body = &bytes[..bytes.iter().rposition(|b| *b == b'\n')? + 1];
    body.split(|b| *b == b'\n').rev().filter(|l| !l.is_empty()).find_map(|l| {
        let v = Json::parse(l).ok()?;
        if v.get("type").and_then(Json::as_js_str).is_some_and(|t| t.eq_str("session")) {
            return None;
        }
        v.get("id").and_then(Json::as_js_str).map(|s| s.to_string_lossy())
    })
}

/// The ids of a file's entries, and `(id, parentId)` of those that name a parent.
type FileEntries = (HashSet<String>, Vec<(String, String)>);

/// Ids and parent ids of every entry line in a file.
fn file_entries(path: &Path) -> FileEntries {
    let bytes = std::fs::read(path).unwrap_or_default();
    let mut ids = HashSet::new();
    let mut parents = Vec::new();
    for l in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let Ok(v) = Json::parse(l) else { continue };
        if v.get("type").and_then(Json::as_js_str).is_some_and(|t| t.eq_str("session")) {
            continue;
        }
        let Some(id) = v.get("id").and_then(Json::as_js_str).map(|s| s.to_string_lossy()) else { continue };
        if let Some(p) = v.get("parentId").and_then(Json::as_js_str) {
            parents.push((id.clone(), p.to_string_lossy()));
        }
        ids.insert(id);
    }
    (ids, parents)
}

/// A handle the load holds, and the file behind it.
#[derive(Clone)]
struct Open {
    handle: String,
    file: usize,
}

/// The load itself: one host, its handles, what it was told.
struct Driver {
    sc: Sidecar,
    rng: Rng,
    agent: PathBuf,
    files: Vec<PathBuf>,
    /// What the raw appender writes to: the first files.
    raw_files: Arc<std::sync::Mutex<Vec<PathBuf>>>,
    rotate_bytes: u64,
    opens: Vec<Option<Open>>,
    next_handle: u64,
    acked: Vec<Vec<String>>,
    seqs: HashMap<String, u64>,
    dir_watches: Vec<String>,
    watched: HashSet<String>,
    report: SoakReport,
}

impl Driver {
    /// Sends requests pipelined and waits for every answer; errors are counted by method and kind.
    fn pipelined(&mut self, requests: &[(&str, String)]) -> Vec<Option<Json>> {
        let ids: Vec<u64> = requests.iter().map(|(m, p)| self.sc.start(m, json(p))).collect();
        let answers = ids
            .iter()
            .zip(requests)
            .map(|(id, (method, _))| {
                let r = self.sc.response(*id);
                self.report.requests += 1;
                match r.get("result") {
                    Some(v) => Some(v.clone()),
                    None => {
                        let kind = r
                            .get("error")
                            .and_then(|e| e.get("data"))
                            .and_then(|d| d.get("kind"))
                            .map(|k| k.to_canonical_string())
                            .unwrap_or_else(|| r.to_canonical_string());
                        *self.report.errors.entry(format!("{method} {kind}")).or_default() += 1;
                        None
                    }
                }
            })
            .collect();
        self.absorb_notifications();
        answers
    }

    fn one(&mut self, method: &str, params: String) -> Option<Json> {
        self.pipelined(&[(method, params)]).pop().flatten()
    }

    /// Keeps the last seq each handle was sent; drops the rest of the backlog (the host applies nothing).
    fn absorb_notifications(&mut self) {
        for n in self.sc.take_notifications("session/changed") {
            let Some(p) = n.get("params") else { continue };
            let (Some(h), Some(seq)) = (p.get("handle"), p.get("seq")) else { continue };
            let seq = pi_sessiond::session::js::to_number(Some(seq)) as u64;
            self.seqs.insert(str_of(h), seq);
        }
        self.sc.backlog.retain(|m| m.get("method").is_none());
    }

    fn open_file(&mut self, slot: usize, file: usize) {
        self.next_handle += 1;
        let handle = format!("s{}", self.next_handle);
        let path = self.files[file].display().to_string();
        let snapshot = ["none", "skeleton", "full"][self.rng.next_u32() as usize % 3];
        let params = format!(r#"{{"path":"{path}","handle":"{handle}","snapshot":"{snapshot}"}}"#);
        if let Some(st) = self.one("session/open", params) {
            let handle = str_of(st.get("handle").expect("handle"));
            self.opens[slot] = Some(Open { handle, file });
        }
    }

    /// Opens a file no handle holds (a second open of a file is refused: the host is told the handle to use).
    fn open_another(&mut self, slot: usize) {
        let held: HashSet<usize> = self.opens.iter().flatten().map(|o| o.file).collect();
        let free: Vec<usize> = (0..self.files.len()).filter(|f| !held.contains(f)).collect();
        if !free.is_empty() {
            let file = free[self.rng.next_u32() as usize % free.len()];
            self.open_file(slot, file);
        }
    }

    fn close(&mut self, slot: usize) {
        if let Some(o) = self.opens[slot].take() {
            self.seqs.remove(&o.handle);
            self.watched.remove(&o.handle);
            self.one("session/close", format!(r#"{{"handle":"{}"}}"#, o.handle));
        }
    }

    fn record_ids(&mut self, file: usize, v: &Json) {
        if let Some(id) = v.get("id").and_then(Json::as_js_str) {
            self.acked[file].push(id.to_string_lossy());
        }
    }

    /// One step of the mixed load.
    fn step(&mut self) {
        let slot = self.rng.next_u32() as usize % self.opens.len();
        let Some(open) = self.opens[slot].clone() else {
            return self.open_another(slot);
        };
        let h = open.handle.clone();
        let roll = self.rng.next_u32() % 100;
        match roll {
            0..=29 => {
                let n = 1 + self.rng.next_u32() as usize % 6;
                let reqs: Vec<(&str, String)> = (0..n)
                    .map(|_| {
                        ("session/appendMessage", format!(r#"{{"handle":"{h}","message":{}}}"#, message(&mut self.rng)))
                    })
                    .collect();
                for a in self.pipelined(&reqs).into_iter().flatten() {
                    self.record_ids(open.file, &a);
                }
            }
            30..=39 => {
                let ops: Vec<String> = (0..3)
                    .map(|_| {
                        format!(
                            r#"{{"method":"session/appendMessage","params":{{"message":{}}}}}"#,
                            message(&mut self.rng)
                        )
                    })
                    .collect();
                let params = format!(r#"{{"handle":"{h}","ops":[{}]}}"#, ops.join(","));
                if let Some(r) = self.one("session/appendBatch", params) {
                    if let Some(Json::Array(results)) = r.get("results") {
                        for v in results.clone() {
                            self.record_ids(open.file, &v);
                        }
                    }
                }
            }
            40..=49 => {
                let last = self.seqs.get(&h).copied().unwrap_or(0);
                let back = self.rng.next_u32() as u64 % 40;
                self.one("session/changesSince", format!(r#"{{"handle":"{h}","seq":{}}}"#, last.saturating_sub(back)));
            }
            50..=64 => {
                // Reads, pipelined on one handle (they run side by side).
                let reads = [
                    format!(r#"{{"handle":"{h}","detail":"skeleton"}}"#),
                    format!(r#"{{"handle":"{h}"}}"#),
                    format!(r#"{{"handle":"{h}"}}"#),
                    format!(r#"{{"handle":"{h}","limit":20}}"#),
                ];
                let methods =
                    ["session/getEntries", "session/getTree", "session/buildSessionContext", "session/getEntries"];
                let n = 1 + self.rng.next_u32() as usize % 12;
                let reqs: Vec<(&str, String)> = (0..n).map(|i| (methods[i % 4], reads[i % 4].clone())).collect();
                self.pipelined(&reqs);
            }
            65..=69 => {
                self.one("sessions/listAll", r#"{"includeAllMessagesText":true}"#.into());
            }
            70..=74 => {
                let words = 1 + self.rng.next_u32() as usize % 2;
                let q = text(&mut self.rng, words);
                self.one("sessions/search", format!(r#"{{"query":"{q}","limit":20}}"#));
            }
            75..=79 => {
                if self.watched.remove(&h) {
                    self.one("session/unwatch", format!(r#"{{"handle":"{h}"}}"#));
                } else {
                    self.watched.insert(h.clone());
                    self.one("session/watch", format!(r#"{{"handle":"{h}"}}"#));
                }
            }
            80..=83 => {
                if self.dir_watches.len() >= 3 || (!self.dir_watches.is_empty() && roll.is_multiple_of(2)) {
                    let id = self.dir_watches.remove(0);
                    self.one("sessions/unwatch", format!(r#"{{"watchId":"{id}"}}"#));
                } else {
                    let dir = self.files[open.file].parent().expect("session dir").display().to_string();
                    if let Some(w) = self.one("sessions/watch", format!(r#"{{"sessionDir":"{dir}"}}"#)) {
                        if let Some(id) = w.get("watchId") {
                            self.dir_watches.push(str_of(id));
                        }
                    }
                }
            }
            84..=87 => {
                self.one("sessions/list", format!(r#"{{"cwd":"/soak/p{}"}}"#, open.file % 3));
            }
            _ => {
                // Churn: close this handle and open another file (or the same one again).
                self.close(slot);
                self.open_another(slot);
            }
        }
    }

    /// Every acknowledged entry is in its file, every parent named in a file is in it, and no open handle holds
    /// an entry its file lacks.
    fn check(&mut self) {
        let seen: Vec<FileEntries> = (0..self.files.len()).map(|i| self.check_file(i)).collect();
        for open in self.opens.clone().into_iter().flatten() {
            let params = format!(r#"{{"handle":"{}","detail":"skeleton"}}"#, open.handle);
            let Some(entries) = self.one("session/getEntries", params) else { continue };
            let Ok(entries) = entries.into_array() else { continue };
            let ids = &seen[open.file].0;
            let phantoms = entries
                .iter()
                .filter_map(|e| e.get("id").and_then(Json::as_js_str).map(|s| s.to_string_lossy()))
                .filter(|id| !ids.contains(id))
                .count();
            if phantoms > 0 {
                self.report.violations.push(format!(
                    "{}: handle {} holds {phantoms} entries the file lacks",
                    self.files[open.file].display(),
                    open.handle
                ));
            }
        }
        self.report.acknowledged += self.acked.iter().map(Vec::len).sum::<usize>();
    }

    /// Closes every handle and ends every directory watch: the process must then watch nothing.
    fn release_everything(&mut self, pid: u32) {
        for slot in 0..self.opens.len() {
            self.close(slot);
        }
        for id in std::mem::take(&mut self.dir_watches) {
            self.one("sessions/unwatch", format!(r#"{{"watchId":"{id}"}}"#));
        }
        let watches = inotify_watches(pid);
        if watches > 0 {
            self.report.violations.push(format!("{watches} inotify watches are left with no handle and no watch"));
        }
    }

    /// Every entry acknowledged for file `i` is in it and every parent it names is in it; gives its entries.
    fn check_file(&mut self, i: usize) -> FileEntries {
        let (ids, parents) = file_entries(&self.files[i]);
        let file = self.files[i].display();
        let missing = self.acked[i].iter().filter(|id| !ids.contains(*id)).count();
        if missing > 0 {
            self.report.violations.push(format!("{file}: {missing} acknowledged entries are not in the file"));
        }
        for (id, parent) in &parents {
            if !ids.contains(parent) {
                self.report.violations.push(format!("{file}: entry {id} names parent {parent}, not in the file"));
            }
        }
        (ids, parents)
    }

    /// A new session for slot `n` of the files (its first message written, its handle closed).
    fn create(&mut self, n: usize) -> (PathBuf, Vec<String>) {
        let handle = format!("c{}", self.next_handle);
        self.next_handle += 1;
        let params = format!(r#"{{"cwd":"/soak/p{}","handle":"{handle}"}}"#, n % 3);
        let st = self.one("session/create", params).expect("create");
        let m = message(&mut self.rng);
        let first = self.one("session/appendMessage", format!(r#"{{"handle":"{handle}","message":{m}}}"#));
        let file = PathBuf::from(str_of(st.get("sessionFile").expect("a persisted session")));
        self.one("session/close", format!(r#"{{"handle":"{handle}"}}"#));
        let first = first.and_then(|f| f.get("id").and_then(Json::as_js_str).map(|s| s.to_string_lossy()));
        (file, first.into_iter().collect())
    }

    /// Replaces the files grown past the rotation size: each is checked, its handles closed, and it is deleted.
    fn rotate(&mut self) {
        for i in 0..self.files.len() {
            let size = std::fs::metadata(&self.files[i]).map(|m| m.len()).unwrap_or(0);
            if size < self.rotate_bytes {
                continue;
            }
            for slot in 0..self.opens.len() {
                if self.opens[slot].as_ref().is_some_and(|o| o.file == i) {
                    self.close(slot);
                }
            }
            self.check_file(i);
            self.report.acknowledged += self.acked[i].len();
            let (file, acked) = self.create(i);
            let old = std::mem::replace(&mut self.files[i], file.clone());
            self.acked[i] = acked;
            if let Some(raw) = self.raw_files.lock().unwrap().get_mut(i) {
                *raw = file;
            }
            std::fs::remove_file(&old).expect("remove a rotated session");
            self.report.rotated += 1;
        }
    }
}

/// Runs the load in `agent` (an agent directory) and reports what it saw.
pub fn run(config: &SoakConfig, agent: &Path) -> SoakReport {
    let agent_arg = agent.display().to_string();
    let mut cmd = std::process::Command::new(&config.binary);
    cmd.args(["--agent-dir", &agent_arg]).stderr(std::process::Stdio::inherit());
    let sc = Sidecar::spawn_command(Wire::Jsonl, cmd, true);
    let pid = sc.pid();
    let mut d = Driver {
        sc,
        rng: Rng::new(config.seed),
        agent: agent.to_owned(),
        files: Vec::new(),
        raw_files: Arc::default(),
        rotate_bytes: config.rotate_bytes,
        opens: vec![None; config.handles],
        next_handle: 0,
        acked: Vec::new(),
        seqs: HashMap::new(),
        dir_watches: Vec::new(),
        watched: HashSet::new(),
        report: SoakReport::default(),
    };
    d.one("initialize", "{}".into());
    for n in 0..config.sessions {
        let (file, acked) = d.create(n);
        d.files.push(file);
        d.acked.push(acked);
    }
    *d.raw_files.lock().unwrap() = d.files[..config.raw_sessions.min(d.files.len())].to_vec();
    assert!(d.agent.join("sessions").is_dir(), "sessions were written under the agent directory");
    let stop = Arc::new(AtomicBool::new(false));
    let lines = Arc::new(AtomicU64::new(0));
    let appender = RawAppender { files: d.raw_files.clone(), stop: stop.clone(), lines: lines.clone() };
    let seed = config.seed.wrapping_add(1);
    let appender = (config.raw_sessions > 0).then(|| std::thread::spawn(move || appender.run(seed)));
    let started = Instant::now();
    let mut next_sample = started;
    let mut samples = Vec::new();
    let mut steps = 0u64;
    while started.elapsed() < config.duration && d.report.requests < config.max_requests {
        if Instant::now() >= next_sample {
            samples.push(sample(pid, started.elapsed().as_secs_f64(), d.report.requests));
            next_sample += config.sample_every;
        }
        d.step();
        steps += 1;
        if steps.is_multiple_of(16) {
            d.rotate();
        }
    }
    stop.store(true, Ordering::SeqCst);
    if let Some(a) = appender {
        a.join().expect("raw appender");
    }
    samples.push(sample(pid, started.elapsed().as_secs_f64(), d.report.requests));
    d.check();
    d.release_everything(pid);
    std::thread::sleep(IDLE_THREADS_END);
    d.report.idle = Some(sample(pid, started.elapsed().as_secs_f64(), d.report.requests));
    d.report.raw_lines = lines.load(Ordering::SeqCst);
    d.report.samples = samples;
    let mut report = std::mem::take(&mut d.report);
    let code = d.sc.finish();
    if code != 0 {
        report.violations.push(format!("the sidecar exited with status {code}"));
    }
    report
}
