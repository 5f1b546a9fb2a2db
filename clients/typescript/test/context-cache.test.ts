/**
 * A view's context reads are kept between calls and brought forward by appends (`ContextCache`): after every step
 * of a sequence that extends the leaf, moves it, resets it, compacts, edits the context (an edit written before
 * the entry it names), reuses an id and rebuilds the index, each read equals pi 1.6.0's own pure function on the
 * same entries, and changing a result changes nothing the next call returns.
 */

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { Entry } from "../src/pi/context.js";
import { SessionView } from "../src/pi/view.js";

const piModule = new URL("../../node_modules/@earendil-works/pi-coding-agent/dist/core/session-manager.js", import.meta.url);
const pi = (await import(piModule.href)) as {
	SessionManager: { inMemory(cwd: string, options: undefined, entries: Entry[]): { getBranch(fromId?: string): Entry[] } };
	buildContextEntries(entries: Entry[], leafId: string | null, byId: Map<unknown, Entry>): Entry[];
	buildSessionProjection(entries: Entry[], leafId: string | null, byId: Map<unknown, Entry>): unknown;
	buildSessionContext(entries: Entry[], leafId: string | null, byId: Map<unknown, Entry>): unknown;
};

/** A view whose entries a test writes directly, as the mirror and the drop-in do. */
class TestView extends SessionView {
	append(entry: Entry): void {
		this.pushEntry(entry);
	}
	moveLeaf(id: string | null): void {
		this.leafId = id;
	}
	replaceAll(entries: Entry[]): void {
		this.fileEntries = entries;
		this._buildIndex();
	}
}

let clock = Date.UTC(2026, 0, 1);
const at = () => new Date((clock += 1000)).toISOString();
const message = (id: string, parentId: string | null, role: string, content: unknown, extra: object = {}): Entry => ({
	type: "message",
	id,
	parentId,
	timestamp: at(),
	message: { role, content, timestamp: clock, ...extra },
});
const assistant = (id: string, parentId: string, text: string) =>
	message(id, parentId, "assistant", [{ type: "text", text }], { provider: "p", model: `m-${id}`, stopReason: "stop" });

function assertReadsArePi(view: TestView, step: string): void {
	const entries = view.getEntries();
	const byId = new Map(entries.map((e) => [e.id, e]));
	const leaf = view.getLeafId();
	assert.deepStrictEqual(view.buildSessionContext(), pi.buildSessionContext(entries, leaf, byId), `context after ${step}`);
	assert.deepStrictEqual(view.buildSessionProjection(), pi.buildSessionProjection(entries, leaf, byId), `projection after ${step}`);
	assert.deepStrictEqual(view.buildContextEntries(), pi.buildContextEntries(entries, leaf, byId), `context entries after ${step}`);
	// A stored message is returned as itself, as pi returns it.
	const mine = view.buildSessionContext().messages;
	const pis = (pi.buildSessionContext(entries, leaf, byId) as { messages: unknown[] }).messages;
	mine.forEach((m, i) => assert.equal(m === pis[i], entries.some((e) => e.message === m), `identity of message ${i} after ${step}`));
	// The leaf's path, kept between calls like the context: pi's own getBranch over the same entries (its leaf
	// given, as pi's in-memory manager starts at the last entry; a null leaf has no path).
	const header = { type: "session", version: 3, id: "s", timestamp: "t", cwd: "/c" } as Entry;
	const pisBranch = leaf === null ? [] : pi.SessionManager.inMemory("/c", undefined, [header, ...entries]).getBranch(leaf);
	const branch = view.getBranch();
	assert.equal(branch.length, pisBranch.length, `path length after ${step}`);
	branch.forEach((e, i) => assert.equal(e, pisBranch[i], `path entry ${i} after ${step}`));
}

