"""One store mounted without a session, as an unprivileged user (SEMANTICS.md#d-store-mount):
Claude Code's memory folder on two "machines" (two users, two homes, two state dirs), one of them
offline for a while; and the systemd user unit's commands, run as its ExecStart/ExecStop lines.

The users are run through setpriv; the mount goes through fusermount3, as on a developer's
machine. fusermount3 wants the caller's passwd entry ("could not determine username"), so the two
test users are made once with useradd (system accounts, no home, no login shell) and kept: another
test may be using them, and they hold nothing. Our interpreter lives under /root (out of an
unprivileged user's reach here): the users run the system's python of the same version with the
venv's site-packages on PYTHONPATH, the same code (this worktree first on the path).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from memfs.limits import MARKER_NAME, NOTICES_NAME
from tests.support import logcheck
from tests.support.api import Api
from tests.support.mounts import User, force_unmount, mounted_at, open_dir
from tests.support.proxy import Proxy
from tests.support.service import ServiceProcess

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "contrib" / "systemd" / "memfs@.service"
PROJECT = "-home-dev-src-app"  # how Claude Code names a project's folder (its path, / as -)
STORE = "claude-memory"


def _python_for(user: User) -> tuple[str, str]:
    """(interpreter, PYTHONPATH) the user can run memfs with."""
    path = f"{REPO}"
    probe = user.argv() + [sys.executable, "-c", "pass"]
    if subprocess.run(probe, capture_output=True, timeout=30).returncode == 0:
        return sys.executable, path
    system = f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}"
    if not os.access(system, os.X_OK):
        pytest.skip(f"no interpreter an unprivileged user can run ({sys.executable} is not reachable)")
    return system, f"{path}:{sysconfig.get_paths()['purelib']}"


USERS = {47101: "memfs-test-a", 47102: "memfs-test-b"}


def pwd_gid(uid: int) -> int:
    import pwd

    return pwd.getpwuid(uid).pw_gid


def _ensure_user(uid: int) -> None:
    import pwd

    try:
        pwd.getpwuid(uid)
        return
    except KeyError:
        pass
    if not shutil.which("useradd"):
        pytest.skip("fusermount3 needs a passwd entry for the user, and useradd is missing")
    subprocess.run(
        ["useradd", "--system", "--no-log-init", "--uid", str(uid), "--user-group", "--no-create-home",
         "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", USERS[uid]],
        capture_output=True, timeout=30,
    )  # fmt: skip
    pwd.getpwuid(uid)  # made here, or by a test running beside this one


class Machine:
    """One developer machine: a user, a home, Claude Code's memory folder of one project."""

    def __init__(self, base: Path, uid: int, base_url: str, api_key: str):
        _ensure_user(uid)
        self.user = User(uid, pwd_gid(uid))
        self.home = base / f"home{uid}"
        self.home.mkdir()
        os.chown(self.home, uid, self.user.gid)
        self.home.chmod(0o700)
        self.memory = self.home / ".claude" / "projects" / PROJECT / "memory"
        self.python, pythonpath = _python_for(self.user)
        self.env = {
            "HOME": str(self.home),
            "PATH": "/usr/bin:/bin",
            "LC_ALL": "C.UTF-8",
            "PYTHONPATH": pythonpath,
            "ANTHROPIC_BASE_URL": base_url,
            "MEMFS_RUNTIME_DIR": str(self.home / "run"),
        }
        self.api_key = api_key
        self.sh(f"mkdir -p {shlex.quote(str(self.memory))}")

    @property
    def state_dir(self) -> Path:  # the XDG default: ~/.local/state/memfs/<name>
        (found,) = (self.home / ".local" / "state" / "memfs").glob("*memory-*")
        return found

    def run(
        self, argv: list[str], *, env: dict | None = None, timeout: float = 90
    ) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.user.argv() + argv,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd="/",
        )

    def sh(self, cmd: str, *, check: bool = True) -> subprocess.CompletedProcess:
        out = self.run(["bash", "-c", cmd], timeout=30)
        if check and out.returncode != 0:
            raise AssertionError(f"{cmd!r} as uid {self.user.uid} failed:\n{out.stdout}\n{out.stderr}")
        return out

    def memfs(self, *args: str, key: bool = False, check: bool = True) -> subprocess.CompletedProcess:
        env = {"ANTHROPIC_API_KEY": self.api_key} if key else None
        out = self.run([self.python, "-m", "memfs", *args], env=env)
        if check and out.returncode != 0:
            raise AssertionError(
                f"memfs {' '.join(args)} exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
            )
        return out

    def mount(self, *extra: str) -> subprocess.CompletedProcess:
        out = self.memfs(
            "mount", "--store", STORE, str(self.memory), "--sync-interval", "5", *extra, key=True
        )
        logcheck.watch(self.state_dir / "memfs.log", f"memfs mount ({self.state_dir}/memfs.log)")
        return out

    def sync(self, *, check: bool = True) -> subprocess.CompletedProcess:
        return self.memfs("sync", "--root", str(self.memory), "--force", "--wait", "--json", check=check)

    def status(self) -> dict:
        return json.loads(self.memfs("status", "--root", str(self.memory), "--json").stdout)

    def files(self) -> dict[str, str]:
        """Every file of the memory folder, read by the user with cat (the mount is theirs alone)."""
        out = self.sh(f"cd {shlex.quote(str(self.memory))} && find . -type f -print0 | sort -z").stdout
        names = [n[2:] for n in out.split("\0") if n]
        return {n: self.sh(f"cat {shlex.quote(str(self.memory / n))}").stdout for n in names}

    def close(self) -> None:
        if mounted_at(self.memory):
            self.memfs("unmount", "--root", str(self.memory), "--flush-timeout", "5", check=False)
        try:
            pid = int(json.loads((self.state_dir / "lock").read_text())["pid"])
            os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError, KeyError):
            pass
        force_unmount(self.memory)


