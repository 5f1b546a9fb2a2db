/**
 * LF-delimited JSON framing for vscode-jsonrpc: one JSON text per line, as pi-sessiond speaks by default.
 *
 * vscode-jsonrpc only ships LSP `Content-Length` framing, so these are the two ends of the other one. Lines are split
 * on the byte 0x0A and nothing else: JSON escapes every control character inside strings, so a raw 0x0A can only
 * end a frame, while U+2028/U+2029 (which Node's `readline` treats as line ends) may legally appear raw inside a
 * string. Splitting bytes before decoding also means a multi-byte UTF-8 sequence cut across two chunks is never
 * decoded half-way.
 */

import type { Readable, Writable } from "node:stream";
import { AbstractMessageReader, AbstractMessageWriter } from "vscode-jsonrpc/node";
import type { DataCallback, Disposable, Message, MessageReader, MessageWriter } from "vscode-jsonrpc/node";

const LF = 0x0a;
const CR = 0x0d;

/**
 * Reads LF-delimited JSON-RPC messages from a byte stream (the sidecar's stdout).
 *
 * A trailing `\r` is stripped (the server accepts `\r\n` from hosts, so a peer may send it too), blank lines are
 * skipped, and a line that is not JSON raises `onError` without stopping the stream: one bad frame must not lose the
 * responses behind it.
 */
export class LineMessageReader extends AbstractMessageReader implements MessageReader {
	private readonly readable: Readable;
	// Chunks of the line being assembled. Kept as a list and concatenated once per line, so a 40 MB frame that arrives
	// in 64 KiB chunks costs one copy instead of a quadratic series of them.
	private pending: Buffer[] = [];
	private pendingBytes = 0;
	private callback: DataCallback | undefined;
	private ended = false;

	/** @param readable A byte stream; it must not have an encoding set (`setEncoding` would hand over strings). */
	constructor(readable: Readable) {
		super();
		this.readable = readable;
	}

	/** Starts delivering messages to `callback`. Call at most once. */
	listen(callback: DataCallback): Disposable {
		if (this.callback) throw new Error("LineMessageReader.listen may be called only once");
		this.callback = callback;
		const onData = (chunk: Buffer | string) => this.onData(typeof chunk === "string" ? Buffer.from(chunk, "utf8") : chunk);
		const onEnd = () => this.onEnd();
		const onError = (error: Error) => this.fireError(error);
		this.readable.on("data", onData);
		this.readable.on("end", onEnd);
		this.readable.on("close", onEnd);
		this.readable.on("error", onError);
		return {
			dispose: () => {
				this.readable.off("data", onData);
				this.readable.off("end", onEnd);
				this.readable.off("close", onEnd);
				this.readable.off("error", onError);
				this.callback = undefined;
			},
		};
	}

	private onData(chunk: Buffer): void {
		let start = 0;
		for (;;) {
			const lf = chunk.indexOf(LF, start);
			if (lf === -1) break;
			let line: Buffer;
			if (this.pending.length === 0) {
				line = chunk.subarray(start, lf);
			} else {
				this.pending.push(chunk.subarray(start, lf));
				line = Buffer.concat(this.pending, this.pendingBytes + (lf - start));
				this.pending = [];
				this.pendingBytes = 0;
			}
			start = lf + 1;
			this.deliver(line);
		}
		if (start < chunk.length) {
			// Keep a copy-free view of the rest; the stream does not reuse the chunk's memory.
			this.pending.push(chunk.subarray(start));
			this.pendingBytes += chunk.length - start;
		}
	}

	private deliver(raw: Buffer): void {
		const line = raw.length > 0 && raw[raw.length - 1] === CR ? raw.subarray(0, raw.length - 1) : raw;
		if (isBlank(line)) return;
		let message: unknown;
		try {
			message = JSON.parse(line.toString("utf8"));
		} catch (error) {
			this.fireError(new Error(`pi-sessiond sent a line that is not JSON (${line.length} bytes): ${String(error)}`));
			return;
		}
		if (message === null || typeof message !== "object") {
			this.fireError(new Error(`pi-sessiond sent a JSON value that is not a message: ${preview(line)}`));
			return;
		}
		this.callback?.(message as Message);
	}

	private onEnd(): void {
		if (this.ended) return;
		this.ended = true;
		if (this.pendingBytes > 0) {
			// The peer ended in the middle of a line: that frame is lost, say so rather than dropping it silently.
			this.fireError(new Error(`pi-sessiond's output ended inside a frame (${this.pendingBytes} bytes without a newline)`));
			this.pending = [];
			this.pendingBytes = 0;
		}
		this.fireClose();
	}
}

function isBlank(line: Buffer): boolean {
	for (const byte of line) {
		if (byte !== 0x20 && byte !== 0x09 && byte !== CR) return false;
	}
	return true;
}

function preview(line: Buffer): string {
	const text = line.subarray(0, 200).toString("utf8");
	return line.length > 200 ? `${text}…` : text;
}

/**
 * Writes JSON-RPC messages as LF-delimited JSON (the sidecar's stdin).
 *
 * `JSON.stringify` escapes every control character and, since ES2019, every lone surrogate, so the encoded text
 * never contains a raw 0x0A and is always valid UTF-8: a lone surrogate travels as `\udXXX` and arrives intact.
 * Writes are queued by the stream in call order, which is the order the protocol applies mutations in.
 */
export class LineMessageWriter extends AbstractMessageWriter implements MessageWriter {
	private readonly writable: Writable;
	private errorCount = 0;

	/** @param writable A byte stream (the child's stdin). */
	constructor(writable: Writable) {
		super();
		this.writable = writable;
		this.writable.on("error", (error: Error) => this.fireError(error));
		this.writable.on("close", () => this.fireClose());
	}

	/** Encodes `msg` as one line and resolves once the stream has accepted it. */
	write(msg: Message): Promise<void> {
		const bytes = Buffer.from(`${JSON.stringify(msg)}\n`, "utf8");
		return new Promise<void>((resolve, reject) => {
			if (this.writable.destroyed || this.writable.writableEnded) {
				const error = new Error("pi-sessiond's stdin is closed");
				this.fireError(error, msg, ++this.errorCount);
				reject(error);
				return;
			}
			// Settle when the stream has flushed the bytes (or failed to): vscode-jsonrpc turns a rejected write into a
			// rejected request, so a call made after the child died fails instead of waiting forever.
			this.writable.write(bytes, (error) => {
				if (error) {
					this.fireError(error, msg, ++this.errorCount);
					reject(error);
				} else {
					this.errorCount = 0;
					resolve();
				}
			});
		});
	}

	/** Ends the stream: the sidecar reads end of input as an orderly shutdown. */
	end(): void {
		if (!this.writable.writableEnded) this.writable.end();
	}
}
