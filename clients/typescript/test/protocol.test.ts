/** src/protocol.ts is generated from protocol/schema.json and protocol/methods.json, and must be current. */

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { tempDir } from "./helpers.js";

const packageRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

describe("generated protocol types", () => {
	it("src/protocol.ts is what `npm run gen` generates from the committed protocol", () => {
		const out = join(tempDir(), "protocol.ts");
		execFileSync(process.execPath, [join(packageRoot, "scripts", "gen-protocol.mjs"), "--out", out], { stdio: "pipe" });
		const generated = readFileSync(out, "utf8");
		const committed = readFileSync(join(packageRoot, "src", "protocol.ts"), "utf8");
		assert.ok(generated.length > 1000, "the generator produced the types");
		// Not assert.equal on 40 KB strings: name the first differing line instead.
		if (generated !== committed) {
			const g = generated.split("\n");
			const c = committed.split("\n");
			const line = g.findIndex((l, i) => l !== c[i]);
			assert.fail(
				`src/protocol.ts is stale (first difference at line ${line + 1}: generated ${JSON.stringify(g[line])}, committed ${JSON.stringify(c[line])}); run \`npm run gen\``,
			);
		}
	});

	it("types every request and notification methods.json lists", () => {
		const methods = JSON.parse(readFileSync(join(packageRoot, "..", "..", "protocol", "methods.json"), "utf8")) as {
			methods: { name: string; kind: string }[];
		};
		const source = readFileSync(join(packageRoot, "src", "protocol.ts"), "utf8");
		const block = (name: string) => source.slice(source.indexOf(`export interface ${name} {`), source.indexOf("\n}\n", source.indexOf(`export interface ${name} {`)));
		const requests = block("ProtocolRequests");
		const notifications = block("ProtocolNotifications");
		for (const m of methods.methods) {
			const key = /^[A-Za-z_]\w*$/.test(m.name) ? `\t${m.name}:` : `\t"${m.name}":`;
			assert.ok((m.kind === "request" ? requests : notifications).includes(key), `${m.name} is typed`);
		}
	});
});
