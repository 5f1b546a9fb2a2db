/** `RemoteSession`: one open session of pi-sessiond, with pi's SessionManager methods as Promises. */

import type { AgentMessage } from "@earendil-works/pi-agent-core";
import type { ImageContent, SystemMessage, TextContent, Usage } from "@earendil-works/pi-ai";
import { SessiondError, SessiondExitedError } from "./errors.js";
import { AsyncQueue, TypedEmitter } from "./events.js";
import {
	type BatchOp,
	type ChangesSinceResult,
	ERROR_CODES,
	type EntryAtDetail,
	type ProtocolRequests,
	type Detail,
	type SessionChanged,
	type SessionContext,
	type SessionEntry,
	type SessionHeader,
	type SessionProjection,
	type SessionState,
	type SessionTreeNode,
	type Snapshot,
	type WarningJson,
} from "./protocol.js";
import type { ContextEditReplacement, MutationOptions, RequestOptions, SessionTreeFlatNode, SessionUpdate } from "./types.js";

/** Details of a resync: which seq was expected and which arrived. */
export interface ResyncInfo {
	expectedSeq: number;
	receivedSeq: number;
}

/** The events of a `RemoteSession`. */
export type RemoteSessionEvents = {
	/** A `session/changed` notification for this session, in `seq` order, without gaps. */
	changed: [change: SessionChanged];
	/**
	 * A notification was lost (a gap in `seq`): `state` is what `session/getState` returned afterwards, and
	 * `state.seq` the last change it includes. The notification that revealed the gap, and any that arrived while
	 * the state was fetched and are already part of it, are not emitted as `changed`; the next `changed` has seq
	 * `state.seq + 1`.
	 */
	resync: [state: SessionState, info: ResyncInfo];
	/** Fetching the state after a gap failed (the session was closed meanwhile, or the process died). */
	resyncFailed: [error: Error];
	/**
	 * A gap was just seen and the state is being fetched: a `resync` (or `resyncFailed`) follows. Emitted before the
	 * request that revealed the gap resolves, so a mirror can tell it is stale at once.
	 */
	resyncStarted: [info: ResyncInfo];
	/** The session was closed (by `close()`, by `client.close()`, or because the process ended). */
	closed: [];
};

/** @internal What a RemoteSession needs from its client. */
export interface SessionHost {
	request<M extends keyof ProtocolRequests>(
		method: M,
		params: ProtocolRequests[M]["params"],
		options?: RequestOptions,
	): Promise<ProtocolRequests[M]["result"]>;
	release(session: RemoteSession): void;
}

/** Options of `getEntries`. */
export interface EntriesOptions extends RequestOptions {
	/** Entries to skip. */
	offset?: number;
	/** At most this many. */
	limit?: number;
}

/** Extra options of `appendCompaction`. */
export interface CompactionOptions extends MutationOptions {
	/** The checkpoint system message (default: pi's replay of the current system messages). */
	systemMessage?: SystemMessage;
	/** The complete post-compaction messages; `firstKeptEntryId` is written too. */
	retainedTail?: AgentMessage[];
}

/** Changes kept beside an open's snapshot that no mirror took yet; past this the snapshot is dropped. */
const HELD_CHANGES_MAX = 1024;

function mutation(opts: MutationOptions | undefined): { expectedLeafId?: string | null } {
	return opts && "expectedLeafId" in opts ? { expectedLeafId: opts.expectedLeafId } : {};
}

/**
 * An open session. Every method sends one request naming the session's handle; mutations sent without awaiting are
 * applied in the order they were called.
 *
 * Reads return pi's JSON shapes (entries exactly as stored, `null` where pi returns `undefined`). Entry ids, labels
 * and names are typed as strings, which they are in every file pi writes; the protocol types them as any JSON value
 * because a hand-edited file may hold something else.
 *
 * Change notifications arrive as `changed` events and through `changes()`. Opening the same file twice gives two
 * RemoteSessions on one server handle (reference-counted); both see every change, and each `close()` drops one
 * reference.
 */
