"""A faithful fake of the platform endpoints the official worker calls, with a scripted agent.

Endpoints (paths and shapes from anthropic 2.10's own resources and types):
- work: poll, ack, heartbeat (lease TTL, `expected_last_heartbeat` precondition, 412 when the lease
  is lost), stop;
- sessions: retrieve; events list (cursor page), stream (SSE, live events only), send.
Every body the fake answers is validated against the SDK's pydantic model for it before it is sent,
and the tests' client validates it again on receipt (`_strict_response_validation=True`): a shape
the SDK would not accept fails the test here instead of passing by leniency.

The scripted agent emits one `agent.tool_use` at a time, each followed by a `session.status_idle`
that requires action; when the worker posts the `user.tool_result`, the fake records it, goes
`session.status_running`, runs the step's hook (a remote edit, a lost lease), then emits the next
call. `sessions.retrieve` reports the newest status event's status, as the platform does. After the last result it ends
the turn and terminates the session.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pydantic
from anthropic.types.beta import BetaManagedAgentsSession
from anthropic.types.beta.environments import (
    BetaHeartbeatPreconditionFailedErrorDetails,
    BetaSelfHostedWork,
    BetaSelfHostedWorkHeartbeatResponse,
)
from anthropic.types.beta.sessions import (
    BetaManagedAgentsSendSessionEvents,
    BetaManagedAgentsSessionEvent,
    BetaManagedAgentsStreamSessionEvents,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

_session_event = pydantic.TypeAdapter(BetaManagedAgentsSessionEvent)
_stream_event = pydantic.TypeAdapter(BetaManagedAgentsStreamSessionEvents)
_ids = itertools.count(1)


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_id(prefix: str) -> str:
    return f"{prefix}_{next(_ids):06d}"


def work_secret(sessions_token: str) -> str:
    """A work secret as the platform issues it: url-safe base64 of JSON carrying sessions_token."""
    return (
        base64.urlsafe_b64encode(json.dumps({"sessions_token": sessions_token}).encode()).decode().rstrip("=")
    )


@dataclass
class Step:
    """One tool call of the script; `after` runs (in a thread) once its result has arrived."""

    name: str
    input: dict[str, Any]
    after: Callable[[dict[str, Any]], None] | None = None
    # A subagent's session thread: consecutive steps on threads are called all at once, each on its
    # own thread (anthropic 2.16 runs them concurrently up to max_concurrent_calls); the agent goes
    # on once every one of them has its result.
    thread: str | None = None


@dataclass
class Work:
    id: str
    environment_id: str
    session_id: str
    secret: str
    state: str = "queued"
    last_heartbeat: str = ""
    lost: bool = False
    acked: bool = False
    stop_requests: list[dict[str, Any]] = field(default_factory=list)

    def body(self) -> dict[str, Any]:
        d = {
            "type": "work",
            "id": self.id,
            "environment_id": self.environment_id,
            "created_at": now(),
            "data": {"type": "session", "id": self.session_id},
            "metadata": {},
            "state": self.state,
            "secret": self.secret,
            "latest_heartbeat_at": self.last_heartbeat or None,
        }
        return BetaSelfHostedWork.model_validate(d).model_dump(mode="json")


@dataclass
class Session:
    id: str
    environment_id: str
    resources: list[dict[str, Any]]
    script: list[Step]
    token: str
    terminate_at_end: bool = True
    events: list[dict[str, Any]] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)  # the user.tool_result events, in order
    result_times: list[float] = field(default_factory=list)
    started: bool = False
    step: int = 0
    outstanding: int = 0  # calls on threads still without a result

    def status(self) -> str:
        """The status the platform reports: the newest session status event's (anthropic 2.16's runner
        stops after max_idle only once `sessions.retrieve` says idle). Before any, the session is
        running: the platform queues a session's work when it has something to do."""
        for ev in reversed(self.events):
            kind = ev["type"].removeprefix("session.status_")
            if ev["type"].startswith("session.status_"):
                return {"rescheduled": "rescheduling"}.get(kind, kind)
        return "running"

    def body(self) -> dict[str, Any]:
        status = self.status()
        d = {
            "id": self.id,
            "type": "session",
            "environment_id": self.environment_id,
            "status": status,
            "agent": {
                "id": "agent_scripted",
                "type": "agent",
                "name": "scripted agent",
                "version": 1,
                "mcp_servers": [],
                "skills": [],
                "tools": [
                    {
                        "type": "agent_toolset_20260401",
                        "configs": [],
                        "default_config": {"enabled": True, "permission_policy": {"type": "always_allow"}},
                    }
                ],
                "model": {"id": "claude-sonnet-4-5"},
                "execution_identity": {"type": "service_account"},
            },
            "created_at": now(),
            "updated_at": now(),
            "metadata": {},
            "outcome_evaluations": [],
            "resources": self.resources,
            "stats": {},
            "usage": {},
            "vault_ids": [],
        }
        return BetaManagedAgentsSession.model_validate(d).model_dump(mode="json", exclude_none=True)


