// A pi-shaped session generated at test time (never committed), shared by the web test and by hand:
//   node tests/web/gen.mjs FILE [ENTRIES]
import { writeFileSync } from "node:fs";

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
