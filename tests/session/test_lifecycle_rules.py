"""Mount-time rules that need no kernel and no service: session resolution, options, preflight."""

from __future__ import annotations

import argparse
import math

import pytest
import trio

from memfs.session.commands import parse_size
from memfs.session.daemon import MountError, _alongside, check_interval, preflight_root, stores_from_session


def resource(i: int, *, mount_path: str | None = None, access: str = "read_write") -> dict:
    return {
        "type": "memory_store",
        "memory_store_id": f"memstore_{i}",
        "name": f"Store {i}",
        "access": access,
        "mount_path": mount_path or f"/mnt/memory/store-{i}",
    }


def test_session_resources_become_stores_under_the_root():
    session = {"id": "sesn_1", "resources": [resource(1), resource(2, access="read_only"), {"type": "file"}]}
    stores = stores_from_session(session, "/tmp/root")
    assert [(s.store_id, s.slug, s.access) for s in stores] == [
        ("memstore_1", "store-1", "read_write"),
        ("memstore_2", "store-2", "read_only"),
    ]


@pytest.mark.parametrize(
    "resources, message",
    [
        ([], "no memory stores attached"),
        ([resource(i) for i in range(9)], "at most 8"),
        ([resource(1, mount_path="/etc/passwd")], "not a folder directly under /mnt/memory"),
        ([resource(1, mount_path="/mnt/memory/a/b")], "not a folder directly under /mnt/memory"),
        ([resource(1, mount_path="/mnt/memory/..")], "not a folder directly under /mnt/memory"),
        ([resource(1), resource(2, mount_path="/mnt/memory/store-1")], "share the mount path"),
        ([resource(1, access="admin")], "unknown access"),
    ],
)
def test_bad_sessions_fail_clearly(resources, message):
    with pytest.raises(MountError, match=message):
        stores_from_session({"id": "sesn_1", "resources": resources}, "/tmp/root")


@pytest.mark.parametrize("value", [0, 4.9, -1, math.nan])
def test_sync_interval_below_five_seconds_or_nan_is_refused(value):
    with pytest.raises(MountError, match="at least 5"):
        check_interval(value)
    assert check_interval(5) == 5


@pytest.mark.parametrize(
    "text, n",
    [("32MiB", 32 << 20), ("512KiB", 512 << 10), ("2000000", 2_000_000), ("1G", 1 << 30), ("7B", 7)],
)
def test_sizes(text, n):
    assert parse_size(text) == n


def test_bad_size():
    with pytest.raises(argparse.ArgumentTypeError):
        parse_size("lots")


def test_preflight_names_the_root_and_the_fix(tmp_path):
    missing = tmp_path / "missing"
    with pytest.raises(MountError, match=f"does not exist: {missing}; create it"):
        preflight_root(str(missing))
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(MountError, match="not a folder"):
        preflight_root(str(a_file))
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    with pytest.raises(MountError, match=f"something already exists at the memory store's path: {busy}"):
        preflight_root(str(busy))
    empty = tmp_path / "empty"
    empty.mkdir()
    preflight_root(str(empty))


@pytest.mark.parametrize("foreground", [False, True])
def test_an_unusable_state_dir_is_a_clear_error(tmp_path, foreground):
    import subprocess
    import sys

    root = tmp_path / "root"
    root.mkdir()
    args = [
        sys.executable,
        "-m",
        "memfs",
        "mount",
        "--root",
        str(root),
        "--session-id",
        "sesn_x",
        "--base-url",
        "http://127.0.0.1:9",
        "--state-dir",
        "/proc/memfs-cannot-be-here",
    ]
    env = {"PATH": "/usr/bin:/bin", "MEMFS_TOKEN": "t", "MEMFS_RUNTIME_DIR": str(tmp_path / "run")}
    proc = subprocess.run(
        args + (["--foreground"] if foreground else []), capture_output=True, text=True, timeout=30, env=env
    )
    assert proc.returncode == 1
    assert "cannot create the state dir /proc/memfs-cannot-be-here" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_what_runs_alongside_the_session_read_never_changes_its_outcome():
    # daemon._alongside (the listing's connections opened while the session is read): the body's
    # result, or its exception as itself (the daemon catches MountError by type), and the
    # background work ended either way.
    ended: list[str] = []

    async def background() -> None:
        try:
            await trio.sleep_forever()
        finally:
            ended.append("background")

    async def answer() -> str:
        await trio.sleep(0.01)
        return "stores"

    async def refused() -> str:
        raise MountError("cannot read session sesn_1")

    async def main() -> None:
        assert await _alongside(background, answer()) == "stores"
        with pytest.raises(MountError, match="cannot read session"):
            await _alongside(background, refused())

    trio.run(main)
    assert ended == ["background", "background"]
