// Writes one session for bench/run's pi-big rows with pi 1.6.0's own SessionManager (so the file is exactly what
// pi writes), shaped like a long real session: turns of a user message, an assistant tool call, its tool result
// and a reply; a label every 37 turns; an abandoned branch left with a summary every 50 turns; a compaction every
// 100 turns keeping the last 5 turns, and one at the end keeping only the last turn, so the context pi rebuilds is
// a few MB however large the file is. Run under tests/pi's Node 22 (pi needs it).
//
//   node bench/gen-pi-big.mjs FILE --bytes N [--image-kib K]
//        K > 0: a base64 image of K KiB in every user message and every tool result (the same one: the file is
//        large, the generator's memory is not). Prints {entries, bytes, turns} as JSON.
import { statSync } from "node:fs";
import { basename, dirname } from "node:path";

const [file, ...rest] = process.argv.slice(2);
const opt = (name, fallback) => {
	const i = rest.indexOf(name);
	return i < 0 ? fallback : Number(rest[i + 1]);
};
const targetBytes = opt("--bytes", 2_000_000);
const imageKiB = opt("--image-kib", 0);
const pi = new URL("../tests/pi/node_modules/@earendil-works/pi-coding-agent/dist/core/session-manager.js", import.meta.url);
const { SessionManager } = await import(pi.href);

// Deterministic filler: a small linear congruential generator, so two runs write files of the same shape.
let seed = 20;
const random = () => {
	seed = (seed * 1103515245 + 12345) % 2147483648;
	return seed / 2147483648;
};
const words = "the session file holds every entry pi wrote and the tree they form with ids and parents".split(" ");
const text = (bytes) => {
	let s = "";
	while (s.length < bytes) s += `${words[Math.floor(random() * words.length)]} `;
	return s.slice(0, bytes);
};
const image = imageKiB > 0 ? Buffer.from(Array.from({ length: Math.floor((imageKiB * 1024 * 3) / 4) }, () => Math.floor(random() * 256))).toString("base64") : undefined;
const imageBlock = image ? [{ type: "image", data: image, mimeType: "image/png" }] : [];
const usage = (n) => ({
	input: 1000 + n,
	output: 200,
	cacheRead: 500,
	cacheWrite: 0,
	totalTokens: 1700 + n,
	cost: { input: 0.003, output: 0.003, cacheRead: 0.0002, cacheWrite: 0, total: 0.0062 },
});
const assistant = (content, n, stopReason) => ({
	role: "assistant",
	content,
	api: "faux",
	provider: "faux",
	model: "faux-1",
	usage: usage(n),
	stopReason,
	timestamp: Date.now(),
});

const manager = SessionManager.create("/tmp/pi-big-project", dirname(file));
const written = manager.getSessionFile();
const userIds = [];
let turn = 0;
const size = () => {
	try {
		return statSync(written).size;
	} catch {
		return 0;
	}
};
const turnOf = (t) => {
	const userId = manager.appendMessage({ role: "user", content: [{ type: "text", text: `turn ${t}: ${text(400)}` }, ...imageBlock], timestamp: Date.now() });
	userIds.push(userId);
	const callId = `call-${t}`;
	manager.appendMessage(assistant([{ type: "toolCall", id: callId, name: "read", arguments: { path: `src/file-${t}.ts` } }], t, "toolUse"));
	manager.appendMessage({
		role: "toolResult",
		toolCallId: callId,
		toolName: "read",
		content: [{ type: "text", text: text(imageKiB > 0 ? 800 : 6000) }, ...imageBlock],
		isError: false,
		timestamp: Date.now(),
	});
	manager.appendMessage(assistant([{ type: "text", text: text(1500) }], t, "stop"));
	return userId;
};
while (size() < targetBytes) {
	turn++;
	const userId = turnOf(turn);
	if (turn % 37 === 0) manager.appendLabelChange(userId, `checkpoint ${turn}`);
	if (turn % 50 === 0) {
		const leaf = manager.getLeafId();
		manager.appendMessage({ role: "user", content: [{ type: "text", text: `abandoned ${turn}: ${text(300)}` }], timestamp: Date.now() });
		manager.appendMessage(assistant([{ type: "text", text: text(600) }], turn, "stop"));
		manager.branchWithSummary(leaf, `The branch tried at turn ${turn} was left: ${text(300)}`);
	}
	if (turn % 100 === 0) manager.appendCompaction(`## Summary up to turn ${turn}\n${text(2000)}`, userIds[userIds.length - 5], 150_000 + turn);
}
manager.appendCompaction(`## Summary up to turn ${turn}\n${text(2000)}`, userIds[userIds.length - 1], 150_000 + turn);
// pi names the file after its id; the bench wants the name it asked for.
const { renameSync } = await import("node:fs");
renameSync(written, file);
process.stdout.write(`${JSON.stringify({ file: basename(file), entries: manager.getEntryCount(), bytes: statSync(file).size, turns: turn })}\n`);
