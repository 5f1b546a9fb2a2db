/**
 * Types the client adds on top of the generated protocol types: options of the client's methods and the
 * client-side resync event.
 */

import type { Change, SessionChanged, SessionEntry, SessionState, SessionTreeFlat } from "./protocol.js";

/**
 * Options of `search()`, sent as `sessions/search {query, cwd?, sessionDir?, limit?, roles?, progressToken?}`
 * (`progressToken` is made up by the client when `onProgress` is given).
 */
export interface SearchOptions extends RequestOptions {
	/** Search this project's sessions only (as `list` finds them); default: every session. */
	cwd?: string;
	/** With `cwd`: the session directory to use instead of pi's. Without: search only this directory. */
	sessionDir?: string;
	/** At most this many hits (the server's default is 50). */
	limit?: number;
	/** Only these roles: `user`, `assistant`, `toolResult`, `custom`, `bashExecution`, `name`, `label`, `summary`, `session`. */
	roles?: string[];
	/**
	 * Called with each `$/progress` report while the server brings its catalog (`stage` `"listing"`) and then its
	 * search index (`"indexing"`) up to date; each stage starts again from 0 loaded.
	 */
	onProgress?: (loaded: number, total: number, stage?: string) => void;
}

/** Options every request accepts. */
export interface RequestOptions {
	/**
	 * Aborting sends `$/cancelRequest`. A read or listing still in flight then fails with a `SessiondError` of kind
	 * `request_cancelled`; a mutation is never cancelled once sent (the server applies it whole).
	 */
	signal?: AbortSignal;
}

/** Options of every mutation. */
export interface MutationOptions {
	/**
	 * Apply the mutation only if the leaf is this id (`null`: only if there is no leaf). Otherwise it fails with a
	 * `SessiondError` of kind `content_modified` whose `data.leafId` is the current leaf. (Without this option a
	 * mutation can still fail that way: when another process, pi itself, appended to the file and so moved the leaf.)
	 */
	expectedLeafId?: string | null;
}

/**
 * A client-side change: the client saw a gap in `seq` (a notification was lost), fetched `session/getState` and
 * hands over that state. Treat it like `reset`: rebuild whatever mirror you keep from `state` (and re-read entries
 * if you need them). `state.seq` is the last change the state includes; the changes delivered after it are exactly
 * those with a higher `seq`, none of them already part of `state`.
 */
export interface ResyncChange {
	kind: "resync";
	/** What `session/getState` returned after the gap was seen; its `seq` is the last change it includes. */
	state: SessionState;
	/** The seq the client expected. */
	expectedSeq: number;
	/** The seq that arrived instead. */
	receivedSeq: number;
}

/** The `resync` item of `RemoteSession.changes()`; shaped like a `session/changed` notification. */
export interface SessionResync {
	handle: string;
	/** `state.seq`: the last change the state includes; the next change delivered has seq + 1. */
	seq: number;
	sessionId: unknown;
	leafId?: unknown;
	origin?: null;
	change: ResyncChange;
}

/** What `RemoteSession.changes()` yields: every `session/changed` notification, and a resync after a gap. */
export type SessionUpdate = SessionChanged | SessionResync;

/** The kinds of change a `SessionUpdate` carries. */
export type UpdateChange = Change | ResyncChange;

/** A content replacement for `appendContextEdit`: `null` omits the target from the context. */
export type ContextEditReplacement = { content: unknown } | null;

/**
 * One node of `RemoteSession.getTreeFlat()`: `{entry, parentIndex, depth, label?, labelTimestamp?}`. At its
 * default detail (`full`) every node has its entry exactly as stored.
 */
export type SessionTreeFlatNode = SessionTreeFlat[number] & { entry: SessionEntry };
