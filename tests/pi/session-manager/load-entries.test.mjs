// Follows pi's packages/coding-agent/test/session-manager/load-entries.test.ts (read as a reference, not copied):
// SessionManager.inMemory(cwd, options, entries) takes the entries of another session (held anywhere but on disk)
// and becomes that session: same entries, leaf, tree, labels and context, still in memory only.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { SessionManager } from "./subject.mjs";
import { ENTRY_ID, UUID_V7 } from "./support.mjs";

const ask = (text) => ({ role: "user", content: [{ type: "text", text }], timestamp: Date.now() });

/** The entries an in-memory session in /work holds after `script` ran on it. */
function entriesAfter(script) {
	const source = SessionManager.inMemory("/work");
	script(source);
	return source.getEntries();
}

describe("SessionManager.inMemory with entries to start from", () => {
	// pi: "adopts entries verbatim"
	it("holds exactly the entries it was given", () => {
		const entries = entriesAfter((s) => {
			s.appendMessage(ask("first"));
			s.appendModelChange("openai", "gpt-4.1");
			s.appendMessage(ask("second"));
		});
		assert.deepEqual(SessionManager.inMemory("/work", undefined, entries).getEntries(), entries);
	});

	// pi: "keeps the loaded leaf so appends continue the conversation"
	it("continues from the last entry it was given", () => {
		const entries = entriesAfter((s) => {
			s.appendMessage(ask("first"));
			s.appendMessage(ask("second"));
		});
		const session = SessionManager.inMemory("/work", undefined, entries);
		const next = session.appendMessage(ask("third"));
		assert.equal(session.getLeafId(), next);
		assert.equal(session.getEntry(next).parentId, entries.at(-1).id);
	});

	// pi: "never mints an id that collides with a loaded entry"
	it("never gives a new entry the id of one it was given", () => {
		const entries = entriesAfter((s) => {
			for (let i = 0; i < 64; i++) s.appendMessage(ask(`line ${i}`));
		});
		const session = SessionManager.inMemory("/work", undefined, entries);
		const taken = new Set(entries.map((e) => e.id));
		for (let i = 0; i < 16; i++) {
			const id = session.appendMessage(ask(`more ${i}`));
			assert.match(id, ENTRY_ID);
			assert.equal(taken.has(id), false, `${id} was already an entry's id`);
			taken.add(id);
		}
	});

	// pi: "rebuilds the branch structure rather than a flat chain"
	it("rebuilds branches from the parent links, not from the order of the entries", () => {
		const entries = entriesAfter((s) => {
			const root = s.appendMessage(ask("root"));
			s.appendMessage(ask("left"));
			s.branch(root);
			s.appendMessage(ask("right"));
		});
		const tree = SessionManager.inMemory("/work", undefined, entries).getTree();
		assert.equal(tree.length, 1);
		assert.equal(tree[0].children.length, 2);
	});

	// pi: "rebuilds labels"
	it("knows the labels set by the entries it was given", () => {
		let target = "";
		const entries = entriesAfter((s) => {
			target = s.appendMessage(ask("worth keeping"));
			s.appendLabelChange(target, "keep");
		});
		assert.equal(SessionManager.inMemory("/work", undefined, entries).getLabel(target), "keep");
	});

	// pi: "resolves a compaction against the entry it was written against"
	it("builds the context from the entry a compaction kept", () => {
		let kept = "";
		const entries = entriesAfter((s) => {
			s.appendMessage(ask("forgotten"));
			kept = s.appendMessage(ask("kept"));
			s.appendCompaction("so far", kept, 2048);
		});
		const context = SessionManager.inMemory("/work", undefined, entries).buildContextEntries();
		assert.ok(context.some((e) => e.id === kept));
	});

	// pi: "creates a header from the options when the entries carry none"
	it("makes a header from its cwd and options when the entries have none", () => {
		const entries = entriesAfter((s) => s.appendMessage(ask("hello")));
		const session = SessionManager.inMemory("/work", { id: "restored-7" }, entries);
		assert.equal(session.getSessionId(), "restored-7");
		assert.equal(session.getHeader().id, "restored-7");
		assert.equal(session.getHeader().cwd, "/work");
	});

	// pi: "generates a session id when the options carry none"
	it("mints a UUID v7 session id when neither the entries nor the options have one", () => {
		const entries = entriesAfter((s) => s.appendMessage(ask("hello")));
		const session = SessionManager.inMemory("/work", undefined, entries);
		assert.match(session.getSessionId(), UUID_V7);
		assert.equal(session.getHeader().id, session.getSessionId());
	});

	// pi: "stays off the filesystem"
	it("stays in memory after more appends", () => {
		const entries = entriesAfter((s) => s.appendMessage(ask("hello")));
		const session = SessionManager.inMemory("/work", undefined, entries);
		session.appendMessage(ask("and more"));
		assert.equal(session.getSessionFile(), undefined);
		assert.equal(session.isPersisted(), false);
	});

	// pi: "starts an empty session when the entries are empty"
	it("starts an empty session from an empty list", () => {
		const session = SessionManager.inMemory("/work", { id: "blank" }, []);
		assert.equal(session.getSessionId(), "blank");
		assert.deepEqual(session.getEntries(), []);
		assert.equal(session.getLeafId(), null);
	});
});
