// Helpers for the real-pi tests: run pi 1.6.0 (Node 22, faux provider) in RPC or print mode, with or without the
// pi-sessiond-client/register hook, in a throwaway HOME and agent directory; and read session files back with
// pi's own SessionManager, ids and timestamps replaced by their order of appearance, so two runs compare equal.
import { execFileSync, spawn } from "node:child_process";
import { closeSync, constants, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, statSync, writeFileSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export const piCli = fileURLToPath(new URL("./node_modules/@earendil-works/pi-coding-agent/dist/bundle/cli.js", import.meta.url));
export const register = fileURLToPath(new URL("../../clients/typescript/dist/pi/register.js", import.meta.url));
export const faux = fileURLToPath(new URL("./fixtures/faux.ts", import.meta.url));
/** The `pi-sessiond-pi` launcher, which runs pi (PI_BIN) on pi-sessiond. */
export const launcher = fileURLToPath(new URL("../../clients/typescript/bin/pi-sessiond-pi.js", import.meta.url));
const piModule = new URL("./node_modules/@earendil-works/pi-coding-agent/dist/core/session-manager.js", import.meta.url);

/** pi's own SessionManager (the published module, never the drop-in). */
export const { SessionManager: PiSessionManager } = await import(piModule.href);

/**
 * A fresh HOME, agent directory (with settings) and working directory (`cwd` if given: the cwd is in pi's system
 * prompt and so in the token counts the faux provider reports, so runs that must compare equal share one).
 */
export function sandbox(name, cwd) {
	const root = mkdtempSync(join(tmpdir(), `pi-real-${name}-`));
	for (const dir of ["home", "agent", "cwd"]) mkdirSync(join(root, dir), { recursive: true });
	// Keep little of the history at a compaction, so a short scripted session has something to compact.
	writeFileSync(join(root, "agent", "settings.json"), `${JSON.stringify({ compaction: { keepRecentTokens: 20 } })}\n`);
	return { root, home: join(root, "home"), agentDir: join(root, "agent"), cwd: cwd ?? join(root, "cwd") };
}

function env(box) {
	return { ...process.env, HOME: box.home, PI_CODING_AGENT_DIR: box.agentDir, PI_OFFLINE: "1", NO_COLOR: "1" };
}

function argv(sessiond, args, extensions = []) {
	return [...(sessiond ? ["--import", register] : []), piCli, "-e", faux, ...extensions.flatMap((e) => ["-e", e]), "--model", "faux/faux-1", ...args];
}

/** pi in print mode: resolves with its exit code and output; `extraEnv` is added to pi's environment. */
export function printPi(box, { sessiond, args, extraEnv = {} }) {
	return new Promise((resolve) => {
		const child = spawn(process.execPath, argv(sessiond, ["-p", ...args]), { cwd: box.cwd, env: { ...env(box), ...extraEnv }, stdio: ["ignore", "pipe", "pipe"] });
		let stdout = "";
		let stderr = "";
		child.stdout.on("data", (d) => (stdout += d));
		child.stderr.on("data", (d) => (stderr += d));
		child.on("close", (code) => resolve({ code, stdout, stderr }));
	});
}

/** pi in RPC mode, driven one command at a time. */
export class RpcPi {
	/**
	 * With `viaLauncher`, pi is started by `pi-sessiond-pi` (so on pi-sessiond) instead of with the hook; `extraEnv`
	 * is added to pi's environment (and so its sidecar's).
	 */
	constructor(box, { sessiond, args = [], extensions = [], viaLauncher = false, extraEnv = {} }) {
		const piArgs = argv(sessiond && !viaLauncher, ["--mode", "rpc", ...args], extensions);
		const command = viaLauncher ? [launcher, ...piArgs.slice(1)] : piArgs;
		// pi's input is a FIFO this test holds open, as a terminal stays open, so pi lives on when what started it
		// dies (a pipe from spawn would be closed by Node when the launcher exits, and pi with it).
		const fifo = join(box.root, `stdin-${Date.now()}-${Math.random().toString(36).slice(2)}`);
		execFileSync("mkfifo", [fifo]);
		// pi gets the reading end only, so closing ours is its end of input.
		const reading = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
		this.input = openSync(fifo, constants.O_WRONLY);
		this.child = spawn(process.execPath, command, {
			cwd: box.cwd,
			env: { ...env(box), ...(viaLauncher ? { PI_BIN: piCli } : {}), ...extraEnv },
			stdio: [reading, "pipe", "pipe"],
		});
		closeSync(reading);
		this.widgets = [];
		this.widgetWaiters = [];
		this.notices = [];
		this.noticeWaiters = [];
		this.pid = this.child.pid;
		this.nextId = 0;
		this.waiters = new Map();
		this.settled = [];
		this.stderr = "";
		this.exited = new Promise((resolve) => this.child.on("close", (code) => resolve(code)));
		this.child.stderr.on("data", (d) => (this.stderr += d));
		let partial = "";
		this.child.stdout.on("data", (chunk) => {
			const lines = (partial + chunk).split("\n");
			partial = lines.pop() ?? "";
			for (const line of lines) if (line.trim()) this.onLine(JSON.parse(line));
		});
	}

	onLine(message) {
		if (message.type === "response" && this.waiters.has(message.id)) {
			this.waiters.get(message.id)(message);
			this.waiters.delete(message.id);
		} else if (message.type === "agent_settled") {
			this.settled.shift()?.();
		} else if (message.type === "extension_ui_request" && message.method === "setWidget") {
			this.widgets.push(message);
			for (const waiter of this.widgetWaiters.splice(0)) waiter();
		} else if (message.type === "extension_ui_request" && message.method === "notify") {
			this.notices.push(message.message);
			for (const waiter of this.noticeWaiters.splice(0)) waiter();
		}
	}

	/** Sends a command and resolves with its response; rejects on `success: false`. */
	async command(command) {
		const id = String(++this.nextId);
		const response = await new Promise((resolve) => {
			this.waiters.set(id, resolve);
			writeSync(this.input, `${JSON.stringify({ id, ...command })}\n`);
		});
		if (!response.success) throw new Error(`pi ${command.type}: ${response.error}\n${this.stderr}`);
		return response.data;
	}

	/**
	 * Sends a prompt and resolves once the agent has settled (the turn, its tool calls and its writes are done), or
	 * at once for an extension command, which pi has run by the time it answers.
	 */
	async prompt(message) {
		let resolveSettled;
		const settled = new Promise((resolve) => (resolveSettled = resolve));
		this.settled.push(resolveSettled);
		const { disposition } = await this.command({ type: "prompt", message });
		if (disposition !== "started") {
			this.settled = this.settled.filter((r) => r !== resolveSettled);
			return;
		}
		await settled;
	}

	/**
	 * Resolves with the first widget update (an extension's `setWidget`) at or after index `from` of `widgets`
	 * whose lines satisfy `test`.
	 */
	async widget(test, from = 0) {
		for (let seen = from; ; ) {
			while (seen < this.widgets.length) {
				const w = this.widgets[seen++];
				if (test(w.widgetLines ?? [])) return w.widgetLines;
			}
			await new Promise((resolve) => this.widgetWaiters.push(resolve));
		}
	}

	/** Resolves with the first notice (an extension's `notify`) at or after index `from` of `notices` that `test` accepts. */
	async notice(test, from = 0) {
		for (let seen = from; ; ) {
			while (seen < this.notices.length) {
				const text = this.notices[seen++];
				if (test(text)) return text;
			}
			await new Promise((resolve) => this.noticeWaiters.push(resolve));
		}
	}

	/** Ends pi (end of input) and resolves with its exit code. */
	close() {
		closeSync(this.input);
		return this.exited;
	}
}

/** The processes below `pid` (children, theirs, …), from /proc. */
export function descendants(pid) {
	const parents = new Map();
	for (const entry of readdirSync("/proc")) {
		if (!/^\d+$/.test(entry)) continue;
		try {
			const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
			const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
			parents.set(Number(entry), Number(fields[1]));
		} catch {
			// gone meanwhile
		}
	}
	const found = [];
	for (let frontier = [pid]; frontier.length > 0; ) {
		const next = [...parents].filter(([, parent]) => frontier.includes(parent)).map(([child]) => child);
		found.push(...next);
		frontier = next;
	}
	return found;
}

/** True while `pid` is a process that has not ended (a zombie has ended). */
export function running(pid) {
	try {
		const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
		return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z";
	} catch {
		return false;
	}
}

/** Every session file under `agentDir`, oldest header first. */
export function sessionFiles(agentDir) {
	const root = join(agentDir, "sessions");
	const files = [];
	for (const dir of readdirSync(root)) {
		const full = join(root, dir);
		if (!statSync(full).isDirectory()) continue;
		for (const file of readdirSync(full)) if (file.endsWith(".jsonl")) files.push(join(full, file));
	}
	const header = (f) => PiSessionManager.open(f).getHeader().timestamp;
	return files.sort((a, b) => header(a).localeCompare(header(b)));
}

/** Every read pi's SessionManager has (of pi's own class or the drop-in), at its leaf. */
export function readsOfManager(m) {
	return {
		header: m.getHeader(),
		entries: m.getEntries(),
		leafId: m.getLeafId(),
		leafEntry: m.getLeafEntry(),
		tree: m.getTree(),
		branch: m.getBranch(),
		contextEntries: m.buildContextEntries(),
		projection: m.buildSessionProjection(),
		context: m.buildSessionContext(),
		sessionName: m.getSessionName(),
		entryCount: m.getEntryCount(),
	};
}

/** pi's reads of a file (its own SessionManager, opened fresh). */
export function readsOf(file) {
	return readsOfManager(PiSessionManager.open(file));
}

/**
 * `value` with what differs between two runs of one script replaced by stable names: entry ids, session ids and
 * session file paths by their order of first appearance, and every `timestamp` and `durationMs` (time) by "T".
 */
export function normalise(value, names = new Map()) {
	const name = (s, kind) => {
		if (!names.has(s)) names.set(s, `${kind}${names.size + 1}`);
		return names.get(s);
	};
	const walk = (v, key) => {
		if (key === "timestamp" || key === "labelTimestamp" || key === "durationMs") return "T";
		if (typeof v === "string") {
			if (/^[0-9a-f]{8}$/.test(v) || names.has(v)) return name(v, "id");
			if (/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-/.test(v)) return name(v, "session");
			if (v.endsWith(".jsonl")) return name(v, "file");
			return v;
		}
		if (Array.isArray(v)) return v.map((x) => walk(x));
		if (v && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, walk(x, k)]));
		return v;
	};
	return walk(value);
}

