"""The relay's poll of a store in use (docs/SEMANTICS.md#d-relay): an edit made on the upstream
directly (the Console, a cloud session) reaches the cache with the poll's own read of the version
feed, which carries the new content (view=full); no GET of the memory follows it."""

from __future__ import annotations

import httpx
import pytest

from tests.service.test_relay_access import MEMORY, relay_for, seeded, status, token_of
from tests.service.test_relay_access import upstream as upstream  # the fixture: an emulator of the hosted API
from tests.support.waits import wait_for

pytestmark = pytest.mark.timeout(120)


def test_an_upstream_edit_and_create_cost_the_poll_alone(tmp_path, upstream):
    sid, mid = seeded(upstream)
    token = token_of(upstream.create_session([(sid, "read_write")]))
    relay = relay_for(tmp_path, upstream)
    try:
        with httpx.Client(
            base_url=relay.base_url, headers={**MEMORY, "authorization": f"Bearer {token}"}, timeout=30
        ) as c:

            def content(path: str) -> str | None:
                """The memory at `path` as the relay serves it (a use of the store: it stays polled)."""
                listed = c.get(f"/v1/memory_stores/{sid}/memories").json()["data"]
                got = [m for m in listed if m.get("path") == path]
                if not got:
                    return None
                return c.get(f"/v1/memory_stores/{sid}/memories/{got[0]['id']}").json()["content"]

            assert content("/secret.md") == "only mine\n"  # downloaded, then polled while used
            assert wait_for(lambda: status(relay)["stores"][0]["polls"] >= 1, 20), status(relay)
            before = status(relay)["requests"]["last_hour"]
            with upstream.admin_client() as admin:
                edit = admin.post(
                    f"/v1/memory_stores/{sid}/memories/{mid}", json={"content": "edited upstream\n"}
                )
                assert edit.status_code == 200, edit.text
                made = admin.post(
                    f"/v1/memory_stores/{sid}/memories", json={"path": "/new.md", "content": "new\n"}
                )
                assert made.status_code == 200, made.text
            assert wait_for(
                lambda: content("/secret.md") == "edited upstream\n" and content("/new.md") == "new\n", 30
            ), status(relay)
            after = status(relay)["requests"]["last_hour"]
        assert after.get("versions", 0) > before.get("versions", 0), (before, after)
        assert after.get("get", 0) == before.get("get", 0), (before, after)  # no GET of either memory
    finally:
        relay.stop()


def test_a_restarted_relay_reads_the_feed_from_the_position_its_cache_recorded(tmp_path, upstream):
    # The store is not listed again after a restart (2,000 memories: 20 basic pages and a probe
    # against the hosted API); the first poll reads the feed from the recorded position and
    # finds an edit made on the upstream while the relay was away.
    sid, mid = seeded(upstream)
    token = token_of(upstream.create_session([(sid, "read_write")]))
    relay = relay_for(tmp_path, upstream)
    try:
        h = {**MEMORY, "authorization": f"Bearer {token}"}

        def content() -> str | None:
            with httpx.Client(base_url=relay.base_url, headers=h, timeout=30) as c:
                got = c.get(f"/v1/memory_stores/{sid}/memories/{mid}")
                return got.json().get("content") if got.status_code == 200 else None

        assert content() == "only mine\n"  # downloaded (its feed position recorded with it)
        assert wait_for(lambda: status(relay)["stores"][0]["polls"] >= 1, 20), status(relay)
        relay.stop()
        with upstream.admin_client() as admin:
            edit = admin.post(f"/v1/memory_stores/{sid}/memories/{mid}", json={"content": "while away\n"})
            assert edit.status_code == 200, edit.text
        relay.start()  # the same cache db
        assert wait_for(lambda: content() == "while away\n", 20), status(relay)
        asked = status(relay)["requests"]["last_hour"]
        assert asked.get("versions", 0) >= 1, asked
        assert asked.get("list", 0) == 0, asked  # no listing: the feed since the recorded position
        assert asked.get("get", 0) == 0, asked  # the edit came with its content
    finally:
        relay.stop()
