/**
 * `MirroredSession`: a session's entries held in this process and kept current from `session/changed`, so pi's
 * reads (`getEntries`, `getBranch`, `getTree`, `buildSessionContext`, …) are answered locally and synchronously,
 * with pi's results, instead of a round trip that copies bodies each time.
 *
 * It starts from the snapshot the server sends with the open (`snapshot: "full"` or `"skeleton"`: every entry at a
 * known `seq`), then applies each change in `seq` order: appends add entries, `leaf` moves the leaf, a rebind or a
 * reset replaces everything with the snapshot the change carries. When the client sees a gap in `seq` (a lost
 * notification), the mirror asks `session/changesSince` for what it missed and applies those changes, or the fresh
 * snapshot the server sends when it no longer holds them. Changes that arrive while it waits for an answer are
 * queued, and only those after what it then holds are applied, so the mirror never applies a change twice or misses
 * one.
 *
 * A `skeleton` mirror (for views: a few hundred bytes an entry however large the body) answers the tree reads
 * (`getTree`, `getBranch`, `getLabel`, `getSessionName`, …) with skeleton entries; the context reads need bodies
 * and throw. A `full` mirror answers every read exactly as pi does.
 */

import type { Entry } from "./pi/context.js";
import { SessionView } from "./pi/view.js";
import type { ChangesSinceResult, SessionChanged, SessionState, Snapshot } from "./protocol.js";
import type { RemoteSession } from "./session.js";

/** What a mirror holds of each entry: bodies (`full`) or skeletons (`skeleton`). */
export type MirrorDetail = "skeleton" | "full";

/**
 * A `RemoteSession` with a local mirror. Reads are pi's, from the mirror; writes go through `remote` (the mirror
 * has them by the time the write's promise resolves, unless a repair is under way: `ready()` waits for it).
 */
export class MirroredSession extends SessionView {
	/** The session the mirror follows; write through it. */
	readonly remote: RemoteSession;
	/** What the mirror holds of each entry. */
	readonly detail: MirrorDetail;
	private header: Entry | null = null;
	private seqApplied = 0;
	private loading: Promise<void> | undefined;
	/** Set from the moment the client saw a gap until its repair has started. */
	private awaitingResync: Promise<void> | undefined;
	private endAwaitingResync: (() => void) | undefined;
	private queued: SessionChanged[] = [];
	private readonly unsubscribe: (() => void)[] = [];
	private readonly updateListeners = new Set<() => void>();
	private snapshots = 0;
	private deltaRepairs = 0;
	private snapshotError: Error | undefined;

	private constructor(remote: RemoteSession, detail: MirrorDetail) {
		super();
		this.remote = remote;
		this.detail = detail;
	}

	/**
	 * Mirrors an open session. Open it with `snapshot: "full"` (or `"skeleton"` for a view) so the mirror starts from
	 * the open's own answer, and with `watch: true` to follow other processes' appends; a session opened without a
	 * snapshot is mirrored `full` from a `session/getState {snapshot}` (which makes its later changes full). Resolves
	 * once the mirror holds the session.
	 */
	static async attach(remote: RemoteSession): Promise<MirroredSession> {
		const mirror = new MirroredSession(remote, remote.getDetail() === "skeleton" ? "skeleton" : "full");
		mirror.unsubscribe.push(
			remote.on("changed", (n) => mirror.onChanged(n)),
			remote.on("resyncStarted", () => mirror.gapSeen()),
			remote.on("resync", () => {
				mirror.repair();
				mirror.gapClosed();
			}),
			remote.on("resyncFailed", () => {
				mirror.repair();
				mirror.gapClosed();
			}),
		);
		const held = remote._takeOpenSnapshot();
		if (held) {
			mirror.install(held.state, held.snapshot);
			for (const n of held.changes) mirror.onChanged(n);
		} else {
			mirror.resnapshot();
		}
		await mirror.ready();
		return mirror;
	}

	/**
	 * Resolves when no repair is under way or due (every change received so far is applied; after a gap, what the
	 * server sent to close it is in). Rejects when the last repair failed (the session or the process ended).
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

	/** How many snapshots the mirror started from (1 after attach; more after rebinds, resets and lost history). */
	get snapshotCount(): number {
		return this.snapshots;
	}

