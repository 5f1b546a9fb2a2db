/**
 * Which of pi's module URLs the `register` hook sends elsewhere: the bundled CLI runtime to the unbundled CLI, and
 * the session-manager module to the drop-in. Kept apart from the hook so it can be tested without installing one.
 */

const BUNDLED_RUNTIME = /\/pi-coding-agent\/dist\/bundle\/cli-runtime\.js$/;
const SESSION_MANAGER = /\/pi-coding-agent\/dist\/core\/session-manager\.js$/;

/** The URL to load instead of `url`, or undefined to load `url` itself. */
export function redirect(url: string, dropInUrl: string): string | undefined {
	if (BUNDLED_RUNTIME.test(url)) return url.replace(/bundle\/cli-runtime\.js$/, "cli.js");
	if (SESSION_MANAGER.test(url)) return dropInUrl;
	return undefined;
}
