"""Which base URLs the mount's early download serves itself (memfs/session/early_fetch.py): only
plain http, where it does what the client does; TLS, URL credentials and odd URLs start the old way."""

from __future__ import annotations

import pytest

from memfs.session.early_fetch import early_target


@pytest.mark.parametrize(
    "url, target",
    [
        ("http://127.0.0.1:8470", ("127.0.0.1", 8470, "")),
        ("http://127.0.0.1:8470/", ("127.0.0.1", 8470, "")),
        ("http://memfs.internal/api/", ("memfs.internal", 80, "/api")),
        ("http://[::1]:9000", ("::1", 9000, "")),
        ("https://127.0.0.1:8470", None),  # TLS: the client's verification is not repeated
        ("http://user:pw@127.0.0.1:8470", None),  # httpx would send these as basic auth
        ("http://127.0.0.1:8470/?x=1", None),
        ("http://127.0.0.1:8470/a%20b", None),
        ("http://127.0.0.1:99999", None),
        ("127.0.0.1:8470", None),
    ],
)
def test_early_target(url, target):
    assert early_target(url) == target
