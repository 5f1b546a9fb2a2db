// Listing and searching a sessions root: pi 1.6.0's SessionManager.list()/listAll() in-process against
// pi-sessiond's sessions/list, sessions/listAll and sessions/search over JSON-RPC, as a host would call them.
// Every pi-sessiond listing is checked to be exactly pi's result before its time is reported.
//
// Usage: node bench/catalog.mjs AGENT_DIR CWD BINARY INDEX_PATH
import { spawn } from "node:child_process";
import { rmSync, statSync, readdirSync, appendFileSync } from "node:fs";
import { deepStrictEqual } from "node:assert";

const [agentDir, cwd, binary, indexPath] = process.argv.slice(2);
process.env.PI_CODING_AGENT_DIR = agentDir;
const { SessionManager } = await import(
  new URL("../tests/conformance/node_modules/@earendil-works/pi-coding-agent/dist/core/session-manager.js", import.meta.url)
);

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const ms = (x) => Math.round(x * 10) / 10;
const time = async (f) => {
  const t = performance.now();
  const value = await f();
  return [performance.now() - t, value];
};

class Sidecar {
  constructor(args) {
    this.child = spawn(binary, args, { stdio: ["pipe", "pipe", "inherit"] });
    this.pending = new Map();
    this.next = 1;
    // Frames are LF-delimited; collect chunks and split on 0x0A (readline's string building is slow on the
    // multi-megabyte lines a full listing makes).
    let chunks = [];
    this.child.stdout.on("data", (chunk) => {
      let start = 0;
      let nl;
      while ((nl = chunk.indexOf(10, start)) !== -1) {
        chunks.push(chunk.subarray(start, nl));
        this.onLine(Buffer.concat(chunks).toString("utf8"));
        chunks = [];
        start = nl + 1;
      }
      if (start < chunk.length) chunks.push(chunk.subarray(start));
    });
  }
  onLine(line) {
    const msg = JSON.parse(line);
    if (msg.id !== undefined && this.pending.has(msg.id)) {
      const { resolve, reject } = this.pending.get(msg.id);
      this.pending.delete(msg.id);
      msg.error ? reject(new Error(JSON.stringify(msg.error))) : resolve(msg.result);
    }
  }
  call(method, params) {
    const id = this.next++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.child.stdin.write(JSON.stringify({ jsonrpc: "2.0", id, method, params }) + "\n");
    });
  }
  close() {
    this.child.stdin.end();
  }
}

const sessionsRoot = `${agentDir}/sessions`;
let files = 0;
let bytes = 0;
for (const d of readdirSync(sessionsRoot)) {
  for (const f of readdirSync(`${sessionsRoot}/${d}`)) {
    files++;
    bytes += statSync(`${sessionsRoot}/${d}/${f}`).size;
  }
}
const out = { sessions: files, sessionBytes: bytes };

// pi: every call reads every file.
const piList = [];
let piResult;
for (let i = 0; i < 3; i++) {
  const [t, v] = await time(() => SessionManager.list(cwd));
  piList.push(t);
  piResult = v;
}
const [piAllMs, piAll] = await time(() => SessionManager.listAll());
const expected = JSON.parse(JSON.stringify(piResult));
const expectedAll = JSON.parse(JSON.stringify(piAll));
out.listed = expected.length;
out.piListMs = ms(median(piList));
out.piListAllMs = ms(piAllMs);

for (const suffix of ["", "-wal", "-shm"]) rmSync(indexPath + suffix, { force: true });
const sc = new Sidecar(["--agent-dir", agentDir, "--index", indexPath]);
await sc.call("initialize", {});

// Cold: the index is empty, so the first listing reads every file and fills it.
const [coldMs, cold] = await time(() => sc.call("sessions/list", { cwd }));
deepStrictEqual(cold, expected);
out.coldListMs = ms(coldMs);
const warm = [];
for (let i = 0; i < 7; i++) {
  const [t, v] = await time(() => sc.call("sessions/list", { cwd }));
  deepStrictEqual(v, expected);
  warm.push(t);
}
out.warmListMs = ms(median(warm));
out.warmSpeedup = Math.round(out.piListMs / out.warmListMs);
out.coldVsPi = Math.round((out.piListMs / out.coldListMs) * 100) / 100;
out.listBytes = JSON.stringify(expected).length;
// The same listing without allMessagesText (every user and assistant text, most of the bytes).
const lean = [];
const withoutText = expected.map(({ allMessagesText, ...rest }) => rest);
for (let i = 0; i < 7; i++) {
  const [t, v] = await time(() => sc.call("sessions/list", { cwd, includeAllMessagesText: false }));
  deepStrictEqual(v, withoutText);
  lean.push(t);
}
out.warmListWithoutTextMs = ms(median(lean));
out.warmWithoutTextSpeedup = Math.round(out.piListMs / out.warmListWithoutTextMs);

const [coldAllMs, coldAll] = await time(() => sc.call("sessions/listAll", {}));
deepStrictEqual(coldAll, expectedAll);
const warmAll = [];
for (let i = 0; i < 5; i++) {
  const [t, v] = await time(() => sc.call("sessions/listAll", {}));
  deepStrictEqual(v, expectedAll);
  warmAll.push(t);
}
out.listAllMs = { firstAfterList: ms(coldAllMs), warm: ms(median(warmAll)) };

// One session grows: the next listing reads only the new bytes (and is still pi's answer).
const grown = expected[0].path;
appendFileSync(
  grown,
  JSON.stringify({
    type: "message",
    id: "beefcafe",
    parentId: null,
    timestamp: new Date(Date.UTC(2027, 0, 1)).toISOString(),
    message: { role: "user", content: "a freshly appended zanzibar question", timestamp: Date.UTC(2027, 0, 1) },
  }) + "\n",
);
const [afterAppendMs, afterAppend] = await time(() => sc.call("sessions/list", { cwd }));
deepStrictEqual(afterAppend, JSON.parse(JSON.stringify(await SessionManager.list(cwd))));
out.listAfterAppendMs = ms(afterAppendMs);

// Search: the first one extracts every session's text into the index; later ones query it.
const [firstSearchMs, firstHits] = await time(() => sc.call("sessions/search", { query: "tokenizer" }));
out.firstSearchMs = ms(firstSearchMs);
out.firstSearchHits = firstHits.length;
const queries = ["tokenizer", "parser crash fix", '"borrow lifetime"', "re:mutex\\s+leak", "zanzibar", "qqqxyz"];
out.searchMs = {};
for (const q of queries) {
  const ts = [];
  let hits;
  for (let i = 0; i < 5; i++) {
    const [t, h] = await time(() => sc.call("sessions/search", { query: q, limit: 50 }));
    ts.push(t);
    hits = h;
  }
  out.searchMs[q] = { ms: ms(median(ts)), hits: hits.length };
}
const size = (p) => {
  try {
    return statSync(p).size;
  } catch {
    return 0;
  }
};
out.indexBytes = size(indexPath) + size(indexPath + "-wal");
out.indexToSessions = Math.round((out.indexBytes / bytes) * 1000) / 1000;
sc.close();
console.log(JSON.stringify(out, null, 2));
