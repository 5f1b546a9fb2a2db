/** The LF-JSON reader and writer on their own, over in-memory streams. */

import assert from "node:assert/strict";
import { PassThrough } from "node:stream";
import { describe, it } from "node:test";
import type { Message } from "vscode-jsonrpc/node";
import { LineMessageReader, LineMessageWriter } from "../src/index.js";

function collect(reader: LineMessageReader) {
	const messages: Message[] = [];
	const errors: Error[] = [];
	let closed = false;
	reader.onError((e) => errors.push(e));
	reader.onClose(() => {
		closed = true;
	});
	reader.listen((m) => messages.push(m));
	return { messages, errors, isClosed: () => closed };
}

const tick = () => new Promise((r) => setImmediate(r));

describe("LineMessageReader", () => {
	it("splits on LF only, so U+2028 and U+2029 stay inside a message", async () => {
		const stream = new PassThrough();
		const got = collect(new LineMessageReader(stream));
		// Raw U+2028/U+2029 are legal inside JSON strings; readline would cut the line at them.
		stream.write(Buffer.from('{"jsonrpc":"2.0","method":"a","params":{"t":"x\u2028y\u2029z"}}\n', "utf8"));
		await tick();
		assert.equal(got.messages.length, 1);
		assert.deepEqual(got.messages[0], { jsonrpc: "2.0", method: "a", params: { t: "x\u2028y\u2029z" } });
		assert.deepEqual(got.errors, []);
	});

	it("reassembles messages cut anywhere, even inside a multi-byte character, and reads several per chunk", async () => {
		const stream = new PassThrough();
		const got = collect(new LineMessageReader(stream));
		const text = '{"id":1,"result":"é😀\u2028"}\r\n{"id":2,"result":null}\n\n  \n{"id":3,"result":[]}\n';
		const bytes = Buffer.from(text, "utf8");
		// One byte at a time: every boundary, including the middles of é (2 bytes) and 😀 (4 bytes), is a chunk edge.
		for (let i = 0; i < bytes.length; i++) stream.write(bytes.subarray(i, i + 1));
		await tick();
		assert.deepEqual(got.messages, [
			{ id: 1, result: "é😀\u2028" },
			{ id: 2, result: null },
			{ id: 3, result: [] },
		]);
		// And the whole text as one chunk gives the same messages.
		const stream2 = new PassThrough();
		const got2 = collect(new LineMessageReader(stream2));
		stream2.write(bytes);
		await tick();
		assert.deepEqual(got2.messages, got.messages);
	});

	it("reports a line that is not JSON and keeps reading the lines after it", async () => {
		const stream = new PassThrough();
		const got = collect(new LineMessageReader(stream));
		stream.write('{"id":1,"result":1}\nnot json\n42\n{"id":2,"result":2}\n');
		await tick();
		assert.deepEqual(got.messages, [{ id: 1, result: 1 }, { id: 2, result: 2 }]);
		assert.equal(got.errors.length, 2);
		assert.match(got.errors[0]!.message, /not JSON/);
		assert.match(got.errors[1]!.message, /not a message/);
	});

	it("reports output that ends inside a frame, then closes", async () => {
		const stream = new PassThrough();
		const got = collect(new LineMessageReader(stream));
		stream.end('{"id":1,"result":1}\n{"id":2,"res');
		await new Promise((r) => stream.on("end", r));
		await tick();
		assert.deepEqual(got.messages, [{ id: 1, result: 1 }]);
		assert.equal(got.errors.length, 1);
		assert.match(got.errors[0]!.message, /ended inside a frame \(12 bytes/);
		assert.ok(got.isClosed());
	});
});

describe("LineMessageWriter", () => {
	it("writes one line per message, escaping lone surrogates and never writing a raw LF inside one", async () => {
		const stream = new PassThrough();
		const writer = new LineMessageWriter(stream);
		const chunks: Buffer[] = [];
		stream.on("data", (c: Buffer) => chunks.push(c));
		await writer.write({ jsonrpc: "2.0", method: "m", params: { t: "a\nb\u2028c\ud83d" } } as Message);
		await writer.write({ jsonrpc: "2.0", method: "n" } as Message);
		const out = Buffer.concat(chunks).toString("utf8");
		const lines = out.split("\n");
		assert.equal(lines.length, 3, "two messages, each ending in LF");
		assert.equal(lines[2], "");
		assert.ok(lines[0]!.includes("\\ud83d"), "a lone surrogate is written as an escape, so the bytes are valid UTF-8");
		assert.deepEqual(JSON.parse(lines[0]!).params, { t: "a\nb\u2028c\ud83d" });
	});

	it("rejects a write after the stream ended", async () => {
		const stream = new PassThrough();
		const writer = new LineMessageWriter(stream);
		writer.end();
		await assert.rejects(writer.write({ jsonrpc: "2.0", method: "m" } as Message), /stdin is closed/);
	});
});
