"""mount-ready: time until one full store is readable, `memfs mount` against the official download;
mount-ready-early: the same `memfs mount` handed to a standby daemon started before the session
(`memfs mount --prestart`, the sandbox image's way: docs/SEMANTICS.md#d-standby)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time

from benchmarks.config import median
from benchmarks.harness import Bench
from benchmarks.official import official_download_time
from memfs.session import standby
from tests.support.sandbox import Sandbox


def prestart(sb: Sandbox) -> int:
    """A standby for the sandbox's root, waited for until its imports are done (its ping says
    "warm"): the sandbox booted before its session was known."""
    out = sb.memfs("mount", "--prestart", "--root", str(sb.root), check=True).stdout
    pid = int(out.split("(pid ")[1].split(")")[0])
    path = standby.socket_path(str(sb.root), sb.env["MEMFS_RUNTIME_DIR"])
    deadline = time.monotonic() + 60
    while not (standby.ping(path, timeout=5) or {}).get("warm"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the standby for {sb.root} never finished its imports")
        time.sleep(0.05)
    time.sleep(0.5)  # idle, as a sandbox waiting for its work item would be
    return pid


def row_mount_ready(b: Bench, sess: dict, label: str, runs: int) -> None:
    mem, early, off = [], [], []
    for i in range(runs):
        sb = b.sandbox(sess, name=label)
        try:
            mem.append(b.mount(sb))
        finally:
            b.close_sandbox(sb)
        sb = b.sandbox(sess, name=f"{label}-early")
        pid = None
        try:
            pid = prestart(sb)
            early.append(b.mount(sb))
            assert sb.daemon_pid() == pid, "the mount did not go to the standby"
        finally:
            b.close_sandbox(sb)
            if pid is not None:
                try:
                    os.kill(pid, signal.SIGKILL)  # a standby the mount did not take
                except ProcessLookupError:
                    pass
        root = b.work / f"official-{label}-{i}"
        root.mkdir()
        off.append(asyncio.run(official_download_time(b.url, sess, root)))
        shutil.rmtree(root, ignore_errors=True)
    m, e, o = median(mem), median(early), median(off)
    b.add(
        label,
        f"time until {len(sess['slugs'])} full store(s) are readable: `memfs mount` vs official download",
        m,
        o,
        "s",
        "<= 0.2x official",
        m <= 0.2 * o,
        base_label="official",
        details={"memfs_runs_s": mem, "official_runs_s": off},
    )
    b.add(
        f"{label}-early",
        "the same, `memfs mount` handed to a standby daemon started before the session "
        "(`memfs mount --prestart`) vs official download",
        e,
        o,
        "s",
        "<= 0.2x official",
        e <= 0.2 * o,
        base_label="official",
        details={"memfs_runs_s": early, "official_runs_s": off},
    )
