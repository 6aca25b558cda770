"""The fake platform is faithful where the worker depends on it: anthropic 2.16's session runner stops
after max_idle only once `sessions.retrieve` reports the session idle, so the fake reports the status
of its newest session status event (running while the agent works, idle while it waits)."""

from __future__ import annotations

import pytest

from tests.support.fake_platform import FakePlatform, PlatformServer, Step

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


def test_the_events_list_filters_by_types_sent_with_brackets():
    """anthropic 2.17's session runner lists the history with `types=[…]`, which the client's query
    string sends as `types[]=a&types[]=b`: the fake filters by them (and by a plain `types`)."""
    import anthropic
    import httpx

    platform = FakePlatform()
    platform.add_session(session_id="sesn_x", resources=[], script=[], token="t")
    session = platform.sessions["sesn_x"]
    platform._emit(session, {"type": "session.status_running"})
    platform._emit(session, {"type": "session.status_rescheduled"})
    platform._emit(session, {"type": "session.status_idle", "stop_reason": {"type": "end_turn"}})
    wanted = ["session.status_running", "session.status_idle"]
    headers = {"authorization": "Bearer t", "anthropic-beta": "managed-agents-2026-04-01"}
    with PlatformServer(platform) as server:
        url = f"{server.base_url}/v1/sessions/sesn_x/events"
        raw = httpx.get(f"{url}?types[]={wanted[0]}&types[]={wanted[1]}", headers=headers)
        assert [ev["type"] for ev in raw.json()["data"]] == wanted, raw.text
        plain = httpx.get(url, params={"types": "session.status_rescheduled"}, headers=headers)
        assert [ev["type"] for ev in plain.json()["data"]] == ["session.status_rescheduled"]
        client = anthropic.Anthropic(auth_token="t", base_url=server.base_url, max_retries=0)
        events = client.beta.sessions.events
        assert [ev.type for ev in events.list("sesn_x", types=wanted)] == wanted  # type: ignore[arg-type]
        assert len(list(events.list("sesn_x"))) == 3
        client.close()
