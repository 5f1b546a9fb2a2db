// pi 1.6.0's SessionManager in a process of its own (so its peak memory is its own), for bench/run.mjs.
//
//   node bench/pi-ops.mjs open FILE        → {openMs, contextMs, treeMs, entryCount, peakRssKiB}
//   node bench/pi-ops.mjs append DIR N     → {appendMs, count, peakRssKiB}  (N messages into a new session)
//   node bench/pi-ops.mjs turn FILE N      → {turnMs, contextMs, turns}  (N host turns on FILE, which it writes to)
//   node bench/pi-ops.mjs usage AGENT_DIR  → {coldMs, warmMs, rows}  (every session's tokens and cost by day)
import { hostTurn, piSessionManager } from "./lib.mjs";

const SessionManager = await piSessionManager();

const [op, target, count] = process.argv.slice(2);
const round = (x) => Math.round(x * 100) / 100;
const peak = () => process.resourceUsage().maxRSS;

if (op === "open") {
  let t = performance.now();
  const m = SessionManager.open(target);
  const openMs = performance.now() - t;
  t = performance.now();
  m.buildSessionContext();
  const contextMs = performance.now() - t;
  t = performance.now();
  m.getTree();
  const treeMs = performance.now() - t;
  console.log(
    JSON.stringify({
      openMs: round(openMs),
      contextMs: round(contextMs),
      treeMs: round(treeMs),
      entryCount: m.getEntryCount(),
      peakRssKiB: peak(),
    }),
  );
} else if (op === "append") {
  const n = Number(count);
  const m = SessionManager.create("/bench", target);
  const t = performance.now();
  for (let i = 0; i < n; i++) {
    m.appendMessage({ role: "user", content: `message ${i}`, timestamp: 1767225600000 + i });
  }
  const appendMs = performance.now() - t;
  console.log(JSON.stringify({ appendMs: round(appendMs), count: n, peakRssKiB: peak() }));
} else if (op === "turn") {
  // A host's per-turn work on pi's own SessionManager: the three appends of a tool-using turn, then the context.
  const m = SessionManager.open(target);
  const turns = [];
  const contexts = [];
  for (let i = 0; i < Number(count); i++) {
    const t = performance.now();
    for (const message of hostTurn(i)) m.appendMessage(message);
    const c = performance.now();
    m.buildSessionContext();
    const end = performance.now();
    turns.push(end - t);
    contexts.push(end - c);
  }
  const med = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
  console.log(JSON.stringify({ turnMs: round(med(turns)), contextMs: round(med(contexts)), turns: turns.length }));
} else if (op === "usage") {
  // Every session's tokens and cost by day, as pi sums them (tests/conformance/usage.mjs), twice: the first run
  // reads files the benchmark may not have touched yet, the second is the warm one (pi keeps nothing between).
  const { usageOverview } = await import(new URL("../tests/conformance/usage.mjs", import.meta.url));
  const times = [];
  let rows;
  for (let i = 0; i < 2; i++) {
    const t = performance.now();
    rows = (await usageOverview(SessionManager, { agentDir: target, by: "day", since: null })).rows;
    times.push(performance.now() - t);
  }
  console.log(JSON.stringify({ coldMs: round(times[0]), warmMs: round(times[1]), rows }));
} else {
  console.error("usage: pi-ops.mjs open FILE | append DIR N | turn FILE N | usage AGENT_DIR");
  process.exit(2);
}
