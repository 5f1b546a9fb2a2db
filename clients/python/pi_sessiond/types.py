"""Types of the pi-sessiond protocol, generated from protocol/schema.json and protocol/methods.json.

Do not edit: regenerate with ``python -m pi_sessiond._generate > pi_sessiond/types.py`` (from
``clients/python``). Results and notifications are plain dicts; these TypedDicts describe them for type
checkers and readers. Entries keep members these types do not list (pi's entries are open-ended).
"""

from typing import Any, Dict, List, Literal, Optional, TypedDict, Union

PROTOCOL_VERSION = '1.0'
"""The protocol version of the contract these types were generated from."""

REQUEST_METHODS = (
    'initialize',
    'session/appendBatch',
    'session/appendCompaction',
    'session/appendContextEdit',
    'session/appendCustomEntry',
    'session/appendCustomMessageEntry',
    'session/appendLabelChange',
    'session/appendMessage',
    'session/appendModelChange',
    'session/appendSessionInfo',
    'session/appendThinkingLevelChange',
    'session/appendUsage',
    'session/branch',
    'session/branchWithSummary',
    'session/buildContextEntries',
    'session/buildSessionContext',
    'session/buildSessionProjection',
    'session/changesSince',
    'session/close',
    'session/continueRecent',
    'session/create',
    'session/createBranchedSession',
    'session/forkFrom',
    'session/getBranch',
    'session/getChildren',
    'session/getEntries',
    'session/getEntry',
    'session/getEntryCount',
    'session/getHeader',
    'session/getLabel',
    'session/getLeafEntry',
    'session/getLeafId',
    'session/getSessionName',
    'session/getState',
    'session/getTree',
    'session/getTreeFlat',
    'session/getWarnings',
    'session/inMemory',
    'session/lock',
    'session/lockHolder',
    'session/newSession',
    'session/open',
    'session/resetLeaf',
    'session/setSessionFile',
    'session/unwatch',
    'session/watch',
    'sessions/findById',
    'sessions/list',
    'sessions/listAll',
    'sessions/listDelta',
    'sessions/search',
    'sessions/searchPage',
    'sessions/unwatch',
    'sessions/watch',
    'shutdown',
)
"""Every request method of the contract."""

SERVER_NOTIFICATIONS = (
    '$/progress',
    'session/changed',
    'sessions/changed',
)
"""Every notification the contract says the server sends."""

ERROR_KINDS = {
    -32801: 'content_modified',
    -32800: 'request_cancelled',
    -32700: 'parse_error',
    -32603: 'internal_error',
    -32602: 'invalid_params',
    -32601: 'method_not_found',
    -32600: 'invalid_request',
    1001: 'session_not_found',
    1002: 'entry_not_found',
    1003: 'handle_not_found',
    1004: 'invalid_session_file',
    1005: 'invalid_session_id',
    1006: 'io_error',
    1007: 'session_locked',
    1008: 'invalid_entry',
    1009: 'session_poisoned',
    1020: 'catalog_unavailable',
    1021: 'read_only',
}
"""Error code → ``data.kind``, as the contract lists them."""


class AgentMessage(TypedDict, total=False):
    """A model-visible message (pi's AgentMessage: user, assistant, toolResult, system, bashExecution, custom,
    branchSummary, compactionSummary).
    """

    role: str


#: Any JSON value, as stored.
AnyValue = Any


class _AppendBatchParamsRequired(TypedDict):
    #: The handle.
    handle: str
    #: The ops, applied in order, each seeing what the ones before it did.
    ops: List['BatchOp']


class AppendBatchParams(_AppendBatchParamsRequired, total=False):
    """`session/appendBatch`: several mutations as one write."""

    #: Fail with ContentModified (writing nothing) unless the leaf is this id before the first op.
    expectedLeafId: Optional[str]


class AppendBatchResult(TypedDict):
    """`session/appendBatch` result."""

    #: What each op's method returns alone, in order: `{id}`, `{entry}` for appendUsage, `null` for branch and
    #: resetLeaf.
    results: List[Any]


class _AppendCompactionParamsRequired(TypedDict):
    #: The handle.
    handle: str
    #: The summary.
    summary: str
    #: Tokens before compaction.
    tokensBefore: Any


class AppendCompactionParams(_AppendCompactionParamsRequired, total=False):
    """`session/appendCompaction`."""

    #: Implementation data.
    details: Any
    #: Fail with ContentModified unless the leaf is this id.
    expectedLeafId: Optional[str]
    #: The first entry kept before the compaction; `null` keeps none (the entry's own id is stored).
    firstKeptEntryId: Optional[str]
    #: True for extension-made compactions.
    fromHook: Any
    #: The new entry's id, chosen by the host so it knows the entry before the answer comes (default: a new one,
    #: as pi makes them). Refused (`invalid_params`) when an entry of the session has this id.
    id: Optional[str]
    #: The complete post-compaction messages (the seed's checkpoint); `firstKeptEntryId` is written too.
    retainedTail: Optional[List[Any]]
    #: The checkpoint system message; default: pi's replay of the current system messages.
    systemMessage: Any
    #: The new entry's timestamp, as JavaScript's `toISOString` writes it (default: now).
    timestamp: Optional[str]
    #: Usage of the summarising call.
    usage: Any


class _AppendContextEditParamsRequired(TypedDict):
    #: The handle.
    handle: str
    #: Required, and may be `null`: `null` omits the target from context; `{content: string | array}` replaces its
    #: content.
    replacement: Any
    #: The entry to edit (on the active branch).
    targetId: str


