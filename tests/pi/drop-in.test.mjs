// The drop-in against pi's own SessionManager, in one process: the same operations on a persisted session give the
// same return values and reads (ids and times aside, which pi-sessiond makes), the live instance equals pi's live
// instance value for value (undefined members included: entries are rebuilt in pi's in-memory shape), and listings
// of one directory are identical, Dates and all; and the module has every export and public method of pi's.
import { deepStrictEqual, equal, match, ok, throws } from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { normalise, PiSessionManager, readsOfManager } from "./lib.mjs";

const { SessionManager: DropIn, buildSessionContext } = await import(new URL("../../clients/typescript/dist/pi/index.js", import.meta.url).href);
const { openAhead } = await import(new URL("../../clients/typescript/dist/pi/session-manager.js", import.meta.url).href);
const { bridge } = await import(new URL("../../clients/typescript/dist/pi/bridge.js", import.meta.url).href);
const { firstOpenOf } = await import(new URL("../../clients/typescript/dist/pi/ahead.js", import.meta.url).href);

const user = (text) => ({ role: "user", content: text, timestamp: 1 });
const assistant = (text) => ({ role: "assistant", content: [{ type: "text", text }], provider: "p", model: "m", usage: { input: 1 }, timestamp: 2 });

/** A scenario over every mutation; returns what each step returned and the reads after it. */
function scenario(Manager, dir) {
	const log = [];
	const m = Manager.create("/work/project", dir);
	const step = (name, f) => {
		let value;
		try {
			value = f();
		} catch (error) {
			value = { error: error.message };
		}
		log.push({ name, value, ...readsOfManager(m) });
		return value;
	};
	step("model", () => m.appendModelChange("p", "m"));
	step("thinking", () => m.appendThinkingLevelChange("high"));
	const u1 = step("user", () => m.appendMessage(user("first")));
	const a1 = step("assistant", () => m.appendMessage(assistant("answer")));
	step("label", () => m.appendLabelChange(u1, "start"));
	step("custom", () => m.appendCustomEntry("state", { n: 1 }));
	step("custom without data", () => m.appendCustomEntry("bare"));
	step("custom message", () => m.appendCustomMessageEntry("note", "hidden", false));
	step("usage", () => m.appendUsage("cache_warm", "p", "m", { input: 3 }, ""));
	step("context edit", () => m.appendContextEdit(a1, { content: "edited" }));
	step("context edit off the branch", () => m.appendContextEdit("nope", null));
	step("compaction", () => m.appendCompaction("summary", u1, 10));
	step("branch", () => m.branch(u1));
	step("branch to nothing", () => m.branch("missing"));
	step("after branch", () => m.appendMessage(user("second branch")));
	step("branch summary", () => m.branchWithSummary(a1, "left", { why: 1 }));
	step("name", () => m.appendSessionInfo("  a\nname  "));
	step("clear label", () => m.appendLabelChange(u1, undefined));
	step("reset leaf", () => m.resetLeaf());
	step("new root", () => m.appendMessage(user("another root")));
	step("branched session", () => m.createBranchedSession(a1));
	step("in the branched session", () => m.appendMessage(user("after branching")));
	step("new session", () => m.newSession({ parentSession: "/x.jsonl" }));
	step("in the new session", () => m.appendMessage(user("fresh")));
	return log;
}

test("the drop-in returns and reads what pi's SessionManager returns and reads, step by step", () => {
	const pi = scenario(PiSessionManager, mkdtempSync(join(tmpdir(), "dropin-pi-")));
	const ours = scenario(DropIn, mkdtempSync(join(tmpdir(), "dropin-ours-")));
	equal(ours.length, pi.length);
	for (let i = 0; i < pi.length; i++) deepStrictEqual(normalise(ours[i]), normalise(pi[i]), pi[i].name);
});

