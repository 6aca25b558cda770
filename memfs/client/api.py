"""`StoreClient`: the store API's calls and memfs's extensions (counter, changes, snapshot), and
how a request is sent (slots, the client-wide hold, retries).

Used by the mount and the sync engine (under trio). Sized for a WAN: every request takes one of
`concurrency` slots (the connection pool has as many connections), so a 10,000-memory store never
has more than that many requests in flight, whatever the callers gather. A 429 or 5xx whose
`retry-after` is short (<= `retry_within`) is retried here, at most `retries` times: over a WAN a
second try a second later is far cheaper than failing the tick and waiting an interval. Anything
else fails the request; a failed request fails the tick, which counts as an attempt (SEMANTICS.md#d-unreachable);
a 409 is an answer, not a fault (SEMANTICS.md#d-three-way).
"""

from __future__ import annotations

import contextlib
import hashlib
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager, nullcontext
from operator import itemgetter
from typing import Any

import httpx
import orjson
import trio

from memfs.client.budget import (
    RATE_HEADERS,
    Pacer,
    RequestBudget,
    class_of,
    kind_of,
    retry_after,
    store_of,
)
from memfs.client.egress import redact
from memfs.client.errors import RESEND_CODES, ApiError, Unreachable, error_code, first_failure
from memfs.client.listing import LastListing, ListingWalk, keep_listing
from memfs.client.plain_get import PlainHTTPError
from memfs.client.records import Change, Changes, Listing
from memfs.client.snapshot_receive import stream_snapshot
from memfs.client.snapshot_stream import SnapshotSink
from memfs.client.transport import Pools, pools_for
from memfs.client.turns import Turns
from memfs.protocol import (
    API_KEY_HEADER,
    API_VERSION,
    BETA_HEADER,
    COUNTER_HEADER,
    COUNTERS_PATH,
    EXTENSIONS_HEADER,
    MEMORY_BETA,
    SESSIONS_BETA,
    STORES_PATH,
    VERSION_HEADER,
    WATCH_PATH,
    WRITE_REASON_HEADER,
    WriteReason,
    batch_path,
    changes_path,
    memories_path,
    memory_path,
    session_path,
    snapshot_path,
    store_path,
    versions_path,
)

CONCURRENCY = 32  # requests in flight per client (all stores together): a WAN's latency, bounded
RETRY_WITHIN = 4.0  # seconds: the longest retry-after honoured inside a tick (the interval is >= 5 s)
# httpcore's words (checked on httpcore 1.0) for a connection closed before a byte of the answer;
# tests/client/test_stale_connection.py fails, naming them, if they change.
NO_ANSWER = "Server disconnected without sending a response."
RETRIES = 2  # per request
# A 429 with a short retry-after is sent again up to this many times, each after its retry-after
# and the pacer's turn (memfs/client/budget.py): a first download of 20 sandboxes sharing one
# organisation's limit met short 429s on one page nine times in a row (8 was the bound then) and
# that mount's start failed; under a limit shared with others a page may lose its turn often,
# and each retry waits what the service asked, so the bound only stops a service that never lets go.
RATE_RETRIES = 30
# A 503 `change_outcome_unknown` without a retry-after is sent again after this many seconds, times
# the attempt: it asks for the same request again to finish what it saved (RESEND_CODES).
RESEND_WAIT = 0.25

COUNTER_HEADER_BYTES = COUNTER_HEADER.lower().encode("ascii")
# One cursor chain per store keeps a paced client's rate when the stores listed at once send this
# many times the pages the rate needs per round trip (the rest: the page's service and parse time).
ONE_CHAIN_ROOM = 1.5
# The listing's connections a mount opens ahead of its first download (`StoreClient.warm`): the
# first pages of up to four stores (the first wave a paced mount sends of them), or one store's
# first page and its first chains'; the others are opened as the chains start, paced. Opening
# one takes no request of the organisation's allowance.
WARM_CONNECTIONS = 4


