// A pi-shaped session generated at test time (never committed), shared by the web test and by hand:
//   node tests/web/gen.mjs FILE [ENTRIES]
import { writeFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);

/** A pi-shaped session of `n` entries: user, assistant (with usage), tool calls and results, a branch every
 * 500 entries, a label every 700. */
export function bigSession(n, bigId) {
  const t0 = Date.parse("2026-01-02T00:00:00.000Z");
  const ts = (i) => new Date(t0 + i * 1000).toISOString();
  const lines = [JSON.stringify({ type: "session", version: 3, id: bigId, timestamp: ts(0), cwd: "/work/big-app" })];
  let parent = null;
  for (let i = 0; i < n; i++) {
    const id = `e${i.toString(16).padStart(7, "0")}`;
    let entry;
    if (i === 2) {
      entry = { type: "session_info", id, parentId: parent, timestamp: ts(i), name: "Tokenizer edge cases" };
    } else if (i % 700 === 699) {
      entry = { type: "label", id, parentId: parent, timestamp: ts(i), targetId: parent, label: `milestone ${i}` };
    } else if (i % 4 === 0) {
      entry = { type: "message", id, parentId: parent, timestamp: ts(i), message: { role: "user", content: `question ${i}: how does the tokenizer handle case ${i}?`, timestamp: t0 + i * 1000 } };
    } else if (i % 4 === 1) {
      entry = { type: "message", id, parentId: parent, timestamp: ts(i), message: { role: "assistant", content: [{ type: "text", text: `Looking at case ${i}.` }, { type: "toolCall", id: `c${i}`, name: "bash", arguments: { command: `grep -n case${i} src/tokenizer.rs` } }], api: "anthropic-messages", provider: "anthropic", model: "claude-sonnet-4-5", usage: { input: 1200, output: 80, cacheRead: 0, cacheWrite: 0, totalTokens: 1280, cost: { input: 0.0036, output: 0.0012, cacheRead: 0, cacheWrite: 0, total: 0.0048 } }, stopReason: "toolUse", timestamp: t0 + i * 1000 } };
    } else if (i % 4 === 2) {
      entry = { type: "message", id, parentId: parent, timestamp: ts(i), message: { role: "toolResult", toolCallId: `c${i - 1}`, toolName: "bash", content: [{ type: "text", text: `src/tokenizer.rs:${i}: match case${i} { … }` }], isError: false, timestamp: t0 + i * 1000 } };
    } else {
      entry = { type: "message", id, parentId: parent, timestamp: ts(i), message: { role: "assistant", content: [{ type: "text", text: `Case ${i} is handled by the fallback branch.` }], api: "anthropic-messages", provider: "anthropic", model: "claude-sonnet-4-5", usage: { input: 1300, output: 40, cacheRead: 1000, cacheWrite: 0, totalTokens: 2340, cost: { input: 0.0039, output: 0.0006, cacheRead: 0.0003, cacheWrite: 0, total: 0.0048 } }, stopReason: "stop", timestamp: t0 + i * 1000 } };
    }
    lines.push(JSON.stringify(entry));
    // Every 500 entries the conversation goes back two steps and continues from there: a branch point.
    parent = i % 500 === 499 ? JSON.parse(lines[lines.length - 3]).id : id;
  }
  return lines.join("\n") + "\n";
}


if (import.meta.url === `file://${process.argv[1]}`) {
  const [file, n = "5200"] = process.argv.slice(2);
  writeFileSync(file, bigSession(Number(n), "0194aaaa-0000-7000-8000-00000000b16b"));
}

/** A small PNG (`w`×`h`, a diagonal of two colours) as base64: a real image for the transcript to show. */
export function png(w = 48, h = 32) {
  const { deflateSync, crc32 } = require("node:zlib");
  const chunk = (type, data) => {
    const out = Buffer.alloc(12 + data.length);
    out.writeUInt32BE(data.length, 0);
    out.write(type, 4, "ascii");
    data.copy(out, 8);
    out.writeUInt32BE(crc32(out.subarray(4, 8 + data.length)), 8 + data.length);
    return out;
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 2; // RGB
  const raw = Buffer.alloc((w * 3 + 1) * h);
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      const at = y * (w * 3 + 1) + 1 + x * 3;
      const [r, g, b] = x > y ? [5, 80, 174] : [26, 127, 55];
      raw[at] = r;
      raw[at + 1] = g;
      raw[at + 2] = b;
    }
  }
  const sig = Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]);
  return Buffer.concat([sig, chunk("IHDR", ihdr), chunk("IDAT", deflateSync(raw)), chunk("IEND", Buffer.alloc(0))]).toString("base64");
}

