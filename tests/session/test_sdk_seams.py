"""The seams memfs.worker relies on in the `anthropic` package. Each test fails loudly, naming the
seam, when a new SDK changes it (memfs/worker/_sdk.py holds every such name)."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import anyio
import pytest

from memfs.worker import _sdk


def _minor(version: str) -> tuple[int, int]:
    major, minor = (int(x) for x in version.split(".")[:2])
    return major, minor


def test_the_installed_sdk_is_one_the_seams_were_checked_on():
    """scripts/test runs these tests on the newest (the test extra) and on the oldest (a venv of its own);
    scripts/sdk-check on the newest release, which may be newer than the range read: then this test
    says so (xfail) and the others say what moved."""
    import anthropic

    assert _sdk.SDK_VERSIONS_CHECKED == ("2.10.0", "2.17.0")
    oldest, newest = (_minor(v) for v in _sdk.SDK_VERSIONS_CHECKED)
    found = _minor(anthropic.__version__)
    assert oldest <= found, f"memfs[worker] needs anthropic >= {_sdk.SDK_VERSIONS_CHECKED[0]}"
    if found > newest:
        pytest.xfail(
            f"anthropic {anthropic.__version__} is newer than the releases memfs.worker's seams were read "
            f"on ({' and '.join(_sdk.SDK_VERSIONS_CHECKED)}): if every other seam test passes, read its "
            "worker's changes and add it to memfs/worker/_sdk.py's SDK_VERSIONS_CHECKED"
        )


def test_the_extras_pin_the_checked_range():
    """The worker extra: the oldest read up to the next major; the test extra: exactly the newest read."""
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]
    oldest, newest = (_minor(v) for v in _sdk.SDK_VERSIONS_CHECKED)
    want = f"anthropic>={oldest[0]}.{oldest[1]},<{newest[0] + 1}"
    assert project["optional-dependencies"]["worker"] == [want]
    assert f"anthropic=={_sdk.SDK_VERSIONS_CHECKED[1]}" in project["optional-dependencies"]["test"]


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


def _has_write_hook() -> bool:
    return "_write_memory_file" in {f.name for f in dataclasses.fields(_sdk.AgentToolContext)}


def test_the_write_hook_declines_every_path_when_the_workers_memory_is_off(tmp_path):
    """anthropic 2.17: `write`/`edit` offer a memory file to `AgentToolContext._write_memory_file`
    (the worker's `SessionMemoryStores.write_file`) before writing it. With memfs the worker's own
    memory is off: nothing is downloaded, so the hook finds no store and declines (False)."""
    import anthropic

    if not _has_write_hook():
        assert _minor(anthropic.__version__) < (2, 17), "2.17's AgentToolContext._write_memory_file is gone"
        return
    from anthropic.lib.environments import _worker
    from anthropic.lib.tools import _memories, agent_toolset

    assert _sdk.AgentToolContext(workdir=tmp_path)._write_memory_file is None
    run_tools = inspect.getsource(_worker.WorkItemRun._run_tools)
    assert "_write_memory_file = partial(self._memory.write_file" in run_tools, (
        "the worker no longer sets the write hook to SessionMemoryStores.write_file"
    )
    download = inspect.getsource(_worker.WorkItemRun._download_memory)
    assert "if self._worker._memory_sync_interval is None:\n            return" in download, (
        "the worker now downloads memory with memory_sync_interval=None"
    )
    write_text = inspect.getsource(agent_toolset._write_text)
    assert "not await ctx._write_memory_file(target, text, replacing)" in write_text and (
        "write_text_exact(target, text)" in write_text
    ), "the file tools no longer write the file themselves when the hook declines"
    stores = _memories.SessionMemoryStores(anthropic.AsyncAnthropic(api_key="k"), workdir=tmp_path)
    lock = anyio.Lock()

    async def main():
        return await stores.write_file(tmp_path / "mnt" / "notes.md", "text", None, lock=lock)

    assert anyio.run(main) is False
    assert not (tmp_path / "mnt").exists()


def test_memfs_takes_its_folders_out_of_the_write_hook(tmp_path):
    """keep_memory_writes_in_mount: a path in a store folder is declined without asking the SDK's hook;
    any other path still goes to it. Before 2.17 there is no hook and nothing to change."""
    ctx = _sdk.AgentToolContext(workdir=tmp_path)
    store = tmp_path / "mnt" / "notes"
    store.mkdir(parents=True)
    if not _has_write_hook():
        assert _sdk.keep_memory_writes_in_mount(ctx, [store]) is False
        assert not hasattr(ctx, "_write_memory_file")
        return
    asked: list[Path] = []

    async def sdk_hook(path: Path, text: str, replacing: str | None) -> bool:
        asked.append(path)
        return True

    ctx._write_memory_file = sdk_hook
    assert _sdk.keep_memory_writes_in_mount(ctx, [store]) is True

    async def main():
        hook = ctx._write_memory_file
        return (
            await hook(store.resolve() / "a.md", "x", None),
            await hook(tmp_path / "elsewhere.md", "x", None),
        )

    assert anyio.run(main) == (False, True)
    assert asked == [tmp_path / "elsewhere.md"]


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