class AppendContextEditParams(_AppendContextEditParamsRequired, total=False):
    """`session/appendContextEdit`."""

    #: Fail with ContentModified unless the leaf is this id.
    expectedLeafId: Optional[str]
    #: The new entry's id, chosen by the host so it knows the entry before the answer comes (default: a new one,
    #: as pi makes them). Refused (`invalid_params`) when an entry of the session has this id.
    id: Optional[str]
    #: The new entry's timestamp, as JavaScript's `toISOString` writes it (default: now).
    timestamp: Optional[str]


class _AppendCustomEntryParamsRequired(TypedDict):
    #: The extension's type name.
    customType: str
    #: The handle.
    handle: str


class AppendCustomEntryParams(_AppendCustomEntryParamsRequired, total=False):
    """`session/appendCustomEntry`."""

    #: The extension's data.
    data: Any
    #: Fail with ContentModified unless the leaf is this id.
    expectedLeafId: Optional[str]
    #: The new entry's id, chosen by the host so it knows the entry before the answer comes (default: a new one,
    #: as pi makes them). Refused (`invalid_params`) when an entry of the session has this id.
    id: Optional[str]
    #: The new entry's timestamp, as JavaScript's `toISOString` writes it (default: now).
    timestamp: Optional[str]


class _AppendCustomMessageEntryParamsRequired(TypedDict):
    #: A string or text/image blocks.
    content: Any
    #: The extension's type name.
    customType: str
    #: Whether the TUI shows it.
    display: Any
    #: The handle.
    handle: str


class AppendCustomMessageEntryParams(_AppendCustomMessageEntryParamsRequired, total=False):
    """`session/appendCustomMessageEntry`."""

    #: Extension data (not sent to the model).
    details: Any
    #: Fail with ContentModified unless the leaf is this id.
    expectedLeafId: Optional[str]
    #: The new entry's id, chosen by the host so it knows the entry before the answer comes (default: a new one,
    #: as pi makes them). Refused (`invalid_params`) when an entry of the session has this id.
    id: Optional[str]
    #: The new entry's timestamp, as JavaScript's `toISOString` writes it (default: now).
    timestamp: Optional[str]


class _AppendLabelChangeParamsRequired(TypedDict):
    #: The handle.
    handle: str
    #: The entry to label.
    targetId: str


class AppendLabelChangeParams(_AppendLabelChangeParamsRequired, total=False):
    """`session/appendLabelChange`."""

    #: Fail with ContentModified unless the leaf is this id.
    expectedLeafId: Optional[str]
    #: The new entry's id, chosen by the host so it knows the entry before the answer comes (default: a new one,
    #: as pi makes them). Refused (`invalid_params`) when an entry of the session has this id.
    id: Optional[str]
    #: The label; missing or empty clears.
    label: Any
    #: The new entry's timestamp, as JavaScript's `toISOString` writes it (default: now).
    timestamp: Optional[str]


class _AppendMessageParamsRequired(TypedDict):
    #: The handle.
    handle: str
    #: The message (pi's AgentMessage: an object with a `role`).
    message: Any


class AppendMessageParams(_AppendMessageParamsRequired, total=False):
    """`session/appendMessage`."""

    #: Fail with ContentModified unless the leaf is this id.
    expectedLeafId: Optional[str]
    #: The new entry's id, chosen by the host so it knows the entry before the answer comes (default: a new one,
    #: as pi makes them). Refused (`invalid_params`) when an entry of the session has this id.
    id: Optional[str]
    #: The new entry's timestamp, as JavaScript's `toISOString` writes it (default: now).
    timestamp: Optional[str]


class _AppendModelChangeParamsRequired(TypedDict):
    #: The handle.
    handle: str
    #: Model id.
    modelId: str
    #: Provider.
    provider: str


class AppendModelChangeParams(_AppendModelChangeParamsRequired, total=False):
    """`session/appendModelChange`."""

    #: Fail with ContentModified unless the leaf is this id.
    expectedLeafId: Optional[str]
    #: The new entry's id, chosen by the host so it knows the entry before the answer comes (default: a new one,
    #: as pi makes them). Refused (`invalid_params`) when an entry of the session has this id.
    id: Optional[str]
    #: The new entry's timestamp, as JavaScript's `toISOString` writes it (default: now).
    timestamp: Optional[str]


class _AppendSessionInfoParamsRequired(TypedDict):
    #: The handle.
    handle: str
    #: The name (line breaks become spaces, ends trimmed; empty clears).
    name: str


class AppendSessionInfoParams(_AppendSessionInfoParamsRequired, total=False):
    """`session/appendSessionInfo`."""

    #: Fail with ContentModified unless the leaf is this id.
    expectedLeafId: Optional[str]
    #: The new entry's id, chosen by the host so it knows the entry before the answer comes (default: a new one,
    #: as pi makes them). Refused (`invalid_params`) when an entry of the session has this id.
    id: Optional[str]
    #: The new entry's timestamp, as JavaScript's `toISOString` writes it (default: now).
    timestamp: Optional[str]


class _AppendThinkingLevelChangeParamsRequired(TypedDict):
    #: The handle.
    handle: str
    #: The thinking level (`off`, `low`, `high`, …).
    thinkingLevel: str


class AppendThinkingLevelChangeParams(_AppendThinkingLevelChangeParamsRequired, total=False):
    """`session/appendThinkingLevelChange`."""

    #: Fail with ContentModified unless the leaf is this id.
    expectedLeafId: Optional[str]
    #: The new entry's id, chosen by the host so it knows the entry before the answer comes (default: a new one,
    #: as pi makes them). Refused (`invalid_params`) when an entry of the session has this id.
    id: Optional[str]
    #: The new entry's timestamp, as JavaScript's `toISOString` writes it (default: now).
    timestamp: Optional[str]


class _AppendUsageParamsRequired(TypedDict):
    #: The handle.
    handle: str
    #: Usage category, e.g. `cache_warm`.
    kind: str
    #: Model.
    model: str
    #: Provider.
    provider: str
    #: pi's Usage object.
    usage: Any


