// The module the session-manager suite tests, chosen by PI_TESTS_TARGET: `pi` is pi 1.6.0's own published
// `dist/core/session-manager.js`, `drop-in` is `pi-sessiond-client/pi` (the client must be built). Every test file
// imports its SessionManager and functions from here and nowhere else, so the two runs differ in this import only.
import { fileURLToPath } from "node:url";

/** Which module is under test: "pi" or "drop-in". */
export const target = process.env.PI_TESTS_TARGET ?? "pi";

const modules = {
	pi: new URL("../node_modules/@earendil-works/pi-coding-agent/dist/core/session-manager.js", import.meta.url).href,
	"drop-in": "pi-sessiond-client/pi",
};
if (!(target in modules)) throw new Error(`PI_TESTS_TARGET must be pi or drop-in, not ${target}`);

const subject = await import(modules[target]);

export const {
	SessionManager,
	buildSessionContext,
	findMostRecentSession,
	getDefaultSessionDir,
	loadEntriesFromFile,
	CURRENT_SESSION_VERSION,
} = subject;

/** Where the module under test lives, for messages. */
export const subjectPath = target === "pi" ? fileURLToPath(modules.pi) : modules["drop-in"];
