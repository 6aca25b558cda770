"""The session suite's fixtures: a daemon needs a real `memfs serve` and a real mount to have a life,
so these are the end-to-end suite's worlds (tests/support), re-exported."""

from tests.support.sandbox import api, mounted, world  # noqa: F401
from tests.support.worker_world import spy, via, wworld  # noqa: F401  (fixture re-exports)
