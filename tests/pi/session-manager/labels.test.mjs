// Follows pi's packages/coding-agent/test/session-manager/labels.test.ts (read as a reference, not copied). That
// file drives an older SessionManager API (a public constructor and startSession, from before 1.6.0); the behaviour
// it checks is 1.6.0's too, so here it runs through 1.6.0's API, on a persisted session (so on the drop-in every
// label goes through pi-sessiond). Each test also reads the labels back from the file.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { SessionManager } from "./subject.mjs";
import { ENTRY_ID, scratch, userSays } from "./support.mjs";

/** A persisted session with one user message (which pi 1.6.0 writes to disk at once). */
function sessionWithMessage(t) {
	const dir = scratch(t, "labels");
	const session = SessionManager.create(dir, dir);
	const message = session.appendMessage(userSays("hello"));
	return { session, message, reopen: () => SessionManager.open(session.getSessionFile(), dir) };
}

describe("SessionManager labels", () => {
	describe("appendLabelChange", () => {
		// pi: "creates label entry"
		it("appends a label entry with an entry id of its own", (t) => {
			const { session, message } = sessionWithMessage(t);
			const label = session.appendLabelChange(message, "checkpoint");
			assert.match(label, ENTRY_ID);
			assert.equal(session.getEntry(label)?.type, "label");
			assert.equal(session.getEntry(label).targetId, message);
		});

		// pi: "getLabel returns the label"
		it("makes getLabel of the target give the label", (t) => {
			const { session, message, reopen } = sessionWithMessage(t);
			session.appendLabelChange(message, "checkpoint");
			assert.equal(session.getLabel(message), "checkpoint");
			assert.equal(reopen().getLabel(message), "checkpoint");
		});

		// pi: "multiple label changes keep latest"
		it("keeps the latest of several labels of one entry", (t) => {
			const { session, message, reopen } = sessionWithMessage(t);
			for (const name of ["first", "second", "third"]) session.appendLabelChange(message, name);
			assert.equal(session.getLabel(message), "third");
			assert.equal(reopen().getLabel(message), "third");
		});

		// pi: "label with undefined clears the label"
		it("clears the label when given undefined", (t) => {
			const { session, message, reopen } = sessionWithMessage(t);
			session.appendLabelChange(message, "checkpoint");
			assert.equal(session.getLabel(message), "checkpoint");
			session.appendLabelChange(message, undefined);
			assert.equal(session.getLabel(message), undefined);
			assert.equal(reopen().getLabel(message), undefined);
		});
	});

	describe("getTree", () => {
		// pi: "includes labels in tree nodes"
		it("shows an entry's label on its node", (t) => {
			const { session, message } = sessionWithMessage(t);
			session.appendLabelChange(message, "important");
			const roots = session.getTree();
			assert.equal(roots.length, 1);
			assert.equal(roots[0].label, "important");
		});

		// pi: "labels do not appear as tree nodes"
		// (pi 1.6.0 keeps a label entry in the tree as a child of the leaf it was appended under; what the case
		// pins is that the labelled message stays the one root.)
		it("keeps the labelled message the only root, the label entry never one", (t) => {
			const { session, message } = sessionWithMessage(t);
			session.appendLabelChange(message, "checkpoint");
			const roots = session.getTree();
			assert.equal(roots.length, 1);
			assert.equal(roots[0].entry.type, "message");
			assert.equal(roots[0].entry.id, message);
		});
	});
});
