"""The relay's pure parts: which request goes where (memfs/relay/routes.py), and which credential may
read which store from the cache, for how long (memfs/relay/access.py)."""

from __future__ import annotations

import pytest

from memfs.relay.access import AccessBook, credential_hash
from memfs.relay.routes import route

S = "/v1/memory_stores/memstore_1"


@pytest.mark.parametrize(
    ("method", "path", "query", "kind", "ids"),
    [
        ("GET", S + "/memories", "limit=100", "cached", ("memstore_1",)),
        ("GET", S + "/memories/mem_1", "", "cached", ("memstore_1",)),
        ("GET", S + "/counter", "", "cached", ("memstore_1",)),
        ("GET", S + "/changes", "since=3", "cached", ("memstore_1",)),
        ("GET", S + "/snapshot", "", "cached", ("memstore_1",)),
        (
            "GET",
            "/v1/memory_store_counters",
            "ids=memstore_1,memstore_2,memstore_1",
            "cached",
            ("memstore_1", "memstore_2"),
        ),
        (
            "GET",
            "/v1/memory_store_watch",
            "known=memstore_1:4,memstore_2:0&wait=30",
            "cached",
            ("memstore_1", "memstore_2"),
        ),
        ("GET", "/v1/memory_store_counters", "", "pass", ()),
        # every store id the cache's app reads, repeated parameters too
        (
            "GET",
            "/v1/memory_store_counters",
            "ids=memstore_1&ids=memstore_2,memstore_3",
            "cached",
            ("memstore_1", "memstore_2", "memstore_3"),
        ),
        (
            "GET",
            "/v1/memory_store_watch",
            "known=memstore_1:0&known=memstore_2:0&wait=1",
            "cached",
            ("memstore_1", "memstore_2"),
        ),
        ("GET", "/v1/memory_store_watch", "known=memstore_1:0&known=memstore_1:3", "pass", ()),
        ("GET", "/v1/memory_store_watch", "known=memstore_1:0&known=memstore_2", "pass", ()),
        ("GET", "/v1/memory_store_counters", "&".join(f"ids=memstore_{i}" for i in range(101)), "pass", ()),
        # a '.' or '..' segment (the ASGI path is decoded: %2e%2e arrives as ..) is refused
        ("GET", "/v1/../../admin", "", "invalid", ()),
        ("GET", S + "/memories/..", "", "invalid", ()),
        ("POST", "/v1/./sessions", "", "invalid", ()),
        ("POST", S + "/memories", "", "write", ("memstore_1",)),
        ("POST", S + "/memories/mem_1", "", "write", ("memstore_1",)),
        ("DELETE", S + "/memories/mem_1", "", "write", ("memstore_1",)),
        ("POST", S + "/memory_batch", "", "write", ("memstore_1",)),
        # what the cache does not hold goes upstream as it is
        ("GET", S, "", "pass", ()),
        ("POST", S + "/archive", "", "pass", ()),
        ("GET", S + "/memory_versions", "limit=100", "pass", ()),
        ("POST", S + "/memory_versions/memver_1/redact", "", "pass", ()),
        ("GET", "/v1/memory_stores", "", "pass", ()),
        ("GET", "/v1/sessions/sesn_1", "", "pass", ()),
        ("POST", "/v1/environments/env_1/work/poll", "", "pass", ()),
        ("GET", "/healthz", "", "local", ()),
        ("GET", "/v1/relay_status", "", "local", ()),
    ],
)
def test_route(method, path, query, kind, ids):
    got = route(method, path, query)
    assert (got.kind, got.store_ids) == (kind, ids)


def test_a_watch_is_marked():
    assert route("GET", "/v1/memory_store_watch", "known=memstore_1:4").watch
    assert not route("GET", S + "/counter", "").watch


def test_a_confirmation_lasts_the_ttl_and_serves_an_outage_for_the_grace_only():
    book = AccessBook(ttl=60.0, grace=120.0)
    c = credential_hash("tok")
    assert not book.fresh(c, "memstore_1", 0.0)
    book.confirm(c, ["memstore_1"], 100.0)
    assert book.fresh(c, "memstore_1", 159.0)
    assert not book.fresh(c, "memstore_1", 160.0)
    assert book.in_grace(c, "memstore_1", 279.0)  # what an upstream that cannot answer leaves to go on
    assert not book.in_grace(c, "memstore_1", 280.0)  # never longer
    assert not AccessBook(ttl=60.0, grace=0.0).in_grace(c, "memstore_1", 0.0)
    assert not book.fresh(credential_hash("other"), "memstore_1", 101.0)


