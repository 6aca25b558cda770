"""The seams memfs.worker relies on in the `anthropic` package. Each test fails loudly, naming the
seam, when a new SDK changes it (memfs/worker/_sdk.py holds every such name)."""

from __future__ import annotations

import inspect

import anyio
import pytest

from memfs.worker import _sdk


def test_the_pinned_sdk_range_is_the_one_installed():
    import anthropic

    major, minor = (int(x) for x in anthropic.__version__.split(".")[:2])
    assert (major, minor) == (2, 10), (
        f"memfs[worker] is tested with anthropic 2.10.x, found {anthropic.__version__}"
    )


def test_environment_worker_takes_a_tools_factory_and_no_memory():
    from anthropic.lib.environments import EnvironmentWorker

    params = inspect.signature(EnvironmentWorker.__init__).parameters
    assert "tools" in params and "memory_sync_interval" in params, (
        "EnvironmentWorker lost tools=/memory_sync_interval="
    )
    handle = inspect.signature(EnvironmentWorker.handle_item).parameters
    assert {"work_id", "environment_id", "session_id", "work_secret"} <= set(handle)


def test_agent_tool_context_has_the_roots_session_and_client():
    names = set(inspect.signature(_sdk.AgentToolContext).parameters)
    assert {"allowed_roots", "read_only_roots", "session", "client", "workdir"} <= names


def test_aclose_runnable_tool_still_stops_bash(tmp_path):
    """The private cleanup a wrapper hands its wrapped tool: it must end bash's shell."""
    ctx = _sdk.AgentToolContext(workdir=tmp_path)
    bash = next(t for t in _sdk.beta_agent_toolset_20260401(ctx) if t.name == "bash")

    async def main():
        out = await bash.call({"command": "echo $$"})
        pid = int(out.strip())
        await _sdk.aclose_runnable_tool(bash)
        return pid

    pid = anyio.run(main)
    import os

    with pytest.raises(ProcessLookupError):
        for _ in range(100):
            os.kill(pid, 0)
            anyio.run(anyio.sleep, 0.02)


def test_the_client_has_an_http_client_with_event_hooks_shared_by_copies():
    from anthropic import AsyncAnthropic

    client = AsyncAnthropic(api_key="k", base_url="http://127.0.0.1:9")
    http = _sdk.http_client_of(client)
    assert http is not None, "AsyncAnthropic._client (the HTTP client) is gone"
    assert "response" in http.event_hooks
    copy = client.copy(auth_token="t")
    assert _sdk.http_client_of(copy) is http, "sub-clients no longer share the parent's HTTP client"


def test_the_runner_calls_a_tools_aclose_and_awaits_async_call():
    """Source-level check of the two runner behaviours the wrapper depends on."""
    from anthropic.lib.tools import _beta_session_runner, _tool_dispatch

    runner = inspect.getsource(_beta_session_runner.SessionToolRunner._run)
    assert "aclose_runnable_tool" in runner, "the session runner no longer closes its tools"
    dispatch = inspect.getsource(_tool_dispatch.run_runnable_tool)
    assert "tool.call(input)" in dispatch
