/**
 * pi-sessiond-client: a TypeScript client for pi-sessiond, the JSON-RPC sidecar that owns pi's session files.
 *
 * ```ts
 * import { spawnSessiond } from "pi-sessiond-client";
 * const client = await spawnSessiond();
 * const session = await client.openSession("/path/to/session.jsonl");
 * session.on("changed", (n) => console.log(n.seq, n.change.kind));
 * await session.appendMessage({ role: "user", content: "hi", timestamp: Date.now() });
 * await client.close();
 * ```
 *
 * @packageDocumentation
 */

export { BINARY_ENV_VAR, DEFAULT_BINARY, resolveBinary } from "./binary.js";
export {
	type ExitInfo,
	type ListOptions,
	type OpenOptions,
	SessiondClient,
	type SessiondClientEvents,
	type SessionsWatch,
	type SpawnOptions,
	spawnSessiond,
} from "./client.js";
export { SessiondBinaryNotFoundError, SessiondError, SessiondExitedError } from "./errors.js";
export { type Listener, TypedEmitter } from "./events.js";
export { LineMessageReader, LineMessageWriter } from "./framing.js";
export * from "./protocol.js";
export {
	type CompactionOptions,
	type EntriesOptions,
	RemoteSession,
	type RemoteSessionEvents,
	type ResyncInfo,
} from "./session.js";
export type {
	ContextEditReplacement,
	MutationOptions,
	RequestOptions,
	ResyncChange,
	SearchOptions,
	SessionResync,
	SessionTreeFlatNode,
	SessionUpdate,
	UpdateChange,
} from "./types.js";
export { type MirrorDetail, MirroredSession } from "./mirror.js";
export { SessionView, type TreeNode } from "./pi/view.js";