def test_a_401_is_remembered_for_a_ttl_until_the_upstream_accepts_the_credential_again():
    book = AccessBook(ttl=60.0)
    c = credential_hash("tok")
    book.learn_session(c, "sesn_1", ["memstore_1"], 0.0)
    book.refuse(c, 10.0)
    assert book.refused(c, 69.0) and not book.refused(c, 70.0)
    assert not book.in_grace(c, "memstore_1", 11.0) and book.session_of(c) is None
    book.confirm(c, ["memstore_1"], 20.0)  # a write the upstream accepted since
    assert not book.refused(c, 21.0) and book.fresh(c, "memstore_1", 21.0)


def test_a_session_read_names_exactly_the_stores_its_token_may_read():
    book = AccessBook()
    c = credential_hash("tok")
    book.confirm(c, ["memstore_old"], 0.0)
    book.learn_session(c, "sesn_1", ["memstore_1", "memstore_2"], 1.0)
    assert book.session_of(c) == "sesn_1"
    assert book.fresh(c, "memstore_1", 2.0) and book.fresh(c, "memstore_2", 2.0)
    assert not book.in_grace(c, "memstore_old", 2.0)  # detached since


def test_revoking_a_credential_forgets_its_session():
    book = AccessBook()
    c = credential_hash("tok")
    book.learn_session(c, "sesn_1", ["memstore_1"], 0.0)
    book.revoke(c, "memstore_1")
    assert not book.in_grace(c, "memstore_1", 0.0) and book.session_of(c) == "sesn_1"
    book.learn_session(c, "sesn_1", ["memstore_1"], 0.0)
    book.revoke(c)
    assert not book.in_grace(c, "memstore_1", 0.0) and book.session_of(c) is None


def test_a_credential_is_known_to_authenticate_for_a_ttl_after_any_answer_but_a_401(monkeypatch):
    # what decides whether the front reads a request's body (front.py `_admit`)
    book = AccessBook(ttl=60.0)
    c, other = credential_hash("tok"), credential_hash("other")
    assert not book.authenticated(c, 0.0)
    book.confirm(c, ["memstore_1"], 0.0)  # a confirmation or an accepted write
    assert book.authenticated(c, 59.0) and not book.authenticated(c, 60.0)
    assert not book.authenticated(other, 1.0)
    book.authenticate(c, 100.0)  # a 2xx passed through, a probe answered 403/404
    assert book.authenticated(c, 159.0) and not book.fresh(c, "memstore_1", 100.0)  # no store confirmed
    book.refuse(c, 110.0)
    assert not book.authenticated(c, 111.0) and book.refused(c, 111.0)
    book.authenticate(c, 120.0)
    assert book.authenticated(c, 121.0) and not book.refused(c, 121.0)
    book.revoke(c)  # an archived session: its token authenticates no more
    assert not book.authenticated(c, 121.0)
    monkeypatch.setattr("memfs.relay.access.AUTHENTICATED_KEPT", 2)
    for i, cred in enumerate(("a", "b", "c")):
        book.authenticate(credential_hash(cred), 200.0 + i)
    known = [cred for cred in ("a", "b", "c") if book.authenticated(credential_hash(cred), 203.0)]
    assert known == ["b", "c"]  # bounded: the oldest asked again


def test_credentials_are_kept_as_hashes():
    assert credential_hash("tok") != "tok" and len(credential_hash("tok")) == 64


def test_a_store_is_polled_every_interval_while_used_every_five_minutes_while_only_watched():
    from memfs.relay.poller import IDLE_EVERY_S, Poller, Slot

    p = Poller("http://upstream.invalid", mirror=None, interval=15.0)  # type: ignore[arg-type]
    now = 10_000.0
    assert p.period(Slot(used_at=now - 10), now) == 15.0  # a read, a write, a live mount's use signal
    assert p.period(Slot(used_at=now - 59), now) == 15.0
    assert p.period(Slot(used_at=now - 61, watched_at=now - 5), now) == IDLE_EVERY_S  # idle mounts watching
    assert p.period(Slot(used_at=now - 700, watched_at=now - 601), now) is None  # nobody: not polled
    assert p.period(Slot(), now) is None
    slow = Poller("http://upstream.invalid", mirror=None, interval=45.0)  # type: ignore[arg-type]
    assert slow.period(Slot(used_at=now - 80), now) == 45.0  # "used" spans at least two intervals


def test_a_store_nobody_asked_anything_of_for_a_day_leaves_the_cache():
    from memfs.relay.poller import DROP_AFTER_S, Poller, Slot

    p = Poller("http://upstream.invalid", mirror=None)  # type: ignore[arg-type]
    now = 1_000_000.0
    assert not p.stale(Slot(used_at=now - 10), now)
    assert not p.stale(
        Slot(used_at=now - 2 * DROP_AFTER_S, watched_at=now - 60), now
    )  # a mount still watches it
    assert p.stale(Slot(used_at=now - DROP_AFTER_S - 1, watched_at=now - DROP_AFTER_S - 1), now)
