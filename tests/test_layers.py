"""The directions of dependency between memfs's packages (docs/DESIGN.md, "Layers").

Every import statement counts, including those inside functions (a lazy import is still a
dependency). A module may import only what its layer is allowed to; anything else fails here with
the module, the line and the rule.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "memfs"

# package (or module) -> memfs packages/modules it must never import
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "memfs.limits": ("memfs.",),
    "memfs.protocol": ("memfs.",),
    "memfs.logging_setup": ("memfs.",),
    # the records mount/ and sync/ share: neutral ground (only the wire's names and modes below it)
    "memfs.records": (
        "memfs.mount",
        "memfs.sync",
        "memfs.session",
        "memfs.service",
        "memfs.worker",
        "memfs.client",
        "memfs.relay",
        "memfs.cli",
        "memfs.limits",
        "memfs.logging_setup",
    ),
    # the store client (its transport, listing, snapshot stream, errors): below every layer that uses it
    "memfs.client": (
        "memfs.mount",
        "memfs.sync",
        "memfs.session",
        "memfs.service",
        "memfs.worker",
        "memfs.relay",
        "memfs.cli",
    ),
    "memfs.client.egress": ("memfs.",),  # the standard library's reading of the environment, nothing else
    "memfs.client.errors": ("memfs.",),  # raised by the early download too, before anything is imported
    "memfs.client.work_secret": ("memfs.",),
    "memfs.sync": (
        "memfs.mount",
        "memfs.session",
        "memfs.service",
        "memfs.worker",
        "memfs.client",
        "memfs.relay",
    ),
    "memfs.mount": (
        "memfs.sync",
        "memfs.session",
        "memfs.service",
        "memfs.worker",
        "memfs.client",
        "memfs.relay",
    ),
    "memfs.service": (
        "memfs.mount",
        "memfs.sync",
        "memfs.session",
        "memfs.worker",
        "memfs.client",
        "memfs.relay",
    ),
    # the command line imports the session's commands, never the other way (no cli -> session -> cli)
    "memfs.session": ("memfs.service", "memfs.worker", "memfs.relay", "memfs.cli"),
    "memfs.worker": ("memfs.relay",),
    # the relay puts the service (its cache) and the store client (its poll) together: no filesystem,
    # no session; of the sync only the version feed's reading and the bounded fan-out
    "memfs.relay": ("memfs.mount", "memfs.session", "memfs.worker", "memfs.cli", "memfs.sync"),
}
# The exceptions to the rules above: what a layer may import of a package it must not import.
# The engine takes the store client through its `StoreApi` port (memfs/sync/ports.py), never the
# client itself: only the client's plain records, errors and the snapshot's sink, which import
# nothing of its transport.
ALLOWED: dict[str, tuple[str, ...]] = {
    "memfs.sync": ("memfs.client.records", "memfs.client.errors", "memfs.client.snapshot_stream"),
    "memfs.relay": ("memfs.sync.feed", "memfs.sync.bounded"),
    # --log-format's words, with the command line's other vocabularies (protocol imports nothing)
    "memfs.logging_setup": ("memfs.protocol",),
}
# The filesystem's core knows no kernel: only the adapter and the runner speak pyfuse3.
KERNEL_FREE = ("memfs.mount", "memfs.records", "memfs.sync", "memfs.session.offline", "memfs.relay")
KERNEL_SPEAKERS = ("memfs.mount.fuse_ops", "memfs.mount.runner", "memfs.mount.devmount")  # the exceptions


def module_name(path: Path, root: Path = PACKAGE) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, root: Path = PACKAGE) -> list[tuple[int, str]]:
    """(line, imported module) for every import in the file, at any depth."""
    tree = ast.parse(path.read_text(), filename=str(path))
    me = module_name(path, root)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = me.split(".")
                base = base[: len(base) - node.level + (1 if path.name == "__init__.py" else 0)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.append((node.lineno, mod))
            found += [(node.lineno, f"{mod}.{a.name}") for a in node.names]  # `from memfs import mount`
    return found


def _under(name: str, prefix: str) -> bool:
    return prefix.endswith(".") and name.startswith(prefix) or name == prefix or name.startswith(prefix + ".")


def violations(root: Path = PACKAGE) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        me = module_name(path, root)
        for owner, banned in FORBIDDEN.items():
            if not _under(me, owner):
                continue
            allowed = ALLOWED.get(owner, ())
            for line, mod in imports_of(path, root):
                if any(_under(mod, a) for a in allowed):
                    continue
                for b in banned:
                    if _under(mod, b) and not _under(mod, owner):
                        out.append(
                            f"{path.relative_to(root.parent)}:{line}: {me} imports {mod} ({owner} must not import {b})"
                        )
        if any(_under(me, k) for k in KERNEL_FREE) and not any(_under(me, k) for k in KERNEL_SPEAKERS):
            for line, mod in imports_of(path, root):
                if _under(mod, "pyfuse3"):
                    out.append(
                        f"{path.relative_to(root.parent)}:{line}: {me} imports pyfuse3 (kernel-free layer)"
                    )
    return sorted(set(out))


def test_dependencies_point_one_way():
    assert violations() == []


@pytest.mark.parametrize(
    "module, source",
    [
        ("sync/bad.py", "def f():\n    from memfs.mount.filesystem import Filesystem\n"),
        ("sync/bad.py", "from memfs import mount\n"),
        ("sync/bad.py", "from memfs.client import StoreClient\n"),
        ("sync/bad.py", "from memfs.client.api import StoreClient\n"),
        ("sync/bad.py", "def f():\n    from memfs.client import ApiError\n"),
        ("client/bad.py", "from memfs.sync.ports import StoreApi\n"),
        ("client/errors.py", "from memfs.limits import MAX_PATH\n"),
        ("mount/bad.py", "from memfs.sync.engine import SyncEngine\n"),
        ("service/bad.py", "import memfs.session.control\n"),
        ("mount/filesystem.py", "import pyfuse3\n"),
        ("mount/tree.py", "import pyfuse3\n"),
        ("limits.py", "from memfs.client import StoreClient\n"),
        ("records.py", "from memfs.mount.state import State\n"),
    ],
)
def test_the_check_catches_a_wrong_import(tmp_path, module, source):
    """The rules above are not vacuous: a copy of the package with one bad import fails them."""
    fake = _fake_package(tmp_path, {module: source})
    assert violations(fake), f"{module}: {source!r} was not caught"


def _fake_package(tmp_path: Path, files: dict[str, str]) -> Path:
    """A copy of the package that holds only `files` (path under memfs/: source)."""
    fake = tmp_path / "memfs"
    for module, source in files.items():
        target = fake / module
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source)
    (fake / "__init__.py").write_text("")
    return fake


def test_the_engine_may_import_the_stores_records_and_errors(tmp_path):
    """The exceptions are narrow: the engine names the `StoreApi` port's records and errors, which
    import nothing of the client's transport (and a copy that does only that passes)."""
    fake = tmp_path / "memfs"
    (fake / "sync").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "sync" / "ok.py").write_text(
        "from memfs.client.errors import ApiError, Unreachable\n"
        "from memfs.client.records import Listing\n"
        "from memfs.client.snapshot_stream import StreamedSnapshot\n"
    )
    assert violations(fake) == []


