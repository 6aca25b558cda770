"""A throwaway certificate authority and a server certificate for loopback, made with `openssl`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def make_cert(where: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1/localhost signed by it: (ca, cert, key)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    where.mkdir(parents=True, exist_ok=True)
    ca_key, ca, key, csr, cert = (
        where / n for n in ("ca.key", "ca.pem", "server.key", "server.csr", "server.pem")
    )
    ext = where / "server.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca),
            "-days", "2", "-subj", "/CN=memfs test CA")  # fmt: skip
    openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(key),
        "-out",
        str(csr),
        "-subj",
        "/CN=127.0.0.1",
    )
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
            "-out", str(cert), "-days", "2", "-extfile", str(ext))  # fmt: skip
    return ca, cert, key
