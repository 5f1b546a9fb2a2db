"""The exceptions the client raises.

Everything derives from :class:`SessiondException`. A JSON-RPC error answer becomes a :class:`SessiondError`
(or the subclass for its code, so ``except ContentModified:`` works); a dead or closed server is
:class:`SessiondClosed`; a binary that cannot be found is :class:`SessiondNotFound`.
"""

from typing import Any, Dict, Optional, Type


class SessiondException(Exception):
    """Base class of every exception this package raises."""


class SessiondError(SessiondException):
    """The server answered a request with a JSON-RPC error.

    Attributes:
        code: the JSON-RPC error code (``-32602``, ``1002``, …).
        message: the server's message (pi's own wording for session faults, e.g. ``Entry abc not found``).
        kind: ``data.kind``, the machine-readable name of the error (``entry_not_found``, ``content_modified``…),
            or ``None`` if the server sent none.
        data: the whole ``data`` member (``{}`` when absent): ``data.path`` names the bad param of an
            ``invalid_params``, ``data.leafId`` is the current leaf of a ``content_modified``, and so on.
        method: the request method that failed, when known.
    """

    #: The ``data.kind`` the contract gives this class's code (``None`` on the base class).
    KIND: Optional[str] = None

    code: int
    message: str
    kind: Optional[str]
    data: Dict[str, Any]
    method: Optional[str]

    def __init__(
        self,
        code: int,
        message: str,
        kind: Optional[str] = None,
        data: Optional[Dict[str, Any]] = None,
        method: Optional[str] = None,
    ):
        self.code = code
        self.message = message
        self.kind = kind
        self.data = data if data is not None else {}
        self.method = method
        where = f"{method}: " if method else ""
        super().__init__(f"{where}{message} (code {code}, {kind or 'no kind'})")

    @staticmethod
    def from_response(error: Any, method: Optional[str] = None) -> "SessiondError":
        """The exception for a response's ``error`` member, as the subclass for its code when there is one."""
        if not isinstance(error, dict):
            return InternalError(-32603, f"malformed error object: {error!r}", "internal_error", {}, method)
        code = error.get("code")
        if not isinstance(code, int) or isinstance(code, bool):
            code = -32603
        message = error.get("message")
        if not isinstance(message, str):
            message = repr(message)
        data = error.get("data")
        if not isinstance(data, dict):
            # The contract always sends an object; keep anything else rather than drop it.
            data = {} if data is None else {"value": data}
        kind = data.get("kind") if isinstance(data.get("kind"), str) else None
        cls = _BY_CODE.get(code, SessiondError)
        return cls(code, message, kind, data, method)


class ParseError(SessiondError):
    """``-32700``: the server could not read a frame as JSON (this client never sends one)."""

    KIND = "parse_error"


class InvalidRequest(SessiondError):
    """``-32600``: not a valid JSON-RPC request, or sent after ``shutdown``."""

    KIND = "invalid_request"


class MethodNotFound(SessiondError):
    """``-32601``: the server does not have this method (an older server, or a method not added yet)."""

    KIND = "method_not_found"


class InvalidParams(SessiondError):
    """``-32602``: a param is missing or has the wrong type; ``data["path"]`` names it (``"cwd"``,
    ``"message.role"``…)."""

    KIND = "invalid_params"


class InternalError(SessiondError):
    """``-32603``: the server failed; nothing was half-written."""

    KIND = "internal_error"


class RequestCancelled(SessiondError):
    """``-32800``: the request was cancelled with ``$/cancelRequest``."""

    KIND = "request_cancelled"


class ContentModified(SessiondError):
    """``-32801``: ``expected_leaf_id`` is not the leaf, or another process appended to the file first.

    ``data["leafId"]`` is always there: the leaf now (``None`` when there is none). ``data["path"]`` names the
    file when another process wrote it between the server's check and its write. Re-read and retry.
    """

    KIND = "content_modified"


class SessionNotFound(SessiondError):
    """``1001``: the session file or directory does not exist."""

    KIND = "session_not_found"