test("the drop-in's entries are pi's in-memory objects: the caller's message, undefined members kept", () => {
	const m = DropIn.create("/work/project", mkdtempSync(join(tmpdir(), "dropin-shape-")));
	const message = user("kept as given");
	const id = m.appendMessage(message);
	equal(m.getEntry(id).message, message, "the same object, as pi keeps it");
	const custom = m.getEntry(m.appendCustomEntry("bare"));
	deepStrictEqual(Object.keys(custom), ["type", "customType", "data", "id", "parentId", "timestamp"]);
	throws(() => m.appendLabelChange("missing", "x"), /Entry missing not found/);
	equal(buildSessionContext(m.getEntries()).messages[0], message);
});

test("list and listAll of one directory are pi's, Dates and key order included", async () => {
	const dir = mkdtempSync(join(tmpdir(), "dropin-list-"));
	for (const cwd of ["/work/a", "/work/b"]) {
		const m = PiSessionManager.create(cwd, dir);
		m.appendMessage(user(`hello from ${cwd}`));
		m.appendMessage(assistant("hi"));
		m.appendSessionInfo(cwd === "/work/a" ? "named" : "");
	}
	deepStrictEqual(await DropIn.listAll(dir), await PiSessionManager.listAll(dir));
	deepStrictEqual(await DropIn.list("/work/a", dir), await PiSessionManager.list("/work/a", dir));
	deepStrictEqual(DropIn.findById("/work/a", (await PiSessionManager.list("/work/a", dir))[0].id, dir), (await PiSessionManager.list("/work/a", dir))[0].path);
});

test("the drop-in module exports everything pi's session-manager module exports", async () => {
	const piModule = await import(new URL("./node_modules/@earendil-works/pi-coding-agent/dist/core/session-manager.js", import.meta.url).href);
	const ours = await import(new URL("../../clients/typescript/dist/pi/index.js", import.meta.url).href);
	for (const name of Object.keys(piModule)) equal(typeof ours[name], typeof piModule[name], name);
	for (const name of Object.getOwnPropertyNames(PiSessionManager)) {
		if (!["length", "name", "prototype"].includes(name)) equal(typeof DropIn[name], typeof PiSessionManager[name], `static ${name}`);
	}
	// pi's declarations say which members are private (its internals); every other one must be there.
	const declarations = readFileSync(new URL("./node_modules/@earendil-works/pi-coding-agent/dist/core/session-manager.d.ts", import.meta.url), "utf8");
	const privates = new Set([...declarations.matchAll(/^\s+private (\w+)/gm)].map((m) => m[1]));
	ok(privates.has("_appendEntry"), "pi's private members were found");
	for (const name of Object.getOwnPropertyNames(PiSessionManager.prototype)) {
		if (privates.has(name)) continue;
		const inherited = (proto) => (proto ? Object.getOwnPropertyNames(proto).includes(name) || inherited(Object.getPrototypeOf(proto)) : false);
		equal(inherited(DropIn.prototype), true, `method ${name}`);
	}
});

test("a refused write says why: another process's appends (then a retry goes on after them), or a file gone", () => {
	const dir = mkdtempSync(join(tmpdir(), "dropin-refused-"));
	const m = DropIn.create("/work/project", dir);
	m.appendMessage(user("mine"));
	const file = m.getSessionFile();
	const other = PiSessionManager.open(file, dir);
	const theirs = other.appendMessage(user("pi, without the sidecar"));
	throws(() => m.appendMessage(user("refused")), (e) => e.kind === "content_modified" && /appended to by another process/.test(e.message));
	ok(m.getEntry(theirs), "the other process's entry joined the session");
	m.appendMessage(user("retried"));

	renameSync(file, `${file}.aside`);
	mkdirSync(file);
	throws(
		() => m.appendMessage(user("nowhere to go")),
		(e) => e.kind === "content_modified" && !/appended to/.test(e.message) && e.message.includes(file),
	);
});

test("in-memory session ids are UUID v7s of the current time that sort in the order they were made, as pi's", () => {
	const before = Date.now();
	const ids = Array.from({ length: 3000 }, () => DropIn.inMemory("/work").getSessionId());
	const after = Date.now();
	for (const id of ids) ok(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(id), id);
	deepStrictEqual([...ids].sort(), ids, "made in order, sorted in order");
	equal(new Set(ids).size, ids.length);
	const ms = (id) => Number.parseInt(id.replaceAll("-", "").slice(0, 12), 16);
	// Within a millisecond the counter may carry into the next, so the last id can run a little ahead of the clock.
	ok(ms(ids[0]) >= before && ms(ids.at(-1)) <= after + ids.length / 2048 + 1, `${ms(ids[0])}..${ms(ids.at(-1))} vs ${before}..${after}`);
});

