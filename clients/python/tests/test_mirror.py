"""MirroredSession: a mirror built from one snapshot and the changes after it answers pi's reads exactly as pi
1.6.0 does (its own SessionManager, run by the conformance oracle) and as the server does, after every step of own
writes, other processes' appends (real pi's among them), a forced gap repaired with changesSince, and rebinds."""

import json
import os
import subprocess
from typing import Any, Dict, List

from pi_sessiond import MirroredSession
from sessionfiles import conversation, iso, write_session, EPOCH_MS

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ORACLE = os.path.join(REPO, "tests", "conformance", "oracle.mjs")


def oracle(request: Dict[str, Any]) -> Any:
    """Runs pi 1.6.0's SessionManager (tests/conformance, installed by tests/run-all) on a request."""
    assert os.path.isdir(os.path.join(REPO, "tests", "conformance", "node_modules")), \
        "pi 1.6.0 is needed: (cd tests/conformance && npm ci)"
    out = subprocess.run(["node", ORACLE], input=json.dumps(request).encode(), capture_output=True, check=True)
    return json.loads(out.stdout)


def pis_reads(path: str) -> Dict[str, Any]:
    answer = oracle({"command": "reads", "files": [path]})[0]
    assert "ok" in answer, answer
    return answer["ok"]


def plain(v: Any) -> Any:
    """A value as JSON has it (what pi's JSON.stringify and the server send)."""
    return json.loads(json.dumps(v))


def mirror_reads(m: MirroredSession) -> Dict[str, Any]:
    return plain({
        "header": m.get_header(), "entries": m.get_entries(), "leafId": m.get_leaf_id(), "tree": m.get_tree(),
        "branch": m.get_branch(), "contextEntries": m.build_context_entries(),
        "projection": m.build_session_projection(), "context": m.build_session_context(),
        "sessionName": m.get_session_name(), "entryCount": m.get_entry_count(),
    })


def server_reads(m: MirroredSession) -> Dict[str, Any]:
    s = m.session
    return plain({
        "header": s.get_header(), "entries": s.get_entries(), "leafId": s.get_leaf_id(), "tree": s.get_tree(),
        "branch": s.get_branch(), "contextEntries": s.build_context_entries(),
        "projection": s.build_session_projection(), "context": s.build_session_context(),
        "sessionName": s.get_session_name(), "entryCount": s.get_entry_count(),
    })


def check(m: MirroredSession, step: str, path: str = None) -> None:
    """The mirror equals the server's reads (pi's, for the same leaf) and, where the leaf is the file's last entry
    (a fresh open's leaf), pi's own reads of the file."""
    assert m.seq == m.session.get_state()["seq"], f"{step}: the mirror has every change"
    mine = mirror_reads(m)
    theirs = server_reads(m)
    for read in mine:
        assert mine[read] == theirs[read], f"{step}: {read} differs from the server's"
    for entry in mine["entries"]:
        assert plain(m.get_label(entry["id"])) == plain(m.session.get_label(entry["id"])), f"{step}: label"
        assert plain(m.get_children(entry["id"])) == plain(m.session.get_children(entry["id"])), f"{step}: children"
    if path is not None:
        pi = pis_reads(path)
        for read in mine:
            assert mine[read] == pi.get(read), f"{step}: {read} differs from pi's"


def external_line(entry_id: str, parent: str, ms: int, text: str) -> str:
    return json.dumps({"type": "message", "id": entry_id, "parentId": parent, "timestamp": iso(ms),
                       "message": {"role": "user", "content": text, "timestamp": ms}})


def user(text: str, ms: int = 1) -> Dict[str, Any]:
    return {"role": "user", "content": text, "timestamp": ms}


