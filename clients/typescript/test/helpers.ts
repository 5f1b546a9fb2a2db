/** Shared test helpers: the binary, temporary directories, pi-format session files, and waiting. */

import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { type SessiondClient, type SpawnOptions, spawnSessiond } from "../src/index.js";

const packageRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

/**
 * The server binary under test: `$PI_SESSIOND_BIN`, else the repository's debug build. scripts/run-tests.mjs sets
 * the variable and checks the file; this fallback only matters when a test file is run on its own.
 */
export const BINARY = process.env.PI_SESSIOND_BIN || resolve(packageRoot, "..", "..", "target", "debug", "pi-sessiond");

if (!existsSync(BINARY)) {
	throw new Error(`pi-sessiond binary not found at ${BINARY}: build it (cargo build) or set PI_SESSIOND_BIN`);
}

const tempDirs: string[] = [];
process.on("exit", () => {
	for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
});

/** A fresh temporary directory, removed when the process exits. */
export function tempDir(prefix = "pi-sessiond-client-test-"): string {
	const dir = mkdtempSync(join(tmpdir(), prefix));
	tempDirs.push(dir);
	return dir;
}

/**
 * Spawns the server with its own agent directory (a fresh one unless `agentDir` is given, so nothing under ~/.pi is
 * read) and stderr collected instead of printed.
 */
export async function spawnTestClient(
	options: SpawnOptions & { agentDir?: string } = {},
): Promise<{ client: SessiondClient; stderr: string[] }> {
	const stderr: string[] = [];
	const { args = [], agentDir = tempDir("pi-sessiond-agent-"), ...rest } = options;
	const client = await spawnSessiond({
		binary: BINARY,
		stderr: (line) => stderr.push(line),
		...rest,
		args: ["--agent-dir", agentDir, ...args],
	});
	return { client, stderr };
}

/** A user message as pi stores it. */
export function userMessage(text: string, timestamp = 1_700_000_000_000) {
	return { role: "user" as const, content: text, timestamp };
}

/** An assistant message as pi stores it. */
export function assistantMessage(text: string, timestamp = 1_700_000_000_500) {
	return {
		role: "assistant" as const,
		content: [{ type: "text" as const, text }],
		api: "anthropic-messages",
		provider: "anthropic",
		model: "claude-test",
		usage: {
			input: 10,
			output: 5,
			cacheRead: 0,
			cacheWrite: 0,
			totalTokens: 15,
			cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 },
		},
		stopReason: "stop" as const,
		timestamp,
	};
}

/** Ids of the entries of the session `writePiSession` writes. */
export const IDS = { u1: "e0000001", a1: "e0000002", u2: "e0000003", a2: "e0000004" } as const;

/**
 * Writes a small session the way pi writes one: a v3 header, then a user/assistant exchange, a model change and a
 * second exchange, each entry the child of the previous one. Returns the file's path.
 */
export function writePiSession(dir: string, opts: { id?: string; cwd?: string; name?: string; words?: [string, string] } = {}): string {
	const id = opts.id ?? "0190aaaa-bbbb-7ccc-8ddd-eeeeeeee0001";
	const cwd = opts.cwd ?? dir;
	const [w1, w2] = opts.words ?? ["alpha", "bravo"];
	const ts = (n: number) => new Date(Date.UTC(2025, 0, 1, 12, 0, n)).toISOString();
	const lines = [
		{ type: "session", version: 3, id, timestamp: ts(0), cwd },
		{ type: "message", id: IDS.u1, parentId: null, timestamp: ts(1), message: userMessage(`first question about ${w1}`) },
		{ type: "message", id: IDS.a1, parentId: IDS.u1, timestamp: ts(2), message: assistantMessage(`first answer about ${w1}`) },
		{ type: "model_change", id: "e0000005", parentId: IDS.a1, timestamp: ts(3), provider: "anthropic", modelId: "claude-test" },
		{ type: "message", id: IDS.u2, parentId: "e0000005", timestamp: ts(4), message: userMessage(`second question about ${w2}`) },
		{ type: "message", id: IDS.a2, parentId: IDS.u2, timestamp: ts(5), message: assistantMessage(`second answer about ${w2}`) },
	];
	const file = join(dir, `${ts(0).replace(/[:.]/g, "-")}_${id}.jsonl`);
	writeFileSync(file, lines.map((l) => JSON.stringify(l)).join("\n") + "\n");
	return file;
}

/** Resolves when `predicate` holds, polling; rejects after `timeoutMs`. */
export async function waitFor(predicate: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
	const deadline = Date.now() + timeoutMs;
	while (!predicate()) {
		if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
		await new Promise((r) => setTimeout(r, 10));
	}
}
