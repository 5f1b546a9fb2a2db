/**
 * The example pi extension, driven through a stand-in for pi's extension API against the real server. pi itself
 * needs Node >= 22.19 to run, so this checks the extension's behaviour without it; `npm run check:example`
 * type-checks it against pi's real API.
 */

import assert from "node:assert/strict";
import { appendFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { ExtensionAPI } from "@earendil-works/pi-coding-agent";
import sessiondExtension, { renderAroundLeaf } from "../examples/pi-extension/index.js";
import type { SessiondClient } from "../src/index.js";
import { spawnTestClient, tempDir, userMessage, waitFor } from "./helpers.js";

type Handler = (args: string, ctx: unknown) => Promise<void>;

const agentDir = tempDir("pi-agent-");
const cwd = tempDir("pi-project-");
let helper: SessiondClient;
const files: string[] = [];
const leaves: string[] = [];

const commands = new Map<string, { handler: Handler }>();
const events = new Map<string, (event: unknown, ctx: unknown) => Promise<void>>();
const notes: [string | undefined, string][] = [];
const selects: { title: string; options: string[] }[] = [];
const widgets = new Map<string, string[] | undefined>();
const switched: string[] = [];
let currentFile: string | undefined;
let choose = (options: string[]): string | undefined => options[0];

const ctx = {
	cwd,
	hasUI: true,
	mode: "tui",
	ui: {
		notify: (message: string, type?: string) => notes.push([type, message]),
		select: async (title: string, options: string[]) => {
			selects.push({ title, options });
			return choose(options);
		},
		setWidget: (key: string, lines: string[] | undefined) => widgets.set(key, lines),
	},
	sessionManager: { getSessionFile: () => currentFile },
	switchSession: async (path: string) => {
		switched.push(path);
		return { cancelled: false };
	},
};

async function run(args: string): Promise<void> {
	await commands.get("sessiond")!.handler(args, ctx);
}

before(async () => {
	// The extension's sidecar and this helper share an agent directory, so pi's default session directory for `cwd`
	// is the same for both and nothing under ~/.pi is read.
	process.env.PI_CODING_AGENT_DIR = agentDir;
	({ client: helper } = await spawnTestClient({ agentDir }));
	for (const words of ["walrus tusks", "yak wool"]) {
		const s = await helper.createSession(cwd);
		leaves.push(await s.appendMessage(userMessage(`tell me about ${words}`)));
		files.push(s.getSessionFile()!);
		await s.close();
	}
	const pi = {
		registerCommand: (name: string, options: { handler: Handler }) => commands.set(name, options),
		on: (event: string, handler: (event: unknown, ctx: unknown) => Promise<void>) => events.set(event, handler),
	};
	sessiondExtension(pi as unknown as ExtensionAPI);
});

after(async () => {
	await events.get("session_shutdown")?.({ type: "session_shutdown", reason: "quit" }, ctx);
	await helper.close();
});

describe("the example extension", () => {
	it("registers /sessiond and nothing runs until it is used", () => {
		assert.deepEqual([...commands.keys()], ["sessiond"]);
		assert.ok(events.has("session_shutdown"));
	});

	it("lists this project's sessions and switches to the one picked", async () => {
		currentFile = undefined;
		choose = (options) => options.find((o) => o.includes("walrus"));
		await run("");
		choose = (options) => options[0];
		assert.deepEqual(notes, []);
		const shown = selects.at(-1)!;
		assert.equal(shown.title, "Sessions of this project");
		assert.equal(shown.options.length, 2);
		assert.match(shown.options.find((o) => o.includes("walrus"))!, /^\d{4}-\d\d-\d\d \d\d:\d\d {2}1 msgs {2}tell me about walrus tusks$/);
		assert.deepEqual(switched, [files[0]], "the picked label's session");
	});

	it("shows the current session's tree and follows what pi appends to it", async () => {
		currentFile = files[0]!;
		await run("tree");
		const first = widgets.get("pi-sessiond-tree");
		assert.deepEqual(first, ["user: tell me about walrus tusks ← leaf"]);
		// pi appends to the file; the watched session reports it and the widget is redrawn.
		const entry = { type: "message", id: "pi000001", parentId: leaves[0], timestamp: new Date().toISOString(), message: userMessage("and their diet?") };
		appendFileSync(currentFile, `${JSON.stringify(entry)}\n`);
		await waitFor(() => (widgets.get("pi-sessiond-tree") ?? []).length === 2, "the redrawn tree");
		assert.deepEqual(widgets.get("pi-sessiond-tree"), ["user: tell me about walrus tusks", "user: and their diet? ← leaf"]);
		await run("hide");
		assert.equal(widgets.get("pi-sessiond-tree"), undefined);
	});

	it("shows the tree of a session pi has not written yet from its first message on", async () => {
		currentFile = join(tempDir("pi-new-session-"), "new.jsonl");
		await run("tree");
		assert.deepEqual(widgets.get("pi-sessiond-tree"), ["(the tree appears with the first message)"]);
		// pi writes the file at the first message, then reports message_end to extensions.
		const header = { type: "session", version: 3, id: "0190aaaa-bbbb-7ccc-8ddd-eeeeeeee0009", timestamp: new Date().toISOString(), cwd };
		const first = { type: "message", id: "pi000011", parentId: null, timestamp: new Date().toISOString(), message: userMessage("a new session") };
		writeFileSync(currentFile, `${JSON.stringify(header)}\n${JSON.stringify(first)}\n`);
		// The watch on the path reports the file when it appears: no event from pi is needed.
		await waitFor(() => (widgets.get("pi-sessiond-tree") ?? [])[0] !== "(the tree appears with the first message)", "the first tree");
		assert.deepEqual(widgets.get("pi-sessiond-tree"), ["user: a new session ← leaf"]);
		const second = { type: "message", id: "pi000012", parentId: "pi000011", timestamp: new Date().toISOString(), message: userMessage("and more") };
		appendFileSync(currentFile, `${JSON.stringify(second)}\n`);
		await waitFor(() => (widgets.get("pi-sessiond-tree") ?? []).length === 2, "the redrawn tree");
		assert.deepEqual(widgets.get("pi-sessiond-tree"), ["user: a new session", "user: and more ← leaf"]);
		await run("hide");
	});

	it("searches sessions (sessions/search) and switches to the hit's session", async () => {
		currentFile = undefined;
		switched.length = 0;
		notes.length = 0;
		await run("search yak");
		assert.deepEqual(notes, [], "no error was reported");
		assert.match(selects.at(-1)!.title, /matches for "yak"/);
		assert.deepEqual(switched, [files[1]]);
	});

	it("says what is wrong with an unknown subcommand", async () => {
		notes.length = 0;
		await run("frobnicate");
		assert.deepEqual(notes, [["warning", 'Unknown subcommand "frobnicate". Try: /sessiond [all | search WORDS | tree | hide]']]);
	});
});

describe("renderAroundLeaf", () => {
	const entry = (id: string, parentId: string | null, text: string) => ({ type: "message", id, parentId, timestamp: "", message: { role: "user", content: text } });
	/** A TreeSource over entries, with pi's getBranch walk. */
	const source = (entries: ReturnType<typeof entry>[], leafId: string | null, labels: Record<string, string> = {}) => ({
		getEntries: () => entries,
		getLeafId: () => leafId,
		getLabel: (id: string) => labels[id],
		getBranch: () => {
			const byId = new Map(entries.map((e) => [e.id, e]));
			const path = [];
			for (let e = leafId ? byId.get(leafId) : undefined; e; e = e.parentId ? byId.get(e.parentId) : undefined) path.push(e);
			return path.reverse();
		},
	});

	it("shows the branch to the leaf, the leaf and labels marked, and how many other branches leave each entry", () => {
		const tree = [entry("a", null, "root"), entry("b", "a", "left"), entry("c", "a", "right"), entry("d", "c", "right 2"), entry("e", "c", "right 3")];
		assert.deepEqual(renderAroundLeaf(source(tree, "d", { a: "start" }), 10), [
			"user: root [start]  ⎇ +1 other branch",
			"user: right  ⎇ +1 other branch",
			"user: right 2 ← leaf",
		]);
		assert.deepEqual(renderAroundLeaf(source(tree, "c"), 10), ["user: root  ⎇ +1 other branch", "user: right ← leaf  ⎇ +2 other branches"]);
		assert.deepEqual(renderAroundLeaf(source(tree, null), 10), ["(leaf before the first entry)"]);
		assert.deepEqual(renderAroundLeaf(source([], null), 10), ["(empty session)"]);
	});

	it("shows only the last lines of a long branch, far deeper than the call stack, and counts the rest", () => {
		const chain = Array.from({ length: 200_000 }, (_, i) => entry(`n${i}`, i === 0 ? null : `n${i - 1}`, `message ${i}`));
		assert.deepEqual(renderAroundLeaf(source(chain, "n199999"), 3), ["… 199998 earlier entries", "user: message 199998", "user: message 199999 ← leaf"]);
	});
});
