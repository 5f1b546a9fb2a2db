/** A session pi wrote: reads, appends, branches, change events and the async iterator, errors. */

import assert from "node:assert/strict";
import { appendFileSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
	ERROR_CODES,
	type RemoteSession,
	type SessionChanged,
	type SessiondClient,
	SessiondError,
	type SessionTreeFlatNode,
	type SessionTreeNode,
	type SessionUpdate,
} from "../src/index.js";
import { IDS, spawnTestClient, tempDir, userMessage, waitFor, writePiSession } from "./helpers.js";

let client: SessiondClient;

before(async () => {
	({ client } = await spawnTestClient());
});

after(async () => {
	await client.close();
});

/** Each node as `id(child, child…)`, to compare tree shapes at a glance. */
function shape(nodes: SessionTreeNode[]): string {
	return nodes.map((n) => (n.children.length ? `${n.entry.id}(${shape(n.children)})` : String(n.entry.id))).join(",");
}

/** A nested tree in pre-order as `getTreeFlat` should return it: node, then its subtrees. */
function flatten(roots: SessionTreeNode[]): SessionTreeFlatNode[] {
	const out: SessionTreeFlatNode[] = [];
	const visit = (node: SessionTreeNode, parentIndex: number | null, depth: number) => {
		const { children, ...rest } = node;
		const index = out.length;
		out.push({ ...rest, parentIndex, depth });
		for (const child of children) visit(child, index, depth + 1);
	};
	for (const root of roots) visit(root, null, 0);
	return out;
}

/** Opens a fresh copy of the pi-written session. */
async function openFresh(): Promise<{ session: RemoteSession; file: string; dir: string }> {
	const dir = tempDir();
	const file = writePiSession(dir);
	return { session: await client.openSession(file), file, dir };
}

describe("reading a session pi wrote", () => {
	it("returns pi's reads of the file", async () => {
		const { session, file, dir } = await openFresh();
		assert.equal(session.getSessionFile(), file);
		assert.equal(session.getSessionId(), "0190aaaa-bbbb-7ccc-8ddd-eeeeeeee0001");
		assert.equal(session.getCwd(), dir);
		assert.equal(session.isPersisted(), true);

		assert.deepEqual(await session.getHeader(), JSON.parse(readFileSync(file, "utf8").split("\n")[0]!));
		assert.equal(await session.getEntryCount(), 5);
		assert.equal(await session.getLeafId(), IDS.a2);
		assert.equal((await session.getLeafEntry())?.id, IDS.a2);
		assert.equal((await session.getEntry(IDS.u1))?.type, "message");
		assert.equal(await session.getEntry("missing"), null);
		assert.deepEqual((await session.getEntries()).map((e) => e.id), [IDS.u1, IDS.a1, "e0000005", IDS.u2, IDS.a2]);
		assert.deepEqual((await session.getEntries({ offset: 1, limit: 2 })).map((e) => e.id), [IDS.a1, "e0000005"]);
		assert.deepEqual((await session.getChildren(IDS.a1)).map((e) => e.id), ["e0000005"]);
		assert.deepEqual((await session.getBranch(IDS.a1)).map((e) => e.id), [IDS.u1, IDS.a1]);
		assert.equal(shape(await session.getTree()), `${IDS.u1}(${IDS.a1}(e0000005(${IDS.u2}(${IDS.a2}))))`);
		assert.deepEqual(
			(await session.getTreeFlat()).map((n) => [n.entry.id, n.parentIndex, n.depth]),
			[
				[IDS.u1, null, 0],
				[IDS.a1, 0, 1],
				["e0000005", 1, 2],
				[IDS.u2, 2, 3],
				[IDS.a2, 3, 4],
			],
		);
		assert.deepEqual(await session.getWarnings(), []);
		assert.equal(await session.getSessionName(), null);

		const context = await session.buildSessionContext();
		assert.deepEqual(context.messages.map((m) => m.role), ["user", "assistant", "user", "assistant"]);
		assert.equal(context.messages[0]!.role === "user" && context.messages[0]!.content, "first question about alpha");
		assert.deepEqual(context.model, { provider: "anthropic", modelId: "claude-test" });
		assert.equal((await session.buildContextEntries()).length, 5);
		const projection = await session.buildSessionProjection();
		assert.equal(projection.entries.length, 5);
		assert.deepEqual(projection.messages, context.messages);

		const state = await session.getState();
		assert.equal(state.handle, session.handle);
		assert.equal(state.entryCount, 5);
		await session.close();
	});

	it("reports what it found wrong in a damaged file instead of failing", async () => {
		const dir = tempDir();
		const file = writePiSession(dir);
		appendFileSync(file, "this is not json\n");
		const session = await client.openSession(file);
		const warnings = await session.getWarnings();
		assert.deepEqual(warnings.map((w) => [w.line, w.kind]), [[7, "malformed_line"]]);
		assert.equal(readFileSync(file, "utf8").split("\n").length, 8, "opening never rewrites the file");
		await session.close();
	});
});

