// One side of bench/run's pi-big rows (issue 20): real pi 1.6.0 (its command, RPC mode, the faux provider of
// tests/pi/fixtures/faux.ts) resuming a generated session, with pi's own SessionManager (`own`) or on pi-sessiond
// through pi-sessiond-client/register (`sessiond`). Run under tests/pi's Node 22. Prints JSON:
//
//   node bench/pi-big.mjs own|sessiond SESSION_FILE PROMPTS
//        -> {readyMs, promptMs: [...], peakRssKiB, sidecarPeakRssKiB}
//
// ready: from spawning pi to its answer to the first command (`get_state`), which pi reads only once the session
// is loaded and the agent is set up: start to a usable prompt. Each prompt: sent until pi has settled (the
// answer, its writes). Peak RSS: VmHWM of pi's process and of the processes below it (the sidecar), read just
// before pi is told to end. The file is truncated back to its size afterwards, so every run resumes the same
// session without a copy of gigabytes.
import { closeSync, mkdirSync, mkdtempSync, openSync, readFileSync, readSync, rmSync, statSync, truncateSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const { RpcPi, descendants } = await import(new URL("../tests/pi/lib.mjs", import.meta.url).href);

const [side, file, count] = process.argv.slice(2);
function firstLine(path) {
	const fd = openSync(path, "r");
	const buffer = Buffer.alloc(64 * 1024);
	const n = readSync(fd, buffer, 0, buffer.length, 0);
	closeSync(fd);
	return buffer.subarray(0, n).toString("utf8").split("\n")[0];
}
const hwm = (pid) => {
	try {
		return Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0);
	} catch {
		return 0;
	}
};

// A throwaway HOME and agent directory with pi's default settings (the real-pi tests' sandbox keeps little at a
// compaction; here pi must behave as a user's would).
const root = mkdtempSync(join(tmpdir(), "pi-big-"));
// pi resumes a session only in its working directory (the header's, which the generator made up).
const header = JSON.parse(firstLine(file));
const box = { root, home: join(root, "home"), agentDir: join(root, "agent"), cwd: header.cwd };
for (const dir of [box.home, box.agentDir, box.cwd]) mkdirSync(dir, { recursive: true });
const size = statSync(file).size;
try {
	const start = performance.now();
	const pi = new RpcPi(box, { sessiond: side === "sessiond", args: ["--session", file] });
	// A pi that ends before it answers fails the run with what it said.
	await Promise.race([
		pi.command({ type: "get_state" }),
		pi.exited.then((code) => Promise.reject(new Error(`pi exited with ${code} before answering: ${pi.stderr}`))),
	]);
	const readyMs = performance.now() - start;
	const promptMs = [];
	for (let i = 0; i < Number(count); i++) {
		const t = performance.now();
		await pi.prompt(`prompt ${i}`);
		promptMs.push(performance.now() - t);
	}
	const peakRssKiB = hwm(pi.pid);
	const sidecarPeakRssKiB = descendants(pi.pid).reduce((sum, pid) => sum + hwm(pid), 0);
	const code = await pi.close();
	if (code !== 0) throw new Error(`pi exited with ${code}: ${pi.stderr}`);
	process.stdout.write(`${JSON.stringify({ readyMs, promptMs, peakRssKiB, sidecarPeakRssKiB })}\n`);
} finally {
	truncateSync(file, size);
	rmSync(root, { recursive: true, force: true });
}
