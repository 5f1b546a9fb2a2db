/**
 * The context reads of a `SessionView`, kept between calls and brought forward by the entries appended since,
 * so a host that appends a turn and builds the context again pays for the turn, not for the session.
 *
 * pi's `buildSessionContext()` walks the whole path from the leaf to the root and projects every context entry
 * again on each call: about 2 ms on a 40 MB session, which a host pays every turn. What it computes only grows
 * when the new leaf extends the old one by entries that were just appended and that change nothing before them
 * (no compaction, no context edit, no id already taken; an edit written earlier that names a new entry's id
 * applies to it as it would in pi, through the edits already held). Then the path, the
 * context entries and their messages are the old ones plus the new ones; anything else (another leaf, a rebuilt
 * index, a replaced entry array) computes everything again, exactly as pi does.
 *
 * Results are pi's value for value, with pi's identities: a stored message is returned as itself, and every
 * object pi builds anew on each call (arrays, projection items, summary and custom messages, edited copies, the
 * model) is built anew here too, so a caller that changes a result changes nothing kept.
 */

import {
	appendedTail,
	type Context,
	contextEdits,
	contextEntriesOfPath,
	contextSettings,
	type Entry,
	type Message,
	type Projection,
	pathTo,
	projectAt,
} from "./context.js";

/** One context entry and what it contributes. */
interface Item {
	sourceEntry: Entry;
	/** Its position among the context entries (a compaction after the first contributes nothing). */
	index: number;
	messages: Message[];
	/** True when `messages` holds objects pi builds on each call (anything but the stored message itself). */
	built: boolean;
	/** Where its messages start in the flat list. */
	offset: number;
}

/** What the cache was computed from. */
interface Basis {
	fileEntries: Entry[];
	version: number;
	length: number;
	leafId: string | null;
}

/** pi's context reads over a view's entries, computed again only as far as they changed (see the module doc). */
export class ContextCache {
	private basis: Basis | undefined;
	private path: Entry[] = [];
	private contextEntries: Entry[] = [];
	private items: Item[] = [];
	private built: Item[] = [];
	private messages: Message[] = [];
	private edits = new Map<unknown, Entry>();
	private settings: { thinkingLevel: string; model: Context["model"] } = { thinkingLevel: "off", model: null };

	/**
	 * Brings the cache to `leafId` over `fileEntries` (header included) and `byId`. `version` changes whenever the
	 * view changed its entries other than by appending new ids at the end.
	 */
	update(fileEntries: Entry[], version: number, leafId: string | null, byId: Map<unknown, Entry>): void {
		const basis = this.basis;
		const now: Basis = { fileEntries, version, length: fileEntries.length, leafId };
		this.basis = now;
		if (basis && basis.fileEntries === fileEntries && basis.version === version && fileEntries.length >= basis.length) {
			if (fileEntries.length === basis.length && leafId === basis.leafId) return;
			if (leafId !== null && this.extend(fileEntries, basis.length, leafId, byId)) return;
		}
		this.compute(fileEntries, leafId, byId);
	}

	/** pi's `buildContextEntries()`. */
	contextEntriesResult(): Entry[] {
		return this.contextEntries.slice();
	}

	/** pi's `buildSessionProjection()`. */
	projection(): Projection {
		const entries = this.items.map((item) => ({ sourceEntry: item.sourceEntry, messages: this.messagesOf(item) }));
		return { entries, messages: entries.flatMap((e) => e.messages), ...this.settingsResult() };
	}

	/** pi's `buildSessionContext()`. */
	context(): Context {
		const messages = this.messages.slice();
		for (const item of this.built) {
			const fresh = projectAt(item.sourceEntry, item.index, this.edits);
			for (let k = 0; k < fresh.length; k++) messages[item.offset + k] = fresh[k];
		}
		return { messages, ...this.settingsResult() };
	}

	private messagesOf(item: Item): Message[] {
		return item.built ? projectAt(item.sourceEntry, item.index, this.edits) : item.messages.slice();
	}

	private settingsResult(): { thinkingLevel: string; model: Context["model"] } {
		const { thinkingLevel, model } = this.settings;
		return { thinkingLevel, model: model ? { provider: model.provider, modelId: model.modelId } : null };
	}

	/** Everything from the entries, as pi computes it. */
	private compute(fileEntries: Entry[], leafId: string | null, byId: Map<unknown, Entry>): void {
		this.path = pathTo(byId, leafId, lastEntry(fileEntries));
		this.settings = contextSettings(this.path);
		const contextEntries = contextEntriesOfPath(this.path);
		// Without a compaction the context entries are the path itself: kept apart, since both grow.
		this.contextEntries = contextEntries === this.path ? contextEntries.slice() : contextEntries;
		this.edits = contextEdits(this.contextEntries);
		this.items = [];
		this.built = [];
		this.messages = [];
		for (const entry of this.contextEntries) this.addItem(entry);
	}

	private addItem(sourceEntry: Entry): void {
		const index = this.items.length;
		const messages = projectAt(sourceEntry, index, this.edits);
		const built = !(sourceEntry.type === "message" && messages.length === 1 && messages[0] === sourceEntry.message);
		const item: Item = { sourceEntry, index, messages, built: built && messages.length > 0, offset: this.messages.length };
		this.items.push(item);
		if (item.built) this.built.push(item);
		for (const message of messages) this.messages.push(message);
	}

	/**
	 * Extends the cache when the path to `leafId` is the cached path plus entries appended since (at or after
	 * `from` in `fileEntries`) that leave everything before them as it was. False when it is not so.
	 */
	private extend(fileEntries: Entry[], from: number, leafId: string, byId: Map<unknown, Entry>): boolean {
		const tail = appendedTail(fileEntries, from, leafId, byId, this.path[this.path.length - 1]);
		if (tail === undefined || tail.some((entry) => entry.type === "compaction" || entry.type === "context_edit")) return false;
		for (const entry of tail) {
			this.path.push(entry);
			this.contextEntries.push(entry);
			this.addItem(entry);
		}
		this.settings = contextSettings(tail, this.settings);
		return true;
	}
}

/** The last entry that is not a header, or undefined. */
function lastEntry(fileEntries: Entry[]): Entry | undefined {
	for (let i = fileEntries.length - 1; i >= 0; i--) if (fileEntries[i].type !== "session") return fileEntries[i];
	return undefined;
}
