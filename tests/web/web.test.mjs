// The web view as a person sees it, in Debian's headless Chromium: `pi-sessiond web` lists the sessions of an
// agent directory, opens one of more than 5,000 entries (generated here), shows its tree, and shows an entry
// that another process appends within 2 s; the server refuses requests without its token or naming another
// host; `pi-sessiond export --html` writes a page that shows the same tree and loads nothing from anywhere; and
// bidirectional controls in a session's texts are shown, not obeyed, in both.
//
// Needs /usr/bin/chromium (tests/run-all installs Debian's package) and PI_SESSIOND_BIN (default:
// target/debug/pi-sessiond). SCREENSHOT=path writes a picture of the view (docs/web-view.png is made this way).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { appendFileSync, closeSync, mkdtempSync, openSync, writeSync, mkdirSync, readdirSync, writeFileSync, readFileSync, rmSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { firstLine, launchBrowser, statusOf } from "./support.mjs";
import { bigSession } from "./gen.mjs";

const root = resolve(new URL("../..", import.meta.url).pathname);
const bin = process.env.PI_SESSIOND_BIN || join(root, "target/debug/pi-sessiond");
const work = mkdtempSync(join(tmpdir(), "pi-sessiond-web-"));
const agent = join(work, "agent");
const project = join(agent, "sessions", "--work-big-app--");
const BIG = 5200;
const bigId = "0194aaaa-0000-7000-8000-00000000b16b";
const bigFile = join(project, `2026-01-02T00-00-00-000Z_${bigId}.jsonl`);

let server;
let url;
let browser;

function startServer() {
  return new Promise((ok, fail) => {
    server = spawn(bin, ["--agent-dir", agent, "web", "--port", "0"], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    server.stdout.on("data", (d) => {
      out += d;
      const nl = out.indexOf("\n");
      if (nl >= 0 && !url) {
        url = out.slice(0, nl);
        ok();
      }
    });
    server.stderr.on("data", (d) => process.stderr.write(d));
    server.on("exit", (code) => fail(new Error(`pi-sessiond web exited with ${code}`)));
  });
}

before(async () => {
  mkdirSync(project, { recursive: true });
  writeFileSync(bigFile, bigSession(BIG, bigId));
  for (let k = 0; k < 3; k++) {
    const id = `0194bbbb-000${k}-7000-8000-00000000000${k}`;
    const lines = [
      JSON.stringify({ type: "session", version: 3, id, timestamp: `2026-01-01T0${k}:00:00.000Z`, cwd: "/work/big-app" }),
      JSON.stringify({ type: "message", id: `s${k}`, parentId: null, timestamp: `2026-01-01T0${k}:00:01.000Z`, message: { role: "user", content: `small session ${k}`, timestamp: Date.parse(`2026-01-01T0${k}:00:01.000Z`) } }),
    ];
    writeFileSync(join(project, `2026-01-01T0${k}-00-00-000Z_${id}.jsonl`), lines.join("\n") + "\n");
  }
  await startServer();
  browser = await launchBrowser(work);
});

after(async () => {
  await browser?.close();
  server?.removeAllListeners("exit");
  // SIGTERM is how a person's `kill` (and a service manager) stops it: it must end, not linger.
  const ended = new Promise((ok) => server.on("exit", (code, signal) => ok({ code, signal })));
  server?.kill("SIGTERM");
  const end = await Promise.race([ended, new Promise((ok) => setTimeout(() => ok(null), 5000))]);
  if (!end) server.kill("SIGKILL");
  rmSync(work, { recursive: true, force: true });
  assert.ok(end, "pi-sessiond web ended within 5 s of SIGTERM");
});

/** GET `path` on the server with these headers; resolves to the status code. */
function status(path, headers = {}) {
  return statusOf(url, path, headers);
}

test("the server prints its URL with a token first and listens on loopback only", () => {
  const u = new URL(url);
  assert.equal(u.hostname, "127.0.0.1");
  assert.match(u.searchParams.get("token"), /^[0-9a-f]{32}$/);
});

test("PI_CODING_AGENT_DIR chooses the sessions the view shows, as --agent-dir does", async () => {
  const other = spawn(bin, ["web", "--port", "0"], { stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, PI_CODING_AGENT_DIR: agent } });
  try {
    const first = await firstLine(other);
    const listed = await new Promise((ok, fail) => {
      const u = new URL(first);
      request({ host: "127.0.0.1", port: u.port, path: `/api/sessions${u.search}` }, (res) => {
        let body = "";
        res.on("data", (d) => (body += d));
        res.on("end", () => ok(JSON.parse(body)));
      }).on("error", fail).end();
    });
    assert.deepEqual(listed.map((s) => s.path).sort(), readdirSync(project).map((f) => join(project, f)).sort());
  } finally {
    other.removeAllListeners("exit");
    other.kill("SIGTERM");
  }
});

test("requests without the token, naming another host or from another origin are refused", async () => {
  const { port, search } = new URL(url);
  assert.equal(await status(`/${search}`), 200);
  assert.equal(await status("/"), 403, "no token");
  assert.equal(await status("/api/sessions?token=0123"), 403, "wrong token");
  assert.equal(await status(`/api/sessions${search}`, { Host: `rebound.example:${port}` }), 403, "DNS rebinding");
  assert.equal(await status(`/api/sessions${search}`, { Origin: "http://evil.example" }), 403, "another page");
  assert.equal(await status(`/api/sessions${search}`, { Origin: `http://127.0.0.1:${port}` }), 200);
});

test("the page lists the sessions, opens one of 5,200 entries, shows its tree and follows an append by another process", async () => {
  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url);
  await page.waitForSelector(`.session[data-path="${bigFile}"]`);
  assert.equal(await page.locator(".session").count(), 4);
  assert.match(await page.textContent(`.session[data-path="${bigFile}"]`), /Tokenizer edge cases/);

  const clicked = Date.now();
  await page.click(`.session[data-path="${bigFile}"]`);
  await page.waitForSelector('body[data-state="ready"] .row');
  const wallMs = Date.now() - clicked;
  const treeMs = Number(await page.getAttribute("body", "data-tree-ms"));
  console.log(`# tree of ${BIG} entries shown ${treeMs} ms after the click (page's own measure), ${wallMs} ms by the test's clock`);
  const summary = await page.textContent("#summary");
  assert.match(summary, /5,200 entries/);
  assert.match(summary, /branch points/);
  // Only the rows in view are drawn, and the leaf is among them.
  const drawn = await page.locator(".row").count();
  assert.ok(drawn > 10 && drawn < 300, `${drawn} rows drawn`);
  await page.waitForSelector(".row .leaf");
  assert.ok(await page.locator(".row .label").count() >= 0);
  // The transcript of the leaf's path draws and fetches only the entries near the view.
  await page.waitForSelector('#detail .entry[data-state="filled"]');
  assert.match(await page.textContent("#detail .t-head"), /5,\d{3} entries from the root to the leaf/);
  const places = await page.locator("#detail .entry").count();
  const filled = await page.locator('#detail .entry[data-state="filled"]').count();
  assert.ok(places < 200 && filled > 0 && filled <= places, `${filled} of ${places} drawn entries fetched`);
  // Scrolled up to the top of what is drawn, the transcript draws more of the path above.
  await page.$eval("#detail", (d) => (d.scrollTop = 0));
  await page.waitForFunction((n) => document.querySelectorAll("#detail .entry").length > n, places);

  // Another process appends an entry, as pi does: one complete line at the end of the file.
  const leafId = await page.getAttribute(".row:has(.leaf)", "data-id");
  const entry = { type: "message", id: "livefeed", parentId: leafId, timestamp: new Date().toISOString(), message: { role: "user", content: "appended while the page was open", timestamp: Date.now() } };
  execFileSync(process.execPath, ["-e", `require("fs").appendFileSync(process.argv[1], process.argv[2] + "\\n")`, bigFile, JSON.stringify(entry)]);
  await page.waitForSelector('.row[data-id="livefeed"] .leaf', { timeout: 2000 });
  assert.match(await page.textContent('.row[data-id="livefeed"]'), /appended while the page was open/);
  // The transcript of the leaf's path follows it.
  await page.waitForSelector('#detail .entry.t-user[data-entry="livefeed"]');

  // Pieces of the transcript are fetched as they come into view: the selected entry, whole.
  await page.click('.row[data-id="livefeed"]');
  await page.waitForSelector('#detail .entry.sel.t-user[data-entry="livefeed"]');
  assert.match(await page.textContent("#detail .entry.sel"), /appended while the page was open/);

  // Search goes through the sidecar's index of entries.
  await page.fill("#search", "fallback branch");
  await page.waitForSelector(".hit");
  assert.match(await page.textContent("#list"), /matches in 1 session(?!s)/);
  await page.fill("#search", "");

  // The context the model sees, and tokens and cost.
  await page.click('#tabs button[data-tab="context"]');
  await page.waitForSelector("#context-pane .card");
  await page.click('#tabs button[data-tab="usage"]');
  await page.waitForSelector("#usage-pane table");
  assert.match(await page.textContent("#usage-pane"), /anthropic\/claude-sonnet-4-5/);

  await page.click('#tabs button[data-tab="tree"]');
  await page.click(`.row[data-id="${leafId}"]`);
  await page.waitForSelector(`#detail .entry.sel[data-entry="${leafId}"]:not(.place)`);
  if (process.env.SCREENSHOT) {
    // A picture of a branch point: open a search hit just before one, so the tree scrolls to it.
    await page.fill("#search", '"question 4996"');
    await page.click(".hit");
    await page.waitForSelector(`.row.sel[data-id="e${(4996).toString(16).padStart(7, "0")}"]`);
    await page.fill("#search", "");
    await page.waitForSelector(".session.on");
    await page.setViewportSize({ width: 1100, height: 600 });
    await page.screenshot({ path: process.env.SCREENSHOT });
  }
  assert.deepEqual(errors, []);
  await page.close();
});

