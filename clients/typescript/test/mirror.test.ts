/**
 * The mirror is pi: after every step of a scenario (own writes of every kind, another process appending with pi's
 * own SessionManager, a lost notification and the resync it forces), every read of a `MirroredSession` equals what
 * pi 1.6.0's SessionManager reads from the same file at the same leaf.
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { after, before, describe, it } from "node:test";
import { MirroredSession, type SessiondClient } from "../src/index.js";
import { kTestHooks } from "../src/internal.js";
import { assistantMessage, IDS, spawnTestClient, tempDir, userMessage, writePiSession } from "./helpers.js";

const piModule = new URL("../../node_modules/@earendil-works/pi-coding-agent/dist/core/session-manager.js", import.meta.url);
const { SessionManager: Pi } = (await import(piModule.href)) as { SessionManager: any };

let client: SessiondClient;

before(async () => {
	({ client } = await spawnTestClient());
});

after(async () => {
	await client.close();
});

/** Every read pi has, of pi's own manager on `file` with its leaf moved to the mirror's, and of the mirror. */
function assertMirrorIsPi(mirror: MirroredSession, file: string, step: string): void {
	const pi = Pi.open(file);
	const leaf = mirror.getLeafId();
	if (leaf === null) pi.resetLeaf();
	else if (leaf !== pi.getLeafId()) pi.branch(leaf);
	const reads = (m: MirroredSession | typeof pi) => {
		const ids = m.getEntries().map((e: { id: string }) => e.id);
		return {
			header: m.getHeader(),
			entries: m.getEntries(),
			leafId: m.getLeafId(),
			leafEntry: m.getLeafEntry(),
			tree: m.getTree(),
			branch: m.getBranch(),
			branchFromFirst: ids.length > 0 ? m.getBranch(ids[0]) : [],
			contextEntries: m.buildContextEntries(),
			projection: m.buildSessionProjection(),
			context: m.buildSessionContext(),
			sessionName: m.getSessionName(),
			entryCount: m.getEntryCount(),
			labels: ids.map((id: string) => m.getLabel(id)),
			children: ids.map((id: string) => m.getChildren(id)),
			byId: ids.map((id: string) => m.getEntry(id)),
		};
	};
	assert.deepStrictEqual(reads(mirror), reads(pi), `after ${step}`);
	assert.equal(mirror.getSessionId(), pi.getSessionId());
	assert.equal(mirror.getSessionFile(), pi.getSessionFile());
}

/** pi's own SessionManager, in another process, appends `count` messages to `file`. */
function piAppends(file: string, count: number): void {
	const script = `
		const { SessionManager } = await import(${JSON.stringify(piModule.href)});
		const m = SessionManager.open(${JSON.stringify(file)});
		for (let i = 0; i < ${count}; i++) m.appendMessage({ role: "user", content: "from another pi " + i, timestamp: 1 });
	`;
	const result = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" });
	assert.equal(result.status, 0, result.stderr);
}

/** Resolves once the server has numbered changes up to `seq` on the handle (seen through getState). */
async function untilSeq(remote: MirroredSession["remote"], seq: number): Promise<void> {
	for (let i = 0; i < 500; i++) {
		if ((await remote.getState()).seq >= seq) return;
		await new Promise((resolve) => setTimeout(resolve, 10));
	}
	assert.fail(`the handle never reached seq ${seq}`);
}

/** Resolves once the mirror holds `count` entries (the watch delivers another process's appends). */
async function untilCount(mirror: MirroredSession, count: number): Promise<void> {
	if (mirror.getEntryCount() >= count) return;
	await new Promise<void>((resolve) => {
		const off = mirror.remote.on("changed", () => {
			queueMicrotask(() => {
				if (mirror.getEntryCount() >= count) {
					off();
					resolve();
				}
			});
		});
	});
	await mirror.ready();
}

