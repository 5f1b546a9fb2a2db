//! Writes a large, realistic pi session deterministically, for benchmarks (never committed, always regenerated).
//!
//! `cargo run --release --example gen_session -- OUT.jsonl --bytes 2600000000 --image-kib 400 --branch-every 50`
//!
//! The shape follows pi #9613 (2.6 GB, 18,996 lines, 6,739 of them tool results carrying base64 PNGs): turns of
//! user → assistant tool call → tool result (an image, sometimes) → assistant text, with a branch now and then
//! and a compaction every few hundred entries, so opening it exercises the tree, not just the bytes.

mod support;
use support::{flag, iso, Rng};

use std::io::{BufWriter, Write};

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let out = args.get(1).expect("usage: gen_session OUT.jsonl [--bytes N] [--image-kib K] [--branch-every N]");
    let flag = |name: &str, default: u64| flag(&args, name, default);
    let target = flag("--bytes", 40_000_000);
    let image_bytes = flag("--image-kib", 400) as usize * 1024;
    let branch_every = flag("--branch-every", 50);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    // A block of base64 text to slice images from (varying offsets keep images distinct without costing time).
    const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let block: Vec<u8> = (0..image_bytes + 4096).map(|_| B64[(rng.next() % 64) as usize]).collect();
    let mut w = BufWriter::with_capacity(1 << 22, std::fs::File::create(out)?);
    let mut written: u64 = 0;
    let base_ms: u64 = 1_760_000_000_000;
    let header = r#"{"type":"session","version":3,"id":"019a0000-0000-7000-8000-000000000001","timestamp":"2025-10-09T08:53:20.000Z","cwd":"/home/user/project"}"#;
    writeln!(w, "{header}")?;
    written += header.len() as u64 + 1;
    let mut n: u64 = 0;
    let mut ids: Vec<String> = Vec::new();
    let mut parent = String::from("null");
    while written < target {
        n += 1;
        let id = format!("{:08x}", (n * 2_654_435_761) & 0xffff_ffff);
        let ms = base_ms + n * 1500;
        let ts = iso(ms);
        let line = match n % 4 {
            1 => format!(
                r#"{{"type":"message","id":"{id}","parentId":{parent},"timestamp":"{ts}","message":{{"role":"user","content":[{{"type":"text","text":"Please look at screenshot {n} and fix the layout."}}],"timestamp":{ms}}}}}"#
            ),
            2 => format!(
                r#"{{"type":"message","id":"{id}","parentId":{parent},"timestamp":"{ts}","message":{{"role":"assistant","content":[{{"type":"toolCall","id":"call_{n}","name":"screenshot","arguments":{{"url":"http://localhost:3000"}}}}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","usage":{{"input":1200,"output":80,"cacheRead":0,"cacheWrite":0,"totalTokens":1280,"cost":{{"input":0.0036,"output":0.0012,"cacheRead":0,"cacheWrite":0,"total":0.0048}}}},"stopReason":"toolUse","timestamp":{ms}}}}}"#
            ),
            3 => {
                let start = (rng.next() % 4096) as usize;
                let data = std::str::from_utf8(&block[start..start + image_bytes]).unwrap();
                format!(
                    r#"{{"type":"message","id":"{id}","parentId":{parent},"timestamp":"{ts}","message":{{"role":"toolResult","toolCallId":"call_{}","toolName":"screenshot","content":[{{"type":"text","text":"Screenshot taken"}},{{"type":"image","data":"{data}","mimeType":"image/png"}}],"isError":false,"timestamp":{ms}}}}}"#,
                    n - 1
                )
            }
            _ if n.is_multiple_of(400) => {
                let kept = ids.get(ids.len().saturating_sub(8)).cloned().unwrap_or_else(|| id.clone());
                format!(
                    r#"{{"type":"compaction","id":"{id}","parentId":{parent},"timestamp":"{ts}","summary":"Summary of the work up to turn {n}.","firstKeptEntryId":"{kept}","tokensBefore":150000}}"#
                )
            }
            _ => format!(
                r#"{{"type":"message","id":"{id}","parentId":{parent},"timestamp":"{ts}","message":{{"role":"assistant","content":[{{"type":"text","text":"The layout in screenshot {n} is fixed."}}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","usage":{{"input":2400,"output":40,"cacheRead":0,"cacheWrite":0,"totalTokens":2440,"cost":{{"input":0.0072,"output":0.0006,"cacheRead":0,"cacheWrite":0,"total":0.0078}}}},"stopReason":"stop","timestamp":{ms}}}}}"#
            ),
        };
        writeln!(w, "{line}")?;
        written += line.len() as u64 + 1;
        ids.push(id.clone());
        // Now and then, continue from an earlier assistant reply instead of the last entry: a branch.
        parent = if branch_every > 0 && n.is_multiple_of(branch_every) && ids.len() > 10 {
            format!("\"{}\"", ids[ids.len() - 1 - (rng.next() % 8) as usize])
        } else {
            format!("\"{id}\"")
        };
    }
    w.flush()?;
    eprintln!("wrote {out}: {written} bytes, {n} entries");
    Ok(())
}