test("the tree takes pi's /tree filters, folds at a branch point and dims entries off the active branch", async () => {
  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url);
  await page.click(`.session[data-path="${bigFile}"]`);
  await page.waitForSelector('body[data-state="ready"] .row .leaf');
  const lineCount = async () => parseInt(await page.$eval("#tree-inner", (e) => e.style.height), 10);
  const all = await lineCount();

  // The generated session branches every 500 entries: the entries of an abandoned branch are drawn dimmed, after
  // the whole branch that holds the leaf (pi's /tree draws that one first at every branch point), so at the end.
  assert.ok(await page.$eval(".row .leaf", (e) => e.textContent === "◀ leaf"), "the leaf itself is shown");
  await page.$eval("#tree-scroll", (e) => (e.scrollTop = e.scrollHeight));
  await page.waitForSelector(".row.off");
  const lastRows = await page.$$eval("#tree-inner .row", (rows) => rows.slice(-5).map((r) => r.classList.contains("off")));
  assert.ok(lastRows.every(Boolean), `the rows at the end are the abandoned branches': ${lastRows}`);
  const point = await page.$eval(".row:has(.fold)", (e) => e.dataset.id).catch(() => null);
  if (point === null) {
    // The branch points are above the rows in view: bring one up through search.
    await page.fill("#search", '"question 4996"');
    await page.click(".hit");
    await page.fill("#search", "");
  }
  await page.waitForSelector(".row:has(.fold)");
  await page.click(".row .fold");
  assert.ok((await lineCount()) < all, "folding a branch point hides what is under it");
  await page.click(".row .fold");
  assert.equal(await lineCount(), all, "unfolding shows it again");

  // Scrolled to the leaf at the bottom, a filter that shortens the tree draws its rows at once: not an empty
  // tree until the browser's next scroll event.
  await page.click("#to-leaf");
  const drawnAtOnce = await page.evaluate(() => {
    const filter = document.getElementById("filter");
    filter.value = "user-only";
    filter.dispatchEvent(new Event("change"));
    return document.querySelectorAll("#tree-inner .row").length;
  });
  assert.ok(drawnAtOnce > 0, "the filtered tree is drawn in the same turn as the change");
  await page.selectOption("#filter", "user-only");
  await page.waitForFunction((n) => parseInt(document.getElementById("tree-inner").style.height, 10) < n, all);
  const kinds = await page.$$eval(".row .kind", (es) => es.map((e) => e.textContent));
  assert.ok(kinds.length > 0 && kinds.every((k) => k === "user"), `user only: ${[...new Set(kinds)].join(", ")}`);

  await page.selectOption("#filter", "labeled-only");
  await page.waitForFunction(() => document.querySelectorAll(".row").length > 0);
  const rows = await page.locator(".row").count();
  assert.equal(await page.locator(".row .label").count(), rows, "labelled only: every row carries its label");
  assert.ok(rows >= Math.floor(BIG / 700) - 1, `${rows} labelled entries shown`);
  assert.deepEqual(errors, []);
  await page.close();
});

test("an exported page shows the same tree and loads nothing from anywhere", async () => {
  const out = join(work, "export.html");
  execFileSync(bin, ["--agent-dir", agent, "export", bigFile, "--html", "-o", out]);
  const html = readFileSync(out, "utf8");
  assert.doesNotMatch(html, /https?:\/\//, "no network references");
  const page = await browser.newPage();
  const requests = [];
  page.on("request", (r) => requests.push(r.url()));
  await page.goto(`file://${out}`);
  await page.waitForSelector('body[data-state="ready"] .row .leaf');
  assert.match(await page.textContent("#summary"), /entries/);
  await page.click(".row .leaf");
  await page.waitForSelector("#detail .entry.sel:not(.place)");
  assert.deepEqual(requests.filter((u) => !u.startsWith("file://") && !u.startsWith("data:")), []);
  await page.close();
});

test("control characters in a session's text (a tool's ESC, BEL, NUL, backspace) are shown as their pictures in the list, the tree and the transcript", async () => {
  const dir = join(work, "controls-agent");
  const root = join(dir, "sessions", "--work-controls--");
  const text = "clear\u001b[2J then bell\u0007 nul\u0000 back\b del\u007f";
  const file = piSession(root, "/work/controls", 0, text, "2026-03-03T00:00:00.000Z");
  await withServerOf(dir, async (page) => {
    await page.waitForSelector(`.session[data-path="${file}"]`);
    const raw = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/;
    const shown = "clear␛[2J then bell␇ nul␀ back␈ del␡";
    const title = await page.textContent(`.session[data-path="${file}"] .s-title`);
    assert.ok(title.includes(shown) && !raw.test(title), `the list: ${JSON.stringify(title)}`);
    await page.click(`.session[data-path="${file}"]`);
    await page.waitForSelector('body[data-state="ready"] .row[data-id="q0"]');
    const row = await page.textContent('.row[data-id="q0"]');
    assert.ok(!raw.test(row) && row.includes("␛[2J"), `the tree: ${JSON.stringify(row)}`);
    await page.click('.row[data-id="q0"]');
    await page.waitForSelector('#detail .entry.sel[data-entry="q0"]');
    const entry = await page.textContent('#detail .entry.sel[data-entry="q0"]');
    assert.ok(entry.includes(shown) && !raw.test(entry), `the transcript: ${JSON.stringify(entry)}`);
  });
});

test("bidirectional controls in a session name, a first message and an entry's text are shown, not obeyed, live and exported", async () => {
  const TRICK = "invoice\u202Efdp.exe";
  const bidiAgent = join(work, "bidi-agent");
  const dir = join(bidiAgent, "sessions", "--work-bidi--");
  mkdirSync(dir, { recursive: true });
  const session = (k, named) => {
    const id = `0194cccc-000${k}-7000-8000-00000000000${k}`;
    const at = (s) => `2026-01-0${k + 1}T00:00:0${s}.000Z`;
    const lines = [
      { type: "session", version: 3, id, timestamp: at(0), cwd: "/work/bidi" },
      { type: "message", id: `u${k}`, parentId: null, timestamp: at(1), message: { role: "user", content: TRICK, timestamp: Date.parse(at(1)) } },
      { type: "message", id: `a${k}`, parentId: `u${k}`, timestamp: at(2), message: { role: "assistant", content: [{ type: "text", text: `see ${TRICK}` }], provider: "p", model: "m", stopReason: "stop", timestamp: Date.parse(at(2)) } },
    ];
    if (named) lines.push({ type: "session_info", id: `n${k}`, parentId: `a${k}`, timestamp: at(3), name: TRICK });
    const file = join(dir, `2026-01-0${k + 1}T00-00-00-000Z_${id}.jsonl`);
    writeFileSync(file, lines.map((l) => JSON.stringify(l)).join("\n") + "\n");
    return file;
  };
  const named = session(1, true);
  const unnamed = session(0, false);
  const other = spawn(bin, ["--agent-dir", bidiAgent, "web", "--port", "0"], { stdio: ["ignore", "pipe", "inherit"] });
  // In the page: is the "f" of "fdp" drawn left of the last "e" of "exe", as in the stored order? An obeyed
  // right-to-left override draws "fdp.exe" reversed, the "f" rightmost.
  const drawnInOrder = (selector) =>
    page.$$eval(selector, (els) =>
      els.map((e) => {
        const walker = document.createTreeWalker(e, NodeFilter.SHOW_TEXT);
        for (let n = walker.nextNode(); n; n = walker.nextNode()) {
          const at = n.data.indexOf("fdp.exe");
          if (at < 0) continue;
          const x = (i) => {
            const r = document.createRange();
            r.setStart(n, i);
            r.setEnd(n, i + 1);
            return r.getBoundingClientRect().left;
          };
          return { text: n.data, inOrder: x(at) < x(at + 6) };
        }
        return { text: e.textContent, inOrder: null };
      }),
    );
  let page;
  try {
    const first = await firstLine(other);
    page = await browser.newPage();
    await page.goto(first);
    await page.waitForSelector(`.session[data-path="${unnamed}"]`);
    const titles = await drawnInOrder(".session .s-title");
    assert.equal(titles.length, 2);
    for (const t of titles) {
      assert.equal(t.inOrder, true, `session list: ${JSON.stringify(t)}`);
      assert.match(t.text, /invoice⟨U\+202E⟩fdp\.exe/);
    }
    await page.click(`.session[data-path="${named}"]`);
    await page.waitForSelector('body[data-state="ready"] .row');
    assert.equal((await drawnInOrder("#title"))[0].inOrder, true, "the session's name in the title");
    const previews = await drawnInOrder(".row .preview");
    assert.ok(previews.length >= 2 && previews.every((p) => p.inOrder === true), `tree rows: ${JSON.stringify(previews)}`);
    await page.click('.row[data-id="a1"]');
    await page.waitForSelector('#detail .entry.sel[data-entry="a1"] .md');
    assert.equal((await drawnInOrder("#detail .entry.sel .md"))[0].inOrder, true, "the entry's text");
    await page.close();

    const out = join(work, "bidi-export.html");
    execFileSync(bin, ["--agent-dir", bidiAgent, "export", named, "--html", "-o", out]);
    page = await browser.newPage();
    await page.goto(`file://${out}`);
    await page.waitForSelector('body[data-state="ready"] .row');
    const exported = await drawnInOrder(".row .preview, .session .s-title, #title");
    assert.ok(exported.length >= 3 && exported.every((p) => p.inOrder === true), `export: ${JSON.stringify(exported)}`);
    await page.click('.row[data-id="a1"]');
    await page.waitForSelector('#detail .entry.sel[data-entry="a1"] .md');
    assert.equal((await drawnInOrder("#detail .entry.sel .md"))[0].inOrder, true, "the exported entry's text");
  } finally {
    await page?.close();
    other.removeAllListeners("exit");
    other.kill("SIGTERM");
  }
});

/** An agent directory of three small sessions in /work/switch: the third's leaf is a label entry, as pi leaves a
 * session it resumed and labelled. Returns the agent directory and the sessions' files. */
function switchAgent() {
  const dir = join(work, "switch-agent");
  const sessions = join(dir, "sessions", "--work-switch--");
  mkdirSync(sessions, { recursive: true });
  const files = [0, 1, 2].map((k) => {
    const id = `0194dddd-000${k}-7000-8000-00000000000${k}`;
    const at = (s) => `2026-02-0${k + 1}T00:00:0${s}.000Z`;
    const lines = [
      { type: "session", version: 3, id, timestamp: at(0), cwd: "/work/switch" },
      { type: "message", id: `q${k}`, parentId: null, timestamp: at(1), message: { role: "user", content: `question of session ${k}: ${["apples", "pears", "quinces"][k]}`, timestamp: Date.parse(at(1)) } },
      { type: "message", id: `r${k}`, parentId: `q${k}`, timestamp: at(2), message: { role: "assistant", content: [{ type: "text", text: `answer of session ${k}` }], provider: "p", model: "m", stopReason: "stop", usage: { input: 10, output: 5, cacheRead: 0, cacheWrite: 0, totalTokens: 15, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0.01 } }, timestamp: Date.parse(at(2)) } },
    ];
    if (k === 2) lines.push({ type: "label", id: "lab2", parentId: "r2", timestamp: at(3), targetId: "q2", label: "checkpoint" });
    const file = join(sessions, `2026-02-0${k + 1}T00-00-00-000Z_${id}.jsonl`);
    writeFileSync(file, lines.map((l) => JSON.stringify(l)).join("\n") + "\n");
    return file;
  });
  return { dir, files };
}

