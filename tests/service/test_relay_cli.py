"""`memfs serve --upstream`'s refusals at start: each a one-line reason and exit 2, nothing served."""

from __future__ import annotations

import subprocess
import sys

import pytest

from memfs.service.database import open_storage
from memfs.service.mirror import Mirror

KEY = "test-admin-key-0123456789"


def serve(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "memfs", "serve", "--port", "0", "--admin-key", KEY, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--upstream", "ftp://example.com"), "--upstream must be an http:// or https:// URL"),
        (("--upstream", "http://127.0.0.1:9", "--hosted-api"), "--hosted-api does not go with --upstream"),
        (("--upstream", "http://127.0.0.1:9", "--console"), "--console does not go with --upstream"),
        (("--upstream", "http://127.0.0.1:9", "--poll-interval", "0"), "--poll-interval must be at least"),
        (("--upstream", "http://127.0.0.1:9", "--confirm-grace", "-1"), "--confirm-grace must be 0 or more"),
        (("--upstream", "http://127.0.0.1:9/?key=x"), "--upstream must not have a query"),
        (("--upstream", "http://127.0.0.1:9/v1/../admin"), "--upstream must not have a '.' or '..'"),
        (
            ("--upstream", "http://127.0.0.1:9", "--upstream-key-file", "/nonexistent/key"),
            "cannot read --upstream-key-file",
        ),
    ],
)
def test_bad_relay_flags_are_refused(tmp_path, args, said):
    r = serve("--db", str(tmp_path / "relay.db"), *args)
    assert r.returncode == 2 and said in r.stderr, r.stderr


def test_a_relay_does_not_take_a_services_database_nor_the_service_a_relays(tmp_path):
    service_db, cache_db = tmp_path / "store.db", tmp_path / "relay.db"
    s = open_storage(str(service_db))
    s.create_store("handbook", "", {})
    s.close()
    r = serve("--db", str(service_db), "--upstream", "http://127.0.0.1:9")
    assert r.returncode == 2 and "not a relay's cache" in r.stderr, r.stderr
    c = open_storage(str(cache_db))
    assert Mirror(c.backend).claim_database() is None
    c.close()
    r = serve("--db", str(cache_db))
    assert r.returncode == 2 and "is a relay's cache" in r.stderr, r.stderr


@pytest.mark.parametrize(
    "url", ["http://relay-user:hunter2-secret@127.0.0.1:9", "https://hunter2-secret@127.0.0.1:9/"]
)
def test_an_upstream_url_with_a_user_or_password_is_refused_and_not_repeated(tmp_path, url):
    # Before: the relay started, logged the password, showed it in /v1/relay_status and sent it
    # (as httpx does with a URL's userinfo) in place of every caller's own Authorization.
    r = serve("--db", str(tmp_path / "relay.db"), "--upstream", url, timeout=15)
    assert r.returncode == 2 and "must not carry a user or password" in r.stderr, r.stderr
    assert "hunter2" not in r.stderr + r.stdout
