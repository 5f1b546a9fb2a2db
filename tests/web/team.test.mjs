// `pi-sessiond web --catalog URL` as a team member sees it, in Debian's headless Chromium: two machines push their
// sessions into a PostgreSQL this test starts (initdb in a temporary directory, as tests/it/support/postgres.rs
// does); the page lists both machines' sessions under their machine and project, opens one of each read-only,
// searches across both, draws the usage chart by machine, model and day as `usage --catalog` sums it, and lists a
// session a `push --watch` sends within 2 s of its push (and, open, shows what later pushes of it add).
//
// Where PostgreSQL's server programs are missing the tests are skipped with a message, except under CI (`CI` set)
// and tests/run-all (`PI_SESSIOND_REQUIRE_POSTGRES` set), where that is a failure. Needs /usr/bin/chromium and
// PI_SESSIOND_BIN (default: target/debug/pi-sessiond).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { appendFileSync, chownSync, existsSync, mkdtempSync, mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { firstLine, launchBrowser, statusOf } from "./support.mjs";

const root = resolve(new URL("../..", import.meta.url).pathname);
const bin = process.env.PI_SESSIOND_BIN || join(root, "target/debug/pi-sessiond");
const required = ["CI", "PI_SESSIOND_REQUIRE_POSTGRES"].some((v) => process.env[v] !== undefined);

/** Where PostgreSQL's initdb and postgres are (pg_config's bindir, else the newest under /usr/lib/postgresql). */
function pgBin() {
  try {
    const dir = execFileSync("pg_config", ["--bindir"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
    if (existsSync(join(dir, "initdb")) && existsSync(join(dir, "postgres"))) return dir;
  } catch {}
  const base = "/usr/lib/postgresql";
  const versions = existsSync(base) ? readdirSync(base).map((v) => join(base, v, "bin")).filter((d) => existsSync(join(d, "initdb"))) : [];
  return versions.sort((a, b) => a.localeCompare(b, "en", { numeric: true })).pop() || null;
}

const pg = pgBin();
const skip = !pg && !required ? "PostgreSQL's initdb and postgres are not installed (set CI to make this a failure)" : false;

const work = mkdtempSync(join(tmpdir(), "pi-sessiond-teamweb-"));
// PostgreSQL refuses to run as root: as root the server runs as nobody.
const asServer = process.getuid() === 0 ? { uid: 65534, gid: 65534 } : {};
let postgres;
let pgDir;
let dbUrl;
let server;
let url;
let browser;

function freePort() {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
    s.on("error", fail);
  });
}

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

async function startPostgres() {
  assert.ok(pg, "PostgreSQL's initdb and postgres are installed (tests/run-all installs Debian's postgresql)");
  // A directory of its own, beside `work` (which only root may enter): the server's user owns it.
  const dir = (pgDir = mkdtempSync(join(tmpdir(), "pi-sessiond-teamweb-pg-")));
  if (asServer.uid !== undefined) chownSync(dir, asServer.uid, asServer.gid);
  const data = join(dir, "data");
  execFileSync(join(pg, "initdb"), ["-D", data, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C.UTF-8", "--no-sync"], {
    cwd: dir,
    stdio: ["ignore", "ignore", "pipe"],
    ...asServer,
  });
  const port = await freePort();
  postgres = spawn(join(pg, "postgres"), ["-D", data, "-p", String(port), "-k", dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"], {
    cwd: dir,
    stdio: ["ignore", "ignore", "pipe"],
    ...asServer,
  });
  let log = "";
  postgres.stderr.on("data", (d) => (log += d));
  // Up to a minute for the server to take connections (a deadline, not a measure).
  const deadline = Date.now() + 60000;
  for (;;) {
    try {
      execFileSync(join(pg, "pg_isready"), ["-h", "127.0.0.1", "-p", String(port), "-U", "postgres"], { stdio: "ignore" });
      break;
    } catch {}
    assert.ok(Date.now() < deadline && postgres.exitCode === null, `postgres did not start: ${log}`);
    await sleep(100);
  }
  dbUrl = `postgresql://postgres@127.0.0.1:${port}/postgres?sslmode=disable`;
}