/** Runs `body(page, requests, url)` against a `pi-sessiond web` of the agent directory `dir`, in a window of
 * `viewport`, failing on any error the page throws and on any request of the page's that the server refuses;
 * `requests` collects the paths the page asks for. */
async function withServerOf(dir, body, viewport = { width: 1400, height: 860 }, refusedOnPurpose = null) {
  const other = spawn(bin, ["--agent-dir", dir, "web", "--port", "0"], { stdio: ["ignore", "pipe", "inherit"] });
  let page;
  try {
    const first = await firstLine(other);
    page = await browser.newPage();
    await page.setViewportSize(viewport);
    const errors = [];
    const requests = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    page.on("request", (r) => requests.push(new URL(r.url()).pathname));
    page.on("response", (r) => {
      const refused = `${r.status()} for ${new URL(r.url()).pathname}`;
      if (r.status() >= 400 && !refusedOnPurpose?.test(refused)) errors.push(refused);
    });
    await page.goto(first);
    await body(page, requests, first);
    assert.deepEqual(errors, []);
  } finally {
    await page?.close();
    other.removeAllListeners("exit");
    other.kill("SIGTERM");
  }
}

/** Runs `body(page, files)` against a `pi-sessiond web` of switchAgent(), in a window of `viewport`, failing on
 * any error the page throws and on any request of the page's that the server refuses. */
async function withSwitchServer(body, viewport = { width: 1400, height: 860 }, refusedOnPurpose = null) {
  const { dir, files } = switchAgent();
  await withServerOf(dir, async (page) => {
    await page.waitForSelector(`.session[data-path="${files[2]}"]`);
    await body(page, files);
  }, viewport, refusedOnPurpose);
}

test("one session, then another, then a search hit in a third are each shown", async () => {
  await withSwitchServer(async (page, files) => {
    const shows = async (k) => {
      await page.waitForSelector(`.row[data-id="q${k}"]`);
      assert.match(await page.textContent("#tree-inner"), new RegExp(`question of session ${k}`));
      assert.equal(await page.locator(`.row[data-id^="q"]:not([data-id="q${k}"])`).count(), 0, `only session ${k}'s rows`);
      assert.equal(await page.getAttribute(".session.on", "data-path"), files[k]);
    };
    await page.click(`.session[data-path="${files[0]}"]`);
    await shows(0);
    await page.click(`.session[data-path="${files[1]}"]`);
    await shows(1);
    await page.fill("#search", "quinces");
    await page.click(".hit");
    await shows(2);
    await page.waitForSelector('.row.sel[data-id="q2"]');
    await page.fill("#search", "");
    await page.waitForSelector(`.session.on[data-path="${files[2]}"]`);
  });
});

test("switching sessions while the transcript is still being read closes the first session only once it is answered", async () => {
  // Each request is a connection of its own: a close sent beside a transcript request still under way had
  // reached the server first now and then, and the transcript was answered 404 (seen once in a full run).
  // Holding every transcript request back makes that order certain.
  await withSwitchServer(async (page, files) => {
    let held = 0;
    await page.route("**/api/transcript*", async (route) => {
      held++;
      await new Promise((r) => setTimeout(r, 400));
      await route.continue();
    });
    for (const k of [0, 1, 2, 0]) {
      await page.click(`.session[data-path="${files[k]}"]`);
      await page.waitForSelector(`.row[data-id="q${k}"]`);
    }
    await page.waitForSelector('body[data-state="ready"] .row[data-id="q0"]');
    await page.waitForTimeout(900);
    assert.ok(held >= 1, `transcript requests were held back: ${held}`);
    assert.equal(await page.locator("#notice:not([hidden])").count(), 0, "no notice about the transcript");
  });
});

test("Back and Forward step through the sessions opened and the usage overview, and Back from the first leaves none open", async () => {
  await withSwitchServer(async (page, files) => {
    const shows = async (k) => {
      await page.waitForSelector(`body[data-state="ready"] .row[data-id="q${k}"]`);
      assert.equal(await page.locator(`.row[data-id^="q"]:not([data-id="q${k}"])`).count(), 0, `only session ${k}'s rows`);
      assert.equal(await page.getAttribute(".session.on", "data-path"), files[k]);
      assert.equal(await page.isVisible("#overview-pane"), false, "the overview is closed");
    };
    for (const k of [0, 1, 2]) {
      await page.click(`.session[data-path="${files[k]}"]`);
      await shows(k);
    }
    // Moving from entry to entry in one session is not a step of its own.
    await page.click('.row[data-id="r2"]');
    await page.waitForSelector('.row.sel[data-id="r2"]');
    await page.goBack();
    await shows(1);
    await page.goBack();
    await shows(0);
    await page.goForward();
    await shows(1);
    await page.click("#overview-button");
    await page.waitForSelector("#overview-pane:not([hidden])");
    assert.match(page.url(), /[?&]overview=1/);
    await page.goBack();
    await shows(1);
    await page.goForward();
    await page.waitForSelector("#overview-pane:not([hidden])");
    await page.goBack();
    await shows(1);
    await page.goBack();
    await shows(0);
    await page.goBack();
    await page.waitForSelector("#empty:not([hidden])");
    assert.equal(await page.locator(".session.on").count(), 0, "no session is open");
    assert.equal(await page.locator("#tree-inner .row:visible").count(), 0);
    assert.ok(!/[?&]session=/.test(page.url()), page.url());
    // And forward again into the sessions, as they were.
    await page.goForward();
    await shows(0);
  });
});

