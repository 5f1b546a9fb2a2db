/**
 * pi 1.6.0's pure functions over an entry array: the leaf path, compaction-aware context entries, the projection
 * (context edits applied) and the context, plus the message shapes they build. The mirror and the drop-in answer
 * pi's context reads with these, locally, so they must give pi's results value for value; `test/pi-context.test.ts`
 * compares them with pi's own exports, and the conformance scenarios compare them with pi's SessionManager.
 *
 * Values are pi's: messages are returned as stored (the same objects), and new objects are built with pi's keys
 * in pi's order (`undefined` members included), so `deepStrictEqual` against pi holds, not only `JSON.stringify`.
 */

/** A session entry as pi holds it: a parsed line (or one pi built), keyed by `id`. */
export type Entry = any;
/** A message as pi holds it (an `AgentMessage`). */
export type Message = any;

/** pi's `SessionProjection`. */
export interface Projection {
	entries: { sourceEntry: Entry; messages: Message[] }[];
	messages: Message[];
	thinkingLevel: string;
	model: { provider: string; modelId: string } | null;
}

/** pi's `SessionContext`. */
export interface Context {
	messages: Message[];
	thinkingLevel: string;
	model: { provider: string; modelId: string } | null;
}

/** pi's `createBranchSummaryMessage` (`core/messages.js`). */
export function createBranchSummaryMessage(summary: string, fromId: string, timestamp: string): Message {
	return { role: "branchSummary", summary, fromId, timestamp: new Date(timestamp).getTime() };
}

/** pi's `createCompactionSummaryMessage`. */
export function createCompactionSummaryMessage(summary: string, tokensBefore: number, timestamp: string): Message {
	return { role: "compactionSummary", summary, tokensBefore, timestamp: new Date(timestamp).getTime() };
}

/** pi's `createCustomMessage`. */
export function createCustomMessage(customType: string, content: unknown, display: boolean, details: unknown, timestamp: string): Message {
	return { role: "custom", customType, content, display, details, timestamp: new Date(timestamp).getTime() };
}

function indexOf(entries: Entry[], byId?: Map<unknown, Entry>): Map<unknown, Entry> {
	if (byId) return byId;
	const index = new Map<unknown, Entry>();
	for (const entry of entries) index.set(entry.id, entry);
	return index;
}

/**
 * The path from the root to `leafId` (pi's `buildSessionPath`): `null` is the empty path, a missing or unknown
 * leaf falls back to the last entry.
 */
export function buildSessionPath(entries: Entry[], leafId?: string | null, byId?: Map<unknown, Entry>): Entry[] {
	return pathTo(indexOf(entries, byId), leafId, entries[entries.length - 1]);
}

/** `buildSessionPath` over an index, with `last` the entry an unknown leaf falls back to. */
export function pathTo(index: Map<unknown, Entry>, leafId: string | null | undefined, last: Entry | undefined): Entry[] {
	if (leafId === null) return [];
	let leaf: Entry | undefined;
	if (leafId) leaf = index.get(leafId);
	leaf ??= last;
	if (!leaf) return [];
	const path: Entry[] = [];
	let current: Entry | undefined = leaf;
	while (current) {
		path.push(current);
		current = current.parentId ? index.get(current.parentId) : undefined;
	}
	path.reverse();
	return path;
}

/**
 * The entries that take a path ending at `end` on to `leafId`, when every one of them is among `fileEntries`
 * from `from` on (appended since the path was known), in path order; undefined when the path to `leafId` is not
 * that path plus entries appended since. `end` undefined: the path was empty (a new root may follow).
 */
