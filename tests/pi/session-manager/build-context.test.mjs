// Follows pi's packages/coding-agent/test/session-manager/build-context.test.ts (read as a reference, not copied):
// the exported buildSessionContext(entries, leafId?) walks from a leaf to the root and turns what it finds into the
// messages, thinking level and model the agent resumes with.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { buildSessionContext } from "./subject.mjs";
import { assistantSays, textOf, userSays } from "./support.mjs";

const AT = "2025-01-01T00:00:00.000Z";

// Entries written by hand, each a child of `parent`, so a test can shape any tree.
const user = (id, parent, text) => ({ type: "message", id, parentId: parent, timestamp: AT, message: userSays(text, 1) });
const assistant = (id, parent, text) => ({
	type: "message",
	id,
	parentId: parent,
	timestamp: AT,
	message: assistantSays(text, { timestamp: 1 }),
});
const compaction = (id, parent, summary, firstKeptEntryId) => ({
	type: "compaction",
	id,
	parentId: parent,
	timestamp: AT,
	summary,
	firstKeptEntryId,
	tokensBefore: 500,
});
const branchSummary = (id, parent, summary, fromId) => ({ type: "branch_summary", id, parentId: parent, timestamp: AT, summary, fromId });
const thinking = (id, parent, thinkingLevel) => ({ type: "thinking_level_change", id, parentId: parent, timestamp: AT, thinkingLevel });
const modelChange = (id, parent, provider, modelId) => ({ type: "model_change", id, parentId: parent, timestamp: AT, provider, modelId });
const customMessage = (id, parent, customType, content, display) => ({
	type: "custom_message",
	id,
	parentId: parent,
	timestamp: AT,
	customType,
	content,
	display,
});

const texts = (context) => context.messages.map(textOf);

