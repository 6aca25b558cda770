"""The uvicorn internals memfs relies on, checked by name and signature: a uvicorn release that
moves them fails here, naming what moved, before the service misbehaves.

memfs/service/_uvicorn.py subclasses uvicorn's internal `HttpToolsProtocol` (the coalesced
writes, the slow-client guard of docs/OPERATIONS.md#security) and `uvicorn.Server`; pyproject.toml
pins uvicorn to the minor version tested here. When this test fails after an upgrade, re-read
_uvicorn.py's overrides against the new uvicorn, then update the pin and this test.
"""

from __future__ import annotations

import asyncio
import inspect

import pytest

pytestmark = pytest.mark.timeout(60)

# method -> its parameter names (after self), as _uvicorn.py's overrides call them
PROTOCOL_METHODS = {
    "connection_made": ["transport"],
    "connection_lost": ["exc"],
    "data_received": ["data"],
    "on_url": ["url"],
    "on_header": ["name", "value"],
    "on_message_begin": [],
    "on_headers_complete": [],
    "on_body": ["body"],
    "on_message_complete": [],
    "send_400_response": ["msg"],
}
# attributes the overrides read, set by __init__ or connection_made
PROTOCOL_ATTRIBUTES = ("connections", "tasks", "loop", "transport", "flow")
# what the body guard (`_body_too_slow`) reads and sets on the request in progress: the protocol's
# `cycle`, and on it whether the answer started, the disconnect flag and the event the app waits on
CYCLE_ATTRIBUTES = ("response_started", "disconnected", "message_event")
SERVER_METHODS = {"handle_exit": ["sig", "frame"], "serve": ["sockets"]}
SERVER_ATTRIBUTES = ("should_exit", "started")
SERVER_STARTED_ATTRIBUTES = ("servers",)  # set once it listens: looked for in its source
CONFIG_PARAMETERS = (
    "loop",
    "http",
    "lifespan",
    "access_log",
    "log_config",
    "server_header",
    "date_header",
    "timeout_graceful_shutdown",
    "ssl_certfile",
    "ssl_keyfile",
    "timeout_keep_alive",
    "limit_concurrency",
)


def _params(fn) -> list[str]:
    return [p for p in inspect.signature(fn).parameters if p != "self"]


def _moved_methods(cls, expected: dict[str, list[str]]) -> list[str]:
    moved = []
    for name, params in expected.items():
        fn = getattr(cls, name, None)
        if fn is None:
            moved.append(f"{cls.__qualname__}.{name} is gone")
        elif _params(fn) != params:
            moved.append(
                f"{cls.__qualname__}.{name}{tuple(_params(fn))}: memfs calls it with {tuple(params)}"
            )
    return moved


class _Transport(asyncio.Transport):
    """The least a protocol's connection_made reads from a transport."""

    def get_extra_info(self, name, default=None):
        return {"sockname": ("127.0.0.1", 1), "peername": ("127.0.0.1", 2)}.get(name, default)

    def is_closing(self) -> bool:
        return False

    def write(self, data) -> None:
        pass

    def close(self) -> None:
        pass


def test_the_uvicorn_internals_memfs_subclasses_are_where_it_expects_them():
    import uvicorn
    from uvicorn.protocols.http import httptools_impl

    moved: list[str] = []
    protocol_cls = getattr(httptools_impl, "HttpToolsProtocol", None)
    if protocol_cls is None:
        pytest.fail("uvicorn.protocols.http.httptools_impl.HttpToolsProtocol is gone")
    moved += _moved_methods(protocol_cls, PROTOCOL_METHODS)
    moved += _moved_methods(uvicorn.Server, SERVER_METHODS)
    config_params = inspect.signature(uvicorn.Config).parameters
    moved += [f"uvicorn.Config has no parameter {p!r}" for p in CONFIG_PARAMETERS if p not in config_params]

    # a protocol as uvicorn makes one, on a stand-in transport: the attributes the overrides read
    from memfs.service._uvicorn import guarded_protocol
    from memfs.service.connections import ConnectionLimits

    async def make():
        config = uvicorn.Config(app=None, http=guarded_protocol(ConnectionLimits()), log_config=None)
        config.load()
        from uvicorn.server import ServerState

        proto = config.http_protocol_class(config=config, server_state=ServerState(), app_state={})
        proto.connection_made(_Transport())
        missing = [
            f"HttpToolsProtocol has no attribute {a!r}" for a in PROTOCOL_ATTRIBUTES if not hasattr(proto, a)
        ]
        if hasattr(proto, "flow") and not hasattr(proto.flow, "read_paused"):
            missing.append("HttpToolsProtocol.flow has no attribute 'read_paused'")
        proto.connection_lost(None)
        return missing

    moved += asyncio.run(make())
    if "self.cycle" not in inspect.getsource(protocol_cls.__init__):
        moved.append("HttpToolsProtocol.__init__ sets no 'cycle'")
    cycle_cls = getattr(httptools_impl, "RequestResponseCycle", None)
    if cycle_cls is None:
        moved.append("uvicorn.protocols.http.httptools_impl.RequestResponseCycle is gone")
    else:
        cycle_init = inspect.getsource(cycle_cls.__init__)
        moved += [
            f"RequestResponseCycle sets no {a!r}" for a in CYCLE_ATTRIBUTES if f"self.{a} =" not in cycle_init
        ]
    server = uvicorn.Server(uvicorn.Config(app=None, log_config=None))
    moved += [f"uvicorn.Server has no attribute {a!r}" for a in SERVER_ATTRIBUTES if not hasattr(server, a)]
    source = inspect.getsource(uvicorn.Server)
    moved += [
        f"uvicorn.Server sets no {a!r}" for a in SERVER_STARTED_ATTRIBUTES if f"self.{a} =" not in source
    ]
    assert not moved, "uvicorn's internals moved (memfs/service/_uvicorn.py relies on them):\n" + "\n".join(
        moved
    )
