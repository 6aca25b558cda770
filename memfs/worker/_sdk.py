"""Every name memfs takes from the `anthropic` package, public and private, in one place.

Checked on anthropic 2.10.0 and 2.17.0 (SDK_VERSIONS_CHECKED); memfs[worker] allows every 2.x from
2.10, and scripts/sdk-check runs the seam tests on the newest release the day it lands.
memfs.worker rides the official worker's public `tools=` factory. What it needs that has no public
name is here and nowhere else, and tests/session/test_sdk_seams.py fails loudly when a new SDK moves
it:

- `aclose_runnable_tool`: the runner's own cleanup of one tool (its `close`/`aclose` hook and,
  for a tool written as a context manager such as `bash`, its `__aexit__`). A wrapping tool must
  hand its wrapped tool exactly that cleanup, or `bash` would outlive the session.
- `http_client_of`: the HTTP client a client sends through (`AsyncAnthropic._client`). Sub-clients
  made for the worker share it, so a response hook on it sees the lease heartbeats of the item,
  which is how the final sync learns that the lease was lost and must not push (lease.py).
- `LEASE_RULES`: how the installed SDK judges its heartbeats, which lease.py mirrors. 2.10 (the
  lease inside `_worker.py`): only a 412 is a lost lease, and 90 s are assumed before the first
  answer gives the TTL. 2.16 (`lib/environments/_lease.py`): any heartbeat answer its retry policy
  calls fatal (a 4xx but 408, 409, 429) is a lost lease, 300 s (`CLAIM_TIMEOUT`) before the first
  answer, and "lease lost" is logged by that module's logger. 2.17: unchanged.
- `keep_memory_writes_in_mount`: 2.17's `write`/`edit` hand a memory file to a private hook on the
  tool context first (`AgentToolContext._write_memory_file`, which the worker sets to its
  `SessionMemoryStores.write_file`: save to the store, then write the file). With memfs as the
  memory the worker's own memory is off (`memory_sync_interval=None`), so that hook finds no store
  and declines every path; memfs still takes its folders out of it, so the SDK never writes a memory
  file to the store behind the mount's back (the mount would then upload the same change again, on a
  base the store no longer has).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import anthropic
from anthropic import AsyncAnthropic
from anthropic.lib.environments import EnvironmentWorker
from anthropic.lib.tools import BetaAsyncBuiltinFunctionTool, ToolError
from anthropic.lib.tools._beta_functions import aclose_runnable_tool  # private: see above
from anthropic.lib.tools.agent_toolset import AgentToolContext, beta_agent_toolset_20260401, resolve_path

__all__ = [
    "AgentToolContext",
    "LEASE_RULES",
    "SDK_VERSIONS_CHECKED",
    "AsyncAnthropic",
    "BetaAsyncBuiltinFunctionTool",
    "EnvironmentWorker",
    "ToolError",
    "aclose_runnable_tool",
    "beta_agent_toolset_20260401",
    "http_client_of",
    "keep_memory_writes_in_mount",
    "resolve_path",
]

# The releases whose worker this module was read against (the oldest and the newest of the range).
SDK_VERSIONS_CHECKED = ("2.10.0", "2.17.0")


class LeaseRules(NamedTuple):
    ttl_before_first_answer: float  # seconds a lease is assumed to last until a heartbeat says
    lost_on_any_fatal_4xx: bool  # False: only a 412 (the precondition) is a lost lease
    logger: str  # the logger that reports a lost lease


def _lease_rules() -> LeaseRules:
    if importlib.util.find_spec("anthropic.lib.environments._lease") is None:  # 2.10: no lease module
        return LeaseRules(90.0, False, "anthropic.lib.environments._worker")
    from anthropic.lib.environments import _lease  # private: see above

    return LeaseRules(float(_lease.CLAIM_TIMEOUT), True, _lease.log.name)


LEASE_RULES = _lease_rules()
SDK_VERSION = anthropic.__version__


def http_client_of(client: Any) -> Any | None:
    """The HTTP client under an AsyncAnthropic (private attribute `_client`), or None.

    anthropic 2.10 sends through `httpx2` (an httpx fork) and accepts an httpx client too, so
    this is duck-typed: anything with httpx's `event_hooks`.
    """
    http = getattr(client, "_client", None)
    return http if http is not None and hasattr(http, "event_hooks") else None


def keep_memory_writes_in_mount(ctx: Any, store_dirs: Sequence[Path]) -> bool:
    """Make the file tools write a file under `store_dirs` themselves (into the mount), never through
    the worker's memory-file hook (anthropic >= 2.17); other paths still go to the hook the worker set.

    False when the installed SDK has no such hook (before 2.17): its tools always write the file.
    """
    if not hasattr(ctx, "_write_memory_file"):
        return False
    sdk_hook = ctx._write_memory_file  # private: see above
    dirs = [Path(d).resolve() for d in store_dirs]

    async def write_memory_file(path: Path, text: str, replacing: str | None) -> bool:
        if any(path.is_relative_to(d) for d in dirs):
            return False  # not the SDK's memory: the tool writes the file, and the mount syncs it
        return bool(sdk_hook is not None and await sdk_hook(path, text, replacing))

    ctx._write_memory_file = write_memory_file
    return True
