/**
 * `MirroredSession`: a session's entries held in this process and kept current from `session/changed`, so pi's
 * reads (`getEntries`, `getBranch`, `getTree`, `buildSessionContext`, …) are answered locally and synchronously,
 * with pi's results, instead of a round trip that copies bodies each time.
 *
 * It starts from a snapshot (the entries at a known `seq`), then applies each change in `seq` order: appends add
 * entries, `leaf` moves the leaf, and a rebind, reset or a gap the client detected (`resync`) takes a new snapshot.
 * Changes that arrive while a snapshot is being taken wait, and only those after its `seq` are applied, so the
 * mirror never applies a change twice or misses one.
 *
 * How a snapshot is taken is the one seam that follows the server: today `session/getState`, `session/getEntries`
 * in pages, `session/getState` (equal seqs prove the entries are the state's); a server that sends `snapshot` with the state
 * (`snapshot: "full"`, PLAN.md) is used as is.
 */

import type { Entry } from "./pi/context.js";
import { SessionView } from "./pi/view.js";
import type { SessionChanged, SessionState } from "./protocol.js";
import type { RemoteSession } from "./session.js";

/** Entries at a `seq`: the mirror's starting point. */
export interface Snapshot {
	seq: number;
	state: SessionState;
	entries: Entry[];
}

/** Takes a consistent snapshot of `session`: entries that are exactly the state at `seq`. */
export async function takeSnapshot(session: RemoteSession): Promise<Snapshot> {
	for (;;) {
		const before = (await session.getState()) as SessionState & { snapshot?: { seq: number; entries: Entry[] } };
		if (before.snapshot) return { seq: before.snapshot.seq, state: before, entries: before.snapshot.entries };
		const entries: Entry[] = [];
		for (let offset = 0; ; offset += PAGE) {
			const page = await session.getEntries({ offset, limit: PAGE });
			for (const entry of page) entries.push(entry);
			if (page.length < PAGE) break;
		}
		const after = await session.getState();
		// Every page was read after `before` and before `after`, and no change came between them: the entries are the
		// state at that seq.
		if (after.seq === before.seq) return { seq: after.seq, state: after, entries };
	}
}

/** Entries per page of a snapshot: smaller answers parse faster than one of tens of megabytes, and peak lower. */
const PAGE = 1000;

/**
 * A `RemoteSession` with a local mirror. Reads are pi's, from the mirror; writes go through `remote` (the mirror
 * has them by the time the write's promise resolves, unless a snapshot is being taken: `ready()` waits for it).
 */
export class MirroredSession extends SessionView {
	/** The session the mirror follows; write through it. */
	readonly remote: RemoteSession;
	private header: Entry | null = null;
	private seqApplied = 0;
	private loading: Promise<void> | undefined;
	/** Set from the moment the client saw a gap until its resync (and so the new snapshot) has started. */
	private awaitingResync: Promise<void> | undefined;
	private endAwaitingResync: (() => void) | undefined;
	private queued: SessionChanged[] = [];
	private readonly unsubscribe: (() => void)[] = [];
	private readonly updateListeners = new Set<() => void>();
	private snapshots = 0;
	private snapshotError: Error | undefined;

	private constructor(remote: RemoteSession) {
		super();
		this.remote = remote;
	}

	/**
	 * Mirrors an open session (from `openSession`, `createSession`, …; open with `watch: true` to follow other
	 * processes' appends). Resolves once the first snapshot is in.
	 */
	static async attach(remote: RemoteSession): Promise<MirroredSession> {
		const mirror = new MirroredSession(remote);
		mirror.unsubscribe.push(
			remote.on("changed", (n) => mirror.onChanged(n)),
			remote.on("resyncStarted", () => mirror.gapSeen()),
			remote.on("resync", () => {
				mirror.resnapshot();
				mirror.gapClosed();
			}),
			remote.on("resyncFailed", () => {
				// Without the state the client goes on from the notification that revealed the gap; so does the mirror,
				// from a snapshot of its own.
				mirror.resnapshot();
				mirror.gapClosed();
			}),
		);
		mirror.resnapshot();
		await mirror.ready();
		return mirror;
	}

