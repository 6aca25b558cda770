"""The relay's requests to the upstream from its event loop: what passes through, the writes, and
the access checks, sent with the caller's own credential (the poller, poller.py, has its own
store clients). Sent through the store client's pools (memfs/client/transport.py `pools_for`), so
the environment's proxy and CA settings apply as they do to every request memfs sends to a store
service. Counted by kind for `/v1/relay_status` and the bench.

What reaches the upstream is the caller's request, less what is the relay's hop or says who the
caller is to the relay's side: hop-by-hop headers (with those the `Connection` header names),
cookies and the forwarding headers (`Forwarded`, `X-Forwarded-*`, `X-Real-IP`). The path is sent
as the relay routed it (percent-encoded again from the decoded path it read), so the upstream reads
the same segments; the base URL carries no credential (`url_problem`)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, replace
from urllib.parse import quote, urlsplit

import httpx

from memfs.client.transport import pools_for
from memfs.protocol import API_KEY_HEADER, REQUEST_ID_HEADER

# Hop-by-hop headers (RFC 9110, section 7.6.1) and those httpx sets itself are not copied either way.
_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"host",
        b"content-length",
        b"accept-encoding",
    }
)
_HOP_OUT = _HOP | {b"content-encoding", b"date", b"server"}
# Who the caller is on the relay's side: not the upstream's to read (nor to be spoofed into it).
_IDENTITY = frozenset({b"cookie", b"forwarded", b"x-real-ip", b"proxy-connection"})
_PATH_SAFE = "/:@!$&'()*+,;=~"
_CREDENTIAL = frozenset({b"authorization", API_KEY_HEADER.encode()})

TIMEOUT_S = 60.0  # a write's answer may take as long as the upstream lets a request run
CONNECT_TIMEOUT_S = 5.0
CONNECTIONS = 64  # to the upstream, kept open between requests


@dataclass
class Answer:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes

    def header(self, name: str) -> str | None:
        key = name.lower().encode()
        for k, v in self.headers:
            if k.lower() == key:
                return v.decode("latin-1")
        return None


# The error type a status has in the API's error body (docs/API.md, "Requests"); others: api_error.
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    409: "conflict_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def with_json_error(answer: Answer) -> Answer:
    """`answer`, or when it is an error without a JSON body (a gateway's HTML page, an empty 502)
    the same status and headers with the API's error body: every answer of a memory route is JSON
    (@anthropic-ai/sdk 1.17 throws on any memory response that is not)."""
    if answer.status < 400 or "json" in (answer.header("content-type") or "").lower():
        return answer
    error = {
        "type": _ERROR_TYPES.get(answer.status, "api_error"),
        "message": f"the relay's upstream answered {answer.status} without a JSON body",
    }
    body = {"type": "error", "error": error, "request_id": answer.header(REQUEST_ID_HEADER) or ""}
    keep = [(k, v) for k, v in answer.headers if k.lower() not in (b"content-type", b"content-length")]
    return replace(
        answer, headers=[*keep, (b"content-type", b"application/json")], body=json.dumps(body).encode()
    )


class UpstreamUnreachable(Exception):
    pass


def url_problem(url: str) -> str | None:
    """Why `--upstream` cannot be used, or None: an http(s) URL with a host, and no credential,
    query or fragment in it (httpx would send a user:password as every request's Authorization,
    in place of the caller's, and the URL is logged and shown by /v1/relay_status)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError for a bad port
    except ValueError as e:
        return f"--upstream is not a URL ({e})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "--upstream must be an http:// or https:// URL with a host"
    if "@" in parts.netloc:
        return "--upstream must not carry a user or password: the relay sends each caller's own credential"
    if parts.query or parts.fragment or url.rstrip("/").endswith(("?", "#")):
        return "--upstream must not have a query or fragment"
    if any(seg in (".", "..") for seg in parts.path.split("/")):
        return "--upstream must not have a '.' or '..' path segment"
    return None


def forwarded_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The caller's headers less hop-by-hop ones (and those its `Connection` names), cookies and
    the forwarding headers."""
    named: set[bytes] = set()
    for k, v in headers:
        if k.lower() == b"connection":
            named.update(t.strip().lower() for t in v.split(b",") if t.strip())
    named -= _CREDENTIAL  # the credential the relay checked is the one the upstream authenticates
    return [
        (k, v)
        for k, v in headers
        if (low := k.lower()) not in _HOP
        and low not in _IDENTITY
        and low not in named
        and not low.startswith(b"x-forwarded-")
    ]


class Upstream:
    def __init__(self, base_url: str, *, timeout: float = TIMEOUT_S):
        self.base_url = base_url.rstrip("/")
        self.sent: Counter[str] = Counter()  # kind -> requests sent
        self.limited = 0  # 429s the upstream answered
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout, connect=CONNECT_TIMEOUT_S),
            transport=pools_for(self.base_url, CONNECTIONS),
            follow_redirects=False,
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def send(
        self,
        kind: str,
        method: str,
        path: str,
        query: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes = b"",
    ) -> Answer:
        """One request as the caller made it (`path` decoded, as the ASGI scope has it; hop-by-hop
        and identity headers dropped); the answer whole."""
        url = httpx.URL(self.base_url + quote(path, safe=_PATH_SAFE), query=query)
        out = forwarded_headers(headers)
        self.sent[kind] += 1
        try:
            resp = await self._http.request(method, url, headers=out, content=body or None)
        except httpx.HTTPError as exc:
            raise UpstreamUnreachable(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        if resp.status_code == 429:
            self.limited += 1
        return Answer(
            resp.status_code,
            [(k, v) for k, v in resp.headers.raw if k.lower() not in _HOP_OUT],
            resp.content,
        )
