/**
 * The register hook's choice of modules: pi's bundled CLI runtime becomes its unbundled CLI and pi's
 * session-manager module becomes the drop-in; nothing else changes (tests/pi runs the real pi under the hook).
 */

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { redirect } from "../src/pi/redirect.js";

const pkg = "file:///usr/lib/node_modules/@earendil-works/pi-coding-agent/dist";
const dropIn = "file:///opt/pi-sessiond-client/dist/pi/index.js";

describe("the register hook's redirects", () => {
	it("sends the bundled runtime to the unbundled CLI and the session manager to the drop-in", () => {
		assert.equal(redirect(`${pkg}/bundle/cli-runtime.js`, dropIn), `${pkg}/cli.js`);
		assert.equal(redirect(`${pkg}/core/session-manager.js`, dropIn), dropIn);
	});

	it("leaves every other module alone, pi's own included", () => {
		for (const url of [`${pkg}/bundle/cli.js`, `${pkg}/core/agent-session.js`, `${pkg}/index.js`, "node:fs", "file:///x/session-manager.js"]) {
			assert.equal(redirect(url, dropIn), undefined, url);
		}
	});
});
