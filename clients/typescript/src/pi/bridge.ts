/**
 * `SyncBridge`: synchronous JSON-RPC calls to one pi-sessiond per process, for the drop-in `SessionManager`, whose
 * methods pi calls synchronously and whose return values pi uses at once.
 *
 * A worker thread (`bridge-worker.ts`) owns the process; the main thread posts a request and blocks in
 * `Atomics.wait` until the worker has the answer, then takes it with `receiveMessageOnPort`. Requests are written
 * as `JSON.stringify` makes them here, on the main thread, so what reaches the server is what pi would have
 * serialised (`toJSON`, dropped `undefined`s and functions), not a structured clone. Only writes and opens take
 * this path: reads are answered from the mirror without a round trip.
 *
 * Listings (`list`, `listAll`) are asynchronous in pi and stay so: they go through a second port and resolve on
 * the event loop, with `$/progress` reported as they load.
 *
 * Appends need not wait either (`postLater`): the drop-in chooses the entry's id and timestamp, answers pi at once
 * and learns on the event loop whether the append landed. Their requests share the synchronous calls' order on
 * the wire, and every synchronous call first takes all their answers (`settle`), so what it answers comes after
 * theirs, as it was sent.
 */

import { MessageChannel, type MessagePort, receiveMessageOnPort, Worker } from "node:worker_threads";
import { resolveBinary } from "../binary.js";
import { getAgentDir } from "./paths.js";
import type { BridgeWorkerData, Frame } from "./bridge-worker.js";

/** A JSON-RPC error answered by pi-sessiond (or made up by the bridge when the process is gone). */
export interface RpcError {
	code: number;
	message: string;
	data?: { kind?: string; [key: string]: unknown };
}

/** A `session/changed` notification. */
export interface Changed {
	handle: string;
	sessionId: unknown;
	seq: number;
	origin?: string;
	leafId?: unknown;
	change: { kind: string; [key: string]: any };
}

/** What a synchronous call returns: its result or error, and the notifications that came before it. */
export interface CallOutcome<T> {
	result?: T;
	error?: RpcError;
	changes: Changed[];
}

const decoder = new TextDecoder();
/** `PI_SESSIOND_TRACE=1` writes every synchronous call and its answer to stderr (shortened), for debugging. */
const trace = process.env.PI_SESSIOND_TRACE ? (text: string) => process.stderr.write(`pi-sessiond bridge: ${text}`) : undefined;

function parseFrame(frame: Frame): unknown {
	return JSON.parse(typeof frame === "string" ? frame : decoder.decode(frame));
}

/**
 * Set to `true` on `globalThis` to let the drop-in's common appends go on before the server answers. pi's command
 * sets it (through the register hook): pi never reads its session file back, and an append that throws leaves its
 * agent loop on "Working", so a refused append mended afterwards serves it better than one that blocks every
 * time. Without it the drop-in keeps the contract of pi's module: when an append returns, the file has the entry,
 * and an append that cannot be written throws.
 */
export const APPENDS_WITHOUT_WAITING = Symbol.for("pi-sessiond-client.appendsWithoutWaiting");

/** True when `APPENDS_WITHOUT_WAITING` is set. */
export function appendsWithoutWaiting(): boolean {
	return (globalThis as Record<symbol, unknown>)[APPENDS_WITHOUT_WAITING] === true;
}

/** The environment variable with extra pi-sessiond arguments (`--durability batch`, `--log-level debug`, …). */
export const ARGS_ENV_VAR = "PI_SESSIOND_ARGS";

/** What `postLaterThen`'s calls hold where the worker puts the handle (a string no handle equals). */
const HANDLE_SLOT = "pi-sessiond-client: the handle the call before names";

/** A synchronous request posted and not yet answered. */
interface Pending {
	method: string;
	line: string;
	started: number;
}

/** One pi-sessiond process, called synchronously. */
export class SyncBridge {
	/** The sidecar's binary. */
	readonly binary: string;
	/** The agent directory the sidecar was started with (pi's, from `PI_CODING_AGENT_DIR`, at start). */
	readonly agentDir: string;
	/** Which sidecar of this process this is (1 for the first, one more for each started after one died). */
	readonly generation: number;
	/** True once the sidecar's process is gone: every call since answered `sidecar_exited`. */
	dead = false;
	private readonly worker: Worker;
	private readonly flag: Int32Array;
	private readonly syncPort: MessagePort;
	private readonly asyncPort: MessagePort;
	private nextId = 0;
	/** Calls posted without waiting whose answers have not been taken, by request id. */
	private readonly later = new Map<number, (outcome: CallOutcome<unknown>) => void>();
	private readonly asyncCalls = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
	private readonly progress = new Map<string, (value: { loaded: number; total: number }) => void>();
	/** The `initialize` request while its answer is still owed (it is waited for at the first call). */
	private initializing: Pending | undefined;