class AppendUsageParams(_AppendUsageParamsRequired, total=False):
    """`session/appendUsage`."""

    #: Fail with ContentModified unless the leaf is this id.
    expectedLeafId: Optional[str]
    #: The new entry's id, chosen by the host so it knows the entry before the answer comes (default: a new one,
    #: as pi makes them). Refused (`invalid_params`) when an entry of the session has this id.
    id: Optional[str]
    #: A qualifier (omitted when empty).
    note: Optional[str]
    #: The new entry's timestamp, as JavaScript's `toISOString` writes it (default: now).
    timestamp: Optional[str]


class _BatchOpRequired(TypedDict):
    #: Any `session/append…` method, `session/branch`, `session/resetLeaf` or `session/branchWithSummary`.
    method: str


class BatchOp(_BatchOpRequired, total=False):
    """One op of `session/appendBatch`."""

    #: That method's params without `handle` (and without `expectedLeafId`: give it on the batch). `targetId`
    #: (appendLabelChange, appendContextEdit) and `entryId` (branch, branchWithSummary) may be `{"op": n}`: the
    #: entry op `n` of this batch (an earlier one) appends.
    params: Optional[Dict[str, Any]]


class _BranchParamsRequired(TypedDict):
    #: The entry to continue from.
    entryId: str
    #: The handle.
    handle: str


class BranchParams(_BranchParamsRequired, total=False):
    """`session/branch`."""

    #: Fail with ContentModified unless the leaf is this id.
    expectedLeafId: Optional[str]


class _BranchPathParamsRequired(TypedDict):
    #: The handle.
    handle: str


class BranchPathParams(_BranchPathParamsRequired, total=False):
    """`session/getBranch`."""

    #: Where the path ends (default: the leaf).
    fromId: Optional[str]


class _BranchWithSummaryParamsRequired(TypedDict):
    #: The handle.
    handle: str
    #: The summary of the abandoned branch.
    summary: str


class BranchWithSummaryParams(_BranchWithSummaryParamsRequired, total=False):
    """`session/branchWithSummary`."""

    #: Implementation data.
    details: Any
    #: The entry to continue from (`null`: a new root).
    entryId: Optional[str]
    #: Fail with ContentModified unless the leaf is this id.
    expectedLeafId: Optional[str]
    #: True for extension-made summaries.
    fromHook: Any
    #: The new entry's id, chosen by the host so it knows the entry before the answer comes (default: a new one,
    #: as pi makes them). Refused (`invalid_params`) when an entry of the session has this id.
    id: Optional[str]
    #: The new entry's timestamp, as JavaScript's `toISOString` writes it (default: now).
    timestamp: Optional[str]
    #: Usage of the summarising call.
    usage: Any


class CancelParams(TypedDict):
    """`$/cancelRequest` params (client → server)."""

    #: The id of the request to cancel.
    id: Any


class Capabilities(TypedDict):
    """Server capabilities."""

    #: The framing in use: `jsonl` or `lsp`.
    framing: str
    #: Every request method the server answers.
    methods: List[str]
    #: Every notification the server sends.
    notifications: List[str]
    #: The pi version whose session format and behaviour are implemented.
    piCompatibility: str


class ChangeAppend(TypedDict):
    """Entries were added at the end of the file, in file order (every append method, `branchWithSummary`, and
    what another process appended), at the handle's detail. The leaf is the notification's `leafId`.
    """

    #: The new entries.
    entries: List['EntryAtDetail']
    kind: Literal['append']


class _ChangeLeafRequired(TypedDict):
    kind: Literal['leaf']


class ChangeLeaf(_ChangeLeafRequired, total=False):
    """The leaf moved (`branch`, `resetLeaf`; sent even when it did not move)."""

    #: The new leaf.
    leafId: Optional['AnyValue']


class _ChangeRebindRequired(TypedDict):
    kind: Literal['rebind']
    #: What `session/getState` now returns.
    state: 'SessionState'


class ChangeRebind(_ChangeRebindRequired, total=False):
    """The handle now holds another session (`newSession`, `setSessionFile`, `createBranchedSession`)."""

    #: At detail `skeleton` or `full`: every entry of the session now held. Absent at detail `none`, and
    #: when the entries could not be read (the file changed meanwhile): take one with `session/changesSince`.
    snapshot: Optional['Snapshot']


class _ChangeResetRequired(TypedDict):
    kind: Literal['reset']
    #: What `session/getState` now returns.
    state: 'SessionState'


class ChangeReset(_ChangeResetRequired, total=False):
    """The file was truncated, rewritten or replaced by another process, or appeared where the handle had
    nothing on disk yet (pi writes a new session's file at its first message), and was read again from
    scratch.
    """

    #: At detail `skeleton` or `full`: every entry as now read (absent as for `rebind`).
    snapshot: Optional['Snapshot']


class ChangeDeleted(TypedDict):
    """The file was deleted by another process. The session stays open; the next write puts the file back,
    header and all.
    """

    kind: Literal['deleted']


#: A change: what a mirror of the session applies to stay equal to it (see `protocol/README.md`).
Change = Union['ChangeAppend', 'ChangeLeaf', 'ChangeRebind', 'ChangeReset', 'ChangeDeleted']


class ChangesSinceParams(TypedDict):
    """`session/changesSince`."""

    #: The handle.
    handle: str
    #: The `seq` of the last change the host applied.
    seq: int


class ChangesSinceResult(TypedDict, total=False):
    """`session/changesSince` result: either `changes` or `state` and `snapshot`."""

    #: Every `session/changed` (its params, as sent) with a `seq` above the one asked, in order, when the server
    #: still holds them all.
    changes: Optional[List['SessionChanged']]
    #: ...and every entry, at the handle's detail (`full` for a handle at detail `none`).
    snapshot: Optional['Snapshot']
    #: Otherwise: the state now...
    state: Optional['SessionState']


