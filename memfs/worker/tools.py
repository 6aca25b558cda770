"""`memfs_tools()`: the official worker's toolset, with memfs as the session's memory (docs/SEMANTICS.md#d-worker).

Per session (the factory is called once per claimed session, with its `AgentToolContext`):
1. the stores mounted at the root must be exactly the session's memory stores (same ids, folders
   and access), else the work item fails with a message that says what differs and what to do;
2. their folders go on the file tools' `allowed_roots`, the read_only ones on `read_only_roots`,
   and out of the worker's memory-file hook (anthropic >= 2.17: `write`/`edit` write them into the
   mount themselves, and the mount syncs them; _sdk.keep_memory_writes_in_mount);
3. every tool call first asks the daemon for a non-forced sync (a tick runs only when one is due;
   otherwise the answer is one small round trip on a held socket connection, daemon_link.py), so
   remote edits are seen between calls;
4. a `write` or `edit` whose result would not fit in a memory is refused before the file is touched
   (the official tools truncate first and only then meet EFBIG);
5. a `write` or `edit` of a memory file in a read_write store is pushed before the tool returns
   (SEMANTICS.md#d-merge, "told in band"): merged with a newer version → the result says so; the
   same lines changed by another writer → the tool fails, the store's version in the file and the
   agent's in a conflict copy the message names; the store unreachable → the result says the change
   is staged. One write request when nothing else changed, what the stock 2.17 worker spends;
6. when the runner closes the tools (after `bash` is stopped, before the work item is stopped) the
   last close runs the final sync: forced, waiting for uploads, bounded by 30 s — unless the lease
   was lost, when another worker owns the session's memory now.
"""

from __future__ import annotations

import inspect
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio

from memfs import limits
from memfs.session import control
from memfs.worker import lease
from memfs.worker._sdk import (
    AgentToolContext,
    BetaAsyncBuiltinFunctionTool,
    ToolError,
    aclose_runnable_tool,
    beta_agent_toolset_20260401,
    keep_memory_writes_in_mount,
    resolve_path,
)
from memfs.worker.daemon_link import PRE_CALL_TIMEOUT, DaemonLink, DaemonUnavailable

log = logging.getLogger("memfs.worker")

DEFAULT_ROOT = "/mnt/memory"
FINAL_SYNC_TIMEOUT = limits.FLUSH_TIMEOUT

Tools = Sequence[Any]
ToolsFactory = Callable[[AgentToolContext], Tools]


class MemfsSessionError(RuntimeError):
    """The mount does not hold this session's memory stores: the work item must not run."""


def memfs_tools(
    root: str | os.PathLike[str] = DEFAULT_ROOT, base: ToolsFactory | Tools | None = None
) -> ToolsFactory:
    """A `tools=` factory for `EnvironmentWorker(client, memory_sync_interval=None, tools=memfs_tools())`.

    `root` is where `memfs mount` mounted the session's stores; `base` is the toolset to wrap (a
    factory called with the session's context, or a list), by default the official
    `agent_toolset_20260401` tools.
    """
    root = os.fspath(root)

    def factory(ctx: AgentToolContext) -> list[Any]:
        memory = SessionMemory.attach(ctx, root)
        tools = (
            list(base(ctx) if callable(base) else base)
            if base is not None
            else beta_agent_toolset_20260401(ctx)
        )
        if memory is None:
            return tools
        return memory.wrap(tools)

    return factory


def _expected_stores(session: Any) -> dict[str, tuple[str, str]]:
    """store id -> (folder, access) as the platform attached them to the session."""
    out: dict[str, tuple[str, str]] = {}
    for r in getattr(session, "resources", None) or []:
        if getattr(r, "type", None) != "memory_store":
            continue
        mount_path = (getattr(r, "mount_path", None) or "").rstrip("/")
        out[r.memory_store_id] = (mount_path.rpartition("/")[2], getattr(r, "access", None) or "read_write")
    return out


def _describe(stores: dict[str, tuple[str, str]]) -> str:
    if not stores:
        return "none"
    return ", ".join(f"{sid} at {slug or '?'} ({access})" for sid, (slug, access) in sorted(stores.items()))


