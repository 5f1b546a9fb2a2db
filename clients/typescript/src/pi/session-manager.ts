/**
 * The drop-in `SessionManager`: pi 1.6.0's class, with its static and instance methods, synchronous signatures and
 * return values, whose persisted sessions are owned by pi-sessiond.
 *
 * - Reads are answered here, from a mirror of the session (`SessionView`): pi calls `getBranch`,
 *   `getEntries` and `buildSessionProjection` many times per prompt, and a round trip each would cost seconds on a
 *   large session. The mirror is read in pages with every long string left in the file (`lazy.ts`): pi's objects,
 *   whose image data and long texts are read from the file only when pi touches them, so no message from the
 *   sidecar is ever the whole session and memory follows what pi reads.
 * - Writes of a persisted session go to pi-sessiond, so they take its single-writer lock and its durability
 *   mode. In pi's own process (`pi-sessiond-client/register` sets bridge.ts's `APPENDS_WITHOUT_WAITING`) the
 *   common appends (messages, model and thinking-level changes, custom entries, labels, names, usage) do not
 *   wait: the entry is built here with an id and timestamp chosen here, as pi's own would be, added to the
 *   mirror, and posted; pi has its id at once, as from pi's `appendFileSync`. An append the server refuses is
 *   mended on the event loop, or before this process's next call to the server, or at exit (`mend`): written
 *   again after another process's appends, into the new session forked from a held file, or to a restarted
 *   sidecar; what cannot be written is reported. Other writes wait for the server's answer, and the entry it
 *   wrote (its id and timestamp) is added to the mirror in pi's in-memory shape (the caller's objects, pi's
 *   keys and order).
 *   Everything pi checks before writing (unknown entries, invalid ids, context-edit rules) is checked here first,
 *   with pi's messages.
 * - In-memory sessions never touch the disk, so they never go to the server: pi builds them per turn (a preview
 *   manager holding the whole branch) and a round trip would copy the branch each time. They run here, as pi's.
 *
 * Several instances may open one file (pi's tests do; so does `/resume` of the current session). Each keeps its
 * own entries and leaf, as pi's instances do, while the server holds one handle per file: before writing, an
 * instance moves the server's leaf to its own, and if the handle meanwhile holds another session (rebound by
 * another instance) it opens its file again.
 */

