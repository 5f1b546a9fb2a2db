// Follows pi's packages/coding-agent/test/session-manager/file-operations.test.ts (read as a reference, not
// copied): reading session files into entries, finding the most recent session of a directory, a flat directory
// shared by several projects, and opening files that are empty or not sessions at all. Every case passes on pi
// 1.6.0, so every one runs here, including the one that checks the file right after opening a 0-byte file.
import assert from "node:assert/strict";
import { constants } from "node:buffer";
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, writeFileSync, writeSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { findMostRecentSession, loadEntriesFromFile, SessionManager } from "./subject.mjs";
import { assistantSays, header, jsonl, messageRecord, modifiedAgo, recordsIn, scratch, userSays, zeroUsage } from "./support.mjs";

const greeting = messageRecord("m1", null, userSays("hi", 1));

describe("loadEntriesFromFile", () => {
	// pi: "returns empty array for non-existent file"
	it("gives [] for a file that does not exist", (t) => {
		assert.deepEqual(loadEntriesFromFile(join(scratch(t), "absent.jsonl")), []);
	});

	// pi: "returns empty array for empty file"
	it("gives [] for a 0-byte file", (t) => {
		const file = join(scratch(t), "empty.jsonl");
		writeFileSync(file, "");
		assert.deepEqual(loadEntriesFromFile(file), []);
	});

	// pi: "returns empty array for file without valid session header"
	it("gives [] when the first entry is not a session header", (t) => {
		const file = join(scratch(t), "headless.jsonl");
		writeFileSync(file, jsonl({ type: "message", id: "1" }));
		assert.deepEqual(loadEntriesFromFile(file), []);
	});

	// pi: "returns empty array for malformed JSON"
	it("gives [] for a file of text that is not JSON", (t) => {
		const file = join(scratch(t), "prose.jsonl");
		writeFileSync(file, "this is not json\n");
		assert.deepEqual(loadEntriesFromFile(file), []);
	});

	// pi: "loads valid session file"
	it("gives the header and then each entry, in file order", (t) => {
		const file = join(scratch(t), "ok.jsonl");
		writeFileSync(file, jsonl(header(), greeting));
		const entries = loadEntriesFromFile(file);
		assert.deepEqual(
			entries.map((e) => e.type),
			["session", "message"],
		);
		assert.deepEqual(entries[1], greeting);
	});

	// pi: "skips malformed lines but keeps valid ones"
	it("skips a line that is not JSON and keeps the lines around it", (t) => {
		const file = join(scratch(t), "damaged.jsonl");
		writeFileSync(file, `${JSON.stringify(header())}\n{"type": broken\n${JSON.stringify(greeting)}\n`);
		assert.deepEqual(
			loadEntriesFromFile(file).map((e) => e.type),
			["session", "message"],
		);
	});

	// pi: "persists and reloads final answer assistant content"
	it("keeps an assistant message's finalAnswer block through a write and a reopen", (t) => {
		const dir = scratch(t);
		const session = SessionManager.create(dir, dir);
		session.appendMessage(userSays("hi", 1));
		const content = [
			{ type: "text", text: "working it out\n" },
			{ type: "finalAnswer", text: "the answer" },
		];
		session.appendMessage({ ...assistantSays("", { provider: "openai", model: "o" }), content, usage: zeroUsage(0, 0) });
		const reopened = SessionManager.open(session.getSessionFile(), dir);
		const reply = reopened.buildSessionContext().messages.find((m) => m.role === "assistant");
		assert.deepEqual(reply.content, content);
	});

	// pi: "opens session files larger than Node's max string length"
	it("opens a session file longer than the longest string Node can hold", (t) => {
		const file = join(scratch(t), "huge.jsonl");
		writeFileSync(file, jsonl(header({ id: "big" })));
		// A sparse file: a newline every 24 MiB past the longest string, holes in between (blank-ish lines pi
		// skips as malformed); then one real entry at the end.
		const fd = openSync(file, "r+");
		try {
			for (let at = 24 << 20; at < constants.MAX_STRING_LENGTH + (48 << 20); at += 24 << 20) writeSync(fd, "\n", at);
		} finally {
			closeSync(fd);
		}
		writeFileSync(file, jsonl(greeting), { flag: "a" });
		const session = SessionManager.open(file, scratch(t, "dir"));
		assert.equal(session.getSessionId(), "big");
		assert.equal(session.getEntries().length, 1);
		assert.deepEqual(session.buildSessionContext().messages, [greeting.message]);
	});
});