describe("the context cache of a view", () => {
	it("gives pi's context after appends, leaf moves, compactions, edits, a reused id and a rebuilt index", () => {
		const view = new TestView();
		view.replaceAll([{ type: "session", version: 3, id: "s", timestamp: at(), cwd: "/c" }]);
		assertReadsArePi(view, "an empty session");
		const steps: [string, () => void][] = [
			["a user message", () => view.append(message("u1", null, "user", "hello"))],
			["an answer", () => view.append(assistant("a1", "u1", "hi"))],
			["a model change and a thinking level", () => {
				view.append({ type: "model_change", id: "mc", parentId: "a1", timestamp: at(), provider: "q", modelId: "r" });
				view.append({ type: "thinking_level_change", id: "tl", parentId: "mc", timestamp: at(), thinkingLevel: "high" });
			}],
			["a custom message and a branch summary", () => {
				view.append({ type: "custom_message", id: "cm", parentId: "tl", timestamp: at(), customType: "note", content: "ctx", display: false });
				view.append({ type: "branch_summary", id: "bs", parentId: "cm", timestamp: at(), fromId: "a1", summary: "left behind" });
			}],
			["a label (not in the context)", () => view.append({ type: "label", id: "lb", parentId: "bs", timestamp: at(), targetId: "u1", label: "x" })],
			["a tool turn", () => {
				view.append(message("u2", "lb", "user", "run it"));
				view.append(message("a2", "u2", "assistant", [{ type: "toolCall", id: "c1", name: "bash", arguments: {} }], { provider: "p", model: "m2", stopReason: "toolUse" }));
				view.append(message("t2", "a2", "toolResult", [{ type: "text", text: "ok" }], { toolCallId: "c1", toolName: "bash", isError: false }));
			}],
			["a branch back to a1", () => view.moveLeaf("a1")],
			["an append on the new branch", () => view.append(message("u3", "a1", "user", "other way"))],
			["a context edit of an entry on the path", () => view.append({ type: "context_edit", id: "ce", parentId: "u3", timestamp: at(), targetId: "a1", replacement: { content: "edited" } })],
			["an edit naming an id not written yet", () => view.append({ type: "context_edit", id: "ce2", parentId: "ce", timestamp: at(), targetId: "later", replacement: null })],
			["the entry it names", () => view.append(message("later", "ce2", "user", "hidden by the edit"))],
			["an append after it", () => view.append(assistant("a4", "later", "still here"))],
			["a compaction", () => view.append({ type: "compaction", id: "cp", parentId: "a4", timestamp: at(), summary: "so far", firstKeptEntryId: "u3", tokensBefore: 10 })],
			["appends after the compaction", () => {
				view.append(message("u5", "cp", "user", "after"));
				view.append(message("u6", "u5", "user", null));
			}],
			["a reset leaf", () => view.moveLeaf(null)],
			["a new root", () => view.append(message("r2", null, "user", "fresh start"))],
			["an id used again", () => view.append(message("u1", "r2", "user", "same id as the first"))],
			["an append under the reused id", () => view.append(message("u7", "u1", "user", "under it"))],
			["an id on the path used again by a new root, and an append under the old leaf", () => {
				// pi's walk from the new leaf now goes through the new root, which holds that id.
				view.append(message("u1", null, "user", "a third u1, a root"));
				view.append(message("y", "u7", "user", "under the old leaf"));
				view.moveLeaf("y");
			}],
			["an unknown leaf", () => view.moveLeaf("nowhere")],
			["an index rebuilt over the same entries", () => {
				view.replaceAll(view.getEntries());
				view.moveLeaf("t2");
			}],
			["an append after the rebuild", () => view.append(message("u8", "t2", "user", "last"))],
		];
		for (const [step, run] of steps) {
			run();
			assertReadsArePi(view, step);
			assertReadsArePi(view, `${step}, read again`);
		}
	});

	it("hands out results a caller may change without changing the next ones", () => {
		const view = new TestView();
		view.append(message("u1", null, "user", "hello"));
		view.append({ type: "custom_message", id: "cm", parentId: "u1", timestamp: at(), customType: "note", content: "ctx", display: true });
		view.append(assistant("a1", "cm", "hi"));
		const expected = structuredClone(view.buildSessionContext());
		const first = view.buildSessionContext();
		first.messages.push({ role: "user", content: "pushed by the caller" });
		first.messages[1].content = "changed by the caller";
		(first.model as { modelId: string }).modelId = "changed";
		view.buildSessionProjection().entries[0]!.messages.pop();
		view.buildContextEntries().pop();
		view.getBranch().pop();
		view.getBranch().push(view.getBranch()[0] as Entry);
		assert.deepStrictEqual(view.buildSessionContext(), expected);
		assert.deepStrictEqual(view.getBranch().map((e) => e.id), ["u1", "cm", "a1"]);
		assert.equal(view.buildContextEntries().length, 3);
	});
});
