"""session/changed in order with consecutive seq, gap detection and resync, external appends, directory watches,
progress."""

import json
import os
import threading
import time

from pi_sessiond import ChangeStream
from sessionfiles import conversation, message, write_session


def test_changes_arrive_in_order_with_consecutive_seq(client, session_file):
    session = client.open(session_file)
    with session.changes(timeout=5) as stream:
        ids = [session.append_message({"role": "user", "content": f"m{i}", "timestamp": i}) for i in range(10)]
        session.branch(ids[3])
        label = session.append_label_change(ids[0], "first")
        session.reset_leaf()
        state = session.new_session(session_id="after-rebind")
        events = stream.drain()
    assert [e["seq"] for e in events] == list(range(1, 15))
    assert all(e["handle"] == session.handle for e in events)
    kinds = [e["change"]["kind"] for e in events]
    assert kinds == ["append"] * 10 + ["leaf", "append", "leaf", "rebind"]
    # Append events carry the entries as reads show them, in the order the calls were made.
    assert [e["change"]["entries"][0]["id"] for e in events[:10]] == ids
    assert events[9]["leafId"] == ids[9]
    assert events[10]["change"]["leafId"] == ids[3]
    assert events[11]["change"]["entries"][0]["id"] == label
    assert events[12]["leafId"] is None
    assert events[13]["change"]["state"]["sessionId"] == "after-rebind" == state["sessionId"]
    assert "origin" not in events[0], "the handle's own mutations have no origin"
    # seq goes on across the rebind.
    session.append_message({"role": "user", "content": "after", "timestamp": 99})
    assert stream.get(timeout=0) is None, "a closed stream gets nothing more"


def test_callback_has_run_when_the_mutation_returns(client, session_file):
    session = client.open(session_file)
    seen = []
    unsubscribe = session.on_changed(seen.append)
    for i in range(20):
        entry_id = session.append_message({"role": "user", "content": f"m{i}", "timestamp": i})
        # No waiting: the server sent the notification before the response, and the client delivers it first.
        assert seen[-1]["change"]["entries"][0]["id"] == entry_id
        assert seen[-1]["seq"] == i + 1
    unsubscribe()
    session.append_message({"role": "user", "content": "unheard", "timestamp": 1})
    assert len(seen) == 20


def test_a_callback_may_call_the_server(client, session_file):
    session = client.open(session_file)
    counts = []
    # The callback runs on the dispatcher thread and makes a request; its answer comes through the reader.
    session.on_changed(lambda event: counts.append(session.get_entry_count()))
    session.append_message({"role": "user", "content": "x", "timestamp": 1})
    session.append_message({"role": "user", "content": "y", "timestamp": 2})
    assert counts == [5, 6]


def test_gap_triggers_a_resync(client, session_file):
    session = client.open(session_file)
    events = []
    session.on_changed(events.append)
    dropped = []

    def lose_seq_2_and_3(method, params):
        if method == "session/changed" and params["seq"] in (2, 3):
            dropped.append(params["seq"])
            return True
        return False

    client._conn.drop_notification = lose_seq_2_and_3
    ids = [session.append_message({"role": "user", "content": f"m{i}", "timestamp": i}) for i in range(4)]
    assert dropped == [2, 3]
    assert [e["change"]["kind"] for e in events] == ["append", "resync"]
    resync = events[1]
    assert resync["seq"] == 4 and resync["handle"] == session.handle
    change = resync["change"]
    assert change["missed"] == [2, 3]
    assert change["notification"]["seq"] == 4
    assert change["notification"]["change"]["entries"][0]["id"] == ids[3]
    # The state read after the gap holds every change through its seq, the lost ones and the one that showed the
    # gap included; nothing later happened, so that is 4, the resync event's seq.
    assert change["state"]["seq"] == 4
    assert change["state"]["leafId"] == ids[3] == resync["leafId"]
    assert change["state"]["entryCount"] == 8
    # After the resync, numbering continues normally.
    client._conn.drop_notification = None
    last = session.append_message({"role": "user", "content": "m4", "timestamp": 4})
    assert events[2]["seq"] == 5 and events[2]["change"]["kind"] == "append"
    assert events[2]["change"]["entries"][0]["id"] == last