class ChildrenParams(TypedDict):
    """`session/getChildren`."""

    #: The handle.
    handle: str
    #: The parent id.
    parentId: str


class _ClientInfoRequired(TypedDict):
    #: Name.
    name: str


class ClientInfo(_ClientInfoRequired, total=False):
    """A name and version."""

    #: Version.
    version: Optional[str]


class _ContinueRecentParamsRequired(TypedDict):
    #: The working directory.
    cwd: str


class ContinueRecentParams(_ContinueRecentParamsRequired, total=False):
    """`session/continueRecent`: the most recent session in the directory, or a new one."""

    #: A handle of the host's choosing (any non-empty string no open session has); default: the server picks
    #: `hN`. Requests naming it may be sent right behind this one: they wait for the open.
    handle: Optional[str]
    #: The session directory (default: pi's directory for `cwd`).
    sessionDir: Optional[str]
    #: Also return the session's entries (`snapshot: {seq, entries}` in the result), and set the detail of this
    #: handle's later `session/changed` entries: `none` (default: no snapshot; notifications carry entries as
    #: stored), `skeleton` (a few fields, a preview and the size of each entry), `full` (entries as stored).
    snapshot: Optional['Detail']


class _CreateBranchedSessionParamsRequired(TypedDict):
    #: The handle.
    handle: str
    #: The last entry of the path to keep.
    leafId: str


class CreateBranchedSessionParams(_CreateBranchedSessionParamsRequired, total=False):
    """`session/createBranchedSession`."""

    #: Fail with ContentModified unless the leaf is this id.
    expectedLeafId: Optional[str]
    #: As on the opening methods: return the new session's snapshot, and set the handle's detail from now on
    #: (default: keep it).
    snapshot: Optional['Detail']


class _CreateParamsRequired(TypedDict):
    #: The working directory (stored in the header; picks the default session directory).
    cwd: str


class CreateParams(_CreateParamsRequired, total=False):
    """`session/create`: a new session for `cwd` (written once it has a user or assistant message)."""

    #: A handle of the host's choosing (any non-empty string no open session has); default: the server picks
    #: `hN`. Requests naming it may be sent right behind this one: they wait for the open.
    handle: Optional[str]
    #: A session id (letters, digits, `.`, `_`, `-`; default: a UUID v7).
    id: Optional[str]
    #: The header's `parentSession`.
    parentSession: Optional[str]
    #: Where to put the file (default: pi's directory for `cwd`).
    sessionDir: Optional[str]
    #: Also return the session's entries (`snapshot: {seq, entries}` in the result), and set the detail of this
    #: handle's later `session/changed` entries: `none` (default: no snapshot; notifications carry entries as
    #: stored), `skeleton` (a few fields, a preview and the size of each entry), `full` (entries as stored).
    snapshot: Optional['Detail']


#: How much of each entry a result or a notification carries.
Detail = Union[Literal['none'], Literal['skeleton'], Literal['full']]


class _EntriesParamsRequired(TypedDict):
    #: The handle.
    handle: str


class EntriesParams(_EntriesParamsRequired, total=False):
    """`session/getEntries`: the entries with these ids, or a page of entries in file order."""

    #: `full` (default: entries as stored) or `skeleton`.
    detail: Optional['Detail']
    #: These entries, in this order (`null` for an id no entry has; an id held by several entries gives the last,
    #: as `getEntry`). Not with `offset` or `limit`.
    ids: Optional[List[str]]
    #: With detail `full`: leave in the file every string whose stored literal (quotes included) is longer than
    #: this many bytes, so a host reads only the bodies it touches. Each entry is then a `LazyEntry`: `{entry,
    #: line?, lazy?}`, the entry as stored with those strings `null`, the line's `[offset, length]` in the file,
    #: and `[path, offset, length]` for each string left out (path: keys and array indices from the entry).
    #: With `offset`/`limit` only.
    lazyOver: Optional[int]
    #: At most this many.
    limit: Optional[int]
    #: Entries to skip.
    offset: Optional[int]


#: An entry as stored (detail none or full), a skeleton entry (detail skeleton), or an entry with its long strings left
#: in the file (getEntries with lazyOver).
EntryAtDetail = Union['SessionEntry', 'SkeletonEntry', 'LazyEntry']


class EntryIdParams(TypedDict):
    """Params naming an entry."""

    #: The handle.
    handle: str
    #: The entry id.
    id: str


class EntryResult(TypedDict):
    """`session/appendUsage` result."""

    #: The appended entry.
    entry: 'SessionEntry'


class _FindByIdParamsRequired(TypedDict):
    #: The working directory.
    cwd: str
    #: The exact session id.
    id: str


class FindByIdParams(_FindByIdParamsRequired, total=False):
    """`sessions/findById`."""

    #: The session directory (default: pi's directory for `cwd`).
    sessionDir: Optional[str]


class FindResult(TypedDict, total=False):
    """`sessions/findById` result."""

    #: With `--catalog`: the machine the file is on (absent without a catalog).
    machine: Optional[str]
    #: The file, or `null`.
    path: Optional[str]


class _ForkFromParamsRequired(TypedDict):
    #: The session to copy.
    sourcePath: str
    #: The new session's cwd.
    targetCwd: str


class ForkFromParams(_ForkFromParamsRequired, total=False):
    """`session/forkFrom`: a new session in `targetCwd` holding another session's whole history."""

    #: A handle of the host's choosing (any non-empty string no open session has); default: the server picks
    #: `hN`. Requests naming it may be sent right behind this one: they wait for the open.
    handle: Optional[str]
    #: A session id.
    id: Optional[str]
    #: Where to put it (default: pi's directory for `targetCwd`).
    sessionDir: Optional[str]
    #: Also return the session's entries (`snapshot: {seq, entries}` in the result), and set the detail of this
    #: handle's later `session/changed` entries: `none` (default: no snapshot; notifications carry entries as
    #: stored), `skeleton` (a few fields, a preview and the size of each entry), `full` (entries as stored).
    snapshot: Optional['Detail']


