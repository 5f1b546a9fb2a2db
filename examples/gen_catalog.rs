//! Writes a realistic sessions root deterministically, for catalog and search benchmarks (never committed).
//!
//! `cargo run --release --example gen_catalog -- AGENT_DIR --sessions 3000 --bytes 300000000`
//!
//! Sessions go to `AGENT_DIR/sessions/--<cwd>--/`: most into one big project (the `list(cwd)` case of pi #782 and
//! #4583), the rest spread over a few others. Sizes are skewed as real ones are: most sessions are tens to
//! hundreds of KB, a few are many MB of tool output. Text is drawn from a vocabulary so that search has words to
//! find; one in fifty tool results carries a base64 image.

mod support;
use support::{flag, iso, Rng};

use std::io::{BufWriter, Write};

const WORDS: &[&str] = &[
    "parser",
    "tokenizer",
    "session",
    "branch",
    "compaction",
    "refactor",
    "error",
    "handler",
    "async",
    "await",
    "function",
    "module",
    "import",
    "export",
    "test",
    "fixture",
    "database",
    "index",
    "query",
    "schema",
    "migration",
    "layout",
    "render",
    "component",
    "state",
    "reducer",
    "hook",
    "effect",
    "cache",
    "latency",
    "throughput",
    "memory",
    "leak",
    "allocation",
    "thread",
    "mutex",
    "channel",
    "socket",
    "request",
    "response",
    "header",
    "payload",
    "json",
    "yaml",
    "config",
    "deploy",
    "docker",
    "kubernetes",
    "pipeline",
    "build",
    "linker",
    "compiler",
    "borrow",
    "lifetime",
    "trait",
    "generic",
    "closure",
    "iterator",
    "stream",
    "buffer",
    "the",
    "a",
    "to",
    "of",
    "and",
    "in",
    "is",
    "it",
    "that",
    "we",
    "should",
    "could",
    "why",
    "how",
    "fix",
    "please",
    "check",
    "look",
    "file",
    "line",
    "column",
    "value",
    "null",
    "undefined",
    "crash",
    "panic",
];