class StoreClient:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 10.0,
        concurrency: int = CONCURRENCY,
        retry_within: float = RETRY_WITHIN,
        retries: int = RETRIES,
        transport: httpx.AsyncBaseTransport | None = None,
        api_key: bool = False,
    ):
        """`api_key`: `token` is an organisation's API key (a store mounted on a person's machine,
        SEMANTICS.md#d-store-mount), sent as `x-api-key` with the API's version, as the hosted API
        wants it; otherwise a sessions token, sent as a bearer token.

        `transport`: where requests go instead of the network (tests: the service app in
        process, or a transport that injects faults). None, the default, is the client's own
        pools, through the environment's proxy for `base_url` if it names one (memfs/client/egress.py;
        a proxy setting that cannot be used fails every request, saying why)."""
        self.base_url = base_url.rstrip("/")
        self.concurrency = concurrency
        self.retry_within = retry_within
        self.retries = retries
        self._slots: trio.CapacityLimiter | None = None  # made inside the trio run that uses it
        verify = self.base_url.startswith("https:")  # a test's transport: as the pools do (pools_for)
        self._pools: Pools | None = None  # the client's own pools (None: a test's transport)
        self.proxy: str | None = None  # the proxy the client's pools go through, if any
        self._via = ""  # said in an Unreachable's message when a proxy is in the way
        if transport is None:
            # one connection more than the slots: the held watch's, which takes no slot (`_sending`)
            transport = self._pools = pools_for(self.base_url, concurrency + 1)
            self.proxy = self._pools.proxy
            if self.proxy is not None:
                self._via = f" (through the proxy {redact(self.proxy)})"
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=(
                {API_KEY_HEADER: token, VERSION_HEADER: API_VERSION, BETA_HEADER: MEMORY_BETA}
                if api_key
                else {"authorization": f"Bearer {token}", BETA_HEADER: MEMORY_BETA}
            ),
            timeout=httpx.Timeout(timeout),
            verify=verify,
            transport=transport,  # `concurrency` connections in all (tests: their own transport)
        )
        self.requests_sent = 0
        self.budget = RequestBudget()  # by kind, rolling windows; and the client-wide hold (a 429)
        # the rate sent at: the service's limit mirrored, or what a 429 taught (memfs/client/budget.py)
        self.pacer = Pacer.for_service(self.base_url)
        self.turns = Turns(self.pacer)  # the stores in turn, when paced (memfs/client/turns.py)
        self.pages_parsed = 0  # listing pages parsed, not taken as the last listing had them (tests)
        self._last_listings: dict[str, LastListing] = {}  # store id -> its last basic listing
        self._walks = 0  # listings under way (`_one_chain`)
        self.retried = 0  # requests sent again after a retry-after (for the logs and tests)
        # The last answer's `anthropic-ratelimit-requests-*` headers: the mount's early download
        # hands them to the daemon's client, whose first request is then paced like the rest.
        self.limits_heard: dict[str, str] = {}
        # When the request whose answer said them was sent, and when the answer came
        # (time.monotonic(): the system's clock, the same in a process this one forks).
        self.limits_heard_at: tuple[float, float] | None = None
        # Whether the session's answer said the service serves memfs's extensions: None until it
        # was read; False: no counters to ask (the hosted API; SEMANTICS.md#d-no-counter).
        self.offers_counters: bool | None = None
        # `_get`'s request headers: the client's own (as httpx sends them), gzip the only encoding
        # asked for (the one decoded there), and the host.
        host = self._http.base_url.netloc
        self._get_headers = [(b"host", host)] + [
            (name, value) for name, value in self._http.headers.raw if name.lower() != b"accept-encoding"
        ]
        self._get_headers.append((b"accept-encoding", b"gzip"))
        self._get_timeout = self._http.timeout.as_dict()

    @property
    def slots(self) -> trio.CapacityLimiter:
        # Callers queue here, not in httpx's pool, whose wait would count against the timeout.
        if self._slots is None:
            self._slots = trio.CapacityLimiter(self.concurrency)
        return self._slots

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> StoreClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @asynccontextmanager
    async def _sending(self, kind: str, method: str, path: str) -> AsyncIterator[float]:
        """The request's paced turn, its store's among the others' (memfs/client/turns.py), then a
        slot; in it, the client-wide hold waited out (or failed on: memfs/client/budget.py), then
        counted. Yields the time it was sent (for `_retry_wait` and `_heard`). The turn comes first:
        waiting in line for it, every request of every store is seen, not only the slots' 32."""
        cls = class_of(method)
        now = trio.current_time()
        if not self.pacer.paced(now, cls):
            self.pacer.reserve(now, cls)  # at once; counted in the rate a first 429 halves
        elif await self.turns.take(cls, store_of(path)):
            self.budget.paced += 1
        # A held watch takes no slot: it waits up to a minute for nothing but a commit, and once a
        # 429 has narrowed the slots to one, every push would wait behind it (a push wave of 40
        # creates refused once with retry-after 1 took 74 s, 54 of them behind the watch).
        async with self.slots if kind != "watch" else nullcontext():
            wait = self.budget.wait_for(self.retry_within)
            if wait:
                await trio.sleep(wait)
            self.requests_sent += 1
            self.budget.count(kind)
            yield trio.current_time()

    def _heard(self, method: str, header: Callable[[str], str | None], sent_at: float) -> None:
        """An answer's rate-limit headers, if any, to the pacer (memfs/client/budget.py `Pacer.heard`),
        and kept as `limits_heard` (with `limits_heard_at`)."""
        said = {name: value for name in RATE_HEADERS if (value := header(name)) is not None}
        now = trio.current_time()
        if said:
            self.limits_heard = said
            answered = time.monotonic()
            self.limits_heard_at = (answered - (now - sent_at), answered)
        self.pacer.heard(class_of(method), header, sent_at, now)

    def _widen(self) -> None:
        if self._slots is not None and self._slots.total_tokens < self.concurrency:
            self._slots.total_tokens += 1

    async def _request(self, method: str, url: str | httpx.URL, **kw: Any) -> httpx.Response:
        kind = kind_of(method, str(url))
        resend = method == "GET"  # once, see below
        for attempt in range(max(self.retries, RATE_RETRIES) + 1):
            try:
                async with self._sending(kind, method, str(url)) as sent_at:
                    try:
                        resp = await self._http.request(method, url, **kw)
                    except httpx.RemoteProtocolError as exc:
                        if not (resend and str(exc) == NO_ANSWER):
                            raise
                        # A kept-alive connection the server (or a proxy: tinyproxy closes after
                        # every answer) closed as the request went out: not a byte of an answer.
                        # httpx does not send it again; a browser does, for a GET, once, on a new
                        # connection (as plain_get.py does for the listing). An answer cut short,
                        # a reset or a timeout fails the request as before.
                        resend = False
                        resp = await self._http.request(method, url, **kw)
            except httpx.HTTPError as exc:
                raise Unreachable(f"{method} {url}{self._via}: {_describe(exc)}") from exc
            self._heard(method, resp.headers.get, sent_at)
            if resp.status_code < 400:
                self._widen()
                return resp
            wait = self._retry_wait(resp, attempt, sent_at)
            if wait is None:
                err = _api_error(resp)
                err.repeated = attempt > 0
                raise err
            await trio.sleep(wait)
        raise AssertionError("unreachable")  # the last attempt returns or raises

    async def _get(self, endpoint: httpx.URL, query: bytes) -> tuple[bytes, str | None, str | None]:
        """A listing page's GET: (body, its counter header or None, its `Date` header or None),
        retried as `_request`.

        With the client's own pools (not a test's transport) and no proxy in the way it is a plain
        HTTP/1.1 GET on trio's sockets (memfs/client/plain_get.py): a first download is hundreds of
        full-view pages of ~300 KB, and httpx's client layers, httpcore and h11 took ~3x the
        daemon's CPU for them (432 pages: 0.89 s against 0.29 s, on the thread serving FUSE;
        transport.py `Pools.plain`). The request is the same one: the client's
        headers, `accept-encoding: gzip` (decoded here), the client's timeouts, TLS as httpx does
        it; connections of its own, as many as the slots. Through a proxy, the pools (httpx's
        CONNECT and forwarding) carry the pages as every other request."""
        pools = self._pools
        if pools is None or pools.proxied:  # a test's transport, or a proxy in the way
            resp = await self._request("GET", httpx.URL(endpoint, query=query))
            return resp.content, resp.headers.get(COUNTER_HEADER), resp.headers.get("date")
        plain = pools.plain(endpoint)
        # The target put together here: an httpx.URL per page parsed and re-quoted the whole URL
        # (~9 % of the daemon's CPU in a hosted tick, py-spy). `query` is percent-encoded ASCII.
        target = endpoint.raw_path + b"?" + query
        for attempt in range(max(self.retries, RATE_RETRIES) + 1):
            try:
                async with self._sending("list", "GET", endpoint.path) as sent_at:
                    status, headers, body = await plain.get(target, self._get_headers, self._get_timeout)
            except PlainHTTPError as exc:
                url = f"{endpoint}?{query.decode('ascii')}"
                raise Unreachable(f"GET {url}: {exc}") from exc
            encoding = counter = date = None
            limits: dict[str, str] = {}
            for name, value in headers:
                name = name.lower()
                if name == b"content-encoding":
                    encoding = value.strip().lower()
                elif name == COUNTER_HEADER_BYTES:
                    counter = value.decode("latin-1")
                elif name == b"date":
                    date = value.decode("latin-1")
                elif name.startswith(b"anthropic-ratelimit-requests-"):
                    limits[name.decode("latin-1")] = value.decode("latin-1")
            if limits:
                self._heard("GET", limits.get, sent_at)
            if encoding not in (None, b"identity", b"gzip"):
                raise Unreachable(f"GET {endpoint}: answer in an encoding it was not asked for: {encoding!r}")
            if encoding == b"gzip":
                try:
                    body = zlib.decompress(body, wbits=31)
                except zlib.error as exc:
                    raise Unreachable(f"GET {endpoint}: gzip answer does not decode") from exc
            if status < 400:
                self._widen()
                return body, counter, date
            resp = httpx.Response(
                status, headers=headers, content=body, request=httpx.Request("GET", endpoint)
            )
            wait = self._retry_wait(resp, attempt, sent_at)
            if wait is None:
                raise _api_error(resp)
            await trio.sleep(wait)
        raise AssertionError("unreachable")  # the last attempt returns or raises

    def _retry_wait(self, resp: httpx.Response, attempt: int, sent_at: float) -> float | None:
        """How long to wait before sending a refused request again, or None: fail it now.
        Only a retryable status with a short retry-after: a bare 5xx may be a service that is
        down, and a tick that fails then waits an interval (SEMANTICS.md#d-unreachable) rather than hammering it.
        Retrying a write is safe: creates answer 409 when they had landed, updates and deletes
        carry the sha precondition, and a 409 to a repeated create or update that finds our own
        write in the store is taken as its answer (`_own_write`). A 503 `change_outcome_unknown`
        asks for the same request again: it is sent again at once (after RESEND_WAIT), retry-after or not."""
        err = _api_error(resp)
        if not err.retryable:  # errors.ApiError.retryable: 408, 429, 5xx, the retryable codes
            return None
        wait = retry_after(resp)
        if resp.status_code == 429:
            self.pacer.limited(sent_at, trio.current_time(), class_of(resp.request.method))
        if wait is not None and (resp.status_code == 429 or wait > 0):
            self.budget.hold(wait)  # every request of the client waits it out, then they go one at a
            self.slots.total_tokens = 1  # time, widening per answer: all at once would meet one token
        if wait is None and error_code(err.body) in RESEND_CODES:
            wait = RESEND_WAIT * (attempt + 1)
        most = RATE_RETRIES if resp.status_code == 429 and self.retries else self.retries
        if attempt >= most or wait is None or wait > self.retry_within:
            return None
        self.retried += 1
        return wait

    async def _json(self, method: str, url: str, **kw: Any) -> Any:
        return _body(await self._request(method, url, **kw), method, url)

    async def call(
        self, method: str, path: str, *, beta: str | None = None, json: Any = None, params: Any = None
    ) -> Any:
        """One call of the API that has no method here (the admin commands',
        memfs/session/admin_commands.py), sent and retried as every request; its JSON answer.
        `beta`: that beta header in place of the memory stores'."""
        headers = {BETA_HEADER: beta} if beta else None
        return await self._json(method, path, json=json, params=params, headers=headers)

    # -- sessions ---------------------------------------------------------------------------
    async def get_session(self, session_id: str) -> dict[str, Any]:
        """The session; and, from its answer's headers, whether the service has counters
        (`offers_counters`)."""
        url = session_path(session_id)
        resp = await self._request("GET", url, headers={BETA_HEADER: SESSIONS_BETA})
        self.offers_counters = EXTENSIONS_HEADER in resp.headers
        return _body(resp, "GET", url)

    # -- counter extension ------------------------------------------------------------------
    async def counters(self, store_ids: Iterable[str]) -> dict[str, int] | None:
        """Counters of several stores in one request; None when the service has no counter (SEMANTICS.md#d-no-counter)."""
        ids = list(store_ids)
        try:
            body = await self._json("GET", COUNTERS_PATH, params={"ids": ",".join(ids)})
        except ApiError as exc:
            if exc.status in (404, 405):
                return None
            raise
        return {item["memory_store_id"]: int(item["counter"]) for item in body["data"]}

    async def watch(self, known: dict[str, int], wait: float = 30.0) -> tuple[bool, dict[str, int]] | None:
        """Held until a store's counter differs from `known` (changed True) or `wait` seconds
        (≤ 60) pass (False), with the stores' current counters; None when the service has no watch."""
        params = {"known": ",".join(f"{sid}:{n}" for sid, n in known.items()), "wait": f"{wait:g}"}
        # The read timeout must outlast the hold; connect/write keep the client's own.
        timeout = httpx.Timeout(self._http.timeout.connect, read=wait + 10.0)
        try:
            body = await self._json("GET", WATCH_PATH, params=params, timeout=timeout)
        except ApiError as exc:
            # No watch here (a hosted-API-only service): no route. A 404 naming a store is raised.
            if exc.status == 405 or (exc.status == 404 and exc.message.startswith("no such endpoint")):
                return None
            raise
        counters = {item["memory_store_id"]: int(item["counter"]) for item in body["data"]}
        return body["status"] == "changed", counters

    async def changes(self, store_id: str, since: int) -> Changes | None:
        """Changes since a counter, with the content of as many as the service's budget holds
        (view=full: a service that does not know it answers without, and those are asked by
        id); None when the service has no feed."""
        try:
            body = await self._json("GET", changes_path(store_id), params={"since": since, "view": "full"})
        except ApiError as exc:
            # Only asked after `counters` worked; a 404 here means no feed: the caller lists.
            if exc.status in (404, 405):
                return None
            raise
        changes = [
            Change(
                memory_id=c["memory_id"],
                operation=c["operation"],
                path=c["path"],
                previous_path=c.get("previous_path"),
                sha=c.get("content_sha256"),
                size=c.get("content_size_bytes"),
                updated_at=c.get("updated_at"),
                content=c.get("content"),
            )
            for c in body.get("changes", [])
        ]
        return Changes(counter=int(body["counter"]), too_old=body.get("status") == "too_old", changes=changes)

    async def snapshot(self, store_id: str, sink: SnapshotSink) -> int | None:
        """Every memory with content at one counter, in one streamed request, handed to `sink` as
        the lines arrive; returns the counter, or None without the endpoint.

        The stream is read in chunks on this task; a worker thread parses them and calls
        `sink.put` with each chunk's memories (one chunk at a time, in order), while the next
        chunk is received: at most SNAPSHOT_CHUNKS_AHEAD chunks of SNAPSHOT_CHUNK_BYTES wait, so a
        store's content is never whole in memory. A stream that breaks or ends early raises
        Unreachable: what `sink` got by then is part of a store, which the caller must not show."""
        url = snapshot_path(store_id)
        for attempt in range(max(self.retries, RATE_RETRIES) + 1):
            wait = None
            try:
                async with (
                    self._sending("snapshot", "GET", url) as sent_at,
                    self._http.stream("GET", url) as resp,
                ):
                    self._heard("GET", resp.headers.get, sent_at)
                    if resp.status_code in (404, 405):
                        # No snapshot endpoint (or no such store: the listing that follows says so).
                        await resp.aread()
                        return None
                    if resp.status_code >= 400:
                        await resp.aread()
                        wait = self._retry_wait(resp, attempt, sent_at)
                        if wait is None:
                            raise _api_error(resp)
                    else:
                        return await stream_snapshot(url, resp, sink)
            except httpx.HTTPError as exc:
                raise Unreachable(f"GET {url}{self._via}: {_describe(exc)}") from exc
            await trio.sleep(wait)
        raise AssertionError("unreachable")  # the last attempt returns or raises

    # -- memories ---------------------------------------------------------------------------
    async def list_memories(
        self,
        store_id: str,
        *,
        view: str = "basic",
        known: dict[str, int] | None = None,
        on_page: Callable[[list[dict[str, Any]]], Awaitable[None]] | None = None,
    ) -> Listing:
        """Every memory of a store, read as concurrent listings by path prefix (SEMANTICS.md#d-no-counter).

        A cursor-paged listing is a chain of round trips; a store's tree is not. A store nothing
        is known of (`known` empty or "/" 0) is probed, then paged a top-level prefix at a time:
        see `whole`. Otherwise
        a prefix is first asked whole (depth 0): one page holds a small subtree. A larger one is split: its
        direct children page by page (depth 1), each sub-prefix in that answer listed the same
        way, concurrently. `known` (prefix -> how many memories the caller last saw under it,
        "/" included) steers that: a prefix known to fit in two pages is paged whole (splitting
        it would cost as many round trips and more requests), a larger one is split at once,
        and its known sub-prefixes are asked at once, without waiting for the page that names
        them. Requests: about one per `limit` memories plus one or two per large prefix, never
        one per memory; in flight at once: at most `concurrency`. `on_page`, when given, is
        awaited with each page's items as it arrives (before that prefix's next page is asked):
        a download stores a page's content while the other pages are on their way.
        The result is not one snapshot without a counter: see `Listing`."""
        # A basic listing compares each page with the store's last one (`LastListing`); a
        # full-view page (content) is never kept.
        basic = view == "basic"
        last = self._last_listings.get(store_id) if basic else None
        walk = ListingWalk(
            self._get, self.base_url, store_id, view, known or {}, on_page, last, self._one_chain
        )
        self._walks += 1
        try:
            async with trio.open_nursery() as nursery:
                walk.start("/", nursery)
        except BaseExceptionGroup as group:  # the first failure, as itself: callers catch it by type
            raise first_failure(group) from None
        finally:
            self._walks -= 1
            self.pages_parsed += walk.fresh  # pages parsed anew, not taken as the last listing had them
        listing = walk.listing
        if last is not None and walk.unchanged():
            listing.items = last.items
        else:
            listing.items.sort(key=itemgetter("path"))  # the API's order: by path
        if basic:
            self._keep_listing(store_id, LastListing(walk.used, listing.items))
        return listing

    async def warm(self, connections: int = WARM_CONNECTIONS) -> None:
        """Open the listing pages' first connections now (transport.py `Pools.plain`), while the
        caller waits for something else: a mount's daemon, while the early download's helper
        reads the session and the version feed, so that the first download's first pages do not
        each wait for a handshake (one round trip for TCP, one more for TLS). Nothing through a
        proxy or a test's transport (httpx opens those). Never raises: a connection that cannot
        be opened is the GET's to report."""
        pools = self._pools
        if pools is None or pools.proxied:
            return
        with contextlib.suppress(Exception):
            await pools.plain(httpx.URL(self.base_url)).warm(connections, self._get_timeout)

    def _one_chain(self, round_trip: float) -> bool:
        """Whether a store nothing is known of is paged as one cursor chain (`ListingWalk.whole`):
        when the service's read limit is known and the stores listed at once, one chain each,
        keep it with room to spare (each chain sends a page per `round_trip`, the probe's)."""
        rate = self.pacer.known_rate("read")
        return rate is not None and self._walks >= ONE_CHAIN_ROOM * rate * round_trip

    def _keep_listing(self, store_id: str, kept: LastListing) -> None:
        keep_listing(self._last_listings, store_id, kept)  # memfs/client/listing.py

    async def list_versions(
        self, store_id: str, params: dict[str, str | int]
    ) -> tuple[dict[str, Any], str | None]:
        """One page of a store's version feed (newest first: `{data, next_page}`, SEMANTICS.md#d-no-counter),
        and the answer's `Date` header (the service's clock, for where the feed was read to)."""
        url = versions_path(store_id)
        resp = await self._request("GET", url, params=params)
        return _body(resp, "GET", url), resp.headers.get("date")

    async def get_memory(self, store_id: str, memory_id: str) -> dict[str, Any]:
        return await self._json("GET", memory_path(store_id, memory_id), params={"view": "full"})

    async def get_store(self, store_id: str) -> dict[str, Any]:
        """The store object: its `archived_at` (read when a write was refused, SEMANTICS.md#d-archived)."""
        return await self._json("GET", store_path(store_id))

    async def create_memory(
        self, store_id: str, path: str, content: str, *, reason: WriteReason | None = None
    ) -> dict[str, Any]:
        """`reason`: why the mount writes it, in WRITE_REASON_HEADER (None: an agent's own change)."""
        body = {"path": path, "content": content}
        try:
            return await self._json("POST", memories_path(store_id), json=body, headers=_reason(reason))
        except ApiError as exc:
            err = exc.body.get("error") if isinstance(exc.body, dict) else None
            err = err if isinstance(err, dict) else {}
            mid = err.get("conflicting_memory_id")
            if exc.status == 409 and exc.repeated and err.get("conflicting_path") == path and mid:
                own = await self._own_write(store_id, str(mid), path, content)
                if own is not None:
                    return own
            raise

    async def update_memory(
        self,
        store_id: str,
        memory_id: str,
        *,
        expected_sha: str,
        content: str | None = None,
        path: str | None = None,
        reason: WriteReason | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"precondition": {"type": "content_sha256", "content_sha256": expected_sha}}
        if content is not None:
            body["content"] = content
        if path is not None:
            body["path"] = path
        try:
            return await self._json(
                "POST", memory_path(store_id, memory_id), json=body, headers=_reason(reason)
            )
        except ApiError as exc:
            # Only with a path: a content-only update does not say where the memory was, so a
            # memory renamed by someone else since our first attempt would be taken as ours, and its
            # new path booked as our baseline (the engine's next listing settles that case right).
            if exc.status == 409 and exc.repeated and exc.type == "memory_precondition_failed_error" and path:
                sha = None if content is not None else expected_sha
                own = await self._own_write(store_id, memory_id, path, content, sha=sha)
                if own is not None:
                    return own
            raise

    async def _own_write(
        self, store_id: str, memory_id: str, path: str, content: str | None, *, sha: str | None = None
    ) -> dict[str, Any] | None:
        """After a 409 to a request this client sent more than once: the memory, when it holds
        exactly what the request asked for (its path, and its content by sha: `content`'s, or `sha`
        for a rename that kept the content) - our own first
        attempt landed and only its answer was lost (a 503 `change_outcome_unknown`, a gateway's
        5xx after the write). None: someone else's change, and the 409 stands. The sync engine
        settles the same case at its next listing (a remote sha equal to what was sent is our
        own write, SEMANTICS.md#d-three-way); here it costs one GET and no tick."""
        try:
            m = await self._json("GET", memory_path(store_id, memory_id), params={"view": "basic"})
        except ApiError:
            return None
        if content is not None:
            sha = hashlib.sha256(content.encode()).hexdigest()
        if not isinstance(m, dict) or m.get("path") != path or m.get("content_sha256") != sha:
            return None
        return m

    async def write_batch(self, store_id: str, ops: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """Many writes to one store in one request (memfs's batch extension, docs/API.md): one
        result per operation, in order, each a memory, a `memory_deleted` or an `error` with the
        status its single request would have had. None when the service has no batch route (an
        older memfs or the hosted API). `ops` must fit one request (`batch_chunks`)."""
        body = orjson.dumps({"operations": ops})
        try:
            answer = await self._json(
                "POST",
                batch_path(store_id),
                content=body,
                headers={"content-type": "application/json"},
            )
        except ApiError as exc:
            # No route: 405, or a 404 that names no store ("no such endpoint"; the hosted API's own).
            if exc.status == 405 or (exc.status == 404 and "memory store" not in exc.message):
                return None
            raise
        results = answer.get("results") if isinstance(answer, dict) else None
        if not isinstance(results, list) or len(results) != len(ops):
            raise Unreachable(f"POST {batch_path(store_id)}: answer does not hold one result per operation")
        return results

    async def delete_memory(self, store_id: str, memory_id: str, *, expected_sha: str | None) -> None:
        params = {"expected_content_sha256": expected_sha} if expected_sha else None
        await self._request("DELETE", memory_path(store_id, memory_id), params=params)

    # -- stores (a store mounted without a session: memfs/session/store_mount.py) ----------------
    async def list_stores(self, *, max_pages: int = 100) -> list[dict[str, Any]]:
        """Every store that is not archived (at most `max_pages` pages of 100)."""
        stores: list[dict[str, Any]] = []
        page: str | None = None
        for _ in range(max_pages):
            params: dict[str, Any] = {"limit": 100}
            if page:
                params["page"] = page
            body = await self._json("GET", STORES_PATH, params=params)
            stores.extend(body.get("data") or [])
            page = body.get("next_page")
            if not page:
                break
        return stores

    async def create_store(self, name: str) -> dict[str, Any]:
        return await self._json("POST", STORES_PATH, json={"name": name})


def _reason(reason: WriteReason | None) -> dict[str, str] | None:
    """A write's WRITE_REASON_HEADER, if the mount gives it one."""
    return {WRITE_REASON_HEADER: reason} if reason else None


def _body(resp: httpx.Response, method: str, url: str) -> Any:
    try:
        return resp.json()
    except ValueError as exc:
        raise Unreachable(f"{method} {url}: answer is not JSON") from exc


def _describe(exc: BaseException) -> str:
    """`Type: message`; when httpx's own message is empty (a TLS failure under trio is a bare
    ConnectError), the first cause that says something, e.g. the certificate verify failure."""
    if str(exc):
        return f"{type(exc).__name__}: {exc}"
    cause = exc.__cause__ or exc.__context__
    for _ in range(10):  # bounded: a cause chain is short, never trusted to end
        if cause is None:
            break
        if str(cause):
            return f"{type(exc).__name__}: {type(cause).__name__}: {cause}"
        cause = cause.__cause__ or cause.__context__
    return f"{type(exc).__name__}: (no details)"


def _api_error(resp: httpx.Response) -> ApiError:
    try:
        body = resp.json()
        err = body.get("error", {}) if isinstance(body, dict) else {}
        type_, message = str(err.get("type", "error")), str(err.get("message", ""))
    except ValueError:
        body, type_, message = None, "error", resp.text[:200]
    return ApiError(resp.status_code, type_, message, body, retry_after(resp))