class SessionMemory:
    """The memfs side of one session: its stores, the daemon link, the tools it wrapped."""

    def __init__(
        self, ctx: AgentToolContext, root: str, link: DaemonLink, stores: dict[str, tuple[str, str]]
    ):
        self.ctx = ctx
        self.root = root
        self.link = link
        self.store_dirs = [Path(root) / slug for slug, _access in stores.values()]
        self.read_only_dirs = [Path(root) / slug for slug, access in stores.values() if access == "read_only"]
        self.session_id = getattr(ctx.session, "id", None)
        self.lease = lease.watch(ctx.client) if ctx.client is not None else None
        self._open = 0
        self._finished = False

    @classmethod
    def attach(cls, ctx: AgentToolContext, root: str) -> SessionMemory | None:
        """Check the mount against the session and put its stores on the tools' roots.

        None when the session has no memory stores and nothing is mounted (plain tools then).
        Blocking, once per session: the factory is synchronous.
        """
        expected = _expected_stores(ctx.session)
        link = DaemonLink(root)
        try:
            status = link.status()
        except DaemonUnavailable as exc:
            if not expected:
                return None
            raise MemfsSessionError(
                f"this session has memory stores attached ({_describe(expected)}) but no memfs mount answers "
                f"at {root}: {exc}. Mount them before the worker starts: memfs mount --root {root} "
                "(with ANTHROPIC_BASE_URL, ANTHROPIC_SESSION_ID and ANTHROPIC_WORK_SECRET of this work item)"
            ) from exc
        mounted = {s["store_id"]: (s["slug"], s["access"]) for s in status.get("stores", [])}
        if mounted != expected:
            raise MemfsSessionError(
                f"the memory stores mounted at {root} are not this session's: the session "
                f"{ctx.session and ctx.session.id} attaches {_describe(expected)}; the mount holds "
                f"{_describe(mounted)}. Mount this session's stores (memfs unmount --root {root}; then "
                f"memfs mount --root {root} --session-id <this session>) or give the worker the right root"
            )
        memory = cls(ctx, root, link, expected)
        ctx.allowed_roots = [*ctx.allowed_roots, *memory.store_dirs]
        ctx.read_only_roots = [*ctx.read_only_roots, *memory.read_only_dirs]
        keep_memory_writes_in_mount(ctx, memory.store_dirs)
        log.info("session %s: memory from memfs at %s (%s)", memory.session_id, root, _describe(expected))
        return memory

    def wrap(self, tools: Tools) -> list[Any]:
        wrapped = [MemfsTool(t, self) for t in tools]
        self._open = len(wrapped)
        return wrapped

    # -- before every call ----------------------------------------------------------------------
    async def before_call(self, name: str, input_: dict[str, Any]) -> None:
        started = time.perf_counter()
        try:
            answer = await self.link.async_sync(force=False, wait=False, timeout=PRE_CALL_TIMEOUT)
        except DaemonUnavailable as exc:
            # The tool still runs: it fails on its own I/O if the mount is gone, and says so.
            log.warning("pre-call sync before %s failed: %s", name, exc)
        else:
            if answer.get("ran") and not answer.get("ok"):
                log.warning("pre-call sync before %s: the tick failed: %s", name, answer.get("error"))
            log.debug(
                "pre-call sync before %s: %.2f ms (ran=%s)",
                name,
                (time.perf_counter() - started) * 1e3,
                answer.get("ran"),
            )
        if name == "write":
            await self._refuse_oversized_write(input_)
        elif name == "edit":
            await self._refuse_oversized_edit(input_)

    def _memory_file(self, file_path: object) -> Path | None:
        """The resolved target when it lies in one of the session's stores, else None."""
        if not isinstance(file_path, str):
            return None
        try:
            target = resolve_path(self.ctx, file_path)
        except ValueError:
            return None  # the tool itself refuses it, with its own message
        if any(target.is_relative_to(d.resolve()) for d in self.store_dirs):
            return target
        return None

    @staticmethod
    def _too_big(op: str, file_path: str, size: int, *, what: str) -> ToolError:
        return ToolError(
            f"{op}: {file_path}: {what} would be {size:,} bytes, but a memory file holds at most "
            f"{limits.MAX_CONTENT_BYTES:,} bytes of UTF-8 text. Nothing was written; the file keeps its "
            "current content. Split the content over several smaller files, or shorten it."
        )

    async def _refuse_oversized_write(self, input_: dict[str, Any]) -> None:
        file_path, content = input_.get("file_path"), input_.get("content")
        if not isinstance(content, str) or self._memory_file(file_path) is None:
            return
        size = len(content.encode("utf-8", "surrogatepass"))
        if size > limits.MAX_CONTENT_BYTES:
            raise self._too_big("write", str(file_path), size, what="the content")

    async def _refuse_oversized_edit(self, input_: dict[str, Any]) -> None:
        file_path = input_.get("file_path")
        old, new = input_.get("old_string"), input_.get("new_string")
        target = self._memory_file(file_path)
        if target is None or not isinstance(old, str) or not isinstance(new, str) or not old:
            return

        def current() -> str | None:
            try:
                if target.stat().st_size > limits.MAX_CONTENT_BYTES:
                    return None  # the edit tool's own size rule answers
                return target.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                return None  # the tool reports the error itself

        text = await anyio.to_thread.run_sync(current)
        if text is None:
            return
        count = text.count(old)
        if count == 0 or (count > 1 and not input_.get("replace_all")):
            return  # the tool refuses it with its own message
        updated = text.replace(old, new) if input_.get("replace_all") else text.replace(old, new, 1)
        size = len(updated.encode("utf-8", "surrogatepass"))
        if size > limits.MAX_CONTENT_BYTES:
            raise self._too_big("edit", str(file_path), size, what="the edited file")

    # -- after a write or an edit (SEMANTICS.md#d-merge) -------------------------------------------
    async def after_call(self, name: str, input_: dict[str, Any], result: Any) -> Any:
        """A `write`/`edit` of a memory file that went through: pushed now, and the agent told
        what became of it, in band."""
        if name not in ("write", "edit"):
            return result
        target = self._memory_file(input_.get("file_path"))
        if target is None or any(target.is_relative_to(d.resolve()) for d in self.read_only_dirs):
            return result
        shown = str(input_.get("file_path"))
        try:
            answer = await self.link.async_write_through(str(target))
        except DaemonUnavailable as exc:
            log.warning("write-through of %s failed: %s", target, exc)
            return _noted(
                result,
                f"memfs: {shown} is written here but was not pushed to the memory store "
                "now (the mount did not answer); it goes out with the next sync.",
            )
        kind = answer.get("result")
        if kind == "merged":
            return _noted(
                result,
                f"memfs: the memory store had a newer version of {shown}; your change was merged "
                "with it and the merge is on the store. Read the file again to see it whole.",
            )
        if kind == "conflict":
            copy = answer.get("copy")
            where = (
                f"yours is kept on the store beside it as {copy}"
                if copy
                else "yours is kept in the mount's state dir"
            )
            raise ToolError(
                f"{name}: {shown}: another writer changed the same lines of this memory file on the store "
                f"meanwhile. The file now holds the store's version; {where}. Read the file again before you retry."
            )
        if kind == "gone":
            raise ToolError(
                f"{name}: {shown}: the memory was deleted on the store meanwhile ({answer.get('details')}); "
                "your version is kept in the mount's state dir. Write the file again to create it anew."
            )
        if kind == "staged":
            return _noted(
                result,
                f"memfs: {shown} is written here but not on the memory store yet "
                f"({answer.get('error')}); it goes out with the next sync.",
            )
        return result

    # -- at the end -----------------------------------------------------------------------------
    async def tool_closed(self) -> None:
        """Called by each wrapped tool's close; the last one runs the final sync."""
        self._open -= 1
        if self._open > 0 or self._finished:
            return
        self._finished = True
        try:
            await self.final_sync()
        finally:
            await self.link.aclose()  # the held connection ends with the session

    async def final_sync(self) -> None:
        if self.lease is not None and self.lease.lost(os.environ.get("ANTHROPIC_WORK_ID")):
            log.warning(
                "session %s: the work item's lease was lost; no final sync, so this worker does not push "
                "over the worker that holds the session now. Staged changes stay in the mount's state dir "
                "(memfs status --root %s).",
                self.session_id,
                self.root,
            )
            return
        started = time.monotonic()
        try:
            with anyio.move_on_after(FINAL_SYNC_TIMEOUT + 5) as bound:
                answer = await self.link.async_sync(
                    force=True, wait=True, timeout=FINAL_SYNC_TIMEOUT, ping_timeout=control.PING_TIMEOUT
                )
                status = await self.link.async_status()
            if bound.cancelled_caught:
                raise DaemonUnavailable(f"no answer within {FINAL_SYNC_TIMEOUT + 5:g}s")
        except DaemonUnavailable as exc:
            log.error(
                "session %s: final sync failed: %s; `memfs unmount --root %s` retries it",
                self.session_id,
                exc,
                self.root,
            )
            return
        staged = sum(s.get("staged", 0) + s.get("refused", 0) for s in status.get("stores", []))
        took = time.monotonic() - started
        if answer.get("ok") and not staged:
            log.info(
                "session %s: final sync done in %.2fs; every change is on the store service",
                self.session_id,
                took,
            )
        else:
            log.warning(
                "session %s: final sync after %.2fs: %s; %d change(s) not on the store yet "
                "(`memfs unmount --root %s` retries them and keeps what it cannot upload)",
                self.session_id,
                took,
                answer.get("error") or "incomplete",
                staged,
                self.root,
            )