	/** How many gaps were closed with the missed changes alone (`session/changesSince` answering `changes`). */
	get deltaRepairCount(): number {
		return this.deltaRepairs;
	}

	/** The header, or null. */
	override getHeader(): Entry | null {
		return this.header;
	}

	/** pi's `buildContextEntries()` at the leaf; needs a `full` mirror. */
	override buildContextEntries(): ReturnType<SessionView["buildContextEntries"]> {
		this.needBodies("buildContextEntries");
		return super.buildContextEntries();
	}

	/** pi's `buildSessionProjection()` at the leaf; needs a `full` mirror. */
	override buildSessionProjection(): ReturnType<SessionView["buildSessionProjection"]> {
		this.needBodies("buildSessionProjection");
		return super.buildSessionProjection();
	}

	/** pi's `buildSessionContext()` at the leaf; needs a `full` mirror. */
	override buildSessionContext(): ReturnType<SessionView["buildSessionContext"]> {
		this.needBodies("buildSessionContext");
		return super.buildSessionContext();
	}

	private needBodies(read: string): void {
		if (this.detail !== "full") {
			throw new Error(`${read} needs entry bodies, and this mirror holds skeletons: open the session with snapshot "full"`);
		}
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
				break;
			case "leaf":
				break;
			case "rebind":
			case "reset": {
				// Another session, or the file read again: start over from the snapshot the change carries. One without
				// means the file changed again while the server read it: ask for one.
				const snapshot = change.snapshot;
				if (!snapshot) {
					this.seqApplied = n.seq;
					this.resnapshot();
					return;
				}
				this.install(change.state, snapshot);
				break;
			}
			case "deleted":
				// The server keeps the session (its next write puts the file back whole); so does the mirror.
				break;
		}
		this.leafId = (n.leafId as string | null | undefined) ?? null;
		this.seqApplied = n.seq;
		this.updated();
	}

	/**
	 * Replaces everything with `snapshot` (the entries as of `snapshot.seq`) and `state`'s header and leaf; the
	 * caller tells the listeners, once.
	 */
	private install(state: SessionState, snapshot: Snapshot): void {
		this.header = (state.header as Entry | null | undefined) ?? null;
		const entries = snapshot.entries as Entry[];
		this.fileEntries = this.header ? [this.header, ...entries] : entries;
		this._buildIndex();
		this.leafId = (state.leafId as string | null | undefined) ?? null;
		this.seqApplied = snapshot.seq;
		this.snapshots++;
		this.snapshotError = undefined;
	}

	/** Runs `step` with changes queued meanwhile, then applies those the mirror does not hold yet. */
	private load(step: () => Promise<void>): void {
		if (this.loading) {
			// Already loading: go again once that is in, since it may predate what prompted this.
			void this.loading.then(() => this.load(step));
			return;
		}
		this.loading = (async () => {
			try {
				await step();
			} catch (error) {
				// The session closed or the process ended: the mirror keeps what it had, and ready() reports why it is
				// not current.
				this.snapshotError = error instanceof Error ? error : new Error(String(error));
			} finally {
				this.loading = undefined;
				for (const n of this.queued.splice(0)) this.onChanged(n);
			}
		})();
	}

	/** A fresh snapshot at the mirror's detail. */
	private resnapshot(): void {
		this.load(async () => {
			const { state, snapshot } = await this.remote.getSnapshot(this.detail);
			this.install(state, snapshot);
			this.updated();
		});
	}

	/** After a gap: the changes since the mirror's seq, or the fresh snapshot the server sends in their place. */
	private repair(): void {
		this.load(async () => {
			const answer: ChangesSinceResult = await this.remote.changesSince(this.seqApplied);
			if (answer.changes) {
				this.deltaRepairs++;
				// A rebind or reset among them that carries no snapshot asks for one, which follows this load and replaces
				// whatever the rest of them add.
				for (const n of answer.changes) this.apply(n);
			} else if (answer.state && answer.snapshot) {
				this.install(answer.state, answer.snapshot);
				this.updated();
			} else {
				throw new Error(`session/changesSince on ${this.remote.handle} answered neither changes nor a snapshot`);
			}
		});
	}
}
