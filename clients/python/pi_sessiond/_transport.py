"""The JSON-RPC connection to a pi-sessiond child process: framing, request/response matching, notifications.

Threads:

* the **reader** does a binary ``readline()`` on the child's stdout, one JSON text per line. It splits on
  ``b"\\n"`` only (never ``str.splitlines()``, which also splits on U+2028 and friends inside strings) and has no
  line-length limit, so a 40 MB ``getTree`` arrives whole, and no depth limit (:func:`decode_json`), so a
  ``getTree`` thousands of levels deep does too. Responses are matched to their request by ``id`` (the server
  answers out of order); notifications are queued for the dispatcher.
* the **dispatcher** runs notification handlers one at a time, in arrival order, so a callback may itself call
  the server (its answer is delivered by the reader, not by the busy dispatcher).
* the **stderr drain** reads the child's stderr so the child never blocks on a full pipe, forwards each line to
  the ``pi_sessiond.server`` logger and keeps the last lines for error messages.

Writes to stdin happen under one lock, a whole frame at a time, from whichever thread calls.

The server writes ``session/changed`` *before* the response of the mutation that caused it, so a host's mirror
is current when a call returns. To keep that promise across the two threads, each response remembers how many
notifications had arrived before it, and the call returns only once the dispatcher has handled that many (unless
the caller *is* the dispatcher, which would wait for itself).
"""

import collections
import json
import logging
import queue
import re
import subprocess
import threading
from json.decoder import JSONDecodeError
from json.decoder import scanstring  # type: ignore[attr-defined]  # public since Python 2, not in typeshed
from json.scanner import NUMBER_RE
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple

from .errors import SessiondClosed, SessiondError, SessiondTimeout

log = logging.getLogger("pi_sessiond")
server_log = logging.getLogger("pi_sessiond.server")

_STDERR_TAIL_LINES = 40


class _Call:
    """One request waiting for its response."""

    __slots__ = ("method", "done", "response", "barrier", "closed")

    def __init__(self, method: str):
        self.method = method
        self.done = threading.Event()
        self.response: Optional[Dict[str, Any]] = None
        # How many notifications had arrived when the response did.
        self.barrier = 0
        self.closed: Optional[SessiondClosed] = None


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def encode_json(value: Any) -> bytes:
    """One frame's JSON text, as UTF-8 bytes (without the final newline).

    Non-ASCII text travels as UTF-8, not as ``\\uXXXX`` escapes: frames stay half the size for most scripts and
    the server parses them faster. A raw U+2028 is harmless because frames are split on the byte ``\\n`` only, and
    no UTF-8 sequence contains that byte. A lone surrogate (which pi writes when a model's output is cut inside
    an emoji) cannot be encoded in UTF-8 at all, so it travels as a ``\\udXXX`` escape, which the server accepts
    and stores as pi would. ``allow_nan=False``: NaN is not JSON, and a frame the server cannot parse is answered
    with ``id: null``, which no pending call could be matched to.
    """
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # Only inside JSON strings can a surrogate appear, so escaping each one keeps the text valid JSON.
        return _LONE_SURROGATE.sub(lambda m: "\\u%04x" % ord(m.group()), text).encode("utf-8")


_WHITESPACE = re.compile(r"[ \t\n\r]*")
_CONSTANTS = (("null", None), ("true", True), ("false", False), ("NaN", float("nan")),
              ("Infinity", float("inf")), ("-Infinity", float("-inf")))


def decode_json(data: bytes) -> Any:
    """One frame's JSON text, decoded, at any depth.

    ``json.loads`` recurses once per nesting level and raises :class:`RecursionError` near Python's recursion
    limit (about 1000 levels). The server's output can be deeper than that: ``session/getTree`` nests one level
    per entry of the longest branch (two JSON levels each), so a 600-entry conversation already fails. Such a
    frame is decoded again by :func:`decode_json_iteratively`, which keeps its own stack: slower, but without a
    depth limit, so the call gets its answer instead of breaking the connection.
    """
    try:
        return json.loads(data)
    except RecursionError:
        return decode_json_iteratively(data.decode("utf-8", "surrogatepass"))


