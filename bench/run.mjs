// pi 1.6.0 against pi-sessiond on the same generated files, in the same run, interleaved; prints medians and the
// ratio pi / pi-sessiond (above 1: pi-sessiond is faster or smaller). Run through bench/run, which builds and
// installs what this needs.
//
//   node bench/run.mjs --bin target/release/pi-sessiond --gen target/release/examples --data DIR
//                      [--reps 5] [--quick] [--only open,append,list,search,rss,latency,pi,pi-start,web,mirror,team,usage,soak,pi-big]
//                      [--soak-minutes 60]
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { appendFileSync, existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { deepStrictEqual } from "node:assert";
import { join } from "node:path";
import { Sidecar, hostTurn, median, piSessionManager, quantile, startPostgres, time } from "./lib.mjs";
import { MirroredSession, spawnSessiond } from "../clients/typescript/dist/index.js";

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : dflt;
};
const bin = opt("--bin");
const gen = opt("--gen");
const data = opt("--data");
const quick = args.includes("--quick");
const reps = Number(opt("--reps", quick ? 3 : 5));
const only = opt("--only")?.split(",");
const wanted = (section) => !only || only.includes(section);
mkdirSync(data, { recursive: true });
const SessionManager = await piSessionManager();

const rows = [];
/** Records a row: pi's and our medians (lower is better), and the ratio pi / ours. */
function row(section, name, pi, ours, unit, note = "") {
  const ratio = pi !== undefined && ours !== undefined ? pi / ours : undefined;
  rows.push({ section, name, pi, ours, unit, ratio, note });
  const f = (v) => (v === undefined ? "—" : typeof v === "string" ? v : fmt(v, unit));
  console.error(`  ${name}: pi ${f(pi)}, pi-sessiond ${f(ours)}${ratio ? `, ×${ratio.toFixed(1)}` : ""}`);
}
function fmt(v, unit) {
  if (unit === "B") return v >= 1048576 ? `${(v / 1048576).toFixed(1)} MiB` : v >= 1024 ? `${(v / 1024).toFixed(1)} KiB` : `${Math.round(v)} B`;
  if (unit === "KiB") return v >= 1024 * 1024 ? `${(v / 1024 / 1024).toFixed(2)} GiB` : `${(v / 1024).toFixed(0)} MiB`;
  if (unit === "ms") return v >= 1000 ? `${(v / 1000).toFixed(2)} s` : `${v.toFixed(v < 10 ? 2 : 1)} ms`;
  return `${v} ${unit}`;
}
const json = (cmd, argv) => JSON.parse(execFileSync(cmd, argv, { encoding: "utf8", maxBuffer: 1 << 30 }));
const interleaved = async (n, piRun, ourRuns) => {
  const pi = [];
  const ours = ourRuns.map(() => []);
  for (let r = 0; r < n; r++) {
    const order = r % 2 === 0 ? ["pi", "ours"] : ["ours", "pi"];
    for (const side of order) {
      if (side === "pi") pi.push(await cleanHeap(piRun));
      else for (const [i, f] of ourRuns.entries()) ours[i].push(await cleanHeap(f));
    }
  }
  return [pi, ours];
};
/** Runs `f` after a full collection of this process's heap (bench/run passes --expose-gc), so that neither side
 * pays for the other's garbage: pi's `list()` of 1,000 sessions leaves tens of MB of strings, and the collection
 * of them had fallen inside whichever timed run came next (a host's 2 ms listing measured at 3-5 ms). */
const cleanHeap = (f) => {
  globalThis.gc?.();
  return f();
};
const pick = (xs, k) => median(xs.map((x) => x[k]));
/** The median over rounds of `a[r][k] / b[r][k]`: two of `interleaved`'s runs compared within each round. */
const pairedRatio = (a, b, k) => median(a.map((x, r) => x[k] / b[r][k]));
/** The physical limit of reading `path` once (a file, or every session file under a directory): copying it out
 * of the page cache (dd, or cat for many files), median of `n`. */
const copyMs = (path, n = reps) => {
  const cmd = path.endsWith(".jsonl") ? `dd if='${path}' of=/dev/null bs=4M status=none` : `find '${path}' -name '*.jsonl' -exec cat {} + > /dev/null`;
  return median(Array.from({ length: n }, () => shellMs(cmd)));
};
const shellMs = (cmd) => {
  const t = performance.now();
  execFileSync("sh", ["-c", cmd]);
  return performance.now() - t;
};
/** `dd` of a file as a row's note, with how much of it is only starting `sh` and `dd` (a `dd` of nothing): for a
 * file of tens of MB that is most of it, and the copy itself is the rest. */
const ddNote = (path) => {
  const spawn = median(Array.from({ length: reps }, () => shellMs("dd if=/dev/null of=/dev/null status=none")));
  return `dd of the file: ${fmt(copyMs(path), "ms")}, of which ${fmt(spawn, "ms")} starting sh and dd`;
};

// ---------------------------------------------------------------------------------------------------------------
// Inputs (deterministic; generated once per data directory)
const session40 = join(data, "session-40MB.jsonl");
if ((wanted("open") || wanted("pi") || wanted("web")) && !existsSync(session40)) {
  execFileSync(join(gen, "gen_session"), [session40, "--bytes", "40000000", "--image-kib", "16"], { stdio: "inherit" });
}
const catalog = (n, bytes) => {
  const dir = join(data, `catalog-${n}`);
  if (!existsSync(join(dir, "sessions"))) {
    execFileSync(join(gen, "gen_catalog"), [dir, "--sessions", String(n), "--bytes", String(bytes)], { stdio: "inherit" });
  }
  return dir;
};

// ---------------------------------------------------------------------------------------------------------------
if (wanted("open")) {
  console.error("open a 40 MB session (8,900 entries, branches, compactions)");
  const [pi, [engine, sidecar]] = await interleaved(
    reps,
    () => json(process.execPath, [new URL("./pi-ops.mjs", import.meta.url).pathname, "open", session40]),
    [
      () => json(bin, ["stats", "--reads", "--json", session40]),
      async () => {
        const sc = new Sidecar(bin, ["--no-index"]);
        const [openMs, st] = await time(() => sc.call("session/open", { path: session40 }));
        const [contextMs] = await time(() => sc.call("session/buildSessionContext", { handle: st.handle }));
        const [treeMs] = await time(() => sc.call("session/getTree", { handle: st.handle }));
        const peakRssKiB = sc.peakRssKiB();
        await sc.close();
        return { openMs, contextMs, treeMs, peakRssKiB };
      },
    ],
  );
  row("open", "open 40 MB: pi open() vs session/open over the pipe", pick(pi, "openMs"), pick(sidecar, "openMs"), "ms");
  // Issue 21: the open of a process that has just started (the page cache warm), the open a mirror makes, and
  // the open of a file a sidecar with an index opened before (its skeletons kept beside the index). The calls
  // alone are timed in a process already up (an `initialize` first), as pi's open() is timed in Node already up.
  const keptAgent = join(data, "kept-agent");
  rmSync(keptAgent, { recursive: true, force: true });
  {
    const sc = new Sidecar(bin, ["--agent-dir", keptAgent]);
    await sc.call("session/open", { path: session40 });
    await sc.close();
  }
  const keptBytes = statSync(join(keptAgent, "pi-sessiond", "skeletons")).isDirectory()
    ? execFileSync("du", ["-sb", join(keptAgent, "pi-sessiond", "skeletons")], { encoding: "utf8" }).split("\t")[0]
    : "0";
  const callAlone = (args, params) => async () => {
    const sc = new Sidecar(bin, args);
    await sc.call("initialize", {});
    const asked = performance.now();
    const [ms, st] = await time(() => sc.call("session/open", { path: session40, ...params }));
    // The answer's last byte, before the host parses it: what the sidecar's side of the open costs.
    const receivedMs = sc.frameEndAt - asked;
    if (params.snapshot && st.snapshot.entries.length !== pi[0].entryCount) throw new Error(`skeleton of ${st.snapshot.entries.length} entries`);
    await sc.close();
    return { ms, receivedMs };
  };
  const [piCold, [cold, plain, skeleton, kept, keptSkeleton]] = await interleaved(
    reps,
    () => json(process.execPath, [new URL("./pi-ops.mjs", import.meta.url).pathname, "open", session40]),
    [
      async () => {
        const t = performance.now();
        const sc = new Sidecar(bin, ["--no-index"]);
        await sc.call("session/open", { path: session40 });
        const ms = performance.now() - t;
        await sc.close();
        return { ms };
      },
      callAlone(["--no-index"], {}),
      callAlone(["--no-index"], { snapshot: "skeleton" }),
      callAlone(["--agent-dir", keptAgent], {}),
      callAlone(["--agent-dir", keptAgent], { snapshot: "skeleton" }),
    ],
  );
  const dd = ddNote(session40);
  row("open", "open 40 MB in a new process (page cache warm): pi open() vs spawn → session/open answered", pick(piCold, "openMs"), pick(cold, "ms"), "ms", `${dd}; ours includes starting the process, pi's does not`);
  row("open", "open 40 MB cold (no kept skeletons), the call alone: pi open() vs session/open", pick(piCold, "openMs"), pick(plain, "ms"), "ms", dd);
  row("open", "open 40 MB with a skeleton snapshot: pi open() vs session/open {snapshot: skeleton}", pick(piCold, "openMs"), pick(skeleton, "ms"), "ms", `${dd}; ${(pick(skeleton, "ms") / pick(plain, "ms")).toFixed(2)}× the plain open; one read of the file; the host's JSON.parse included; to the answer's last byte, before the host parses it: ${pick(skeleton, "receivedMs").toFixed(1)} ms, ${(pick(skeleton, "receivedMs") / pick(plain, "receivedMs")).toFixed(2)}× the plain open's; paired (the median of each round's snapshot over the same round's plain open, which the machine's drift between rounds does not move): ${pairedRatio(skeleton, plain, "receivedMs").toFixed(2)}×`);
  row("open", "open 40 MB again, skeletons kept: pi open() vs session/open", pick(piCold, "openMs"), pick(kept, "ms"), "ms", `${dd}; kept: ${fmt(Number(keptBytes), "B")}`);
  row("open", "open 40 MB again, skeletons kept, with a skeleton snapshot", pick(piCold, "openMs"), pick(keptSkeleton, "ms"), "ms", "the host's JSON.parse included");
  row("open", "open 40 MB: pi open() vs the engine in-process", pick(pi, "openMs"), pick(engine, "openMs"), "ms");
  row("open", "buildSessionContext (pi: objects; ours: JSON over the pipe)", pick(pi, "contextMs"), pick(sidecar, "contextMs"), "ms");
  row("open", "getTree (pi: objects; ours: JSON over the pipe)", pick(pi, "treeMs"), pick(sidecar, "treeMs"), "ms");
  row("rss", "peak RSS, open 40 MB + context + tree", pick(pi, "peakRssKiB"), pick(sidecar, "peakRssKiB"), "KiB");
}

