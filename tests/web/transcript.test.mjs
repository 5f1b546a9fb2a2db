// The transcript as a person reads it, in Debian's headless Chromium: a realistic session (tests/web/gen.mjs)
// shown as a conversation — markdown, highlighted code, each tool call with its result, an image, folded
// thinking and output, summaries, custom entries and bookkeeping — live and in an export opened offline; the
// tree and the transcript showing each other's selection; and a session full of scripts and outside addresses,
// in every text a session has, that never runs one nor asks for one.
//
// Needs /usr/bin/chromium and PI_SESSIOND_BIN (default: target/debug/pi-sessiond).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, mkdirSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { transcriptSession, xssSession } from "./gen.mjs";
import { launchChromium, startWeb } from "./support.mjs";

const root = resolve(new URL("../..", import.meta.url).pathname);
const bin = process.env.PI_SESSIOND_BIN || join(root, "target/debug/pi-sessiond");
const work = mkdtempSync(join(tmpdir(), "pi-sessiond-transcript-"));
const agent = join(work, "agent");
const project = join(agent, "sessions", "--work-tokenizer--");
const id = "0194eeee-0000-7000-8000-000000000001";
const file = join(project, `2026-03-04T09-00-00-000Z_${id}.jsonl`);
const xssId = "0194eeee-0000-7000-8000-000000000666";
const xssFile = join(project, `2026-03-05T09-00-00-000Z_${xssId}.jsonl`);

let web;
let browser;

before(async () => {
  mkdirSync(project, { recursive: true });
  writeFileSync(file, transcriptSession(id));
  writeFileSync(xssFile, xssSession(xssId));
  web = await startWeb(bin, agent);
  browser = await launchChromium(work);
});

after(async () => {
  await browser?.close();
  web?.stop();
  rmSync(work, { recursive: true, force: true });
});

/** A new page that fails the test on any error it throws. */
async function newPage(viewport) {
  const page = await browser.newPage();
  if (viewport) await page.setViewportSize(viewport);
  page.errors = [];
  page.on("pageerror", (e) => page.errors.push(String(e)));
  return page;
}

const entry = (id) => `#detail [data-entry="${id}"]`;
const within = (id) => `[data-entry="${id}"]`;

/** What a reader of the realistic session sees, the same live and exported. */
async function readsAsAConversation(page) {
  await page.waitForSelector(`${entry("u1")}.t-user`);
  // Opened at the leaf: the reader scrolls up to the start.
  await page.locator(entry("u1")).scrollIntoViewIfNeeded();
  // Markdown rendered, and the code block highlighted (as it comes into view).
  assert.equal(await page.textContent(`${entry("u1")} .md strong`), "why");
  assert.equal(await page.textContent(`${entry("u1")} .md p code`), "don't");
  await page.waitForSelector(`${entry("u1")} pre code.language-rust .hljs-keyword`);
  assert.equal(await page.textContent(`${entry("u1")} pre code`), 'let t = tokenize("don\'t");\nassert_eq!(t.len(), 2);\n');
  // Thinking is folded; the tool call's arguments are shown and its result sits under it, folded when long.
  assert.equal(await page.getAttribute(`${entry("a1")} details.thinking`, "open"), null);
  assert.equal(await page.isVisible(`${entry("a1")} details.thinking .md`), false);
  const call = `${entry("a2")} .call[data-call="call_bash_1"]`;
  await page.locator(call).scrollIntoViewIfNeeded();
  assert.equal(await page.textContent(`${call} .call-head`), "bash");
  await page.waitForSelector(`${call} .call-result ${within("r2")}.t-toolResult`);
  assert.equal(await page.isVisible(`${call} pre.out`), false, "41 lines of output are folded");
  assert.match(await page.textContent(`${call} .call-result summary`), /output · 41 lines/);
  await page.click(`${call} .call-result summary`);
  assert.match(await page.textContent(`${call} pre.out`), /test result: FAILED\. 35 passed; 1 failed/);
  await page.waitForSelector(`${call} pre code.language-bash .hljs-built_in, ${call} pre code.language-bash span`);
  // The edit's new text is highlighted as the language of the file it edits.
  await page.locator(`${entry("a3")} .call`).scrollIntoViewIfNeeded();
  await page.waitForSelector(`${entry("a3")} .call code.language-rs .hljs-keyword`);
  assert.equal(await page.textContent(`${entry("a3")} .md table tbody tr:first-child td:first-child`), "don't");
  // The screenshot, inline under its call, decoded once it is in view.
  const img = `${entry("a4")} .call-result ${within("r4")} img.image`;
  await page.locator(img).scrollIntoViewIfNeeded();
  await page.waitForFunction((sel) => {
    const i = document.querySelector(sel);
    return i && i.complete && i.naturalWidth === 48 && i.naturalHeight === 32;
  }, img);
  // A command the user ran, summaries, custom entries and bookkeeping, as what they are.
  assert.match(await page.textContent(`${entry("x1")}.t-bashExecution`), /bash · exit 0.*cargo test tokenizer.*36 passed/s);
  assert.match(await page.textContent(`${entry("k1")}.t-summary`), /compaction · 48,210 tokens before/);
  assert.equal(await page.textContent(`${entry("k1")} .md h2`), "Goal");
  assert.match(await page.textContent(`${entry("b1")}.t-summary`), /branch summary · from u4.*regex tokenizer.*abandoned/s);
  assert.match(await page.textContent(`${entry("c1")}.t-note`), /^todo-list/);
  assert.match(await page.textContent(`${entry("cm1")}.t-custom`), /review-bot/);
  assert.equal(await page.textContent(`${entry("cm1")} .md strong`), "approved");
  assert.equal(await page.textContent(`${entry("m1")}.t-note`), "model → anthropic/claude-opus-4-5");
  assert.equal(await page.textContent(`${entry("t1")}.t-note`), "thinking level → high");
  assert.equal(await page.textContent(`${entry("l1")}.t-note`), "label a3 → the fix");
  // The abandoned branch is not on the leaf's path.
  assert.equal(await page.locator(entry("u4")).count(), 0);
  // The head: both models, and tokens and cost as pi counts them (the generator's six responses), said to be the
  // whole session's: pi counts every branch, where the line above it counts the path's entries.
  const usage = await page.textContent("#detail .t-usage");
  assert.match(usage, /^whole session: /);
  assert.match(usage, /claude-opus-4-5/);
  assert.match(usage, /claude-sonnet-4-5/);
  assert.match(usage, /6 responses · 19,600 in · 660 out · 5,400 cache read · 0 cache write · \$0\.0950/);
  assert.match(await page.textContent("#detail .t-head"), /24 entries from the root to the leaf/);
}

