#!/usr/bin/env node
// `pi-sessiond-pi [pi's arguments]`: runs the `pi` found on PATH (or $PI_BIN) with its session operations on
// pi-sessiond: this package's `register` hook is installed in this very process, then pi's command is loaded into
// it, as `node --import pi-sessiond-client/register pi …` would run it. pi runs in the launcher's own process, not
// in a child: a launcher killed with SIGKILL takes pi with it (and pi's sidecar, which ends with its input), and
// no second Node starts. pi needs Node >= 22.19. Exit status and signals are pi's own. What is missing (the sidecar,
// pi, a Node pi runs on) is said in one line before pi starts, not as a stack trace from inside it.
import { accessSync, constants, realpathSync } from "node:fs";
import { delimiter, join } from "node:path";
import { pathToFileURL } from "node:url";
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

const pi = findPi();
// pi reads its arguments from process.argv as `node pi …` would give them.
process.argv = [process.argv[0], pi, ...process.argv.slice(2)];
await import(new URL("../dist/pi/register.js", import.meta.url).href);
await import(pathToFileURL(pi).href);
