"""Python client of pi-sessiond, the JSON-RPC sidecar that owns the session files of the pi coding agent.

::

    from pi_sessiond import Client, format_tree

    with Client.spawn() as client:
        for info in client.list_all():
            print(info["path"], info["firstMessage"])

Standard library only. See ``clients/python/README.md`` and the protocol description in ``protocol/README.md``.
"""

import importlib
from typing import TYPE_CHECKING, Any, List

from ._version import __version__

# The public names, by module. They are imported on first use (PEP 562) rather than here, so that
# `python -m pi_sessiond._generate > pi_sessiond/types.py` works: the shell empties types.py before Python starts,
# and an eager import of the client (which imports types.py) would then fail before the generator could run.
_EXPORTS = {
    ".client": ["Client", "Session", "SessionsWatch", "find_binary"],
    ".errors": [
        "CatalogUnavailable",
        "ContentModified",
        "EntryNotFound",
        "HandleNotFound",
        "InternalError",
        "InvalidEntry",
        "InvalidParams",
        "InvalidRequest",
        "InvalidSessionFile",
        "InvalidSessionId",
        "MethodNotFound",
        "ParseError",
        "ReadOnly",
        "RequestCancelled",
        "SessiondClosed",
        "SessiondError",
        "SessiondException",
        "SessiondIOError",
        "SessiondNotFound",
        "SessiondTimeout",
        "SessionLocked",
        "SessionNotFound",
        "SessionPoisoned",
    ],
    ".events": ["ChangeStream", "ResyncChange", "SessionEvent", "SessionsChanged"],
    ".mirror": ["MirroredSession", "SessionView"],
    ".tree": ["describe_entry", "format_tree"],
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = ["__version__", *sorted(_MODULE_OF)]

if TYPE_CHECKING:  # what type checkers and IDEs see
    from .client import Client, Session, SessionsWatch, find_binary
    from .errors import (
        CatalogUnavailable,
        ContentModified,
        EntryNotFound,
        HandleNotFound,
        InternalError,
        InvalidEntry,
        InvalidParams,
        InvalidRequest,
        InvalidSessionFile,
        InvalidSessionId,
        MethodNotFound,
        ParseError,
        ReadOnly,
        RequestCancelled,
        SessiondClosed,
        SessiondError,
        SessiondException,
        SessiondIOError,
        SessiondNotFound,
        SessiondTimeout,
        SessionLocked,
        SessionNotFound,
        SessionPoisoned,
    )
    from .events import ChangeStream, ResyncChange, SessionEvent, SessionsChanged
    from .mirror import MirroredSession, SessionView
    from .tree import describe_entry, format_tree


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_MODULE_OF))
