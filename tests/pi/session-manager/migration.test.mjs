// Follows pi's packages/coding-agent/test/session-manager/migration.test.ts (read as a reference, not copied).
// That file drives an older SessionManager API (a public constructor and startSession, from before 1.6.0); the
// behaviour it checks (a v1 file, whose entries have no ids, gets ids and a parent chain in file order when it is
// opened) is 1.6.0's too, so here it runs through SessionManager.open. The last describe is not from pi's suite:
// it pins what pi 1.6.0's open writes to the file at once (the rewrite of a migrated file, the missing final
// newline), which the drop-in must do as well.
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { SessionManager } from "./subject.mjs";
import { assistantSays, ENTRY_ID, jsonl, recordsIn, scratch, textOf, userSays } from "./support.mjs";

/** A version 1 session file: a header without `version`, entries without `id` or `parentId`. */
function writeV1(dir, messages, name = "v1.jsonl") {
	const file = join(dir, name);
	const at = (i) => new Date(Date.UTC(2024, 0, 1, 10, i)).toISOString();
	const v1Header = { type: "session", id: "v1-session", timestamp: at(0), cwd: dir, provider: "test", modelId: "test-model", thinkingLevel: "off" };
	writeFileSync(file, jsonl(v1Header, ...messages.map((message, i) => ({ type: "message", timestamp: at(i), message }))));
	return file;
}

const v1Conversation = () => [
	{ role: "user", content: "first" },
	{ role: "assistant", content: [{ type: "text", text: "second" }] },
	{ role: "user", content: "third" },
];

describe("SessionManager migration of old files", () => {
	describe("from version 1", () => {
		// pi: "migrates v1 session (no id/parentId) to v2"
		it("gives every entry of a v1 file an id and chains them in file order", (t) => {
			const dir = scratch(t);
			const session = SessionManager.open(writeV1(dir, v1Conversation()), dir);
			assert.match(session.getLeafId(), ENTRY_ID);
			const entries = session.getEntries();
			assert.equal(entries.length, 3);
			assert.equal(entries[0].parentId, null);
			assert.equal(entries[1].parentId, entries[0].id);
			assert.equal(entries[2].parentId, entries[1].id);
			assert.equal(session.getLeafId(), entries[2].id);
		});

		// pi: "migration is idempotent (v2 stays v2)"
		it("leaves the ids and parents of a current file as they are", (t) => {
			const dir = scratch(t);
			const writer = SessionManager.create(dir, dir);
			const first = writer.appendMessage(userSays("hello"));
			const second = writer.appendMessage(assistantSays("hi"));
			const reopened = SessionManager.open(writer.getSessionFile(), dir);
			assert.equal(reopened.getEntry(first)?.id, first);
			assert.equal(reopened.getEntry(second)?.parentId, first);
		});

		// pi: "preserves entry order during migration"
		it("keeps the entries of a v1 file in their order", (t) => {
			const dir = scratch(t);
			const session = SessionManager.open(writeV1(dir, v1Conversation()), dir);
			assert.deepEqual(session.getEntries().map((e) => textOf(e.message)), ["first", "second", "third"]);
		});

		// pi: "handles empty session file"
		it("opens a v1 file holding only its header as a session without entries", (t) => {
			const dir = scratch(t);
			const session = SessionManager.open(writeV1(dir, []), dir);
			assert.equal(session.getEntries().length, 0);
			assert.equal(session.getLeafId(), null);
		});
	});

	describe("appends after opening", () => {
		// pi: "maintains parent chain across multiple appends"
		it("chains ten appends one under the other and leaves the leaf on the last", (t) => {
			const dir = scratch(t);
			const session = SessionManager.create(dir, dir);
			const appended = [];
			for (let i = 0; i < 10; i++) appended.push(session.appendMessage(userSays(`msg${i}`)));
			appended.forEach((id, i) => {
				assert.equal(session.getEntry(id)?.id, id);
				assert.equal(session.getEntry(id).parentId, i === 0 ? null : appended[i - 1]);
			});
			assert.equal(session.getLeafId(), appended.at(-1));
		});
	});

	describe("what pi 1.6.0's open writes at once", () => {
		it("rewrites a v1 file migrated as it opens it: a version 3 header, and the ids the open gave", (t) => {
			const dir = scratch(t);
			const file = writeV1(dir, v1Conversation());
			const session = SessionManager.open(file, dir);
			const [onDiskHeader, ...onDisk] = recordsIn(file);
			assert.equal(onDiskHeader.version, 3);
			assert.equal(onDiskHeader.id, "v1-session");
			assert.deepEqual(
				onDisk.map((r) => [r.id, r.parentId]),
				session.getEntries().map((e) => [e.id, e.parentId]),
			);
		});

		it("renames a v2 file's hookMessage role to custom in the file as it opens it", (t) => {
			const dir = scratch(t);
			const file = join(dir, "v2.jsonl");
			const hook = { role: "hookMessage", customType: "note", content: "saved", display: false, timestamp: 1 };
			writeFileSync(
				file,
				jsonl(
					{ type: "session", version: 2, id: "v2-session", timestamp: "2025-01-01T00:00:00.000Z", cwd: dir },
					{ type: "message", id: "e1", parentId: null, timestamp: "2025-01-01T00:00:01.000Z", message: hook },
				),
			);
			const session = SessionManager.open(file, dir);
			assert.equal(session.getEntry("e1").message.role, "custom");
			const records = recordsIn(file);
			assert.equal(records[0].version, 3);
			assert.deepEqual(records[1], { ...session.getEntry("e1") });
		});

		it("ends a last line that has no newline as it opens the file", (t) => {
			const dir = scratch(t);
			const file = join(dir, "unterminated.jsonl");
			const content = jsonl({ type: "session", version: 3, id: "s", timestamp: "2025-01-01T00:00:00.000Z", cwd: dir }) +
				JSON.stringify({ type: "message", id: "e1", parentId: null, timestamp: "2025-01-01T00:00:01.000Z", message: userSays("hi", 1) });
			writeFileSync(file, content);
			SessionManager.open(file, dir);
			assert.equal(readFileSync(file, "utf8"), `${content}\n`);
		});
	});
});
