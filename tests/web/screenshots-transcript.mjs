// The transcript's and the tree's screenshots in docs/, taken in headless Chromium on a generated realistic
// session (gen.mjs's transcriptSession, beside a few smaller ones so the list has neighbours); screenshots.mjs
// runs it after its own:
//   PI_SESSIOND_BIN=target/debug/pi-sessiond node tests/web/screenshots-transcript.mjs [OUT_DIR=docs]
// docs/screenshot-transcript.png: the transcript at a tool call with its result, a table and code;
// docs/screenshot-tree.png: every entry of the tree (a branch point, a label, the leaf) beside it.
import { mkdtempSync, mkdirSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { bigSession, transcriptSession } from "./gen.mjs";
import { launchChromium, startWeb } from "./support.mjs";

const root = resolve(new URL("../..", import.meta.url).pathname);
const bin = process.env.PI_SESSIOND_BIN || join(root, "target/debug/pi-sessiond");
const out = resolve(process.argv[2] || join(root, "docs"));
const work = mkdtempSync(join(tmpdir(), "pi-sessiond-shots-"));
const project = join(work, "agent", "sessions", "--work-tokenizer--");
mkdirSync(project, { recursive: true });
const id = "0194eeee-0000-7000-8000-000000000001";
writeFileSync(join(project, `2026-03-04T09-00-00-000Z_${id}.jsonl`), transcriptSession(id));
for (const [k, n] of [[1, 40], [2, 120]]) {
  const other = `0194eeee-0000-7000-8000-00000000000${k + 1}`;
  writeFileSync(join(project, `2026-03-0${k}T09-00-00-000Z_${other}.jsonl`), bigSession(n, other));
}
const web = await startWeb(bin, join(work, "agent"));
const browser = await launchChromium(work, { width: 1280, height: 800 });
try {
  const page = await browser.newPage();
  await page.emulateMedia({ colorScheme: "light" });
  await page.goto(`${web.url}&session=${id}&entry=a3`);
  await page.waitForSelector('#detail [data-entry="a3"].sel:not(.place)');
  await page.waitForSelector('#detail [data-entry="a3"] code.hljs');
  await page.locator('#detail [data-entry="a2"] .call-result details').evaluate((d) => (d.open = false));
  await page.waitForTimeout(300);
  await page.screenshot({ path: join(out, "screenshot-transcript.png") });
  await page.selectOption("#filter", "all");
  await page.click('.row[data-id="k1"]');
  await page.waitForSelector('#detail [data-entry="k1"].sel:not(.place)');
  await page.waitForTimeout(300);
  await page.screenshot({ path: join(out, "screenshot-tree.png") });
  console.log(`wrote ${join(out, "screenshot-transcript.png")} and ${join(out, "screenshot-tree.png")}`);
} finally {
  await browser.close();
  web.stop();
  rmSync(work, { recursive: true, force: true });
}