def assistant(blocks: List[Dict[str, Any]], ms: int = 2) -> Dict[str, Any]:
    return {"role": "assistant", "content": blocks, "api": "faux", "provider": "faux", "model": "m1",
            "stopReason": "toolUse", "timestamp": ms,
            "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 2}}


def test_a_mirror_equals_pis_reads_after_own_writes_external_appends_a_gap_and_rebinds(client, tmp_path):
    path = str(tmp_path / "mirrored.jsonl")
    write_session(path, conversation(["hello", "hi there", "fix the test"]), session_id="mirrored")
    m = MirroredSession.open(client, path)
    check(m, "open", path)

    # Own writes: a turn with a tool call, labels, a name, settings, an extension message, a context edit.
    s = m.session
    s.append_message(user("run ls", 10))
    call = s.append_message(assistant([{"type": "toolCall", "id": "c1", "name": "bash", "arguments": {"command": "ls"}}]))
    s.append_message({"role": "toolResult", "toolCallId": "c1", "toolName": "bash",
                      "content": [{"type": "text", "text": "a\nb"}], "isError": False, "timestamp": 11})
    s.append_label_change("e1", "start")
    s.append_session_info("  the mirrored   session ")
    s.append_thinking_level_change("high")
    s.append_model_change("faux", "m2")
    s.append_custom_message_entry("note", "remember this", True, {"k": 1})
    s.append_context_edit(call, {"content": "edited"})
    check(m, "own writes", path)

    # A compaction keeping the last turn, then a batch of a turn in one write.
    s.append_compaction("summary of the start", call, 1234)
    s.append_batch([
        {"method": "session/appendMessage", "params": {"message": user("after the compaction", 12)}},
        {"method": "session/appendMessage", "params": {"message": assistant([{"type": "text", "text": "ok"}], 13)}},
        {"method": "session/appendLabelChange", "params": {"targetId": "e1"}},
    ])
    check(m, "a compaction and a batch", path)

    # Branching moves the leaf off the file's end: compared with the server's reads for that leaf.
    s.branch("e2")
    check(m, "branch")
    s.branch_with_summary("e1", "tried another way")
    check(m, "branchWithSummary", path)

    # Another process appends (one line in two writes), then real pi writes the file.
    leaf = m.get_leaf_id()
    line = external_line("x1", leaf, EPOCH_MS + 50_000, "from outside") + "\n"
    with open(path, "a", encoding="utf-8") as f:
        f.write(line[:30])
        f.flush()
        f.write(line[30:] + external_line("x2", "x1", EPOCH_MS + 50_001, "and more") + "\n")
    assert m.wait_until(lambda mm: mm.get_entry("x2") is not None)
    check(m, "external appends", path)
    written = oracle({"command": "write", "file": path, "count": 4, "delayMs": 10, "text": "pi writes"})
    assert m.wait_until(lambda mm: all(mm.get_entry(w) is not None for w in written))
    check(m, "real pi's appends", path)

    # A lost notification: the next change shows the gap and the mirror asks for what it missed.
    lost = []

    def lose_one(method: str, params: Dict[str, Any]) -> bool:
        if method == "session/changed" and not lost:
            lost.append(params["seq"])
            return True
        return False

    client._conn.drop_notification = lose_one
    s.append_message(user("lost", 20))
    client._conn.drop_notification = None
    s.append_message(user("found", 21))
    check(m, "a lost notification", path)
    assert m.resyncs == ["changes"]
    # A lost change too large for the server to keep (a 5 MB label): the gap is repaired by a fresh snapshot.
    lost.clear()
    client._conn.drop_notification = lose_one
    s.append_label_change("e1", "L" * (5 << 20))
    client._conn.drop_notification = None
    s.append_label_change("e1", "small again")
    check(m, "a lost change too large to keep", path)
    assert m.resyncs == ["changes", "snapshot"]

    # Rebinds: another file, then a new session.
    other = str(tmp_path / "other.jsonl")
    write_session(other, conversation(["second", "file"], prefix="o"), session_id="other")
    s.set_session_file(other)
    check(m, "setSessionFile", other)
    s.append_message(user("on the other file", 30))
    s.append_message(assistant([{"type": "text", "text": "noted"}], 31))
    check(m, "appending to the other file", other)
    s.new_session()
    s.append_message(user("fresh", 40))
    check(m, "newSession")
    m.close()


def test_a_mirror_opened_on_a_path_with_no_file_yet_follows_pis_first_write(client, tmp_path):
    path = str(tmp_path / "new.jsonl")
    m = MirroredSession.open(client, path)
    assert m.get_entries() == []
    written = oracle({"command": "write", "file": path, "count": 6, "delayMs": 10, "text": "pi's new session"})
    assert m.wait_until(lambda mm: all(mm.get_entry(w) is not None for w in written))
    check(m, "pi's first write and its appends", path)
    m.close()
