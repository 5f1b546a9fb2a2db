/**
 * The example pi extension, driven through a stand-in for pi's extension API against the real server. pi itself
 * needs Node >= 22.19 to run, so this checks the extension's behaviour without it; `npm run check:example`
 * type-checks it against pi's real API.
 */

import assert from "node:assert/strict";
import { appendFileSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import type { ExtensionAPI } from "@earendil-works/pi-coding-agent";
import sessiondExtension, { renderTree } from "../examples/pi-extension/index.js";
import type { SessiondClient, SessionTreeFlatNode, SessionTreeNode } from "../src/index.js";
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

/** A nested tree (getTree's shape) as getTreeFlat's pre-order nodes. */
function flatten(roots: SessionTreeNode[]): SessionTreeFlatNode[] {
	const out: SessionTreeFlatNode[] = [];
	const visit = (node: SessionTreeNode, parentIndex: number | null, depth: number) => {
		const index = out.length;
		out.push({ entry: node.entry, parentIndex, depth, ...(node.label !== undefined ? { label: node.label } : {}) });
		for (const child of node.children) visit(child, index, depth + 1);
	};
	for (const root of roots) visit(root, null, 0);
	return out;
}

describe("renderTree", () => {
	const entry = (id: string, text: string) => ({ type: "message", id, parentId: null, timestamp: "", message: { role: "user", content: text } });

	it("indents only at branch points and marks the leaf and labels", () => {
		const lines = renderTree(
			flatten([
				{
					entry: entry("a", "root"),
					label: "start",
					children: [
						{ entry: entry("b", "left"), children: [{ entry: entry("c", "left 2"), children: [{ entry: entry("c2", "left 3"), children: [] }] }] },
						{
							entry: entry("d", "right"),
							children: [
								{ entry: entry("e", "right a"), children: [] },
								{ entry: entry("f", "right b"), children: [] },
							],
						},
					],
				},
			]),
			"d",
			10,
		);
		assert.deepEqual(lines, [
			"user: root [start]",
			"  ├ user: left",
			"    user: left 2",
			"    user: left 3",
			"  ├ user: right ← leaf",
			"      ├ user: right a",
			"      ├ user: right b",
		]);
		assert.deepEqual(renderTree(flatten([{ entry: entry("a", "x"), children: [{ entry: entry("b", "y"), children: [] }] }]), null, 1), [
			"user: x",
			"… 1 more entries",
		]);
	});

	it("renders a session far deeper than the call stack, as getTreeFlat returns it", () => {
		// A linear session of 200 000 entries: 200 000 levels as getTree's nesting.
		const nodes: SessionTreeFlatNode[] = Array.from({ length: 200_000 }, (_, i) => ({
			entry: entry(`n${i}`, `message ${i}`),
			parentIndex: i === 0 ? null : i - 1,
			depth: i,
		}));
		assert.deepEqual(renderTree(nodes, "n1", 3), ["user: message 0", "user: message 1 ← leaf", "user: message 2", "… 199997 more entries"]);
	});
});