class FakePlatform:
    """The app and its state; all state is touched on the fake's own event loop thread."""

    def __init__(self, *, ttl_seconds: int = 4, environment_key: str = "envkey-fake"):
        self.ttl_seconds = ttl_seconds
        self.environment_key = environment_key
        self.works: dict[str, Work] = {}
        self.sessions: dict[str, Session] = {}
        self.queue: list[str] = []
        self.requests: list[tuple[str, str, int]] = []  # (method, path, status)
        self.errors: list[str] = []  # what the fake itself found wrong in the worker's requests
        self._changed: asyncio.Condition | None = None
        self.closing = False  # set at shutdown: open event streams end before the server stops
        # Runs (in a thread) when a stop request arrives, before it is answered: what the store
        # holds at that moment is what the worker saved before it stopped the item.
        self.on_stop: Callable[[Work], None] | None = None
        self.app = Starlette(
            routes=[
                Route("/v1/environments/{env}/work/poll", self.poll, methods=["GET"]),
                Route("/v1/environments/{env}/work/{work}/ack", self.ack, methods=["POST"]),
                Route("/v1/environments/{env}/work/{work}/heartbeat", self.heartbeat, methods=["POST"]),
                Route("/v1/environments/{env}/work/{work}/stop", self.stop, methods=["POST"]),
                Route("/v1/sessions/{sid}", self.retrieve_session, methods=["GET"]),
                Route("/v1/sessions/{sid}/events", self.list_events, methods=["GET"]),
                Route("/v1/sessions/{sid}/events", self.send_events, methods=["POST"]),
                Route("/v1/sessions/{sid}/events/stream", self.stream_events, methods=["GET"]),
            ]
        )

    # -- setup (called from the test thread before the worker starts) ---------------------------
    def add_session(
        self,
        *,
        session_id: str,
        resources: list[dict[str, Any]],
        script: list[Step],
        token: str,
        environment_id: str = "env_fake",
        terminate_at_end: bool = True,
    ) -> Work:
        self.sessions[session_id] = Session(
            session_id, environment_id, resources, list(script), token, terminate_at_end=terminate_at_end
        )
        work = Work(new_id("work"), environment_id, session_id, work_secret(token))
        self.works[work.id] = work
        self.queue.append(work.id)
        return work

    def lose_lease(self, work_id: str) -> None:
        """Another worker claimed the item: the next heartbeat of this one meets 412."""
        self.works[work_id].lost = True

    # -- plumbing ---------------------------------------------------------------------------------
    def _auth(self, request: Request, token: str) -> Response | None:
        if request.headers.get("authorization") != f"Bearer {token}":
            return self._error(401, "authentication_error", "invalid bearer token")
        if "managed-agents-2026-04-01" not in request.headers.get("anthropic-beta", ""):
            self.errors.append(f"{request.method} {request.url.path} without the managed-agents beta header")
        return None

    @staticmethod
    def _error(status: int, kind: str, message: str, **extra: Any) -> JSONResponse:
        return JSONResponse(
            {"type": "error", "error": {"type": kind, "message": message, **extra}}, status_code=status
        )

    def _log(self, request: Request, response: Response) -> Response:
        self.requests.append((request.method, request.url.path, response.status_code))
        return response

    async def _notify(self) -> None:
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()

    def _work(self, request: Request) -> Work | None:
        work = self.works.get(request.path_params["work"])
        return work if work and work.environment_id == request.path_params["env"] else None

    def _emit(self, session: Session, event: dict[str, Any]) -> None:
        event = {"id": new_id("sevt"), "processed_at": now(), **event}
        _session_event.validate_python(event)
        _stream_event.validate_python(event)
        session.events.append(event)

    def _emit_next(self, session: Session) -> None:
        """The scripted agent's next move: the next tool call, or the end of its turn."""
        threaded = list(itertools.takewhile(lambda st: st.thread is not None, session.script[session.step :]))
        if threaded:
            for st in threaded:
                self._emit(
                    session,
                    {
                        "type": "agent.tool_use",
                        "id": new_id("toolu"),
                        "name": st.name,
                        "input": st.input,
                        "evaluated_permission": "allow",
                        "session_thread_id": st.thread,
                    },
                )
            session.outstanding = len(threaded)
        elif session.step < len(session.script):
            step = session.script[session.step]
            call_id = new_id("toolu")
            self._emit(
                session,
                {
                    "type": "agent.tool_use",
                    "id": call_id,
                    "name": step.name,
                    "input": step.input,
                    "evaluated_permission": "allow",
                },
            )
            self._emit(
                session,
                {
                    "type": "session.status_idle",
                    "stop_reason": {"type": "requires_action", "event_ids": [call_id]},
                },
            )
        else:
            self._emit(session, {"type": "session.status_idle", "stop_reason": {"type": "end_turn"}})
            if session.terminate_at_end:
                self._emit(session, {"type": "session.status_terminated"})

    # -- work -------------------------------------------------------------------------------------
    async def poll(self, request: Request) -> Response:
        denied = self._auth(request, self.environment_key)  # polling is the environment's, not an item's
        if denied:
            return self._log(request, denied)
        env = request.path_params["env"]
        for work_id in list(self.queue):
            work = self.works[work_id]
            if work.environment_id == env:
                self.queue.remove(work_id)
                return self._log(request, JSONResponse(work.body()))
        await asyncio.sleep(min(int(request.query_params.get("block_ms") or 0), 999) / 1000)
        return self._log(request, JSONResponse(None))

    async def ack(self, request: Request) -> Response:
        work = self._work(request)
        if work is None:
            return self._log(request, self._error(404, "not_found_error", "no such work item"))
        denied = self._auth(request, self.environment_key)
        if denied:
            return self._log(request, denied)
        work.acked, work.state = True, "starting"
        return self._log(request, JSONResponse(work.body()))

    async def heartbeat(self, request: Request) -> Response:
        work = self._work(request)
        if work is None:
            return self._log(request, self._error(404, "not_found_error", "no such work item"))
        denied = self._auth(request, self.sessions[work.session_id].token)
        if denied:
            return self._log(request, denied)
        expected = request.query_params.get("expected_last_heartbeat")
        stale = expected != (work.last_heartbeat or "NO_HEARTBEAT")
        if work.lost or (stale and work.state not in ("stopping", "stopped")):
            # Another worker's heartbeat moved the lease on: this one's precondition fails.
            held = {
                "last_heartbeat": now(),
                "lease_extended": False,
                "state": "active",
                "ttl_seconds": self.ttl_seconds,
            }
            details = {"error_code": "heartbeat_precondition_failed", "current_state": held}
            BetaHeartbeatPreconditionFailedErrorDetails.model_validate(details)
            return self._log(
                request,
                self._error(
                    412, "invalid_request_error", "expected_last_heartbeat does not match", details=details
                ),
            )
        work.last_heartbeat = now()
        if work.state in ("queued", "starting"):
            work.state = "active"
        body = {
            "type": "work_heartbeat",
            "last_heartbeat": work.last_heartbeat,
            "state": work.state,
            "lease_extended": work.state == "active",
            "ttl_seconds": self.ttl_seconds,
        }
        return self._log(
            request, JSONResponse(BetaSelfHostedWorkHeartbeatResponse.model_validate(body).model_dump())
        )

    async def stop(self, request: Request) -> Response:
        work = self._work(request)
        if work is None:
            return self._log(request, self._error(404, "not_found_error", "no such work item"))
        denied = self._auth(request, self.sessions[work.session_id].token)
        if denied:
            return self._log(request, denied)
        body = json.loads(await request.body() or b"{}")
        work.stop_requests.append(body)
        if self.on_stop is not None:
            await asyncio.to_thread(self.on_stop, work)
        if work.state == "stopped":
            return self._log(request, self._error(409, "conflict_error", "work item already stopped"))
        work.state = "stopped"
        return self._log(request, JSONResponse(work.body()))

    # -- sessions ---------------------------------------------------------------------------------
    def _session(self, request: Request) -> tuple[Session | None, Response | None]:
        session = self.sessions.get(request.path_params["sid"])
        if session is None:
            return None, self._error(404, "not_found_error", "no such session")
        return session, self._auth(request, session.token)

    async def retrieve_session(self, request: Request) -> Response:
        session, denied = self._session(request)
        if denied:
            return self._log(request, denied)
        return self._log(request, JSONResponse(session.body()))

    async def list_events(self, request: Request) -> Response:
        session, denied = self._session(request)
        if denied:
            return self._log(request, denied)
        limit = int(request.query_params.get("limit") or 20)
        start = int(request.query_params.get("page") or 0)
        # `types` filters by event type; anthropic 2.17's session runner sends it as `types[]=…`
        # (brackets, repeated), as its query strings put every list.
        types = request.query_params.getlist("types[]") + request.query_params.getlist("types")
        events = [ev for ev in session.events if ev.get("type") in types] if types else session.events
        page = events[start : start + limit]
        nxt = str(start + limit) if start + limit < len(events) else None
        return self._log(request, JSONResponse({"data": page, "next_page": nxt}))

    async def send_events(self, request: Request) -> Response:
        session, denied = self._session(request)
        if denied:
            return self._log(request, denied)
        body = json.loads(await request.body())
        sent = []
        for ev in body.get("events", []):
            if ev.get("type") != "user.tool_result":
                self.errors.append(f"unexpected event sent: {ev.get('type')}")
                continue
            ev = {**ev, "id": new_id("sevt"), "processed_at": now()}
            self._emit(session, {k: v for k, v in ev.items() if k not in ("id", "processed_at")})
            session.results.append(ev)
            session.result_times.append(time.monotonic())
            sent.append(ev)
            # The agent works on the result (the step's hook runs meanwhile), then calls again.
            self._emit(session, {"type": "session.status_running"})
            step = session.script[session.step] if session.step < len(session.script) else None
            session.step += 1
            if step is not None and step.after is not None:
                await asyncio.to_thread(step.after, ev)
            if session.outstanding:
                session.outstanding -= 1
                if session.outstanding:
                    continue  # the agent waits for every thread's result
            self._emit_next(session)
        await self._notify()
        answer = BetaManagedAgentsSendSessionEvents.model_validate({"data": sent}).model_dump(mode="json")
        return self._log(request, JSONResponse(answer))

    async def stream_events(self, request: Request) -> Response:
        session, denied = self._session(request)
        if denied:
            return self._log(request, denied)
        assert self._changed is not None
        seen = len(session.events)  # a stream delivers what happens after it attached
        if not session.started:
            session.started = True
            self._emit(session, {"type": "session.status_running"})
            self._emit_next(session)
            await self._notify()

        async def events():
            nonlocal seen
            yield b": connected\n\n"
            while True:
                while seen < len(session.events):
                    ev = session.events[seen]
                    seen += 1
                    yield f"event: {ev['type']}\ndata: {json.dumps(ev)}\n\n".encode()
                    if ev["type"] == "session.status_terminated":
                        return
                if self.closing:
                    return  # a stream left open (a worker that lost its lease) ends with the server
                async with self._changed:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._changed.wait(), 5)
                if seen >= len(session.events):
                    yield b"event: ping\ndata: {}\n\n"

        self.requests.append((request.method, request.url.path, 200))
        return StreamingResponse(events(), media_type="text/event-stream")


