/**
 * The worker thread behind `SyncBridge`: it owns the pi-sessiond process and its pipes, so the main thread can
 * block in `Atomics.wait` while a request is answered. It does not parse JSON: it splits the server's output into
 * lines, routes each by its first bytes (the server writes `{"jsonrpc":"2.0","id":N,…` and
 * `{"jsonrpc":"2.0","method":…`), and hands lines to the main thread, large ones as transferred bytes.
 *
 * For a synchronous call every `session/changed` line received since the previous answer travels with the answer,
 * in order, so the main thread applies a mutation's notifications before it returns the mutation's value. A call
 * posted without waiting (`later`: an append the drop-in has already answered pi for) is answered the same way on
 * the asynchronous port, and counted in slot 1 of the shared flag, so a main thread that must have every such
 * answer before it goes on can wait for them. Such a call may carry calls to send once it is answered (`then`: the
 * pages of a session opened ahead of pi), with the handle its answer names put in: the one place the worker reads
 * an answer, so that reads that need an open go out while the main thread is still busy loading pi.
 *
 * A sidecar that stops answering without exiting (stopped, deadlocked) would leave pi blocked at its next call
 * for good. So while calls are pending and nothing has come from the process for `PROBE_AFTER_MS`, the worker asks
 * it something every live server answers at once (`initialize`, answered off its event loop whatever a handle is
 * doing); when nothing at all comes within `PROBE_ANSWER_MS` after that, the process is killed and handled as one
 * that died: its calls are answered with `sidecar_exited`, and the drop-in starts another and mends.
 */

import { spawn } from "node:child_process";
import { type MessagePort, workerData } from "node:worker_threads";

/** What the main thread gives the worker. */
export interface BridgeWorkerData {
	binary: string;
	args: string[];
	cwd: string;
	env: NodeJS.ProcessEnv;
	/** Int32Array slot 0: 0 waiting, 1 answered, 2 the worker itself failed; slot 1: later calls answered so far. */
	signal: SharedArrayBuffer;
	syncPort: MessagePort;
	asyncPort: MessagePort;
	/** "inherit" copies the server's stderr to this process's; otherwise it is only kept for error messages. */
	stderr: "inherit" | "keep";
	/** The JSON text a call sent after another (`then`) holds where the other's handle goes. */
	handleSlot: string;
}

/** A call the main thread posted to be sent once the call before it is answered with a handle. */
interface Follower {
	id: number;
	line: string;
}

/** A line for the main thread: text when small, bytes (transferred) when large. */
export type Frame = string | ArrayBuffer;

const data = workerData as BridgeWorkerData;
const flag = new Int32Array(data.signal);
const TRANSFER_ABOVE = 64 * 1024;
const STDERR_TAIL = 8192;

let pendingSync: number | undefined;
const pendingLater = new Set<number>();
let changedSinceAnswer: Frame[] = [];
/** Calls to send once the call of the key (posted without waiting) is answered, with the handle it names. */
const followers = new Map<number, Follower[]>();
const pendingAsync = new Set<number>();
let stderrTail = "";
let dead: string | undefined;

/** Nothing heard for this long while calls are pending: the process is probed. */
const PROBE_AFTER_MS = 2_000;
/** Nothing heard for this long after the probe: the process is taken for hung and killed. */
const PROBE_ANSWER_MS = 5_000;
/** Probes' ids, far above the main thread's, which count from 1. */
let nextProbeId = 2 ** 40;
/** When the process last wrote anything, or when a call was sent while none was pending: the silence clock. */
let lastHeard = Date.now();
let probeSentAt: number | undefined;

/** True while a call sent to the process is unanswered. */
function waiting(): boolean {
	return pendingSync !== undefined || pendingLater.size > 0 || pendingAsync.size > 0;
}

/** Writes a request. A call sent after a quiet spell starts the silence clock from now, not from the last output. */
function send(line: string): void {
	if (!waiting()) lastHeard = Date.now();
	child.stdin.write(`${line}\n`);
}

const child = spawn(data.binary, data.args, { cwd: data.cwd, env: data.env, stdio: ["pipe", "pipe", "pipe"], windowsHide: true });

function wake(state: 1 | 2): void {
	Atomics.store(flag, 0, state);
	Atomics.notify(flag, 0);
}

/** Hands the answer of a call posted without waiting to the main thread, and counts it. */
function answerLater(id: number, frames: Frame[]): void {
	post(data.asyncPort, { id, later: true, frames });
	Atomics.add(flag, 1, 1);
	Atomics.notify(flag, 1);
}

function frameOf(line: Buffer): Frame {
	if (line.length <= TRANSFER_ABOVE) return line.toString("utf8");
	const bytes = new ArrayBuffer(line.length);
	new Uint8Array(bytes).set(line);
	return bytes;
}

function post(port: MessagePort, message: { frames: Frame[]; [k: string]: unknown }): void {
	const transfer = message.frames.filter((f): f is ArrayBuffer => typeof f !== "string");
	port.postMessage(message, transfer);
}

function deadAnswer(id: number): Frame[] {
	const tail = stderrTail.trim() ? `; its last stderr output:\n${stderrTail.trimEnd()}` : "";
	const message = `pi-sessiond ${dead}${tail}`;
	return [JSON.stringify({ jsonrpc: "2.0", id, error: { code: -32099, message, data: { kind: "sidecar_exited" } } })];
}

