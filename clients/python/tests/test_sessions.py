"""Opening sessions and every SessionManager method, checked against the file and against the server's CLI."""

import json
import subprocess
from typing import Any, Dict, List

import pytest

from pi_sessiond import ContentModified, InvalidParams, SessionNotFound, format_tree
from sessionfiles import conversation, message, read_lines, write_session


def test_opening_a_path_with_no_file_is_an_error_unless_asked_to_create(client, tmp_path):
    # Issue #15: a typo used to "succeed" with an empty session.
    missing = tmp_path / "typo.jsonl"
    with pytest.raises(SessionNotFound) as refused:
        client.open(missing)
    assert refused.value.kind == "session_not_found" and refused.value.data["path"] == str(missing)
    assert not missing.exists(), "nothing was created"
    with client.open(missing, create=True) as session:
        assert session.get_entry_count() == 0
        session.append_message({"role": "user", "content": "the first message writes the file", "timestamp": 1})
    assert missing.exists()


def test_opening_an_empty_path_says_it_is_empty_not_what_the_working_directory_is(client, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for create in (False, True):
        with pytest.raises(InvalidParams) as refused:
            client.open("", create=create)
        assert "the path is empty" in str(refused.value) and str(tmp_path) not in str(refused.value)


def test_open_reads_the_file(client, session_file):
    with client.open(session_file) as session:
        state = session.opened_state
        assert state["sessionFile"] == session_file
        assert state["sessionId"] == "conv-1"
        assert state["leafId"] == "e4"
        assert state["entryCount"] == 4
        assert state["isPersisted"] is True
        assert session.get_header()["id"] == "conv-1"
        assert session.get_leaf_id() == "e4"
        assert session.get_leaf_entry()["message"]["content"][0]["text"] == "done"
        assert session.get_entry("e3")["message"]["content"] == "fix the flaky test"
        assert session.get_entry("missing") is None
        assert [e["id"] for e in session.get_children("e2")] == ["e3"]
        assert [e["id"] for e in session.get_branch()] == ["e1", "e2", "e3", "e4"]
        assert [e["id"] for e in session.get_branch("e2")] == ["e1", "e2"]
        assert [e["id"] for e in session.get_entries(offset=1, limit=2)] == ["e2", "e3"]
        assert session.get_entry_count() == 4
        assert session.get_session_name() is None
        assert session.get_warnings() == []
        assert session.get_state()["leafId"] == "e4"


def test_opening_twice_shares_the_handle(client, session_file):
    first = client.open(session_file)
    second = client.open(session_file)
    assert first.handle == second.handle
    first.close()
    # The server counted two references: the handle lives on for the second object.
    assert second.get_leaf_id() == "e4"
    with pytest.raises(Exception, match="was closed"):
        first.get_leaf_id()
    second.close()
    with pytest.raises(Exception) as info:
        client.request("session/getLeafId", {"handle": second.handle})
    assert info.value.kind == "handle_not_found"


def test_appends_are_written_in_pi_format(client, session_file):
    with client.open(session_file) as session:
        m = session.append_message({"role": "user", "content": "next", "timestamp": 5})
        t = session.append_thinking_level_change("high")
        mc = session.append_model_change("anthropic", "claude-test-2")
        usage = session.append_usage("cache_warm", "anthropic", "claude-test-2", {"input": 3, "output": 0},
                                     note="warm-up")
        custom = session.append_custom_entry("my-ext", {"k": [1, 2]})
        info = session.append_session_info("Flaky test hunt")
        cm = session.append_custom_message_entry("my-ext", "remember this", True, details={"x": 1})
        label = session.append_label_change("e1", "start")
        ids = [m, t, mc, usage["id"], custom, info, cm, label]
        assert len(set(ids)) == len(ids)
        assert usage["type"] == "usage" and usage["note"] == "warm-up"
        assert session.get_session_name() == "Flaky test hunt"
        assert session.get_label("e1") == "start"
        assert session.get_leaf_id() == label

    lines = read_lines(session_file)
    written = lines[5:]
    assert [line["type"] for line in written] == [
        "message", "thinking_level_change", "model_change", "usage", "custom", "session_info", "custom_message",
        "label",
    ]
    # Each entry hangs under the previous one, starting at the old leaf.
    parents = [line["parentId"] for line in written]
    assert parents == ["e4", *[line["id"] for line in written[:-1]]]
    assert written[1]["thinkingLevel"] == "high"
    assert written[2] == {**written[2], "provider": "anthropic", "modelId": "claude-test-2"}
    assert written[4]["customType"] == "my-ext" and written[4]["data"] == {"k": [1, 2]}
    assert written[6]["content"] == "remember this" and written[6]["display"] is True
    assert written[7]["targetId"] == "e1" and written[7]["label"] == "start"


def test_branching(client, session_file):
    with client.open(session_file) as session:
        session.branch("e2")
        assert session.get_leaf_id() == "e2"
        alt = session.append_message({"role": "user", "content": "another way", "timestamp": 7})
        assert session.get_entry(alt)["parentId"] == "e2"
        assert [e["id"] for e in session.get_children("e2")] == ["e3", alt]
        summary = session.branch_with_summary("e1", "tried two approaches")
        entry = session.get_entry(summary)
        assert entry["type"] == "branch_summary" and entry["parentId"] == "e1"
        assert entry["summary"] == "tried two approaches"
        session.reset_leaf()
        assert session.get_leaf_id() is None
        root = session.append_message({"role": "user", "content": "fresh start", "timestamp": 8})
        assert session.get_entry(root)["parentId"] is None


def test_expected_leaf_id_refuses_a_stale_picture(client, session_file):
    with client.open(session_file) as session:
        with pytest.raises(ContentModified) as info:
            session.append_message({"role": "user", "content": "x", "timestamp": 1}, expected_leaf_id="e2")
        assert info.value.code == -32801
        assert info.value.kind == "content_modified"
        assert info.value.data["leafId"] == "e4"
        assert session.get_entry_count() == 4, "nothing was written"
        new = session.append_message({"role": "user", "content": "x", "timestamp": 1}, expected_leaf_id="e4")
        assert session.get_leaf_id() == new
        # data.leafId is always there, null when there is no leaf.
        session.reset_leaf()
        with pytest.raises(ContentModified) as info:
            session.branch("e1", expected_leaf_id=new)
        assert "leafId" in info.value.data and info.value.data["leafId"] is None


def test_an_append_by_another_process_refuses_a_write_made_on_a_stale_picture(client, session_file):
    with client.open(session_file) as session:
        with session.changes(timeout=5) as stream:
            # pi appends under the leaf without taking a lock; this handle does not watch the file.
            with open(session_file, "a", encoding="utf-8") as f:
                f.write(json.dumps(message("pi-1", "e4", "user", "typed in pi", 1735689700000)) + "\n")
            with pytest.raises(ContentModified) as info:
                session.append_message({"role": "user", "content": "mine", "timestamp": 2})
            (event,) = stream.drain()
        # The server published what it found before refusing: the event came first, and the error names the leaf.
        assert event["origin"] == "external" and event["change"]["entries"][0]["id"] == "pi-1"
        assert info.value.data["leafId"] == "pi-1" == session.get_leaf_id()
        assert [line["id"] for line in read_lines(session_file)[1:]] == ["e1", "e2", "e3", "e4", "pi-1"]
        # Re-read, retry: now it goes in, under pi's entry.
        mine = session.append_message({"role": "user", "content": "mine", "timestamp": 2}, expected_leaf_id="pi-1")
        assert session.get_entry(mine)["parentId"] == "pi-1"


def test_context_projection_and_compaction(client, session_file):
    with client.open(session_file) as session:
        model = session.append_model_change("anthropic", "claude-test-2")
        level = session.append_thinking_level_change("low")
        context = session.build_session_context()
        assert [m["role"] for m in context["messages"]] == ["user", "assistant", "user", "assistant"]
        assert context["messages"][2]["content"] == "fix the flaky test"
        assert context["model"] == {"provider": "anthropic", "modelId": "claude-test-2"}
        assert context["thinkingLevel"] == "low"
        assert [e["id"] for e in session.build_context_entries()] == ["e1", "e2", "e3", "e4", model, level]
        projection = session.build_session_projection()
        assert [p["sourceEntry"]["id"] for p in projection["entries"]] == ["e1", "e2", "e3", "e4", model, level]
        # Only the messages are model-visible; the model and thinking-level changes project to nothing.
        assert [len(p["messages"]) for p in projection["entries"]] == [1, 1, 1, 1, 0, 0]
        assert projection["messages"] == context["messages"]

        # A context edit that omits e3 removes it from what the model sees.
        edit = session.append_context_edit("e3", None)
        assert session.get_entry(edit)["replacement"] is None
        contents = [m.get("content") for m in session.build_session_context()["messages"]]
        assert "fix the flaky test" not in contents and len(contents) == 3
        by_id = {p["sourceEntry"]["id"]: p["messages"] for p in session.build_session_projection()["entries"]}
        assert by_id["e3"] == []
        # A replacement swaps the content instead.
        session.append_context_edit("e1", {"content": "hello (edited)"})
        assert session.build_session_context()["messages"][0]["content"] == "hello (edited)"

        compaction = session.append_compaction("we fixed it", "e4", 1234, details={"files": []})
        entry = session.get_entry(compaction)
        assert entry["type"] == "compaction" and entry["tokensBefore"] == 1234 and entry["firstKeptEntryId"] == "e4"
        roles = [m["role"] for m in session.build_session_context()["messages"]]
        assert "compactionSummary" in roles


def test_tree_and_format_tree_match_the_cli(client, session_file, binary):
    with client.open(session_file) as session:
        session.branch("e2")
        session.append_message({"role": "user", "content": "a  different\nquestion " + "x" * 80, "timestamp": 9})
        session.append_message({"role": "assistant", "content": [
            {"type": "toolCall", "id": "t1", "name": "bash", "arguments": {}},
            {"type": "image", "data": "", "mimeType": "image/png"}], "timestamp": 10})
        session.append_label_change("e1", "start")
        session.append_session_info("Tree test")
        tree = session.get_tree()
        flat = session.get_tree_flat()
        leaf = session.get_leaf_id()

        assert len(tree) == 1 and tree[0]["entry"]["id"] == "e1"
        assert tree[0]["label"] == "start"
        e2 = tree[0]["children"][0]
        assert e2["entry"]["id"] == "e2"
        assert [c["entry"]["id"] for c in e2["children"]][0] == "e3"
        assert len(e2["children"]) == 2

        # The flat tree: the same nodes in pre-order, each pointing at its parent's position.
        ids = [item["entry"]["id"] for item in flat]
        assert ids[:4] == ["e1", "e2", "e3", "e4"] and len(ids) == 8
        assert [item["parentIndex"] for item in flat[:5]] == [None, 0, 1, 2, 1]
        assert [item["depth"] for item in flat[:5]] == [0, 1, 2, 3, 2]
        assert flat[0]["label"] == "start" and "label" not in flat[1]
        assert _preorder(tree) == flat, "the flat tree is the nested one without the nesting"

        text = format_tree(flat, leaf)
        assert format_tree(tree, leaf) == text, "both shapes draw the same"
    lines = text.split("\n")
    # The path from the root to the leaf carries pi's bullet: e1, e2, then the branch taken from e2, drawn
    # before the older branch (e3, e4) as pi's /tree draws the branch holding the leaf.
    assert lines[0] == "• e1 user: hello [start]"
    assert lines[1] == "• e2 assistant: hi, how can I help?"
    # Whitespace runs collapse, and the preview stops at 72 characters.
    assert lines[2].startswith("├─ • ")
    assert lines[2].endswith("user: " + ("a different question " + "x" * 80)[:72] + "…")
    assert lines[3].endswith("assistant: → bash [image]")
    assert lines[5].endswith("name: Tree test ◀ leaf")
    assert lines[6:] == ["└─ e3 user: fix the flaky test", "   e4 assistant: done"]

    # The same drawing as `pi-sessiond tree --filter all FILE` (which also prints the session name first).
    cli = subprocess.run([binary, "tree", "--filter", "all", session_file], capture_output=True,
                         check=True).stdout.decode("utf-8")
    assert cli == "Tree test\n" + text + "\n"


def test_format_tree_draws_the_servers_skeletons_as_it_draws_full_entries_and_as_the_cli(client, tmp_path, binary):
    # Issue 25: one description of an entry. The skeletons carry the server's previews; full entries are described
    # here by the same rules; both draw the lines `pi-sessiond tree` prints, odd entries included.
    def entry(i: int, body: Dict[str, Any]) -> Dict[str, Any]:
        return {"id": f"o{i}", "parentId": f"o{i - 1}" if i else None,
                "timestamp": f"2025-01-01T00:00:{i:02d}.000Z", **body}

    long_text = "many words " * 1000
    bodies = [
        {"type": "message", "message": {"role": "user", "content": "a  question\nover lines"}},
        {"type": "message", "message": {"role": "bashExecution", "command": "git  status\n", "output": "x"}},
        {"type": "message", "message": {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hidden"}, {"type": "text", "text": "calling"},
            {"type": "toolCall", "id": "t", "name": 5, "arguments": {}}, {"type": "image", "data": ""},
            "loose", {"type": "text", "text": 7}]}},
        {"type": "message", "message": {"role": "toolResult", "content": [{"type": "text", "text": long_text}]}},
        {"type": "message", "message": {"role": "branchSummary", "summary": "went\nelsewhere"}},
        {"type": "message", "message": {"role": 7, "content": None, "summary": 12}},
        {"type": "message", "message": "not an object"},
        {"type": "thinking_level_change", "thinkingLevel": ["high", 2]},
        {"type": "model_change", "provider": None, "modelId": 1e21},
        {"type": "compaction", "summary": {"not": "text"}, "firstKeptEntryId": "o0", "tokensBefore": 1},
        {"type": "branch_summary", "summary": "  spaced   out  ", "fromId": "o0"},
        {"type": "custom_message", "customType": " my\n ext ", "content": [{"type": "image"}, {"type": "text",
                                                                              "text": "shown"}], "display": True},
        {"type": "custom", "customType": "tool   state", "data": {"big": [1, 2, 3]}},
        {"type": "label", "targetId": "nowhere", "label": None},
        {"type": "usage", "kind": False},
        {"type": "context_edit", "targetId": 3},
        {"type": "someday", "text": "x"},
        # Text that would act on a terminal: an OSC title, and bidi controls that reverse the rest of a line.
        {"type": "message", "message": {"role": "user", "content": "RTL \u202eevil\u202c, \u2066iso\u2069 \x1b]0;t\x07 ok"}},
        {"type": "session_info", "name": "two   words"},
    ]
    path = tmp_path / "odd.jsonl"
    write_session(path, [entry(i, b) for i, b in enumerate(bodies)])
    with client.open(str(path)) as session:
        leaf = session.get_leaf_id()
        full = format_tree(session.get_tree_flat(), leaf)
        skeletons = session.get_tree_flat_page(detail="skeleton")
    assert all("bytes" in item["entry"] and "message" not in item["entry"] for item in skeletons)
    assert format_tree(skeletons, leaf) == full
    lines = full.split("\n")
    assert lines[0] == "• o0 user: a question over lines"
    assert lines[1] == "• o1 bashExecution: $ git status"
    assert lines[2] == "• o2 assistant: calling → 5 [image]"
    assert lines[3] == "• o3 toolResult: " + ("many words " * 10)[:72] + "…"
    assert lines[4] == "• o4 branchSummary: went elsewhere"
    assert lines[11] == "• o11 custom message (my ext): [image] shown"
    assert lines[12] == "• o12 custom (tool state)"
    assert lines[17] == "• o17 user: RTL <U+202E>evil<U+202C>, <U+2066>iso<U+2069> ␛]0;t␇ ok"
    assert lines[-1] == "• o18 name: two words ◀ leaf"
    cli = subprocess.run([binary, "tree", "--filter", "all", str(path)], capture_output=True,
                         check=True).stdout.decode("utf-8")
    assert cli == "two   words\n" + full + "\n"