class PlatformServer:
    """FakePlatform served by uvicorn (asyncio) on a free loopback port, in a thread."""

    def __init__(self, platform: FakePlatform):
        self.platform = platform
        self.base_url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="fake-platform", daemon=True)
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def __enter__(self) -> PlatformServer:
        self._thread.start()
        if not self._ready.wait(15) or self._error:
            raise RuntimeError(f"the fake platform did not start: {self._error}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:

            async def close() -> None:
                self.platform.closing = True
                await self.platform._notify()

            # The streams end first: a connection still open when the server stops is cancelled,
            # and asyncio logs that as an error in the test.
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(close(), self._loop).result(5)
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(15)

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run fn on the fake's loop (its state is not shared across threads)."""
        assert self._loop is not None

        async def run():
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def _on_loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        # At shutdown the server cancels the connections still open (a worker that lost its lease
        # leaves its event stream and a keep-alive connection behind), and Python 3.11's
        # StreamReaderProtocol callback reports each cancelled connection task as an error. That
        # is the fake server stopping, not something the worker did: every other error is reported.
        if self.platform.closing and isinstance(context.get("exception"), asyncio.CancelledError):
            return
        loop.default_exception_handler(context)

    def _run(self) -> None:
        import socket

        import uvicorn

        async def main():
            self._loop = asyncio.get_running_loop()
            self._loop.set_exception_handler(self._on_loop_error)
            self._stop = asyncio.Event()
            self.platform._changed = asyncio.Condition()
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sock.listen(64)
            port = sock.getsockname()[1]
            # The service's own server (uvicorn, the one the service runs on): a socket we bound,
            # so no free-port race; no access log; a handler that raised shows up in the test's log.
            config = uvicorn.Config(
                self.platform.app, access_log=False, log_level="warning", lifespan="off",
                timeout_graceful_shutdown=1,
            )  # fmt: skip
            server = uvicorn.Server(config)
            self.base_url = f"http://127.0.0.1:{port}"
            task = asyncio.ensure_future(server.serve(sockets=[sock]))
            for _ in range(200):  # until it accepts connections
                if server.started or task.done():
                    break
                await asyncio.sleep(0.02)
            self._ready.set()
            await self._stop.wait()
            server.should_exit = True
            await task

        try:
            asyncio.run(main())
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread
            self._error = exc
            self._ready.set()
