/**
 * A pi extension that talks to pi-sessiond: `/sessiond` lists and searches your sessions and shows the current
 * session's tree, live.
 *
 *   /sessiond                 pick one of this project's sessions (newest first) and switch to it
 *   /sessiond all             the same over every project's sessions
 *   /sessiond search WORDS    full-text search over this project's sessions; pick a hit to switch to its session
 *   /sessiond tree            show the part of the current session's tree around the leaf above the editor,
 *                             redrawn from a local mirror as the session grows (from its first message on)
 *   /sessiond hide            hide the tree
 *
 * The sidecar is started on first use (never from the factory: pi may load extensions in runs that start no session)
 * and shut down with the session. It finds the binary `PI_SESSIOND_BIN` names, else the one pi-sessiond-client's
 * platform package brought, else `pi-sessiond` on PATH.
 */

import type { ExtensionAPI, ExtensionCommandContext, ExtensionContext } from "@earendil-works/pi-coding-agent";
import {
	MirroredSession,
	type SessionEntry,
	SessiondBinaryNotFoundError,
	type SessiondClient,
	SessiondError,
	type SessionInfo,
	type SkeletonEntry,
	spawnSessiond,
} from "pi-sessiond-client";

const WIDGET = "pi-sessiond-tree";
/** pi's TUI shows at most 10 lines of a widget given as lines (MAX_WIDGET_LINES). */
const MAX_TREE_LINES = 10;
/** What the tree shows before pi wrote the session's first entry. */
const WAITING = "(the tree appears with the first message)";

export default function sessiondExtension(pi: ExtensionAPI): void {
	let client: Promise<SessiondClient> | undefined;
	// The current session as a skeleton mirror (ids, parents, types, one-line previews: a few hundred bytes an entry
	// however long the messages), opened with watch: pi's own appends arrive as deltas, are applied to the mirror,
	// and the tree is drawn from it again without a request.
	let shown: { mirror: MirroredSession; stop: () => void } | undefined;

	function sidecar(): Promise<SessiondClient> {
		client ??= spawnSessiond({ stderr: "ignore", clientInfo: { name: "pi-sessiond-extension-example" } }).catch((error: unknown) => {
			client = undefined; // let the next command try again (after the user installed the binary, say)
			throw error;
		});
		return client;
	}

	async function hideTree(ctx: ExtensionContext): Promise<void> {
		const current = shown;
		shown = undefined;
		if (ctx.hasUI) ctx.ui.setWidget(WIDGET, undefined);
		if (current) {
			current.stop();
			await current.mirror.close().catch(() => undefined);
		}
	}

	async function showTree(ctx: ExtensionContext): Promise<void> {
		const file = ctx.sessionManager.getSessionFile();
		if (!file) {
			ctx.ui.notify("This session runs in memory: there is no file to show the tree of.", "warning");
			return;
		}
		await hideTree(ctx);
		const sessiond = await sidecar();
		// Opening never writes, and pi-sessiond takes no lock until its first write: pi keeps writing the file as usual.
		// A new session's file does not exist until pi's first message (`create` lets the open start there): the watch
		// reports it when pi writes it (a `reset` carrying the skeletons), and every append after it.
		const remote = await sessiond.openSession(file, { watch: true, snapshot: "skeleton", create: true });
		const mirror = await MirroredSession.attach(remote);
		const draw = () => {
			if (shown?.mirror !== mirror) return;
			ctx.ui.setWidget(WIDGET, mirror.getEntryCount() === 0 ? [WAITING] : renderAroundLeaf(mirror, MAX_TREE_LINES));
		};
		shown = { mirror, stop: mirror.onUpdate(draw) };
		draw();
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

/**
 * A one-line summary of an entry: the message text, or what kind of entry it is. Takes an entry as stored or a
 * skeleton (`preview` in place of the body), so it draws pi's own SessionManager and a skeleton mirror alike.
 */
export function summarize(entry: SessionEntry | SkeletonEntry): string {
	if ("preview" in entry || "bytes" in entry) return summarizeSkeleton(entry as SkeletonEntry);
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

function summarizeSkeleton(entry: SkeletonEntry): string {
	const preview = typeof entry.preview === "string" ? entry.preview : "";
	switch (entry.type) {
		case "message":
			return `${typeof entry.role === "string" ? entry.role : "?"}: ${oneLine(preview.replace(/^\$ /, ""), 70)}`;
		case "model_change":
			return `[model ${preview.replace(/^model → /, "")}]`;
		case "thinking_level_change":
			return `[thinking ${preview.replace(/^thinking level → /, "")}]`;
		case "compaction":
		case "branch_summary":
			return `[${entry.type.replace("_", " ")}] ${oneLine(preview, 60)}`;
		case "session_info":
			return `[name: ${String(entry.name ?? "")}]`;
		case "label":
			return `[label ${String(entry.label ?? "cleared")}]`;
		case "custom_message":
			return `${String(entry.customType)}: ${oneLine(preview, 60)}`;
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

/** What `renderAroundLeaf` reads: a mirror's (or pi's own SessionManager's) entries, leaf, branch and labels. */
export interface TreeSource {
	getEntries(): (SessionEntry | SkeletonEntry)[];
	getBranch(): (SessionEntry | SkeletonEntry)[];
	getLeafId(): string | null;
	getLabel(id: string): string | undefined;
}

/**
 * The part of the tree around the leaf, as at most `max` lines: the last entries of the branch that ends at the
 * leaf (the leaf marked, labels shown), and at each entry where the conversation branched, how many other branches
 * leave it. Everything is read from `source`, locally: a redraw costs one pass over the entries and no request.
 */
export function renderAroundLeaf(source: TreeSource, max: number): string[] {
	const branch = source.getBranch();
	if (branch.length === 0) return [source.getEntries().length === 0 ? "(empty session)" : "(leaf before the first entry)"];
	const children = new Map<unknown, number>();
	for (const entry of source.getEntries()) children.set(entry.parentId, (children.get(entry.parentId) ?? 0) + 1);
	const leafId = source.getLeafId();
	const shownCount = branch.length > max ? max - 1 : branch.length;
	const lines = branch.length > max ? [`… ${branch.length - shownCount} earlier entries`] : [];
	for (const entry of branch.slice(branch.length - shownCount)) {
		const label = source.getLabel(entry.id as string);
		const others = (children.get(entry.id) ?? 0) - (entry.id === leafId ? 0 : 1);
		const fork = others > 0 ? `  ⎇ +${others} other branch${others > 1 ? "es" : ""}` : "";
		lines.push(`${summarize(entry)}${label ? ` [${label}]` : ""}${entry.id === leafId ? " ← leaf" : ""}${fork}`);
	}
	return lines;
}