	/**
	 * Starts the sidecar (`PI_SESSIOND_BIN`, the platform package, then PATH) and asks it to initialize, without
	 * waiting: the first call checks the answer, so the sidecar starts while pi loads (`prestartBridge`).
	 */
	constructor(generation: number) {
		this.generation = generation;
		this.binary = resolveBinary();
		this.agentDir = getAgentDir();
		const extra = (process.env[ARGS_ENV_VAR] ?? "").split(/\s+/).filter((a) => a !== "");
		// Appends that do not wait (pi's process) are fsynced right after they are answered, unless asked otherwise:
		// pi then waits for the write alone at the end of a turn, as for its own appendFileSync.
		if (appendsWithoutWaiting() && !extra.some((a) => a === "--durability" || a.startsWith("--durability="))) extra.unshift("--durability", "after");
		const signal = new SharedArrayBuffer(8);
		this.flag = new Int32Array(signal);
		const sync = new MessageChannel();
		const async = new MessageChannel();
		this.syncPort = sync.port1;
		this.asyncPort = async.port1;
		const workerData: BridgeWorkerData = {
			binary: this.binary,
			args: ["--agent-dir", this.agentDir, ...extra],
			cwd: process.cwd(),
			env: { ...process.env },
			signal,
			syncPort: sync.port2,
			asyncPort: async.port2,
			stderr: process.env.PI_SESSIOND_STDERR === "inherit" ? "inherit" : "keep",
			handleSlot: JSON.stringify(HANDLE_SLOT),
		};
		this.worker = new Worker(new URL("./bridge-worker.js", import.meta.url), {
			workerData,
			transferList: [sync.port2, async.port2],
			// The worker must not inherit an --import hook (pi-sessiond-client/register) meant for the main thread.
			execArgv: [],
		});
		// Neither the worker nor its ports may keep the process alive: pi exits when it is done, and the sidecar then
		// sees the end of its input and shuts down in order (every answered write is already durable).
		this.worker.unref();
		this.syncPort.unref();
		this.asyncPort.on("message", (message: { id?: number; progress?: boolean; later?: boolean; frames: Frame[] }) => this.onAsync(message));
		this.asyncPort.unref();
		this.initializing = this.post("initialize", { clientInfo: { name: "pi-sessiond-client/pi" } });
	}

	/** Waits for the answer to `initialize` if it is still owed; throws if the sidecar did not initialize. */
	private initialized(): void {
		const pending = this.initializing;
		if (pending === undefined) return;
		this.initializing = undefined;
		const init = this.wait<{ protocolVersion: string }>(pending);
		if (init.error) throw new Error(init.error.message);
	}

	/** Sends one request and blocks until it is answered (after the answers of the calls posted before it). */
	call<T>(method: string, params: object): CallOutcome<T> {
		this.initialized();
		this.settle();
		return this.wait<T>(this.post(method, params));
	}

	/**
	 * Sends one request in the synchronous calls' order without waiting: `onAnswer` receives its outcome on the
	 * event loop, or in `settle`, whichever comes first.
	 */
	postLater(method: string, params: object, onAnswer: (outcome: CallOutcome<unknown>) => void): void {
		this.initialized();
		const id = ++this.nextId;
		const line = JSON.stringify({ jsonrpc: "2.0", id, method, params });
		this.later.set(id, onAnswer);
		this.keepAlive();
		this.syncPort.postMessage({ id, line, later: true });
	}

	/**
	 * `postLater`, and once `method` is answered with a result that names a `handle`, each call of `then` with
	 * that handle added to its params, sent by the worker as soon as the answer arrives: reads that need an open's
	 * handle go out without waiting for this thread (which may be busy loading pi). When the first call fails or
	 * names no handle, each of `then` is answered with a `not_sent` error. Unlike the other calls it does not wait
	 * for `initialize`'s answer (sent before it all the same): it is made while pi still loads.
	 */
	postLaterThen(
		method: string,
		params: object,
		onAnswer: (outcome: CallOutcome<unknown>) => void,
		then: { method: string; params: object; onAnswer: (outcome: CallOutcome<unknown>) => void }[],
	): void {
		const id = ++this.nextId;
		const line = JSON.stringify({ jsonrpc: "2.0", id, method, params });
		this.later.set(id, onAnswer);
		const follow = then.map((call) => {
			const followId = ++this.nextId;
			this.later.set(followId, call.onAnswer);
			const params = { handle: HANDLE_SLOT, ...call.params };
			return { id: followId, line: JSON.stringify({ jsonrpc: "2.0", id: followId, method: call.method, params }) };
		});
		this.keepAlive();
		this.syncPort.postMessage({ id, line, later: true, then: follow });
	}