export class RemoteSession extends TypedEmitter<RemoteSessionEvents> {
	/** The server's handle for this session. */
	readonly handle: string;
	private readonly host: SessionHost;
	private state: SessionState;
	private closedFlag = false;
	/** Closed because the process died (not by `close()`): later calls then fail as the client's do. */
	private endedByExit = false;
	private closing: Promise<void> | undefined;
	private readonly iterators = new Set<AsyncQueue<SessionUpdate>>();
	/**
	 * The snapshot the open's result carried, and the changes delivered since, until a mirror takes them: the client
	 * delivers changes that overtook the open's answer before the caller can subscribe, so without these a mirror
	 * built on the open's snapshot would miss them. Dropped (the mirror then asks for a snapshot) when it would grow
	 * past `HELD_CHANGES_MAX` or a gap makes it stale.
	 */
	private openSnapshot: { snapshot: Snapshot; changes: SessionChanged[] } | undefined;

	/** @internal Built by the client from an open method's result. */
	constructor(host: SessionHost, state: SessionState) {
		super();
		this.host = host;
		this.handle = state.handle;
		if (state.snapshot) {
			this.openSnapshot = { snapshot: state.snapshot, changes: [] };
			// The entries live in the snapshot (and then the mirror) only: a 40 MB session is not kept twice.
			const { snapshot: _held, ...rest } = state;
			this.state = rest as SessionState;
		} else {
			this.state = state;
		}
	}

	/**
	 * @internal The open's snapshot and the changes since (each with a higher seq), once; undefined when the open asked
	 * for none or it was already taken or dropped.
	 */
	_takeOpenSnapshot(): { state: SessionState; snapshot: Snapshot; changes: SessionChanged[] } | undefined {
		const held = this.openSnapshot;
		this.openSnapshot = undefined;
		return held && { state: this.state, ...held };
	}

	/**
	 * The detail of this handle (chosen at open with `snapshot`): what its `session/changed` entries are, `skeleton`
	 * or as stored (`none`, `full`).
	 */
	getDetail(): Detail {
		return this.state.detail;
	}

	// ----- Local mirrors of the session's identity (kept current by rebind/reset/resync; no request) -----

	/** The session file, or null for an in-memory session (pi's `getSessionFile`). */
	getSessionFile(): string | null {
		return this.state.sessionFile ?? null;
	}

	/** The session id (pi's `getSessionId`). */
	getSessionId(): string {
		return this.state.sessionId as string;
	}

	/** The working directory (pi's `getCwd`). */
	getCwd(): string {
		return this.state.cwd;
	}

	/** The directory new sessions made from this one go to (pi's `getSessionDir`; `""` in memory). */
	getSessionDir(): string {
		return this.state.sessionDir;
	}

	/** False for an in-memory session (pi's `isPersisted`). */
	isPersisted(): boolean {
		return this.state.isPersisted;
	}

	/** True once `close()` was called or the client ended. */
	get closed(): boolean {
		return this.closedFlag;
	}

	// ----- Mutations -----

	/** Appends a message under the leaf and returns the new entry's id (pi's `appendMessage`). */
	async appendMessage(message: AgentMessage, opts?: MutationOptions): Promise<string> {
		return (await this.call("session/appendMessage", { handle: this.handle, message, ...mutation(opts) })).id;
	}

	/** Appends a `thinking_level_change` entry. */
	async appendThinkingLevelChange(thinkingLevel: string, opts?: MutationOptions): Promise<string> {
		return (await this.call("session/appendThinkingLevelChange", { handle: this.handle, thinkingLevel, ...mutation(opts) })).id;
	}

	/** Appends a `model_change` entry. */
	async appendModelChange(provider: string, modelId: string, opts?: MutationOptions): Promise<string> {
		return (await this.call("session/appendModelChange", { handle: this.handle, provider, modelId, ...mutation(opts) })).id;
	}

	/** Appends a `usage` entry (not part of the context) and returns it, as pi's `appendUsage` does. */
	async appendUsage(
		kind: string,
		provider: string,
		model: string,
		usage: Usage,
		note?: string,
		opts?: MutationOptions,
	): Promise<SessionEntry> {
		const params = { handle: this.handle, kind, provider, model, usage, ...(note !== undefined ? { note } : {}), ...mutation(opts) };
		return (await this.call("session/appendUsage", params)).entry;
	}