// ---------------------------------------------------------------------------------------------------------------
if (wanted("append")) {
  const n = quick ? 2000 : 10000;
  console.error(`append ${n} messages`);
  const dir = join(data, "append");
  let k = 0;
  const fresh = () => {
    const d = join(dir, String(k++));
    rmSync(d, { recursive: true, force: true });
    mkdirSync(d, { recursive: true });
    return d;
  };
  const message = (i) => ({ role: "user", content: `message ${i}`, timestamp: 1767225600000 + i });
  const ours = (durability, pipelined) => async () => {
    const sc = new Sidecar(bin, ["--no-index", "--durability", durability]);
    const st = await sc.call("session/create", { cwd: "/bench", sessionDir: fresh() });
    const [ms] = await time(async () => {
      if (pipelined) {
        await Promise.all(Array.from({ length: n }, (_, i) => sc.call("session/appendMessage", { handle: st.handle, message: message(i) })));
      } else {
        for (let i = 0; i < n; i++) await sc.call("session/appendMessage", { handle: st.handle, message: message(i) });
      }
    });
    await sc.close();
    return { ms };
  };
  const modes = [
    ["none", false],
    ["none", true],
    ["entry", false],
    ["entry", true],
    ["batch", false],
    ["batch", true],
  ];
  const [pi, oursRuns] = await interleaved(
    Math.min(reps, 3),
    () => json(process.execPath, [new URL("./pi-ops.mjs", import.meta.url).pathname, "append", fresh(), String(n)]),
    modes.map(([d, p]) => ours(d, p)),
  );
  const piMs = pick(pi, "appendMs");
  for (const [i, [d, p]] of modes.entries()) {
    const note = d === "none" ? "no fsync, like pi" : d === "entry" ? "fsync before each answer" : "group commit";
    row("append", `append ${n}: pi appendMessage() vs the pipe, ${p ? "pipelined" : "one at a time"}, --durability ${d}`, piMs, pick(oursRuns[i], "ms"), "ms", note);
  }
}

