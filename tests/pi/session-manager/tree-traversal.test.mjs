// Follows pi's packages/coding-agent/test/session-manager/tree-traversal.test.ts (read as a reference, not
// copied): how each append joins the tree under the leaf, and the tree reads (getBranch, getTree, getLeafEntry,
// getEntry), moving the leaf (branch, branchWithSummary) and createBranchedSession. Two cases there fail on pi
// 1.6.0 and are not here: one calls getEntriesSince (added later), one expects a branched file to wait for an
// assistant message (1.6.0 writes at the first user message).
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { describe, it } from "node:test";
import { SessionManager } from "./subject.mjs";
import { assistantSays, distinctUsage, recordsIn, scratch, textOf, userSays } from "./support.mjs";

const ids = (entries) => entries.map((e) => e.id);
const childIds = (node) => node.children.map((c) => c.entry.id);
const sameMembers = (actual, expected) => assert.deepEqual([...actual].sort(), [...expected].sort());

describe("SessionManager appends and tree reads", () => {
	describe("each kind of append", () => {
		// pi: "appendThinkingLevelChange integrates into tree"
		it("puts a thinking-level change under the leaf and the next entry under it", () => {
			const session = SessionManager.inMemory();
			const question = session.appendMessage(userSays("hello"));
			const change = session.appendThinkingLevelChange("high");
			session.appendMessage(assistantSays("response"));
			const entries = session.getEntries();
			assert.equal(entries.length, 3);
			const stored = entries.find((e) => e.type === "thinking_level_change");
			assert.equal(stored.id, change);
			assert.equal(stored.parentId, question);
			assert.equal(entries[2].parentId, change);
		});

		// pi: "appendModelChange integrates into tree"
		it("puts a model change under the leaf, with its provider and model", () => {
			const session = SessionManager.inMemory();
			const question = session.appendMessage(userSays("hello"));
			const change = session.appendModelChange("openai", "gpt-4");
			session.appendMessage(assistantSays("response"));
			const entries = session.getEntries();
			const stored = entries.find((e) => e.type === "model_change");
			assert.deepEqual([stored.id, stored.parentId, stored.provider, stored.modelId], [change, question, "openai", "gpt-4"]);
			assert.equal(entries[2].parentId, change);
		});

		// pi: "appendCompaction integrates into tree"
		it("puts a compaction under the leaf, with its summary, kept entry, token count and usage", () => {
			const session = SessionManager.inMemory();
			const first = session.appendMessage(userSays("1"));
			const second = session.appendMessage(assistantSays("2"));
			const usage = distinctUsage();
			const compaction = session.appendCompaction("summary", first, 1000, undefined, false, usage);
			session.appendMessage(userSays("3"));
			const entries = session.getEntries();
			const stored = entries.find((e) => e.type === "compaction");
			assert.equal(stored.id, compaction);
			assert.equal(stored.parentId, second);
			assert.equal(stored.summary, "summary");
			assert.equal(stored.firstKeptEntryId, first);
			assert.equal(stored.tokensBefore, 1000);
			assert.deepEqual(stored.usage, usage);
			assert.equal(entries[3].parentId, compaction);
		});

		// pi: "appendCustomEntry integrates into tree"
		it("puts an extension's custom entry under the leaf, with its type and data", () => {
			const session = SessionManager.inMemory();
			const question = session.appendMessage(userSays("hello"));
			const custom = session.appendCustomEntry("my_data", { key: "value" });
			session.appendMessage(assistantSays("response"));
			const entries = session.getEntries();
			const stored = entries.find((e) => e.type === "custom");
			assert.deepEqual([stored.id, stored.parentId, stored.customType], [custom, question, "my_data"]);
			assert.deepEqual(stored.data, { key: "value" });
			assert.equal(entries[2].parentId, custom);
		});

		// pi: "leaf pointer advances after each append"
		it("moves the leaf to every entry it appends", () => {
			const session = SessionManager.inMemory();
			assert.equal(session.getLeafId(), null);
			for (const append of [() => session.appendMessage(userSays("1")), () => session.appendMessage(assistantSays("2")), () => session.appendThinkingLevelChange("low")]) {
				const id = append();
				assert.equal(session.getLeafId(), id);
			}
		});
	});

	describe("getBranch", () => {
		// pi: "returns empty array for empty session"
		it("is empty for an empty session", () => {
			assert.deepEqual(SessionManager.inMemory().getBranch(), []);
		});

		// pi: "returns single entry path"
		it("is the one entry of a one-entry session", () => {
			const session = SessionManager.inMemory();
			const only = session.appendMessage(userSays("hello"));
			assert.deepEqual(ids(session.getBranch()), [only]);
		});

		// pi: "returns full path from root to leaf"
		it("runs from the root to the leaf", () => {
			const session = SessionManager.inMemory();
			const appended = [
				session.appendMessage(userSays("1")),
				session.appendMessage(assistantSays("2")),
				session.appendThinkingLevelChange("high"),
				session.appendMessage(userSays("3")),
			];
			assert.deepEqual(ids(session.getBranch()), appended);
		});

		// pi: "returns path from specified entry to root"
		it("runs from the root to the entry it is given", () => {
			const session = SessionManager.inMemory();
			const first = session.appendMessage(userSays("1"));
			const second = session.appendMessage(assistantSays("2"));
			session.appendMessage(userSays("3"));
			session.appendMessage(assistantSays("4"));
			assert.deepEqual(ids(session.getBranch(second)), [first, second]);
		});
	});

	describe("getTree", () => {
		// pi: "returns empty array for empty session"
		it("has no roots for an empty session", () => {
			assert.deepEqual(SessionManager.inMemory().getTree(), []);
		});

		// pi: "returns single root for linear session"
		it("is one chain of nodes for a session without branches", () => {
			const session = SessionManager.inMemory();
			const chain = [session.appendMessage(userSays("1")), session.appendMessage(assistantSays("2")), session.appendMessage(userSays("3"))];
			const roots = session.getTree();
			assert.equal(roots.length, 1);
			let node = roots[0];
			for (const [i, id] of chain.entries()) {
				assert.equal(node.entry.id, id);
				assert.equal(node.children.length, i < chain.length - 1 ? 1 : 0);
				node = node.children[0];
			}
		});

		// pi: "returns tree with branches after branch"
		it("gives an entry two children once a branch starts at it", () => {
			const session = SessionManager.inMemory();
			const first = session.appendMessage(userSays("1"));
			const second = session.appendMessage(assistantSays("2"));
			const third = session.appendMessage(userSays("3"));
			session.branch(second);
			const fourth = session.appendMessage(userSays("4, on a branch"));
			const roots = session.getTree();
			assert.equal(roots.length, 1);
			assert.equal(roots[0].entry.id, first);
			assert.deepEqual(childIds(roots[0]), [second]);
			sameMembers(childIds(roots[0].children[0]), [third, fourth]);
		});

		// pi: "handles multiple branches at same point"
		it("gives an entry as many children as branches start at it", () => {
			const session = SessionManager.inMemory();
			session.appendMessage(userSays("root"));
			const fork = session.appendMessage(assistantSays("fork point"));
			const tips = ["A", "B", "C"].map((name) => {
				session.branch(fork);
				return session.appendMessage(userSays(`branch ${name}`));
			});
			const node = session.getTree()[0].children[0];
			assert.equal(node.entry.id, fork);
			sameMembers(childIds(node), tips);
		});

		// pi: "handles deep branching"
		it("nests a branch started on another branch", () => {
			const session = SessionManager.inMemory();
			session.appendMessage(userSays("1"));
			const two = session.appendMessage(assistantSays("2"));
			const three = session.appendMessage(userSays("3"));
			const four = session.appendMessage(assistantSays("4"));
			session.branch(two);
			const five = session.appendMessage(userSays("5"));
			const six = session.appendMessage(assistantSays("6"));
			session.branch(five);
			const seven = session.appendMessage(userSays("7"));
			const nodeTwo = session.getTree()[0].children[0];
			sameMembers(childIds(nodeTwo), [three, five]);
			sameMembers(childIds(nodeTwo.children.find((c) => c.entry.id === five)), [six, seven]);
			assert.deepEqual(childIds(nodeTwo.children.find((c) => c.entry.id === three)), [four]);
		});
	});

	describe("branch", () => {
		// pi: "moves leaf pointer to specified entry"
		it("moves the leaf to an earlier entry", () => {
			const session = SessionManager.inMemory();
			const first = session.appendMessage(userSays("1"));
			session.appendMessage(assistantSays("2"));
			const third = session.appendMessage(userSays("3"));
			assert.equal(session.getLeafId(), third);
			session.branch(first);
			assert.equal(session.getLeafId(), first);
		});

		// pi: "throws for non-existent entry"
		it("refuses an id no entry has", () => {
			const session = SessionManager.inMemory();
			session.appendMessage(userSays("hello"));
			assert.throws(() => session.branch("nonexistent"), { message: "Entry nonexistent not found" });
		});

		// pi: "new appends become children of branch point"
		it("makes the next append a child of the entry branched to", () => {
			const session = SessionManager.inMemory();
			const first = session.appendMessage(userSays("1"));
			session.appendMessage(assistantSays("2"));
			session.branch(first);
			const sibling = session.appendMessage(userSays("another second"));
			assert.equal(session.getEntry(sibling).parentId, first);
		});
	});

	describe("branchWithSummary", () => {
		// pi: "inserts branch summary and advances leaf"
		it("appends a summary of the branch left under the entry branched to and makes it the leaf", () => {
			const session = SessionManager.inMemory();
			const first = session.appendMessage(userSays("1"));
			session.appendMessage(assistantSays("2"));
			session.appendMessage(userSays("3"));
			const usage = distinctUsage();
			const summary = session.branchWithSummary(first, "what 2 and 3 did", undefined, false, usage);
			assert.equal(session.getLeafId(), summary);
			const stored = session.getEntries().find((e) => e.type === "branch_summary");
			assert.equal(stored.parentId, first);
			assert.equal(stored.summary, "what 2 and 3 did");
			assert.deepEqual(stored.usage, usage);
		});

		// pi: "throws for non-existent entry"
		it("refuses an id no entry has", () => {
			const session = SessionManager.inMemory();
			session.appendMessage(userSays("hello"));
			assert.throws(() => session.branchWithSummary("nonexistent", "summary"), { message: "Entry nonexistent not found" });
		});
	});

	describe("getLeafEntry", () => {
		// pi: "returns undefined for empty session"
		it("is undefined for an empty session", () => {
			assert.equal(SessionManager.inMemory().getLeafEntry(), undefined);
		});

		// pi: "returns current leaf entry"
		it("is the entry appended last", () => {
			const session = SessionManager.inMemory();
			session.appendMessage(userSays("1"));
			const last = session.appendMessage(assistantSays("2"));
			assert.equal(session.getLeafEntry()?.id, last);
		});
	});

	describe("getEntry", () => {
		// pi: "returns undefined for non-existent id"
		it("is undefined for an id no entry has", () => {
			assert.equal(SessionManager.inMemory().getEntry("nonexistent"), undefined);
		});

		// pi: "returns entry by id"
		it("finds each entry by its id, with its message", () => {
			const session = SessionManager.inMemory();
			const first = session.appendMessage(userSays("first"));
			const second = session.appendMessage(assistantSays("second"));
			assert.equal(session.getEntry(first).type, "message");
			assert.equal(session.getEntry(first).message.content, "first");
			assert.equal(session.getEntry(second).message.content[0].text, "second");
		});
	});

	describe("buildSessionContext on a branched session", () => {
		// pi: "returns messages from current branch only"
		it("holds the messages of the leaf's branch only", () => {
			const session = SessionManager.inMemory();
			session.appendMessage(userSays("msg1"));
			const second = session.appendMessage(assistantSays("msg2"));
			session.appendMessage(userSays("msg3, left behind"));
			session.branch(second);
			session.appendMessage(assistantSays("msg4, on the branch"));
			assert.deepEqual(session.buildSessionContext().messages.map(textOf), ["msg1", "msg2", "msg4, on the branch"]);
		});
	});
});

