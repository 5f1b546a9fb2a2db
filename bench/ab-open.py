#!/usr/bin/env python3
"""Alternated new processes of two or more pi-sessiond builds opening one session: how a change to the open is
measured against the build before it, on a shared machine whose speed drifts by more than the change.

    bench/ab-open.py SESSION ROUNDS BINARY [BINARY ...]

Each round starts every binary once (in turn, the order reversed every other round), sends `initialize`, then
times `session/open` of SESSION from the request to the answer's last byte, and takes the process's CPU time
(user + system, process start included) when it exits. `--no-index`: no kept skeletons, the cold open. Prints,
per binary, the median wall time of the open and the median CPU time of the process, and whether every binary
answered byte for byte the same (the handle aside).
"""

import json
import os
import re
import subprocess
import sys


def open_once(binary: str, session: str):
    import time

    p = subprocess.Popen([binary, "--no-index"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    p.stdin.write(b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}\n')
    p.stdin.flush()
    p.stdout.readline()
    request = {"jsonrpc": "2.0", "id": 1, "method": "session/open", "params": {"path": session}}
    start = time.perf_counter()
    p.stdin.write(json.dumps(request).encode() + b"\n")
    p.stdin.flush()
    answer = p.stdout.readline()
    wall_ms = (time.perf_counter() - start) * 1000
    p.stdin.close()
    _, status, usage = os.wait4(p.pid, 0)
    if status != 0 or b'"error"' in answer[:200]:
        sys.exit(f"{binary}: {answer[:300]!r} (exit status {status})")
    return wall_ms, (usage.ru_utime + usage.ru_stime) * 1000, re.sub(rb'"handle":"[^"]*"', b"", answer)


def main() -> None:
    session, rounds, binaries = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    if not binaries:
        sys.exit(__doc__)
    times = {b: [] for b in binaries}
    answers = {}
    for r in range(rounds):
        for b in binaries if r % 2 == 0 else binaries[::-1]:
            wall, cpu, answer = open_once(b, session)
            times[b].append((wall, cpu))
            answers.setdefault(b, answer)
    median = lambda xs: sorted(xs)[len(xs) // 2]
    print("answers identical:", len(set(answers.values())) == 1)
    for b in binaries:
        wall = median([t[0] for t in times[b]])
        cpu = median([t[1] for t in times[b]])
        print(f"{b:40} open {wall:6.2f} ms   process CPU {cpu:5.1f} ms   ({rounds} rounds)")


if __name__ == "__main__":
    main()