def test_format_tree_shows_control_characters_as_pictures_as_the_cli_does(client, tmp_path, binary):
    hostile = "hi \u001b[31mRED\u001b]0;pwned\u0007 \u009b2J \u007f end"
    path = tmp_path / "hostile.jsonl"
    write_session(path, [
        {"type": "message", "id": "h0", "parentId": None, "timestamp": "2025-01-01T00:00:00.000Z",
         "message": {"role": "user", "content": hostile, "timestamp": 1}},
        {"type": "custom_message", "id": "h1", "parentId": "h0", "timestamp": "2025-01-01T00:00:01.000Z",
         "customType": "\u001b[2Jext", "content": hostile, "display": True},
        {"type": "label", "id": "h2", "parentId": "h1", "timestamp": "2025-01-01T00:00:02.000Z",
         "targetId": "h0", "label": "\u0007bell"},
    ])
    with client.open(str(path)) as session:
        leaf = session.get_leaf_id()
        full = format_tree(session.get_tree_flat(), leaf)
        assert format_tree(session.get_tree_flat_page(detail="skeleton"), leaf) == full
    assert "hi ␛[31mRED␛]0;pwned␇ �2J ␡ end" in full
    assert not any(c < " " and c != "\n" or "\x7f" <= c <= "\x9f" for c in full), repr(full)
    cli = subprocess.run([binary, "tree", "--filter", "all", str(path)], capture_output=True,
                         check=True).stdout.decode("utf-8")
    assert cli == full + "\n"


