#!/usr/bin/env python3
"""A/B of the read path that hypervisor steal does not blur: one store mounted by two trees' memfs
side by side (`git archive REV | tar -x -C DIR` gives a tree), `grep -r`, `ls -lR` and `find` run
alternately on both, and per run the wall time and the daemon's own CPU time (utime+stime of its
process: time the vCPU was stolen is not charged to it). docs/PERFORMANCE.md "Latest result".

    scripts/read_ab.py TREE_A TREE_B [MEMORIES]     # as root (it mounts); ~1 min for 2,000
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, sys.argv[2])  # tests.support of B
from tests.support.api import Api  # noqa: E402
from tests.support.sandbox import Sandbox  # noqa: E402
from tests.support.service import ServiceProcess  # noqa: E402

trees = {"A": sys.argv[1], "B": sys.argv[2]}
N = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
work = Path(tempfile.mkdtemp(prefix="abreads-"))
svc = ServiceProcess(work / "svc")
TCK = os.sysconf("SC_CLK_TCK")


def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TCK


boxes = {}
try:
    api = Api(svc.base_url, svc.admin_key)
    sid = api.create_store("ab")
    for i in range(N):
        api.create(sid, f"/d{i % 40}/s{i % 7}/f{i}.md", f"memory {i}\n" + "lorem ipsum " * 100)
    sess = svc.create_session([(sid, "read_write")])
    for name, tree in trees.items():
        sb = Sandbox(
            work, name, base_url=svc.base_url, session_id=sess["id"], work_secret=sess["work_secret"]
        )
        sb.env["PYTHONPATH"] = tree
        sb.mount(check=True)
        st = json.loads(sb.memfs("status", "--root", str(sb.root), "--json", check=True).stdout)
        boxes[name] = (sb, st["pid"])
    tools = {
        "grep -r": ["grep", "-r", "-c", "NEEDLE"],
        "ls -lR": ["ls", "-lR"],
        "find": ["find", ".", "-type", "f"],
    }
    res = {t: {n: {"wall": [], "cpu": []} for n in boxes} for t in tools}
    for cmd in tools.values():
        for sb, _ in boxes.values():
            subprocess.run(cmd, cwd=sb.root, capture_output=True)  # warm
    for rnd in range(7):
        for t, cmd in tools.items():
            order = list(boxes) if rnd % 2 == 0 else list(reversed(boxes))
            for n in order:
                sb, pid = boxes[n]
                c0, t0 = cpu(pid), time.perf_counter()
                subprocess.run(cmd, cwd=sb.root, capture_output=True)
                res[t][n]["wall"].append(time.perf_counter() - t0)
                res[t][n]["cpu"].append(cpu(pid) - c0)
    for t in tools:
        a, b = res[t]["A"], res[t]["B"]
        ma, mb = statistics.median(a["wall"]), statistics.median(b["wall"])
        ca, cb = statistics.median(a["cpu"]), statistics.median(b["cpu"])
        print(
            f"{t:8s} wall A {ma * 1000:6.0f} ms  B {mb * 1000:6.0f} ms  B/A {mb / ma:.2f} | daemon CPU A {ca * 1000:5.0f} ms  B {cb * 1000:5.0f} ms  B/A {cb / ca if ca else float('nan'):.2f}"
        )
finally:
    for sb, _ in boxes.values():
        sb.unmount(check=False)
    svc.stop()
