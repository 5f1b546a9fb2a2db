#!/usr/bin/env node
// `pi-sessiond [arguments]`: the binary this package's platform package brought, run with this process's
// arguments, terminal and exit status. npm links only a package's own commands into a global prefix's bin/, so
// after `npm install -g pi-sessiond-client` the README's `pi-sessiond ls` found no command: the binary sat in
// lib/node_modules/pi-sessiond-linux-x64/bin/. Only the packaged binary is run, never one found on PATH or through
// $PI_SESSIOND_BIN, which could be this very script.
import { spawnSync } from "node:child_process";
import { PLATFORM_PACKAGE, packagedBinary } from "../dist/binary.js";

const binary = packagedBinary();
if (binary === undefined) {
	console.error(`pi-sessiond: this install has no ${PLATFORM_PACKAGE} package with the binary (install pi-sessiond-client again without --omit=optional, or the binary with \`cargo install --locked pi-sessiond\`)`);
	process.exit(127);
}
const run = spawnSync(binary, process.argv.slice(2), { stdio: "inherit" });
if (run.error) {
	console.error(`pi-sessiond: ${binary}: ${run.error.message}`);
	process.exit(127);
}
// Ended by a signal (a Ctrl-C reaches both processes): end the same way, so the shell sees what happened.
if (run.signal) process.kill(process.pid, run.signal);
process.exit(run.status ?? 1);
