"""Every name memfs takes from the `anthropic` package, public and private, in one place.

memfs.worker rides the official worker's public `tools=` factory. Two things it needs have no
public name in anthropic 2.10; they are here and nowhere else, and tests/worker/test_sdk_seams.py
fails loudly when a new SDK moves them:

- `aclose_runnable_tool`: the runner's own cleanup of one tool (its `close`/`aclose` hook and,
  for a tool written as a context manager such as `bash`, its `__aexit__`). A wrapping tool must
  hand its wrapped tool exactly that cleanup, or `bash` would outlive the session.
- `http_client_of`: the HTTP client a client sends through (`AsyncAnthropic._client`). Sub-clients
  made for the worker share it, so a response hook on it sees the lease heartbeats of the item,
  which is how the final sync learns that the lease was lost and must not push (lease.py).
"""

from __future__ import annotations

from typing import Any

from anthropic import AsyncAnthropic
from anthropic.lib.tools import BetaAsyncBuiltinFunctionTool, ToolError
from anthropic.lib.tools._beta_functions import aclose_runnable_tool  # private: see above
from anthropic.lib.tools.agent_toolset import AgentToolContext, beta_agent_toolset_20260401, resolve_path

__all__ = [
    "AgentToolContext",
    "AsyncAnthropic",
    "BetaAsyncBuiltinFunctionTool",
    "ToolError",
    "aclose_runnable_tool",
    "beta_agent_toolset_20260401",
    "http_client_of",
    "resolve_path",
]


def http_client_of(client: Any) -> Any | None:
    """The HTTP client under an AsyncAnthropic (private attribute `_client`), or None.

    anthropic 2.10 sends through `httpx2` (an httpx fork) and accepts an httpx client too, so
    this is duck-typed: anything with httpx's `event_hooks`.
    """
    http = getattr(client, "_client", None)
    return http if http is not None and hasattr(http, "event_hooks") else None
