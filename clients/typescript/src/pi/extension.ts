/**
 * The lock extension: every pi honours pi-sessiond's write lock. `pi install` of this package loads it into plain
 * pi, and pi on pi-sessiond (`pi-sessiond-client/register`, `pi-sessiond-pi`) loads it itself.
 *
 * pi 1.6.0 takes no lock: two pis on one session both append, and the session forks silently (pi #8177, #8300).
 * A pi on pi-sessiond takes one (an `flock` on the session file). With this extension:
 *
 * - A pi that opens or resumes a session whose lock another process holds says so at once (`session_start`),
 *   naming the holder: its pid, machine and program.
 * - Plain pi then never writes that file: its prompts are refused before the agent starts (the `input` event, so
 *   nothing is left half-done and pi never waits on "Working"), and any other write (`/name`, a label, a model
 *   change) fails with the same message, memory unchanged (pi's own `_persist` is where a write reaches the file,
 *   and pi takes an entry back when it throws). `/clone` continues in a new session, which is not held.
 * - pi on pi-sessiond reads the session, and its first prompt continues in a new session forked from it (the
 *   drop-in does that; this extension only tells the user, before and when it happens).
 * - pi on pi-sessiond says it is done with a prompt (`agent_settled`) once the appends the drop-in made without
 *   waiting are in the file, so whoever reads the file then reads the whole turn.
 */

import type { ExtensionAPI, ExtensionContext } from "@earendil-works/pi-coding-agent";
import { describeHolder, type LockHolder, notice, onNotice, otherLockHolder } from "./lock.js";

/**
 * Events already handled, process-wide: pi may load two copies of this extension (the one pi-sessiond's launcher
 * adds and an installed one), and pi hands every handler of one emission the same context object, so the first
 * copy acts alone.
 */
const HANDLED = Symbol.for("pi-sessiond-client.lock-extension.handled");
const GUARDED = Symbol.for("pi-sessiond-client.lock-extension.guarded");
/** Set by the `register` hook: this pi is meant to run on pi-sessiond. */
const REGISTERED = Symbol.for("pi-sessiond-client.registered");

function firstToHandle(emission: object): boolean {
	const global = globalThis as Record<symbol, WeakSet<object> | undefined>;
	const seen = (global[HANDLED] ??= new WeakSet<object>());
	if (seen.has(emission)) return false;
	seen.add(emission);
	return true;
}

/** True for the drop-in (`pi-sessiond-client/pi`), which writes through pi-sessiond and takes the lock itself. */
function onSessiond(sessionManager: object): boolean {
	return "sessiondHandle" in sessionManager;
}

/** Why plain pi does not write `file`. */
function refusal(file: string, holder: LockHolder): string {
	return `Session file ${file} is being written by ${describeHolder(holder)}; this pi does not write to it, so the session is not forked silently. Read it here, /clone to continue in a new session, or close the other pi.`;
}

/** Makes plain pi's session manager refuse to write a file another process holds the lock of. */
function guard(sessionManager: object): void {
	const manager = sessionManager as Record<string | symbol, unknown> & { sessionFile?: string };
	const persist = manager._persist;
	if (manager[GUARDED] || typeof persist !== "function") return;
	manager[GUARDED] = true;
	manager._persist = function (this: typeof manager, entry: unknown): unknown {
		const file = this.sessionFile;
		const holder = file === undefined ? undefined : otherLockHolder(file);
		if (file !== undefined && holder !== undefined) throw new Error(refusal(file, holder));
		return persist.call(this, entry);
	};
}

/** Files whose refusal this process said at session start (in print mode, a prompt's refusal is not said again). */
const saidAtStart = new Set<string>();

/** The widget that keeps the notice of a held session in view in pi's TUI. */
const HELD_WIDGET = "pi-sessiond-held";

function say(ctx: ExtensionContext, text: string, level: "warning" | "error"): void {
	if (ctx.hasUI) ctx.ui.notify(text, level);
	else process.stderr.write(`${text}\n`);
}

/** The extension's factory (pi calls it once per session runtime). */
export default function lockExtension(pi: ExtensionAPI): void {
	pi.on("session_start", (_event, ctx) => {
		if (!firstToHandle(ctx)) return;
		const manager = ctx.sessionManager as object;
		const sessiond = onSessiond(manager);
		if (!sessiond && (globalThis as Record<symbol, unknown>)[REGISTERED]) {
			say(ctx, "pi-sessiond-client/register could not find pi's SessionManager in this pi's bundle: this pi writes its sessions itself, not through pi-sessiond.", "error");
		}
		if (sessiond) onNotice((text) => say(ctx, text, "warning"));
		else guard(manager);
		const file = ctx.sessionManager.getSessionFile();
		if (file === undefined) return;
		// The drop-in asked as it opened the file, moments ago: asking the system again costs pi's start a read of
		// the kernel's lock table (see lock.ts).
		const checked = sessiond ? (manager as { lockCheckedAtOpen?: (path: string) => { holder: LockHolder | undefined } | undefined }).lockCheckedAtOpen?.(file) : undefined;
		const holder = checked !== undefined ? checked.holder : otherLockHolder(file);
		if (holder === undefined) return;
		if (sessiond) {
			const told = `Session file ${file} is being written by ${describeHolder(holder)}. Read it here; your next prompt continues in a new session forked from it (this file stays as the other pi writes it).`;
			notice(told);
			// pi's TUI adds what is said at session_start above the session's messages, out of sight once they fill
			// the screen: there it is also shown above the editor until the user's next prompt.
			if (ctx.mode === "tui") ctx.ui.setWidget(HELD_WIDGET, [`Warning: ${told}`]);
		} else {
			say(ctx, refusal(file, holder), "warning");
			saidAtStart.add(file);
		}
	});

	pi.on("agent_settled", async (_event, ctx) => {
		if (!firstToHandle(ctx)) return;
		const manager = ctx.sessionManager as { landed?: () => Promise<void> };
		if (typeof manager.landed === "function") await manager.landed();
	});

	pi.on("input", (_event, ctx) => {
		if (!firstToHandle(ctx)) return { action: "continue" };
		if (onSessiond(ctx.sessionManager as object)) {
			if (ctx.mode === "tui") ctx.ui.setWidget(HELD_WIDGET, undefined);
			return { action: "continue" };
		}
		const file = ctx.sessionManager.getSessionFile();
		const holder = file === undefined ? undefined : otherLockHolder(file);
		if (file === undefined || holder === undefined) return { action: "continue" };
		// Without a UI (`-p`, `--mode json`) the prompt is all this run was for: it ends here, status 1, with the
		// refusal said once (session_start said it already for this file) and nothing on stdout, where pi would go
		// on to print the session's previous answer as if it were this prompt's.
		if (!ctx.hasUI) {
			if (!saidAtStart.has(file)) say(ctx, refusal(file, holder), "error");
			process.exit(1);
		}
		say(ctx, refusal(file, holder), "error");
		return { action: "handled" };
	});
}
