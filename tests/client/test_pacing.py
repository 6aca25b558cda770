"""The client's paced rate after a 429 (memfs/client/budget.py `Pacer`) and the client-wide hold
(SEMANTICS.md#d-budget): a request waiting its paced turn still obeys a hold another request's
429 set in the meantime, so nothing is sent before a retry-after the service gave."""

from __future__ import annotations

import time

import httpx
import pytest
import trio
import trio.testing

from memfs.client import StoreClient

pytestmark = pytest.mark.timeout(30)


def test_a_request_waiting_its_paced_turn_waits_out_a_hold_set_meanwhile():
    sent: list[float] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(time.monotonic())
        return httpx.Response(200, json={"id": "sesn_1"})

    async def main() -> float:
        async with StoreClient("http://svc.test", "t", transport=httpx.MockTransport(answer)) as c:
            now = trio.current_time()
            c.pacer.reserve(now)
            c.pacer.limited(sent_at=now, now=now)  # a 429 with nothing sent lately: 1 a second
            c.pacer.reserve(now)  # that second's turn is taken: the next request waits ~1 s
            hold_ends = 0.0

            async def a_429_meanwhile() -> None:
                nonlocal hold_ends
                await trio.sleep(0.3)
                c.budget.hold(1.5)  # what _retry_wait does with another request's retry-after
                hold_ends = time.monotonic() + 1.5

            async with trio.open_nursery() as nursery:
                nursery.start_soon(a_429_meanwhile)
                await c.get_session("sesn_1")
            return hold_ends

    hold_ends = trio.run(main)
    assert len(sent) == 1
    assert sent[0] >= hold_ends - 0.01, "sent when its paced turn came, inside the hold"


def test_a_held_watch_takes_no_slot_so_requests_go_while_it_waits():
    """After a 429 the client's slots narrow to one (one request at a time, widening per answer); a
    watch held meanwhile must not be that one, or every push waits for its minute to end."""
    watch_held = trio.Event()
    release = trio.Event()

    async def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/memory_store_watch":
            watch_held.set()
            await release.wait()
            return httpx.Response(200, json={"status": "unchanged", "data": []})
        return httpx.Response(200, json={"id": "sesn_1"})

    class Held(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            return await answer(request)

    async def main() -> None:
        async with StoreClient("http://svc.test", "t", transport=Held()) as c:
            c.slots.total_tokens = 1  # what a 429 leaves (api.py `_retry_wait`)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(c.watch, {"memstore_1": 3}, 30.0)
                await watch_held.wait()
                with trio.fail_after(5):  # not behind the watch
                    assert (await c.get_session("sesn_1"))["id"] == "sesn_1"
                release.set()

    trio.run(main)


def test_paced_turns_go_to_the_stores_in_turn_not_first_come_first_served():
    """A store with 12 requests waiting and one with 3 that came later: once the burst is spent
    they alternate (memfs/client/turns.py), so the small store is not behind all of the large one."""
    from memfs.client.budget import Pacer
    from memfs.client.turns import Turns

    order: list[str] = []

    async def main() -> None:
        pacer = Pacer({"read": 600})  # 10 a second
        turns = Turns(pacer)
        for _ in range(int(pacer.buckets["read"].capacity)):
            pacer.reserve(trio.current_time(), "read")  # the burst spent

        async def one(store: str) -> None:
            await turns.take("read", store)
            order.append(store)

        async with trio.open_nursery() as nursery:
            for _ in range(12):
                nursery.start_soon(one, "big")
            await trio.sleep(0.01)
            for _ in range(3):
                nursery.start_soon(one, "small")

    started = time.monotonic()
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert time.monotonic() - started < 5
    assert len(order) == 15
    assert max(i for i, s in enumerate(order) if s == "small") <= 6, order


def test_a_first_429_halves_the_rate_the_unpaced_client_was_sending_at():
    """A service that said nothing of its limit: the client goes unpaced, and the first 429 halves
    the rate it was sending at (not the floor's one a second: its sends were counted)."""

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"id": "sesn_1"})

    async def main() -> None:
        async with StoreClient("http://svc.test", "t", transport=httpx.MockTransport(answer)) as c:
            for _ in range(40):  # 20 a second for 2 s
                await c.get_session("sesn_1")
                await trio.sleep(0.05)
            now = trio.current_time()
            c.pacer.limited(sent_at=now, now=now)
            assert c.pacer.rate(now) == pytest.approx(10.0, rel=0.15)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
