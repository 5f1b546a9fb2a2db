/** The errors a client call can fail with. */

import type { ErrorKind } from "./protocol.js";

/**
 * A JSON-RPC error response from pi-sessiond.
 *
 * `kind` is the error's `data.kind` (`entry_not_found`, `content_modified`, `session_locked`, …): match on it rather
 * than on `message`, which for session faults is pi's own wording. `data` is the whole `data` member, where the
 * server puts what the fault names (`data.path`; `data.leafId`, the leaf now, for `content_modified`; `data.pid`
 * for `session_locked`).
 */
export class SessiondError extends Error {
	/** The JSON-RPC error code (`-32602`, `1002`, …); see `ERROR_CODES`. */
	readonly code: number;
	/**
	 * `data.kind`. Typed to the kinds methods.json lists (`ERROR_CODES`), plus any string, because a newer server may
	 * send kinds this client's copy of the contract does not list yet.
	 */
	readonly kind: ErrorKind | (string & {});
	/** The error's `data` member, as sent (an empty object when the server sent none). */
	readonly data: Record<string, unknown>;
	/** The method of the failed request. */
	readonly method: string;

	/** Builds the error from a JSON-RPC error object received for a call to `method`. */
	constructor(method: string, code: number, message: string, data: unknown) {
		super(`${method}: ${message}`);
		this.name = "SessiondError";
		this.code = code;
		this.method = method;
		this.data = data !== null && typeof data === "object" && !Array.isArray(data) ? (data as Record<string, unknown>) : {};
		const kind = this.data.kind;
		// Every error pi-sessiond sends has data.kind; a missing one is reported as the code's generic kind rather than
		// left undefined, so `switch (e.kind)` stays total.
		this.kind = typeof kind === "string" ? kind : `code_${code}`;
	}
}

/**
 * The sidecar process is gone: it exited or was killed while calls were pending, or a call was made after it ended.
 * `stderr` holds the last lines it wrote, which usually say why.
 */
export class SessiondExitedError extends Error {
	/** The process's exit status, or null when a signal ended it. */
	readonly exitCode: number | null;
	/** The signal that ended the process, or null. */
	readonly signal: NodeJS.Signals | null;
	/** The last lines the process wrote to stderr (at most about 8 KiB). */
	readonly stderr: string;
	/** True when the process ended because `close()` was called. */
	readonly expected: boolean;

	/** @internal Built by the client when its process ends. */
	constructor(what: string, exitCode: number | null, signal: NodeJS.Signals | null, stderr: string, expected: boolean) {
		const status = signal ? `killed by ${signal}` : `exited with status ${exitCode}`;
		const tail = stderr.trim() ? `; its last stderr output:\n${stderr.trimEnd()}` : "";
		super(`${what}: pi-sessiond ${expected ? "was closed" : "died"} (${status})${tail}`);
		this.name = "SessiondExitedError";
		this.exitCode = exitCode;
		this.signal = signal;
		this.stderr = stderr;
		this.expected = expected;
	}
}

/** The pi-sessiond binary could not be found or started. The message says where the client looked. */
export class SessiondBinaryNotFoundError extends Error {
	/** The binary the client tried (a path, or a bare name looked up on PATH). */
	readonly binary: string;

	/** @internal */
	constructor(binary: string, message: string) {
		super(message);
		this.name = "SessiondBinaryNotFoundError";
		this.binary = binary;
	}
}
