"""The reader and the matching of answers, against a scripted stand-in for the server.

The real server escapes U+2028 in what it writes and answers most requests quickly, so it cannot show that the
client splits frames on b"\\n" only or matches answers that come back in reverse order. A few lines of Python
playing the server can, deterministically.
"""

import json
import sys
import textwrap
import threading

import pytest

from pi_sessiond import Client, SessiondClosed
from pi_sessiond._transport import decode_json, decode_json_iteratively

# Reads three requests, then answers them in reverse order: raw U+2028, U+0085 and U+2029 inside strings, CRLF
# line ends, a 200 KB line, a notification and a blank line in between.
FAKE_SERVER = textwrap.dedent(
    r'''
    import json, sys
    requests = [json.loads(sys.stdin.buffer.readline()) for _ in range(3)]
    out = sys.stdout.buffer
    out.write(b'{"jsonrpc":"2.0","method":"test/note","params":{"text":"a\xe2\x80\xa8b"}}\n\n')
    for i, request in enumerate(reversed(requests)):
        text = request["params"]["echo"] + "\u2028\u0085\u2029" + "x" * (200000 if i == 0 else 1)
        body = json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": text}, ensure_ascii=False)
        out.write(body.encode("utf-8") + (b"\r\n" if i == 1 else b"\n"))
        out.flush()
    for line in sys.stdin.buffer:  # then shutdown (answered null) and exit, like the real server
        message = json.loads(line)
        if message.get("method") == "exit":
            break
        if "id" in message:
            out.write(b'{"jsonrpc":"2.0","id":%d,"result":null}\n' % message["id"])
            out.flush()
    '''
)


def test_answers_in_reverse_order_with_raw_separators_reach_their_callers():
    client = Client([sys.executable, "-c", FAKE_SERVER], timeout=30)
    notes = []
    client.on_notification("test/note", notes.append)
    results = {}

    def call(word: str) -> None:
        results[word] = client.request("test/echo", {"echo": word})

    threads = [threading.Thread(target=call, args=(w,)) for w in ("one", "two", "three")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert set(results) == {"one", "two", "three"}
    for word, text in results.items():
        assert text.startswith(word + "\u2028\u0085\u2029x")
    assert max(len(text) for text in results.values()) > 200000
    assert notes == [{"text": "a\u2028b"}]
    client.close(timeout=5)
    assert client.returncode == 0
    with pytest.raises(SessiondClosed):
        client.request("test/echo", {"echo": "late"})


# Answers sessions/watch only after sending an event for the new watch, as the real server may when a file
# changes while the watch is being set up; then answers shutdown and stops at exit.
EARLY_EVENT_SERVER = textwrap.dedent(
    r'''
    import json, sys
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        message = json.loads(line)
        if message.get("method") == "exit":
            break
        result = None
        if message.get("method") == "sessions/watch":
            note = {"watchId": "w1", "path": "/d/a.jsonl", "kind": "created"}
            out.write(json.dumps({"jsonrpc": "2.0", "method": "sessions/changed", "params": note}).encode() + b"\n")
            result = {"watchId": "w1", "dir": "/d"}
        if "id" in message:
            out.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode() + b"\n")
        out.flush()
    '''
)


def test_a_directory_event_that_precedes_the_watch_answer_is_kept():
    with Client([sys.executable, "-c", EARLY_EVENT_SERVER], timeout=30) as client:
        watch = client.watch_sessions(session_dir="/d")
        assert (watch.watch_id, watch.dir) == ("w1", "/d")
        assert watch.get(timeout=5) == {"watchId": "w1", "path": "/d/a.jsonl", "kind": "created"}
        watch.close()
        assert not client._dir_orphans and not client._dir_watches
    assert client.returncode == 0


# Answers every request with an array nested `depth` levels deep (the shape of a long conversation's getTree):
# far beyond what json.loads takes.
DEEP_SERVER = textwrap.dedent(
    r"""
    import json, sys
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        message = json.loads(line)
        if message.get("method") == "exit":
            break
        if "id" in message:
            depth = (message.get("params") or {}).get("depth", 0)
            result = b"[" * depth + b'"bottom"' + b"]" * depth
            out.write(b'{"jsonrpc":"2.0","id":%d,"result":%s}\n' % (message["id"], result))
            out.flush()
    """
)


def test_an_answer_nested_deeper_than_json_loads_takes_still_arrives():
    with Client([sys.executable, "-c", DEEP_SERVER], timeout=30) as client:
        value = client.request("test/deep", {"depth": 50000})
        depth = 0
        while isinstance(value, list):
            (value,) = value
            depth += 1
        assert (depth, value) == (50000, "bottom")
        # The reader lives on: the next answer comes too.
        assert client.request("test/deep", {"depth": 1}) == ["bottom"]
    assert client.returncode == 0


def test_the_iterative_decoder_is_json_loads_without_the_depth_limit():
    documents = [
        '{"a": [1, -2.5, 3e2, -0, 1E-3, true, false, null, "x\\u2028\\ud83d\\n\\"q\\\\"], "b": {}, "c": []}',
        ' [ 1 , { "k" : { } } , [ ] ] ', '"just a string"', "0", "12345678901234567890", '{"dup": 1, "dup": 2}',
        "[NaN, Infinity, -Infinity]", '{"\u00e9t\u00e9": "\U0001f600", "raw\u2028sep": 1}', "[[[[[]]]]]",
    ]
    for text in documents:
        expected, actual = json.loads(text), decode_json_iteratively(text)
        assert json.dumps(actual) == json.dumps(expected), text
        assert repr(actual) == repr(expected), text  # ints stay ints, floats floats, key order kept
    for bad in ["", "[", "[1,]", '{"a"}', '{"a":1,}', "[1 2]", "{1:2}", '"abc', "[1]x", "tru", '{"a":1', '"\x01"']:
        # Refused as json.loads refuses it (whose wording varies between Python versions).
        with pytest.raises(json.JSONDecodeError):
            json.loads(bad)
        with pytest.raises(json.JSONDecodeError) as error:
            decode_json_iteratively(bad)
        assert 0 <= error.value.pos <= len(bad)
    deep = b'{"a":' * 100000 + b"[]" + b"}" * 100000
    value = decode_json(deep)
    for _ in range(100000):
        value = value["a"]
    assert value == []