test("a session reads as a conversation: markdown, highlighted code, tool calls with their results, an image", async () => {
  const page = await newPage();
  await page.goto(`${web.url}&session=${id}`);
  await page.waitForSelector('body[data-state="ready"] .row');
  await readsAsAConversation(page);
  assert.deepEqual(page.errors, []);
  await page.close();
});

test("an export reads the same, offline, and asks for nothing", async () => {
  const out = join(work, "transcript.html");
  execFileSync(bin, ["--agent-dir", agent, "export", file, "--html", "-o", out]);
  const page = await newPage();
  await page.context().setOffline(true);
  const asked = [];
  page.on("request", (r) => asked.push(r.url()));
  try {
    await page.goto(`file://${out}`);
    await page.waitForSelector('body[data-state="ready"] .row');
    await readsAsAConversation(page);
    assert.deepEqual(asked.filter((u) => !u.startsWith("file://") && !u.startsWith("data:")), []);
    assert.deepEqual(page.errors, []);
  } finally {
    await page.context().setOffline(false);
    await page.close();
  }
});

test("selecting an entry in the tree scrolls the transcript to it, and clicking one in the transcript selects it in the tree", async () => {
  const page = await newPage({ width: 1100, height: 520 });
  await page.goto(`${web.url}&session=${id}`);
  await page.waitForSelector('body[data-state="ready"] .row');
  const inView = (sel) =>
    page.$eval(sel, (e) => {
      const r = e.getBoundingClientRect();
      const p = document.getElementById("detail").getBoundingClientRect();
      return r.top < p.bottom && r.bottom > p.top;
    });
  // Opened at the leaf: the end of the path is in view, the start is not.
  await page.waitForSelector(`${entry("cm1")}:not(.place)`);
  await page.waitForFunction(() => {
    const d = document.getElementById("detail");
    return d.scrollTop > 0;
  });
  assert.equal(await inView(entry("u1")), false);
  // Tree → transcript.
  await page.click('.row[data-id="u1"]');
  await page.waitForSelector(`${entry("u1")}.sel.t-user`);
  await page.waitForFunction((sel) => {
    const r = document.querySelector(sel).getBoundingClientRect();
    const p = document.getElementById("detail").getBoundingClientRect();
    return r.top >= p.top - 1 && r.top < p.bottom;
  }, entry("u1"));
  assert.equal(await page.locator("#detail .entry.sel").count(), 1);
  // Transcript → tree: the row is selected and scrolled into the tree's view.
  await page.locator(entry("a6")).scrollIntoViewIfNeeded();
  await page.click(`${entry("a6")} .who`);
  await page.waitForSelector('.row.sel[data-id="a6"]');
  await page.waitForFunction(() => new URL(location.href).searchParams.get("entry") === "a6");
  assert.equal(await page.locator(`${entry("a6")}.sel`).count(), 1);
  // An entry the tree's filter hides (an assistant message that only calls a tool) is marked on the entry it
  // hangs from.
  await page.locator(entry("a4")).scrollIntoViewIfNeeded();
  await page.click(`${entry("a4")} > .who`);
  await page.waitForSelector('.row.sel[data-id="u2"]');
  // An entry off the leaf's path: the transcript shows the path to it instead.
  await page.click('.row[data-id="u4"]');
  await page.waitForSelector(`${entry("u4")}.sel`);
  assert.match(await page.textContent("#detail .t-head"), /from the root to the selected entry/);
  assert.equal(await page.locator(entry("k1")).count(), 0);
  // Back on the leaf's path, the whole of it again.
  await page.click("#to-leaf");
  await page.waitForSelector(`${entry("k1")}`);
  assert.deepEqual(page.errors, []);
  await page.close();
});

