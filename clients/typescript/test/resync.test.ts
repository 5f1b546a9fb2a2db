/** Gap detection: a lost session/changed notification (simulated by dropping one) leads to a resync. */

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { type SessiondClient, SessiondError, type SessionUpdate } from "../src/index.js";
import { kTestHooks } from "../src/internal.js";
import { spawnTestClient, tempDir, userMessage, waitFor, writePiSession } from "./helpers.js";

let client: SessiondClient;

before(async () => {
	({ client } = await spawnTestClient());
});

after(async () => {
	await client.close();
});

describe("seq gaps", () => {
	it("resyncs from session/getState and delivers exactly the changes after the state's seq", async () => {
		const session = await client.openSession(writePiSession(tempDir()));
		const log: string[] = [];
		session.on("changed", (n) => log.push(`changed ${n.seq}`));
		session.on("resync", (state, info) =>
			log.push(`resync ${info.expectedSeq}->${info.receivedSeq} seq=${state.seq} leaf=${String(state.leafId)} count=${state.entryCount}`),
		);
		const iterator = session.changes();

		await session.appendMessage(userMessage("one"));
		client[kTestHooks].dropSessionChanged = 1;
		await session.appendMessage(userMessage("two (its notification is lost)"));
		assert.deepEqual(log, ["changed 1"], "nothing can be noticed until the next notification");

		// Hold the resync's state until the test releases it, so that notifications certainly arrive while it is in
		// flight: one the state includes (four's: its request was sent before the getState) and one it cannot
		// include (five's: sent after the getState, so applied after it).
		let release!: () => void;
		client[kTestHooks].holdResync = new Promise<void>((resolve) => {
			release = resolve;
		});
		try {
			// three's notification reveals the gap; when three resolves, the getState has been sent after four.
			const three = session.appendMessage(userMessage("three"));
			const four = session.appendMessage(userMessage("four"));
			const [, fourId] = await Promise.all([three, four]);
			const fiveId = await session.appendMessage(userMessage("five"));
			assert.deepEqual(log, ["changed 1"], "changes wait while the resync is in flight");
			release();
			await waitFor(() => log.length === 3, "the resync and the change after it");
			// four is in the state (seq 4, 9 entries, leaf four) and is not delivered again; five is delivered.
			assert.deepEqual(log, ["changed 1", `resync 2->3 seq=4 leaf=${fourId} count=9`, "changed 5"]);
			assert.equal(await session.getLeafId(), fiveId);
		} finally {
			client[kTestHooks].holdResync = undefined;
			release();
		}

		await session.appendMessage(userMessage("six"));
		assert.equal(log.at(-1), "changed 6");
		assert.equal(log.length, 4);

		const items: SessionUpdate[] = [];
		for await (const item of iterator) {
			items.push(item);
			if (items.length === 4) break;
		}
		assert.deepEqual(
			items.map((i) => [i.seq, i.change.kind]),
			[
				[1, "append"],
				[4, "resync"],
				[5, "append"],
				[6, "append"],
			],
		);
		const resync = items[1]!.change;
		assert.ok(resync.kind === "resync");
		assert.equal(resync.state.handle, session.handle);
		assert.equal(resync.state.seq, 4);
		assert.deepEqual([resync.expectedSeq, resync.receivedSeq], [2, 3]);
		await session.close();
	});

	it("resyncs without a hold too: a state that includes everything is followed by the next change only", async () => {
		const session = await client.openSession(writePiSession(tempDir()));
		const seqs: number[] = [];
		const resyncs: number[] = [];
		session.on("changed", (n) => seqs.push(n.seq));
		session.on("resync", (state) => resyncs.push(state.seq));
		client[kTestHooks].dropSessionChanged = 1;
		await session.appendMessage(userMessage("lost"));
		// Pipelined, so the getState the gap triggers goes after all three and includes them.
		await Promise.all([1, 2, 3].map((i) => session.appendMessage(userMessage(`pipelined ${i}`))));
		await waitFor(() => resyncs.length === 1, "the resync");
		assert.deepEqual(resyncs, [4]);
		assert.deepEqual(seqs, [], "every change so far is in the state: none is delivered on its own");
		await session.appendMessage(userMessage("after"));
		assert.deepEqual(seqs, [5]);
		await session.close();
	});

	it("starts from the open's seq when the handle was already open on the server", async () => {
		const file = writePiSession(tempDir());
		// Opened and changed through raw requests: the client tracks nothing for this handle, so its notification
		// (seq 1) goes nowhere.
		const raw = await client.request("session/open", { path: file });
		await client.request("session/appendMessage", { handle: raw.handle, message: userMessage("before the RemoteSession") });
		const session = await client.openSession(file);
		assert.equal(session.handle, raw.handle);
		assert.equal((await session.getState()).seq, 1);
		const log: string[] = [];
		session.on("changed", (n) => log.push(`changed ${n.seq}`));
		session.on("resync", (state) => log.push(`resync ${state.seq}`));
		await session.appendMessage(userMessage("through the RemoteSession"));
		assert.deepEqual(log, ["changed 2"], "seq 2 follows the open's seq 1: no gap, no resync");
		await session.close();
		await client.request("session/close", { handle: raw.handle });
	});

	it("reports a state older than the notification that revealed the gap, and goes on from the state", async () => {
		const session = await client.openSession(writePiSession(tempDir()));
		const errors: Error[] = [];
		const offError = client.on("protocolError", (e) => errors.push(e));
		const resyncs: number[] = [];
		const seqs: number[] = [];
		session.on("resync", (state) => resyncs.push(state.seq));
		session.on("changed", (n) => seqs.push(n.seq));
		try {
			// A notification no server sent (seq 9 on a handle with no change yet): the state cannot include it.
			client[kTestHooks].injectSessionChanged({ handle: session.handle, sessionId: session.getSessionId(), seq: 9, leafId: null, change: { kind: "leaf", leafId: null } });
			await waitFor(() => resyncs.length === 1, "the resync");
			assert.deepEqual(resyncs, [0]);
			assert.equal(errors.length, 1);
			assert.match(errors[0]!.message, /returned seq 0, older than the notification \(seq 9\)/);
			await session.appendMessage(userMessage("the server's seq 1"));
			assert.deepEqual(seqs, [1], "the server's own numbering is followed from the state on");
		} finally {
			offError();
			await session.close();
		}
	});

	it("reports a resync that cannot fetch the state", async () => {
		const session = await client.openSession(writePiSession(tempDir()));
		const failures: Error[] = [];
		const resyncs: unknown[] = [];
		session.on("resyncFailed", (e) => failures.push(e));
		session.on("resync", (s) => resyncs.push(s));
		// Close the handle on the server behind the RemoteSession's back, then hand the client a notification with a
		// gap (the server sends none for a closed handle): the getState the gap triggers must fail.
		await client.request("session/close", { handle: session.handle });
		client[kTestHooks].injectSessionChanged({
			handle: session.handle,
			sessionId: session.getSessionId(),
			seq: 7,
			leafId: null,
			change: { kind: "leaf", leafId: null },
		});
		await waitFor(() => failures.length === 1, "the failed resync");
		assert.equal(resyncs.length, 0);
		assert.ok(failures[0] instanceof SessiondError);
		assert.equal(failures[0].kind, "handle_not_found");
		await assert.rejects(session.close(), (e: unknown) => e instanceof SessiondError && e.kind === "handle_not_found");
		assert.ok(session.closed, "a failed close still ends the session locally");
	});
});
