// Real pi 1.6.0, unchanged, run with its own SessionManager and on pi-sessiond (node --import
// pi-sessiond-client/register): the same scripted session (tool calls, a branch with a summary, a compaction, a
// name, /fork, /resume, /new) must leave files that pi's own SessionManager reads identically, ids and timestamps
// aside (issue 14). And two pi processes on one session on pi-sessiond: the second names the first and writes a
// fork of the session, so the file is never interleaved (pi #8177, #8300, #8334, #8848, #9596).
import { spawnSync } from "node:child_process";
import { deepStrictEqual, equal, match, ok } from "node:assert/strict";
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { descendants, exampleCopy, launcher, normalise, printPi, readsOf, RpcPi, runNode, running, sandbox, sessionFiles } from "./lib.mjs";

const { defaultSessionDirPath } = await import(new URL("../../clients/typescript/dist/pi/paths.js", import.meta.url).href);

/** The script: what a user does in one pi session, through pi's RPC commands and an extension command. */
async function script(pi) {
	await pi.prompt("hello");
	await pi.prompt("run echo hi from bash");
	await pi.prompt("read notes.txt");
	const { entries } = await pi.command({ type: "get_entries" });
	const firstAnswer = entries.find((e) => e.type === "message" && e.message.role === "assistant");
	await pi.prompt(`/goto ${firstAnswer.id}`);
	await pi.prompt("after the branch");
	await pi.command({ type: "compact" });
	await pi.prompt("after compaction");
	await pi.command({ type: "set_session_name", name: "scripted session" });
	const main = (await pi.command({ type: "get_state" })).sessionFile;
	const later = (await pi.command({ type: "get_entries" })).entries;
	const forkPoint = later.find((e) => e.type === "message" && e.message.role === "user" && e.message.content?.[0]?.text === "after the branch");
	ok(forkPoint, "the user message to fork from");
	await pi.command({ type: "fork", entryId: forkPoint.id });
	await pi.prompt("in the fork");
	await pi.command({ type: "switch_session", sessionPath: main });
	await pi.prompt("resumed");
	await pi.command({ type: "new_session" });
	await pi.prompt("fresh start");
	return main;
}

async function runScript(name, sessiond, cwd) {
	const box = sandbox(name, cwd);
	writeFileSync(join(box.cwd, "notes.txt"), "remember the milk\n");
	const pi = new RpcPi(box, { sessiond });
	const main = await script(pi);
	equal(await pi.close(), 0, pi.stderr);
	const files = sessionFiles(box.agentDir);
	return { box, main, files, reads: normalise(files.map(readsOf)) };
}

test("a scripted pi session leaves files pi reads the same with its own manager and on pi-sessiond", async () => {
	const cwd = mkdtempSync(join(tmpdir(), "pi-real-cwd-"));
	const own = await runScript("own", false, cwd);
	const delegated = await runScript("sessiond", true, cwd);
	equal(own.files.length, 3, "the session, its fork and the new session");
	equal(delegated.files.length, 3);
	deepStrictEqual(delegated.reads, own.reads);
	const types = new Set(own.reads.flatMap((r) => r.entries.map((e) => e.type)));
	for (const type of ["message", "branch_summary", "compaction", "label", "session_info", "model_change", "thinking_level_change"]) {
		ok(types.has(type), `the script wrote a ${type} entry`);
	}
});

test("pi on pi-sessiond goes on with --continue and --session where plain pi left off, one session throughout (issue 20)", async () => {
	// The session pi's arguments name is opened while pi loads, its pages read ahead: each pi must still read
	// and continue the session plain pi wrote just before it.
	const box = sandbox("continue");
	const plain = await printPi(box, { sessiond: false, args: ["first, plain pi"] });
	equal(plain.code, 0, plain.stderr);
	const [file] = sessionFiles(box.agentDir);
	for (const [sessiond, args] of [
		[true, ["-c", "second, on pi-sessiond with -c"]],
		[true, ["--session", file, "third, on pi-sessiond with --session"]],
		[false, ["-c", "fourth, plain pi with -c"]],
		[true, ["--continue", "fifth, on pi-sessiond with --continue"]],
	]) {
		const run = await printPi(box, { sessiond, args });
		equal(run.code, 0, run.stderr);
		equal(run.stderr, "", `${args.join(" ")}: nothing to say`);
	}
	deepStrictEqual(sessionFiles(box.agentDir), [file]);
	const { entries } = readsOf(file);
	const texts = entries.flatMap((e) => (e.type === "message" && e.message.role === "user" ? [e.message.content[0].text] : []));
	deepStrictEqual(texts, ["first, plain pi", "second, on pi-sessiond with -c", "third, on pi-sessiond with --session", "fourth, plain pi with -c", "fifth, on pi-sessiond with --continue"]);
	// One conversation: each prompt hangs under the answer to the one before.
	const messages = entries.filter((e) => e.type === "message");
	for (let i = 1; i < messages.length; i++) equal(messages[i].parentId, messages[i - 1].id, `message ${i}`);
});

