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
 *
 * The lock extension is bound the same way, as one of the inline extensions pi's `main` gathers: loaded by path
 * (`--extension`), pi's TypeScript loader (jiti) transpiles it and what it imports on every start, about 60 ms of
 * a 2 MB session's start here, a tenth of it.
 */

const SESSION_MANAGER = /\/pi-coding-agent\/dist\/core\/session-manager\.js$/;
const BUNDLE_CHUNK = /\/pi-coding-agent\/dist\/bundle\/chunks\/[^/]+\.js$/;
/** pi's command: the bundle's entry. */
const PI_COMMAND = /\/pi-coding-agent\/dist\/bundle\/cli\.js$/;
/** How pi 1.6.0's bundle declares the class (esbuild keeps the names, so the text is stable for a release). */
const CLASS_IN_BUNDLE = "var SessionManager=class _SessionManager{";
/** The drop-in's class, imported into the chunk under a name no bundle uses. */
const DROP_IN_BINDING = "__piSessiondSessionManager";
/** How pi 1.6.0's `main` gathers its inline extensions (built-ins first). */
const FACTORIES_IN_BUNDLE = "let extensionFactories=[...builtInExtensions,";
/** The lock extension's factory, imported into the chunk under a name no bundle uses. */
const LOCK_BINDING = "__piSessiondLockExtension";
/** The name pi knows the lock extension by when it is inline (hidden from its list of loaded extensions, as its own built-ins are). */
export const LOCK_EXTENSION_NAME = "pi-sessiond-lock";

/** The URL to load instead of `url`, or undefined to load `url` itself. */
export function redirect(url: string, dropInUrl: string): string | undefined {
	if (SESSION_MANAGER.test(url)) return dropInUrl;
	return undefined;
}

/** True when `url` is pi's command (its bundle's entry), which only the `pi` program loads, never pi's SDK. */
export function isPiCommand(url: string): boolean {
	return PI_COMMAND.test(url);
}

/** True when `url` is a chunk of pi's bundle, whose text `patchBundleChunk` may have to change. */
export function isBundleChunk(url: string): boolean {
	return BUNDLE_CHUNK.test(url);
}

/**
 * True when a chunk's bytes may declare pi's `SessionManager` or gather its inline extensions: searched as bytes,
 * so the other chunks of the bundle (about 8 MB in all) are never decoded into strings on the way to a start.
 */
export function mayNeedChange(source: string | ArrayBuffer | ArrayBufferView): boolean {
	if (typeof source === "string") return source.includes(CLASS_IN_BUNDLE) || source.includes(FACTORIES_IN_BUNDLE);
	const bytes = ArrayBuffer.isView(source) ? Buffer.from(source.buffer, source.byteOffset, source.byteLength) : Buffer.from(source);
	return bytes.includes(CLASS_IN_BUNDLE) || bytes.includes(FACTORIES_IN_BUNDLE);
}

/** A chunk's changed text (bytes when it was given as bytes), and whether the lock extension is now among pi's inline extensions. */
export interface PatchedChunk<Source extends string | Uint8Array = string | Uint8Array> {
	source: Source;
	/** The chunk's `SessionManager` is now the drop-in's. */
	sessionManagerBound: boolean;
	lockExtensionInline: boolean;
}

/**
 * The text of a chunk of pi's bundle with its `SessionManager` bound to the drop-in (`dropInUrl`) and, when
 * `lockExtensionUrl` is given, the lock extension added to pi's inline extensions; undefined for a chunk that does
 * neither (left as it is).
 *
 * The hook gets the chunk as bytes and changes it as bytes, the changes being ASCII: decoding its 2.6 MB into a
 * string, then searching and cutting the string, took 5–9 ms of pi's thread at every start, where Node decodes the
 * bytes it is handed once anyway.
 */
export function patchBundleChunk<Source extends string | Uint8Array>(
	source: Source,
	dropInUrl: string,
	lockExtensionUrl?: string,
): PatchedChunk<Source> | undefined {
	const bytes = typeof source === "string" ? undefined : Buffer.from(source.buffer, source.byteOffset, source.byteLength);
	const text = {
		indexOf: (needle: string) => (bytes === undefined ? (source as string).indexOf(needle) : bytes.indexOf(needle)),
		startsWith: (prefix: string) => (bytes === undefined ? (source as string).startsWith(prefix) : bytes.subarray(0, prefix.length).equals(Buffer.from(prefix))),
		slice: (from: number, to?: number): string | Buffer => (bytes === undefined ? (source as string).slice(from, to) : bytes.subarray(from, to)),
	};
	const imports: string[] = [];
	// The pieces of the new text: the old one cut at each change, what goes in between.
	const cuts: { at: number; skip: number; insert: string }[] = [];
	const at = text.indexOf(CLASS_IN_BUNDLE);
	if (at !== -1) {
		imports.push(`import { SessionManager as ${DROP_IN_BINDING} } from ${JSON.stringify(dropInUrl)};`);
		const declaration = `var SessionManager=${DROP_IN_BINDING};var __piSessiondPiSessionManager=class _SessionManager{`;
		cuts.push({ at, skip: CLASS_IN_BUNDLE.length, insert: declaration });
	}
	const gathered = lockExtensionUrl === undefined ? -1 : text.indexOf(FACTORIES_IN_BUNDLE);
	if (gathered !== -1) {
		imports.push(`import ${LOCK_BINDING} from ${JSON.stringify(lockExtensionUrl)};`);
		const lock = `{name:${JSON.stringify(LOCK_EXTENSION_NAME)},factory:${LOCK_BINDING},hidden:!0},`;
		cuts.push({ at: gathered + FACTORIES_IN_BUNDLE.length, skip: 0, insert: lock });
	}
	if (imports.length === 0) return undefined;
	// An import is valid anywhere at a module's top level, the class perhaps not (esbuild may wrap it in a function):
	// so the imports go first (after a `#!` line, which must stay first).
	const start = text.startsWith("#!") ? text.indexOf("\n") + 1 : 0;
	cuts.push({ at: start, skip: 0, insert: imports.join("") });
	cuts.sort((a, b) => a.at - b.at);
	const pieces: (string | Buffer)[] = [];
	let from = 0;
	for (const cut of cuts) {
		pieces.push(text.slice(from, cut.at), cut.insert);
		from = cut.at + cut.skip;
	}
	pieces.push(text.slice(from));
	const changed = bytes === undefined ? pieces.join("") : Buffer.concat(pieces.map((p) => (typeof p === "string" ? Buffer.from(p) : p)));
	return { source: changed as Source, sessionManagerBound: at !== -1, lockExtensionInline: gathered !== -1 };
}
