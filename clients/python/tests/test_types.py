"""The generated types match the contract, and the client covers every method of it."""

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import typing

import pi_sessiond
from pi_sessiond import Client, Session, SessiondError, SessionsWatch, _generate, errors, events, types

PACKAGE_DIR = os.path.dirname(os.path.abspath(pi_sessiond.__file__))
CONTRACT_DIR = _generate.default_contract_dir()


def test_committed_types_are_what_the_generator_makes():
    schema = os.path.join(CONTRACT_DIR, "schema.json")
    methods = os.path.join(CONTRACT_DIR, "methods.json")
    assert os.path.isfile(schema), f"{schema} not found: the test runs from the repository"
    fresh = _generate.generate(schema, methods)
    with open(os.path.join(PACKAGE_DIR, "types.py"), encoding="utf-8") as f:
        committed = f.read()
    assert committed == fresh, (
        "pi_sessiond/types.py is stale: regenerate it with "
        "`python -m pi_sessiond._generate > pi_sessiond/types.py` (in clients/python)"
    )


def test_the_generator_runs_even_when_types_py_is_empty(tmp_path):
    # `python -m pi_sessiond._generate > pi_sessiond/types.py`: the shell empties the file before Python starts.
    copy = tmp_path / "pi_sessiond"
    shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "types.py").write_text("")
    run = subprocess.run(
        [sys.executable, "-m", "pi_sessiond._generate", "--schema", os.path.join(CONTRACT_DIR, "schema.json"),
         "--methods", os.path.join(CONTRACT_DIR, "methods.json")],
        cwd=tmp_path, capture_output=True, check=True,
        env=dict(os.environ, PYTHONPATH=str(tmp_path)),
    )
    with open(os.path.join(PACKAGE_DIR, "types.py"), encoding="utf-8") as f:
        assert run.stdout.decode("utf-8") == f.read()


def test_every_generated_type_resolves():
    resolved = 0
    for name, value in vars(types).items():
        if isinstance(value, type) and issubclass(value, dict) and value.__module__ == types.__name__:
            typing.get_type_hints(value)  # raises NameError on a reference to a type that does not exist
            resolved += 1
    assert resolved >= 50
    # Required and optional members are told apart (Python 3.9 has no NotRequired).
    assert types.SessionState.__required_keys__ >= {"handle", "sessionId", "cwd", "entryCount", "seq"}
    assert "leafId" in types.SessionState.__optional_keys__
    # Left out with includeAllMessagesText: false.
    assert "allMessagesText" in types.SessionInfo.__optional_keys__
    # `entry` is left out at detail none (the node has the entry's `id` instead).
    assert types.SessionTreeFlatItem.__required_keys__ == {"parentIndex", "depth"}
    assert typing.get_args(types.Change)[0] == typing.ForwardRef("ChangeAppend")


def test_the_generator_refuses_what_it_does_not_understand():
    schema = {"$defs": {"Odd": {"type": "object", "properties": {"x": {"not": {"type": "string"}}}}}}
    methods = {"protocolVersion": "1.0", "methods": [], "errors": []}
    try:
        _generate.Generator(schema, methods).source()
    except ValueError as e:
        assert "not" in str(e)
    else:
        raise AssertionError("an unknown schema keyword must not silently become Any")


def _python_name(method: str) -> typing.Tuple[type, str]:
    """Where the client exposes a protocol method."""
    special = {
        "initialize": (Client, "initialize"),
        "shutdown": (Client, "close"),
        "session/close": (Session, "close"),
        "sessions/watch": (Client, "watch_sessions"),
        "sessions/unwatch": (SessionsWatch, "close"),
        # About a file, not an open session.
        "session/lockHolder": (Client, "lock_holder"),
        # list and list_all answer through sessions/listDelta against the last listing they got.
        "sessions/listDelta": (Client, "list"),
    }
    if method in special:
        return special[method]
    group, name = method.split("/")
    snake = re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()
    if group == "sessions" or name in ("create", "open", "continueRecent", "inMemory", "forkFrom"):
        return Client, snake
    return Session, snake


