/** Finding the binary: explicit option, PI_SESSIOND_BIN, PATH, and clear errors when it is missing. */

import assert from "node:assert/strict";
import { chmodSync, copyFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { resolveBinary, SessiondBinaryNotFoundError, spawnSessiond } from "../src/index.js";
import { BINARY, tempDir } from "./helpers.js";

describe("resolveBinary", () => {
	it("prefers the explicit option over PI_SESSIOND_BIN, and PI_SESSIOND_BIN over PATH", () => {
		const dir = tempDir();
		const onPath = join(dir, "pi-sessiond");
		copyFileSync(BINARY, onPath);
		chmodSync(onPath, 0o755);
		const env = { PATH: `/nonexistent:${dir}`, PI_SESSIOND_BIN: BINARY };
		assert.equal(resolveBinary(undefined, { PATH: env.PATH }), onPath);
		assert.equal(resolveBinary(undefined, env), BINARY);
		assert.equal(resolveBinary(onPath, env), onPath);
	});

	it("takes the platform package's binary after PI_SESSIOND_BIN and before PATH", () => {
		const dir = tempDir();
		const onPath = join(dir, "pi-sessiond");
		copyFileSync(BINARY, onPath);
		chmodSync(onPath, 0o755);
		const packaged = () => "/the/package/bin/pi-sessiond";
		assert.equal(resolveBinary(undefined, { PATH: dir }, packaged), "/the/package/bin/pi-sessiond");
		assert.equal(resolveBinary(undefined, { PATH: dir, PI_SESSIOND_BIN: BINARY }, packaged), BINARY);
		assert.equal(resolveBinary(undefined, { PATH: dir }, () => undefined), onPath);
	});

	it("names the missing path and where it came from", () => {
		assert.throws(
			() => resolveBinary("/definitely/not/here/pi-sessiond", {}),
			(e: unknown) =>
				e instanceof SessiondBinaryNotFoundError &&
				e.binary === "/definitely/not/here/pi-sessiond" &&
				/\/definitely\/not\/here\/pi-sessiond \(from the `binary` option\) does not exist/.test(e.message) &&
				/PI_SESSIOND_BIN/.test(e.message),
		);
		assert.throws(() => resolveBinary(undefined, { PI_SESSIOND_BIN: "./nope/pi-sessiond" }), /from \$PI_SESSIOND_BIN\) does not exist/);
	});

	it("says it was not found on PATH, and refuses a file that is not executable", () => {
		const dir = tempDir();
		assert.throws(() => resolveBinary(undefined, { PATH: dir }), /`pi-sessiond` \(from the default name\) was not found: no pi-sessiond-[a-z0-9]+-[a-z0-9]+ package installed, nor on PATH \(1 directories searched\)\. Install it with `npm install pi-sessiond-client`/);
		const plain = join(dir, "pi-sessiond");
		writeFileSync(plain, "not a program");
		chmodSync(plain, 0o644);
		assert.throws(() => resolveBinary(plain, {}), /is not executable/);
		assert.throws(() => resolveBinary(undefined, { PATH: dir }), SessiondBinaryNotFoundError);
	});
});

describe("spawnSessiond", () => {
	it("rejects with SessiondBinaryNotFoundError when the binary is missing", async () => {
		await assert.rejects(spawnSessiond({ binary: "/definitely/not/here/pi-sessiond" }), SessiondBinaryNotFoundError);
		await assert.rejects(spawnSessiond({ env: { PATH: tempDir(), PI_SESSIOND_BIN: "" } }), /nor on PATH/);
	});

	it("finds the binary through PI_SESSIOND_BIN in the env option", async () => {
		const client = await spawnSessiond({ env: { PATH: "", PI_SESSIOND_BIN: BINARY }, stderr: "ignore" });
		assert.equal(client.serverInfo?.name, "pi-sessiond");
		await client.close();
	});
});
