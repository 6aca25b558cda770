"""The TypeScript worker package (workers/typescript): the official `EnvironmentWorker.handleItem()` of
`@anthropic-ai/sdk` with `memfsTools()`, run by node against the fake platform, a real `memfs serve`
and a real mount: what only this package has (the scenarios both workers run are in
test_worker_e2e.py).

npm is on the machine (scripts/_env.sh installs Debian's node and npm when missing, and the
package's dependencies with `npm ci` from its package-lock.json); the fixture builds the package
once. The worker runs on Node 22, the package's dev dependency `node` (the SDK's agent toolset needs
Node 22's `fs.glob`; Debian's node may be older)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memfs import limits
from tests.support.fake_platform import Step
from tests.support.worker_world import run_ts_item

pytestmark = pytest.mark.timeout(180)

LAUNCH = (sys.executable, "-m", "memfs", "worker-launch", "--")


def node_eval(
    package: Path, script: str, *args: str, env: dict[str, str], prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    """`node -e script <the package's dist> args…` (the script requires process.argv[1]), run under
    `prefix` (the launcher) when given."""
    node = str(package / "node_modules" / ".bin" / "node")
    argv = [*prefix, node, "-e", script, str(package / "dist"), *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)


def test_the_package_keeps_memfs_limits(ts_package):
    text = (ts_package / "src" / "index.ts").read_text()
    assert "MAX_CONTENT_BYTES = 100 * 1024" in text and limits.MAX_CONTENT_BYTES == 100 * 1024
    assert "FINAL_SYNC_TIMEOUT_MS = 30_000" in text and limits.FLUSH_TIMEOUT == 30


@pytest.mark.timeout(60)
def test_a_busy_daemon_that_answers_its_ping_gets_the_whole_timeout(tmp_path, ts_package):
    from tests.session.test_daemon_link import SlowDaemon

    path = tmp_path / "slow.sock"
    daemon = SlowDaemon(path, delay=0.8)  # longer than the ping deadline given below
    script = (
        "const { DaemonLink } = require(process.argv[1]);"
        "new DaemonLink('/nowhere').sync(false, false, 10000, 300).then("
        "(a) => { console.log(JSON.stringify(a)); process.exit(0); },"
        "(e) => { console.error(String(e)); process.exit(1); });"
    )
    env = {**os.environ, "MEMFS_SYNC_SOCKET": str(path)}
    try:
        proc = node_eval(ts_package, script, env=env)
    finally:
        daemon.close()
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"ok": True, "ran": True}


@pytest.mark.timeout(60)
def test_a_call_stopped_during_its_pre_call_sync_does_not_run(tmp_path, ts_package):
    """The runner aborts a stopped call's signal (@anthropic-ai/sdk >= 1.16: then restoreMissing, and
    "was stopped" as its result); a wrapped tool whose pre-call sync was still waiting must not run
    once the sync answers (the official write/edit do not look at the signal themselves)."""
    from tests.session.test_daemon_link import SlowDaemon

    path = tmp_path / "slow.sock"
    daemon = SlowDaemon(path, delay=1.0)  # status answers at once (no stores), a sync after 1 s
    script = (
        "const { memfsTools } = require(process.argv[1]);"
        "let ran = false;"
        "const tool = { name: 'write', run: async () => { ran = true; return 'written'; } };"
        "const [wrapped] = memfsTools({ root: '/nowhere', base: [tool], log: () => {} })("
        "{ workdir: process.argv[2], session: { id: 'sesn_x', resources: [] } });"
        "const stop = new AbortController();"
        "setTimeout(() => stop.abort(new Error('stopped by the runner')), 200);"
        "wrapped.run({ file_path: 'x.md', content: 'x' }, { signal: stop.signal }).then("
        "(r) => console.log(JSON.stringify({ ran, result: String(r) })),"
        "(e) => console.log(JSON.stringify({ ran, error: String(e) })));"
    )
    env = {**os.environ, "MEMFS_SYNC_SOCKET": str(path)}
    try:
        proc = node_eval(ts_package, script, str(tmp_path), env=env)
    finally:
        daemon.close()
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"ran": False, "error": "Error: stopped by the runner"}


NO_CAPABILITIES = ("setpriv", "--bounding-set=-all", "--inh-caps=-all", "--")
# What the agent's bash tries, without any capability (as an unprivileged agent would be): the
# worker's credentials in its environment block or anywhere in its memory.
AGENT_SCAN = r"""
import sys
pid, needles = sys.argv[1], open(sys.argv[2], "rb").read().split(b"\n")

def verdict(found):
    try:
        return "LEAK" if found() else "clean"
    except OSError as exc:
        return f"denied ({exc.strerror})"

def in_environ():
    with open(f"/proc/{pid}/environ", "rb") as f:
        data = f.read()
    return any(n in data for n in needles)

def in_memory():
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps.read().splitlines():
            span, perms = line.split()[:2]
            if not perms.startswith("r"):
                continue
            lo, hi = (int(x, 16) for x in span.split("-"))
            for at in range(lo, hi, 1 << 24):
                try:
                    mem.seek(at)
                    chunk = mem.read(min(1 << 24, hi - at) + 4096)
                except OSError:
                    break
                if any(n in chunk for n in needles):
                    return True
    return False

