// Follows pi's packages/coding-agent/test/session-manager/resume-invariant.test.ts (read as a reference, not
// copied): which session directory SessionManager.open(file) takes when none is given. pi's other two cases there
// test a later fix (open choosing the cwd's default directory when it exists) and fail on pi 1.6.0, so they are
// not here.
import assert from "node:assert/strict";
import { join } from "node:path";
import { describe, it } from "node:test";
import { getDefaultSessionDir, SessionManager } from "./subject.mjs";
import { assistantSays, scratch, userSays } from "./support.mjs";

describe("SessionManager.open without a session directory", () => {
	// pi: "falls back to the file's parent dir when the cwd's default dir does not exist"
	it("uses the file's own directory when the header's cwd has no default directory yet", (t) => {
		const agentDir = scratch(t, "agent");
		const saved = process.env.PI_CODING_AGENT_DIR;
		process.env.PI_CODING_AGENT_DIR = agentDir;
		t.after(() => {
			if (saved === undefined) delete process.env.PI_CODING_AGENT_DIR;
			else process.env.PI_CODING_AGENT_DIR = saved;
		});
		// Another project's default directory exists; this one's never did.
		getDefaultSessionDir(join(scratch(t, "other-project"), "src"));
		const elsewhere = scratch(t, "aggregate");
		const project = join(scratch(t, "project"), "never-used-here");
		const writer = SessionManager.create(project, elsewhere);
		writer.appendMessage(userSays(`from ${project}`));
		writer.appendMessage(assistantSays("noted"));

		const reopened = SessionManager.open(writer.getSessionFile());
		assert.equal(reopened.getSessionDir(), elsewhere);
		assert.equal(reopened.usesDefaultSessionDir(), false);
	});
});
