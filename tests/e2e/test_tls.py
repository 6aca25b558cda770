"""`memfs mount` against `memfs serve --certfile/--keyfile` (https, a private CA).

The mount trusts a private CA the way every client here does (httpx, the official `anthropic`
client): `SSL_CERT_FILE` names the CA bundle. Without it the certificate is refused and the mount
fails clearly, leaving nothing mounted.
"""

from __future__ import annotations

import os

import pytest

from tests.support.sandbox import Sandbox, SandboxWorld, is_mounted
from tests.support.tls import make_cert
from tests.support.world import StoreSpec

SLUG = "tls-notes"


@pytest.mark.timeout(120)
@pytest.mark.expected_log(r"is unreachable: .*CERTIFICATE_VERIFY_FAILED|is unreachable: GET /v1/sessions")
def test_a_mount_over_https_with_a_private_ca(tmp_path, monkeypatch):
    ca, cert, key = make_cert(tmp_path / "tls")
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))  # for the world's admin helper and the sandboxes
    world = SandboxWorld.serving(tmp_path, [StoreSpec("TLS Notes", seed={"/hello.md": "over tls\n"})],
                                 extra_args=("--certfile", str(cert), "--keyfile", str(key)))  # fmt: skip
    try:
        assert world.service.base_url.startswith("https://")

        def sandbox(name: str, env_ca: str | None) -> Sandbox:
            box = world.sandbox(name)
            if env_ca is None:
                box.env.pop("SSL_CERT_FILE", None)
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
        assert world.api.contents(world.rw)["/new.md"] == "pushed over tls\n"
        box.unmount()
    finally:
        world.close()
