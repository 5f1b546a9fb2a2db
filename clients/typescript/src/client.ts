/** `SessiondClient`: the sidecar process, the JSON-RPC connection to it, and the session-independent methods. */

import { type ChildProcessWithoutNullStreams, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import {
	CancellationTokenSource,
	createMessageConnection,
	ErrorCodes,
	type Message,
	type MessageConnection,
	ParameterStructures,
	ProgressType,
	ResponseError,
} from "vscode-jsonrpc/node";
import { resolveBinary } from "./binary.js";
import { SessiondError, SessiondExitedError } from "./errors.js";
import { TypedEmitter } from "./events.js";
import { LineMessageReader, LineMessageWriter } from "./framing.js";
import { kTestHooks, type TestHooks } from "./internal.js";
import type {
	Detail,
	Capabilities,
	InitializeResult,
	ProgressValue,
	ProtocolRequests,
	SearchHit,
	SearchPage,
	ServerInfo,
	SessionChanged,
	SessionInfoList,
	SessionState,
	SessionsChanged,
} from "./protocol.js";
import { RemoteSession, type SessionHost } from "./session.js";
import type { RequestOptions, SearchOptions } from "./types.js";

/** Options of `spawnSessiond`. */
export interface SpawnOptions {
	/**
	 * The pi-sessiond executable: a path, or a name looked up on PATH. Default: `$PI_SESSIOND_BIN`, else
	 * `pi-sessiond` on PATH.
	 */
	binary?: string;
	/** Extra command-line arguments (`--agent-dir DIR`, `--durability batch`, `--log-level debug`, …). */
	args?: string[];
	/** Environment variables for the process, added to (and overriding) this process's environment. */
	env?: NodeJS.ProcessEnv;
	/** The process's working directory. */
	cwd?: string;
	/**
	 * Where the process's stderr (its logs) goes: `"inherit"` (default) copies it to this process's stderr,
	 * `"ignore"` drops it, a function receives it line by line. It is always drained, so a chatty server never
	 * blocks on a full pipe, and its last lines are kept for the error that reports the process's death.
	 */
	stderr?: "inherit" | "ignore" | ((line: string) => void);
	/** How long `close()` waits for an orderly exit before killing the process (default 5000 ms). */
	closeTimeoutMs?: number;
	/** Sent in `initialize` (default `{name: "pi-sessiond-client"}`). */
	clientInfo?: { name: string; version?: string };
	/**
	 * Keep the last listing of each scope (default true), so the next `list`/`listAll` of it receives only the
	 * sessions that changed (`sessions/listDelta`). It costs the memory of one listing per scope listed.
	 */
	cacheListings?: boolean;
}

/** How the process ended. */
export interface ExitInfo {
	/** The exit status, or null when a signal ended it. */
	code: number | null;
	/** The signal that ended it, or null. */
	signal: NodeJS.Signals | null;
	/** True when `close()` ended it. */
	expected: boolean;
}

/** Options of the listing methods. */
export interface ListOptions extends RequestOptions {
	/** The session directory (default: pi's directory for the cwd, or every project directory for `listAll`). */
	sessionDir?: string;
	/**
	 * `false` leaves out `allMessagesText` (every user and assistant text of the session, most of a listing's size).
	 * Default `true`: pi's exact result.
	 */
	includeAllMessagesText?: boolean;
	/** Called while files load (`$/progress`): how many are loaded of how many. */
	onProgress?: (loaded: number, total: number, stage?: string) => void;
}

/** A `sessions/watch` subscription. */
export interface SessionsWatch {
	/** Names the watch in `sessionsChanged` events. */
	watchId: string;
	/** The directory watched. */
	dir: string;
	/** Stops the watch (`sessions/unwatch`). */
	unwatch(): Promise<void>;
}

/** The events of a `SessiondClient`. */
export type SessiondClientEvents = {
	/** A `sessions/changed` notification: a session file in a watched directory appeared, changed or vanished. */
	sessionsChanged: [change: SessionsChanged];
	/** The process ended (after `close()`, or unexpectedly). */
	exit: [info: ExitInfo];
	/**
	 * The server sent something that is not a valid JSON-RPC message (a server bug). Without a listener, it is
	 * written to stderr.
	 */
	protocolError: [error: Error];
};

/** What every opening method also takes. */
export interface OpenOptions {
	/**
	 * The handle to open under, chosen by the host (an open one is an error), so requests naming it can be sent
	 * before the open is answered. Default: one the server picks.
	 */
	handle?: string;
	/**
	 * Also return the entries, which `MirroredSession.attach` starts from (the RemoteSession holds them, and the
	 * changes after them, until a mirror takes them), and set the detail of the handle's `session/changed` entries:
	 * `skeleton` (a few hundred bytes an entry) or `full`. Default `none`.
	 */
	snapshot?: Detail;
}

/** How many bytes of the process's stderr are kept for error messages. */
const STDERR_TAIL_BYTES = 8192;

// Errors vscode-jsonrpc makes up itself when a request cannot be completed (its codes are outside the server's).
const TRANSPORT_ERROR_CODES = new Set<number>([
	ErrorCodes.MessageWriteError,
	ErrorCodes.MessageReadError,
	ErrorCodes.PendingResponseRejected,
	ErrorCodes.ConnectionInactive,
]);

interface PendingCall {
	method: string;
	/** Settles the call with `error` (and drops its abort listener). */
	fail: (error: Error) => void;
}

/** What the client tracks per server handle; shared by every RemoteSession on that handle. */
interface HandleTracker {
	/** The last seq delivered, or included in the state last handed over (the open's, or a resync's). */
	lastSeq: number;
	sessions: Set<RemoteSession>;
	/** A getState after a gap is in flight; notifications wait in `queued` until it is back. */
	resyncing: boolean;
	queued: SessionChanged[];
}

/**
 * Starts pi-sessiond and connects to it. Resolves once the `initialize` handshake is done; rejects with
 * `SessiondBinaryNotFoundError` when the binary cannot be found, or with `SessiondExitedError` when the process
 * dies before answering (a bad argument, say: its stderr is in the error).
 */
export async function spawnSessiond(options: SpawnOptions = {}): Promise<SessiondClient> {
	const env = { ...process.env, ...options.env };
	const binary = resolveBinary(options.binary, env);
	const child = spawn(binary, options.args ?? [], {
		cwd: options.cwd,
		env,
		stdio: ["pipe", "pipe", "pipe"],
		windowsHide: true,
	});
	const client = new SessiondClient(child, options);
	try {
		await client.initialize(options.clientInfo ?? { name: "pi-sessiond-client" });
	} catch (error) {
		await client.close().catch(() => undefined);
		throw error;
	}
	return client;
}

/**
 * A connection to one pi-sessiond process. Make one with `spawnSessiond()`; end it with `close()`.
 *
 * The open methods (`openSession`, `createSession`, `continueRecent`, `inMemory`, `forkFrom`) return a
 * `RemoteSession`; the catalog methods (`list`, `listAll`, `findById`, `search`, `watchSessions`) work on session
 * files without opening them. `request()` calls any method by name.
 */
export class SessiondClient extends TypedEmitter<SessiondClientEvents> implements SessionHost {
	/** The process id of the sidecar. */
	readonly pid: number | undefined;
	private readonly child: ChildProcessWithoutNullStreams;
	private readonly connection: MessageConnection;
	private readonly closeTimeoutMs: number;
	/** The last listing of each scope and its token, when listings are cached. */
	private readonly listings: Map<string, { token: string; sessions: SessionInfoList }> | undefined;
	private readonly pending = new Set<PendingCall>();
	private readonly handles = new Map<string, HandleTracker>();
	// Notifications for handles the client does not know yet, kept only while an open is in flight: the server may
	// notify about a handle (an external append to a watched file) before the open's response has been processed.
	private orphans: SessionChanged[] = [];
	private opensInFlight = 0;
	private stderrTail = "";
	private exitInfo: ExitInfo | undefined;
	private closing = false;
	private closePromise: Promise<ExitInfo> | undefined;
	private readonly exited: Promise<ExitInfo>;
	private resolveExited!: (info: ExitInfo) => void;
	// Messages the reader has handed to vscode-jsonrpc, and those it has dispatched; see onChildClose.
	private delivered = 0;
	private dispatched = 0;
	private afterDispatch: (() => void) | undefined;
	private nextProgressToken = 0;
	private initializeResult: InitializeResult | undefined;
	private readonly testHooks: TestHooks = {
		dropSessionChanged: 0,
		injectSessionChanged: (n) => this.onSessionChanged(n),
		holdResync: undefined,
	};

	/** @internal Use `spawnSessiond()`. */
	constructor(child: ChildProcessWithoutNullStreams, options: SpawnOptions) {
		super();
		this.child = child;
		this.pid = child.pid;
		this.closeTimeoutMs = options.closeTimeoutMs ?? 5000;
		this.listings = options.cacheListings === false ? undefined : new Map();
		this.exited = new Promise((resolve) => {
			this.resolveExited = resolve;
		});

		this.drainStderr(options.stderr ?? "inherit");

		const reader = new LineMessageReader(child.stdout);
		const writer = new LineMessageWriter(child.stdin);
		const countingReader = {
			onError: reader.onError,
			onClose: reader.onClose,
			onPartialMessage: reader.onPartialMessage,
			listen: (callback: (message: Message) => void) =>
				reader.listen((message) => {
					this.delivered++;
					callback(message);
				}),
			dispose: () => reader.dispose(),
		};
		this.connection = createMessageConnection(countingReader, writer, undefined, {
			messageStrategy: {
				handleMessage: (message, next) => {
					try {
						return next(message);
					} finally {
						this.dispatched++;
						this.afterDispatch?.();
					}
				},
			},
		});
		this.connection.onNotification("session/changed", (params: SessionChanged) => this.onSessionChanged(params));
		this.connection.onNotification("sessions/changed", (params: SessionsChanged) => this.emit("sessionsChanged", params));
		reader.onError((error) => this.reportProtocolError(error));
		// Write errors (EPIPE once the child is gone) are reported through the failed request; see request().
		writer.onError(() => undefined);
		this.connection.listen();

		child.on("error", (error) => {
			// spawn() itself failed (EACCES, or the binary vanished after the PATH lookup): no 'close' may follow.
			this.stderrTail += `\n${error.message}`;
			this.onChildClose(null, null);
		});
		child.on("close", (code, signal) => this.onChildClose(code, signal));
	}

	/** The server's name and version, from `initialize`. */
	get serverInfo(): ServerInfo | undefined {
		return this.initializeResult?.serverInfo;
	}

	/** The protocol version the server speaks, from `initialize`. */
	get protocolVersion(): string | undefined {
		return this.initializeResult?.protocolVersion;
	}

	/** The methods and notifications the server offers, from `initialize`. */
	get capabilities(): Capabilities | undefined {
		return this.initializeResult?.capabilities;
	}

	/** True once the process has ended. */
	get isClosed(): boolean {
		return this.exitInfo !== undefined;
	}

	/** @internal The handshake; `spawnSessiond` calls it. */
	async initialize(clientInfo: { name: string; version?: string }): Promise<InitializeResult> {
		this.initializeResult = await this.request("initialize", { clientInfo });
		await this.connection.sendNotification("initialized", {});
		return this.initializeResult;
	}

	// ----- Generic calls -----

	/**
	 * Calls a method by name with by-name params, exactly as protocol/methods.json describes it. Resolves with the
	 * result; rejects with `SessiondError` for an error response, `SessiondExitedError` if the process dies first.
	 */
	request<M extends keyof ProtocolRequests>(
		method: M,
		params: ProtocolRequests[M]["params"],
		options?: RequestOptions,
	): Promise<ProtocolRequests[M]["result"]>;
	/** Calls a method the generated types do not know (a newer server's). */
	request<R = unknown>(method: string, params: object, options?: RequestOptions): Promise<R>;
	request(method: string, params: object, options: RequestOptions = {}): Promise<unknown> {
		if (this.exitInfo) return Promise.reject(this.exitError(`${method} was not sent`));
		return new Promise((resolve, reject) => {
			const { signal } = options;
			const cancellation = signal ? new CancellationTokenSource() : undefined;
			const onAbort = () => cancellation?.cancel();
			if (signal) {
				if (signal.aborted) cancellation?.cancel();
				else signal.addEventListener("abort", onAbort, { once: true });
			}
			const settle = () => {
				this.pending.delete(call);
				signal?.removeEventListener("abort", onAbort);
				cancellation?.dispose();
			};
			const call: PendingCall = {
				method,
				fail: (error) => {
					settle();
					reject(error);
				},
			};
			this.pending.add(call);
			let sent: Promise<unknown>;
			try {
				// Always by name: the server answers a positional array with -32602.
				// (vscode-jsonrpc counts an undefined token as a second param, hence the two forms.)
				sent = cancellation
					? this.connection.sendRequest(method, ParameterStructures.byName, params, cancellation.token)
					: this.connection.sendRequest(method, ParameterStructures.byName, params);
			} catch (error) {
				settle();
				reject(this.exitInfo ? this.exitError(`${method} was not sent`) : error);
				return;
			}
			sent.then(
				(result) => {
					settle();
					resolve(result);
				},
				(error: unknown) => {
					if (error instanceof ResponseError && TRANSPORT_ERROR_CODES.has(error.code)) {
						// The request never reached the server or its answer was lost with the connection: almost always the
						// process dying. Leave the call pending so onChildClose rejects it with the exit status and stderr;
						// if the process is still alive a moment later, report vscode-jsonrpc's error as it is.
						setTimeout(() => {
							if (!this.pending.has(call)) return;
							settle();
							reject(new Error(`${method}: ${error.message}`));
						}, 2000).unref();
						return;
					}
					settle();
					reject(
						error instanceof ResponseError
							? new SessiondError(method, error.code, error.message, error.data)
							: error instanceof Error
								? error
								: new Error(String(error)),
					);
				},
			);
		});
	}

	/** Sends a notification by name. */
	async notify(method: string, params: object = {}): Promise<void> {
		if (this.exitInfo) throw this.exitError(`${method} was not sent`);
		await this.connection.sendNotification(method, ParameterStructures.byName, params);
	}

	// ----- Opening sessions -----

	/**
	 * Opens a session file (pi's `SessionManager.open`) without writing to it. A path with no file is an error
	 * (`SessiondError` with kind `session_not_found`) unless `create` is set: then, as in pi, a new session starts
	 * at that path (written at its first message; with `watch`, the handle also reads the file once pi writes it).
	 * `watch` follows appends other processes make to the file; `repair` writes pi's load-time repairs at once (a
	 * header into a 0-byte file, a v1/v2 file migrated, a missing final newline), as pi's own open does. Opening a
	 * file that is already open returns another RemoteSession on the same handle.
	 */
	async openSession(
		path: string,
		opts: { watch?: boolean; sessionDir?: string; cwdOverride?: string; repair?: boolean; create?: boolean } & OpenOptions = {},
	): Promise<RemoteSession> {
		const { create, ...params } = opts;
		// An empty path goes to the server, which says it is empty.
		if (!create && path !== "" && !existsSync(path)) {
			throw new SessiondError("session/open", 1001, `${path}: no such session file (pass create: true to start one there)`, {
				kind: "session_not_found",
				path,
			});
		}
		return this.open("session/open", { path, ...params });
	}

	/** A new session for `cwd` (pi's `SessionManager.create`); the file is written once it has a user or assistant message. */
	createSession(cwd: string, opts: { sessionDir?: string; id?: string; parentSession?: string } & OpenOptions = {}): Promise<RemoteSession> {
		return this.open("session/create", { cwd, ...opts });
	}

	/** The most recent session of `cwd`, or a new one (pi's `SessionManager.continueRecent`). */
	continueRecent(cwd: string, opts: { sessionDir?: string } & OpenOptions = {}): Promise<RemoteSession> {
		return this.open("session/continueRecent", { cwd, ...opts });
	}

	/** A session that never touches the disk, optionally from entries (pi's `SessionManager.inMemory`). */
	inMemory(opts: { cwd?: string; id?: string; entries?: unknown[] } & OpenOptions = {}): Promise<RemoteSession> {
		return this.open("session/inMemory", { ...opts });
	}

	/** A new session in `targetCwd` holding another session's whole history (pi's `SessionManager.forkFrom`). */
	forkFrom(sourcePath: string, targetCwd: string, opts: { sessionDir?: string; id?: string } & OpenOptions = {}): Promise<RemoteSession> {
		return this.open("session/forkFrom", { sourcePath, targetCwd, ...opts });
	}

	// ----- The catalog -----

	/**
	 * The sessions of `cwd`, newest activity first (pi's `SessionManager.list`; dates are ISO strings). Pass
	 * `includeAllMessagesText: false` unless you need `allMessagesText`.
	 */
	list(cwd: string, opts: ListOptions = {}): Promise<SessionInfoList> {
		return this.listing(cwd, opts);
	}

	/** Every session (pi's `SessionManager.listAll`), or those of one directory. */
	listAll(opts: ListOptions = {}): Promise<SessionInfoList> {
		return this.listing(undefined, opts);
	}

	/**
	 * `list` with a cwd, `listAll` without: through `sessions/listDelta`, against the last listing of the same scope
	 * when one is kept. The caller gets fresh objects each time (the kept ones are never handed out), as from pi.
	 */
	private async listing(cwd: string | undefined, opts: ListOptions): Promise<SessionInfoList> {
		const { sessionDir, includeAllMessagesText } = opts;
		const key = JSON.stringify([cwd ?? null, sessionDir ?? null, includeAllMessagesText !== false]);
		const held = this.listings?.get(key);
		const delta = await this.withProgress(opts, (progressToken) =>
			this.request(
				"sessions/listDelta",
				defined({ cwd, sessionDir, includeAllMessagesText, progressToken, since: held?.token }),
				{ signal: opts.signal },
			),
		);
		const base = held?.sessions ?? [];
		const kept: SessionInfoList = delta.sessions.map((e) => {
			if (typeof e !== "number") return e;
			const info = base[e];
			if (info === undefined) throw new Error(`pi-sessiond referred to entry ${e} of a listing of ${base.length}`);
			return info;
		});
		this.listings?.set(key, { token: delta.token, sessions: kept });
		return this.listings ? kept.map((info) => ({ ...info })) : kept;
	}

	/** The file of the session of `cwd` with exactly this id, or null (pi's `SessionManager.findById`). */
	async findById(cwd: string, id: string, opts: { sessionDir?: string } & RequestOptions = {}): Promise<string | null> {
		const result = await this.request("sessions/findById", { cwd, id, ...defined({ sessionDir: opts.sessionDir }) }, { signal: opts.signal });
		return result.path ?? null;
	}

	/**
	 * The process holding the write lock of the session file at `path` (another pi-sessiond writing it, whose parent
	 * is the program it writes for), or null when nobody else does (`session/lockHolder`): what to tell a user
	 * before they type into a session another pi writes, since their writes there would be refused.
	 */
	async lockHolder(path: string, opts: RequestOptions = {}): Promise<number | null> {
		const result = await this.request("session/lockHolder", { path }, { signal: opts.signal });
		return result.pid ?? null;
	}

	/**
	 * Searches sessions with pi's `/resume` query syntax (`sessions/search`): words that must all match, `"exact
	 * phrases"`, or `re:<regex>`. Hits name the session file, the matching entry (null for a session-level hit), its
	 * role, a one-line snippet and a score, best first. Searches `cwd`'s sessions, `sessionDir`, or every session, as
	 * they are on disk now (appends by any process included). `onProgress` follows the `listing` and `indexing`
	 * stages.
	 */
	search(query: string, opts: SearchOptions = {}): Promise<SearchHit[]> {
		const { signal, onProgress, ...rest } = opts;
		return this.withProgress({ onProgress }, (progressToken) =>
			this.request("sessions/search", { query, ...defined({ ...rest, progressToken }) }, { signal }),
		);
	}

	/**
	 * One page of a search (`sessions/searchPage`): the hits from `offset` on (at most `limit`), best first as
	 * `search` gives them, with how many hits there are in all (`total`) and in how many sessions (`sessions`).
	 */
	searchPage(query: string, opts: SearchOptions & { offset?: number } = {}): Promise<SearchPage> {
		const { signal, onProgress, ...rest } = opts;
		return this.withProgress({ onProgress }, (progressToken) =>
			this.request("sessions/searchPage", { query, ...defined({ ...rest, progressToken }) }, { signal }),
		);
	}

	/**
	 * Reports session files appearing, growing or vanishing in a directory (`sessions/watch`) as `sessionsChanged`
	 * events. Give `sessionDir`, or `cwd` for pi's directory of that working directory; `{all: true}` (the default)
	 * watches every project's directory, those made later included.
	 */
	async watchSessions(target: { sessionDir: string } | { cwd: string } | { all: true } = { all: true }): Promise<SessionsWatch> {
		const params: ProtocolRequests["sessions/watch"]["params"] = target;
		const result = await this.request("sessions/watch", params);
		return {
			watchId: result.watchId,
			dir: result.dir,
			unwatch: async () => {
				await this.request("sessions/unwatch", { watchId: result.watchId });
			},
		};
	}

	// ----- Closing -----

	/**
	 * Shuts the process down: `shutdown` (the server finishes mutations in flight and closes every session), then
	 * the `exit` notification and end of input; if the process has not exited after `timeoutMs` (default: the
	 * `closeTimeoutMs` option), it is killed. Resolves with how it ended. Idempotent.
	 */
	close(opts: { timeoutMs?: number } = {}): Promise<ExitInfo> {
		if (this.closePromise) return this.closePromise;
		this.closing = true;
		this.closePromise = (async () => {
			if (this.exitInfo) return this.exitInfo;
			const timeoutMs = opts.timeoutMs ?? this.closeTimeoutMs;
			const deadline = Date.now() + timeoutMs;
			try {
				await withTimeout(this.request("shutdown", {}), timeoutMs);
				// `exit` after the shutdown response, as LSP prescribes (the server also takes the two pipelined).
				await this.connection.sendNotification("exit", {});
			} catch {
				// A hung or dead server: fall through to waiting and, if need be, killing.
			}
			this.connection.end();
			const info = await withTimeout(this.exited, Math.max(0, deadline - Date.now())).catch(() => undefined);
			if (info) return info;
			this.child.kill("SIGKILL");
			return this.exited;
		})();
		return this.closePromise;
	}

	// ----- SessionHost -----

	/** @internal A RemoteSession was closed: stop routing its handle's notifications to it. */
	release(session: RemoteSession): void {
		const tracker = this.handles.get(session.handle);
		if (!tracker) return;
		tracker.sessions.delete(session);
		if (tracker.sessions.size === 0) this.handles.delete(session.handle);
	}

	/** @internal */
	get [kTestHooks](): TestHooks {
		return this.testHooks;
	}

	// ----- Internals -----

	private async open<M extends "session/open" | "session/create" | "session/continueRecent" | "session/inMemory" | "session/forkFrom">(
		method: M,
		params: ProtocolRequests[M]["params"],
	): Promise<RemoteSession> {
		this.opensInFlight++;
		let state: SessionState;
		try {
			state = (await this.request(method, params)) as SessionState;
		} finally {
			this.opensInFlight--;
		}
		const session = new RemoteSession(this, state);
		let tracker = this.handles.get(state.handle);
		if (!tracker) {
			// The state includes every change up to its seq (more than 0 when the handle was already open on the server,
			// through a raw request): only later ones are news.
			tracker = { lastSeq: state.seq, sessions: new Set(), resyncing: false, queued: [] };
			this.handles.set(state.handle, tracker);
		}
		tracker.sessions.add(session);
		// Notifications that overtook the open's response: route() drops those the state already includes.
		const early = this.orphans.filter((n) => n.handle === state.handle);
		this.orphans = this.opensInFlight === 0 ? [] : this.orphans.filter((n) => n.handle !== state.handle);
		for (const n of early) this.route(tracker, n);
		return session;
	}

	private onSessionChanged(n: SessionChanged): void {
		if (this.testHooks.dropSessionChanged > 0) {
			this.testHooks.dropSessionChanged--;
			return;
		}
		const tracker = this.handles.get(n.handle);
		if (tracker) this.route(tracker, n);
		else if (this.opensInFlight > 0) this.orphans.push(n);
		// Otherwise the handle was closed by this client: nothing listens any more.
	}

	/** Delivers `n` in seq order, or starts a resync when seq shows a notification was missed. */
	private route(tracker: HandleTracker, n: SessionChanged): void {
		if (tracker.resyncing) {
			tracker.queued.push(n);
			return;
		}
		// Already part of a state handed over (the open's, or a resync's): applying it again would apply it twice.
		if (n.seq <= tracker.lastSeq) return;
		if (n.seq === tracker.lastSeq + 1) {
			tracker.lastSeq = n.seq;
			for (const session of [...tracker.sessions]) session._onChanged(n);
			return;
		}
		this.resync(tracker, n);
	}

	/**
	 * A gap: fetch the state and hand it over as `resync`. Notifications arriving meanwhile wait; afterwards only those
	 * with a seq above the state's are delivered (the state's `seq` is the last change it includes), so nothing is
	 * delivered twice and nothing after the state is lost.
	 */
	private resync(tracker: HandleTracker, n: SessionChanged): void {
		const info = { expectedSeq: tracker.lastSeq + 1, receivedSeq: n.seq };
		tracker.resyncing = true;
		for (const session of [...tracker.sessions]) session._onResyncStarted(info);
		const hold = this.testHooks.holdResync;
		this.request("session/getState", { handle: n.handle })
			.then(async (state) => {
				if (hold) await hold;
				return state;
			})
			.then(
				(state) => {
					if (state.seq < n.seq) {
						// The server notified n before it answered getState, which it received after n: the state must include
						// it. Report the server's fault, and go on from the state, which is what the server numbers from.
						this.reportProtocolError(
							new Error(`session/getState for ${n.handle} returned seq ${state.seq}, older than the notification (seq ${n.seq}) received before it`),
						);
					}
					tracker.lastSeq = state.seq;
					for (const session of [...tracker.sessions]) session._onResync(state, info);
				},
				(error: Error) => {
					// Without a state, go on from the notification that revealed the gap.
					tracker.lastSeq = n.seq;
					for (const session of [...tracker.sessions]) session._onResyncFailed(error);
				},
			)
			.finally(() => {
				tracker.resyncing = false;
				for (const queued of tracker.queued.splice(0)) this.route(tracker, queued);
			});
	}

	private async withProgress<T>(
		opts: Pick<ListOptions, "onProgress">,
		run: (token: string | undefined) => Promise<T>,
	): Promise<T> {
		if (!opts.onProgress) return run(undefined);
		const token = `pi-sessiond-client-progress-${++this.nextProgressToken}`;
		const onProgress = opts.onProgress;
		const subscription = this.connection.onProgress(new ProgressType<ProgressValue>(), token, (value) =>
			onProgress(value.loaded, value.total, value.stage ?? undefined),
		);
		try {
			return await run(token);
		} finally {
			subscription.dispose();
		}
	}

	private drainStderr(mode: NonNullable<SpawnOptions["stderr"]>): void {
		let partial = "";
		this.child.stderr.setEncoding("utf8");
		this.child.stderr.on("data", (text: string) => {
			this.stderrTail = (this.stderrTail + text).slice(-STDERR_TAIL_BYTES);
			if (mode === "inherit") {
				process.stderr.write(text);
			} else if (typeof mode === "function") {
				const lines = (partial + text).split("\n");
				partial = lines.pop() ?? "";
				for (const line of lines) mode(line.endsWith("\r") ? line.slice(0, -1) : line);
			}
		});
		this.child.stderr.on("end", () => {
			if (typeof mode === "function" && partial !== "") mode(partial);
			partial = "";
		});
	}

	private reportProtocolError(error: Error): void {
		if (this.listenerCount("protocolError") > 0) this.emit("protocolError", error);
		else process.stderr.write(`pi-sessiond-client: ${error.message}\n`);
	}

	private exitError(what: string): SessiondExitedError {
		const info = this.exitInfo;
		return new SessiondExitedError(what, info?.code ?? null, info?.signal ?? null, this.stderrTail, info?.expected ?? this.closing);
	}

	/**
	 * The process is gone and its stdout is closed. Every message it wrote has been read, but vscode-jsonrpc
	 * dispatches them one per event-loop turn: wait until the responses already read are dispatched, so a call the
	 * server did answer resolves, and only then reject what is still pending.
	 */
	private onChildClose(code: number | null, signal: NodeJS.Signals | null): void {
		if (this.exitInfo) return;
		const info: ExitInfo = { code, signal, expected: this.closing };
		this.exitInfo = info;
		let finished = false;
		const finish = () => {
			if (finished) return;
			finished = true;
			this.afterDispatch = undefined;
			clearTimeout(fallback);
			for (const call of [...this.pending]) call.fail(this.exitError(`${call.method} failed`));
			const sessionError = info.expected ? undefined : this.exitError("session closed");
			for (const tracker of [...this.handles.values()]) {
				for (const session of [...tracker.sessions]) session._terminate(sessionError);
			}
			this.handles.clear();
			this.orphans = [];
			this.connection.dispose();
			this.resolveExited(info);
			this.emit("exit", info);
		};
		// A safety net in case a message is never dispatched (vscode-jsonrpc drops some, e.g. responses to unknown ids).
		const fallback = setTimeout(finish, 1000);
		this.afterDispatch = () => {
			if (this.dispatched >= this.delivered) setImmediate(finish);
		};
		if (this.dispatched >= this.delivered) setImmediate(finish);
	}
}

/** `obj` without its undefined members (so they are absent on the wire rather than `null`). */
function defined<T extends object>(obj: T): { [K in keyof T]: Exclude<T[K], undefined> } {
	return Object.fromEntries(Object.entries(obj).filter(([, v]) => v !== undefined)) as { [K in keyof T]: Exclude<T[K], undefined> };
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
	return new Promise((resolve, reject) => {
		const timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms);
		promise.then(
			(value) => {
				clearTimeout(timer);
				resolve(value);
			},
			(error: unknown) => {
				clearTimeout(timer);
				reject(error);
			},
		);
	});
}
