"""Draw a session tree (``session.get_tree_flat()`` or ``session.get_tree()``) for a person.

The drawing is the one ``pi-sessiond tree FILE`` prints (the same connectors, one line per entry, labels in
brackets, the leaf marked, control characters in the text shown as pictures), so a script and the command line
show a session the same way; a test checks that they agree on the same file.
"""

import json
import math
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from .types import SessionEntry, SessionTreeFlatItem, SessionTreeNode, SkeletonEntry

_PREVIEW_CHARS = 72
# How much of a custom message's type the phrase shows, as the server's (`PREVIEW_CHARS`).
_CUSTOM_TYPE_CHARS = 160
_MISSING = object()
# Control characters as ``pi-sessiond tree`` shows them (its ``terminal_safe``): C0 as their pictures (``␛`` for
# ESC), DEL as ``␡``, C1 as ``�``, the bidi embedding, override and isolate controls (which reorder the rest of a
# line) as ``<U+202E>``; newlines and tabs never reach a line (previews are one line already).
_TERMINAL_SAFE: Dict[int, Union[int, str]] = {c: 0x2400 + c for c in range(0x20) if c not in (0x09, 0x0A)}
_TERMINAL_SAFE.update({0x7F: 0x2421, **{c: 0xFFFD for c in range(0x80, 0xA0)}})
_TERMINAL_SAFE.update({c: f"<U+{c:04X}>" for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]})


def format_tree(tree: Union[Sequence[SessionTreeFlatItem], Sequence[SessionTreeNode]],
                leaf_id: Optional[str] = None) -> str:
    """The tree as text, one line per entry (no trailing newline).

    Each line is ``<id> <what>``: a message's role and the start of its text, a model or thinking-level change,
    a compaction or branch summary, a label, … followed by `` [label]`` when the entry is labelled and
    `` ◀ leaf`` on the entry whose id is ``leaf_id``; entries on the path from the root to the leaf start with
    pi's ``• `` (as ``pi-sessiond tree`` draws them). A node with one child continues at the same depth (a
    conversation reads as a column); branches get ``├─``/``└─`` connectors, the one holding the leaf first (as pi's
    /tree and ``pi-sessiond tree`` draw them), the others in the tree's order.

    Args:
        tree: what :meth:`Session.get_tree_flat` returns (items ``{entry, parentIndex, depth, label?}`` in
            pre-order), or the nested tree of :meth:`Session.get_tree` (root nodes ``{entry, children, label?}``).
            Both draw the same; the flat one has no depth limit anywhere on the way. The flat tree at skeleton
            detail (:meth:`Session.get_tree_flat_page` with ``detail="skeleton"``) draws the same too, from the
            server's previews and without the entries' bodies (see :func:`describe_entry`).
        leaf_id: the entry to mark as the leaf, usually :meth:`Session.get_leaf_id`.
    """
    roots, children, entry_of, label_of = _shape(tree)
    active = _active_path(roots, children, entry_of, leaf_id)

    def leaf_first(nodes: Sequence[Any]) -> List[Any]:
        # pi's /tree puts the branch holding the leaf first among its siblings: a node holds it exactly when it
        # is on the leaf's path. The others keep getTree's order.
        return sorted(nodes, key=lambda node: entry_of(node).get("id") not in active)

    roots = leaf_first(roots)
    lines: List[str] = []
    # (node, prefix of its line, is the last sibling, is drawn without a connector). An explicit stack rather
    # than recursion: a long conversation is a chain thousands of entries deep.
    stack: List[Tuple[Any, str, bool, bool]] = [(node, "", False, True) for node in reversed(roots)]
    while stack:
        node, prefix, last, bare = stack.pop()
        entry = entry_of(node)
        connector = "" if bare else ("└─ " if last else "├─ ")
        label = label_of(node)
        label_text = "" if label is _MISSING else f" [{_js_string(label)}]"
        is_leaf = leaf_id is not None and entry.get("id") == leaf_id
        marker = " ◀ leaf" if is_leaf else ""
        bullet = "• " if entry.get("id") in active else ""
        # A tool's output in a preview must not clear the screen or retitle the window of whoever prints this.
        text = f"{describe_entry(entry)}{label_text}".replace("\r\n", "\n").translate(_TERMINAL_SAFE)
        lines.append(f"{prefix}{connector}{bullet}{text}{marker}")
        child_prefix = prefix if bare else prefix + ("   " if last else "│  ")
        kids = leaf_first(children(node))
        # A single child continues the line of conversation without another level of indentation.
        single = len(kids) == 1
        for i in range(len(kids) - 1, -1, -1):
            if single:
                stack.append((kids[i], child_prefix, True, True))
            else:
                stack.append((kids[i], child_prefix, i == len(kids) - 1, False))
    return "\n".join(lines)


def _active_path(roots: List[Any], children: Any, entry_of: Any, leaf_id: Optional[str]) -> set:
    """The ids of the entries from the root to ``leaf_id`` (none without a leaf), walking the drawn tree."""
    if leaf_id is None:
        return set()
    parent_of = {}
    stack = [(node, None) for node in roots]
    while stack:
        node, parent = stack.pop()
        entry_id = entry_of(node).get("id")
        parent_of[entry_id] = parent
        stack.extend((child, entry_id) for child in children(node))
    path = set()
    at: Optional[str] = leaf_id
    while at is not None and at in parent_of and at not in path:
        path.add(at)
        at = parent_of[at]
    return path


