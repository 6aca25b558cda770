"""Live mode's use signal (memfs/sync/live.py): a mount that holds its watch and is used reads its
stores' counters once an interval, so a relay keeps polling those stores upstream; an idle one
sends nothing but its watch."""

from __future__ import annotations

import math
import time

import pytest
import trio

pytestmark = [pytest.mark.trio, pytest.mark.timeout(20)]


async def test_a_live_mount_in_use_reads_its_counters_once_an_interval(world):
    m = await world.setup({"/a.md": "x"}, {"/rules.md": "be kind"}, interval=15.0)
    e = m.engine.live
    e.watching = True
    e.signalled_at = time.monotonic() - 20.0  # the last signal, an interval ago
    m.engine.schedule.used_at = m.fs.last_activity = e.signalled_at - 1.0  # used only before it
    assert not e.use_signal_due()  # nobody used the mount since: its watch is enough
    m.engine.schedule.used()  # a `memfs sync`
    assert e.use_signal_due()
    m.transport.clear()
    await e.signal_use()
    assert m.transport.requests == [("GET", "/v1/memory_store_counters")]
    assert not e.use_signal_due()  # once an interval, however much it is used
    m.engine.schedule.used()
    assert not e.use_signal_due()
    e.signalled_at -= 20.0
    assert e.use_signal_due()
    m.engine.schedule.last_attempt = (
        trio.current_time() - 1.0
    )  # a live tick a second ago: it read the moved stores only
    assert e.use_signal_due()
    e.retry_at = trio.current_time() + 14.0  # a tick failed a second ago (a hung service)
    assert not e.use_signal_due()  # the next request waits out the interval, the signal's too
    e.retry_at = -math.inf
    assert (await m.sync())["ok"]  # a polled tick: it read every store's counter
    m.engine.schedule.used()
    assert not e.use_signal_due()
    e.signalled_at -= 20.0
    e.watching = False
    assert not e.use_signal_due()  # polling: its ticks are its signal


async def test_the_signal_takes_a_move_as_the_watch_would(world):
    m = await world.setup({"/a.md": "x"}, interval=15.0)
    e = m.engine.live
    e.watching = True
    await world.svc.create(world.rw, "/b.md", "from elsewhere")
    await e.signal_use()
    assert world.rw in e.moved and e.wake.is_set()
