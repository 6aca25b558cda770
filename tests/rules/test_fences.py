"""Workarounds on libraries' internals are fenced: each private name memfs takes from a library sits
in the one module named for that library, which says the version it was checked on, and a test
fails, naming what moved, when it moves. Everywhere else memfs uses public names only.

The fences (each module's docstring says what it takes and why it earns it):
- memfs/worker/_sdk.py: `anthropic`, public and private (tests/session/test_sdk_seams.py);
- memfs/session/_cpython.py: CPython's C modules `_json`, `_socket`, `_sha2`/`_sha256`, for the
  per-call hook's start (this file, below);
- memfs/session/_trio.py: `ctypes.util.find_library` replaced while trio imports
  (tests/session/test_start_path.py);
- memfs/service/_uvicorn.py: uvicorn's internal `HttpToolsProtocol` subclassed, uvicorn pinned to
  a minor in pyproject.toml (tests/service/test_uvicorn_internals.py).

What the scan below finds in any other module of memfs/: an import of a private module or name of
another package (`import _json`, `from x._y import z`, `from x import _y`), any import of
`anthropic`, an attribute `_y` read on a name another package's import bound, and an assignment to
an attribute of another package's module (a monkeypatch).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from memfs.session import _cpython

pytestmark = pytest.mark.timeout(60)

PACKAGE = Path(__file__).resolve().parents[2] / "memfs"
# fence module -> the top-level packages whose internals it alone may touch
FENCES = {
    "worker/_sdk.py": {"anthropic"},
    "session/_cpython.py": {"_json", "_socket", "_sha2", "_sha256"},
    "session/_trio.py": {"ctypes"},
    "service/_uvicorn.py": {"uvicorn"},
}
ONLY_IN_FENCE = {"anthropic"}  # even its public names come through the fence
# underscored but not private: documented (os._exit), or a type only in annotations, never run
# (`from __future__ import annotations`: the type `add_subparsers()` returns, as typeshed names it)
NOT_PRIVATE = {("os", "_exit"), ("argparse", "_SubParsersAction")}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _foreign(module: str | None) -> bool:
    return bool(module) and module.split(".")[0] != "memfs"  # type: ignore[union-attr]


def _imports(tree: ast.AST) -> list[tuple[ast.stmt, str, str, list[str], list[str]]]:
    """Each import of another package: (node, its top-level package, the module, the names it
    takes from the module, the names it binds here)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [
                (node, a.name.split(".")[0], a.name, [], [a.asname or a.name.split(".")[0]])
                for a in node.names
            ]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            taken = [a.name for a in node.names]
            bound = [a.asname or a.name for a in node.names]
            out.append((node, node.module.split(".")[0], node.module, taken, bound))
    return [i for i in out if _foreign(i[2])]


def fence_violations(source: str, rel: str) -> list[str]:
    """What module `rel` (a path under memfs/) takes from other packages' internals, outside its fence."""
    allowed = FENCES.get(rel, set())
    tree = ast.parse(source)
    found: list[tuple[ast.AST, str, str]] = []
    foreign: dict[str, str] = {}  # a name bound by another package's import -> that package
    for node, top, module, taken, bound in _imports(tree):
        foreign.update(dict.fromkeys(bound, top))
        verb = "imports" if isinstance(node, ast.Import) else "imports from"
        if any(map(_private, module.split("."))):
            found.append((node, top, f"{verb} the private module {module}"))
        elif top in ONLY_IN_FENCE:
            found.append((node, top, f"{verb} {module} (only its fence may)"))
        found += [(node, top, f"imports the private name {module}.{n}") for n in taken if _private(n)]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in foreign:
                found += _attribute_use(node, root.id, foreign[root.id])
    return [f"memfs/{rel}:{getattr(n, 'lineno', 0)}: {what}" for n, top, what in found if top not in allowed]


def _attribute_use(node: ast.Attribute, name: str, top: str) -> list[tuple[ast.AST, str, str]]:
    if _private(node.attr) and (name, node.attr) not in NOT_PRIVATE:
        return [(node, top, f"reads the private attribute .{node.attr} of {name}")]
    if isinstance(node.ctx, ast.Store):
        return [(node, top, f"assigns {ast.unparse(node)} (a monkeypatch of {top})")]
    return []


def test_no_module_outside_a_fence_takes_a_librarys_private_name():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        found += fence_violations(path.read_text(), rel)
    assert found == [], "move these into their library's fence module (this file's docstring):\n" + "\n".join(
        found
    )


def test_every_fence_exists():
    assert [f for f in FENCES if not (PACKAGE / f).is_file()] == []


def test_the_scan_finds_each_kind_of_workaround():
    cases = {
        "import _json\n": "private module _json",
        "from _json import make_scanner\n": "private module _json",
        "from anthropic.lib.tools._beta_functions import x\n": "private module anthropic.lib",
        "from starlette import _utils\n": "private name starlette._utils",
        "import anthropic\n": "only its fence may",
        "from anthropic import AsyncAnthropic\n": "only its fence may",
        "import ctypes.util\nctypes.util.find_library = len\n": "monkeypatch of ctypes",
        "import httpx\nhttpx.AsyncClient._transport\n": "private attribute ._transport",
        "from starlette.requests import Request\nRequest._receive\n": "private attribute ._receive",
    }
    for source, expected in cases.items():
        got = fence_violations(source, "somewhere/else.py")
        assert len(got) == 1 and expected in got[0], (source, got)
    # in their fences, and memfs's own private names anywhere, they are fine
    assert fence_violations("import _json\nimport _socket\n", "session/_cpython.py") == []
    assert fence_violations("import ctypes.util\nctypes.util.find_library = len\n", "session/_trio.py") == []
    assert (
        fence_violations("from memfs.session._cpython import loads\nfrom memfs import x\nx._y\n", "a.py")
        == []
    )


# -- the CPython fence (memfs/session/_cpython.py) ------------------------------------------------------


def test_the_running_cpython_is_one_the_c_module_fence_was_checked_on():
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert sys.implementation.name == "cpython"
    assert running in _cpython.CPYTHON_VERSIONS_CHECKED, (
        f"CPython {running} is not one memfs/session/_cpython.py was checked on "
        f"({', '.join(_cpython.CPYTHON_VERSIONS_CHECKED)}): if every test of "
        "tests/session/test_hook_start.py and this file passes, read the new `_json`, `_socket` "
        "and `_sha2` and add it to CPYTHON_VERSIONS_CHECKED"
    )


def test_the_c_modules_still_offer_what_the_fence_takes():
    import importlib

    moved = []
    json_c = importlib.import_module("_json")
    moved += [
        f"_json.{n} is gone" for n in ("make_scanner", "encode_basestring_ascii") if not hasattr(json_c, n)
    ]
    sock = importlib.import_module("_socket")
    moved += [
        f"_socket.{n} is gone"
        for n in ("socket", "AF_UNIX", "SOCK_STREAM", "SOL_SOCKET", "SO_PEERCRED")
        if not hasattr(sock, n)
    ]
    sha = "_sha2" if sys.version_info >= (3, 12) else "_sha256"
    if not hasattr(importlib.import_module(sha), "sha256"):
        moved.append(f"{sha}.sha256 is gone")
    assert not moved, "CPython's C modules moved (memfs/session/_cpython.py takes them):\n" + "\n".join(moved)
    # and the fast paths are the ones taken (a fallback would be right, but slow: the point is lost)
    assert _cpython.loads('{"a": [1, "b"]}') == {"a": [1, "b"]}
    assert _cpython._scan not in (None, False), "loads fell back to the json module"
    assert _cpython.sha256_hex(b"") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
