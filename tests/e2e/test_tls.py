"""`memfs mount` against `memfs serve --certfile/--keyfile` (https, a private CA).

The mount trusts a private CA the way every client here does (httpx, the official `anthropic`
client): `SSL_CERT_FILE` names the CA bundle. Without it the certificate is refused and the mount
fails clearly, leaving nothing mounted.
"""

from __future__ import annotations

import os

import pytest

from tests.support.api import Api
from tests.support.sandbox import Sandbox, is_mounted
from tests.support.service import ServiceProcess
from tests.support.tls import make_cert

SLUG = "tls-notes"


@pytest.mark.timeout(120)
@pytest.mark.expected_log(r"is unreachable: .*CERTIFICATE_VERIFY_FAILED|is unreachable: GET /v1/sessions")
def test_a_mount_over_https_with_a_private_ca(tmp_path, monkeypatch):
    ca, cert, key = make_cert(tmp_path / "tls")
    svc = ServiceProcess(tmp_path / "service",
                         extra_args=("--certfile", str(cert), "--keyfile", str(key)))  # fmt: skip
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))  # for the admin helper below and the sandboxes
    api = Api(svc.base_url, svc.admin_key)
    boxes: list[Sandbox] = []
    try:
        assert svc.base_url.startswith("https://")
        store = api.create_store("TLS Notes")
        api.create(store, "/hello.md", "over tls\n")
        session = api.create_session([(store, "read_write")])

        def sandbox(name: str, env_ca: str | None) -> Sandbox:
            box = Sandbox(tmp_path, name, base_url=svc.base_url, session_id=session["id"],
                          work_secret=session["work_secret"])  # fmt: skip
            if env_ca is None:
                box.env.pop("SSL_CERT_FILE", None)
            boxes.append(box)
            return box

        untrusting = sandbox("untrusting", None)
        proc = untrusting.mount(check=False)
        assert proc.returncode != 0
        assert "CERTIFICATE_VERIFY_FAILED" in proc.stderr, proc.stderr  # says why, not a bare ConnectError
        assert not is_mounted(untrusting.root) and os.listdir(untrusting.root) == []

        box = sandbox("trusting", str(ca))
        box.mount()
        top = box.root / SLUG
        assert (top / "hello.md").read_text() == "over tls\n"
        (top / "new.md").write_text("pushed over tls\n")
        assert box.sync()["ok"]
        assert api.contents(store)["/new.md"] == "pushed over tls\n"
        box.unmount()
    finally:
        for b in boxes:
            b.close()
        api.close()
        svc.stop()
