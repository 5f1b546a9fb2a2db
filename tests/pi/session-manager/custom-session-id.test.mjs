// Follows pi's packages/coding-agent/test/session-manager/custom-session-id.test.ts (read as a reference, not
// copied): a caller may choose a session's id (newSession, inMemory, create, forkFrom) within pi's character rule;
// otherwise every way of starting a session mints a UUID v7. pi's two cases about `flush()` are not here: pi 1.6.0
// has no such method.
import assert from "node:assert/strict";
import { existsSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { describe, it } from "node:test";
import { SessionManager } from "./subject.mjs";
import { assistantSays, header, jsonl, messageRecord, scratch, sessionFileName, UUID_V7 } from "./support.mjs";

describe("SessionManager session ids chosen by the caller", () => {
	// pi: "uses the provided id instead of generating one"
	it("newSession({id}) makes that the session id", () => {
		const session = SessionManager.inMemory();
		session.newSession({ id: "chosen-by-host" });
		assert.equal(session.getSessionId(), "chosen-by-host");
	});

	// pi: "uses the provided id when creating an in-memory session"
	it("inMemory(cwd, {id}) starts with that id in the header and no file", () => {
		const session = SessionManager.inMemory(process.cwd(), { id: "scratchpad-7" });
		assert.equal(session.getSessionId(), "scratchpad-7");
		assert.equal(session.getHeader().id, "scratchpad-7");
		assert.equal(session.getSessionFile(), undefined);
	});

	// pi: "allows alphanumeric session ids with interior punctuation"
	it("accepts dots, dashes and underscores between letters and digits", () => {
		const session = SessionManager.inMemory();
		session.newSession({ id: "a.b-c_d9" });
		assert.equal(session.getSessionId(), "a.b-c_d9");
	});

	// pi: "rejects invalid custom session ids"
	it("refuses an empty id, punctuation at either end, slashes, backslashes and spaces", () => {
		for (const id of ["", ".x", "x.", "-x", "x-", "_x", "x_", "x/y", "x\\y", "x y"]) {
			const session = SessionManager.inMemory();
			assert.throws(() => session.newSession({ id }), /^Error: Session id must be non-empty, contain only alphanumeric characters/, `id ${JSON.stringify(id)}`);
		}
	});

	// pi: "generates a UUIDv7 id when no id is provided"
	it("newSession() without options mints a UUID v7", () => {
		const session = SessionManager.inMemory();
		session.newSession();
		assert.match(session.getSessionId(), UUID_V7);
	});

	// pi: "generates a UUIDv7 id when options is provided without id"
	it("newSession({parentSession}) without an id still mints a UUID v7", () => {
		const session = SessionManager.inMemory();
		session.newSession({ parentSession: "/somewhere/parent.jsonl" });
		assert.match(session.getSessionId(), UUID_V7);
	});

	// pi: "includes the custom id in the session header"
	it("writes the chosen id into the header", () => {
		const session = SessionManager.inMemory();
		session.newSession({ id: "in-the-header" });
		assert.equal(session.getHeader()?.id, "in-the-header");
	});

	// pi: "generates a UUIDv7 id when constructed without an explicit id"
	it("inMemory() without an id starts with a UUID v7, the header's id", () => {
		const session = SessionManager.inMemory();
		assert.match(session.getSessionId(), UUID_V7);
		assert.equal(session.getHeader().id, session.getSessionId());
	});

	// pi: "uses the provided id when creating a persisted session"
	it("create(cwd, dir, {id}) names the file after the id and writes nothing yet", (t) => {
		const dir = scratch(t);
		const session = SessionManager.create(dir, dir, { id: "persisted-1" });
		assert.equal(session.getSessionId(), "persisted-1");
		assert.equal(session.getHeader().id, "persisted-1");
		const file = session.getSessionFile();
		assert.match(basename(file), sessionFileName("persisted-1"));
		assert.equal(existsSync(file), false, "the file waits for the first message");
	});

	// pi: "generates a UUIDv7 id when creating a branched session"
	it("createBranchedSession gives the branch a new UUID v7", () => {
		const session = SessionManager.inMemory();
		const before = session.getSessionId();
		const first = session.appendMessage({ role: "user", content: [{ type: "text", text: "hi" }], timestamp: 1 });
		session.createBranchedSession(first);
		assert.match(session.getSessionId(), UUID_V7);
		assert.notEqual(session.getSessionId(), before);
		assert.equal(session.getHeader().id, session.getSessionId());
	});

	// pi: "generates a UUIDv7 id when forking from another session file"
	it("forkFrom mints a UUID v7 for the fork and points its header at the source", (t) => {
		const dir = scratch(t);
		const source = join(dir, "source.jsonl");
		writeFileSync(
			source,
			jsonl(header({ id: "the-source", cwd: dir }), messageRecord("e1", null, assistantSays("hello", { provider: "openai", model: "gpt-5" }))),
		);
		const fork = SessionManager.forkFrom(source, dir, dir);
		assert.match(fork.getHeader().id, UUID_V7);
		assert.equal(fork.getHeader().parentSession, source);
	});

	// pi: "uses the provided id when forking from another session file"
	it("forkFrom(…, {id}) gives the fork that id and names its file after it", (t) => {
		const dir = scratch(t);
		const source = join(dir, "source.jsonl");
		writeFileSync(source, jsonl(header({ id: "the-source", cwd: dir })));
		const fork = SessionManager.forkFrom(source, dir, dir, { id: "my-fork" });
		assert.equal(fork.getHeader().id, "my-fork");
		assert.equal(fork.getHeader().parentSession, source);
		assert.match(basename(fork.getSessionFile()), sessionFileName("my-fork"));
	});
});
