"""`memfs worker --mount` keeps the work secret from the agent.

The agent's tools run with the worker's uid and in its working directory: whatever memfs starts
must run nothing the agent wrote, and no memfs process may show the secret in /proc/<pid>/environ
(the file a same-uid process reads while the holder is dumpable).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fake_platform import Step
from tests.support.mounts import mounted_at
from tests.support.worker_world import RW

pytestmark = pytest.mark.timeout(120)

PLANTED = "import pathlib; pathlib.Path({marker!r}).write_text('planted code ran'); print('PLANTED')\n"


def start_worker_in(wworld, work, cwd: Path, *args: str) -> subprocess.Popen:
    """The `memfs` console script (what `ant … --on-work` runs), in `cwd`, without --workdir: the
    agent's working directory is the worker's own."""
    env = wworld.item_env(work, clear=("ANTHROPIC_", "MEMFS_"))
    memfs = Path(sys.executable).parent / "memfs"
    with open(wworld.tmp / "worker.log", "wb") as log:
        return subprocess.Popen(
            [str(memfs), "worker", "--root", str(wworld.root), "--mount", *args],
            env=env,
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def run_to_end(wworld, proc: subprocess.Popen) -> str:
    try:
        code = proc.wait(90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    log = (wworld.tmp / "worker.log").read_text(errors="replace")
    assert code == 0, log
    assert not mounted_at(wworld.root), log
    return log


def test_a_memfs_package_planted_in_the_agents_directory_never_runs(wworld):
    marker = wworld.tmp / "planted-ran"
    for name in ("memfs/__init__.py", "memfs/__main__.py", "trio.py", "httpx.py"):
        (wworld.workdir / name).parent.mkdir(exist_ok=True)
        (wworld.workdir / name).write_text(PLANTED.format(marker=str(marker)))
    m = wworld.memory
    work = wworld.item([Step("write", {"file_path": m(RW, "kept.md"), "content": "kept\n"})])
    proc = start_worker_in(
        wworld,
        work,
        wworld.workdir,
        "--store-url",
        wworld.service.base_url,
        "--state-dir",
        str(wworld.box.state_dir),
    )
    log = run_to_end(wworld, proc)
    assert "PLANTED" not in log and not marker.exists(), log
    assert wworld.api.contents(wworld.rw)["/kept.md"] == "kept\n"


def _memfs_processes(root: Path) -> dict[int, list[str]]:
    """pid -> argv of every memfs process serving root (other tests run beside this one)."""
    found = {}
    for entry in os.listdir("/proc"):
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().decode().split("\0")
        except (OSError, UnicodeDecodeError):
            continue
        if str(root) in argv and any(a.endswith("memfs") for a in argv):
            found[int(entry)] = argv
    return found


def _kind(argv: list[str]) -> str:
    return "worker" if "worker" in argv else "mount daemon" if "mount" in argv else " ".join(argv)


def _read_without_capabilities(path: str) -> subprocess.CompletedProcess:
    """`cat path` as this uid with no capability at all: what the agent's tools could do."""
    return subprocess.run(
        ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--", "cat", path],
        capture_output=True,
        timeout=10,
    )


def test_no_memfs_process_shows_the_work_secret_in_its_environment(wworld):
    token = wworld.token
    seen: dict[str, object] = {}

    def look(_event) -> None:  # while the item runs: the worker waits for the next event
        found = {}
        for pid, argv in _memfs_processes(wworld.root).items():
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue
            found[pid] = (_kind(argv), work.secret.encode() in environ or token.encode() in environ)
        seen["procs"] = found
        seen["denied"] = {pid: _read_without_capabilities(f"/proc/{pid}/environ").returncode for pid in found}

    m = wworld.memory
    work = wworld.item([Step("read", {"file_path": m(RW, "profile.md")}, after=look)])
    proc = start_worker_in(
        wworld,
        work,
        wworld.workdir,
        "--store-url",
        wworld.service.base_url,
        "--state-dir",
        str(wworld.box.state_dir),
    )
    log = run_to_end(wworld, proc)
    procs = seen["procs"]
    assert isinstance(procs, dict)
    assert {"worker", "mount daemon"} <= {kind for kind, _ in procs.values()}, (procs, log)
    assert [c for c, leaked in procs.values() if leaked] == [], "a memfs process shows the secret"
    assert all(code != 0 for code in seen["denied"].values()), (seen, "a same-uid process reads an environ")
