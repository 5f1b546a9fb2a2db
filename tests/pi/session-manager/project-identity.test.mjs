// Follows pi's packages/coding-agent/test/session-manager/project-identity.test.ts (read as a reference, not
// copied). Most of that file tests a later pi that treats every git worktree of one repository as one project
// (and a symlinked session directory as the default one); pi 1.6.0 compares cwds as paths, so those cases fail
// on it and are not here. What holds for 1.6.0: a listing filtered by cwd (a session directory that is not the
// cwd's default) shows another repository's sessions to nobody but their own cwd, and a session's header keeps the
// cwd it was started in wherever its file is stored.
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { describe, it } from "node:test";
import { SessionManager } from "./subject.mjs";
import { assistantSays, jsonl, recordsIn, scratch, userSays } from "./support.mjs";

/** A repository with a linked worktree (a `.git` file pointing into the main checkout's `.git/worktrees`), and an
 * unrelated repository. */
function repositories(root) {
	const main = join(root, "repo");
	mkdirSync(join(main, ".git", "worktrees", "feature"), { recursive: true });
	const worktree = join(root, "feature");
	mkdirSync(worktree);
	writeFileSync(join(worktree, ".git"), `gitdir: ${join(main, ".git", "worktrees", "feature")}\n`);
	const unrelated = join(root, "elsewhere");
	mkdirSync(join(unrelated, ".git"), { recursive: true });
	return { main, worktree, unrelated };
}

describe("SessionManager and which project a session belongs to", () => {
	// pi: "negative: a session from a DIFFERENT repository does not match when the cwd filter is armed"
	it("lists a session of a shared directory for its own cwd and not for another repository's", async (t) => {
		const root = scratch(t);
		const { worktree, unrelated } = repositories(root);
		const store = join(root, "shared-sessions");
		mkdirSync(store);
		writeFileSync(
			join(store, "2026-01-01T00-00-00-000Z_dddd.jsonl"),
			jsonl({ type: "session", version: 3, id: "dddd", timestamp: "2026-01-01T00:00:00.000Z", cwd: worktree }),
		);
		assert.deepEqual(
			(await SessionManager.list(unrelated, store)).map((s) => s.id),
			[],
		);
		assert.deepEqual(
			(await SessionManager.list(worktree, store)).map((s) => s.id),
			["dddd"],
		);
	});

	// pi: "fixture (a) header cwd is read from the session file, not the listing cwd" (pi's case reads back a file
	// its helper wrote; here the session manager writes it)
	it("writes the cwd a session was started in into its header, wherever the file is stored", (t) => {
		const root = scratch(t);
		const { worktree } = repositories(root);
		const store = join(root, "store");
		const session = SessionManager.create(worktree, store);
		session.appendMessage(userSays("started in the worktree"));
		session.appendMessage(assistantSays("ok"));
		const file = session.getSessionFile();
		assert.equal(dirname(file), store);
		assert.equal(recordsIn(file)[0].cwd, worktree);
		assert.equal(SessionManager.open(file).getCwd(), worktree);
	});
});