describe("createBranchedSession", () => {
	// pi: "throws for non-existent entry"
	it("refuses an id no entry has", () => {
		const session = SessionManager.inMemory();
		session.appendMessage(userSays("hello"));
		assert.throws(() => session.createBranchedSession("nonexistent"), { message: "Entry nonexistent not found" });
	});

	// pi: "creates new session with path to specified leaf (in-memory)"
	it("keeps only the path to the entry, and returns undefined in memory", () => {
		const session = SessionManager.inMemory();
		const first = session.appendMessage(userSays("1"));
		const second = session.appendMessage(assistantSays("2"));
		const third = session.appendMessage(userSays("3"));
		session.appendMessage(assistantSays("4"));
		session.branch(third);
		session.appendMessage(userSays("5"));
		assert.equal(session.createBranchedSession(second), undefined);
		assert.deepEqual(ids(session.getEntries()), [first, second]);
	});

	// pi: "extracts correct path from branched tree"
	it("takes the path through a branch, not the entries before it in the file", () => {
		const session = SessionManager.inMemory();
		const first = session.appendMessage(userSays("1"));
		const second = session.appendMessage(assistantSays("2"));
		session.appendMessage(userSays("3"));
		session.branch(second);
		const fourth = session.appendMessage(userSays("4"));
		const fifth = session.appendMessage(assistantSays("5"));
		session.createBranchedSession(fifth);
		assert.deepEqual(ids(session.getEntries()), [first, second, fourth, fifth]);
	});

	// pi: "preserves tool and summary usage across a file-backed reload"
	it("keeps the usage of a tool result, a compaction and a branch summary through the file", (t) => {
		const dir = scratch(t);
		const session = SessionManager.create(dir, dir);
		const root = session.appendMessage(userSays("question"));
		session.appendMessage(assistantSays("answer"));
		const usage = distinctUsage();
		// A tool that ran a model of its own reports that model's usage on its result.
		const toolResult = { role: "toolResult", toolCallId: "t7", toolName: "subagent", isError: false, timestamp: 3 };
		session.appendMessage({ ...toolResult, content: [{ type: "text", text: "done" }], usage });
		session.appendCompaction("summary", root, 100, undefined, false, usage);
		session.branchWithSummary(root, "branch summary", undefined, false, usage);

		const entries = SessionManager.open(session.getSessionFile(), dir).getEntries();
		const usageOf = (predicate) => entries.filter(predicate).map((e) => e.usage ?? e.message.usage);
		assert.deepEqual(usageOf((e) => e.type === "compaction"), [usage]);
		assert.deepEqual(usageOf((e) => e.type === "branch_summary"), [usage]);
		assert.deepEqual(usageOf((e) => e.type === "message" && e.message.role === "toolResult"), [usage]);
	});

	// pi: "writes file immediately when forking from a point with assistant messages"
	it("writes the branched file at once when its path has an assistant message, with one header", (t) => {
		const dir = scratch(t);
		const session = SessionManager.create(dir, dir);
		session.appendMessage(userSays("first question"));
		const firstAnswer = session.appendMessage(assistantSays("first answer"));
		session.appendMessage(userSays("second question"));
		session.appendMessage(assistantSays("second answer"));
		const file = session.createBranchedSession(firstAnswer);
		assert.ok(file);
		assert.equal(existsSync(file), true);
		assert.equal(recordsIn(file).filter((r) => r.type === "session").length, 1);
	});
});
