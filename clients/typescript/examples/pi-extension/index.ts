/**
 * A pi extension that talks to pi-sessiond: `/sessiond` lists and searches your sessions and shows the current
 * session's tree, live.
 *
 *   /sessiond                 pick one of this project's sessions (newest first) and switch to it
 *   /sessiond all             the same over every project's sessions
 *   /sessiond search WORDS    full-text search over this project's sessions; pick a hit to switch to its session
 *   /sessiond tree            show the current session's tree above the editor, updated as the session grows
 *   /sessiond hide            hide the tree
 *
 * The sidecar is started on first use (never from the factory: pi may load extensions in runs that start no session)
 * and shut down with the session. It finds `pi-sessiond` on PATH, or the binary `PI_SESSIOND_BIN` names.
 */

import type { ExtensionAPI, ExtensionCommandContext, ExtensionContext } from "@earendil-works/pi-coding-agent";
import {
	type RemoteSession,
	type SessionEntry,
	SessiondBinaryNotFoundError,
	type SessiondClient,
	SessiondError,
	type SessionInfo,
	type SessionTreeFlatNode,
	spawnSessiond,
} from "pi-sessiond-client";

const WIDGET = "pi-sessiond-tree";
const MAX_TREE_LINES = 30;

export default function sessiondExtension(pi: ExtensionAPI): void {
	let client: Promise<SessiondClient> | undefined;
	// The current session, opened with watch so pi's own appends arrive as change events.
	let watched: { session: RemoteSession; stop: () => void } | undefined;

	function sidecar(): Promise<SessiondClient> {
		client ??= spawnSessiond({ stderr: "ignore", clientInfo: { name: "pi-sessiond-extension-example" } }).catch((error: unknown) => {
			client = undefined; // let the next command try again (after the user installed the binary, say)
			throw error;
		});
		return client;
	}

	async function hideTree(ctx: ExtensionContext): Promise<void> {
		const current = watched;
		watched = undefined;
		if (ctx.hasUI) ctx.ui.setWidget(WIDGET, undefined);
		if (current) {
			current.stop();
			await current.session.close().catch(() => undefined);
		}
	}

	async function showTree(ctx: ExtensionCommandContext): Promise<void> {
		const file = ctx.sessionManager.getSessionFile();
		if (!file) {
			ctx.ui.notify("This session is not saved to a file yet (or runs in memory): no tree to show.", "warning");
			return;
		}
		await hideTree(ctx);
		const sessiond = await sidecar();
		// Opening never writes, and pi-sessiond takes no lock until its first write: pi keeps writing the file as usual.
		// pi writes the file at the first message, so it may not exist yet: `create` accepts that.
		const session = await sessiond.openSession(file, { watch: true, create: true });
		const render = async () => {
			// The flat tree: a long session is thousands of levels deep as getTree's nesting.
			const [tree, leafId] = await Promise.all([session.getTreeFlat(), session.getLeafId()]);
			if (watched?.session === session) ctx.ui.setWidget(WIDGET, renderTree(tree, leafId, MAX_TREE_LINES));
		};
		let pending = Promise.resolve();
		// Re-render on every change pi makes (they arrive with origin "external") and after a resync; chain the renders
		// so a burst of appends cannot draw an older tree over a newer one.
		const rerender = () => {
			pending = pending.then(render).catch((error: unknown) => ctx.ui.notify(`pi-sessiond: ${describe(error)}`, "error"));
		};
		const offChanged = session.on("changed", rerender);
		const offResync = session.on("resync", rerender);
		watched = {
			session,
			stop: () => {
				offChanged();
				offResync();
			},
		};
		rerender();
		await pending;
	}

	async function pickSession(ctx: ExtensionCommandContext, sessions: SessionInfo[], title: string): Promise<void> {
		if (sessions.length === 0) {
			ctx.ui.notify("No sessions found.", "info");
			return;
		}
		const labels = sessions.map((s) => {
			const when = s.modified ? s.modified.slice(0, 16).replace("T", " ") : "?";
			return `${when}  ${s.messageCount} msgs  ${s.name ?? oneLine(s.firstMessage, 60)}`;
		});
		const choice = await ctx.ui.select(title, labels);
		if (choice === undefined) return;
		await switchTo(ctx, sessions[labels.indexOf(choice)]!.path);
	}

	async function switchTo(ctx: ExtensionCommandContext, path: string): Promise<void> {
		if (path === ctx.sessionManager.getSessionFile()) {
			ctx.ui.notify("That is the current session.", "info");
			return;
		}
		await ctx.switchSession(path);
	}

	async function search(ctx: ExtensionCommandContext, query: string): Promise<void> {
		if (!query) {
			ctx.ui.notify("Usage: /sessiond search WORDS", "warning");
			return;
		}
		const hits = await (await sidecar()).search(query, { cwd: ctx.cwd, limit: 50 });
		if (hits.length === 0) {
			ctx.ui.notify(`Nothing matches "${query}".`, "info");
			return;
		}
		const labels = hits.map((h, i) => `${i + 1}. [${h.role}] ${oneLine(h.snippet, 90)}`);
		const choice = await ctx.ui.select(`${hits.length} matches for "${query}"`, labels);
		if (choice === undefined) return;
		await switchTo(ctx, hits[labels.indexOf(choice)]!.path);
	}

	pi.registerCommand("sessiond", {
		description: "pi-sessiond: list or search sessions, show the session tree (all | search WORDS | tree | hide)",
		getArgumentCompletions: (prefix) => {
			const items = ["all", "search ", "tree", "hide"].filter((s) => s.startsWith(prefix)).map((s) => ({ value: s, label: s.trim() }));
			return items.length > 0 ? items : null;
		},
		handler: async (args, ctx) => {
			const [verb = "", ...rest] = args.trim().split(/\s+/);
			try {
				switch (verb) {
					case "":
						// Without allMessagesText (every message of every session), which the picker does not show.
						return await pickSession(ctx, await (await sidecar()).list(ctx.cwd, { includeAllMessagesText: false }), "Sessions of this project");
					case "all":
						return await pickSession(ctx, await (await sidecar()).listAll({ includeAllMessagesText: false }), "All sessions");
					case "search":
						return await search(ctx, rest.join(" "));
					case "tree":
						return await showTree(ctx);
					case "hide":
						return await hideTree(ctx);
					default:
						ctx.ui.notify(`Unknown subcommand "${verb}". Try: /sessiond [all | search WORDS | tree | hide]`, "warning");
				}
			} catch (error) {
				ctx.ui.notify(`pi-sessiond: ${describe(error)}`, "error");
			}
		},
	});

	pi.on("session_shutdown", async (_event, ctx) => {
		await hideTree(ctx);
		const running = client;
		client = undefined;
		if (running) await (await running.catch(() => undefined))?.close();
	});
}

