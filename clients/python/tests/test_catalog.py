"""sessions/list, listAll, findById and search over a temporary session directory."""

import json
import os
import subprocess
import sys

import pytest

from pi_sessiond import InvalidParams, MethodNotFound
from sessionfiles import EPOCH_MS, conversation, message, write_session


@pytest.fixture
def catalog(tmp_path):
    """Three sessions: two of /proj/a (the newer one named), one of /proj/b, with distinct activity times."""
    directory = tmp_path / "catalog"
    directory.mkdir()
    write_session(directory / "old.jsonl", conversation(["the zebra crossing is flaky", "looking"],
                                                         start_ms=EPOCH_MS + 1000), session_id="old-a", cwd="/proj/a")
    write_session(directory / "new.jsonl", conversation(["deploy the app", "deployed; zebra stripes everywhere"],
                                                        start_ms=EPOCH_MS + 90000), session_id="new-a", cwd="/proj/a")
    write_session(directory / "other.jsonl", conversation(["unrelated work"], start_ms=EPOCH_MS + 50000),
                  session_id="mid-b", cwd="/proj/b")
    return directory


def test_list_filters_by_cwd_newest_first(client, catalog):
    infos = client.list("/proj/a", session_dir=catalog)
    assert [i["id"] for i in infos] == ["new-a", "old-a"]
    newest = infos[0]
    assert newest["path"] == str(catalog / "new.jsonl")
    assert newest["cwd"] == "/proj/a"
    assert newest["messageCount"] == 2
    assert newest["firstMessage"] == "deploy the app"
    assert newest["allMessagesText"] == "deploy the app deployed; zebra stripes everywhere"
    assert newest["modified"] > infos[1]["modified"]


def test_list_all_of_a_directory_and_of_the_agent_dir(client, catalog, agent_dir):
    assert [i["id"] for i in client.list_all(session_dir=catalog)] == ["new-a", "mid-b", "old-a"]
    # Without a directory: every project directory under <agent dir>/sessions.
    assert client.list_all() == []
    project = f"{agent_dir}/sessions/--proj-c--"
    os.makedirs(project)
    write_session(f"{project}/c.jsonl", conversation(["in the agent dir"]), session_id="c-1", cwd="/proj/c")
    assert [i["id"] for i in client.list_all()] == ["c-1"]
    assert [i["id"] for i in client.list("/proj/c")] == ["c-1"], "pi's default directory for the cwd"


def test_listings_without_all_messages_text(client, catalog):
    full = client.list("/proj/a", session_dir=catalog)
    lean = client.list("/proj/a", session_dir=catalog, include_all_messages_text=False)
    assert all("allMessagesText" in info for info in full)
    # The same listing, less that one field.
    assert lean == [{k: v for k, v in info.items() if k != "allMessagesText"} for info in full]
    full_all = client.list_all(session_dir=catalog)
    lean_all = client.list_all(session_dir=catalog, include_all_messages_text=False)
    assert [i["id"] for i in lean_all] == ["new-a", "mid-b", "old-a"]
    assert lean_all == [{k: v for k, v in info.items() if k != "allMessagesText"} for info in full_all]
    # The default is pi's exact result, and an explicit True is the default.
    assert client.list_all(session_dir=catalog, include_all_messages_text=True) == full_all


def test_find_by_id(client, catalog):
    assert client.find_by_id("/proj/a", "old-a", session_dir=catalog) == str(catalog / "old.jsonl")
    assert client.find_by_id("/proj/a", "no-such-id", session_dir=catalog) is None
    # A session of another cwd in the same directory is not found for this cwd.
    assert client.find_by_id("/proj/a", "mid-b", session_dir=catalog) is None


def test_search(client, catalog):
    """Needs the server's sessions/search."""
    hits = client.search("zebra", session_dir=catalog)
    assert {h["path"] for h in hits} == {str(catalog / "old.jsonl"), str(catalog / "new.jsonl")}
    for hit in hits:
        assert set(hit) >= {"path", "sessionId", "entryId", "role", "snippet", "timestamp", "score"}
        assert "zebra" in hit["snippet"].lower()
        assert isinstance(hit["score"], (int, float))
    by_session = {h["sessionId"]: h for h in hits}
    assert by_session["old-a"]["entryId"] == "e1" and by_session["old-a"]["role"] == "user"
    assert by_session["new-a"]["entryId"] == "e2" and by_session["new-a"]["role"] == "assistant"
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True), "best first"

    assert len(client.search("zebra", session_dir=catalog, limit=1)) == 1
    only_users = client.search("zebra", session_dir=catalog, roles=["user"])
    assert [h["sessionId"] for h in only_users] == ["old-a"]
    assert client.search("zebra", cwd="/proj/b", session_dir=catalog) == []
    assert client.search("no-such-word-anywhere", session_dir=catalog) == []

    progress = []
    assert len(client.search("zebra", session_dir=catalog, on_progress=progress.append)) == 2
    assert progress and progress[0]["kind"] == "begin" and progress[-1]["kind"] == "end"
    assert progress[0]["stage"] == "listing" and progress[0]["total"] == 3


