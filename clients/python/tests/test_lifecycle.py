"""Spawning, the handshake, closing, finding the binary, and what happens when the server dies."""

import json
import os
import signal
import subprocess
import threading
import time

import pytest

import pi_sessiond.client as client_module
from pi_sessiond import Client, SessiondClosed, SessiondNotFound, SessiondTimeout, find_binary, types


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); the client reaps its child, so a dead server is gone entirely.
    return True


def _wait_pending(client: Client, count: int) -> None:
    deadline = time.monotonic() + 10
    while len(client._conn._pending) < count:
        assert time.monotonic() < deadline, "the request never became pending"
        time.sleep(0.005)


def test_context_manager_handshakes_and_shuts_down_cleanly(binary, agent_dir):
    with Client.spawn(binary, args=["--agent-dir", agent_dir]) as client:
        assert client.server_info["name"] == "pi-sessiond"
        assert client.protocol_version == "1.0"
        assert "session/open" in client.capabilities["methods"]
        assert sorted(client.capabilities["methods"]) == sorted(types.REQUEST_METHODS), "the contract is the server"
        assert sorted(client.capabilities["notifications"]) == sorted(types.SERVER_NOTIFICATIONS)
        assert "sessions/changed" in client.capabilities["notifications"]
        assert client.supports("session/appendMessage")
        assert not client.supports("no/such")
        pid = client.pid
        assert _alive(pid)
    # shutdown + exit: status 0 (1 would mean exit came without shutdown), and the process is reaped.
    assert client.returncode == 0
    assert client.closed
    assert not _alive(pid)
    with pytest.raises(SessiondClosed, match="closed"):
        client.request("session/getState", {"handle": "h1"})
    assert client.close() == 0, "close is idempotent"


@pytest.mark.parametrize("frames, status", [
    # shutdown and exit written together, exit before shutdown has answered: still an orderly end.
    ([{"jsonrpc": "2.0", "id": 1, "method": "shutdown", "params": {}}, {"jsonrpc": "2.0", "method": "exit"}], 0),
    # exit without shutdown (as in LSP).
    ([{"jsonrpc": "2.0", "method": "exit"}], 1),
])
def test_exit_status(binary, agent_dir, frames, status):
    proc = subprocess.Popen([binary, "--agent-dir", agent_dir], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    try:
        # One write, and stdin left open: the end of input (an orderly shutdown too) must not be what stops it.
        proc.stdin.write(b"".join(json.dumps(f).encode() + b"\n" for f in frames))
        proc.stdin.flush()
        assert proc.wait(30) == status
        answers = [json.loads(line) for line in proc.stdout.read().split(b"\n") if line.strip()]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdin.close()
        proc.stdout.close()
    if status == 0:
        assert answers == [{"jsonrpc": "2.0", "id": 1, "result": None}], "shutdown is answered before the end"


def test_close_shuts_down_open_sessions_first(client, session_file):
    session = client.open(session_file)
    session.append_message({"role": "user", "content": "written before shutdown", "timestamp": 1})
    assert client.close() == 0
    assert session.closed, "the client's close ends its sessions"
    session.close()  # a no-op now, not an error
    with open(session_file, encoding="utf-8") as f:
        assert "written before shutdown" in f.read()


def test_explicit_binary_that_does_not_exist(tmp_path):
    missing = tmp_path / "nope" / "pi-sessiond"
    with pytest.raises(SessiondNotFound, match="pi-sessiond binary not found") as info:
        Client.spawn(missing)
    assert str(missing) in str(info.value)
    assert isinstance(info.value, FileNotFoundError)


def test_binary_from_env_and_path(monkeypatch, tmp_path, binary):
    # As in a checkout: no wheel put a binary beside the package.
    monkeypatch.setattr(client_module, "_packaged_binary", lambda: None)
    monkeypatch.setenv("PI_SESSIOND_BIN", str(tmp_path / "missing-binary"))
    with pytest.raises(SessiondNotFound, match="PI_SESSIOND_BIN"):
        find_binary()
    monkeypatch.setenv("PI_SESSIOND_BIN", binary)
    assert find_binary() == os.path.abspath(binary)
    # Without the variable, PATH decides.
    monkeypatch.delenv("PI_SESSIOND_BIN")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SessiondNotFound, match="not on PATH and PI_SESSIOND_BIN is not set; install it with `pip install pi-sessiond`"):
        Client.spawn()
    link = tmp_path / "pi-sessiond"
    os.symlink(binary, link)
    assert find_binary() == str(link)
    with Client.spawn() as client:
        assert client.server_info["name"] == "pi-sessiond"


