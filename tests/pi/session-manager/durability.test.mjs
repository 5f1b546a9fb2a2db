// Follows pi's packages/coding-agent/test/session-manager/durability.test.ts, its case "rolls back the graph and
// partial append when persistence fails" (read as a reference, not copied). pi's case makes the write fail by
// mocking `fs` inside pi's module, which reaches neither pi-sessiond nor the drop-in's worker; here the write fails
// for real: the session file's path is taken by a directory, so pi's append gets EISDIR and pi-sessiond finds its
// file replaced. What is checked is 1.6.0's behaviour in both: the append throws, the entry is not in the session,
// the leaf stays, and the file, put back, still holds exactly what was written before. (pi's case also checks
// that bytes of a half-done append are cut off again, which 1.6.0 does not do; and its other case, a fork whose
// rename fails, tests a later pi: 1.6.0 writes forks in place, without a rename.)
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, renameSync, rmdirSync } from "node:fs";
import { describe, it } from "node:test";
import { SessionManager } from "./subject.mjs";
import { assistantSays, scratch, userSays } from "./support.mjs";

describe("SessionManager when a write fails", () => {
	// pi: "rolls back the graph and partial append when persistence fails"
	it("throws, and leaves the entries, the leaf and the file as they were before the append", (t) => {
		const dir = scratch(t);
		const session = SessionManager.create(dir, dir, { id: "write-fails" });
		session.appendMessage(userSays("hello"));
		const answer = session.appendMessage(assistantSays("hi"));
		const file = session.getSessionFile();
		const written = readFileSync(file, "utf8");

		renameSync(file, `${file}.aside`);
		mkdirSync(file);
		assert.throws(() => session.appendMessage(userSays("this one cannot be written")));
		rmdirSync(file);
		renameSync(`${file}.aside`, file);

		assert.equal(session.getLeafId(), answer);
		assert.equal(session.getEntries().length, 2);
		assert.equal(readFileSync(file, "utf8"), written);
		assert.equal(SessionManager.open(file, dir).getEntries().length, 2);
	});
});
