"""Which proxy the mount's requests go through (memfs/client/egress.py, SEMANTICS.md#network): the
environment's, read as urllib, requests and pip read it. The mount through a real proxy is
tests/e2e/test_proxy.py."""

from __future__ import annotations

import importlib.util
import os

import pytest

from memfs.client.egress import ProxySettingError, proxy_for, redact


@pytest.fixture(autouse=True)
def no_proxy_env(monkeypatch):
    """Only what a test sets: the machine's own proxy settings, if any, are not part of it."""
    for name in list(os.environ):
        if name.lower().endswith("_proxy") or name == "REQUEST_METHOD":
            monkeypatch.delenv(name)
    return monkeypatch


def test_no_proxy_set_is_a_direct_connection():
    assert proxy_for("https://api.example.com") is None
    assert proxy_for("http://127.0.0.1:8470") is None


def test_the_proxy_for_the_urls_scheme(no_proxy_env):
    no_proxy_env.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    assert proxy_for("https://api.example.com") == "http://proxy.corp:3128"
    assert proxy_for("http://api.example.com") is None  # HTTPS_PROXY is for https:// only
    no_proxy_env.setenv("HTTP_PROXY", "http://other.corp:8080")
    assert proxy_for("http://api.example.com:8470/v1") == "http://other.corp:8080"


def test_all_proxy_when_the_scheme_has_none(no_proxy_env):
    no_proxy_env.setenv("ALL_PROXY", "socks5h://127.0.0.1:1080")
    assert proxy_for("https://api.example.com") == "socks5h://127.0.0.1:1080"
    no_proxy_env.setenv("https_proxy", "http://proxy.corp:3128")
    assert proxy_for("https://api.example.com") == "http://proxy.corp:3128"


def test_lower_case_wins_over_upper_case(no_proxy_env):
    no_proxy_env.setenv("HTTPS_PROXY", "http://upper:1")
    no_proxy_env.setenv("https_proxy", "http://lower:2")
    assert proxy_for("https://api.example.com") == "http://lower:2"
    no_proxy_env.setenv("https_proxy", "")  # an empty lower-case setting switches it off
    assert proxy_for("https://api.example.com") is None


@pytest.mark.parametrize(
    "no_proxy, url, direct",
    [
        ("api.example.com", "https://api.example.com", True),
        ("example.com", "https://api.example.com", True),  # a domain covers its subdomains
        (".example.com", "https://api.example.com", True),
        ("example.com", "https://notexample.com", False),
        ("localhost, 127.0.0.1", "http://127.0.0.1:8470", True),  # a list, spaces allowed
        ("127.0.0.1:8470", "http://127.0.0.1:8470", True),  # host:port
        ("127.0.0.1:9999", "http://127.0.0.1:8470", False),
        ("*", "https://anything.example", True),
        ("", "https://api.example.com", False),
    ],
)
def test_no_proxy(no_proxy_env, no_proxy, url, direct):
    no_proxy_env.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    no_proxy_env.setenv("HTTP_PROXY", "http://proxy.corp:3128")
    no_proxy_env.setenv("NO_PROXY", no_proxy)
    assert proxy_for(url) == (None if direct else "http://proxy.corp:3128")
    no_proxy_env.delenv("NO_PROXY")
    no_proxy_env.setenv("no_proxy", no_proxy)  # lower case too
    assert proxy_for(url) == (None if direct else "http://proxy.corp:3128")


def test_a_proxy_without_a_scheme_is_an_http_proxy(no_proxy_env):
    no_proxy_env.setenv("HTTPS_PROXY", "proxy.corp:3128")
    assert proxy_for("https://api.example.com") == "http://proxy.corp:3128"


def test_an_unknown_proxy_scheme_is_refused_with_its_name_and_no_password(no_proxy_env):
    no_proxy_env.setenv("HTTPS_PROXY", "ftp://me:secret@proxy.corp:21")
    with pytest.raises(ProxySettingError) as err:
        proxy_for("https://api.example.com")
    assert "ftp" in str(err.value) and "secret" not in str(err.value)


def test_redact():
    assert redact("http://me:secret@proxy.corp:3128") == "http://me:***@proxy.corp:3128"
    assert redact("http://proxy.corp:3128") == "http://proxy.corp:3128"


@pytest.mark.trio
@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "setting, says",
    [
        ("ftp://me:secret@proxy.corp:21", "'ftp'"),  # refused by memfs/client/egress.py
        ("socks5://127.0.0.1:9", "socksio"),  # httpx's optional package, not installed here
    ],
)
async def test_a_proxy_setting_that_cannot_be_used_fails_every_request_saying_why(
    no_proxy_env, setting, says
):
    from memfs.client import StoreClient, Unreachable

    if says == "socksio" and importlib.util.find_spec("socksio") is not None:
        pytest.skip("socksio is installed: the SOCKS proxy would be used")
    no_proxy_env.setenv("ALL_PROXY", setting)
    client = StoreClient("http://127.0.0.1:9", "tok", timeout=5)
    try:
        for _ in range(2):
            with pytest.raises(Unreachable) as err:
                await client.get_session("sesn_x")
            assert says in str(err.value) and "secret" not in str(err.value), err.value
    finally:
        await client.aclose()


def test_the_client_goes_through_the_proxy_it_names(no_proxy_env):
    from memfs.client import StoreClient

    no_proxy_env.setenv("HTTPS_PROXY", "http://me:secret@proxy.corp:3128")
    no_proxy_env.setenv("NO_PROXY", "internal.example")
    assert StoreClient("https://api.example.com", "tok").proxy == "http://me:secret@proxy.corp:3128"
    assert StoreClient("https://store.internal.example", "tok").proxy is None
    assert StoreClient("http://api.example.com", "tok").proxy is None