/**
 * A copy of one of the client's examples inside this package, so its imports (`@earendil-works/pi-coding-agent`,
 * `pi-sessiond-client`) resolve to what is installed here; `edit` may change its text first.
 */
export function exampleCopy(relative, name, edit = (text) => text) {
	const source = fileURLToPath(new URL(`../../clients/typescript/examples/${relative}`, import.meta.url));
	const dir = join(fileURLToPath(new URL(".", import.meta.url)), ".run");
	mkdirSync(dir, { recursive: true });
	const target = join(dir, name);
	writeFileSync(target, edit(readFileSync(source, "utf8")));
	return target;
}

/**
 * pi's TUI in a detached tmux server of its own (a terminal `columns` × `rows`), started as a user starts it: plain
 * or on pi-sessiond (`pi-sessiond-pi`). `screen()` is what the terminal shows, `type(text)` types a line.
 */
export class TuiPi {
	constructor(box, { sessiond, args = [], columns = 120, rows = 16 }) {
		this.socket = `pi-${Date.now()}-${Math.random().toString(36).slice(2)}`;
		const program = sessiond ? [launcher] : [piCli];
		const command = [process.execPath, ...program, "-e", faux, "--model", "faux/faux-1", ...args];
		const vars = { ...env(box), ...(sessiond ? { PI_BIN: piCli } : {}) };
		const quote = (v) => `'${String(v).replaceAll("'", "'\\''")}'`;
		const line = `cd ${quote(box.cwd)} && exec env ${Object.entries(vars)
			.filter(([k]) => /^[A-Z_][A-Z0-9_]*$/.test(k))
			.map(([k, v]) => `${k}=${quote(v)}`)
			.join(" ")} ${command.map(quote).join(" ")}`;
		execFileSync("tmux", ["-L", this.socket, "new-session", "-d", "-x", String(columns), "-y", String(rows), line]);
	}