test("with a session directory in pi's settings, the session pi opens is the one opened ahead, and the one it writes (issue 20)", async () => {
	const box = sandbox("settings-dir");
	const elsewhere = join(box.root, "elsewhere");
	writeFileSync(join(box.agentDir, "settings.json"), `${JSON.stringify({ sessionDir: elsewhere })}\n`);
	const plain = await printPi(box, { sessiond: false, args: ["first, plain pi"] });
	equal(plain.code, 0, plain.stderr);
	const [name] = readdirSync(elsewhere);
	const file = join(elsewhere, name);
	// Decoys for a guess that ignored the settings: an older session in cwd's default directory (where -c would
	// look), and a copy in a directory of its own (whose directory --session would take for the session's).
	const defaultDir = defaultSessionDirPath(box.cwd, box.agentDir);
	mkdirSync(defaultDir, { recursive: true });
	copyFileSync(file, join(defaultDir, name));
	const kept = join(box.root, "kept");
	mkdirSync(kept);
	copyFileSync(file, join(kept, name));
	// The sidecar's log of each request it reads: one open, none closed, means pi took the one made ahead.
	const traced = { RUST_LOG: "pi_sessiond=debug", PI_SESSIOND_STDERR: "inherit" };
	for (const args of [["-c", "second, -c"], ["--session", join(kept, name), "third, --session"]]) {
		const run = await printPi(box, { sessiond: true, args, extraEnv: traced });
		equal(run.code, 0, run.stderr);
		equal((run.stderr.match(/"method":"session\/open"/g) ?? []).length, 1, `${args[0]}: one open\n${run.stderr.slice(0, 3000)}`);
		equal((run.stderr.match(/"method":"session\/close"/g) ?? []).length, 0, `${args[0]}: nothing opened in vain`);
	}
	deepStrictEqual(readdirSync(elsewhere), [name]);
	const texts = (path) => readsOf(path).entries.flatMap((e) => (e.type === "message" && e.message.role === "user" ? [e.message.content[0].text] : []));
	deepStrictEqual(texts(file), ["first, plain pi", "second, -c"]);
	deepStrictEqual(texts(join(kept, name)), ["first, plain pi", "third, --session"]);
	deepStrictEqual(texts(join(defaultDir, name)), ["first, plain pi"]);
});

test("a second pi in print mode on a session pi-sessiond holds for the first names the first, writes a fork of it and leaves its file alone", async () => {
	const box = sandbox("two");
	const first = new RpcPi(box, { sessiond: true });
	await first.prompt("hello from the first pi");
	const file = (await first.command({ type: "get_state" })).sessionFile;
	const before = readFileSync(file, "utf8");

	const second = await printPi(box, { sessiond: true, args: ["--session", file, "hello from the second pi"] });
	equal(second.code, 0, second.stderr);
	match(second.stderr, new RegExp(`being written by process ${first.pid}\\b`));
	const forked = /Continuing in a new session forked from it: (\S+\.jsonl)/.exec(second.stderr)?.[1];
	ok(forked, second.stderr);
	equal(readFileSync(file, "utf8"), before, "the file is exactly as the first pi left it");
	equal(readsOf(forked).header.parentSession, file);

	await first.prompt("the first pi goes on");
	equal(await first.close(), 0, first.stderr);
	const texts = readsOf(file).entries.flatMap((e) => (e.type === "message" && e.message.role === "user" ? [e.message.content[0].text] : []));
	deepStrictEqual(texts, ["hello from the first pi", "the first pi goes on"]);
});

