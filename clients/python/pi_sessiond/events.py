"""Change events: their shapes, and the stream that delivers them to an iterator.

Events are plain dicts, like everything else the server sends. A :class:`Session` delivers the params of
``session/changed`` as they arrive (``change.kind`` is ``append``, ``leaf``, ``rebind``, ``reset`` or
``deleted``), plus one event the client makes itself: ``change.kind == "resync"`` when the ``seq`` numbers show
that notifications were lost (see :class:`ResyncChange`).

The notification shapes are the generated ones of :mod:`pi_sessiond.types` (``SessionChanged``,
``SessionsChanged``); only what the client adds, the resync, is written here by hand.
"""

import collections
import logging
import threading
from typing import Any, Callable, Deque, Dict, Generic, Iterator, List, Literal, Optional, TypedDict, TypeVar, Union

from .types import AnyValue, Change, SessionsChanged, SessionState

# The variants of Change, which it names as strings: typing.get_type_hints(SessionEvent) resolves those in this
# module (a test checks that it does).
from .types import ChangeAppend, ChangeDeleted, ChangeLeaf, ChangeRebind, ChangeReset  # noqa: F401  isort:skip

__all__ = ["ChangeStream", "ResyncChange", "SessionEvent", "SessionsChanged"]

log = logging.getLogger("pi_sessiond")

E = TypeVar("E")


class ResyncChange(TypedDict):
    """What a resync event carries in its ``change`` member.

    The client saw ``seq`` jump (say from 4 to 7): notifications 5 and 6 were lost. It read the session's state
    again with ``session/getState`` and delivers this instead of notification 7. Anyone mirroring the session
    should re-read what it mirrors (``get_tree_flat``, ``get_entries``…).

    The resync is exact: ``state["seq"]`` is the ``seq`` of the last change the state includes (7, or more if
    later changes were made before the state was read). The event's own ``seq`` is that number, and the
    notifications up to it that arrive afterwards are not delivered, since the state already holds them: the
    next event is ``state["seq"] + 1``. ``state`` is ``None`` when it could not be read (the handle was closed
    meanwhile); the event's ``seq`` is then the notification's.
    """

    kind: Literal["resync"]
    #: What ``session/getState`` returned after the gap was seen.
    state: Optional[SessionState]
    #: The ``seq`` numbers that never arrived.
    missed: List[int]
    #: The ``session/changed`` params that revealed the gap (included in ``state``).
    notification: Dict[str, Any]


class _SessionEventRequired(TypedDict):
    handle: str
    sessionId: AnyValue
    seq: int
    change: Union[Change, ResyncChange]


class SessionEvent(_SessionEventRequired, total=False):
    """One event of a :class:`Session`: the ``session/changed`` params (:class:`pi_sessiond.types.SessionChanged`),
    or a resync (``change.kind == "resync"``).

    The same members as ``SessionChanged`` (a test checks it); only ``change`` may also be a
    :class:`ResyncChange`. ``origin`` is ``"external"`` for changes another process made to the file.
    """

    leafId: Optional[AnyValue]
    origin: Optional[str]


