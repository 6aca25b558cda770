"""The ladder's rungs: a test's rung is the folder under tests/ it sits in, and its pytest marker
(registered in pyproject.toml) is that rung's name, so `pytest -m engine` runs the engine rung.
tests/conftest.py applies the marker and stops a run in which a test is on no rung or on two."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent

# Lowest first, by how much of the real system a rung's tests bring up (REACH): a rung is not a
# layer of memfs, and a rung's tests do not use only what the rungs below it test. The engine rung
# runs the service app and the store client in one process with the engine — the client and the
# service, whose own rungs stand above it and run them over real HTTP; the mount rung mounts the
# filesystem core with no service behind it. USES_FROM_ABOVE says what each rung uses of the rungs
# above; tests/test_rungs.py checks the order, that, and that no test module reaches past its rung.
RUNGS = ("rules", "engine", "client", "service", "mount", "session", "e2e", "stress")

# What each rung may bring up, as a level: 0 nothing (pure functions), 1 in process (the service app
# on httpx's ASGI transport, the client, the engine, the kernel-free filesystem), 2 a `memfs serve`
# process over real HTTP, 3 the kernel's FUSE, 4 the mount's daemon (`memfs mount` in a sandbox).
# e2e adds real tools, proxies and the workers, stress length and chance: no level says that.
REACH = {"rules": 0, "engine": 1, "client": 2, "service": 2, "mount": 3, "session": 4, "e2e": 4, "stress": 4}
# the tests/support modules that bring each level up; a test module reaches the highest of those it
# imports, directly, through another tests module or through its folder's conftest.py (and 2 when
# it takes tests/conftest.py's `service` fixture)
BRINGS_UP = {
    "tests.support.inprocess": 1,
    "tests.support.stores": 1,
    "tests.support.service": 2,
    "tests.support.mounts": 3,
    "tests.support.sandbox": 4,
}

# The rung that tests each memfs package as its own subject, over that package's real boundary.
SUBJECT_OF = {
    "sync": "engine",
    "client": "client",
    "service": "service",
    "relay": "service",
    "mount": "mount",
    "session": "session",
    "worker": "e2e",
}
# What each rung's tests use whose own rung stands above it: the memfs packages among SUBJECT_OF that
# the rung's test modules import, directly, through other tests modules or through their conftest.py
USES_FROM_ABOVE = {
    "rules": (
        "client",
        "relay",
        "service",
        "session",
        "sync",
    ),  # their pure functions (decisions, parsers, the schema list)
    "engine": ("client", "mount", "service", "session"),  # client, service app, filesystem core, wiring
    "client": ("mount", "service"),  # `memfs serve` (or its app in process), the mount's sync view
    "service": (),
    "mount": (),
    "session": ("worker",),  # the worker's link to the daemon and its SDK seams
    "e2e": (),
    "stress": (),
}

# the repository's own checks (imports, docs, this ladder) stay at the top of tests/: pure reads of
# the tree, on the pure rung; any other test module belongs in a rung's folder
TOP_LEVEL = {
    "test_layers.py": "rules",
    "test_docs.py": "rules",
    "test_rungs.py": "rules",
    "test_wire.py": "rules",
}


def rung_of(path: Path) -> str | None:
    """The rung of the test module at `path`, None when it sits on none."""
    try:
        parts = path.resolve().relative_to(TESTS).parts
    except ValueError:
        return None
    if len(parts) == 1:
        return TOP_LEVEL.get(parts[0])
    return parts[0] if parts[0] in RUNGS else None


def rung_problem(nodeid: str, marks: list[str]) -> str | None:
    """What is wrong with a test carrying these rung markers (None: exactly one, as it must)."""
    if len(marks) == 1:
        return None
    if not marks:
        return f"{nodeid}: on no rung (move it under tests/<rung>/: {', '.join(RUNGS)})"
    return f"{nodeid}: on several rungs ({', '.join(marks)})"
