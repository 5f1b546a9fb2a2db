/**
 * Which session pi's command opens first, told from its arguments before pi has read them, so the register hook
 * can have pi-sessiond open it while pi loads (`openAhead` in session-manager.ts).
 *
 * Only the two cases where pi surely opens an existing file are told: `--session PATH` (pi's `resolveSessionPath`
 * takes an argument with a slash or ending in `.jsonl` for a path) and `--continue`/`-c` (the newest session of
 * the directory for pi's cwd). Anything that makes pi open something else, nothing, or ask first (`--no-session`,
 * `--fork`, `--session-id`, `--resume`, a session directory of its own, a session whose cwd is gone) tells
 * nothing. pi's global settings may name the session directory (`sessionDir`), and the guess follows them; a
 * project's settings that name one tell nothing (whether pi reads them depends on its trust in the project). So does a file an open would change (pi's load-time repairs: an old version, a missing last newline):
 * an open ahead must only read. A guess that still turns out wrong costs nothing but the read: the drop-in sends
 * pi's own open when pi's first open asks for anything else, and closes the one made ahead.
 */

import { closeSync, existsSync, openSync, readFileSync, readSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { CURRENT_SESSION_VERSION, findMostRecentSession, headerCwd, readSessionHeader } from "./files.js";
import { defaultSessionDirPath, ENV_SESSION_DIR, getAgentDir, normalizePath, pathsEqual, resolvePath } from "./paths.js";

/** What pi's first `SessionManager` will be made with: the file it opens, its session directory and cwd. */
export interface FirstOpen {
	path: string;
	sessionDir: string;
	cwd: string;
}

/** Flags after which pi opens another session than `--session`/`--continue` say, or none, or asks the user. */
const OTHER_FIRST_SESSION = new Set([
	"--no-session",
	"--fork",
	"--session-id",
	"--resume",
	"-r",
	"--session-dir",
	"--help",
	"-h",
	"--version",
	"-v",
	"--list-models",
	"--export",
]);

/**
 * The session pi's command with arguments `args` (after the script) opens first, as pi's `SessionManager.open`
 * or `continueRecent` would be asked for it, or undefined when that is not sure.
 */
export function firstOpenOf(args: readonly string[], cwd: string = process.cwd(), env: NodeJS.ProcessEnv = process.env): FirstOpen | undefined {
	if (env[ENV_SESSION_DIR]) return undefined;
	let session: string | undefined;
	let continues = false;
	for (let i = 0; i < args.length; i++) {
		const arg = args[i] ?? "";
		if (OTHER_FIRST_SESSION.has(arg)) return undefined;
		if (arg === "--session" && i + 1 < args.length) session = args[++i];
		else if (arg === "--continue" || arg === "-c") continues = true;
	}
	if (session === undefined && !continues) return undefined;
	try {
		const agentDir = getAgentDir(env);
		const configured = settingsSessionDir(cwd, agentDir);
		if (configured === null) return undefined;
		if (session !== undefined) {
			if (!(session.includes("/") || session.includes("\\") || session.endsWith(".jsonl"))) return undefined;
			const path = resolvePath(session, cwd);
			const header = readOnlyOpen(path);
			const sessionCwd = header === undefined ? undefined : (headerCwd(header) ?? cwd);
			return sessionCwd !== undefined && existsSync(sessionCwd) ? { path, sessionDir: configured ?? resolve(path, ".."), cwd: sessionCwd } : undefined;
		}
		// pi's `continueRecent`: in a directory other than cwd's own, the newest session of cwd.
		const dir = configured ?? defaultSessionDirPath(cwd, agentDir);
		const filterCwd = configured !== undefined && !pathsEqual(dir, defaultSessionDirPath(cwd, agentDir));
		const path = existsSync(dir) ? findMostRecentSession(dir, filterCwd ? cwd : undefined) : null;
		return path !== null && readOnlyOpen(path) !== undefined ? { path, sessionDir: dir, cwd } : undefined;
	} catch {
		// A file that cannot be read now is pi's to report when it opens it.
	}
	return undefined;
}

/**
 * The session directory pi's settings give it, as its `getSessionDir` reads them: undefined for none, null when
 * that cannot be told here (a project's settings naming one, which pi reads only in a project it trusts; global
 * settings naming one that do not parse or do not give a path).
 */
function settingsSessionDir(cwd: string, agentDir: string): string | undefined | null {
	const named = (file: string): string | undefined => {
		const text = existsSync(file) ? readFileSync(file, "utf8") : "";
		return text.includes('"sessionDir"') ? text : undefined;
	};
	if (named(join(resolvePath(cwd), ".pi", "settings.json")) !== undefined) return null;
	const global = named(join(resolvePath(agentDir), "settings.json"));
	if (global === undefined) return undefined;
	try {
		const value: unknown = JSON.parse(global.replace(/^\uFEFF/, "")).sessionDir;
		if (value === undefined) return undefined;
		return typeof value === "string" && value !== "" ? normalizePath(value) : null;
	} catch {
		return null;
	}
}

/**
 * The header of `path` when opening it changes nothing (a regular file at pi's version, ending in a newline),
 * else undefined.
 */
function readOnlyOpen(path: string): Record<string, unknown> | undefined {
	const stat = statSync(path, { throwIfNoEntry: false });
	if (!stat?.isFile() || stat.size === 0) return undefined;
	const header = readSessionHeader(path);
	if (header?.type !== "session" || header.version !== CURRENT_SESSION_VERSION) return undefined;
	const fd = openSync(path, "r");
	try {
		const last = Buffer.alloc(1);
		return readSync(fd, last, 0, 1, stat.size - 1) === 1 && last[0] === 0x0a ? (header as Record<string, unknown>) : undefined;
	} finally {
		closeSync(fd);
	}
}
