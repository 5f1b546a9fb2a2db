/** Strings that break naive clients: U+2028/U+2029, lone surrogates, and a message over 10 MB. */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import type { SessionChanged, SessiondClient } from "../src/index.js";
import { spawnTestClient, tempDir, userMessage, writePiSession } from "./helpers.js";

let client: SessiondClient;

before(async () => {
	({ client } = await spawnTestClient());
});

after(async () => {
	await client.close();
});

function contentOf(entry: unknown): unknown {
	const message = (entry as { message?: { content?: unknown } } | null)?.message;
	return message?.content;
}

describe("strings", () => {
	it("round-trips U+2028, U+2029 and lone surrogates, and stores them as pi does", async () => {
		const file = writePiSession(tempDir());
		const session = await client.openSession(file);
		const events: SessionChanged[] = [];
		session.on("changed", (n) => events.push(n));
		// A lone high surrogate is what pi writes when a model's output is cut inside an emoji; a lone low one too.
		const text = "line\u2028separator\u2029paragraph, cut emoji \ud83d, stray \udc00, whole 😀, nul \u0000, new\nline";
		const id = await session.appendMessage(userMessage(text));

		assert.equal(contentOf(await session.getEntry(id)), text);
		const appended = events[0]!.change;
		assert.ok(appended.kind === "append");
		assert.equal(contentOf(appended.entries[0]!), text, "the notification carries the same string");
		const context = await session.buildSessionContext();
		const last = context.messages.at(-1)!;
		assert.equal(last.role === "user" && last.content, text);

		// In the file: one line, the lone surrogates as \u escapes (JSON.stringify's output, which is what pi writes).
		const lastLine = readFileSync(file, "utf8").trimEnd().split("\n").at(-1)!;
		assert.ok(lastLine.includes("\\ud83d") && lastLine.includes("\\udc00"));
		assert.equal(contentOf(JSON.parse(lastLine)), text);
		await session.close();
	});

	it("round-trips a message of more than 10 MB", async () => {
		const session = await client.openSession(writePiSession(tempDir()));
		// Non-ASCII throughout, so multi-byte characters straddle the pipe's chunk boundaries in both directions.
		const unit = "0123456789abcdef — ünïcödé ✓ 😀 \u2028|";
		const text = unit.repeat(Math.ceil((11 * 1024 * 1024) / Buffer.byteLength(unit)));
		assert.ok(Buffer.byteLength(text) > 10 * 1024 * 1024);
		const id = await session.appendMessage(userMessage(text));
		const entry = await session.getEntry(id);
		assert.equal((contentOf(entry) as string).length, text.length);
		assert.ok(contentOf(entry) === text, "the 11 MB string came back identical");
		const tree = await session.getTree();
		assert.ok(Buffer.byteLength(JSON.stringify(tree)) > 10 * 1024 * 1024, "the tree holds it whole");
		await session.close();
	});
});