class EntryNotFound(SessiondError):
    """``1002``: no entry has that id."""

    KIND = "entry_not_found"


class HandleNotFound(SessiondError):
    """``1003``: no open session has that handle (it was closed)."""

    KIND = "handle_not_found"


class InvalidSessionFile(SessiondError):
    """``1004``: the file is not a pi session (``data["path"]``)."""

    KIND = "invalid_session_file"


class InvalidSessionId(SessiondError):
    """``1005``: the session id breaks pi's rule."""

    KIND = "invalid_session_id"


class SessiondIOError(SessiondError):
    """``1006``: the file system failed; ``data["path"]`` names the file."""

    KIND = "io_error"


class SessionLocked(SessiondError):
    """``1007``: another process holds the session's write lock; ``data["pid"]`` is its process id when known,
    ``data["path"]`` the file."""

    KIND = "session_locked"


class InvalidEntry(SessiondError):
    """``1008``: the session holds an entry pi cannot read for this operation (pi throws a ``TypeError``);
    ``data["line"]`` names its line."""

    KIND = "invalid_entry"


class SessionPoisoned(SessiondError):
    """``1009``: an earlier fsync failed (or a failed write could not be cut back), so what is on disk is unknown:
    the session refuses writes until the file is opened again; reads still work. ``data["path"]`` names the file."""

    KIND = "session_poisoned"


class CatalogUnavailable(SessiondError):
    """``1020``: the team catalog (``--catalog``) failed or cannot be reached; nothing was changed, and the next
    request connects again."""

    KIND = "catalog_unavailable"


class ReadOnly(SessiondError):
    """``1021``: the handle holds another machine's session, opened read-only from the team catalog;
    ``data["machine"]`` names that machine."""

    KIND = "read_only"


#: One class per error code of ``protocol/methods.json``; a test checks this table against the contract (codes and
#: ``data.kind``), so a code added there fails the tests until it has a class here.
_BY_CODE: Dict[int, Type[SessiondError]] = {
    -32700: ParseError,
    -32600: InvalidRequest,
    -32601: MethodNotFound,
    -32602: InvalidParams,
    -32603: InternalError,
    -32800: RequestCancelled,
    -32801: ContentModified,
    1001: SessionNotFound,
    1002: EntryNotFound,
    1003: HandleNotFound,
    1004: InvalidSessionFile,
    1005: InvalidSessionId,
    1006: SessiondIOError,
    1007: SessionLocked,
    1008: InvalidEntry,
    1009: SessionPoisoned,
    1020: CatalogUnavailable,
    1021: ReadOnly,
}


class SessiondClosed(SessiondException):
    """The server is gone: it exited or was killed, or the client was closed.

    Raised by every call that was pending when that happened and by every call made afterwards.

    Attributes:
        returncode: the server's exit status when known (negative: killed by that signal).
        stderr_tail: the last lines the server wrote to stderr, for diagnosis.
    """

    returncode: Optional[int]
    stderr_tail: str

    def __init__(self, message: str, returncode: Optional[int] = None, stderr_tail: str = ""):
        self.returncode = returncode
        self.stderr_tail = stderr_tail
        text = message
        if returncode is not None and returncode < 0:
            text += f" (killed by {_signal_name(-returncode)})"
        elif returncode is not None:
            text += f" (exit status {returncode})"
        if stderr_tail:
            text += "\nlast lines of its stderr:\n" + stderr_tail
        super().__init__(text)


def _signal_name(number: int) -> str:
    """``SIGKILL`` for 9, as the TypeScript client says it; the number for one Python does not name."""
    import signal

    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class SessiondTimeout(SessiondException, TimeoutError):
    """A call got no answer within its ``timeout`` (a cancellable request was also cancelled on the server)."""


class SessiondNotFound(SessiondException, FileNotFoundError):
    """The ``pi-sessiond`` binary could not be found (explicit path, ``PI_SESSIOND_BIN``, or ``PATH``)."""
