"""The seams memfs.worker relies on in the `anthropic` package. Each test fails loudly, naming the
seam, when a new SDK changes it (memfs/worker/_sdk.py holds every such name)."""

from __future__ import annotations

import inspect

import anyio
import pytest

from memfs.worker import _sdk


def _minor(version: str) -> tuple[int, int]:
    major, minor = (int(x) for x in version.split(".")[:2])
    return major, minor


def test_the_installed_sdk_is_one_the_seams_were_checked_on():
    """scripts/test runs these tests on the newest (the test extra) and on the oldest (a venv of its own)."""
    import anthropic

    assert _sdk.SDK_VERSIONS_CHECKED == ("2.10.0", "2.16.0")
    oldest, newest = (_minor(v) for v in _sdk.SDK_VERSIONS_CHECKED)
    assert oldest <= _minor(anthropic.__version__) <= newest, (
        f"memfs.worker's seams were checked on anthropic {' and '.join(_sdk.SDK_VERSIONS_CHECKED)}; "
        f"found {anthropic.__version__}: read its worker and update memfs/worker/_sdk.py"
    )


def test_the_extra_pins_the_checked_range():
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]
    oldest, newest = (_minor(v) for v in _sdk.SDK_VERSIONS_CHECKED)
    want = f"anthropic>={oldest[0]}.{oldest[1]},<{newest[0]}.{newest[1] + 1}"
    assert project["optional-dependencies"]["worker"] == [want]


def test_the_lease_rules_are_the_installed_sdks():
    """2.10: a 412 only, 90 s before the first answer, logged by _worker; 2.16: _lease.py's rules."""
    import anthropic

    rules = _sdk.LEASE_RULES
    if _minor(anthropic.__version__) < (2, 16):
        from anthropic.lib.environments import _worker

        assert rules == (90.0, False, "anthropic.lib.environments._worker")
        assert _worker._HEARTBEAT_TTL_DEFAULT == 90.0, "2.10's assumed lease TTL moved"
        loop = inspect.getsource(_worker._heartbeat_loop)
        assert "_is_status(e, 412)" in loop and "HEARTBEAT_REJECTED" in loop, "2.10's lease rule changed"
    else:
        from anthropic.lib.environments import _lease

        assert rules == (300.0, True, "anthropic.lib.environments._lease")
        extend = inspect.getsource(_lease.Lease._extend)
        assert "is_fatal_status_error(e)" in extend and 'self._end = "lost"' in extend, (
            "2.16's rule (a fatal 4xx heartbeat is a lost lease) changed"
        )
        from anthropic.lib._retry import is_fatal_status_error

        assert "_RETRYABLE_4XX" in inspect.getsource(is_fatal_status_error)
        from anthropic.lib import _retry

        assert frozenset({408, 409, 429}) == _retry._RETRYABLE_4XX


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
