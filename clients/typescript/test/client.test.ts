/** The process: handshake, orderly close, kill after a timeout, death with calls pending, stderr. */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";
import {
	type ExitInfo,
	PROTOCOL_VERSION,
	type ProtocolNotifications,
	type ProtocolRequests,
	SessiondError,
	SessiondExitedError,
} from "../src/index.js";
import { spawnTestClient, tempDir, userMessage, waitFor, writePiSession } from "./helpers.js";

// Every request method the generated types describe (a value, so a method missing from this list fails to compile
// once it is added to the protocol).
const GENERATED_METHODS: Record<keyof ProtocolRequests, true> = {
	initialize: true,
	shutdown: true,
	"session/create": true,
	"session/open": true,
	"session/continueRecent": true,
	"session/inMemory": true,
	"session/forkFrom": true,
	"session/newSession": true,
	"session/setSessionFile": true,
	"session/getState": true,
	"session/changesSince": true,
	"session/close": true,
	"session/watch": true,
	"session/unwatch": true,
	"session/lockHolder": true,
	"session/lock": true,
	"session/appendMessage": true,
	"session/appendThinkingLevelChange": true,
	"session/appendModelChange": true,
	"session/appendUsage": true,
	"session/appendCompaction": true,
	"session/appendCustomEntry": true,
	"session/appendSessionInfo": true,
	"session/appendCustomMessageEntry": true,
	"session/appendContextEdit": true,
	"session/appendLabelChange": true,
	"session/branch": true,
	"session/resetLeaf": true,
	"session/branchWithSummary": true,
	"session/appendBatch": true,
	"session/createBranchedSession": true,
	"session/getLeafId": true,
	"session/getLeafEntry": true,
	"session/getEntry": true,
	"session/getChildren": true,
	"session/getLabel": true,
	"session/getBranch": true,
	"session/getHeader": true,
	"session/getEntryCount": true,
	"session/getEntries": true,
	"session/getTree": true,
	"session/getTreeFlat": true,
	"session/getSessionName": true,
	"session/getWarnings": true,
	"session/buildContextEntries": true,
	"session/buildSessionProjection": true,
	"session/buildSessionContext": true,
	"sessions/list": true,
	"sessions/listAll": true,
	"sessions/listDelta": true,
	"sessions/findById": true,
	"sessions/search": true,
	"sessions/searchPage": true,
	"sessions/watch": true,
	"sessions/unwatch": true,
};

// Every notification the generated types describe, and which way it goes.
const GENERATED_NOTIFICATIONS: Record<keyof ProtocolNotifications, "server" | "client"> = {
	initialized: "client",
	exit: "client",
	"$/cancelRequest": "client",
	"session/changed": "server",
	"sessions/changed": "server",
	"$/progress": "server",
};

