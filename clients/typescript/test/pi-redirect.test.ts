/**
 * The register hook's changes to pi: in pi's bundle, only the chunk that declares `SessionManager` changes, and
 * only that binding (bound to the drop-in); pi's unbundled session-manager module (its SDK) becomes the drop-in;
 * nothing else changes (tests/pi runs the real pi under the hook).
 */

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { isBundleChunk, isPiCommand, LOCK_EXTENSION_NAME, mayNeedChange, patchBundleChunk, redirect } from "../src/pi/redirect.js";

const pkg = "file:///usr/lib/node_modules/@earendil-works/pi-coding-agent/dist";
const dropIn = "file:///opt/pi-sessiond-client/dist/pi/index.js";
const lockExtension = "file:///opt/pi-sessiond-client/dist/pi/extension.js";
/** How pi 1.6.0's bundle gathers its inline extensions in `main`. */
const mainChunk = 'var builtInExtensions=[{name:"mcp",factory:mcp,builtin:!0}];async function main(args,options){let extensionFactories=[...builtInExtensions,...options?.extensionFactories??[]],offline=!1}export{main};';

describe("the register hook's redirects", () => {
	it("sends pi's unbundled session manager to the drop-in", () => {
		assert.equal(redirect(`${pkg}/core/session-manager.js`, dropIn), dropIn);
	});

	it("knows pi's command (where it keeps its compile cache apart) from pi's SDK and the bundle's chunks", () => {
		assert.ok(isPiCommand(`${pkg}/bundle/cli.js`));
		for (const url of [`${pkg}/index.js`, `${pkg}/cli.js`, `${pkg}/bundle/cli-runtime.js`, `${pkg}/bundle/chunks/chunk-A.js`]) assert.equal(isPiCommand(url), false, url);
	});

	it("leaves every other module alone, pi's bundle and its own modules included", () => {
		for (const url of [`${pkg}/bundle/cli.js`, `${pkg}/bundle/cli-runtime.js`, `${pkg}/core/agent-session.js`, `${pkg}/index.js`, "node:fs", "file:///x/session-manager.js"]) {
			assert.equal(redirect(url, dropIn), undefined, url);
		}
	});
});

describe("the register hook's change to pi's bundle", () => {
	const chunk = 'import{x}from"./chunk-A.js";var other=1;var SessionManager=class _SessionManager{static create(){return new _SessionManager}};export{SessionManager,other};';

	it("binds the chunk's SessionManager to the drop-in and keeps pi's class under another name", async () => {
		const patched = patchBundleChunk(chunk, dropIn, lockExtension)?.source;
		assert.ok(patched);
		assert.ok(patched.startsWith(`import { SessionManager as __piSessiondSessionManager } from "${dropIn}";import{x}from"./chunk-A.js";`), patched);
		assert.ok(patched.includes("var SessionManager=__piSessiondSessionManager;var __piSessiondPiSessionManager=class _SessionManager{static create(){return new _SessionManager}};"), patched);
		assert.ok(patched.endsWith("export{SessionManager,other};"), patched);
	});

	it("changes a chunk given as bytes into the same text, as bytes (the hook never decodes the chunk)", () => {
		for (const text of [chunk, `#!/usr/bin/env node\n${chunk}`, `${mainChunk}var SessionManager=class _SessionManager{};`, "é ünïcode before;" + chunk]) {
			const asText = patchBundleChunk(text, dropIn, lockExtension);
			const asBytes = patchBundleChunk(Buffer.from(`xx${text}`).subarray(2), dropIn, lockExtension);
			assert.ok(asText && asBytes && typeof asText.source === "string" && asBytes.source instanceof Uint8Array);
			assert.equal(Buffer.from(asBytes.source).toString("utf8"), asText.source);
			assert.equal(asBytes.lockExtensionInline, asText.lockExtensionInline);
		}
		assert.equal(patchBundleChunk(new TextEncoder().encode("var SessionManagerLike=class{};"), dropIn, lockExtension), undefined);
	});

	it("keeps a #! line first", () => {
		const patched = patchBundleChunk(`#!/usr/bin/env node\n${chunk}`, dropIn)?.source;
		assert.ok(patched?.startsWith("#!/usr/bin/env node\nimport { SessionManager as __piSessiondSessionManager }"), patched);
	});

	it("leaves a chunk without pi's SessionManager as it is, and looks only at chunks of pi's bundle", () => {
		assert.equal(patchBundleChunk('var SessionManagerLike=class{};export{SessionManagerLike};', dropIn, lockExtension), undefined);
		assert.equal(mayNeedChange(new TextEncoder().encode("var SessionManagerLike=class{};")), false);
		assert.equal(mayNeedChange(new TextEncoder().encode(chunk)), true);
		assert.equal(mayNeedChange(Buffer.from(`xx${chunk}`).subarray(2)), true);
		assert.equal(mayNeedChange(new TextEncoder().encode(mainChunk)), true);
		assert.ok(isBundleChunk(`${pkg}/bundle/chunks/chunk-KSDI5FD4.js`));
		for (const url of [`${pkg}/bundle/cli-runtime.js`, `${pkg}/core/session-manager.js`, "file:///x/bundle/chunks/chunk-A.js"]) assert.equal(isBundleChunk(url), false, url);
	});
});

describe("the register hook's inline lock extension", () => {
	it("adds the lock extension to pi's inline extensions, after the built-ins, hidden as they are", () => {
		const patched = patchBundleChunk(mainChunk, dropIn, lockExtension);
		assert.equal(patched?.lockExtensionInline, true);
		assert.equal(patched?.sessionManagerBound, false, "this chunk has no SessionManager");
		assert.ok(patched?.source.startsWith(`import __piSessiondLockExtension from "${lockExtension}";var builtInExtensions=`), patched?.source);
		assert.ok(
			patched?.source.includes(`let extensionFactories=[...builtInExtensions,{name:"${LOCK_EXTENSION_NAME}",factory:__piSessiondLockExtension,hidden:!0},...options?.extensionFactories??[]]`),
			patched?.source,
		);
	});

	it("leaves pi's extensions alone when the extension is not wanted (pi's package commands)", () => {
		assert.equal(patchBundleChunk(mainChunk, dropIn), undefined);
	});

	it("binds both in one chunk that holds both", () => {
		const patched = patchBundleChunk(`${mainChunk}var SessionManager=class _SessionManager{};`, dropIn, lockExtension);
		assert.equal(patched?.lockExtensionInline, true);
		assert.equal(patched?.sessionManagerBound, true);
		assert.ok(patched?.source.startsWith(`import { SessionManager as __piSessiondSessionManager } from "${dropIn}";import __piSessiondLockExtension from "${lockExtension}";`), patched?.source);
	});
});
