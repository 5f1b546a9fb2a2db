// pi 1.6.0's SessionManager in a process of its own (so its peak memory is its own), for bench/run.mjs.
//
//   node bench/pi-ops.mjs open FILE        → {openMs, contextMs, treeMs, entryCount, peakRssKiB}
//   node bench/pi-ops.mjs append DIR N     → {appendMs, count, peakRssKiB}  (N messages into a new session)
//   node bench/pi-ops.mjs turns FILE N     → {turnMs: [...]}  (N turns on FILE: user, assistant with a tool call,
//                                            tool result, then buildSessionContext; each turn's time)
import { piSessionManager, turn } from "./lib.mjs";

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
} else if (op === "turns") {
  const m = SessionManager.open(target);
  const turnMs = [];
  for (let i = 0; i < Number(count); i++) {
    const t = performance.now();
    for (const message of turn(i)) m.appendMessage(message);
    m.buildSessionContext();
    turnMs.push(performance.now() - t);
  }
  console.log(JSON.stringify({ turnMs }));
} else {
  console.error("usage: pi-ops.mjs open FILE | append DIR N | turns FILE N");
  process.exit(2);
}