test("the session clicked last is shown, however long the one clicked before it takes to open", async () => {
  // A person who clicks one session and at once another (or the first again) expects the last: an open answered
  // late must not take the page over (helper 33's trial: 11 of 12 runs ended on the slow one).
  await withSwitchServer(async (page, files) => {
    await page.route("**/api/open*", async (route) => {
      if (new URL(route.request().url()).searchParams.get("path") === files[0]) await new Promise((r) => setTimeout(r, 900));
      await route.continue();
    });
    for (const last of [1, 2]) {
      await page.click(`.session[data-path="${files[0]}"]`);
      await page.waitForTimeout(100);
      await page.click(`.session[data-path="${files[last]}"]`);
      await page.waitForSelector(`body[data-state="ready"] .row[data-id="q${last}"]`);
      await page.waitForTimeout(1300); // the slow open has been answered by now
      assert.equal(await page.getAttribute(".session.on", "data-path"), files[last]);
      assert.equal(await page.locator('.row[data-id="q0"]').count(), 0, "session 0's rows are not shown");
      assert.match(page.url(), new RegExp(`session=0194dddd-000${last}-`));
    }
  });
});

test("Back pressed three times at once lands where the history says, and Forward goes on from there", async () => {
  // Back pressed again while the page was still opening the session of the Back before pushed a step of its
  // own, and the Forward steps were lost (helper 33's trial).
  await withSwitchServer(async (page, files) => {
    const order = [0, 1, 2, 0, 1];
    const shows = async (k) => {
      await page.waitForSelector(`body[data-state="ready"] .row[data-id="q${k}"]`);
      assert.equal(await page.getAttribute(".session.on", "data-path"), files[k]);
    };
    for (const k of order) {
      await page.click(`.session[data-path="${files[k]}"]`);
      await shows(k);
    }
    const steps = await page.evaluate(() => history.length);
    // The session of each step, by its place among the page's own (the Navigation API says where the page is).
    const entries = await page.evaluate(() => navigation.entries().length);
    const at = (index) => order[index - (entries - order.length)];
    // Opens answer slowly, so that each Back starts before the one before it is done.
    await page.route("**/api/open*", async (route) => {
      await new Promise((r) => setTimeout(r, 300));
      await route.continue();
    });
    await page.evaluate(() => new Promise((done) => {
      history.back();
      setTimeout(() => history.back(), 40);
      setTimeout(() => (history.back(), done()), 80);
    }));
    await page.waitForTimeout(1500);
    let index = await page.evaluate(() => navigation.currentEntry.index);
    assert.ok(index < entries - 1 && index >= entries - order.length, `went back: at ${index} of ${entries}`);
    await shows(at(index));
    assert.equal(await page.evaluate(() => history.length), steps, "no step was added, none lost");
    while (index < entries - 1) {
      await page.goForward();
      index++;
      await shows(at(index));
    }
  });
});

test("a session clicked while Back is still opening another is a step of its own", async () => {
  await withSwitchServer(async (page, files) => {
    const shows = async (k) => {
      await page.waitForSelector(`body[data-state="ready"] .row[data-id="q${k}"]`);
      assert.equal(await page.getAttribute(".session.on", "data-path"), files[k]);
    };
    for (const k of [0, 1, 2]) {
      await page.click(`.session[data-path="${files[k]}"]`);
      await shows(k);
    }
    const back = (await page.evaluate(() => navigation.currentEntry.index)) - 1;
    await page.route("**/api/open*", async (route) => {
      if (new URL(route.request().url()).searchParams.get("path") === files[1]) await new Promise((r) => setTimeout(r, 800));
      await route.continue();
    });
    await page.evaluate(() => history.back()); // to session 1, slow to open
    await page.waitForTimeout(150);
    await page.click(`.session[data-path="${files[0]}"]`);
    await shows(0);
    await page.waitForTimeout(1200);
    await shows(0);
    assert.equal(await page.evaluate(() => navigation.currentEntry.index), back + 1, "the click is a step after the one Back reached");
    await page.goBack();
    await shows(1);
  });
});

test("a session rewritten twice in quick succession shows the last rewrite, whichever snapshot is answered first", async () => {
  // Each rewrite is read again (a snapshot each); the one answered last had been applied even when it was the
  // older (or, later, an answer after the first was dropped): a file emptied and written again showed "The
  // session file was deleted." for good now and then (helper 34's trial).
  await withSwitchServer(async (page, files) => {
    for (const slow of [1, 2]) {
      await page.click(`.session[data-path="${files[1]}"]`);
      await page.waitForSelector('body[data-state="ready"] .row[data-id="q1"]');
      // Both snapshots under way at once: the first answered last, or first.
      const delays = slow === 1 ? [1200, 0] : [600, 1200];
      let asked = 0;
      await page.route("**/api/snapshot*", async (route) => {
        const delay = delays[asked++] ?? 0;
        await new Promise((r) => setTimeout(r, delay));
        await route.continue();
      });
      // Rewritten in place, the same length (no moment without a session in the file), twice.
      const rewrite = (from, to) => {
        const text = readFileSync(files[1], "utf8");
        assert.ok(text.includes(from) && from.length === to.length);
        const fd = openSync(files[1], "r+");
        writeSync(fd, Buffer.from(text.replace(from, to)), 0, Buffer.byteLength(text), 0);
        closeSync(fd);
      };
      rewrite("answer of session 1", "answer of SESSION 1");
      await new Promise((r) => setTimeout(r, 300));
      rewrite("answer of SESSION 1", "ANSWER OF SESSION 1");
      await page.waitForTimeout(3000);
      assert.ok(asked >= 2, `two snapshots: ${asked}`);
      assert.match(await page.textContent('.row[data-id="r1"]'), /ANSWER OF SESSION 1/, `slow ${slow}`);
      assert.equal(await page.isVisible("#notice"), false, `slow ${slow}: ${await page.textContent("#notice")}`);
      await page.unroute("**/api/snapshot*");
      rewrite("ANSWER OF SESSION 1", "answer of session 1");
      await page.click(`.session[data-path="${files[0]}"]`);
      await page.waitForSelector('body[data-state="ready"] .row[data-id="q0"]');
    }
  });
});

test("a leaf the filter hides is marked on the entry it hangs below, as below it", async () => {
  await withSwitchServer(async (page, files) => {
    // Session 2 ends with a label entry (pi labels as it resumes): the default filter hides it.
    await page.click(`.session[data-path="${files[2]}"]`);
    await page.waitForSelector('body[data-state="ready"] .row[data-id="r2"] .leaf');
    assert.equal(await page.textContent('.row[data-id="r2"] .leaf'), "◀ leaf below");
    assert.equal(await page.getAttribute('.row[data-id="r2"] .leaf', "title"), "The leaf, lab2 (label), is below this entry, hidden by the filter or a folded branch");
    await page.selectOption("#filter", "all");
    await page.waitForSelector('.row[data-id="lab2"] .leaf');
    assert.equal(await page.textContent('.row[data-id="lab2"] .leaf'), "◀ leaf");
  });
});

test("the Context and Tokens & cost tabs follow the file while they are shown, as the tree does", async () => {
  await withSwitchServer(async (page, files) => {
    await page.click(`.session[data-path="${files[1]}"]`);
    await page.waitForSelector('body[data-state="ready"] .row[data-id="r1"]');
    const turn = (n) => {
      const at = (s) => `2026-02-02T00:0${n}:0${s}.000Z`;
      const lines = [
        { type: "message", id: `q1-${n}`, parentId: n === 1 ? "r1" : `r1-${n - 1}`, timestamp: at(1), message: { role: "user", content: `follow-up ${n}`, timestamp: Date.parse(at(1)) } },
        { type: "message", id: `r1-${n}`, parentId: `q1-${n}`, timestamp: at(2), message: { role: "assistant", content: [{ type: "text", text: `reply ${n}` }], provider: "p", model: "m", stopReason: "stop", usage: { input: 10, output: 5, cacheRead: 0, cacheWrite: 0, totalTokens: 15, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0.01 } }, timestamp: Date.parse(at(2)) } },
      ];
      appendFileSync(files[1], lines.map((l) => JSON.stringify(l)).join("\n") + "\n");
    };
    await page.click('#tabs button[data-tab="context"]');
    await page.waitForFunction(() => /What the model sees: 2 messages/.test(document.querySelector("#context-pane").textContent));
    turn(1);
    await page.waitForFunction(() => /What the model sees: 4 messages/.test(document.querySelector("#context-pane").textContent));
    assert.match(await page.textContent("#context-pane"), /reply 1/);
    await page.click('#tabs button[data-tab="usage"]');
    // The total row's cells: "total", responses, input, output, cache read, cache write, cost.
    const responses = (n) => page.waitForFunction((n) => document.querySelector("#usage-pane tr.total")?.cells[1].textContent === String(n), n);
    await responses(2);
    turn(2);
    await responses(3);
    assert.equal(await page.evaluate(() => document.querySelector("#usage-pane tr.total").cells[6].textContent), "$0.0300");
  });
});

