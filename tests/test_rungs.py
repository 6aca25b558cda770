"""The ladder (tests/support/rungs.py): every test module sits on one rung, each rung is a registered
marker that selects that rung alone, the rungs stand in the order of what they bring up and no test
module brings up more than its rung, and the paths of tests that the docs and scripts name exist."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.rungs import (
    BRINGS_UP,
    REACH,
    RUNGS,
    SUBJECT_OF,
    TESTS,
    USES_FROM_ABOVE,
    rung_of,
    rung_problem,
)

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


def _imports_and_fixtures(path: Path) -> tuple[set[str], set[str]]:
    """The modules `path` imports anywhere in it (absolute imports), and its functions' parameter names."""
    modules: set[str] = set()
    params: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            modules |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            params |= {arg.arg for arg in node.args.args}
    return modules, params


def _source_of(module: str) -> Path | None:
    base = REPO.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _reached_files(path: Path) -> list[Path]:
    """The test module at `path`, the tests/ modules it imports (transitively) and its folders' conftest.py."""
    conftests = [d / "conftest.py" for d in path.parents if TESTS in d.parents]
    todo = [path, *(c for c in conftests if c.is_file())]
    seen: list[Path] = []
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.append(f)
        modules, _ = _imports_and_fixtures(f)
        todo += [
            src for m in sorted(modules) if m.startswith("tests.") and (src := _source_of(m)) is not None
        ]
    return seen


def reach_of(path: Path) -> tuple[int, str]:
    """How much of the real system the test module at `path` brings up (rungs.REACH's levels), and
    what brings it up: the tests/support modules it imports, directly, through other tests modules
    or through the conftest.py files of its folders, and tests/conftest.py's `service` fixture."""
    level, why = 0, "nothing"
    for f in _reached_files(path):
        modules, params = _imports_and_fixtures(f)
        if f == path and "service" in params and level < 2:
            level, why = 2, "tests/conftest.py's service fixture"
        for m in sorted(modules):
            if BRINGS_UP.get(m, -1) > level:
                level, why = BRINGS_UP[m], f"{m} (through {f.name})"
    return level, why


def _rung_modules() -> list[tuple[Path, str]]:
    return [(p, r) for p in sorted(TESTS.rglob("test_*.py")) if (r := rung_of(p)) is not None]


def test_the_rungs_stand_in_the_order_of_what_they_bring_up():
    assert set(REACH) == set(RUNGS)
    levels = [REACH[r] for r in RUNGS]
    assert levels == sorted(levels), "RUNGS is not in the order of REACH"


def test_what_each_rung_uses_of_the_rungs_above_is_what_rungs_says():
    """The order is by reach, not by use: rungs.USES_FROM_ABOVE names what a rung's tests use whose
    own rung stands above it (the engine rung: the client and the service), and is complete."""
    assert set(USES_FROM_ABOVE) == set(RUNGS) and set(SUBJECT_OF.values()) <= set(RUNGS)
    used: dict[str, set[str]] = {r: set() for r in RUNGS}
    for path, rung in _rung_modules():
        for f in _reached_files(path):
            for m in _imports_and_fixtures(f)[0]:
                package = m.split(".")[1] if m.startswith("memfs.") else None
                if package in SUBJECT_OF and RUNGS.index(SUBJECT_OF[package]) > RUNGS.index(rung):
                    used[rung].add(package)
    assert {r: tuple(sorted(p)) for r, p in used.items()} == {
        r: tuple(sorted(p)) for r, p in USES_FROM_ABOVE.items()
    }
    assert {"client", "service"} <= set(USES_FROM_ABOVE["engine"])


def test_no_test_module_brings_up_more_than_its_rung():
    over = []
    for path, rung in _rung_modules():
        level, why = reach_of(path)
        if level > REACH[rung]:
            over.append(f"{path.relative_to(REPO)} ({rung}, {REACH[rung]}) brings up {level}: {why}")
    assert over == [], "move these up the ladder, or bring up less:\n" + "\n".join(over)


def test_each_rung_brings_up_what_its_level_says():
    """A level no module of the rung reaches would make the order a claim about nothing."""
    reached = {r: 0 for r in RUNGS}
    for path, rung in _rung_modules():
        reached[rung] = max(reached[rung], reach_of(path)[0])
    assert reached == REACH


def test_the_reach_check_sees_a_sandbox_behind_a_support_module(tmp_path):
    module = tmp_path / "test_x.py"
    module.write_text("def test_a():\n    from tests.support.worker_world import WorkerWorld\n")
    level, why = reach_of(module)
    assert level == 4 and why == "tests.support.sandbox (through worker_world.py)", why
    module.write_text("def test_a(service):\n    pass\n")
    assert reach_of(module)[0] == 2


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
