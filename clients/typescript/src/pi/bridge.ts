/**
 * `SyncBridge`: synchronous JSON-RPC calls to one pi-sessiond per process, for the drop-in `SessionManager`, whose
 * methods pi calls synchronously and whose return values pi uses at once.
 *
 * The main thread owns the process and its pipes. While nothing waits, the event loop reads the process's output
 * (a `data` handler on its stdout); a synchronous call writes its request with `writeSync` and then reads the
 * answer itself, with `readSync` on the same pipe (non-blocking: between reads it naps in `Atomics.wait`, from
 * 20 µs up to 1 ms). The two readers never meet: while a call waits, the event loop does not run, and the stream
 * holds no bytes it has not handed to the `data` handler, so each line is routed once, in order. There is no
 * worker thread: on a 2-core machine its own Node environment cost 40–60 ms of CPU and 10 MiB at every start of
 * pi, more than everything else the drop-in adds. Requests are written as `JSON.stringify` makes them here, so
 * what reaches the server is what pi would have serialised (`toJSON`, dropped `undefined`s and functions). Only
 * writes and opens take this path: reads are answered from the mirror without a round trip.
 *
 * Listings (`list`, `listAll`) are asynchronous in pi and stay so: they resolve on the event loop, with
 * `$/progress` reported as they load.
 *
 * Appends need not wait either (`postLater`): the drop-in chooses the entry's id and timestamp, answers pi at once
 * and learns on the event loop whether the append landed. Every request goes out in the order it was made, and
 * every synchronous call first takes all their answers (`settle`), so what it answers comes after theirs, as it
 * was sent.
 *
 * A sidecar that stops answering without exiting (stopped, deadlocked) would leave pi blocked at its next call
 * for good. So while calls are pending and nothing has come from the process for `PROBE_AFTER_MS`, the bridge asks
 * it something every live server answers at once (`initialize`, answered off its event loop whatever a handle is
 * doing); when nothing at all comes within `PROBE_ANSWER_MS` after that, the process is killed and handled as one
 * that died: its calls are answered with `sidecar_exited`, and the drop-in starts another and mends.
 */

import { type ChildProcessWithoutNullStreams, spawn } from "node:child_process";
import { readFileSync, readSync, writeSync } from "node:fs";
import type { Socket } from "node:net";
import { constants } from "node:os";
import { resolveBinary } from "../binary.js";
import { getAgentDir } from "./paths.js";

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

/** `PI_SESSIOND_TRACE=1` writes every synchronous call and its answer to stderr (shortened), for debugging. */
const trace = process.env.PI_SESSIOND_TRACE ? (text: string) => process.stderr.write(`pi-sessiond bridge: ${text}`) : undefined;

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

/** The arguments the user adds for the sidecar (`PI_SESSIOND_ARGS`, split at white space). */
export function extraSidecarArgs(env: NodeJS.ProcessEnv = process.env): string[] {
	return (env[ARGS_ENV_VAR] ?? "").split(/\s+/).filter((a) => a !== "");
}

/** The sidecar's arguments as the drop-in starts it: pi's agent directory, then the user's (the launcher tries
 * the same before pi starts). */
export function sidecarArgs(env: NodeJS.ProcessEnv = process.env): string[] {
	return ["--agent-dir", getAgentDir(env), ...extraSidecarArgs(env)];
}


/** Nothing heard for this long while calls are pending: the process is probed. */
const PROBE_AFTER_MS = 2_000;
/** Nothing heard for this long after the probe: the process is taken for hung and killed. */
const PROBE_ANSWER_MS = 5_000;
/** How much of the process's stderr is kept for the message of a call it did not answer. */
const STDERR_TAIL = 8192;
/** A synchronous wait's longest nap between two reads of the pipe, and its first. */
const NAP_MAX_MS = 1;
const NAP_FIRST_MS = 0.02;

const RESPONSE = /^\{"jsonrpc":"2\.0","id":(\d+),/;
const NOTIFICATION = /^\{"jsonrpc":"2\.0","method":"([^"]+)"/;