def test_search_page_continues_a_search_and_counts_every_hit(client, catalog):
    whole = client.search("zebra", session_dir=catalog)
    first = client.search_page("zebra", session_dir=catalog, limit=1)
    assert first["total"] == len(whole) == 2 and first["sessions"] == 2 and first["offset"] == 0
    second = client.search_page("zebra", offset=1, session_dir=catalog, limit=1)
    assert second["offset"] == 1 and second["total"] == 2
    assert first["hits"] + second["hits"] == whole, "the pages are the whole answer, in order, without repeats"


def test_search_finds_a_phrase_another_process_appended(client, catalog):
    new_session = str(catalog / "new.jsonl")
    # The first search lists the directory, then extracts every session's text into the index.
    progress = []
    assert client.search('"purple elephant"', session_dir=catalog, on_progress=progress.append) == []
    stages = [(p["kind"], p.get("stage")) for p in progress]
    assert stages[0] == ("begin", "listing") and ("begin", "indexing") in stages
    assert stages.index(("begin", "indexing")) > stages.index(("begin", "listing"))
    assert stages[-1][0] == "end"
    indexing = next(p for p in progress if p["kind"] == "begin" and p.get("stage") == "indexing")
    assert indexing["total"] == 3

    # Another process (as pi would) appends an entry to one session, with the phrase in other white space.
    entry = message("late-1", "e2", "user", "we saw a purple \t  elephant dancing", EPOCH_MS + 300000)
    script = "import sys; open(sys.argv[1], 'a', encoding='utf-8').write(sys.argv[2] + '\\n')"
    subprocess.run([sys.executable, "-c", script, new_session, json.dumps(entry)], check=True)

    progress = []
    hits = client.search('"purple elephant"', session_dir=catalog, on_progress=progress.append)
    assert len(hits) == 1
    hit = hits[0]
    assert (hit["path"], hit["sessionId"], hit["entryId"], hit["role"]) == (new_session, "new-a", "late-1", "user")
    assert hit["snippet"] == "we saw a purple elephant dancing", "on one line, white space normalised"
    assert hit["timestamp"] == entry["timestamp"]
    assert isinstance(hit["score"], (int, float)) and hit["score"] > 0
    # Only what changed is extracted again.
    indexing = [p for p in progress if p.get("stage") == "indexing" and p["kind"] == "begin"]
    assert len(indexing) == 1 and indexing[0]["total"] == 1
    # A phrase is in order; the same words as words match in any order; roles and cwd narrow it.
    assert client.search('"elephant purple"', session_dir=catalog) == []
    assert [h["entryId"] for h in client.search("elephant purple", session_dir=catalog)] == ["late-1"]
    assert client.search('"purple elephant"', session_dir=catalog, roles=["assistant"]) == []
    assert [h["entryId"] for h in client.search('"purple elephant"', cwd="/proj/a", session_dir=catalog)] \
        == ["late-1"]
    assert [h["entryId"] for h in client.search("re:purple\\s+ele", session_dir=catalog)] == ["late-1"]


def test_a_session_whose_id_matches_is_a_session_hit(client, catalog):
    hits = client.search("mid-b", session_dir=catalog, roles=["session"])
    assert [(h["sessionId"], h["entryId"], h["role"]) for h in hits] == [("mid-b", None, "session")]


def test_a_bad_query_names_the_param(client, catalog):
    with pytest.raises(InvalidParams) as info:
        client.search("re:(unclosed", session_dir=catalog)
    assert info.value.data["path"] == "query"


def test_a_method_the_server_lacks_is_method_not_found(client):
    with pytest.raises(MethodNotFound) as info:
        client.request("sessions/noSuchMethod", {})
    assert info.value.code == -32601 and info.value.kind == "method_not_found"


def test_a_repeated_listing_receives_only_what_changed_and_is_still_pis(client, catalog, monkeypatch):
    # Counts the entries each sessions/listDelta answer carried in full.
    full = []
    request = client.request

    def counting(method, params=None, **kw):
        result = request(method, params, **kw)
        if method == "sessions/listDelta":
            full.append(sum(1 for e in result["sessions"] if not isinstance(e, int)))
        return result

    monkeypatch.setattr(client, "request", counting)
    raw = lambda: request("sessions/list", {"cwd": "/proj/a", "sessionDir": str(catalog)})  # noqa: E731
    first = client.list("/proj/a", session_dir=catalog)
    assert first == raw()
    # The caller owns what it got: changing it does not change the next listing.
    first[0]["firstMessage"] = "scribbled on"
    first.pop()
    assert client.list("/proj/a", session_dir=catalog) == raw()
    write_session(catalog / "newest.jsonl", conversation(["a brand new one"], start_ms=EPOCH_MS + 200000),
                  session_id="newest-a", cwd="/proj/a")
    third = client.list("/proj/a", session_dir=catalog)
    assert third == raw()
    assert [i["id"] for i in third] == ["newest-a", "new-a", "old-a"]
    assert full == [2, 0, 1], "in full, then nothing, then only the new session"