test("a session file emptied under the page keeps its tree on the page, says so, and shows the file again once it is back", async () => {
  await withSwitchServer(async (page, files) => {
    await page.click(`.session[data-path="${files[1]}"]`);
    await page.waitForSelector('body[data-state="ready"] .row[data-id="r1"]');
    const text = readFileSync(files[1], "utf8");
    writeFileSync(files[1], "");
    await page.waitForFunction(() => /no longer holds a session: what was read of it is shown/.test(document.querySelector("#notice").textContent));
    assert.match(await page.textContent('.row[data-id="r1"]'), /answer of session 1/, "the tree read before is still shown");
    // The branch's transcript (and its tokens line) cannot be read from an empty file: asked once, refused, and
    // not asked again and again (the transcript was, 25 times a second).
    let asked = 0;
    page.on("request", (r) => new URL(r.url()).pathname === "/api/transcript" && asked++);
    await page.click('#tabs button[data-tab="branch"]');
    await page.waitForTimeout(2000);
    assert.ok(asked <= 2, `${asked} transcript requests in 2 s`);
    writeFileSync(files[1], text);
    await page.waitForFunction(() => document.querySelector("#notice").hidden);
    assert.match(await page.textContent('.row[data-id="r1"]'), /answer of session 1/);
    await page.waitForFunction(() => /answer of session 1/.test(document.querySelector("#branch-pane").textContent));
  }, undefined, /^400 for \/api\/(transcript|usage)$/);
});

test("the whole session's tokens and cost beside the tree, and a warning about a line being written, follow the file", async () => {
  await withSwitchServer(async (page, files) => {
    // Session 1's last line is half written when it is opened: the page says so.
    const line = JSON.stringify({ type: "message", id: "r1b", parentId: "r1", timestamp: "2026-02-02T00:00:05.000Z", message: { role: "assistant", content: [{ type: "text", text: "a second answer" }], provider: "p", model: "m", stopReason: "stop", usage: { input: 30, output: 7, cacheRead: 0, cacheWrite: 0, totalTokens: 37, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0.02 } }, timestamp: 1770000005000 } });
    appendFileSync(files[1], line.slice(0, 40));
    await page.click(`.session[data-path="${files[1]}"]`);
    await page.waitForSelector('body[data-state="ready"] .row[data-id="q1"]');
    await page.waitForSelector("#notice:not([hidden])");
    assert.match(await page.textContent("#notice"), /the last line is incomplete/);
    await page.waitForFunction(() => /whole session: .*1 response .*\$0\.0100/.test(document.querySelector("#detail .t-usage")?.textContent || ""));
    // The line is finished by the process writing it: the entry appears, the warning goes, the totals add it.
    appendFileSync(files[1], line.slice(40) + "\n");
    await page.waitForSelector('.row[data-id="r1b"]');
    await page.waitForSelector("#notice", { state: "hidden" });
    await page.waitForFunction(() => /whole session: .*2 responses .*40 in .*\$0\.0300/.test(document.querySelector("#detail .t-usage")?.textContent || ""));
  });
});

test("a page that is reloaded, closed or killed gives its session back to the server", async () => {
  // Each open is a reference on the server's sidecar; a page that went without closing held its session (and
  // the memory it takes) for as long as the server ran: 80 reloads left a 51 MB session open with no page.
  const { dir, files } = switchAgent();
  await withServerOf(dir, async (page, _requests, first) => {
    const token = new URL(first).searchParams.get("token");
    const handles = [];
    const watch = (p) => p.on("response", async (r) => {
      if (new URL(r.url()).pathname === "/api/open" && r.ok()) handles.push((await r.json()).state.handle);
    });
    const still = async (handle) => (await statusOf(first, `/api/snapshot?handle=${handle}&token=${token}`)) === 200;
    const gone = async (handle, within) => {
      const deadline = Date.now() + within;
      while (await still(handle)) {
        if (Date.now() > deadline) return false;
        await new Promise((r) => setTimeout(r, 250));
      }
      return true;
    };
    watch(page);
    await page.goto(`${first}&session=0194dddd-0000-7000-8000-000000000000`);
    await page.waitForSelector('body[data-state="ready"] .row[data-id="q0"]');
    for (let i = 0; i < 3; i++) {
      await page.reload();
      await page.waitForSelector('body[data-state="ready"] .row[data-id="q0"]');
    }
    // Each page that went gave its reference back as it went: only the page shown now holds one.
    const shown = handles[handles.length - 1];
    for (const h of handles.slice(0, -1).filter((h) => h !== shown)) assert.ok(await gone(h, 5000), `${h} of a reloaded page is closed`);
    assert.ok(await still(shown), "open while a page shows it");
    // Closed: the page's goodbye closes the last reference.
    const closing = await browser.newPage();
    await page.close();
    assert.ok(await gone(shown, 5000), "closed once its last page was closed");
    // Killed: no goodbye; the server notices the page's event stream has gone.
    watch(closing);
    await closing.goto(`${first}&session=0194dddd-0001-7000-8000-000000000001`);
    await closing.waitForSelector('body[data-state="ready"] .row[data-id="q1"]');
    const killed = handles[handles.length - 1];
    const cdp = await closing.context().newCDPSession(closing);
    const crashed = new Promise((r) => closing.once("crash", r));
    cdp.send("Page.crash").catch(() => {}); // never answered: the page is gone
    await crashed;
    assert.ok(await gone(killed, 45000), "closed after its page was killed");
    await closing.close().catch(() => {});
  });
});

test("the page fits its window whatever the header's height, and at 600 px every header button is in the window", async () => {
  for (const width of [1400, 900, 600]) {
    await withSwitchServer(async (page, files) => {
      await page.click(`.session[data-path="${files[2]}"]`);
      await page.waitForSelector('body[data-state="ready"] .row');
      const { scroll, client, layoutBottom } = await page.evaluate(() => ({
        scroll: document.documentElement.scrollHeight,
        client: document.documentElement.clientHeight,
        layoutBottom: document.getElementById("layout").getBoundingClientRect().bottom,
      }));
      assert.ok(scroll <= client && layoutBottom <= client, `at ${width} px the page is ${scroll} px tall, its layout ends at ${layoutBottom}, in ${client} px`);
      for (const control of ["#resume-copy", "#overview-button"]) {
        const box = await page.locator(control).boundingBox();
        assert.ok(box && box.x >= 0 && box.x + box.width <= width, `at ${width} px ${control} lies within the window: ${JSON.stringify(box)}`);
        assert.ok(box.y + box.height <= client, `at ${width} px ${control} is above the window's bottom`);
      }
      const copy = await page.textContent("#resume-copy");
      assert.equal(copy, "Copy resume command", "the button's words are whole");
    }, { width, height: 600 });
  }
});

test("at 360 px nothing pushes the page sideways, and a short window scrolls rather than squeeze the tree", async () => {
  for (const [width, height] of [[360, 800], [420, 320]]) {
    await withSwitchServer(async (page, files) => {
      await page.click(`.session[data-path="${files[2]}"]`);
      await page.waitForSelector('body[data-state="ready"] .row');
      const { scrollWidth, clientWidth, tree, list } = await page.evaluate(() => ({
        scrollWidth: document.documentElement.scrollWidth,
        clientWidth: document.documentElement.clientWidth,
        tree: document.getElementById("tree-scroll").getBoundingClientRect().height,
        list: document.getElementById("list").getBoundingClientRect().height,
      }));
      assert.ok(scrollWidth <= clientWidth, `${width}×${height}: no sideways scrolling: ${scrollWidth} in ${clientWidth}`);
      assert.ok(tree >= 66 && list >= 66, `${width}×${height}: the tree (${tree} px) and the list (${list} px) show rows`);
    }, { width, height });
  }
});

test("at 420 px the list sits above the session and the tree takes the whole width", async () => {
  // Side by side at 420 px the tree had 71 px and every row read "…", and the page scrolled sideways.
  await withSwitchServer(async (page, files) => {
    await page.click(`.session[data-path="${files[1]}"]`);
    await page.waitForSelector('body[data-state="ready"] .row[data-id="q1"]');
    const { scrollWidth, clientWidth, tree, row } = await page.evaluate(() => ({
      scrollWidth: document.documentElement.scrollWidth,
      clientWidth: document.documentElement.clientWidth,
      tree: document.getElementById("tree-scroll").getBoundingClientRect().width,
      row: document.querySelector('.row[data-id="q1"]').textContent,
    }));
    assert.ok(scrollWidth <= clientWidth, `no sideways scrolling: ${scrollWidth} in ${clientWidth}`);
    assert.ok(tree >= 380, `the tree is ${tree} px wide`);
    assert.match(row, /question of session 1/);
  }, { width: 420, height: 800 });
});

