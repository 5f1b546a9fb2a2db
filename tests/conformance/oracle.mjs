// pi 1.6.0's own SessionManager as the oracle for pi-sessiond's conformance tests.
//
// Reads a JSON request on stdin and prints a JSON answer on stdout:
//   {"command": "reads", "files": [...]}                 -> pi's reads after SessionManager.open(file), per file
//   {"command": "eachRead", "files": [...]}              -> the same, each read on its own: {open: {error}} when the
//        open throws, else {reads: {name: {ok: value} | {undefined: true} | {error}}}
//   {"command": "list", "calls": [{kind, cwd, dir, agentDir}]} -> list / listAll / findById / findMostRecentSession
//   {"command": "write", "file": f, "count": n, "delayMs": d, "text": t}
//        -> pi appends n messages to an existing session file, one every d ms (a live pi writing a session)
//   {"command": "usage", "agentDir": d, "by": "day"|"model"|"project", "since": ms|null}
//        -> tokens and cost of every session pi's listAll finds (opened in path order), grouped, as pi's
//           getSessionStats walks entries and sums them (addUsageToTotals), keyed as getUsageCostBreakdown keys
//           them; with "by": "model", pi's own getUsageCostBreakdown over the same entries rides along
//   {"command": "scenarios", "root": dir, "scenarios": [{name, ops}]}
//        -> runs each scenario's operations on pi with deterministic ids and clock, returns every operation's
//           result, the live reads at checkpoints, and every file the scenario left behind (base64).
//
// Randomness and time are replaced (crypto.randomUUID, crypto.getRandomValues, Date) by the same deterministic
// sources the Rust side uses (tests/it/support/oracle.rs), so both write the very same bytes.

import { createRequire, syncBuiltinESMExports } from "node:module";
import { readFileSync, readdirSync, statSync, writeFileSync, mkdirSync, utimesSync, rmSync } from "node:fs";
import { join, relative } from "node:path";

const require = createRequire(import.meta.url);
const nodeCrypto = require("node:crypto");

// ---- deterministic sources ------------------------------------------------------------------------------------
function mulberry32(seed) {
  let a = seed | 0;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return (t ^ (t >>> 14)) >>> 0;
  };
}
let uuidStream = mulberry32(1);
let bytesStream = mulberry32(2);
function nextBytes(stream, n) {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i += 4) {
    const v = stream();
    for (let k = 0; k < 4 && i + k < n; k++) out[i + k] = (v >>> (8 * k)) & 0xff;
  }
  return out;
}
function deterministicUuid() {
  const b = nextBytes(uuidStream, 16);
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}
nodeCrypto.randomUUID = deterministicUuid;
syncBuiltinESMExports();
globalThis.crypto.getRandomValues = (arr) => {
  arr.set(nextBytes(bytesStream, arr.length));
  return arr;
};
const RealDate = Date;
let fakeNow = RealDate.UTC(2026, 0, 1, 0, 0, 0, 0);
class FakeDate extends RealDate {
  constructor(...args) {
    if (args.length === 0) super(fakeNow);
    else super(...args);
  }
  static now() {
    return fakeNow;
  }
}
globalThis.Date = FakeDate;

// The package's index needs Node >= 22.19; the session manager module itself loads on Node 20.
const { SessionManager, getDefaultSessionDir, findMostRecentSession } = await import(
  new URL("./node_modules/@earendil-works/pi-coding-agent/dist/core/session-manager.js", import.meta.url)
);

