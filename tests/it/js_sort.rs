//! Differential tests: `sort_like_v8` against the real `Array.prototype.sort` of Node.js (V8).
//!
//! Comparators that return NaN or are inconsistent make the result depend on every step of V8's
//! TimSort, so the only trustworthy oracle is V8 itself. `node` is spawned once for all cases.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use pi_sessiond::session::js::sort::sort_like_v8;

/// One element as both sides see it: its value and its position in the unsorted input.
#[derive(Clone, Copy, Debug)]
struct Element {
    v: f64,
    i: usize,
}

/// A comparator implemented identically in JavaScript and Rust.
struct Comparator {
    name: &'static str,
    js: &'static str,
    rust: fn(&Element, &Element) -> f64,
}

/// Integer arithmetic on the small tags stays exact in f64, so these match JavaScript bit for bit.
fn comparators() -> Vec<Comparator> {
    vec![
        Comparator { name: "ascending", js: "(a, b) => a.v - b.v", rust: |a, b| a.v - b.v },
        Comparator { name: "descending", js: "(a, b) => b.v - a.v", rust: |a, b| b.v - a.v },
        Comparator {
            name: "ignores_second_argument",
            js: "(a, b) => (a.i * 7 % 3) - 1",
            rust: |a, _| ((a.i * 7 % 3) as f64) - 1.0,
        },
        Comparator {
            name: "pairwise_noise_with_nan",
            js: "(a, b) => (a.i + b.i) % 4 === 0 ? NaN : ((a.i * 31 + b.i * 17) % 5) - 2",
            rust: |a, b| {
                if (a.i + b.i) % 4 == 0 {
                    f64::NAN
                } else {
                    ((a.i * 31 + b.i * 17) % 5) as f64 - 2.0
                }
            },
        },
        Comparator {
            name: "ascending_then_noise",
            js: "(a, b) => (a.v - b.v) || ((a.i * 13 + b.i * 5) % 3) - 1",
            rust: |a, b| {
                let d = a.v - b.v;
                // `||` falls through on 0, -0 and NaN alike.
                if d != 0.0 && !d.is_nan() {
                    d
                } else {
                    ((a.i * 13 + b.i * 5) % 3) as f64 - 1.0
                }
            },
        },
    ]
}

/// One input array to be sorted by every comparator.
struct Case {
    description: String,
    values: Vec<f64>,
}

/// Tiny deterministic xorshift64 so the cases are reproducible without extra crates.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Builds values with a chosen share of NaN, many duplicates, and shapes (sorted, reversed, sawtooth)
/// that exercise run detection, run reversal and galloping, not just random order.
fn make_values(rng: &mut XorShift, size: usize, nan_percent: u64, shape: u64) -> Vec<f64> {
    let distinct = [3u64, 20, 1000][rng.below(3) as usize];
    let mut values: Vec<f64> = (0..size)
        .map(|k| match shape {
            0 => rng.below(distinct) as f64,
            1 => (k as u64 / 3) as f64,
            2 => (size - k) as f64,
            3 => ((k % 50) as f64) + rng.below(2) as f64,
            _ => {
                let special = [0.5, -0.0, 0.0, -1.25, f64::INFINITY, f64::NEG_INFINITY, 1e-7];
                if rng.below(4) == 0 {
                    special[rng.below(special.len() as u64) as usize]
                } else {
                    rng.below(distinct) as f64
                }
            }
        })
        .collect();
    for value in &mut values {
        if rng.below(100) < nan_percent {
            *value = f64::NAN;
        }
    }
    values
}

fn make_cases() -> Vec<Case> {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut cases = Vec::new();
    for size in 0..200 {
        for nan_percent in [0, 10, 40] {
            let shape = rng.below(5);
            cases.push(Case {
                description: format!("size {size}, {nan_percent}% NaN, shape {shape}"),
                values: make_values(&mut rng, size, nan_percent, shape),
            });
        }
    }
    for size in [1000, 1777, 2500, 5000] {
        for (nan_percent, shape) in [(0, 3), (5, 0), (20, 1), (40, 4), (30, 2)] {
            cases.push(Case {
                description: format!("size {size}, {nan_percent}% NaN, shape {shape}"),
                values: make_values(&mut rng, size, nan_percent, shape),
            });
        }
    }
    cases
}

