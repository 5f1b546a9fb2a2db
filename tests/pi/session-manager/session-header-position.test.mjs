// Follows pi's packages/coding-agent/test/session-manager/session-header-position.test.ts (read as a reference,
// not copied). pi 1.6.0 needs the header on the first line that parses; the cases there about entries written
// before the header test a later change and fail on 1.6.0, so only the one that holds for 1.6.0 is here.
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { loadEntriesFromFile } from "./subject.mjs";
import { jsonl, scratch } from "./support.mjs";

describe("loadEntriesFromFile and where the header is", () => {
	// pi: "loadEntriesFromFile still rejects files without any session header"
	it("gives [] for a file of records none of which is a session header", (t) => {
		const file = join(scratch(t), "titled.jsonl");
		writeFileSync(
			file,
			jsonl(
				{ type: "title", v: 1, title: "A title some tool wrote", source: "auto", updatedAt: "2025-01-01T00:00:00Z" },
				{ type: "session_info", name: "named, but no header" },
			),
		);
		assert.deepEqual(loadEntriesFromFile(file), []);
	});
});
