/**
 * pi 1.6.0's path rules (`utils/paths.js`, `config.js`), so the drop-in computes every directory exactly where pi
 * would: the agent directory from `PI_CODING_AGENT_DIR` as it is at the time of the call (pi reads it on every
 * call, and its tests change it at run time), `~` expansion, `file://` URLs, the encoded per-cwd session directory.
 */

import { existsSync, mkdirSync } from "node:fs";
import { homedir } from "node:os";
import { isAbsolute, join, posix, resolve as nodeResolve, win32 } from "node:path";
import { fileURLToPath } from "node:url";

/** The environment variable naming pi's agent directory (pi's `ENV_AGENT_DIR`). */
export const ENV_AGENT_DIR = "PI_CODING_AGENT_DIR";
/** pi's environment variable for a session directory of its own (`ENV_SESSION_DIR`). */
export const ENV_SESSION_DIR = "PI_CODING_AGENT_SESSION_DIR";

/**
 * pi's `normalizePath` with its default options: `~` expansion and `file://` URLs; nothing else changes. (pi also
 * rewrites MSYS-style paths on Windows; the drop-in targets the platforms pi-sessiond runs on.)
 */
export function normalizePath(input: string): string {
	const normalized = input;
	const home = homedir();
	if (normalized === "~") return home;
	if (normalized.startsWith("~/") || (process.platform === "win32" && normalized.startsWith("~\\"))) {
		return join(home, normalized.slice(2));
	}
	if (/^file:\/\//.test(normalized)) return fileURLToPath(normalized);
	return normalized;
}

/** pi's `resolvePath`: normalised, then absolute against `baseDir` (default: the current directory). */
export function resolvePath(input: string, baseDir: string = process.cwd()): string {
	const normalized = normalizePath(input);
	return isAbsolute(normalized) ? nodeResolve(normalized) : nodeResolve(normalizePath(baseDir), normalized);
}

/** pi's `pathsEqual`: resolved paths compared, case-folded on Windows. */
export function pathsEqual(left: string, right: string): boolean {
	const api = process.platform === "win32" ? win32 : posix;
	const key = (p: string) => (api === win32 ? api.resolve(p).toLowerCase() : api.resolve(p));
	return key(left) === key(right);
}

/** pi's `getAgentDir()`: `$PI_CODING_AGENT_DIR` (with `~` expanded), else `~/.pi/agent`. */
export function getAgentDir(env: NodeJS.ProcessEnv = process.env): string {
	const fromEnv = env[ENV_AGENT_DIR];
	return fromEnv ? normalizePath(fromEnv) : join(homedir(), ".pi", "agent");
}

/** pi's `getSessionsDir()`: the root `listAll` walks. */
export function getSessionsDir(): string {
	return join(getAgentDir(), "sessions");
}

/** The default session directory of `cwd` (pi's `getDefaultSessionDirPath`), without creating it. */
export function defaultSessionDirPath(cwd: string, agentDir: string = getAgentDir()): string {
	const resolvedCwd = resolvePath(cwd);
	const safePath = `--${resolvedCwd.replace(/^[/\\]/, "").replace(/[/\\:]/g, "-")}--`;
	return join(resolvePath(agentDir), "sessions", safePath);
}

/** pi's exported `getDefaultSessionDir`: the default session directory of `cwd`, created if missing. */
export function getDefaultSessionDir(cwd: string, agentDir: string = getAgentDir()): string {
	const dir = defaultSessionDirPath(cwd, agentDir);
	if (!existsSync(dir)) mkdirSync(dir, { recursive: true });
	return dir;
}