/** One session of `cwd` on `day` in `agent`: a user message with `words`, and assistant replies with usage. */
function writeSession(agent, { id, cwd, day, words, model, scale }) {
  const dir = join(agent, "sessions", `--${cwd.replace(/^\//, "").replace(/\//g, "-")}--`);
  mkdirSync(dir, { recursive: true });
  const at = (s) => `${day}T09:00:${String(s).padStart(2, "0")}.000Z`;
  const lines = [{ type: "session", version: 3, id, timestamp: at(0), cwd }];
  lines.push({ type: "message", id: "u1", parentId: null, timestamp: at(1), message: { role: "user", content: words, timestamp: 1 } });
  let parent = "u1";
  for (let i = 0; i < 3; i++) {
    const input = scale * (i + 1), output = 10 + i;
    const usage = { input, output, cacheRead: 5, cacheWrite: 1, totalTokens: input + output + 6, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0.0001 * scale + 0.00003 * i } };
    lines.push({ type: "message", id: `a${i}`, parentId: parent, timestamp: at(2 + i), message: { role: "assistant", content: [{ type: "text", text: `reply ${i} about ${words}` }], provider: "acme", model, usage, stopReason: "stop", timestamp: 1 } });
    parent = `a${i}`;
  }
  const file = join(dir, `${day}T09-00-00-000Z_${id}.jsonl`);
  writeFileSync(file, lines.map((l) => JSON.stringify(l)).join("\n") + "\n");
  return file;
}

const alice = join(work, "alice", "agent");
const bob = join(work, "bob", "agent");
let aliceFile;
let bobFile;

function push(agent, machine) {
  return JSON.parse(execFileSync(bin, ["--agent-dir", agent, "push", "--postgres", dbUrl, "--machine", machine], { encoding: "utf8" }));
}

before(async () => {
  if (skip) return;
  await startPostgres();
  aliceFile = writeSession(alice, { id: "0195aaaa-0001-7000-8000-00000000a11c", cwd: "/work/shop", day: "2026-04-01", words: "alice tunes the zephyr cache", model: "small", scale: 100 });
  writeSession(alice, { id: "0195aaaa-0002-7000-8000-00000000a11c", cwd: "/work/blog", day: "2026-04-02", words: "alice drafts a post", model: "large", scale: 300 });
  bobFile = writeSession(bob, { id: "0195bbbb-0001-7000-8000-000000000b0b", cwd: "/work/shop", day: "2026-04-02", words: "bob reviews the zephyr patch", model: "small", scale: 200 });
  assert.equal(push(alice, "alice-laptop").pushed, 2);
  assert.equal(push(bob, "bob-desktop").pushed, 1);
  server = spawn(bin, ["--catalog", dbUrl, "web", "--port", "0"], { stdio: ["ignore", "pipe", "pipe"] });
  server.stderr.on("data", (d) => process.stderr.write(d));
  url = await firstLine(server);
  browser = await launchBrowser(work);
});

after(async () => {
  await browser?.close();
  server?.removeAllListeners("exit");
  server?.kill("SIGTERM");
  if (postgres) {
    const ended = new Promise((ok) => postgres.on("exit", ok));
    postgres.kill("SIGINT");
    await Promise.race([ended, sleep(10000)]);
  }
  rmSync(work, { recursive: true, force: true });
  if (pgDir) rmSync(pgDir, { recursive: true, force: true });
});

/** A new page on the server, collecting script errors and refused requests. */
async function open() {
  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("response", (r) => r.status() >= 400 && errors.push(`${r.status()} for ${new URL(r.url()).pathname}`));
  await page.goto(url);
  await page.waitForSelector(".machine");
  return { page, errors };
}

const sessionItem = (machine, path) => `#list .session[data-machine="${machine}"][data-path="${path}"]`;

