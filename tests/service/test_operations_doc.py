"""docs/OPERATIONS.md §8.2 exercised: its compose file checked against the code, its haproxy.cfg run.

The haproxy.cfg is taken out of the document's fenced block as written and run by a real haproxy
(Debian's; scripts/_env.sh installs it) in front of two `memfs serve` replicas on one throwaway
PostgreSQL database. The substitution rule, the only changes made to the document's text:

- the frontend's `bind :8470` becomes `bind 127.0.0.1:<free port>`;
- each `server NAME NAME:8470 …` line's address becomes `127.0.0.1:<that replica's port>`;
- haproxy runs with the `nofile` limit the compose file gives the `lb` service; where this machine's
  hard limit is lower (an unprivileged container cannot raise it), with that limit, and the global
  `maxconn` lowered to fit it (haproxy wants 2 descriptors a connection and refuses to start
  without them).

Every other line runs as written. The replicas are the compose file's `serve-N` services outside
Docker: docker/serve.Dockerfile's ENTRYPOINT followed by the compose `command`, with `MEMFS_DB` and
`MEMFS_ADMIN_KEY` in the environment (only `--host 127.0.0.1 --port <free>` added: later flags win).

Docker itself (and so `docker compose`) is not on this machine: the compose file's text is checked
against the code instead (flags, variables, image name, ports, health-check command and route).
"""

from __future__ import annotations

import base64
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import anthropic
import httpx
import pytest
import trio

from memfs.client import StoreClient
from tests.support import logcheck
from tests.support.api import Api

REPO = Path(__file__).resolve().parents[2]
OPERATIONS = REPO / "docs" / "OPERATIONS.md"
ADMIN_KEY = "ops-doc-admin-key-0123456789"
MEMORY = {"anthropic-beta": "agent-memory-2026-07-22"}
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"  # /usr/sbin: not on every PATH
_live: set[subprocess.Popen] = set()


# --- the document's text ---------------------------------------------------------------------------


def section_8_2() -> str:
    text = OPERATIONS.read_text()
    m = re.search(r"^### 8\.2 .*?(?=^### )", text, re.M | re.S)
    assert m, "docs/OPERATIONS.md has no section 8.2"
    return m.group(0)


def fenced_block(first_line: str) -> str:
    """The fenced block of OPERATIONS.md §8.2 whose first line is `first_line` (a `# name` comment)."""
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", section_8_2(), re.M | re.S):
        if block.startswith(first_line + "\n"):
            return block
    raise AssertionError(f"docs/OPERATIONS.md §8.2 has no fenced block starting {first_line!r}")


def compose_services() -> dict[str, str]:
    """The compose file's services, each as its block of text (no YAML parser here: the file is
    small and the checks below look at single keys)."""
    text = fenced_block("# compose.yaml")
    body = re.search(r"^services:\n(.*?)(?=^\S)", text, re.M | re.S)
    assert body
    parts = re.split(r"^  ([\w-]+):(.*)\n", body.group(1), flags=re.M)
    services, anchors = {}, {}
    for name, head, block in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        if m := re.fullmatch(r" &(\w+)", head):
            anchors[m.group(1)] = block
        elif m := re.fullmatch(r" \*(\w+)", head):  # `serve-2: *serve`: the anchored service again
            block = anchors[m.group(1)]
        services[name] = block
    return services


def environment(service: str) -> list[str]:
    """The variable names of a service's `environment:` mapping."""
    m = re.search(r"^    environment:\n((?:      .*\n)+)", service, re.M)
    assert m, f"no environment: in\n{service}"
    return re.findall(r"^      (\w+):", m.group(1), re.M)


def flow_list(block: str, key: str) -> list[str]:
    """A YAML flow sequence of strings (`key: ["a", "b",\n "c"]`), which is JSON here."""
    m = re.search(rf"^\s*{key}: (\[.*?\])", block, re.M | re.S)
    assert m, f"no {key}: [...] in\n{block}"
    return json.loads(m.group(1))


def entry_command() -> list[str]:
    text = (REPO / "docker" / "serve.Dockerfile").read_text()
    m = re.search(r"^ENTRYPOINT (\[.*\])$", text, re.M)
    assert m, "serve.Dockerfile has no exec-form ENTRYPOINT"
    return json.loads(m.group(1))


