/**
 * The read side of pi 1.6.0's `SessionManager` over entries held in this process: pi's fields (`fileEntries`,
 * `byId`, the label maps, `leafId`) and every read method with pi's results, computed locally and synchronously.
 *
 * It is the mirror's core: the drop-in `SessionManager` extends it (its writes go through pi-sessiond and land
 * here as entries), and `MirroredSession` keeps one current from `session/changed`. Nothing here does I/O.
 */

import { ContextCache } from "./context-cache.js";
import { appendedTail, type Context, type Entry, type Projection } from "./context.js";

/** pi's `SessionTreeNode`. */
export interface TreeNode {
	entry: Entry;
	children: TreeNode[];
	label?: string;
	labelTimestamp?: string;
}

/** A session's entries and leaf, with pi's reads over them. */
export class SessionView {
	/** The header and the entries in file order, as pi's `fileEntries`. */
	protected fileEntries: Entry[] = [];
	/** Entries by id (the last one wins when ids repeat), as pi's `byId`. */
	protected byId = new Map<unknown, Entry>();
	/** Resolved labels by target id. */
	protected labelsById = new Map<unknown, string>();
	/** Timestamps of the label changes that set `labelsById`. */
	protected labelTimestampsById = new Map<unknown, string>();
	/** The entry the next append goes under, or null. */
	protected leafId: string | null = null;
	/**
	 * Changes whenever the entries changed other than by appending entries with new ids (an index rebuilt, an id
	 * reused): the context cache then starts again.
	 */
	private indexVersion = 0;
	private readonly contextCache = new ContextCache();
	/** The leaf's path and what it was found from (`leafPath`). */
	private keptPath: { fileEntries: Entry[]; version: number; length: number; leafId: string; path: Entry[] } | undefined;

	/** Replaces everything with `fileEntries` and rebuilds the indices; the leaf is the last entry (pi's `_buildIndex`). */
	protected _buildIndex(): void {
		this.indexVersion++;
		this.byId.clear();
		this.labelsById.clear();
		this.labelTimestampsById.clear();
		this.leafId = null;
		for (const entry of this.fileEntries) {
			if (entry.type === "session") continue;
			this.byId.set(entry.id, entry);
			this.leafId = entry.id;
			this.indexLabel(entry);
		}
	}

	/** Adds one entry at the end and makes it the leaf (what every append does once it is written). */
	protected pushEntry(entry: Entry): void {
		if (this.byId.has(entry.id)) this.indexVersion++;
		this.fileEntries.push(entry);
		this.byId.set(entry.id, entry);
		this.leafId = entry.id;
		this.indexLabel(entry);
	}

	private indexLabel(entry: Entry): void {
		if (entry.type !== "label") return;
		if (entry.label) {
			this.labelsById.set(entry.targetId, entry.label);
			this.labelTimestampsById.set(entry.targetId, entry.timestamp);
		} else {
			this.labelsById.delete(entry.targetId);
			this.labelTimestampsById.delete(entry.targetId);
		}
	}

	/** The leaf id, or null. */
	getLeafId(): string | null {
		return this.leafId;
	}

	/** The leaf entry, or undefined. */
	getLeafEntry(): Entry | undefined {
		return this.leafId ? this.byId.get(this.leafId) : undefined;
	}

	/** The entry with this id, or undefined. */
	getEntry(id: string): Entry | undefined {
		return this.byId.get(id);
	}

	/** The entries whose parent is `parentId`, in `byId` order (pi's). */
	getChildren(parentId: string): Entry[] {
		const children: Entry[] = [];
		for (const entry of this.byId.values()) if (entry.parentId === parentId) children.push(entry);
		return children;
	}

	/** The entry's label, or undefined. */
	getLabel(id: string): string | undefined {
		return this.labelsById.get(id);
	}

	/** The path from the root to `fromId` (default: the leaf). */
	getBranch(fromId?: string): Entry[] {
		const startId = fromId ?? this.leafId;
		if (startId && startId === this.leafId) return this.leafPath(startId).slice();
		return this.walkTo(startId);
	}