	/**
	 * Appends a compaction (pi's `appendCompaction`). `firstKeptEntryId` null keeps nothing before it. The server
	 * adds pi's system-message checkpoint unless `opts.systemMessage` gives one.
	 */
	async appendCompaction(
		summary: string,
		firstKeptEntryId: string | null,
		tokensBefore: number,
		details?: unknown,
		fromHook?: boolean,
		usage?: Usage,
		opts?: CompactionOptions,
	): Promise<string> {
		const params = {
			handle: this.handle,
			summary,
			firstKeptEntryId,
			tokensBefore,
			...(details !== undefined ? { details } : {}),
			...(fromHook !== undefined ? { fromHook } : {}),
			...(usage !== undefined ? { usage } : {}),
			...(opts?.systemMessage !== undefined ? { systemMessage: opts.systemMessage } : {}),
			...(opts?.retainedTail !== undefined ? { retainedTail: opts.retainedTail } : {}),
			...mutation(opts),
		};
		return (await this.call("session/appendCompaction", params)).id;
	}

	/** Appends an extension's `custom` entry, which is not part of the context. */
	async appendCustomEntry(customType: string, data?: unknown, opts?: MutationOptions): Promise<string> {
		const params = { handle: this.handle, customType, ...(data !== undefined ? { data } : {}), ...mutation(opts) };
		return (await this.call("session/appendCustomEntry", params)).id;
	}

	/** Sets the session's name (line breaks become spaces, ends are trimmed; an empty name clears it). */
	async appendSessionInfo(name: string, opts?: MutationOptions): Promise<string> {
		return (await this.call("session/appendSessionInfo", { handle: this.handle, name, ...mutation(opts) })).id;
	}

	/** Appends an extension message that is part of the context (pi's `appendCustomMessageEntry`). */
	async appendCustomMessageEntry(
		customType: string,
		content: string | (TextContent | ImageContent)[],
		display: boolean,
		details?: unknown,
		opts?: MutationOptions,
	): Promise<string> {
		const params = { handle: this.handle, customType, content, display, ...(details !== undefined ? { details } : {}), ...mutation(opts) };
		return (await this.call("session/appendCustomMessageEntry", params)).id;
	}

	/** Edits (`{content}`) or omits (`null`) an earlier entry's contribution to the context, on this branch. */
	async appendContextEdit(targetId: string, replacement: ContextEditReplacement, opts?: MutationOptions): Promise<string> {
		return (await this.call("session/appendContextEdit", { handle: this.handle, targetId, replacement, ...mutation(opts) })).id;
	}

	/** Sets an entry's label; `undefined` or `""` clears it. */
	async appendLabelChange(targetId: string, label: string | undefined, opts?: MutationOptions): Promise<string> {
		const params = { handle: this.handle, targetId, ...(label !== undefined ? { label } : {}), ...mutation(opts) };
		return (await this.call("session/appendLabelChange", params)).id;
	}

	/** Moves the leaf to `entryId`: the next append starts a branch there. */
	async branch(entryId: string, opts?: MutationOptions): Promise<void> {
		await this.call("session/branch", { handle: this.handle, entryId, ...mutation(opts) });
	}

	/** Moves the leaf before the first entry: the next append is a new root. */
	async resetLeaf(opts?: MutationOptions): Promise<void> {
		await this.call("session/resetLeaf", { handle: this.handle, ...mutation(opts) });
	}

	/** Moves the leaf to `branchFromId` (null: a new root) and appends a summary of the abandoned branch. */
	async branchWithSummary(
		branchFromId: string | null,
		summary: string,
		details?: unknown,
		fromHook?: boolean,
		usage?: Usage,
		opts?: MutationOptions,
	): Promise<string> {
		const params = {
			handle: this.handle,
			entryId: branchFromId,
			summary,
			...(details !== undefined ? { details } : {}),
			...(fromHook !== undefined ? { fromHook } : {}),
			...(usage !== undefined ? { usage } : {}),
			...mutation(opts),
		};
		return (await this.call("session/branchWithSummary", params)).id;
	}