@pytest.fixture(params=["counter", "hosted-api"])
def store_service(request, tmp_path):
    """`memfs serve`, as itself or as the hosted API's emulator (no counter, its limits off)."""
    svc = ServiceProcess(tmp_path / "service", hosted_api=request.param == "hosted-api")
    try:
        yield svc
    finally:
        svc.stop()


@pytest.fixture
def machines(service):
    with _machines(service) as made:
        yield made


@contextmanager
def _machines(service):
    base = open_dir("/tmp/msm-")  # short: the control socket's path is bounded
    proxy = Proxy(service.base_url)  # machine a's network: cut and restored by the test
    made: list[Machine] = []
    try:
        made.append(Machine(base, 47101, proxy.url, service.admin_key))
        made.append(Machine(base, 47102, service.base_url, service.admin_key))
        yield made[0], made[1], proxy
    finally:
        proxy.clear()
        for m in made:
            m.close()
        proxy.close()
        shutil.rmtree(base, ignore_errors=True)


MEMORY = "# Memory\n\n## User\n- prefers tabs\n\n## Project\n- tests run with pytest\n"


def test_two_machines_share_claude_codes_memory_one_offline_for_a_while(store_service, tmp_path):
    service = store_service
    with _machines(service) as (a, b, proxy):
        _two_machines(service, a, b, proxy)