/** The memory the synchronous waits nap on (nothing ever notifies it: the nap is its timeout). */
const napCell = new Int32Array(new SharedArrayBuffer(4));

/** Blocks this thread for `ms` milliseconds. */
function nap(ms: number): void {
	Atomics.wait(napCell, 0, 0, ms);
}

/** Naps that double from `NAP_FIRST_MS` up to `NAP_MAX_MS` while nothing comes, and start over when something does. */
class Backoff {
	private next = NAP_FIRST_MS;

	/** Something came: the next nap is the first again. */
	reset(): void {
		this.next = NAP_FIRST_MS;
	}

	/** Naps the next length (at most `limit` ms), and doubles it. */
	nap(limit = Number.POSITIVE_INFINITY): void {
		nap(Math.min(this.next, limit));
		this.next = Math.min(this.next * 2, NAP_MAX_MS);
	}
}

/** A synchronous request sent and not yet answered. */
interface Pending {
	id: number;
	method: string;
	line: string;
	started: number;
}

/** True for the error a non-blocking read or write gives when it would have had to wait. */
function wouldBlock(error: unknown): boolean {
	const code = (error as NodeJS.ErrnoException).code;
	return code === "EAGAIN" || code === "EWOULDBLOCK";
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
	/** True once the process answered a request: it started, whatever ended it later. */
	answered = false;
	/** Why the process is gone, for the errors of the calls it did not answer. */
	private deadBecause: string | undefined;
	private readonly child: ChildProcessWithoutNullStreams;
	/** The pipes' descriptors (non-blocking): the process's input, to write, and its output, to read. */
	private readonly inputFd: number;
	private readonly outputFd: number;
	private readonly readBuffer = Buffer.allocUnsafe(1 << 20);
	private nextId = 0;
	/** Synchronous calls sent and not yet answered, and the answers (with the changes before them) not yet taken. */
	private readonly syncPending = new Set<number>();
	private readonly syncAnswers = new Map<number, string[]>();
	/** Calls posted without waiting whose answers have not been taken, by request id. */
	private readonly later = new Map<number, (outcome: CallOutcome<unknown>) => void>();
	/** Those of them sent and not yet answered by the process. */
	private readonly owedLater = new Set<number>();
	/** Their answers as they arrived, to be handed out in order (`takeArrived`). */
	private readonly arrived: { id: number; frames: string[] }[] = [];
	private readonly asyncCalls = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
	private readonly progress = new Map<string, (value: { loaded: number; total: number }) => void>();
	/** `session/changed` lines received since the last answer: they travel with the next one. */
	private changedSinceAnswer: string[] = [];
	/** Bytes read and not yet split into lines (the end of the last chunk, a line not yet ended). */
	private partial: Buffer[] = [];
	/** Chunks read while a line was being routed (a write that had to read to go on), routed after it. */
	private readonly inbox: Buffer[] = [];
	private routing = false;
	private takeScheduled = false;
	private stderrTail = "";
	/** When the process last wrote anything, or when a call was sent while none was pending: the silence clock. */
	private lastHeard = Date.now();
	private probeSentAt: number | undefined;
	/** Probes' ids, far above the calls', which count from 1. */
	private nextProbeId = 2 ** 40;
	private readonly watchdog: NodeJS.Timeout;
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
		const args = sidecarArgs();
		// Appends that do not wait (pi's process) are fsynced right after they are answered, unless asked otherwise:
		// pi then waits for the write alone at the end of a turn, as for its own appendFileSync. Before the user's
		// arguments, after the agent directory.
		if (appendsWithoutWaiting() && !args.some((a) => a === "--durability" || a.startsWith("--durability="))) args.splice(2, 0, "--durability", "after");
		this.child = spawn(this.binary, args, {
			cwd: process.cwd(),
			env: process.env,
			stdio: ["pipe", "pipe", "pipe"],
			windowsHide: true,
		});
		const fdOf = (stream: object): number => (stream as { _handle?: { fd?: number } })._handle?.fd ?? -1;
		this.inputFd = fdOf(this.child.stdin);
		this.outputFd = fdOf(this.child.stdout);
		this.child.stdout.on("data", (chunk: Buffer) => {
			this.ingest(chunk);
			this.takeArrived();
		});
		this.child.stderr.setEncoding("utf8");
		const inherit = process.env.PI_SESSIOND_STDERR === "inherit";
		this.child.stderr.on("data", (text: string) => {
			this.stderrTail = (this.stderrTail + text).slice(-STDERR_TAIL);
			if (inherit) process.stderr.write(text);
		});
		this.child.on("error", (error) => this.fail(`could not be started: ${error.message}`));
		this.child.on("close", (code, signal) => this.fail(signal ? `was killed by ${signal}` : `exited with status ${code}`));
		this.child.stdin.on("error", () => undefined);
		// Neither the process nor its pipes may keep pi alive: pi exits when it is done, and the sidecar then sees the
		// end of its input and shuts down in order (every answered write is already durable).
		this.child.unref();
		for (const pipe of [this.child.stdin, this.child.stdout, this.child.stderr]) (pipe as unknown as Socket).unref();
		this.watchdog = setInterval(() => this.watch(), 500);
		this.watchdog.unref();
		if (this.child.pid === undefined || this.inputFd < 0 || this.outputFd < 0) this.fail(`could not be started (${this.binary})`);
		// pi's SessionManager never reads skeletons: the sidecar then makes none (a third of a cold open's work).
		else this.initializing = this.post("initialize", { clientInfo: { name: "pi-sessiond-client/pi" }, capabilities: { skeletons: false } });
	}

	/** Waits for the answer to `initialize` if it is still owed; throws if the sidecar did not initialize. */
	private initialized(): void {
		const pending = this.initializing;
		if (pending === undefined) return;
		this.initializing = undefined;
		const init = this.wait<{ protocolVersion: string }>(pending);
		// A process that died before it answered: the call that asked is answered `sidecar_exited`, as it would be
		// had it died a moment later, and the drop-in starts another.
		if (init.error && init.error.data?.kind !== "sidecar_exited") throw new Error(init.error.message);
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
		this.later.set(id, onAnswer);
		this.keepAlive();
		this.write(JSON.stringify({ jsonrpc: "2.0", id, method, params }), id);
		if (!this.dead) this.owedLater.add(id);
	}

	/**
	 * `postLater` without waiting for `initialize`'s answer (sent before it all the same): for the calls made while
	 * pi still loads (a session opened ahead and its first pages).
	 */
	postEarly(method: string, params: object, onAnswer: (outcome: CallOutcome<unknown>) => void): void {
		const id = ++this.nextId;
		this.later.set(id, onAnswer);
		this.keepAlive();
		this.write(JSON.stringify({ jsonrpc: "2.0", id, method, params }), id);
		if (!this.dead) this.owedLater.add(id);
	}

	/**
	 * The answers still owed keep the process alive (a listing pi awaits, an append not yet known to have landed):
	 * the sidecar's output, and the process itself, whose end answers them when it dies (its output closing first
	 * would otherwise leave nothing to wait on, and a script awaiting a listing would end without an answer).
	 */
	private keepAlive(): void {
		const output = this.child.stdout as unknown as Socket;
		if (this.asyncCalls.size + this.later.size > 0) {
			output.ref();
			this.child.ref();
		} else {
			output.unref();
			this.child.unref();
		}
	}

	/** Blocks until every call posted without waiting is answered, and hands each its outcome. */
	settle(): void {
		this.settleWithin(Number.POSITIVE_INFINITY);
	}

	/**
	 * `settle`, blocking at most `ms` milliseconds; true when every call posted without waiting is answered. A
	 * short block reads the answers itself, where waiting on the event loop waits until pi's work yields to it.
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
		this.readUntil(() => {
			this.takeArrived();
			return this.later.size === 0 || !more();
		}, until);
		return this.later.size === 0;
	}

	/** Hands out the answers of calls posted without waiting that have been read, in the order they came. */
	takeArrived(): void {
		for (let next = this.arrived.shift(); next !== undefined; next = this.arrived.shift()) {
			const onAnswer = this.later.get(next.id);
			if (!onAnswer) continue;
			this.later.delete(next.id);
			this.keepAlive();
			onAnswer(this.outcomeOf(next.frames));
		}
	}

	/** Sends one synchronous request; `wait` takes its answer. */
	private post(method: string, params: object): Pending {
		const id = ++this.nextId;
		const started = trace ? performance.now() : 0;
		const line = JSON.stringify({ jsonrpc: "2.0", id, method, params });
		this.syncPending.add(id);
		this.write(line, id);
		return { id, method, line, started };
	}

	/** Blocks until the request `post` sent is answered. */
	private wait<T>({ id, line, started }: Pending): CallOutcome<T> {
		this.readUntil(() => this.syncAnswers.has(id));
		const frames = this.syncAnswers.get(id) ?? this.deadAnswer(id);
		this.syncAnswers.delete(id);
		this.syncPending.delete(id);
		const outcome = this.outcomeOf<T>(frames);
		if (trace) {
			const ms = (performance.now() - started).toFixed(1);
			const answer = JSON.stringify(outcome.error ? { error: outcome.error } : { result: outcome.result });
			trace(`${line.slice(0, 300)}\n  <- ${answer.slice(0, 300)} after ${outcome.changes.length} change(s), ${ms} ms\n`);
		}
		return outcome;
	}

	/**
	 * Reads the process's output on this thread until `done()` holds (checked after each read) or `until` (a
	 * `performance.now()`) has passed, napping while there is nothing to read. The process's end or silence ends
	 * the wait too: `fail` has answered every call by then.
	 */
	private readUntil(done: () => boolean, until = Number.POSITIVE_INFINITY): void {
		const backoff = new Backoff();
		while (!done()) {
			if (this.readAvailable()) {
				backoff.reset();
				continue;
			}
			if (this.dead) {
				done();
				return;
			}
			this.watch();
			const left = until - performance.now();
			if (left <= 0) return;
			backoff.nap(left);
		}
	}

	/** Reads and routes what the process has written, without blocking; false when there was nothing to read. */
	private readAvailable(): boolean {
		if (this.dead) return false;
		let read = false;
		for (;;) {
			let n: number;
			try {
				n = readSync(this.outputFd, this.readBuffer, 0, this.readBuffer.length, null);
			} catch (error) {
				if (wouldBlock(error)) return read;
				if ((error as NodeJS.ErrnoException).code === "EINTR") continue;
				this.fail(`could not be read from: ${(error as Error).message}`);
				return true;
			}
			if (n === 0) {
				this.ended();
				return true;
			}
			read = true;
			// The buffer is read into again: what is kept of it must be a copy.
			this.ingest(Buffer.from(this.readBuffer.subarray(0, n)));
			if (n < this.readBuffer.length) return true;
		}
	}

	/** Writes a request whole. A call sent after a quiet spell starts the silence clock from now. */
	private write(line: string, id?: number): void {
		if (this.dead) {
			if (id !== undefined) this.answerDead(id);
			return;
		}
		if (!this.waiting(id)) this.lastHeard = Date.now();
		const bytes = Buffer.from(`${line}\n`);
		let offset = 0;
		const backoff = new Backoff();
		while (offset < bytes.length) {
			try {
				offset += writeSync(this.inputFd, bytes, offset, bytes.length - offset);
				backoff.reset();
			} catch (error) {
				if (!wouldBlock(error)) {
					this.ended();
					return;
				}
				// The pipe is full: the process may be waiting for its output to be read before it reads more.
				if (!this.readAvailable()) {
					if (this.dead) return;
					backoff.nap();
				}
			}
		}
	}

	/** True while a call sent to the process is unanswered (other than `except`, the one being sent). */
	private waiting(except?: number): boolean {
		for (const id of this.syncPending) if (id !== except && !this.syncAnswers.has(id)) return true;
		for (const id of this.owedLater) if (id !== except) return true;
		for (const id of this.asyncCalls.keys()) if (id !== except) return true;
		return false;
	}

	/** Probes a process silent while calls are pending, and kills one that does not answer the probe either. */
	private watch(): void {
		if (this.dead) return clearInterval(this.watchdog);
		const now = Date.now();
		if (!this.waiting() || now - this.lastHeard < PROBE_AFTER_MS) return;
		if (this.probeSentAt === undefined) {
			this.probeSentAt = now;
			this.write(JSON.stringify({ jsonrpc: "2.0", id: this.nextProbeId++, method: "initialize", params: {} }));
		} else if (now - this.probeSentAt >= PROBE_ANSWER_MS) {
			const silent = ((now - this.lastHeard) / 1000).toFixed(0);
			this.fail(`stopped answering (nothing for ${silent} s, not even to a probe) and was killed`);
			this.child.kill("SIGKILL");
		}
	}

	/** Splits read bytes into lines and routes each; a chunk read while a line is routed waits its turn. */
	private ingest(chunk: Buffer): void {
		this.lastHeard = Date.now();
		this.probeSentAt = undefined;
		this.inbox.push(chunk);
		if (this.routing) return;
		this.routing = true;
		try {
			for (let next = this.inbox.shift(); next !== undefined; next = this.inbox.shift()) {
				let start = 0;
				for (let nl = next.indexOf(10, start); nl !== -1; nl = next.indexOf(10, start)) {
					const piece = next.subarray(start, nl);
					const line = this.partial.length > 0 ? Buffer.concat([...this.partial, piece]) : piece;
					this.partial = [];
					if (line.length > 0) this.route(line);
					start = nl + 1;
				}
				if (start < next.length) this.partial.push(next.subarray(start));
			}
		} finally {
			this.routing = false;
		}
	}

	/** Routes one line of the process's output by its first bytes (the server's member order), parsing only if odd. */
	private route(line: Buffer): void {
		const head = line.subarray(0, 96).toString("latin1");
		let id: number | undefined;
		let method: string | undefined;
		const response = RESPONSE.exec(head);
		if (response) id = Number(response[1]);
		else {
			const notification = NOTIFICATION.exec(head);
			if (notification) method = notification[1];
			else {
				try {
					const message = JSON.parse(line.toString("utf8")) as { id?: unknown; method?: unknown };
					if (typeof message.id === "number") id = message.id;
					else if (typeof message.method === "string") method = message.method;
				} catch {
					return;
				}
			}
		}
		if (id !== undefined) {
			this.answered = true;
			if (this.syncPending.has(id) && !this.syncAnswers.has(id)) {
				this.syncAnswers.set(id, [...this.changedSinceAnswer, line.toString("utf8")]);
				this.changedSinceAnswer = [];
			} else if (this.owedLater.delete(id)) {
				const text = line.toString("utf8");
				this.arrived.push({ id, frames: [...this.changedSinceAnswer, text] });
				this.scheduleTake();
				this.changedSinceAnswer = [];
			} else {
				const call = this.asyncCalls.get(id);
				if (!call) return;
				this.asyncCalls.delete(id);
				this.keepAlive();
				const parsed = JSON.parse(line.toString("utf8")) as { result?: unknown; error?: RpcError };
				if (parsed.error) call.reject(failureOf(parsed.error));
				else call.resolve(parsed.result);
			}
			return;
		}
		if (method === "session/changed") this.changedSinceAnswer.push(line.toString("utf8"));
		else if (method === "$/progress") {
			const params = (JSON.parse(line.toString("utf8")) as { params?: { token: string; value: { loaded: number; total: number } } }).params;
			const report = params ? this.progress.get(String(params.token)) : undefined;
			// Not from inside a synchronous call: pi's callback runs as its own code would, after it.
			if (params && report) queueMicrotask(() => report(params.value));
		}
	}

	/** The process's output ended (or its input broke): it is gone; says how, as far as can be told now. */
	private ended(): void {
		if (this.dead) return;
		this.fail(this.howItEnded());
	}

	/**
	 * How the process ended, read before the event loop reaps it: from Node if it has, else from the status the
	 * kernel keeps for a process not yet reaped (`/proc/PID/stat`'s exit code), waiting a little for it to exit.
	 */
	private howItEnded(): string {
		const deadline = Date.now() + 200;
		for (;;) {
			const { exitCode, signalCode } = this.child;
			if (signalCode) return `was killed by ${signalCode}`;
			if (exitCode !== null) return `exited with status ${exitCode}`;
			try {
				const stat = readFileSync(`/proc/${this.child.pid}/stat`, "latin1");
				const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
				if (fields[0] === "Z" || fields[0] === "X") {
					const status = Number(fields[49]);
					const signal = status & 0x7f;
					if (signal === 0) return `exited with status ${(status >> 8) & 0xff}`;
					const name = Object.entries(constants.signals).find(([, n]) => n === signal)?.[0];
					return `was killed by ${name ?? `signal ${signal}`}`;
				}
			} catch {
				return "ended";
			}
			if (Date.now() >= deadline) return "closed its output";
			nap(2);
		}
	}

	private deadAnswer(id: number): string[] {
		const tail = this.stderrTail.trim() ? `; its last stderr output:\n${this.stderrTail.trimEnd()}` : "";
		const message = `pi-sessiond ${this.deadBecause ?? "is gone"}${tail}`;
		return [JSON.stringify({ jsonrpc: "2.0", id, error: { code: -32099, message, data: { kind: "sidecar_exited" } } })];
	}

	/** Answers call `id` for a process that is gone. */
	private answerDead(id: number): void {
		if (this.syncPending.has(id)) this.syncAnswers.set(id, this.deadAnswer(id));
		else if (this.later.has(id)) {
			this.arrived.push({ id, frames: this.deadAnswer(id) });
			this.scheduleTake();
		} else {
			const call = this.asyncCalls.get(id);
			if (!call) return;
			this.asyncCalls.delete(id);
			call.reject(failureOf(JSON.parse(this.deadAnswer(id)[0] ?? "{}").error as RpcError));
		}
	}

	/** The process is gone: every pending call is answered with an error that says why, and so is every later one. */
	private fail(why: string): void {
		if (this.dead) return;
		this.readStderrLeft();
		this.dead = true;
		this.deadBecause = why;
		const generation = this.generation;
		// Told on the event loop, once pi's current work is done: a listener may call the next sidecar.
		setImmediate(() => {
			for (const listener of deathListeners) listener(generation);
		}).unref();
		clearInterval(this.watchdog);
		for (const id of this.syncPending) if (!this.syncAnswers.has(id)) this.syncAnswers.set(id, this.deadAnswer(id));
		const answered = new Set(this.arrived.map((a) => a.id));
		for (const id of this.later.keys()) if (!answered.has(id)) this.arrived.push({ id, frames: this.deadAnswer(id) });
		this.owedLater.clear();
		for (const id of [...this.asyncCalls.keys()]) this.answerDead(id);
		this.keepAlive();
		this.scheduleTake();
	}

	/** Hands out the answers read so far once pi's current work is done, as the event loop would have. */
	private scheduleTake(): void {
		if (this.takeScheduled) return;
		this.takeScheduled = true;
		queueMicrotask(() => {
			this.takeScheduled = false;
			this.takeArrived();
		});
	}

	/** What the process wrote to stderr and the event loop has not read yet (it is dead: a read does not block). */
	private readStderrLeft(): void {
		const fd = (this.child.stderr as unknown as { _handle?: { fd?: number } })._handle?.fd ?? -1;
		if (fd < 0) return;
		try {
			for (;;) {
				const n = readSync(fd, this.readBuffer, 0, 65536, null);
				if (n === 0) return;
				const text = this.readBuffer.toString("utf8", 0, n);
				this.stderrTail = (this.stderrTail + text).slice(-STDERR_TAIL);
				if (process.env.PI_SESSIOND_STDERR === "inherit") process.stderr.write(text);
			}
		} catch {
			// Nothing more to read now.
		}
	}

	/** An answer's frames (the `session/changed` lines before it, then the response) as its outcome. */
	private outcomeOf<T>(frames: string[]): CallOutcome<T> {
		const parsed = frames.map((f) => JSON.parse(f)) as { result?: T; error?: RpcError; params?: Changed }[];
		const answer = parsed.pop() ?? {};
		if (answer.error?.data?.kind === "sidecar_exited") this.dead = true;
		const changes = parsed.map((f) => f.params as Changed);
		return answer.error ? { error: answer.error, changes } : { result: answer.result as T, changes };
	}

	/** Lets go of the pipes of a bridge whose sidecar is gone (its pending calls were answered when it died). */
	/**
	 * At this process's exit: a sidecar someone stopped (SIGSTOP) while it sat idle, which the watchdog only notices
	 * while a call waits, is let go on, so it reads the end of its input and shuts down in order instead of staying
	 * stopped for ever, holding the session's lock against every later pi.
	 */
	releaseAtExit(): void {
		if (this.dead || this.child.pid === undefined) return;
		try {
			process.kill(this.child.pid, "SIGCONT");
		} catch {
			// Already gone.
		}
	}

	dispose(): void {
		clearInterval(this.watchdog);
		this.child.stdin.destroy();
		this.child.stdout.destroy();
		this.child.stderr.destroy();
	}

	/** Sends a request without waiting for (or reading) its answer. */
	send(method: string, params: object): void {
		this.initialized();
		this.write(JSON.stringify({ jsonrpc: "2.0", id: ++this.nextId, method, params }));
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
			this.write(line, id);
		});
	}
}