print("environ:", verdict(in_environ))
print("memory:", verdict(in_memory))
"""


def test_the_agent_cannot_read_the_work_secret_from_node(wworld, ts_package):
    # Before: node started with ANTHROPIC_WORK_SECRET kept it in /proc/<node>/environ and was
    # dumpable, so `cat /proc/$PPID/environ` in the agent's bash showed it. Now `memfs
    # worker-launch` hands it over on a pipe and starts node non-dumpable.
    wworld.mount()
    scan, needles = wworld.tmp / "agent-scan.py", wworld.tmp / "needles"
    scan.write_text(AGENT_SCAN)
    original = wworld.item

    def item(script, **kw):
        work = original(script, **kw)
        needles.write_bytes(b"\n".join([work.secret.encode(), wworld.token.encode()]))
        return work

    wworld.item = item
    # The worker and so its agent run as root without any capability: one uid, one (empty) set of
    # capabilities, as an unprivileged user's worker and agent (root's capabilities alone would
    # keep a capability-less reader out of a root process, dumpable or not).
    command = f"{sys.executable} {scan} $PPID {needles}"
    run, proc = run_ts_item(wworld, ts_package, [Step("bash", {"command": command})], prefix=NO_CAPABILITIES)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    texts = run.texts()
    assert [r["is_error"] for r in run.results()] == [False], texts
    assert "environ: " in texts[0] and "memory: " in texts[0], texts
    assert "LEAK" not in texts[0], texts
    assert "node is dumpable" not in out, out
    assert run.work.stop_requests and run.work.stop_requests[0].get("force") is True  # the secret still works


def test_take_secrets_clears_the_environment_of_a_node_started_directly(ts_package):
    # Without the launcher: no credential is left in process.env (children inherit it) nor in the
    # block /proc/<pid>/environ shows, and a warning says node stays dumpable.
    script = (
        "const { takeSecrets } = require(process.argv[1]);"
        "const s = takeSecrets();"
        "const block = require('fs').readFileSync('/proc/self/environ');"
        "console.log(JSON.stringify({ s, block: block.includes('sekrit-1234'),"
        " env: JSON.stringify(process.env).includes('sekrit-1234') }));"
    )
    env = {**os.environ, "ANTHROPIC_WORK_SECRET": "sekrit-1234", "ANTHROPIC_API_KEY": "sekrit-1234-key"}
    proc = node_eval(ts_package, script, env=env)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["s"] == {"workSecret": "sekrit-1234", "apiKey": "sekrit-1234-key", "launched": False}
    assert seen["block"] is False and seen["env"] is False, seen
    assert "node is dumpable" in proc.stderr


@pytest.mark.parametrize("how", ["other-owner", "world-writable", "symlink"])
def test_a_squatted_registry_dir_is_refused(tmp_path, ts_package, how):
    # Before: the package read whatever registry entry it found, and its syncs went to the socket
    # of a state dir another user chose. Now it checks the registry dir as memfs/session/control.py
    # does (tests/session/test_registry_dir.py): owner, mode, no symlink.
    from memfs.session.control import registry_key

    root, attacker = tmp_path / "root", tmp_path / "attacker-state"
    root.mkdir()
    attacker.mkdir()
    run = tmp_path / "run"
    entries = run if how != "symlink" else tmp_path / "elsewhere"
    entries.mkdir(mode=0o700)
    if how == "other-owner":
        os.chown(run, 65534, 65534)  # nobody made it first
    elif how == "world-writable":
        os.chmod(run, 0o777)
    else:
        run.symlink_to(entries)
    name = hashlib.sha256(registry_key(str(root)).encode()).hexdigest()[:20]
    (entries / f"{name}.json").write_text(
        json.dumps({"root": str(root), "state_dir": str(attacker), "pid": 1})
    )
    script = (
        "const { DaemonLink } = require(process.argv[1]);"
        "try { console.log('socket ' + new DaemonLink(process.argv[2]).socketPath); }"
        "catch (e) { console.log('refused ' + e.message); }"
    )
    env = {k: v for k, v in os.environ.items() if k != "MEMFS_SYNC_SOCKET"}
    env["MEMFS_RUNTIME_DIR"] = str(run)
    proc = node_eval(ts_package, script, str(root), env=env)
    assert proc.returncode == 0, proc.stderr
    why = {
        "other-owner": "belongs to uid 65534",
        "world-writable": "writable by other users",
        "symlink": "not a directory",
    }
    assert proc.stdout.startswith(f"refused the memfs registry dir {run} "), proc.stdout
    assert why[how] in proc.stdout and str(attacker) not in proc.stdout, proc.stdout


def test_memfs_tools_refuses_to_start_while_the_launchers_pipe_is_unread(ts_package):
    # The pipe is not close-on-exec (node inherits it): left open, the agent's bash would too.
    script = "const { memfsTools } = require(process.argv[1]); memfsTools(); console.log('made');"
    env = {**os.environ, "ANTHROPIC_WORK_SECRET": "sekrit-1234"}
    proc = node_eval(ts_package, script, env=env, prefix=LAUNCH)
    assert proc.returncode != 0 and "made" not in proc.stdout, proc.stdout
    assert "call takeSecrets() before memfsTools()" in proc.stderr, proc.stderr


def test_credentials_that_reach_node_through_another_exec_are_refused(ts_package):
    # `memfs worker-launch -- env node …` (or a script's interpreter, npm): the launcher made `env`
    # non-dumpable, and its exec of node made node dumpable again.
    script = "const { takeSecrets } = require(process.argv[1]); takeSecrets(); console.log('taken');"
    env = {**os.environ, "ANTHROPIC_WORK_SECRET": "sekrit-1234"}
    proc = node_eval(ts_package, script, env=env, prefix=(*LAUNCH, "/usr/bin/env"))
    assert proc.returncode != 0 and "taken" not in proc.stdout, proc.stdout
    assert "made /usr/bin/env (pid" in proc.stderr and "which is dumpable" in proc.stderr, proc.stderr