def test_the_client_packages_names_resolve():
    """memfs.client's public names are imported when first asked for (its __init__ says why):
    each one resolves to the object of the module that holds it, and nothing else is offered."""
    import importlib

    import memfs.client as client

    for name in client.__all__:
        assert getattr(client, name) is getattr(
            importlib.import_module(f"memfs.client.{client._HOMES[name]}"), name
        )
    with pytest.raises(AttributeError):
        client.batch_chunks  # noqa: B018 (its old home; memfs.batching now)


# ---- one store-API client -----------------------------------------------------------------------
# Every request memfs sends to a store service (the mount, the early download, the relay's
# upstream, the commands) goes through memfs/client and its one transport stack, httpx: HTTP spoken
# by hand or by another client stack lives nowhere else. A raw socket outside memfs/client is a
# unix socket to a daemon (control, standby, the worker's link), each importer named here.
HTTP_HOME = "memfs.client"
HTTP_STACKS = ("http.client", "httpcore", "h11", "h2", "urllib3", "requests", "aiohttp", "urllib.request")
UNIX_SOCKET_USERS = (
    "memfs.session._cpython",  # the control socket's `_socket`, for the per-call hook (session/control.py)
    "memfs.session.control",
    "memfs.session.standby",
    "memfs.worker.daemon_link",
)


def http_violations(root: Path = PACKAGE) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        me = module_name(path, root)
        if _under(me, HTTP_HOME):
            continue
        for line, mod in imports_of(path, root):
            where = f"{path.relative_to(root.parent)}:{line}: {me} imports {mod}"
            if any(_under(mod, stack) for stack in HTTP_STACKS):
                out.append(f"{where} (HTTP to a store service goes through {HTTP_HOME})")
            elif mod in ("socket", "_socket") and me not in UNIX_SOCKET_USERS:
                out.append(
                    f"{where} (a socket outside {HTTP_HOME}: a unix one is named in UNIX_SOCKET_USERS)"
                )
    return out


