"""The official `anthropic` worker with memfs as the session's memory (docs/SEMANTICS.md#d-worker; extra `memfs[worker]`).

from anthropic import AsyncAnthropic
from anthropic.lib.environments import EnvironmentWorker
from memfs.worker import memfs_tools

worker = EnvironmentWorker(AsyncAnthropic(), memory_sync_interval=None, tools=memfs_tools())
await worker.handle_item()
"""

from __future__ import annotations

from typing import Any

__all__ = ["MemfsSessionError", "memfs_tools"]


def __getattr__(name: str) -> Any:
    # Lazy: `memfs worker --help` and the rest of the CLI must work without the extra installed.
    if name in __all__:
        from memfs.worker import tools

        return getattr(tools, name)
    raise AttributeError(name)