export function appendedTail(
	fileEntries: Entry[],
	from: number,
	leafId: string,
	byId: Map<unknown, Entry>,
	end: Entry | undefined,
): Entry[] | undefined {
	if (end !== undefined && byId.get(end.id) !== end) return undefined;
	const appended = new Set<Entry>();
	for (let i = from; i < fileEntries.length; i++) appended.add(fileEntries[i] as Entry);
	const tail: Entry[] = [];
	let current: Entry | undefined = byId.get(leafId);
	if (current === undefined) return undefined;
	while (current !== undefined && current !== end) {
		if (!appended.has(current) || tail.length >= appended.size) return undefined;
		tail.push(current);
		current = current.parentId ? byId.get(current.parentId) : undefined;
	}
	// The walk ended at the old end, or at a root when the old path was empty (a leaf reset, then a new root).
	if (current !== end) return undefined;
	return tail.reverse();
}

/** The thinking level and model the entries of a path leave in force, from `start` (pi's, over the whole path). */
export function contextSettings(
	path: Entry[],
	start: { thinkingLevel: string; model: Context["model"] } = { thinkingLevel: "off", model: null },
): { thinkingLevel: string; model: Context["model"] } {
	let { thinkingLevel, model } = start;
	for (const entry of path) {
		if (entry.type === "thinking_level_change") thinkingLevel = entry.thinkingLevel;
		else if (entry.type === "model_change") model = { provider: entry.provider, modelId: entry.modelId };
		else if (entry.type === "message" && entry.message.role === "assistant") {
			model = { provider: entry.message.provider, modelId: entry.message.model };
		}
	}
	return { thinkingLevel, model };
}

/** pi's `sessionEntryToContextMessages`: what one entry contributes to the model's context. */
export function sessionEntryToContextMessages(entry: Entry): Message[] {
	if (entry.type === "message") {
		const message = entry.message;
		// pi repairs null content of hand-edited or old files here, and only here.
		if (message.role === "system" && message.content == null) return [{ ...message, content: "" }];
		if ((message.role === "user" || message.role === "assistant" || message.role === "toolResult") && message.content == null) {
			return [{ ...message, content: [] }];
		}
		return [message];
	}
	if (entry.type === "custom_message") {
		return [createCustomMessage(entry.customType, entry.content ?? [], entry.display, entry.details, entry.timestamp)];
	}
	if (entry.type === "branch_summary" && entry.summary) {
		return [createBranchSummaryMessage(entry.summary, entry.fromId, entry.timestamp)];
	}
	if (entry.type === "compaction") {
		const summary = createCompactionSummaryMessage(entry.summary, entry.tokensBefore, entry.timestamp);
		return entry.systemMessage ? [entry.systemMessage, summary] : [summary];
	}
	return [];
}

/** pi's `buildContextEntries`: the leaf path, cut at its latest compaction (which then leads). */
export function buildContextEntries(entries: Entry[], leafId?: string | null, byId?: Map<unknown, Entry>): Entry[] {
	return contextEntriesOfPath(buildSessionPath(entries, leafId, byId));
}

/** `buildContextEntries` of a path already walked. */
export function contextEntriesOfPath(path: Entry[]): Entry[] {
	let compaction: Entry | null = null;
	for (const entry of path) if (entry.type === "compaction") compaction = entry;
	if (!compaction) return path;
	const compactionIndex = path.findIndex((entry) => entry.id === compaction.id);
	if (compactionIndex < 0) return path;
	const result: Entry[] = [compaction];
	let foundFirstKept = false;
	for (let i = 0; i < compactionIndex; i++) {
		const entry = path[i];
		if (entry.id === compaction.firstKeptEntryId) foundFirstKept = true;
		if (foundFirstKept && !(entry.type === "message" && entry.message.role === "system")) result.push(entry);
	}
	result.push(...path.slice(compactionIndex + 1));
	return result;
}

/** pi's `projectContextEntry`: an entry's messages with its latest context edit applied. */
export function projectContextEntry(entry: Entry, edit: Entry | undefined): Message[] {
	const messages = sessionEntryToContextMessages(entry);
	if (!edit) return messages;
	const replacement = edit.replacement;
	if (replacement === null) return [];
	return messages.map((message) => {
		if (message.role !== "user" && message.role !== "assistant" && message.role !== "toolResult" && message.role !== "custom") {
			return message;
		}
		const content =
			(message.role === "assistant" || message.role === "toolResult") && typeof replacement.content === "string"
				? [{ type: "text", text: replacement.content }]
				: replacement.content;
		return { ...message, content };
	});
}