test("each tab is shown alone", async () => {
  await withSwitchServer(async (page, files) => {
    await page.click(`.session[data-path="${files[1]}"]`);
    await page.waitForSelector('body[data-state="ready"] .row');
    const panes = ["tree", "branch", "context", "usage"];
    for (const tab of [...panes, "tree"]) {
      await page.click(`#tabs button[data-tab="${tab}"]`);
      for (const p of panes) {
        const seen = await page.isVisible(`#${p}-pane`);
        assert.equal(seen, p === tab, `on the ${tab} tab, the ${p} pane is ${seen ? "shown" : "hidden"}`);
      }
      assert.equal(await page.isVisible("#filter"), tab === "tree", `the tree's tools on the ${tab} tab`);
    }
  });
});

test("a leaf that is a label is shown on its nearest drawn entry, scrolled to and selected by the leaf button", async () => {
  await withSwitchServer(async (page, files) => {
    await page.click(`.session[data-path="${files[2]}"]`);
    // The default filter hides the label entry: the leaf mark is on the entry it hangs from.
    await page.waitForSelector('.row[data-id="r2"] .leaf');
    assert.equal(await page.locator(".row .leaf").count(), 1);
    await page.click("#to-leaf");
    await page.waitForSelector('.row.sel[data-id="r2"]');
    await page.waitForSelector('#detail .entry.sel.t-assistant[data-entry="r2"]');
    assert.match(await page.textContent("#detail .entry.sel"), /answer of session 2/);
    // Every entry shown: the label itself is the leaf, and the transcript says what it does, in words.
    await page.selectOption("#filter", "all");
    await page.waitForSelector('.row[data-id="lab2"] .leaf');
    await page.click("#to-leaf");
    await page.waitForSelector('.row.sel[data-id="lab2"]');
    await page.waitForSelector('#detail .entry.sel.t-note[data-entry="lab2"]');
    assert.equal(await page.textContent("#detail .entry.sel"), "label q2 → checkpoint");
  });
});

test("at 700 px the whole toolbar is in the window, and loading the page asks for nothing it is refused", async () => {
  await withSwitchServer(async (page, files) => {
    await page.click(`.session[data-path="${files[0]}"]`);
    await page.waitForSelector('body[data-state="ready"] .row');
    for (const control of ["#tabs button[data-tab=usage]", "#filter", "#follow", "#to-leaf"]) {
      const box = await page.locator(control).boundingBox();
      assert.ok(box && box.x >= 0 && box.x + box.width <= 700, `${control} lies within the 700 px window: ${JSON.stringify(box)}`);
    }
    await page.click("#to-leaf");
    await page.waitForSelector('.row.sel[data-id="r0"]');
  }, { width: 700, height: 600 });
});

test("an exported page's list says how many messages the session has, when it was active and where", async () => {
  const { dir, files } = switchAgent();
  // An entry a day after the last message: pi's list says when the session was last *active* (its last
  // message), and so does the live page; the export had said the last entry's day.
  appendFileSync(files[2], JSON.stringify({ type: "custom", id: "c2", parentId: "lab2", timestamp: "2026-02-04T06:00:00.000Z", customType: "ext", data: {} }) + "\n");
  const listed = JSON.parse(execFileSync(bin, ["--agent-dir", dir, "ls", "--json", "--all"], { encoding: "utf8" })).find((s) => s.path === files[2]);
  assert.match(listed.modified, /^2026-02-03T/);
  const out = join(work, "switch-export.html");
  execFileSync(bin, ["--agent-dir", dir, "export", files[2], "--html", "-o", out]);
  const page = await browser.newPage();
  await page.goto(`file://${out}`);
  await page.waitForSelector('body[data-state="ready"] .row');
  assert.equal(await page.textContent(".session .s-meta"), "2 messages · 2026-02-03");
  assert.equal(await page.textContent(".group .g-cwd"), "/work/switch", "the session's project heads its group");
  assert.equal(await page.textContent(".session .s-title"), "question of session 2: quinces");
  await page.close();
});

test("search marks the matched words in each hit, says how many hits there are in all and shows more on asking", async () => {
  await withSwitchServer(async (page) => {
    await page.fill("#search", 'QUINCES "of session"');
    await page.waitForSelector(".hit mark");
    const marks = await page.$$eval(".hit mark", (ms) => ms.map((m) => m.textContent));
    assert.ok(marks.includes("quinces") && marks.includes("of session"), `marked: ${JSON.stringify(marks)}`);
    assert.doesNotMatch(await page.textContent("#list"), /there are more/);
  });
  // The generated session has thousands of questions: the page says how many, shows the best 100, and the
  // "more" button adds the next 100, none of them shown before.
  const asked = readFileSync(bigFile, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l)).filter((e) => {
    const c = e.type === "message" ? e.message.content : undefined;
    const text = typeof c === "string" ? c : Array.isArray(c) ? c.filter((b) => b.type === "text").map((b) => b.text).join("\n") : "";
    return text.toLowerCase().includes("question");
  }).length;
  assert.ok(asked > 1000, `${asked} questions`);
  const page = await browser.newPage();
  await page.goto(url);
  await page.fill("#search", "question");
  await page.waitForSelector(".hit");
  assert.equal(await page.textContent("#list .search-count"), `${asked.toLocaleString("en-US")} matches in 1 session, best first: the first 100 shown`);
  assert.equal(await page.locator(".hit").count(), 100);
  const shown = () => page.$$eval(".hit", (hs) => hs.map((h) => h.textContent));
  const first = await shown();
  await page.click("#more-hits");
  await page.waitForFunction(() => document.querySelectorAll(".hit").length === 200);
  const both = await shown();
  assert.deepEqual(both.slice(0, 100), first, "the first page stays as it was");
  assert.equal(new Set(both).size, 200, "the second page repeats none of the first");
  assert.match(await page.textContent("#more-hits"), new RegExp(`^Show 100 more of ${(asked - 200).toLocaleString("en-US")}$`));
  await page.close();
});

