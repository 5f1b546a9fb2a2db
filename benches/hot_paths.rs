//! Micro-benchmarks of the paths every open and every read goes through, so a regression shows in review:
//! classifying one line (scan + skeleton), opening a session (read + tree index), building the model's context,
//! appending an entry (through the store's file seam, `store::disk`), and a warm listing. Inputs are generated here, deterministically; `bench/run` measures the same work against
//! pi end to end.
//!
//! `cargo bench --bench hot_paths`

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use pi_sessiond::catalog::index::CatalogIndex;
use pi_sessiond::catalog::listing::Catalog;
use pi_sessiond::session::change::Op;
use pi_sessiond::session::entry::Body;
use pi_sessiond::session::json::Json;
use pi_sessiond::session::line::parse_line;
use pi_sessiond::session::render::{self, JsonOut};
use pi_sessiond::session::{Env, SessionManager};

/// A session as pi writes it: user → assistant tool call → tool result → assistant text, a branch every 50 turns,
/// `turns` turns, each tool result `output_bytes` long.
fn session_text(turns: usize, output_bytes: usize) -> String {
    let mut out = String::from(
        r#"{"type":"session","version":3,"id":"019a0000-0000-7000-8000-000000000001","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/home/u/p"}"#,
    );
    out.push('\n');
    let output = "src/lib.rs:12: let value = compute(input);\\n".repeat(output_bytes / 44 + 1);
    let mut parent = "null".to_string();
    let mut n = 0u64;
    for turn in 0..turns {
        if turn % 50 == 49 {
            // Branch: continue from two entries back.
            parent = format!("\"{:08x}\"", n.saturating_sub(2));
        }
        for kind in 0..4 {
            n += 1;
            let id = format!("{n:08x}");
            let ms = 1_767_225_600_000 + n * 1000;
            let ts = pi_sessiond::session::js::date::to_iso_string(ms as f64).unwrap();
            let message = match kind {
                0 => format!(
                    r#"{{"role":"user","content":"Please fix the failing test number {turn}.","timestamp":{ms}}}"#
                ),
                1 => format!(
                    r#"{{"role":"assistant","content":[{{"type":"toolCall","id":"c{n}","name":"bash","arguments":{{"command":"cargo test"}}}}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","usage":{{"input":1200,"output":80,"cacheRead":0,"cacheWrite":0,"totalTokens":1280,"cost":{{"input":0.0036,"output":0.0012,"cacheRead":0,"cacheWrite":0,"total":0.0048}}}},"stopReason":"toolUse","timestamp":{ms}}}"#
                ),
                2 => format!(
                    r#"{{"role":"toolResult","toolCallId":"c{}","toolName":"bash","content":[{{"type":"text","text":"{}"}}],"isError":false,"timestamp":{ms}}}"#,
                    n - 1,
                    &output[..output_bytes]
                ),
                _ => format!(
                    r#"{{"role":"assistant","content":[{{"type":"text","text":"Fixed: the test now passes."}}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","usage":{{"input":1500,"output":300,"cacheRead":0,"cacheWrite":0,"totalTokens":1800,"cost":{{"input":0.0045,"output":0.0045,"cacheRead":0,"cacheWrite":0,"total":0.009}}}},"stopReason":"stop","timestamp":{ms}}}"#
                ),
            };
            out.push_str(&format!(
                r#"{{"type":"message","id":"{id}","parentId":{parent},"timestamp":"{ts}","message":{message}}}"#
            ));
            out.push('\n');
            parent = format!("\"{id}\"");
        }
    }
    out
}

fn line_parsing(c: &mut Criterion) {
    let text = session_text(250, 2000);
    let lines: Vec<&str> = text.lines().collect();
    let mut g = c.benchmark_group("line");
    g.throughput(Throughput::Bytes(text.len() as u64));
    g.bench_function("parse_line (scan + skeleton), 1,000 lines", |b| {
        b.iter(|| {
            for (i, l) in lines.iter().enumerate() {
                std::hint::black_box(parse_line(l.as_bytes(), i as u32 + 1, Body::file(0, l.len() as u64)));
            }
        })
    });
    g.finish();
}

fn open_and_context(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let text = session_text(2000, 1000);
    std::fs::write(&path, &text).unwrap();
    let path = path.to_string_lossy().into_owned();
    let mut g = c.benchmark_group("session");
    g.throughput(Throughput::Bytes(text.len() as u64));
    g.sample_size(20);
    g.bench_function("open (read + tree index), 8,000 entries", |b| {
        b.iter(|| std::hint::black_box(SessionManager::open(&path, None, None, Env::system()).unwrap()))
    });
    let m = SessionManager::open(&path, None, None, Env::system()).unwrap();
    g.bench_function("buildSessionContext rendered, 8,000 entries", |b| {
        b.iter(|| {
            let mut out = JsonOut::memory();
            render::context(&m, &m.build_session_projection().unwrap(), &mut out).unwrap();
            std::hint::black_box(out.into_bytes())
        })
    });
    g.bench_function("tree index walk (getTree skeleton), 8,000 entries", |b| {
        b.iter(|| std::hint::black_box(m.tree()))
    });
    g.finish();
}

fn appending(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    std::fs::write(&path, session_text(20, 200)).unwrap();
    let path = path.to_string_lossy().into_owned();
    let mut m = SessionManager::open(&path, None, None, Env::system()).unwrap();
    let message = Json::parse(br#"{"role":"user","content":"Please fix the failing test.","timestamp":1}"#).unwrap();
    let mut g = c.benchmark_group("write");
    // The sidecar's path: follow the file (one stat), stage, one write; no fsync, so the file seam's share shows.
    g.bench_function("apply appendMessage (follow + write, durability none)", |b| {
        b.iter(|| {
            let outcome = m.apply(Op::AppendMessage { message: message.clone() }, None);
            std::hint::black_box(outcome.result.unwrap())
        })
    });
    g.finish();
}

fn warm_listing(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let sessions = dir.path().join("sessions");
    std::fs::create_dir(&sessions).unwrap();
    for i in 0..500 {
        std::fs::write(sessions.join(format!("2026-01-01T00-00-{i:04}_s.jsonl")), session_text(3, 200)).unwrap();
    }
    let d = sessions.to_string_lossy().into_owned();
    let index_path = dir.path().join("index.sqlite").to_string_lossy().into_owned();
    let mut index = CatalogIndex::open(&index_path).unwrap();
    Catalog::new("/no-agent", Some(&mut index)).list_all(Some(&d), &mut |_, _| {}).unwrap();
    let mut g = c.benchmark_group("catalog");
    g.bench_function("warm listAll of 500 sessions without text", |b| {
        b.iter_batched(
            || (),
            |()| {
                std::hint::black_box(
                    Catalog::new("/no-agent", Some(&mut index))
                        .without_text()
                        .list_all(Some(&d), &mut |_, _| {})
                        .unwrap(),
                )
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, line_parsing, open_and_context, appending, warm_listing);
criterion_main!(benches);