test("pi's SDK with the drop-in writes the session pi's SDK writes with its own manager", async () => {
	const cwd = mkdtempSync(join(tmpdir(), "pi-real-sdk-cwd-"));
	const runs = [];
	for (const [name, edit] of [
		["own", (text) => text.replace('from "pi-sessiond-client/pi"', 'from "@earendil-works/pi-coding-agent"')],
		["sessiond", (text) => text],
	]) {
		const box = sandbox(`sdk-${name}`, cwd);
		const script = exampleCopy("pi-sdk/index.mjs", `sdk-${name}.mjs`, edit);
		const result = await runNode(box, script, ["--faux", "hello", "run echo from the sdk", "bye"]);
		equal(result.code, 0, result.stderr);
		match(result.stdout, /done: bash/);
		runs.push(normalise(sessionFiles(box.agentDir).map(readsOf)));
	}
	equal(runs[0].length, 1);
	deepStrictEqual(runs[1], runs[0]);
});

test("the example extension shows the tree around the leaf inside real pi, from the first message on", async () => {
	const box = sandbox("extension");
	const extension = exampleCopy("pi-extension/index.ts", "extension.ts");
	const pi = new RpcPi(box, { sessiond: false, extensions: [extension] });
	// Before the first message pi has not written the session file yet.
	await pi.prompt("/sessiond tree");
	await pi.widget((lines) => lines[0] === "(the tree appears with the first message)");
	await pi.prompt("first question");
	const drawn = await pi.widget((lines) => lines.some((l) => l.includes("first question")));
	ok(drawn.some((l) => l.includes("← leaf")), drawn.join("\n"));
	ok(drawn.length <= 10, "pi shows at most 10 lines of a widget");
	const mark = pi.widgets.length;
	await pi.prompt("second question");
	// pi's own appends reach the extension's watched mirror and the tree is drawn again from it.
	const redrawn = await pi.widget((lines) => lines.some((l) => l.includes("echo: second question ← leaf")), mark);
	ok(redrawn.some((l) => l.includes("first question")), redrawn.join("\n"));
	equal(await pi.close(), 0, pi.stderr);
});

