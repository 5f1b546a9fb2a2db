"""The client: spawn pi-sessiond, open sessions, list and search them, follow their changes.

Method names are pi's ``SessionManager`` methods in snake_case; params go on the wire by name, in the
protocol's camelCase. Results are returned as pi's methods return them: an append returns the new entry's id,
``create_branched_session`` the new file, ``find_by_id`` the path; everything else is the plain JSON the server
sent (dicts and lists, described by the TypedDicts of :mod:`pi_sessiond.types`).
"""

import collections
import itertools
import json
import logging
import os
import shutil
import sysconfig
import threading
from typing import (
    Any,
    Callable,
    Deque,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from ._transport import Connection
from ._version import __version__
from .errors import HandleNotFound, SessionNotFound, SessiondClosed, SessiondException, SessiondNotFound
from .events import ChangeStream, Listeners, SessionEvent, SessionsChanged
from .types import (
    PROTOCOL_VERSION,
    BatchOp,
    ChangesSinceResult,
    Detail,
    EntryAtDetail,
    InitializeResult,
    ProgressValue,
    SearchHit,
    SearchPage,
    SessionContext,
    SessionEntry,
    SessionHeader,
    SessionInfo,
    SessionProjection,
    SessionState,
    SessionTree,
    SessionTreeFlat,
    WarningJson,
)

log = logging.getLogger("pi_sessiond")

PathLike = Union[str, "os.PathLike[str]"]
_BINARY_NAME = "pi-sessiond"
# Directory-watch events that arrive before `sessions/watch` has answered are kept (per watch id) up to this many.
_ORPHANS_PER_WATCH = 1000
_WATCH_BUFFER = 10000


_INSTALL_HINT = (
    "install it with `pip install pi-sessiond` (the wheel brings the binary), `cargo install --locked pi-sessiond` "
    "or `npm install pi-sessiond-client`, or set PI_SESSIOND_BIN to its path"
)


def _packaged_binary() -> Optional[str]:
    """The binary the ``pi-sessiond`` wheel installed beside this package, if it did.

    The wheel puts it in the scripts directory of the environment it was installed into (``venv/bin``, or the
    user scheme's for ``pip install --user``), which is on ``PATH`` only while that environment is activated.
    """
    name = _BINARY_NAME + (".exe" if os.name == "nt" else "")
    schemes = [sysconfig.get_default_scheme()] if hasattr(sysconfig, "get_default_scheme") else [None]
    schemes.append(f"{os.name}_user")
    for scheme in schemes:
        try:
            scripts = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        except KeyError:
            continue
        candidate = os.path.join(scripts, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def find_binary(binary: Optional[PathLike] = None) -> str:
    """The pi-sessiond executable to run.

    In order: ``binary`` if given, else the ``PI_SESSIOND_BIN`` environment variable, else the binary the
    ``pi-sessiond`` wheel installed with this package, else ``pi-sessiond`` on ``PATH``. A value with a slash must
    be an executable file; a bare name is looked up on ``PATH``.

    Raises:
        SessiondNotFound: nothing usable was found; the message says where it looked and how to install it.
    """
    if binary is not None:
        return _resolve_binary(os.fspath(binary), "the binary argument")
    from_env = os.environ.get("PI_SESSIOND_BIN")
    if from_env:
        return _resolve_binary(from_env, "PI_SESSIOND_BIN")
    found = _packaged_binary() or shutil.which(_BINARY_NAME)
    if found is None:
        raise SessiondNotFound(
            "pi-sessiond binary not found: not installed with this package, not on PATH and PI_SESSIOND_BIN is not "
            f"set; {_INSTALL_HINT}, or pass Client.spawn(binary=...)"
        )
    return found


def _resolve_binary(candidate: str, source: str) -> str:
    if os.sep in candidate or (os.altsep is not None and os.altsep in candidate):
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
        raise SessiondNotFound(
            f"pi-sessiond binary not found: {candidate!r} (from {source}) is not an executable file; {_INSTALL_HINT}"
        )
    found = shutil.which(candidate)
    if found is None:
        raise SessiondNotFound(f"pi-sessiond binary not found: {candidate!r} (from {source}) is not on PATH")
    return found


def _path(p: Optional[PathLike]) -> Optional[str]:
    # The server resolves relative paths against its own working directory, which is this process's only until
    # someone calls os.chdir: resolve them here, where the caller meant them.
    # An empty path stays empty (abspath would make it the working directory): the server says it is empty.
    if p is None:
        return None
    path = os.fspath(p)
    return os.path.abspath(path) if path else path


# Stands for a JSON null that must be sent, where None means "leave the param out".
_JSON_NULL = object()


def _compact(params: Dict[str, Any]) -> Dict[str, Any]:
    # None leaves a param out: pi's optional arguments are `undefined` when not given, and the server stores an
    # explicit null where pi would store nothing (`"details": null`). _JSON_NULL sends a null on purpose.
    return {k: (None if v is _JSON_NULL else v) for k, v in params.items() if v is not None}


class Client:
    """A connection to one pi-sessiond process.

    Make one with :meth:`spawn`, use it as a context manager (``with Client.spawn() as client:``) or call
    :meth:`close`. A client is thread-safe: calls from several threads are pipelined on the one pipe and each
    gets its own answer.

    Notifications are handled on one dispatcher thread, in the order the server sent them. Because the server
    sends ``session/changed`` before the response of the mutation that caused it, a call returns only after the
    callbacks for the notifications that preceded its response have run: when ``append_message`` returns, your
    ``on_changed`` callback has already seen the append. Callbacks may call the client; they should not block
    waiting for another thread that is itself calling the client.
    """

    server_info: Optional[Dict[str, Any]]
    """``{name, version}`` of the server, after :meth:`initialize`."""
    capabilities: Optional[Dict[str, Any]]
    """The server's capabilities (``methods``, ``notifications``, ``framing``, ``piCompatibility``)."""
    protocol_version: Optional[str]
    """The protocol version the server speaks, after :meth:`initialize`."""

    def __init__(
        self,
        argv: Sequence[str],
        env: Optional[Mapping[str, str]] = None,
        stderr: Any = None,
        timeout: Optional[float] = None,
    ):
        """Starts ``argv`` (use :meth:`spawn`, which finds the binary and does the handshake).

        Args:
            argv: the server's command line.
            env: the server's whole environment (as for :class:`subprocess.Popen`; ``None``: this process's).
            stderr: ``None`` drains the server's stderr into the ``pi_sessiond.server`` logger (INFO); anything
                else goes to :class:`subprocess.Popen` (a file, ``subprocess.DEVNULL``).
            timeout: the default timeout of every call, in seconds (``None``: wait as long as the server lives).
        """
        self.timeout = timeout
        self.server_info = None
        self.capabilities = None
        self.protocol_version = None
        self._lock = threading.RLock()
        self._closed = False
        self._sessions: Dict[str, List["Session"]] = {}
        # Dispatcher thread only: per handle, the last seq delivered (or included in a resync's state), and the
        # seq range (after, through] a resync's state included, whose late notifications are dropped.
        self._last_seq: Dict[str, int] = {}
        self._absorbed: Dict[str, Tuple[int, int]] = {}
        self._handlers: Dict[str, List[Callable[[Any], Any]]] = {}
        self._progress: Dict[Any, Callable[[ProgressValue], Any]] = {}
        self._progress_ids = itertools.count(1)
        self._dir_watches: Dict[str, "SessionsWatch"] = {}
        self._dir_orphans: Dict[str, Deque[SessionsChanged]] = {}
        self._dir_closed: set = set()  # watch ids unwatched: their late events are dropped, not kept as orphans
        # Per listing scope, the last listing and its sessions/listDelta token (see _listing).
        self._listings: Dict[str, Tuple[str, List[SessionInfo]]] = {}
        self._conn = Connection(
            argv,
            dict(env) if env is not None else None,
            self._on_notification,
            stderr=stderr,
            on_closed=self._on_connection_closed,
        )

    @classmethod
    def spawn(
        cls,
        binary: Optional[PathLike] = None,
        args: Sequence[str] = (),
        env: Optional[Mapping[str, str]] = None,
        *,
        stderr: Any = None,
        timeout: Optional[float] = None,
        initialize: bool = True,
        handshake_timeout: float = 30.0,
    ) -> "Client":
        """Starts pi-sessiond and returns a client connected to it.

        Args:
            binary: the executable; default ``PI_SESSIOND_BIN``, then ``pi-sessiond`` on ``PATH``.
            args: extra command-line flags (``--agent-dir DIR``, ``--durability batch``, ``--log-level debug``…).
            env: the server's whole environment (``None``: this process's). pi-sessiond reads
                ``PI_CODING_AGENT_DIR`` (the agent directory, default ``~/.pi/agent``) and ``RUST_LOG``.
            stderr: see :class:`Client`.
            timeout: default timeout of every call, in seconds (``None``: no limit).
            initialize: do the ``initialize``/``initialized`` handshake (fills :attr:`server_info` and
                :attr:`capabilities`).
            handshake_timeout: how long the handshake may take before the server is killed.

        Raises:
            SessiondNotFound: the binary was not found.
        """
        path = find_binary(binary)
        try:
            client = cls([path, *args], env=env, stderr=stderr, timeout=timeout)
        except FileNotFoundError as e:
            raise SessiondNotFound(f"pi-sessiond binary not found: cannot run {path!r}: {e}") from e
        if initialize:
            try:
                client.initialize(timeout=handshake_timeout)
            except BaseException:
                client._conn.kill()
                client._closed = True
                raise
        return client

    # -- lifecycle -----------------------------------------------------------------------------------------------

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<pi_sessiond.Client pid={self._conn.pid} {state}>"

    @property
    def pid(self) -> int:
        """The server's process id."""
        return self._conn.pid

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called or the server has gone."""
        return self._closed or self._conn.closed

    @property
    def returncode(self) -> Optional[int]:
        """The server's exit status once it has exited (0 after a clean :meth:`close`)."""
        return self._conn.returncode

    def stderr_tail(self) -> str:
        """The last lines the server wrote to stderr (when it is drained, the default)."""
        return self._conn.stderr_tail()

    def initialize(self, client_info: Optional[Dict[str, Any]] = None,
                   timeout: Optional[float] = None) -> InitializeResult:
        """The ``initialize`` handshake (done by :meth:`spawn`), then the ``initialized`` notification."""
        info = client_info or {"name": "pi-sessiond-python", "version": __version__}
        result = self.request("initialize", {"clientInfo": info, "protocolVersion": PROTOCOL_VERSION}, timeout)
        self._conn.notify("initialized")
        self.server_info = result.get("serverInfo")
        self.capabilities = result.get("capabilities")
        self.protocol_version = result.get("protocolVersion")
        if str(self.protocol_version).split(".")[0] != PROTOCOL_VERSION.split(".")[0]:
            log.warning("pi-sessiond speaks protocol %s; this client was built for %s",
                        self.protocol_version, PROTOCOL_VERSION)
        return result

    def supports(self, method: str) -> bool:
        """Whether the server answers ``method`` (from the handshake's capabilities)."""
        if self.capabilities is None:
            self.initialize()
        return method in (self.capabilities or {}).get("methods", [])

    def close(self, timeout: float = 10.0) -> Optional[int]:
        """Shuts the server down and waits for it: ``shutdown``, then ``exit``, then up to ``timeout`` seconds
        for the process to end before it is killed. Idempotent. Returns the exit status (0 when clean).

        ``shutdown`` waits for mutations in flight and closes every session; calls still pending after that
        (or made later) raise :class:`SessiondClosed`.
        """
        with self._lock:
            if self._closed:
                return self._conn.returncode
            self._closed = True
        self._conn.begin_close()
        if not self._conn.closed:
            try:
                self._conn.request("shutdown", {}, timeout=timeout)
                # exit after shutdown's answer, so that a shutdown that fails or takes too long is seen here. (The
                # server would also take the two pipelined: it handles exit after shutdown, with status 0.)
                self._conn.notify("exit", {})
            except SessiondException as e:
                log.debug("pi-sessiond did not shut down cleanly (%s); it will be stopped", e)
        returncode = self._conn.finish(timeout)
        self._end_listeners()
        return returncode

    def _end_listeners(self, failure: Optional[SessiondClosed] = None) -> None:
        with self._lock:
            sessions = [s for group in self._sessions.values() for s in group]
            watches = list(self._dir_watches.values())
            self._sessions.clear()
            self._dir_watches.clear()
        for s in sessions:
            s._mark_closed(failure)
        for w in watches:
            w._mark_closed(failure)

    def _on_connection_closed(self) -> None:
        # On the dispatcher thread, after the last notification: iterators waiting for events must end, and
        # raise if the server died rather than was closed.
        self._end_listeners(self._conn.failure)

    # -- raw calls and notifications -----------------------------------------------------------------------------

    def request(self, method: str, params: Optional[Dict[str, Any]] = None,
                timeout: Optional[float] = None) -> Any:
        """Calls ``method`` with ``params`` (by name, camelCase, as on the wire) and returns the result.

        The typed methods below are built on this; use it for methods this client does not know yet.

        Raises:
            SessiondError: the server's error (a subclass per code: ``EntryNotFound``, ``ContentModified``…).
            SessiondClosed: the server is gone or the client is closed.
            SessiondTimeout: no answer within ``timeout`` (default: the client's ``timeout``).
        """
        if self._closed:
            raise SessiondClosed("the pi-sessiond client is closed", self._conn.returncode)
        return self._conn.request(method, params, self.timeout if timeout is None else timeout)

    def notify(self, method: str, params: Optional[Dict[str, Any]] = None) -> None:
        """Sends a notification (``$/cancelRequest``, …)."""
        self._conn.notify(method, params)

    def on_notification(self, method: str, fn: Callable[[Any], Any]) -> Callable[[], None]:
        """Calls ``fn(params)`` for every notification ``method`` the server sends (``session/changed``,
        ``sessions/changed``, ``$/progress``), raw, in arrival order, on the dispatcher thread.

        Returns a function that unsubscribes. (``session/changed`` for one session is better followed with
        :meth:`Session.on_changed`, which also detects lost notifications.)
        """
        with self._lock:
            self._handlers.setdefault(method, []).append(fn)

        def unsubscribe() -> None:
            with self._lock:
                handlers = self._handlers.get(method, [])
                if fn in handlers:
                    handlers.remove(fn)

        return unsubscribe

    def _on_notification(self, method: str, params: Any) -> None:
        """Routes one notification (dispatcher thread)."""
        with self._lock:
            handlers = list(self._handlers.get(method, ()))
        for fn in handlers:
            try:
                fn(params)
            except Exception:
                log.exception("notification callback %r failed", fn)
        if not isinstance(params, dict):
            return
        if method == "session/changed":
            self._on_session_changed(params)
        elif method == "$/progress":
            with self._lock:
                on_progress = self._progress.get(params.get("token"))
            if on_progress is not None:
                try:
                    on_progress(params.get("value"))  # type: ignore[arg-type]
                except Exception:
                    log.exception("progress callback %r failed", on_progress)
        elif method == "sessions/changed":
            self._on_sessions_changed(params)  # type: ignore[arg-type]

    def _on_session_changed(self, params: Dict[str, Any]) -> None:
        handle, seq = params.get("handle"), params.get("seq")
        if not isinstance(handle, str) or not isinstance(seq, int):
            log.warning("session/changed without a handle or seq: %.200r", params)
            return
        absorbed = self._absorbed.get(handle)
        if absorbed is not None:
            after, through = absorbed
            if after < seq <= through:
                # A resync's state already included this change, and its event said so: not delivered again.
                log.debug("session/changed for %s: seq %d is in the resync state (through %d)", handle, seq, through)
                return
            if seq > through:
                del self._absorbed[handle]
        with self._lock:
            sessions = list(self._sessions.get(handle, ()))
        last = self._last_seq.get(handle, 0)
        event: Dict[str, Any] = params
        if seq <= last:
            # The contract rules this out (seq grows by one per change); pass it on rather than hide it.
            log.warning("session/changed for %s: seq %d after %d", handle, seq, last)
        else:
            self._last_seq[handle] = seq
            # Handles are never reused, so every handle's first change is seq 1, even one opened by a raw
            # request: a jump means lost notifications. Resync only when someone listens.
            if seq != last + 1 and any(s._listeners.active for s in sessions):
                event = self._resync(handle, list(range(last + 1, seq)), params)
        for s in sessions:
            s._listeners.deliver(event)  # type: ignore[arg-type]

    def _resync(self, handle: str, missed: List[int], params: Dict[str, Any]) -> Dict[str, Any]:
        """The resync event for a gap (dispatcher thread). Notifications up to the state's ``seq`` are included in
        it, so those still to come are dropped (see :class:`~pi_sessiond.events.ResyncChange`)."""
        log.warning("session/changed for %s: seq %s never arrived; resyncing", handle, missed)
        state: Optional[Dict[str, Any]] = None
        try:
            # On the dispatcher thread: the answer comes through the reader, so this cannot deadlock.
            state = self._conn.request("session/getState", {"handle": handle})
        except SessiondException as e:
            log.warning("resync of %s failed: %s", handle, e)
        seq = params["seq"]
        if state is not None:
            state_seq = state.get("seq")
            if not isinstance(state_seq, int) or isinstance(state_seq, bool):
                # The contract requires seq; without it the resync cannot be exact. Later notifications are
                # then delivered even when the state already includes them.
                log.warning("session/getState for %s has no seq; later changes may repeat what it holds", handle)
            elif state_seq < seq:
                # Read after notification `seq` arrived, the state must include it: a server fault, reported.
                log.warning("session/getState for %s has seq %d, before the change %d that showed the gap",
                            handle, state_seq, seq)
            else:
                if state_seq > seq:
                    self._absorbed[handle] = (seq, state_seq)
                self._last_seq[handle] = state_seq
                seq = state_seq
        source = state if state is not None else params
        event: Dict[str, Any] = {
            "handle": handle,
            "seq": seq,
            "sessionId": source.get("sessionId"),
            "leafId": source.get("leafId"),
            "change": {"kind": "resync", "state": state, "missed": missed, "notification": params},
        }
        if "origin" in params:
            event["origin"] = params["origin"]
        return event

    def _on_sessions_changed(self, params: SessionsChanged) -> None:
        watch_id = params.get("watchId")
        with self._lock:
            watch = self._dir_watches.get(watch_id)  # type: ignore[arg-type]
            if watch is None:
                if watch_id in self._dir_closed:
                    return
                # `sessions/watch` has not answered yet (its events can come first): keep them for the watch.
                orphans = self._dir_orphans.setdefault(watch_id, collections.deque(maxlen=_ORPHANS_PER_WATCH))
                orphans.append(params)
                return
        watch._deliver(params)

    # -- opening sessions ----------------------------------------------------------------------------------------

    def _session(self, state: SessionState) -> "Session":
        session = Session(self, state)
        with self._lock:
            self._sessions.setdefault(session.handle, []).append(session)
        return session

    def _forget(self, session: "Session") -> None:
        with self._lock:
            group = self._sessions.get(session.handle, [])
            if session in group:
                group.remove(session)
            if not group:
                self._sessions.pop(session.handle, None)

    def open(self, path: PathLike, watch: bool = False, session_dir: Optional[PathLike] = None,
             cwd_override: Optional[str] = None, create: bool = False) -> "Session":
        """Opens a session file (pi's ``SessionManager.open``) without writing to it.

        A path with no file raises :class:`SessionNotFound` unless ``create`` is true: then, as in pi, a new
        session starts there (written at its first message). Opening a file that is already open shares its
        handle (the server counts references; each :class:`Session` closes its own).

        Args:
            path: the ``.jsonl`` file.
            watch: follow appends other processes (pi itself) make to the file: they arrive as events with
                ``origin == "external"``.
            session_dir: where sessions made from this one go (default: the file's directory).
            cwd_override: use this cwd instead of the header's.
            create: start a new session when there is no file at ``path``.
        """
        if not create and _path(path) and not os.path.exists(_path(path)):
            raise SessionNotFound(1001, f"{_path(path)}: no such session file (pass create=True to start one there)",
                                  "session_not_found", {"kind": "session_not_found", "path": _path(path)},
                                  "session/open")
        params = _compact({"path": _path(path), "watch": True if watch else None,
                           "sessionDir": _path(session_dir), "cwdOverride": cwd_override})
        return self._session(self.request("session/open", params))

    def create(self, cwd: str, session_dir: Optional[PathLike] = None, session_id: Optional[str] = None,
               parent_session: Optional[str] = None) -> "Session":
        """A new session for ``cwd`` (pi's ``SessionManager.create``); the file is written once it holds a user
        or assistant message.

        Args:
            cwd: the working directory, stored in the header; picks the default session directory.
            session_dir: where the file goes (default: pi's directory for ``cwd`` under the agent directory).
            session_id: the session id (default: a UUID v7).
            parent_session: the header's ``parentSession``.
        """
        params = _compact({"cwd": cwd, "sessionDir": _path(session_dir), "id": session_id,
                           "parentSession": parent_session})
        return self._session(self.request("session/create", params))

    def continue_recent(self, cwd: str, session_dir: Optional[PathLike] = None) -> "Session":
        """The most recent session of ``cwd``, or a new one (pi's ``SessionManager.continueRecent``)."""
        params = _compact({"cwd": cwd, "sessionDir": _path(session_dir)})
        return self._session(self.request("session/continueRecent", params))

    def in_memory(self, cwd: Optional[str] = None, entries: Optional[Sequence[Any]] = None,
                  session_id: Optional[str] = None) -> "Session":
        """A session that never touches the disk (pi's ``SessionManager.inMemory``).

        Args:
            cwd: the working directory (default: the server's).
            entries: entries to start from (a header among them is adopted; older versions are migrated).
            session_id: the session id.
        """
        params = _compact({"cwd": cwd, "entries": list(entries) if entries is not None else None,
                           "id": session_id})
        return self._session(self.request("session/inMemory", params))

    def fork_from(self, source_path: PathLike, target_cwd: str, session_dir: Optional[PathLike] = None,
                  session_id: Optional[str] = None) -> "Session":
        """A new session in ``target_cwd`` holding another session's whole history (pi's ``forkFrom``)."""
        params = _compact({"sourcePath": _path(source_path), "targetCwd": target_cwd,
                           "sessionDir": _path(session_dir), "id": session_id})
        return self._session(self.request("session/forkFrom", params))

    # -- the catalog ---------------------------------------------------------------------------------------------

    def _with_progress(self, method: str, params: Dict[str, Any],
                       on_progress: Optional[Callable[[ProgressValue], Any]]) -> Any:
        if on_progress is None:
            return self.request(method, params)
        token = f"pi-sessiond-py-{next(self._progress_ids)}"
        with self._lock:
            self._progress[token] = on_progress
        try:
            # The server sends every $/progress before the answer, and the answer waits for their callbacks.
            return self.request(method, {**params, "progressToken": token})
        finally:
            with self._lock:
                self._progress.pop(token, None)

    def list(self, cwd: str, session_dir: Optional[PathLike] = None,
             on_progress: Optional[Callable[[ProgressValue], Any]] = None, *,
             include_all_messages_text: bool = True) -> List[SessionInfo]:
        """The sessions of ``cwd``, newest activity first (pi's ``SessionManager.list``).

        Args:
            cwd: the working directory.
            session_dir: the directory to list (default: pi's directory for ``cwd``); sessions in it whose
                header names another cwd are left out, as pi does.
            on_progress: called with ``{kind: begin|report|end, loaded, total}`` while files load.
            include_all_messages_text: ``False`` leaves out each session's ``allMessagesText`` (every user and
                assistant text: most of a listing's size). Default: pi's exact result, with it.
        """
        return self._listing(cwd, session_dir, include_all_messages_text, on_progress)

    def list_all(self, session_dir: Optional[PathLike] = None,
                 on_progress: Optional[Callable[[ProgressValue], Any]] = None, *,
                 include_all_messages_text: bool = True) -> List[SessionInfo]:
        """Every session (pi's ``SessionManager.listAll``): of every project directory under the agent
        directory's ``sessions/``, or of ``session_dir`` alone. Newest activity first.

        ``on_progress`` and ``include_all_messages_text`` are as for :meth:`list`."""
        return self._listing(None, session_dir, include_all_messages_text, on_progress)

    def _listing(self, cwd: Optional[str], session_dir: Optional[PathLike], include_all_messages_text: bool,
                 on_progress: Optional[Callable[[ProgressValue], Any]]) -> List[SessionInfo]:
        # Through sessions/listDelta against the last listing of the same scope: a repeated listing receives only
        # the sessions that changed. The caller gets fresh dicts; the kept ones are never handed out.
        key = json.dumps([cwd, _path(session_dir), include_all_messages_text])
        with self._lock:
            held = self._listings.get(key)
        params = _compact({"cwd": cwd, "sessionDir": _path(session_dir),
                           "includeAllMessagesText": None if include_all_messages_text else False,
                           "since": held[0] if held else None})
        delta = self._with_progress("sessions/listDelta", params, on_progress)
        base = held[1] if held else []
        kept: List[SessionInfo] = []
        for entry in delta["sessions"]:
            if isinstance(entry, int) and not isinstance(entry, bool):
                if not 0 <= entry < len(base):
                    raise SessiondException(f"pi-sessiond referred to entry {entry} of a listing of {len(base)}")
                kept.append(base[entry])
            else:
                kept.append(entry)
        with self._lock:
            self._listings[key] = (delta["token"], kept)
        return [dict(info) for info in kept]

    def find_by_id(self, cwd: str, session_id: str, session_dir: Optional[PathLike] = None) -> Optional[str]:
        """The file of the session whose id is exactly ``session_id``, or ``None``."""
        params = _compact({"cwd": cwd, "id": session_id, "sessionDir": _path(session_dir)})
        result = self.request("sessions/findById", params)
        return result.get("path") if isinstance(result, dict) else None

    def lock_holder(self, path: PathLike) -> Optional[int]:
        """The process holding the write lock of the session file at ``path`` (another pi-sessiond writing it), or
        ``None`` when nobody else does: what to tell a user before they write to a session another pi writes."""
        result = self.request("session/lockHolder", {"path": _path(path)})
        return result.get("pid") if isinstance(result, dict) else None

    def search(self, query: str, cwd: Optional[str] = None, session_dir: Optional[PathLike] = None,
               limit: Optional[int] = None, roles: Optional[Sequence[str]] = None,
               on_progress: Optional[Callable[[ProgressValue], Any]] = None) -> List[SearchHit]:
        """Searches sessions (``sessions/search``) as pi's ``/resume`` does; best matches first.

        Args:
            query: space-separated words (each must match), ``"exact phrases"``, or ``re:<regex>``;
                case-insensitive.
            cwd: only this project's sessions (as :meth:`list` finds them); default: every session.
            session_dir: with ``cwd``, the directory to use for it; without, search only this directory.
            limit: at most this many hits (the server's default is 50).
            roles: only these roles: ``user``, ``assistant``, ``toolResult``, ``custom``, ``bashExecution``,
                ``name``, ``label``, ``summary``, or ``session`` (the session's name, id or cwd matched).
            on_progress: called with ``{kind, loaded, total, stage}`` while the catalog and index catch up:
                ``stage`` ``"listing"`` (bringing the catalog up to date), then ``"indexing"`` (extracting text the
                index does not hold yet); each stage starts with its own ``begin``.

        Returns:
            ``[{path, sessionId, entryId, role, snippet, timestamp, score}]``, best first then newest
            (:class:`~pi_sessiond.types.SearchHit`; ``entryId`` is ``None`` and ``role`` ``"session"`` when the
            session's name, id or cwd matched). A change by any process shows in the next search.

        Raises:
            MethodNotFound: the server has no ``sessions/search`` (older than the method).
        """
        params = _compact({"query": query, "cwd": cwd, "sessionDir": _path(session_dir), "limit": limit,
                           "roles": list(roles) if roles is not None else None})
        return self._with_progress("sessions/search", params, on_progress)

    def search_page(self, query: str, offset: int = 0, cwd: Optional[str] = None,
                    session_dir: Optional[PathLike] = None, limit: Optional[int] = None,
                    roles: Optional[Sequence[str]] = None,
                    on_progress: Optional[Callable[[ProgressValue], Any]] = None) -> SearchPage:
        """One page of a search (``sessions/searchPage``): :meth:`search`'s hits from ``offset`` on, with the totals.

        Returns:
            ``{hits, total, sessions, offset}``: at most ``limit`` hits, best first, and how many hits there are in
            all and in how many sessions (:class:`~pi_sessiond.types.SearchPage`).
        """
        params = _compact({"query": query, "offset": offset, "cwd": cwd, "sessionDir": _path(session_dir),
                           "limit": limit, "roles": list(roles) if roles is not None else None})
        return self._with_progress("sessions/searchPage", params, on_progress)

    def watch_sessions(self, session_dir: Optional[PathLike] = None, cwd: Optional[str] = None,
                       on_changed: Optional[Callable[[SessionsChanged], Any]] = None) -> "SessionsWatch":
        """Follows a session directory: ``*.jsonl`` files appearing, growing or vanishing.

        Args:
            session_dir: the directory to watch.
            cwd: or pi's directory for this cwd (when ``session_dir`` is not given). With neither, every project's
                directory is watched (the sessions ``list_all`` lists, and projects made later).
            on_changed: called with each later ``{watchId, path, kind}``. The watch's buffer (:meth:`SessionsWatch.get`,
                :meth:`SessionsWatch.changes`) also holds any event that arrived before ``sessions/watch`` answered.
        """
        scope = _compact({"sessionDir": _path(session_dir), "cwd": cwd}) or {"all": True}
        result = self.request("sessions/watch", scope)
        watch = SessionsWatch(self, result["watchId"], result["dir"])
        with self._lock:
            # Events that came before the answer were kept as orphans: they go to the buffer first, and the
            # dispatcher cannot buffer a newer one before this block ends (it takes the same lock). Callbacks are
            # not run here, under the lock: one that called the server would wait for the dispatcher, which
            # may be waiting for this lock.
            for params in self._dir_orphans.pop(watch.watch_id, ()):
                watch._buffer.put(params)
            self._dir_watches[watch.watch_id] = watch
        if on_changed is not None:
            watch.on_changed(on_changed)
        return watch

    def _unregister_watch(self, watch: "SessionsWatch") -> None:
        with self._lock:
            self._dir_watches.pop(watch.watch_id, None)
            self._dir_orphans.pop(watch.watch_id, None)
            self._dir_closed.add(watch.watch_id)


class Session:
    """An open session (a handle on the server). Methods mirror pi's ``SessionManager``.

    Use it as a context manager or call :meth:`close`. Every mutation takes an optional ``expected_leaf_id``:
    if the leaf is something else the call raises :class:`~pi_sessiond.ContentModified` (``e.data["leafId"]`` is
    the current leaf) and nothing is written.

    Changes (this client's mutations, and with ``watch`` other processes' appends) arrive as events, see
    :meth:`on_changed` and :meth:`changes`.
    """

    handle: str
    """The server's handle for this session."""
    opened_state: SessionState
    """The :class:`~pi_sessiond.types.SessionState` the open call returned (not updated; see :meth:`get_state`)."""

    def __init__(self, client: Client, state: SessionState):
        self._client = client
        self.handle = state["handle"]
        self.opened_state = state
        self._listeners: Listeners[SessionEvent] = Listeners()
        self._closed = False
        self._close_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<pi_sessiond.Session {self.handle} {self.opened_state.get('sessionFile')!r}>"

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called (or the client closed)."""
        return self._closed

    @property
    def client(self) -> Client:
        """The client this session belongs to."""
        return self._client

    def _call(self, method: str, params: Optional[Dict[str, Any]] = None) -> Any:
        if self._closed and not self._client.closed:
            # Another Session object may still hold the same handle open; this one must not use it. (With the
            # client closed, the request below raises SessiondClosed, which says why.)
            raise HandleNotFound(1003, f"session {self.handle} was closed", "handle_not_found",
                                 {"handle": self.handle}, method)
        return self._client.request(method, {"handle": self.handle, **_compact(params or {})})

    # -- events --------------------------------------------------------------------------------------------------

    def on_changed(self, fn: Callable[[SessionEvent], Any]) -> Callable[[], None]:
        """Calls ``fn(event)`` for every change of this session, in order, on the dispatcher thread.

        ``event`` is the ``session/changed`` params (``{handle, sessionId, seq, leafId, change, origin?}``,
        ``change.kind`` one of ``append``, ``leaf``, ``rebind``, ``reset``, ``deleted``), or a resync
        (``change.kind == "resync"``, see :class:`~pi_sessiond.events.ResyncChange`) when notifications were
        lost: the session's state, exact as of the event's ``seq``, after which events go on at ``seq + 1``. A
        mutation's event is delivered before the mutation's call returns. Returns a function that
        unsubscribes.
        """
        return self._listeners.add_callback(fn)

    def changes(self, timeout: Optional[float] = None) -> ChangeStream[SessionEvent]:
        """A stream of this session's events from now on (the same events as :meth:`on_changed`).

        ``for event in session.changes(timeout=5):`` waits up to 5 s for each event and ends when none comes
        (``None``: ends only when the session or client closes); if the server dies, the loop raises
        :class:`SessiondClosed` once the events that arrived before are delivered. Create the stream before the mutations whose
        events you want: it buffers from its creation.
        """
        return self._listeners.add_stream(timeout)

    # -- mutations -----------------------------------------------------------------------------------------------

    def append_message(self, message: Dict[str, Any], expected_leaf_id: Optional[str] = None) -> str:
        """Appends a message (pi's ``AgentMessage``: a dict with a ``role``) under the leaf; returns its id."""
        return self._call("session/appendMessage",
                          {"message": message, "expectedLeafId": expected_leaf_id})["id"]

    def append_thinking_level_change(self, thinking_level: str, *, expected_leaf_id: Optional[str] = None) -> str:
        """Appends a ``thinking_level_change`` (``off``, ``low``, ``high``…); returns its id."""
        return self._call("session/appendThinkingLevelChange",
                          {"thinkingLevel": thinking_level, "expectedLeafId": expected_leaf_id})["id"]

    def append_model_change(self, provider: str, model_id: str, *, expected_leaf_id: Optional[str] = None) -> str:
        """Appends a ``model_change``; returns its id."""
        return self._call("session/appendModelChange",
                          {"provider": provider, "modelId": model_id, "expectedLeafId": expected_leaf_id})["id"]

    def append_usage(self, kind: str, provider: str, model: str, usage: Dict[str, Any], note: Optional[str] = None,
                     *, expected_leaf_id: Optional[str] = None) -> SessionEntry:
        """Appends a ``usage`` entry (``kind`` e.g. ``cache_warm``, ``usage`` pi's Usage object); returns the entry."""
        return self._call("session/appendUsage", {"kind": kind, "provider": provider, "model": model,
                                                  "usage": usage, "note": note,
                                                  "expectedLeafId": expected_leaf_id})["entry"]

    def append_compaction(self, summary: str, first_kept_entry_id: Optional[str], tokens_before: Any,
                          details: Any = None, from_hook: Optional[bool] = None, *, usage: Any = None,
                          system_message: Any = None, retained_tail: Optional[Sequence[Any]] = None,
                          expected_leaf_id: Optional[str] = None) -> str:
        """Appends a compaction (pi's ``appendCompaction``, with its system-message checkpoint); returns its id.

        Args:
            summary: the summary.
            first_kept_entry_id: the first entry kept (``None``: none is kept).
            tokens_before: tokens before compaction.
            details: implementation data.
            from_hook: true for extension-made compactions.
            usage: usage of the summarising call.
            system_message: the checkpoint system message (default: pi's replay of the current ones).
            retained_tail: the complete post-compaction messages.
        """
        return self._call("session/appendCompaction", {
            "summary": summary, "firstKeptEntryId": first_kept_entry_id, "tokensBefore": tokens_before,
            "details": details, "fromHook": from_hook, "usage": usage, "systemMessage": system_message,
            "retainedTail": list(retained_tail) if retained_tail is not None else None,
            "expectedLeafId": expected_leaf_id,
        })["id"]

    def append_custom_entry(self, custom_type: str, data: Any = None, *,
                            expected_leaf_id: Optional[str] = None) -> str:
        """Appends an extension's ``custom`` entry (not part of the context); returns its id."""
        return self._call("session/appendCustomEntry",
                          {"customType": custom_type, "data": data, "expectedLeafId": expected_leaf_id})["id"]

    def append_session_info(self, name: str, *, expected_leaf_id: Optional[str] = None) -> str:
        """Sets the session's name (an empty name clears it); returns the entry's id."""
        return self._call("session/appendSessionInfo", {"name": name, "expectedLeafId": expected_leaf_id})["id"]

    def append_custom_message_entry(self, custom_type: str, content: Any, display: bool, details: Any = None, *,
                                    expected_leaf_id: Optional[str] = None) -> str:
        """Appends an extension message that is part of the context (``content``: a string or text/image
        blocks; ``display``: whether the TUI shows it); returns its id."""
        return self._call("session/appendCustomMessageEntry", {
            "customType": custom_type, "content": content, "display": display, "details": details,
            "expectedLeafId": expected_leaf_id,
        })["id"]

    def append_context_edit(self, target_id: str, replacement: Any = None, *,
                            expected_leaf_id: Optional[str] = None) -> str:
        """Edits an earlier entry's contribution to the context on this branch: ``replacement`` ``None`` omits
        it, ``{"content": ...}`` replaces its content. Returns the new entry's id."""
        # The null is sent, not left out: the param is required and null is what means "omit" (the server
        # refuses an absent replacement with -32602; schema.json says "Required" but still leaves it out of
        # `required`).
        return self._call("session/appendContextEdit", {
            "targetId": target_id, "replacement": _JSON_NULL if replacement is None else replacement,
            "expectedLeafId": expected_leaf_id,
        })["id"]

    def append_label_change(self, target_id: str, label: Optional[str] = None, *,
                            expected_leaf_id: Optional[str] = None) -> str:
        """Sets ``target_id``'s label (``None`` or empty clears it); returns the label entry's id."""
        return self._call("session/appendLabelChange",
                          {"targetId": target_id, "label": label, "expectedLeafId": expected_leaf_id})["id"]

    def branch(self, entry_id: str, *, expected_leaf_id: Optional[str] = None) -> None:
        """Moves the leaf to ``entry_id``: the next append starts a branch there."""
        self._call("session/branch", {"entryId": entry_id, "expectedLeafId": expected_leaf_id})

    def reset_leaf(self, *, expected_leaf_id: Optional[str] = None) -> None:
        """Moves the leaf before the first entry: the next append is a new root."""
        self._call("session/resetLeaf", {"expectedLeafId": expected_leaf_id})

    def branch_with_summary(self, entry_id: Optional[str], summary: str, details: Any = None,
                            from_hook: Optional[bool] = None, *, usage: Any = None,
                            expected_leaf_id: Optional[str] = None) -> str:
        """Moves the leaf to ``entry_id`` (``None``: a new root) and appends a summary of the branch left
        behind; returns the summary entry's id."""
        return self._call("session/branchWithSummary", {
            "entryId": entry_id, "summary": summary, "details": details, "fromHook": from_hook, "usage": usage,
            "expectedLeafId": expected_leaf_id,
        })["id"]

    def append_batch(self, ops: Sequence[BatchOp], *, expected_leaf_id: Optional[str] = None) -> List[Any]:
        """Applies ``ops`` (each ``{"method": "session/appendMessage", "params": {...}}``: any append method,
        ``session/branch``, ``session/resetLeaf`` or ``session/branchWithSummary``, with its params but no
        ``handle``) as one write: one fsync under ``--durability entry``, one change event, all or nothing.
        Returns what each method returns alone, in order (``{"id"}``, ``{"entry"}`` for appendUsage, ``None``
        for branch and resetLeaf). ``expected_leaf_id`` is checked before the first op. A ``targetId`` or
        ``entryId`` given as ``{"op": n}`` names the entry that op ``n`` of the batch appends."""
        return self._call("session/appendBatch", {"ops": list(ops), "expectedLeafId": expected_leaf_id})["results"]

    def create_branched_session(self, leaf_id: str, *, expected_leaf_id: Optional[str] = None) -> Optional[str]:
        """This session becomes a new one holding only the path to ``leaf_id``; returns the new file (``None``
        in memory). The handle stays the same."""
        result = self._call("session/createBranchedSession", {"leafId": leaf_id, "expectedLeafId": expected_leaf_id})
        return result.get("path")

    def new_session(self, session_id: Optional[str] = None, parent_session: Optional[str] = None) -> SessionState:
        """Replaces this session with a new, empty one (the old file is untouched); returns the new state."""
        return self._call("session/newSession", {"id": session_id, "parentSession": parent_session})

    def set_session_file(self, path: PathLike) -> SessionState:
        """Points this session at another file; returns the new state."""
        return self._call("session/setSessionFile", {"path": _path(path)})

    # -- reads ---------------------------------------------------------------------------------------------------

    def changes_since(self, seq: int) -> ChangesSinceResult:
        """What a mirror that applied changes up to ``seq`` missed: ``{"changes": [...]}`` (the
        ``session/changed`` params, in order) while the server still holds them all, else ``{"state",
        "snapshot"}``, a fresh start at the handle's detail."""
        return self._call("session/changesSince", {"seq": seq})

    def get_state(self) -> SessionState:
        """The session's current state: file, id, cwd, header, leaf, entry count, name, and ``seq``, the
        ``seq`` of the last change it includes (events with a higher ``seq`` happened after it)."""
        return self._call("session/getState")

    def get_leaf_id(self) -> Optional[str]:
        """The leaf's id, or ``None`` (an empty session, or after :meth:`reset_leaf`)."""
        return self._call("session/getLeafId")

    def get_leaf_entry(self) -> Optional[SessionEntry]:
        """The leaf entry, or ``None``."""
        return self._call("session/getLeafEntry")

    def get_entry(self, entry_id: str) -> Optional[SessionEntry]:
        """The entry with that id (the last one if ids repeat), or ``None``."""
        return self._call("session/getEntry", {"id": entry_id})

    def get_children(self, parent_id: str) -> List[SessionEntry]:
        """The entries whose parent is ``parent_id``, in file order."""
        return self._call("session/getChildren", {"parentId": parent_id})

    def get_label(self, entry_id: str) -> Optional[str]:
        """The entry's label, or ``None``."""
        return self._call("session/getLabel", {"id": entry_id})

    def get_branch(self, from_id: Optional[str] = None) -> List[SessionEntry]:
        """The path from the root to ``from_id`` (default: the leaf)."""
        return self._call("session/getBranch", {"fromId": from_id})

    def get_header(self) -> Optional[SessionHeader]:
        """The header line, or ``None``."""
        return self._call("session/getHeader")

    def get_entry_count(self) -> int:
        """The number of distinct entry ids."""
        return self._call("session/getEntryCount")

    def get_entries(self, offset: Optional[int] = None, limit: Optional[int] = None) -> List[SessionEntry]:
        """The entries in file order: all of them, or a page (skip ``offset``, at most ``limit``)."""
        return self._call("session/getEntries", {"offset": offset, "limit": limit})

    def get_entries_by_id(self, ids: Sequence[str], detail: Optional[Detail] = None) -> List[Optional[EntryAtDetail]]:
        """The entries with these ids, in the order given (``None`` for an id no entry has), ``full`` (as
        stored, the default) or ``skeleton``: the bodies a view asks for once it shows them."""
        return self._call("session/getEntries", {"ids": list(ids), "detail": detail})

    def get_tree(self) -> SessionTree:
        """The tree, nested as pi's ``getTree`` returns it: root nodes in file order, each ``{entry, children,
        label?, labelTimestamp?}``, children sorted by timestamp.

        It is as deep as the longest branch: a long conversation is thousands of levels, too deep for code
        that walks it recursively (``json.dumps`` of it, ``copy.deepcopy``…). :meth:`get_tree_flat` gives the
        same tree without nesting. :func:`pi_sessiond.format_tree` draws either."""
        return self._call("session/getTree")

    def get_tree_flat(self) -> SessionTreeFlat:
        """The tree as a flat list in pre-order (a node, then its subtrees in order): each item is ``{entry,
        parentIndex, depth, label?, labelTimestamp?}``, ``parentIndex`` the position of the parent item (``None``
        for a root) and ``depth`` 0 for roots. The same tree as :meth:`get_tree`, at any depth.
        :func:`pi_sessiond.format_tree` draws it."""
        return self._call("session/getTreeFlat")

    def get_tree_flat_page(self, detail: Detail = "none", offset: Optional[int] = None,
                           limit: Optional[int] = None) -> SessionTreeFlat:
        """Nodes of :meth:`get_tree_flat` from ``offset`` (at most ``limit``), with entries at ``detail``:
        ``none`` (each node has the entry's ``id`` instead of ``entry``), ``skeleton`` or ``full``.
        ``parentIndex`` stays the position in the whole list."""
        return self._call("session/getTreeFlat", {"detail": detail, "offset": offset, "limit": limit})

    def get_session_name(self) -> Optional[str]:
        """The session's name, or ``None``."""
        return self._call("session/getSessionName")

    def get_warnings(self) -> List[WarningJson]:
        """What loading the file found: malformed or torn lines, broken links, legacy versions."""
        return self._call("session/getWarnings")

    def build_context_entries(self) -> List[SessionEntry]:
        """The entries that make up the model's context."""
        return self._call("session/buildContextEntries")

    def build_session_projection(self) -> SessionProjection:
        """The context entries with their model-visible messages."""
        return self._call("session/buildSessionProjection")

    def build_session_context(self) -> SessionContext:
        """What the model sees: ``{messages, thinkingLevel, model}``."""
        return self._call("session/buildSessionContext")

    # -- following the file, closing -----------------------------------------------------------------------------

    def watch(self) -> None:
        """Follows appends other processes (pi itself) make to the file: they arrive as events with
        ``origin == "external"``."""
        self._call("session/watch")

    def unwatch(self) -> None:
        """Stops following the file."""
        self._call("session/unwatch")

    def lock(self) -> None:
        """Takes the file's write lock now, as the first write would (``SessionLocked`` when another process
        holds it); it is held while the session is open. A session not written yet has nothing to lock."""
        self._call("session/lock")

    def close(self) -> None:
        """Drops this object's reference to the handle (the last one closes the session on the server) and ends
        its event streams. Idempotent; a no-op once the client is closed."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        try:
            if not self._client.closed:
                self._client.request("session/close", {"handle": self.handle})
        except SessiondClosed:
            pass  # the server is gone, and the handle with it
        finally:
            self._client._forget(self)
            self._listeners.end()

    def _mark_closed(self, failure: Optional[SessiondClosed] = None) -> None:
        self._closed = True
        self._listeners.end(failure)


class SessionsWatch:
    """A ``sessions/watch`` on one directory: ``{watchId, path, kind}`` events, ``kind`` one of ``created``,
    ``changed``, ``removed``.

    Events are buffered from the moment the watch exists (the newest 10,000 are kept) and read with
    :meth:`changes` or :meth:`get`; :meth:`on_changed` adds callbacks. Close with :meth:`close` or a ``with``.
    """

    watch_id: str
    """The server's id for this watch."""
    dir: str
    """The directory watched."""

    def __init__(self, client: Client, watch_id: str, directory: str):
        self._client = client
        self.watch_id = watch_id
        self.dir = directory
        self._buffer: ChangeStream[SessionsChanged] = ChangeStream(maxlen=_WATCH_BUFFER)
        self._listeners: Listeners[SessionsChanged] = Listeners()
        self._closed = False

    def __repr__(self) -> str:
        return f"<pi_sessiond.SessionsWatch {self.watch_id} {self.dir!r}>"

    def __enter__(self) -> "SessionsWatch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _deliver(self, params: SessionsChanged) -> None:
        self._buffer.put(params)
        self._listeners.deliver(params)

    def on_changed(self, fn: Callable[[SessionsChanged], Any]) -> Callable[[], None]:
        """Calls ``fn(event)`` for every later event, on the dispatcher thread; returns an unsubscribe function."""
        return self._listeners.add_callback(fn)

    def get(self, timeout: Optional[float] = None) -> Optional[SessionsChanged]:
        """The next buffered event, waiting up to ``timeout`` seconds; ``None`` on timeout or once closed.

        Raises:
            SessiondClosed: the server died, and the buffer is drained.
        """
        return self._buffer.get(timeout)

    def changes(self, timeout: Optional[float] = None) -> Iterator[SessionsChanged]:
        """Iterates the buffered events and those to come, until none arrives within ``timeout`` seconds
        (``None``: until the watch closes); raises :class:`SessiondClosed` at the end if the server died."""
        while True:
            event = self._buffer.get(timeout)
            if event is None:
                return
            yield event

    def close(self) -> None:
        """Stops the watch (``sessions/unwatch``). Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if not self._client.closed:
                self._client.request("sessions/unwatch", {"watchId": self.watch_id})
        except SessiondClosed:
            pass
        finally:
            self._client._unregister_watch(self)
            self._mark_closed()

    def _mark_closed(self, failure: Optional[SessiondClosed] = None) -> None:
        self._closed = True
        self._buffer.end(failure)
        self._listeners.end(failure)
