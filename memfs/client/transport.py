"""The store client's connections (memfs/client/api.py `StoreClient`): several small httpx pools, each
reached directly or through the environment's proxy (memfs/client/egress.py), and the listing pages'
plain GET beside them (memfs/client/plain_get.py)."""

from __future__ import annotations

import ssl
from typing import Any

import httpx

from memfs.client.egress import ProxySettingError, proxy_for, redact
from memfs.client.plain_get import PlainGet

POOL_SHARD = 1  # connections per pool (see `Pools`)


class Pools(httpx.AsyncBaseTransport):
    """Several small connection pools in place of one large one; each request goes to the pool
    with the fewest requests in flight.

    httpcore's pool (1.0.x) re-examines every connection against every other one each time a
    request starts or ends (`_assign_requests_to_connections`: a list of all connections per idle
    connection), O(connections²) per event: with one pool of 32 the daemon spent ~2.5 s of CPU
    on it for the 216 pages of an 8-store hosted listing (cProfile), on the thread that also
    serves FUSE. Pools of 8 cost a sixteenth of that per event, and still ~0.2 s of CPU per
    8-store listing (0.6 s in all, 0.35-0.45 s with pools of 1: PERFORMANCE.md, network section).
    So each pool holds one connection: the requests in flight are bounded by the client's slots
    (`concurrency`, as many as there are pools), so the least busy pool is always an idle one
    and no request waits in a pool; the connections are the same. The listing pages take
    connections of their own, past httpx and httpcore (`plain`, memfs/client/plain_get.py), under the
    same slots, when they go straight to the service.

    Through a proxy (`proxy`, the environment's: memfs/client/egress.py) each pool is the same pool of
    one connection, to the proxy: for an https:// service a tunnel (CONNECT) with TLS to the
    service inside it, for an http:// one requests forwarded in absolute form; the listing pages
    then take these pools too (`proxied`). httpx reads HTTP(S)_PROXY itself only for a transport
    it builds, never for one given to it, so the proxy is given to each pool here."""

    def __init__(
        self, connections: int, *, verify: bool, proxy: str | None = None, refused: str | None = None
    ):
        n = max(1, -(-connections // POOL_SHARD))
        per = -(-connections // n)
        self._limits = httpx.Limits(max_connections=per, max_keepalive_connections=per)
        self._verify = verify
        self._proxy = proxy
        self.proxy = proxy  # the proxy every request goes through, if any
        self._refused = refused  # why the environment's proxy setting cannot be used, if it cannot
        # A proxy in the way (or a setting that fails every request): no plain GET past it.
        self.proxied = proxy is not None or refused is not None
        # Made at the first request: the first transport imports httpcore, h11 and h2 (~0.05 s),
        # which a mount whose start the early download served needs only after it is ready.
        self._pools: list[httpx.AsyncHTTPTransport] = []
        self._busy = [0] * n
        self._plain: PlainGet | None = None
        self._ssl: ssl.SSLContext | None = None

    def _tls(self) -> ssl.SSLContext | None:
        """What the transports and the plain GET verify with: one SSL context for them all, made
        once (each transport given `verify=True` loaded the CA bundle again, one per pool), or
        None where no TLS is spoken (an http:// service, through no https:// proxy; `verify` is
        whether the base URL is https). httpx's own (`SSL_CERT_FILE`, `SSL_CERT_DIR` too);
        httpcore sets the ALPN protocols (http/1.1) on it at each connection, as the plain GET
        does."""
        if not (self._verify or (self._proxy or "").startswith("https:")):
            return None
        if self._ssl is None:
            self._ssl = httpx.create_ssl_context(verify=True)
            self._ssl.set_alpn_protocols(["http/1.1"])
        return self._ssl

    def _transports(self) -> list[httpx.AsyncHTTPTransport]:
        if not self._pools:
            if self._refused:  # every request fails with it: the mount says why it reaches nothing
                raise httpx.ProxyError(self._refused)
            tls = self._tls()
            verify: ssl.SSLContext | bool = tls if tls is not None else False
            proxy = None
            if self._proxy:  # an https:// proxy's own TLS is verified with the same context
                secure = self._proxy.startswith("https:")
                proxy = httpx.Proxy(self._proxy, ssl_context=tls if secure else None)
            try:
                self._pools = [
                    httpx.AsyncHTTPTransport(verify=verify, limits=self._limits, proxy=proxy)
                    for _ in self._busy
                ]
            except ImportError as exc:  # a socks5:// proxy without httpx's optional `socksio`
                raise httpx.ProxyError(
                    f"the proxy {redact(self._proxy or '')} cannot be used: {exc}"
                ) from exc
        return self._pools

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self._transports()
        i = min(range(len(self._pools)), key=self._busy.__getitem__)
        self._busy[i] += 1
        try:
            resp = await self._pools[i].handle_async_request(request)
        except BaseException:
            self._busy[i] -= 1
            raise
        resp.stream = _Counted(resp.stream, self._busy, i)
        return resp

    def plain(self, url: httpx.URL) -> PlainGet:
        """The listing pages' GET (`StoreClient._get`, memfs/client/plain_get.py): connections of its
        own, as many kept as the client has slots, to the one origin the client talks to. Selected
        because it earns its place: 4 stores' full-view listings (432 pages of ~300 KB, hosted
        path, in process, same run) took 0.29 s of CPU through it and 0.89 s through these pools
        (docs/PERFORMANCE.md, "The early download on httpx, and the listing's plain GET beside it")."""
        if self._plain is None:
            context = self._tls() if url.scheme == "https" else None
            port = url.port or (443 if url.scheme == "https" else 80)
            self._plain = PlainGet(url.scheme, url.host, port, keep=len(self._busy), ssl_context=context)
        return self._plain

    async def aclose(self) -> None:
        for pool in self._pools:
            await pool.aclose()
        if self._plain is not None:
            await self._plain.aclose()


def pools_for(base_url: str, connections: int) -> Pools:
    """The pools every request memfs sends to a store service goes through (the mount's and the
    commands' `StoreClient`, the relay's upstream): through the environment's proxy for
    `base_url` if it names one (memfs/client/egress.py; a setting that cannot be used fails every
    request, saying why), TLS verified with httpx's context (`SSL_CERT_FILE`, `SSL_CERT_DIR`) for
    an https:// service only: an http:// one never does TLS (redirects are not followed), and
    loading the CA bundle costs ~0.25 s of every mount's start."""
    refused = proxy = None
    try:
        proxy = proxy_for(base_url)
    except ProxySettingError as exc:
        refused = str(exc)
    return Pools(connections, verify=base_url.startswith("https:"), proxy=proxy, refused=refused)


class _Counted(httpx.AsyncByteStream):
    """A response body that gives its pool's in-flight count back when it is closed."""

    def __init__(self, stream: Any, busy: list[int], i: int):
        self._stream, self._busy, self._i = stream, busy, i

    async def __aiter__(self):
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            if self._i >= 0:
                self._busy[self._i] -= 1
                self._i = -1