class _GetStateParamsRequired(TypedDict):
    #: The handle.
    handle: str


class GetStateParams(_GetStateParamsRequired, total=False):
    """`session/getState`."""

    #: Also return the entries at this detail (`snapshot: {seq, entries}`); the handle's own detail is unchanged.
    snapshot: Optional['Detail']


class HandleParams(TypedDict):
    """Params naming an open session."""

    #: The handle `session/*` open methods returned.
    handle: str


class IdResult(TypedDict):
    """The id of an appended entry."""

    #: The new entry's id.
    id: str


class InMemoryParams(TypedDict, total=False):
    """`session/inMemory`: a session that never touches the disk."""

    #: The working directory (default: the server's).
    cwd: Optional[str]
    #: Entries to start from (a header among them is adopted; older versions are migrated).
    entries: Optional[List[Any]]
    #: A handle of the host's choosing (any non-empty string no open session has); default: the server picks
    #: `hN`. Requests naming it may be sent right behind this one: they wait for the open.
    handle: Optional[str]
    #: A session id.
    id: Optional[str]
    #: Also return the session's entries (`snapshot: {seq, entries}` in the result), and set the detail of this
    #: handle's later `session/changed` entries: `none` (default: no snapshot; notifications carry entries as
    #: stored), `skeleton` (a few fields, a preview and the size of each entry), `full` (entries as stored).
    snapshot: Optional['Detail']


class InitializeParams(TypedDict, total=False):
    """`initialize` params (all optional)."""

    #: The host's capabilities. One is read: `skeletons: false` says the host never asks for entries at skeleton
    #: detail (pi's drop-in), so the sessions it opens make none (a third of a cold open's work, and most of
    #: what an open session holds beside its index), nor do the records it keeps for later opens (a host that
    #: reads skeletons reads such a file again and keeps its own); a skeleton snapshot asked all the same reads
    #: each entry's line again. Other members are accepted and ignored.
    capabilities: Any
    #: The host's name and version.
    clientInfo: Optional['ClientInfo']
    #: The protocol version the host speaks.
    protocolVersion: Optional[str]


class InitializeResult(TypedDict):
    """`initialize` result."""

    #: What the server offers.
    capabilities: 'Capabilities'
    #: The protocol version this server speaks.
    protocolVersion: str
    #: `{name: "pi-sessiond", version}`.
    serverInfo: 'ServerInfo'


class _LazyEntryRequired(TypedDict):
    entry: 'SessionEntry'


class LazyEntry(_LazyEntryRequired, total=False):
    """An entry as stored, except that each string whose stored literal is longer than lazyOver bytes is null; lazy
    says where each one is. Entries the file does not hold exactly as they are read (migrated, re-chained or not
    yet written) and entries whose objects repeat a key or escape one come whole, without line and lazy.
    """

    #: [path, offset, length] per string left out: path is the keys (strings) and array indices (integers) from the
    #: entry to the string; offset and length place its literal, quotes included, in the file.
    lazy: List[List[Any]]
    #: [offset, length] of the entry's JSON text in the session file (surrounding white space excluded): a host reading
    #: a string checks that the line is still there.
    line: List[int]


class ListAllParams(TypedDict, total=False):
    """`sessions/listAll`."""

    #: `false` leaves `allMessagesText` out (default `true`, pi's exact result).
    includeAllMessagesText: Optional[bool]
    #: Send `$/progress` with this token while loading.
    progressToken: Optional['ProgressToken']
    #: A directory to list flat (default: every project directory under the sessions root).
    sessionDir: Optional[str]


class ListDeltaParams(TypedDict, total=False):
    """`sessions/listDelta`."""

    #: The working directory: with it, the listing is `sessions/list`'s; without, `sessions/listAll`'s.
    cwd: Optional[str]
    #: `false` leaves `allMessagesText` out (default `true`, pi's exact result).
    includeAllMessagesText: Optional[bool]
    #: Send `$/progress` with this token while loading.
    progressToken: Optional['ProgressToken']
    #: The session directory, as `sessions/list` or `sessions/listAll` take it.
    sessionDir: Optional[str]
    #: The `token` of an earlier `sessions/listDelta` answer that the host still holds. An unknown or expired
    #: token (this server keeps the last few) only means every entry comes in full.
    since: Optional[str]


class _ListParamsRequired(TypedDict):
    #: The working directory.
    cwd: str


class ListParams(_ListParamsRequired, total=False):
    """`sessions/list`."""

    #: `false` leaves `allMessagesText` out (default `true`, pi's exact result). It holds every user and
    #: assistant text of every session, most of a listing's size; `sessions/search` searches without it.
    includeAllMessagesText: Optional[bool]
    #: Send `$/progress` with this token while loading.
    progressToken: Optional['ProgressToken']
    #: The session directory (default: pi's directory for `cwd`).
    sessionDir: Optional[str]


class ListingDelta(TypedDict):
    #: The listing, in order: an entry is a SessionInfo, or the index of an identical entry in the listing `since`
    #: named.
    sessions: List[Union['SessionInfo', int]]
    #: Names this listing: pass it as `since` next time.
    token: str


class LockHolderParams(TypedDict):
    """`session/lockHolder`: who else writes a session file."""

    #: The session file.
    path: str


class LockHolderResult(TypedDict, total=False):
    """`session/lockHolder` result."""

    #: The process holding the file's write lock: a pi-sessiond writing it (its parent is the program it writes
    #: for). `null`: nobody, this server itself, no such regular file, or a system that cannot say (only Linux
    #: names holders).
    pid: Optional[int]


