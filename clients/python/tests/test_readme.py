"""The README's example works as written (it needs the server's sessions/search)."""

import os
import re
import subprocess
import sys

from sessionfiles import EPOCH_MS, conversation, write_session

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def _first_python_block() -> str:
    with open(README, encoding="utf-8") as f:
        text = f.read()
    match = re.search(r"```python\n(.*?)```", text, re.S)
    assert match, "the README has no python example"
    return match.group(1)


def test_the_example_is_five_lines():
    assert len(_first_python_block().strip().splitlines()) == 5


def test_the_example_lists_searches_and_prints_a_tree(binary, tmp_path):
    agent = tmp_path / "agent"
    project = agent / "sessions" / "--work-app--"
    project.mkdir(parents=True)
    write_session(project / "older.jsonl", conversation(["why is the flaky test flaky?", "a race"],
                                                         start_ms=EPOCH_MS), session_id="older", cwd="/work/app")
    write_session(project / "newer.jsonl", conversation(["add a button", "added"], start_ms=EPOCH_MS + 60000),
                  session_id="newer", cwd="/work/app")
    env = dict(os.environ, PI_SESSIOND_BIN=binary, PI_CODING_AGENT_DIR=str(agent))
    run = subprocess.run([sys.executable, "-c", _first_python_block()], env=env, capture_output=True, timeout=60)
    assert run.returncode == 0, run.stderr.decode("utf-8", "replace")
    lines = run.stdout.decode("utf-8").splitlines()
    # A search hit: the file holding "flaky test", and its snippet.
    assert lines[0].startswith(str(project / "older.jsonl") + " ") and "flaky test" in lines[0]
    # Then the tree of the newest session.
    assert lines[-2:] == ["• e1 user: add a button", "• e2 assistant: added ◀ leaf"]
