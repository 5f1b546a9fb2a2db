"""A session held in this process and kept current from ``session/changed``: pi's reads answered locally.

:class:`MirroredSession` opens a session with a full snapshot (every entry at a known ``seq``), then applies each
change the server sends, in ``seq`` order: appends add entries, a leaf move moves the leaf, a rebind or a reset
replaces everything with the snapshot the change carries. When a change is missing (a lost notification, a
listener that fell behind) it asks ``session/changesSince`` for what it missed and gets either those changes or a
fresh snapshot. Reads (:meth:`SessionView.get_entries`, :meth:`SessionView.get_tree`,
:meth:`SessionView.build_session_context`, …) never touch the pipe and give pi 1.6.0's results.

:class:`SessionView` is the read side alone: pi's ``SessionManager`` reads over a list of entries, pure Python with
no I/O, written after pi's documented behaviour (roots in file order, children by timestamp, labels resolved in
file order, context cut at the latest compaction on the leaf's path, context edits applied). Values follow
``JSON.stringify`` of pi's objects: a member pi leaves ``undefined`` is absent here.
"""

import datetime
import math
import re
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from .errors import SessiondException

Entry = Dict[str, Any]

# A member pi's JavaScript would leave `undefined` (JSON.stringify drops it).
_UNDEFINED = object()


def _truthy(v: Any) -> bool:
    """JavaScript's truthiness of a JSON value."""
    if v is None or v is False or v is _UNDEFINED:
        return False
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return v != 0 and not (isinstance(v, float) and math.isnan(v))
    if isinstance(v, str):
        return v != ""
    return True


def _key(v: Any) -> Any:
    """A dict key that compares as a JavaScript ``Map`` key does (SameValueZero): ``1`` and ``true`` differ,
    objects are equal only to themselves."""
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, (int, float)):
        return ("number", float(v))
    if isinstance(v, str):
        return ("string", v)
    if v is None:
        return ("null",)
    if v is _UNDEFINED:
        return ("undefined",)
    return ("object", id(v))


def _get(o: Any, name: str) -> Any:
    """``o[name]``, or :data:`_UNDEFINED` when ``o`` is not an object or has no such member."""
    return o.get(name, _UNDEFINED) if isinstance(o, dict) else _UNDEFINED


def _object(*members: Tuple[str, Any]) -> Dict[str, Any]:
    """An object with pi's key order, ``undefined`` members left out."""
    return {k: v for k, v in members if v is not _UNDEFINED}


_ISO = re.compile(
    r"^([+-]\d{6}|\d{4})(?:-(\d\d)(?:-(\d\d))?)?"
    r"(?:T(\d\d):(\d\d)(?::(\d\d)(?:[.,](\d+))?)?(Z|[+-]\d\d:?\d\d)?)?$"
)


def _date_ms(timestamp: Any) -> Optional[float]:
    """``new Date(timestamp).getTime()`` for the ISO 8601 forms pi writes; None where JavaScript gives NaN (and
    for the looser forms V8 also accepts, which pi never writes)."""
    if not isinstance(timestamp, str):
        return float(timestamp) if isinstance(timestamp, (int, float)) and not isinstance(timestamp, bool) else None
    m = _ISO.match(timestamp)
    if not m:
        return None
    year, month, day, hour, minute, second, fraction, zone = m.groups()
    try:
        dt = datetime.datetime(int(year), int(month or 1), int(day or 1), int(hour or 0), int(minute or 0),
                               int(second or 0), tzinfo=datetime.timezone.utc)
    except ValueError:
        return None
    if zone and zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        digits = zone[1:].replace(":", "")
        dt -= sign * datetime.timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    ms = (dt - epoch) // datetime.timedelta(milliseconds=1)
    if fraction:
        ms += int(fraction[:3].ljust(3, "0"))
    return ms


def _timestamp_ms(timestamp: Any) -> Any:
    """A message's ``timestamp`` as pi builds it from an entry's: milliseconds, ``null`` for an invalid date."""
    ms = _date_ms(timestamp)
    return None if ms is None else int(ms)


