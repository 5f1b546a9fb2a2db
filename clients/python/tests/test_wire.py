"""The transport: awkward strings, huge messages, pipelining from threads, and how errors map."""

import json
import threading
import time

import pytest

from pi_sessiond import (
    Client,
    EntryNotFound,
    HandleNotFound,
    InvalidParams,
    InvalidSessionId,
    SessiondError,
    SessiondIOError,
    SessionLocked,
)
from pi_sessiond._transport import encode_json
from sessionfiles import conversation, read_lines, write_session

AWKWARD = "line\u2028separator\u2029paragraph \x85 next-line \ud83d lone-high \ude00 lone-low 😀 emoji \x00 nul"


def test_line_separators_and_lone_surrogates_round_trip(client, session_file):
    session = client.open(session_file)
    with session.changes(timeout=5) as stream:
        entry_id = session.append_message({"role": "user", "content": AWKWARD, "timestamp": 1,
                                           "extra\u2028key": "\udbff"})
        event = stream.get(timeout=5)
    # Back through a read, through the notification, and from the file as pi stores it.
    stored = session.get_entry(entry_id)
    assert stored["message"]["content"] == AWKWARD
    assert stored["message"]["extra\u2028key"] == "\udbff"
    assert event["change"]["entries"][0]["message"]["content"] == AWKWARD
    assert read_lines(session_file)[-1]["message"]["content"] == AWKWARD
    with open(session_file, "rb") as f:
        raw = f.read()
    # pi writes a lone surrogate as a \u escape (UTF-8 cannot hold it), and the file stays one entry per line.
    assert b"\\ud83d" in raw and raw.count(b"\n") == 6
    assert session.get_tree()[0]["children"][0]["children"][0]["children"][0]["children"][0]["entry"]["id"] \
        == entry_id


def test_frames_hold_one_line_of_utf8_with_lone_surrogates_escaped():
    frame = encode_json({"s": AWKWARD})
    assert frame.count(b"\n") == 0, "a frame never contains the delimiter"
    # UTF-8 cannot hold a lone surrogate: it travels as an escape.
    assert b"\\ud83d" in frame and b"\\ude00" in frame
    assert json.loads(frame) == {"s": AWKWARD}
    with pytest.raises(ValueError):
        encode_json({"x": float("nan")})


