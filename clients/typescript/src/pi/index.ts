/**
 * `pi-sessiond-client/pi`: a stand-in for pi 1.6.0's `core/session-manager.js`, every export included, whose
 * `SessionManager` keeps persisted sessions in pi-sessiond (its write lock, its durability) and answers reads from
 * a mirror in this process. Types are pi's own, so it type-checks wherever pi's class is expected
 * (`createAgentSession({ sessionManager: SessionManager.create(cwd) })`).
 *
 * `pi-sessiond-client/register` makes the `pi` command load this module in place of pi's.
 */

import type * as pi from "@earendil-works/pi-coding-agent";
import * as context from "./context.js";
import * as files from "./files.js";
import * as paths from "./paths.js";
import { SessionManager as DropIn } from "./session-manager.js";

export type {
	BranchSummaryEntry,
	CompactionEntry,
	ContextEditableContent,
	ContextEditEntry,
	CustomEntry,
	CustomMessageEntry,
	FileEntry,
	ModelChangeEntry,
	NewSessionOptions,
	ProjectedSessionEntry,
	SessionContext,
	SessionEntry,
	SessionEntryBase,
	SessionHeader,
	SessionInfo,
	SessionInfoEntry,
	SessionMessageEntry,
	SessionProjection,
	SessionTreeNode,
	ThinkingLevelChangeEntry,
} from "@earendil-works/pi-coding-agent";

/** pi's `SessionManager`, on pi-sessiond. */
export const SessionManager = DropIn as unknown as typeof pi.SessionManager;
/** pi's `SessionManager` instance type. */
export type SessionManager = pi.SessionManager;

/** pi's `CURRENT_SESSION_VERSION`. */
export const CURRENT_SESSION_VERSION: typeof pi.CURRENT_SESSION_VERSION = files.CURRENT_SESSION_VERSION as 3;
/** pi's `assertValidSessionId`. */
export const assertValidSessionId: (id: string) => void = files.assertValidSessionId;
/** pi's `migrateSessionEntries`. */
export const migrateSessionEntries = files.migrateSessionEntries as typeof pi.migrateSessionEntries;
/** pi's `parseSessionEntries`. */
export const parseSessionEntries = files.parseSessionEntries as typeof pi.parseSessionEntries;
/** pi's `loadEntriesFromFile`. */
export const loadEntriesFromFile = files.loadEntriesFromFile as (filePath: string) => pi.FileEntry[];
/** pi's `findMostRecentSession`. */
export const findMostRecentSession: (sessionDir: string, cwd?: string) => string | null = files.findMostRecentSession;
/** pi's `getDefaultSessionDir`. */
export const getDefaultSessionDir: (cwd: string, agentDir?: string) => string = paths.getDefaultSessionDir;
/** pi's `getLatestCompactionEntry`. */
export const getLatestCompactionEntry = context.getLatestCompactionEntry as typeof pi.getLatestCompactionEntry;
/** pi's `sessionEntryToContextMessages`. */
export const sessionEntryToContextMessages = context.sessionEntryToContextMessages as typeof pi.sessionEntryToContextMessages;
/** pi's `buildContextEntries`. */
export const buildContextEntries = context.buildContextEntries as typeof pi.buildContextEntries;
/** pi's `projectContextEntry`. */
export const projectContextEntry = context.projectContextEntry as (entry: pi.SessionEntry, edit: pi.ContextEditEntry | undefined) => unknown[];
/** pi's `buildSessionProjection`. */
export const buildSessionProjection = context.buildSessionProjection as typeof pi.buildSessionProjection;
/** pi's `buildSessionContext`. */
export const buildSessionContext = context.buildSessionContext as typeof pi.buildSessionContext;

export { SessiondSessionError } from "./session-manager.js";
