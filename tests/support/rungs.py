"""The ladder's rungs: a test's rung is the folder under tests/ it sits in, and its pytest marker
(registered in pyproject.toml) is that rung's name, so `pytest -m engine` runs the engine rung.
tests/conftest.py applies the marker and stops a run in which a test is on no rung or on two."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent

# lowest first: each rung uses the real parts of the rungs below it
RUNGS = ("rules", "engine", "client", "service", "mount", "session", "e2e", "stress")

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