test("pi-sessiond-pi killed with SIGKILL leaves no pi and no sidecar behind (issue 20)", async () => {
	const box = sandbox("launcher-kill");
	const pi = new RpcPi(box, { sessiond: true, viaLauncher: true });
	await pi.prompt("hello through the launcher");
	const file = (await pi.command({ type: "get_state" })).sessionFile;
	ok(readsOf(file).entries.length > 0, "pi wrote through the sidecar");
	const below = descendants(pi.pid);
	ok(below.length > 0, "the sidecar runs below the launcher");
	const launcherGone = new Promise((resolve) => pi.child.once("exit", resolve));
	pi.child.kill("SIGKILL");
	await launcherGone;
	try {
		const deadline = Date.now() + 15000;
		while (below.some(running) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
		deepStrictEqual(below.filter(running), [], "every process the launcher started has ended");
	} finally {
		for (const pid of below.filter(running)) process.kill(pid, "SIGKILL");
	}
});

test("pi-sessiond-pi says in one line, before pi starts, that the sidecar refuses PI_SESSIOND_ARGS, is not a sidecar, or that PI_BIN is missing", () => {
	const box = sandbox("launcher-args");
	const run = (extraEnv, args = ["-p", "hi"]) =>
		spawnSync(process.execPath, [launcher, ...args], { cwd: box.cwd, env: { ...process.env, HOME: box.home, PI_CODING_AGENT_DIR: box.agentDir, ...extraEnv }, encoding: "utf8" });
	const refused = run({ PI_SESSIOND_ARGS: "--durability sometimes" });
	equal(refused.status, 2, refused.stderr);
	equal(refused.stderr.trim().split("\n").length, 1, refused.stderr);
	match(refused.stderr, /^pi-sessiond-pi: \S+ refuses PI_SESSIOND_ARGS="--durability sometimes": .*invalid value 'sometimes'/);
	equal(refused.stdout, "");
	// Arguments the sidecar takes are tried as the drop-in passes them (beside pi's agent directory): pi starts.
	for (const args of ["--no-index", `--index ${join(box.home, "index.sqlite")}`, "--durability none"]) {
		const started = run({ PI_SESSIOND_ARGS: args }, ["--version"]);
		equal(started.status, 0, `${args}: ${started.stderr}`);
		equal(started.stdout.trim(), "1.6.0");
	}
	const twice = run({ PI_SESSIOND_ARGS: "--agent-dir /elsewhere" });
	equal(twice.status, 2, twice.stderr);
	match(twice.stderr, /cannot be used multiple times.*\(the agent directory is pi's: set PI_CODING_AGENT_DIR instead\)$/m);
	// Arguments that make it a command rather than the sidecar, and a binary that is no sidecar at all.
	for (const [env, said] of [
		[{ PI_SESSIOND_ARGS: "ls" }, /^pi-sessiond-pi: \S+ with PI_SESSIOND_ARGS="ls" does not answer as pi-sessiond's sidecar \(it ended with status 0/],
		[{ PI_SESSIOND_BIN: "/bin/false" }, /^pi-sessiond-pi: \/bin\/false does not answer as pi-sessiond's sidecar \(it ended with status 1/],
	]) {
		const notSidecar = run(env);
		equal(notSidecar.status, 2, notSidecar.stderr);
		equal(notSidecar.stderr.trim().split("\n").length, 1, notSidecar.stderr);
		match(notSidecar.stderr, said);
		equal(notSidecar.stdout, "");
	}
	const missing = run({ PI_BIN: "/no/such/pi" });
	equal(missing.status, 127, missing.stderr);
	equal(missing.stderr.trim().split("\n").length, 1, missing.stderr);
	match(missing.stderr, /^pi-sessiond-pi: PI_BIN=\/no\/such\/pi: no such file/);
});

test("pi 1.6.0's bundle holds what the register hook binds: SessionManager once, and the inline extensions once", async () => {
	const { isBundleChunk, mayNeedChange, patchBundleChunk } = await import(new URL("../../clients/typescript/dist/pi/redirect.js", import.meta.url).href);
	const chunks = new URL("./node_modules/@earendil-works/pi-coding-agent/dist/bundle/chunks/", import.meta.url);
	const { readdirSync } = await import("node:fs");
	const changed = [];
	for (const name of readdirSync(chunks).filter((n) => n.endsWith(".js"))) {
		const url = new URL(name, chunks).href;
		ok(isBundleChunk(url), url);
		const source = readFileSync(new URL(name, chunks), "utf8");
		if (!mayNeedChange(source)) continue;
		const patched = patchBundleChunk(source, "file:///drop-in.js", "file:///extension.js");
		if (patched) changed.push({ sessionManager: patched.source.includes("var SessionManager=__piSessiondSessionManager;"), lock: patched.lockExtensionInline });
	}
	// Without the inline extension pi would load it by path, through its TypeScript loader (a tenth of a start).
	deepStrictEqual(
		{ sessionManager: changed.filter((c) => c.sessionManager).length, lock: changed.filter((c) => c.lock).length },
		{ sessionManager: 1, lock: 1 },
	);
});

test("pi on pi-sessiond keeps Node's compile cache apart from plain pi's, so neither compiles pi's changed chunk again after the other ran", async () => {
	// Both use Node's default place, under the temporary directory.
	const temp = mkdtempSync(join(tmpdir(), "compile-cache-"));
	const cache = join(temp, "node-compile-cache");
	const box = sandbox("compile-cache");
	const before = process.env.TMPDIR;
	process.env.TMPDIR = temp;
	try {
		const { readdirSync } = await import("node:fs");
		// The cache files in the Node version directories directly in `dir`, each with its bytes.
		const entries = (dir) =>
			readdirSync(dir, { withFileTypes: true })
				.filter((d) => d.isDirectory() && d.name.startsWith("v"))
				.flatMap((d) => readdirSync(join(dir, d.name)).map((f) => `${f} ${readFileSync(join(dir, d.name, f)).toString("base64")}`))
				.sort();
		equal((await printPi(box, { sessiond: false, args: ["hello"] })).code, 0);
		const plain = entries(cache);
		ok(plain.length > 0, "plain pi filled the cache");
		equal((await printPi(box, { sessiond: true, args: ["hello"] })).code, 0);
		// Sharing it, pi on pi-sessiond would have written its changed chunk over plain pi's entry for that file.
		ok(entries(cache).join("\n") === plain.join("\n"), "pi on pi-sessiond left plain pi's cache as it was");
		ok(entries(join(cache, "pi-sessiond")).length > 0, "pi on pi-sessiond has a cache of its own");
	} finally {
		if (before === undefined) delete process.env.TMPDIR;
		else process.env.TMPDIR = before;
	}
});