def _two_machines(service, a, b, proxy):
    # a creates the store by name; b finds it by that name, its key in a file (never an argument)
    out = a.mount("--create")
    assert f"at {a.memory}" in out.stdout, out.stdout
    assert a.state_dir.joinpath("state.db").exists(), "the state dir is the user's XDG one"
    key_file = b.home / "api-key"
    b.sh(f"umask 077; printf %s {shlex.quote(service.admin_key)} > {shlex.quote(str(key_file))}")
    b.memfs("mount", "--store", STORE, str(b.memory), "--sync-interval", "5", "--api-key-file", str(key_file))
    logcheck.watch(b.state_dir / "memfs.log", "memfs mount (b)")
    ps = subprocess.run(
        ["ps", "-o", "uid=,args=", "-u", "47101,47102"], capture_output=True, text=True
    ).stdout
    assert service.admin_key not in ps, "the key is never on a command line"
    for m in (a, b):  # nor in the daemon's environment (taken out of it, overwritten in place)
        pid = int(json.loads((m.state_dir / "lock").read_text())["pid"])
        assert Path(f"/proc/{pid}/status").read_text().count(f"\t{m.user.uid}\t") >= 1, "runs as the user"
        assert service.admin_key.encode() not in Path(f"/proc/{pid}/environ").read_bytes()

    a.sh(
        f"cd {a.memory} && printf %s {shlex.quote(MEMORY)} > MEMORY.md && printf 'tabs, 4 wide\\n' > prefs.md"
    )
    a.sync()
    b.sync()
    assert b.files() == {"MEMORY.md": MEMORY, "prefs.md": "tabs, 4 wide\n"}
    # The folder holds only the memories: no marker, no notices (those are in the state dir).
    listed = b.sh(f"ls -A {b.memory}").stdout.split()
    assert sorted(listed) == ["MEMORY.md", "prefs.md"]
    assert MARKER_NAME not in listed and NOTICES_NAME not in listed
    assert (b.state_dir / "sync-notices.log").exists()

    # a goes offline: it keeps reading and writing; b writes meanwhile.
    proxy.add("*", r".", "reset")
    a.sh(f"cd {a.memory} && sed -i 's/^- prefers tabs$/- prefers tabs\\n- answers in French/' MEMORY.md")
    a.sh(f"cd {a.memory} && printf 'run pytest -n 0\\n' > testing.md && printf 'never spaces\\n' >> prefs.md")
    b.sh(
        f"cd {b.memory} && printf -- '- style: see style.md\\n' >> MEMORY.md && printf 'black, 100\\n' > style.md"
    )
    b.sync()
    assert a.sync(check=False).returncode != 0, "a's sync cannot reach the service"
    s = a.status()["stores"][0]
    assert s["mount_path"] == str(a.memory)
    assert s["last_result"] == "failed" and s["last_ok_at"], s
    assert s["staged"] >= 3, s  # MEMORY.md, testing.md, prefs.md wait in the state dir
    text = a.memfs("status", "--root", str(a.memory)).stdout
    assert "last ok=" in text and "staged=" in text, text
    assert "answers in French" in a.sh(f"cat {a.memory}/MEMORY.md").stdout

    # back online: a's changes go out, merged with b's; both converge, nothing lost
    proxy.clear()
    a.sync()
    b.sync()
    want_memory = (
        "# Memory\n\n## User\n- prefers tabs\n- answers in French\n\n## Project\n"
        "- tests run with pytest\n- style: see style.md\n"
    )
    want = {
        "MEMORY.md": want_memory,
        "prefs.md": "tabs, 4 wide\nnever spaces\n",
        "testing.md": "run pytest -n 0\n",
        "style.md": "black, 100\n",
    }
    assert a.files() == want
    assert b.files() == want
    api = Api(service.base_url, service.admin_key)
    try:
        (store,) = [s for s in api.stores() if s["name"] == STORE]
        assert {p.lstrip("/"): c for p, c in api.contents(store["id"]).items()} == want
    finally:
        api.close()

    # a laptop that starts without the network serves its last view, and catches up later
    a.memfs("unmount", "--root", str(a.memory))
    proxy.add("*", r".", "reset")
    a.mount()
    assert a.files() == want
    a.sh(f"cd {a.memory} && printf 'offline start\\n' > boot.md")
    proxy.clear()
    a.sync()
    b.sync()
    assert b.files() == {**want, "boot.md": "offline start\n"}

    for m in (a, b):
        out = m.memfs("unmount", "--root", str(m.memory))
        assert "every change is on the store service" in out.stdout
        assert not mounted_at(m.memory)


@pytest.mark.expected_log(r"not on the store service")
def test_what_an_offline_unmount_left_goes_out_with_flush_and_the_api_key(machines, service):
    a, _b, proxy = machines
    a.mount("--create")
    a.sh(f"printf '# Memory\\n' > {a.memory}/MEMORY.md")
    a.sync()
    proxy.add("*", r".", "reset")
    a.sh(f"printf 'written offline\\n' > {a.memory}/topic.md")
    out = a.memfs("unmount", "--root", str(a.memory), "--flush-timeout", "3", check=False)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "memory/topic.md (staged)" in out.stderr and "memfs flush --state-dir" in out.stderr
    assert not mounted_at(a.memory)
    status = a.status()  # no daemon: from the state dir
    assert status["live"] is False
    (s,) = status["stores"]
    assert s["mount_path"] == str(a.memory) and s["staged"] == 1, s
    proxy.clear()
    out = a.memfs("flush", "--state-dir", str(a.state_dir), key=True)
    assert "every change is on the store service" in out.stdout
    api = Api(service.base_url, service.admin_key)
    try:
        (store,) = [s for s in api.stores() if s["name"] == STORE]
        assert api.contents(store["id"]) == {"/MEMORY.md": "# Memory\n", "/topic.md": "written offline\n"}
    finally:
        api.close()


