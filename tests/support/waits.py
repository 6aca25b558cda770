"""Waiting in a test for something a real process does in its own time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(pred: Callable[[], T], timeout: float = 30.0, interval: float = 0.1) -> T:
    """`pred()` once it is truthy, polled every `interval`; after `timeout`, its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(interval)
    return pred()