describe("findMostRecentSession", () => {
	const sessionAt = (dir, name, fields, secondsAgo) => {
		const file = join(dir, name);
		writeFileSync(file, jsonl(header(fields)));
		modifiedAgo(file, secondsAgo);
		return file;
	};

	// pi: "returns null for empty directory"
	it("gives null for an empty directory", (t) => {
		assert.equal(findMostRecentSession(scratch(t)), null);
	});

	// pi: "returns null for non-existent directory"
	it("gives null for a directory that does not exist", (t) => {
		assert.equal(findMostRecentSession(join(scratch(t), "nowhere")), null);
	});

	// pi: "ignores non-jsonl files"
	it("looks only at *.jsonl files", (t) => {
		const dir = scratch(t);
		writeFileSync(join(dir, "notes.txt"), JSON.stringify(header()));
		writeFileSync(join(dir, "data.json"), JSON.stringify(header()));
		assert.equal(findMostRecentSession(dir), null);
	});

	// pi: "ignores jsonl files without valid session header"
	it("skips a *.jsonl file whose first entry is not a header", (t) => {
		const dir = scratch(t);
		writeFileSync(join(dir, "stray.jsonl"), jsonl({ type: "message" }));
		assert.equal(findMostRecentSession(dir), null);
	});

	// pi: "returns single valid session file"
	it("finds the one session of a directory", (t) => {
		const dir = scratch(t);
		const only = sessionAt(dir, "only.jsonl", {}, 0);
		assert.equal(findMostRecentSession(dir), only);
	});

	// pi: "returns most recently modified session"
	it("picks the session modified last, whatever the names", (t) => {
		const dir = scratch(t);
		sessionAt(dir, "b-older.jsonl", { id: "old" }, 120);
		const newer = sessionAt(dir, "a-newer.jsonl", { id: "new" }, 10);
		assert.equal(findMostRecentSession(dir), newer);
	});

	// pi: "skips invalid files and returns valid one"
	it("passes over a newer file that is not a session for an older one that is", (t) => {
		const dir = scratch(t);
		const valid = sessionAt(dir, "valid.jsonl", {}, 120);
		const invalid = join(dir, "invalid.jsonl");
		writeFileSync(invalid, jsonl({ type: "something-else" }));
		modifiedAgo(invalid, 10);
		assert.equal(findMostRecentSession(dir), valid);
	});

	// pi: "filters most recent session by cwd"
	it("picks the most recent session of the cwd it is given", (t) => {
		const dir = scratch(t);
		const a = sessionAt(dir, "a.jsonl", { id: "a", cwd: join(dir, "project-a") }, 120);
		const b = sessionAt(dir, "b.jsonl", { id: "b", cwd: join(dir, "project-b") }, 10);
		assert.equal(findMostRecentSession(dir, join(dir, "project-a")), a);
		assert.equal(findMostRecentSession(dir, join(dir, "project-b")), b);
	});
});

