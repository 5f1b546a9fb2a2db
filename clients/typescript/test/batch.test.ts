/**
 * Many writes in one trip, bodies by id, and what a mirror missed, through `RemoteSession` against the real server.
 */

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { SessionChanged, SessiondClient } from "../src/index.js";
import { IDS, spawnTestClient, tempDir, userMessage, writePiSession } from "./helpers.js";

let client: SessiondClient;

before(async () => {
	({ client } = await spawnTestClient());
});

after(async () => {
	await client.close();
});

describe("appendBatch, getEntriesById, changesSince", () => {
	it("writes a batch as one change, answers each op as its method would, and lets ops name earlier ones", async () => {
		const session = await client.openSession(writePiSession(tempDir()));
		const changes: SessionChanged[] = [];
		session.on("changed", (n) => changes.push(n));
		const results = await session.appendBatch([
			{ method: "session/appendMessage", params: { message: userMessage("one") } },
			{ method: "session/appendLabelChange", params: { targetId: { op: 0 }, label: "first" } },
			{ method: "session/branch", params: { entryId: IDS.u1 } },
			{ method: "session/appendMessage", params: { message: userMessage("two") } },
		]);
		const [one, label, branched, two] = results as [{ id: string }, { id: string }, null, { id: string }];
		assert.equal(branched, null);
		assert.equal(await session.getLabel(one.id), "first");
		assert.equal((await session.getEntry(two.id))?.parentId, IDS.u1);
		assert.equal(changes.length, 1, "one notification for the batch");
		const [change] = changes as [SessionChanged];
		assert.equal(change.change.kind, "append");
		const appended = (change.change as { entries: { id: string }[] }).entries.map((e) => e.id);
		assert.deepEqual(appended, [one.id, label.id, two.id]);

		const byId = await session.getEntriesById([two.id, "no-such-id", IDS.u1]);
		assert.deepEqual(byId, [await session.getEntry(two.id), null, await session.getEntry(IDS.u1)]);

		const since = await session.changesSince(0);
		assert.deepEqual(since.changes, changes, "the changes given again are the ones sent");
		await session.close();
	});
});
