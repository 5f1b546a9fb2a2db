/** Session-independent methods: the open variants, listing, findById, search, directory watching. */

import assert from "node:assert/strict";
import { appendFileSync, existsSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import { join } from "node:path";
import { type SessiondClient, SessiondError, type SessionsChanged } from "../src/index.js";
import { spawnTestClient, tempDir, userMessage, waitFor, writePiSession } from "./helpers.js";

let client: SessiondClient;
let dir: string;
let cwd: string;
let fileA: string;
let fileB: string;
const ID_A = "0190aaaa-bbbb-7ccc-8ddd-00000000000a";
const ID_B = "0190aaaa-bbbb-7ccc-8ddd-00000000000b";

before(async () => {
	({ client } = await spawnTestClient());
	dir = tempDir();
	cwd = tempDir();
	fileA = writePiSession(dir, { id: ID_A, cwd, words: ["zebra", "yak"] });
	fileB = writePiSession(dir, { id: ID_B, cwd, words: ["walrus", "vole"] });
});

after(async () => {
	await client.close();
});

describe("listing", () => {
	it("lists a directory's sessions as pi does, with progress", async () => {
		const progress: [number, number][] = [];
		const infos = await client.list(cwd, { sessionDir: dir, onProgress: (loaded, total) => progress.push([loaded, total]) });
		assert.deepEqual(infos.map((i) => i.path).sort(), [fileA, fileB].sort());
		const a = infos.find((i) => i.id === ID_A)!;
		assert.equal(a.cwd, cwd);
		assert.equal(a.messageCount, 4);
		assert.equal(a.firstMessage, "first question about zebra");
		assert.match(a.allMessagesText ?? "<absent>", /second answer about yak/, "allMessagesText is there by default, as pi has it");
		assert.ok(progress.length > 0, "progress was reported");
		assert.deepEqual(progress.at(-1), [2, 2]);

		const all = await client.listAll({ sessionDir: dir });
		assert.deepEqual(all.map((i) => i.path).sort(), [fileA, fileB].sort());
		assert.ok(all.every((i) => typeof i.allMessagesText === "string"));
	});

	it("leaves allMessagesText out when asked to, and nothing else", async () => {
		const full = await client.list(cwd, { sessionDir: dir });
		const lean = await client.list(cwd, { sessionDir: dir, includeAllMessagesText: false });
		assert.deepEqual(lean.map((i) => i.path), full.map((i) => i.path), "same sessions, same order");
		for (const [i, info] of lean.entries()) {
			assert.equal("allMessagesText" in info, false, `${info.path} has no allMessagesText member`);
			const { allMessagesText, ...rest } = full[i]!;
			assert.ok(allMessagesText);
			assert.deepEqual(info, rest);
		}
		const leanAll = await client.listAll({ sessionDir: dir, includeAllMessagesText: false });
		assert.equal(leanAll.length, 2);
		assert.ok(leanAll.every((i) => !("allMessagesText" in i)));
		const explicit = await client.listAll({ sessionDir: dir, includeAllMessagesText: true });
		assert.ok(explicit.every((i) => typeof i.allMessagesText === "string"));
	});

	it("keeps the last listing, so the next one receives only what changed, and still returns pi's listing", async () => {
		const d = tempDir();
		const files = Array.from({ length: 6 }, (_, i) => writePiSession(d, { id: `kept-${i}`, cwd, words: [`w${i}`, `v${i}`] }));
		const raw = () => client.request("sessions/list", { cwd, sessionDir: d });
		// Counts the entries each sessions/listDelta answer carried in full.
		const full: number[] = [];
		const request = client.request.bind(client);
		(client as { request: unknown }).request = async (method: string, params: object, opts?: object) => {
			const result = await request(method, params, opts);
			if (method === "sessions/listDelta") full.push((result as { sessions: unknown[] }).sessions.filter((e) => typeof e !== "number").length);
			return result;
		};
		const first = await client.list(cwd, { sessionDir: d });
		assert.deepEqual(first, await raw());
		// The caller owns what it got: changing it does not change the next listing.
		first[0]!.firstMessage = "scribbled on by the caller";
		first.pop();
		const second = await client.list(cwd, { sessionDir: d });
		assert.deepEqual(second, await raw());
		// A session grows (and moves to the top) and another vanishes.
		appendFileSync(
			files[2]!,
			`${JSON.stringify({ type: "message", id: "late0001", parentId: "e0000004", timestamp: "2025-01-02T00:00:00.000Z", message: userMessage("a late question") })}\n`,
		);
		rmSync(files[4]!);
		const third = await client.list(cwd, { sessionDir: d });
		assert.deepEqual(third, await raw());
		assert.equal(third.length, 5);
		(client as { request: unknown }).request = request;
		assert.deepEqual(full, [6, 0, 1], "in full, then nothing, then only the session that grew");

		// Without the cache, the same listings.
		const { client: plain } = await spawnTestClient({ cacheListings: false });
		try {
			assert.deepEqual(await plain.list(cwd, { sessionDir: d }), third);
			assert.deepEqual(await plain.listAll({ sessionDir: d, includeAllMessagesText: false }), await client.listAll({ sessionDir: d, includeAllMessagesText: false }));
		} finally {
			await plain.close();
		}
	});

	it("finds a session by id", async () => {
		assert.equal(await client.findById(cwd, ID_B, { sessionDir: dir }), fileB);
		assert.equal(await client.findById(cwd, "no-such-id", { sessionDir: dir }), null);
	});

	it("cancels a listing through an AbortSignal", async () => {
		const bigDir = tempDir();
		for (let i = 0; i < 300; i++) writePiSession(bigDir, { id: `bulk-${i}`, cwd });
		const controller = new AbortController();
		// Stop the server so the request and its $/cancelRequest are both queued before it reads either: the listing
		// is then still in flight when the cancellation is handled.
		process.kill(client.pid!, "SIGSTOP");
		const listing = client.list(cwd, { sessionDir: bigDir, signal: controller.signal });
		await new Promise((r) => setTimeout(r, 20));
		controller.abort();
		await new Promise((r) => setTimeout(r, 20));
		process.kill(client.pid!, "SIGCONT");
		await assert.rejects(listing, (e: unknown) => {
			assert.ok(e instanceof SessiondError, String(e));
			assert.deepEqual([e.code, e.kind], [-32800, "request_cancelled"]);
			return true;
		});
		assert.equal((await client.list(cwd, { sessionDir: bigDir })).length, 300, "the next listing is whole");
	});
});

describe("search (sessions/search)", () => {
	it("finds messages by text, with the hit's session, entry, role, snippet and score", async () => {
		const stages: (string | undefined)[] = [];
		const hits = await client.search("walrus", { sessionDir: dir, onProgress: (_loaded, _total, stage) => stages.push(stage) });
		assert.equal(hits.length, 2, `two messages mention walrus, got ${JSON.stringify(hits)}`);
		// The catalog is brought up to date first, then the index.
		assert.ok(stages.includes("listing") && stages.includes("indexing"), `stages ${JSON.stringify(stages)}`);
		assert.ok(stages.indexOf("listing") < stages.indexOf("indexing"));
		assert.ok(stages.every((stage) => stage === "listing" || stage === "indexing"));
		for (const hit of hits) {
			assert.equal(hit.path, fileB);
			assert.equal(hit.sessionId, ID_B);
			assert.ok(["e0000001", "e0000002"].includes(String(hit.entryId)), String(hit.entryId));
			assert.ok(["user", "assistant"].includes(hit.role), hit.role);
			assert.match(hit.snippet, /walrus/);
			assert.equal(typeof hit.score, "number");
			assert.ok(hit.timestamp);
		}
		const users = await client.search("walrus", { sessionDir: dir, roles: ["user"] });
		assert.deepEqual(users.map((h) => [h.entryId, h.role]), [["e0000001", "user"]]);
		assert.equal((await client.search("walrus", { sessionDir: dir, limit: 1 })).length, 1);
		assert.deepEqual(await client.search("no-such-word-anywhere", { sessionDir: dir }), []);
	});

	it("pages a search with searchPage, counting every hit", async () => {
		const whole = await client.search("walrus", { sessionDir: dir });
		const first = await client.searchPage("walrus", { sessionDir: dir, limit: 1 });
		const second = await client.searchPage("walrus", { sessionDir: dir, limit: 1, offset: 1 });
		assert.deepEqual([first.total, first.sessions, first.offset, second.offset], [whole.length, 1, 0, 1]);
		assert.deepEqual([...first.hits, ...second.hits], whole, "the pages are the whole answer, in order");
	});

	it("takes pi's query forms: all words, exact phrases, re:", async () => {
		const ids = async (query: string) => (await client.search(query, { sessionDir: dir })).map((h) => `${String(h.sessionId).slice(-1)}:${String(h.entryId)}`).sort();
		assert.deepEqual(await ids("second yak"), ["a:e0000003", "a:e0000004"], "every word must occur");
		assert.deepEqual(await ids('"answer about yak"'), ["a:e0000004"]);
		assert.deepEqual(await ids('"about answer"'), [], "a phrase keeps its word order");
		assert.deepEqual(await ids("re:question about (zebra|vole)"), ["a:e0000001", "b:e0000003"]);
		await assert.rejects(client.search("re:(", { sessionDir: dir }), (e: unknown) => {
			assert.ok(e instanceof SessiondError, String(e));
			assert.deepEqual([e.code, e.kind, e.data.path], [-32602, "invalid_params", "query"]);
			return true;
		});
	});

	it("finds a phrase another process appended after the first search", async () => {
		const searchDir = tempDir();
		const file = writePiSession(searchDir, { id: "0190aaaa-bbbb-7ccc-8ddd-0000000000c1", cwd, words: ["heron", "ibis"] });
		const phrase = "marmalade on the lighthouse steps";
		assert.deepEqual(await client.search(`"${phrase}"`, { sessionDir: searchDir }), [], "not there yet (and the index is built)");
		// pi (any process) appends to the file.
		const entry = { type: "message", id: "e00000c2", parentId: "e0000004", timestamp: new Date().toISOString(), message: userMessage(`we left ${phrase} at dawn`) };
		appendFileSync(file, `${JSON.stringify(entry)}\n`);
		const stages = new Set<string | undefined>();
		const hits = await client.search(`"${phrase}"`, { sessionDir: searchDir, onProgress: (_l, _t, stage) => stages.add(stage) });
		assert.deepEqual(
			hits.map((h) => [h.path, h.entryId, h.role]),
			[[file, entry.id, "user"]],
		);
		assert.match(hits[0]!.snippet, /marmalade on the lighthouse steps/);
		assert.ok(stages.has("indexing"), "the appended text was extracted into the index");
	});

	it("searches a project's sessions with cwd, and matches a session by its name", async () => {
		const otherCwd = tempDir();
		const agentDir = tempDir("pi-sessiond-agent-");
		const { client: scoped } = await spawnTestClient({ agentDir });
		try {
			const mine = await scoped.createSession(cwd);
			await mine.appendMessage(userMessage("the kestrel hovers"));
			await mine.appendSessionInfo("Kestrel notes");
			const theirs = await scoped.createSession(otherCwd);
			await theirs.appendMessage(userMessage("the kestrel dives"));
			const hits = await scoped.search("kestrel", { cwd });
			assert.ok(hits.length > 0);
			assert.ok(hits.every((h) => h.path === mine.getSessionFile()), `only cwd's sessions: ${JSON.stringify(hits)}`);
			assert.deepEqual(new Set(hits.map((h) => h.role)), new Set(["user", "name", "session"]));
			const sessionHit = hits.find((h) => h.role === "session")!;
			assert.equal(sessionHit.entryId, null, "a session-level hit names no entry");
			assert.equal(sessionHit.sessionId, mine.getSessionId());
			const everywhere = await scoped.search("dives");
			assert.deepEqual(everywhere.map((h) => h.path), [theirs.getSessionFile()], "without cwd or sessionDir: every session");
			await mine.close();
			await theirs.close();
		} finally {
			await scoped.close();
		}
	});
});

describe("opening", () => {
	it("creates a session that is written with its first message", async () => {
		const sessionDir = tempDir();
		const session = await client.createSession(cwd, { sessionDir, id: "created-1" });
		const file = session.getSessionFile()!;
		assert.equal(session.getSessionId(), "created-1");
		assert.ok(file.startsWith(sessionDir));
		assert.equal(existsSync(file), false, "nothing is written before a user or assistant message");
		await session.appendMessage(userMessage("hello"));
		assert.equal(JSON.parse(readFileSync(file, "utf8").split("\n")[0]!).id, "created-1");
		await session.close();
	});

	it("continues the most recent session, forks one, and keeps one in memory", async () => {
		const recent = await client.continueRecent(cwd, { sessionDir: dir });
		assert.ok([fileA, fileB].includes(recent.getSessionFile()!));
		await recent.close();

		const forkDir = tempDir();
		const target = tempDir();
		const fork = await client.forkFrom(fileA, target, { sessionDir: forkDir });
		assert.equal(fork.getCwd(), target);
		assert.notEqual(fork.getSessionId(), ID_A);
		assert.equal(await fork.getEntryCount(), 5);
		assert.ok(fork.getSessionFile()!.startsWith(forkDir));
		await fork.close();

		const memory = await client.inMemory({ cwd, id: "mem-1" });
		assert.equal(memory.isPersisted(), false);
		assert.equal(memory.getSessionFile(), null);
		await memory.appendMessage(userMessage("only in memory"));
		assert.equal(await memory.getEntryCount(), 1);
		await memory.close();
	});

	it("refuses a session id that breaks pi's rule", async () => {
		await assert.rejects(client.createSession(cwd, { sessionDir: tempDir(), id: "bad id/with slash" }), (e: unknown) => {
			assert.ok(e instanceof SessiondError);
			assert.deepEqual([e.code, e.kind], [1005, "invalid_session_id"]);
			return true;
		});
	});
});

describe("watching a directory", () => {
	it("emits sessionsChanged when a session file appears", async () => {
		const watchedDir = tempDir();
		const events: SessionsChanged[] = [];
		client.on("sessionsChanged", (e) => events.push(e));
		const watch = await client.watchSessions({ sessionDir: watchedDir });
		assert.equal(watch.dir, watchedDir);
		const file = writePiSession(watchedDir, { id: "watched-1" });
		await waitFor(() => events.some((e) => e.path === file), "the new file's notification");
		const event = events.find((e) => e.path === file)!;
		assert.equal(event.watchId, watch.watchId);
		assert.ok(["created", "changed"].includes(event.kind), event.kind);
		await watch.unwatch();
	});

	it("watches every project's sessions when given no scope, projects made later included", async () => {
		const agentDir = tempDir("pi-sessiond-agent-");
		mkdirSync(join(agentDir, "sessions"));
		const { client: scoped } = await spawnTestClient({ agentDir });
		try {
			const events: SessionsChanged[] = [];
			scoped.on("sessionsChanged", (e) => events.push(e));
			const watch = await scoped.watchSessions();
			const project = join(agentDir, "sessions", "--tmp-later--");
			mkdirSync(project, { recursive: true });
			const file = writePiSession(project, { id: "later-1" });
			await waitFor(() => events.some((e) => e.path === file), "a later project's new session");
			await watch.unwatch();
		} finally {
			await scoped.close();
		}
	});
});
