"""A real forward HTTP proxy for the tests: Debian's tinyproxy, run as an unprivileged user on a
free loopback port, with a log that says which requests went through it."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time

import pytest

from tests.support.mounts import User, open_dir

NOBODY = User(65534, 65534)
_REQUEST = re.compile(r"Request \(file descriptor \d+\): (\S+) (\S+) HTTP/")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Tinyproxy:
    """`url` is what HTTP(S)_PROXY names; `requests()` what came through it so far, as
    (method, target) pairs: `GET http://host:port/path` forwarded, `CONNECT host:port` tunnelled."""

    def __init__(self, *, user: User = NOBODY):
        binary = shutil.which("tinyproxy") or "/usr/bin/tinyproxy"
        if not os.path.exists(binary):
            pytest.skip("tinyproxy is not installed (scripts/test installs it)")
        self.dir = open_dir("memfs-tinyproxy-")  # pytest's tmp_path is root's only
        os.chmod(self.dir, 0o777)  # the proxy's user writes its log here
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = self.dir / "tinyproxy.log"
        conf = self.dir / "tinyproxy.conf"
        # No ConnectPort line: CONNECT is allowed to any port (the service's is a random one).
        conf.write_text(
            f'Port {self.port}\nListen 127.0.0.1\nTimeout 120\nLogFile "{self.log}"\nLogLevel Connect\n'
            "MaxClients 200\nAllow 127.0.0.1\nDisableViaHeader Yes\n"
        )
        out = open(self.dir / "tinyproxy.out", "wb")
        self.proc = subprocess.Popen(
            [*user.argv(), binary, "-d", "-c", str(conf)], stdout=out, stderr=subprocess.STDOUT
        )
        out.close()
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"tinyproxy did not start: {self.output()}") from None
                time.sleep(0.05)

    def output(self) -> str:
        text = (self.dir / "tinyproxy.out").read_text(errors="replace")
        return text + (self.log.read_text(errors="replace") if self.log.exists() else "")

    def requests(self) -> list[tuple[str, str]]:
        if not self.log.exists():
            return []
        return _REQUEST.findall(self.log.read_text(errors="replace"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
