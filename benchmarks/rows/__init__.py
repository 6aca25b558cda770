"""One module per family of rows; `GROUPS` is what `scripts/bench --only` chooses from, in run order.

A group is a name, a line for the log, and `run(b, run)`: `b` is the `Bench` (service, admin,
sandboxes, the rows so far), `run` the `Run` (sessions, store ids, the seeded contents, the local
copies). To add one (for example a live-mode propagation group from a standalone script): put its
code in `benchmarks/rows/<name>.py` with a `run(b, run)` that calls `b.add(...)` per row, append a
`Group` below, and if its rows should sort somewhere particular add their first word to
`report.ORDER`. Nothing else changes: flags, the table and the JSON come for free.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks.harness import Bench


@dataclass
class Run:
    """What every group may use, set up once per bench run by `benchmarks.main`."""

    ids: list[str]  # the full stores' ids, full-0 first
    stores: dict[str, dict[str, str]]  # name -> {path: text}, as seeded
    sess1: dict  # a session attaching full-0
    sess8: dict  # a session attaching every full store
    disk: Path  # full-0 on local disk
    tmpfs: Path  # full-0 on tmpfs
    ref: Path  # a file for `find -newer`
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Group:
    name: str
    title: str
    run: Callable[[Bench, Run], None]


def _mount(b: Bench, r: Run) -> None:
    from benchmarks.rows.mount import row_mount_ready

    row_mount_ready(b, r.sess1, "mount-ready", b.cfg.mount_runs)


def _reads(b: Bench, r: Run) -> None:
    from benchmarks.rows.reads import row_reads

    sb = b.sandbox(r.sess1, name="reads")
    try:
        b.mount(sb)
        row_reads(b, sb.root / r.sess1["slugs"][0], r.disk, r.tmpfs, r.ref, sb.daemon_pid())
    finally:
        b.close_sandbox(sb)


def _burst(b: Bench, r: Run) -> None:
    from benchmarks.rows.burst import row_write_burst

    row_write_burst(b)


def _eight(b: Bench, r: Run) -> None:
    from benchmarks.rows.eight import row_eight_stores

    row_eight_stores(b, r.sess8, r.ids, b.proxy(b.svc), r.stores)


def _prop(b: Bench, r: Run) -> None:
    from benchmarks.rows.propagation import row_propagation

    row_propagation(b, r.ids[1])


def _live(b: Bench, r: Run) -> None:
    from benchmarks.rows.live import row_live

    work = b.work / "live"
    work.mkdir(mode=0o755)
    row_live(b, work)


def _service(b: Bench, r: Run) -> None:
    from benchmarks.rows.service import row_service

    row_service(b, r.ids)


def _net(b: Bench, r: Run) -> None:
    from benchmarks.rows.network import run_network

    run_network(b, r)


def _first(b: Bench, r: Run) -> None:
    from benchmarks.rows.first_download import run_first_download

    run_first_download(b, r)


def _hosted(b: Bench, r: Run) -> None:
    from benchmarks.rows.hosted import run_hosted

    run_hosted(b, r)


def _relay(b: Bench, r: Run) -> None:
    from benchmarks.rows.relay import run_relay

    run_relay(b, r)


def _big(b: Bench, r: Run) -> None:
    from benchmarks.rows.big import run_big

    run_big(b, r)


def _writers(b: Bench, r: Run) -> None:
    from benchmarks.rows.writers import run_writers

    run_writers(b)


GROUPS: list[Group] = [
    Group("mount", "mount-ready, mount-ready-early", _mount),
    Group("reads", "grep / stat over a mounted full store", _reads),
    Group("burst", "write-burst", _burst),
    Group(
        "eight",
        "mount-ready-8, idle-tick, one-change-tick, rss (every full store, via a counting proxy)",
        _eight,
    ),
    Group("prop", "propagation", _prop),
    Group(
        "live",
        "propagation in live mode (and polling, and the official worker, on a store of its own)",
        _live,
    ),
    Group("service", "service load", _service),
    Group("net", "the network table, memfs serve and memfs serve --hosted-api", _net),
    Group(
        "first",
        "the first download under the hosted API's limits: each side on its own emulator, one store and all",
        _first,
    ),
    Group(
        "hosted",
        "the hosted rows: memfs serve --hosted-api with its org limits, requests counted, the official worker beside",
        _hosted,
    ),
    Group(
        "relay",
        "the relay row: a fleet through one memfs serve --upstream in front of the hosted API emulator, "
        "and the same fleet direct",
        _relay,
    ),
    Group(
        "big",
        "the 10,000-memory rows: one store at the hosted cap on memfs serve --hosted-api, mount time, "
        "rss, an idle and a one-edit tick's requests",
        _big,
    ),
    Group(
        "writers",
        "concurrent writers: 5 sandboxes appending to one file and rewriting their sections, nobody syncing",
        _writers,
    ),
]
BY_NAME = {g.name: g for g in GROUPS}