/** A session that reads like a real one, with everything the transcript shows: markdown and a code block, a
 * thinking block, tool calls with their results (long output, an image), a bash execution, a compaction, a
 * branch with its summary, custom entries, a model and thinking-level change, a label and a name. Returns the
 * JSONL text. */
export function transcriptSession(sessionId) {
  const t0 = Date.parse("2026-03-04T09:00:00.000Z");
  let i = 0;
  const lines = [{ type: "session", version: 3, id: sessionId, timestamp: new Date(t0).toISOString(), cwd: "/work/tokenizer" }];
  let parent = null;
  const add = (id, fields, parentId = parent) => {
    i++;
    const timestamp = new Date(t0 + i * 7000).toISOString();
    lines.push({ type: fields.type, id, parentId, timestamp, ...fields });
    parent = id;
    return id;
  };
  const ms = () => t0 + i * 7000;
  const usage = (input, output, cost) => ({ input, output, cacheRead: 900, cacheWrite: 0, totalTokens: input + output + 900, cost: { input: cost * 0.8, output: cost * 0.2, cacheRead: 0, cacheWrite: 0, total: cost } });
  const assistant = (content, u, stopReason = "stop", model = "claude-sonnet-4-5") => ({ type: "message", message: { role: "assistant", content, api: "anthropic-messages", provider: "anthropic", model, usage: u, stopReason, timestamp: ms() } });
  add("m0", { type: "model_change", provider: "anthropic", modelId: "claude-sonnet-4-5" });
  add("t0", { type: "thinking_level_change", thinkingLevel: "medium" });
  add("u1", { type: "message", message: { role: "user", content: "The tokenizer splits `don't` into three tokens. Can you find out **why** and fix it?\n\nHere is what I see:\n\n```rust\nlet t = tokenize(\"don't\");\nassert_eq!(t.len(), 2);\n```", timestamp: ms() } });
  add("a1", assistant([
    { type: "thinking", thinking: "The apostrophe is probably treated as punctuation. I should read the tokenizer first." },
    { type: "text", text: "Let me look at how the tokenizer treats apostrophes." },
    { type: "toolCall", id: "call_read_1", name: "read", arguments: { path: "src/tokenizer.rs" } },
  ], usage(1800, 120, 0.0072), "toolUse"));
  const source = ["pub fn tokenize(text: &str) -> Vec<&str> {", "    let mut out = Vec::new();", "    let mut start = 0;", "    for (i, c) in text.char_indices() {", "        // Punctuation ends a token and is one by itself.", "        if c.is_ascii_punctuation() {", "            if start < i { out.push(&text[start..i]); }", "            out.push(&text[i..i + 1]);", "            start = i + 1;", "        }", "    }", "    if start < text.len() { out.push(&text[start..]); }", "    out", "}"];
  add("r1", { type: "message", message: { role: "toolResult", toolCallId: "call_read_1", toolName: "read", content: [{ type: "text", text: source.join("\n") }], isError: false, timestamp: ms() } });
  add("a2", assistant([
    { type: "text", text: "Found it: every ASCII punctuation character, `'` included, ends a token. I'll run the tests to confirm." },
    { type: "toolCall", id: "call_bash_1", name: "bash", arguments: { command: "cargo test tokenizer 2>&1 | tail -40" } },
  ], usage(2600, 90, 0.0091), "toolUse"));
  const output = Array.from({ length: 36 }, (_, k) => `test tokenizer::case_${String(k).padStart(2, "0")} ... ${k === 7 ? "FAILED" : "ok"}`);
  output.push("", "failures:", "    tokenizer::case_07: left: 3, right: 2", "", "test result: FAILED. 35 passed; 1 failed");
  add("r2", { type: "message", message: { role: "toolResult", toolCallId: "call_bash_1", toolName: "bash", content: [{ type: "text", text: output.join("\n") }], isError: false, timestamp: ms() } });
  add("a3", assistant([
    { type: "text", text: "Confirmed. The fix keeps an apostrophe **between two letters** inside the word:\n\n| input | before | after |\n|---|---|---|\n| `don't` | `don`, `'`, `t` | `don't` |\n| `'quoted'` | `'`, `quoted`, `'` | unchanged |" },
    { type: "toolCall", id: "call_edit_1", name: "edit", arguments: { path: "src/tokenizer.rs", oldText: "        if c.is_ascii_punctuation() {", newText: "        let inner = c == '\\'' && i > 0 && text[i + 1..].starts_with(char::is_alphabetic);\n        if c.is_ascii_punctuation() && !inner {" } },
  ], usage(3100, 210, 0.0121), "toolUse"));
  add("r3", { type: "message", message: { role: "toolResult", toolCallId: "call_edit_1", toolName: "edit", content: [{ type: "text", text: "Edited src/tokenizer.rs (1 change)." }], isError: false, timestamp: ms() } });
  add("x1", { type: "message", message: { role: "bashExecution", command: "cargo test tokenizer", output: "test result: ok. 36 passed; 0 failed", exitCode: 0, cancelled: false, truncated: false, timestamp: ms() } });
  add("u2", { type: "message", message: { role: "user", content: "Great. Can you take a screenshot of the demo page so I can see the highlighting?", timestamp: ms() } });
  add("a4", assistant([{ type: "toolCall", id: "call_shot_1", name: "screenshot", arguments: { url: "localhost:3000/demo" } }], usage(3300, 40, 0.0101), "toolUse"));
  add("r4", { type: "message", message: { role: "toolResult", toolCallId: "call_shot_1", toolName: "screenshot", content: [{ type: "text", text: "Screenshot of the demo page" }, { type: "image", data: png(), mimeType: "image/png" }], isError: false, timestamp: ms() } });
  const fork = add("a5", assistant([{ type: "text", text: "Here it is: the tokens of `don't` are now drawn as **one** block.\n\n- the word keeps its apostrophe\n- quotes around a word are still split off" }], usage(3600, 60, 0.0113)));
  // A branch tried from here and abandoned: coming back, pi summarises it on the way.
  add("u4", { type: "message", message: { role: "user", content: "Actually, try a regex-based tokenizer instead.", timestamp: ms() } });
  parent = fork;
  add("b1", { type: "branch_summary", fromId: "u4", summary: "Tried a **regex tokenizer**: 2.3× slower, abandoned." });
  add("l1", { type: "label", targetId: "a3", label: "the fix" });
  add("c1", { type: "custom", customType: "todo-list", data: { items: [{ text: "fix apostrophes", done: true }, { text: "handle hyphens", done: false }] } });
  add("k1", { type: "compaction", summary: "## Goal\nFix the tokenizer's handling of apostrophes.\n\n## Done\n- `don't` is one token (src/tokenizer.rs)\n- all 36 tokenizer tests pass", firstKeptEntryId: "u2", tokensBefore: 48210 });
  add("t1", { type: "thinking_level_change", thinkingLevel: "high" });
  add("m1", { type: "model_change", provider: "anthropic", modelId: "claude-opus-4-5" });
  add("u3", { type: "message", message: { role: "user", content: "Now hyphens: should `well-known` be one token?", timestamp: ms() } });
  add("a6", assistant([
    { type: "thinking", thinking: "Hyphenated compounds are usually kept together by tokenizers for search." },
    { type: "text", text: "Yes, for search it should: `well-known` is one word. I'll treat a hyphen between letters like the apostrophe." },
  ], usage(5200, 140, 0.0452), "stop", "claude-opus-4-5"));
  add("cm1", { type: "custom_message", customType: "review-bot", content: "Reviewed the change: **approved**.", display: true });
  add("s1", { type: "session_info", name: "Tokenizer: apostrophes and hyphens" });
  return lines.map((l) => JSON.stringify(l)).join("\n") + "\n";
}

