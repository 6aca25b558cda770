"""Every route answers JSON: a walk of every route of `memfs serve`, `memfs serve --hosted-api` and a
relay in front of the emulator, each with bad input (unknown and hostile ids, bad parameters, the
wrong method, a trailing slash, malformed JSON, no credential, both beta headers), asserting a JSON
content type and the hosted API's error body on every error answer. @anthropic-ai/sdk 1.17 throws on
any memory response that is not JSON (`checkJSON`); so would a client that reads the error's type.

The walk takes its routes from the app's own route table, so a route added later is walked too.
Also: the rate limiters' 429s (per caller, per organisation, fast paths included), and a relay whose
upstream is down or answers an error page that is not JSON.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from memfs.service.app import create_app
from memfs.service.database import open_storage
from tests.support.api import Api
from tests.support.http_stub import HttpStub, reply
from tests.support.service import MEMORY_BETA, SESSIONS_BETA, ServiceProcess
from tests.support.world import StoreSpec, World

pytestmark = pytest.mark.timeout(120)

METHODS = ("GET", "POST", "DELETE", "PUT", "PATCH")
NOT_API = {"/metrics", "/healthz", "/readyz"}  # no credential, no beta header (docs/API.md)


def assert_json_error(r: httpx.Response, what: str) -> None:
    """An error answer in the hosted API's shape, as JSON."""
    where = f"{what}: {r.request.method} {r.request.url} -> {r.status_code} {r.headers} {r.text[:200]!r}"
    assert r.status_code >= 400, where
    assert r.headers.get("content-type", "").startswith("application/json"), where
    body = r.json()
    assert body["type"] == "error", where
    assert isinstance(body["error"]["type"], str) and isinstance(body["error"]["message"], str), where
    assert isinstance(body.get("request_id"), str), where


def assert_json(r: httpx.Response, what: str) -> None:
    """JSON whatever the status (a request whose bad part a route ignores may succeed)."""
    if r.status_code >= 400:
        assert_json_error(r, what)
    elif r.url.path.endswith("/snapshot"):  # the one stream: JSON lines (docs/API.md)
        assert r.headers["content-type"] == "application/x-ndjson", (what, r.headers)
    else:
        assert r.headers.get("content-type", "").startswith("application/json"), (
            what,
            r.headers,
            r.text[:200],
        )
        r.json()


def route_table(tmp_path, *, extensions: bool) -> list[tuple[str, set[str]]]:
    """(path template, methods) of every route the service's app serves."""
    storage = open_storage(f"sqlite:///{tmp_path / f'routes-{extensions}.db'}")
    try:
        frame = create_app(storage, "k", extensions=extensions)
        table: dict[str, set[str]] = {}
        for route in frame.app.routes:
            table.setdefault(route.path, set()).update(route.methods or ())
        return sorted((path, methods - {"HEAD"}) for path, methods in table.items())
    finally:
        storage.close()


class Walked(World):
    """A server to walk and the ids that exist on it (a store, a memory, a version, a session), made
    on `owner` (a relay serves what its upstream holds)."""

    def __init__(self, svc: ServiceProcess, owner: ServiceProcess):
        self.svc = svc
        self.key = svc.admin_key
        api = Api(owner.base_url, owner.admin_key)
        try:
            self.build(api, [StoreSpec("walked", seed={"/a.md": "a"})])
            versions = api.versions(self.rw, self.ids["/a.md"])
        finally:
            api.close()
        self.good = {
            "store_id": self.rw,
            "memory_id": self.ids["/a.md"],
            "version_id": versions[0]["id"],
            "session_id": self.session["id"],
        }

    def url(self, template: str, ids: dict[str, str]) -> str:
        return template.format(**ids)

    def headers(self, template: str, **extra: str) -> dict[str, str]:
        beta = SESSIONS_BETA if template.startswith("/v1/sessions") else MEMORY_BETA
        return {"x-api-key": self.key, "anthropic-beta": beta, **extra}


