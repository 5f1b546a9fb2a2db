// Alternated starts of plain pi and pi-sessiond-pi on pi-start's 2 MB session, timed as `bench/run --only
// pi-start` times them (spawn to pi's answer to `get_state`): how a change to the client's start path is measured
// against the build before it, on a shared machine whose speed drifts by more than the change.
//
//   node bench/ab-start.mjs ROUNDS [VARIANT_DIR ...]
//
// Each round starts plain pi, then pi-sessiond-pi once with the client as built, then once per VARIANT_DIR with
// that directory's files copied over clients/typescript/dist/pi/ (say, bridge.js and register.js built from another
// commit); the built files are put back at the end. Prints each side's median and its runs, sorted. Needs
// `bench/run --only pi-start` to have made the session (under $BENCH_DIR, /tmp/pi-sessiond-bench by default) and
// a release build. Run under tests/pi's Node 22.
import { spawn } from "node:child_process";
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [roundsText, ...variants] = process.argv.slice(2);
const rounds = Number(roundsText);
if (!(rounds > 0)) throw new Error("usage: node bench/ab-start.mjs ROUNDS [VARIANT_DIR ...]");
const root = new URL("..", import.meta.url).pathname;
const data = join(process.env.BENCH_DIR ?? "/tmp/pi-sessiond-bench", "pi-start");
const node22 = join(root, "tests/pi/node_modules/.bin/node");
const piCli = join(root, "tests/pi/node_modules/@earendil-works/pi-coding-agent/dist/bundle/cli.js");
const launcher = join(root, "clients/typescript/bin/pi-sessiond-pi.js");
const faux = join(root, "tests/pi/fixtures/faux.ts");
const dist = join(root, "clients/typescript/dist/pi");
const session = readFileSync(join(data, "session-file"), "utf8");
const env = {
  ...process.env,
  PI_SESSIOND_BIN: join(root, "target/release/pi-sessiond"),
  PI_OFFLINE: "1",
  HOME: join(data, "home"),
  PI_CODING_AGENT_DIR: join(data, "home/agent"),
  PI_BIN: piCli,
};
const piArgs = ["-e", faux, "--model", "faux/faux-1", "--mode", "rpc", "--session", session];

/** Milliseconds from spawning `argv` to pi's answer to its first command. */
const ready = (argv) =>
  new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn(node22, argv, { cwd: join(data, "cwd"), env, stdio: ["pipe", "pipe", "inherit"] });
    child.stdin.write(`${JSON.stringify({ id: "ready", type: "get_state" })}\n`);
    let seen = "";
    let ms;
    child.stdout.on("data", (d) => {
      seen += d;
      if (ms === undefined && seen.includes('"id":"ready"')) {
        ms = performance.now() - started;
        child.stdin.end();
      }
    });
    child.on("close", (code) => (ms === undefined ? reject(new Error(`pi exited (${code}) before it answered`)) : resolve(ms)));
  });

// The client as built, kept aside so each variant's files can be put over it and taken off again.
const built = mkdtempSync(join(tmpdir(), "ab-start-"));
for (const f of readdirSync(dist)) copyFileSync(join(dist, f), join(built, f));
const use = (dir) => {
  for (const f of readdirSync(dir)) copyFileSync(join(dir, f), join(dist, f));
};
const sides = [["plain pi", null], ["pi-sessiond-pi", built], ...variants.map((v) => [`pi-sessiond-pi ${v}`, v])];
const times = new Map(sides.map(([name]) => [name, []]));
try {
  for (let r = 0; r < rounds; r++) {
    for (const [name, dir] of sides) {
      if (dir === null) times.get(name).push(await ready([piCli, ...piArgs]));
      else {
        use(built);
        if (dir !== built) use(dir);
        times.get(name).push(await ready([launcher, ...piArgs]));
      }
    }
  }
} finally {
  use(built);
  rmSync(built, { recursive: true, force: true });
}
const sorted = (xs) => [...xs].sort((a, b) => a - b);
for (const [name, xs] of times) {
  const s = sorted(xs);
  console.log(`${name.padEnd(40)} median ${s[s.length >> 1].toFixed(1)} ms   ${s.map((x) => x.toFixed(0)).join(" ")}`);
}