/** Opens every entry of the XSS session in the page it is shown in, every tab, and a search. */
async function showEverything(page) {
  await page.waitForSelector('body[data-state="ready"] .row');
  await page.selectOption("#filter", "all");
  const ids = await page.$$eval(".row", (rows) => rows.map((r) => r.dataset.id));
  assert.ok(ids.length >= 14, `${ids.length} rows`);
  for (const rid of ids) {
    await page.click(`.row[data-id="${rid}"]`);
    await page.waitForSelector(`${entry(rid)}.sel:not(.place)`);
  }
  // Every fold opened, every image and code block scrolled into view.
  for (const d of await page.$$("#detail details")) await d.evaluate((e) => (e.open = true));
  for (const c of await page.$$("#detail pre code, #detail img")) await c.scrollIntoViewIfNeeded();
  for (const tab of ["branch", "context", "usage", "tree"]) {
    await page.click(`#tabs button[data-tab="${tab}"]`);
    await page.waitForTimeout(100);
  }
  await page.fill("#search", "pwned");
  await page.waitForSelector(".hit, #list .hint");
  await page.waitForTimeout(300);
  // What could still be clicked leads nowhere dangerous.
  const hrefs = await page.$$eval("a[href]", (as) => as.map((a) => a.getAttribute("href")));
  assert.deepEqual(hrefs.filter((h) => !/^(https?:|mailto:)/.test(h)), [], "only web and mail links");
  assert.equal(await page.locator("#detail iframe, #detail object, #detail embed, #detail script, #detail svg, #detail form, #detail style, #detail meta, #detail base").count(), 0);
  assert.deepEqual(await page.$$eval("#detail img", (is) => is.map((i) => i.getAttribute("src") || i.dataset.src || "").filter((s) => s && !/^data:image\/(png|jpeg|gif|webp);base64,/.test(s))), []);
  assert.equal(await page.evaluate(() => window.__pwned), undefined, "no payload ran");
}

test("scripts and outside addresses in every text of a session never run nor load, live and exported", async () => {
  for (const mode of ["live", "export"]) {
    const page = await newPage();
    const dialogs = [];
    const asked = [];
    page.on("dialog", (d) => (dialogs.push(d.message()), d.dismiss()));
    page.on("request", (r) => asked.push(r.url()));
    try {
      if (mode === "live") {
        await page.goto(`${web.url}&session=${xssId}`);
      } else {
        const out = join(work, "xss.html");
        execFileSync(bin, ["--agent-dir", agent, "export", xssFile, "--html", "-o", out]);
        await page.context().setOffline(true);
        await page.goto(`file://${out}`);
      }
      await showEverything(page);
      const origin = mode === "live" ? new URL(web.url).origin : "file://";
      assert.deepEqual(asked.filter((u) => !u.startsWith(origin) && !u.startsWith("data:")), [], `${mode}: no request elsewhere`);
      assert.deepEqual(dialogs, [], `${mode}: no dialog`);
      assert.deepEqual(page.errors, [], `${mode}: no error`);
      // The payloads are there, as text, and a search finds them as they were written.
      await page.fill("#search", '<script>window.__pwned = "script"');
      await page.waitForSelector(".hit");
      assert.match(await page.textContent(`${entry("u1")}`), /<script>window\.__pwned = "script"<\/script>/);
      assert.match(await page.textContent("#title"), /<img src=x onerror=/);
    } finally {
      await page.context().setOffline(false);
      await page.close();
    }
  }
});