	/**
	 * Resolves when no snapshot is being taken or due (every change received so far is applied; after a gap, the
	 * snapshot that repairs it is in). Rejects when the last snapshot failed (the session or the process ended).
	 */
	async ready(): Promise<void> {
		for (;;) {
			const pending = this.awaitingResync ?? this.loading;
			if (!pending) break;
			await pending;
		}
		if (this.snapshotError) throw this.snapshotError;
	}

	private gapSeen(): void {
		this.awaitingResync ??= new Promise<void>((resolve) => {
			this.endAwaitingResync = resolve;
		});
	}

	private gapClosed(): void {
		const end = this.endAwaitingResync;
		this.awaitingResync = undefined;
		this.endAwaitingResync = undefined;
		end?.();
	}

	/** The `seq` of the last change the mirror holds. */
	get seq(): number {
		return this.seqApplied;
	}

	/** How many snapshots were taken (1 after attach; more after rebinds, resets and gaps). */
	get snapshotCount(): number {
		return this.snapshots;
	}

	/** The header, or null. */
	override getHeader(): Entry | null {
		return this.header;
	}

	/** The session file, or undefined in memory. */
	getSessionFile(): string | undefined {
		return this.remote.getSessionFile() ?? undefined;
	}

	/** The session id. */
	getSessionId(): string {
		return this.remote.getSessionId();
	}

	/** The working directory. */
	getCwd(): string {
		return this.remote.getCwd();
	}

	/** The directory new sessions go to. */
	getSessionDir(): string {
		return this.remote.getSessionDir();
	}

	/** False in memory. */
	isPersisted(): boolean {
		return this.remote.isPersisted();
	}

	/**
	 * Calls `listener` each time the mirror changed (a change applied, a snapshot taken), after the change: a view
	 * redraws from the mirror's reads, with no request. Returns a function that removes it.
	 */
	onUpdate(listener: () => void): () => void {
		this.updateListeners.add(listener);
		return () => this.updateListeners.delete(listener);
	}

	private updated(): void {
		for (const listener of [...this.updateListeners]) {
			try {
				listener();
			} catch (error) {
				queueMicrotask(() => {
					throw error;
				});
			}
		}
	}

	/** Stops following and closes the remote session. */
	async close(): Promise<void> {
		for (const off of this.unsubscribe.splice(0)) off();
		await this.remote.close();
	}

	private onChanged(n: SessionChanged): void {
		if (this.loading) {
			this.queued.push(n);
			return;
		}
		this.apply(n);
	}

	private apply(n: SessionChanged): void {
		if (n.seq <= this.seqApplied) return;
		const change = n.change;
		switch (change.kind) {
			case "append":
				for (const entry of change.entries as Entry[]) this.pushEntry(entry);
				this.leafId = (n.leafId as string | null | undefined) ?? null;
				break;
			case "leaf":
				this.leafId = (change.leafId as string | null | undefined) ?? null;
				break;
			case "rebind":
			case "reset":
				// Another session, or the file read again: start over from a snapshot.
				this.seqApplied = n.seq;
				this.resnapshot();
				return;
			case "deleted":
				// The server keeps the session (its next write puts the file back whole); so does the mirror.
				break;
		}
		this.seqApplied = n.seq;
		this.updated();
	}

	private resnapshot(): void {
		if (this.loading) {
			// A snapshot is already being taken: take another once it is in, since it may predate what prompted this.
			void this.loading.then(() => this.resnapshot());
			return;
		}
		this.loading = (async () => {
			try {
				const snapshot = await takeSnapshot(this.remote);
				this.header = (snapshot.state.header as Entry | null | undefined) ?? null;
				this.fileEntries = this.header ? [this.header, ...snapshot.entries] : [...snapshot.entries];
				this._buildIndex();
				this.leafId = (snapshot.state.leafId as string | null | undefined) ?? null;
				this.seqApplied = snapshot.seq;
				this.snapshots++;
				this.snapshotError = undefined;
				this.updated();
			} catch (error) {
				// The session closed or the process ended while the snapshot was taken: the mirror keeps what it had, and
				// ready() reports why it is not current.
				this.snapshotError = error instanceof Error ? error : new Error(String(error));
			} finally {
				this.loading = undefined;
				const queued = this.queued.splice(0);
				for (const n of queued) this.onChanged(n);
			}
		})();
	}
}