/** An error answer of `request` as thrown: its message, and its `data.kind` (`sidecar_exited`, …) as `kind`. */
export type RequestFailure = Error & { kind?: string };

function failureOf(error: RpcError): RequestFailure {
	return Object.assign(new Error(error.message), { kind: error.data?.kind });
}

let shared: SyncBridge | undefined;
/** When the sidecars that died without answering anything since `RESTART_WINDOW_MS` ago were started, oldest first. */
const restarts: number[] = [];
/** A sidecar that dies before it answers, more often than this, is not started again: its error is the answer. */
const MAX_RESTARTS = 5;
const RESTART_WINDOW_MS = 60_000;

/** Who is told when a sidecar dies (`onSidecarDeath`). */
const deathListeners: ((generation: number) => void)[] = [];

/** Calls `listener` with a sidecar's generation once it is found dead, on the event loop. */
export function onSidecarDeath(listener: (generation: number) => void): void {
	deathListeners.push(listener);
}

/**
 * The process's one bridge, started on first use, and started again (a new sidecar) once the last one's process
 * died (`kill -9`, a crash): the drop-in reopens its sessions on the new one (`generation` tells it which handles
 * are gone). A sidecar that answered is always replaced: each replacement is asked for by a call (or by the
 * drop-in taking its session's lock back, at most five times a minute), so even one that crashes at every write
 * costs a restart per write pi makes, not a loop; one that dies before answering
 * anything (a binary that cannot start) is replaced at most `MAX_RESTARTS` times a minute. (Counting every death
 * left a pi whose sidecar was killed six times in a minute, each after serving a prompt, without one: its
 * prompts were refused until the minute was over.)
 */
export function bridge(): SyncBridge {
	if (shared?.dead) {
		const now = Date.now();
		while (restarts.length > 0 && (restarts[0] ?? 0) < now - RESTART_WINDOW_MS) restarts.shift();
		if (shared.answered || restarts.length < MAX_RESTARTS) {
			if (!shared.answered) restarts.push(now);
			shared.dispose();
			shared = new SyncBridge(shared.generation + 1);
		}
	}
	if (shared === undefined) {
		shared = new SyncBridge(1);
		process.once("exit", () => shared?.releaseAtExit());
	}
	return shared;
}

/**
 * Starts the process's bridge now, before the first session call needs it, so the sidecar starts
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
