// The README's pictures of the web view, taken in Debian's headless Chromium on a generated agent directory that
// looks like a person's: four projects, two weeks of sessions with three models, tool calls and their results.
//
//   node tests/web/screenshots.mjs [OUT_DIR]     (default docs/; PI_SESSIOND_BIN as for web.test.mjs)
//
// Writes screenshot-list.png (the list grouped by project, a search's hits with the matched words marked, a
// session open beside it) and screenshot-usage.png (the usage overview's chart), then runs
// screenshots-transcript.mjs for screenshot-transcript.png and screenshot-tree.png.
import { spawn } from "node:child_process";
import { mkdtempSync, mkdirSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { chromium } from "playwright-core";

const root = resolve(new URL("../..", import.meta.url).pathname);
const bin = process.env.PI_SESSIOND_BIN || join(root, "target/debug/pi-sessiond");
const out = resolve(process.argv[2] || join(root, "docs"));
const work = mkdtempSync(join(tmpdir(), "pi-sessiond-shots-"));
const agent = join(work, "agent");

const projects = [
  ["/home/ana/code/billing-api", ["Add retry with backoff to the invoice webhook", "Why does the refund test fail on CI?", "Move the tax rules into their own module", "Paginate GET /invoices", "Review the Stripe signature check"]],
  ["/home/ana/code/web-dashboard", ["The chart flickers when the range changes", "Add a dark theme", "Retry failed fetches once before showing an error", "Upgrade to React 19"]],
  ["/home/ana/code/infra", ["Terraform plan shows drift on the load balancer", "Rotate the database credentials", "Why is the nightly backup job slow?"]],
  ["/home/ana/notes", ["Summarise this week's incident reviews", "Draft the Q3 planning notes"]],
];
const models = [["anthropic", "claude-sonnet-4-5", 3, 15], ["openai", "gpt-5", 1.25, 10], ["google", "gemini-2.5-pro", 1.25, 10]];
const replies = [
  "I'll look at the code first.",
  "The failure comes from a timeout: the client gives up after 2 s while the retry waits 3 s.",
  "Here is the change: exponential backoff starting at 200 ms, at most 5 tries, with jitter.",
  "The tests pass now. I also added a test for the last retry.",
];

let seed = 7;
const rand = (n) => {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return seed % n;
};

function session(dir, cwd, title, at, k) {
  const id = `0196${k.toString(16).padStart(4, "0")}-1a2b-7c3d-8e4f-${(k * 7919).toString(16).padStart(12, "0")}`;
  let t = at;
  const ts = () => new Date((t += 20000 + rand(90000))).toISOString();
  const lines = [{ type: "session", version: 3, id, timestamp: new Date(t).toISOString(), cwd }];
  let parent = null;
  const push = (entry) => {
    const e = { ...entry, id: `${k}x${lines.length}`, parentId: parent, timestamp: ts() };
    lines.push(e);
    parent = e.id;
  };
  const [provider, model, inPrice, outPrice] = models[rand(models.length)];
  push({ type: "model_change", provider, modelId: model });
  if (rand(2)) push({ type: "session_info", name: title });
  const turns = 2 + rand(4);
  for (let turn = 0; turn < turns; turn++) {
    const question = turn === 0 ? title : ["Retry it with the new timeout.", "Can you add a test for that?", "Looks good, commit it.", "What about the retry limit?"][rand(4)];
    push({ type: "message", message: { role: "user", content: question, timestamp: t } });
    const usage = (input, output) => {
      const cacheRead = rand(20000);
      const cost = { input: (input * inPrice) / 1e6, output: (output * outPrice) / 1e6, cacheRead: (cacheRead * inPrice) / 1e7, cacheWrite: 0 };
      cost.total = cost.input + cost.output + cost.cacheRead;
      return { input, output, cacheRead, cacheWrite: 0, totalTokens: input + output + cacheRead, cost };
    };
    const call = `c${k}-${turn}`;
    push({ type: "message", message: { role: "assistant", content: [{ type: "text", text: replies[rand(2)] }, { type: "toolCall", id: call, name: "bash", arguments: { command: ["rg -n retry src/", "npm test -- --filter invoice", "terraform plan", "git diff --stat"][rand(4)] } }], api: "messages", provider, model, usage: usage(3000 + rand(9000), 200 + rand(900)), stopReason: "toolUse", timestamp: t } });
    push({ type: "message", message: { role: "toolResult", toolCallId: call, toolName: "bash", content: [{ type: "text", text: "src/webhook.ts:41:  await retry(() => post(invoice), { tries: 3 })\nsrc/webhook.ts:88:  // no retry on 4xx" }], isError: false, timestamp: t } });
    push({ type: "message", message: { role: "assistant", content: [{ type: "text", text: replies[2 + rand(2)] }], api: "messages", provider, model, usage: usage(4000 + rand(12000), 300 + rand(1500)), stopReason: "stop", timestamp: t } });
  }
  const file = join(dir, `${new Date(at).toISOString().replace(/[:.]/g, "-")}_${id}.jsonl`);
  writeFileSync(file, lines.map((l) => JSON.stringify(l)).join("\n") + "\n");
}

const now = Date.now();
let k = 0;
for (const [cwd, titles] of projects) {
  const dir = join(agent, "sessions", `--${cwd.slice(1).replace(/\//g, "-")}--`);
  mkdirSync(dir, { recursive: true });
  for (const title of titles) {
    for (let again = 0; again < 2; again++) session(dir, cwd, title, now - (1 + rand(14 * 24)) * 3600 * 1000, k++);
  }
}

const server = spawn(bin, ["--agent-dir", agent, "web", "--port", "0"], { stdio: ["ignore", "pipe", "inherit"] });
const url = await new Promise((ok, fail) => {
  let text = "";
  server.stdout.on("data", (d) => {
    text += d;
    if (text.includes("\n")) ok(text.slice(0, text.indexOf("\n")));
  });
  server.on("exit", (code) => fail(new Error(`pi-sessiond web exited with ${code}`)));
});
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", args: ["--no-sandbox", "--disable-gpu"] });
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 760 }, colorScheme: "light" });
  await page.goto(url);
  await page.waitForSelector("#list .group");
  await page.click("#list .group .session");
  await page.waitForSelector('body[data-state="ready"] .row');
  await page.fill("#search", "retry");
  await page.waitForSelector(".hit mark");
  await page.screenshot({ path: join(out, "screenshot-list.png") });
  await page.fill("#search", "");
  await page.click("#overview-button");
  await page.waitForSelector('svg.chart[data-kind="cost"] rect');
  await page.screenshot({ path: join(out, "screenshot-usage.png") });
  console.log(`wrote ${join(out, "screenshot-list.png")} and ${join(out, "screenshot-usage.png")}`);
} finally {
  await browser.close();
  server.removeAllListeners("exit");
  server.kill("SIGTERM");
  rmSync(work, { recursive: true, force: true });
}

await import("./screenshots-transcript.mjs");