describe("changing a session", () => {
	it("appends, branches and notifies in seq order, as events and through the iterator", async () => {
		const { session, file } = await openFresh();
		const events: SessionChanged[] = [];
		session.on("changed", (n) => events.push(n));
		const iterator = session.changes();

		const m1 = await session.appendMessage(userMessage("third question"));
		// The notification is written before the response: the event has already fired when the call resolves.
		assert.equal(events.length, 1);
		await session.branch(IDS.a1);
		const m2 = await session.appendMessage(userMessage("a different third question"));

		assert.deepEqual(
			events.map((n) => [n.seq, n.change.kind, n.leafId]),
			[
				[1, "append", m1],
				[2, "leaf", IDS.a1],
				[3, "append", m2],
			],
		);
		const first = events[0]!.change;
		assert.ok(first.kind === "append");
		assert.deepEqual(first.entries.map((e) => [e.id, e.parentId, e.type]), [[m1, IDS.a2, "message"]]);

		const items: SessionUpdate[] = [];
		for await (const update of iterator) {
			items.push(update);
			if (items.length === 3) break;
		}
		assert.deepEqual(items, events, "the iterator yields exactly the events");

		assert.equal(await session.getLeafId(), m2);
		assert.equal(shape(await session.getTree()), `${IDS.u1}(${IDS.a1}(e0000005(${IDS.u2}(${IDS.a2}(${m1}))),${m2}))`);
		const context = await session.buildSessionContext();
		assert.deepEqual(
			context.messages.map((m) => (m.role === "user" ? m.content : m.role)),
			["first question about alpha", "assistant", "a different third question"],
		);

		// Both appends are in the file, as pi would write them.
		const lines = readFileSync(file, "utf8").trimEnd().split("\n").map((l) => JSON.parse(l));
		assert.deepEqual(lines.slice(-2).map((l) => [l.id, l.parentId]), [[m1, IDS.a2], [m2, IDS.a1]]);

		// The flat tree is the nested one in pre-order, siblings in the same order, entries identical.
		const labelEntry = await session.appendLabelChange(m2, "the other way");
		const labelled = await session.getTree();
		const flat = await session.getTreeFlat();
		assert.deepEqual(flat, flatten(labelled));
		assert.deepEqual(
			flat.map((n) => [n.entry.id, n.parentIndex, n.depth]),
			[
				[IDS.u1, null, 0],
				[IDS.a1, 0, 1],
				["e0000005", 1, 2],
				[IDS.u2, 2, 3],
				[IDS.a2, 3, 4],
				[m1, 4, 5],
				[m2, 1, 2],
				[labelEntry, 6, 3],
			],
		);
		assert.equal(flat[6]!.label, "the other way");
		assert.equal(typeof flat[6]!.labelTimestamp, "string");
		assert.equal(flat[0]!.label, undefined);
		await session.close();
	});

	it("supports every append method and resetLeaf", async () => {
		const { session } = await openFresh();
		const seen: string[] = [];
		session.on("changed", (n) => seen.push(n.change.kind === "append" ? String(n.change.entries[0]?.type) : n.change.kind));

		await session.appendThinkingLevelChange("high");
		await session.appendModelChange("openai", "gpt-test");
		const usage = { input: 1, output: 2, cacheRead: 0, cacheWrite: 0, totalTokens: 3, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } };
		const usageEntry = await session.appendUsage("cache_warm", "openai", "gpt-test", usage, "warm-up");
		assert.equal(usageEntry.type, "usage");
		assert.equal(usageEntry.note, "warm-up");
		await session.appendCustomEntry("my-ext", { n: 1 });
		await session.appendSessionInfo("  My\nsession ");
		assert.equal(await session.getSessionName(), "My session");
		const custom = await session.appendCustomMessageEntry("my-ext", "injected", true, { d: 1 });
		await session.appendContextEdit(custom, { content: "edited" });
		const label = await session.appendLabelChange(IDS.u1, "start");
		assert.equal(await session.getLabel(IDS.u1), "start");
		assert.equal((await session.getTree())[0]!.label, "start");
		await session.appendLabelChange(IDS.u1, undefined);
		assert.equal(await session.getLabel(IDS.u1), null);
		assert.ok(label);

		const context = await session.buildSessionContext();
		assert.equal(context.thinkingLevel, "high");
		assert.deepEqual(context.model, { provider: "openai", modelId: "gpt-test" });
		const last = context.messages.at(-1)!;
		assert.equal(last.role, "custom");
		assert.equal((last as { content?: unknown }).content, "edited", "the context edit replaced the content");

		const compaction = await session.appendCompaction("summary of it all", IDS.u2, 1234);
		assert.equal((await session.getEntry(compaction))?.type, "compaction");
		const summary = await session.branchWithSummary(IDS.a1, "what the other branch did");
		assert.equal((await session.getEntry(summary))?.parentId, IDS.a1);

		await session.resetLeaf();
		assert.equal(await session.getLeafId(), null);
		assert.deepEqual(seen, [
			"thinking_level_change",
			"model_change",
			"usage",
			"custom",
			"session_info",
			"custom_message",
			"context_edit",
			"label",
			"label",
			"compaction",
			"branch_summary",
			"leaf",
		]);
		await session.close();
	});

	it("omits an entry from the context with a null context edit", async () => {
		const { session } = await openFresh();
		const custom = await session.appendCustomMessageEntry("my-ext", "injected", true);
		assert.equal((await session.buildSessionContext()).messages.at(-1)!.role, "custom");
		const edit = await session.appendContextEdit(custom, null);
		const entry = await session.getEntry(edit);
		assert.deepEqual([entry?.type, entry?.targetId, entry?.replacement], ["context_edit", custom, null], "null is written as null");
		const roles = (await session.buildSessionContext()).messages.map((m) => m.role);
		assert.deepEqual(roles, ["user", "assistant", "user", "assistant"], "the custom message is gone from the context");
		await session.close();
	});

	it("rebinds the handle: createBranchedSession, newSession, setSessionFile", async () => {
		const { session, file, dir } = await openFresh();
		const kinds: string[] = [];
		session.on("changed", (n) => kinds.push(n.change.kind));

		const branched = await session.createBranchedSession(IDS.a1);
		assert.ok(branched && branched !== file && existsSync(branched));
		assert.equal(session.getSessionFile(), branched, "the rebind notification updated the local state");
		assert.equal(await session.getEntryCount(), 2);

		const fresh = await session.newSession({ id: "fresh-session-1" });
		assert.equal(fresh.sessionId, "fresh-session-1");
		assert.equal(session.getSessionId(), "fresh-session-1");
		assert.equal(await session.getEntryCount(), 0);

		const back = await session.setSessionFile(file);
		assert.equal(back.sessionFile, file);
		assert.equal(await session.getEntryCount(), 5);
		assert.deepEqual(kinds, ["rebind", "rebind", "rebind"]);
		assert.ok(dir);
		await session.close();
	});

	it("shares one handle between two opens of a file: both see every change, each close drops one reference", async () => {
		const { session: a, file } = await openFresh();
		const b = await client.openSession(file);
		assert.equal(a.handle, b.handle);
		const seenA: number[] = [];
		const seenB: number[] = [];
		a.on("changed", (n) => seenA.push(n.seq));
		b.on("changed", (n) => seenB.push(n.seq));
		await a.appendMessage(userMessage("via a"));
		await b.appendMessage(userMessage("via b"));
		assert.deepEqual(seenA, [1, 2]);
		assert.deepEqual(seenB, [1, 2]);

		const iterator = a.changes();
		await a.close();
		assert.deepEqual(await iterator.next(), { value: undefined, done: true }, "closing ends the iterator");
		await assert.rejects(a.getLeafId(), (e: unknown) => e instanceof SessiondError && e.kind === "handle_not_found");
		// The server still has b's reference.
		await b.appendMessage(userMessage("b is still open"));
		assert.deepEqual(seenB, [1, 2, 3]);
		assert.deepEqual(seenA, [1, 2], "a closed session gets no more events");
		await b.close();
		await assert.rejects(client.request("session/getLeafId", { handle: b.handle }), (e: unknown) => e instanceof SessiondError && e.code === 1003);
	});

	it("follows appends another process makes to a watched file", async () => {
		const { session, file } = await openFresh();
		await session.close();
		const watched = await client.openSession(file, { watch: true });
		const events: SessionChanged[] = [];
		watched.on("changed", (n) => events.push(n));
		const entry = {
			type: "message",
			id: "e0000099",
			parentId: IDS.a2,
			timestamp: new Date().toISOString(),
			message: userMessage("typed in pi"),
		};
		appendFileSync(file, `${JSON.stringify(entry)}\n`);
		await waitFor(() => events.length > 0, "the external append");
		const n = events[0]!;
		assert.equal(n.origin, "external");
		assert.equal(n.seq, 1);
		assert.ok(n.change.kind === "append");
		assert.deepEqual(n.change.entries, [entry]);
		assert.equal(await watched.getLeafId(), "e0000099");
		await watched.unwatch();
		await watched.close();
	});
});