// ---- reads ----------------------------------------------------------------------------------------------------
const READS = {
  header: (m) => m.getHeader(),
  entries: (m) => m.getEntries(),
  leafId: (m) => m.getLeafId(),
  tree: (m) => m.getTree(),
  branch: (m) => m.getBranch(),
  contextEntries: (m) => m.buildContextEntries(),
  projection: (m) => m.buildSessionProjection(),
  context: (m) => m.buildSessionContext(),
  sessionName: (m) => m.getSessionName(),
  sessionId: (m) => m.getSessionId(),
  cwd: (m) => m.getCwd(),
  entryCount: (m) => m.getEntryCount(),
};
function readsOf(m) {
  return Object.fromEntries(Object.entries(READS).map(([name, read]) => [name, read(m)]));
}
// Each read on its own: {ok: value}, {undefined: true}, or {error} when that read throws.
function eachReadOf(m) {
  const out = {};
  for (const [name, read] of Object.entries(READS)) {
    try {
      const value = read(m);
      out[name] = value === undefined ? { undefined: true } : { ok: value };
    } catch (e) {
      out[name] = { error: String(e?.message ?? e) };
    }
  }
  return out;
}
function attempt(fn) {
  try {
    return { ok: fn() ?? null };
  } catch (e) {
    return { error: String(e?.message ?? e) };
  }
}

// ---- scenarios ------------------------------------------------------------------------------------------------
function runScenario(root, scenario) {
  const dir = join(root, scenario.name);
  mkdirSync(dir, { recursive: true });
  const refs = new Map();
  const sub = (v) => {
    if (typeof v === "string") return v.replaceAll("$ROOT", dir);
    if (Array.isArray(v)) return v.map(sub);
    if (v && typeof v === "object") {
      if (typeof v.$ref === "string") return refs.get(v.$ref);
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, sub(x)]));
    }
    return v;
  };
  let m = null;
  const results = [];
  for (const raw of scenario.ops) {
    const op = sub(raw);
    const r = attempt(() => {
      switch (op.op) {
        case "tick":
          fakeNow += op.ms ?? 1000;
          return null;
        case "writeFile":
          mkdirSync(join(op.path, ".."), { recursive: true });
          writeFileSync(op.path, Buffer.from(op.base64, "base64"));
          return null;
        case "touch":
          utimesSync(op.path, op.mtimeMs / 1000, op.mtimeMs / 1000);
          return null;
        case "remove":
          rmSync(op.path, { recursive: true, force: true });
          return null;
        case "create":
          m = SessionManager.create(op.cwd, op.dir, op.options);
          return m.getSessionFile() ?? null;
        case "open":
          m = SessionManager.open(op.path, op.dir, op.cwdOverride);
          return m.getSessionFile() ?? null;
        case "continueRecent":
          m = SessionManager.continueRecent(op.cwd, op.dir);
          return m.getSessionFile() ?? null;
        case "inMemory":
          m = SessionManager.inMemory(op.cwd, op.options, op.entries);
          return m.getSessionId();
        case "forkFrom":
          m = SessionManager.forkFrom(op.source, op.targetCwd, op.dir, op.options);
          return m.getSessionFile() ?? null;
        case "newSession":
          return m.newSession(op.options) ?? null;
        case "setSessionFile":
          m.setSessionFile(op.path);
          return null;
        case "appendMessage":
          return m.appendMessage(op.message);
        case "appendThinkingLevelChange":
          return m.appendThinkingLevelChange(op.thinkingLevel);
        case "appendModelChange":
          return m.appendModelChange(op.provider, op.modelId);
        case "appendUsage":
          return m.appendUsage(op.kind, op.provider, op.model, op.usage, op.note);
        case "appendCompaction":
          return m.appendCompaction(op.summary, op.firstKeptEntryId, op.tokensBefore, op.details, op.fromHook, op.usage);
        case "appendCustomEntry":
          return m.appendCustomEntry(op.customType, op.data);
        case "appendSessionInfo":
          return m.appendSessionInfo(op.name);
        case "appendCustomMessageEntry":
          return m.appendCustomMessageEntry(op.customType, op.content, op.display, op.details);
        case "appendContextEdit":
          return m.appendContextEdit(op.targetId, op.replacement);
        case "appendLabelChange":
          return m.appendLabelChange(op.targetId, op.label);
        case "branch":
          m.branch(op.entryId);
          return null;
        case "resetLeaf":
          m.resetLeaf();
          return null;
        case "branchWithSummary":
          return m.branchWithSummary(op.entryId, op.summary, op.details, op.fromHook, op.usage);
        case "createBranchedSession":
          return m.createBranchedSession(op.leafId) ?? null;
        case "reads":
          return readsOf(m);
        case "children":
          return m.getChildren(op.parentId);
        case "getBranch":
          return m.getBranch(op.fromId);
        case "getEntry":
          return m.getEntry(op.id) ?? null;
        case "getLabel":
          return m.getLabel(op.id) ?? null;
        case "state":
          return {
            sessionId: m.getSessionId(),
            sessionFile: m.getSessionFile() ?? null,
            sessionDir: m.getSessionDir(),
            cwd: m.getCwd(),
            persisted: m.isPersisted(),
            leafId: m.getLeafId() ?? null,
          };
        default:
          throw new Error(`unknown op ${op.op}`);
      }
    });
    if (raw.as && r.ok !== undefined) refs.set(raw.as, typeof r.ok === "object" && r.ok !== null ? r.ok.id : r.ok);
    results.push(r);
  }
  const files = {};
  const walk = (d) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else files[relative(dir, p)] = readFileSync(p).toString("base64");
    }
  };
  walk(dir);
  return { results, files };
}

