"""The fake platform is faithful where the worker depends on it: anthropic 2.16's session runner stops
after max_idle only once `sessions.retrieve` reports the session idle, so the fake reports the status
of its newest session status event (running while the agent works, idle while it waits)."""

from __future__ import annotations

import pytest

from tests.support.fake_platform import FakePlatform, Step

pytestmark = pytest.mark.timeout(30)


def test_retrieve_reports_the_newest_status_event():
    platform = FakePlatform()
    platform.add_session(
        session_id="sesn_x", resources=[], script=[Step("bash", {"command": "true"})], token="t"
    )
    session = platform.sessions["sesn_x"]
    assert session.body()["status"] == "running"  # work was queued: the agent has something to do
    platform._emit(session, {"type": "session.status_running"})
    platform._emit_next(session)  # the call, then an idle that requires action
    assert session.body()["status"] == "idle"
    platform._emit(session, {"type": "session.status_running"})  # the result arrived
    assert session.body()["status"] == "running"
    session.step = 1
    platform._emit_next(session)  # the end of the turn, then the termination
    assert session.body()["status"] == "terminated"
    platform._emit(session, {"type": "session.status_rescheduled"})
    assert session.body()["status"] == "rescheduling"
