"""The request frame's credential check (memfs/service/credential_check.py): the routes' own check
on a real storage, a valid token remembered for its time (and only a valid one), a storage error
never taken for a refusal. The frame's use of it (bodies, the organisation's allowance) is tested
on a real `memfs serve` in test_slow_clients.py and test_org_limits.py."""

from __future__ import annotations

import anyio
import pytest

from memfs.service.auth import hash_token
from memfs.service.credential_check import CredentialCheck
from memfs.service.database import open_storage
from memfs.service.storage import ResourceSpec

pytestmark = pytest.mark.timeout(30)
ADMIN = "admin-key-0123456789abcdef"


def scope(headers: dict[str, str]) -> dict:
    return {"type": "http", "headers": [(k.encode(), v.encode()) for k, v in headers.items()]}


@pytest.fixture
def storage(tmp_path):
    s = open_storage(tmp_path / "store.db")
    yield s
    s.close()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_admin_key_and_a_live_token_authenticate_and_nothing_else(storage):
    store = storage.create_store("s", "", {}).id
    session = storage.create_session(
        [ResourceSpec(store, "read_write", None)], token_hash=hash_token("tok-live"), title=None, metadata={}
    )
    clock = Clock()
    check = CredentialCheck(ADMIN, storage.session_for_token, ttl_s=60, clock=clock)

    def ok(headers: dict[str, str]) -> bool:
        return anyio.run(check.authenticates, scope(headers))

    assert ok({"x-api-key": ADMIN}) and ok({"authorization": f"Bearer {ADMIN}"})
    assert check.lookups == 0  # the admin key is compared, never looked up
    assert not ok({}) and not ok({"x-api-key": "garbage"}) and not ok({"authorization": "Basic tok-live"})
    assert not ok({"x-api-key": "garbage"})
    assert check.lookups == 2  # a refused credential is not remembered: looked up each time
    assert ok({"x-api-key": "tok-live"}) and ok({"authorization": "Bearer tok-live"})
    assert check.lookups == 3  # remembered: the second request did not look it up
    storage.archive_session(session.id)
    clock.now += 59
    assert ok({"x-api-key": "tok-live"})  # within its 60 s: still taken as valid here (the routes refuse it)
    clock.now += 2
    assert not ok({"x-api-key": "tok-live"})  # looked up again: archived
    assert check.lookups == 4


def test_a_storage_error_is_not_a_refusal_and_the_remembered_tokens_are_bounded():
    def down(_token_hash: str):
        raise OSError("the database did not answer")

    assert anyio.run(CredentialCheck(ADMIN, down).authenticates, scope({"x-api-key": "t"}))

    valid = {hash_token(f"t{i}") for i in range(10)}
    check = CredentialCheck(ADMIN, lambda h: object() if h in valid else None, max_kept=4)
    for i in range(10):
        assert anyio.run(check.authenticates, scope({"x-api-key": f"t{i}"}))
    assert len(check._valid) == 4  # the newest four
    assert anyio.run(check.authenticates, scope({"x-api-key": "t9"})) and check.lookups == 10
    assert anyio.run(check.authenticates, scope({"x-api-key": "t0"})) and check.lookups == 11