class _NewSessionParamsRequired(TypedDict):
    #: The handle.
    handle: str


class NewSessionParams(_NewSessionParamsRequired, total=False):
    """`session/newSession`: replace the handle's session with a new, empty one."""

    #: A session id.
    id: Optional[str]
    #: The header's `parentSession`.
    parentSession: Optional[str]
    #: As on the opening methods: return the new session's snapshot, and set the handle's detail from now on
    #: (default: keep it).
    snapshot: Optional['Detail']


#: Params of methods that take nothing.
NoParams = Dict[str, Any]


#: The JSON `null`, as a result type.
Null = None


class _OpenParamsRequired(TypedDict):
    #: The session file.
    path: str


class OpenParams(_OpenParamsRequired, total=False):
    """`session/open`: open a session file (a missing file starts a new session at that path)."""

    #: Use this cwd instead of the header's; for a file open already, the handle's cwd becomes this one.
    cwdOverride: Optional[str]
    #: A handle of the host's choosing (any non-empty string no open session has); default: the server picks
    #: `hN`. Requests naming it may be sent right behind this one: they wait for the open.
    handle: Optional[str]
    #: Open this machine's session from the team catalog (`--catalog`) instead of a local file: `path` is the
    #: file's path on that machine, the session is as last pushed, and it is read-only (mutations fail with
    #: `read_only`).
    machine: Optional[str]
    #: Apply pi's load-time repairs now, as pi's own open does: a 0-byte file gets its header, a v1/v2 file is
    #: rewritten migrated, a missing final newline is added. Without it (the default) opening never writes and
    #: they are applied just before the first write. The open fails if they cannot be written (another
    #: pi-sessiond holding the file's write lock: `session_locked`).
    repair: Optional[bool]
    #: Directory for sessions made from this one (default: the file's directory).
    sessionDir: Optional[str]
    #: Also return the session's entries (`snapshot: {seq, entries}` in the result), and set the detail of this
    #: handle's later `session/changed` entries: `none` (default: no snapshot; notifications carry entries as
    #: stored), `skeleton` (a few fields, a preview and the size of each entry), `full` (entries as stored).
    snapshot: Optional['Detail']
    #: Follow appends other processes (pi itself) make to the file, as `session/changed` with `origin:
    #: "external"`.
    watch: Optional[bool]


class PathResult(TypedDict, total=False):
    """`session/createBranchedSession` result."""

    #: The new file (`null` in memory).
    path: Optional[str]
    #: With `snapshot` `skeleton` or `full`: the new session's entries.
    snapshot: Optional['Snapshot']


class Progress(TypedDict):
    """`$/progress` params."""

    #: The token from the request.
    token: 'ProgressToken'
    #: Where it is.
    value: 'ProgressValue'


#: `ProgressValue.kind`.
ProgressKind = Union[Literal['begin'], Literal['report'], Literal['end']]


#: `ProgressValue.stage`.
ProgressStage = Union[Literal['listing'], Literal['indexing']]


#: A progress token: a string or an integer (LSP's `ProgressToken`).
ProgressToken = Union[int, str]


class _ProgressValueRequired(TypedDict):
    #: Where in the sequence: one `begin` per stage, `report`s, then one `end` for the request.
    kind: 'ProgressKind'
    #: Files done so far in this stage.
    loaded: int
    #: Files in this stage.
    total: int


class ProgressValue(_ProgressValueRequired, total=False):
    """Progress of a long read."""

    #: For `sessions/search`: which stage; each starts with its own `begin`, and `end` carries the last one's
    #: counts.
    stage: Optional['ProgressStage']


class _ResetLeafParamsRequired(TypedDict):
    #: The handle.
    handle: str


class ResetLeafParams(_ResetLeafParamsRequired, total=False):
    """`session/resetLeaf`."""

    #: Fail with ContentModified unless the leaf is this id.
    expectedLeafId: Optional[str]


class _SearchHitRequired(TypedDict):
    #: The matching entry's id as stored (a string in files pi wrote); null when the session itself matched (role
    #: `session`).
    entryId: Optional[Union[str, float]]
    #: The session file.
    path: str
    #: What matched: a message of that role, a session name or label entry, a compaction or branch summary, or the
    #: session itself (its name, id or cwd).
    role: Literal['user', 'assistant', 'toolResult', 'custom', 'bashExecution', 'name', 'label', 'summary', 'session']
    #: Relevance: higher is better; results come best first, then newest.
    score: float
    #: The session's id (the header's).
    sessionId: Any
    #: The text around the match, on one line.
    snippet: str
    #: ISO 8601: a message's own timestamp (as pi's listing uses it; the entry's when the message has none), another
    #: entry's timestamp, or the session's last activity for session hits.
    timestamp: Optional[str]


class SearchHit(_SearchHitRequired, total=False):
    #: With `--catalog`: the machine that pushed the session.
    machine: str


class SearchPage(TypedDict):
    """`sessions/searchPage` result."""

    #: The results from `offset` on, at most `limit`, best first (as `sessions/search` returns them).
    hits: List['SearchHit']
    #: The offset of the first of `hits`.
    offset: int
    #: How many sessions those results are in.
    sessions: int
    #: How many results the query has in all (every matching entry, and every session matched by its own name,
    #: id or cwd), counted whatever `offset` and `limit` are.
    total: int


class _SearchParamsRequired(TypedDict):
    #: pi's `/resume` query: space-separated words (each must match, as a substring of an entry's text or of the
    #: session's name, id or cwd; a word may also match the name or cwd fuzzily), `"exact phrases"`, or
    #: `re:<regex>` (case-insensitive). At most 4096 bytes and 64 words (each word of a phrase counts); a longer
    #: query is an `invalid_params` error.
    query: str


