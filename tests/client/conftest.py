"""The client rung's in-process services (tests/support/inprocess.py); its other tests bring up a
`memfs serve` (tests/conftest.py) or the HTTP stub (tests/support/http_stub.py) themselves."""

from tests.support.inprocess import emulator, hosted  # noqa: F401  (fixture re-exports)