/** A session pi writes with images and long texts, a label, a branch left with a summary and a compaction. */
function longStringsSession(dir) {
	const image = Buffer.alloc(30_000, 7).toString("base64");
	const m = PiSessionManager.create("/work/project", dir);
	const ids = [];
	for (let t = 0; t < 6; t++) {
		ids.push(m.appendMessage({ role: "user", content: [{ type: "text", text: `turn ${t} ${"x".repeat(3000)}` }, { type: "image", data: image, mimeType: "image/png" }], timestamp: t }));
		m.appendMessage({ ...assistant("y".repeat(2000 + t)), usage: { input: t, output: 1 } });
	}
	// Long strings that are not their literal's bytes (read through JSON), beside the plain ASCII ones above.
	const unusual = ["é".repeat(1500), "line\n".repeat(400), 'a "quote" and a \\ backslash '.repeat(60), "\u007f".repeat(2000), "tab\there ".repeat(200), "😀".repeat(600), "\u2028".repeat(700)];
	m.appendMessage({ role: "user", content: unusual.map((text) => ({ type: "text", text })), timestamp: 7 });
	// Long strings where a model's tool call may put them: two in one object, one in an array, one under a key
	// JavaScript treats specially, one in an object inside another that has one.
	const args = JSON.parse(`{"__proto__": "${"p".repeat(1500)}", "edits": ["${"e".repeat(1200)}", "short"], "oldText": "${"o".repeat(1100)}", "newText": "${"n".repeat(1300)}", "nested": {"text": "${"t".repeat(1400)}", "n": 1}, "after": true}`);
	m.appendMessage({ ...assistant("calling"), content: [{ type: "toolCall", id: "call-long", name: "edit", arguments: args }] });
	m.appendLabelChange(ids[1], "a label");
	const leaf = m.getLeafId();
	m.appendMessage(user("abandoned"));
	m.branchWithSummary(leaf, `left: ${"z".repeat(5000)}`);
	m.appendCompaction(`summary ${"s".repeat(4000)}`, ids[4], 100);
	m.appendMessage(user("after"));
	return m.getSessionFile();
}

test("a session with long strings opened by the drop-in reads as pi's, strings, key order and all (issue 20)", () => {
	const dir = mkdtempSync(join(tmpdir(), "drop-in-lazy-"));
	const file = longStringsSession(dir);
	const pi = readsOfManager(PiSessionManager.open(file));
	const drop = DropIn.open(file);
	// Until read, an image's data stays in the file: the drop-in holds a getter, not the string.
	const image = drop.getEntries()[0].message.content[1];
	ok(typeof Object.getOwnPropertyDescriptor(image, "data").get === "function", "the image data is read when touched");
	const ours = readsOfManager(drop);
	deepStrictEqual(ours, pi);
	equal(JSON.stringify(ours), JSON.stringify(pi));
	deepStrictEqual(structuredClone(drop.getEntries()), structuredClone(PiSessionManager.open(file).getEntries()));
	// A member pi assigns holds what was assigned, as on pi's objects.
	const entry = drop.getEntries().find((e) => e.type === "compaction");
	entry.summary = "replaced";
	equal(drop.getEntry(entry.id).summary, "replaced");
	drop.close();
});

