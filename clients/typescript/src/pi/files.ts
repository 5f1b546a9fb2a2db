/**
 * The rest of what pi 1.6.0's `session-manager.js` exports besides the class and the context functions: reading a
 * file into entries, finding the most recent session, the v1 → v3 migration of an entry array, session-id rules,
 * and the id generators. The drop-in exports them so it can stand in for pi's module whole; they read files the
 * way pi does (the sidecar is for sessions this process opens, not for these helpers, which pi's callers use on
 * arbitrary files).
 */

import { randomBytes, randomInt, randomUUID } from "node:crypto";
import { appendFileSync, closeSync, existsSync, openSync, readdirSync, readSync, statSync } from "node:fs";
import { join } from "node:path";
import { StringDecoder } from "node:string_decoder";
import type { Entry } from "./context.js";
import { normalizePath, pathsEqual, resolvePath } from "./paths.js";

/** pi's `CURRENT_SESSION_VERSION`. */
export const CURRENT_SESSION_VERSION = 3;

/** pi's `assertValidSessionId`, with pi's message. */
export function assertValidSessionId(id: string): void {
	if (!/^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$/.test(id)) {
		throw new Error(
			"Session id must be non-empty, contain only alphanumeric characters, '-', '_', and '.', and start and end with an alphanumeric character",
		);
	}
}

/** pi's entry id: 8 hex digits of a random UUID not already in `taken`, else a whole UUID. */
export function generateId(taken: { has(id: string): boolean }): string {
	for (let i = 0; i < 100; i++) {
		const id = randomUUID().slice(0, 8);
		if (!taken.has(id)) return id;
	}
	return randomUUID();
}

/** The millisecond and counter of the last UUID v7 made in this process. */
const lastV7 = { ms: -1, counter: 0 };

/**
 * A time-ordered UUID v7 (RFC 9562), the format of pi's session ids: 48 bits of Unix milliseconds, the version,
 * a 12-bit counter, the variant, 62 random bits. The counter (RFC 9562 section 6.2, method 1) starts at a random
 * value in its lower half each new millisecond and counts up within one, carrying into the millisecond when full,
 * so the ids one process makes sort in the order it made them, as pi's do, even if the clock steps back.
 */
