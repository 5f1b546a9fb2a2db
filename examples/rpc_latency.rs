//! Round-trip latency over the pipe: a small read (`session/getLeafId`) and `session/appendMessage`, one request
//! at a time, against the real binary. Prints p50/p99/mean in microseconds.
//!
//! `cargo run --release --example rpc_latency -- [--binary target/release/pi-sessiond] [--n 5000] [--durability entry]`

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Instant;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let binary = flag("--binary").unwrap_or_else(|| "target/release/pi-sessiond".into());
    let n: usize = flag("--n").and_then(|v| v.parse().ok()).unwrap_or(5000);
    let mut extra = Vec::new();
    if let Some(d) = flag("--durability") {
        extra.extend(["--durability".to_owned(), d]);
    }
    let dir = std::env::temp_dir().join(format!("pi-sessiond-latency-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = Command::new(&binary)
        .args(&extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {binary}: {e}"));
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut id = 0u64;
    let mut line = String::new();
    let mut call = |method: &str, params: String| -> String {
        id += 1;
        writeln!(stdin, r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#).unwrap();
        stdin.flush().unwrap();
        loop {
            line.clear();
            stdout.read_line(&mut line).unwrap();
            if line.starts_with(&format!(r#"{{"jsonrpc":"2.0","id":{id},"#)) {
                return line.clone();
            }
        }
    };
    let created = call("session/create", format!(r#"{{"cwd":"/bench","sessionDir":"{}"}}"#, dir.display()));
    let handle = created.split(r#""handle":""#).nth(1).unwrap().split('"').next().unwrap().to_owned();
    let mut measure = |method: &str, params: &dyn Fn(usize) -> String| -> Vec<f64> {
        let mut times = Vec::with_capacity(n);
        for i in 0..n {
            let t = Instant::now();
            let r = call(method, params(i));
            times.push(t.elapsed().as_secs_f64() * 1e6);
            assert!(r.contains(r#""result""#), "{r}");
        }
        times.sort_by(f64::total_cmp);
        times
    };
    let h = handle.clone();
    let append = measure("session/appendMessage", &|i| {
        format!(r#"{{"handle":"{h}","message":{{"role":"user","content":"message {i}","timestamp":{i}}}}}"#)
    });
    let read = measure("session/getLeafId", &|_| format!(r#"{{"handle":"{handle}"}}"#));
    for (name, t) in [("session/getLeafId", &read), ("session/appendMessage", &append)] {
        let mean = t.iter().sum::<f64>() / t.len() as f64;
        println!("{name:<24} n={n} p50={:.1}µs p99={:.1}µs mean={mean:.1}µs", percentile(t, 0.5), percentile(t, 0.99));
    }
    drop(stdin);
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