BAD_IDS = [
    {
        "store_id": "memstore_nope",
        "memory_id": "mem_nope",
        "version_id": "memver_nope",
        "session_id": "sesn_nope",
    },
    {"store_id": "bad id%00", "memory_id": "m%2Fx", "version_id": "..", "session_id": "%ff"},
]
BAD_QUERY = (
    "limit=abc&view=bogus&depth=2&path_prefix=/a&page=zzz&since=-1&ids=&known=x&wait=abc"
    "&include_archived=maybe&created_at[gte]=never&expected_content_sha256=nothex&memory_store_id="
)


def walk(world: Walked, routes: list[tuple[str, set[str]]], what: str, *, offers: bool) -> int:
    """Every route with bad input; returns how many requests were sent. `offers`: whether every
    answer says the service serves memfs's extensions (its `memfs-extensions: counters` header, on
    which a mount decides whether to ask counters at all), or none does (the hosted API)."""
    sent = 0
    with httpx.Client(base_url=world.svc.base_url, timeout=30) as c:

        def send(method: str, url: str, **kw) -> httpx.Response:
            nonlocal sent
            sent += 1
            r = c.request(method, url, **kw)
            said = r.headers.get("memfs-extensions")
            assert said == ("counters" if offers else None), (
                f"{what}: {method} {url} -> {r.status_code} {said!r}"
            )
            return r

        for template, methods in routes:
            good = world.url(template, world.good)
            for method in sorted(methods):
                tag = f"{what} {method} {template}"
                api = template not in NOT_API
                if api:
                    assert_json_error(send(method, good), f"{tag}, no credential")
                    bad_key = {**world.headers(template), "x-api-key": "not-a-key"}
                    assert_json_error(send(method, good, headers=bad_key), f"{tag}, unknown credential")
                    if not template.startswith("/v1/sessions"):
                        both = world.headers(template, **{"anthropic-beta": f"{MEMORY_BETA},{SESSIONS_BETA}"})
                        assert_json_error(send(method, good, headers=both), f"{tag}, both beta headers")
                    no_beta = {"x-api-key": world.key}
                    assert_json_error(send(method, good, headers=no_beta), f"{tag}, no beta header")
                    if "{" in template:
                        for ids in BAD_IDS:
                            r = send(method, world.url(template, ids), headers=world.headers(template))
                            assert_json_error(r, f"{tag}, ids {ids}")
                            assert r.status_code < 500, (
                                f"{tag}, ids {ids}: {r.text}"
                            )  # a refusal, not a fault
                    if method == "GET":
                        r = send(method, f"{good}?{BAD_QUERY}", headers=world.headers(template))
                        assert_json(r, f"{tag}, bad parameters")  # a route may ignore what it has not
                    if method == "POST" and not template.endswith(("/archive", "/redact")):
                        for raw in (b'{"path": "/a', b"[1]", b"\xff\xfe", b'{"unknown_field": 1}'):
                            r = send(method, good, headers=world.headers(template), content=raw)
                            assert_json_error(r, f"{tag}, body {raw!r}")
                for other in METHODS:
                    if other not in methods:
                        r = send(other, good, headers=world.headers(template))
                        assert_json_error(r, f"{tag}, wrong method {other}")
                r = send(method, good + "/", headers=world.headers(template))
                assert_json_error(r, f"{tag}, trailing slash")
        for path in ("/", "/v1", "/v1/nope", "/v1/memory_stores/x/y/z", "/console", "//v1/memory_stores"):
            r = send("GET", path, headers={"x-api-key": world.key, "anthropic-beta": MEMORY_BETA})
            assert_json_error(r, f"{what} unknown route {path}")
    return sent


@pytest.fixture
def servers(tmp_path) -> Iterator[tuple[ServiceProcess, ServiceProcess, ServiceProcess]]:
    plain = ServiceProcess(tmp_path / "plain")
    hosted = ServiceProcess(tmp_path / "hosted", hosted_api=True)
    relay = ServiceProcess(
        tmp_path / "relay", extra_args=("--upstream", hosted.base_url, "--poll-interval", "1")
    )
    try:
        yield plain, hosted, relay
    finally:
        relay.stop()
        hosted.stop()
        plain.stop()