describe("SessionManager with one flat directory for several projects", () => {
	// pi: "scopes current-folder APIs by cwd while listing all flat sessions"
	it("lists and continues by cwd, while listAll sees every project's sessions", async (t) => {
		const store = scratch(t);
		const projectA = join(store, "project-a");
		const projectB = join(store, "project-b");
		mkdirSync(projectA);
		mkdirSync(projectB);
		const conversation = (cwd, text) => {
			const session = SessionManager.create(cwd, store);
			session.appendMessage(userSays(text));
			session.appendMessage(assistantSays(`re: ${text}`));
			return session.getSessionFile();
		};
		const fileA = conversation(projectA, "in A");
		const fileB = conversation(projectB, "in B");
		// B is the newer, so continuing A only finds A by its cwd.
		modifiedAgo(fileA, 60);

		assert.deepEqual(
			(await SessionManager.list(projectA, store)).map((s) => s.path),
			[fileA],
		);
		assert.deepEqual(new Set((await SessionManager.listAll(store)).map((s) => s.path)), new Set([fileA, fileB]));
		assert.equal(SessionManager.continueRecent(projectA, store).getSessionFile(), fileA);
	});
});

describe("SessionManager.open on files that are empty or not sessions", () => {
	// pi: "throws and preserves non-empty file without valid header"
	it("refuses a file of entries without a header, and leaves it as it was", (t) => {
		const dir = scratch(t);
		const file = join(dir, "headless.jsonl");
		const content = jsonl(messageRecord("abc", "orphaned", { role: "assistant", content: "test" }));
		writeFileSync(file, content);
		assert.throws(() => SessionManager.open(file, dir), { message: `Session file is not a valid pi session: ${file}` });
		assert.equal(readFileSync(file, "utf8"), content);
	});

	// pi: "throws and preserves non-session JSONL files"
	it("refuses some other program's JSONL log, and leaves it as it was", (t) => {
		const dir = scratch(t);
		const file = join(dir, "events.log");
		const content = jsonl({ type: "event", data: "not a session" });
		writeFileSync(file, content);
		assert.throws(() => SessionManager.open(file, dir), { message: `Session file is not a valid pi session: ${file}` });
		assert.equal(readFileSync(file, "utf8"), content);
	});

	// pi: "truncates and rewrites empty file with valid header"
	it("writes a header into a 0-byte file as it opens it", (t) => {
		const dir = scratch(t);
		const file = join(dir, "empty.jsonl");
		writeFileSync(file, "");
		const session = SessionManager.open(file, dir);
		assert.ok(session.getSessionId());
		assert.equal(session.getHeader()?.type, "session");
		const records = recordsIn(file);
		assert.equal(records.length, 1, "the file holds the header, and nothing else");
		assert.equal(records[0].type, "session");
		assert.equal(records[0].id, session.getSessionId());
	});

	// pi: "preserves explicit session file path when recovering from corrupted file"
	it("keeps the path it was given for a 0-byte file", (t) => {
		const dir = scratch(t);
		const file = join(dir, "named-by-me.jsonl");
		writeFileSync(file, "");
		assert.equal(SessionManager.open(file, dir).getSessionFile(), file);
	});

	// pi: "subsequent loads of initialized empty file work correctly"
	it("opens a 0-byte file again as the session the first open started", (t) => {
		const dir = scratch(t);
		const file = join(dir, "empty.jsonl");
		writeFileSync(file, "");
		const first = SessionManager.open(file, dir);
		const second = SessionManager.open(file, dir);
		assert.equal(second.getSessionId(), first.getSessionId());
		assert.equal(second.getHeader()?.type, "session");
	});

	// Not one of pi's cases: setSessionFile reads a file the way open does (pi's _setSessionFile), so switching a
	// persisted manager to a 0-byte file writes the header at once too.
	it("setSessionFile to a 0-byte file writes its header at once, as open does", (t) => {
		const dir = scratch(t);
		const session = SessionManager.create(dir, dir);
		const file = join(dir, "switched-to.jsonl");
		writeFileSync(file, "");
		session.setSessionFile(file);
		assert.equal(session.getSessionFile(), file);
		assert.deepEqual(
			recordsIn(file).map((r) => [r.type, r.id]),
			[["session", session.getSessionId()]],
		);
		assert.equal(existsSync(file), true);
	});
});
