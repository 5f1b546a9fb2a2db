// Follows pi's packages/coding-agent/test/session-manager/save-entry.test.ts (read as a reference, not copied):
// an extension's custom entry takes its place in the tree like any entry but adds nothing to the context.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { SessionManager } from "./subject.mjs";
import { assistantSays, userSays } from "./support.mjs";

describe("SessionManager.appendCustomEntry", () => {
	// pi: "saves custom entries and includes them in tree traversal"
	it("stores the entry in the branch between two messages and keeps it out of the context", () => {
		const session = SessionManager.inMemory();
		const question = session.appendMessage(userSays("hello", 1));
		const custom = session.appendCustomEntry("my_extension_state", { counter: 3, tags: ["a"] });
		const answer = session.appendMessage(assistantSays("hi"));

		const entries = session.getEntries();
		assert.equal(entries.length, 3);
		const stored = entries.find((e) => e.type === "custom");
		assert.equal(stored.id, custom);
		assert.equal(stored.parentId, question);
		assert.equal(stored.customType, "my_extension_state");
		assert.deepEqual(stored.data, { counter: 3, tags: ["a"] });

		assert.deepEqual(
			session.getBranch().map((e) => e.id),
			[question, custom, answer],
		);
		assert.deepEqual(
			session.buildSessionContext().messages.map((m) => m.role),
			["user", "assistant"],
		);
	});
});
