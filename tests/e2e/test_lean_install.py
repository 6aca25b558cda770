"""`pip install memfs` is what a sandbox needs, and no more: a fresh venv gets the mount, the client and
the commands, none of the store service's stack (uvicorn, Hypercorn, psycopg, Jinja2, Starlette...) nor
the SDK, and `memfs mount` from it works against a real `memfs serve` (run from the test's own venv).
`memfs serve` there says which extra to install."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.sandbox import SandboxWorld
from tests.support.world import StoreSpec

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
# Distribution names `pip install memfs` must not bring (the serve and worker extras' packages).
FORBIDDEN = {
    "uvicorn",
    "hypercorn",
    "psycopg",
    "psycopg-binary",
    "psycopg-pool",
    "jinja2",
    "starlette",
    "prometheus-client",
    "python-multipart",
    "uvloop",
    "httptools",
    "anthropic",
}


@pytest.fixture(scope="module")
def lean_venv(tmp_path_factory) -> Path:
    """A fresh venv with `pip install <this checkout>`: the base dependencies only (pip's cache).
    Installed from a copy of what the wheel is built from: pip builds in the source tree, and two
    builds in the checkout at once (another test run's) collide in its build/, whose leftovers (a
    module since renamed) would also go into the wheel."""
    work = tmp_path_factory.mktemp("lean")
    source = work / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    for name in ("memfs", "bin"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    proc = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", str(source)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return venv


def _installed(venv: Path) -> set[str]:
    out = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "list",
            "--format",
            "json",
            "--disable-pip-version-check",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return {d["name"].lower().replace("_", "-") for d in json.loads(out)}


def test_pip_install_memfs_pulls_none_of_the_service_stack_nor_the_sdk(lean_venv):
    installed = _installed(lean_venv)
    assert "memfs" in installed and "pyfuse3" in installed and "trio" in installed
    assert not installed & FORBIDDEN, sorted(installed & FORBIDDEN)


def test_a_command_whose_extra_is_missing_says_which_to_install(lean_venv, tmp_path):
    memfs = [str(lean_venv / "bin" / "python"), "-m", "memfs"]
    serve = subprocess.run(
        [*memfs, "serve", "--db", str(tmp_path / "x.db")], capture_output=True, text=True, timeout=60
    )
    assert serve.returncode == 2 and "pip install 'memfs[serve]'" in serve.stderr, serve.stderr
    worker = subprocess.run([*memfs, "worker"], capture_output=True, text=True, timeout=60)
    assert worker.returncode == 2 and "pip install 'memfs[worker]'" in worker.stderr, worker.stderr
    assert subprocess.run([*memfs, "--help"], capture_output=True, timeout=60).returncode == 0


def test_memfs_mount_from_the_lean_install_works_against_a_real_service(lean_venv, service, tmp_path):
    notes = StoreSpec("Notes", seed={"/hello.md": "from the store\n"})
    world = SandboxWorld.serving(tmp_path, [notes], service=service)
    try:
        store = world.store_ids[0]
        box = world.sandbox("sandbox", python=str(lean_venv / "bin" / "python"))  # memfs from the lean venv
        box.mount()
        slug = box.status()["stores"][0]["slug"]
        assert (box.root / slug / "hello.md").read_text() == "from the store\n"
        (box.root / slug / "written.md").write_text("from the lean sandbox\n")
        assert box.sync()["ok"]
        assert world.api.contents(store)["/written.md"] == "from the lean sandbox\n"
        box.unmount(check=True)
    finally:
        world.close()
