"""End-to-end fixtures: a real `memfs serve`, stores seeded through its API, real mounts, and the
worker's world (the fake platform, the real SDK). They live in tests/support, which the session
suite shares."""

from tests.support.sandbox import api, mounted, world  # noqa: F401
from tests.support.worker_world import spy, ts_package, via, worker, wworld  # noqa: F401  (fixture re-exports)