def test_http_is_spoken_only_by_the_store_client():
    assert http_violations() == []


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("session/early_fetch.py", "import http.client\n"),
        ("relay/upstream.py", "def f():\n    from http.client import HTTPConnection\n"),
        ("session/hook.py", "import socket\n"),
        ("service/x.py", "import urllib.request\n"),
    ],
)
def test_the_http_check_catches_a_client_of_its_own(tmp_path, module, source):
    # plain_get.py in its home (memfs/client): fine
    fake = _fake_package(
        tmp_path, {"client/plain_get.py": "import socket\nimport http.client\n", module: source}
    )
    assert {v.split(":")[0] for v in http_violations(fake)} == {f"memfs/{module}"}


# ---- the benchmark builds on public names only ------------------------------------------------
# scripts/bench (the `benchmarks` package) and the seeding it shares with the tests may use memfs
# and tests/support only through their public names: no `_private` import, no `obj._member` of
# anything but the module's own `self`, no subclass of a memfs class (what the old bench did to
# the SQLite backend). The official worker's two private names are anthropic's, listed here.
REPO = PACKAGE.parent
BENCH_FILES = ("benchmarks", "scripts/bench", "scripts/bench-compare", "tests/support/seed.py")
ANTHROPIC_PRIVATE = {"_last_sync", "_copy_client_with_bearer_auth", "_scoped_client", "_memories"}


