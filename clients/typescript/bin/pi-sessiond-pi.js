#!/usr/bin/env node
// `pi-sessiond-pi [pi's arguments]`: runs the `pi` found on PATH (or $PI_BIN) with its session operations on
// pi-sessiond, by starting it under this package's `register` hook: `node --import pi-sessiond-client/register pi …`
// in one command. The same Node runs pi (pi needs Node >= 22.19). Exit status and signals are pi's. What is missing
// (the sidecar, pi, a Node pi runs on) is said in one line before pi starts, not as a stack trace from inside it.
import { spawn } from "node:child_process";
import { accessSync, constants, realpathSync } from "node:fs";
import { delimiter, join } from "node:path";
import { resolveBinary } from "../dist/binary.js";

const [major, minor] = process.versions.node.split(".").map(Number);
if (major < 22 || (major === 22 && minor < 19)) {
	console.error(`pi-sessiond-pi: pi 1.6.0 needs Node >= 22.19, and this is Node ${process.versions.node} (install a newer Node, e.g. from nodejs.org or with nvm, and run pi-sessiond-pi with it)`);
	process.exit(1);
}
try {
	resolveBinary();
} catch (e) {
	console.error(`pi-sessiond-pi: ${e instanceof Error ? e.message : e}`);
	process.exit(127);
}

function findPi() {
	if (process.env.PI_BIN) return realpathSync(process.env.PI_BIN);
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

const register = new URL("../dist/pi/register.js", import.meta.url).href;
const child = spawn(process.execPath, ["--import", register, findPi(), ...process.argv.slice(2)], { stdio: "inherit" });
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) process.on(signal, () => child.kill(signal));
child.on("exit", (code, signal) => {
	if (signal) process.kill(process.pid, signal);
	else process.exit(code ?? 1);
});