test("objects holding strings left in the file keep V8's fast shape and share one getter per key (issue 20)", () => {
	// An object turned into a dictionary, and a getter of its own per string, had made the 128 MB session's
	// entries take 51.5 MiB of pi's heap where its strings left out of them saved far less.
	const dir = mkdtempSync(join(tmpdir(), "drop-in-lazy-shape-"));
	const file = longStringsSession(dir);
	const script = `
		const { SessionManager } = await import(${JSON.stringify(new URL("../../clients/typescript/dist/pi/index.js", import.meta.url).href)});
		const entries = SessionManager.open(${JSON.stringify(file)}).getEntries();
		const holders = [];
		const walk = (value) => {
			if (typeof value !== "object" || value === null) return;
			const lazy = Object.keys(value).filter((key) => Object.getOwnPropertyDescriptor(value, key).get);
			if (lazy.length && !Array.isArray(value)) holders.push({ lazy, fast: %HasFastProperties(value), getters: lazy.map((key) => Object.getOwnPropertyDescriptor(value, key).get) });
			for (const key of Object.keys(value)) if (!Object.getOwnPropertyDescriptor(value, key).get) walk(value[key]);
		};
		entries.forEach(walk);
		const byKey = new Map();
		for (const h of holders) h.lazy.forEach((key, i) => byKey.set(key, [...(byKey.get(key) ?? []), h.getters[i]]));
		process.stdout.write(JSON.stringify({
			holders: holders.length,
			slow: holders.filter((h) => !h.fast).map((h) => h.lazy),
			getters: Object.fromEntries([...byKey].map(([key, getters]) => [key, [getters.length, new Set(getters).size]])),
		}));
		process.exit(0);
	`;
	const out = JSON.parse(execFileSync(process.execPath, ["--allow-natives-syntax", "--input-type=module", "-e", script], { encoding: "utf8", env: process.env }));
	ok(out.holders >= 8, `the session holds objects with strings left in the file: ${JSON.stringify(out)}`);
	deepStrictEqual(out.slow, [], "every object holding a lazy member has fast properties");
	for (const [key, [count, distinct]] of Object.entries(out.getters)) equal(distinct, 1, `the ${count} lazy members named ${key} share one getter`);
	ok(out.getters.text[0] >= 4, "several texts are lazy");
});

test("a session of several pages opened by the drop-in reads as pi's, whether its last page is full or not (issue 20)", () => {
	// The drop-in reads entries a thousand to a page, two pages asked for ahead of the one it takes.
	for (const count of [1999, 2000, 3001]) {
		const dir = mkdtempSync(join(tmpdir(), "drop-in-pages-"));
		const m = PiSessionManager.create("/work/project", dir);
		let root;
		for (let i = 0; i < count; i++) {
			// Back to the first entry every 40: a tree of short branches, which the reads' deep comparison can walk.
			if (i % 40 === 39) m.branch(root);
			const id = i % 500 === 7 ? m.appendMessage(user(`long ${i} ${"x".repeat(3000)}`)) : m.appendMessage(i % 2 ? assistant(`reply ${i}`) : user(`ask ${i}`));
			root ??= id;
		}
		const file = m.getSessionFile();
		const pi = readsOfManager(PiSessionManager.open(file));
		const drop = DropIn.open(file);
		equal(drop.getEntries().length, count);
		deepStrictEqual(readsOfManager(drop), pi);
		drop.close();
	}
});

test("a session opened ahead of pi is what pi's open of it reads, unless another writer changed it meanwhile (issue 20)", async () => {
	// pi-sessiond-pi opens the session pi's arguments name while pi loads; pi's open then takes that answer, the
	// pages beyond those read ahead read as usual. A file another writer appended to in between is opened again,
	// so pi reads those lines and its first write goes on after them, as without the open ahead.
	const cwd = mkdtempSync(join(tmpdir(), "drop-in-ahead-cwd-"));
	const m = PiSessionManager.create(cwd, mkdtempSync(join(tmpdir(), "drop-in-ahead-")));
	let root;
	for (let i = 0; i < 4500; i++) {
		// Back to the first entry every 40: short branches, which the reads' deep comparison can walk.
		if (i % 40 === 39) m.branch(root);
		const id = m.appendMessage(i % 2 ? assistant(`reply ${i}`) : user(`ask ${i} ${i % 700 === 2 ? "y".repeat(2000) : ""}`));
		root ??= id;
	}
	const file = m.getSessionFile();
	const first = firstOpenOf(["--mode", "rpc", "--session", file], cwd);
	deepStrictEqual(first, { path: file, sessionDir: dirname(file), cwd });

	const ahead = await openAhead(first);
	const drop = DropIn.open(file);
	equal(drop.handle, ahead, "pi's open took the handle opened ahead");
	deepStrictEqual(readsOfManager(drop), readsOfManager(PiSessionManager.open(file)), "all 4,500 entries, as pi reads them");
	drop.close();

	const again = await openAhead(first);
	const theirs = PiSessionManager.open(file).appendMessage(user("a plain pi, after the open ahead"));
	const fresh = DropIn.open(file);
	match(bridge().call("session/getState", { handle: again }).error?.message ?? "still open", /no open session has handle/);
	deepStrictEqual(readsOfManager(fresh), readsOfManager(PiSessionManager.open(file)), "the other writer's line read at pi's open");
	const mine = fresh.appendMessage(user("mine"));
	equal(fresh.getEntry(mine).parentId, theirs);
	fresh.close();
});