/** Every way a session's text could try to run script or reach the network, each setting `window.__pwned` (or
 * asking for an outside address) if it ever ran. */
export const PAYLOADS = [
  `<script>window.__pwned = "script"</script>`,
  `<img src=x onerror="window.__pwned = 'img onerror'">`,
  `[javascript link](javascript:window.__pwned='javascript link')`,
  `<a href="javascript:window.__pwned='raw a'">raw javascript link</a>`,
  `[data link](data:text/html;base64,PHNjcmlwdD53aW5kb3cuX19wd25lZD0xPC9zY3JpcHQ+)`,
  `<svg onload="window.__pwned = 'svg onload'"><script>window.__pwned = 'svg script'</script></svg>`,
  `<iframe src="javascript:window.__pwned='iframe'"></iframe><iframe srcdoc="<script>parent.__pwned='srcdoc'</script>"></iframe>`,
  `<object data="data:text/html,<script>window.__pwned='object'</script>"></object>`,
  `<details open ontoggle="window.__pwned='ontoggle'">x</details>`,
  `<style>@import "http://203.0.113.9/x.css"; body { background: url(http://203.0.113.9/bg.png) }</style>`,
  `![remote image](http://203.0.113.9/pixel.png) <img src="https://203.0.113.9/pixel2.png">`,
  `<a href="http://203.0.113.9/" style="position:fixed;inset:0">cover</a> <form action="http://203.0.113.9/"><button>go</button></form>`,
  `<meta http-equiv="refresh" content="0;url=javascript:window.__pwned='meta'"><base href="http://203.0.113.9/">`,
  `" onmouseover="window.__pwned='attribute' x="`,
  `</script><script>window.__pwned = "closing the data"</script>`,
  "```\"><img src=x onerror=window.__pwned='info string'>\nx\n```",
];