/** pi's `buildSessionProjection`. */
export function buildSessionProjection(entries: Entry[], leafId?: string | null, byId?: Map<unknown, Entry>): Projection {
	return projectionOfPath(buildSessionPath(entries, leafId, byId));
}

/** `buildSessionProjection` of a path already walked (pi walks it twice; the result is the same). */
export function projectionOfPath(path: Entry[]): Projection {
	const { thinkingLevel, model } = contextSettings(path);
	const contextEntries = contextEntriesOfPath(path);
	const edits = contextEdits(contextEntries);
	const projected = contextEntries.map((sourceEntry, index) => ({ sourceEntry, messages: projectAt(sourceEntry, index, edits) }));
	return { entries: projected, messages: projected.flatMap((e) => e.messages), thinkingLevel, model };
}

/** The latest context edit of each target among the context entries. */
export function contextEdits(contextEntries: Entry[]): Map<unknown, Entry> {
	const edits = new Map<unknown, Entry>();
	for (const entry of contextEntries) if (entry.type === "context_edit") edits.set(entry.targetId, entry);
	return edits;
}

/** The messages of the context entry at `index`. */
export function projectAt(sourceEntry: Entry, index: number, edits: Map<unknown, Entry>): Message[] {
	// Only the newest compaction (which leads) contributes its checkpoint and summary.
	return sourceEntry.type === "compaction" && index > 0 ? [] : projectContextEntry(sourceEntry, edits.get(sourceEntry.id));
}

/** pi's `buildSessionContext`. */
export function buildSessionContext(entries: Entry[], leafId?: string | null, byId?: Map<unknown, Entry>): Context {
	const { messages, thinkingLevel, model } = buildSessionProjection(entries, leafId, byId);
	return { messages, thinkingLevel, model };
}

/** pi's `getLatestCompactionEntry`: the last compaction in array order, or null. */
export function getLatestCompactionEntry(entries: Entry[]): Entry | null {
	for (let i = entries.length - 1; i >= 0; i--) if (entries[i].type === "compaction") return entries[i];
	return null;
}

function contentText(content: unknown): string {
	if (typeof content === "string") return content;
	return (content as { type: string; text: string }[])
		.filter((block) => block.type === "text")
		.map((block) => block.text)
		.join("\n");
}

/**
 * pi-ai's `getCurrentSystemMessage`: every system message replayed into one (content appended, sections patched
 * by name, tools added and removed), or undefined when there is none. `appendCompaction` stores it as the
 * compaction's checkpoint.
 */
export function getCurrentSystemMessage(messages: Message[]): Message | undefined {
	const content: string[] = [];
	const sections = new Map<string, unknown>();
	const tools = new Map<string, unknown>();
	let timestamp: number | undefined;
	for (const message of messages) {
		if (message.role !== "system") continue;
		timestamp ??= message.timestamp;
		const text = contentText(message.content);
		if (text.length > 0) content.push(text);
		for (const [name, value] of Object.entries(message.sections ?? {})) {
			if (value === null) sections.delete(name);
			else sections.set(name, value);
		}
		for (const tool of message.toolsRemoved ?? []) tools.delete(tool.name);
		for (const tool of message.toolsAdded ?? []) tools.set(tool.name, tool);
	}
	if (timestamp === undefined && tools.size === 0) return undefined;
	return {
		role: "system",
		content: content.join("\n\n"),
		...(sections.size > 0 ? { sections: Object.fromEntries(sections) } : {}),
		...(tools.size > 0 ? { toolsAdded: [...tools.values()] } : {}),
		timestamp: timestamp ?? 0,
	};
}