class SearchParams(_SearchParamsRequired, total=False):
    """`sessions/search`."""

    #: Search this project's sessions only (as `sessions/list` finds them); default: every session.
    cwd: Optional[str]
    #: At most this many results (default 50).
    limit: Optional[int]
    #: Skip this many of the best results first (default 0): the next page starts at the previous page's offset
    #: plus its limit. Results are in a total order (relevance, time, path, place in the file), so the pages of
    #: unchanged sessions neither repeat nor skip a result.
    offset: Optional[int]
    #: Send `$/progress` with this token while the catalog and the search index catch up (`stage` says which).
    progressToken: Optional['ProgressToken']
    #: Only these roles: `user`, `assistant`, `toolResult`, `custom`, `bashExecution`, `name`, `label`,
    #: `summary`, or `session` (a session whose name, id or cwd matches).
    roles: Optional[List[str]]
    #: With `cwd`: the session directory to use instead of pi's directory for it. Without: search only this
    #: directory (as `sessions/listAll` with it).
    sessionDir: Optional[str]


class ServerInfo(TypedDict):
    """The server's name and version."""

    #: `pi-sessiond`.
    name: str
    #: The crate version.
    version: str


class _SessionChangedRequired(TypedDict):
    #: What changed.
    change: 'Change'
    #: The handle.
    handle: str
    #: 1 for the first change after open, +1 per change on this handle (across rebinds).
    seq: int
    #: The session id after the change.
    sessionId: 'AnyValue'


class SessionChanged(_SessionChangedRequired, total=False):
    """`session/changed`: sent after every successful mutation, before its response."""

    #: The leaf after the change.
    leafId: Optional['AnyValue']
    #: `external` when another process changed the file (a watched handle, or a check before a write); absent
    #: for the handle's own mutations.
    origin: Optional[str]


class SessionContextModel(TypedDict, total=False):
    modelId: Any
    provider: Any


class _SessionContextRequired(TypedDict):
    messages: List['AgentMessage']
    model: Optional['SessionContextModel']


class SessionContext(_SessionContextRequired, total=False):
    thinkingLevel: str


class _SessionEntryRequired(TypedDict):
    type: str


class SessionEntry(_SessionEntryRequired, total=False):
    """A session entry exactly as stored (pi's SessionEntry); unknown members are kept."""

    #: As stored: a string in files pi wrote (a hand-written file may hold a number, which pi keeps).
    id: Any
    #: As stored: a string, or null for a root, in files pi wrote (a hand-written file may hold a number).
    parentId: Any
    #: As stored: an ISO 8601 string in files pi wrote (a hand-written file may hold a number).
    timestamp: Any


class _SessionHeaderRequired(TypedDict):
    id: str
    type: Literal['session']


class SessionHeader(_SessionHeaderRequired, total=False):
    """The header line (pi's SessionHeader); unknown members are kept."""

    cwd: str
    parentSession: str
    timestamp: str
    version: float


class _SessionInfoRequired(TypedDict):
    created: Optional[str]
    cwd: str
    firstMessage: str
    #: The header's id (a string in valid files).
    id: Any
    messageCount: int
    modified: Optional[str]
    path: str


class SessionInfo(_SessionInfoRequired, total=False):
    #: Present unless the request set includeAllMessagesText: false.
    allMessagesText: str
    #: With `--catalog`: the machine that pushed the session.
    machine: str
    name: str
    parentSessionPath: str


SessionInfoList = List['SessionInfo']


class SessionProjectionEntriesItem(TypedDict):
    messages: List['AgentMessage']
    sourceEntry: 'SessionEntry'


class SessionProjectionModel(TypedDict, total=False):
    modelId: Any
    provider: Any


class _SessionProjectionRequired(TypedDict):
    entries: List['SessionProjectionEntriesItem']
    messages: List['AgentMessage']
    model: Optional['SessionProjectionModel']


class SessionProjection(_SessionProjectionRequired, total=False):
    thinkingLevel: str


class _SessionStateRequired(TypedDict):
    #: The working directory.
    cwd: str
    #: The handle's detail: what its `session/changed` entries are (`skeleton`: skeleton entries; `none` and
    #: `full`: entries as stored) and whether `rebind` and `reset` carry a snapshot (`skeleton`, `full`).
    detail: 'Detail'
    #: Distinct entry ids.
    entryCount: int
    #: Opaque handle for later calls.
    handle: str
    #: False for in-memory sessions.
    isPersisted: bool
    #: The `seq` of the last `session/changed` this state includes: notifications with a higher `seq` happened
    #: after it (a host resynchronising after a gap applies only those).
    seq: int
    #: The directory new sessions go to (`""` in memory).
    sessionDir: str
    #: The session id (the header's).
    sessionId: 'AnyValue'


class SessionState(_SessionStateRequired, total=False):
    """An open session's state."""

    #: The header.
    header: Optional['SessionHeader']
    #: The leaf (`null` before the first entry or after `resetLeaf`).
    leafId: Optional['AnyValue']
    #: The machine whose session this is, when it was opened read-only from the team catalog (absent otherwise;
    #: `session/open` and `session/getState` give it).
    machine: Optional[str]
    #: The file (`null` in memory).
    sessionFile: Optional[str]
    #: The session name, if set. Also null when the latest `session_info`'s name is not a string: pi's
    #: `getSessionName` throws on that file (and so does `session/getSessionName`, naming the entry), but the
    #: session opens.
    sessionName: Optional['AnyValue']
    #: With `snapshot` `skeleton` or `full` on the request: the entries this state holds, at that detail.
    snapshot: Optional['Snapshot']


#: Root nodes, in file order; children sorted by timestamp (pi's getTree).
SessionTree = List['SessionTreeNode']


class _SessionTreeFlatItemRequired(TypedDict):
    #: 0 for roots.
    depth: int
    #: Position of the parent node in the whole list (also when paging); null for a root.
    parentIndex: Optional[int]