	/**
	 * Applies `ops` (each `{method, params}`: any `session/append…` method, `session/branch`, `session/resetLeaf` or
	 * `session/branchWithSummary`, with its params but no `handle`) as one write: one fsync under
	 * `--durability entry`, one `changed` event, all or nothing. `targetId` and `entryId` may be `{op: n}`, the entry
	 * op `n` of this batch appends. Resolves with what each method returns alone, in order.
	 */
	async appendBatch(ops: BatchOp[], opts?: MutationOptions): Promise<unknown[]> {
		return (await this.call("session/appendBatch", { handle: this.handle, ops, ...mutation(opts) })).results;
	}

	/**
	 * What a mirror that applied changes up to `seq` missed: `{changes}` (the `session/changed` params, in order)
	 * while the server keeps them all, else `{state, snapshot}`, a fresh start at the handle's detail.
	 */
	changesSince(seq: number, opts?: RequestOptions): Promise<ChangesSinceResult> {
		return this.call("session/changesSince", { handle: this.handle, seq }, opts);
	}

	/** The entries with these ids, in the order given (null for an id no entry has), full (default) or skeleton. */
	getEntriesById(ids: string[], detail?: "full" | "skeleton", opts?: RequestOptions): Promise<(EntryAtDetail | null)[]> {
		return this.call("session/getEntries", { handle: this.handle, ids, ...(detail ? { detail } : {}) }, opts);
	}

	/**
	 * Makes this session a new one holding only the path to `leafId` (pi's `createBranchedSession`). Returns the new
	 * file, or null in memory. The handle stays the same and now names the new session.
	 */
	async createBranchedSession(leafId: string, opts?: MutationOptions): Promise<string | null> {
		const result = await this.call("session/createBranchedSession", { handle: this.handle, leafId, ...mutation(opts) });
		return result.path ?? null;
	}

	/** Replaces this handle's session with a new, empty one (the old file is untouched). */
	async newSession(options: { id?: string; parentSession?: string } = {}): Promise<SessionState> {
		return this.adopt(await this.call("session/newSession", { handle: this.handle, ...options }));
	}

	/** Points this handle at another session file. */
	async setSessionFile(path: string): Promise<SessionState> {
		return this.adopt(await this.call("session/setSessionFile", { handle: this.handle, path }));
	}

	// ----- Reads -----

	/** The leaf id, or null before the first entry or after `resetLeaf`. */
	async getLeafId(opts?: RequestOptions): Promise<string | null> {
		return ((await this.call("session/getLeafId", { handle: this.handle }, opts)) ?? null) as string | null;
	}

	/** The leaf entry, or null. */
	async getLeafEntry(opts?: RequestOptions): Promise<SessionEntry | null> {
		return (await this.call("session/getLeafEntry", { handle: this.handle }, opts)) ?? null;
	}

	/** The entry with this id (the last one if ids repeat), or null. */
	async getEntry(id: string, opts?: RequestOptions): Promise<SessionEntry | null> {
		return (await this.call("session/getEntry", { handle: this.handle, id }, opts)) ?? null;
	}

	/** The entries whose parent is `parentId`, in file order. */
	getChildren(parentId: string, opts?: RequestOptions): Promise<SessionEntry[]> {
		return this.call("session/getChildren", { handle: this.handle, parentId }, opts);
	}

	/** The entry's label, or null. */
	async getLabel(id: string, opts?: RequestOptions): Promise<string | null> {
		return ((await this.call("session/getLabel", { handle: this.handle, id }, opts)) ?? null) as string | null;
	}

	/** The path from the root to `fromId` (default: the leaf). */
	getBranch(fromId?: string, opts?: RequestOptions): Promise<SessionEntry[]> {
		return this.call("session/getBranch", { handle: this.handle, ...(fromId !== undefined ? { fromId } : {}) }, opts);
	}

	/** The header line, or null. */
	async getHeader(opts?: RequestOptions): Promise<SessionHeader | null> {
		return (await this.call("session/getHeader", { handle: this.handle }, opts)) ?? null;
	}

	/** The number of distinct entry ids. */
	getEntryCount(opts?: RequestOptions): Promise<number> {
		return this.call("session/getEntryCount", { handle: this.handle }, opts);
	}