describe("buildSessionContext", () => {
	describe("with nothing to compact or branch", () => {
		// pi: "empty entries returns empty context"
		it("gives no messages, thinking off and no model for no entries", () => {
			const context = buildSessionContext([]);
			assert.deepEqual(context.messages, []);
			assert.equal(context.thinkingLevel, "off");
			assert.equal(context.model, null);
		});

		// pi: "single user message"
		it("gives a lone user message back as the only message", () => {
			const context = buildSessionContext([user("u", null, "hello")]);
			assert.deepEqual(
				context.messages.map((m) => m.role),
				["user"],
			);
		});

		// pi: "simple conversation"
		it("keeps a linear conversation whole and in order", () => {
			const context = buildSessionContext([
				user("1", null, "q1"),
				assistant("2", "1", "a1"),
				user("3", "2", "q2"),
				assistant("4", "3", "a2"),
			]);
			assert.deepEqual(
				context.messages.map((m) => m.role),
				["user", "assistant", "user", "assistant"],
			);
			assert.deepEqual(texts(context), ["q1", "a1", "q2", "a2"]);
		});

		// pi: "includes display:false custom messages in context"
		it("puts an extension message the user never saw (display: false) into the context", () => {
			const context = buildSessionContext(
				[user("1", null, "hi"), customMessage("2", "1", "skill-snapshot", "invisible to the user", false), assistant("3", "2", "ok")],
				"3",
			);
			assert.deepEqual(
				context.messages.map((m) => m.role),
				["user", "custom", "assistant"],
			);
			const custom = context.messages[1];
			assert.equal(custom.customType, "skill-snapshot");
			assert.equal(custom.content, "invisible to the user");
			assert.equal(custom.display, false);
		});

		// pi: "tracks thinking level changes"
		it("takes the thinking level from a change on the path and leaves the change out of the messages", () => {
			const context = buildSessionContext([user("1", null, "think"), thinking("2", "1", "high"), assistant("3", "2", "thought")]);
			assert.equal(context.thinkingLevel, "high");
			assert.equal(context.messages.length, 2);
		});

		// pi: "tracks model from assistant message"
		it("takes the model from the last assistant message", () => {
			const context = buildSessionContext([user("1", null, "hello"), assistant("2", "1", "hi")]);
			assert.deepEqual(context.model, { provider: "anthropic", modelId: "claude-test" });
		});

		// pi: "tracks model from model change entry"
		it("lets an assistant message after a model change decide the model", () => {
			const context = buildSessionContext([user("1", null, "hello"), modelChange("2", "1", "openai", "gpt-4"), assistant("3", "2", "hi")]);
			assert.deepEqual(context.model, { provider: "anthropic", modelId: "claude-test" });
		});
	});

	describe("after a compaction", () => {
		// pi: "includes summary before kept messages"
		it("starts with the summary, then the kept messages, then what came after the compaction", () => {
			const context = buildSessionContext([
				user("1", null, "q1"),
				assistant("2", "1", "a1"),
				user("3", "2", "q2"),
				assistant("4", "3", "a2"),
				compaction("5", "4", "what q1 and a1 were about", "3"),
				user("6", "5", "q3"),
				assistant("7", "6", "a3"),
			]);
			assert.equal(context.messages.length, 5);
			assert.equal(context.messages[0].role, "compactionSummary");
			assert.match(context.messages[0].summary, /what q1 and a1 were about/);
			assert.deepEqual(texts(context).slice(1), ["q2", "a2", "q3", "a3"]);
		});

		// pi: "handles compaction keeping from first message"
		it("keeps every message when the compaction keeps from the first one", () => {
			const context = buildSessionContext([
				user("1", null, "q1"),
				assistant("2", "1", "a1"),
				compaction("3", "2", "nothing dropped", "1"),
				user("4", "3", "q2"),
			]);
			assert.equal(context.messages.length, 4);
			assert.match(context.messages[0].summary, /nothing dropped/);
			assert.deepEqual(texts(context).slice(1), ["q1", "a1", "q2"]);
		});

		// pi: "multiple compactions uses latest"
		it("uses only the latest of several compactions", () => {
			const context = buildSessionContext([
				user("1", null, "a"),
				assistant("2", "1", "b"),
				compaction("3", "2", "older summary", "1"),
				user("4", "3", "c"),
				assistant("5", "4", "d"),
				compaction("6", "5", "newer summary", "4"),
				user("7", "6", "e"),
			]);
			assert.equal(context.messages.length, 4);
			assert.match(context.messages[0].summary, /newer summary/);
			assert.deepEqual(texts(context).slice(1), ["c", "d", "e"]);
		});
	});

	describe("in a tree with branches", () => {
		// pi: "follows path to specified leaf"
		it("follows only the path to the leaf it is given", () => {
			// 1 - 2 - 3
			//      \- 4
			const tree = [user("1", null, "start"), assistant("2", "1", "reply"), user("3", "2", "left"), user("4", "2", "right")];
			assert.deepEqual(texts(buildSessionContext(tree, "3")), ["start", "reply", "left"]);
			assert.deepEqual(texts(buildSessionContext(tree, "4")), ["start", "reply", "right"]);
		});

		// pi: "includes branch summary in path"
		it("includes the summary of an abandoned branch where the new branch starts", () => {
			const context = buildSessionContext(
				[
					user("1", null, "start"),
					assistant("2", "1", "reply"),
					user("3", "2", "dead end"),
					branchSummary("4", "2", "what the dead end tried", "3"),
					user("5", "4", "another way"),
				],
				"5",
			);
			assert.equal(context.messages.length, 4);
			assert.equal(context.messages[2].role, "branchSummary");
			assert.match(context.messages[2].summary, /what the dead end tried/);
			assert.equal(textOf(context.messages[3]), "another way");
		});

		// pi: "complex tree with multiple branches and compaction"
		it("keeps a compaction on one branch out of a sibling branch that forks before it", () => {
			// 1 - 2 - 3 - 4 - C5 - 6 - 7
			//          \- 8 - 9
			//          \- S10 - 11
			const tree = [
				user("1", null, "start"),
				assistant("2", "1", "r1"),
				user("3", "2", "q2"),
				assistant("4", "3", "r2"),
				compaction("5", "4", "compacted", "3"),
				user("6", "5", "q3"),
				assistant("7", "6", "r3"),
				user("8", "3", "wrong turn"),
				assistant("9", "8", "wrong answer"),
				branchSummary("10", "3", "the wrong turn", "9"),
				user("11", "10", "right turn"),
			];
			const main = buildSessionContext(tree, "7");
			assert.match(main.messages[0].summary, /compacted/);
			assert.deepEqual(texts(main).slice(1), ["q2", "r2", "q3", "r3"]);
			const side = buildSessionContext(tree, "11");
			assert.deepEqual(
				side.messages.map((m) => m.role),
				["user", "assistant", "user", "branchSummary", "user"],
			);
			assert.deepEqual(
				texts(side).filter((_, i) => i !== 3),
				["start", "r1", "q2", "right turn"],
			);
			assert.match(side.messages[3].summary, /the wrong turn/);
		});
	});

	describe("on entries pi did not write itself", () => {
		// pi: "uses last entry when leafId not found"
		it("falls back to the last entry when the leaf it is given does not exist", () => {
			const context = buildSessionContext([user("1", null, "hello"), assistant("2", "1", "hi")], "no-such-entry");
			assert.deepEqual(texts(context), ["hello", "hi"]);
		});

		// pi: "handles orphaned entries gracefully"
		it("stops at an entry whose parent is missing", () => {
			const context = buildSessionContext([user("1", null, "hello"), assistant("2", "gone", "orphan")], "2");
			assert.deepEqual(texts(context), ["orphan"]);
		});
	});
});