test("a session opened ahead that pi does not open is closed at pi's first other open or new session (issue 20)", async () => {
	const cwd = mkdtempSync(join(tmpdir(), "drop-in-ahead-cwd-"));
	const dir = mkdtempSync(join(tmpdir(), "drop-in-ahead-"));
	const made = (text) => {
		const m = PiSessionManager.create(cwd, dir);
		m.appendMessage(user(text));
		m.appendMessage(assistant(`re: ${text}`));
		return m.getSessionFile();
	};
	const guessed = made("the session pi's arguments named");
	const other = made("the one pi opened instead");
	// The handle opened ahead is closed: pi-sessiond no longer knows it.
	const closed = (handle) => bridge().call("session/getState", { handle }).error?.message ?? "still open";

	const ahead = await openAhead(firstOpenOf(["--session", guessed], cwd));
	ok(bridge().call("session/getState", { handle: ahead }).result, "open ahead");
	deepStrictEqual(readsOfManager(DropIn.open(other)), readsOfManager(PiSessionManager.open(other)));
	match(closed(ahead), /no open session has handle/);

	const again = await openAhead(firstOpenOf(["--session", guessed], cwd));
	DropIn.create(cwd, dir).appendMessage(user("a new session instead"));
	match(closed(again), /no open session has handle/);

	// The same file with a session directory of pi's own (its settings'): opened afresh, with that directory.
	const elsewhere = mkdtempSync(join(tmpdir(), "drop-in-ahead-elsewhere-"));
	const third = await openAhead(firstOpenOf(["--session", guessed], cwd));
	const m = DropIn.open(guessed, elsewhere);
	match(closed(third), /no open session has handle/);
	equal(m.getSessionDir(), elsewhere);
	deepStrictEqual(readsOfManager(m), readsOfManager(PiSessionManager.open(guessed, elsewhere)));
});

test("a session whose recorded cwd is gone, opened again in the user's cwd while the first manager lives, has that cwd, as pi's", () => {
	// pi's start-up when the session's cwd was deleted: open, ask the user, open again with the cwd as override.
	const dir = mkdtempSync(join(tmpdir(), "drop-in-gone-cwd-"));
	const gone = join(dir, "gone");
	mkdirSync(gone);
	const made = PiSessionManager.create(gone, dir);
	made.appendMessage(user("from a directory since deleted"));
	made.appendMessage(assistant("answer"));
	const file = made.getSessionFile();
	rmdirSync(gone);
	const here = mkdtempSync(join(tmpdir(), "drop-in-here-"));
	const first = DropIn.open(file);
	equal(first.getCwd(), PiSessionManager.open(file).getCwd());
	const again = DropIn.open(file, undefined, here);
	equal(again.getCwd(), here);
	deepStrictEqual(readsOfManager(again), readsOfManager(PiSessionManager.open(file, undefined, here)));
	first.close();
	again.close();
});

