/**
 * Entries whose long strings stay in the session file until pi reads them, so a drop-in's memory follows what pi
 * touches, not the file's size.
 *
 * pi walks every entry often (its footer sums `message.usage` over all of them at each prompt, `/fork` lists the
 * user messages) but reads image data and long texts only for the messages in its context: after a compaction a
 * few MB of a 2.7 GB session. pi-sessiond sends each entry as stored with every string longer than
 * `LAZY_OVER` bytes left out (`session/getEntries` with `lazyOver`), saying where its literal lies in the file.
 * Each one becomes a getter on its parent object that reads the literal from the file here, in pi's process (no
 * round trip, no copy through the sidecar), after checking that the file is the one pi-sessiond read and that the
 * line is still where it was; when it is not (the file was rewritten or replaced since), the entry is read
 * again through pi-sessiond. Strings read are kept in a cache bounded in bytes, so a context pi serialises at
 * every prompt is read once, and a walk over the whole session keeps at most the cache's worth.
 *
 * Everything else is as pi's objects are: the same keys in the same order, plain objects and arrays (so
 * `JSON.stringify`, spreads, `structuredClone` and deep equality see the strings), stable object identity. An
 * assignment to a lazy member replaces the getter with the value, as on pi's objects.
 */

import { closeSync, fstatSync, openSync, readSync, statSync } from "node:fs";
import type { Entry } from "./context.js";

/**
 * Strings whose stored literal is longer than this many bytes stay in the file until read. The sidecar's open
 * notes where such strings lie at this very threshold (`LONG_STRING`), so its pages read only the bytes around
 * them; any other value would make it read every byte again.
 */
export const LAZY_OVER = 1024;

/** Bytes of strings kept after reading (UTF-16 code units ×2, roughly what V8 holds). */
const CACHE_BYTES = 64 * 1024 * 1024;

/** An entry as `session/getEntries` with `lazyOver` returns it. */
export interface LazyEntry {
	entry: Entry;
	line?: [number, number];
	lazy?: [(string | number)[], number, number][];
}

const decoder = new TextDecoder();

/** Reads of at most this many bytes share one buffer; longer ones get their own. */
const SCRATCH_BYTES = 4 * 1024 * 1024;
let scratchBuffer: Buffer | undefined;

/** A buffer of `length` bytes to read a literal into, valid until the next call. */
function scratch(length: number): Buffer {
	if (length > SCRATCH_BYTES) return Buffer.allocUnsafe(length);
	scratchBuffer ??= Buffer.allocUnsafe(SCRATCH_BYTES);
	return scratchBuffer.subarray(0, length);
}

/**
 * Whether `bytes`, the inside of a JSON string literal, is its own value: ASCII with no escape, no control
 * character and no quote (either would make the literal invalid: such bytes are left to `JSON.parse` to refuse).
 */
function plainAscii(bytes: Buffer): boolean {
	for (let i = 0; i < bytes.length; i++) {
		const b = bytes[i] as number;
		if (b < 0x20 || b >= 0x80 || b === 0x22 || b === 0x5c) return false;
	}
	return true;
}

/**
 * The session file as pi-sessiond read it, for the strings its entries left there. `refetch` reads an entry
 * whole through pi-sessiond, for when the file no longer holds it where it did.
 */
export class LazyFile {
	private readonly dev: number;
	private readonly ino: number;
	private readonly cache = new Map<number, string>();
	private cached = 0;

	constructor(
		readonly path: string,
		private readonly refetch: (id: string) => Entry | undefined,
	) {
		const st = statSync(path);
		this.dev = st.dev;
		this.ino = st.ino;
	}

	/**
	 * `item.entry` with a getter at each of `item.lazy`'s paths; returns the entry (a new object when one of its
	 * own members is lazy).
	 *
	 * Each object holding lazy members is made anew with the same keys in the same order, the lazy ones added as
	 * accessors shared by every object (`accessorOf`), and what they read from kept on it under a symbol. Turning
	 * the parsed object's `null` into an accessor in place would have made V8 keep it as a dictionary, and a
	 * getter of its own per string held its closures: on the 128 MB session (27,500 lazy strings) the entries took
	 * 51.5 MiB of heap that way, 40.8 MiB this way (33.8 MiB with no getters at all).
	 */
	revive(item: LazyEntry): Entry {
		if (!item.lazy || !item.line) return item.entry;
		const at: LazyAt = { file: this, entry: item.entry, line: item.line };
		const holder: { entry: Entry } = { entry: item.entry };
		// The lazy members of each object, by the path to it: each object is made again once, with all of its own.
		const byParent = new Map<string, { parent: (string | number)[]; members: Map<string, LazyMember> }>();
		for (const [path, offset, length] of item.lazy) {
			const parent = path.slice(0, -1);
			const name = JSON.stringify(parent);
			let group = byParent.get(name);
			if (group === undefined) {
				group = { parent, members: new Map() };
				byParent.set(name, group);
			}
			group.members.set(String(path[path.length - 1]), { at, path, offset, length });
		}
		for (const { parent, members } of byParent.values()) rebuild(holder, parent, members);
		at.entry = holder.entry;
		return holder.entry;
	}

	/** The string of a lazy member. */
	string(member: LazyMember): string {
		const { offset } = member;
		const hit = this.cache.get(offset);
		if (hit !== undefined) {
			// Most recently used last.
			this.cache.delete(offset);
			this.cache.set(offset, hit);
			return hit;
		}
		const value = this.read(offset, member.length, member.at.line) ?? this.fromServer(member.at.entry, member.path);
		const size = value.length * 2;
		if (size <= CACHE_BYTES / 4) {
			this.cache.set(offset, value);
			this.cached += size;
			for (const [k, v] of this.cache) {
				if (this.cached <= CACHE_BYTES) break;
				this.cache.delete(k);
				this.cached -= v.length * 2;
			}
		}
		return value;
	}