/// A value as a JavaScript `Number(...)` argument that round-trips exactly.
fn js_number_literal(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_owned()
    } else if value.is_infinite() {
        if value > 0.0 { "Infinity" } else { "-Infinity" }.to_owned()
    } else {
        // Rust's Debug output is the shortest round-trip representation, which `Number` parses.
        format!("{value:?}")
    }
}

/// What one sort did: how often and with which arguments the comparator was called, and the result.
#[derive(PartialEq, Eq)]
struct SortRun {
    calls: u64,
    /// 32-bit FNV-1a over the `(a.i, b.i)` arguments of every call, in call order.
    calls_hash: u32,
    order: Vec<usize>,
}

/// Results from node: `runs[case][comparator]`.
struct NodeResults {
    version: String,
    runs: Vec<Vec<SortRun>>,
}

fn fnv_step(hash: u32, value: usize) -> u32 {
    (hash ^ value as u32).wrapping_mul(16_777_619)
}

const NODE_SCRIPT: &str = r#"
const comparators = JSON.parse(process.argv[1]).map((src) => eval(src));
let input = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => { input += chunk; });
process.stdin.on("end", () => {
  const cases = JSON.parse(input);
  const out = [];
  for (const values of cases) {
    for (const cmp of comparators) {
      const arr = values.map((s, i) => ({ v: Number(s), i }));
      let calls = 0;
      let hash = 2166136261;
      arr.sort((a, b) => {
        calls++;
        hash = Math.imul(hash ^ a.i, 16777619) >>> 0;
        hash = Math.imul(hash ^ b.i, 16777619) >>> 0;
        return cmp(a, b);
      });
      out.push(calls + " " + hash + " " + arr.map((e) => e.i).join(" "));
    }
  }
  process.stdout.write(process.version + "\n" + out.join("\n") + "\n");
});
"#;

fn json_string_array<I: IntoIterator<Item = String>>(items: I) -> String {
    let quoted: Vec<String> =
        items.into_iter().map(|s| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))).collect();
    format!("[{}]", quoted.join(","))
}

fn run_node(cases: &[Case], comparators: &[Comparator]) -> NodeResults {
    let comparator_sources = json_string_array(comparators.iter().map(|c| c.js.to_owned()));
    let input = format!(
        "[{}]",
        cases
            .iter()
            .map(|case| json_string_array(case.values.iter().map(|&v| js_number_literal(v))))
            .collect::<Vec<_>>()
            .join(",")
    );

    let mut child = Command::new("node")
        .arg("-e")
        .arg(NODE_SCRIPT)
        .arg(&comparator_sources)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|err| {
            panic!("this differential test needs `node` (Node.js 20) on PATH, but spawning it failed: {err}")
        });
    // Writing on another thread avoids a pipe deadlock if node starts answering before input ends.
    let mut stdin = child.stdin.take().expect("node stdin is piped");
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child.wait_with_output().expect("node runs to completion");
    writer.join().expect("stdin writer thread").expect("writing cases to node");
    assert!(output.status.success(), "node failed ({}): {}", output.status, String::from_utf8_lossy(&output.stderr));

    let stdout = String::from_utf8(output.stdout).expect("node prints UTF-8");
    let mut lines = stdout.lines();
    let version = lines.next().expect("node prints its version").to_owned();
    let mut flat = lines.map(|line| {
        let mut fields = line.split_whitespace();
        let calls = fields.next().expect("call count").parse().expect("number");
        let calls_hash = fields.next().expect("call hash").parse().expect("number");
        let order = fields.map(|n| n.parse::<usize>().expect("node prints indices")).collect();
        SortRun { calls, calls_hash, order }
    });
    let runs = cases
        .iter()
        .map(|_| comparators.iter().map(|_| flat.next().expect("one line per case and comparator")).collect())
        .collect();
    NodeResults { version, runs }
}

struct Fixture {
    cases: Vec<Case>,
    comparators: Vec<Comparator>,
    node: NodeResults,
}

/// All tests share one node run; `OnceLock` makes the parallel test threads wait for it.
fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let cases = make_cases();
        let comparators = comparators();
        let node = run_node(&cases, &comparators);
        Fixture { cases, comparators, node }
    })
}