describe("errors", () => {
	it("refuses to open a path with no file unless asked to create a session there (#15)", async () => {
		const missing = join(tempDir(), "typo.jsonl");
		await assert.rejects(client.openSession(missing), (e: unknown) => {
			assert.ok(e instanceof SessiondError, String(e));
			assert.deepEqual([e.code, e.kind, e.data.path], [1001, "session_not_found", missing]);
			return true;
		});
		assert.equal(existsSync(missing), false, "nothing was created");
		const created = await client.openSession(missing, { create: true });
		assert.equal(await created.getEntryCount(), 0);
		await created.appendMessage(userMessage("the first message writes the file"));
		assert.equal(existsSync(missing), true);
		await created.close();
	});

	it("says an empty path is empty, rather than naming the working directory it would resolve to", async () => {
		for (const create of [false, true]) {
			await assert.rejects(client.openSession("", { create }), (e: unknown) => {
				assert.ok(e instanceof SessiondError, String(e));
				assert.equal(e.kind, "invalid_params");
				assert.match(e.message, /the path is empty/);
				assert.ok(!e.message.includes(process.cwd()), e.message);
				return true;
			});
		}
	});

	it("names a missing required param in data.path", async () => {
		const session = await client.inMemory();
		try {
			const invalid = (path: string) => (e: unknown) => {
				assert.ok(e instanceof SessiondError, String(e));
				assert.deepEqual([e.code, e.kind, e.data.path], [-32602, "invalid_params", path]);
				return true;
			};
			await assert.rejects(client.request("session/branch", { handle: session.handle } as never), invalid("entryId"));
			await assert.rejects(client.request("sessions/list", {} as never), invalid("cwd"));
			await assert.rejects(client.request("sessions/search", { cwd: "/tmp" } as never), invalid("query"));
			// appendContextEdit's replacement is required, and null is a value: leaving it out is refused.
			const target = await session.appendMessage(userMessage("to be edited"));
			// `as never` because schema.json describes replacement as required but leaves it out of `required`, so the
			// generated params type makes it optional (a contract bug, reported); the server does require it.
			await assert.rejects(client.request("session/appendContextEdit", { handle: session.handle, targetId: target } as never), invalid("replacement"));
		} finally {
			await session.close();
		}
	});

	it("refuses a mutation when another process appended first and moved the leaf (content_modified, data.leafId)", async () => {
		const { session, file } = await openFresh();
		const events: SessionChanged[] = [];
		session.on("changed", (n) => events.push(n));
		// pi (which takes no lock) appends to the file; the handle is not watching it.
		const external = { type: "message", id: "e0000077", parentId: IDS.a2, timestamp: new Date().toISOString(), message: userMessage("typed in pi") };
		appendFileSync(file, `${JSON.stringify(external)}\n`);
		await assert.rejects(session.appendMessage(userMessage("based on a stale picture")), (e: unknown) => {
			assert.ok(e instanceof SessiondError, String(e));
			assert.deepEqual([e.code, e.kind], [-32801, "content_modified"]);
			assert.equal(e.data.leafId, external.id, "data.leafId is the leaf now: pi's entry");
			return true;
		});
		// What pi wrote was published before the refusal, as an external change.
		assert.deepEqual(
			events.map((n) => [n.seq, n.origin, n.change.kind, n.leafId]),
			[[1, "external", "append", external.id]],
		);
		// With the picture updated, the retry goes through, under pi's entry.
		const id = await session.appendMessage(userMessage("retried"), { expectedLeafId: external.id });
		assert.equal((await session.getEntry(id))?.parentId, external.id);

		// An expectedLeafId that another process's append made stale is refused the same way.
		const second = { ...external, id: "e0000078", parentId: id };
		appendFileSync(file, `${JSON.stringify(second)}\n`);
		await assert.rejects(session.branch(IDS.a1, { expectedLeafId: id }), (e: unknown) => {
			assert.ok(e instanceof SessiondError, String(e));
			assert.deepEqual([e.code, e.kind, e.data.leafId], [-32801, "content_modified", second.id]);
			return true;
		});
		await session.close();
	});

	// protocol/README.md and methods.json: content_modified carries data.path when another process wrote the file first.
	it(
		"names the file in data.path when another process wrote it first",
		async () => {
			const { session, file } = await openFresh();
			try {
				appendFileSync(file, `${JSON.stringify({ type: "message", id: "e0000079", parentId: IDS.a2, timestamp: new Date().toISOString(), message: userMessage("pi") })}\n`);
				await assert.rejects(session.appendMessage(userMessage("stale")), (e: unknown) => {
					assert.ok(e instanceof SessiondError, String(e));
					assert.deepEqual([e.kind, e.data.leafId, e.data.path], ["content_modified", "e0000079", file]);
					return true;
				});
			} finally {
				await session.close();
			}
		},
	);

	it("refuses to write a file another pi-sessiond is writing (session_locked, data.pid), and never blocks reading", async () => {
		const { session, file } = await openFresh();
		await session.appendMessage(userMessage("this process now holds the write lock"));
		const { client: other } = await spawnTestClient();
		try {
			const theirs = await other.openSession(file);
			assert.equal(await theirs.getEntryCount(), 6, "reading is never blocked");
			await assert.rejects(theirs.appendMessage(userMessage("second writer")), (e: unknown) => {
				assert.ok(e instanceof SessiondError, String(e));
				assert.deepEqual([e.code, e.kind], [ERROR_CODES.session_locked, "session_locked"]);
				assert.equal(e.code, 1007);
				assert.equal(e.data.pid, client.pid, "data.pid is the process holding the lock");
				assert.equal(e.data.path, file);
				return true;
			});
			// Who holds it can be asked before writing: the other process is named, never the holder to itself.
			assert.equal(await other.lockHolder(file), client.pid);
			assert.equal(await client.lockHolder(file), null);
			// The lock goes with the handle: once this process closes the session, the other may write.
			await session.close();
			assert.equal(await other.lockHolder(file), null);
			const id = await theirs.appendMessage(userMessage("second writer, now alone"));
			assert.ok(readFileSync(file, "utf8").includes(`"id":"${id}"`));
		} finally {
			await other.close();
		}
	});

	it("maps a JSON-RPC error to SessiondError with code, kind and data", async () => {
		const { session } = await openFresh();
		await assert.rejects(session.appendMessage(userMessage("stale"), { expectedLeafId: IDS.u1 }), (e: unknown) => {
			assert.ok(e instanceof SessiondError);
			assert.equal(e.code, -32801);
			assert.equal(e.kind, "content_modified");
			assert.equal(e.data.leafId, IDS.a2, "data.leafId is the current leaf");
			assert.equal(e.method, "session/appendMessage");
			return true;
		});
		// With the right expectation it goes through.
		await session.appendMessage(userMessage("fresh"), { expectedLeafId: IDS.a2 });

		await assert.rejects(session.branch("no-such-entry"), (e: unknown) => {
			assert.ok(e instanceof SessiondError);
			assert.deepEqual([e.code, e.kind, e.data.id], [1002, "entry_not_found", "no-such-entry"]);
			assert.match(e.message, /Entry no-such-entry not found/);
			return true;
		});
		await assert.rejects(client.request("session/branch", { handle: session.handle, entryId: 5 } as never), (e: unknown) => {
			assert.ok(e instanceof SessiondError);
			assert.deepEqual([e.code, e.kind, e.data.path], [-32602, "invalid_params", "entryId"]);
			return true;
		});
		const notSession = join(tempDir(), "notes.jsonl");
		writeFileSync(notSession, '{"hello":"world"}\n');
		await assert.rejects(client.openSession(notSession), (e: unknown) => {
			assert.ok(e instanceof SessiondError);
			assert.deepEqual([e.code, e.kind], [1004, "invalid_session_file"]);
			return true;
		});
		await assert.rejects(client.request("no/such/method", {}), (e: unknown) => e instanceof SessiondError && e.kind === "method_not_found" && e.code === -32601);
		await session.close();
	});
});