def decode_json_iteratively(text: str) -> Any:
    """``json.loads(text)`` without recursion: the same values (``int``/``float``, lone surrogates kept, the
    last of duplicate keys), the same errors (:class:`json.JSONDecodeError`), at any nesting depth."""
    # Containers still open, innermost last, each with the key its next value goes under (objects).
    stack: List[Tuple[Any, Optional[str]]] = []
    end = len(text)
    pos = _WHITESPACE.match(text, 0).end()  # type: ignore[union-attr]
    while True:
        # A value starts at pos.
        char = text[pos:pos + 1]
        if char == "{" or char == "[":
            pos = _WHITESPACE.match(text, pos + 1).end()  # type: ignore[union-attr]
            closer = "}" if char == "{" else "]"
            if text[pos:pos + 1] == closer:
                value: Any = {} if char == "{" else []
                pos += 1
            elif char == "{":
                key, pos = _object_key(text, pos)
                stack.append(({}, key))
                continue
            else:
                stack.append(([], None))
                continue
        elif char == '"':
            value, pos = scanstring(text, pos + 1, True)
        else:
            for name, constant in _CONSTANTS:
                if text.startswith(name, pos):
                    value = constant
                    pos += len(name)
                    break
            else:
                number = NUMBER_RE.match(text, pos)
                if number is None:
                    raise JSONDecodeError("Expecting value", text, pos)
                integer, frac, exp = number.groups()
                value = float(integer + (frac or "") + (exp or "")) if frac or exp else int(integer)
                pos = number.end()
        # The value is complete: put it in its container, and close every container that ends here.
        while True:
            pos = _WHITESPACE.match(text, pos).end()  # type: ignore[union-attr]
            if not stack:
                if pos != end:
                    raise JSONDecodeError("Extra data", text, pos)
                return value
            container, member = stack[-1]
            is_object = isinstance(container, dict)
            if is_object:
                container[member] = value
            else:
                container.append(value)
            char = text[pos:pos + 1]
            if char == ",":
                pos = _WHITESPACE.match(text, pos + 1).end()  # type: ignore[union-attr]
                if is_object:
                    key, pos = _object_key(text, pos)
                    stack[-1] = (container, key)
                break
            if char == ("}" if is_object else "]"):
                stack.pop()
                value = container
                pos += 1
                continue
            raise JSONDecodeError("Expecting ',' delimiter", text, pos)


def _object_key(text: str, pos: int) -> Tuple[str, int]:
    """A member's key and its colon, from ``pos``; returns the key and where the member's value starts."""
    if text[pos:pos + 1] != '"':
        raise JSONDecodeError("Expecting property name enclosed in double quotes", text, pos)
    key, pos = scanstring(text, pos + 1, True)
    pos = _WHITESPACE.match(text, pos).end()  # type: ignore[union-attr]
    if text[pos:pos + 1] != ":":
        raise JSONDecodeError("Expecting ':' delimiter", text, pos)
    return key, _WHITESPACE.match(text, pos + 1).end()  # type: ignore[union-attr]


