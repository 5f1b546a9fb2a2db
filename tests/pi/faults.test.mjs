// Faults that cost nothing (issue 20), each with real pi 1.6.0 in RPC or print mode: a second pi told at open who
// holds the session and moved to a fork of it instead of hanging; a sidecar killed with SIGKILL during a tool call,
// or while a write is in flight, or stopped (SIGSTOP: hung, not dead), replaced with no entry lost or doubled; the write after a plain pi's appends
// continuing after them (pi #8177, #8300: the silent fork); and a plain pi with the package installed (`pi install`)
// refusing to write a session a pi on pi-sessiond holds.
import { execFileSync } from "node:child_process";
import { deepStrictEqual, equal, match, notEqual, ok } from "node:assert/strict";
import { appendFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, statSync, symlinkSync, truncateSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { descendants, normalise, PiSessionManager, printPi, readsOf, RpcPi, sandbox, sessionFiles, TuiPi } from "./lib.mjs";

const clientPackage = fileURLToPath(new URL("../../clients/typescript", import.meta.url));

/**
 * pi-sessiond-client installed for `box` as a pi user has it: the package's files in a `node_modules` (where its
 * extensions find the package by name), then `pi install` of it, which adds it to pi's settings.
 */
function installPackage(box) {
	const modules = join(box.root, "node_modules");
	const target = join(modules, "pi-sessiond-client");
	mkdirSync(join(target, "examples"), { recursive: true });
	for (const part of ["package.json", "dist", "examples/pi-extension"]) cpSync(join(clientPackage, part), join(target, part), { recursive: true });
	symlinkSync(join(clientPackage, "node_modules", "vscode-jsonrpc"), join(modules, "vscode-jsonrpc"));
	const env = { ...process.env, HOME: box.home, PI_CODING_AGENT_DIR: box.agentDir, PI_OFFLINE: "1" };
	execFileSync("pi", ["install", target], { cwd: box.cwd, env, stdio: "pipe" });
}

/** The pid holding the write lock (flock) of `file`, from the kernel's table, or undefined. */
function lockHolderPid(file) {
	const { dev, ino } = statSync(file, { bigint: true });
	const major = ((dev >> 8n) & 0xfffn) | ((dev >> 32n) & ~0xfffn);
	const minor = (dev & 0xffn) | ((dev >> 12n) & ~0xffn);
	for (const line of readFileSync("/proc/locks", "latin1").split("\n")) {
		const fields = line.trim().split(/\s+/);
		if (fields[1] !== "FLOCK" || fields[3] !== "WRITE") continue;
		const [maj, min, inode] = (fields[5] ?? "").split(":");
		if (BigInt(`0x${maj}`) === major && BigInt(`0x${min}`) === minor && BigInt(inode) === ino) return Number(fields[4]);
	}
	return undefined;
}

/** The pi-sessiond processes below `pid`. */
function sidecarsOf(pid) {
	return descendants(pid).filter((p) => {
		try {
			return readFileSync(`/proc/${p}/comm`, "utf8").trim() === "pi-sessiond";
		} catch {
			return false;
		}
	});
}

/** Waits (a bounded while) until `check` holds; fails with `what` if it never does. */
async function eventually(check, what) {
	const deadline = Date.now() + 30_000;
	while (!check()) {
		ok(Date.now() < deadline, what);
		await new Promise((resolve) => setTimeout(resolve, 20));
	}
}

/** Each line of `file` parsed, in file order (a line that is not JSON, a torn one, is left out). */
function lines(file) {
	return readFileSync(file, "utf8")
		.split("\n")
		.flatMap((line) => {
			try {
				return [JSON.parse(line)];
			} catch {
				return [];
			}
		});
}

/** The user messages' texts on the branch to `file`'s leaf, as pi reads it. */
function userTexts(file) {
	return PiSessionManager.open(file)
		.getBranch()
		.flatMap((e) => (e.type === "message" && e.message.role === "user" ? [e.message.content[0].text] : []));
}

test("a second pi on pi-sessiond in the TUI sees who holds the session above its editor, not above history out of sight (issue 20)", async () => {
	// pi's TUI puts what is said at session_start above the session's messages; with more of them than the screen
	// holds, the notice was never on screen.
	const box = sandbox("held-tui");
	const first = new RpcPi(box, { sessiond: true });
	for (let i = 0; i < 6; i++) await first.prompt(`message ${i} from the first pi`);
	const file = (await first.command({ type: "get_state" })).sessionFile;
	const flat = (screen) => screen.replace(/\s+/g, " ");
	const second = new TuiPi(box, { sessiond: true, args: ["--session", file], rows: 16 });
	try {
		const shown = await second.waitFor((s) => flat(s).includes(`being written by process ${first.pid}`));
		match(flat(shown), /Read it here; your next prompt continues in a new session forked from it/);
		match(flat(shown), /message 5 from the first pi/, "the notice is shown with the end of the history, not before it");
		second.type("hello from the second pi");
		const after = await second.waitFor((s) => flat(s).includes("Continuing in a new session forked from it"));
		ok(!flat(after).includes("Read it here"), "the notice above the editor goes once the user has typed");
	} finally {
		second.close();
	}
	// Nor does it outlive its session: a new one started before anything is typed does not show it.
	const third = new TuiPi(box, { sessiond: true, args: ["--session", file], rows: 16 });
	try {
		await third.waitFor((s) => flat(s).includes("Read it here"));
		third.type("/new");
		const fresh = await third.waitFor((s) => flat(s).includes("New session started"));
		ok(!flat(fresh).includes("Read it here"), flat(fresh));
	} finally {
		third.close();
	}
	equal(await first.close(), 0, first.stderr);
});

test("a pi whose session another pi on pi-sessiond writes between its open and its first write is not ended: that write goes to a fork (issue 20)", async () => {
	// pi's start-up write (the thinking level) is refused for the other pi's new lines, then for its lock: the
	// drop-in goes on after them and then forks away, where it used to throw and end pi.
	const box = sandbox("held-race");
	const first = new RpcPi(box, { sessiond: true });
	await first.prompt("hello from the first pi");
	const file = (await first.command({ type: "get_state" })).sessionFile;
	const { SessionManager: DropIn } = await import(new URL("../../clients/typescript/dist/pi/index.js", import.meta.url).href);
	const flag = Symbol.for("pi-sessiond-client.appendsWithoutWaiting");
	globalThis[flag] = true;
	try {
		const second = DropIn.open(file);
		await first.prompt("the first pi goes on");
		const before = readFileSync(file, "utf8");
		const level = second.appendThinkingLevelChange("high");
		notEqual(second.getSessionFile(), file, "the second writes another file");
		equal(readFileSync(file, "utf8"), before, "the held file is exactly as the first pi left it");
		equal(PiSessionManager.open(second.getSessionFile()).getHeader().parentSession, file);
		equal(second.getEntry(level).type, "thinking_level_change");
		await second.landed();
		deepStrictEqual(userTexts(second.getSessionFile()), ["hello from the first pi", "the first pi goes on"]);
	} finally {
		delete globalThis[flag];
	}
	equal(await first.close(), 0, first.stderr);
});

test("a second pi on pi-sessiond is told at open who holds the session, and its first prompt continues in a new session forked from it", async () => {
	const box = sandbox("held-open");
	const first = new RpcPi(box, { sessiond: true });
	await first.prompt("hello from the first pi");
	const file = (await first.command({ type: "get_state" })).sessionFile;
	const before = readFileSync(file, "utf8");

	const second = new RpcPi(box, { sessiond: true, args: ["--session", file] });
	// Told before anything is typed.
	const told = await second.notice((text) => text.includes(file));
	match(told, new RegExp(`being written by process ${first.pid} on \\S+: `));
	match(told, /your next prompt continues in a new session forked from it/);

	await second.prompt("hello from the second pi");
	const forked = (await second.command({ type: "get_state" })).sessionFile;
	notEqual(forked, file, "the second pi writes another file");
	ok(second.notices.some((n) => n.includes(`Continuing in a new session forked from it: ${forked}`)), second.notices.join("\n"));
	equal(readFileSync(file, "utf8"), before, "the held file is exactly as the first pi left it");
	equal(PiSessionManager.open(forked).getHeader().parentSession, file);
	deepStrictEqual(userTexts(forked), ["hello from the first pi", "hello from the second pi"]);

	await first.prompt("the first pi goes on");
	deepStrictEqual(userTexts(file), ["hello from the first pi", "the first pi goes on"]);
	equal(await second.close(), 0, second.stderr);
	equal(await first.close(), 0, first.stderr);
});

test("a second pi told at open that its prompt goes to a fork keeps that promise when the first pi's sidecar restarts meanwhile", async () => {
	const box = sandbox("held-open-restart");
	const first = new RpcPi(box, { sessiond: true });
	await first.prompt("hello from the first pi");
	const file = (await first.command({ type: "get_state" })).sessionFile;
	const second = new RpcPi(box, { sessiond: true, args: ["--session", file] });
	await second.notice((text) => text.includes(file) && /continues in a new session forked from it/.test(text));
	// The first pi's sidecar dies: its lock is free until the first pi's next write takes it again.
	const [sidecar] = sidecarsOf(first.pid);
	process.kill(sidecar, "SIGKILL");
	await eventually(() => !sidecarsOf(first.pid).includes(sidecar), "the first pi's sidecar is gone");

	await second.prompt("hello from the second pi");
	const forked = (await second.command({ type: "get_state" })).sessionFile;
	notEqual(forked, file, "the second pi writes a fork, as it was told");
	deepStrictEqual(userTexts(forked), ["hello from the first pi", "hello from the second pi"]);
	await first.prompt("the first pi goes on");
	equal((await first.command({ type: "get_state" })).sessionFile, file, "the first pi stays in its session");
	deepStrictEqual(userTexts(file), ["hello from the first pi", "the first pi goes on"]);
	ok(!first.notices.some((n) => /forked/.test(n)), first.notices.join("\n"));
	equal(await second.close(), 0, second.stderr);
	equal(await first.close(), 0, first.stderr);
});

test("a pi on pi-sessiond that resumes a session another pi writes is told at once, and writes a fork of it", async () => {
	const box = sandbox("held-resume");
	const first = new RpcPi(box, { sessiond: true });
	await first.prompt("hello from the first pi");
	const file = (await first.command({ type: "get_state" })).sessionFile;
	const before = readFileSync(file, "utf8");

	const second = new RpcPi(box, { sessiond: true });
	await second.prompt("a session of its own");
	const own = (await second.command({ type: "get_state" })).sessionFile;
	const mark = second.notices.length;
	await second.command({ type: "switch_session", sessionPath: file });
	match(await second.notice((text) => text.includes(file), mark), new RegExp(`being written by process ${first.pid} on \\S+: `));
	await second.prompt("after the resume");
	const forked = (await second.command({ type: "get_state" })).sessionFile;
	ok(forked !== file && forked !== own, "a new session");
	equal(readFileSync(file, "utf8"), before, "the held file is exactly as the first pi left it");
	deepStrictEqual(userTexts(forked), ["hello from the first pi", "after the resume"]);
	equal(await second.close(), 0, second.stderr);
	equal(await first.close(), 0, first.stderr);
});

/** A session with a tool call in its second prompt; `during` runs while the tool runs. */
async function toolCallRun(name, cwd, sessiond, during = async () => {}) {
	const box = sandbox(name, cwd);
	const pi = new RpcPi(box, { sessiond });
	await pi.prompt("hello");
	const marker = join(box.cwd, "tool-started");
	const turn = pi.prompt(`run touch ${marker} && sleep 1 && rm ${marker} && echo after`);
	await eventually(() => existsSync(marker), "the tool call started");
	await during(pi);
	await turn;
	await pi.prompt("after the tool call");
	const file = (await pi.command({ type: "get_state" })).sessionFile;
	equal(await pi.close(), 0, pi.stderr);
	return { file, reads: normalise(readsOf(file)) };
}

test("a sidecar killed with SIGKILL during a tool call costs no entry and no hang: the file is the one plain pi writes", async () => {
	const cwd = mkdtempSync(join(tmpdir(), "pi-real-kill-cwd-"));
	const plain = await toolCallRun("kill-plain", cwd, false);
	let killed;
	const delegated = await toolCallRun("kill-sessiond", cwd, true, async (pi) => {
		const sidecars = sidecarsOf(pi.pid);
		equal(sidecars.length, 1, "pi runs one sidecar");
		killed = sidecars[0];
		process.kill(killed, "SIGKILL");
		await eventually(() => sidecarsOf(pi.pid).length === 0 || sidecarsOf(pi.pid)[0] !== killed, "the killed sidecar is gone");
	});
	ok(killed !== undefined);
	deepStrictEqual(delegated.reads, plain.reads);
	deepStrictEqual(
		delegated.reads.entries.map((e) => (e.type === "message" ? e.message.role : e.type)),
		["model_change", "thinking_level_change", "system", "user", "assistant", "user", "assistant", "toolResult", "assistant", "user", "assistant"],
		"every entry of the run, the tool result written after the kill included",
	);
});

test("a sidecar that stops answering without dying (SIGSTOP) during a tool call is killed and replaced: no entry lost, no hang", async () => {
	const cwd = mkdtempSync(join(tmpdir(), "pi-real-stop-cwd-"));
	const plain = await toolCallRun("stop-plain", cwd, false);
	let stopped;
	const started = Date.now();
	const delegated = await toolCallRun("stop-sessiond", cwd, true, async (pi) => {
		const sidecars = sidecarsOf(pi.pid);
		equal(sidecars.length, 1, "pi runs one sidecar");
		stopped = sidecars[0];
		process.kill(stopped, "SIGSTOP");
		// Were the drop-in to wait on it for good, this ends the wait, so the test fails below instead of hanging.
		setTimeout(() => {
			try {
				process.kill(stopped, "SIGKILL");
			} catch {}
		}, 60_000).unref();
	});
	ok(stopped !== undefined);
	await eventually(() => !existsSync(`/proc/${stopped}`), "the stopped sidecar was killed and reaped");
	// Found hung after a probe goes unanswered (2 s of silence, then 5 s), not after pi's own timeouts.
	ok(Date.now() - started < 50_000, "the drop-in found the sidecar hung itself, before the test's own kill at 60 s");
	deepStrictEqual(delegated.reads, plain.reads);
	deepStrictEqual(
		delegated.reads.entries.map((e) => (e.type === "message" ? e.message.role : e.type)),
		["model_change", "thinking_level_change", "system", "user", "assistant", "user", "assistant", "toolResult", "assistant", "user", "assistant"],
		"every entry of the run, those written after the sidecar stopped included",
	);
});

test("a write in flight when the sidecar dies lands exactly once: the drop-in sees it landed and does not write it again", async () => {
	const cwd = mkdtempSync(join(tmpdir(), "pi-real-inflight-cwd-"));
	const box = sandbox("inflight", cwd);
	// A debug build's test hook: each sidecar writes its 3rd append whole, then aborts before answering it.
	const pi = new RpcPi(box, { sessiond: true, extraEnv: { PI_SESSIOND_TEST_DIE_AFTER: "3" } });
	await pi.prompt("hello");
	const first = sidecarsOf(pi.pid);
	await pi.prompt("run echo after");
	await pi.prompt("after the tool call");
	const file = (await pi.command({ type: "get_state" })).sessionFile;
	notEqual(sidecarsOf(pi.pid)[0], first[0], "the sidecar died (PI_SESSIOND_BIN must be a debug build) and another one runs");
	equal(await pi.close(), 0, pi.stderr);

	const plainBox = sandbox("inflight-plain", cwd);
	const plain = new RpcPi(plainBox, { sessiond: false });
	for (const text of ["hello", "run echo after", "after the tool call"]) await plain.prompt(text);
	const plainFile = (await plain.command({ type: "get_state" })).sessionFile;
	equal(await plain.close(), 0, plain.stderr);
	deepStrictEqual(normalise(readsOf(file)), normalise(readsOf(plainFile)));
	equal(new Set(lines(file).map((e) => e.id)).size, lines(file).length, "no entry twice");
});

test("after a plain pi's appends, what a pi on pi-sessiond appends next continues after them: nothing forks, nothing is lost (pi 8177, 8300)", async () => {
	const box = sandbox("silent-fork");
	const pi = new RpcPi(box, { sessiond: true });
	await pi.prompt("one");
	const file = (await pi.command({ type: "get_state" })).sessionFile;
	const plain = await printPi(box, { sessiond: false, args: ["--session", file, "from plain pi"] });
	equal(plain.code, 0, plain.stderr);

	// pi's appends of this prompt go on before the sidecar answers; the sidecar refuses the first (the file grew
	// under it), and the drop-in writes them again after the plain pi's entries, with the ids pi was given.
	await pi.prompt("two");
	await pi.prompt("two again");
	ok(pi.notices.some((n) => n.includes(file) && /appended to by another process/.test(n)), pi.notices.join("\n"));
	const ids = (await pi.command({ type: "get_entries" })).entries.map((e) => e.id);
	equal(await pi.close(), 0, pi.stderr);

	const entries = lines(file).filter((e) => e.type !== "session");
	// One line of descent: every entry is the child of the line before it, so nothing forked.
	entries.forEach((e, i) => equal(e.parentId, i === 0 ? null : entries[i - 1].id, `entry ${i} (${e.type}) continues the one before it`));
	deepStrictEqual(userTexts(file), ["one", "from plain pi", "two", "two again"]);
	ok(!entries.some((e) => e.type === "message" && e.message.stopReason === "error"), "no write failed");
	deepStrictEqual(
		entries.map((e) => e.id).filter((id) => ids.includes(id)),
		ids,
		"every entry pi holds is in the file, with the id pi was given",
	);
});

for (const [how, cut, kept] of [
	["truncated in place", (file, keep) => truncateSync(file, keep)],
	// A new file renamed over the old one; `keep` ends a line, so the line after the kept ones is the first deleted.
	["rewritten by sed -i", (file, keep) => execFileSync("sed", ["-i", "-e", `${readFileSync(file).subarray(0, keep).toString().split("\n").length},$d`, file])],
	// Nothing to fork: the new session holds every entry, and its header names the emptied file.
	["emptied", (file) => truncateSync(file, 0), "all"],
]) {
	test(`a session file ${how} under pi on pi-sessiond, losing its last entries, costs no prompt: pi goes on in a fork holding them`, async () => {
		const box = sandbox(`cut-${how.split(" ")[0]}`);
		const pi = new RpcPi(box, { sessiond: true });
		await pi.prompt("one");
		const file = (await pi.command({ type: "get_state" })).sessionFile;
		const afterOne = readFileSync(file).length;
		await pi.prompt("two");
		// Another program takes "two" and its answer out of the file (an editor's save, a backup put back).
		cut(file, afterOne);
		const cutFile = readFileSync(file, "utf8");
		await pi.prompt("three");
		await pi.prompt("four");
		const texts = (await pi.command({ type: "get_messages" })).messages
			.filter((m) => m.role !== "system")
			.map((m) => m.errorMessage ?? m.content.map((c) => c.text).join(""));
		deepStrictEqual(texts, ["one", "echo: one", "two", "echo: two", "three", "echo: three", "four", "echo: four"], "pi kept every prompt and answer");
		const fork = (await pi.command({ type: "get_state" })).sessionFile;
		equal(await pi.close(), 0, pi.stderr);
		notEqual(fork, file, "pi went on in another file");
		const said = kept === "all" ? /was emptied or overwritten by another program/ : /no longer holds this pi's last 2 entries/;
		ok(pi.notices.some((n) => n.includes(file) && n.includes(fork) && said.test(n)), pi.notices.join("\n"));
		if (kept === "all") equal(lines(fork)[0].parentSession, file, "the new session names the emptied file");
		equal(readFileSync(file, "utf8"), cutFile, "the file the other program changed is left as it left it");
		deepStrictEqual(userTexts(fork), ["one", "two", "three", "four"], "the fork holds the whole conversation");
		const entries = lines(fork).filter((e) => e.type !== "session");
		entries.forEach((e, i) => equal(e.parentId, i === 0 ? null : entries[i - 1].id, `entry ${i} (${e.type}) continues the one before it`));
	});
}

test("a line another writer is still writing, a byte at a time, as pi on pi-sessiond prompts costs no prompt: they continue after it", async () => {
	const box = sandbox("slow-line");
	const pi = new RpcPi(box, { sessiond: true });
	await pi.prompt("first");
	const file = (await pi.command({ type: "get_state" })).sessionFile;
	const last = lines(file).at(-1).id;
	const raw = `${JSON.stringify({ type: "message", id: "0000raw1", parentId: last, timestamp: new Date().toISOString(), message: { role: "user", content: [{ type: "text", text: "from a slow writer" }], timestamp: Date.now() } })}\n`;
	// About a second for the line: 40 bytes, then a byte every 4 ms.
	const writer = (async () => {
		appendFileSync(file, raw.slice(0, 40));
		for (let i = 40; i < raw.length; i++) {
			await new Promise((resolve) => setTimeout(resolve, 4));
			appendFileSync(file, raw[i]);
		}
	})();
	await new Promise((resolve) => setTimeout(resolve, 100));
	await pi.prompt("second");
	await writer;
	await pi.prompt("third");
	const texts = (await pi.command({ type: "get_messages" })).messages.filter((m) => m.role !== "system").map((m) => m.errorMessage ?? m.content.map((c) => c.text).join(""));
	deepStrictEqual(texts, ["first", "echo: first", "second", "echo: second", "third", "echo: third"], "pi kept every prompt and answer");
	equal(await pi.close(), 0, pi.stderr);
	deepStrictEqual(userTexts(file), ["first", "from a slow writer", "second", "third"]);
	const entries = lines(file).filter((e) => e.type !== "session");
	entries.forEach((e, i) => equal(e.parentId, i === 0 ? null : entries[i - 1].id, `entry ${i} (${e.type}) continues the one before it`));
});

test("after the sidecar died while pi was idle and a plain pi appended, pi on pi-sessiond's next prompt continues after them and says so", async () => {
	const box = sandbox("kill-then-plain");
	const pi = new RpcPi(box, { sessiond: true });
	await pi.prompt("one");
	const file = (await pi.command({ type: "get_state" })).sessionFile;
	const [sidecar] = sidecarsOf(pi.pid);
	process.kill(sidecar, "SIGKILL");
	await eventually(() => !sidecarsOf(pi.pid).includes(sidecar), "the killed sidecar is gone");
	// The new sidecar opens the file with these lines in it: no notification tells the drop-in about them.
	const plain = await printPi(box, { sessiond: false, args: ["--session", file, "from plain pi"] });
	equal(plain.code, 0, plain.stderr);
	await pi.prompt("two");
	ok(pi.notices.some((n) => n.includes(file) && /appended to by another process/.test(n)), pi.notices.join("\n"));
	equal(await pi.close(), 0, pi.stderr);
	const entries = lines(file).filter((e) => e.type !== "session");
	entries.forEach((e, i) => equal(e.parentId, i === 0 ? null : entries[i - 1].id, `entry ${i} (${e.type}) continues the one before it`));
	deepStrictEqual(userTexts(file), ["one", "from plain pi", "two"]);
});

test("a sidecar killed before each of eight prompts in a minute, each after serving one, costs no prompt", async () => {
	const box = sandbox("kill-every-prompt");
	const pi = new RpcPi(box, { sessiond: true });
	await pi.prompt("hello 0");
	const file = (await pi.command({ type: "get_state" })).sessionFile;
	for (let i = 1; i <= 8; i++) {
		const [sidecar] = sidecarsOf(pi.pid);
		ok(sidecar !== undefined, `a sidecar was started again for prompt ${i - 1}`);
		process.kill(sidecar, "SIGKILL");
		await eventually(() => !sidecarsOf(pi.pid).includes(sidecar), `the sidecar killed before prompt ${i} is gone`);
		// A prompt whose write failed leaves pi on "Working" for ever: bounded, so that fails rather than hangs.
		const settled = await Promise.race([pi.prompt(`hello ${i}`).then(() => true), new Promise((resolve) => setTimeout(resolve, 30_000, false))]);
		ok(settled, `prompt ${i} settled`);
	}
	const messages = (await pi.command({ type: "get_messages" })).messages;
	deepStrictEqual(
		messages.filter((m) => m.role === "assistant").map((m) => m.errorMessage ?? m.content.map((c) => c.text).join("")),
		Array.from({ length: 9 }, (_, i) => `echo: hello ${i}`),
		"no prompt answered with the sidecar's death",
	);
	equal(await pi.close(), 0, pi.stderr);
	deepStrictEqual(userTexts(file), Array.from({ length: 9 }, (_, i) => `hello ${i}`));
	const entries = lines(file).filter((e) => e.type !== "session");
	entries.forEach((e, i) => equal(e.parentId, i === 0 ? null : entries[i - 1].id, `entry ${i} (${e.type}) continues the one before it`));
});

test("a sidecar stopped (SIGSTOP) while pi is idle does not outlive pi holding the session's lock", async () => {
	const box = sandbox("stopped-idle");
	const pi = new RpcPi(box, { sessiond: true });
	await pi.prompt("hello");
	const file = (await pi.command({ type: "get_state" })).sessionFile;
	const [sidecar] = sidecarsOf(pi.pid);
	process.kill(sidecar, "SIGSTOP");
	try {
		equal(await pi.close(), 0, pi.stderr);
		await eventually(() => !existsSync(`/proc/${sidecar}`) || readFileSync(`/proc/${sidecar}/stat`, "latin1").includes(") Z "), "the stopped sidecar ended once pi had");
		const again = await printPi(box, { sessiond: true, args: ["--session", file, "again"] });
		equal(again.code, 0, again.stderr);
		equal(again.stderr, "", "nobody holds the session any more: no notice, no fork");
		deepStrictEqual(userTexts(file), ["hello", "again"]);
	} finally {
		try {
			process.kill(sidecar, "SIGKILL");
		} catch {
			// Gone, as it should be.
		}
	}
});

test("a sidecar stopped (SIGSTOP) while pi is idle ends when pi is killed with SIGKILL, and frees the session", async () => {
	const box = sandbox("stopped-then-pi-killed");
	const pi = new RpcPi(box, { sessiond: true, viaLauncher: true });
	await pi.prompt("hello");
	const file = (await pi.command({ type: "get_state" })).sessionFile;
	const [sidecar] = sidecarsOf(pi.pid);
	process.kill(sidecar, "SIGSTOP");
	process.kill(pi.pid, "SIGKILL");
	try {
		await eventually(() => !existsSync(`/proc/${sidecar}`) || readFileSync(`/proc/${sidecar}/stat`, "latin1").includes(") Z "), "the stopped sidecar ended once pi was killed");
		const again = await printPi(box, { sessiond: true, args: ["--session", file, "again"] });
		equal(again.code, 0, again.stderr);
		equal(again.stderr, "", "nobody holds the session any more: no notice, no fork");
		deepStrictEqual(userTexts(file), ["hello", "again"]);
	} finally {
		try {
			process.kill(sidecar, "SIGKILL");
		} catch {
			// Gone, as it should be.
		}
	}
});

test("a sidecar killed while pi reads a big session's pages at start-up is replaced and the session read again", async () => {
	for (const delayMs of [60, 100, 140, 180]) {
		const box = sandbox(`big-open-kill-${delayMs}`);
		// 3,000 entries: pages enough that the kill lands while they are read.
		const writer = PiSessionManager.create(box.cwd, join(box.agentDir, "sessions", "big"));
		for (let i = 0; i < 1500; i++) {
			writer.appendMessage({ role: "user", content: [{ type: "text", text: `old ${i}` }], timestamp: 1 });
			writer.appendMessage({ role: "assistant", content: [{ type: "text", text: `echo: old ${i}` }], api: "faux", provider: "faux", model: "faux-1", usage: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, totalTokens: 0, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } }, stopReason: "stop", timestamp: 2 });
		}
		const file = writer.getSessionFile();
		const before = new Set(sidecarsOf(process.pid));
		const run = printPi(box, { sessiond: true, args: ["--session", file, "new prompt"] });
		let sidecar;
		await eventually(() => (sidecar = sidecarsOf(process.pid).find((p) => !before.has(p))) !== undefined, "pi's sidecar started");
		await new Promise((resolve) => setTimeout(resolve, delayMs));
		process.kill(sidecar, "SIGKILL");
		const { code, stdout, stderr } = await run;
		equal(code, 0, `killed after ${delayMs} ms: ${stderr}`);
		equal(stderr, "", `killed after ${delayMs} ms: nothing to say`);
		match(stdout, /echo: new prompt/);
		const texts = userTexts(file);
		equal(texts.length, 1501, `killed after ${delayMs} ms: every prompt`);
		equal(texts.at(-1), "new prompt");
		const entries = lines(file).filter((e) => e.type !== "session");
		entries.forEach((e, i) => equal(e.parentId, i === 0 ? null : entries[i - 1].id, `killed after ${delayMs} ms: entry ${i} continues the one before it`));
	}
});