	private walkTo(startId: string | null): Entry[] {
		const path: Entry[] = [];
		let current = startId ? this.byId.get(startId) : undefined;
		while (current) {
			path.push(current);
			current = current.parentId ? this.byId.get(current.parentId) : undefined;
		}
		path.reverse();
		return path;
	}

	/**
	 * The path to the leaf, kept and brought forward by the entries appended since, as the context cache keeps
	 * its own: pi asks for it several times a prompt, and walking a 128 MB session's 55,000 entries each time took
	 * 15 ms of its start. Another leaf, a rebuilt index or a replaced entry array walks again.
	 */
	private leafPath(leafId: string): Entry[] {
		const kept = this.keptPath;
		if (kept && kept.fileEntries === this.fileEntries && kept.version === this.indexVersion && this.fileEntries.length >= kept.length) {
			if (kept.leafId === leafId && kept.length === this.fileEntries.length) return kept.path;
			const tail = appendedTail(this.fileEntries, kept.length, leafId, this.byId, kept.path[kept.path.length - 1]);
			if (tail !== undefined) {
				kept.path.push(...tail);
				kept.leafId = leafId;
				kept.length = this.fileEntries.length;
				return kept.path;
			}
		}
		const path = this.walkTo(leafId);
		this.keptPath = { fileEntries: this.fileEntries, version: this.indexVersion, length: this.fileEntries.length, leafId, path };
		return path;
	}

	/** pi's `buildContextEntries()` at the leaf. */
	buildContextEntries(): Entry[] {
		return this.context().contextEntriesResult();
	}

	/** pi's `buildSessionProjection()` at the leaf. */
	buildSessionProjection(): Projection {
		return this.context().projection();
	}

	/**
	 * pi's `buildSessionContext()` at the leaf. After appends that extend the leaf it costs what they add, not the
	 * whole path again (see `ContextCache`).
	 */
	buildSessionContext(): Context {
		return this.context().context();
	}

	private context(): ContextCache {
		this.contextCache.update(this.fileEntries, this.indexVersion, this.leafId, this.byId);
		return this.contextCache;
	}

	/** The header, or null. */
	getHeader(): Entry | null {
		const header = this.fileEntries.find((e) => e.type === "session");
		return header ? header : null;
	}

	/** The number of distinct entry ids. */
	getEntryCount(): number {
		return this.byId.size;
	}

	/** The entries in file order, header excluded (a new array of the same objects, as pi's). */
	getEntries(): Entry[] {
		return this.fileEntries.filter((e) => e.type !== "session");
	}

	/** The name set by the last `session_info` entry in the file, or undefined. */
	getSessionName(): string | undefined {
		for (let i = this.fileEntries.length - 1; i >= 0; i--) {
			const entry = this.fileEntries[i];
			if (entry.type === "session_info") return entry.name?.trim() || undefined;
		}
		return undefined;
	}

	/** pi's `getTree()`: roots in file order, orphans as roots, children sorted by timestamp, labels resolved. */
	getTree(): TreeNode[] {
		const entries = this.getEntries();
		const nodes = new Map<unknown, TreeNode>();
		const roots: TreeNode[] = [];
		for (const entry of entries) {
			const label = this.labelsById.get(entry.id);
			const labelTimestamp = this.labelTimestampsById.get(entry.id);
			nodes.set(entry.id, { entry, children: [], label, labelTimestamp });
		}
		for (const entry of entries) {
			const node = nodes.get(entry.id) as TreeNode;
			if (entry.parentId === null || entry.parentId === entry.id) {
				roots.push(node);
			} else {
				const parent = nodes.get(entry.parentId);
				if (parent) parent.children.push(node);
				else roots.push(node);
			}
		}
		const stack = [...roots];
		while (stack.length > 0) {
			const node = stack.pop() as TreeNode;
			node.children.sort((a, b) => new Date(a.entry.timestamp).getTime() - new Date(b.entry.timestamp).getTime());
			stack.push(...node.children);
		}
		return roots;
	}
}
