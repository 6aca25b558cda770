"""The memfs side of every row: sandboxes (`memfs mount` / sync / unmount as the worker runs them),
the rows collected so far, and the service and proxies of this run."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from benchmarks.admin import Admin
from benchmarks.config import Config, log
from benchmarks.report import fmt
from memfs.session import control
from tests.support.proxy import ProxyProcess
from tests.support.sandbox import Sandbox, is_mounted
from tests.support.service import ServiceProcess


class Bench:
    def __init__(self, cfg: Config, work: Path, shm: Path):
        self.cfg = cfg
        self.work = work
        self.shm = shm
        self.service: ServiceProcess | None = None  # set by main once it runs
        self.admin_client: Admin | None = None
        self.sandboxes: list[Sandbox] = []
        self.results: list[dict] = []
        self.extra: dict[str, Any] = {}
        self.n_sandbox = 0
        self.rtt: float | None = None  # --rtt: every client reaches the service through a delay proxy
        self.front: ProxyProcess | None = None
        self.proxies: list[ProxyProcess] = []

    @property
    def svc(self) -> ServiceProcess:
        assert self.service is not None, "the bench's service has not started"
        return self.service

    @property
    def admin(self) -> Admin:
        assert self.admin_client is not None, "the bench's service has not started"
        return self.admin_client

    @property
    def url(self) -> str:
        """Where clients (memfs and the official worker) reach the service; admin calls go direct."""
        return self.front.url if self.front else self.svc.base_url

    def proxy(self, svc: ServiceProcess) -> ProxyProcess:
        p = ProxyProcess(svc.base_url, rtt=self.rtt or 0.0)
        self.proxies.append(p)
        return p

    # -- sandboxes --------------------------------------------------------------------------
    def sandbox(self, sess: dict, base_url: str | None = None, name: str = "sb") -> Sandbox:
        self.n_sandbox += 1
        sb = Sandbox(
            self.work / "sandboxes",
            f"{name}-{self.n_sandbox}",
            base_url=base_url or self.url,
            session_id=sess["id"],
            work_secret=sess["work_secret"],
        )
        self.sandboxes.append(sb)
        return sb

    def close_sandbox(self, sb: Sandbox) -> None:
        try:
            if is_mounted(sb.root):
                sb.memfs("unmount", "--root", str(sb.root), "--flush-timeout", "10", timeout=60)
        finally:
            sb.close()  # kills a leftover daemon, then fusermount3 -u / -uz
            if is_mounted(sb.root):
                subprocess.run(["fusermount3", "-uz", str(sb.root)], capture_output=True)
            if sb in self.sandboxes:
                self.sandboxes.remove(sb)
            shutil.rmtree(sb.dir, ignore_errors=True)

    def close_all(self) -> None:
        for sb in list(self.sandboxes):
            with contextlib.suppress(Exception):
                self.close_sandbox(sb)

    def mount(self, sb: Sandbox) -> float:
        t = time.perf_counter()
        sb.mount(timeout=300)
        return time.perf_counter() - t

    @staticmethod
    def control_sync(sb: Sandbox, force: bool, wait: bool = False) -> dict:
        """What `memfs sync [--force] [--wait]` sends to the daemon (no CLI start-up cost)."""
        return control.call(sb.state_dir, {"op": "sync", "force": force, "wait": wait}, timeout=300)

    @staticmethod
    def daemon_rss(sb: Sandbox) -> dict[str, int]:
        pid = sb.daemon_pid()
        out = {}
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    out[line.split(":")[0]] = int(line.split()[1]) * 1024
        return out

    def add(
        self,
        row: str,
        measure: str,
        memfs: float,
        base: float,
        unit: str,
        target: str,
        ok: bool | None,
        *,
        base_label: str,
        details: dict | None = None,
        ratio: float | None = None,
    ) -> None:
        if ratio is None:
            ratio = memfs / base if base else float("nan")
        self.results.append(
            {
                "row": row,
                "measure": measure,
                "memfs": memfs,
                "baseline": base,
                "baseline_label": base_label,
                "unit": unit,
                "ratio": ratio,
                "target": target,
                "met": ok,
                "details": details or {},
            }
        )
        log(f"{row}: memfs {fmt(memfs, unit)} vs {base_label} {fmt(base, unit)} (x{ratio:.3g})")