def _noted(result: Any, note: str) -> Any:
    """The tool's result with memfs's note after it (a string, or a list of content blocks)."""
    if isinstance(result, str):
        return f"{result}\n\n{note}"
    if isinstance(result, list):
        return [*result, {"type": "text", "text": note}]
    return result


class MemfsTool(BetaAsyncBuiltinFunctionTool):
    """One official tool, with the pre-call sync and the size guard in front of it."""

    def __init__(self, inner: Any, memory: SessionMemory):
        self.inner = inner
        self.memory = memory

    @property
    def name(self) -> str:
        return self.inner.name

    def to_dict(self) -> Any:
        return self.inner.to_dict()

    async def call(self, input: object) -> Any:  # noqa: A002 - the SDK's parameter name
        input_ = dict(input) if isinstance(input, dict) else {}
        await self.memory.before_call(self.name, input_)
        if inspect.iscoroutinefunction(self.inner.call):
            result = await self.inner.call(input)
        else:  # a synchronous tool: the runner would run it on a thread, so do the same
            result = await anyio.to_thread.run_sync(self.inner.call, input)
            result = await result if inspect.isawaitable(result) else result
        return await self.memory.after_call(self.name, input_, result)

    async def aclose(self) -> None:
        try:
            await aclose_runnable_tool(self.inner)
        finally:
            await self.memory.tool_closed()
