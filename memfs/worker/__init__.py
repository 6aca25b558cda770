"""The official `anthropic` worker with memfs as the session's memory (SPEC §8; extra `memfs[worker]`).

    from anthropic import AsyncAnthropic
    from anthropic.lib.environments import EnvironmentWorker
    from memfs.worker import memfs_tools

    worker = EnvironmentWorker(AsyncAnthropic(), memory_sync_interval=None, tools=memfs_tools())
    await worker.handle_item()
"""

from memfs.worker.tools import MemfsSessionError, memfs_tools

__all__ = ["MemfsSessionError", "memfs_tools"]
