"""The mount against a real service, driven by real shell tools (issue: memfs mount)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from tests.support.mounts import sh
from tests.support.sandbox import is_mounted
from tests.support.world import RO_SEED, RW_SEED

pytestmark = pytest.mark.timeout(120)

RW, RO = "work-notes", "team-handbook"


def files_under(top) -> dict[str, str]:
    out = {}
    for dirpath, _dirs, names in os.walk(top):
        for n in names:
            full = os.path.join(dirpath, n)
            rel = "/" + os.path.relpath(full, top)
            if rel in ("/.anthropic-memory-store", "/.sync-notices.log"):
                continue
            with open(full, encoding="utf-8") as f:
                out[rel] = f.read()
    return out


def materialise(contents: dict[str, str], top) -> None:
    for path, content in contents.items():
        full = os.path.join(top, path.lstrip("/"))
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write(content)


def test_mounted_stores_match_the_api_byte_for_byte(world, mounted, api, tmp_path):
    root = mounted.root
    assert sorted(os.listdir(root)) == [RO, RW]
    ls = sh(f"ls -la {root}/{RW} {root}/{RW}/notes", check=True).stdout
    assert "todo.md" in ls and ".anthropic-memory-store" in ls
    # Every tool agrees with the service, byte for byte.
    for slug, store, seed in ((RW, world.rw, RW_SEED), (RO, world.ro, RO_SEED)):
        expected = api.contents(store)
        assert expected == seed
        assert files_under(root / slug) == expected
        ref = tmp_path / f"ref-{slug}"
        materialise(expected, ref)
        diff = sh(
            f"diff -r --exclude=.anthropic-memory-store --exclude=.sync-notices.log {ref} {root}/{slug}",
            check=False,
        )
        assert diff.returncode == 0, diff.stdout
        found = sh(f"cd {root}/{slug} && find . -type f ! -name '.*' | sort", check=True).stdout.split()
        assert found == sorted("." + p for p in expected)
        for path, content in expected.items():
            assert sh(f"cat '{root}/{slug}{path}'", check=True).stdout == content
            wc = sh(f"wc -c < '{root}/{slug}{path}'", check=True).stdout.strip()
            assert int(wc) == len(content.encode())
    grep = sh(f"grep -r milk {root}", check=True).stdout
    assert grep.strip() == f"{root}/{RW}/notes/todo.md:- buy milk"
    marker = (root / RW / ".anthropic-memory-store").read_bytes()
    assert marker == f"version 1\n{world.rw}".encode()


def test_shell_tools_behave_as_on_a_local_disk(world, mounted, api, tmp_path):
    ref = tmp_path / "ref"
    materialise(RW_SEED, ref)
    script = textwrap.dedent(
        """
        set -e
        echo "- more" >> notes/todo.md
        sed -i 's/milk/bread/' notes/todo.md
        cp -r notes notes-copy
        mv profile.md profile-renamed.md
        mv notes-copy archive
        rm -r unicode
        mkdir -p a/b/c
        echo hi > a/b/c/hi.txt
        truncate -s 5 notes/deep/nested/idea.md
        printf 'new body\\n' > .todo.md.swp && mv .todo.md.swp notes/todo.md
        python3 -c "
        f = open('empty.md', 'r+b'); f.seek(10); f.write(b'x'); f.seek(0); f.write(b'ab'); f.close()"
        """
    )
    sh(script, cwd=ref, check=True)
    before = api.memories(world.rw)  # before the script: a live mount pushes its edits at once
    sh(script, cwd=mounted.root / RW, check=True)
    assert files_under(mounted.root / RW) == files_under(ref)
    diff = sh(
        f"diff -r --exclude=.anthropic-memory-store --exclude=.sync-notices.log {ref} {mounted.root / RW}",
        check=False,
    )
    assert diff.returncode == 0, diff.stdout
    status = mounted.status()
    staged = {s["slug"]: s["staged"] for s in status["stores"]}
    assert staged[RO] == 0
    # The staged changes describe exactly these edits: once pushed, the store holds the local view.
    mounted.sync()
    after = api.memories(world.rw)
    assert {p: m["content"] for p, m in after.items()} == files_under(ref)
    # Renames and the editor save kept their memory ids.
    assert after["/profile-renamed.md"]["id"] == before["/profile.md"]["id"]
    assert after["/notes/todo.md"]["id"] == before["/notes/todo.md"]["id"]
    assert after["/archive/deep/nested/idea.md"]["id"] not in {m["id"] for m in before.values()}
    assert {s["slug"]: s["staged"] for s in mounted.status()["stores"]}[RW] == 0


@pytest.mark.parametrize("where", ["ro", "root"])
def test_read_only_store_and_root_refuse_every_mutation(world, mounted, api, where):
    top = mounted.root / RO if where == "ro" else mounted.root
    target = "handbook/style.md" if where == "ro" else RW
    for cmd in (
        "touch newfile",
        "echo x > newfile",
        "mkdir newdir",
        f"rm -f {target}" if where == "ro" else f"rmdir {RW}",
        f"mv {target} moved",
        "sed -i s/a/b/ handbook/style.md" if where == "ro" else "true > newfile2",
        "echo x >> handbook/style.md" if where == "ro" else f"rmdir {RO}",
    ):
        proc = sh(cmd, cwd=top, check=False)
        assert proc.returncode != 0, cmd
        assert "Read-only file system" in proc.stderr, (cmd, proc.stderr)
    if where == "ro":
        assert files_under(top) == RO_SEED
    assert sorted(os.listdir(mounted.root)) == [RO, RW]
    assert all(s["staged"] == 0 for s in mounted.status()["stores"])


def test_refused_file_types_names_and_sizes(mounted):
    top = mounted.root / RW
    for cmd, message in (
        ("ln -s profile.md link", "Operation not permitted"),
        ("ln profile.md hard", "Operation not permitted"),
        ("mkfifo fifo", "Operation not permitted"),
        ("setfattr -n user.x -v 1 profile.md", "Operation not supported"),
    ):
        proc = sh(cmd, cwd=top, check=False)
        assert proc.returncode != 0 and message in proc.stderr, (cmd, proc.stderr)
    import errno

    with pytest.raises(OSError) as e:
        os.open(top / ("x" * 256), os.O_CREAT | os.O_WRONLY)
    assert e.value.errno == errno.ENAMETOOLONG
    with pytest.raises(OSError) as e:
        os.open(os.fsencode(top) + b"/bad-\xff.md", os.O_CREAT | os.O_WRONLY)
    assert e.value.errno == errno.EINVAL
    (top / "max.md").write_bytes(b"a" * 102_400)  # the limit itself fits
    assert (top / "max.md").stat().st_size == 102_400
    f = open(top / "big.md", "wb", buffering=0)
    f.write(b"a" * 102_400)
    with pytest.raises(OSError) as e:
        f.write(b"b")
    assert e.value.errno == errno.EFBIG
    with pytest.raises(OSError) as e:
        f.close()  # a failed writer: nothing of it is kept, and its close says so
    assert e.value.errno == errno.EFBIG
    assert not (top / "big.md").exists()  # the file that writer created is gone again
    marker = top / ".anthropic-memory-store"
    for action in (lambda: marker.unlink(), lambda: marker.write_text("x"), lambda: marker.rename(top / "m")):
        with pytest.raises(OSError):
            action()
    assert marker.read_text().startswith("version 1\n")


def test_the_2001st_file_is_refused_with_enospc(world, api, tmp_path):
    box = world.sandbox("limits")
    box.mount("--max-files", "10")
    top = box.root / RW
    existing = len(RW_SEED)
    for i in range(10 - existing):
        (top / f"f{i}.md").write_text("x")
    import errno

    with pytest.raises(OSError) as e:
        (top / "one-too-many.md").write_text("x")
    assert e.value.errno == errno.ENOSPC


@pytest.mark.expected_log(r"ERROR memfs: something already exists at the memory store's path")
def test_non_empty_root_is_refused_naming_it(world):
    box = world.sandbox("busy")
    (box.root / "leftover").write_text("x")
    proc = box.mount(check=False)
    assert proc.returncode != 0
    assert str(box.root) in proc.stderr and "already exists" in proc.stderr
    assert not is_mounted(box.root)


@pytest.mark.expected_log(r"ERROR memfs: the session has memory stores attached but no sessions token")
def test_missing_token_is_a_clear_error(world):
    box = world.sandbox("notoken")
    box.env.pop("ANTHROPIC_WORK_SECRET")
    proc = box.mount(check=False)
    assert proc.returncode != 0
    assert "no sessions token" in proc.stderr
    assert not is_mounted(box.root)


def test_kill9_then_remount_keeps_every_closed_change(world, mounted, api):
    top = mounted.root / RW
    (top / "notes" / "todo.md").write_text("edited before the crash\n")
    (top / "new.md").write_text("created before the crash\n")
    mounted.kill9()
    mounted.mount()  # clears the dead mount, recovers the state dir
    assert (top / "notes" / "todo.md").read_text() == "edited before the crash\n"
    assert (top / "new.md").read_text() == "created before the crash\n"
    mounted.sync()
    contents = api.contents(world.rw)
    assert contents["/notes/todo.md"] == "edited before the crash\n"
    assert contents["/new.md"] == "created before the crash\n"


@pytest.mark.expected_log(r"ERROR memfs: the state dir .* is in use by a live mount")
def test_second_mount_on_a_live_state_dir_is_refused(world, mounted, tmp_path):
    other_root = tmp_path / "other-root"
    other_root.mkdir()
    proc = mounted.memfs("mount", "--root", str(other_root), "--state-dir", str(mounted.state_dir))
    assert proc.returncode != 0
    assert "in use" in proc.stderr and str(mounted.state_dir) in proc.stderr
    assert not is_mounted(other_root)


def test_unmount_leaves_the_root_empty_and_unmounted(world, mounted, api):
    (mounted.root / RW / "last.md").write_text("last words\n")
    proc = mounted.unmount()
    assert proc.returncode == 0, proc.stderr
    assert not is_mounted(mounted.root)
    assert os.listdir(mounted.root) == []
    assert api.contents(world.rw)["/last.md"] == "last words\n"
    assert shutil.which("fusermount3")


def test_the_daemon_stays_in_the_callers_session_in_a_process_group_of_its_own(mounted):
    """Not a session of its own: the scheduler's autogroups are per session, and a daemon in a
    new one waited for the CPU once more per FUSE request on a busy machine (PERFORMANCE.md
    "Reads"). Its own process group keeps the caller's ^C and job control away; SIGHUP (a
    terminal hang-up) does not stop it."""
    import signal

    pid = mounted.daemon_pid()
    assert pid
    assert os.getsid(pid) == os.getsid(0)
    assert os.getpgid(pid) == pid != os.getpgid(0)
    os.kill(pid, signal.SIGHUP)
    assert mounted.status()["live"] is True
    assert (mounted.root / RW / "profile.md").read_text() == RW_SEED["/profile.md"]


def test_sigterm_runs_the_final_sync_then_unmounts(world, mounted, api):
    import signal

    from tests.support.sandbox import _wait_dead

    (mounted.root / RW / "before-sigterm.md").write_text("pushed by the final sync\n")
    pid = mounted.daemon_pid()
    os.kill(pid, signal.SIGTERM)
    _wait_dead(pid, timeout=40)
    assert not is_mounted(mounted.root)
    assert api.contents(world.rw)["/before-sigterm.md"] == "pushed by the final sync\n"
    status = mounted.status()  # no daemon: read from the state dir
    assert status["live"] is False and {s["slug"] for s in status["stores"]} == {RW, RO}


def test_mount_prints_its_whole_answer_and_exits_zero_through_a_pipe(world):
    # The CLI ends with os._exit once the daemon is ready (no interpreter shutdown): its answer
    # must still reach a pipe whole, with status 0, and a reader that closed the pipe early gets
    # a failing status, not a silent success.
    box = world.sandbox("piped")
    proc = box.mount()
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"memfs: mounted 2 store(s) at {box.root} (state dir {box.state_dir})"
    assert sorted(line.split()[0] for line in lines[1:]) == sorted([f"{box.root}/{RO}", f"{box.root}/{RW}"])
    assert proc.stderr == ""
    box.memfs("unmount", "--root", str(box.root), check=True)

    closed = world.sandbox("closed-pipe")
    args = [sys.executable, "-m", "memfs", "mount", "--root", str(closed.root)]
    args += ["--state-dir", str(closed.state_dir), "--sync-interval", "5"]
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody reads: the answer cannot be written
    try:
        rc = subprocess.run(
            args, env=closed.env, stdout=write_end, stderr=subprocess.PIPE, timeout=90
        ).returncode
    finally:
        os.close(write_end)
    assert rc != 0
    assert is_mounted(closed.root)  # the mount itself is up; only its answer was lost


def test_a_state_dir_too_long_for_its_control_socket_is_refused_with_the_fix(world, mounted, tmp_path):
    # A unix socket's path holds at most 107 bytes: the daemon could never listen there, and a
    # command looking for it must say so instead of failing with a traceback.
    other_root = tmp_path / "other-root"
    other_root.mkdir()
    long_dir = tmp_path / ("s" * 60) / ("t" * 60)
    proc = mounted.memfs("mount", "--root", str(other_root), "--state-dir", str(long_dir))
    assert proc.returncode != 0
    assert "too long" in proc.stderr and "--state-dir" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not is_mounted(other_root)
    status = mounted.memfs("status", "--root", str(other_root / ("u" * 120)))
    assert status.returncode != 0 and "Traceback" not in status.stderr, status.stderr