import { existsSync, mkdirSync, readFileSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { appendsWithoutWaiting, bridge, type Changed, type CallOutcome, closeHandle, onSidecarDeath, type RequestFailure, type RpcError, type SyncBridge } from "./bridge.js";
import { type Entry, getCurrentSystemMessage, type Message } from "./context.js";
import {
	assertValidSessionId,
	CURRENT_SESSION_VERSION,
	findMostRecentSession,
	generateId,
	headerCwd,
	loadEntriesFromFile,
	migrateToCurrentVersion,
	readSessionHeader,
	SessionHeaderScanLimitError,
	uuidv7,
} from "./files.js";
import { describeHolder, holderOf, type LockHolder, notice, otherLockHolder } from "./lock.js";
import { defaultSessionDirPath, getDefaultSessionDir, getSessionsDir, normalizePath, pathsEqual, resolvePath } from "./paths.js";
import type { FirstOpen } from "./ahead.js";
import type { LockHolderResult } from "../protocol.js";
import { LAZY_OVER, type LazyEntry, LazyFile } from "./lazy.js";
import { SessionView } from "./view.js";

/** pi's `NewSessionOptions`. */
export interface NewSessionOptions {
	id?: string;
	parentSession?: string;
}

/** pi's `SessionListProgress`. */
export type SessionListProgress = (loaded: number, total: number, partialSessions?: readonly unknown[]) => void;

/** What pi-sessiond says about an open session (`SessionState`). */
interface ServerState {
	handle: string;
	sessionId: string;
	sessionFile: string | null;
	sessionDir: string;
	cwd: string;
	header: Entry | null;
	leafId: string | null;
	seq: number;
	snapshot?: { seq: number; entries: Entry[] };
}

/** What this process knows of one server handle, shared by the instances that opened it. */
interface HandleState {
	sessionId: unknown;
	sessionFile: string | null;
	leafId: unknown;
	seq: number;
}

const handles = new Map<string, HandleState>();

/** An append posted without waiting: the entry pi was given, and how to post it again. */
interface Posted {
	entry: Entry;
	method: string;
	/** The method's params, with the entry's id and timestamp, without `handle` and `expectedLeafId`. */
	params: object;
	/** The server's refusal, once it answered with one. */
	error?: RpcError;
}

/**
 * The appends whose entry is built here exactly as the server writes it, so pi need not wait for them. The others
 * (compactions, whose checkpoint the server may build; context edits; branch summaries) wait for the entry the
 * server wrote.
 */
const POSTED_WITHOUT_WAITING = new Set([
	"session/appendMessage",
	"session/appendThinkingLevelChange",
	"session/appendModelChange",
	"session/appendUsage",
	"session/appendCustomEntry",
	"session/appendSessionInfo",
	"session/appendCustomMessageEntry",
	"session/appendLabelChange",
]);

/** How long `landed` blocks pi's thread for the answers still owed before it waits on the event loop. */
const LANDED_BLOCK_MS = 20;

/** Instances with appends posted and not yet answered, or refused and not yet mended. */
const unsettled = new Set<SessionManager>();
let exiting = false;
// pi exits when it is done: what it was told was appended is in the file first, or reported here.
process.on("exit", () => {
	exiting = true;
	for (const manager of unsettled) {
		try {
			manager.settle();
		} catch (error) {
			process.stderr.write(`pi-sessiond: ${(error as Error).message}\n`);
		}
	}
});

/** Entries per `session/getEntries` page when reading a session into the mirror. */
const ENTRIES_PAGE = 1000;

/** `session/open`'s params for a file opened as pi's `open` and `continueRecent` do. */
function openParams(path: string, sessionDir: string, cwd: string): object {
	return { path, sessionDir, cwdOverride: cwd, repair: true };
}

/** `session/getEntries`' params for page `page` of `handle`'s entries (with long strings left in the file when `lazy`). */
function pageParams(handle: string | undefined, page: number, lazy: boolean): object {
	const at = { offset: page * ENTRIES_PAGE, limit: ENTRIES_PAGE };
	const paged = handle === undefined ? at : { handle, ...at };
	return lazy ? { ...paged, lazyOver: LAZY_OVER } : paged;
}

/** Pages of a session asked for before the drop-in reads it: its answers by page, and how many were asked. */
interface PagesAhead {
	answers: Map<number, CallOutcome<unknown>>;
	asked: number;
}

/** The session opened before pi asked for it (`openAhead`), until pi's first open takes it or another call drops it. */
interface OpenedAhead {
	/** The open's params as JSON: pi's open must ask for exactly this to be given these answers. */
	request: string;
	/** The bridge that was asked. */
	generation: number;
	open?: CallOutcome<ServerState>;
	pages: PagesAhead;
	/** The file, and its stamp before it was opened ahead: a file that changed since is opened again, not taken. */
	path: string;
	stamp: string | undefined;
	/** Who else held the file's write lock as it was opened (`session/lockHolder`, asked beside the open). */
	holder?: CallOutcome<LockHolderResult>;
}
let openedAhead: OpenedAhead | undefined;

/** What tells a file changed: its inode, size and modification time (an append changes the size). */
function stampOf(path: string): string | undefined {
	const stat = statSync(path, { throwIfNoEntry: false, bigint: true });
	return stat === undefined ? undefined : `${stat.ino}:${stat.size}:${stat.mtimeNs}`;
}

/**
 * Pages read ahead with the open: enough for a session of a few MB (pi-start's 2 MB one has 3,157 entries), while
 * what a big session's pages hold waits for pi's thread rather than piling up in it.
 */
const PAGES_AHEAD = 4;

/** How many sessions this process opened ahead: each under a handle of its own choosing. */
let openedAheadCount = 0;

/**
 * Opens the session pi's command will open first (`firstOpenOf` in ahead.ts tells which from its arguments) and
 * asks for its first pages, without waiting, so pi-sessiond opens it and renders them while pi loads its modules
 * (a 128 MB session's cold open takes it about 120 ms; four pages of a 2 MB one about 15 ms): pi's open finds the
 * answers there. The open names its handle (`pi-ahead-N`, which no handle pi-sessiond picks looks like), so the
 * pages go out right behind it (the server runs them once the open is done) rather than when pi's thread next
 * reads the open's answer, which pi's command, loading without turning the event loop, does only at its open.
 * Called once by the register hook, right after it starts the sidecar; `openFile` takes the answers if pi asks for
 * the same open, and closes the handle otherwise. The promise resolves once all of it is answered, on the event
 * loop, with the handle opened (pi does not wait for it; a test does).
 */
export function openAhead(first: FirstOpen): Promise<string | undefined> {
	const request = openParams(first.path, normalizePath(first.sessionDir), resolvePath(first.cwd));
	const b = bridge();
	const stamp = stampOf(first.path);
	const pagesAhead = { answers: new Map(), asked: PAGES_AHEAD };
	const ahead: OpenedAhead = { request: JSON.stringify(request), generation: b.generation, pages: pagesAhead, path: first.path, stamp };
	let answered: (handle: string | undefined) => void = () => undefined;
	const done = new Promise<string | undefined>((resolve) => (answered = resolve));
	const handle = `pi-ahead-${++openedAheadCount}`;
	b.postEarly("session/open", { ...request, handle }, (outcome) => (ahead.open = outcome as CallOutcome<ServerState>));
	b.postEarly("session/lockHolder", { path: first.path }, (outcome) => (ahead.holder = outcome as CallOutcome<LockHolderResult>));
	for (let page = 0; page < PAGES_AHEAD; page++) {
		b.postEarly("session/getEntries", pageParams(handle, page, true), (outcome) => {
			ahead.pages.answers.set(page, outcome);
			if (ahead.pages.answers.size === PAGES_AHEAD) answered(ahead.open?.result?.handle);
		});
	}
	openedAhead = ahead;
	return done;
}

/**
 * The session opened ahead when `request` (an open's params) is what it was opened with, it opened, and its file
 * is as it was: its answer and pages. Otherwise undefined, and a handle opened ahead is closed before pi's own
 * call goes out: pi chose another session, or the same file otherwise (another session directory), which must
 * not be given the handle opened for the guess, or another process wrote the file meanwhile, which pi's own open
 * would have read (taking the answer then would widen the window in which pi's first write is refused for
 * another writer's lines from a few milliseconds to pi's whole start-up). Either way nothing is ahead any more.
 */
function takeOpenedAhead(request: object | undefined): OpenedAhead | undefined {
	const ahead = openedAhead;
	if (ahead === undefined) return undefined;
	openedAhead = undefined;
	const b = bridge();
	if (b.generation !== ahead.generation) return undefined;
	b.settleUntil(() => ahead.open !== undefined);
	const opened = ahead.open?.result;
	if (opened !== undefined && request !== undefined && JSON.stringify(request) === ahead.request && stampOf(ahead.path) === ahead.stamp) return ahead;
	if (opened !== undefined) b.call("session/close", { handle: opened.handle });
	return undefined;
}

/**
 * Who else holds the write lock of `path`, asked of pi-sessiond (`session/lockHolder`), or given as the answer an
 * open ahead asked for beside the open. pi-sessiond asks with an `flock` of its own and reads the kernel's table of
 * locks only when someone holds one; read here, the table cost pi's thread 10–17 ms at each start (its first read
 * after a quiet spell waits out an RCU grace period, see lock.ts). A sidecar that cannot say (one older than the
 * method) leaves it to `otherLockHolder`.
 */
function otherHolderOf(path: string, answered: CallOutcome<LockHolderResult> | undefined): LockHolder | undefined {
	const outcome = answered ?? callRestarting<LockHolderResult>("session/lockHolder", { path });
	if (outcome.error !== undefined || outcome.result === undefined) return otherLockHolder(path);
	const pid = outcome.result.pid;
	if (pid === null || pid === undefined || pid === process.pid) return undefined;
	const holder = holderOf(pid);
	// A sidecar this process started and replaced, not yet gone, is this pi's own.
	return holder.hostPid === process.pid ? undefined : holder;
}

/**
 * The instance that wrote last, which holds its file's write lock through the sidecar. When that sidecar dies
 * while pi is idle, the lock goes with it until pi's next call would start another: a plain pi (with the lock
 * extension) could write the session meanwhile, in the middle of a turn whose tool still runs. So the lock is
 * taken back on the next sidecar at once; a sidecar that keeps dying is not started again more than
 * `RELOCKS_PER_MINUTE` times a minute for it.
 */
let lastWriter: WeakRef<SessionManager> | undefined;
const RELOCKS_PER_MINUTE = 5;
const relocks: number[] = [];
onSidecarDeath((generation) => {
	if (exiting) return;
	const now = Date.now();
	while (relocks.length > 0 && (relocks[0] ?? 0) < now - 60_000) relocks.shift();
	if (relocks.length >= RELOCKS_PER_MINUTE) return;
	const writer = lastWriter?.deref();
	if (writer === undefined) return;
	relocks.push(now);
	writer.relock(generation);
});

/** Drops an instance's reference to its handle once the instance is garbage. */
const releaser = new FinalizationRegistry<{ handle: string | undefined; generation: number }>((held) => {
	if (held.handle !== undefined) closeHandle(held.handle, held.generation);
});

/** The entry a write of `method` with `params` makes, as far as `placeBesideOthers` and `sameWrite` look at it. */
function entryOfWrite(method: string, params: object): Entry {
	const message = (params as { message?: Message }).message;
	return (method === "session/appendMessage" ? { type: "message", message } : { type: method }) as Entry;
}

/** True when `found` in the file is the entry the write `entry` stands for (a message with the same content). */
function sameWrite(found: Entry, entry: Entry): boolean {
	return found.type === "message" && entry.type === "message" && JSON.stringify(found.message) === JSON.stringify(entry.message);
}

/**
 * The append that makes `entry` again with its id and timestamp, for the entries pi appends before a session's
 * first reply; undefined for any other.
 */
function replayOf(entry: Entry): { method: string; params: object } | undefined {
	const e = entry as Entry & Record<string, unknown>;
	const kept = { id: e.id, timestamp: e.timestamp };
	switch (e.type) {
		case "message":
			return { method: "session/appendMessage", params: { ...kept, message: e.message } };
		case "model_change":
			return { method: "session/appendModelChange", params: { ...kept, provider: e.provider, modelId: e.modelId } };
		case "thinking_level_change":
			return { method: "session/appendThinkingLevelChange", params: { ...kept, thinkingLevel: e.thinkingLevel } };
		case "session_info":
			return { method: "session/appendSessionInfo", params: { ...kept, name: e.name } };
		default:
			return undefined;
	}
}

/**
 * A call that needs no handle (a new session, an open), made again once on a new sidecar when the one it went to
 * died before answering: nothing of it outlived that process (a new session is in memory until its first message;
 * an open's repairs are made again or found made), and pi, which cannot retry it, would end with a stack trace.
 */
function callRestarting<T>(method: string, params: object): CallOutcome<T> {
	const outcome = bridge().call<T>(method, params);
	return outcome.error?.data?.kind === "sidecar_exited" ? bridge().call<T>(method, params) : outcome;
}

/**
 * `callRestarting` for a request answered asynchronously (a listing, which `/resume` shows while it loads): a
 * sidecar that died before answering is replaced and the request made once more.
 */
async function requestRestarting<T>(method: string, params: object, onProgress?: (loaded: number, total: number) => void): Promise<T> {
	try {
		return await bridge().request<T>(method, params, onProgress);
	} catch (error) {
		if ((error as RequestFailure).kind !== "sidecar_exited") throw error;
		return bridge().request<T>(method, params, onProgress);
	}
}

/** A pi-sessiond error, as the `Error` pi's own code would have thrown (same message where pi has one). */
export class SessiondSessionError extends Error {
	/** The error's `data.kind` (`session_locked`, `content_modified`, `io_error`, …). */
	readonly kind: string;
	/** The error's `data`. */
	readonly data: Record<string, unknown>;
	/** The JSON-RPC error code. */
	readonly code: number;

	constructor(error: RpcError, message: string = error.message) {
		super(message);
		this.name = "SessiondSessionError";
		this.kind = error.data?.kind ?? `code_${error.code}`;
		this.data = error.data ?? {};
		this.code = error.code;
	}
}

/**
 * The error pi's code would see for a pi-sessiond error. `appended`: the refusal came with other processes'
 * appends, which the caller has just added to the session (a retry continues after them).
 */
function errorOf(error: RpcError, file: string | undefined, appended = false): SessiondSessionError {
	const kind = error.data?.kind;
	if (kind === "session_locked") {
		return new SessiondSessionError(
			error,
			`Session file ${error.data?.path ?? file ?? ""} is being written by ${holderIn(error)}; not writing to it from here, so the file is never interleaved. Close the other pi or open another session.`,
		);
	}
	if (kind === "content_modified" && appended) {
		return new SessiondSessionError(
			error,
			`Session file ${file ?? ""} was appended to by another process since it was read; nothing was written. Its entries are now part of this session: retry to continue after them.`,
		);
	}
	if (kind === "content_modified") {
		// Not another process's appends (the file was emptied, replaced, or is not a session any more): say what
		// pi-sessiond found.
		return new SessiondSessionError(error, `Session file ${file ?? ""}: ${error.message}`);
	}
	return new SessiondSessionError(error);
}

/**
 * False when `file` is a regular file whose first line is no longer a session header (pi's `readSessionHeader`):
 * emptied, or overwritten with something else, so nothing can be forked from it. A path that is gone or is not a
 * regular file (a directory put in its place), or whose header pi cannot scan, counts as holding one: writing
 * there fails, and is thrown, as pi's module throws it.
 */
function holdsSession(file: string): boolean {
	try {
		return !statSync(file).isFile() || readSessionHeader(file) !== null;
	} catch {
		return true;
	}
}

/** True while process `pid` exists (a zombie counts as gone). */
function isAlive(pid: number): boolean {
	try {
		return !readFileSync(`/proc/${pid}/stat`, "latin1").includes(") Z ");
	} catch {
		return false;
	}
}

/** Who holds the lock a `session_locked` error is about, as a message names it. */
function holderIn(error: RpcError): string {
	const pid = error.data?.pid;
	return typeof pid === "number" ? describeHolder(holderOf(pid)) : "another process";
}

function unwrap<T>(outcome: CallOutcome<T>, file: string | undefined): T {
	if (outcome.error) throw errorOf(outcome.error, file);
	return outcome.result as T;
}

/** `params` without its undefined members, so they are absent on the wire rather than `null`. */
function defined<T extends object>(params: T): T {
	return Object.fromEntries(Object.entries(params).filter(([, v]) => v !== undefined)) as T;
}

/**
 * pi's `SessionManager`, with persisted sessions owned by pi-sessiond. See the module comment for how it works and
 * `clients/typescript/README.md` for where it differs from pi.
 */
export class SessionManager extends SessionView {
	private sessionId = "";
	private sessionFile: string | undefined;
	private sessionDir: string;
	private cwd: string;
	private persist: boolean;
	private flushed = false;
	/** The server handle of a persisted session (undefined in memory). */
	private handle: string | undefined;
	private readonly held: { handle: string | undefined; generation: number } = { handle: undefined, generation: 0 };
	/** Who held this session's lock when pi opened it, until the first write keeps what was promised then. */
	private heldAtOpen: LockHolder | undefined;
	/** The file pi last opened through `openAsPi`, and who else held its lock then. */
	private checkedAtOpen: { path: string; holder: LockHolder | undefined } | undefined;
	/** Appends posted without waiting and not yet known to have landed, oldest first. */
	private posted: Posted[] = [];
	/** The ids of the appends `mendRefused` is making again: found in the file, they are this instance's own. */
	private mending = new Set<string>();
	/** The sidecar they were posted to. */
	private postedTo: SyncBridge | undefined;
	/**
	 * The handle (and its sidecar's generation) that a waiting append of this instance wrote through last. The
	 * first append on a handle waits: it takes the file's write lock, or learns that another pi holds it and
	 * forks away, before pi goes on; later ones need not.
	 */
	private wroteThrough: string | undefined;
	/** Who awaits `landed`. */
	private landedWaiters: (() => void)[] = [];
	/** True while a mend is scheduled on the event loop. */
	private mendScheduled = false;
	/** A failure found while mending on the event loop, thrown at pi's next write. */
	private failure: Error | undefined;

	private constructor(cwd: string, sessionDir: string, persist: boolean) {
		super();
		this.cwd = resolvePath(cwd);
		this.sessionDir = normalizePath(sessionDir);
		this.persist = persist;
		if (persist && this.sessionDir && !existsSync(this.sessionDir)) mkdirSync(this.sessionDir, { recursive: true });
		releaser.register(this, this.held);
	}

	// ----- Static constructors (pi's) -----

	/** A new session for `cwd` in `sessionDir` (default: pi's directory for `cwd`); written at its first message. */
	static create(cwd: string, sessionDir?: string, options?: NewSessionOptions): SessionManager {
		const dir = sessionDir ? normalizePath(sessionDir) : getDefaultSessionDir(cwd);
		const manager = new SessionManager(cwd, dir, true);
		manager.startNew(options);
		return manager;
	}

	/** Opens a session file (a missing one starts a new session at that path). */
	static open(path: string, sessionDir?: string, cwdOverride?: string): SessionManager {
		const resolvedPath = resolvePath(path);
		let header: Entry | null = null;
		if (cwdOverride === undefined && existsSync(resolvedPath)) {
			try {
				header = readSessionHeader(resolvedPath);
			} catch (error) {
				if (!(error instanceof SessionHeaderScanLimitError)) throw error;
				const first = loadEntriesFromFile(resolvedPath)[0];
				header = first?.type === "session" ? first : null;
			}
		}
		const cwd = cwdOverride ?? headerCwd(header) ?? process.cwd();
		const dir = sessionDir ? normalizePath(sessionDir) : resolve(resolvedPath, "..");
		const manager = new SessionManager(cwd, dir, true);
		manager.openAsPi(resolvedPath);
		return manager;
	}

	/** The most recent session of `cwd` in `sessionDir`, or a new one. */
	static continueRecent(cwd: string, sessionDir?: string): SessionManager {
		const dir = sessionDir ? normalizePath(sessionDir) : getDefaultSessionDir(cwd);
		const filterCwd = sessionDir !== undefined && !pathsEqual(dir, defaultSessionDirPath(cwd));
		const mostRecent = findMostRecentSession(dir, filterCwd ? cwd : undefined);
		const manager = new SessionManager(cwd, dir, true);
		if (mostRecent) manager.openAsPi(mostRecent);
		else manager.startNew(undefined);
		return manager;
	}

	/** A session that never touches the disk, optionally from entries (a header among them is adopted). */
	static inMemory(cwd: string = process.cwd(), options?: NewSessionOptions, entries?: Entry[]): SessionManager {
		const manager = new SessionManager(cwd, "", false);
		if (entries?.length) manager.loadLocal(entries, options);
		else manager.newSession(options);
		return manager;
	}

	/** A new session in `targetCwd` holding `sourcePath`'s whole history (written at once, by pi-sessiond). */
	static forkFrom(sourcePath: string, targetCwd: string, sessionDir?: string, options?: NewSessionOptions): SessionManager {
		const resolvedSource = resolvePath(sourcePath);
		const resolvedTarget = resolvePath(targetCwd);
		const dir = sessionDir ? normalizePath(sessionDir) : getDefaultSessionDir(resolvedTarget);
		if (!existsSync(dir)) mkdirSync(dir, { recursive: true });
		if (options?.id !== undefined) assertValidSessionId(options.id);
		const manager = new SessionManager(resolvedTarget, dir, true);
		takeOpenedAhead(undefined);
		const state = unwrap(
			bridge().call<ServerState>(
				"session/forkFrom",
				defined({ sourcePath: resolvedSource, targetCwd: resolvedTarget, sessionDir: dir, id: options?.id }),
			),
			resolvedSource,
		);
		manager.adopt(state);
		return manager;
	}

	/** The file of the session with exactly this id in `cwd`'s directory (or `sessionDir`), or undefined. */
	static findById(cwd: string, id: string, sessionDir?: string): string | undefined {
		const dir = sessionDir ? normalizePath(sessionDir) : getDefaultSessionDir(cwd);
		const result = unwrap(bridge().call<{ path: string | null }>("sessions/findById", { cwd: resolvePath(cwd), id, sessionDir: dir }), undefined);
		return result.path ?? undefined;
	}

	/** pi's `list`: the sessions of `cwd` (or of `sessionDir`, filtered to `cwd` when it is not cwd's own). */
	static async list(cwd: string, sessionDir?: string, onProgress?: SessionListProgress, signal?: AbortSignal): Promise<unknown[]> {
		signal?.throwIfAborted();
		const dir = sessionDir ? normalizePath(sessionDir) : getDefaultSessionDir(cwd);
		const filterCwd = sessionDir !== undefined && !pathsEqual(dir, defaultSessionDirPath(cwd));
		// Unfiltered, `list` of a directory is `listAll` of it: ask for that, so the server's own idea of cwd's default
		// directory (fixed when it started) cannot arm a filter pi would not.
		const sessions = filterCwd
			? await requestRestarting<unknown[]>("sessions/list", { cwd: resolvePath(cwd), sessionDir: dir }, onProgress)
			: await requestRestarting<unknown[]>("sessions/listAll", { sessionDir: dir }, onProgress);
		signal?.throwIfAborted();
		return sessions.map(reviveInfo);
	}

	/** pi's `listAll`: every session under the agent directory, or of `sessionDir`. */
	static async listAll(
		sessionDirOrOnProgress?: string | SessionListProgress,
		onProgressOrSignal?: SessionListProgress | AbortSignal,
		signal?: AbortSignal,
	): Promise<unknown[]> {
		const customDir = typeof sessionDirOrOnProgress === "string" ? normalizePath(sessionDirOrOnProgress) : undefined;
		const progress =
			typeof sessionDirOrOnProgress === "function"
				? sessionDirOrOnProgress
				: typeof onProgressOrSignal === "function"
					? onProgressOrSignal
					: undefined;
		const abort = typeof sessionDirOrOnProgress === "string" || typeof onProgressOrSignal === "function" ? signal : (onProgressOrSignal ?? signal);
		abort?.throwIfAborted();
		const sidecar = bridge();
		// The server's root is the agent directory it was started with; pi reads the variable on every call.
		if (!customDir && !pathsEqual(getSessionsDir(), join(sidecar.agentDir, "sessions"))) {
			throw new Error(
				`pi-sessiond lists the sessions of ${sidecar.agentDir} (PI_CODING_AGENT_DIR when it started); it is now ${getSessionsDir()}: pass the directory to listAll`,
			);
		}
		const params = customDir ? { sessionDir: customDir } : {};
		const sessions = await requestRestarting<unknown[]>("sessions/listAll", params, progress ? (l, t) => progress(l, t) : undefined);
		abort?.throwIfAborted();
		return sessions.map(reviveInfo);
	}

	// ----- Identity -----

	/**
	 * Switches to another session file (used for resume and branching). pi reads the file as its open does,
	 * repairs included, keeping this manager's cwd and session directory; so does this, by opening the file
	 * (the handle of the file left is released).
	 */
	setSessionFile(sessionFile: string): void {
		const path = resolvePath(sessionFile);
		if (!this.persist) {
			this.setLocalFile(path);
			return;
		}
		this.openAsPi(path);
	}

	/** Starts a new, empty session (the old file is untouched); returns the new file (undefined in memory). */
	newSession(options?: NewSessionOptions): string | undefined {
		if (options?.id !== undefined) assertValidSessionId(options.id);
		if (!this.persist) {
			this.newLocal(options);
			return undefined;
		}
		if (this.handle === undefined || !this.ownsHandle()) {
			this.startNew(options);
			return this.sessionFile;
		}
		this.adopt(
			this.callOnHandle<ServerState>("session/newSession", defined({ id: options?.id, parentSession: options?.parentSession })),
			options ?? {},
		);
		return this.sessionFile;
	}

	/** False for an in-memory session. */
	isPersisted(): boolean {
		return this.persist;
	}

	/** The working directory. */
	getCwd(): string {
		return this.cwd;
	}

	/** The directory new sessions go to (`""` in memory). */
	getSessionDir(): string {
		return this.sessionDir;
	}

	/** True when the session directory is pi's default for the cwd. */
	usesDefaultSessionDir(): boolean {
		return pathsEqual(this.sessionDir, defaultSessionDirPath(this.cwd));
	}

	/** The session id. */
	getSessionId(): string {
		return this.sessionId;
	}

	/** The session file (undefined in memory). */
	getSessionFile(): string | undefined {
		return this.sessionFile;
	}

	/**
	 * pi's internal write of one entry. pi-sessiond writes every entry itself (and the whole file at the first
	 * conversation message), so there is nothing left to do here; it exists because pi's class declares it public.
	 */
	_persist(_entry: Entry): void {}

	// ----- Appends -----

	/** Appends a message under the leaf; returns its id. */
	appendMessage(message: Message): string {
		return this.append(
			(id, parentId, timestamp) => ({ type: "message", id, parentId, timestamp, message }),
			"session/appendMessage",
			{ message },
		);
	}

	/** Appends a thinking-level change; returns its id. */
	appendThinkingLevelChange(thinkingLevel: string): string {
		return this.append(
			(id, parentId, timestamp) => ({ type: "thinking_level_change", id, parentId, timestamp, thinkingLevel }),
			"session/appendThinkingLevelChange",
			{ thinkingLevel },
		);
	}

	/** Appends a model change; returns its id. */
	appendModelChange(provider: string, modelId: string): string {
		return this.append(
			(id, parentId, timestamp) => ({ type: "model_change", id, parentId, timestamp, provider, modelId }),
			"session/appendModelChange",
			{ provider, modelId },
		);
	}

	/** Appends usage that is not part of the context; returns the entry. */
	appendUsage(kind: string, provider: string, model: string, usage: unknown, note?: string): Entry {
		const id = this.append(
			(id, parentId, timestamp) => ({ type: "usage", id, parentId, timestamp, kind, provider, model, usage, ...(note ? { note } : {}) }),
			"session/appendUsage",
			defined({ kind, provider, model, usage, note: note ? note : undefined }),
		);
		return this.byId.get(id);
	}

	/** Appends a compaction with pi's system-message checkpoint; returns its id. */
	appendCompaction(summary: string, firstKeptEntryId: string | null, tokensBefore: number, details?: unknown, fromHook?: boolean, usage?: unknown): string {
		const projection = this.buildSessionProjection().messages;
		return this.append(
			(id, parentId, timestamp, written) => {
				const systemMessage = written ? written.systemMessage : getCurrentSystemMessage(projection);
				return {
					type: "compaction",
					id,
					parentId,
					timestamp,
					summary,
					firstKeptEntryId: written ? written.firstKeptEntryId : (firstKeptEntryId ?? id),
					tokensBefore,
					details,
					usage,
					fromHook,
					...(systemMessage ? { systemMessage: written ? systemMessage : { ...systemMessage, timestamp: new Date(timestamp).getTime() } } : {}),
				};
			},
			"session/appendCompaction",
			defined({ summary, firstKeptEntryId, tokensBefore, details, fromHook, usage }),
		);
	}

	/** Appends an extension's entry (not part of the context); returns its id. */
	appendCustomEntry(customType: string, data?: unknown): string {
		return this.append(
			(id, parentId, timestamp) => ({ type: "custom", customType, data, id, parentId, timestamp }),
			"session/appendCustomEntry",
			defined({ customType, data }),
		);
	}

	/** Sets the session's display name; returns the entry's id. */
	appendSessionInfo(name: string): string {
		const sanitized = name.replace(/[\r\n]+/g, " ").trim();
		return this.append(
			(id, parentId, timestamp) => ({ type: "session_info", id, parentId, timestamp, name: sanitized }),
			"session/appendSessionInfo",
			{ name },
		);
	}

	/** Appends an extension message that is part of the context; returns its id. */
	appendCustomMessageEntry(customType: string, content: unknown, display: boolean, details?: unknown): string {
		return this.append(
			(id, parentId, timestamp) => ({ type: "custom_message", customType, content, display, details, id, parentId, timestamp }),
			"session/appendCustomMessageEntry",
			defined({ customType, content, display, details }),
		);
	}

	/** Appends a branch-local edit of an earlier entry's context; returns its id. */
	appendContextEdit(targetId: string, replacement: { content: unknown } | null): string {
		if (
			replacement !== null &&
			(typeof replacement !== "object" ||
				!("content" in replacement) ||
				(typeof replacement.content !== "string" && !Array.isArray(replacement.content)))
		) {
			throw new Error("Context edit replacement must be null or contain string/array content");
		}
		const target = this.byId.get(targetId);
		if (!target) throw new Error(`Entry ${targetId} not found`);
		if (!this.getBranch().some((entry) => entry.id === targetId)) throw new Error(`Entry ${targetId} is not on the active branch`);
		const editable =
			target.type === "custom_message" ||
			(target.type === "message" && (target.message.role === "user" || target.message.role === "assistant" || target.message.role === "toolResult"));
		if (!editable) throw new Error(`Entry ${targetId} does not contribute editable model content`);
		const role = target.type === "message" ? target.message.role : "custom";
		const normalized =
			replacement !== null && (role === "assistant" || role === "toolResult") && typeof replacement.content === "string"
				? { content: [{ type: "text", text: replacement.content }] }
				: replacement;
		return this.append(
			(id, parentId, timestamp) => ({ type: "context_edit", id, parentId, timestamp, targetId, replacement: normalized }),
			"session/appendContextEdit",
			{ targetId, replacement: normalized },
		);
	}

	/** Sets or clears (`undefined`, `""`) an entry's label; returns the label entry's id. */
	appendLabelChange(targetId: string, label: string | undefined): string {
		if (!this.byId.has(targetId)) throw new Error(`Entry ${targetId} not found`);
		return this.append(
			(id, parentId, timestamp) => ({ type: "label", id, parentId, timestamp, targetId, label }),
			"session/appendLabelChange",
			defined({ targetId, label }),
		);
	}

	// ----- Leaf and branches -----

	/** Moves the leaf to an earlier entry: the next append starts a branch there. */
	branch(branchFromId: string): void {
		if (!this.byId.has(branchFromId)) throw new Error(`Entry ${branchFromId} not found`);
		this.leafId = branchFromId;
	}

	/** Moves the leaf before the first entry: the next append is a new root. */
	resetLeaf(): void {
		this.leafId = null;
	}

	/** Moves the leaf to `branchFromId` (null: a new root) and appends a summary of the branch left; returns its id. */
	branchWithSummary(branchFromId: string | null, summary: string, details?: unknown, fromHook?: boolean, usage?: unknown): string {
		if (branchFromId !== null && !this.byId.has(branchFromId)) throw new Error(`Entry ${branchFromId} not found`);
		const fromId = this.leafId ?? "root";
		return this.append(
			(id, _parentId, timestamp) => ({ type: "branch_summary", id, parentId: branchFromId, timestamp, fromId, summary, details, usage, fromHook }),
			"session/branchWithSummary",
			defined({ entryId: branchFromId, summary, details, fromHook, usage }),
			branchFromId,
		);
	}

	/**
	 * Makes this a new session holding only the path to `leafId` (labels re-created after it); returns the new
	 * file, or undefined in memory. pi-sessiond writes the file (at once when the path has a conversation).
	 */
	createBranchedSession(leafId: string): string | undefined {
		const path = this.getBranch(leafId);
		if (path.length === 0) throw new Error(`Entry ${leafId} not found`);
		if (!this.persist) return this.branchLocal(path);
		const previousFile = this.sessionFile;
		this.settle();
		const handle = this.ensureHandle();
		const outcome = bridge().call<{ path: string | null }>("session/createBranchedSession", { handle, leafId });
		const changes = this.track(handle, outcome.changes);
		const result = unwrap(outcome, this.sessionFile);
		// The handle now holds the branched session; its rebind notification carries the state (read it directly
		// otherwise: this instance no longer matches what the handle holds, so callOnHandle would reopen the old file).
		const rebind = changes.find((c) => c.change.kind === "rebind");
		const state = rebind ? (rebind.change.state as ServerState) : unwrap(bridge().call<ServerState>("session/getState", { handle }), previousFile);
		this.adopt(state, undefined, previousFile);
		return result.path ?? undefined;
	}

	// ----- Extras (not in pi's class) -----

	/** The pi-sessiond handle of a persisted session (undefined in memory). */
	get sessiondHandle(): string | undefined {
		return this.handle;
	}

	/**
	 * Drops this instance's hold on its session, so its write lock is released (pi has no such method; without it
	 * the hold ends when the instance is garbage-collected or the process exits).
	 */
	close(): void {
		if (this.handle === undefined) return;
		this.settle();
		const sidecar = bridge();
		if (sidecar.generation === this.held.generation) sidecar.call("session/close", { handle: this.handle });
		this.handle = undefined;
		this.held.handle = undefined;
	}

	// ----- Internals: in memory (pi's own logic) -----

	private newLocal(options: NewSessionOptions | undefined): void {
		this.sessionId = options?.id ?? uuidv7();
		const timestamp = new Date().toISOString();
		this.fileEntries = [{ type: "session", version: CURRENT_SESSION_VERSION, id: this.sessionId, timestamp, cwd: this.cwd, parentSession: options?.parentSession }];
		this.byId.clear();
		this.labelsById.clear();
		this.labelTimestampsById.clear();
		this.leafId = null;
		this.flushed = false;
	}

	private loadLocal(entries: Entry[], options?: NewSessionOptions): void {
		const header = entries.find((e) => e.type === "session");
		if (header) {
			this.fileEntries = entries;
			this.sessionId = header.id;
			migrateToCurrentVersion(this.fileEntries);
		} else {
			if (options?.id !== undefined) assertValidSessionId(options.id);
			this.newLocal(options);
			this.fileEntries = this.fileEntries.concat(entries);
		}
		this._buildIndex();
	}

	/** pi's `setSessionFile` on an in-memory manager: it reads the file but never writes it. */
	private setLocalFile(path: string): void {
		this.sessionFile = path;
		if (existsSync(path)) {
			const entries = loadEntriesFromFile(path);
			if (entries.length === 0) {
				if (statSync(path).size > 0) throw new Error(`Session file is not a valid pi session: ${path}`);
				this.newLocal(undefined);
				this.sessionFile = path;
				return;
			}
			this.loadLocal(entries);
			this.flushed = true;
		} else {
			this.newLocal(undefined);
			this.sessionFile = path;
		}
	}

	private branchLocal(path: Entry[]): undefined {
		const withoutLabels: Entry[] = [];
		const replacementByLabelId = new Map<unknown, unknown>();
		const pendingLabelIds: unknown[] = [];
		let parentId: unknown = null;
		for (const entry of path) {
			if (entry.type === "label") {
				pendingLabelIds.push(entry.id);
				continue;
			}
			for (const labelId of pendingLabelIds) replacementByLabelId.set(labelId, entry.id);
			pendingLabelIds.length = 0;
			withoutLabels.push(
				entry.type === "compaction"
					? {
							...entry,
							parentId,
							firstKeptEntryId:
								entry.firstKeptEntryId === entry.id ? entry.id : (replacementByLabelId.get(entry.firstKeptEntryId) ?? entry.firstKeptEntryId),
						}
					: { ...entry, parentId },
			);
			parentId = entry.id;
		}
		const newSessionId = uuidv7();
		const header = { type: "session", version: CURRENT_SESSION_VERSION, id: newSessionId, timestamp: new Date().toISOString(), cwd: this.cwd, parentSession: undefined };
		const pathIds = new Set(withoutLabels.map((e) => e.id));
		const labels: { targetId: unknown; label: string; timestamp: string | undefined }[] = [];
		for (const [targetId, label] of this.labelsById) {
			if (pathIds.has(targetId)) labels.push({ targetId, label, timestamp: this.labelTimestampsById.get(targetId) });
		}
		const labelEntries: Entry[] = [];
		let labelParent = withoutLabels[withoutLabels.length - 1]?.id || null;
		for (const { targetId, label, timestamp } of labels) {
			const entry = {
				type: "label",
				id: generateId(new Set([...pathIds, ...labelEntries.map((e) => e.id)])),
				parentId: labelParent,
				timestamp,
				targetId,
				label,
			};
			labelEntries.push(entry);
			labelParent = entry.id;
		}
		this.fileEntries = [header, ...withoutLabels, ...labelEntries];
		this.sessionId = newSessionId;
		this._buildIndex();
		return undefined;
	}

	// ----- Internals: persisted (through pi-sessiond) -----

	/**
	 * One append: pi's checks were made by the caller; in memory the entry is built here as pi builds it, otherwise
	 * the server writes it and the entry it returns (its id, parent, timestamp) is rebuilt in pi's shape around the
	 * caller's values. `leafBefore` is where the leaf must be before the append (branchWithSummary's target).
	 */
	private append(
		build: (id: string, parentId: string | null, timestamp: string, written?: Entry) => Entry,
		method: string,
		params: object,
		leafBefore: string | null | undefined = undefined,
	): string {
		if (!this.persist) {
			if (leafBefore !== undefined) this.leafId = leafBefore;
			const entry = build(generateId(this.byId), this.leafId, new Date().toISOString());
			this.pushEntry(entry);
			return entry.id;
		}
		this.throwFailure();
		this.mend();
		if (POSTED_WITHOUT_WAITING.has(method) && leafBefore === undefined && this.mayPostWithoutWaiting()) {
			return this.postWithoutWaiting(build, method, params);
		}
		const changes = this.write(method, params);
		const own = changes.filter((c) => c.origin !== "external" && c.change.kind === "append");
		const written = own[own.length - 1]?.change.entries?.[0] as Entry | undefined;
		if (!written) throw new Error(`pi-sessiond answered ${method} without the appended entry`);
		const entry = build(written.id, written.parentId, written.timestamp, written);
		this.pushEntry(entry);
		this.flushed = true;
		this.wroteThrough = `${bridge().generation}:${this.handle}`;
		lastWriter = new WeakRef(this);
		return entry.id;
	}

	/**
	 * Takes this session's write lock again on the next sidecar, when the one it wrote through (`generation`) died
	 * (see `lastWriter`). What cannot be done now is left for pi's next call, which reports it. Not in pi's class.
	 */
	relock(generation: number): void {
		if (this.wroteThrough?.startsWith(`${generation}:`) !== true || this.sessionFile === undefined) return;
		try {
			const handle = this.ensureHandle();
			const outcome = callRestarting<null>("session/lock", { handle });
			if (outcome.error === undefined) this.wroteThrough = `${bridge().generation}:${handle}`;
		} catch {
			// The next write meets what stands in the way (another pi took the session meanwhile: it forks away).
		}
	}

	/** True when an append can be posted without waiting: the server's handle holds this session at this leaf. */
	private mayPostWithoutWaiting(): boolean {
		if (!appendsWithoutWaiting()) return false;
		if (this.handle === undefined || !this.flushed || this.posted.some((p) => p.error) || !this.ownsHandle()) return false;
		const sidecar = bridge();
		if (this.wroteThrough !== `${sidecar.generation}:${this.handle}`) return false;
		if (sidecar.dead || (this.postedTo !== undefined && this.postedTo !== sidecar && this.posted.length > 0)) return false;
		return handles.get(this.handle)?.leafId === this.leafId;
	}

	/** Builds the entry with an id and timestamp chosen here, adds it to the mirror, posts it, and returns its id. */
	private postWithoutWaiting(build: (id: string, parentId: string | null, timestamp: string) => Entry, method: string, params: object): string {
		const handle = this.handle as string;
		const sidecar = bridge();
		const id = generateId(this.byId);
		const timestamp = new Date().toISOString();
		const entry = build(id, this.leafId, timestamp);
		const posted: Posted = { entry, method, params: { ...params, id, timestamp } };
		const expected = this.leafId === null ? {} : { expectedLeafId: this.leafId };
		this.posted.push(posted);
		this.postedTo = sidecar;
		unsettled.add(this);
		sidecar.postLater(method, { handle, ...expected, ...posted.params }, (outcome) => this.answered(handle, posted, outcome));
		this.pushEntry(entry);
		const state = handles.get(handle);
		if (state) state.leafId = id;
		return id;
	}

	/** What the server answered to an append posted without waiting. */
	private answered(handle: string, posted: Posted, outcome: CallOutcome<unknown>): void {
		this.track(handle, outcome.changes);
		if (outcome.error) {
			posted.error = outcome.error;
			if (!this.mendScheduled) {
				this.mendScheduled = true;
				setImmediate(() => {
					this.mendScheduled = false;
					try {
						this.mend();
					} catch (error) {
						this.failure = error as Error;
						notice((error as Error).message);
					}
				});
			}
			return;
		}
		const at = this.posted.indexOf(posted);
		if (at >= 0) this.posted.splice(at, 1);
		if (this.posted.length === 0) unsettled.delete(this);
		this.wakeLanded();
		// The server's leaf, once the appends still in flight land (track set it to this one's).
		const last = this.posted.at(-1);
		const state = handles.get(handle);
		if (last !== undefined && state && !this.posted.some((p) => p.error)) state.leafId = last.entry.id;
	}

	/**
	 * Resolves once every append posted without waiting has landed, or was mended, or reported (the lock extension
	 * awaits it at `agent_settled`, so pi says it is done when its file is). Not in pi's class.
	 */
	landed(): Promise<void> {
		// The turn's last append is usually a round trip from its answer: blocking that long (a few hundred µs)
		// ends the turn sooner than waiting for the event loop; a sidecar slower than that is waited for there.
		this.postedTo?.settleWithin(LANDED_BLOCK_MS);
		if (this.posted.length === 0) return Promise.resolve();
		return new Promise((resolve) => this.landedWaiters.push(resolve));
	}

	/** Resolves `landed` once nothing is posted. */
	private wakeLanded(): void {
		if (this.posted.length === 0) for (const resolve of this.landedWaiters.splice(0)) resolve();
	}

	/**
	 * Waits for the answers to this instance's appends posted without waiting, and mends the refused ones (pi's
	 * exit calls it). Not in pi's class.
	 */
	settle(): void {
		if (this.posted.length === 0) return;
		this.postedTo?.settle();
		this.mend();
	}

	/** Throws, once, what mending on the event loop could not do. */
	private throwFailure(): void {
		const failure = this.failure;
		this.failure = undefined;
		if (failure) throw failure;
	}

	/**
	 * Once an append posted without waiting was refused: takes every answer, takes the appends that did not land
	 * out of the mirror and writes them again, in order, with their ids and timestamps, so the file ends as pi was
	 * told. After another process's appends they continue after them (pi was told nothing was lost, and the
	 * session does not fork); a held file or a dead sidecar is handled by `write` as for any write. What cannot
	 * be written is thrown, and stays out of the mirror.
	 */
	private mend(): void {
		if (!this.posted.some((p) => p.error)) return;
		try {
			this.mendRefused();
		} finally {
			this.wakeLanded();
		}
	}

	private mendRefused(): void {
		if (exiting && this.postedTo?.dead) {
			const ids = this.posted.map((p) => p.entry.id).join(", ");
			this.posted = [];
			unsettled.delete(this);
			throw new Error(`the sidecar died as pi exited: entries ${ids} of ${this.sessionFile} were not written`);
		}
		this.postedTo?.settle();
		const unlanded = this.posted;
		this.posted = [];
		unsettled.delete(this);
		const refusal = unlanded.find((p) => p.error)?.error as RpcError;
		const ids = new Set(unlanded.map((p) => p.entry.id));
		const parent = unlanded[0]?.entry.parentId ?? null;
		this.fileEntries = this.fileEntries.filter((e) => e.type === "session" || !ids.has(e.id));
		this._buildIndex();
		this.leafId = parent;
		const serverLeaf = this.handle === undefined ? undefined : handles.get(this.handle)?.leafId;
		if (refusal.data?.kind === "content_modified" && typeof serverLeaf === "string" && serverLeaf !== parent && this.descendsFrom(serverLeaf, parent)) {
			this.placeBesideOthers(unlanded[0]?.entry, parent, serverLeaf, { many: `this pi's last ${unlanded.length} entries` });
		}
		this.mending = ids;
		try {
			this.writeAgain(unlanded);
		} finally {
			this.mending = new Set();
		}
	}

	/** Writes `unlanded` again, in order, each after the one before (see `mendRefused`). */
	private writeAgain(unlanded: Posted[]): void {
		for (const [n, p] of unlanded.entries()) {
			p.entry.parentId = this.leafId;
			try {
				this.write(p.method, p.params);
			} catch (error) {
				// The file has it already: an append the dead sidecar wrote before it could answer.
				const e = error as SessiondSessionError;
				if (!(e.kind === "invalid_params" && e.data.path === "id")) {
					const lost = unlanded.slice(n).map((q) => q.entry.id).join(", ");
					throw new SessiondSessionError(
						{ code: e.code, message: e.message, data: e.data },
						`${e.message} (entries ${lost}, appended without waiting, are not in ${this.sessionFile})`,
					);
				}
			}
			this.pushEntry(p.entry);
		}
	}

	/**
	 * True when `entry`, appended under `parent`, begins a turn (a user message, or a setting, a label or a name
	 * between turns), so it can follow another process's entries without cutting an exchange in two: the last
	 * message before it is an assistant's reply with no tool call awaiting its result.
	 */
	private startsTurn(entry: Entry | undefined, parent: string | null): boolean {
		if (entry === undefined || (entry.type === "message" && entry.message?.role !== "user")) return false;
		const seen = new Set<string>();
		for (let at: string | null | undefined = parent; typeof at === "string" && !seen.has(at); at = this.byId.get(at)?.parentId) {
			seen.add(at);
			const before = this.byId.get(at);
			if (before === undefined) return false;
			if (before.type !== "message") continue;
			const content = before.message?.role === "assistant" ? before.message.content : undefined;
			return Array.isArray(content) && !content.some((c: { type?: string }) => c?.type === "toolCall");
		}
		return true;
	}

	/** True when `id` is `ancestor` or below it. */
	private descendsFrom(id: string, ancestor: string | null): boolean {
		if (ancestor === null) return true;
		const seen = new Set<string>();
		for (let at: string | null | undefined = id; typeof at === "string" && !seen.has(at); at = this.byId.get(at)?.parentId) {
			if (at === ancestor) return true;
			seen.add(at);
		}
		return false;
	}

	/**
	 * Sends a mutation of this instance's session with the server's leaf at this instance's leaf. Two faults are
	 * mended here rather than thrown into pi (whose agent loop stays on "Working" when an append throws): a sidecar
	 * that died is started again and the session reopened, and the write is sent again unless it had landed; a file
	 * another pi holds is left as it is and the write goes to a new session forked from it.
	 */
	private write(method: string, params: object): Changed[] {
		this.settle();
		this.keepForkPromise(entryOfWrite(method, params));
		// Each way of recovering is tried once: a write refused for another writer's lines may then find the file
		// held, or the sidecar gone.
		const tried = new Set<string>();
		for (;;) {
			const leafBefore = this.leafId;
			const handle = this.ensureHandle(entryOfWrite(method, params));
			const state = handles.get(handle);
			if (state && state.leafId !== this.leafId) {
				if (this.leafId === null) this.callOnHandle("session/resetLeaf", {});
				else {
					const moved = bridge().call<unknown>("session/branch", { handle, entryId: this.leafId });
					this.track(handle, moved.changes);
					if (moved.error?.data?.kind === "entry_not_found" && !tried.has("leaf_lost") && this.sessionFile !== undefined) {
						tried.add("leaf_lost");
						this.carryOverLost();
						continue;
					}
					unwrap(moved, this.sessionFile);
				}
			}
			const expected = this.leafId === null ? {} : { expectedLeafId: this.leafId };
			const outcome = bridge().call<unknown>(method, { handle, ...expected, ...params });
			const changes = this.track(handle, outcome.changes);
			const kind = outcome.error?.data?.kind;
			const first = kind !== undefined && !tried.has(kind);
			if (kind !== undefined) tried.add(kind);
			if (kind === "sidecar_exited" && first && this.sessionFile !== undefined && existsSync(this.sessionFile)) {
				const landed = this.reopenAfterRestart(method, params);
				if (landed !== undefined) return [landed];
				continue;
			}
			if (kind === "sidecar_exited" && first && this.sessionFile !== undefined && this.recreateAfterRestart()) continue;
			if (kind === "session_locked" && first && this.sessionFile !== undefined) {
				this.forkAway(outcome.error as RpcError);
				continue;
			}
			if (kind === "content_modified" && first && this.goesOnAfterThem(method, params, leafBefore)) continue;
			// Refused because the file holds no session any more (emptied, or overwritten with something else).
			if (kind === "content_modified" && !tried.has("leaf_lost") && this.sessionFile !== undefined && !holdsSession(this.sessionFile)) {
				tried.add("leaf_lost");
				this.carryOverLost();
				continue;
			}
			if (outcome.error) {
				const appended = changes.some((c) => c.origin === "external" && c.change.kind === "append");
				throw errorOf(outcome.error, this.sessionFile, appended);
			}
			return changes;
		}
	}

	/**
	 * In pi's process, a write refused because another process appended at this instance's leaf since it read the
	 * file (`track` has taken their entries and moved the leaf after them) is made again, as the refused appends
	 * posted without waiting are (`mendRefused`): after them when it begins a turn, else on its own branch beside
	 * them, and said so. pi does not retry a write that throws (its start-up write of the thinking level would end
	 * pi, its first prompt's would leave it on "Working"), so the drop-in keeps the message's promise itself.
	 * Elsewhere (pi's SDK) the refusal is thrown, as pi's module throws what it cannot write. False when it is not
	 * made again.
	 */
	private goesOnAfterThem(method: string, params: object, leafBefore: string | null): boolean {
		const othersLeaf = this.leafId;
		if (!appendsWithoutWaiting() || !POSTED_WITHOUT_WAITING.has(method) || othersLeaf === leafBefore || othersLeaf === null) return false;
		this.placeBesideOthers(entryOfWrite(method, params), leafBefore, othersLeaf, { one: "this pi's next entry" });
		return true;
	}

	/**
	 * Where this pi's entries refused under `parent`, the first `entry`, go once another process's entries (ending
	 * at `othersLeaf`) hang there: after them when they begin a turn; else under `parent`, on a branch of their own
	 * beside them, since moved after them a tool call would lose its result (providers refuse a result that does
	 * not follow its call). Sets the leaf and tells the user which, of `one` entry or `many`.
	 */
	private placeBesideOthers(
		entry: Entry | undefined,
		parent: string | null,
		othersLeaf: string,
		subject: { one: string } | { many: string },
		file: string | undefined = this.sessionFile,
	): void {
		const said = `Session file ${file} was appended to by another process; ${"one" in subject ? subject.one : subject.many}`;
		if (this.startsTurn(entry, parent)) {
			this.leafId = othersLeaf;
			notice(`${said} ${"one" in subject ? "continues" : "continue"} after them.`);
		} else {
			this.leafId = parent;
			notice(
				"one" in subject
					? `${said} finishes a turn begun before them, so it stays on its own branch beside them.`
					: `${said} finish a turn begun before them, so they stay on their own branch beside them.`,
			);
		}
	}

	/**
	 * After the sidecar died: opens this session on the new one and says whether the write in flight (`method` with
	 * `params`) had landed: the file then holds it as a child of this instance's leaf, which comes back as that
	 * write's change. This instance keeps its own entries and leaf, as `ensureHandle` does; lines another process
	 * appended meanwhile (a plain pi) are taken as its appends, as `track` takes those the server reports, and
	 * the write goes on after them or beside them as `placeBesideOthers` says: found only here, they would
	 * otherwise be forked away from silently.
	 */
	private reopenAfterRestart(method: string, params: object): Changed | undefined {
		const leaf = this.leafId;
		const fresh = this.reopenKeepingOwn();
		const entry = entryOfWrite(method, params);
		const written = fresh[0] !== undefined && fresh[0].parentId === leaf && (fresh.length === 1 || sameWrite(fresh[0], entry)) ? fresh[0] : undefined;
		this.takeOthers(
			fresh.filter((e) => e !== written),
			written === undefined ? entry : undefined,
		);
		if (written === undefined || this.handle === undefined) return undefined;
		return { handle: this.handle, sessionId: this.sessionId, seq: handles.get(this.handle)?.seq ?? 0, origin: "own", change: { kind: "append", entries: [written] } };
	}

	/**
	 * Takes `others`, entries another process appended that this instance finds in the file only when it opens it
	 * again on a new sidecar (the old one would have reported them), as `track` takes those reported: into the
	 * session, and when they hang at this instance's leaf, the next entry (`entry`, the write about to be made)
	 * goes after them or beside them as `placeBesideOthers` decides, and says so. Ids this instance is writing again
	 * (`mending`) are its own.
	 */
	private takeOthers(others: Entry[], entry: Entry | undefined): void {
		const theirs = others.filter((e) => !this.mending.has(e.id));
		if (theirs.length === 0) return;
		const leaf = this.leafId;
		for (const other of theirs) this.pushEntry(other);
		this.leafId = leaf;
		const hangHere = theirs[0]?.parentId === leaf;
		const last = theirs[theirs.length - 1] as Entry;
		if (hangHere && entry !== undefined && leaf !== null) this.placeBesideOthers(entry, leaf, last.id, { one: "this pi's next entry" });
		else notice(`Session file ${this.sessionFile} was appended to by another process while pi-sessiond restarted; their ${theirs.length} entries are in the session.`);
	}

	/**
	 * After the sidecar died holding this session before its file was written (pi writes it at the first reply):
	 * makes the session again on the new sidecar, with its id, and its entries again, with theirs, so the write
	 * in flight goes on. Only a session whose entries are one chain of the appends pi makes before a reply; false
	 * otherwise (the write then throws, as before).
	 */
	private recreateAfterRestart(): boolean {
		// Not `flushed`: that only says the server took a write, and pi's file waits for the first reply.
		if (this.sessionFile === undefined || existsSync(this.sessionFile)) return false;
		const header = this.fileEntries[0];
		const entries = this.fileEntries.filter((e) => e.type !== "session");
		const ops: { method: string; params: object }[] = [];
		let parent: string | null = null;
		for (const entry of entries) {
			const op = replayOf(entry);
			if (op === undefined || (entry.parentId ?? null) !== parent) return false;
			ops.push(op);
			parent = entry.id;
		}
		const leaf = this.leafId;
		if (leaf !== parent) return false;
		const parentSession = header?.type === "session" ? (header as { parentSession?: string }).parentSession : undefined;
		const created = callRestarting<ServerState>("session/create", defined({ cwd: this.cwd, sessionDir: this.sessionDir, id: this.sessionId, parentSession }));
		if (created.error) return false;
		const kept = this.fileEntries;
		this.adopt(created.result as ServerState, { parentSession } as NewSessionOptions);
		if (ops.length > 0) {
			const replayed = bridge().call<unknown>("session/appendBatch", { handle: this.handle, ops });
			if (replayed.error) return false;
			this.track(this.handle as string, replayed.changes);
		}
		this.fileEntries = [this.fileEntries[0] as Entry, ...kept.filter((e) => e.type !== "session")];
		this._buildIndex();
		this.leafId = leaf;
		const state = this.handle === undefined ? undefined : handles.get(this.handle);
		if (state) state.leafId = leaf;
		return true;
	}

	/**
	 * The session's file is being written by another pi-sessiond (another pi): this instance moves to a new session
	 * forked from the file as it is now (pi's `forkFrom`: same entries, a new header naming the file as parent),
	 * keeps its leaf, and says so; the held file is not touched.
	 */
	private forkAway(locked: RpcError): void {
		this.forkAwayFrom(holderIn(locked));
	}

	/**
	 * A session opened while another pi held it was promised, at open, to continue in a new session forked from it
	 * (the lock extension says so before the user types). The promise is kept at the first write while that pi
	 * lives, even if its lock is free just then (its sidecar restarting): else this pi would take the session and
	 * the other, whose user did nothing, would be moved to a fork at its next write.
	 */
	private keepForkPromise(entry: Entry): void {
		const holder = this.heldAtOpen;
		if (holder === undefined) return;
		this.heldAtOpen = undefined;
		const source = this.sessionFile;
		if (source === undefined || !isAlive(holder.hostPid ?? holder.pid)) return;
		const known = new Set(this.byId.keys());
		const leaf = this.leafId;
		this.forkAwayFrom(describeHolder(holder));
		// The fork holds what the other pi appended since this one opened (with their ids): the next entry goes
		// after them or beside them, as when they are found in the file itself.
		const theirs = this.getEntries().filter((e) => !known.has(e.id));
		const last = theirs[theirs.length - 1];
		if (last !== undefined && leaf !== null && theirs[0]?.parentId === leaf) this.placeBesideOthers(entry, leaf, last.id, { one: "this pi's next entry" }, source);
	}

	/**
	 * The file no longer holds this instance's leaf: another program cut it short or rewrote it (a `truncate`,
	 * `sed -i`, an editor's save, a backup or a sync tool putting an older copy back) and took this pi's last
	 * entries with it. pi's own module goes on appending under an entry its file lacks (orphans a later open
	 * cannot place); the sidecar refuses to, and every later write would fail with pi left on "Working". This pi
	 * goes on in a new session forked from the file as it is now, into which the entries it holds that the file
	 * lost are written again with their ids and timestamps: nothing pi was told was saved is lost, and the file the
	 * other program changed stays as it left it. An entry that cannot be written again (a kind pi's appends do not
	 * make, or a long string that was left in the file and went with it) ends the carrying over there, and says so.
	 */
	private carryOverLost(): void {
		const source = this.sessionFile as string;
		const path = this.getBranch(this.leafId ?? undefined).filter((e) => e.type !== "session");
		const previousLeaf = this.leafId;
		// A file emptied (`: > FILE`), or overwritten with something that is not a session, has nothing to fork:
		// the new session starts empty, its header naming the old file, and holds every entry of this pi's path.
		const emptied = !holdsSession(source);
		if (emptied) {
			const created = unwrap(callRestarting<ServerState>("session/create", defined({ cwd: this.cwd, sessionDir: this.sessionDir, parentSession: source })), source);
			this.adopt(created, { parentSession: source } as NewSessionOptions);
		} else {
			const state = unwrap(
				bridge().call<ServerState>("session/forkFrom", { sourcePath: source, targetCwd: this.cwd, sessionDir: this.sessionDir, snapshot: "full" }),
				source,
			);
			this.adopt(state);
		}
		const firstLost = path.findIndex((e) => !this.byId.has(e.id));
		const lost = firstLost < 0 ? [] : path.slice(firstLost);
		this.leafId = firstLost > 0 ? (path[firstLost - 1] as Entry).id : firstLost === 0 ? null : previousLeaf;
		let carried = 0;
		for (const entry of lost) {
			// A plain copy, every member read now: a long string left in the lost file fails here, not half-way
			// through a write, and the new session's entry does not read from the old file later.
			let copy: Entry | undefined;
			try {
				copy = JSON.parse(JSON.stringify(entry)) as Entry;
			} catch {
				copy = undefined;
			}
			const op = copy && replayOf(copy);
			if (copy === undefined || op === undefined) break;
			this.write(op.method, op.params);
			this.pushEntry(copy);
			carried++;
		}
		const one = lost.length === 1;
		const missing = lost.length - carried;
		const carriedOver = missing === 0 ? (one ? ", with it" : ", with them") : `, with ${carried} of them (${missing} could not be written again)`;
		notice(
			emptied
				? `Session file ${source} was emptied or overwritten by another program and holds no session now. Continuing in a new session with this pi's ${one ? "entry" : `${lost.length} entries`}${missing === 0 ? "" : ` (${carried} of them; ${missing} could not be written again)`}: ${this.sessionFile}`
				: `Session file ${source} no longer holds this pi's last ${one ? "entry" : `${lost.length} entries`}: another program cut it short or rewrote it. Continuing in a new session forked from it${carriedOver}: ${this.sessionFile}`,
		);
	}

	/** Moves to a new session forked from this one's file, which `holder` (as a message names it) writes. */
	private forkAwayFrom(holder: string): void {
		const source = this.sessionFile as string;
		const leaf = this.leafId;
		const state = unwrap(
			bridge().call<ServerState>("session/forkFrom", { sourcePath: source, targetCwd: this.cwd, sessionDir: this.sessionDir, snapshot: "full" }),
			source,
		);
		this.adopt(state);
		if (leaf === null || this.byId.has(leaf)) this.leafId = leaf;
		notice(`Session file ${source} is being written by ${holder}. Continuing in a new session forked from it: ${this.sessionFile}`);
	}

	/** Calls a method on this instance's handle and applies what it reports. */
	private callOnHandle<T>(method: string, params: object): T {
		this.settle();
		const handle = this.ensureHandle();
		const outcome = bridge().call<T>(method, { handle, ...params });
		this.track(handle, outcome.changes);
		return unwrap(outcome, this.sessionFile);
	}

	/**
	 * Records what the server reports for `handle` (leaf, session, seq) and applies appends other processes made,
	 * which the server publishes before refusing a write: this instance then holds what the file holds.
	 */
	private track(handle: string, changes: Changed[]): Changed[] {
		const state = handles.get(handle);
		for (const n of changes) {
			if (n.handle !== handle || !state) continue;
			state.seq = n.seq;
			state.leafId = n.leafId ?? null;
			state.sessionId = n.sessionId;
			const change = n.change;
			if (change.kind === "rebind" || change.kind === "reset") state.sessionFile = change.state.sessionFile ?? null;
			if (n.origin === "external" && change.kind === "append") {
				// Another process's appends (a pi that takes no lock) become this session's, and the leaf follows them
				// when it was where they were appended: what this pi writes next (its error entry, the retry) then
				// continues after them rather than forking the session silently beside them (pi #8177, #8300).
				const ownLeaf = this.leafId;
				for (const entry of change.entries as Entry[]) this.pushEntry(entry);
				this.leafId = ownLeaf;
				const first = (change.entries as Entry[])[0];
				if (first !== undefined && first.parentId === ownLeaf && typeof n.leafId === "string" && this.byId.has(n.leafId)) this.leafId = n.leafId;
			}
		}
		return changes.filter((n) => n.handle === handle);
	}

	/** True while the server's handle still holds this instance's session (another instance may have rebound it). */
	private ownsHandle(): boolean {
		if (this.handle === undefined) return false;
		const state = handles.get(this.handle);
		return state !== undefined && this.held.generation === bridge().generation && state.sessionId === this.sessionId && (state.sessionFile ?? undefined) === this.sessionFile;
	}

	/**
	 * This instance's handle, opening its file again if the handle was rebound under it, or its sidecar died
	 * (then what another process appended meanwhile is taken, see `takeOthers`; `entry` is the write about to be
	 * made).
	 */
	private ensureHandle(entry?: Entry): string {
		if (this.handle !== undefined && this.ownsHandle()) return this.handle;
		if (this.sessionFile === undefined) throw new Error("pi-sessiond: this session has no file to write");
		const restarted = this.handle !== undefined && this.held.generation !== bridge().generation;
		if (restarted && !existsSync(this.sessionFile)) {
			// Opened there, a missing file would start another session at this path.
			if (this.recreateAfterRestart()) return this.handle as string;
			throw new Error(`pi-sessiond restarted before ${this.sessionFile} was written, and this session could not be made again there`);
		}
		const fresh = this.reopenKeepingOwn();
		this.takeOthers(restarted ? fresh : [], entry);
		if (this.handle === undefined) throw new Error(`pi-sessiond did not open ${this.sessionFile}`);
		return this.handle;
	}

	/**
	 * Opens this session's file on a new handle (the old one was rebound under it, or died with its sidecar) and
	 * keeps what this instance had, as pi's instances do not see each other's appends: only the handle is new.
	 * Returns the entries the file holds that this instance does not. A file that now holds another session
	 * (someone else made one at this path) is let go again and an error thrown: adopted, its handle would have
	 * taken this pi's next writes into that session.
	 */
	private reopenKeepingOwn(): Entry[] {
		const file = this.sessionFile as string;
		const { fileEntries: entries, leafId: leaf, sessionId: id, cwd, sessionDir, flushed } = this;
		const known = new Set(this.byId.keys());
		this.openFile(file);
		const fresh = this.fileEntries.filter((e) => e.type !== "session" && !known.has(e.id));
		const holds = this.sessionId;
		this.fileEntries = entries;
		this._buildIndex();
		this.leafId = leaf;
		if (holds !== id) {
			if (this.handle !== undefined) closeHandle(this.handle, this.held.generation);
			this.handle = undefined;
			this.held.handle = undefined;
			this.sessionId = id;
			this.sessionFile = file;
			this.cwd = cwd;
			this.sessionDir = sessionDir;
			this.flushed = flushed;
			throw new Error(`Session file ${file} now holds session ${holds}, not ${id}; not writing to it`);
		}
		return fresh;
	}

	private startNew(options: NewSessionOptions | undefined): void {
		if (options?.id !== undefined) assertValidSessionId(options.id);
		takeOpenedAhead(undefined);
		const create = () =>
			unwrap(
				callRestarting<ServerState>(
					"session/create",
					defined({ cwd: this.cwd, sessionDir: this.sessionDir, id: options?.id, parentSession: options?.parentSession }),
				),
				undefined,
			);
		try {
			this.adopt(create(), options ?? {});
		} catch (error) {
			// The sidecar died between the create and the read of the new session's entries (as `openFile`'s open
			// may): nothing of it outlived that process, a new session being in memory until its first message, so
			// it is made again on the next one, once.
			if (!(error instanceof SessiondSessionError && error.kind === "sidecar_exited")) throw error;
			this.adopt(create(), options ?? {});
		}
	}

	/** `openFile`, for pi's own opens: notes who else holds the file's lock, if anyone (see `keepForkPromise`). */
	private openAsPi(path: string): void {
		const ahead = this.openFile(path);
		this.heldAtOpen = otherHolderOf(path, ahead?.holder);
		this.checkedAtOpen = { path, holder: this.heldAtOpen };
	}

	/**
	 * Who else held the lock of `path` when this instance opened it for pi, if it was that open's to say: the lock
	 * extension tells the user at `session_start` without asking the system again.
	 */
	lockCheckedAtOpen(path: string): { holder: LockHolder | undefined } | undefined {
		const checked = this.checkedAtOpen;
		return checked !== undefined && checked.path === path ? { holder: checked.holder } : undefined;
	}

	/**
	 * Opens `path` as pi's open does: with `repair`, the server writes pi's load-time repairs at once (a header into
	 * a 0-byte file, a v1/v2 file rewritten migrated, a missing final newline), where its plain open would wait
	 * for the first write.
	 */
	private openFile(path: string): OpenedAhead | undefined {
		const previous = this.handle;
		const params = openParams(path, this.sessionDir, this.cwd);
		const ahead = takeOpenedAhead(params);
		const state = unwrap(ahead?.open ?? callRestarting<ServerState>("session/open", params), path);
		// Opening a file this instance already holds counted one more reference to the same handle: give it back.
		if (previous !== undefined && previous === state.handle) closeHandle(previous, this.held.generation);
		try {
			this.adopt(state, undefined, undefined, ahead?.pages);
		} catch (error) {
			// The sidecar died while the entries were read (a big session's pages take a while): the file is opened
			// again on the next one, once, as any call is made again.
			if (!(error instanceof SessiondSessionError && error.kind === "sidecar_exited")) throw error;
			this.adopt(unwrap(callRestarting<ServerState>("session/open", params), path));
			return undefined;
		}
		return ahead;
	}

	/**
	 * Makes this instance hold the server's session `state`: identity, then the entries (from the state's snapshot
	 * when the server sends one, else read once, starting from `pagesAhead` when its pages were asked for
	 * already). `fresh` rebuilds a new session's header in pi's shape (with `parentSession` present even when
	 * undefined); `previousFile` does the same for a branched session.
	 */
	private adopt(state: ServerState, fresh?: NewSessionOptions, previousFile?: string, pagesAhead?: PagesAhead): void {
		const generation = bridge().generation;
		this.heldAtOpen = undefined;
		if (this.handle !== undefined && (this.handle !== state.handle || this.held.generation !== generation)) closeHandle(this.handle, this.held.generation);
		this.handle = state.handle;
		this.held.handle = state.handle;
		this.held.generation = generation;
		const entries = state.snapshot ? state.snapshot.entries : this.readEntries(state.handle, state.sessionFile, pagesAhead);
		const seq = state.snapshot ? state.snapshot.seq : state.seq;
		handles.set(state.handle, { sessionId: state.sessionId, sessionFile: state.sessionFile, leafId: state.leafId ?? null, seq });
		this.sessionId = state.sessionId;
		this.sessionFile = state.sessionFile ?? undefined;
		this.cwd = state.cwd;
		this.sessionDir = state.sessionDir;
		let header = state.header;
		if (header && fresh) {
			header = { type: "session", version: header.version, id: header.id, timestamp: header.timestamp, cwd: header.cwd, parentSession: fresh.parentSession };
		} else if (header && previousFile !== undefined) {
			header = { type: "session", version: header.version, id: header.id, timestamp: header.timestamp, cwd: header.cwd, parentSession: previousFile };
		}
		this.fileEntries = header ? [header, ...entries] : entries;
		this._buildIndex();
		this.leafId = (state.leafId as string | null) ?? null;
		this.flushed = this.sessionFile !== undefined && existsSync(this.sessionFile);
	}

	/**
	 * The entries of `handle`, read in pages of `session/getEntries` with their long strings left in the file
	 * (`lazy.ts`): no answer is ever the whole session (a 1.26 GB one does not fit in a JavaScript string), and
	 * a page of a thousand entries was faster to read and parse than one answer of 40 MB. Two pages are asked for
	 * ahead of the one being taken, so pi-sessiond reads the next while this thread parses one (one at a time,
	 * each waited for, the two took turns: 0.83 s for a 128 MB session where each side alone needs half of it).
	 * Nothing else writes this handle meanwhile: the drop-in does not watch, and this process's calls are
	 * sequential. `ahead`: the first pages, asked for with the open (lazily), when it was opened ahead of pi.
	 */
	private readEntries(handle: string, file: string | null, ahead?: PagesAhead): Entry[] {
		const entries: Entry[] = [];
		const lazy = file === null || !existsSync(file) ? undefined : new LazyFile(file, (id) => this.refetch(handle, file, id));
		const b = bridge();
		const { answers, asked: askedAhead } = lazy && ahead ? ahead : { answers: new Map<number, CallOutcome<unknown>>(), asked: 0 };
		let asked = askedAhead;
		const askUpTo = (last: number) => {
			for (; asked <= last; asked++) {
				const page = asked;
				b.postLater("session/getEntries", pageParams(handle, page, lazy !== undefined), (outcome) => answers.set(page, outcome));
			}
		};
		askUpTo(1);
		for (let page = 0; ; page++) {
			b.settleUntil(() => answers.has(page));
			const outcome = answers.get(page) ?? { error: { code: -32099, message: "pi-sessiond did not answer a page of entries", data: { kind: "sidecar_exited" } }, changes: [] };
			answers.delete(page);
			const items = unwrap(outcome as CallOutcome<(Entry | LazyEntry)[]>, this.sessionFile);
			if (items.length === ENTRIES_PAGE) askUpTo(page + 2);
			for (const item of items) entries.push(lazy ? lazy.revive(item as LazyEntry) : (item as Entry));
			if (items.length < ENTRIES_PAGE) {
				// The page asked for past the end answers empty; taken now, so no answer is owed to a finished read.
				b.settle();
				return entries;
			}
		}
	}

	/** The entry `id` of `file` read whole through pi-sessiond, while this instance's handle still holds the file. */
	private refetch(handle: string, file: string, id: string): Entry | undefined {
		if (this.handle !== handle || this.sessionFile !== file || !this.ownsHandle()) return undefined;
		const [entry] = unwrap(bridge().call<(Entry | null)[]>("session/getEntries", { handle, ids: [id] }), file);
		return entry ?? undefined;
	}
}

/**
 * A listing entry in pi's shape: its members in pi's order (`name` and `parentSessionPath` present, undefined when
 * the server left them out), dates as `Date`s.
 */
function reviveInfo(info: unknown): unknown {
	const v = info as Record<string, unknown>;
	return {
		path: v.path,
		id: v.id,
		cwd: v.cwd,
		name: v.name,
		parentSessionPath: v.parentSessionPath,
		created: new Date(v.created as string),
		modified: new Date(v.modified as string),
		messageCount: v.messageCount,
		firstMessage: v.firstMessage,
		allMessagesText: v.allMessagesText,
	};
}
