"""`memfs worker-launch`: a worker program that cannot protect its credentials itself (node) is
started without them in its environment, non-dumpable from its first instruction, and gets them on
a pipe. Here the program is a shell, so what it shows is the launcher's doing alone (the node side,
`takeSecrets()`, is tested with the TypeScript worker in tests/e2e/test_typescript_worker.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.timeout(60)

SECRET = "work-secret-0123456789"
# Everything runs as root without any capability: one uid and one (empty) capability set, as an
# unprivileged worker and its agent (root's capabilities alone would keep a capability-less reader
# out of a root process, dumpable or not).
NO_CAPABILITIES = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--"]
# The "worker": what it was handed, then what a child of it (the agent) can read of it.
WORKER = (
    'echo "env: $(env | grep -c ANTHROPIC_WORK_SECRET)"; echo "pid: $$"; '
    'echo "pipe: $(cat <&$MEMFS_SECRETS_FD)"; '
    'cat /proc/$$/environ >/dev/null 2>&1 && echo "agent reads environ" || echo "agent denied environ"; '
    "exit 7"
)


def launch(*program: str, extra_env: dict | None = None, **kw) -> subprocess.Popen:
    env = {**os.environ, "ANTHROPIC_WORK_SECRET": SECRET, **(extra_env or {})}
    return subprocess.Popen(
        [*NO_CAPABILITIES, sys.executable, "-m", "memfs", "worker-launch", "--", *program],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def test_the_program_gets_the_secret_on_a_pipe_and_its_agent_cannot_read_it():
    proc = launch("/bin/sh", "-c", WORKER)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 7, err  # the program's own status
    assert "env: 0" in out, out
    handed = json.loads(out.split("pipe: ", 1)[1].splitlines()[0])
    assert handed["secrets"] == {"ANTHROPIC_WORK_SECRET": SECRET} and handed["non_dumpable"], handed
    assert handed["pid"] == int(out.split("pid: ", 1)[1].split()[0])  # the shell itself, nothing between
    assert os.path.basename(handed["exe"]) in ("sh", "dash", "bash"), handed
    assert "agent denied environ" in out, out


def test_a_program_started_directly_is_readable_by_its_agent():
    # A program started directly (what the launcher avoids) is readable by its agent: the check above
    # means something.
    direct = subprocess.run(
        [*NO_CAPABILITIES, "/bin/sh", "-c", WORKER.replace("<&$MEMFS_SECRETS_FD", "</dev/null")],
        env={**os.environ, "ANTHROPIC_WORK_SECRET": SECRET},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert "env: 1" in direct.stdout and "agent reads environ" in direct.stdout, direct.stdout


def test_signals_reach_the_program_and_its_status_comes_back():
    proc = launch(
        "/bin/sh", "-c", 'trap "echo got TERM; exit 5" TERM; echo ready; while :; do sleep 0.1; done'
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert "got TERM" in out and proc.returncode == 5, (out, err)


def test_no_program_or_a_missing_one_is_an_error():
    proc = launch()
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "no program given" in err, err
    proc = launch("/nonexistent/node")
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 127 and "cannot start /nonexistent/node" in err, err


def test_a_program_it_cannot_make_non_dumpable_is_not_started_unless_allowed(tmp_path):
    # As on another architecture, or where a seccomp profile refuses ptrace.
    marker = tmp_path / "ran"
    code = (
        "import sys; from memfs.worker import non_dumpable_child as c;"
        "c.supported = lambda: 'not supported here (the test says so)';"
        "from memfs.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    program = ["--", "/bin/sh", "-c", f"cat <&$MEMFS_SECRETS_FD > {marker}"]
    env = {**os.environ, "ANTHROPIC_WORK_SECRET": SECRET}
    refused = subprocess.run(
        [sys.executable, "-c", code, "worker-launch", *program],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert refused.returncode == 70 and "cannot be made non-dumpable" in refused.stderr, refused.stderr
    assert not marker.exists()
    allowed = subprocess.run(
        [sys.executable, "-c", code, "worker-launch", "--allow-dumpable", *program],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert allowed.returncode == 0 and "runs dumpable" in allowed.stderr, allowed.stderr
    assert SECRET in marker.read_text()


@pytest.mark.parametrize("machine", ["aarch64", "armv7l", "i686", "riscv64"])
def test_off_x86_64_the_launcher_fails_closed_and_names_the_architecture(tmp_path, machine):
    # The syscall it places in the child is x86_64's: on any other machine nothing is started (no
    # fall-back to a dumpable node holding the secret), and the error says why.
    marker = tmp_path / "ran"
    code = (
        f"import platform, sys; platform.machine = lambda: {machine!r};"
        "from memfs.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    refused = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "worker-launch",
            "--",
            "/bin/sh",
            "-c",
            f"cat <&$MEMFS_SECRETS_FD > {marker}",
        ],
        env={**os.environ, "ANTHROPIC_WORK_SECRET": SECRET},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert refused.returncode == 70, refused.stderr
    assert f"not supported on Linux {machine} (only Linux x86_64)" in refused.stderr, refused.stderr
    assert "--allow-dumpable" in refused.stderr and SECRET not in refused.stderr
    assert not marker.exists()