// ---- listing --------------------------------------------------------------------------------------------------
async function listCall(c) {
  if (c.agentDir) process.env.PI_CODING_AGENT_DIR = c.agentDir;
  switch (c.kind) {
    case "list":
      return await SessionManager.list(c.cwd, c.dir);
    case "listAll":
      return await SessionManager.listAll(c.dir);
    case "findById":
      return SessionManager.findById(c.cwd, c.id, c.dir) ?? null;
    case "findMostRecentSession":
      return findMostRecentSession(c.dir, c.cwd) ?? null;
    case "getDefaultSessionDir":
      return getDefaultSessionDir(c.cwd);
    default:
      throw new Error(`unknown call ${c.kind}`);
  }
}

// ---- usage across sessions -----------------------------------------------------------------------------------
const { usageOverview: piUsage } = await import(new URL("./usage.mjs", import.meta.url));
const usageOverview = (r) => piUsage(SessionManager, r);

// ---- main -----------------------------------------------------------------------------------------------------
const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const request = JSON.parse(Buffer.concat(chunks).toString("utf8"));
let answer;
switch (request.command) {
  case "reads":
    answer = request.files.map((f) => attempt(() => readsOf(SessionManager.open(f))));
    break;
  case "eachRead":
    answer = request.files.map((f) => {
      const opened = attempt(() => SessionManager.open(f));
      return opened.error !== undefined ? { open: opened } : { reads: eachReadOf(opened.ok) };
    });
    break;
  case "list":
    answer = [];
    for (const c of request.calls) {
      try {
        answer.push({ ok: (await listCall(c)) ?? null });
      } catch (e) {
        answer.push({ error: String(e?.message ?? e) });
      }
    }
    break;
  case "usage":
    answer = await usageOverview(request);
    break;
  case "scenarios":
    answer = request.scenarios.map((s) => runScenario(request.root, s));
    break;
  case "write": {
    const m = SessionManager.open(request.file);
    const pause = new Int32Array(new SharedArrayBuffer(4));
    answer = [];
    for (let i = 0; i < request.count; i++) {
      const role = i % 2 === 0 ? "user" : "assistant";
      const content = role === "user" ? `${request.text} ${i}` : [{ type: "text", text: `${request.text} ${i}` }];
      answer.push(m.appendMessage({ role, content, timestamp: i }));
      if (request.delayMs) Atomics.wait(pause, 0, 0, request.delayMs);
    }
    break;
  }
  default:
    throw new Error(`unknown command ${request.command}`);
}
process.stdout.write(JSON.stringify(answer));
