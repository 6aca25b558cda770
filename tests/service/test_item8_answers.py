"""Smaller hardening findings, each answered as docs/API.md says: store names
that would not read as written are refused, and the console over TLS sends HSTS."""

from __future__ import annotations

import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.service import ServiceProcess
from tests.support.tls import make_cert

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("name", ["a\u2028forged line", "invoice\u202etxt.exe", "left\u2066to\u2069right"])
def test_store_names_with_line_separators_or_bidi_controls_are_400(service, name):
    store = service.create_store("plain name")["id"]
    with service.admin_client() as c:
        r = c.post("/v1/memory_stores", json={"name": name})
        assert r.status_code == 400 and "bidi controls" in r.json()["error"]["message"], r.text
        r = c.post(f"/v1/memory_stores/{store}", json={"name": name})
        assert r.status_code == 400, r.text
        assert [s["name"] for s in c.get("/v1/memory_stores").json()["data"]] == ["plain name"]


def test_the_console_over_tls_sends_hsts_and_over_http_does_not(tmp_path):
    ca, cert, key = make_cert(tmp_path / "tls")
    svc = ServiceProcess(
        tmp_path / "svc", console=True, extra_args=("--certfile", str(cert), "--keyfile", str(key))
    )
    plain = ServiceProcess(tmp_path / "plain", console=True)
    try:
        with httpx.Client(
            base_url=svc.base_url, verify=ssl.create_default_context(cafile=str(ca)), timeout=10
        ) as c:
            r = c.get("/console/login")
        assert r.status_code == 200 and r.headers["strict-transport-security"] == "max-age=31536000"
        with httpx.Client(base_url=plain.base_url, timeout=10) as c:
            r = c.get("/console/login")
        assert r.status_code == 200 and "strict-transport-security" not in r.headers
    finally:
        svc.stop()
        plain.stop()


def test_the_admin_key_flag_is_hidden_from_ps_and_a_short_key_is_refused(tmp_path):
    key = "flag-admin-key-" + "0123456789abcdef"
    svc = ServiceProcess(tmp_path / "svc", admin_key=key)
    try:
        cmdline = Path(f"/proc/{svc.proc.pid}/cmdline").read_bytes()
        assert b"--admin-key" in cmdline and key.encode() not in cmdline, cmdline
        assert svc.create_store("still the key")["name"] == "still the key"
    finally:
        svc.stop()
    short = subprocess.run(
        [sys.executable, "-m", "memfs", "serve", "--port", "0", "--db", str(tmp_path / "s.db"), "--admin-key", "k"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert short.returncode == 2 and "at least 16 characters" in short.stderr, short.stderr
    assert not (tmp_path / "s.db").exists()


def test_the_admin_key_can_come_from_a_file(tmp_path):
    key_file = tmp_path / "admin-key"
    key_file.write_text("file-admin-key-0123456789abcdef\n")
    svc = ServiceProcess(
        tmp_path / "svc",
        admin_key="file-admin-key-0123456789abcdef",
        extra_args=("--admin-key-file", str(key_file)),
    )
    try:
        assert svc.create_store("from the file")["name"] == "from the file"
    finally:
        svc.stop()