def _role(entry: Entry) -> Any:
    return _get(_get(entry, "message"), "role")


def session_entry_to_context_messages(entry: Entry) -> List[Any]:
    """What one entry contributes to the model's context (pi's ``sessionEntryToContextMessages``)."""
    kind = entry.get("type")
    if kind == "message":
        message = entry.get("message")
        role = _get(message, "role")
        content = _get(message, "content")
        if role == "system" and content in (None, _UNDEFINED):
            return [{**message, "content": ""}]
        if role in ("user", "assistant", "toolResult") and content in (None, _UNDEFINED):
            return [{**message, "content": []}]
        return [message]
    if kind == "custom_message":
        content = _get(entry, "content")
        return [_object(("role", "custom"), ("customType", _get(entry, "customType")),
                        ("content", [] if content in (None, _UNDEFINED) else content),
                        ("display", _get(entry, "display")), ("details", _get(entry, "details")),
                        ("timestamp", _timestamp_ms(entry.get("timestamp"))))]
    if kind == "branch_summary" and _truthy(_get(entry, "summary")):
        return [_object(("role", "branchSummary"), ("summary", entry["summary"]), ("fromId", _get(entry, "fromId")),
                        ("timestamp", _timestamp_ms(entry.get("timestamp"))))]
    if kind == "compaction":
        summary = _object(("role", "compactionSummary"), ("summary", _get(entry, "summary")),
                          ("tokensBefore", _get(entry, "tokensBefore")),
                          ("timestamp", _timestamp_ms(entry.get("timestamp"))))
        system = _get(entry, "systemMessage")
        return [system, summary] if _truthy(system) else [summary]
    return []


def project_context_entry(entry: Entry, edit: Optional[Entry]) -> List[Any]:
    """An entry's messages with its latest context edit applied (pi's ``projectContextEntry``)."""
    messages = session_entry_to_context_messages(entry)
    if edit is None:
        return messages
    replacement = _get(edit, "replacement")
    if replacement is None:
        return []
    out = []
    for message in messages:
        role = _get(message, "role")
        if role not in ("user", "assistant", "toolResult", "custom"):
            out.append(message)
            continue
        content = _get(replacement, "content")
        if role in ("assistant", "toolResult") and isinstance(content, str):
            content = [{"type": "text", "text": content}]
        copy = dict(message)
        if content is _UNDEFINED:
            copy.pop("content", None)  # `content: undefined`, which JSON leaves out
        else:
            copy["content"] = content
        out.append(copy)
    return out


