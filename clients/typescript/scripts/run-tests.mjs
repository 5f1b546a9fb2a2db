#!/usr/bin/env node
// Runs the compiled tests (build/test/*.test.js) with Node's test runner against a pi-sessiond binary.
//
// The binary is $PI_SESSIOND_BIN, or, when that is unset, the repository's debug build (../../target/debug/
// pi-sessiond from this package). A missing binary fails here, with what to do, rather than as a test failure per
// file. `npm test` builds first (see "pretest" in package.json).

import { spawnSync } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const packageRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const fromEnv = process.env.PI_SESSIOND_BIN;
const binary = fromEnv ? resolve(fromEnv) : resolve(packageRoot, "..", "..", "target", "debug", "pi-sessiond");

if (!existsSync(binary)) {
	const why = fromEnv ? `PI_SESSIOND_BIN is ${fromEnv}, which does not exist` : `PI_SESSIOND_BIN is unset and ${binary} does not exist`;
	console.error(
		`pi-sessiond-client tests: no server binary (${why}).\n` +
			`Build it at the repository root with \`cargo build\`, or point PI_SESSIOND_BIN at a pi-sessiond binary.`,
	);
	process.exit(1);
}

// Arguments starting with "-" go to `node --test` (e.g. --test-name-pattern=resync); others name test files to run
// instead of all of them (build/test/session.test.js).
const extra = process.argv.slice(2);
const flags = extra.filter((a) => a.startsWith("-"));
const chosen = extra.filter((a) => !a.startsWith("-")).map((a) => resolve(a));
const testDir = join(packageRoot, "build", "test");
const all = existsSync(testDir) ? readdirSync(testDir).filter((f) => f.endsWith(".test.js")).sort().map((f) => join(testDir, f)) : [];
const files = chosen.length > 0 ? chosen : all;
if (files.length === 0) {
	console.error(`pi-sessiond-client tests: no compiled tests in ${testDir}; run \`npm run build:test\` (npm test does).`);
	process.exit(1);
}

console.error(`pi-sessiond-client tests: server ${binary}`);
const result = spawnSync(process.execPath, ["--test", "--test-reporter=spec", ...flags, ...files], {
	stdio: "inherit",
	env: { ...process.env, PI_SESSIOND_BIN: binary },
});
process.exit(result.status ?? 1);