test("a sidecar killed while pi starts costs no entry and no stack trace, whether pi's new session was made yet or not", async () => {
	for (const delayMs of [0, 100, 200, 300, 400]) {
		const box = sandbox(`start-kill-${delayMs}`);
		const run = printPi(box, { sessiond: true, args: ["run echo hi"] });
		// The first sidecar below this test's process that is not an earlier run's: pi's, as soon as it exists.
		const before = new Set(sidecarsOf(process.pid));
		let sidecar;
		await eventually(() => (sidecar = sidecarsOf(process.pid).find((p) => !before.has(p))) !== undefined, "pi's sidecar started");
		await new Promise((resolve) => setTimeout(resolve, delayMs));
		process.kill(sidecar, "SIGKILL");
		const { code, stdout, stderr } = await run;
		equal(code, 0, `killed after ${delayMs} ms: ${stderr}`);
		equal(stderr, "", `killed after ${delayMs} ms: nothing to say`);
		match(stdout, /done: bash/);
		const files = sessionFiles(box.agentDir);
		equal(files.length, 1, `killed after ${delayMs} ms: one session`);
		const [file] = files;
		ok(file.endsWith(`_${lines(file)[0].id}.jsonl`), `killed after ${delayMs} ms: the file holds the session its name says`);
		const entries = lines(file).filter((e) => e.type !== "session");
		deepStrictEqual(
			entries.map((e) => (e.type === "message" ? e.message.role : e.type)),
			["model_change", "thinking_level_change", "system", "user", "assistant", "toolResult", "assistant"],
			`killed after ${delayMs} ms: every entry of the run`,
		);
		entries.forEach((e, i) => equal(e.parentId, i === 0 ? null : entries[i - 1].id, `killed after ${delayMs} ms: entry ${i} continues the one before it`));
	}
});