def test_a_ten_megabyte_message_round_trips(client, tmp_path):
    path = tmp_path / "big.jsonl"
    write_session(path, conversation(["start"]))
    session = client.open(path)
    # 10.5 MB of text with multi-byte characters and separators, so nothing can assume a 64 KiB line. Mostly
    # ASCII: a debug build of the server takes seconds per megabyte of escapes.
    chunk = "0123456789abcdef " * 60 + "é ü \u2028 😀 \n"
    text = (chunk * (10_500_000 // len(chunk) + 1))[:10_500_000]
    started = time.monotonic()
    with session.changes(timeout=30) as stream:
        entry_id = session.append_message({"role": "user", "content": text, "timestamp": 1})
        event = stream.get(timeout=30)
    assert event["change"]["entries"][0]["message"]["content"] == text
    assert session.get_entry(entry_id)["message"]["content"] == text
    context = session.build_session_context()
    assert context["messages"][-1]["content"] == text
    assert len(read_lines(path)[-1]["message"]["content"]) == len(text)
    assert time.monotonic() - started < 30


def test_pipelined_calls_from_threads_get_their_own_answers(client, tmp_path):
    # Two sessions and the catalog, so the server answers out of order (different sessions and listings run
    # independently); every answer must still reach the thread that asked.
    paths = []
    for n in range(2):
        path = tmp_path / f"s{n}.jsonl"
        write_session(path, conversation([f"s{n} message {i}" for i in range(30)], prefix=f"s{n}e"),
                      session_id=f"pipelined-{n}")
        paths.append(path)
    sessions = [client.open(p) for p in paths]
    errors = []
    answered = [0]
    lock = threading.Lock()

    def worker(worker_id: int) -> None:
        try:
            for i in range(60):
                n = (worker_id + i) % 2
                k = (worker_id * 7 + i) % 30
                session = sessions[n]
                if i % 3 == 0:
                    entry = session.get_entry(f"s{n}e{k + 1}")
                    assert entry["message"]["content"] in (f"s{n} message {k}", [
                        {"type": "text", "text": f"s{n} message {k}"}])
                elif i % 3 == 1:
                    (entry,) = session.get_entries(offset=k, limit=1)
                    assert entry["id"] == f"s{n}e{k + 1}"
                else:
                    infos = client.list_all(session_dir=tmp_path)
                    assert sorted(info["id"] for info in infos) == ["pipelined-0", "pipelined-1"]
                with lock:
                    answered[0] += 1
        except BaseException as e:  # collected and re-raised in the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[0]
    assert answered[0] == 8 * 60


def test_pipelined_appends_land_in_order(client, session_file):
    session = client.open(session_file)
    results = {}

    def append(i: int) -> None:
        results[i] = session.append_message({"role": "user", "content": f"p{i}", "timestamp": i})

    threads = [threading.Thread(target=append, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 16
    # Each id is the entry with that thread's content, and the file is one chain.
    for i, entry_id in results.items():
        assert session.get_entry(entry_id)["message"]["content"] == f"p{i}"
    lines = read_lines(session_file)[5:]
    assert [line["parentId"] for line in lines[1:]] == [line["id"] for line in lines[:-1]]


def test_error_mapping(client, session_file, tmp_path):
    session = client.open(session_file)
    with pytest.raises(EntryNotFound) as info:
        session.branch("nope")
    e = info.value
    assert (e.code, e.kind, e.message, e.data["id"]) == (1002, "entry_not_found", "Entry nope not found", "nope")
    assert e.method == "session/branch"
    assert "Entry nope not found" in str(e)

    with pytest.raises(InvalidParams) as info:
        client.request("session/appendMessage", {"handle": session.handle, "message": {"content": "no role"}})
    assert info.value.code == -32602 and info.value.data["path"] == "message.role"

    with pytest.raises(InvalidParams) as info:
        client.request("session/getEntries", {"handle": session.handle, "limit": "ten"})
    assert info.value.data["path"] == "limit"

    # A missing param is named too.
    for method, params, missing in [("session/create", {}, "cwd"), ("sessions/search", {}, "query"),
                                    ("session/getEntry", {"handle": session.handle}, "id"),
                                    ("session/appendMessage", {}, "handle")]:
        with pytest.raises(InvalidParams) as info:
            client.request(method, params)
        assert (info.value.kind, info.value.data.get("path")) == ("invalid_params", missing), method

    with pytest.raises(HandleNotFound) as info:
        client.request("session/getTree", {"handle": "h999"})
    assert info.value.code == 1003 and info.value.data["handle"] == "h999"

    a_file = tmp_path / "a-file"
    a_file.write_text("")
    with pytest.raises(SessiondIOError) as info:
        client.continue_recent("/tmp/project", session_dir=a_file / "sub")
    assert info.value.code == 1006 and info.value.data["path"] == str(a_file / "sub")

    with pytest.raises(InvalidSessionId) as info:
        client.create("/tmp/project", session_dir=tmp_path, session_id="not a valid id!")
    assert info.value.code == 1005 and info.value.kind == "invalid_session_id"

    not_a_session = tmp_path / "notes.jsonl"
    not_a_session.write_text('{"hello": "world"}\n')
    with pytest.raises(SessiondError) as info:
        client.open(not_a_session)
    assert info.value.kind == "invalid_session_file" and info.value.code == 1004

    # After all of that the connection is fine.
    assert session.get_leaf_id() == "e4"


def test_a_second_server_writing_the_same_file_gets_session_locked(client, binary, agent_dir, session_file):
    mine = client.open(session_file)
    mine.append_message({"role": "user", "content": "I hold the lock now", "timestamp": 1})
    with Client.spawn(binary, args=["--agent-dir", agent_dir], timeout=60) as other:
        theirs = other.open(session_file)
        assert theirs.get_leaf_id() == mine.get_leaf_id(), "reading is never blocked"
        with pytest.raises(SessionLocked) as info:
            theirs.append_message({"role": "user", "content": "me too", "timestamp": 2})
        assert info.value.code == 1007 and info.value.kind == "session_locked"
        assert info.value.data["pid"] == client.pid
        # Who holds it can be asked before writing: the other server names the holder; the holder names nobody.
        assert other.lock_holder(session_file) == client.pid
        assert client.lock_holder(session_file) is None
        with pytest.raises(SessionLocked):
            theirs.lock()
        mine.lock()  # held already: nothing to do