export function uuidv7(): string {
	const now = Date.now();
	if (now > lastV7.ms) {
		lastV7.ms = now;
		lastV7.counter = randomInt(0, 0x800);
	} else if (++lastV7.counter > 0xfff) {
		lastV7.ms += 1;
		lastV7.counter = 0;
	}
	const bytes = randomBytes(16);
	bytes.writeUIntBE(lastV7.ms, 0, 6);
	bytes.writeUInt16BE(0x7000 | lastV7.counter, 6);
	bytes.writeUInt8(0x80 | (bytes.readUInt8(8) & 0x3f), 8);
	const hex = bytes.toString("hex");
	return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

function migrateV1ToV2(entries: Entry[]): void {
	const ids = new Set<string>();
	let previousId: string | null = null;
	for (const entry of entries) {
		if (entry.type === "session") {
			entry.version = 2;
			continue;
		}
		entry.id = generateId(ids);
		entry.parentId = previousId;
		previousId = entry.id;
		if (entry.type === "compaction" && typeof entry.firstKeptEntryIndex === "number") {
			const target = entries[entry.firstKeptEntryIndex];
			if (target && target.type !== "session") entry.firstKeptEntryId = target.id;
			delete entry.firstKeptEntryIndex;
		}
	}
}

function migrateV2ToV3(entries: Entry[]): void {
	for (const entry of entries) {
		if (entry.type === "session") {
			entry.version = 3;
			continue;
		}
		if (entry.type === "message" && entry.message && entry.message.role === "hookMessage") entry.message.role = "custom";
	}
}

/** Brings `entries` to version 3 in place; true when anything was migrated (pi's `migrateToCurrentVersion`). */
export function migrateToCurrentVersion(entries: Entry[]): boolean {
	const header = entries.find((e) => e.type === "session");
	const version = header?.version ?? 1;
	if (version >= CURRENT_SESSION_VERSION) return false;
	if (version < 2) migrateV1ToV2(entries);
	if (version < 3) migrateV2ToV3(entries);
	return true;
}

/** pi's exported `migrateSessionEntries`. */
export function migrateSessionEntries(entries: Entry[]): void {
	migrateToCurrentVersion(entries);
}

/** pi's `parseSessionEntries`: every line that parses, blank and malformed ones skipped. */
export function parseSessionEntries(content: string): Entry[] {
	const entries: Entry[] = [];
	for (const line of content.trim().split("\n")) {
		if (!line.trim()) continue;
		try {
			entries.push(JSON.parse(line));
		} catch {
			// pi skips malformed lines.
		}
	}
	return entries;
}

function parseLine(line: string): Entry | null {
	if (!line.trim()) return null;
	try {
		return JSON.parse(line);
	} catch {
		return null;
	}
}

/**
 * pi's `loadEntriesFromFile`: the file's parsed lines ([] when it is missing or its first parsed line is not a
 * session header). Like pi, it appends the missing final newline of a file whose last line has none.
 */
export function loadEntriesFromFile(filePath: string): Entry[] {
	const path = normalizePath(filePath);
	if (!existsSync(path)) return [];
	const entries: Entry[] = [];
	let pending = "";
	const fd = openSync(path, "r");
	try {
		const decoder = new StringDecoder("utf8");
		const buffer = Buffer.allocUnsafe(1024 * 1024);
		for (;;) {
			const read = readSync(fd, buffer, 0, buffer.length, null);
			if (read === 0) break;
			pending += decoder.write(buffer.subarray(0, read));
			let start = 0;
			let newline = pending.indexOf("\n", start);
			while (newline !== -1) {
				const entry = parseLine(pending.slice(start, newline));
				if (entry) entries.push(entry);
				start = newline + 1;
				newline = pending.indexOf("\n", start);
			}
			pending = pending.slice(start);
		}
		pending += decoder.end();
		const last = parseLine(pending);
		if (last) entries.push(last);
	} finally {
		closeSync(fd);
	}
	if (entries.length === 0) return entries;
	const header = entries[0];
	if (header.type !== "session" || typeof header.id !== "string") return [];
	if (pending) appendFileSync(path, "\n");
	return entries;
}

const HEADER_SCAN_LIMIT = 1024 * 1024;

/** Thrown when a file's first parsed line is not found within pi's 1 MiB header scan. */
export class SessionHeaderScanLimitError extends Error {
	constructor(filePath: string) {
		super(`Session header exceeds ${HEADER_SCAN_LIMIT}-byte scan limit: ${filePath}`);
		this.name = "SessionHeaderScanLimitError";
	}
}

/** undefined: keep scanning; null: the first parsed line is not a header; otherwise the header. */
function headerCandidate(line: string): Entry | null | undefined {
	if (!line.trim()) return undefined;
	const entry = parseLine(line);
	if (!entry) return undefined;
	if (entry.type !== "session" || typeof entry.id !== "string") return null;
	return entry;
}

/** pi's `readSessionHeader`: the first parsed line if it is a header, scanning at most 1 MiB. */
export function readSessionHeader(filePath: string): Entry | null {
	const fd = openSync(filePath, "r");
	try {
		const decoder = new StringDecoder("utf8");
		const buffer = Buffer.allocUnsafe(4096);
		const chunks: string[] = [];
		let scanned = 0;
		while (scanned < HEADER_SCAN_LIMIT) {
			const read = readSync(fd, buffer, 0, Math.min(buffer.length, HEADER_SCAN_LIMIT - scanned), null);
			if (read === 0) {
				chunks.push(decoder.end());
				return headerCandidate(chunks.join("")) ?? null;
			}
			scanned += read;
			const chunk = decoder.write(buffer.subarray(0, read));
			let start = 0;
			let newline = chunk.indexOf("\n", start);
			while (newline !== -1) {
				chunks.push(chunk.slice(start, newline));
				const header = headerCandidate(chunks.join(""));
				if (header !== undefined) return header;
				chunks.length = 0;
				start = newline + 1;
				newline = chunk.indexOf("\n", start);
			}
			chunks.push(chunk.slice(start));
		}
		const probe = Buffer.allocUnsafe(1);
		if (readSync(fd, probe, 0, 1, null) === 0) {
			chunks.push(decoder.end());
			return headerCandidate(chunks.join("")) ?? null;
		}
		throw new SessionHeaderScanLimitError(filePath);
	} finally {
		closeSync(fd);
	}
}

/** The header's cwd when it is a string (pi's `getSessionHeaderCwd`). */
export function headerCwd(header: Entry | null | undefined): string | undefined {
	const cwd = header?.cwd;
	return typeof cwd === "string" ? cwd : undefined;
}

function cwdMatches(cwd: string | undefined, resolvedCwd: string): boolean {
	return cwd !== undefined && cwd !== "" && pathsEqual(resolvePath(cwd), resolvedCwd);
}

/** pi's `findMostRecentSession`: the newest `*.jsonl` (by mtime) with a header, optionally of `cwd`; or null. */
export function findMostRecentSession(sessionDir: string, cwd?: string): string | null {
	const dir = normalizePath(sessionDir);
	const resolvedCwd = cwd ? resolvePath(cwd) : undefined;
	try {
		const files = readdirSync(dir)
			.filter((file) => file.endsWith(".jsonl"))
			.map((file) => join(dir, file))
			.map((path) => ({ path, mtime: statSync(path).mtimeMs }))
			.sort((a, b) => b.mtime - a.mtime);
		for (const { path } of files) {
			let header: Entry | null;
			try {
				header = readSessionHeader(path);
			} catch {
				header = null;
			}
			if (header && (!resolvedCwd || cwdMatches(headerCwd(header), resolvedCwd))) return path;
		}
		return null;
	} catch {
		return null;
	}
}