class SessionView:
    """pi's ``SessionManager`` reads over entries held here (see the module doc). Not thread-safe by itself:
    :class:`MirroredSession` holds a lock around every read and update."""

    def __init__(self) -> None:
        self._header: Optional[Entry] = None
        self._entries: List[Entry] = []
        self._by_id: Dict[Any, Entry] = {}
        self._labels: Dict[Any, Any] = {}
        self._label_timestamps: Dict[Any, Any] = {}
        self._leaf: Any = None

    # -- updates ---------------------------------------------------------------------------------------------

    def _reset(self, header: Optional[Entry], entries: List[Entry], leaf: Any) -> None:
        self._header = header
        self._entries = []
        self._by_id = {}
        self._labels = {}
        self._label_timestamps = {}
        for entry in entries:
            self._add(entry)
        self._leaf = leaf

    def _add(self, entry: Entry) -> None:
        """One entry at the end (the leaf is set by the caller: the server says where it is)."""
        if not isinstance(entry, dict) or entry.get("type") == "session":
            return
        self._entries.append(entry)
        self._by_id[_key(_get(entry, "id"))] = entry
        if entry.get("type") == "label":
            target = _key(_get(entry, "targetId"))
            if _truthy(_get(entry, "label")):
                self._labels[target] = entry["label"]
                self._label_timestamps[target] = _get(entry, "timestamp")
            else:
                self._labels.pop(target, None)
                self._label_timestamps.pop(target, None)

    # -- pi's reads ------------------------------------------------------------------------------------------

    def get_leaf_id(self) -> Any:
        """The leaf id, or None."""
        return self._leaf

    def get_leaf_entry(self) -> Optional[Entry]:
        """The leaf entry, or None."""
        return self._by_id.get(_key(self._leaf)) if _truthy(self._leaf) else None

    def get_entry(self, entry_id: Any) -> Optional[Entry]:
        """The entry with this id (the last one when ids repeat), or None."""
        return self._by_id.get(_key(entry_id))

    def get_children(self, parent_id: Any) -> List[Entry]:
        """Entries whose parent is ``parent_id``, in pi's ``byId`` order (first position of each id)."""
        want = _key(parent_id)
        return [e for e in self._by_id.values() if _key(_get(e, "parentId")) == want]

    def get_label(self, entry_id: Any) -> Any:
        """The entry's label, or None."""
        return self._labels.get(_key(entry_id))

    def get_header(self) -> Optional[Entry]:
        """The header, or None."""
        return self._header

    def get_entry_count(self) -> int:
        """The number of distinct entry ids."""
        return len(self._by_id)

    def get_entries(self) -> List[Entry]:
        """Every entry in file order (a new list of the same objects)."""
        return list(self._entries)

    def get_session_name(self) -> Optional[str]:
        """The name the last ``session_info`` entry sets, trimmed, or None."""
        for entry in reversed(self._entries):
            if entry.get("type") == "session_info":
                name = _get(entry, "name")
                name = name.strip() if isinstance(name, str) else name
                return name if _truthy(name) else None
        return None

    def get_branch(self, from_id: Any = _UNDEFINED) -> List[Entry]:
        """The path from the root to ``from_id`` (default: the leaf), root first; it stops at a repeated id
        (pi 1.6.0 loops forever on a cycle)."""
        start = self._leaf if from_id is _UNDEFINED or from_id is None else from_id
        return self._walk(self._by_id.get(_key(start)) if _truthy(start) else None)

    def _walk(self, current: Optional[Entry]) -> List[Entry]:
        path: List[Entry] = []
        seen = set()
        while current is not None and id(current) not in seen:
            seen.add(id(current))
            path.append(current)
            parent = _get(current, "parentId")
            current = self._by_id.get(_key(parent)) if _truthy(parent) else None
        path.reverse()
        return path

    def get_tree(self) -> List[Dict[str, Any]]:
        """pi's ``getTree()``: roots in file order (an orphan or a self-parented entry is a root), each node
        ``{entry, children, label?, labelTimestamp?}``, children by timestamp (stable)."""
        nodes: Dict[Any, Dict[str, Any]] = {}
        for entry in self._entries:
            k = _key(_get(entry, "id"))
            nodes[k] = _object(("entry", entry), ("children", []), ("label", self._labels.get(k, _UNDEFINED)),
                               ("labelTimestamp", self._label_timestamps.get(k, _UNDEFINED)))
        roots = []
        for entry in self._entries:
            node = nodes[_key(_get(entry, "id"))]
            parent = _get(entry, "parentId")
            if parent is None or _key(parent) == _key(_get(entry, "id")):
                roots.append(node)
                continue
            parent_node = nodes.get(_key(parent))
            (parent_node["children"] if parent_node is not None else roots).append(node)
        stack = list(roots)
        while stack:
            node = stack.pop()
            # An invalid date sorts where V8's comparator would leave it undefined; pi never writes one.
            node["children"].sort(key=lambda n: _date_ms(_get(n["entry"], "timestamp")) or 0)
            stack.extend(node["children"])
        return roots

    def _path(self) -> List[Entry]:
        """The leaf's path as pi's context functions take it: none for a null leaf, the last entry's for an
        unknown one."""
        if self._leaf is None:
            return []
        leaf = self._by_id.get(_key(self._leaf)) if _truthy(self._leaf) else None
        if leaf is None:
            leaf = self._entries[-1] if self._entries else None
        return self._walk(leaf)

    def build_context_entries(self) -> List[Entry]:
        """The entries that make up the context: the leaf's path, cut at its latest compaction."""
        path = self._path()
        compaction = None
        for entry in path:
            if entry.get("type") == "compaction":
                compaction = entry
        if compaction is None:
            return path
        at = next(i for i, e in enumerate(path) if _key(_get(e, "id")) == _key(_get(compaction, "id")))
        result = [compaction]
        kept = False
        first_kept = _key(_get(compaction, "firstKeptEntryId"))
        for entry in path[:at]:
            if _key(_get(entry, "id")) == first_kept:
                kept = True
            if kept and not (entry.get("type") == "message" and _role(entry) == "system"):
                result.append(entry)
        result.extend(path[at + 1:])
        return result

    def build_session_projection(self) -> Dict[str, Any]:
        """The context entries with the model-visible messages of each (context edits applied)."""
        path = self._path()
        thinking_level: Any = "off"
        model: Any = None
        for entry in path:
            kind = entry.get("type")
            if kind == "thinking_level_change":
                thinking_level = _get(entry, "thinkingLevel")
            elif kind == "model_change":
                model = _object(("provider", _get(entry, "provider")), ("modelId", _get(entry, "modelId")))
            elif kind == "message" and _role(entry) == "assistant":
                message = entry["message"]
                model = _object(("provider", _get(message, "provider")), ("modelId", _get(message, "model")))
        context_entries = self.build_context_entries()
        edits: Dict[Any, Entry] = {}
        for entry in context_entries:
            if entry.get("type") == "context_edit":
                edits[_key(_get(entry, "targetId"))] = entry
        projected = []
        for index, entry in enumerate(context_entries):
            if entry.get("type") == "compaction" and index > 0:
                messages: List[Any] = []
            else:
                messages = project_context_entry(entry, edits.get(_key(_get(entry, "id"))))
            projected.append({"sourceEntry": entry, "messages": messages})
        return _object(("entries", projected), ("messages", [m for p in projected for m in p["messages"]]),
                       ("thinkingLevel", thinking_level), ("model", model))

    def build_session_context(self) -> Dict[str, Any]:
        """What the model sees: ``{messages, thinkingLevel, model}``."""
        projection = self.build_session_projection()
        return {k: v for k, v in projection.items() if k != "entries"}