test("a sidecar killed while its pi is idle leaves no gap in the lock: a plain pi with the package installed is still refused", async () => {
	const box = sandbox("relock");
	installPackage(box);
	const holder = new RpcPi(box, { sessiond: true });
	await holder.prompt("hello from pi on pi-sessiond");
	const file = (await holder.command({ type: "get_state" })).sessionFile;
	const [sidecar] = sidecarsOf(holder.pid);
	process.kill(sidecar, "SIGKILL");
	// Without a call from pi, the next sidecar takes the lock back.
	await eventually(() => {
		const next = sidecarsOf(holder.pid).find((p) => p !== sidecar);
		return next !== undefined && lockHolderPid(file) === next;
	}, "a new sidecar of the holder holds the session's lock");
	await refusedInPrintMode(box, file, holder);
	await goesOn(holder, file);
	const entries = lines(file).filter((e) => e.type !== "session");
	entries.forEach((e, i) => equal(e.parentId, i === 0 ? null : entries[i - 1].id, `entry ${i} (${e.type}) continues the one before it`));
});

test("a plain pi with the package installed refuses to write a session a pi on pi-sessiond holds, naming it", async () => {
	const box = sandbox("installed");
	installPackage(box);
	const holder = new RpcPi(box, { sessiond: true });
	await holder.prompt("hello from pi on pi-sessiond");
	const file = (await holder.command({ type: "get_state" })).sessionFile;
	const before = readFileSync(file, "utf8");

	const plain = new RpcPi(box, { sessiond: false, args: ["--session", file] });
	const told = await plain.notice((text) => text.includes(file));
	match(told, new RegExp(`being written by process ${holder.pid} on \\S+: .*this pi does not write to it`));
	await plain.prompt("hello from plain pi");
	await plain.command({ type: "set_session_name", name: "renamed by plain pi" }).then(
		() => ok(false, "the rename was refused"),
		(error) => match(error.message, new RegExp(`being written by process ${holder.pid}\\b`)),
	);
	equal(await plain.close(), 0, plain.stderr);
	equal(readFileSync(file, "utf8"), before, "plain pi wrote nothing");

	await refusedInPrintMode(box, file, holder);
	await goesOn(holder, file);
});

/** A plain pi in print mode (the package installed in `box`) is refused `file`, which `holder` holds, naming it. */
async function refusedInPrintMode(box, file, holder) {
	const before = readFileSync(file, "utf8");
	const printed = await printPi(box, { sessiond: false, args: ["--session", file, "hello from a script"] });
	equal(printed.code, 1, "print mode fails");
	match(printed.stderr, new RegExp(`being written by process ${holder.pid}\\b`));
	equal(printed.stderr.split("being written by").length, 2, `said once: ${printed.stderr}`);
	// Not the session's previous answer, printed as if it were this prompt's (a script reads stdout).
	equal(printed.stdout, "", "nothing on stdout");
	equal(readFileSync(file, "utf8"), before, "plain pi wrote nothing");
}

/** The holder prompts once more and quits: its file holds its two prompts and nothing else. */
async function goesOn(holder, file) {
	await holder.prompt("pi on pi-sessiond goes on");
	equal(await holder.close(), 0, holder.stderr);
	deepStrictEqual(userTexts(file), ["hello from pi on pi-sessiond", "pi on pi-sessiond goes on"]);
}