def _bench_sources(root: Path) -> list[Path]:
    out: list[Path] = []
    for rel in BENCH_FILES:
        p = root / rel
        out += sorted(p.rglob("*.py")) if p.is_dir() else ([p] if p.exists() else [])
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def bench_violations(root: Path = REPO) -> list[str]:
    out = []
    for path in _bench_sources(root):
        tree = ast.parse(path.read_text(), filename=str(path))
        where = lambda node, path=path: f"{path.relative_to(root)}:{node.lineno}"  # noqa: E731
        ours: set[str] = set()  # names bound by imports from memfs or tests
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.split(".")[0] in ("memfs", "tests")
            ):
                for part in node.module.split("."):
                    if _private(part):
                        out.append(f"{where(node)}: imports from private module {node.module}")
                for a in node.names:
                    ours.add(a.asname or a.name)
                    if _private(a.name):
                        out.append(f"{where(node)}: imports private {node.module}.{a.name}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] in ("memfs", "tests") and any(map(_private, a.name.split("."))):
                        out.append(f"{where(node)}: imports private module {a.name}")
            elif (
                isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in ANTHROPIC_PRIVATE
            ):
                if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                    out.append(f"{where(node)}: uses another object's private member .{node.attr}")
        for node, name in _subclassed(tree, ours):
            out.append(f"{where(node)}: class {node.name} subclasses {name} from memfs/tests")
    return sorted(set(out))


def _subclassed(tree: ast.AST, ours: set[str]) -> list[tuple[ast.ClassDef, str]]:
    """Each class of `tree` with a base named in `ours`, and that base's name."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                name = (
                    base.id
                    if isinstance(base, ast.Name)
                    else base.attr
                    if isinstance(base, ast.Attribute)
                    else ""
                )
                if name in ours:
                    found.append((node, name))
    return found


def test_the_bench_uses_only_public_names():
    assert (REPO / "benchmarks" / "main.py").exists()
    assert bench_violations() == []


@pytest.mark.parametrize(
    "source",
    [
        "from memfs.service.sqlite_backend import SqliteBackend\nclass S(SqliteBackend):\n    pass\n",
        "def f(backend):\n    with backend._conn() as c:\n        return c\n",
        "from memfs.service.sqlite_backend import _HeldRead\n",
        "import memfs.service._private\n",
    ],
)
def test_the_bench_check_catches_a_private_use(tmp_path, source):
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "bad.py").write_text(source)
    assert bench_violations(tmp_path), f"{source!r} was not caught"


def test_the_measurement_tools_are_under_the_rule(tmp_path):
    """The hand-run measurement tools live in benchmarks/measure/, where the check above reads
    them (one of them used to import the worker's private `_call_blocking` and a test's conftest
    from scripts/); scripts/ keeps only the Python that scripts/run uses."""
    tools = sorted((REPO / "benchmarks" / "measure").glob("*.py"))
    assert {p.stem for p in tools} >= {
        "console_perf",
        "counter_rate",
        "read_ab",
        "worker_sync_latency",
        "write_rate",
    }
    assert set(tools) <= set(_bench_sources(REPO))
    assert [p.name for p in sorted((REPO / "scripts").glob("*.py"))] == ["demo_seed.py"]
    (tmp_path / "benchmarks" / "measure").mkdir(parents=True)
    (tmp_path / "benchmarks" / "measure" / "bad.py").write_text(
        "from memfs.worker.daemon_link import _call_blocking\n"
    )
    assert bench_violations(tmp_path)


MAX_MODULE_LINES = 800  # docs/DESIGN.md, "Layers": past this a module holds several jobs


def oversized_modules(package: Path = PACKAGE) -> list[str]:
    """The modules under `package` over MAX_MODULE_LINES lines, each with its count."""
    out = []
    for path in sorted(package.rglob("*.py")):
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            out.append(f"{path.relative_to(package)}: {lines} lines")
    return out


def test_no_module_is_over_800_lines():
    assert oversized_modules() == []


def test_the_size_check_catches_a_long_module(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    assert oversized_modules(tmp_path) == [f"sub/long.py: {MAX_MODULE_LINES + 1} lines"]


# The sync engine's shape (docs/DESIGN.md, "Sync plan"): engine.py orchestrates only,
# one store's pull and the live watch are collaborators it owns, not mixins writing its fields, and
# what the session tells the engine once is one frozen record (memfs/sync/options.py).
SYNC = PACKAGE / "sync"
MAX_ENGINE_LINES = 500
MAX_INIT_PARAMS = 6  # besides self: past it, group the options into a frozen dataclass


def _sync_classes(package: Path) -> dict[str, ast.ClassDef]:
    return {
        node.name: node
        for path in sorted(package.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
    }


def _base_name(base: ast.expr) -> str:
    if isinstance(base, ast.Subscript):
        base = base.value
    return base.attr if isinstance(base, ast.Attribute) else base.id if isinstance(base, ast.Name) else ""


def _shares_no_state(cls: ast.ClassDef) -> bool:
    """A Protocol, a dataclass or an exception: a base whose fields a subclass may use."""
    decorators = {_base_name(d.func if isinstance(d, ast.Call) else d) for d in cls.decorator_list}
    bases = {_base_name(b) for b in cls.bases}
    return "dataclass" in decorators or bool(bases & {"Protocol", "Exception", "NamedTuple", "TypedDict"})


def sync_mixins(package: Path = SYNC) -> list[str]:
    """Classes of `package` that inherit from another of its classes that is not a Protocol, a
    dataclass or an exception: a mixin sharing state (LiveMode once wrote SyncEngine's fields)."""
    classes = _sync_classes(package)
    return sorted(
        f"{cls.name}({name})"
        for cls in classes.values()
        for name in map(_base_name, cls.bases)
        if name in classes and not _shares_no_state(classes[name])
    )


def wide_constructors(package: Path = SYNC) -> list[str]:
    """`__init__`s of `package` with more than MAX_INIT_PARAMS parameters besides self."""
    out = []
    for path in sorted(package.rglob("*.py")):
        for cls in ast.walk(ast.parse(path.read_text())):
            if not isinstance(cls, ast.ClassDef):
                continue
            for f in cls.body:
                if isinstance(f, ast.FunctionDef) and f.name == "__init__":
                    a = f.args
                    n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) - 1
                    n += bool(a.vararg) + bool(a.kwarg)
                    if n > MAX_INIT_PARAMS:
                        out.append(f"{path.relative_to(package)}: {cls.name}.__init__ takes {n}")
    return out


def test_the_engine_module_orchestrates_only():
    lines = len((SYNC / "engine.py").read_text().splitlines())
    assert lines <= MAX_ENGINE_LINES, f"memfs/sync/engine.py: {lines} lines"


def test_no_mixin_in_the_sync():
    assert sync_mixins() == []


def test_no_wide_constructor_in_the_sync():
    assert wide_constructors() == []


def test_the_shape_checks_catch_a_mixin_and_a_wide_constructor(tmp_path):
    (tmp_path / "live.py").write_text("class Live:\n    x: int\n")
    (tmp_path / "ports.py").write_text("class View(Protocol):\n    pass\n")
    (tmp_path / "report.py").write_text("@dataclass\nclass Report:\n    ok: bool\n")
    (tmp_path / "engine.py").write_text(
        "class Engine(Live, View):\n"
        "    def __init__(self, a, b, c, d, *, e, f, g):\n        pass\n"
        "class Fine(Report, View):\n"
        "    def __init__(self, a, b, c, d, *, e, f):\n        pass\n"
    )
    assert sync_mixins(tmp_path) == ["Engine(Live)"]
    assert wide_constructors(tmp_path) == ["engine.py: Engine.__init__ takes 7"]
