"""Writing pi session files for the tests: a header line, then entries linked by id/parentId."""

import json
import os
import uuid
from typing import Any, Dict, List, Optional, Sequence

# 2025-01-01T00:00:00Z in milliseconds: message timestamps count from here, so listings sort predictably.
EPOCH_MS = 1735689600000


def iso(ms: int) -> str:
    """An ISO timestamp like pi writes (milliseconds, Z)."""
    import datetime

    dt = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def header(session_id: Optional[str] = None, cwd: str = "/tmp/project", ms: int = EPOCH_MS) -> Dict[str, Any]:
    """A version 3 header."""
    return {"type": "session", "version": 3, "id": session_id or str(uuid.uuid4()), "timestamp": iso(ms), "cwd": cwd}


def message(entry_id: str, parent_id: Optional[str], role: str, text: str, ms: int) -> Dict[str, Any]:
    """A message entry; assistant messages use content blocks, as pi writes them."""
    content: Any = text if role == "user" else [{"type": "text", "text": text}]
    body: Dict[str, Any] = {"role": role, "content": content, "timestamp": ms}
    if role == "assistant":
        body.update({"api": "anthropic-messages", "provider": "anthropic", "model": "claude-test",
                     "stopReason": "stop", "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0,
                                                     "totalTokens": 2}})
    return {"type": "message", "id": entry_id, "parentId": parent_id, "timestamp": iso(ms), "message": body}


def conversation(texts: Sequence[str], start_ms: int = EPOCH_MS + 1000, prefix: str = "e") -> List[Dict[str, Any]]:
    """A linear conversation, user and assistant in turn, ids ``e1``, ``e2``…, one second apart."""
    entries = []
    parent = None
    for i, text in enumerate(texts, 1):
        entry_id = f"{prefix}{i}"
        role = "user" if i % 2 else "assistant"
        entries.append(message(entry_id, parent, role, text, start_ms + i * 1000))
        parent = entry_id
    return entries


def write_session(path: "os.PathLike[str]", entries: Sequence[Dict[str, Any]], session_id: Optional[str] = None,
                  cwd: str = "/tmp/project") -> str:
    """Writes header + entries as JSON lines; returns the session id."""
    head = header(session_id, cwd)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for line in [head, *entries]:
            f.write(json.dumps(line) + "\n")
    return head["id"]


def read_lines(path: "os.PathLike[str]") -> List[Dict[str, Any]]:
    """The file's lines, parsed (split on b"\\n" only, like the client)."""
    with open(path, "rb") as f:
        return [json.loads(line) for line in f.read().split(b"\n") if line.strip()]