fn sentence(r: &mut Rng, words: u64) -> String {
    let mut s = String::new();
    for i in 0..words {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(WORDS[r.below(WORDS.len() as u64) as usize]);
    }
    s
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let agent = args.get(1).expect("usage: gen_catalog AGENT_DIR [--sessions N] [--bytes TOTAL]");
    let flag = |name: &str, default: u64| flag(&args, name, default);
    let sessions = flag("--sessions", 3000);
    let total = flag("--bytes", 300_000_000);
    let mut r = Rng(0x2545_F491_4F6C_DD1D);
    // Skewed sizes: weights w_i = u^3 (u uniform), scaled to the total.
    let weights: Vec<f64> = (0..sessions).map(|_| (r.below(1_000_000) as f64 / 1e6).powi(3) + 0.002).collect();
    let sum: f64 = weights.iter().sum();
    let projects = ["/home/user/big-project", "/home/user/website", "/home/user/scripts", "/tmp/scratch"];
    const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let image: String = (0..200 * 1024).map(|_| B64[r.below(64) as usize] as char).collect();
    let mut written_total = 0u64;
    for (i, w) in weights.iter().enumerate() {
        let target = (total as f64 * w / sum) as u64;
        let cwd = if i % 6 == 0 { projects[1 + i % 3] } else { projects[0] };
        let dir = format!("{agent}/sessions/--{}--", cwd.trim_start_matches('/').replace('/', "-"));
        std::fs::create_dir_all(&dir)?;
        let start_ms = 1_740_000_000_000 + (i as u64) * 3_600_000 + r.below(3_600_000);
        let id = format!("019a{:04x}-{:04x}-7000-8000-{:012x}", i >> 16, i & 0xffff, r.next() & 0xffff_ffff_ffff);
        let path = format!("{dir}/{}_{id}.jsonl", iso(start_ms).replace([':', '.'], "-"));
        let mut f = BufWriter::new(std::fs::File::create(&path)?);
        let header =
            format!(r#"{{"type":"session","version":3,"id":"{id}","timestamp":"{}","cwd":"{cwd}"}}"#, iso(start_ms));
        writeln!(f, "{header}")?;
        let mut written = header.len() as u64 + 1;
        let mut n = 0u64;
        let mut parent = "null".to_string();
        let mut ms = start_ms;
        while written < target || n < 2 {
            n += 1;
            ms += 1000 + r.below(60_000);
            let eid = format!("{:08x}", r.next() & 0xffff_ffff);
            let ts = iso(ms);
            let line = match n % 4 {
                1 => {
                    let words = 5 + r.below(30);
                    format!(
                        r#"{{"type":"message","id":"{eid}","parentId":{parent},"timestamp":"{ts}","message":{{"role":"user","content":"{}","timestamp":{ms}}}}}"#,
                        sentence(&mut r, words)
                    )
                }
                2 => format!(
                    r#"{{"type":"message","id":"{eid}","parentId":{parent},"timestamp":"{ts}","message":{{"role":"assistant","content":[{{"type":"thinking","thinking":"{}"}},{{"type":"toolCall","id":"call_{n}","name":"bash","arguments":{{"command":"rg {}"}}}}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","usage":{{"input":1200,"output":80,"cacheRead":0,"cacheWrite":0,"totalTokens":1280,"cost":{{"input":0.0036,"output":0.0012,"cacheRead":0,"cacheWrite":0,"total":0.0048}}}},"stopReason":"toolUse","timestamp":{ms}}}}}"#,
                    sentence(&mut r, 20),
                    WORDS[r.below(60) as usize]
                ),
                3 => {
                    let content = if r.below(50) == 0 {
                        format!(r#"[{{"type":"image","data":"{image}","mimeType":"image/png"}}]"#)
                    } else {
                        let lines = 5 + r.below(200);
                        let mut out = String::new();
                        for l in 0..lines {
                            out.push_str(&format!(
                                "src/{}.rs:{l}: {}\\n",
                                WORDS[r.below(60) as usize],
                                sentence(&mut r, 8)
                            ));
                        }
                        format!(r#"[{{"type":"text","text":"{out}"}}]"#)
                    };
                    format!(
                        r#"{{"type":"message","id":"{eid}","parentId":{parent},"timestamp":"{ts}","message":{{"role":"toolResult","toolCallId":"call_{}","toolName":"bash","content":{content},"isError":false,"timestamp":{ms}}}}}"#,
                        n - 1
                    )
                }
                _ => {
                    let words = 20 + r.below(120);
                    format!(
                        r#"{{"type":"message","id":"{eid}","parentId":{parent},"timestamp":"{ts}","message":{{"role":"assistant","content":[{{"type":"text","text":"{}"}}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","usage":{{"input":1500,"output":300,"cacheRead":0,"cacheWrite":0,"totalTokens":1800,"cost":{{"input":0.0045,"output":0.0045,"cacheRead":0,"cacheWrite":0,"total":0.009}}}},"stopReason":"stop","timestamp":{ms}}}}}"#,
                        sentence(&mut r, words)
                    )
                }
            };
            writeln!(f, "{line}")?;
            written += line.len() as u64 + 1;
            parent = format!("\"{eid}\"");
            if n == 6 && r.below(3) == 0 {
                let name = sentence(&mut r, 3);
                let line = format!(
                    r#"{{"type":"session_info","id":"{:08x}","parentId":{parent},"timestamp":"{ts}","name":"{name}"}}"#,
                    r.next() & 0xffff_ffff
                );
                writeln!(f, "{line}")?;
                written += line.len() as u64 + 1;
            }
        }
        f.flush()?;
        drop(f);
        // mtimes as a real history would have them (listAll orders by mtime).
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
        std::fs::File::options().write(true).open(&path)?.set_modified(t)?;
        written_total += written;
    }
    eprintln!("{sessions} sessions, {written_total} bytes under {agent}/sessions");
    Ok(())
}