def _preorder(tree: List[Any]) -> List[Any]:
    """The nested tree as getTreeFlat shapes it, walked without recursion (the nesting can be thousands deep)."""
    flat: List[Any] = []
    stack = [(node, None, 0) for node in reversed(tree)]
    while stack:
        node, parent, depth = stack.pop()
        item = {k: v for k, v in node.items() if k != "children"}
        item.update(parentIndex=parent, depth=depth)
        flat.append(item)
        index = len(flat) - 1
        stack.extend((child, index, depth + 1) for child in reversed(node["children"]))
    return flat


def test_a_long_conversation_prints_as_a_tree(client, tmp_path, binary):
    # 2000 entries in one chain: the nested getTree is 4000 JSON levels deep, beyond Python's json module.
    path = tmp_path / "long.jsonl"
    write_session(path, conversation([f"turn {i}" for i in range(2000)]))
    with client.open(path) as session:
        session.append_label_change("e1000", "halfway")
        flat = session.get_tree_flat()
        leaf = session.get_leaf_id()
        assert len(flat) == 2001 and [item["depth"] for item in flat[:3]] == [0, 1, 2]
        text = format_tree(flat, leaf)
        lines = text.split("\n")
        assert len(lines) == 2001
        # One chain, all of it the active path.
        assert lines[0] == "• e1 user: turn 0"
        assert lines[999] == "• e1000 assistant: turn 999 [halfway]"
        assert lines[1999] == "• e2000 assistant: turn 1999"
        assert lines[2000].endswith("label e1000 → halfway ◀ leaf")
        assert subprocess.run([binary, "tree", "--filter", "all", str(path)], capture_output=True,
                              check=True).stdout.decode() \
            == text + "\n", "the same drawing as pi-sessiond tree"

        # The nested tree comes back too (decoded without recursion), and the connection carries on.
        tree = session.get_tree()
        assert _preorder(tree) == flat
        assert format_tree(tree, leaf) == text
        assert session.get_entry_count() == 2001