def test_read_only_store_mount_refuses_writes(machines, service):
    a, b, _proxy = machines
    a.mount("--create")
    a.sh(f"printf 'x\\n' > {a.memory}/MEMORY.md")
    a.sync()
    b.memfs("mount", "--store", STORE, str(b.memory), "--read-only", key=True)
    logcheck.watch(b.state_dir / "memfs.log", "memfs mount (b)")
    assert b.sh(f"cat {b.memory}/MEMORY.md").stdout == "x\n"
    out = b.sh(f"printf 'y\\n' > {b.memory}/MEMORY.md", check=False)
    assert out.returncode != 0 and "Read-only file system" in out.stderr


def test_a_store_name_not_found_without_create_fails_clearly(machines):
    a, _b, _proxy = machines
    out = a.memfs("mount", "--store", "no-such-store", str(a.memory), key=True, check=False)
    assert out.returncode == 1
    assert "no memory store is named 'no-such-store': pass --create" in out.stderr
    assert not mounted_at(a.memory)
    out = a.memfs("mount", "--store", STORE, str(a.memory), check=False)
    assert out.returncode == 2 and "no API key: set ANTHROPIC_API_KEY or pass --api-key-file" in out.stderr
    out = a.memfs("mount", "--read-only", str(a.memory), check=False)
    assert out.returncode == 2 and "PATH, --read-only only go with --store" in out.stderr


def _unit_commands(m: Machine) -> tuple[list[str], list[str]]:
    """The unit's ExecStart and ExecStop, with the specifiers and variables systemd would fill in."""
    lines = dict(
        line.split("=", 1)
        for line in UNIT.read_text().splitlines()
        if line and line[0].isalpha() and "=" in line
    )
    values = {"%h": str(m.home), "%i": PROJECT, "%t": str(m.home / "run"), "%%": "%"}
    env = {"MEMFS_STORE": STORE}

    def fill(cmd: str) -> list[str]:
        for spec, value in values.items():
            cmd = cmd.replace(spec, value)
        for name, value in env.items():
            cmd = cmd.replace("${" + name + "}", value)
        argv = shlex.split(cmd)
        assert argv[0].endswith("/memfs"), argv  # the installed command; here: this checkout's
        return [m.python, "-m", "memfs", *argv[1:]]

    return fill(lines["ExecStart"]), fill(lines["ExecStop"])


def test_the_systemd_unit_parses(tmp_path):
    """systemd cannot run here (no manager): its own parser checks the unit; the one complaint
    expected is that this machine has no memfs in the unit's ~/.local/bin."""
    if not shutil.which("systemd-analyze"):
        pytest.skip("no systemd-analyze")
    shutil.copy(UNIT, tmp_path / UNIT.name)
    out = subprocess.run(
        ["systemd-analyze", "verify", str(tmp_path / f"memfs@{PROJECT}.service")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    complaints = [
        line
        for line in (out.stdout + out.stderr).splitlines()
        if line.strip()
        and not line.endswith("/.local/bin/memfs is not executable: No such file or directory")
    ]
    assert complaints == [], out


def test_the_systemd_user_unit_starts_and_stops_the_mount(machines, service):
    a, _b, _proxy = machines
    start, stop = _unit_commands(a)
    key_file = a.home / ".config" / "memfs" / "api-key"
    a.sh(
        f"mkdir -p {key_file.parent} && umask 077 && printf %s {shlex.quote(service.admin_key)} > {key_file}"
    )
    a.memfs("mount", "--store", STORE, "--create", str(a.memory), key=True)  # the store exists, once
    a.memfs("unmount", "--root", str(a.memory))
    proc = subprocess.Popen(
        a.user.argv() + start, env=a.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd="/"
    )
    try:
        deadline = time.monotonic() + 60
        while not mounted_at(a.memory):
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "the unit's ExecStart did not mount"
            time.sleep(0.1)
        a.sh(f"printf 'from the unit\\n' > {a.memory}/MEMORY.md")
        out = a.run(stop)
        assert out.returncode == 0, out.stdout + out.stderr
        assert proc.wait(timeout=60) == 0, proc.communicate()[0]
        assert not mounted_at(a.memory)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    api = Api(service.base_url, service.admin_key)
    try:
        (store,) = [s for s in api.stores() if s["name"] == STORE]
        assert api.contents(store["id"])["/MEMORY.md"] == "from the unit\n"
    finally:
        api.close()