def entry_port() -> int:
    argv = entry_command()
    return int(argv[argv.index("--port") + 1])


def serve_help() -> str:
    r = subprocess.run(
        [sys.executable, "-m", "memfs", "serve", "--help"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def haproxy_cfg_for_test(listen_port: int, servers: dict[str, int], max_fds: int) -> str:
    """The document's haproxy.cfg with the module docstring's substitutions, and no others."""
    lines, bound, placed = [], 0, set()
    for line in fenced_block("# haproxy.cfg").splitlines():
        if (m := re.match(r"^(\s*maxconn\s+)(\d+)(.*)$", line)) and 2 * int(m.group(2)) + 100 > max_fds:
            line = f"{m.group(1)}{(max_fds - 100) // 2}{m.group(3)}"
        elif m := re.match(r"^(\s*bind\s+)(\S+)(.*)$", line):
            assert m.group(2) == f":{entry_port()}", line  # the port the compose file publishes
            line, bound = f"{m.group(1)}127.0.0.1:{listen_port}{m.group(3)}", bound + 1
        elif m := re.match(r"^(\s*server\s+)(\S+)(\s+)(\S+)(.*)$", line):
            name = m.group(2)
            assert m.group(4) == f"{name}:{entry_port()}", line  # the compose service, the image's port
            line = f"{m.group(1)}{name}{m.group(3)}127.0.0.1:{servers[name]}{m.group(5)}"
            placed.add(name)
        lines.append(line)
    assert bound == 1 and placed == set(servers), (bound, placed)
    return "\n".join(lines) + "\n"


# --- processes -------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def end(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)  # a paused process cannot act on SIGTERM
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    _live.discard(proc)


class Replica:
    """One compose `serve-N` service, outside Docker."""

    def __init__(self, name: str, workdir: Path, db_url: str):
        self.name, self.workdir, self.db_url = name, workdir, db_url
        workdir.mkdir(parents=True)
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        service = compose_services()[name]
        self.command = flow_list(service, "command")
        self.env_keys = environment(service)
        self.start()

    def start(self) -> None:
        self.starts += 1
        argv = entry_command()
        cmd = [sys.executable, "-m", "memfs", *argv[1:], *self.command, "--host", "127.0.0.1",
               "--port", str(self.port)]  # fmt: skip
        values = {"MEMFS_DB": self.db_url, "MEMFS_ADMIN_KEY": ADMIN_KEY}
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFS_")}
        env.update({k: values[k] for k in self.env_keys})  # the variables compose sets, nothing else
        out = self.workdir / f"{self.starts}.stdout"
        err = self.workdir / f"{self.starts}.stderr"
        with open(out, "wb") as o, open(err, "wb") as e:
            self.proc = subprocess.Popen(cmd, stdout=o, stderr=e, env=env, cwd=self.workdir)
        _live.add(self.proc)
        logcheck.watch(err, f"memfs serve {self.name} ({err})")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.proc.poll() is None:
            if m := re.search(r"listening on http://127\.0\.0\.1:(\d+)", out.read_text()):
                self.port = int(m.group(1))  # a restart reuses it: the balancer's address stays
                return
            time.sleep(0.05)
        end(self.proc)
        raise AssertionError(f"{self.name} did not start:\n{err.read_text()}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def watches_held(self) -> float:
        text = httpx.get(self.url + "/metrics", timeout=10).text
        m = re.search(r"^memfs_watches_held(?:\{[^}]*\})? (\S+)$", text, re.M)
        assert m, "no memfs_watches_held in /metrics"
        return float(m.group(1))

    def stop(self) -> None:
        if self.proc is not None:
            end(self.proc)


class Balancer:
    """haproxy in the foreground (-db) with the test's copy of the document's haproxy.cfg; its
    stderr carries the health checks' verdicts ("Server replicas/serve-1 is DOWN, …")."""

    def __init__(self, workdir: Path, replicas: list[Replica], nofile: int):
        self.port = free_port()
        workdir.mkdir(parents=True)
        nofile = min(nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
        self.cfg = workdir / "haproxy.cfg"
        self.cfg.write_text(haproxy_cfg_for_test(self.port, {r.name: r.port for r in replicas}, nofile))
        check = subprocess.run(
            [HAPROXY, "-c", "-f", str(self.cfg)], capture_output=True, text=True, timeout=30
        )
        assert check.returncode == 0, check.stdout + check.stderr
        self.log = workdir / "haproxy.stderr"

        def limits() -> None:  # what compose's `ulimits: nofile:` gives the lb container
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        with open(self.log, "wb") as e:
            self.proc = subprocess.Popen(
                [HAPROXY, "-db", "-f", str(self.cfg)], stdout=e, stderr=e, preexec_fn=limits
            )
        _live.add(self.proc)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "haproxy exited:\n" + self.log.read_text()
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("haproxy does not listen:\n" + self.log.read_text())

    def verdicts(self, name: str) -> list[str]:
        return re.findall(rf"Server replicas/{re.escape(name)} is (UP|DOWN)", self.log.read_text())

    def wait_verdict(self, name: str, state: str, after: int, timeout: float) -> float:
        """Seconds until the health check's `after`-th-plus verdict on `name` is `state`."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if state in self.verdicts(name)[after:]:
                return time.monotonic() - t0
            assert self.proc.poll() is None, "haproxy exited:\n" + self.log.read_text()
            time.sleep(0.1)
        raise AssertionError(f"haproxy did not mark {name} {state} in {timeout} s:\n{self.log.read_text()}")

    def stop(self) -> None:
        end(self.proc)


@pytest.fixture
def deployment(tmp_path, pg_cluster):
    if not os.access(HAPROXY, os.X_OK):
        pytest.fail("haproxy is not installed (scripts/_env.sh ensure_debian_packages installs it)")
    url = pg_cluster.create_database("opsdoc")
    names = [
        n for n, block in compose_services().items() if re.search(r"^\s*image: memfs-serve$", block, re.M)
    ]
    replicas: list[Replica] = []
    balancer = None
    try:
        for n in names:
            replicas.append(Replica(n, tmp_path / n, url))
        balancer = Balancer(tmp_path / "lb", replicas, compose_nofile())
        yield replicas, balancer
    finally:
        if balancer is not None:
            balancer.stop()
        for r in replicas:
            r.stop()
        pg_cluster.drop_database(url)


def compose_nofile() -> int:
    m = re.search(r"^\s*ulimits: \{nofile: (\d+)\}", compose_services()["lb"], re.M)
    assert m, "the lb service sets no nofile limit"
    return int(m.group(1))


@pytest.fixture(autouse=True, scope="module")
def _nothing_left_running():
    yield
    for proc in list(_live):
        end(proc)


# --- the compose file against the code -------------------------------------------------------------


def test_the_compose_file_uses_what_the_code_has():
    services = compose_services()
    help_text = serve_help()
    dockerfile = (REPO / "docker" / "serve.Dockerfile").read_text()
    serves = [n for n, b in services.items() if re.search(r"^\s*image: memfs-serve$", b, re.M)]
    assert serves == ["serve-1", "serve-2"]
    # the image: the tag docker/serve.Dockerfile's header and §1 build it as
    assert "-t memfs-serve docker/" in dockerfile
    assert re.search(r"docker build .*-f docker/serve\.Dockerfile\s+-t memfs-serve\s", OPERATIONS.read_text())
    block = services["serve-1"]
    # every flag of `command` is a `memfs serve` flag (and the replicas below run with them)
    command = flow_list(block, "command")
    assert command and all(f in re.findall(r"--[\w-]+", help_text) for f in command if f.startswith("-"))
    # every variable is one `memfs serve` reads (its --help names them) or the image sets
    assert set(environment(block)) == {"MEMFS_DB", "MEMFS_ADMIN_KEY"}
    assert "$MEMFS_DB" in help_text and "$MEMFS_ADMIN_KEY" in help_text and "ENV MEMFS_DB=" in dockerfile
    # the database URL names the db service, its user and database
    db = services["db"]
    m = re.search(r"MEMFS_DB: postgresql://(\w+):\$\{PG_PASSWORD\}@(\w+)/(\w+)$", block, re.M)
    assert m and m.group(2) == "db"
    assert f"POSTGRES_USER: {m.group(1)}" in db and f"POSTGRES_DB: {m.group(3)}" in db
    # the health check: the image's venv python, the image's port, a real route (run below)
    test = flow_list(block, "test")
    assert test[:3] == ["CMD", "/opt/memfs/bin/python", "-c"] and "python3 -m venv /opt/memfs" in dockerfile
    assert f"http://127.0.0.1:{entry_port()}/readyz" in test[3]
    # SIGTERM drains within memfs's graceful timeout; compose must wait longer before SIGKILL
    from memfs.service.asgi_server import GRACEFUL_TIMEOUT_S

    grace = re.search(r"stop_grace_period: (\d+)s", block)
    assert grace and int(grace.group(1)) > GRACEFUL_TIMEOUT_S
    # the balancer publishes the port haproxy.cfg binds, and the rate-limit comment's arithmetic
    lb = services["lb"]
    assert re.search(rf'ports: \["127\.0\.0\.1:{entry_port()}:{entry_port()}"\]', lb)
    assert re.search(rf"^\s*bind :{entry_port()}$", fenced_block("# haproxy.cfg"), re.M)
    rps = int(command[command.index("--rate-limit") + 1])
    assert f"{rps} requests/s per credential here, so at most {rps * len(serves)}/s" in block
    # haproxy.cfg's servers are exactly the memfs services
    servers = re.findall(r"^\s*server\s+(\S+)\s", fenced_block("# haproxy.cfg"), re.M)
    assert servers == serves


def healthcheck(replica: Replica) -> int:
    """The compose file's health-check command against one replica (its port substituted)."""
    snippet = flow_list(compose_services()[replica.name], "test")[3]
    snippet = snippet.replace(f"127.0.0.1:{entry_port()}", f"127.0.0.1:{replica.port}")
    return subprocess.run([sys.executable, "-c", snippet], capture_output=True, timeout=30).returncode


def token_of(session: dict) -> str:
    return json.loads(base64.urlsafe_b64decode(session["work_secret"]))["sessions_token"]


# --- the haproxy.cfg, run ------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_the_documented_balancer_in_front_of_two_replicas(deployment):
    replicas, lb = deployment
    admin = Api(lb.url, ADMIN_KEY)
    quiet = admin.create_store("nobody writes here")
    assert all(healthcheck(r) == 0 for r in replicas)

    # 1. A watch held for its full 60 s through the balancer (memfs's own client), running
    #    while the rest of the test goes on: the timeouts on the way must outlast it.
    held: dict = {}

    def hold() -> None:
        async def main() -> None:
            async with StoreClient(lb.url, ADMIN_KEY) as c:
                t0 = time.monotonic()
                held["answer"] = await c.watch({quiet: 0}, wait=60)
                held["seconds"] = time.monotonic() - t0

        try:
            trio.run(main)
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            held["error"] = repr(e)

    watcher = threading.Thread(target=hold)
    watcher.start()
    deadline = time.monotonic() + 20
    holder = None
    while holder is None and time.monotonic() < deadline:
        holder = next((r for r in replicas if r.watches_held() == 1), None)
        time.sleep(0.1)
    assert holder is not None, "no replica holds the watch"
    other = next(r for r in replicas if r is not holder)

    # 2. The official client's memory-store calls through the balancer (default retries).
    with anthropic.Anthropic(api_key=ADMIN_KEY, base_url=lb.url) as client:
        stores, mems = client.beta.memory_stores, client.beta.memory_stores.memories
        s = stores.create(name="through haproxy")
        m = mems.create(s.id, path="/notes/a.md", content="hello")
        assert mems.retrieve(m.id, memory_store_id=s.id).content == "hello"
        u = mems.update(m.id, memory_store_id=s.id, content="hello again")
        assert [x.path for x in mems.list(s.id)] == ["/notes/a.md"]
        assert [v.operation for v in client.beta.memory_stores.memory_versions.list(s.id).data] == [
            "modified",
            "created",
        ]
        assert stores.retrieve(s.id).name == "through haproxy"

        # 3. memfs's own client: counters, the changes feed, a watch woken by a write
        async def own() -> None:
            async with StoreClient(lb.url, ADMIN_KEY) as c:
                assert await c.counters([s.id]) == {s.id: 2}
                feed = await c.changes(s.id, 0)
                assert (
                    feed is not None and feed.counter == 2 and [x.memory_id for x in feed.changes] == [m.id]
                )
                woke: dict = {}

                async def wait() -> None:
                    t0 = time.monotonic()
                    woke["answer"] = await c.watch({s.id: 2}, wait=30)
                    woke["seconds"] = time.monotonic() - t0

                async with trio.open_nursery() as n:
                    n.start_soon(wait)
                    await trio.sleep(0.5)
                    await trio.to_thread.run_sync(lambda: mems.create(s.id, path="/b.md", content="b"))
                assert woke["answer"] == (True, {s.id: 3}) and woke["seconds"] < 10
                got = await c.get_memory(s.id, m.id)
                assert got["memory_version_id"] == u.memory_version_id

        trio.run(own)
        mems.delete(m.id, memory_store_id=s.id)

    # 4. A hung replica (SIGSTOP: its socket still accepts, so only an HTTP check sees it) is
    #    taken out of rotation; every request meanwhile is answered by the other; back after.
    seen = len(lb.verdicts(other.name))
    assert other.proc is not None
    other.proc.send_signal(signal.SIGSTOP)
    try:
        lb.wait_verdict(other.name, "DOWN", seen, timeout=60)
        for i in range(10):
            admin.create(s.id, f"/while-hung/{i}.md", "x")
    finally:
        other.proc.send_signal(signal.SIGCONT)
    lb.wait_verdict(other.name, "UP", seen + 1, timeout=60)

    # 5. SIGKILL one replica while writers write through the balancer: nothing acknowledged
    #    is lost, and the balancer sends the rest to the replica that lives.
    acked, failed = kill_under_writers(lb, other, s.id)
    print(f"SIGKILL: {len(acked)} acknowledged, {len(failed)} failed: {failed[:8]}")
    assert other.proc is not None and other.proc.returncode == -signal.SIGKILL
    for url in (holder.url, lb.url):
        versions = current_versions(url, s.id)
        assert all(versions.get(mid) == vid for mid, vid in acked)  # there, as acknowledged
    with httpx.Client(base_url=holder.url, headers={"x-api-key": ADMIN_KEY, **MEMORY}, timeout=30) as c:
        feed = patient(c, "GET", f"/v1/memory_stores/{s.id}/changes", params={"since": 0}).json()
    assert {mid for mid, _ in acked} <= {c["memory_id"] for c in feed["changes"]}  # the feed has them too
    # Failed: only requests that may have reached the dying replica: the one in flight on it, or one
    # sent on a pooled haproxy connection to it that its death had closed an instant before (a 502
    # or a cut connection; haproxy does not resend those: the request may have landed). Never a
    # 503: haproxy always had a healthy replica to send a refused connection to (option redispatch).
    assert not [f for f in failed if ": 503 " in f], failed
    assert len(failed) <= 8, failed
    lb.wait_verdict(other.name, "DOWN", seen + 2, timeout=60)
    assert healthcheck(other) != 0 and healthcheck(holder) == 0

    # 6. The held watch: answered after its full 60 s through the balancer, not cut.
    watcher.join(90)
    assert "error" not in held, held
    assert held["answer"] == (False, {quiet: 0}) and held["seconds"] >= 59, held

    # 7. A stopped replica (SIGTERM, as `docker compose stop` sends) with a watch held on it:
    #    the watch is answered at once, the process is gone well within stop_grace_period, and
    #    the health check takes it out of rotation.
    other.start()
    lb.wait_verdict(other.name, "UP", seen + 3, timeout=60)
    stop_with_a_held_watch(lb, replicas, other, quiet)
    lb.wait_verdict(other.name, "DOWN", seen + 4, timeout=60)
    assert healthcheck(other) != 0
    admin.create(s.id, "/after-stop.md", "still served")
    admin.close()


def patient(c: httpx.Client, method: str, url: str, **kw) -> httpx.Response:
    """A request that waits out the compose file's --rate-limit (429 + retry-after-ms), bounded."""
    for _ in range(50):
        r = c.request(method, url, **kw)
        if r.status_code != 429:
            assert r.status_code == 200, r.text
            return r
        time.sleep(float(r.headers["retry-after-ms"]) / 1000)
    raise AssertionError(f"{method} {url}: still rate limited")


def current_versions(base_url: str, store: str) -> dict[str, str]:
    """memory id -> current version id, from the listing (one request a hundred memories)."""
    out: dict[str, str] = {}
    page = None
    with httpx.Client(base_url=base_url, headers={"x-api-key": ADMIN_KEY, **MEMORY}, timeout=30) as c:
        for _ in range(1000):  # bounded
            params = {"limit": 100, **({"page": page} if page else {})}
            body = patient(c, "GET", f"/v1/memory_stores/{store}/memories", params=params).json()
            out.update({m["id"]: m["memory_version_id"] for m in body["data"] if m["type"] == "memory"})
            if not (page := body.get("next_page")):
                return out
    raise AssertionError("the listing did not end")


def kill_under_writers(lb: Balancer, victim: Replica, store: str) -> tuple[list[tuple[str, str]], list[str]]:
    """Four writers (one session each, as four sandboxes) write through the balancer on keep-alive
    connections; `victim` is SIGKILLed mid-run. Returns the acknowledged (memory, version) pairs and
    the requests that failed (not acknowledged: a connection error or a 5xx)."""
    admin = Api(lb.url, ADMIN_KEY)
    tokens = [token_of(admin.create_session([(store, "read_write")])) for _ in range(4)]
    admin.close()
    acked: list[tuple[str, str]] = []
    failed: list[str] = []
    lock = threading.Lock()
    stop, go = threading.Event(), threading.Event()

    def writer(k: int) -> None:
        headers = {"authorization": f"Bearer {tokens[k]}", **MEMORY}
        with httpx.Client(base_url=lb.url, headers=headers, timeout=30) as c:
            for i in range(2000):  # bounded
                if stop.is_set():
                    return
                try:
                    r = c.post(
                        f"/v1/memory_stores/{store}/memories", json={"path": f"/w{k}/{i}", "content": "x"}
                    )
                except httpx.HTTPError as e:
                    with lock:
                        failed.append(f"w{k} {i}: {e!r}")
                    continue
                if r.status_code == 429:  # the compose file's --rate-limit at work: wait as asked
                    time.sleep(float(r.headers["retry-after-ms"]) / 1000)
                    continue
                if r.status_code != 200:
                    with lock:
                        failed.append(f"w{k} {i}: {r.status_code} {r.text[:200]}")
                    continue
                with lock:
                    acked.append((r.json()["id"], r.json()["memory_version_id"]))
                    if len(acked) >= 40:
                        go.set()

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    try:
        assert go.wait(60), "the writers did not get going"
        proc = victim.proc
        assert proc is not None
        proc.kill()  # SIGKILL, mid-run
        proc.wait()
        _live.discard(proc)
        with lock:
            before = len(acked)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # writes go on without it, through its detection time
            with lock:
                if len(acked) >= before + 200:
                    break
            time.sleep(0.1)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert len(acked) >= before + 200, (len(acked), before, failed[:5])
    return acked, failed


def stop_with_a_held_watch(lb: Balancer, replicas: list[Replica], victim: Replica, store: str) -> None:
    answers: list = []

    async def one_watch() -> None:
        async with StoreClient(lb.url, ADMIN_KEY) as c:
            answers.append(await c.watch({store: 0}, wait=60))

    def hold() -> None:
        try:
            trio.run(one_watch)
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            answers.append(repr(e))

    # leastconn sends each new watch to the replica with fewer connections: hold watches until
    # the victim has one (bounded: eight)
    threads = []
    for _ in range(8):
        t = threading.Thread(target=hold)
        t.start()
        threads.append(t)
        time.sleep(0.3)
        if victim.watches_held() >= 1:
            break
    held_on_victim = victim.watches_held()
    assert held_on_victim >= 1
    assert victim.proc is not None
    t0 = time.monotonic()
    victim.proc.terminate()
    victim.proc.wait(15)
    stopped_in = time.monotonic() - t0
    _live.discard(victim.proc)
    grace_line = re.search(r"stop_grace_period: (\d+)s", compose_services()[victim.name])
    assert grace_line
    grace = int(grace_line.group(1))
    assert victim.proc.returncode == 0 and stopped_in < grace, (victim.proc.returncode, stopped_in)
    # the watches the victim held were answered (unchanged) as it stopped, not cut
    deadline = time.monotonic() + 10
    while len(answers) < held_on_victim and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(answers) >= held_on_victim and all(a == (False, {store: 0}) for a in answers), answers
    # the rest are still held on the other replica: end them with a write
    api = Api(lb.url, ADMIN_KEY)
    api.create(store, "/wake.md", "w")
    api.close()
    for t in threads:
        t.join(30)
    assert all(a in ((False, {store: 0}), (True, {store: 1})) for a in answers), answers
