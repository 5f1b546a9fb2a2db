// Peak memory of real pi 1.6.0 answering RPC commands that walk a whole session (`get_tree` by default; any
// command without arguments), plain pi (`own`) against pi on pi-sessiond (`sessiond`): a host's RPC view of a big
// session reads every entry's strings, which pi on pi-sessiond otherwise leaves in the file.
// Run under tests/pi's Node 22:
//
//   node bench/pi-tree-peak.mjs own|sessiond SESSION_FILE [COMMAND...]   (default command: get_tree)
//        -> {readyMs, answers: [{command, bytes, ms}], peakRssKiB, sidecarPeakRssKiB}
//
// The answers (hundreds of MB for an image session) are counted, not parsed.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const { RpcPi, descendants } = await import(new URL("../tests/pi/lib.mjs", import.meta.url).href);
const [side, file, ...asked] = process.argv.slice(2);
const commands = asked.length > 0 ? asked : ["get_tree"];
const hwm = (pid) => Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0);
const header = JSON.parse(readFileSync(file, { encoding: "utf8", flag: "r" }).slice(0, 4096).split("\n")[0]);
const root = mkdtempSync(join(tmpdir(), "pi-tree-peak-"));
const box = { root, home: join(root, "home"), agentDir: join(root, "agent"), cwd: header.cwd };
for (const dir of [box.home, box.agentDir, box.cwd]) mkdirSync(dir, { recursive: true });
try {
	const start = performance.now();
	const pi = new RpcPi(box, { sessiond: side === "sessiond", args: ["--session", file] });
	await pi.command({ type: "get_state" });
	const readyMs = performance.now() - start;
	// From here on, each answer's bytes are counted up to its newline.
	pi.child.stdout.removeAllListeners("data");
	let counted = 0;
	let done;
	pi.child.stdout.on("data", (chunk) => {
		const nl = chunk.indexOf(10);
		counted += nl < 0 ? chunk.length : nl;
		if (nl >= 0) done?.(counted);
	});
	const answers = [];
	for (const [i, command] of commands.entries()) {
		counted = 0;
		const t = performance.now();
		const bytes = await new Promise((resolve) => {
			done = resolve;
			writeSync(pi.input, `${JSON.stringify({ id: `peak-${i}`, type: command })}\n`);
		});
		answers.push({ command, bytes, ms: performance.now() - t });
	}
	const peakRssKiB = hwm(pi.pid);
	const sidecarPeakRssKiB = descendants(pi.pid).reduce((sum, pid) => sum + hwm(pid), 0);
	pi.child.kill("SIGTERM");
	await pi.exited;
	process.stdout.write(`${JSON.stringify({ readyMs, answers, peakRssKiB, sidecarPeakRssKiB })}\n`);
} finally {
	rmSync(root, { recursive: true, force: true });
}