	/** The answers still owed keep the process alive (a listing pi awaits, an append not yet known to have landed). */
	private keepAlive(): void {
		if (this.asyncCalls.size + this.later.size > 0) this.asyncPort.ref();
		else this.asyncPort.unref();
	}

	/** Blocks until every call posted without waiting is answered, and hands each its outcome. */
	settle(): void {
		this.settleWithin(Number.POSITIVE_INFINITY);
	}

	/**
	 * `settle`, blocking at most `ms` milliseconds; true when every call posted without waiting is answered. A
	 * short block wakes on the worker's notify, where waiting on the event loop waits until pi's work yields to it.
	 */
	settleWithin(ms: number): boolean {
		return this.settleWhile(performance.now() + ms, () => true);
	}

	/**
	 * Blocks until `done()` holds (checked as each answer is handed out) or every call posted without waiting is
	 * answered: a caller that keeps several reads in flight takes each as it comes.
	 */
	settleUntil(done: () => boolean): void {
		this.settleWhile(Number.POSITIVE_INFINITY, () => !done());
	}

	/** Hands out answers until none is owed, `more()` is false, or `until` (a `performance.now()`) has passed. */
	private settleWhile(until: number, more: () => boolean): boolean {
		while (this.later.size > 0 && more()) {
			// The count is read before the port, so an answer that arrives in between ends the wait at once.
			const counted = Atomics.load(this.flag, 1);
			this.takeArrived();
			if (this.later.size === 0 || !more()) break;
			const left = until - performance.now();
			if (left <= 0) return false;
			Atomics.wait(this.flag, 1, counted, Math.min(left, 10_000));
		}
		return this.later.size === 0;
	}

	/**
	 * Hands out the answers that have reached this thread, without waiting for more or for the event loop (which
	 * delivers them only when pi's work yields to I/O).
	 */
	takeArrived(): void {
		for (let m = receiveMessageOnPort(this.asyncPort); m; m = receiveMessageOnPort(this.asyncPort)) this.onAsync(m.message);
	}

	/** Posts one synchronous request to the worker (one at a time: the worker waits for one answer at once). */
	private post(method: string, params: object): Pending {
		const id = ++this.nextId;
		const started = trace ? performance.now() : 0;
		const line = JSON.stringify({ jsonrpc: "2.0", id, method, params });
		Atomics.store(this.flag, 0, 0);
		this.syncPort.postMessage({ id, line });
		return { method, line, started };
	}

	/** Blocks until the request `post` sent is answered. */
	private wait<T>({ method, line, started }: Pending): CallOutcome<T> {
		for (;;) {
			Atomics.wait(this.flag, 0, 0, 10_000);
			const state = Atomics.load(this.flag, 0);
			if (state !== 0) break;
		}
		const received = receiveMessageOnPort(this.syncPort);
		Atomics.store(this.flag, 0, 0);
		if (!received) {
			this.dead = true;
			return { error: { code: -32099, message: `pi-sessiond bridge failed while ${method} was pending`, data: { kind: "sidecar_exited" } }, changes: [] };
		}
		const outcome = this.outcomeOf<T>((received.message as { frames: Frame[] }).frames);
		if (trace) {
			const ms = (performance.now() - started).toFixed(1);
			const answer = JSON.stringify(outcome.error ? { error: outcome.error } : { result: outcome.result });
			trace(`${line.slice(0, 300)}\n  <- ${answer.slice(0, 300)} after ${outcome.changes.length} change(s), ${ms} ms\n`);
		}
		return outcome;
	}

	/** An answer's frames (the `session/changed` lines before it, then the response) as its outcome. */
	private outcomeOf<T>(frames: Frame[]): CallOutcome<T> {
		const parsed = frames.map(parseFrame) as { result?: T; error?: RpcError; params?: Changed }[];
		const answer = parsed.pop() ?? {};
		if (answer.error?.data?.kind === "sidecar_exited") this.dead = true;
		const changes = parsed.map((f) => f.params as Changed);
		return answer.error ? { error: answer.error, changes } : { result: answer.result as T, changes };
	}