test("the usage overview draws every session's tokens and cost by day, stacked by model, as `pi-sessiond usage` sums them", async () => {
  const dir = join(work, "usage-agent");
  const models = ["anthropic/big", "openai/small"];
  for (const [k, cwd] of ["/work/one", "/work/two"].entries()) {
    const sessions = join(dir, "sessions", `--work-${["one", "two"][k]}--`);
    mkdirSync(sessions, { recursive: true });
    // Days 5 and 6 have no usage, nor day 3.
    for (const d of [1, 2, 4, 7]) {
      const id = `0194eeee-00${k}${d}-7000-8000-0000000000${k}${d}`;
      const at = (s) => `2026-03-0${d}T12:00:0${s}.000Z`;
      const lines = [{ type: "session", version: 3, id, timestamp: at(0), cwd }];
      lines.push({ type: "message", id: "u", parentId: null, timestamp: at(1), message: { role: "user", content: "go", timestamp: 1 } });
      let parent = "u";
      for (let i = 0; i < 3; i++) {
        const [provider, model] = models[(i + d + k) % 2].split("/");
        const input = 100 * d + 10 * i + k, output = 7 * i + 1;
        const usage = { input, output, cacheRead: 50, cacheWrite: 5, totalTokens: input + output + 55, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0.001 * d + 0.0003 * i } };
        lines.push({ type: "message", id: `a${i}`, parentId: parent, timestamp: at(2 + i), message: { role: "assistant", content: [{ type: "text", text: "ok" }], provider, model, usage, stopReason: "stop", timestamp: 1 } });
        parent = `a${i}`;
      }
      writeFileSync(join(sessions, `2026-03-0${d}T12-00-00-000Z_${id}.jsonl`), lines.map((l) => JSON.stringify(l)).join("\n") + "\n");
    }
  }
  // Months later, one more day of usage: the pause is one slot, not 200 that squeeze the bars.
  const later = join(dir, "sessions", "--work-later--");
  mkdirSync(later, { recursive: true });
  const laterFile = join(later, "2026-09-30T12-00-00-000Z_0194eeee-0909-7000-8000-000000000909.jsonl");
  const laterLine = (id, parent, s, cost) => JSON.stringify({ type: "message", id, parentId: parent, timestamp: `2026-09-30T12:00:0${s}.000Z`, message: { role: "assistant", content: [{ type: "text", text: "ok" }], provider: "anthropic", model: "big", usage: { input: 900, output: 9, cacheRead: 0, cacheWrite: 0, totalTokens: 909, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: cost } }, stopReason: "stop", timestamp: 1 } });
  writeFileSync(laterFile, [JSON.stringify({ type: "session", version: 3, id: "0194eeee-0909-7000-8000-000000000909", timestamp: "2026-09-30T12:00:00.000Z", cwd: "/work/later" }), laterLine("l1", null, 1, 0.0123)].join("\n") + "\n");
  const cli = (by) => JSON.parse(execFileSync(bin, ["--agent-dir", dir, "usage", "--by", by, "--json"], { encoding: "utf8" }));
  const other = spawn(bin, ["--agent-dir", dir, "web", "--port", "0"], { stdio: ["ignore", "pipe", "inherit"] });
  let page;
  try {
    const first = await firstLine(other);
    page = await browser.newPage();
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    page.on("response", (r) => {
      const refused = `${r.status()} for ${new URL(r.url()).pathname}`;
      if (r.status() >= 400 && !refusedOnPurpose?.test(refused)) errors.push(refused);
    });
    await page.goto(first);
    await page.waitForSelector(".session");
    await page.click("#overview-button");
    await page.waitForSelector('svg.chart[data-kind="cost"] rect');
    assert.equal(await page.isHidden("#tabs"), true, "the session tabs give way to the overview");
    const bars = (kind) =>
      page.$$eval(`svg.chart[data-kind="${kind}"] rect`, (rs) => rs.map((r) => ({ day: r.dataset.day, model: r.dataset.model, value: Number(r.dataset.value) })));
    const sum = (rects, key) => rects.reduce((m, r) => m.set(r[key], (m.get(r[key]) || 0) + r.value), new Map());
    const tokens = await bars("tokens");
    const cost = await bars("cost");
    const byDay = cli("day");
    assert.deepEqual([...sum(tokens, "day").keys()].sort(), ["2026-03-01", "2026-03-02", "2026-03-04", "2026-03-07", "2026-09-30"]);
    // The axis is the calendar: a day without usage is a gap of one bar's room, not left out.
    const xOf = await page.$$eval('svg.chart[data-kind="tokens"] rect', (rs) => Object.fromEntries(rs.map((r) => [r.dataset.day, Number(r.getAttribute("x"))])));
    const step = xOf["2026-03-02"] - xOf["2026-03-01"];
    assert.ok(step > 0, JSON.stringify(xOf));
    assert.deepEqual([xOf["2026-03-04"], xOf["2026-03-07"]].map((x) => Math.round(((x - xOf["2026-03-01"]) / step) * 1e6) / 1e6), [3, 6], JSON.stringify(xOf));
    for (const row of byDay) {
      assert.equal(sum(tokens, "day").get(row.day), row.totalTokens, `tokens of ${row.day}`);
      assert.ok(Math.abs(sum(cost, "day").get(row.day) - row.cost) < 1e-9, `cost of ${row.day}: ${sum(cost, "day").get(row.day)} vs ${row.cost}`);
    }
    for (const row of cli("model")) {
      assert.equal(sum(tokens, "model").get(row.model), row.totalTokens, `tokens of ${row.model}`);
    }
    assert.deepEqual([...new Set(tokens.map((r) => r.model))].sort(), models, "one colour a model, stacked in each day's bar");
    assert.equal(await page.locator(".usage-table tr[data-day]").count(), 5);
    const gap = await page.$$eval('svg.chart[data-kind="tokens"] text.gap title', (ts) => ts.map((t) => t.textContent));
    assert.deepEqual(gap, ["206 days without usage"], "the months between are one slot");
    const width = await page.$eval('svg.chart[data-kind="tokens"]', (c) => Number(c.getAttribute("width")));
    assert.ok(xOf["2026-09-30"] > xOf["2026-03-07"] && xOf["2026-09-30"] < width, `the newest day is drawn inside the chart: ${xOf["2026-09-30"]} of ${width}`);
    // The table shows each day's sums and the total exactly as `pi-sessiond usage` adds them.
    const tableCost = await page.$$eval(".usage-table tr[data-cost]", (rs) => rs.map((r) => [r.dataset.day ?? "total", Number(r.dataset.cost)]));
    let total = 0;
    for (const row of byDay) total += row.cost;
    assert.deepEqual(tableCost, [...byDay.map((r) => [r.day, r.cost]).reverse(), ["total", total]]);
    // It follows the sessions while it is shown: another process appends a response.
    appendFileSync(laterFile, laterLine("l2", "l1", 2, 0.5) + "\n");
    await page.waitForFunction(() => /\$0\.5123/.test(document.querySelector('.usage-table tr[data-day="2026-09-30"]')?.textContent || ""), null, { timeout: 15000 });
    // Choosing a session leaves the overview for that session's view.
    await page.click(".session");
    await page.waitForSelector("#overview-pane", { state: "hidden" });
    assert.equal(await page.isVisible("#tabs"), true);
    assert.deepEqual(errors, []);
  } finally {
    await page?.close();
    other.removeAllListeners("exit");
    other.kill("SIGTERM");
  }
});

test("keys alone go from the list to an entry, the address names it, and that address opens at the entry", async () => {
  await withSwitchServer(async (page, files) => {
    // The list is newest first: session 2, 1, 0.
    const id = (k) => `0194dddd-000${k}-7000-8000-00000000000${k}`;
    await page.keyboard.press("?");
    assert.equal(await page.isVisible("#keys"), true, "? shows the shortcut sheet");
    await page.keyboard.press("Escape");
    assert.equal(await page.isVisible("#keys"), false);
    await page.keyboard.press("j");
    await page.keyboard.press("ArrowDown");
    assert.equal(await page.getAttribute(".session.cur", "data-path"), files[1]);
    await page.keyboard.press("Enter");
    await page.waitForSelector(`.session.on[data-path="${files[1]}"]`);
    await page.waitForSelector('.row[data-id="q1"]');
    // In the tree: the first key selects the leaf, k goes up to the question.
    await page.keyboard.press("j");
    await page.waitForSelector('.row.sel[data-id="r1"]');
    await page.keyboard.press("k");
    await page.waitForSelector('.row.sel[data-id="q1"]');
    await page.waitForFunction(() => new URL(location.href).searchParams.get("entry") === "q1");
    const address = new URL(page.url());
    assert.equal(address.searchParams.get("session"), id(1));
    assert.ok(address.searchParams.get("token"), "the address keeps the token");
    await page.keyboard.press("/");
    assert.equal(await page.evaluate(() => document.activeElement.id), "search");

    const again = await page.context().newPage();
    try {
      const at = new URL(address);
      at.searchParams.set("session", id(0));
      at.searchParams.set("entry", "r0");
      await again.goto(at.href);
      await again.waitForSelector('.row.sel[data-id="r0"]');
      await again.waitForSelector(`.session.on[data-path="${files[0]}"]`);
      await again.waitForSelector('#detail .entry.sel.t-assistant[data-entry="r0"]');
      assert.match(await again.textContent("#detail .entry.sel"), /answer of session 0/);
    } finally {
      await again.close();
    }
  });
});

/** One session file as pi writes it when its first turn ends: header, question and answer in one write. */
function piSession(dir, cwd, k, question, at) {
  mkdirSync(dir, { recursive: true });
  const id = `0194ffff-000${k}-7000-8000-00000000000${k}`;
  const t = (s) => new Date(Date.parse(at) + s * 1000).toISOString();
  const lines = [
    { type: "session", version: 3, id, timestamp: t(0), cwd },
    { type: "message", id: `q${k}`, parentId: null, timestamp: t(1), message: { role: "user", content: question, timestamp: Date.parse(t(1)) } },
    { type: "message", id: `r${k}`, parentId: `q${k}`, timestamp: t(2), message: { role: "assistant", content: [{ type: "text", text: `answer ${k}` }], provider: "p", model: "m", stopReason: "stop", usage: { input: 1, output: 1, cacheRead: 0, cacheWrite: 0, totalTokens: 2, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } }, timestamp: Date.parse(t(2)) } },
  ];
  const file = join(dir, `${t(0).replace(/[:.]/g, "-")}_${id}.jsonl`);
  writeFileSync(file, lines.map((l) => JSON.stringify(l)).join("\n") + "\n");
  return file;
}


test("the page says what reading a file found, and that its file was deleted only until it is back", async () => {
  const dir = join(work, "notice-agent");
  const root = join(dir, "sessions", "--work-notice--");
  const clean = piSession(root, "/work/notice", 0, "a clean session", "2026-03-01T00:00:00.000Z");
  const marred = piSession(root, "/work/notice", 1, "a session with a bad line", "2026-03-02T00:00:00.000Z");
  const [head, ...rest] = readFileSync(marred, "utf8").split("\n");
  writeFileSync(marred, [head, "this line is not JSON", ...rest].join("\n"));
  const kept = readFileSync(marred);
  await withServerOf(dir, async (page) => {
    await page.waitForSelector(`.session[data-path="${marred}"]`);
    const said = async () => ((await page.isVisible("#notice")) ? await page.textContent("#notice") : "");
    await page.click(`.session[data-path="${marred}"]`);
    await page.waitForSelector('body[data-state="ready"] .row[data-id="q1"]');
    assert.match(await said(), /1 problem: line 2: line is not valid JSON.*stay in the file/);
    await page.click(`.session[data-path="${clean}"]`);
    await page.waitForSelector('body[data-state="ready"] .row[data-id="q0"]');
    assert.equal(await said(), "", "a clean session has nothing to say");
    await page.click(`.session[data-path="${marred}"]`);
    await page.waitForSelector('body[data-state="ready"] .row[data-id="q1"]');
    rmSync(marred);
    await page.waitForFunction(() => /was deleted/.test(document.getElementById("notice").textContent), null, { timeout: 5000 });
    writeFileSync(marred, kept);
    await page.waitForFunction(() => /line 2/.test(document.getElementById("notice").textContent), null, { timeout: 5000 });
    assert.doesNotMatch(await said(), /deleted/);
  });
});

