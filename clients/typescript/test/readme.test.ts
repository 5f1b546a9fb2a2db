/** The README's example, run exactly as written against a session file. */

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { BINARY, IDS, tempDir, writePiSession } from "./helpers.js";

const packageRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

describe("README", () => {
	it("the example works as written", () => {
		const readme = readFileSync(join(packageRoot, "README.md"), "utf8");
		const example = /## Example[\s\S]*?```js\n([\s\S]*?)```/.exec(readme)?.[1];
		assert.ok(example?.includes('from "pi-sessiond-client"'), "the README has the example");
		// Inside the package directory, so `import "pi-sessiond-client"` resolves to this package (dist/) by name.
		const script = join(packageRoot, "build", "readme-example.mjs");
		writeFileSync(script, example!);
		const file = writePiSession(tempDir());
		const out = execFileSync(process.execPath, [script, file], {
			env: { ...process.env, PI_SESSIOND_BIN: BINARY },
			encoding: "utf8",
		});
		const lines = out.trimEnd().split("\n");
		assert.equal(lines.length, 2, out);
		const [seq1, kind1, newId] = lines[0]!.split(" ");
		assert.deepEqual([seq1, kind1], ["1", "append"]);
		assert.equal(lines[1], `2 leaf ${IDS.a2}`, "branched back to the leaf the session had");
		const last = JSON.parse(readFileSync(file, "utf8").trimEnd().split("\n").at(-1)!);
		assert.deepEqual([last.id, last.parentId, last.message.content], [newId, IDS.a2, "hello from TypeScript"]);
	});
});