describe("lifecycle", () => {
	it("initializes, reports the server, and closes with status 0", async () => {
		const { client } = await spawnTestClient();
		assert.equal(client.serverInfo?.name, "pi-sessiond");
		assert.equal(client.protocolVersion, PROTOCOL_VERSION);
		const served = new Set(client.capabilities?.methods);
		for (const method of Object.keys(GENERATED_METHODS)) {
			if (method === "initialize" || method === "shutdown") continue;
			assert.ok(served.has(method), `the server offers ${method}`);
		}
		assert.deepEqual(
			[...(client.capabilities?.notifications ?? [])].sort(),
			Object.entries(GENERATED_NOTIFICATIONS)
				.filter(([, from]) => from === "server")
				.map(([name]) => name)
				.sort(),
			"the server announces exactly the notifications the contract says it sends",
		);
		const exits: ExitInfo[] = [];
		client.on("exit", (info) => exits.push(info));
		const closing = client.close();
		assert.equal(client.close(), closing, "close() is idempotent");
		assert.deepEqual(await closing, { code: 0, signal: null, expected: true });
		assert.deepEqual(exits, [{ code: 0, signal: null, expected: true }]);
		assert.ok(client.isClosed);
		await assert.rejects(client.request("session/inMemory", {}), (e: unknown) => {
			assert.ok(e instanceof SessiondExitedError);
			assert.equal(e.expected, true);
			assert.match(e.message, /session\/inMemory was not sent: pi-sessiond was closed \(exited with status 0\)/);
			return true;
		});
	});

	it("exits with status 0 after shutdown and exit sent back to back", async () => {
		const { client } = await spawnTestClient();
		const exited = new Promise<ExitInfo>((resolve) => client.once("exit", resolve));
		// Pipelined: exit goes out before the shutdown response has come back.
		const shutdown = client.request("shutdown", {});
		await client.notify("exit");
		assert.equal(await shutdown, null);
		const info = await exited;
		assert.deepEqual([info.code, info.signal], [0, null]);
	});

	it("finishes mutations sent before close()", async () => {
		const dir = tempDir();
		const file = writePiSession(dir);
		const { client } = await spawnTestClient();
		const session = await client.openSession(file);
		const appended = session.appendMessage(userMessage("written before close"));
		const closed = client.close();
		const id = await appended;
		assert.equal((await closed).code, 0);
		assert.ok(readFileSync(file, "utf8").includes(`"id":"${id}"`));
		assert.ok(session.closed, "closing the client closes its sessions");
	});

	it("kills a server that does not shut down in time", async () => {
		const { client } = await spawnTestClient();
		process.kill(client.pid!, "SIGSTOP");
		const info = await client.close({ timeoutMs: 300 });
		assert.deepEqual(info, { code: null, signal: "SIGKILL", expected: true });
	});

	it("rejects pending calls with the exit status and ends session iterators when the process dies", async () => {
		const dir = tempDir();
		const { client } = await spawnTestClient();
		const session = await client.openSession(writePiSession(dir));
		const iterator = session.changes();
		const exits: ExitInfo[] = [];
		client.on("exit", (info) => exits.push(info));
		// Stopped, the server cannot answer: the call is certainly pending when it is killed.
		process.kill(client.pid!, "SIGSTOP");
		const pending = session.getTree();
		const next = iterator.next();
		process.kill(client.pid!, "SIGKILL");
		await assert.rejects(pending, (e: unknown) => {
			assert.ok(e instanceof SessiondExitedError, String(e));
			assert.equal(e.signal, "SIGKILL");
			assert.equal(e.expected, false);
			assert.match(e.message, /^session\/getTree failed: pi-sessiond died \(killed by SIGKILL\)/);
			return true;
		});
		await assert.rejects(next, SessiondExitedError);
		assert.ok(session.closed);
		assert.deepEqual(exits, [{ code: null, signal: "SIGKILL", expected: false }]);
		// Nobody closed the session: a later call says the process died, as the client's own calls do, so a host
		// that catches SessiondExitedError to start a new sidecar sees it.
		await assert.rejects(session.getLeafId(), (e: unknown) => {
			assert.ok(e instanceof SessiondExitedError, String(e));
			assert.match(e.message, /^session\/getLeafId was not sent: pi-sessiond died \(killed by SIGKILL\)/);
			return true;
		});
		await session.close(); // nothing to close: resolves
		await assert.rejects(client.listAll(), /sessions\/listDelta was not sent: pi-sessiond died/);
		assert.equal((await client.close()).signal, "SIGKILL");
	});

	it("reports a process that dies at start with its stderr", async () => {
		await assert.rejects(spawnTestClient({ args: ["--no-such-flag"] }), (e: unknown) => {
			assert.ok(e instanceof SessiondExitedError, String(e));
			assert.equal(e.exitCode, 2);
			assert.match(e.stderr, /--no-such-flag/);
			assert.match(e.message, /initialize failed: pi-sessiond died \(exited with status 2\); its last stderr output:\n.*--no-such-flag/s);
			return true;
		});
	});

	it("drains stderr line by line into the logger", async () => {
		const { client, stderr } = await spawnTestClient({ args: ["--log-level", "debug"] });
		await client.inMemory({ cwd: "/tmp" });
		await client.close();
		await waitFor(() => stderr.some((l) => l.includes("session/inMemory")), "the debug log of the request");
		assert.ok(stderr.every((l) => !l.includes("\n")), "one line per call");
	});
});