	/** What the terminal shows now, its lines joined (a long line wraps: words may break across lines). */
	screen() {
		return execFileSync("tmux", ["-L", this.socket, "capture-pane", "-p", "-J"], { encoding: "utf8" });
	}

	/** Resolves with the screen once `test` accepts it; rejects with the screen after `ms`. */
	async waitFor(test, ms = 30_000) {
		const until = Date.now() + ms;
		for (;;) {
			const shown = this.screen();
			if (test(shown)) return shown;
			if (Date.now() > until) throw new Error(`the TUI did not show what was awaited; it shows:\n${shown}`);
			await new Promise((resolve) => setTimeout(resolve, 200));
		}
	}

	/** Types `text` and Enter. */
	type(text) {
		execFileSync("tmux", ["-L", this.socket, "send-keys", "-l", text]);
		execFileSync("tmux", ["-L", this.socket, "send-keys", "Enter"]);
	}

	/** Ends pi and its terminal. */
	close() {
		try {
			execFileSync("tmux", ["-L", this.socket, "kill-server"], { stdio: "ignore" });
		} catch {
			// Already gone.
		}
	}
}

/** Runs a node script with pi's environment for `box`; resolves with its exit code and output. */
export function runNode(box, script, args) {
	return new Promise((resolve) => {
		const child = spawn(process.execPath, [script, ...args], { cwd: box.cwd, env: env(box), stdio: ["ignore", "pipe", "pipe"] });
		let stdout = "";
		let stderr = "";
		child.stdout.on("data", (d) => (stdout += d));
		child.stderr.on("data", (d) => (stderr += d));
		child.on("close", (code) => resolve({ code, stdout, stderr }));
	});
}