fn sort_in_rust(values: &[f64], compare: fn(&Element, &Element) -> f64) -> SortRun {
    let mut elements: Vec<Element> = values.iter().enumerate().map(|(i, &v)| Element { v, i }).collect();
    let mut calls = 0;
    let mut calls_hash = 2_166_136_261;
    sort_like_v8(&mut elements, |a, b| {
        calls += 1;
        calls_hash = fnv_step(fnv_step(calls_hash, a.i), b.i);
        compare(a, b)
    });
    SortRun { calls, calls_hash, order: elements.iter().map(|e| e.i).collect() }
}

fn abbreviated<T: std::fmt::Debug>(items: &[T], around: usize) -> String {
    let start = around.saturating_sub(5);
    let end = (around + 6).min(items.len());
    format!(
        "[{}{:?}{}] (len {})",
        if start > 0 { "... " } else { "" },
        &items[start..end],
        if end < items.len() { " ..." } else { "" },
        items.len()
    )
}

/// Which part of a sort to compare with node.
#[derive(Clone, Copy, PartialEq)]
enum Aspect {
    /// The resulting order of the elements.
    Order,
    /// The number and sequence of comparator calls.
    Calls,
}

/// Checks every case for the named comparators and reports the first mismatch compactly.
fn assert_matches_node(comparator_names: &[&str], only_with_nan: bool, aspect: Aspect) {
    let fixture = fixture();
    let mut checked = 0;
    for (case_index, case) in fixture.cases.iter().enumerate() {
        if only_with_nan && !case.values.iter().any(|v| v.is_nan()) {
            continue;
        }
        for (comparator_index, comparator) in fixture.comparators.iter().enumerate() {
            if !comparator_names.contains(&comparator.name) {
                continue;
            }
            let expected = &fixture.node.runs[case_index][comparator_index];
            let actual = sort_in_rust(&case.values, comparator.rust);
            let context = format!(
                "mismatch with node {} for comparator {} on case #{case_index} ({})",
                fixture.node.version, comparator.name, case.description
            );
            if aspect == Aspect::Calls && (actual.calls, actual.calls_hash) != (expected.calls, expected.calls_hash) {
                panic!(
                    "{context}: comparator calls differ\n  node: {} calls, hash {:08x}\n  rust: {} calls, hash {:08x}",
                    expected.calls, expected.calls_hash, actual.calls, actual.calls_hash
                );
            }
            if aspect == Aspect::Order && actual.order != expected.order {
                let at = actual
                    .order
                    .iter()
                    .zip(&expected.order)
                    .position(|(a, e)| a != e)
                    .unwrap_or(actual.order.len().min(expected.order.len()));
                let input =
                    if case.values.len() <= 40 { format!("{:?}", case.values) } else { abbreviated(&case.values, at) };
                panic!(
                    "{context}, first at position {at}\n  input: {input}\n  node:  {}\n  rust:  {}",
                    abbreviated(&expected.order, at),
                    abbreviated(&actual.order, at),
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 0, "no cases were checked");
}

const ALL_COMPARATORS: [&str; 5] =
    ["ascending", "descending", "ignores_second_argument", "pairwise_noise_with_nan", "ascending_then_noise"];

#[test]
fn sort_matches_v8_when_comparator_returns_nan() {
    assert_matches_node(&["ascending", "descending"], true, Aspect::Order);
}

#[test]
fn sort_matches_v8_for_subtraction_comparators_on_all_inputs() {
    assert_matches_node(&["ascending", "descending", "ascending_then_noise"], false, Aspect::Order);
}

#[test]
fn sort_matches_v8_when_comparator_is_inconsistent() {
    assert_matches_node(
        &["ignores_second_argument", "pairwise_noise_with_nan", "ascending_then_noise"],
        false,
        Aspect::Order,
    );
}

#[test]
fn sort_calls_comparator_with_same_arguments_in_same_order_as_v8() {
    assert_matches_node(&ALL_COMPARATORS, false, Aspect::Calls);
}

#[test]
fn sort_without_nan_is_a_stable_ascending_sort() {
    let mut rng = XorShift(42);
    for size in [0, 1, 9, 10, 64, 65, 1000] {
        let values: Vec<f64> = (0..size).map(|_| rng.below(30) as f64).collect();
        let actual = sort_in_rust(&values, |a, b| a.v - b.v).order;
        let mut expected: Vec<usize> = (0..size).collect();
        expected.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
        assert_eq!(actual, expected, "size {size}");
    }
}
