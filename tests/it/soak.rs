//! The sidecar under a long mixed load with pi appending beside it (issue 19): memory and threads stay flat, and
//! the files, the acknowledgements and the handles agree. CI-sized here (`PI_SESSIOND_SOAK_SECS`, default 100 s,
//! on the debug build); `bench/run --only soak` runs the same load for an hour on the release binary
//! (`PI_SESSIOND_SOAK_BIN`, and `PI_SESSIOND_SOAK_SAMPLES` for where the samples go).

use std::time::Duration;

use crate::support::sidecar::binary;
use crate::support::soak::{run, SoakConfig};
use crate::support::temp_dir;

#[test]
fn a_long_mixed_load_beside_a_raw_appender_keeps_memory_and_threads_flat_and_loses_no_entry() {
    let secs: u64 = std::env::var("PI_SESSIOND_SOAK_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
    let config = SoakConfig {
        binary: std::env::var("PI_SESSIOND_SOAK_BIN").unwrap_or_else(|_| binary().to_owned()),
        duration: Duration::from_secs(secs),
        max_requests: 50_000_000,
        handles: 15,
        sessions: 24,
        raw_sessions: 6,
        rotate_bytes: 256 << 10,
        sample_every: Duration::from_secs(2),
        seed: 19,
    };
    let agent = temp_dir();
    let report = run(&config, agent.path());
    if let Ok(path) = std::env::var("PI_SESSIOND_SOAK_SAMPLES") {
        std::fs::write(path, report.samples_jsonl()).expect("write the samples");
    }
    let unexpected: Vec<_> = report.errors.iter().filter(|(what, _)| !what.contains("content_modified")).collect();
    eprintln!(
        "{} requests, {} acknowledged entries, {} raw lines, {} files rotated; errors {:?}",
        report.requests, report.acknowledged, report.raw_lines, report.rotated, report.errors
    );
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    // An append refused because the raw appender wrote first is the protocol's answer (content_modified); no
    // other request fails.
    assert!(unexpected.is_empty(), "{unexpected:?}");
    assert!(report.acknowledged > 1000 && report.raw_lines > 100, "the load ran: {report:?}");
    let last = *report.samples.last().expect("samples");
    let warm = *report.samples.iter().find(|s| s.secs >= last.secs / 3.0).expect("a sample after warm-up");
    let after = || report.samples.iter().filter(|s| s.secs >= warm.secs);
    let most_rss = after().map(|s| s.rss_kib).max().unwrap();
    let most_threads = after().map(|s| s.threads).max().unwrap();
    let most_fds = after().map(|s| s.fds).max().unwrap();
    let growth = most_rss.saturating_sub(warm.rss_kib);
    eprintln!(
        "RSS {} KiB at warm-up ({:.0} s), at most {most_rss} KiB after; threads {} then at most {most_threads}; \
         descriptors {} then at most {most_fds}",
        warm.rss_kib, warm.secs, warm.threads, warm.fds
    );
    assert!(growth < RSS_GROWTH_KIB, "RSS grew {growth} KiB after warm-up:\n{}", report.samples_jsonl());
    // The blocking pool grows with how many sessions are busy at once (a busy session's worker takes a thread),
    // and the load keeps at most `handles` sessions open, so that bounds its growth after warm-up whatever the
    // machine's timing; a thread per request or per read passes it within seconds.
    let warm_threads = report.samples.iter().filter(|s| s.secs <= warm.secs).map(|s| s.threads).max().unwrap();
    let ceiling = warm_threads + config.handles as u64;
    assert!(
        most_threads <= ceiling,
        "threads grew from at most {warm_threads} to {most_threads}, past {ceiling}:\n{}",
        report.samples_jsonl()
    );
    // Once the load is over and its handles closed, the pool's extra threads end: a thread that never does (one
    // left waiting, or started per request) is still counted here.
    let idle = report.idle.expect("a look at the process after the load");
    eprintln!("threads {} once idle", idle.threads);
    assert!(
        idle.threads <= warm_threads,
        "{} threads are left once the load is over, more than the {warm_threads} it ran with after warm-up",
        idle.threads
    );
}

/// How much RSS may grow after warm-up: what the sessions legitimately add (their entries' skeletons, listing
/// entries) is a few MiB; glibc's defaults grew it by tens of MiB in the same time (docs/performance.md).
const RSS_GROWTH_KIB: u64 = 16 << 10;