/** The process is gone: every pending call is answered with an error that says why, and so is every later one. */
function fail(why: string): void {
	if (dead) return;
	dead = why;
	if (pendingSync !== undefined) {
		const id = pendingSync;
		pendingSync = undefined;
		post(data.syncPort, { id, frames: deadAnswer(id) });
		wake(1);
	}
	for (const id of pendingLater) answerLater(id, deadAnswer(id));
	pendingLater.clear();
	for (const follow of followers.values()) for (const { id } of follow) answerLater(id, deadAnswer(id));
	followers.clear();
	for (const id of pendingAsync) post(data.asyncPort, { id, frames: deadAnswer(id) });
	pendingAsync.clear();
}

const RESPONSE = /^\{"jsonrpc":"2\.0","id":(\d+),/;
const NOTIFICATION = /^\{"jsonrpc":"2\.0","method":"([^"]+)"/;

function route(line: Buffer): void {
	const head = line.subarray(0, 96).toString("latin1");
	let id: number | undefined;
	let method: string | undefined;
	const response = RESPONSE.exec(head);
	if (response) id = Number(response[1]);
	else {
		const notification = NOTIFICATION.exec(head);
		if (notification) method = notification[1];
		else {
			// Not the server's usual member order: fall back to parsing.
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
		if (id === pendingSync) {
			pendingSync = undefined;
			const frames = [...changedSinceAnswer, frameOf(line)];
			changedSinceAnswer = [];
			post(data.syncPort, { id, frames });
			wake(1);
		} else if (pendingLater.delete(id)) {
			const frames = [...changedSinceAnswer, frameOf(line)];
			changedSinceAnswer = [];
			answerLater(id, frames);
			const follow = followers.get(id);
			if (follow) {
				followers.delete(id);
				sendFollowers(line, follow);
			}
		} else if (pendingAsync.delete(id)) {
			post(data.asyncPort, { id, frames: [frameOf(line)] });
		}
		return;
	}
	if (method === "session/changed") changedSinceAnswer.push(frameOf(line));
	else if (method === "$/progress") post(data.asyncPort, { progress: true, frames: [frameOf(line)] });
}

/** Sends `follow` with the handle the answer `line` names, or answers each `not_sent` when it names none. */
function sendFollowers(line: Buffer, follow: Follower[]): void {
	let handle: unknown;
	try {
		handle = (JSON.parse(line.toString("utf8")) as { result?: { handle?: unknown } }).result?.handle;
	} catch {
		handle = undefined;
	}
	for (const { id, line: request } of follow) {
		if (typeof handle === "string") {
			send(request.replace(data.handleSlot, () => JSON.stringify(handle)));
			pendingLater.add(id);
		} else {
			const error = { code: -32099, message: "not sent: the call it needed a handle from did not give one", data: { kind: "not_sent" } };
			answerLater(id, [JSON.stringify({ jsonrpc: "2.0", id, error })]);
		}
	}
}

let partial: Buffer[] = [];
child.stdout.on("data", (chunk: Buffer) => {
	lastHeard = Date.now();
	probeSentAt = undefined;
	let start = 0;
	for (let nl = chunk.indexOf(10, start); nl !== -1; nl = chunk.indexOf(10, start)) {
		const piece = chunk.subarray(start, nl);
		const line = partial.length > 0 ? Buffer.concat([...partial, piece]) : piece;
		partial = [];
		if (line.length > 0) route(line);
		start = nl + 1;
	}
	if (start < chunk.length) partial.push(chunk.subarray(start));
});
child.stderr.setEncoding("utf8");
child.stderr.on("data", (text: string) => {
	stderrTail = (stderrTail + text).slice(-STDERR_TAIL);
	if (data.stderr === "inherit") process.stderr.write(text);
});
child.on("error", (error) => fail(`could not be started: ${error.message}`));
child.on("close", (code, signal) => fail(signal ? `was killed by ${signal}` : `exited with status ${code}`));
child.stdin.on("error", () => undefined);

data.syncPort.on("message", (message: { id: number; line: string; later?: boolean; then?: Follower[] }) => {
	if (message.later) {
		if (dead) {
			answerLater(message.id, deadAnswer(message.id));
			for (const { id } of message.then ?? []) answerLater(id, deadAnswer(id));
		} else {
			send(message.line);
			pendingLater.add(message.id);
			if (message.then?.length) followers.set(message.id, message.then);
		}
		return;
	}
	if (dead) {
		post(data.syncPort, { id: message.id, frames: deadAnswer(message.id) });
		wake(1);
		return;
	}
	send(message.line);
	pendingSync = message.id;
});
data.asyncPort.on("message", (message: { id?: number; line: string }) => {
	if (dead) {
		if (message.id !== undefined) post(data.asyncPort, { id: message.id, frames: deadAnswer(message.id) });
		return;
	}
	send(message.line);
	if (message.id !== undefined) pendingAsync.add(message.id);
});

const watchdog = setInterval(() => {
	if (dead) return clearInterval(watchdog);
	const now = Date.now();
	if (!waiting() || now - lastHeard < PROBE_AFTER_MS) return;
	if (probeSentAt === undefined) {
		probeSentAt = now;
		child.stdin.write(`${JSON.stringify({ jsonrpc: "2.0", id: nextProbeId++, method: "initialize", params: {} })}\n`);
	} else if (now - probeSentAt >= PROBE_ANSWER_MS) {
		const silent = ((now - lastHeard) / 1000).toFixed(0);
		fail(`stopped answering (nothing for ${silent} s, not even to a probe) and was killed`);
		child.kill("SIGKILL");
	}
}, 500);
watchdog.unref();

// A bug here must not leave the main thread waiting forever.
process.on("uncaughtException", (error) => {
	fail(`bridge failed: ${error.message}`);
	wake(2);
});
