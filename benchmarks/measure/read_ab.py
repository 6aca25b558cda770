"""A/B of the read path that hypervisor steal does not blur: one store mounted by two trees' memfs
side by side (`git archive REV | tar -x -C DIR` gives a tree), `grep -r`, `ls -lR` and `find` run
alternately on both, and per run the wall time and the daemon's own CPU time (utime+stime of its
process: time the vCPU was stolen is not charged to it). docs/PERFORMANCE.md "Latest result".

    .venv/bin/python -m benchmarks.measure.read_ab TREE_A TREE_B [MEMORIES]   # as root (it mounts); ~1 min for 2,000

The service and the sandboxes are tree B's (its tests/support); each mount runs its own tree's memfs.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TCK = os.sysconf("SC_CLK_TCK")
TOOLS = {
    "grep -r": ["grep", "-r", "-c", "NEEDLE"],
    "ls -lR": ["ls", "-lR"],
    "find": ["find", ".", "-type", "f"],
}


def cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TCK


def main() -> int:
    ap = argparse.ArgumentParser(description="A/B of the read path of two memfs trees on one store.")
    ap.add_argument("tree_a")
    ap.add_argument("tree_b")
    ap.add_argument("memories", nargs="?", type=int, default=2000)
    args = ap.parse_args()
    sys.path.insert(0, args.tree_b)  # tests.support of B
    from tests.support.api import Api
    from tests.support.sandbox import Sandbox
    from tests.support.service import ServiceProcess

    trees = {"A": args.tree_a, "B": args.tree_b}
    work = Path(tempfile.mkdtemp(prefix="abreads-"))
    svc = ServiceProcess(work / "svc")
    boxes = {}
    try:
        api = Api(svc.base_url, svc.admin_key)
        sid = api.create_store("ab")
        for i in range(args.memories):
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
        res = run_rounds(boxes)
        for t in TOOLS:
            report(t, res[t]["A"], res[t]["B"])
    finally:
        for sb, _ in boxes.values():
            sb.unmount(check=False)
        svc.stop()
    return 0


def run_rounds(boxes: dict) -> dict:
    res = {t: {n: {"wall": [], "cpu": []} for n in boxes} for t in TOOLS}
    for cmd in TOOLS.values():
        for sb, _ in boxes.values():
            subprocess.run(cmd, cwd=sb.root, capture_output=True)  # warm
    for rnd in range(7):
        for t, cmd in TOOLS.items():
            order = list(boxes) if rnd % 2 == 0 else list(reversed(boxes))
            for n in order:
                sb, pid = boxes[n]
                c0, t0 = cpu(pid), time.perf_counter()
                subprocess.run(cmd, cwd=sb.root, capture_output=True)
                res[t][n]["wall"].append(time.perf_counter() - t0)
                res[t][n]["cpu"].append(cpu(pid) - c0)
    return res


def report(tool: str, a: dict, b: dict) -> None:
    ma, mb = statistics.median(a["wall"]), statistics.median(b["wall"])
    ca, cb = statistics.median(a["cpu"]), statistics.median(b["cpu"])
    print(
        f"{tool:8s} wall A {ma * 1000:6.0f} ms  B {mb * 1000:6.0f} ms  B/A {mb / ma:.2f} | daemon CPU "
        f"A {ca * 1000:5.0f} ms  B {cb * 1000:5.0f} ms  B/A {cb / ca if ca else float('nan'):.2f}"
    )


if __name__ == "__main__":
    sys.exit(main())