describe("MirroredSession", () => {
	it("answers every read as pi does after own writes, another process's appends, and a resync after a lost change", async () => {
		const file = writePiSession(tempDir());
		const remote = await client.openSession(file, { watch: true, snapshot: "full" });
		const mirror = await MirroredSession.attach(remote);
		assertMirrorIsPi(mirror, file, "open");
		assert.equal(mirror.snapshotCount, 1, "the mirror starts from the open's own snapshot");

		await remote.appendMessage(userMessage("own question"));
		assertMirrorIsPi(mirror, file, "appendMessage");
		await remote.branch(IDS.a1);
		assertMirrorIsPi(mirror, file, "branch");
		await remote.appendMessage(assistantMessage("an answer on a new branch"));
		await remote.appendLabelChange(IDS.u1, "the start");
		assertMirrorIsPi(mirror, file, "appendLabelChange");
		await remote.appendCompaction("what happened so far", IDS.a1, 1234);
		assertMirrorIsPi(mirror, file, "appendCompaction");
		await remote.appendCustomMessageEntry("note", "hidden context", false, { why: "test" });
		await remote.appendCustomEntry("state", { n: 1 });
		await remote.appendThinkingLevelChange("high");
		await remote.appendModelChange("openai", "gpt-test");
		assertMirrorIsPi(mirror, file, "custom entries, thinking level and model");
		await remote.appendContextEdit(IDS.a1, { content: "an edited answer" });
		assertMirrorIsPi(mirror, file, "appendContextEdit");
		await remote.branchWithSummary(IDS.u1, "the branch left behind");
		await remote.appendSessionInfo("mirrored");
		await remote.appendLabelChange(IDS.u1, undefined);
		assertMirrorIsPi(mirror, file, "branchWithSummary, name, label cleared");

		const before = mirror.getEntryCount();
		piAppends(file, 3);
		await untilCount(mirror, before + 3);
		assertMirrorIsPi(mirror, file, "three appends by pi in another process");

		client[kTestHooks].dropSessionChanged = 1;
		await remote.appendMessage(userMessage("its notification is lost"));
		await remote.appendMessage(userMessage("this one reveals the gap"));
		await mirror.ready();
		assert.equal(mirror.deltaRepairCount, 1, "the gap was closed by session/changesSince");
		assert.equal(mirror.snapshotCount, 1, "closing the gap took no new snapshot");
		assertMirrorIsPi(mirror, file, "the repair after a lost notification");

		// Two lost in a row, the second an external append: the repair brings both, in order.
		client[kTestHooks].dropSessionChanged = 2;
		const count = mirror.getEntryCount();
		await remote.appendMessage(userMessage("lost, own"));
		piAppends(file, 1);
		await untilSeq(remote, mirror.seq + 2);
		await remote.appendMessage(userMessage("after two lost"));
		await mirror.ready();
		assert.equal(mirror.getEntryCount(), count + 3, "the lost own append, pi's and the one after");
		assert.equal(mirror.deltaRepairCount, 2);
		assertMirrorIsPi(mirror, file, "the repair of an own and an external change both lost");

		await remote.resetLeaf();
		assertMirrorIsPi(mirror, file, "resetLeaf");
		await remote.appendMessage(userMessage("a second root"));
		assertMirrorIsPi(mirror, file, "an append after resetLeaf");
		await mirror.close();
	});

	it("keeps a skeleton mirror's tree reads equal to pi's through own writes and another process's appends", async () => {
		const file = writePiSession(tempDir());
		const remote = await client.openSession(file, { watch: true, snapshot: "skeleton" });
		const mirror = await MirroredSession.attach(remote);
		assert.equal(mirror.detail, "skeleton");
		const treeReads = (m: MirroredSession | any) => {
			const ids = m.getEntries().map((e: { id: string }) => e.id);
			const shape = (e: any) => e && { id: e.id, parentId: e.parentId, type: e.type, timestamp: e.timestamp };
			const tree = (nodes: any[]): unknown[] => nodes.map((n) => ({ entry: shape(n.entry), label: n.label, children: tree(n.children) }));
			return {
				ids,
				leafId: m.getLeafId(),
				branch: m.getBranch().map(shape),
				tree: tree(m.getTree()),
				labels: ids.map((id: string) => m.getLabel(id)),
				sessionName: m.getSessionName(),
				entryCount: m.getEntryCount(),
			};
		};
		const same = (step: string) => {
			const pi = Pi.open(file);
			const leaf = mirror.getLeafId();
			if (leaf === null) pi.resetLeaf();
			else if (leaf !== pi.getLeafId()) pi.branch(leaf);
			assert.deepStrictEqual(treeReads(mirror), treeReads(pi), `after ${step}`);
		};
		same("open");
		const [first] = mirror.getEntries();
		assert.ok(first && "bytes" in first && !("message" in first), "skeleton entries carry no bodies");
		assert.throws(() => mirror.buildSessionContext(), /holds skeletons/);

		await remote.appendMessage(userMessage("a question"));
		await remote.appendLabelChange(IDS.a1, "kept");
		await remote.branch(IDS.u1);
		await remote.appendSessionInfo("skeletons");
		same("own writes: a message, a label, a branch, a name");
		const before = mirror.getEntryCount();
		piAppends(file, 2);
		await untilCount(mirror, before + 2);
		same("two appends by pi in another process");

		client[kTestHooks].dropSessionChanged = 1;
		await remote.appendLabelChange(IDS.a1, undefined);
		await remote.appendMessage(userMessage("reveals the gap"));
		await mirror.ready();
		assert.equal(mirror.deltaRepairCount, 1);
		same("the repair after a lost label change");
		const [body, unknown] = await remote.getEntriesById([IDS.a1, "no-such-id"]);
		assert.deepStrictEqual(body, Pi.open(file).getEntry(IDS.a1), "bodies come by id, as pi stores them");
		assert.equal(unknown, null);
		await mirror.close();
	});

	it("mirrors a session opened without a snapshot from one it asks for, and follows it", async () => {
		const file = writePiSession(tempDir());
		const remote = await client.openSession(file, { watch: true });
		const mirror = await MirroredSession.attach(remote);
		assert.equal(mirror.detail, "full");
		assertMirrorIsPi(mirror, file, "attach to a handle at detail none");
		await remote.appendMessage(userMessage("after attach"));
		const before = mirror.getEntryCount();
		piAppends(file, 1);
		await untilCount(mirror, before + 1);
		assertMirrorIsPi(mirror, file, "an own append and one by pi");
		assert.equal(mirror.snapshotCount, 1);
		await mirror.close();
	});

	it("follows the handle to a new session after newSession and setSessionFile", async () => {
		const dir = tempDir();
		const file = writePiSession(dir);
		const remote = await client.openSession(file, { snapshot: "full" });
		const mirror = await MirroredSession.attach(remote);
		await remote.newSession();
		await mirror.ready();
		assert.deepEqual(mirror.getEntries(), []);
		assert.equal(mirror.getHeader()?.id, mirror.getSessionId());
		await remote.setSessionFile(file);
		await mirror.ready();
		assertMirrorIsPi(mirror, file, "setSessionFile back to the first file");
		await mirror.close();
	});
});