def _wait_received(client, count: int) -> None:
    """Until the reader has taken ``count`` notifications off the pipe (whether or not they were dispatched)."""
    deadline = time.monotonic() + 10
    while client._conn._notes_received < count:
        assert time.monotonic() < deadline, "the notification never arrived"
        time.sleep(0.005)


def test_resync_is_exact_when_later_changes_are_already_in_the_state(client, session_file):
    session = client.open(session_file)
    events = []
    session.on_changed(events.append)
    client._conn.drop_notification = lambda method, params: method == "session/changed" and params["seq"] == 2
    # Hold the dispatcher on seq 3 (the notification that shows the gap) until changes 4 and 5 have been made,
    # so the state it reads includes them although their notifications are still to be dispatched.
    holding, release = threading.Event(), threading.Event()

    def hold_at_seq_3(params):
        if params["seq"] == 3:
            holding.set()
            release.wait(30)

    client.on_notification("session/changed", hold_at_seq_3)
    session.append_message({"role": "user", "content": "m1", "timestamp": 1})  # seq 1
    session.append_message({"role": "user", "content": "m2", "timestamp": 2})  # seq 2, lost
    ids = {}

    def append(i: int) -> None:
        ids[i] = session.append_message({"role": "user", "content": f"m{i}", "timestamp": i})

    threads = []
    for received, i in enumerate((3, 4, 5), start=2):
        # One at a time, so they are applied in this order; each returns only once the dispatcher moves on.
        threads.append(threading.Thread(target=append, args=(i,)))
        threads[-1].start()
        _wait_received(client, received)
    assert holding.wait(10) and len(events) == 1
    release.set()
    for t in threads:
        t.join(30)
    assert sorted(ids) == [3, 4, 5]

    assert [e["change"]["kind"] for e in events] == ["append", "resync"]
    resync = events[1]
    change = resync["change"]
    assert change["missed"] == [2] and change["notification"]["seq"] == 3
    # The state holds changes up to 5; the event says so with its seq, and notifications 4 and 5, which came
    # after the gap was seen, are not delivered: the state already includes them.
    assert change["state"]["seq"] == 5 == resync["seq"]
    assert change["state"]["leafId"] == ids[5] == resync["leafId"]
    assert change["state"]["entryCount"] == 4 + 5
    client._conn.drop_notification = None
    last = session.append_message({"role": "user", "content": "m6", "timestamp": 6})
    assert [e["seq"] for e in events] == [1, 5, 6]
    assert events[2]["change"]["kind"] == "append" and events[2]["change"]["entries"][0]["id"] == last


def test_state_seq_is_the_last_change_it_includes(client, session_file):
    session = client.open(session_file)
    assert session.opened_state["seq"] == 0, "no change since open"
    with session.changes(timeout=5) as stream:
        session.append_message({"role": "user", "content": "a", "timestamp": 1})
        session.branch("e2")
        assert session.get_state()["seq"] == 2
        state = session.new_session(session_id="rebound")
        events = stream.drain()
    assert [e["seq"] for e in events] == [1, 2, 3]
    # A rebind's state, in the event and as returned, includes the rebind itself.
    assert state["seq"] == 3 == events[2]["change"]["state"]["seq"]
    assert session.get_state()["seq"] == 3


def test_gap_is_reported_to_iterators_too(client, session_file):
    session = client.open(session_file)
    client._conn.drop_notification = lambda method, params: params.get("seq") == 1
    with session.changes(timeout=5) as stream:
        entry_id = session.append_message({"role": "user", "content": "a", "timestamp": 1})
        session.append_message({"role": "user", "content": "b", "timestamp": 2})
        (event,) = stream.drain()
    assert event["change"]["kind"] == "resync" and event["change"]["missed"] == [1]
    assert entry_id in [e["id"] for e in session.get_entries()]