def test_every_method_of_the_contract_has_a_client_method():
    with open(os.path.join(CONTRACT_DIR, "methods.json"), encoding="utf-8") as f:
        contract = json.load(f)
    requests = [m["name"] for m in contract["methods"] if m["kind"] == "request"]
    assert requests, "methods.json lists no requests"
    missing = [m for m in requests if not callable(getattr(_python_name(m)[0], _python_name(m)[1], None))]
    assert not missing, f"methods without a client method: {missing}"
    # And the wrappers send it: every wire name appears in the client (a typo would leave it out).
    source = open(os.path.join(PACKAGE_DIR, "client.py"), encoding="utf-8").read()
    # (Except the listings list and list_all answer through sessions/listDelta.)
    served_by_delta = {"sessions/list", "sessions/listAll"}
    for m in requests:
        assert f'"{m}"' in source or m in served_by_delta, f"{m} is never sent"


def test_no_annotation_needs_python_310():
    # `X | Y` in an annotation is evaluated at definition time and fails on 3.9; so does `match`.
    offenders = []
    for root in (PACKAGE_DIR, os.path.dirname(os.path.abspath(__file__))):
        for name in sorted(os.listdir(root)):
            if not name.endswith(".py"):
                continue
            path = os.path.join(root, name)
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), path, feature_version=(3, 9))
            for node in ast.walk(tree):
                annotations = []
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    args = node.args
                    every = args.posonlyargs + args.args + args.kwonlyargs + [args.vararg, args.kwarg]
                    annotations += [a.annotation for a in every if a is not None and a.annotation is not None]
                    annotations.append(node.returns)
                elif isinstance(node, ast.AnnAssign):
                    annotations.append(node.annotation)
                for annotation in annotations:
                    if annotation is None:
                        continue
                    for sub in ast.walk(annotation):
                        if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.BitOr):
                            offenders.append(f"{name}:{sub.lineno}")
    assert not offenders, offenders


def _contract() -> dict:
    with open(os.path.join(CONTRACT_DIR, "methods.json"), encoding="utf-8") as f:
        return json.load(f)


def test_there_is_an_error_class_for_every_error_of_the_contract():
    contract = {e["code"]: e["kind"] for e in _contract()["errors"]}
    assert contract[1007] == "session_locked"
    assert types.ERROR_KINDS == contract, "types.py is stale"
    classes = errors._BY_CODE
    assert sorted(classes) == sorted(contract), "errors._BY_CODE and methods.json list different codes"
    for code, kind in contract.items():
        cls = classes[code]
        assert cls.KIND == kind, f"{cls.__name__} is for {cls.KIND}, the contract says {code} is {kind}"
        assert cls.__name__ in pi_sessiond.__all__ and getattr(pi_sessiond, cls.__name__) is cls
        # A response with that code raises that class, with the kind and data it carried.
        error = SessiondError.from_response({"code": code, "message": "m", "data": {"kind": kind, "x": 1}}, "a/b")
        assert type(error) is cls and error.kind == kind and error.data["x"] == 1
    assert len(set(classes.values())) == len(classes), "one class per code"
    # A code the contract does not have stays a plain SessiondError.
    assert type(SessiondError.from_response({"code": 4242, "message": "new"})) is SessiondError


def test_notification_types_are_the_generated_ones():
    notifications = {m["name"]: m for m in _contract()["methods"]
                     if m["kind"] == "notification" and m["direction"] == "server-to-client"}
    assert set(notifications) == set(types.SERVER_NOTIFICATIONS) >= {"session/changed", "sessions/changed"}
    assert notifications["sessions/changed"]["params"]["$ref"].endswith("/SessionsChanged")
    # sessions/changed is described by the contract now: the public name is the generated type.
    assert events.SessionsChanged is types.SessionsChanged is pi_sessiond.SessionsChanged
    assert types.SessionsChanged.__required_keys__ == {"watchId", "path", "kind"}
    # SessionEvent is session/changed's params with `change` widened to a resync: the same members otherwise.
    assert events.SessionEvent.__required_keys__ == types.SessionChanged.__required_keys__
    assert events.SessionEvent.__optional_keys__ == types.SessionChanged.__optional_keys__
    hints = typing.get_type_hints(events.SessionEvent)  # NameError if a name it uses does not resolve
    assert hints["seq"] is int and typing.get_type_hints(events.ResyncChange)["missed"] == typing.List[int]
    # And the client routes every notification the contract names.
    source = open(os.path.join(PACKAGE_DIR, "client.py"), encoding="utf-8").read()
    for name in notifications:
        assert f'method == "{name}"' in source, f"{name} is not routed"
