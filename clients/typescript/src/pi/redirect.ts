/**
 * Which of pi's modules the `register` hook changes, and how; kept apart from the hook so it can be tested without
 * installing one.
 *
 * pi's command (`dist/bundle/cli.js`) is a bundle in which `SessionManager` is inlined into one of its chunks as
 * `var SessionManager=class _SessionManager{…}`. Loading pi's unbundled modules instead (the same program, by
 * path) cost 1.8 s of a 2 MB session's start here (3.5 s on a busy machine), more than pi's whole start, so
 * the hook keeps the bundle and changes that one binding in the chunk's text: it names the drop-in's class, and
 * pi's class stays in the chunk under another name, unused. The unbundled session-manager module (pi's SDK, `dist/index.js`) is sent to
 * the drop-in as a whole.
 */

const SESSION_MANAGER = /\/pi-coding-agent\/dist\/core\/session-manager\.js$/;
const BUNDLE_CHUNK = /\/pi-coding-agent\/dist\/bundle\/chunks\/[^/]+\.js$/;
/** How pi 1.6.0's bundle declares the class (esbuild keeps the names, so the text is stable for a release). */
const CLASS_IN_BUNDLE = "var SessionManager=class _SessionManager{";
/** The drop-in's class, imported into the chunk under a name no bundle uses. */
const DROP_IN_BINDING = "__piSessiondSessionManager";

/** The URL to load instead of `url`, or undefined to load `url` itself. */
export function redirect(url: string, dropInUrl: string): string | undefined {
	if (SESSION_MANAGER.test(url)) return dropInUrl;
	return undefined;
}

/** True when `url` is a chunk of pi's bundle, whose text `patchBundleChunk` may have to change. */
export function isBundleChunk(url: string): boolean {
	return BUNDLE_CHUNK.test(url);
}

/**
 * True when a chunk's bytes may declare pi's `SessionManager`: searched as bytes, so the other chunks of the bundle
 * (about 8 MB in all) are never decoded into strings on the way to a start.
 */
export function mayDeclareSessionManager(source: string | ArrayBuffer | ArrayBufferView): boolean {
	if (typeof source === "string") return source.includes(CLASS_IN_BUNDLE);
	const bytes = ArrayBuffer.isView(source) ? Buffer.from(source.buffer, source.byteOffset, source.byteLength) : Buffer.from(source);
	return bytes.includes(CLASS_IN_BUNDLE);
}

/**
 * The text of a chunk of pi's bundle with its `SessionManager` bound to the drop-in (`dropInUrl`), or undefined for
 * a chunk that does not declare it (left as it is).
 */
export function patchBundleChunk(source: string, dropInUrl: string): string | undefined {
	const at = source.indexOf(CLASS_IN_BUNDLE);
	if (at === -1) return undefined;
	// An import is valid anywhere at a module's top level, the class perhaps not (esbuild may wrap it in a function):
	// so the import goes first (after a `#!` line, which must stay first).
	const start = source.startsWith("#!") ? source.indexOf("\n") + 1 : 0;
	const head = `import { SessionManager as ${DROP_IN_BINDING} } from ${JSON.stringify(dropInUrl)};`;
	const declaration = `var SessionManager=${DROP_IN_BINDING};var __piSessiondPiSessionManager=class _SessionManager{`;
	return source.slice(0, start) + head + source.slice(start, at) + declaration + source.slice(at + CLASS_IN_BUNDLE.length);
}