def test_raw_notification_callback_sees_every_session(client, session_file, tmp_path):
    other_path = tmp_path / "other.jsonl"
    write_session(other_path, conversation(["x"]))
    raw = []
    client.on_notification("session/changed", raw.append)
    first, second = client.open(session_file), client.open(other_path)
    first.append_message({"role": "user", "content": "a", "timestamp": 1})
    second.append_message({"role": "user", "content": "b", "timestamp": 2})
    first.append_message({"role": "user", "content": "c", "timestamp": 3})
    # seq is per handle.
    assert [(n["handle"], n["seq"]) for n in raw] == [(first.handle, 1), (second.handle, 1), (first.handle, 2)]


def test_external_appends_to_a_watched_file(client, session_file):
    session = client.open(session_file, watch=True)
    stream = session.changes(timeout=10)
    # Another process (pi) appends a line; the server follows the file.
    with open(session_file, "a", encoding="utf-8") as f:
        f.write(json.dumps(message("ext1", "e4", "user", "typed in pi", 1735689700000)) + "\n")
    event = stream.get(timeout=10)
    assert event is not None, "no notification for the external append"
    assert event["origin"] == "external"
    assert event["change"]["kind"] == "append"
    assert [e["id"] for e in event["change"]["entries"]] == ["ext1"]
    assert event["seq"] == 1
    assert session.get_leaf_id() == "ext1"
    session.unwatch()
    session.close()
    assert stream.get(timeout=1) is None and stream.ended, "closing the session ends its streams"


def test_watch_a_session_directory(client, tmp_path):
    directory = tmp_path / "watched"
    directory.mkdir()
    seen = []
    with client.watch_sessions(session_dir=directory, on_changed=seen.append) as watch:
        assert os.path.realpath(watch.dir) == os.path.realpath(directory)
        path = directory / "new.jsonl"
        write_session(path, conversation(["hello"]))
        event = watch.get(timeout=10)
        assert event is not None, "no sessions/changed for a new file"
        assert event["watchId"] == watch.watch_id
        assert event["path"] == str(path)
        assert event["kind"] in ("created", "changed")
        (directory / "not-a-session.txt").write_text("ignored")
        os.remove(path)
        kinds = [e["kind"] for e in watch.changes(timeout=1) if e["path"] == str(path)]
        assert kinds[-1] == "removed"
        assert all(e["path"].endswith(".jsonl") for e in seen)
    assert watch.get(timeout=0) is None


def test_watch_sessions_with_no_scope_follows_every_project(client, agent_dir):
    with client.watch_sessions() as watch:
        project = os.path.join(agent_dir, "sessions", "--tmp-later-project--")
        os.makedirs(project)
        path = os.path.join(project, "s.jsonl")
        write_session(path, conversation(["hello"]))
        seen = []
        while not any(e["path"] == path for e in seen):
            event = watch.get(timeout=10)
            assert event is not None, f"no sessions/changed for a session of a project made later: {seen}"
            seen.append(event)


def test_progress_while_listing(client, tmp_path):
    directory = tmp_path / "many"
    directory.mkdir()
    for i in range(5):
        write_session(directory / f"s{i}.jsonl", conversation([f"session {i}"]))
    progress = []
    infos = client.list_all(session_dir=directory, on_progress=progress.append)
    assert len(infos) == 5
    # Every $/progress came before the answer, so all of them have been delivered by now.
    assert progress[0]["kind"] == "begin" and progress[-1]["kind"] == "end"
    assert progress[-1]["loaded"] == progress[-1]["total"] == 5
    assert all("stage" not in p for p in progress), "stages are for sessions/search"
    assert not client._progress, "the progress callback is unregistered after the call"


def test_stream_is_thread_safe_and_iterable_after_timeout():
    stream: ChangeStream[int] = ChangeStream(timeout=0.05)
    assert list(stream) == []
    producer = threading.Thread(target=lambda: [stream.put(i) for i in range(1000)])
    producer.start()
    producer.join()
    assert list(stream) == list(range(1000))
    stream.put(1)
    stream.end()
    stream.put(2)
    assert list(stream) == [1], "events before the end are delivered, none after"
