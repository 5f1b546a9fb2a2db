// What the benchmark scripts share: a minimal JSON-RPC host for pi-sessiond (LF-delimited frames, split on 0x0A
// bytes — never readline, which also splits on U+2028 and builds strings slowly for multi-megabyte lines), pi's
// SessionManager, and statistics.
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";

/** pi 1.6.0's SessionManager, from the conformance suite's pinned install. */
export async function piSessionManager() {
  const url = new URL(
    "../tests/conformance/node_modules/@earendil-works/pi-coding-agent/dist/core/session-manager.js",
    import.meta.url,
  );
  return (await import(url)).SessionManager;
}

/** A running pi-sessiond. */
export class Sidecar {
  constructor(binary, args = [], env = process.env) {
    this.child = spawn(binary, args, { stdio: ["pipe", "pipe", "inherit"], env });
    this.pending = new Map();
    this.listeners = [];
    this.next = 1;
    /** Bytes received from the sidecar so far (frames and their newlines). */
    this.bytesIn = 0;
    /** When the last frame's last byte arrived (`performance.now()`), before it was parsed. */
    this.frameEndAt = 0;
    let chunks = [];
    this.child.stdout.on("data", (chunk) => {
      this.bytesIn += chunk.length;
      let start = 0;
      let nl;
      while ((nl = chunk.indexOf(10, start)) !== -1) {
        chunks.push(chunk.subarray(start, nl));
        this.frameEndAt = performance.now();
        const frame = Buffer.concat(chunks);
        this.onMessage(JSON.parse(frame.toString("utf8")), frame.length + 1);
        chunks = [];
        start = nl + 1;
      }
      if (start < chunk.length) chunks.push(chunk.subarray(start));
    });
  }

  onMessage(msg, bytes) {
    if (msg.method !== undefined) {
      for (const l of this.listeners) l(msg, bytes);
      return;
    }
    const p = this.pending.get(msg.id);
    if (!p) return;
    this.pending.delete(msg.id);
    msg.error ? p.reject(new Error(`${p.method}: ${JSON.stringify(msg.error)}`)) : p.resolve(msg.result);
  }

  /** Sends a request; resolves with its result. */
  call(method, params = {}) {
    const id = this.next++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, method });
      this.child.stdin.write(JSON.stringify({ jsonrpc: "2.0", id, method, params }) + "\n");
    });
  }

  /** Calls `f(message, bytes)` for every notification (`bytes`: the size of its frame on the pipe). */
  onNotification(f) {
    this.listeners.push(f);
  }

  /** Peak resident memory so far, in KiB (Linux). */
  peakRssKiB() {
    const status = readFileSync(`/proc/${this.child.pid}/status`, "utf8");
    return Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? NaN);
  }

  /** Orderly end: shutdown, exit, wait. */
  async close() {
    await this.call("shutdown");
    const exited = new Promise((r) => this.child.once("exit", r));
    this.child.stdin.write(JSON.stringify({ jsonrpc: "2.0", method: "exit" }) + "\n");
    this.child.stdin.end();
    await exited;
  }
}

/** Runs `f` and returns [milliseconds, value]. */
export async function time(f) {
  const t = performance.now();
  const value = await f();
  return [performance.now() - t, value];
}

/** The median of numbers. */
export function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  return n === 0 ? NaN : n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/** The p-th quantile (0..1) of numbers, nearest rank. */
export function quantile(xs, p) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(p * s.length) - 1))];
}

/**
 * The three messages of host turn `i` of row (c): the user's prompt, the assistant's answer with a tool call, the
 * tool's result. The same for pi and for pi-sessiond, so both write the same bytes.
 */
export function hostTurn(i) {
  const timestamp = 1767225600000 + i * 3;
  return [
    { role: "user", content: `turn ${i}: list the files and tell me which is largest`, timestamp },
    {
      role: "assistant",
      content: [
        { type: "text", text: "Let me look." },
        { type: "toolCall", id: `call-${i}`, name: "bash", arguments: { command: "ls -la" } },
      ],
      api: "anthropic-messages",
      provider: "anthropic",
      model: "claude-bench",
      usage: { input: 100, output: 20, cacheRead: 0, cacheWrite: 0, totalTokens: 120, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } },
      stopReason: "toolUse",
      timestamp: timestamp + 1,
    },
    {
      role: "toolResult",
      toolCallId: `call-${i}`,
      toolName: "bash",
      content: [{ type: "text", text: "total 12\n-rw-r--r-- 1 u u 2048 a.txt\n-rw-r--r-- 1 u u 4096 b.txt\n" }],
      isError: false,
      timestamp: timestamp + 2,
    },
  ];
}

/**
 * A PostgreSQL server for the team rows: `initdb` in `dir` (made anew) and `postgres` on a loopback port, run as
 * `nobody` when this runs as root (initdb refuses root). Returns `{url(db), createDatabase(name), stop()}`.
 */
export async function startPostgres(dir) {
  const { execFileSync, spawn: spawnChild } = await import("node:child_process");
  const { chownSync, existsSync, mkdirSync, readdirSync, rmSync } = await import("node:fs");
  const net = await import("node:net");
  const bindir = (() => {
    try {
      return execFileSync("pg_config", ["--bindir"], { encoding: "utf8" }).trim();
    } catch {
      const versions = existsSync("/usr/lib/postgresql") ? readdirSync("/usr/lib/postgresql").sort() : [];
      if (!versions.length) throw new Error("PostgreSQL is not installed (Debian: apt-get install postgresql)");
      return `/usr/lib/postgresql/${versions.at(-1)}/bin`;
    }
  })();
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const asUser = process.getuid() === 0 ? { uid: 65534, gid: 65534 } : {};
  if (process.getuid() === 0) chownSync(dir, 65534, 65534);
  const data = `${dir}/data`;
  execFileSync(`${bindir}/initdb`, ["-D", data, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C.UTF-8"], {
    stdio: "ignore",
    cwd: dir,
    ...asUser,
  });
  const port = await new Promise((resolve) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => {
      const p = s.address().port;
      s.close(() => resolve(p));
    });
  });
  const server = spawnChild(`${bindir}/postgres`, ["-D", data, "-p", String(port), "-k", dir, "-c", "listen_addresses=127.0.0.1"], {
    stdio: "ignore",
    cwd: dir,
    ...asUser,
  });
  const url = (db) => `postgresql://postgres@127.0.0.1:${port}/${db}?sslmode=disable`;
  const psql = (sql) => execFileSync(`${bindir}/psql`, ["-q", "-d", url("postgres"), "-c", sql], { stdio: "pipe" });
  for (let i = 0; ; i++) {
    try {
      psql("SELECT 1");
      break;
    } catch (e) {
      if (i > 300) throw e;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  return {
    url,
    createDatabase(name) {
      psql(`DROP DATABASE IF EXISTS ${name}`);
      psql(`CREATE DATABASE ${name}`);
      return url(name);
    },
    stop() {
      server.kill("SIGINT");
    },
  };
}