test("the list groups sessions by project and follows sessions other processes create, append to and delete, without reloading the list", async () => {
  const dir = join(work, "live-list-agent");
  const root = join(dir, "sessions");
  const hour = 3600 * 1000;
  const alpha = [0, 1].map((k) => piSession(join(root, "--work-alpha--"), "/work/alpha", k, `alpha question ${k}`, new Date(Date.now() - (5 - k) * hour).toISOString()));
  // Half past the hour, so the ages below are whole hours however long the test takes.
  const betaAt = new Date(Date.now() - 3.5 * hour).toISOString();
  const beta = piSession(join(root, "--work-beta--"), "/work/beta", 2, "beta question", betaAt);
  await withServerOf(dir, async (page, requests) => {
    await page.waitForSelector(".session");
    const groups = () => page.$$eval("#list .group", (gs) => gs.map((g) => ({ cwd: g.dataset.cwd, paths: [...g.querySelectorAll(".session")].map((s) => s.dataset.path) })));
    assert.deepEqual(await groups(), [
      { cwd: "/work/beta", paths: [beta] },
      { cwd: "/work/alpha", paths: [alpha[1], alpha[0]] },
    ]);
    assert.equal(await page.textContent(`.session[data-path="${beta}"] .s-count`), "2 messages");
    assert.equal(await page.textContent(`.session[data-path="${beta}"] .s-age`), "3 h ago");
    const hover = await page.getAttribute(`.session[data-path="${beta}"] .s-age`, "title");
    // The session's activity is its last message's time, 2 s after its start.
    const betaLast = new Date(Date.parse(betaAt) + 2000).toISOString().replace("T", " ").slice(0, 19);
    assert.ok(hover.includes(`${betaLast} UTC`), `the absolute time on hover: ${hover}`);

    // Another process starts a session in a project the list has never seen, and one in a project it has.
    const gamma = piSession(join(root, "--work-gamma--"), "/work/gamma", 3, "gamma question", new Date(Date.now() - 60 * 1000).toISOString());
    await page.waitForSelector(`#list .group[data-cwd="/work/gamma"] .session[data-path="${gamma}"]`, { timeout: 5000 });
    const alpha2 = piSession(join(root, "--work-alpha--"), "/work/alpha", 4, "alpha question four", new Date(Date.now() - 2 * hour).toISOString());
    await page.waitForSelector(`#list .group[data-cwd="/work/alpha"] .session[data-path="${alpha2}"]`, { timeout: 5000 });
    assert.deepEqual(await groups(), [
      { cwd: "/work/gamma", paths: [gamma] },
      { cwd: "/work/alpha", paths: [alpha2, alpha[1], alpha[0]] },
      { cwd: "/work/beta", paths: [beta] },
    ]);

    // pi appends a turn to the beta session: its count and age change, and its project comes first.
    const now = new Date().toISOString();
    const next = { type: "message", id: "q2b", parentId: "r2", timestamp: now, message: { role: "user", content: "one more", timestamp: Date.parse(now) } };
    execFileSync(process.execPath, ["-e", `require("fs").appendFileSync(process.argv[1], process.argv[2] + "\\n")`, beta, JSON.stringify(next)]);
    await page.waitForFunction((p) => document.querySelector(`.session[data-path="${p}"] .s-count`)?.textContent === "3 messages", beta, { timeout: 5000 });
    assert.equal(await page.textContent(`.session[data-path="${beta}"] .s-age`), "just now");
    assert.equal((await groups())[0].cwd, "/work/beta");

    // A deleted session leaves the list.
    rmSync(alpha[0]);
    await page.waitForSelector(`.session[data-path="${alpha[0]}"]`, { state: "detached", timeout: 5000 });

    // Typing in the filter keeps the sessions whose title, project or id contain every word.
    await page.fill("#list-filter", "alpha FOUR");
    await page.waitForFunction(() => document.querySelectorAll("#list .session").length === 1);
    assert.deepEqual(await groups(), [{ cwd: "/work/alpha", paths: [alpha2] }]);
    await page.fill("#list-filter", "GAMMA");
    await page.waitForFunction(() => document.querySelectorAll("#list .session").length === 1);
    assert.deepEqual(await groups(), [{ cwd: "/work/gamma", paths: [gamma] }]);
    await page.fill("#list-filter", "");
    await page.waitForFunction(() => document.querySelectorAll("#list .session").length === 4);

    assert.equal(requests.filter((p) => p === "/api/sessions").length, 1, "the whole list is read once, at load");
  });
});

test("the resume command is pi's --session with the path quoted for a POSIX shell, and the copy button copies exactly it", async () => {
  const dir = join(work, "resume-agent");
  const file = piSession(join(dir, "sessions", "--work-it's $HOME `x`--"), "/work/it's $HOME `x`", 5, "resume me", "2026-02-01T00:00:00.000Z");
  await withServerOf(dir, async (page, _requests, first) => {
    await page.context().grantPermissions(["clipboard-read", "clipboard-write"], { origin: new URL(first).origin });
    assert.equal(await page.isVisible("#resume"), false, "no command before a session is open");
    await page.click(`.session[data-path="${file}"]`);
    await page.waitForSelector('body[data-state="ready"] .row');
    const command = await page.textContent("#resume-command");
    assert.equal(command, `pi --session '${file.replace(/'/g, "'\\''")}'`);
    // What a shell makes of it: the two arguments pi is given, the path exactly.
    const args = execFileSync("sh", ["-c", command.replace(/^pi /, "printf '%s\\n' ")], { encoding: "utf8" });
    assert.equal(args, `--session\n${file}\n`);
    await page.click("#resume-copy");
    await page.waitForFunction(() => document.getElementById("resume-copy").textContent === "Copied");
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), command);
  });
});

test("the resume command of a session in a right-to-left directory is drawn in the path's order", async () => {
  // `--home-dev-مشروع-عربي--/2026-…`: the date after the Arabic name was drawn before it, the slash elsewhere.
  const dir = join(work, "rtl-agent");
  const file = piSession(join(dir, "sessions", "--home-dev-مشروع-عربي--"), "/home/dev/مشروع-عربي", 3, "مرحبا", "2026-03-03T09:00:00.000Z");
  await withServerOf(dir, async (page) => {
    await page.click(`.session[data-path="${file}"]`);
    await page.waitForSelector('body[data-state="ready"] .row');
    assert.equal(await page.textContent("#resume-command"), `pi --session '${file}'`, "the text is the command");
    const pieces = await page.$$eval("#resume-command bdi", (bs) => bs.map((b) => ({ text: b.textContent, left: b.getBoundingClientRect().left, right: b.getBoundingClientRect().right })));
    const names = pieces.map((p) => p.text);
    assert.ok(names.some((n) => n.includes("مشروع")) && names.some((n) => n.startsWith("2026-03-03T09")), JSON.stringify(names));
    for (let i = 1; i < pieces.length; i++) {
      assert.ok(pieces[i].left >= pieces[i - 1].right - 0.5, `piece ${i} (${pieces[i].text}) is drawn after ${pieces[i - 1].text}: ${JSON.stringify(pieces)}`);
    }
  }, { width: 2400, height: 600 });
});

test("a page opened on an agent directory without sessions shows the first session pi makes", async () => {
  const dir = join(work, "empty-agent");
  mkdirSync(dir, { recursive: true });
  await withServerOf(dir, async (page) => {
    await page.waitForSelector("#list .hint");
    assert.equal(await page.textContent("#list .hint"), "No sessions yet.");
    // pi makes the sessions directory, the project's directory and the file together, with its first turn.
    const first = piSession(join(dir, "sessions", "--work-new--"), "/work/new", 6, "the very first question", new Date().toISOString());
    await page.waitForSelector(`#list .group[data-cwd="/work/new"] .session[data-path="${first}"]`, { timeout: 10000 });
    // From then on the list follows the directory as it does any other.
    const second = piSession(join(dir, "sessions", "--work-new--"), "/work/new", 7, "a second question", new Date().toISOString());
    await page.waitForSelector(`.session[data-path="${second}"]`, { timeout: 5000 });
  });
});
