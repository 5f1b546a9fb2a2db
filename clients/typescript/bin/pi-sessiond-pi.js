#!/usr/bin/env node
// `pi-sessiond-pi [pi's arguments]`: runs the `pi` found on PATH (or $PI_BIN) with its session operations on
// pi-sessiond: this package's `register` hook is installed in this very process, then pi's command is loaded into
// it, as `node --import pi-sessiond-client/register pi …` would run it. pi runs in the launcher's own process, not
// in a child: a launcher killed with SIGKILL takes pi with it (and pi's sidecar, which ends with its input), and
// no second Node starts. pi needs Node >= 22.19. Exit status and signals are pi's own. What is missing (the sidecar,
// pi, a Node pi runs on) is said in one line before pi starts, not as a stack trace from inside it.
import { spawnSync } from "node:child_process";
import { accessSync, constants, realpathSync } from "node:fs";
import { delimiter, join } from "node:path";
import { pathToFileURL } from "node:url";
import { resolveBinary } from "../dist/binary.js";
import { extraSidecarArgs, sidecarArgs } from "../dist/pi/bridge.js";

const [major, minor] = process.versions.node.split(".").map(Number);
if (major < 22 || (major === 22 && minor < 19)) {
	console.error(`pi-sessiond-pi: pi 1.6.0 needs Node >= 22.19, and this is Node ${process.versions.node} (install a newer Node, e.g. from nodejs.org or with nvm, and run pi-sessiond-pi with it)`);
	process.exit(1);
}
let binary;
try {
	binary = resolveBinary();
} catch (e) {
	console.error(`pi-sessiond-pi: ${e instanceof Error ? e.message : e}`);
	process.exit(127);
}

// A sidecar the user chose (PI_SESSIOND_BIN, or arguments in PI_SESSIOND_ARGS) is tried before pi starts, with the
// arguments the drop-in will start it with: one that refuses them, or is not pi-sessiond's sidecar at all
// (`PI_SESSIOND_ARGS=ls`, a wrong binary), would otherwise end pi with a stack trace from inside its start-up. It is
// asked to `initialize`, its input then closed, so it answers and ends at once; the packaged binary with no
// arguments is not tried (pi's start pays nothing).
const extra = extraSidecarArgs();
const ANSWER_WITHIN_MS = 10_000;
if (extra.length > 0 || process.env.PI_SESSIOND_BIN) {
	const initialize = `${JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: {} })}\n`;
	const tried = spawnSync(binary, sidecarArgs(), { input: initialize, encoding: "utf8", timeout: ANSWER_WITHIN_MS });
	const said = (tried.stderr ?? "").split("\n").map((l) => l.trim()).filter((l) => l !== "" && !l.startsWith("For more information"));
	const answered = () => {
		try {
			const first = JSON.parse((tried.stdout ?? "").split("\n")[0]);
			return first?.jsonrpc === "2.0" && first.id === 1 && first.result !== undefined;
		} catch {
			return false;
		}
	};
	// A sidecar that ends before reading its input leaves the write to it failing with EPIPE: its status says more.
	const failed = tried.error && tried.error.code !== "EPIPE" ? tried.error : undefined;
	const ended = `status ${tried.status ?? tried.signal}`;
	const args = extra.length > 0 ? `PI_SESSIOND_ARGS="${process.env.PI_SESSIOND_ARGS}"` : "";
	if (failed?.code === "ETIMEDOUT") {
		console.error(`pi-sessiond-pi: ${binary}${args ? ` with ${args}` : ""} does not answer as pi-sessiond's sidecar (no answer to initialize within ${ANSWER_WITHIN_MS / 1000} s)`);
		process.exit(2);
	} else if (failed) {
		console.error(`pi-sessiond-pi: cannot run ${binary}: ${failed.message}`);
		process.exit(2);
	} else if (tried.status !== 0 && said.length > 0) {
		// The drop-in passes pi's own agent directory: another one is set where pi reads it.
		const hint = extra.some((a) => a === "--agent-dir" || a.startsWith("--agent-dir=")) ? " (the agent directory is pi's: set PI_CODING_AGENT_DIR instead)" : "";
		console.error(`pi-sessiond-pi: ${binary} refuses ${args || "to start"}: ${said.slice(0, 2).join(" ")}${hint}`);
		process.exit(2);
	} else if (!answered()) {
		console.error(`pi-sessiond-pi: ${binary}${args ? ` with ${args}` : ""} does not answer as pi-sessiond's sidecar (it ended with ${ended} without answering initialize)`);
		process.exit(2);
	}
}

function findPi() {
	if (process.env.PI_BIN) {
		try {
			return realpathSync(process.env.PI_BIN);
		} catch (e) {
			console.error(`pi-sessiond-pi: PI_BIN=${process.env.PI_BIN}: ${e.code === "ENOENT" ? "no such file" : e.message} (set it to pi's cli.js, or unset it to use the pi on PATH)`);
			process.exit(127);
		}
	}
	for (const dir of (process.env.PATH ?? "").split(delimiter)) {
		if (!dir) continue;
		const candidate = join(dir, "pi");
		try {
			accessSync(candidate, constants.X_OK);
			return realpathSync(candidate);
		} catch {
			// not here
		}
	}
	console.error("pi-sessiond-pi: no `pi` on PATH (install @earendil-works/pi-coding-agent, or set PI_BIN to its cli.js)");
	process.exit(127);
}

const pi = findPi();
// pi reads its arguments from process.argv as `node pi …` would give them.
process.argv = [process.argv[0], pi, ...process.argv.slice(2)];
await import(new URL("../dist/pi/register.js", import.meta.url).href);
await import(pathToFileURL(pi).href);
