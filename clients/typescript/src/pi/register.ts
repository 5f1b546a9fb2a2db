/**
 * `pi-sessiond-client/register`: `node --import pi-sessiond-client/register …/pi …` runs the real, unchanged `pi`
 * with every session operation on pi-sessiond.
 *
 * pi's command (`dist/bundle/cli.js`) loads a bundle in which `SessionManager` is inlined into a chunk, so there
 * is no module to replace there. The package also ships the same program unbundled (`dist/cli.js` and the modules
 * it imports by path), so this hook, for this thread only, resolves the bundle's runtime to the unbundled entry
 * and pi's `core/session-manager.js` to the drop-in (`pi-sessiond-client/pi`). Nothing in pi's files changes, and
 * a `pi` started without the hook runs as before on the same session files.
 */

import * as nodeModule from "node:module";
import { fileURLToPath } from "node:url";
import { resolveBinary } from "../binary.js";
import { SessiondBinaryNotFoundError } from "../errors.js";
import { redirect } from "./redirect.js";

type ResolveHook = (
	specifier: string,
	context: unknown,
	nextResolve: (specifier: string, context?: unknown) => { url: string; format?: string | null },
) => { url: string; format?: string | null; shortCircuit?: boolean };

const registerHooks = (nodeModule as unknown as { registerHooks?: (hooks: { resolve: ResolveHook }) => unknown }).registerHooks;
if (typeof registerHooks !== "function") {
	throw new Error(
		`pi-sessiond-client/register needs module.registerHooks (Node >= 22.15; this is ${process.version}). pi 1.6.0 itself needs Node >= 22.19.`,
	);
}

// Without the sidecar pi would stop at its first session operation with a stack trace; say it once, before pi runs.
try {
	resolveBinary();
} catch (e) {
	if (!(e instanceof SessiondBinaryNotFoundError)) throw e;
	process.stderr.write(`pi-sessiond-client/register: ${e.message}\n`);
	process.exit(127);
}

const dropIn = new URL("./index.js", import.meta.url).href;

// The lock extension rides along (`-e`, which pi honours even with --no-extensions), so a pi on pi-sessiond tells its
// user at once when another pi holds the session. Not for pi's package commands, which take no extension flags.
const PACKAGE_COMMANDS = new Set(["install", "remove", "update", "list", "config"]);
if (process.argv.length >= 2 && !PACKAGE_COMMANDS.has(process.argv[2] ?? "")) {
	process.argv.push("--extension", fileURLToPath(new URL("./extension.js", import.meta.url)));
}

registerHooks({
	resolve(specifier, context, nextResolve) {
		const resolved = nextResolve(specifier, context);
		const target = redirect(resolved.url, dropIn);
		return target === undefined ? resolved : { url: target, format: "module", shortCircuit: true };
	},
});