test("a drop-in whose session file was replaced since it opened still reads each entry's strings as they were (issue 20)", () => {
	const dir = mkdtempSync(join(tmpdir(), "drop-in-lazy-"));
	const file = longStringsSession(dir);
	const pi = readsOfManager(PiSessionManager.open(file));
	const drop = DropIn.open(file);
	// The same entries, each line moved (another process rewrote the file through a rename): none of the
	// strings the drop-in left in the file is where it was.
	const lines = readFileSync(file, "utf8").split("\n").filter(Boolean);
	const moved = join(dir, "moved.tmp");
	writeFileSync(moved, `${lines.map((l) => ` ${l}`).join("\n")}\n`);
	renameSync(moved, file);
	deepStrictEqual(readsOfManager(drop), pi);
	drop.close();
});

// pi's command runs the drop-in with appends that do not wait for the sidecar (the register hook sets the flag).
const WITHOUT_WAITING = Symbol.for("pi-sessiond-client.appendsWithoutWaiting");
/** Runs `f` with appends that do not wait, as in pi's own process. */
async function withoutWaiting(f) {
	globalThis[WITHOUT_WAITING] = true;
	try {
		return await f();
	} finally {
		delete globalThis[WITHOUT_WAITING];
	}
}
/**
 * A new session in a directory of its own, with a user message and a reply that have landed (the first waits,
 * the second does not), as in pi's process after its first prompt.
 */
async function answeredOnce(name) {
	const dir = mkdtempSync(join(tmpdir(), `dropin-nowait-${name}-`));
	const manager = DropIn.create("/work/project", dir);
	manager.appendMessage(user("mine"));
	const answer = manager.appendMessage(assistant("answer"));
	await manager.landed();
	return { dir, manager, answer, file: manager.getSessionFile() };
}

/** The session file's entries (the header left out). */
const entriesIn = (file) =>
	readFileSync(file, "utf8")
		.split("\n")
		.filter(Boolean)
		.map((l) => JSON.parse(l))
		.filter((e) => e.type !== "session");

test("appends that do not wait return and read what pi's return and read, and the file ends as the one waiting appends write", async () => {
	const pi = scenario(PiSessionManager, mkdtempSync(join(tmpdir(), "dropin-nowait-pi-")));
	const waitedDir = mkdtempSync(join(tmpdir(), "dropin-waited-"));
	scenario(DropIn, waitedDir);
	const dir = mkdtempSync(join(tmpdir(), "dropin-nowait-"));
	const ours = await withoutWaiting(() => scenario(DropIn, dir));
	equal(ours.length, pi.length);
	for (let i = 0; i < pi.length; i++) deepStrictEqual(normalise(ours[i]), normalise(pi[i]), pi[i].name);
	// The scenario's sessions (the first, the branched one, the new one), each as the waiting drop-in wrote it.
	await new Promise((resolve) => setTimeout(resolve, 200));
	const files = (d) => readdirSync(d).filter((f) => f.endsWith(".jsonl")).sort();
	equal(files(dir).length, files(waitedDir).length);
	for (const [i, name] of files(dir).entries()) {
		deepStrictEqual(normalise(entriesIn(join(dir, name))), normalise(entriesIn(join(waitedDir, files(waitedDir)[i]))), name);
	}
});

test("a listing right after appends that do not wait counts them, as pi's listing after its own appends does", async () => {
	await withoutWaiting(async () => {
		const dir = mkdtempSync(join(tmpdir(), "dropin-nowait-list-"));
		const manager = DropIn.create("/work/project", dir);
		manager.appendMessage(user("first"));
		for (let round = 1; round <= 20; round++) {
			manager.appendMessage(assistant(`answer ${round}`));
			manager.appendMessage(user(`question ${round + 1}`));
			const [listed] = await DropIn.list("/work/project", dir);
			equal(listed.messageCount, 1 + 2 * round, `round ${round}`);
			const [all] = await DropIn.listAll(dir);
			equal(all.messageCount, 1 + 2 * round, `round ${round}, listAll`);
		}
		await manager.landed();
		deepStrictEqual(await DropIn.list("/work/project", dir), await PiSessionManager.list("/work/project", dir));
	});
});