	/** The entries in file order: all of them, or a page. */
	getEntries(opts: EntriesOptions = {}): Promise<SessionEntry[]> {
		const { offset, limit, signal } = opts;
		const params = { handle: this.handle, ...(offset !== undefined ? { offset } : {}), ...(limit !== undefined ? { limit } : {}) };
		// Without `ids` or `detail` the server answers pi's entries, never nulls or skeletons.
		return this.call("session/getEntries", params, { signal }) as Promise<SessionEntry[]>;
	}

	/**
	 * The tree: roots in file order, children by timestamp, labels resolved (pi's `getTree`). It nests as deep as
	 * the longest branch (a linear session of N entries is N levels); `getTreeFlat()` is the same tree without nesting.
	 */
	getTree(opts?: RequestOptions): Promise<SessionTreeNode[]> {
		return this.call("session/getTree", { handle: this.handle }, opts);
	}

	/**
	 * The same tree as `getTree()`, flat: the nodes in pre-order (a node, then its subtrees in order), each
	 * `{entry, parentIndex, depth, label?, labelTimestamp?}`, where `parentIndex` is the parent's position in the
	 * array (null for a root) and `depth` is 0 for roots. Walking it needs no recursion, however deep the session.
	 */
	getTreeFlat(opts?: RequestOptions): Promise<SessionTreeFlatNode[]> {
		return this.call("session/getTreeFlat", { handle: this.handle }, opts) as Promise<SessionTreeFlatNode[]>;
	}

	/** The session's name, or null. */
	async getSessionName(opts?: RequestOptions): Promise<string | null> {
		return ((await this.call("session/getSessionName", { handle: this.handle }, opts)) ?? null) as string | null;
	}

	/** What loading the file found: malformed or torn lines, broken links, a legacy version. */
	getWarnings(opts?: RequestOptions): Promise<WarningJson[]> {
		return this.call("session/getWarnings", { handle: this.handle }, opts);
	}

	/** The entries that make up the model's context, compaction applied. */
	buildContextEntries(opts?: RequestOptions): Promise<SessionEntry[]> {
		return this.call("session/buildContextEntries", { handle: this.handle }, opts);
	}

	/** The context entries with the model-visible messages of each. */
	buildSessionProjection(opts?: RequestOptions): Promise<SessionProjection> {
		return this.call("session/buildSessionProjection", { handle: this.handle }, opts);
	}

	/** What the model sees: messages (pi's `AgentMessage`s), thinking level and model. */
	buildSessionContext(opts?: RequestOptions): Promise<SessionContext> {
		return this.call("session/buildSessionContext", { handle: this.handle }, opts);
	}

	/**
	 * The state and every entry at `detail` as of the state's seq (`session/getState {snapshot}`): a mirror's fresh
	 * start. The handle's own detail is unchanged.
	 */
	async getSnapshot(detail: "skeleton" | "full", opts?: RequestOptions): Promise<{ state: SessionState; snapshot: Snapshot }> {
		const result = await this.call("session/getState", { handle: this.handle, snapshot: detail }, opts);
		const { snapshot, ...state } = result;
		if (!snapshot) throw new Error(`session/getState {snapshot: "${detail}"} on ${this.handle} returned no snapshot`);
		this.state = state as SessionState;
		return { state: this.state, snapshot };
	}

	/** The session's current state (handle, file, id, leaf, entry count, name, …). */
	async getState(opts?: RequestOptions): Promise<SessionState> {
		return this.adopt(await this.call("session/getState", { handle: this.handle }, opts));
	}

	// ----- Watching and closing -----

	/** Follows appends other processes (pi itself) make to the file; they arrive as changes with `origin: "external"`. */
	async watch(): Promise<void> {
		await this.call("session/watch", { handle: this.handle });
	}

	/** Stops following the file. */
	async unwatch(): Promise<void> {
		await this.call("session/unwatch", { handle: this.handle });
	}

	/**
	 * Takes the file's write lock now, as the first write would (`session_locked` when another process holds it);
	 * it is held while the session is open. A session not written yet has nothing to lock.
	 */
	async lock(): Promise<void> {
		await this.call("session/lock", { handle: this.handle });
	}