function describe(error: unknown): string {
	if (error instanceof SessiondBinaryNotFoundError) return error.message;
	if (error instanceof SessiondError && error.kind === "method_not_found") return `this pi-sessiond is too old: ${error.message}`;
	return error instanceof Error ? error.message : String(error);
}

function oneLine(text: string, max: number): string {
	const flat = text.replace(/\s+/g, " ").trim();
	return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

/** A one-line summary of an entry: the message text, or what kind of entry it is. */
export function summarize(entry: SessionEntry): string {
	if (entry.type === "message") {
		const message = entry.message as { role?: string; content?: unknown; command?: string };
		return `${message.role ?? "?"}: ${oneLine(textOf(message.content) || message.command || "", 70)}`;
	}
	switch (entry.type) {
		case "model_change":
			return `[model ${String(entry.provider)}/${String(entry.modelId)}]`;
		case "thinking_level_change":
			return `[thinking ${String(entry.thinkingLevel)}]`;
		case "compaction":
		case "branch_summary":
			return `[${entry.type.replace("_", " ")}] ${oneLine(String(entry.summary ?? ""), 60)}`;
		case "session_info":
			return `[name: ${String(entry.name ?? "")}]`;
		case "label":
			return `[label ${String(entry.label ?? "cleared")}]`;
		case "custom_message":
			return `${String(entry.customType)}: ${oneLine(textOf(entry.content), 60)}`;
		default:
			return `[${entry.type}]`;
	}
}

function textOf(content: unknown): string {
	if (typeof content === "string") return content;
	if (!Array.isArray(content)) return "";
	return content
		.map((part: { type?: string; text?: string }) => (part.type === "text" ? part.text : part.type === "image" ? "[image]" : ""))
		.filter(Boolean)
		.join(" ");
}

/**
 * The tree (`getTreeFlat`'s pre-order nodes) as lines. A conversation is mostly a chain, so only branch points
 * indent: children after the first start a new, indented line of descent. The leaf is marked, labels shown. At most
 * `max` lines; the rest is counted. No recursion, so a session of any depth renders.
 */
export function renderTree(nodes: SessionTreeFlatNode[], leafId: string | null, max: number): string[] {
	// How many children each node has, and how many roots there are (index -1).
	const children = new Map<number, number>();
	for (const node of nodes) children.set(node.parentIndex ?? -1, (children.get(node.parentIndex ?? -1) ?? 0) + 1);
	// Per node: the indentation of its group of siblings, and whether that group branches. Pre-order puts every
	// parent before its children, so one pass computes both.
	const indent: number[] = [];
	const branching: boolean[] = [];
	const lines: string[] = [];
	let hidden = 0;
	nodes.forEach((node, i) => {
		const parent = node.parentIndex;
		indent[i] = parent === null ? 0 : branching[parent]! ? indent[parent]! + 2 : indent[parent]!;
		branching[i] = (children.get(parent ?? -1) ?? 0) > 1;
		// Siblings are branches: each gets a marked line one step in, and its descendants continue under its text.
		const prefix = branching[i] ? `${"  ".repeat(indent[i]! + 1)}├ ` : "  ".repeat(indent[i]!);
		const label = typeof node.label === "string" ? ` [${node.label}]` : "";
		const mark = node.entry.id === leafId ? " ← leaf" : "";
		if (lines.length < max) lines.push(`${prefix}${summarize(node.entry)}${label}${mark}`);
		else hidden++;
	});
	if (hidden > 0) lines.push(`… ${hidden} more entries`);
	return lines;
}
