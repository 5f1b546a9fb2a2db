/**
 * Which session pi's command opens first, told from its arguments (`firstOpenOf`): only when pi surely opens an
 * existing file, and only one that opening leaves as it is (the open made ahead must not write).
 */

import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { firstOpenOf } from "../src/pi/ahead.js";
import { defaultSessionDirPath } from "../src/pi/paths.js";

const header = (cwd: string, version = 3) => `${JSON.stringify({ type: "session", version, id: "s1", timestamp: "2026-01-01T00:00:00.000Z", cwd })}\n`;
const entry = `${JSON.stringify({ type: "message", id: "a1", parentId: null, timestamp: "2026-01-01T00:00:01.000Z", message: { role: "user", content: "hi", timestamp: 1 } })}\n`;

function sessionIn(dir: string, name: string, text: string): string {
	mkdirSync(dir, { recursive: true });
	const file = join(dir, name);
	writeFileSync(file, text);
	return file;
}

describe("the session pi's command opens first", () => {
	const root = mkdtempSync(join(tmpdir(), "pi-ahead-"));
	const project = join(root, "project");
	mkdirSync(project);
	const file = sessionIn(join(root, "kept"), "s.jsonl", header(project) + entry);
	const env = { PI_CODING_AGENT_DIR: join(root, "agent") };

	it("is the file --session names, with the session's cwd and the file's directory, as pi's open makes them", () => {
		assert.deepEqual(firstOpenOf(["--mode", "rpc", "--session", file], root, env), { path: file, sessionDir: join(root, "kept"), cwd: project });
		assert.deepEqual(firstOpenOf(["--session", "kept/s.jsonl"], root, env), { path: file, sessionDir: join(root, "kept"), cwd: project });
	});

	it("is not told when pi would look the argument up as a session id, or open something else, or nothing", () => {
		assert.equal(firstOpenOf(["--session", "0190abcd"], root, env), undefined);
		for (const other of [["--no-session"], ["--fork", file], ["--session-id", "x"], ["-r"], ["--session-dir", root], ["--help"], ["--export", "x.html"]]) {
			assert.equal(firstOpenOf(["--session", file, ...other], root, env), undefined, other.join(" "));
		}
		assert.equal(firstOpenOf(["--session", file], root, { ...env, PI_CODING_AGENT_SESSION_DIR: root }), undefined);
		assert.equal(firstOpenOf(["-p", "hello"], root, env), undefined);
	});

	it("is not told for a file an open would change or pi would ask about", () => {
		const cases = {
			"an old version (migrated at open)": header(project, 2) + entry,
			"no newline at its end (added at open)": header(project) + entry.trimEnd(),
			"empty (given a header at open)": "",
			"a cwd that is gone (pi asks first)": header(join(root, "gone")) + entry,
			"no header": entry,
		};
		for (const [what, text] of Object.entries(cases)) {
			const other = sessionIn(join(root, "odd"), `${what.length}.jsonl`, text);
			assert.equal(firstOpenOf(["--session", other], root, env), undefined, what);
		}
		assert.equal(firstOpenOf(["--session", join(root, "missing.jsonl")], root, env), undefined, "a file that is not there");
	});

	it("is the newest session of the cwd's directory for --continue, with pi's cwd", () => {
		const dir = defaultSessionDirPath(project, env.PI_CODING_AGENT_DIR);
		const older = sessionIn(dir, "a.jsonl", header(project) + entry);
		const newer = sessionIn(dir, "b.jsonl", header(project) + entry);
		utimesSync(older, new Date(1_000_000), new Date(1_000_000));
		assert.deepEqual(firstOpenOf(["-c"], project, env), { path: newer, sessionDir: dir, cwd: project });
		assert.deepEqual(firstOpenOf(["--continue", "--mode", "rpc"], project, env), { path: newer, sessionDir: dir, cwd: project });
		assert.equal(firstOpenOf(["-c"], root, env), undefined, "a cwd without sessions");
	});

	it("follows a session directory named in pi's global settings, and tells nothing when a project's settings name one", () => {
		const agent = join(root, "configured-agent");
		const configured = { PI_CODING_AGENT_DIR: agent };
		const elsewhere = join(root, "elsewhere");
		mkdirSync(agent, { recursive: true });
		writeFileSync(join(agent, "settings.json"), JSON.stringify({ theme: "dark", sessionDir: elsewhere }));
		assert.deepEqual(firstOpenOf(["--session", file], root, configured), { path: file, sessionDir: elsewhere, cwd: project });
		// --continue: the newest session of this cwd in that directory, as pi's continueRecent picks it there.
		const other = join(root, "other-project");
		mkdirSync(other, { recursive: true });
		const mine = sessionIn(elsewhere, "a.jsonl", header(project) + entry);
		const theirs = sessionIn(elsewhere, "b.jsonl", header(other) + entry);
		utimesSync(mine, new Date(1_000_000), new Date(1_000_000));
		assert.deepEqual(firstOpenOf(["-c"], project, configured), { path: mine, sessionDir: elsewhere, cwd: project });
		assert.deepEqual(firstOpenOf(["-c"], other, configured), { path: theirs, sessionDir: elsewhere, cwd: other });
		writeFileSync(join(agent, "settings.json"), `{"sessionDir": `);
		assert.equal(firstOpenOf(["--session", file], root, configured), undefined, "settings that do not parse");
		writeFileSync(join(agent, "settings.json"), JSON.stringify({ sessionDir: 7 }));
		assert.equal(firstOpenOf(["--session", file], root, configured), undefined, "a sessionDir that is not a path");
		writeFileSync(join(agent, "settings.json"), JSON.stringify({ theme: "dark" }));
		assert.deepEqual(firstOpenOf(["--session", file], root, configured), { path: file, sessionDir: join(root, "kept"), cwd: project });
		mkdirSync(join(project, ".pi"), { recursive: true });
		writeFileSync(join(project, ".pi", "settings.json"), JSON.stringify({ sessionDir: elsewhere }));
		assert.equal(firstOpenOf(["-c"], project, configured), undefined, "a project's settings");
		assert.equal(firstOpenOf(["--session", file], project, configured), undefined, "a project's settings, --session");
	});
});