def test_every_route_answers_bad_input_with_a_json_error(servers, tmp_path):
    plain, hosted, relay = servers
    full, hosted_only = route_table(tmp_path, extensions=True), route_table(tmp_path, extensions=False)
    assert len(full) > len(hosted_only) >= 14  # the table was read, extensions and all
    sent = walk(Walked(plain, plain), full, "memfs serve", offers=True)
    sent += walk(Walked(hosted, hosted), hosted_only, "--hosted-api", offers=False)
    # The relay speaks the whole API (the extensions from its cache) in front of the emulator, and
    # says so on the emulator's answers it passes on (a session's read, above all).
    sent += walk(Walked(relay, hosted), full, "relay", offers=True)
    for headers in ({}, {"x-api-key": "not-the-relays-key"}):  # the relay's own route
        assert_json_error(httpx.get(f"{relay.base_url}/v1/relay_status", headers=headers), "relay_status")
    assert sent > 500
    # What the walk refused, it refused: nothing was written by a bad request.
    with hosted.admin_client() as c:
        stores = c.get("/v1/memory_stores", params={"include_archived": "true"}).json()["data"]
    assert [s["name"] for s in stores] == ["walked", "walked"]
    assert all(s["archived_at"] is None for s in stores)


def test_the_rate_limiters_answer_json(tmp_path):
    """The per-caller limit (--rate-limit) and the organisation's (--org-limits): a 429 with the
    error body, from the full path and the fast paths (counter, listing) alike."""
    caller = ServiceProcess(tmp_path / "caller", extra_args=("--rate-limit", "0.01", "--rate-burst", "1"))
    org = ServiceProcess(tmp_path / "org", hosted_api=True, org_limits="1,1", extra_args=("--org-burst", "1"))
    try:
        for svc, paths in (
            (
                caller,
                ["/v1/memory_stores/{s}/counter", "/v1/memory_stores/{s}/memories", "/v1/memory_stores/{s}"],
            ),
            (org, ["/v1/memory_stores/{s}/memories", "/v1/memory_stores/{s}", "/v1/memory_stores"]),
        ):
            sid = svc.create_store("limited")["id"]
            with svc.admin_client() as c:
                for path in paths:
                    answers = [c.get(path.format(s=sid)) for _ in range(3)]
                    limited = [r for r in answers if r.status_code == 429]
                    assert limited, [r.status_code for r in answers]
                    for r in limited:
                        assert_json_error(r, f"429 on {path}")
                        assert r.json()["error"]["type"] == "rate_limit_error" and r.headers["retry-after"]
    finally:
        caller.stop()
        org.stop()


def _error_page(request, conn) -> None:
    """An upstream behind a gateway: an HTML error page (or nothing) to everything."""
    if request.path.startswith("/v1/sessions"):
        conn.sendall(reply(502))
    else:
        conn.sendall(reply(502, b"<html><body>502 Bad Gateway</body></html>", {"content-type": "text/html"}))


def test_a_relay_answers_json_when_its_upstream_does_not(tmp_path):
    """An upstream that answers an error page that is not JSON, then one that is down: every route
    kind of the relay (passed through, written through, read from the cache) answers JSON."""
    pages = HttpStub(_error_page)
    relay = ServiceProcess(tmp_path / "relay", extra_args=("--upstream", pages.url, "--poll-interval", "1"))
    requests = [
        ("GET", "/v1/memory_stores", None),  # passed through
        ("GET", "/v1/sessions/sesn_x", None),  # passed through, an empty 502
        ("POST", "/v1/memory_stores/memstore_x/memories", {"path": "/a", "content": "b"}),  # written through
        ("DELETE", "/v1/memory_stores/memstore_x/memories/mem_x", None),
        ("GET", "/v1/memory_stores/memstore_x/memories", None),  # the cache, access confirmed upstream
        ("GET", "/v1/memory_store_counters?ids=memstore_x", None),
    ]
    try:
        for down in (False, True):
            if down:
                pages.close()
            with relay.admin_client() as c:
                for method, path, body in requests:
                    beta = SESSIONS_BETA if path.startswith("/v1/sessions") else MEMORY_BETA
                    r = c.request(method, path, json=body, headers={"anthropic-beta": beta})
                    assert_json_error(r, f"upstream {'down' if down else 'HTML'}")
                    assert r.status_code >= 500 or r.status_code in (401, 403, 404), r.text
    finally:
        relay.stop()
        pages.close()