test("an append that does not wait and cannot be written is reported at the next write and leaves the session as it was", async () => {
	await withoutWaiting(async () => {
		// The first append on a handle waits (it takes the lock); the later ones do not.
		const { manager: m2, answer, file } = await answeredOnce("fails");
		const written = readFileSync(file, "utf8");
		renameSync(file, `${file}.aside`);
		mkdirSync(file);
		const lost = m2.appendMessage(user("this one cannot be written"));
		ok(m2.getEntry(lost), "pi is answered at once, the entry in its session");
		// The refusal is taken on the event loop (`landed` resolves once it was mended or found unmendable); pi's
		// next write throws it.
		await m2.landed();
		throws(() => m2.appendMessage(user("next")), (e) => e.message.includes(lost) && e.message.includes(file));
		rmdirSync(file);
		renameSync(`${file}.aside`, file);
		equal(m2.getEntry(lost), undefined, "what was not written left the session");
		equal(m2.getLeafId(), answer);
		equal(readFileSync(file, "utf8"), written);
		m2.appendMessage(user("written again"));
		m2.close();
		deepStrictEqual(
			entriesIn(file).map((e) => e.message.content),
			["mine", [{ type: "text", text: "answer" }], "written again"],
		);
	});
});

test("appends that did not wait and were refused after another process's appends continue after them, in one line", async () => {
	await withoutWaiting(async () => {
		const { manager: ours, dir, file } = await answeredOnce("other");
		const other = PiSessionManager.open(file, dir);
		other.appendMessage(user("pi, without the sidecar"));
		const two = ours.appendMessage(user("two"));
		const three = ours.appendMessage(assistant("three"));
		await ours.landed();
		const entries = entriesIn(file);
		entries.forEach((e, i) => equal(e.parentId, i === 0 ? null : entries[i - 1].id, `entry ${i} continues the one before it`));
		deepStrictEqual(entries.map((e) => e.id).slice(-2), [two, three], "written with the ids pi was given");
		deepStrictEqual(
			entries.map((e) => (typeof e.message.content === "string" ? e.message.content : e.message.content[0].text)),
			["mine", "answer", "pi, without the sidecar", "two", "three"],
		);
		deepStrictEqual(ours.getEntries().map((e) => e.id), entries.map((e) => e.id), "the mirror holds what the file holds, in its order");
	});
});

test("pi's first write after its open, refused for another process's lines written since, is made again after them or beside them (issue 20)", async () => {
	// The first write after an open waits for the sidecar; pi does not retry one that throws (its start-up write
	// of the thinking level would end pi), so in pi's process the drop-in makes it again, as it mends the others.
	await withoutWaiting(async () => {
		const dir = mkdtempSync(join(tmpdir(), "dropin-first-write-"));
		const made = PiSessionManager.create("/work/project", dir);
		made.appendMessage(user("mine"));
		made.appendMessage(assistant("answer"));
		const file = made.getSessionFile();

		const ours = DropIn.open(file, dir);
		const theirs = PiSessionManager.open(file, dir).appendMessage(user("pi, without the sidecar"));
		const level = ours.appendThinkingLevelChange("high");
		equal(ours.getEntry(level).parentId, theirs, "a setting between turns goes on after their line");
		await ours.landed();
		const entries = entriesIn(file);
		entries.forEach((e, i) => equal(e.parentId, i === 0 ? null : entries[i - 1].id, `entry ${i} continues the one before it`));
		deepStrictEqual(ours.getEntries().map((e) => e.id), entries.map((e) => e.id));

		// In the middle of a tool call, the result stays with its call, beside the other process's line.
		const call = made.appendMessage({ ...assistant(""), content: [{ type: "toolCall", id: "call-1", name: "bash", arguments: {} }], stopReason: "toolUse" });
		const midTurn = DropIn.open(file, dir);
		const theirsToo = PiSessionManager.open(file, dir).appendMessage(user("pi again, while the tool runs"));
		const result = midTurn.appendMessage({ role: "toolResult", toolCallId: "call-1", toolName: "bash", content: [{ type: "text", text: "ok" }], isError: false, timestamp: 3 });
		await midTurn.landed();
		const written = new Map(entriesIn(file).map((e) => [e.id, e]));
		equal(written.get(result)?.parentId, call, "the tool result follows its call");
		equal(written.get(theirsToo)?.parentId, call, "their line is a branch of its own");
	});
});