class Connection:
    """A running pi-sessiond and the threads that talk to it. Used through :class:`pi_sessiond.Client`."""

    def __init__(
        self,
        argv: Sequence[str],
        env: Optional[Dict[str, str]],
        handler: Callable[[str, Any], None],
        stderr: Any = None,
        on_closed: Optional[Callable[[], None]] = None,
    ):
        """Starts the child and the threads.

        Args:
            argv: the command line.
            env: the child's environment (``None``: this process's).
            handler: called on the dispatcher thread with ``(method, params)`` for every notification.
            stderr: ``None`` to drain the child's stderr into the ``pi_sessiond.server`` logger; anything else is
                passed to :class:`subprocess.Popen` (a file, ``subprocess.DEVNULL``…).
            on_closed: called on the dispatcher thread once the child's output has ended and every notification
                before the end has been handled.
        """
        self._handler = handler
        self._on_closed = on_closed
        self._proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if stderr is None else stderr,
            env=env,
            close_fds=True,
        )
        self.pid = self._proc.pid
        self._write_lock = threading.Lock()
        self._lock = threading.Lock()  # guards _pending, _next_id, _closed
        self._pending: Dict[int, _Call] = {}
        self._next_id = 1
        self._closed: Optional[SessiondClosed] = None
        self._closing = False
        self._notes_received = 0  # written by the reader only
        self._notes_done = 0  # written by the dispatcher only, under _done
        self._dispatch_over = False
        self._done = threading.Condition()
        self._queue: "queue.SimpleQueue[Optional[tuple]]" = queue.SimpleQueue()
        self._stderr_tail: Deque[str] = collections.deque(maxlen=_STDERR_TAIL_LINES)
        #: Test hook: a predicate ``(method, params) -> bool``; notifications it accepts are dropped as if they
        #: had been lost, to exercise gap detection. Runs on the reader thread.
        self.drop_notification: Optional[Callable[[str, Any], bool]] = None

        self._stderr_thread: Optional[threading.Thread] = None
        if self._proc.stderr is not None:
            self._stderr_thread = threading.Thread(
                target=self._drain_stderr, name=f"pi-sessiond-{self.pid}-stderr", daemon=True
            )
            self._stderr_thread.start()
        self._dispatcher = threading.Thread(
            target=self._dispatch_loop, name=f"pi-sessiond-{self.pid}-dispatch", daemon=True
        )
        self._dispatcher.start()
        self._reader = threading.Thread(target=self._read_loop, name=f"pi-sessiond-{self.pid}-reader", daemon=True)
        self._reader.start()

    # -- calls ---------------------------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once the child's output has ended (it exited, was killed, or was closed)."""
        return self._closed is not None

    @property
    def failure(self) -> Optional[SessiondClosed]:
        """Why the child's output ended when it was not closed on purpose (it died), else ``None``."""
        return None if self._closing else self._closed

    @property
    def returncode(self) -> Optional[int]:
        """The child's exit status, once it has exited."""
        return self._proc.poll()

    def in_dispatcher(self) -> bool:
        """True when called from a notification handler (the dispatcher thread)."""
        return threading.current_thread() is self._dispatcher

    def request(self, method: str, params: Optional[Dict[str, Any]] = None, timeout: Optional[float] = None) -> Any:
        """Sends a request and waits for its result.

        Raises:
            SessiondError: the server answered with an error.
            SessiondClosed: the server is gone (before or while waiting).
            SessiondTimeout: no answer within ``timeout`` seconds; the request is cancelled on the server
                (``$/cancelRequest``: reads and listings stop, a mutation is still applied whole).
        """
        # Encode before registering: a value that is not JSON fails here, with nothing sent.
        body = encode_json(params if params is not None else {})
        name = encode_json(method)
        call = _Call(method)
        with self._lock:
            if self._closed is not None:
                raise self._closed
            request_id = self._next_id
            self._next_id += 1
            self._pending[request_id] = call
        frame = b'{"jsonrpc":"2.0","id":%d,"method":%s,"params":%s}\n' % (request_id, name, body)
        try:
            self._write(frame)
            answered = call.done.wait(timeout)
        except BaseException:
            # The write failed or the wait was interrupted (Ctrl-C): nobody will wait for this answer any more.
            self._abandon(request_id)
            raise
        if not answered:
            if self._abandon(request_id):
                raise SessiondTimeout(f"{method}: no answer within {timeout} s")
            # Answered (or failed by the server's end) just as the wait timed out: whoever took the call from
            # the pending table sets it done at once. Use that outcome rather than throw it away.
            call.done.wait()
        if call.closed is not None:
            raise call.closed
        self.wait_dispatched(call.barrier)
        response = call.response or {}
        if "error" in response:
            raise SessiondError.from_response(response["error"], method)
        return response.get("result")

    def _abandon(self, request_id: int) -> bool:
        """Forgets a pending request and cancels it on the server; False if it was answered meanwhile."""
        with self._lock:
            abandoned = self._pending.pop(request_id, None) is not None
        if abandoned and self._closed is None:
            try:
                # Reads and listings stop; a mutation is applied whole anyway and its late answer is ignored.
                self.notify("$/cancelRequest", {"id": request_id})
            except SessiondClosed:
                pass
        return abandoned

    def notify(self, method: str, params: Optional[Dict[str, Any]] = None) -> None:
        """Sends a notification (no answer)."""
        self._write(b'{"jsonrpc":"2.0","method":%s,"params":%s}\n' % (encode_json(method), encode_json(params or {})))

    def _write(self, data: bytes) -> None:
        with self._write_lock:
            stdin = self._proc.stdin
            if stdin is None or stdin.closed:
                raise self._closed or SessiondClosed("pi-sessiond's stdin is closed")
            try:
                stdin.write(data)
                stdin.flush()
            except (BrokenPipeError, ValueError, OSError) as e:
                # The child is gone; the reader will see EOF and fail every pending call the same way.
                if threading.current_thread() is not self._reader:
                    self._reader.join(2.0)
                raise self._closed or SessiondClosed(f"cannot write to pi-sessiond: {e}") from e

    def wait_dispatched(self, barrier: int) -> None:
        """Waits until the dispatcher has handled the first ``barrier`` notifications (see the module doc)."""
        if self.in_dispatcher():
            return
        with self._done:
            while self._notes_done < barrier and not self._dispatch_over:
                self._done.wait()

    # -- reading -------------------------------------------------------------------------------------------------

    def _read_loop(self) -> None:
        stdout = self._proc.stdout
        assert stdout is not None
        try:
            while True:
                # Binary readline: splits on b"\n" only, with no length limit.
                line = stdout.readline()
                if not line:
                    break
                if not line.strip():
                    continue
                try:
                    message = decode_json(line)
                except ValueError as e:
                    log.warning("pi-sessiond sent a line that is not JSON (%s): %.200r", e, line)
                    continue
                self._on_message(message)
        except Exception:  # never let the reader die silently: pending calls would hang
            log.exception("pi-sessiond reader failed")
        finally:
            self._on_eof()

    def _on_message(self, message: Any) -> None:
        if isinstance(message, list):
            # A batch answer; this client never sends batches, but a batch of responses is still responses.
            for item in message:
                self._on_message(item)
            return
        if not isinstance(message, dict):
            log.warning("pi-sessiond sent a JSON text that is not a message: %.200r", message)
            return
        method = message.get("method")
        if isinstance(method, str):
            if "id" in message:
                # The protocol has no server-to-client requests; answer as JSON-RPC says rather than leave the
                # server waiting.
                self._answer_unknown_request(message["id"], method)
                return
            params = message.get("params")
            hook = self.drop_notification
            if hook is not None and hook(method, params):
                return
            self._notes_received += 1
            self._queue.put((method, params))
            return
        request_id = message.get("id")
        with self._lock:
            call = self._pending.pop(request_id, None) if isinstance(request_id, int) else None
        if call is None:
            if request_id is None and "error" in message:
                # A frame the server could not read at all (parse error, oversized frame): it cannot say which
                # request it was, so it cannot fail any pending call either.
                log.error("pi-sessiond rejected a frame: %s", message.get("error"))
            else:
                log.debug("answer to a request nobody waits for (timed out or cancelled): id %r", request_id)
            return
        call.response = message
        call.barrier = self._notes_received
        call.done.set()

    def _answer_unknown_request(self, request_id: Any, method: str) -> None:
        error = {"code": -32601, "message": f"the client has no method {method}", "data": {"kind": "method_not_found"}}
        try:
            self._write(encode_json({"jsonrpc": "2.0", "id": request_id, "error": error}) + b"\n")
        except SessiondClosed:
            pass

    def _on_eof(self) -> None:
        """The child's stdout ended: record why, fail every pending call, let the dispatcher finish."""
        returncode = self._wait_exit(5.0)
        if self._stderr_thread is not None:
            # The last stderr lines usually say why it died.
            self._stderr_thread.join(2.0)
        if self._closing:
            error = SessiondClosed("the pi-sessiond client was closed", returncode, self.stderr_tail())
        else:
            error = SessiondClosed("pi-sessiond exited unexpectedly", returncode, self.stderr_tail())
        with self._lock:
            self._closed = error
            calls: List[_Call] = list(self._pending.values())
            self._pending.clear()
        for call in calls:
            call.closed = error
            call.done.set()
        self._queue.put(None)

    def _wait_exit(self, timeout: float) -> Optional[int]:
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            # Stdout closed but the process lives on (it closed the pipe itself?): report without a status.
            return None

    def _drain_stderr(self) -> None:
        stderr = self._proc.stderr
        assert stderr is not None
        for raw in iter(stderr.readline, b""):
            text = raw.decode("utf-8", "replace").rstrip("\r\n")
            self._stderr_tail.append(text)
            server_log.info("%s", text)

    def stderr_tail(self) -> str:
        """The last lines the child wrote to stderr (empty when stderr is not drained)."""
        return "\n".join(self._stderr_tail)

    # -- dispatching ---------------------------------------------------------------------------------------------

    def _dispatch_loop(self) -> None:
        try:
            while True:
                item = self._queue.get()
                if item is None:
                    break
                method, params = item
                try:
                    self._handler(method, params)
                except Exception:
                    log.exception("notification handler failed for %s", method)
                with self._done:
                    self._notes_done += 1
                    self._done.notify_all()
        finally:
            with self._done:
                self._dispatch_over = True
                self._done.notify_all()
            if self._on_closed is not None:
                try:
                    self._on_closed()
                except Exception:
                    log.exception("close handler failed")

    # -- shutting down -------------------------------------------------------------------------------------------

    def begin_close(self) -> None:
        """Marks the close as deliberate (the errors then say "closed", not "exited unexpectedly")."""
        self._closing = True

    def finish(self, timeout: float) -> Optional[int]:
        """Closes stdin, waits up to ``timeout`` s for the child to exit (then kills it), joins the threads.

        Returns the exit status.
        """
        self._closing = True
        # A writer stuck on a full pipe (a child that stopped reading) holds the lock: then kill rather than wait.
        if self._write_lock.acquire(timeout=timeout):
            try:
                if self._proc.stdin is not None:
                    self._proc.stdin.close()
            except OSError:
                pass
            finally:
                self._write_lock.release()
        else:
            self._proc.kill()
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("pi-sessiond (pid %s) did not exit within %s s; killing it", self.pid, timeout)
            self._proc.kill()
            self._proc.wait()
        self._reader.join()
        if not self.in_dispatcher():
            self._dispatcher.join()
        if self._stderr_thread is not None:
            self._stderr_thread.join(2.0)
        for stream in (self._proc.stdout, self._proc.stderr):
            if stream is not None:
                stream.close()
        return self._proc.returncode

    def kill(self) -> None:
        """Kills the child at once (used when the handshake fails)."""
        self._closing = True
        try:
            self._proc.kill()
        except OSError:
            pass
        self.finish(5.0)