def test_the_wheels_binary_comes_after_pi_sessiond_bin_and_before_path(monkeypatch, tmp_path, binary):
    packaged = tmp_path / "venv-bin" / "pi-sessiond"
    packaged.parent.mkdir()
    os.symlink(binary, packaged)
    on_path = tmp_path / "on-path" / "pi-sessiond"
    on_path.parent.mkdir()
    os.symlink(binary, on_path)
    monkeypatch.setattr(client_module, "_packaged_binary", lambda: str(packaged))
    monkeypatch.setenv("PATH", str(on_path.parent))
    monkeypatch.delenv("PI_SESSIOND_BIN", raising=False)
    assert find_binary() == str(packaged)
    monkeypatch.setenv("PI_SESSIOND_BIN", str(on_path))
    assert find_binary() == str(on_path)


def test_env_reaches_the_server(binary, tmp_path):
    # PI_CODING_AGENT_DIR picks the agent directory: list_all() without a directory lists its sessions/.
    agent = tmp_path / "custom-agent"
    project = agent / "sessions" / "--tmp-project--"
    project.mkdir(parents=True)
    (project / "s.jsonl").write_text(
        '{"type":"session","version":3,"id":"env-1","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/tmp/project"}\n'
    )
    env = dict(os.environ, PI_CODING_AGENT_DIR=str(agent))
    with Client.spawn(binary, env=env) as client:
        assert [info["id"] for info in client.list_all()] == ["env-1"]


def test_child_death_fails_pending_calls(client, session_file):
    session = client.open(session_file)
    stream = session.changes()  # no timeout: it must end when the server dies, not hang
    iterated = session.changes()
    watch = client.watch_sessions(os.path.dirname(session_file))
    loop = {}

    def iterate():
        try:
            loop["events"] = [event for event in iterated]
        except BaseException as e:  # recorded for the assertions below
            loop["error"] = e

    iterator = threading.Thread(target=iterate)
    iterator.start()
    # A stopped server reads nothing: the next call is certainly pending when the server is killed.
    os.kill(client.pid, signal.SIGSTOP)
    outcome = {}

    def call():
        try:
            outcome["result"] = session.get_tree()
        except BaseException as e:  # recorded for the assertions below
            outcome["error"] = e

    caller = threading.Thread(target=call)
    caller.start()
    _wait_pending(client, 1)
    os.kill(client.pid, signal.SIGKILL)
    caller.join(10)
    assert not caller.is_alive(), "the pending call was not failed"
    error = outcome.get("error")
    assert isinstance(error, SessiondClosed), outcome
    assert "exited unexpectedly" in str(error)
    assert "(killed by SIGKILL)" in str(error), str(error)
    assert error.returncode == -signal.SIGKILL
    # Later calls fail the same way, at once.
    with pytest.raises(SessiondClosed, match="exited unexpectedly"):
        session.get_leaf_id()
    # A stream ends raising why, so a script tells the crash from a quiet session or its own close.
    with pytest.raises(SessiondClosed, match="exited unexpectedly"):
        stream.get(timeout=10)
    assert stream.ended
    iterator.join(10)
    assert isinstance(loop.get("error"), SessiondClosed), loop
    with pytest.raises(SessiondClosed, match="exited unexpectedly"):
        list(watch.changes(timeout=10))
    with pytest.raises(SessiondClosed, match="exited unexpectedly"):
        list(session.changes())  # made after the death: it raises too
    assert session.closed
    started = time.monotonic()
    client.close()  # nothing to shut down; must not hang
    assert time.monotonic() - started < 5


def test_streams_end_quietly_when_the_client_or_session_is_closed(binary, agent_dir, session_file):
    client = Client.spawn(binary, args=["--agent-dir", agent_dir])
    first, second = client.open(session_file), client.open(session_file)
    of_first, of_second = first.changes(), second.changes()
    first.close()
    assert list(of_first) == []
    client.close()
    assert list(of_second) == [] and of_second.get(timeout=1) is None


def test_close_kills_a_server_that_does_not_answer(binary, agent_dir):
    client = Client.spawn(binary, args=["--agent-dir", agent_dir])
    os.kill(client.pid, signal.SIGSTOP)
    started = time.monotonic()
    returncode = client.close(timeout=1)
    assert returncode == -signal.SIGKILL
    assert time.monotonic() - started < 8


def test_call_timeout(binary, agent_dir):
    with Client.spawn(binary, args=["--agent-dir", agent_dir]) as client:
        os.kill(client.pid, signal.SIGSTOP)
        try:
            with pytest.raises(SessiondTimeout, match="sessions/listAll: no answer within 0.2 s"):
                client.request("sessions/listAll", {}, timeout=0.2)
            assert not client._conn._pending, "a timed-out call is forgotten"
        finally:
            os.kill(client.pid, signal.SIGCONT)
        # The timed-out request was cancelled (or answered late and ignored); the connection still works.
        assert client.list_all() == []
