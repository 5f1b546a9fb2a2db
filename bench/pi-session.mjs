// One side of the "pi itself on pi-sessiond" rows (issue 14), run by bench/run.mjs in a process of its own under
// the Node 22 that tests/pi installs (pi 1.6.0 needs it): pi's SDK with the faux provider, its sessions managed by
// pi's own SessionManager (`own`) or by the drop-in (`sessiond`, pi-sessiond-client/pi). Prints JSON.
//
//   node bench/pi-session.mjs own|sessiond prompt SESSION_FILE PROMPTS
//        -> {openMs, promptMs: [...], peakRssKiB, sidecarPeakRssKiB}: open a copy of the file, then PROMPTS prompts
//   node bench/pi-session.mjs own|sessiond list AGENT_DIR
//        -> {coldMs, warmMs, sessions}: /resume's "all" listing (SessionManager.listAll) twice
import { readdirSync, readFileSync } from "node:fs";

const [side, task, target, count] = process.argv.slice(2);
const pi = new URL("../tests/pi/node_modules/@earendil-works/pi-coding-agent/dist/index.js", import.meta.url);
const piAi = new URL("../tests/pi/node_modules/@earendil-works/pi-ai/dist/index.js", import.meta.url);
const { createAgentSession, ModelRuntime, SessionManager: PiSessionManager } = await import(pi.href);
const { SessionManager } =
	side === "sessiond" ? await import(new URL("../clients/typescript/dist/pi/index.js", import.meta.url).href) : { SessionManager: PiSessionManager };

/** Peak resident memory of this process's children (the sidecar), from /proc, in KiB. */
function childrenPeakRssKiB() {
	let total = 0;
	for (const tid of readdirSync(`/proc/${process.pid}/task`)) {
		let children = "";
		try {
			children = readFileSync(`/proc/${process.pid}/task/${tid}/children`, "utf8");
		} catch {
			continue;
		}
		for (const pid of children.split(" ").filter(Boolean)) {
			const hwm = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
			if (hwm) total += Number(hwm[1]);
		}
	}
	return total;
}

const now = () => performance.now();

if (task === "prompt") {
	const { fauxAssistantMessage, fauxProvider } = await import(piAi.href);
	const faux = fauxProvider({ api: "faux", provider: "faux", models: [{ id: "faux-1", contextWindow: 100_000_000 }] });
	faux.setResponses(Array.from({ length: Number(count) + 5 }, () => fauxAssistantMessage("ok")));
	const modelRuntime = await ModelRuntime.create({ allowModelNetwork: false });
	modelRuntime.registerNativeProvider(faux.provider);
	const model = modelRuntime.getModel("faux", "faux-1");
	let t = now();
	const sessionManager = SessionManager.open(target);
	const { session } = await createAgentSession({ cwd: sessionManager.getCwd(), sessionManager, modelRuntime, model });
	session.setAutoCompactionEnabled?.(false);
	const openMs = now() - t;
	const promptMs = [];
	for (let i = 0; i < Number(count); i++) {
		t = now();
		await session.prompt(`prompt ${i}`);
		promptMs.push(now() - t);
	}
	session.dispose();
	const out = { openMs, promptMs, peakRssKiB: process.resourceUsage().maxRSS, sidecarPeakRssKiB: childrenPeakRssKiB() };
	process.stdout.write(`${JSON.stringify(out)}\n`);
	process.exit(0);
}

if (task === "list") {
	process.env.PI_CODING_AGENT_DIR = target;
	let t = now();
	const first = await SessionManager.listAll(() => {});
	const coldMs = now() - t;
	t = now();
	const second = await SessionManager.listAll(() => {});
	const warmMs = now() - t;
	if (second.length !== first.length) throw new Error("the two listings differ in length");
	process.stdout.write(`${JSON.stringify({ coldMs, warmMs, sessions: first.length, peakRssKiB: process.resourceUsage().maxRSS })}\n`);
	process.exit(0);
}

throw new Error(`unknown task ${task}`);