	/** Ends the worker of a bridge whose sidecar is gone (its pending listings were answered when it died). */
	dispose(): void {
		void this.worker.terminate();
	}

	/** Sends a request without waiting for (or reading) its answer. */
	send(method: string, params: object): void {
		this.initialized();
		const line = JSON.stringify({ jsonrpc: "2.0", id: ++this.nextId, method, params });
		this.asyncPort.postMessage({ line });
	}

	/**
	 * Sends a request and resolves on the event loop; `onProgress` receives its `$/progress` reports. It goes out
	 * after every call posted without waiting is answered: the server runs a listing beside a handle's writes, so
	 * a listing sent at once could miss an append pi made just before it (pi's own listing sees its appends).
	 */
	request<T>(method: string, params: object, onProgress?: (loaded: number, total: number) => void): Promise<T> {
		this.initialized();
		this.settle();
		const id = ++this.nextId;
		const token = onProgress ? `pi-sessiond-pi-${id}` : undefined;
		if (token && onProgress) this.progress.set(token, (v) => onProgress(v.loaded, v.total));
		const line = JSON.stringify({ jsonrpc: "2.0", id, method, params: token ? { ...params, progressToken: token } : params });
		return new Promise<T>((resolve, reject) => {
			this.asyncCalls.set(id, {
				resolve: (v) => {
					if (token) this.progress.delete(token);
					resolve(v as T);
				},
				reject: (e) => {
					if (token) this.progress.delete(token);
					reject(e);
				},
			});
			this.keepAlive();
			this.asyncPort.postMessage({ id, line });
		});
	}

	private onAsync(message: { id?: number; progress?: boolean; later?: boolean; frames: Frame[] }): void {
		if (message.later) {
			const onAnswer = message.id !== undefined ? this.later.get(message.id) : undefined;
			if (!onAnswer || message.id === undefined) return;
			this.later.delete(message.id);
			this.keepAlive();
			onAnswer(this.outcomeOf(message.frames));
			return;
		}
		for (const frame of message.frames) {
			const parsed = parseFrame(frame) as { id?: number; result?: unknown; error?: RpcError; params?: { token: string; value: { loaded: number; total: number } } };
			if (message.progress) {
				const params = parsed.params;
				if (params) this.progress.get(String(params.token))?.(params.value);
				continue;
			}
			const call = message.id !== undefined ? this.asyncCalls.get(message.id) : undefined;
			if (!call || message.id === undefined) continue;
			this.asyncCalls.delete(message.id);
			this.keepAlive();
			if (parsed.error) call.reject(new Error(parsed.error.message));
			else call.resolve(parsed.result);
		}
	}
}

let shared: SyncBridge | undefined;
/** When the sidecars started since `RESTART_WINDOW_MS` ago were started, oldest first. */
const restarts: number[] = [];
/** A sidecar that dies more often than this is not started again: the error it gave is the answer. */
const MAX_RESTARTS = 5;
const RESTART_WINDOW_MS = 60_000;

/**
 * The process's one bridge, started on first use, and started again (a new sidecar) once the last one's process
 * died (`kill -9`, a crash): the drop-in reopens its sessions on the new one (`generation` tells it which handles
 * are gone). At most `MAX_RESTARTS` a minute, so a sidecar that cannot live does not start for ever.
 */
export function bridge(): SyncBridge {
	if (shared?.dead) {
		const now = Date.now();
		while (restarts.length > 0 && (restarts[0] ?? 0) < now - RESTART_WINDOW_MS) restarts.shift();
		if (restarts.length < MAX_RESTARTS) {
			restarts.push(now);
			shared.dispose();
			shared = new SyncBridge(shared.generation + 1);
		}
	}
	shared ??= new SyncBridge(1);
	return shared;
}

/**
 * Starts the process's bridge now, before the first session call needs it, so the worker and the sidecar start
 * while pi loads its modules (the `register` hook calls it). A failure is left for the first call to report.
 */
export function prestartBridge(): void {
	try {
		bridge();
	} catch {
		// The first call starts it again and reports what went wrong.
	}
}

/** Closes `handle` of bridge `generation`, unless that sidecar is gone (its handles went with it). */
export function closeHandle(handle: string, generation: number): void {
	if (shared !== undefined && shared.generation === generation && !shared.dead) shared.send("session/close", { handle });
}
