// Follows pi's packages/coding-agent/test/session-manager/entry-ids.test.ts (read as a reference, not copied).
// That file drives an older SessionManager API (a public constructor and startSession, from before 1.6.0); the
// behaviour it checks (eight-hex-digit ids, each new entry under the previous one, the leaf and its entry) is
// 1.6.0's too, so here it runs through 1.6.0's API on a persisted session: on the drop-in, pi-sessiond mints the ids.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { SessionManager } from "./subject.mjs";
import { assistantSays, ENTRY_ID, scratch, userSays } from "./support.mjs";

function persisted(t) {
	const dir = scratch(t, "ids");
	return SessionManager.create(dir, dir);
}

describe("SessionManager entry ids", () => {
	describe("ids of new entries", () => {
		// pi: "generates unique 8-character hex IDs"
		it("gives a hundred appends a hundred distinct eight-hex-digit ids", (t) => {
			const session = persisted(t);
			const seen = new Set();
			for (let i = 0; i < 100; i++) {
				const id = session.appendMessage(userSays(`message ${i}`));
				assert.match(id, ENTRY_ID);
				seen.add(id);
			}
			assert.equal(seen.size, 100);
		});
	});

	describe("appendMessage", () => {
		// pi: "returns the generated entry ID"
		it("returns the new entry's id, a string of eight characters", (t) => {
			const id = persisted(t).appendMessage(userSays("hello"));
			assert.equal(typeof id, "string");
			assert.equal(id.length, 8);
		});

		// pi: "sets parentId to null for first entry"
		it("gives the first entry no parent", (t) => {
			const session = persisted(t);
			const first = session.appendMessage(userSays("first"));
			assert.equal(session.getEntry(first).parentId, null);
		});

		// pi: "sets parentId to previous entry ID for subsequent entries"
		it("puts each later entry under the one before it", (t) => {
			const session = persisted(t);
			const first = session.appendMessage(userSays("first"));
			const second = session.appendMessage(assistantSays("second"));
			const third = session.appendMessage(userSays("third"));
			assert.equal(session.getEntry(second).parentId, first);
			assert.equal(session.getEntry(third).parentId, second);
		});
	});

	describe("getEntry", () => {
		// pi: "returns undefined for non-existent ID"
		it("is undefined for an id no entry has", (t) => {
			assert.equal(persisted(t).getEntry("notexist"), undefined);
		});

		// pi: "returns entry by ID"
		it("finds an appended entry by its id", (t) => {
			const session = persisted(t);
			const id = session.appendMessage(userSays("test"));
			const entry = session.getEntry(id);
			assert.equal(entry.type, "message");
			assert.equal(entry.id, id);
		});
	});

	describe("getLeafId", () => {
		// pi: "returns null for empty session (after startSession)"
		it("is null for a new session", (t) => {
			assert.equal(persisted(t).getLeafId(), null);
		});

		// pi: "returns ID of most recently appended entry"
		it("is the id of the entry appended last", (t) => {
			const session = persisted(t);
			const first = session.appendMessage(userSays("first"));
			assert.equal(session.getLeafId(), first);
			const second = session.appendMessage(assistantSays("second"));
			assert.equal(session.getLeafId(), second);
		});
	});

	describe("getLeafEntry", () => {
		// pi: "returns undefined for empty session"
		it("is undefined for a new session", (t) => {
			assert.equal(persisted(t).getLeafEntry(), undefined);
		});

		// pi: "returns the leaf entry"
		it("is the entry appended last", (t) => {
			const session = persisted(t);
			session.appendMessage(userSays("first"));
			const second = session.appendMessage(assistantSays("second"));
			assert.equal(session.getLeafEntry()?.id, second);
		});
	});
});
