#!/usr/bin/env python3
"""What a sidecar holds opening a session as pi's drop-in does: `session/open` (pi's open params), then every
lazy page of `session/getEntries` (1,000 entries, strings over 1 KiB left in the file), with the memory of the
process from /proc after each step and the open's time.

    bench/sidecar-open-mem.py BINARY SESSION_FILE [--decline-skeletons] [--agent-dir DIR] [--no-index]

--decline-skeletons: initialize as the drop-in does (`capabilities: {skeletons: false}`). The agent directory
(default: a new temporary one, so nothing is kept from an earlier open) holds the kept file between runs.
--no-index: the sidecar keeps nothing (no catalog index, no kept skeletons), to see what keeping costs an open.
"""
import json
import re
import subprocess
import sys
import tempfile
import time

args = sys.argv[1:]
binary, path = args[0], args[1]
decline = "--decline-skeletons" in args
agent = args[args.index("--agent-dir") + 1] if "--agent-dir" in args else tempfile.mkdtemp(prefix="sidecar-open-mem-")
extra = ["--no-index"] if "--no-index" in args else []
p = subprocess.Popen([binary, "--agent-dir", agent, *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
next_id = 0


def call(method, params):
    global next_id
    next_id += 1
    p.stdin.write((json.dumps({"jsonrpc": "2.0", "id": next_id, "method": method, "params": params}) + "\n").encode())
    p.stdin.flush()
    while True:
        message = json.loads(p.stdout.readline())
        if message.get("id") == next_id:
            if "error" in message:
                sys.exit(f"{method}: {message['error']}")
            return message["result"]


def memory():
    status = open(f"/proc/{p.pid}/status").read()
    return {k: int(re.search(k + r":\s+(\d+)", status).group(1)) // 1024 for k in ["VmHWM", "VmRSS", "RssAnon", "RssFile"]}


call("initialize", {"capabilities": {"skeletons": False} if decline else {}})
started = time.perf_counter()
state = call("session/open", {"path": path, "sessionDir": f"{agent}/sessions", "cwdOverride": "/tmp", "repair": True})
open_ms = (time.perf_counter() - started) * 1000
opened = memory()
pages = 0
while call("session/getEntries", {"handle": state["handle"], "offset": pages * 1000, "limit": 1000, "lazyOver": 1024}):
    pages += 1
print(json.dumps({"declined": decline, "openMs": round(open_ms, 1), "opened MiB": opened, "pages": pages, "after pages MiB": memory()}))
p.stdin.close()
p.wait()
