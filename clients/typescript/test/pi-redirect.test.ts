/**
 * The register hook's changes to pi: in pi's bundle, only the chunk that declares `SessionManager` changes, and
 * only that binding (bound to the drop-in); pi's unbundled session-manager module (its SDK) becomes the drop-in;
 * nothing else changes (tests/pi runs the real pi under the hook).
 */

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { isBundleChunk, mayDeclareSessionManager, patchBundleChunk, redirect } from "../src/pi/redirect.js";

const pkg = "file:///usr/lib/node_modules/@earendil-works/pi-coding-agent/dist";
const dropIn = "file:///opt/pi-sessiond-client/dist/pi/index.js";

describe("the register hook's redirects", () => {
	it("sends pi's unbundled session manager to the drop-in", () => {
		assert.equal(redirect(`${pkg}/core/session-manager.js`, dropIn), dropIn);
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
		const patched = patchBundleChunk(chunk, dropIn);
		assert.ok(patched);
		assert.ok(patched.startsWith(`import { SessionManager as __piSessiondSessionManager } from "${dropIn}";import{x}from"./chunk-A.js";`), patched);
		assert.ok(patched.includes("var SessionManager=__piSessiondSessionManager;var __piSessiondPiSessionManager=class _SessionManager{static create(){return new _SessionManager}};"), patched);
		assert.ok(patched.endsWith("export{SessionManager,other};"), patched);
	});

	it("keeps a #! line first", () => {
		const patched = patchBundleChunk(`#!/usr/bin/env node\n${chunk}`, dropIn);
		assert.ok(patched?.startsWith("#!/usr/bin/env node\nimport { SessionManager as __piSessiondSessionManager }"), patched);
	});

	it("leaves a chunk without pi's SessionManager as it is, and looks only at chunks of pi's bundle", () => {
		assert.equal(patchBundleChunk('var SessionManagerLike=class{};export{SessionManagerLike};', dropIn), undefined);
		assert.equal(mayDeclareSessionManager(new TextEncoder().encode("var SessionManagerLike=class{};")), false);
		assert.equal(mayDeclareSessionManager(new TextEncoder().encode(chunk)), true);
		assert.equal(mayDeclareSessionManager(Buffer.from(`xx${chunk}`).subarray(2)), true);
		assert.ok(isBundleChunk(`${pkg}/bundle/chunks/chunk-KSDI5FD4.js`));
		for (const url of [`${pkg}/bundle/cli-runtime.js`, `${pkg}/core/session-manager.js`, "file:///x/bundle/chunks/chunk-A.js"]) assert.equal(isBundleChunk(url), false, url);
	});
});
