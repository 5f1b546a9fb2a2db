// Shared pieces of the session-manager suite (ours, written for it): messages as pi's agent produces them, entry
// lines as pi writes them, scratch directories that remove themselves, and small readers of session files.
import { mkdtempSync, readFileSync, rmSync, utimesSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** A UUID v7 as pi makes session ids (version nibble 7, RFC 4122 variant). */
export const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** pi's entry id: eight lowercase hex digits. */
export const ENTRY_ID = /^[0-9a-f]{8}$/;

/** A session file name as pi makes it: the creation time with `:` and `.` as `-`, then the session id. */
export function sessionFileName(id) {
	return new RegExp(`^\\d{4}-\\d\\d-\\d\\dT\\d\\d-\\d\\d-\\d\\d-\\d{3}Z_${id.replace(/[.]/g, "\\.")}\\.jsonl$`);
}

/** Token counts of zero cost, as a provider reports them. */
export function zeroUsage(input = 1, output = 1) {
	return {
		input,
		output,
		cacheRead: 0,
		cacheWrite: 0,
		totalTokens: input + output,
		cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 },
	};
}

/** Usage with every count and cost distinct, so a round trip that drops or swaps one shows. */
export function distinctUsage() {
	return {
		input: 11,
		output: 22,
		cacheRead: 33,
		cacheWrite: 44,
		totalTokens: 110,
		cost: { input: 0.5, output: 0.25, cacheRead: 0.125, cacheWrite: 0.0625, total: 0.9375 },
	};
}

/** A user message with plain-string content. */
export function userSays(text, timestamp = Date.now()) {
	return { role: "user", content: text, timestamp };
}

/** A finished assistant reply with one text block. */
export function assistantSays(text, { provider = "anthropic", model = "claude-test", timestamp = Date.now() } = {}) {
	return {
		role: "assistant",
		content: [{ type: "text", text }],
		api: "anthropic-messages",
		provider,
		model,
		usage: zeroUsage(),
		stopReason: "stop",
		timestamp,
	};
}

/** The text of a user or assistant message, whichever shape its content has. */
export function textOf(message) {
	if (typeof message.content === "string") return message.content;
	if (Array.isArray(message.content)) return message.content.filter((b) => b.type === "text").map((b) => b.text).join("");
	return message.summary;
}

/** A directory that exists for this test only. */
export function scratch(t, name = "session-manager") {
	const dir = mkdtempSync(join(tmpdir(), `pi-suite-${name}-`));
	t.after(() => rmSync(dir, { recursive: true, force: true }));
	return dir;
}

/** JSONL text for these records, each on its line, the last one ended. */
export function jsonl(...records) {
	return records.map((r) => `${JSON.stringify(r)}\n`).join("");
}

/** The records of a JSONL file (blank lines skipped). */
export function recordsIn(file) {
	return readFileSync(file, "utf8")
		.split("\n")
		.filter((line) => line.trim() !== "")
		.map((line) => JSON.parse(line));
}

/** A session header line's record. */
export function header(fields = {}) {
	return { type: "session", version: 3, id: "s-1", timestamp: "2025-01-01T00:00:00.000Z", cwd: "/tmp", ...fields };
}

/** A message entry's record. */
export function messageRecord(id, parentId, message, timestamp = "2025-01-01T00:00:01.000Z") {
	return { type: "message", id, parentId, timestamp, message };
}

/** Gives `file` a modification time `secondsAgo` before now, so "most recent" never depends on timing. */
export function modifiedAgo(file, secondsAgo) {
	const when = new Date(Date.now() - secondsAgo * 1000);
	utimesSync(file, when, when);
}
