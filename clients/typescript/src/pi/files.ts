/**
 * The rest of what pi 1.6.0's `session-manager.js` exports besides the class and the context functions: reading a
 * file into entries, finding the most recent session, the v1 → v3 migration of an entry array, session-id rules,
 * and the id generators. The drop-in exports them so it can stand in for pi's module whole; they read files the
 * way pi does (the sidecar is for sessions this process opens, not for these helpers, which pi's callers use on
 * arbitrary files).
 */

import { randomUUID } from "crypto";
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

let lastTimestamp = -1;
let sequence: bigint | undefined;

/**
 * A time-ordered UUID v7, as pi-ai's `uuidv7()` makes session ids: 48 bits of milliseconds, then a random sequence
 * that counts up within the process, so ids made in one millisecond still sort in creation order.
 */
export function uuidv7(): string {
	const now = Math.max(Date.now(), lastTimestamp);
	lastTimestamp = now;
	const bytes = new Uint8Array(16);
	globalThis.crypto.getRandomValues(bytes);
	if (sequence === undefined) {
		sequence = (BigInt(bytes[1] ?? 0) << 32n) | (BigInt(bytes[2] ?? 0) << 24n) | (BigInt(bytes[3] ?? 0) << 16n);
		sequence |= (BigInt(bytes[4] ?? 0) << 8n) | BigInt(bytes[5] ?? 0);
	} else {
		sequence++;
	}
	const time = BigInt(now);
	for (let i = 5; i >= 0; i--) bytes[i] = Number(time >> BigInt((5 - i) * 8)) & 0xff;
	bytes[6] = 0x70 | Number((sequence >> 37n) & 0x0fn);
	bytes[7] = Number((sequence >> 29n) & 0xffn);
	bytes[8] = 0x80 | Number((sequence >> 23n) & 0x3fn);
	bytes[9] = Number((sequence >> 15n) & 0xffn);
	bytes[10] = Number((sequence >> 7n) & 0xffn);
	bytes[11] = Number((sequence & 0x7fn) << 1n) | ((bytes[11] ?? 0) & 0x01);
	const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, "0"));
	return `${hex.slice(0, 4).join("")}-${hex.slice(4, 6).join("")}-${hex.slice(6, 8).join("")}-${hex.slice(8, 10).join("")}-${hex.slice(10).join("")}`;
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