test("appends that did not wait and were refused in the middle of a tool call stay on their branch, the result after its call", async () => {
	await withoutWaiting(async () => {
		const { manager: ours, dir, file } = await answeredOnce("midturn");
		ours.appendMessage(user("run echo hi"));
		const call = ours.appendMessage({ ...assistant(""), content: [{ type: "toolCall", id: "call-1", name: "bash", arguments: { command: "echo hi" } }], stopReason: "toolUse" });
		await ours.landed();
		// Another process (a pi without the sidecar) writes while the tool runs.
		const other = PiSessionManager.open(file, dir);
		const theirs = other.appendMessage(user("pi, without the sidecar"));
		const result = ours.appendMessage({ role: "toolResult", toolCallId: "call-1", toolName: "bash", content: [{ type: "text", text: "hi" }], isError: false, timestamp: 3 });
		const done = ours.appendMessage(assistant("done"));
		await ours.landed();
		const written = new Map(entriesIn(file).map((e) => [e.id, e]));
		equal(written.get(result)?.parentId, call, "the tool result follows its call");
		equal(written.get(done)?.parentId, result);
		equal(written.get(theirs)?.parentId, call, "the other process's entry is a branch of its own");
		equal(ours.getLeafId(), done);
		deepStrictEqual(
			ours.getBranch().map((e) => e.id).slice(-3),
			[call, result, done],
			"the context pi rebuilds has the call and its result together",
		);
	});
});

test("a session whose file became another session's while its sidecar restarted is not written, then or later", async () => {
	const dir = mkdtempSync(join(tmpdir(), "dropin-replaced-restart-"));
	const manager = DropIn.create("/work/project", dir);
	manager.appendMessage(user("mine"));
	manager.appendMessage(assistant("answer"));
	const file = manager.getSessionFile();
	// Someone else's session now lives at the path (made elsewhere and renamed over it).
	const theirs = PiSessionManager.create("/work/elsewhere", mkdtempSync(join(tmpdir(), "dropin-theirs-")));
	theirs.appendMessage(user("theirs"));
	theirs.appendMessage(assistant("their answer"));
	renameSync(theirs.getSessionFile(), file);
	const before = readFileSync(file, "utf8");
	const sidecar = bridge().child.pid;
	process.kill(sidecar, "SIGKILL");
	for (let i = 0; i < 200 && existsSync(`/proc/${sidecar}/stat`) && !readFileSync(`/proc/${sidecar}/stat`, "latin1").includes(") Z "); i++) {
		await new Promise((r) => setTimeout(r, 10));
	}
	for (const attempt of ["first", "second"]) {
		throws(() => manager.appendMessage(user(`after the restart, ${attempt}`)), /now holds session/, attempt);
		equal(readFileSync(file, "utf8"), before, `their session is left as it was after the ${attempt} attempt`);
	}
	deepStrictEqual(manager.getEntries().map((e) => e.message.content), ["mine", [{ type: "text", text: "answer" }]], "this instance still holds its own session");
	equal(manager.getSessionId() === theirs.getSessionId(), false);
});

test("a listing whose sidecar is killed before it answers is made again on the next one, as /resume shows it", async () => {
	const dir = mkdtempSync(join(tmpdir(), "dropin-list-kill-"));
	// Enough sessions that the listing is still being made when the kill lands.
	for (let i = 0; i < 300; i++) {
		const m = PiSessionManager.create("/work/project", dir);
		for (let j = 0; j < 20; j++) m.appendMessage(j % 2 === 0 ? user(`session ${i} message ${j} ${"x".repeat(2000)}`) : assistant(`reply ${j}`));
	}
	const expected = await PiSessionManager.list("/work/project", dir);
	const sidecar = bridge().child.pid;
	const listing = DropIn.list("/work/project", dir);
	process.kill(sidecar, "SIGKILL");
	const listed = await listing;
	ok(bridge().child.pid !== sidecar, "a new sidecar answered");
	deepStrictEqual(normalise(listed), normalise(expected));
});
