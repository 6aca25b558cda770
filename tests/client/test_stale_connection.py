"""A kept-alive connection closed by the server as the next request went out (tinyproxy closes
after every answer; any server may at its keep-alive timeout): httpx raises "Server disconnected
without sending a response" and does not send again. The client sends a GET again, once, on a new
connection; a write is not sent again here (its outcome is the sync's to settle), nor is a GET
whose answer was cut short or reset (tests/stress/test_faults.py: such a fault fails the tick)."""

from __future__ import annotations

import json
import re

import pytest

from memfs.client import StoreClient
from memfs.client.api import NO_ANSWER
from memfs.client.errors import Unreachable
from tests.support.http_stub import HttpStub, Request, reply

pytestmark = [pytest.mark.trio, pytest.mark.timeout(30)]

SESSION = {"id": "sesn_1", "type": "session", "resources": []}


def closing_every_second_request():
    """Answers the first request of each connection and closes it on the second, unanswered."""
    seen: dict[int, int] = {}

    def answer(request: Request, conn) -> bool:
        n = seen[id(conn)] = seen.get(id(conn), 0) + 1
        if n == 2:
            return True  # closed without a word, as the request arrived
        body = json.dumps(SESSION if request.method == "GET" else {"id": "mem_1"}).encode()
        conn.sendall(reply(200, body, {"content-type": "application/json"}))
        return False

    return answer


async def test_a_get_on_a_connection_the_server_closed_is_sent_again_once():
    with HttpStub(closing_every_second_request()) as stub:
        client = StoreClient(stub.url, "token")
        try:
            assert await client.get_session("sesn_1") == SESSION
            assert await client.get_session("sesn_1") == SESSION  # met the closed one, then a new one
        finally:
            await client.aclose()
        gets = [r for r in stub.requests if r.method == "GET"]
        assert len(gets) == 3 and stub.connections == 2, (len(gets), stub.connections)


async def test_a_write_on_a_connection_the_server_closed_is_not_sent_again():
    with HttpStub(closing_every_second_request()) as stub:
        client = StoreClient(stub.url, "token")
        try:
            await client.get_session("sesn_1")
            with pytest.raises(Unreachable, match=re.escape(NO_ANSWER)):  # httpcore's words still
                await client.create_memory("memstore_1", "/a.md", "alpha")
        finally:
            await client.aclose()
        assert [r.method for r in stub.requests] == ["GET", "POST"]