const SVG_SCRIPT = Buffer.from(`<svg xmlns="http://www.w3.org/2000/svg" onload="window.__pwned='svg image'"><script>window.__pwned='svg image script'</script></svg>`).toString("base64");

/** A session with every payload in user text, assistant text, thinking, tool calls and output, bash output,
 * summaries, custom entries, labels, model names and the session's name. */
export function xssSession(sessionId) {
  const all = PAYLOADS.join("\n\n");
  const t0 = Date.parse("2026-03-05T09:00:00.000Z");
  let i = 0;
  let parent = null;
  const lines = [{ type: "session", version: 3, id: sessionId, timestamp: new Date(t0).toISOString(), cwd: "/work/xss" }];
  const add = (id, fields) => {
    i++;
    lines.push({ type: fields.type, id, parentId: parent, timestamp: new Date(t0 + i * 1000).toISOString(), ...fields });
    parent = id;
  };
  const evil = `x" onerror="window.__pwned='id'`;
  add("u1", { type: "message", message: { role: "user", content: all, timestamp: t0 } });
  add("u2", { type: "message", message: { role: "user", content: [{ type: "text", text: all }, { type: "image", mimeType: "image/svg+xml", data: SVG_SCRIPT }, { type: "image", mimeType: "text/html", data: SVG_SCRIPT }, { type: "image", mimeType: "image/png", data: `x" onerror="window.__pwned='image data'` }], timestamp: t0 } });
  add("a1", { type: "message", message: { role: "assistant", content: [{ type: "thinking", thinking: all }, { type: "text", text: all }, { type: "toolCall", id: evil, name: PAYLOADS[1], arguments: { command: all, path: PAYLOADS[0], [PAYLOADS[5]]: PAYLOADS[1], content: all } }], provider: PAYLOADS[0], model: PAYLOADS[1], api: "x", usage: { input: 1, output: 1, cacheRead: 0, cacheWrite: 0, totalTokens: 2, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } }, stopReason: "toolUse", errorMessage: all, timestamp: t0 } });
  add("r1", { type: "message", message: { role: "toolResult", toolCallId: evil, toolName: PAYLOADS[1], content: [{ type: "text", text: all }, { type: "image", mimeType: "image/svg+xml", data: SVG_SCRIPT }], isError: true, timestamp: t0 } });
  add("x1", { type: "message", message: { role: "bashExecution", command: all, output: all, exitCode: 1, timestamp: t0 } });
  add("c1", { type: "custom", customType: PAYLOADS[1], data: { html: all } });
  add("c2", { type: "custom_message", customType: PAYLOADS[0], content: all, display: true });
  add("c3", { type: "message", message: { role: "custom", customType: PAYLOADS[5], content: [{ type: "text", text: all }], display: true, timestamp: t0 } });
  add("k1", { type: "compaction", summary: all, firstKeptEntryId: "u1", tokensBefore: 10 });
  add("b1", { type: "branch_summary", fromId: "u1", summary: all });
  add("m1", { type: "model_change", provider: PAYLOADS[1], modelId: PAYLOADS[0] });
  add("l1", { type: "label", targetId: "u1", label: PAYLOADS[1] });
  add("l2", { type: "label", targetId: "a1", label: PAYLOADS[0] });
  add("s1", { type: "session_info", name: PAYLOADS[1] + PAYLOADS[0] });
  add("u3", { type: "message", message: { role: "user", content: "pwned? search for me", timestamp: t0 } });
  return lines.map((l) => JSON.stringify(l)).join("\n") + "\n";
}