// ---------------------------------------------------------------------------------------------------------------
if (wanted("list") || wanted("search")) {
  // The middle size is the issue's "a few thousand sessions totalling a few hundred MB".
  const sizes = quick ? [[1000, 40e6]] : [[1000, 40e6], [3000, 300e6], [10000, 400e6]];
  for (const [n, bytes] of sizes) {
    const agent = catalog(n, bytes);
    process.env.PI_CODING_AGENT_DIR = agent;
    const cwd = "/home/user/big-project";
    const index = join(data, `index-${n}.sqlite`);
    const dropIndex = () => ["", "-wal", "-shm"].forEach((s) => rmSync(index + s, { force: true }));
    execFileSync("sh", ["-c", `find '${agent}/sessions' -type f -exec cat {} + > /dev/null`]);
    const expected = JSON.parse(JSON.stringify(await SessionManager.list(cwd)));
    const lean = expected.map(({ allMessagesText, ...rest }) => rest);
    // The sidecar a cold run started: the warm runs that follow use it.
    let warm;
    if (wanted("list")) {
      console.error(`list ${n} sessions (${expected.length} in the listed project)`);
      // A host through the TypeScript client, which keeps its last listing: after its first listing (not timed),
      // each one receives only what changed (sessions/listDelta). It runs its own sidecar on the same index.
      let host;
      const [pi, [cold, warmRuns, warmLean, held]] = await interleaved(
        reps,
        async () => (await time(() => SessionManager.list(cwd)))[0],
        [
          async () => {
            dropIndex();
            const sc = new Sidecar(bin, ["--agent-dir", agent, "--index", index]);
            const [ms, v] = await time(() => sc.call("sessions/list", { cwd }));
            deepStrictEqual(v, expected);
            await warm?.close();
            warm = sc;
            return ms;
          },
          async () => {
            const [ms, v] = await time(() => warm.call("sessions/list", { cwd }));
            deepStrictEqual(v, expected);
            return ms;
          },
          async () => {
            const [ms, v] = await time(() => warm.call("sessions/list", { cwd, includeAllMessagesText: false }));
            deepStrictEqual(v, lean);
            return ms;
          },
          async () => {
            if (!host) {
              host = await spawnSessiond({ binary: bin, args: ["--agent-dir", agent, "--index", index], stderr: "ignore" });
              deepStrictEqual(await host.list(cwd), expected);
            }
            const [ms, v] = await time(() => host.list(cwd));
            deepStrictEqual(v, expected);
            return ms;
          },
        ],
      );
      await host.close();
      await warm.close();
      warm = undefined;
      const piMs = median(pi);
      const textMiB = (JSON.stringify(expected).length / 1048576).toFixed(1);
      row("list", `list ${n} sessions, cold (empty index)`, piMs, median(cold), "ms", "same result as pi, checked");
      row("list", `list ${n} sessions, warm`, piMs, median(warmRuns), "ms", `${textMiB} MiB of JSON, most of it allMessagesText`);
      row("list", `list ${n} sessions, warm, includeAllMessagesText: false`, piMs, median(warmLean), "ms", "pi's result minus that field");
      row("list", `list ${n} sessions, warm, again by a host holding its last listing`, piMs, median(held), "ms", "TypeScript client (sessions/listDelta); pi's exact result, checked");
    }
    if (wanted("search") && n <= 3000) {
      console.error(`search a phrase across ${n} sessions`);
      const phrase = "borrow lifetime";
      const piSearch = async () => {
        const [ms, hits] = await time(async () => (await SessionManager.list(cwd)).filter((s) => s.allMessagesText.toLowerCase().includes(phrase)));
        return { ms, hits: hits.length };
      };
      const [pi, [cold, warmRuns]] = await interleaved(reps, piSearch, [
        async () => {
          dropIndex();
          const sc = new Sidecar(bin, ["--agent-dir", agent, "--index", index]);
          const [ms] = await time(() => sc.call("sessions/search", { query: `"${phrase}"`, cwd, limit: 50 }));
          await warm?.close();
          warm = sc;
          // The first search read the files; its sidecar's index thread now stores their text. The warm rows are
          // of the index, so they wait for it (bounded).
          await indexCaughtUp(index);
          return ms;
        },
        async () => (await time(() => warm.call("sessions/search", { query: `"${phrase}"`, cwd, limit: 50 })))[0],
      ]);
      await warm.close();
      warm = undefined;
      const size = (p) => (existsSync(p) ? statSync(p).size : 0);
      const indexBytes = size(index) + size(index + "-wal");
      const sessionBytes = Number(execFileSync("du", ["-sb", join(agent, "sessions")], { encoding: "utf8" }).split("\t")[0]);
      row("search", `index size (listing + search text) for ${n} sessions`, sessionBytes / 1024, indexBytes / 1024, "KiB", "pi column: the sessions themselves");
      const note = `pi: list() + includes over allMessagesText (${pi[0].hits} sessions); ours: ranked entries, limit 50`;
      const cat = `cat of the project's files: ${fmt(copyMs(join(agent, "sessions", "--home-user-big-project--")), "ms")}`;
      row("search", `search "${phrase}" across ${n} sessions, first search (empty index: the listing, then the files read)`, pick(pi, "ms"), median(cold), "ms", `${note}; ${cat}; the index takes the text afterwards`);
      row("search", `search "${phrase}" across ${n} sessions, warm`, pick(pi, "ms"), median(warmRuns), "ms");
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
if (wanted("rss") && !quick) {
  console.error("open a 2.6 GB session of base64 images (pi #9613)");
  const huge = join(data, "images-2.6GB.jsonl");
  if (!existsSync(huge)) execFileSync(join(gen, "gen_session"), [huge, "--bytes", "2600000000", "--image-kib", "400"], { stdio: "inherit" });
  const ours = json(bin, ["stats", "--timing", "--json", huge]);
  // pi gets 3 minutes; its peak is read from /proc while it runs, so a kill still leaves a figure.
  const child = spawn(process.execPath, [new URL("./pi-ops.mjs", import.meta.url).pathname, "open", huge], { stdio: ["ignore", "pipe", "pipe"] });
  let peak = 0;
  let out = "";
  let err = "";
  child.stdout.on("data", (d) => (out += d));
  child.stderr.on("data", (d) => (err += d));
  const poll = setInterval(() => {
    try {
      peak = Math.max(peak, Number(/VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${child.pid}/status`, "utf8"))?.[1] ?? 0));
    } catch {}
  }, 50);
  const killer = setTimeout(() => child.kill("SIGKILL"), 180_000);
  const t0 = performance.now();
  const status = await new Promise((r) => child.on("exit", (code, signal) => r(signal ?? code)));
  const elapsed = performance.now() - t0;
  clearInterval(poll);
  clearTimeout(killer);
  const piResult = status === 0 ? JSON.parse(out) : undefined;
  const piNote =
    status === 0
      ? `pi opened it in ${fmt(piResult.openMs, "ms")}`
      : `pi failed (${status}) after ${fmt(elapsed, "ms")}: ${(/heap|memory|Error[^\n]*/.exec(err) ?? [""])[0]}`;
  row("rss", "peak RSS, open 2.6 GB image session", piResult?.peakRssKiB ?? (peak || undefined), ours.peakRssKiB, "KiB", piNote);
  row("rss", "open 2.6 GB image session (engine in-process)", piResult?.openMs, ours.openMs, "ms");
  // Results far larger than memory should allow, read by a host that only counts the bytes (no JSON.parse of a
  // multi-gigabyte line): the sidecar streams them from the file.
  for (const method of ["session/getEntries", "session/buildSessionContext"]) {
    const r = await streamedRead(huge, method);
    row("rss", `peak RSS, ${method} of the 2.6 GB image session`, undefined, r.peakKiB, "KiB", `a ${fmt(r.bytes / 1024, "KiB")} result in ${fmt(r.ms, "ms")}`);
  }
}

/** Waits (at most 5 minutes) until the index at `path` holds the searchable text of every file it lists. */
async function indexCaughtUp(path) {
  const deadline = performance.now() + 300_000;
  const behind = () =>
    Number(execFileSync("sqlite3", [path, "SELECT count(*) FROM files WHERE docs_offset < offset AND rejected = 0"], { encoding: "utf8" }).trim());
  while (behind() > 0) {
    if (performance.now() > deadline) throw new Error(`the index ${path} did not catch up in 5 minutes`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** Opens `path` in a fresh sidecar, asks for `method`, and counts the answer's bytes; the sidecar's peak RSS. */
async function streamedRead(path, method) {
  const child = spawn(bin, ["--no-index"], { stdio: ["pipe", "pipe", "inherit"] });
  let lines = 0;
  let bytes = 0;
  let first = "";
  let wake;
  child.stdout.on("data", (chunk) => {
    if (lines === 0) first += chunk.toString("utf8");
    bytes += chunk.length;
    for (let i = chunk.indexOf(10); i !== -1; i = chunk.indexOf(10, i + 1)) lines++;
    wake?.();
  });
  const lineCount = (n) => new Promise((r) => { wake = () => lines >= n && r(); wake(); });
  child.stdin.write(JSON.stringify({ jsonrpc: "2.0", id: 1, method: "session/open", params: { path } }) + "\n");
  await lineCount(1);
  const { handle } = JSON.parse(first.slice(0, first.indexOf("\n"))).result;
  const before = bytes;
  const t0 = performance.now();
  child.stdin.write(JSON.stringify({ jsonrpc: "2.0", id: 2, method, params: { handle } }) + "\n");
  await lineCount(2);
  const ms = performance.now() - t0;
  const peakKiB = Number(/VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${child.pid}/status`, "utf8"))?.[1] ?? NaN);
  child.stdin.end();
  await new Promise((r) => child.on("exit", r));
  return { bytes: bytes - before, ms, peakKiB };
}

// ---------------------------------------------------------------------------------------------------------------
if (wanted("latency")) {
  console.error("RPC round trip and external append → session/changed");
  const dir = join(data, "latency");
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const file = join(dir, "watched.jsonl");
  writeFileSync(file, JSON.stringify({ type: "session", version: 3, id: "w", timestamp: "2026-01-01T00:00:00.000Z", cwd: "/" }) + "\n");
  const sc = new Sidecar(bin, ["--no-index"]);
  const st = await sc.call("session/open", { path: file, watch: true });
  const rtt = [];
  for (let i = 0; i < 3000; i++) rtt.push((await time(() => sc.call("session/getLeafId", { handle: st.handle })))[0]);
  let waiting;
  sc.onNotification((m) => m.method === "session/changed" && waiting?.());
  const external = [];
  let parent = null;
  for (let i = 0; i < 300; i++) {
    const id = `e${String(i).padStart(7, "0")}`;
    const line = JSON.stringify({ type: "message", id, parentId: parent, timestamp: "2026-01-01T00:00:01.000Z", message: { role: "user", content: `x ${i}`, timestamp: 1 } });
    parent = id;
    const heard = new Promise((r) => (waiting = r));
    const t = performance.now();
    appendFileSync(file, line + "\n");
    await heard;
    external.push(performance.now() - t);
  }
  // appendMessage round trips (default durability: entry, an fsync before each answer).
  const created = await sc.call("session/create", { cwd: "/bench", sessionDir: dir });
  const appends = [];
  for (let i = 0; i < 2000; i++) {
    const message = { role: "user", content: `message ${i}`, timestamp: 1767225600000 + i };
    appends.push((await time(() => sc.call("session/appendMessage", { handle: created.handle, message })))[0]);
  }
  await sc.close();
  const warm = rtt.slice(500);
  row("latency", "RPC round trip, session/getLeafId, p50", undefined, median(warm), "ms", "pi is in-process: no round trip");
  row("latency", "RPC round trip, session/getLeafId, p99", undefined, quantile(warm, 0.99), "ms");
  row("latency", "RPC round trip, session/appendMessage, p50", undefined, median(appends.slice(200)), "ms", "--durability entry: includes an fsync");
  row("latency", "RPC round trip, session/appendMessage, p99", undefined, quantile(appends.slice(200), 0.99), "ms");
  row("latency", "external append → session/changed, p50", undefined, median(external), "ms", "another process appends a line to a watched file");
  row("latency", "external append → session/changed, p99", undefined, quantile(external, 0.99), "ms");
}

// ---------------------------------------------------------------------------------------------------------------
if (wanted("team")) {
  // The team catalog (docs/team.md): push throughput into a PostgreSQL on this machine, then warm listing and
  // search from it against the local index, and how soon a watching push makes an append searchable.
  const [n, bytes] = quick ? [1000, 40e6] : [3000, 300e6];
  const agent = catalog(n, bytes);
  process.env.PI_CODING_AGENT_DIR = agent;
  const cwd = "/home/user/big-project";
  const phrase = "borrow lifetime";
  console.error(`team: push ${n} sessions into PostgreSQL`);
  const pg = await startPostgres(join(data, "postgres"));
  try {
    execFileSync("sh", ["-c", `find '${agent}/sessions' -type f -exec cat {} + > /dev/null`]);
    // Pushes with redaction (the default) and without (--no-redact), interleaved, each into an empty database: the
    // difference is what scanning every line for secrets costs.
    const pushes = { on: [], off: [] };
    const reports = {};
    for (let r = 0; r < Math.min(reps, 2); r++) {
      for (const mode of r % 2 === 0 ? ["on", "off"] : ["off", "on"]) {
        const url = pg.createDatabase(mode === "on" ? `push${r}` : `pushraw${r}`);
        const argv = ["--agent-dir", agent, "push", "--postgres", url, "--machine", "bench", ...(mode === "off" ? ["--no-redact"] : [])];
        const [ms, out] = await time(() => execFileSync(bin, argv, { encoding: "utf8" }));
        reports[mode] = JSON.parse(out.trim());
        pushes[mode].push(ms);
      }
    }
    const url = pg.url("push0");
    const report = reports.on;
    const pushMs = median(pushes.on);
    const mb = report.bytes / 1e6;
    row("team", `push ${n} sessions (${mb.toFixed(0)} MB, ${report.entries} entries) into an empty database`, undefined, pushMs, "ms", "one machine, PostgreSQL on the same machine, redaction on");
    for (const mode of ["on", "off"]) {
      const ms = median(pushes[mode]);
      const r = reports[mode];
      const rate = `${(r.files / (ms / 1000)).toFixed(0)} sessions/s, ${(r.bytes / 1e6 / (ms / 1000)).toFixed(1)} MB/s, ${Math.round(r.entries / (ms / 1000))} entries/s`;
      row("team", `push throughput, redaction ${mode}`, undefined, rate, "", mode === "on" ? "the default" : "--no-redact");
    }
    const dbBytes = Number(execFileSync("psql", ["-At", "-d", url, "-c", "SELECT pg_database_size(current_database())"], { encoding: "utf8" }).trim());
    const sessionBytes = Number(execFileSync("du", ["-sb", join(agent, "sessions")], { encoding: "utf8" }).split("\t")[0]);
    row("team", `database size for ${n} sessions`, sessionBytes / 1024, dbBytes / 1024, "KiB", "pi column: the sessions themselves");
    const again = [];
    for (let r = 0; r < reps; r++) {
      again.push((await time(() => execFileSync(bin, ["--agent-dir", agent, "push", "--postgres", url, "--machine", "bench"])))[0]);
    }
    row("team", `push again, nothing changed (${n} stats)`, undefined, median(again), "ms", "process start included");
    // usage --catalog: one machine's pushed sessions give exactly that machine's own usage rows.
    const usageRows = (args) => JSON.parse(execFileSync(bin, [...args, "usage", "--by", "day", "--json"], { encoding: "utf8" }));
    const ownUsage = JSON.stringify(usageRows(["--agent-dir", agent, "--no-index"]));
    const teamUsage = [];
    for (let r = 0; r < reps; r++) {
      const [ms, rows] = await time(() => usageRows(["--catalog", url]));
      if (JSON.stringify(rows) !== ownUsage) throw new Error("usage --catalog and the machine's own usage differ");
      teamUsage.push(ms);
    }
    row("team", `usage --catalog by day of ${n} sessions`, undefined, median(teamUsage), "ms", "the whole command; the machine's own rows, checked");

    const expected = JSON.parse(JSON.stringify(await SessionManager.list(cwd)));
    const index = join(data, `index-team-${n}.sqlite`);
    const local = new Sidecar(bin, ["--agent-dir", agent, "--index", index]);
    const team = new Sidecar(bin, ["--agent-dir", agent, "--catalog", url]);
    deepStrictEqual(await local.call("sessions/list", { cwd }), expected);
    const fromPg = await team.call("sessions/list", { cwd });
    deepStrictEqual(fromPg.map(({ machine, ...rest }) => rest), expected);
    await local.call("sessions/search", { query: `"${phrase}"`, cwd, limit: 50 });
    await team.call("sessions/search", { query: `"${phrase}"`, cwd, limit: 50 });
    const [pi, [localList, pgList, localSearch, pgSearch]] = await interleaved(
      reps,
      async () => (await time(() => SessionManager.list(cwd)))[0],
      [
        async () => (await time(() => local.call("sessions/list", { cwd })))[0],
        async () => (await time(() => team.call("sessions/list", { cwd })))[0],
        async () => (await time(() => local.call("sessions/search", { query: `"${phrase}"`, cwd, limit: 50 })))[0],
        async () => (await time(() => team.call("sessions/search", { query: `"${phrase}"`, cwd, limit: 50 })))[0],
      ],
    );
    const piMs = median(pi);
    row("team", `list ${n} sessions, warm, local index`, piMs, median(localList), "ms", "same result as pi, checked");
    row("team", `list ${n} sessions, warm, from PostgreSQL`, piMs, median(pgList), "ms", "pi's result plus machine, checked");
    row("team", `search "${phrase}", warm, local index`, undefined, median(localSearch), "ms", "limit 50");
    row("team", `search "${phrase}", warm, from PostgreSQL`, undefined, median(pgSearch), "ms", "limit 50, pg_trgm");

    // The same from a viewer role granted the machine (docs/team.md, step 3): row-level security decides what it
    // sees, and the planner may not use the trigram index under it for ILIKE (not leakproof); a query with no hit
    // shows it most.
    execFileSync("psql", ["-q", "-d", url, "-c", "CREATE ROLE bench_viewer LOGIN"]);
    execFileSync(bin, ["team", "grant", "--postgres", url, "--role", "bench_viewer", "--machine", "bench"]);
    const viewer = new Sidecar(bin, ["--agent-dir", agent, "--catalog", url.replace("postgres@", "bench_viewer@")]);
    deepStrictEqual((await viewer.call("sessions/list", { cwd })).map(({ machine, ...rest }) => rest), expected);
    const absent = "zqxjv wkpfy";
    const [, [ownerNone, viewerList, viewerSearch, viewerNone]] = await interleaved(
      reps,
      async () => 0,
      [
        async () => (await time(() => team.call("sessions/search", { query: absent, cwd, limit: 50 })))[0],
        async () => (await time(() => viewer.call("sessions/list", { cwd })))[0],
        async () => (await time(() => viewer.call("sessions/search", { query: `"${phrase}"`, cwd, limit: 50 })))[0],
        async () => (await time(() => viewer.call("sessions/search", { query: absent, cwd, limit: 50 })))[0],
      ],
    );
    await viewer.close();
    row("team", `search "${absent}" (no hit), warm, from PostgreSQL, as the owner`, undefined, median(ownerNone), "ms", "pg_trgm");
    row("team", `list ${n} sessions, warm, from PostgreSQL, as a viewer role`, piMs, median(viewerList), "ms", "row-level security; pi's result, checked");
    row("team", `search "${phrase}", warm, from PostgreSQL, as a viewer role`, undefined, median(viewerSearch), "ms", "row-level security");
    row("team", `search "${absent}" (no hit), warm, from PostgreSQL, as a viewer role`, undefined, median(viewerNone), "ms", "row-level security: no trigram index");

    // A watching push, and a host on "another machine" searching through PostgreSQL for a phrase just appended.
    const watchDir = join(data, "team-watch");
    rmSync(watchDir, { recursive: true, force: true });
    const project = join(watchDir, "sessions", "--w--");
    mkdirSync(project, { recursive: true });
    const file = join(project, "2026-01-01T00-00-00-000Z_watched.jsonl");
    writeFileSync(file, JSON.stringify({ type: "session", version: 3, id: "watched", timestamp: "2026-01-01T00:00:00.000Z", cwd: "/w" }) + "\n");
    const watchUrl = pg.createDatabase("watch");
    const watcher = spawn(bin, ["--agent-dir", watchDir, "push", "--poll-ms", "60000", "--postgres", watchUrl, "--machine", "laptop", "--watch"], { stdio: ["ignore", "ignore", "inherit"] });
    const remote = new Sidecar(bin, ["--agent-dir", watchDir, "--catalog", watchUrl]);
    await new Promise((r) => setTimeout(r, 1000));
    const seen = [];
    for (let i = 0; i < 20; i++) {
      const word = `zebra${i}x${Date.now()}`;
      const line = { type: "message", id: `w${String(i).padStart(7, "0")}`, parentId: null, timestamp: "2026-01-01T00:00:01.000Z", message: { role: "user", content: `the ${word} moved`, timestamp: 1767225601000 + i } };
      const t = performance.now();
      appendFileSync(file, JSON.stringify(line) + "\n");
      for (;;) {
        const hits = await remote.call("sessions/search", { query: word });
        if (hits.length) break;
        if (performance.now() - t > 30000) throw new Error("a watched append was not pushed within 30 s");
        await new Promise((r) => setTimeout(r, 10));
      }
      seen.push(performance.now() - t);
    }
    watcher.kill();
    await remote.close();
    await local.close();
    await team.close();
    row("team", "append on one machine → found by search on another, p50", undefined, median(seen), "ms", "push --watch, poll 60 s: notifications only; search every 10 ms");
    row("team", "append on one machine → found by search on another, max", undefined, Math.max(...seen), "ms", "20 appends");
  } finally {
    pg.stop();
  }
}

// ---------------------------------------------------------------------------------------------------------------
// pi itself on pi-sessiond (issue 14): pi's SDK with the faux provider, its SessionManager pi's own or the drop-in
// (pi-sessiond-client/pi, default --durability entry: every append fsynced before pi gets its id). Each side runs
// in a process of its own under tests/pi's Node 22, so peak memory is that process's.
if (wanted("pi")) {
  const node22 = join(new URL("..", import.meta.url).pathname, "tests/pi/node_modules/.bin/node");
  const script = new URL("./pi-session.mjs", import.meta.url).pathname;
  const home = join(data, "pi-home");
  mkdirSync(join(home, "agent"), { recursive: true });
  const env = { ...process.env, PI_SESSIOND_BIN: bin, PI_OFFLINE: "1", HOME: home, PI_CODING_AGENT_DIR: join(home, "agent") };
  const side = (name, args, extraEnv = {}) => JSON.parse(execFileSync(node22, [script, name, ...args], { encoding: "utf8", env: { ...env, ...extraEnv }, maxBuffer: 1 << 26 }));
  const prompts = quick ? 6 : 12;
  console.error(`pi: ${prompts} prompts on the 40 MB session, with pi's SessionManager and with the drop-in`);
  const copy = join(data, "pi-run", "session-40MB-copy.jsonl");
  mkdirSync(join(data, "pi-run"), { recursive: true });
  const fresh = () => {
    rmSync(join(data, "pi-run"), { recursive: true, force: true });
    mkdirSync(join(data, "pi-run"), { recursive: true });
    execFileSync("cp", [session40, copy]);
    return copy;
  };
  const run = (name) => () => {
    const r = side(name, ["prompt", fresh(), String(prompts)]);
    // The first prompt also pays for the model and tool setup pi writes once; the rest are steady state.
    return { ...r, promptMs: median(r.promptMs.slice(1)) };
  };
  const [own, [drop]] = await interleaved(Math.min(reps, 3), run("own"), [run("sessiond")]);
  row("pi", "pi: time per prompt on the 40 MB session (SDK, faux provider)", pick(own, "promptMs"), pick(drop, "promptMs"), "ms", "drop-in: each append fsynced (--durability entry); target ≥ 0.8× (within 1.25× of pi)");
  row("pi", "pi: open the 40 MB session and start the agent session", pick(own, "openMs"), pick(drop, "openMs"), "ms", "drop-in: session/open + the entries into the mirror");
  row("pi", "pi: peak RSS of pi's process", pick(own, "peakRssKiB"), pick(drop, "peakRssKiB"), "KiB", "drop-in: the mirror holds the entries as pi does");
  row("pi", "pi: peak RSS, pi's process + its sidecar", pick(own, "peakRssKiB"), median(drop.map((d) => d.peakRssKiB + d.sidecarPeakRssKiB)), "KiB", `sidecar alone: ${fmt(pick(drop, "sidecarPeakRssKiB"), "KiB")}`);

  const agent = catalog(3000, 300e6);
  console.error("pi: /resume's listing of the 3,000-session root (SessionManager.listAll), pi's and the drop-in's");
  const list = (name) => () => {
    // Cold: no catalog index yet (the drop-in's sidecar builds it at <agentDir>/pi-sessiond/); warm: the next listing.
    rmSync(join(agent, "pi-sessiond"), { recursive: true, force: true });
    return side(name, ["list", agent]);
  };
  const [piList, [ourList]] = await interleaved(Math.min(reps, 3), list("own"), [list("sessiond")]);
  row("pi", "pi: /resume listing of 3,000 sessions, first in the process (drop-in: index built)", pick(piList, "coldMs"), pick(ourList, "coldMs"), "ms");
  row("pi", "pi: /resume listing of 3,000 sessions, again", pick(piList, "warmMs"), pick(ourList, "warmMs"), "ms", "drop-in: a stat per file");
  rmSync(join(agent, "pi-sessiond"), { recursive: true, force: true });
}

// ---------------------------------------------------------------------------------------------------------------
// A start as fast as pi's (issue 20): real pi 1.6.0 (Node 22, the faux provider, RPC mode) resuming a 2 MB session
// (`--session`), from the spawn to pi's answer to its first command (`get_state`: pi reads commands once it is
// ready for a prompt), plain against `pi-sessiond-pi` (the hook in pi's own process, pi's bundle with only its
// SessionManager bound to the drop-in, the lock extension inline, the sidecar started beside pi's start-up). The session is written by pi's
// own SessionManager: turns of a user message, an assistant tool call, its result and a reply.
if (wanted("pi-start")) {
  const root = new URL("..", import.meta.url).pathname;
  const node22 = join(root, "tests/pi/node_modules/.bin/node");
  const piCli = join(root, "tests/pi/node_modules/@earendil-works/pi-coding-agent/dist/bundle/cli.js");
  const launcher = join(root, "clients/typescript/bin/pi-sessiond-pi.js");
  const faux = join(root, "tests/pi/fixtures/faux.ts");
  const dir = join(data, "pi-start");
  const cwd = join(dir, "cwd");
  const home = join(dir, "home");
  for (const d of [cwd, join(home, "agent"), join(dir, "sessions")]) mkdirSync(d, { recursive: true });
  const fileOf = join(dir, "session-file");
  if (!existsSync(fileOf)) {
    const m = SessionManager.create(cwd, join(dir, "sessions"));
    const text = (what, n) => `${what} ${n}: ${"the quick brown fox jumps over the lazy dog ".repeat(9)}`;
    const usage = { input: 10, output: 10, cacheRead: 0, cacheWrite: 0, totalTokens: 20, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } };
    const reply = (content, stopReason) => ({ role: "assistant", content, api: "faux", provider: "faux", model: "faux-1", usage, stopReason, timestamp: Date.now() });
    for (let turn = 0; (statSync(m.getSessionFile() ?? fileOf, { throwIfNoEntry: false })?.size ?? 0) < 2_000_000; turn++) {
      m.appendMessage({ role: "user", content: [{ type: "text", text: text("question", turn) }], timestamp: Date.now() });
      m.appendMessage(reply([{ type: "toolCall", id: `call-${turn}`, name: "bash", arguments: { command: `echo ${turn}` } }], "toolUse"));
      m.appendMessage({ role: "toolResult", toolCallId: `call-${turn}`, toolName: "bash", content: [{ type: "text", text: text("output", turn) }], isError: false, timestamp: Date.now() });
      m.appendMessage(reply([{ type: "text", text: text("answer", turn) }], "stop"));
    }
    writeFileSync(fileOf, m.getSessionFile());
  }
  const session = readFileSync(fileOf, "utf8");
  console.error(`pi-start: pi resuming a ${fmt(statSync(session).size, "B")} session, to its first answer`);
  const env = { ...process.env, PI_SESSIOND_BIN: bin, PI_OFFLINE: "1", HOME: home, PI_CODING_AGENT_DIR: join(home, "agent"), PI_BIN: piCli };
  const piArgs = ["-e", faux, "--model", "faux/faux-1", "--mode", "rpc", "--session", session];
  const ready = (argv) => async () => {
    const started = performance.now();
    const child = spawn(node22, argv, { cwd, env, stdio: ["pipe", "pipe", "inherit"] });
    child.stdin.write(`${JSON.stringify({ id: "ready", type: "get_state" })}\n`);
    // A safety net, not a speed check: a pi that never answers fails the run instead of hanging it.
    const timer = setTimeout(() => child.kill("SIGKILL"), 120_000);
    const ms = await new Promise((resolve, reject) => {
      let seen = "";
      child.stdout.on("data", (d) => {
        seen += d;
        if (seen.includes('"id":"ready"')) resolve(performance.now() - started);
      });
      child.on("close", (code) => reject(new Error(`pi exited (${code}) before it answered`)));
    });
    clearTimeout(timer);
    child.stdin.end();
    await new Promise((resolve) => child.on("close", resolve));
    return { ms };
  };
  const [plain, [ours]] = await interleaved(Math.max(reps, 7), ready([piCli, ...piArgs]), [ready([launcher, ...piArgs])]);
  row("pi-start", "pi-start: pi resuming a 2 MB session, spawn to its first answer (RPC mode)", pick(plain, "ms"), pick(ours, "ms"), "ms", "pi-sessiond-pi against plain pi; target: within 1.15× of plain pi (ratio ≥ 0.87)");
}

// ---------------------------------------------------------------------------------------------------------------
// The usage overview (issue 22): every session's tokens and cost by day on the 3,000-session root, pi's
// SessionManager in Node (tests/conformance/usage.mjs) against `pi-sessiond usage --by day --json`; both must
// give the same rows.
if (wanted("usage")) {
  const agent = catalog(3000, 300e6);
  console.error("usage: tokens and cost by day of 3,000 sessions");
  execFileSync("sh", ["-c", `find '${agent}/sessions' -type f -exec cat {} + > /dev/null`]);
  const piRun = () => json(process.execPath, ["--max-old-space-size=8192", new URL("./pi-ops.mjs", import.meta.url).pathname, "usage", agent]);
  // Ours through a catalog index of its own: the first run fills its usage memo (cold), the next ones read it.
  const index = join(data, "usage-index.sqlite");
  const dropIndex = () => ["", "-wal", "-shm"].forEach((x) => rmSync(index + x, { force: true }));
  const oursRun = () => {
    const t = performance.now();
    const rows = json(bin, ["--agent-dir", agent, "--index", index, "usage", "--by", "day", "--json"]);
    return { ms: performance.now() - t, rows };
  };
  dropIndex();
  const cold = oursRun();
  const [pi, [ours]] = await interleaved(Math.min(reps, 3), piRun, [oursRun]);
  const same = [cold, ...ours].every((o) => JSON.stringify(o.rows) === JSON.stringify(pi[0].rows));
  if (!same) throw new Error("pi-sessiond usage and pi's sums differ on the 3,000-session root");
  row("usage", "usage by day of 3,000 sessions (357 MB), first (memo filled)", pick(pi, "coldMs"), cold.ms, "ms", "pi: listAll + open each; ours: the whole command, index built");
  row("usage", "usage by day of 3,000 sessions (357 MB), warm", pick(pi, "warmMs"), pick(ours, "ms"), "ms", `ours: the whole command, the memo answering; ${cold.rows.length} days, same rows as pi; target ≥ 20×`);
  dropIndex();
}

// ---------------------------------------------------------------------------------------------------------------
// The web view (issue 15): a session of 5,200 entries opened in Debian's headless Chromium, from the click on its
// name to its tree drawn (skeleton rows only; bodies come as rows scroll into view). pi has no live view to set
// beside it: its nearest thing, `--export` HTML, is a file written once.
if (wanted("web")) {
  const { createRequire } = await import("node:module");
  const { chromium } = createRequire(join(import.meta.dirname, "../tests/web/package.json"))("playwright-core");
  const { bigSession } = await import("../tests/web/gen.mjs");
  const n = 5200;
  const agent = join(data, "web-agent");
  const project = join(agent, "sessions", "--work-big-app--");
  const file = join(project, "2026-01-02T00-00-00-000Z_0194aaaa-0000-7000-8000-00000000b16b.jsonl");
  if (!existsSync(file)) {
    mkdirSync(project, { recursive: true });
    writeFileSync(file, bigSession(n, "0194aaaa-0000-7000-8000-00000000b16b"));
  }
  const server = spawn(bin, ["--agent-dir", agent, "web", "--port", "0"], { stdio: ["ignore", "pipe", "inherit"] });
  const url = await new Promise((ok) => {
    let out = "";
    server.stdout.on("data", (d) => {
      out += d;
      if (out.includes("\n")) ok(out.slice(0, out.indexOf("\n")));
    });
  });
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu"],
  });
  const treeMs = [];
  const wallMs = [];
  const listMs = [];
  for (let r = 0; r < reps; r++) {
    const page = await browser.newPage({ viewport: { width: 1400, height: 860 } });
    const t0 = performance.now();
    await page.goto(url);
    await page.waitForSelector(`.session[data-path="${file}"]`);
    listMs.push(performance.now() - t0);
    const t1 = performance.now();
    await page.click(`.session[data-path="${file}"]`);
    await page.waitForSelector('body[data-state="ready"] .row');
    wallMs.push(performance.now() - t1);
    treeMs.push(Number(await page.getAttribute("body", "data-tree-ms")));
    await page.close();
  }
  server.kill("SIGTERM");

  // Issue 22: `export --html` of the 40 MB session against pi's own `--export` of it (pi 1.6.0 on tests/pi's
  // Node 22), interleaved; each command's peak RSS from GNU time. Then each file opened offline in Chromium: ours
  // until its tree and the first piece of its transcript are drawn, pi's until its load event.
  const piBin = join(import.meta.dirname, "../tests/pi/node_modules/.bin");
  const piHome = join(data, "pi-export-home");
  mkdirSync(join(piHome, "agent"), { recursive: true });
  const piEnv = { ...process.env, PATH: `${piBin}:${process.env.PATH}`, PI_OFFLINE: "1", HOME: piHome, PI_CODING_AGENT_DIR: join(piHome, "agent") };
  const exports = join(data, "exports");
  mkdirSync(exports, { recursive: true });
  const piOut = join(exports, "pi-export.html");
  const ourOut = join(exports, "pi-sessiond-export.html");
  const timed = (cmd, argv, env) => {
    const t = performance.now();
    const r = spawnSync("/usr/bin/time", ["-f", "%M", cmd, ...argv], { env, encoding: "utf8", maxBuffer: 1 << 26 });
    const ms = performance.now() - t;
    if (r.status !== 0) throw new Error(`${cmd} ${argv.join(" ")} failed: ${r.stderr}`);
    return { ms, peakRssKiB: Number(r.stderr.trim().split("\n").pop()) };
  };
  const [piExports, [ourExports]] = await interleaved(
    Math.min(reps, 3),
    async () => timed(join(piBin, "pi"), ["--export", session40, piOut], piEnv),
    [async () => timed(bin, ["--agent-dir", agent, "export", session40, "--html", "-o", ourOut])],
  );
  const sizes = `files: ours ${fmt(statSync(ourOut).size, "B")}, pi's ${fmt(statSync(piOut).size, "B")}`;
  row("web", "export --html of the 40 MB session (pi: pi --export)", pick(piExports, "ms"), pick(ourExports, "ms"), "ms", `the whole command; ${sizes}`);
  row("web", "export --html of the 40 MB session: peak RSS", pick(piExports, "peakRssKiB"), pick(ourExports, "peakRssKiB"), "KiB", "GNU time's maximum resident set");
  const offline = await browser.newContext({ viewport: { width: 1400, height: 860 }, offline: true });
  const openMs = [];
  for (let r = 0; r < reps; r++) {
    const page = await offline.newPage();
    const t = performance.now();
    await page.goto(`file://${ourOut}`);
    await page.waitForSelector('body[data-state="ready"] .row');
    await page.waitForSelector('#detail .entry[data-state="filled"]');
    openMs.push(performance.now() - t);
    await page.close();
  }
  // pi's page takes tens of seconds: opened once, given 3 minutes.
  const piPage = await offline.newPage();
  const tPi = performance.now();
  const piLoaded = await piPage.goto(`file://${piOut}`, { waitUntil: "load", timeout: 180000 }).then(() => performance.now() - tPi, () => undefined);
  await piPage.close();
  await offline.close();
  row("web", "the 40 MB session's export opened offline in Chromium", piLoaded, median(openMs), "ms", "ours: until its tree and the first transcript piece are drawn (target < 3 s); pi's: until its load event, once");
  await browser.close();
  row("web", "web view: the page loaded and the sessions listed", undefined, median(listMs), "ms", "headless Chromium");
  row("web", `web view: a ${n.toLocaleString("en")}-entry session's tree shown after the click`, undefined, median(treeMs), "ms", `the page's own clock; ${fmt(median(wallMs), "ms")} by playwright's, round trips included`);
}

// ---------------------------------------------------------------------------------------------------------------
if (wanted("mirror")) {
  // Issue 13: a host keeps a mirror (a skeleton snapshot, then deltas) instead of reading again per change.
  console.error("a live tree view of the 40 MB session, and appends in batches");
  const dir = join(data, "mirror");
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  /** What a tree view needs from a skeleton mirror: each entry's children, by parent id. */
  const treeIndex = (entries) => {
    const children = new Map();
    for (const e of entries) addToTree(children, e);
    return children;
  };
  const addToTree = (children, e) => {
    const list = children.get(e.parentId ?? null);
    if (list) list.push(e.id);
    else children.set(e.parentId ?? null, [e.id]);
  };
  const piOps = new URL("./pi-ops.mjs", import.meta.url).pathname;

  // (a) Open to a usable tree: pi's open() then getTree(), against session/open with a skeleton snapshot and the
  // host's own index of it.
  const [pi, [ours]] = await interleaved(reps, () => json(process.execPath, [piOps, "open", session40]), [
    async () => {
      const sc = new Sidecar(bin, ["--no-index"]);
      const before = sc.bytesIn;
      const [ms, size] = await time(async () => {
        const st = await sc.call("session/open", { path: session40, snapshot: "skeleton" });
        return treeIndex(st.snapshot.entries).size;
      });
      const bytes = sc.bytesIn - before;
      await sc.close();
      return { ms, bytes, size };
    },
  ]);
  const piTreeMs = median(pi.map((p) => p.openMs + p.treeMs));
  row("mirror", "(a) open 40 MB to a usable tree: pi open() + getTree() vs session/open {snapshot: skeleton} + host index", piTreeMs, pick(ours, "ms"), "ms", "ours over the pipe, JSON.parse included");
  row("mirror", "(a) bytes on the pipe for that open", undefined, pick(ours, "bytes"), "B", `${pick(ours, "size")} parents in the index, ${pi[0].entryCount} entries`);

  // (b) A live tree view of the same session while another process appends to it: per append, the time from the
  // write to the delta applied in the host's mirror, and the bytes of that delta. Every tenth append carries 1 MB
  // of tool output (a skeleton's size does not follow its body's).
  const live = join(dir, "live-40MB.jsonl");
  execFileSync("cp", [session40, live]);
  const sc = new Sidecar(bin, ["--no-index"]);
  const st = await sc.call("session/open", { path: live, snapshot: "skeleton", watch: true });
  const mirror = st.snapshot.entries;
  const initial = mirror.length;
  const children = treeIndex(mirror);
  let mirrorSeq = st.seq;
  let leaf = st.leafId;
  let heard;
  let lastBytes = 0;
  sc.onNotification((m, bytes) => {
    if (m.method !== "session/changed" || m.params.handle !== st.handle) return;
    if (m.params.seq !== mirrorSeq + 1 || m.params.change.kind !== "append") throw new Error(`unexpected change ${JSON.stringify(m.params).slice(0, 200)}`);
    for (const e of m.params.change.entries) {
      mirror.push(e);
      addToTree(children, e);
    }
    mirrorSeq = m.params.seq;
    leaf = m.params.leafId;
    lastBytes = bytes;
    heard?.();
  });
  const small = "y".repeat(4000);
  const large = "z".repeat(1 << 20);
  const perAppend = [];
  const deltaBytes = [];
  const n = quick ? 50 : 200;
  for (let i = 0; i < n; i++) {
    const id = `live${String(i).padStart(6, "0")}`;
    const text = i % 10 === 9 ? large : small;
    const line = JSON.stringify({ type: "message", id, parentId: leaf, timestamp: new Date(1767225600000 + i).toISOString(), message: { role: "toolResult", toolCallId: "c", toolName: "bash", content: [{ type: "text", text }], isError: false, timestamp: i } });
    const arrived = new Promise((r) => (heard = r));
    const t = performance.now();
    appendFileSync(live, line + "\n");
    await arrived;
    perAppend.push(performance.now() - t);
    deltaBytes.push(lastBytes);
  }
  if (mirror.length !== initial + n) throw new Error(`the mirror has ${mirror.length} entries`);
  // Before issue 13 a tree view read the whole tree again per change.
  const beforeRead = sc.bytesIn;
  const [rereadMs] = await time(() => sc.call("session/getTree", { handle: st.handle }));
  const rereadBytes = sc.bytesIn - beforeRead;
  await sc.close();
  const piGetTreeMs = median(pi.map((p) => p.treeMs));
  row("mirror", "(b) live tree per external append, p50: pi getTree() in-process vs delta → mirror", piGetTreeMs, median(perAppend), "ms", "target ≤ 5 ms; ours: file write → inotify → read → notification → applied");
  row("mirror", "(b) live tree per external append, p99", piGetTreeMs, quantile(perAppend, 0.99), "ms");
  row("mirror", "(b) bytes on the pipe per external append, max", undefined, Math.max(...deltaBytes), "B", "target ≤ 64 KiB; every tenth append holds 1 MB");
  row("mirror", "(b) before: getTree over the pipe again per change", piGetTreeMs, rereadMs, "ms", `${fmt(rereadBytes, "B")} per change`);

  // (c) A host's per-turn work on the 40 MB session: append the user's prompt, the assistant's message with a tool
  // call and the tool's result, then build the context. pi: its SessionManager in-process. Ours: a full
  // MirroredSession (TypeScript client), the three appends awaited one by one or sent as one appendBatch, the
  // context built from the mirror, which holds the appends once their answers are in.
  const turns = quick ? 20 : 50;
  const copy = (name) => {
    const path = join(dir, name);
    execFileSync("cp", [session40, path]);
    return path;
  };
  const mirrorTurns = (durability, batch) => async () => {
    const path = copy(`turn-${durability}-${batch ? "batch" : "each"}.jsonl`);
    const host = await spawnSessiond({ binary: bin, args: ["--no-index", "--durability", durability], stderr: "ignore" });
    const mirror = await MirroredSession.attach(await host.openSession(path, { snapshot: "full" }));
    const perTurn = [];
    let context;
    for (let i = 0; i < turns; i++) {
      const t = performance.now();
      const messages = hostTurn(i);
      if (batch) await mirror.remote.appendBatch(messages.map((message) => ({ method: "session/appendMessage", params: { message } })));
      else for (const message of messages) await mirror.remote.appendMessage(message);
      context = mirror.buildSessionContext();
      perTurn.push(performance.now() - t);
    }
    await mirror.close();
    await host.close();
    // The mirror's context after the last turn is pi's own on the file the turns wrote.
    deepStrictEqual(context, SessionManager.open(path).buildSessionContext());
    return { turnMs: median(perTurn) };
  };
  const turnModes = [["none", false], ["none", true], ["entry", false], ["entry", true]];
  const [piTurns, oursTurns] = await interleaved(
    Math.min(reps, 3),
    () => json(process.execPath, [piOps, "turn", copy("turn-pi.jsonl"), String(turns)]),
    turnModes.map(([d, batch]) => mirrorTurns(d, batch)),
  );
  for (const [i, [d, batch]] of turnModes.entries()) {
    const how = batch ? "one appendBatch of 3" : "3 appends awaited in turn";
    const note = `${d === "none" ? "no fsync, like pi" : batch ? "one fsync per turn" : "an fsync per append"}; pi's context ${fmt(pick(piTurns, "contextMs"), "ms")} of it; mirror's context equals pi's, checked`;
    row("mirror", `(c) a host's turn on the 40 MB session: pi in-process vs a mirror, ${how}, --durability ${d}`, pick(piTurns, "turnMs"), pick(oursTurns[i], "turnMs"), "ms", note);
  }

  // (d) 10,000 appends in batches of 100 and 1,000 (all batches sent at once), against pi's appendMessage loop.
  const count = quick ? 2000 : 10000;
  let k = 0;
  const fresh = () => {
    const d = join(dir, `batch-${k++}`);
    mkdirSync(d, { recursive: true });
    return d;
  };
  const message = (i) => ({ role: "user", content: `message ${i}`, timestamp: 1767225600000 + i });
  const batched = (durability, size) => async () => {
    const sc = new Sidecar(bin, ["--no-index", "--durability", durability]);
    const created = await sc.call("session/create", { cwd: "/bench", sessionDir: fresh() });
    const [ms] = await time(() =>
      Promise.all(
        Array.from({ length: count / size }, (_, b) =>
          sc.call("session/appendBatch", {
            handle: created.handle,
            ops: Array.from({ length: size }, (_, j) => ({ method: "session/appendMessage", params: { message: message(b * size + j) } })),
          }),
        ),
      ),
    );
    await sc.close();
    return { ms };
  };
  const modes = [["none", 100], ["none", 1000], ["entry", 100], ["entry", 1000]];
  const [piAppends, oursBatched] = await interleaved(
    Math.min(reps, 3),
    () => json(process.execPath, [piOps, "append", fresh(), String(count)]),
    modes.map(([d, size]) => batched(d, size)),
  );
  for (const [i, [d, size]] of modes.entries()) {
    const note = d === "none" ? "no fsync, like pi" : "one fsync per batch";
    row("mirror", `(d) append ${count}: pi appendMessage() vs appendBatch of ${size}, pipelined, --durability ${d}`, pick(piAppends, "appendMs"), pick(oursBatched[i], "ms"), "ms", note);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// pi itself, plain against on pi-sessiond, on sessions of every size (issue 20): real pi 1.6.0's command in RPC
// mode with the faux provider resumes a session pi's own SessionManager wrote (bench/gen-pi-big.mjs), and answers
// prompts. Only when asked for by name (--only pi-big): the big sessions take about 5 GB of disk, written into
// $data/pi-big and deleted at the end (--quick: the 2 MB and 128 MB text sessions only, also deleted).
if (only?.includes("pi-big")) {
  const node22 = join(new URL("..", import.meta.url).pathname, "tests/pi/node_modules/.bin/node");
  const here = new URL(".", import.meta.url).pathname;
  const dir = join(data, "pi-big");
  mkdirSync(dir, { recursive: true });
  const MB = 1_000_000;
  const sizes = [
    ["2 MB text", 2 * MB, 0],
    ["128 MB text", 128 * MB, 0],
    ...(quick ? [] : [["500 MB images", 500 * MB, 1270], ["1.3 GB images", 1300 * MB, 1270], ["2.7 GB images", 2700 * MB, 1270]]),
  ];
  const prompts = 4;
  try {
    for (const [name, bytes, imageKiB] of sizes) {
      const file = join(dir, `${name.replace(/[^a-z0-9]+/gi, "-")}.jsonl`);
      const made = JSON.parse(execFileSync(node22, [join(here, "gen-pi-big.mjs"), file, "--bytes", String(bytes), "--image-kib", String(imageKiB)], { encoding: "utf8" }));
      console.error(`  pi-big: ${name}: ${made.entries} entries, ${made.turns} turns, ${fmt(made.bytes, "B")}`);
      const side = (which) => () => {
        const r = JSON.parse(execFileSync(node22, [join(here, "pi-big.mjs"), which, file, String(prompts)], { encoding: "utf8", env: { ...process.env, PI_SESSIOND_BIN: bin }, maxBuffer: 1 << 24 }));
        // The first prompt also pays for what pi sets up once (tools, the first write); the rest are steady state.
        return { ...r, promptMs: median(r.promptMs.slice(1)), totalKiB: r.peakRssKiB + r.sidecarPeakRssKiB };
      };
      // The big sessions once per side (minutes each for plain pi); the small ones as often as the others.
      const n = bytes > 200 * MB ? 1 : Math.min(reps, 3);
      const [own, [drop]] = await interleaved(n, side("own"), [side("sessiond")]);
      row("pi-big", `pi-big ${name}: ready (start to a usable prompt)`, pick(own, "readyMs"), pick(drop, "readyMs"), "ms", `${made.entries} entries; ${n} run${n > 1 ? "s" : ""} per side`);
      row("pi-big", `pi-big ${name}: time per further prompt`, pick(own, "promptMs"), pick(drop, "promptMs"), "ms", `median of prompts 2–${prompts}`);
      row("pi-big", `pi-big ${name}: peak RSS of pi's process`, pick(own, "peakRssKiB"), pick(drop, "peakRssKiB"), "KiB");
      row("pi-big", `pi-big ${name}: peak RSS, pi's process + its sidecar`, pick(own, "totalKiB"), pick(drop, "totalKiB"), "KiB", `sidecar alone: ${fmt(pick(drop, "sidecarPeakRssKiB"), "KiB")}`);
      rmSync(file, { force: true });
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The soak (issue 19): tests/it/soak.rs's mixed load with a raw appender beside it, on the release binary, for an
// hour (--soak-minutes N or SOAK_MINUTES); RSS and threads over time. Only when asked for by name (--only soak).
if (only?.includes("soak")) {
  const minutes = Number(opt("--soak-minutes", process.env.SOAK_MINUTES ?? 60));
  const built = execFileSync("cargo", ["test", "--release", "--test", "it", "--no-run", "--message-format=json"], { encoding: "utf8", maxBuffer: 1 << 28 });
  const it = built.split("\n").filter(Boolean).map((l) => JSON.parse(l)).find((m) => m.reason === "compiler-artifact" && m.target?.name === "it" && m.executable)?.executable;
  const samplesPath = join(data, "soak-samples.jsonl");
  rmSync(samplesPath, { force: true });
  console.error(`  soak: ${minutes} min of mixed load on ${bin}`);
  let verdict = "its checks held (entries, parents, handles, RSS and threads)";
  try {
    execFileSync(it, ["soak::", "--nocapture", "--test-threads=1"], {
      stdio: ["ignore", "inherit", "inherit"],
      env: { ...process.env, PI_SESSIOND_SOAK_BIN: bin, PI_SESSIOND_SOAK_SECS: String(Math.round(minutes * 60)), PI_SESSIOND_SOAK_SAMPLES: samplesPath },
    });
  } catch {
    verdict = "ITS CHECKS FAILED (the test's output above says which)";
  }
  const samples = readFileSync(samplesPath, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
  const last = samples[samples.length - 1];
  const warm = samples.find((x) => x.secs >= last.secs / 10) ?? samples[0];
  const after = samples.filter((x) => x.secs >= warm.secs);
  const at = (f) => samples.find((x) => x.secs >= f * last.secs) ?? last;
  const series = [0.1, 0.25, 0.5, 0.75, 1].map((f) => at(f)).map((x) => `${(x.secs / 60).toFixed(0)} min ${fmt(x.rssKiB, "KiB")}/${x.threads}`).join(", ");
  const rate = Math.round(last.requests / last.secs);
  row("soak", `soak ${minutes} min: RSS after warm-up (${(warm.secs / 60).toFixed(1)} min) → end`, undefined, last.rssKiB, "KiB", `${fmt(warm.rssKiB, "KiB")} at warm-up, most ${fmt(Math.max(...after.map((x) => x.rssKiB)), "KiB")}; ${last.requests} requests (${rate}/s); RSS/threads over time: ${series}`);
  const span = (k) => `${Math.min(...after.map((x) => x[k]))}–${Math.max(...after.map((x) => x[k]))}`;
  row("soak", `soak ${minutes} min: threads after warm-up, fewest–most`, undefined, span("threads"), "", `descriptors ${span("fds")}; ${verdict}`);
}

// ---------------------------------------------------------------------------------------------------------------
const cpu = readFileSync("/proc/cpuinfo", "utf8").match(/model name\s*:\s*(.*)/)?.[1] ?? "unknown CPU";
const cores = readFileSync("/proc/cpuinfo", "utf8").match(/^processor/gm)?.length;
const header = `pi 1.6.0 (Node ${process.version}) vs pi-sessiond, ${cores} cores (${cpu}), medians of ${reps} interleaved runs`;
const table = [
  "| benchmark | pi 1.6.0 | pi-sessiond | pi / pi-sessiond | note |",
  "|---|---:|---:|---:|---|",
  ...rows.map((r) => {
    const f = (v) => (v === undefined ? "—" : fmt(v, r.unit));
    return `| ${r.name} | ${f(r.pi)} | ${f(r.ours)} | ${r.ratio ? `${r.ratio.toFixed(r.ratio < 10 ? 2 : 0)}×` : "—"} | ${r.note} |`;
  }),
];
writeFileSync(join(data, "results.json"), JSON.stringify({ header, rows }, null, 2));
console.log(header);
console.log(table.join("\n"));
