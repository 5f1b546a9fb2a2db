// pi's SDK with its sessions on pi-sessiond: `createAgentSession({ sessionManager })` with the drop-in
// SessionManager from pi-sessiond-client/pi. Everything else is pi's own SDK; the session file is where pi puts it
// and opens in pi as usual, but it was written with pi-sessiond's write lock and durability.
//
//   node index.mjs "your prompt" [more prompts…]     pi's configured model (needs its API key)
//   node index.mjs --faux "hello" "run ls"           pi-ai's test provider instead (no model, no network)
//
// Needs @earendil-works/pi-coding-agent (and pi-ai) next to pi-sessiond-client, Node >= 22.19, and the pi-sessiond
// binary on PATH or in $PI_SESSIOND_BIN. Prints the session file and each answer.
import { createAgentSession, ModelRuntime } from "@earendil-works/pi-coding-agent";
import { SessionManager } from "pi-sessiond-client/pi";

const args = process.argv.slice(2);
const faux = args[0] === "--faux";
const prompts = faux ? args.slice(1) : args;
const cwd = process.cwd();

let modelRuntime;
let model;
if (faux) {
	const { fauxAssistantMessage, fauxProvider, fauxToolCall } = await import("@earendil-works/pi-ai");
	let calls = 0;
	const provider = fauxProvider({ api: "faux", provider: "faux", models: [{ id: "faux-1" }] });
	// "run CMD" asks for a bash tool call; a tool result is acknowledged; anything else is echoed.
	const respond = (context) => {
		const last = context.messages.at(-1);
		if (last?.role === "toolResult") return fauxAssistantMessage(`done: ${last.toolName}`);
		const text = typeof last?.content === "string" ? last.content : (last?.content ?? []).map((b) => b.text ?? "").join("");
		if (text.startsWith("run ")) {
			return fauxAssistantMessage([fauxToolCall("bash", { command: text.slice(4) }, { id: `call-${++calls}` })], { stopReason: "toolUse" });
		}
		return fauxAssistantMessage(`echo: ${text}`);
	};
	provider.setResponses(Array.from({ length: 100 }, () => respond));
	modelRuntime = await ModelRuntime.create({ allowModelNetwork: false });
	modelRuntime.registerNativeProvider(provider.provider);
	model = modelRuntime.getModel("faux", "faux-1");
}

const sessionManager = SessionManager.create(cwd);
const { session } = await createAgentSession({ cwd, sessionManager, ...(modelRuntime ? { modelRuntime, model } : {}) });
for (const prompt of prompts) {
	await session.prompt(prompt);
	console.log(`> ${prompt}\n${session.getLastAssistantText() ?? ""}`);
}
console.log(`session: ${sessionManager.getSessionFile()}`);
session.dispose();