	/** The literal from the file, or undefined when the file is not the one read or the line moved. */
	private read(offset: number, length: number, [lineAt, lineLength]: [number, number]): string | undefined {
		let fd: number;
		try {
			fd = openSync(this.path, "r");
		} catch {
			return undefined;
		}
		try {
			const st = fstatSync(fd);
			if (st.dev !== this.dev || st.ino !== this.ino || st.size < lineAt + lineLength) return undefined;
			if (offset < lineAt || offset + length > lineAt + lineLength) return undefined;
			// The line must still be a line: white space or a newline (or the file's start) before it, and after it.
			const edge = Buffer.alloc(1);
			const blank = () => edge[0] === 0x0a || edge[0] === 0x0d || edge[0] === 0x20 || edge[0] === 0x09;
			if (lineAt > 0 && (readSync(fd, edge, 0, 1, lineAt - 1) !== 1 || !blank())) return undefined;
			if (st.size > lineAt + lineLength && (readSync(fd, edge, 0, 1, lineAt + lineLength) !== 1 || !blank())) return undefined;
			const bytes = scratch(length);
			let got = 0;
			while (got < length) {
				const n = readSync(fd, bytes, got, length - got, offset + got);
				if (n === 0) return undefined;
				got += n;
			}
			if (bytes[0] !== 0x22 || bytes[length - 1] !== 0x22) return undefined;
			const inner = bytes.subarray(1, length - 1);
			// Most long strings are base64 or plain ASCII text: read as they are, they leave one string behind,
			// where decoding and parsing leave three copies for the collector (a 500 MB session's tree, walked
			// whole, peaked higher on pi-sessiond than in plain pi for them).
			if (plainAscii(inner)) return inner.toString("latin1");
			const value: unknown = JSON.parse(decoder.decode(bytes));
			return typeof value === "string" ? value : undefined;
		} catch {
			return undefined;
		} finally {
			closeSync(fd);
		}
	}

	/** The string read through pi-sessiond, when the file no longer holds it where it was. */
	private fromServer(entry: Entry, path: (string | number)[]): string {
		const whole = this.refetch(entry.id);
		let value: any = whole;
		for (const step of path) value = value?.[step];
		if (typeof value !== "string") {
			throw new Error(
				`Session file ${this.path} changed on disk since it was opened: entry ${entry.id} is no longer there as it was read; open the session again`,
			);
		}
		return value;
	}
}

/** What the lazy members of one entry read from: the file, the entry (for reading it again whole) and its line. */
interface LazyAt {
	file: LazyFile;
	entry: Entry;
	line: [number, number];
}

/** One lazy member: its path from the entry and its literal's place in the file. */
interface LazyMember {
	at: LazyAt;
	path: (string | number)[];
	offset: number;
	length: number;
}

/**
 * Where an object keeps its lazy member `key`: under a symbol of that key's own, shared by all objects (so they
 * keep V8's fast shapes, and no walk over their keys sees it).
 */
const memberSymbols = new Map<string, symbol>();

function memberSymbol(key: string): symbol {
	let symbol = memberSymbols.get(key);
	if (symbol === undefined) {
		symbol = Symbol(`pi-sessiond lazy ${key}`);
		memberSymbols.set(key, symbol);
	}
	return symbol;
}

/** The accessor of every lazy member named `key`, shared by all of them (per-string closures cost memory). */
const accessors = new Map<string, PropertyDescriptor>();

function accessorOf(key: string): PropertyDescriptor {
	let accessor = accessors.get(key);
	if (accessor === undefined) {
		const symbol = memberSymbol(key);
		accessor = {
			enumerable: true,
			configurable: true,
			get(this: Record<symbol, LazyMember>) {
				const member = this[symbol] as LazyMember;
				return member.at.file.string(member);
			},
			// An assignment replaces the getter with the value, as on pi's objects.
			set(this: object, value: unknown) {
				Object.defineProperty(this, key, { value, writable: true, enumerable: true, configurable: true });
			},
		};
		accessors.set(key, accessor);
	}
	return accessor;
}

/**
 * Gives the object at `path` under `holder.entry` the lazy `members`: a plain object is made again in its key
 * order, with each lazy key an accessor added in its place (an object that only ever gains properties stays in
 * V8's fast shape), and put where the old one was; an array gets them in place.
 */
function rebuild(holder: { entry: Entry }, path: (string | number)[], members: Map<string, LazyMember>): void {
	let container: any = holder;
	let step: string | number = "entry";
	for (const next of path) {
		container = container[step];
		step = next;
	}
	const old = container[step];
	const hide = (target: object, key: string, member: LazyMember) => Object.defineProperty(target, memberSymbol(key), { value: member });
	if (Array.isArray(old)) {
		for (const [key, member] of members) {
			Object.defineProperty(old, key, accessorOf(key));
			hide(old, key, member);
		}
		return;
	}
	const made: Record<string, unknown> = {};
	for (const key of Object.keys(old)) {
		const member = members.get(key);
		if (member !== undefined) {
			Object.defineProperty(made, key, accessorOf(key));
			hide(made, key, member);
		}
		// `__proto__` is an own key of a parsed object; assigned, it would set the prototype.
		else if (key === "__proto__") Object.defineProperty(made, key, { value: old[key], writable: true, enumerable: true, configurable: true });
		else made[key] = old[key];
	}
	container[step] = made;
}
