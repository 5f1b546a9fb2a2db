/**
 * `pi-sessiond-client/register`: `node --import pi-sessiond-client/register …/pi …` runs the real, unchanged `pi`
 * with every session operation on pi-sessiond.
 *
 * pi's command (`dist/bundle/cli.js`) loads a bundle in which `SessionManager` is inlined into a chunk, so this
 * hook, for this thread only, binds that chunk's `SessionManager` to the drop-in (`pi-sessiond-client/pi`) as the
 * chunk is loaded, and resolves pi's unbundled `core/session-manager.js` (pi's SDK) to the drop-in
 * (`redirect.ts`). Nothing in pi's files changes, and a `pi` started without the hook runs as before on the same
 * session files.
 */

import * as nodeModule from "node:module";
import { fileURLToPath } from "node:url";
import { resolveBinary } from "../binary.js";
import { SessiondBinaryNotFoundError } from "../errors.js";
import { APPENDS_WITHOUT_WAITING, prestartBridge } from "./bridge.js";
import { isBundleChunk, mayDeclareSessionManager, patchBundleChunk, redirect } from "./redirect.js";

type LoadResult = { format?: string | null; source?: string | ArrayBuffer | ArrayBufferView | null; shortCircuit?: boolean };
type LoadHook = (url: string, context: unknown, nextLoad: (url: string, context?: unknown) => LoadResult) => LoadResult;
type ResolveHook = (
	specifier: string,
	context: unknown,
	nextResolve: (specifier: string, context?: unknown) => { url: string; format?: string | null },
) => { url: string; format?: string | null; shortCircuit?: boolean };

const registerHooks = (nodeModule as unknown as { registerHooks?: (hooks: { resolve: ResolveHook; load: LoadHook }) => unknown }).registerHooks;
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
	// pi's appends go on before the sidecar answers (`APPENDS_WITHOUT_WAITING` in bridge.ts says why);
	// set before the sidecar starts, which then fsyncs each append right after answering it.
	(globalThis as Record<symbol, unknown>)[APPENDS_WITHOUT_WAITING] = true;
	// The sidecar starts now, beside pi's own start-up, rather than when pi first opens a session.
	prestartBridge();
	// Tells the lock extension that this pi is meant to be on pi-sessiond, so it can say so if pi's bundle was not
	// bound to the drop-in (a pi whose bundle declares its SessionManager otherwise).
	(globalThis as Record<symbol, unknown>)[Symbol.for("pi-sessiond-client.registered")] = true;
}

registerHooks({
	resolve(specifier, context, nextResolve) {
		const resolved = nextResolve(specifier, context);
		const target = redirect(resolved.url, dropIn);
		return target === undefined ? resolved : { url: target, format: "module", shortCircuit: true };
	},
	load(url, context, nextLoad) {
		const loaded = nextLoad(url, context);
		if (!isBundleChunk(url) || loaded.source == null || !mayDeclareSessionManager(loaded.source)) return loaded;
		const source = typeof loaded.source === "string" ? loaded.source : Buffer.from(loaded.source as Uint8Array).toString("utf8");
		const patched = patchBundleChunk(source, dropIn);
		return patched === undefined ? loaded : { format: "module", source: patched, shortCircuit: true };
	},
});
