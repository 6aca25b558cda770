"""Which proxy, if any, a request to the store goes through: the environment's, read as every
Python HTTP client reads it (docs/SEMANTICS.md#network).

A sandbox whose egress goes through a forward proxy names it in `HTTPS_PROXY`/`HTTP_PROXY` (or
`ALL_PROXY`), lower case or upper case, and lists in `NO_PROXY` the hosts reached directly. The
client's pools (memfs/client/api.py) build their httpx transports with the proxy this module names:
a transport given to httpx by hand reads nothing from the environment itself, so without this the
mount would ignore the proxy and reach nothing (the mount's early download and the relay's
upstream go through the same pools). The standard library's reading is the one used (`urllib.request.getproxies` and
`proxy_bypass`: lower-case names win over upper-case ones, `NO_PROXY` entries match a host, a
host:port, or a domain and its subdomains, `*` matches every host), so the mount agrees with
`urllib`, `requests` and `pip` on the same environment. The CA settings (`SSL_CERT_FILE`,
`SSL_CERT_DIR`) are read where the SSL context is made (httpx's `create_ssl_context`).

Imports only the standard library.
"""

from __future__ import annotations

import urllib.request
from urllib.parse import urlsplit

# The proxy schemes httpx speaks: plain HTTP (CONNECT for an https store), TLS to the proxy, and
# SOCKS5 (which needs httpx's optional `socksio`).
PROXY_SCHEMES = ("http", "https", "socks5", "socks5h")


class ProxySettingError(ValueError):
    """The environment names a proxy the client cannot use (an unknown scheme)."""


def proxy_for(url: str) -> str | None:
    """The proxy URL requests to `url` go through, or None for a direct connection.

    `<scheme>_proxy` for the URL's scheme, else `all_proxy`, unless `no_proxy` names the URL's
    host. A proxy given without a scheme (`proxy.corp:3128`) is an HTTP proxy, as curl and httpx
    read it."""
    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        return None
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy:
        return None
    # proxy_bypass takes "host" or "host:port" and matches NO_PROXY against both.
    where = host if parts.port is None else f"{host}:{parts.port}"
    if urllib.request.proxy_bypass(where):
        return None
    if "://" not in proxy:
        proxy = "http://" + proxy
    scheme = urlsplit(proxy).scheme.lower()
    if scheme not in PROXY_SCHEMES:
        raise ProxySettingError(
            f"the proxy {redact(proxy)} for {parts.scheme}:// has the scheme {scheme!r};"
            f" memfs speaks {', '.join(PROXY_SCHEMES)}"
        )
    return proxy


def redact(proxy: str) -> str:
    """The proxy URL without a password, for messages and logs."""
    parts = urlsplit(proxy)
    if parts.password is None:
        return proxy
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return parts._replace(netloc=netloc).geturl()
