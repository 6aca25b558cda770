"""The ladder (tests/support/rungs.py): every test module sits on one rung, each rung is a registered
marker that selects that rung alone, and the paths of tests that the docs and scripts name exist."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.rungs import RUNGS, TESTS, rung_of, rung_problem

pytestmark = pytest.mark.timeout(60)

REPO = TESTS.parent


def test_every_test_module_sits_on_a_rung():
    stray = [str(p.relative_to(REPO)) for p in sorted(TESTS.rglob("test_*.py")) if rung_of(p) is None]
    assert stray == [], f"move these under tests/<rung>/ ({', '.join(RUNGS)})"


def test_the_rung_of_a_path_is_its_folder_under_tests(tmp_path):
    assert rung_of(TESTS / "engine" / "test_x.py") == "engine"
    assert rung_of(TESTS / "service" / "contract" / "test_x.py") == "service"
    assert rung_of(TESTS / "test_layers.py") == "rules"
    assert rung_of(TESTS / "test_loose.py") is None  # a new loose test is on no rung
    assert rung_of(TESTS / "support" / "test_x.py") is None
    assert rung_of(tmp_path / "test_x.py") is None


def test_a_test_is_on_exactly_one_rung():
    assert rung_problem("t::a", ["mount"]) is None
    assert "on no rung" in (rung_problem("t::b", []) or "")
    assert "several rungs (e2e, rules)" in (rung_problem("t::c", ["e2e", "rules"]) or "")


def test_every_rung_is_a_registered_marker(pytestconfig):
    registered = [line.split(":")[0].strip() for line in pytestconfig.getini("markers")]
    assert [m for m in registered if m in RUNGS] == list(RUNGS)


def test_a_rungs_marker_selects_that_rung_alone():
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", "-n", "0"]
        + ["-m", "engine", "tests/rules/test_notices.py", "tests/engine/test_not_on_store.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ids = [line for line in proc.stdout.splitlines() if "::" in line]
    assert ids and all(i.startswith("tests/engine/") for i in ids), proc.stdout


# a path under tests/ as docs, scripts and comments name one: a module, a folder (a dotted module
# name such as tests.support.proxy is not a path and is left alone)
_TEST_PATH = re.compile(r"(?<![\w/.-])tests/[\w/.-]*\w")
_NAMING = (
    "memfs",
    "docs",
    "scripts",
    "tests",
    "benchmarks",
    "docker",
    "workers",
    "README.md",
    "pyproject.toml",
)


def _naming_files() -> list[Path]:
    out = []
    for rel in _NAMING:
        p = REPO / rel
        if p.is_file():
            out.append(p)
            continue
        out += [
            f
            for f in sorted(p.rglob("*"))
            if f.is_file()
            and f.suffix in ("", ".py", ".md", ".sh", ".toml", ".js", ".ts", ".json")
            and not {"node_modules", "__pycache__", ".venv"} & set(f.parts)
        ]
    return out


def test_every_test_path_that_is_named_exists():
    """A moved test leaves no mention of its old path behind (scripts/test selects tests by path)."""
    missing = []
    for f in _naming_files():
        for m in _TEST_PATH.finditer(f.read_text(errors="replace")):
            if not (REPO / m.group(0)).exists():
                missing.append(f"{f.relative_to(REPO)}: {m.group(0)}")
    assert missing == []