def test_new_session_set_session_file_and_create_branched_session(client, session_file, tmp_path):
    with client.open(session_file) as session:
        branched = session.create_branched_session("e2")
        assert branched and branched != session_file
        state = session.get_state()
        assert state["sessionFile"] == branched
        assert [e["id"] for e in session.get_branch()] == ["e1", "e2"]

        other = tmp_path / "other.jsonl"
        write_session(other, conversation(["other session"]), session_id="other-1")
        state = session.set_session_file(other)
        assert state["sessionId"] == "other-1" and state["leafId"] == "e1"

        state = session.new_session(session_id="brand-new")
        assert state["sessionId"] == "brand-new" and state["entryCount"] == 0 and state["leafId"] is None
        assert state["handle"] == session.handle, "the handle survives a rebind"


def test_create_in_memory_continue_recent_and_fork(client, tmp_path, session_file):
    sessions = tmp_path / "made"
    created = client.create("/tmp/project", session_dir=sessions, session_id="made-1")
    assert created.opened_state["sessionId"] == "made-1"
    created.append_message({"role": "user", "content": "first", "timestamp": 1})
    created.append_message({"role": "assistant", "content": [{"type": "text", "text": "ok"}], "timestamp": 2})
    path = created.get_state()["sessionFile"]
    created.close()
    assert read_lines(path)[0]["id"] == "made-1"

    recent = client.continue_recent("/tmp/project", session_dir=sessions)
    assert recent.get_state()["sessionFile"] == path
    recent.close()

    memory = client.in_memory(cwd="/tmp/project", session_id="mem-1")
    memory.append_message({"role": "user", "content": "in memory", "timestamp": 1})
    state = memory.get_state()
    assert state["isPersisted"] is False and state["sessionFile"] is None and state["entryCount"] == 1
    memory.close()

    forked = client.fork_from(session_file, "/tmp/elsewhere", session_dir=tmp_path / "forks")
    assert forked.get_state()["cwd"] == "/tmp/elsewhere"
    assert [e["id"] for e in forked.get_branch()] == ["e1", "e2", "e3", "e4"]
    forked.close()


def test_warnings_for_a_damaged_file(client, tmp_path):
    path = tmp_path / "damaged.jsonl"
    write_session(path, conversation(["one", "two"]))
    with open(path, "a", encoding="utf-8") as f:
        f.write("{not json\n")
    with client.open(path) as session:
        warnings = session.get_warnings()
        assert [w["kind"] for w in warnings] == ["malformed_line"]
        assert warnings[0]["line"] == 4
        assert session.get_entry_count() == 2
