// pi's own SessionManager tests (vendor/session-manager), run twice with only the session-manager import changed:
// PI_TESTS_TARGET=pi resolves `../../src/core/session-manager.ts` to pi 1.6.0's published module, `drop-in` to
// pi-sessiond-client/pi (the client must be built). Every other import of pi's sources goes to pi's published
// modules in both runs.
import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

const target = process.env.PI_TESTS_TARGET ?? "pi";
if (target !== "pi" && target !== "drop-in") throw new Error(`PI_TESTS_TARGET must be pi or drop-in, not ${target}`);
const pi = (path: string) => fileURLToPath(new URL(`./node_modules/@earendil-works/pi-coding-agent/dist/${path}`, import.meta.url));
const sessionManager = target === "pi" ? pi("core/session-manager.js") : fileURLToPath(new URL("../../clients/typescript/dist/pi/index.js", import.meta.url));

export default defineConfig({
	resolve: {
		alias: [
			{ find: /^\.\.\/\.\.\/src\/core\/session-manager\.ts$/, replacement: sessionManager },
			{ find: /^\.\.\/\.\.\/src\/config\.ts$/, replacement: pi("config.js") },
		],
	},
	test: {
		include: ["vendor/session-manager/*.test.ts"],
		// One file at a time: the machine is shared, and a file's sidecar then has the cores it needs.
		fileParallelism: false,
		testTimeout: 60_000,
	},
});