class ChangeStream(Generic[E]):
    """Events delivered to an iterator, buffered from the moment the stream was created.

    Iterate with ``for event in stream:``: each step waits up to ``timeout`` seconds (the stream's default, or
    ``None``: forever) for the next event, and the loop ends when none arrives in time or when the stream ends
    (its session or watch was closed, the client was closed, or :meth:`close` was called). Events buffered
    before the end are still delivered. A stream may be iterated again after a timeout. When the server died
    (it was not closed), the loop raises :class:`pi_sessiond.SessiondClosed` once the buffered events are
    delivered, so that a script can tell a crash from a quiet session or its own close.

    Streams are thread-safe; use one as a context manager to unsubscribe when done.
    """

    def __init__(self, timeout: Optional[float] = None, maxlen: Optional[int] = None,
                 on_close: Optional[Callable[["ChangeStream[E]"], None]] = None):
        self.timeout = timeout
        self._events: Deque[E] = collections.deque(maxlen=maxlen)
        self._cond = threading.Condition()
        self._ended = False
        self._failure: Optional[BaseException] = None
        self._on_close = on_close

    def put(self, event: E) -> None:
        """Adds an event (called by the client's dispatcher)."""
        with self._cond:
            if self._ended:
                return
            self._events.append(event)
            self._cond.notify_all()

    def end(self, failure: Optional[BaseException] = None) -> None:
        """No more events will come; iteration stops once the buffer is drained, raising ``failure`` if given
        (the server died)."""
        with self._cond:
            if not self._ended:
                self._failure = failure
            self._ended = True
            self._cond.notify_all()

    @property
    def ended(self) -> bool:
        """True once the stream will receive nothing more."""
        return self._ended

    def get(self, timeout: Optional[float] = None) -> Optional[E]:
        """The next event, waiting up to ``timeout`` seconds (``None``: until one comes or the stream ends).

        Returns ``None`` on timeout or when the stream has ended and is drained.

        Raises:
            SessiondClosed: the stream ended because the server died, and is drained.
        """
        with self._cond:
            if not self._events and not self._ended:
                self._cond.wait_for(lambda: bool(self._events) or self._ended, timeout)
            if self._events:
                return self._events.popleft()
            if self._ended and self._failure is not None:
                raise self._failure
            return None

    def drain(self) -> List[E]:
        """Every event buffered now, without waiting."""
        with self._cond:
            events = list(self._events)
            self._events.clear()
            return events

    def __iter__(self) -> Iterator[E]:
        while True:
            event = self.get(self.timeout)
            if event is None:
                return
            yield event

    def close(self) -> None:
        """Unsubscribes and ends the stream."""
        self.end()
        if self._on_close is not None:
            callback, self._on_close = self._on_close, None
            callback(self)

    def __enter__(self) -> "ChangeStream[E]":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Listeners(Generic[E]):
    """The callbacks and streams of one session or watch. Delivery happens on the client's dispatcher thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: List[Callable[[E], Any]] = []
        self._streams: List[ChangeStream[E]] = []
        self._ended = False
        self._failure: Optional[BaseException] = None

    def add_callback(self, fn: Callable[[E], Any]) -> Callable[[], None]:
        """Registers ``fn``; returns a function that unregisters it."""
        with self._lock:
            self._callbacks.append(fn)

        def unsubscribe() -> None:
            with self._lock:
                if fn in self._callbacks:
                    self._callbacks.remove(fn)

        return unsubscribe

    def add_stream(self, timeout: Optional[float], maxlen: Optional[int] = None) -> ChangeStream[E]:
        """A new stream that receives every event from now on."""
        stream: ChangeStream[E] = ChangeStream(timeout, maxlen, on_close=self._remove_stream)
        with self._lock:
            if self._ended:
                stream.end(self._failure)
            else:
                self._streams.append(stream)
        return stream

    def _remove_stream(self, stream: ChangeStream[E]) -> None:
        with self._lock:
            if stream in self._streams:
                self._streams.remove(stream)

    @property
    def active(self) -> bool:
        """True when someone listens."""
        return bool(self._callbacks or self._streams)

    def deliver(self, event: E) -> None:
        """Hands ``event`` to every stream, then every callback (a failing callback is logged, not raised)."""
        with self._lock:
            streams = list(self._streams)
            callbacks = list(self._callbacks)
        for stream in streams:
            stream.put(event)
        for fn in callbacks:
            try:
                fn(event)
            except Exception:
                log.exception("change callback %r failed", fn)

    def end(self, failure: Optional[BaseException] = None) -> None:
        """Ends every stream (raising ``failure`` at its end, if given) and drops every callback."""
        with self._lock:
            if not self._ended:
                self._failure = failure
            self._ended = True
            streams, self._streams = self._streams, []
            self._callbacks = []
        for stream in streams:
            stream.end(failure)