class SessionTreeFlatItem(_SessionTreeFlatItemRequired, total=False):
    entry: 'EntryAtDetail'
    #: With detail none, instead of entry: the entry's id as stored.
    id: Any
    #: The resolved label (a string in files pi wrote).
    label: Any
    #: Timestamp of the label entry that set it.
    labelTimestamp: Any


#: The nodes of pi's getTree in pre-order (a node, then its subtrees in order): the same tree without nesting, for JSON
#: decoders that refuse deep documents.
SessionTreeFlat = List['SessionTreeFlatItem']


class _SessionTreeNodeRequired(TypedDict):
    children: List['SessionTreeNode']
    entry: 'SessionEntry'


class SessionTreeNode(_SessionTreeNodeRequired, total=False):
    #: The resolved label (a string in files pi wrote).
    label: Any
    #: Timestamp of the label entry that set it.
    labelTimestamp: Any


#: `SessionsChanged.kind`.
SessionsChangeKind = Union[Literal['created'], Literal['changed'], Literal['removed']]


class SessionsChanged(TypedDict):
    """`sessions/changed`: a session file in a watched directory appeared, changed or vanished."""

    #: What happened to the file.
    kind: 'SessionsChangeKind'
    #: The session file.
    path: str
    #: The watch.
    watchId: str


class SessionsUnwatchParams(TypedDict):
    """`sessions/unwatch`."""

    #: From `sessions/watch`.
    watchId: str


class SessionsWatchParams(TypedDict, total=False):
    """`sessions/watch`: report session files appearing, growing or vanishing in a directory."""

    #: `true`: watch every project directory under the agent directory's `sessions/` (the sessions `listAll`
    #: lists), including those created later, instead of one directory (`sessionDir` and `cwd` are then not
    #: given). A session file already in a project directory when it is noticed is reported as `created`.
    all: Optional[bool]
    #: Watch pi's directory for this cwd (when `sessionDir` is not given).
    cwd: Optional[str]
    #: The directory to watch.
    sessionDir: Optional[str]


class SessionsWatchResult(TypedDict):
    """`sessions/watch` result."""

    #: The directory watched.
    dir: str
    #: Names the watch in `sessions/changed` and `sessions/unwatch`.
    watchId: str


class _SetSessionFileParamsRequired(TypedDict):
    #: The handle.
    handle: str
    #: The file.
    path: str


class SetSessionFileParams(_SetSessionFileParamsRequired, total=False):
    """`session/setSessionFile`: point the handle at another file."""

    #: As on the opening methods: return the file's snapshot, and set the handle's detail from now on (default:
    #: keep it).
    snapshot: Optional['Detail']


class _SkeletonEntryRequired(TypedDict):
    #: Size in bytes of the entry's JSON text.
    bytes: int


class SkeletonEntry(_SkeletonEntryRequired, total=False):
    """An entry at skeleton detail. id, parentId, type, timestamp, role, stopReason, customType, targetId, label and
    name are the stored values, copied exactly, present when the entry has them (role and stopReason: of a message
    entry's message; customType: custom and custom_message entries; targetId: label and context_edit entries;
    label: the label a label entry sets, as stored (resolve labels as pi does: in file order, a truthy label sets
    its target's label, anything else clears it); name: session_info entries). preview is one line of the entry's
    text, as a tree view shows it; bytes the size of the entry's JSON as session/getEntries returns it.
    """

    customType: Any
    #: message entries: whether message.content holds text that is not all white space (a string, or a `text` block)
    #: within its first 4 KiB of text.
    hasText: bool
    #: As stored (a string in files pi wrote).
    id: Any
    label: Any
    name: Any
    #: As stored (a string, or null for a root, in files pi wrote).
    parentId: Any
    #: At most 160 characters (then `…`) of the entry's text with white space runs made one space, from the first 4 KiB
    #: of each text: message content (text blocks as themselves, tool calls as `→ name`, images as `[image]`), `$
    #: command` for bashExecution, the summary of compactions, branch summaries and summary messages, `thinking level →
    #: L`, `model → provider/modelId`, `target → label` for labels, the name, custom type, usage kind or context edit
    #: target. Absent when empty.
    preview: str
    #: message entries: message.role.
    role: Any
    #: message entries: message.stopReason, when present.
    stopReason: Any
    targetId: Any
    #: As stored (an ISO 8601 string in files pi wrote).
    timestamp: Any
    #: As stored (a string in files pi wrote).
    type: Any


class Snapshot(TypedDict):
    """Every entry (header excluded) in file order, at the detail asked, exactly as of the change numbered seq: apply
    session/changed notifications with a higher seq on top.
    """

    entries: List['EntryAtDetail']
    seq: int


class _TreeFlatParamsRequired(TypedDict):
    #: The handle.
    handle: str


class TreeFlatParams(_TreeFlatParamsRequired, total=False):
    """`session/getTreeFlat`."""

    #: What each node's `entry` is: `full` (default: the entry as stored), `skeleton`, or `none` (no `entry`;
    #: the node has the entry's `id` instead).
    detail: Optional['Detail']
    #: At most this many nodes.
    limit: Optional[int]
    #: Nodes to skip (in pre-order; `parentIndex` stays the position in the whole list).
    offset: Optional[int]


class WarningJson(TypedDict):
    """A problem found while loading a file."""

    #: `malformed_line`, `torn_tail`, `missing_final_newline`, `non_object_line`, `extra_header`, `duplicate_id`,
    #: `missing_parent`, `self_parent`, `parent_cycle`, `legacy_version`, `unusable_entry` (pi loads the entry but
    #: some reads throw on it; here those reads fail with an error naming it).
    kind: str
    #: 1-based line number (0: the whole file).
    line: int
    #: For a person.
    message: str