def _shape(tree: Sequence[Any]) -> Tuple[List[Any], Any, Any, Any]:
    """The roots of either tree shape, and how to get a node's children, entry and label."""
    if any(isinstance(item, dict) and "parentIndex" in item for item in tree):
        # Flat: nodes are positions in the list; pre-order lists each node's children in their order.
        items = list(tree)
        kids: List[List[int]] = [[] for _ in items]
        roots = []
        for i, item in enumerate(items):
            parent = item.get("parentIndex")
            if isinstance(parent, int) and not isinstance(parent, bool) and 0 <= parent < i:
                kids[parent].append(i)
            elif parent is None:
                roots.append(i)
            else:
                raise ValueError(f"tree item {i} has parentIndex {parent!r}: not an earlier item of the list")
        return (roots, kids.__getitem__, lambda i: items[i].get("entry") or {},
                lambda i: items[i].get("label", _MISSING))
    return (list(tree), lambda node: node.get("children") or [], lambda node: node.get("entry") or {},
            lambda node: node.get("label", _MISSING))


def describe_entry(entry: Union[SessionEntry, SkeletonEntry]) -> str:
    """One line about an entry: its id, then its type or role and a preview of its text.

    The words are those ``pi-sessiond tree`` prints, around a preview of 72 characters. An entry at ``skeleton``
    detail (as :meth:`Session.get_tree_flat_page` gives it with ``detail="skeleton"``: no body, its size in
    ``bytes``) brings the server's own preview, which is used as it is: the server's one description of an
    entry. A full entry (pi's ``SessionEntry``) has no preview, and this function asks no server, so its text is
    found here by the server's rules (``src/session/describe.rs``): a message's content with tool calls as
    ``→ name`` and images as ``[image]``, a bash execution as ``$ command``, a summary message's summary, and
    for other types the values that say what they changed. A test checks that both give the same lines.
    """
    e: Any = entry
    kind = e.get("type")
    if _is_skeleton(e):
        role = e.get("role")
        preview = e.get("preview")
        preview = _one_line(preview if isinstance(preview, str) else "", _PREVIEW_CHARS)
    else:
        message = e.get("message")
        role = message.get("role") if kind == "message" and isinstance(message, dict) else None
        preview = _one_line(_text(e), _PREVIEW_CHARS)
    if kind == "message":
        what = f"{role if isinstance(role, str) else 'message'}: {preview}"
    elif kind in ("thinking_level_change", "model_change"):
        what = preview
    elif kind == "compaction":
        what = f"compaction: {preview}"
    elif kind == "branch_summary":
        what = f"branch summary: {preview}"
    elif kind == "custom_message":
        what = f"custom message ({_one_line(_member(e, 'customType'), _CUSTOM_TYPE_CHARS)}): {preview}"
    elif kind == "custom":
        what = f"custom ({preview})"
    elif kind == "label":
        what = f"label {preview}"
    elif kind == "session_info":
        what = f"name: {preview}"
    elif kind == "usage":
        what = f"usage ({preview})"
    elif kind == "context_edit":
        what = f"context edit of {preview}"
    else:
        what = _member(e, "type")
    entry_id = e.get("id", _MISSING)
    return f"{'undefined' if entry_id is _MISSING else _js_string(entry_id)} {what}"


def _is_skeleton(entry: Dict[str, Any]) -> bool:
    """An entry at skeleton detail: its size in ``bytes`` (no pi entry has that member) and no body."""
    size = entry.get("bytes")
    return isinstance(size, int) and not isinstance(size, bool) and "message" not in entry


def _member(entry: Dict[str, Any], key: str) -> str:
    """``String(entry[key])``, or ``""`` when the entry has no such member."""
    value = entry.get(key, _MISSING)
    return "" if value is _MISSING else _js_string(value)


def _text(e: Dict[str, Any]) -> str:
    """A full entry's text before it is put on one line, by the server's rules."""
    kind = e.get("type")
    if kind == "message":
        message = e.get("message")
        if not isinstance(message, dict):
            return ""
        if message.get("role") == "bashExecution":
            return f"$ {_member(message, 'command')}"
        if message.get("content") is not None:
            return _content_text(message["content"])
        # branchSummary and compactionSummary messages carry a summary instead of content.
        return _member(message, "summary")
    if kind == "thinking_level_change":
        return f"thinking level → {_member(e, 'thinkingLevel')}"
    if kind == "model_change":
        return f"model → {_member(e, 'provider')}/{_member(e, 'modelId')}"
    if kind in ("compaction", "branch_summary"):
        summary = e.get("summary")
        return summary if isinstance(summary, str) else ""
    if kind == "custom_message":
        return _content_text(e.get("content"))
    if kind == "label":
        return f"{_member(e, 'targetId')} → {_member(e, 'label')}"
    key = {"custom": "customType", "session_info": "name", "usage": "kind", "context_edit": "targetId"}.get(kind)
    return _member(e, key) if key else ""


def _content_text(content: Any) -> str:
    """Message content as text: a string, or blocks of which text shows as itself, a tool call as ``→ name``
    and an image as ``[image]``, joined by spaces."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for block in content:
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            continue
        if block["type"] == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif block["type"] == "toolCall":
            parts.append(f"→ {_member(block, 'name')}")
        elif block["type"] == "image":
            parts.append("[image]")
    return " ".join(parts)


def _one_line(text: str, max_chars: int) -> str:
    """``text`` on one line (white space runs made one space), cut after ``max_chars`` characters with ``…``."""
    one_line = " ".join(text.split())
    if len(one_line) > max_chars:
        return one_line[:max_chars] + "…"
    return one_line


def _js_string(value: Any) -> str:
    """``String(value)`` as JavaScript computes it, for the JSON values entries hold."""
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isfinite(value) and value == int(value) and abs(value) < 1e21:
            return str(int(value))
        return json.dumps(value)
    if isinstance(value, list):
        return ",".join("" if v is None else _js_string(v) for v in value)
    return "[object Object]"