test("web --catalog prints its URL with a token first, on loopback, keeps the web view's rules, and refuses a database it cannot reach", { skip }, async () => {
  const u = new URL(url);
  assert.equal(u.hostname, "127.0.0.1");
  assert.match(u.searchParams.get("token"), /^[0-9a-f]{32}$/);
  const token = u.searchParams.get("token");
  const own = { Host: u.host };
  assert.equal(await statusOf(url, `/api/sessions?token=${token}`, own), 200);
  assert.equal(await statusOf(url, "/api/sessions", own), 403, "no token");
  assert.equal(await statusOf(url, `/api/sessions?token=${token}`, { Host: `evil.example:${u.port}` }), 403, "another Host");
  assert.equal(await statusOf(url, `/api/sessions?token=${token}`, { ...own, Origin: "http://evil.example" }), 403, "another Origin");
  const closed = `postgresql://postgres@127.0.0.1:${await freePort()}/postgres?sslmode=disable&connect_timeout=5`;
  const refused = spawn(bin, ["--catalog", closed, "web", "--port", "0"], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  refused.stdout.on("data", (d) => (out += d));
  refused.stderr.on("data", (d) => (err += d));
  const code = await new Promise((ok) => refused.on("exit", ok));
  assert.equal(code, 2, `exit status; stderr: ${err}`);
  assert.equal(out, "", "no URL is printed for a catalog that cannot be read");
  assert.match(err, /127\.0\.0\.1/);
});

test("the page lists both machines' sessions by machine and project and opens one of each read-only", { skip }, async () => {
  const { page, errors } = await open();
  assert.deepEqual(await page.$$eval("#list .machine", (ms) => ms.map((m) => m.textContent)), ["alice-laptop", "bob-desktop"]);
  assert.deepEqual(await page.$$eval("#list .project", (ps) => ps.map((p) => p.textContent)), ["/work/blog", "/work/shop", "/work/shop"]);
  assert.equal(await page.locator("#list .session").count(), 3);

  for (const [machine, file, words] of [["alice-laptop", aliceFile, "alice tunes the zephyr cache"], ["bob-desktop", bobFile, "bob reviews the zephyr patch"]]) {
    await page.click(sessionItem(machine, file));
    await page.waitForSelector(`body[data-state="ready"] ${sessionItem(machine, file)}.on`);
    await page.waitForSelector('.row[data-id="u1"]');
    assert.match(await page.textContent('.row[data-id="u1"]'), new RegExp(words));
    // The transcript beside the tree shows the clicked entry (the read-only session reads as a local one does).
    await page.click('.row[data-id="a2"]');
    await page.waitForSelector('#detail [data-entry="a2"].sel:not(.place)');
    assert.match(await page.textContent('#detail [data-entry="a2"]'), new RegExp(`reply 2 about ${words}`));
  }
  assert.deepEqual(errors, []);
  // A session is a machine's path: the same path under another machine's name is not listed, so not opened.
  const token = new URL(url).searchParams.get("token");
  const refused = await page.evaluate(
    async ([path, token]) => (await fetch(`/api/open?${new URLSearchParams({ path, machine: "bob-desktop", token })}`, { method: "POST" })).status,
    [aliceFile, token],
  );
  assert.equal(refused, 404);
  await page.close();
});

test("a search finds entries on both machines, and a hit opens its machine's session", { skip }, async () => {
  const { page, errors } = await open();
  await page.fill("#search", "zephyr");
  await page.waitForSelector(".hit");
  const heads = await page.$$eval("#list .session", (s) => s.map((h) => [h.dataset.machine, h.dataset.path]));
  assert.deepEqual(heads.sort(), [["alice-laptop", aliceFile], ["bob-desktop", bobFile]]);
  assert.match(await page.textContent("#list"), /in 2 sessions/);
  await page.click(`${sessionItem("bob-desktop", bobFile)} + .hit`);
  await page.waitForSelector('body[data-state="ready"] .row.sel');
  assert.match(await page.textContent("#detail"), /bob reviews the zephyr patch/);
  assert.deepEqual(errors, []);
  await page.close();
});

test("the usage chart shows tokens and cost by machine, model and day as `usage --catalog` sums them", { skip }, async () => {
  const cli = (by) => JSON.parse(execFileSync(bin, ["--catalog", dbUrl, "usage", "--by", by, "--json"], { encoding: "utf8" }));
  const { page, errors } = await open();
  await page.click("#overview-button");
  await page.waitForSelector('svg.chart[data-kind="machine-tokens"] rect');
  const bars = (kind) =>
    page.$$eval(`svg.chart[data-kind="${kind}"] rect`, (rs) => rs.map((r) => ({ day: r.dataset.day, series: r.dataset.model, value: Number(r.dataset.value) })));
  const sum = (rects, key) => rects.reduce((m, r) => m.set(r[key], (m.get(r[key]) || 0) + r.value), new Map());
  const machineTokens = await bars("machine-tokens");
  const machineCost = await bars("machine-cost");
  const machines = cli("machine");
  assert.deepEqual(machines.map((r) => r.machine), ["alice-laptop", "bob-desktop"]);
  for (const row of machines) {
    assert.equal(sum(machineTokens, "series").get(row.machine), row.totalTokens, `tokens of ${row.machine}`);
    assert.ok(Math.abs(sum(machineCost, "series").get(row.machine) - row.cost) < 1e-9, `cost of ${row.machine}`);
  }
  const tokens = await bars("tokens");
  for (const row of cli("model")) assert.equal(sum(tokens, "series").get(row.model), row.totalTokens, `tokens of ${row.model}`);
  for (const row of cli("day")) assert.equal(sum(tokens, "day").get(row.day), row.totalTokens, `tokens of ${row.day}`);
  assert.deepEqual([...sum(tokens, "day").keys()].sort(), ["2026-04-01", "2026-04-02"]);
  assert.deepEqual(errors, []);
  await page.close();
});

test("a session that push --watch sends is listed within 2 s of its push, follows its pushes while open, and counts in the usage", { skip }, async () => {
  const carol = join(work, "carol", "agent");
  mkdirSync(join(carol, "sessions"), { recursive: true });
  const watch = spawn(bin, ["--agent-dir", carol, "push", "--postgres", dbUrl, "--machine", "carol-ci", "--watch"], { stdio: ["ignore", "pipe", "inherit"] });
  const { page, errors } = await open();
  try {
    let reports = "";
    const pushed = new Promise((ok, fail) => {
      watch.stdout.on("data", (d) => {
        reports += d;
        if (reports.split("\n").some((l) => l && JSON.parse(l).pushed > 0)) ok(Date.now());
      });
      watch.on("exit", (code) => fail(new Error(`push --watch exited with ${code}`)));
    });
    await sleep(300);
    const file = writeSession(carol, { id: "0195cccc-0001-7000-8000-0000000c0c0c", cwd: "/work/ci", day: "2026-04-03", words: "carol runs the nightly build", model: "small", scale: 50 });
    // A deadline for "eventually" (the watch notices within its poll), then the 2 s the page has.
    const at = await Promise.race([pushed, sleep(30000).then(() => null)]);
    assert.ok(at, `push --watch reported the new session: ${reports}`);
    await page.waitForSelector(sessionItem("carol-ci", file), { timeout: Math.max(1, 2000 - (Date.now() - at)) });
    console.log(`# listed ${Date.now() - at} ms after push --watch reported it`);

    // Open, it follows the pushes: an entry appended on carol's machine is on the page once it is pushed.
    await page.click(sessionItem("carol-ci", file));
    await page.waitForSelector('body[data-state="ready"] .row[data-id="a2"]');
    const entry = { type: "message", id: "late", parentId: "a2", timestamp: "2026-04-03T09:00:10.000Z", message: { role: "user", content: "one more nightly question", timestamp: 1 } };
    appendFileSync(file, JSON.stringify(entry) + "\n");
    await page.waitForSelector('.row[data-id="late"]', { timeout: 30000 });
    assert.match(await page.textContent('.row[data-id="late"]'), /one more nightly question/);

    // The usage overview summed before carol pushed is not shown again once she has.
    await page.click("#overview-button");
    await page.waitForSelector('svg.chart[data-kind="machine-tokens"] rect[data-model="carol-ci"]');
    assert.deepEqual(await page.$$eval("#list .machine", (ms) => ms.map((m) => m.textContent)), ["alice-laptop", "bob-desktop", "carol-ci"]);
    assert.deepEqual(errors, []);
  } finally {
    await page.close();
    watch.removeAllListeners("exit");
    watch.kill("SIGTERM");
  }
});
