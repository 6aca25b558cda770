"""The engine rung's fixtures (tests/support/inprocess.py): the in-process services (`svc`, `hosted`,
`emulator`) and an `EngineWorld` of engine mounts over `svc`, each closed after its test."""

from tests.support.inprocess import changes_fetched, emulator, hosted, svc, world  # noqa: F401  (fixture re-exports)