	/**
	 * Drops this reference to the session (the server closes it with the last one) and ends `changes()` iterators.
	 * Idempotent.
	 */
	close(): Promise<void> {
		if (this.closing) return this.closing;
		if (this.closedFlag) return Promise.resolve();
		// New calls are refused from here on (see call()), but events keep flowing until the server answers: changes
		// from mutations sent before close() are notified before its response, and the caller may be waiting for them.
		this.closing = this.call("session/close", { handle: this.handle }).then(
			() => this._terminate(undefined),
			(error: unknown) => {
				this._terminate(undefined);
				throw error;
			},
		);
		return this.closing;
	}

	// ----- Change notifications -----

	/**
	 * Every change from now on, as an async iterator: `session/changed` notifications in `seq` order, and a
	 * `{change: {kind: "resync", state}}` item where the client found a gap (see `ResyncChange`). Subscribes
	 * immediately, so a change made right after this call is not missed. Ends when the session closes; fails with
	 * `SessiondExitedError` if the process dies. Items are buffered until read; `break` out of the loop (or call
	 * `return()`) to unsubscribe.
	 */
	changes(): AsyncIterableIterator<SessionUpdate> {
		const queue: AsyncQueue<SessionUpdate> = new AsyncQueue(() => this.iterators.delete(queue));
		if (this.closedFlag) queue.end();
		else this.iterators.add(queue);
		return queue;
	}

	/** @internal A notification for this handle, in order. */
	_onChanged(n: SessionChanged): void {
		if (this.closedFlag) return;
		const change = n.change;
		if (change.kind === "rebind" || change.kind === "reset") this.state = change.state;
		if (this.openSnapshot) {
			if (this.openSnapshot.changes.length < HELD_CHANGES_MAX) this.openSnapshot.changes.push(n);
			else this.openSnapshot = undefined;
		}
		for (const queue of this.iterators) queue.push(n);
		this.emit("changed", n);
	}

	/** @internal The state fetched after a gap. */
	_onResync(state: SessionState, info: ResyncInfo): void {
		if (this.closedFlag) return;
		this.state = state;
		this.openSnapshot = undefined;
		const item: SessionUpdate = {
			handle: this.handle,
			seq: state.seq,
			sessionId: state.sessionId,
			leafId: state.leafId ?? null,
			change: { kind: "resync", state, ...info },
		};
		for (const queue of this.iterators) queue.push(item);
		this.emit("resync", state, info);
	}

	/** @internal A gap was seen; the state is being fetched. */
	_onResyncStarted(info: ResyncInfo): void {
		if (!this.closedFlag) this.emit("resyncStarted", info);
	}

	/** @internal Fetching the state after a gap failed. */
	_onResyncFailed(error: Error): void {
		if (!this.closedFlag) this.emit("resyncFailed", error);
	}

	/** @internal Ends the session locally: no more events; iterators end, or fail with `error`. */
	_terminate(error: Error | undefined): void {
		if (this.closedFlag) return;
		this.closedFlag = true;
		this.endedByExit = error instanceof SessiondExitedError;
		this.host.release(this);
		for (const queue of [...this.iterators]) {
			if (error) queue.fail(error);
			else queue.end();
		}
		this.iterators.clear();
		this.emit("closed");
	}

	private adopt(state: SessionState): SessionState {
		this.state = state;
		return state;
	}

	private call<M extends keyof ProtocolRequests>(
		method: M,
		params: ProtocolRequests[M]["params"],
		options?: RequestOptions,
	): Promise<ProtocolRequests[M]["result"]> {
		// The process died: the client rejects the call with the SessiondExitedError that says so (and names the
		// method), which is what a host catches to start a new sidecar; nobody closed this session.
		if (this.endedByExit) return this.host.request(method, params, options);
		if (this.closedFlag || (this.closing && method !== "session/close")) {
			// Another RemoteSession may still hold the same handle open on the server, so the server would accept the
			// call: refuse it here, with the error the server gives for a closed handle.
			return Promise.reject(
				new SessiondError(method, ERROR_CODES.handle_not_found, `this RemoteSession (handle ${this.handle}) is closed`, {
					kind: "handle_not_found",
					handle: this.handle,
				}),
			);
		}
		return this.host.request(method, params, options);
	}
}
