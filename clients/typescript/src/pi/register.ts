/**
 * `pi-sessiond-client/register`: `node --import pi-sessiond-client/register …/pi …` runs the real, unchanged `pi`
 * with every session operation on pi-sessiond.
 *
 * pi's command (`dist/bundle/cli.js`) loads a bundle in which `SessionManager` is inlined into a chunk, so this
 * hook, for this thread only, binds that chunk's `SessionManager` to the drop-in (`pi-sessiond-client/pi`) as the
 * chunk is loaded, and resolves pi's unbundled `core/session-manager.js` (pi's SDK) to the drop-in
 * (`redirect.ts`); where pi's `main` gathers its inline extensions, it adds the lock extension. Nothing in pi's
 * files changes, and a `pi` started without the hook runs as before on the same session files.
 */

import * as nodeModule from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { realpathSync } from "node:fs";
import { fileURLToPath, pathToFileURL } from "node:url";
import { resolveBinary } from "../binary.js";
import { SessiondBinaryNotFoundError } from "../errors.js";
import { firstOpenOf } from "./ahead.js";
import { APPENDS_WITHOUT_WAITING, prestartBridge } from "./bridge.js";
import { isBundleChunk, isPiCommand, mayNeedChange, patchBundleChunk, redirect } from "./redirect.js";

type LoadResult = { format?: string | null; source?: string | ArrayBuffer | ArrayBufferView | null; shortCircuit?: boolean };
type LoadHook = (url: string, context: unknown, nextLoad: (url: string, context?: unknown) => LoadResult) => LoadResult;
type ResolveHook = (
	specifier: string,
	context: unknown,
	nextResolve: (specifier: string, context?: unknown) => { url: string; format?: string | null },
) => { url: string; format?: string | null; shortCircuit?: boolean };

/**
 * pi's command enables Node's compile cache (in the temporary directory), whose entries are keyed by file: the
 * chunk this hook changes would share its entry with plain pi's unchanged chunk, and a user (or a benchmark)
 * alternating the two would compile that 2.6 MB chunk again on every start, on both sides. So when pi's command is
 * about to load, pi on pi-sessiond enables the cache first, apart from plain pi's; pi's own call then finds it
 * enabled and uses it. A program using pi's SDK through this hook is left as it was (pi's command never loads
 * there). With NODE_COMPILE_CACHE set, Node enabled the cache that names before anything ran, and this changes
 * nothing: the user chose one cache.
 */
let compileCacheChosen = false;
function chooseCompileCache(): void {
	if (compileCacheChosen) return;
	compileCacheChosen = true;
	(nodeModule as unknown as { enableCompileCache?: (dir: string) => unknown }).enableCompileCache?.(
		join(tmpdir(), "node-compile-cache", "pi-sessiond"),
	);
}

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
const lockExtensionUrl = new URL("./extension.js", import.meta.url);
const lockExtensionPath = fileURLToPath(lockExtensionUrl);
/** Set when the lock extension rides along: then the hook makes it one of pi's inline extensions if it can. */
let lockExtensionWanted = false;

// The lock extension rides along (inline or `-e`, both of which pi honours even with --no-extensions), so a pi on
// pi-sessiond tells its user at once when another pi holds the session. Not for pi's package commands, which take no
// extension flags.
const PACKAGE_COMMANDS = new Set(["install", "remove", "update", "list", "config"]);
if (process.argv.length >= 2 && !PACKAGE_COMMANDS.has(process.argv[2] ?? "")) {
	// By path for now: the hook below takes the path out again once pi's bundle has the extension inline (no
	// TypeScript loader for it), so a pi whose bundle it cannot change still loads it.
	process.argv.push("--extension", lockExtensionPath);
	lockExtensionWanted = true;
	// pi's appends go on before the sidecar answers (`APPENDS_WITHOUT_WAITING` in bridge.ts says why);
	// set before the sidecar starts, which then fsyncs each append right after answering it.
	(globalThis as Record<symbol, unknown>)[APPENDS_WITHOUT_WAITING] = true;
	// The sidecar starts now, beside pi's own start-up, rather than when pi first opens a session.
	prestartBridge();
	if (isPiCommand(pathToFileURL(realScript()).href)) {
		// pi's command: its compile cache now, so the drop-in's modules loaded next are in it too.
		chooseCompileCache();
		// And the session pi will open first, if its arguments say which, opened now, so pi finds it open and read.
		const first = firstOpenOf(process.argv.slice(2));
		if (first !== undefined) void (await import("./session-manager.js")).openAhead(first);
	}
	// Tells the lock extension that this pi is meant to be on pi-sessiond, so it can say so if pi's bundle was not
	// bound to the drop-in (a pi whose bundle declares its SessionManager otherwise).
	(globalThis as Record<symbol, unknown>)[Symbol.for("pi-sessiond-client.registered")] = true;
}

/**
 * What is still to be bound in pi's bundle. Its chunk is the first pi's command loads; once it is bound, the other
 * chunks (2.4 MB at a start) are not searched: searching them took 3–6 ms of pi's thread.
 */
const unbound = { sessionManager: true, lockExtension: lockExtensionWanted };
const bound = () => !unbound.sessionManager && !unbound.lockExtension;

registerHooks({
	resolve(specifier, context, nextResolve) {
		const resolved = nextResolve(specifier, context);
		if (isPiCommand(resolved.url)) chooseCompileCache();
		const target = redirect(resolved.url, dropIn);
		return target === undefined ? resolved : { url: target, format: "module", shortCircuit: true };
	},
	load(url, context, nextLoad) {
		const loaded = nextLoad(url, context);
		if (bound() || !isBundleChunk(url) || loaded.source == null || !mayNeedChange(loaded.source)) return loaded;
		const source = loaded.source instanceof ArrayBuffer ? new Uint8Array(loaded.source) : (loaded.source as string | Uint8Array);
		const patched = patchBundleChunk(source, dropIn, lockExtensionWanted ? lockExtensionUrl.href : undefined);
		if (patched === undefined) return loaded;
		if (patched.sessionManagerBound) unbound.sessionManager = false;
		if (patched.lockExtensionInline) {
			unbound.lockExtension = false;
			// Chunks load before pi's command reads its arguments, so the extension is not loaded twice.
			dropArgument("--extension", lockExtensionPath);
		}
		return { format: "module", source: patched.source, shortCircuit: true };
	},
});

/** The script this process runs (pi's `cli.js` for pi's command, through the symbolic link on PATH). */
function realScript(): string {
	try {
		return realpathSync(process.argv[1] ?? "");
	} catch {
		return process.argv[1] ?? "";
	}
}

/** Takes `flag value` out of pi's arguments. */
function dropArgument(flag: string, value: string): void {
	for (let i = 2; i + 1 < process.argv.length; i++) {
		if (process.argv[i] === flag && process.argv[i + 1] === value) {
			process.argv.splice(i, 2);
			return;
		}
	}
}
