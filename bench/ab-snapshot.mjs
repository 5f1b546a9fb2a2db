// Alternated new processes of two or more pi-sessiond builds answering `session/open` of one session, plain and
// with a skeleton snapshot, cold (`--no-index`) and with skeletons kept, timed by a Node host as bench/run's open
// rows time them (to the answer's last byte, and with the host's parse): how a change to the snapshot's path is
// measured against the build before it.
//
//   node bench/ab-snapshot.mjs SESSION ROUNDS BINARY [BINARY ...]
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sidecar } from "./lib.mjs";

const [session, roundsText, ...binaries] = process.argv.slice(2);
if (!session || binaries.length === 0) throw new Error("usage: node bench/ab-snapshot.mjs SESSION ROUNDS BINARY...");
const rounds = Number(roundsText);
const agents = new Map(binaries.map((b) => [b, mkdtempSync(join(tmpdir(), "ab-snapshot-"))]));
for (const b of binaries) {
  const sc = new Sidecar(b, ["--agent-dir", agents.get(b)]);
  await sc.call("session/open", { path: session });
  await sc.close();
}
const cases = {
  cold: (b) => [["--no-index"], {}],
  "cold+skeleton": (b) => [["--no-index"], { snapshot: "skeleton" }],
  kept: (b) => [["--agent-dir", agents.get(b)], {}],
  "kept+skeleton": (b) => [["--agent-dir", agents.get(b)], { snapshot: "skeleton" }],
};
const times = new Map();
for (let r = 0; r < rounds; r++) {
  for (const b of r % 2 === 0 ? binaries : [...binaries].reverse()) {
    for (const [name, make] of Object.entries(cases)) {
      const [args, params] = make(b);
      const sc = new Sidecar(b, args);
      await sc.call("initialize", {});
      const asked = performance.now();
      await sc.call("session/open", { path: session, ...params });
      const parsed = performance.now() - asked;
      const received = sc.frameEndAt - asked;
      await sc.close();
      const key = `${b}\t${name}`;
      if (!times.has(key)) times.set(key, []);
      times.get(key).push([received, parsed]);
    }
  }
}
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
for (const b of binaries) {
  const m = Object.fromEntries(
    Object.keys(cases).map((name) => {
      const t = times.get(`${b}\t${name}`);
      return [name, [median(t.map((x) => x[0])), median(t.map((x) => x[1]))]];
    }),
  );
  const parts = Object.entries(m).map(([name, [rec, par]]) => `${name} ${rec.toFixed(2)}/${par.toFixed(2)}`);
  console.log(`${b}: ${parts.join("  ")}  (ms to the last byte / parsed)  skeleton ÷ plain ${(m["cold+skeleton"][0] / m.cold[0]).toFixed(2)}× / ${(m["cold+skeleton"][1] / m.cold[1]).toFixed(2)}×`);
}
for (const dir of agents.values()) rmSync(dir, { recursive: true, force: true });
