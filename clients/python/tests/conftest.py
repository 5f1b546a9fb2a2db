"""Fixtures: the pi-sessiond binary (``PI_SESSIOND_BIN``, else ``pi-sessiond`` on PATH) and clients of it."""

import os
from typing import Iterator

import pytest

from pi_sessiond import Client, SessiondNotFound, find_binary
from sessionfiles import conversation, write_session


@pytest.fixture(scope="session")
def binary() -> str:
    """The server under test. Every test that needs it fails with the lookup's message when it is missing."""
    try:
        return find_binary()
    except SessiondNotFound as e:
        problem = str(e)
    # Outside the except block, so the report shows the message alone, not a chained traceback.
    pytest.fail(
        f"{problem}\nThe tests run against the real server: build it (`cargo build` at the repository root) "
        "and set PI_SESSIOND_BIN=$PWD/target/debug/pi-sessiond.",
        pytrace=False,
    )


@pytest.fixture
def agent_dir(tmp_path) -> str:
    """An empty pi agent directory, so no test ever reads or writes the real ~/.pi/agent."""
    path = tmp_path / "agent"
    (path / "sessions").mkdir(parents=True)
    return str(path)


@pytest.fixture
def client(binary: str, agent_dir: str) -> Iterator[Client]:
    """A client of a fresh server; calls time out after 60 s so a lost answer fails the test instead of
    hanging it."""
    c = Client.spawn(binary, args=["--agent-dir", agent_dir], timeout=60)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def session_file(tmp_path) -> str:
    """A session file with a four-message conversation ``e1`` → ``e4`` (cwd ``/tmp/project``)."""
    path = tmp_path / "sessions" / "conversation.jsonl"
    path.parent.mkdir()
    write_session(path, conversation(["hello", "hi, how can I help?", "fix the flaky test", "done"]),
                  session_id="conv-1")
    return str(path)


@pytest.fixture(autouse=True)
def _no_real_agent_dir(monkeypatch, tmp_path):
    # A server spawned without --agent-dir (the README example, env tests) must not touch the real one either.
    monkeypatch.setenv("PI_CODING_AGENT_DIR", os.path.join(str(tmp_path), "default-agent"))
