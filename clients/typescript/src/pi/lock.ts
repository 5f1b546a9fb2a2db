/**
 * Who holds a session file's write lock, asked from outside pi-sessiond: the drop-in asks at open, so pi can say so
 * before the user types, and the lock extension asks before a plain pi writes, so a pi that takes no lock still
 * honours the one pi-sessiond takes.
 *
 * pi-sessiond's lock is an `flock` on the session file itself (`store::lock_writer`), so the kernel's table of
 * locks (`/proc/locks`, Linux) names its holder; no lock file is written, and a holder that died holds nothing.
 * Node has no `flock`, and the table is what pi-sessiond itself reads to name a holder, so it is read here too.
 *
 * That table is not free: the kernel builds it under a lock whose first taking after a quiet spell waits out an RCU
 * grace period (10–17 ms measured on a 2-core machine, during which the reading thread blocks). So the drop-in,
 * which has pi-sessiond at hand, asks it instead (`session/lockHolder`: an `flock` test, and the table only when
 * someone holds the lock); this module's reading serves plain pi's lock extension and a sidecar that cannot say.
 */

import { readFileSync, statSync } from "node:fs";
import { hostname } from "node:os";

/** The process holding a session file's write lock, and the program on whose behalf it holds it. */
export interface LockHolder {
	/** The process that holds the `flock` (a pi-sessiond). */
	pid: number;
	/** The process that started it (the pi it writes for), when the system says. */
	hostPid?: number;
	/** That process's command line (shortened), when the system says. */
	program?: string;
	/** This machine's name: an `flock` is only seen by processes on the machine that holds it. */
	host: string;
}

/** The longest command line quoted in a message. */
const PROGRAM_CHARS = 160;

/**
 * The holder of the write lock on `path`, unless it is this process or a sidecar this process started (this pi's
 * own pi-sessiond); undefined when nobody else holds it, the file does not exist, or the system cannot say.
 */
export function otherLockHolder(path: string): LockHolder | undefined {
	const holder = lockHolder(path);
	if (holder === undefined || holder.pid === process.pid || holder.hostPid === process.pid) return undefined;
	return holder;
}

/** The holder of the write lock on `path`, if anyone holds it and the system can say (Linux's `/proc/locks`). */
export function lockHolder(path: string): LockHolder | undefined {
	let dev: bigint;
	let ino: bigint;
	let locks: string;
	try {
		const stat = statSync(path, { bigint: true });
		dev = stat.dev;
		ino = stat.ino;
		locks = readFileSync("/proc/locks", "latin1");
	} catch {
		return undefined;
	}
	// glibc's gnu_dev_major/minor, as the kernel prints them in /proc/locks.
	const major = ((dev >> 8n) & 0xfffn) | ((dev >> 32n) & ~0xfffn);
	const minor = (dev & 0xffn) | ((dev >> 12n) & ~0xffn);
	for (const line of locks.split("\n")) {
		// `1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF`; a waiter's line (`1: -> FLOCK …`) holds nothing.
		const fields = line.trim().split(/\s+/);
		if (fields[1] !== "FLOCK" || fields[3] !== "WRITE") continue;
		const [maj, min, inode] = (fields[5] ?? "").split(":");
		if (maj === undefined || min === undefined || inode === undefined) continue;
		if (BigInt(`0x${maj}`) !== major || BigInt(`0x${min}`) !== minor || BigInt(inode) !== ino) continue;
		const pid = Number(fields[4]);
		if (!Number.isInteger(pid) || pid <= 0) continue;
		return holderOf(pid);
	}
	return undefined;
}

/** How a message names `holder`: the pi and its program first (what a user recognises), then the sidecar. */
export function describeHolder(holder: LockHolder): string {
	const program = holder.program ? `: ${holder.program}` : "";
	if (holder.hostPid === undefined) return `process ${holder.pid} on ${holder.host}`;
	return `process ${holder.hostPid} on ${holder.host}${program} (through its pi-sessiond, pid ${holder.pid})`;
}

/** The parent of `pid` (Linux: `/proc/<pid>/stat`), or undefined. */
export function parentOf(pid: number): number | undefined {
	try {
		// The command name (field 2) is in parentheses and may hold spaces; the parent pid is the second field after it.
		const text = readFileSync(`/proc/${pid}/stat`, "utf8");
		const ppid = Number(text.slice(text.lastIndexOf(")") + 2).split(" ")[1]);
		return Number.isInteger(ppid) && ppid > 1 ? ppid : undefined;
	} catch {
		return undefined;
	}
}

function commandLine(pid: number): string | undefined {
	try {
		const words = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter((w) => w !== "");
		const text = words.join(" ");
		return text.length > PROGRAM_CHARS ? `${text.slice(0, PROGRAM_CHARS - 1)}…` : text || undefined;
	} catch {
		return undefined;
	}
}

/** The holder `pid` (a pi-sessiond, from an error's `data.pid`), with what the system says of its pi. */
export function holderOf(pid: number): LockHolder {
	const hostPid = parentOf(pid);
	return { pid, hostPid, program: hostPid === undefined ? undefined : commandLine(hostPid), host: hostname() };
}

const NOTICE = Symbol.for("pi-sessiond-client.notice");

/**
 * Tells the user something they must know now (the session is held; a new session was forked from it): through
 * pi's UI when the lock extension gave a way to it (`onNotice`), else on stderr. A process-wide slot, not a
 * module variable: pi loads the extension through its own loader, so it may hold another copy of this module.
 */
export function notice(text: string): void {
	const hook = (globalThis as Record<symbol, unknown>)[NOTICE];
	if (typeof hook === "function") hook(text);
	else process.stderr.write(`pi-sessiond: ${text}\n`);
}

/** Sends later `notice`s to `hook` (pi's UI of the current session). */
export function onNotice(hook: (text: string) => void): void {
	(globalThis as Record<symbol, unknown>)[NOTICE] = hook;
}
