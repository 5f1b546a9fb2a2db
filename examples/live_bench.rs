//! Live-session figures against the real binary:
//! * external append → `session/changed` latency for a watched session (another process appends a line; how
//!   long until the host hears of it), median and p99;
//! * append throughput over the pipe under each durability mode, one request at a time and pipelined.
//!
//! `cargo run --release --example live_bench -- [--binary target/release/pi-sessiond] [--n 2000]`

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

struct Host {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    id: u64,
}

impl Host {
    fn spawn(binary: &str, args: &[&str]) -> Host {
        let mut child = Command::new(binary).args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Host { child, stdin, stdout, id: 0 }
    }

    fn send(&mut self, method: &str, params: &str) -> u64 {
        self.id += 1;
        writeln!(self.stdin, r#"{{"jsonrpc":"2.0","id":{},"method":"{method}","params":{params}}}"#, self.id).unwrap();
        self.id
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line
    }

    fn call(&mut self, method: &str, params: &str) -> String {
        let id = self.send(method, params);
        self.stdin.flush().unwrap();
        let prefix = format!(r#"{{"jsonrpc":"2.0","id":{id},"#);
        loop {
            let l = self.line();
            if l.starts_with(&prefix) {
                return l;
            }
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn field<'a>(json: &'a str, name: &str) -> &'a str {
    json.split(&format!(r#""{name}":""#)).nth(1).unwrap().split('"').next().unwrap()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let binary = flag("--binary").unwrap_or_else(|| "target/release/pi-sessiond".into());
    let n: usize = flag("--n").and_then(|v| v.parse().ok()).unwrap_or(2000);
    let dir = std::env::temp_dir().join(format!("pi-sessiond-live-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    // External append → notification.
    let path = dir.join("watched.jsonl");
    std::fs::write(
        &path,
        "{\"type\":\"session\",\"version\":3,\"id\":\"w\",\"timestamp\":\"2025-01-01T00:00:00.000Z\",\"cwd\":\"/\"}\n",
    )
    .unwrap();
    let mut host = Host::spawn(&binary, &[]);
    host.call("session/open", &format!(r#"{{"path":"{}","watch":true}}"#, path.display()));
    let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
    let mut parent = "null".to_owned();
    let mut times = Vec::new();
    for i in 0..n.min(1000) {
        let id = format!("{i:08x}");
        let line = format!(
            "{{\"type\":\"message\",\"id\":\"{id}\",\"parentId\":{parent},\"timestamp\":\"2025-01-01T00:00:01.000Z\",\"message\":{{\"role\":\"user\",\"content\":\"m{i}\",\"timestamp\":{i}}}}}\n"
        );
        let t = Instant::now();
        file.write_all(line.as_bytes()).unwrap();
        loop {
            let l = host.line();
            if l.contains("session/changed") && l.contains(&format!("\"id\":\"{id}\"")) {
                break;
            }
        }
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        parent = format!("\"{id}\"");
    }
    times.sort_by(f64::total_cmp);
    println!(
        "external append -> session/changed: n={} p50={:.2}ms p99={:.2}ms max={:.2}ms",
        times.len(),
        percentile(&times, 0.5),
        percentile(&times, 0.99),
        times[times.len() - 1]
    );
    drop(host);

    // Append throughput per durability mode.
    for durability in ["none", "entry", "batch"] {
        let mut host = Host::spawn(&binary, &["--durability", durability]);
        let created = host.call("session/create", &format!(r#"{{"cwd":"/bench","sessionDir":"{}"}}"#, dir.display()));
        let handle = field(&created, "handle").to_owned();
        let msg = |i: usize| {
            format!(r#"{{"handle":"{handle}","message":{{"role":"user","content":"message {i}","timestamp":{i}}}}}"#)
        };
        host.call("session/appendMessage", &msg(0));
        let t = Instant::now();
        for i in 0..n {
            host.call("session/appendMessage", &msg(i));
        }
        let sequential = n as f64 / t.elapsed().as_secs_f64();
        let t = Instant::now();
        let mut last = 0;
        for i in 0..n {
            last = host.send("session/appendMessage", &msg(i));
        }
        host.stdin.flush().unwrap();
        let prefix = format!(r#"{{"jsonrpc":"2.0","id":{last},"#);
        while !host.line().starts_with(&prefix) {}
        let pipelined = n as f64 / t.elapsed().as_secs_f64();
        println!("appendMessage --durability {durability:<5}: {sequential:>8.0}/s one at a time, {pipelined:>8.0}/s pipelined");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