class MirroredSession(SessionView):
    """A :class:`~pi_sessiond.Session` with a full local mirror (see the module doc).

    Make one with :meth:`open` (or :meth:`attach` to a session opened with ``snapshot="full"``). Reads are
    local; writes go through :attr:`session` and are in the mirror by the time they return (their
    ``session/changed`` is sent before their answer). With ``watch=True``, other processes' appends arrive on
    their own: :meth:`wait_for_seq` waits for a change the server announced elsewhere.
    """

    def __init__(self, session: Any, state: Dict[str, Any]):
        super().__init__()
        self.session = session
        """The :class:`~pi_sessiond.Session` the mirror follows: write through it."""
        self.resyncs: List[str] = []
        """How each gap was repaired, in order: ``"changes"`` (the missed changes given again) or ``"snapshot"``."""
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._seq = 0
        self._take_state(state, state.get("snapshot"))
        self._unsubscribe: Callable[[], None] = session.on_changed(self._on_event)

    @classmethod
    def open(cls, client: Any, path: str, watch: bool = True, **params: Any) -> "MirroredSession":
        """Opens ``path`` (``session/open`` with ``snapshot: "full"``) and mirrors it. ``watch`` follows other
        processes' appends, and a file that does not exist yet from pi's first write."""
        state = client.request("session/open", {"path": path, "watch": watch, "snapshot": "full", **params})
        return cls(client._session(state), state)

    @classmethod
    def attach(cls, client: Any, state: Dict[str, Any]) -> "MirroredSession":
        """Mirrors a session another call opened with ``snapshot: "full"`` (``state`` is that call's result)."""
        if state.get("detail") != "full" or "snapshot" not in state:
            raise ValueError("mirror a session opened with snapshot: \"full\"")
        return cls(client._session(state), state)

    def close(self) -> None:
        """Stops following and closes the session."""
        self._unsubscribe()
        self.session.close()

    def __enter__(self) -> "MirroredSession":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def seq(self) -> int:
        """The ``seq`` of the last change in the mirror."""
        with self._lock:
            return self._seq

    def wait_for_seq(self, seq: int, timeout: float = 30.0) -> bool:
        """Waits until the mirror holds change ``seq``; False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: self._seq >= seq, timeout)

    def wait_until(self, done: Callable[["MirroredSession"], bool], timeout: float = 30.0) -> bool:
        """Waits until ``done(self)`` holds (checked after every change applied); False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: done(self), timeout)

    # -- following the server --------------------------------------------------------------------------------

    def _take_state(self, state: Dict[str, Any], snapshot: Optional[Dict[str, Any]]) -> None:
        if snapshot is None:
            # The file changed again while the server read it: take the entries now.
            fresh = self.session.client.request("session/getState", {"handle": self.session.handle,
                                                                     "snapshot": "full"})
            state, snapshot = fresh, fresh["snapshot"]
        self._reset(state.get("header"), snapshot["entries"], state.get("leafId"))
        self._seq = snapshot["seq"]

    def _on_event(self, event: Dict[str, Any]) -> None:
        with self._changed:
            change = event.get("change", {})
            if change.get("kind") == "resync":
                # The client saw a gap; its state has no entries: ask for what the mirror missed.
                self._resync()
            else:
                seq = event.get("seq", 0)
                if seq <= self._seq:
                    return  # already in the mirror (a snapshot or changesSince had it)
                if seq != self._seq + 1:
                    self._resync()
                    if event.get("seq", 0) <= self._seq:
                        self._changed.notify_all()
                        return
                self._apply(event)
            self._changed.notify_all()

    def _apply(self, params: Dict[str, Any]) -> None:
        change = params["change"]
        kind = change.get("kind")
        if kind == "append":
            for entry in change.get("entries", []):
                self._add(entry)
        elif kind in ("rebind", "reset"):
            # The snapshot is the state at this change (or, when the change carried none, a newer one read now):
            # its seq and leaf stand.
            self._take_state(change["state"], change.get("snapshot"))
            return
        self._leaf = params.get("leafId")
        self._seq = params["seq"]

    def _resync(self) -> None:
        try:
            since = self.session.changes_since(self._seq)
        except SessiondException:
            # The handle is gone (closed elsewhere): nothing more will come.
            return
        if "changes" in since:
            self.resyncs.append("changes")
            for params in since["changes"]:
                if params["seq"] == self._seq + 1:
                    self._apply(params)
        else:
            self.resyncs.append("snapshot")
            self._take_state(since["state"], since["snapshot"])

    # -- reads, under the lock -------------------------------------------------------------------------------

    def _locked(name: str) -> Any:  # type: ignore[misc]
        def read(self: "MirroredSession", *args: Any) -> Any:
            with self._lock:
                return getattr(SessionView, name)(self, *args)

        read.__name__ = name
        read.__doc__ = getattr(SessionView, name).__doc__
        return read

    get_leaf_id = _locked("get_leaf_id")
    get_leaf_entry = _locked("get_leaf_entry")
    get_entry = _locked("get_entry")
    get_children = _locked("get_children")
    get_label = _locked("get_label")
    get_header = _locked("get_header")
    get_entry_count = _locked("get_entry_count")
    get_entries = _locked("get_entries")
    get_session_name = _locked("get_session_name")
    get_branch = _locked("get_branch")
    get_tree = _locked("get_tree")
    build_context_entries = _locked("build_context_entries")
    build_session_projection = _locked("build_session_projection")
    build_session_context = _locked("build_session_context")
    del _locked
