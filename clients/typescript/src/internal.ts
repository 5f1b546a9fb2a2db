/**
 * Hooks for this package's own tests; not exported from the package's entry point. A symbol keeps them off the
 * public surface while letting a test reach them without casts.
 */

/** The key of `SessiondClient`'s test hooks. */
export const kTestHooks: unique symbol = Symbol("pi-sessiond-client test hooks");

import type { SessionChanged } from "./protocol.js";

/** Knobs a test can turn to simulate faults the real server does not produce on demand. */
export interface TestHooks {
	/** Drop this many of the next `session/changed` notifications, as if they had been lost (to test seq gaps). */
	dropSessionChanged: number;
	/** Handles `n` as if the server had sent it. */
	injectSessionChanged(n: SessionChanged): void;
	/**
	 * When set, a resync that has its `session/getState` answer waits for this promise before applying it, so a test
	 * can make notifications arrive while a resync is in flight, deterministically.
	 */
	holdResync: Promise<void> | undefined;
}
