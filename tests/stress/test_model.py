"""Differential model test (docs/DESIGN.md#stress): the mount against a plain directory.

A Hypothesis state machine applies the same random operation to a plain temp directory (the
model) and to a fresh sub-directory of the read_write store of a real mount, and demands equal
results and equal errnos. Where memfs deliberately differs from a local disk the model encodes
its promise (docs/SEMANTICS.md#d-fs): a name the store cannot hold is EINVAL, a file crossing 102,400 bytes is EFBIG (nothing
of that write lands), content that is not UTF-8 fails its close with EILSEQ (the content stays,
local only). Writers that fail (docs/SEMANTICS.md, "Failed writers") are undone at their close: an oversized write after
O_TRUNC, content that is not UTF-8 at fsync, a writer SIGKILLed after a failed write — the file
is as it was before that writer, a file it created is gone; a writer SIGKILLed after good writes
keeps them (the kernel closes its files). `memfs sync --force --wait` is interleaved; after
each, the store read through the API must hold exactly what the mount shows (files -> content;
empty directories are not stored).

One mount serves every example (a fresh `exN/` directory each); the short profile runs in CI, the
long one (MEMFS_STRESS=long) from scripts/stress.
"""

from __future__ import annotations

import errno
import itertools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from tests.stress.conftest import RW, profile, rig_world, walk
from tests.support.sandbox import SandboxWorld
from tests.support.service import ServiceProcess

pytestmark = pytest.mark.timeout(profile(150, 3600))

LIMIT = 102_400
BAD = "bad\\name"  # a backslash: a name the store cannot hold (EINVAL)
NAMES = ["a", "b", "c.md"]
PATHS = ["/".join(p) for n in (1, 2, 3) for p in itertools.product(NAMES, repeat=n)] + [
    BAD,
    f"a/{BAD}",
    "b/c.md/" + BAD,
]
paths = st.sampled_from(PATHS)
# ASCII plus a two-byte character: writes at an offset can cut one in half (-> not UTF-8).
data = st.text(alphabet="ab\né", min_size=1, max_size=6).map(lambda s: s.encode())
offsets = st.sampled_from([0, 1, 2, 3, 7, LIMIT - 4, LIMIT - 1])
sizes = st.sampled_from([0, 1, 2, 5, LIMIT, LIMIT + 1])


def _utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def outcome(fn):
    """('ok', value) or ('err', errno name)."""
    try:
        return ("ok", fn())
    except OSError as e:
        return ("err", errno.errorcode.get(e.errno, str(e.errno)))


def _close_keeping_first_error(fd: int, first: OSError | None) -> None:
    """Close `fd` whatever happened; raise the first error (the write's, else the close's)."""
    try:
        os.close(fd)
    except OSError as e:
        first = first or e
    if first:
        raise first


def _write(p: Path, flags: int, chunks: list[tuple[int | None, bytes]]):
    """open/write.../close as one operation; the first error wins, the handle is always closed."""
    fd = os.open(p, flags, 0o644)
    first: OSError | None = None
    try:
        for off, chunk in chunks:
            if off is None:
                os.write(fd, chunk)
            else:
                os.pwrite(fd, chunk, off)
    except OSError as e:
        first = e
    _close_keeping_first_error(fd, first)
    return None


# A writer in its own process: open, write the chunks (stop at the first error), report the
# first errno (or "ok"), then wait to be SIGKILLed with the file still open: the kernel closes
# it for the dead process (flush + release), as it does for an agent tool killed mid-write.
KILLED_WRITER = """
import errno, os, sys
result = "ok"
try:
    fd = os.open(sys.argv[1], int(sys.argv[2]), 0o644)
    for n in sys.argv[3:]:
        data = b"k" * int(n)
        while data:  # as tools do: a short write is retried with the rest
            data = data[os.write(fd, data):]
except OSError as e:
    result = errno.errorcode[e.errno]
print(result, flush=True)
sys.stdin.read()
"""


def _killed_writer(p: Path, flags: int, sizes: list[int]):
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(p), str(flags), *map(str, sizes)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline().strip()  # type: ignore[union-attr]
    finally:
        proc.kill()
        proc.communicate(timeout=30)  # reaped: the kernel has closed (flushed) its files
    if line != "ok":
        raise OSError(getattr(errno, line, errno.EIO), line)
    return None


def _fsync_write(p: Path, body: bytes):
    """append + fsync + close; the first error wins."""
    fd = os.open(p, os.O_WRONLY | os.O_APPEND)
    first: OSError | None = None
    try:
        os.write(fd, body)
        os.fsync(fd)
    except OSError as e:
        first = e
    _close_keeping_first_error(fd, first)


def _stat(p: Path):
    s = os.stat(p)
    return ("dir", 0) if os.path.isdir(p) else ("file", s.st_size)


class Ctx:
    rig: SandboxWorld
    box = None
    model_top: Path
    n = 0
    stats = None
    syncs = 0


class MountModel(RuleBasedStateMachine):
    ctx = Ctx

    @initialize()
    def fresh_directory(self):
        c = self.ctx
        c.n += 1
        self.name = f"ex{c.n}"
        self.model = c.model_top / self.name
        self.mount = c.box.root / RW / self.name
        self.model.mkdir(parents=True)
        self.mount.mkdir()
        self.steps = 0

    # -- helpers ----------------------------------------------------------------------------
    def _both(self, op: str, fn, expected=None):
        """Run fn on the mount; on the model too unless memfs's promise decides (`expected`)."""
        self.steps += 1
        self.ctx.stats["steps"] += 1
        want = expected if expected is not None else outcome(lambda: fn(self.model))
        got = outcome(lambda: fn(self.mount))
        assert got == want, f"{op}: mount {got} != model {want}"
        return got

    def _kind(self, rel: str) -> str | None:
        p = self.model / rel
        if p.is_dir():
            return "dir"
        if p.exists():
            return "file"
        return None

    def _creates_bad_name(self, rel: str) -> bool:
        """The entry would get a name the store refuses, and nothing else fails first."""
        parent, _, name = rel.rpartition("/")
        return name == BAD and (parent == "" or self._kind(parent) == "dir") and BAD not in parent

    def _spec_write(self, rel: str, new_content) -> tuple | None:
        """The promised outcome (docs/SEMANTICS.md#d-fs) of a write to an existing file: EFBIG past the limit, EILSEQ if not UTF-8."""
        if new_content is None:
            return None
        if len(new_content) > LIMIT:
            return ("err", "EFBIG")
        if not _utf8(new_content):
            # The content is kept (view and state dir), the close reports EILSEQ.
            return ("err", "EILSEQ")
        return None

    def _apply_model_then_expect(self, op: str, fn, rel: str, new_content):
        spec = self._spec_write(rel, new_content)
        if spec == ("err", "EFBIG"):
            self._both(op, fn, expected=spec)  # nothing lands: the model stays as it is
            return
        want = outcome(lambda: fn(self.model))
        if spec is not None and want[0] == "ok":
            want = spec
        self._both(op, fn, expected=want)

    # -- rules ------------------------------------------------------------------------------
    @rule(rel=paths, body=data)
    def create_or_overwrite(self, rel, body):
        fn = lambda top: _write(top / rel, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, [(None, body)])  # noqa: E731
        if self._creates_bad_name(rel) and self._kind(rel) is None:
            self._both("create", fn, expected=("err", "EINVAL"))
            return
        new = body if self._kind(rel) in ("file", None) else None
        self._apply_model_then_expect(f"create {rel}", fn, rel, new)

    @rule(rel=paths, off=offsets, body=data)
    def write_at(self, rel, off, body):
        fn = lambda top: _write(top / rel, os.O_WRONLY, [(off, body)])  # noqa: E731
        new = None
        if self._kind(rel) == "file":
            old = (self.model / rel).read_bytes()
            grown = old.ljust(off, b"\0")
            new = grown[:off] + body + grown[off + len(body) :]
            if off + len(body) > LIMIT:
                new = b"x" * (LIMIT + 1)  # only its size matters
        self._apply_model_then_expect(f"write {rel}@{off}", fn, rel, new)

    @rule(rel=paths, body=data)
    def append(self, rel, body):
        fn = lambda top: _write(top / rel, os.O_WRONLY | os.O_APPEND, [(None, body)])  # noqa: E731
        new = (self.model / rel).read_bytes() + body if self._kind(rel) == "file" else None
        self._apply_model_then_expect(f"append {rel}", fn, rel, new)

    @rule(rel=paths, size=sizes)
    def truncate(self, rel, size):
        fn = lambda top: os.truncate(top / rel, size)  # noqa: E731
        if self._kind(rel) == "file" and size > LIMIT:
            self._both(f"truncate {rel} {size}", fn, expected=("err", "EFBIG"))
            return
        # A truncate that cuts a character in half is not refused itself (SEMANTICS.md).
        self._both(f"truncate {rel} {size}", fn)

    # -- writers that fail (SEMANTICS.md "Failed writers"): undone at their close --------------------------------
    def _failing(self, op: str, fn, rel: str, err: str, *, creates: bool):
        """Run a writer that memfs makes fail with `err` (where nothing else fails first): the
        model gets the plain-disk run, then is put back as it was before that writer."""
        self.ctx.stats["faults"] += 1
        if creates and self._creates_bad_name(rel) and self._kind(rel) is None:
            self._both(op, fn, expected=("err", "EINVAL"))
            return
        target = self.model / rel
        old = target.read_bytes() if self._kind(rel) == "file" else None
        want = outcome(lambda: fn(self.model))
        if want[0] == "ok" or want == ("err", err):
            if old is not None:
                target.write_bytes(old)
            elif target.is_file():
                target.unlink()
            want = ("err", err)
        self._both(op, fn, expected=want)

    @rule(rel=paths, trunc=st.booleans())
    def oversized_write(self, rel, trunc):
        """The agent's `write` tool / cp / tar: a good chunk, then the one that crosses the limit."""
        flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if trunc else 0)
        fn = lambda top: _write(top / rel, flags, [(0, b"o" * (LIMIT - 10)), (LIMIT - 10, b"o" * 20)])  # noqa: E731
        self._failing(f"oversized write {rel}", fn, rel, "EFBIG", creates=True)

    @rule(rel=paths, body=data)
    def fsync_not_utf8(self, rel, body):
        fn = lambda top: _fsync_write(top / rel, body + b"\xff")  # noqa: E731
        self._failing(f"fsync not-UTF-8 {rel}", fn, rel, "EILSEQ", creates=False)

    @rule(rel=paths, fail=st.booleans(), n=st.sampled_from([0, 1, 5]))
    def killed_writer(self, rel, fail, n):
        """A writer SIGKILLed mid-write (file still open): its good writes stay (the kernel
        closes the file for it), a failed one is undone."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        sizes = [n, LIMIT + 1] if fail else [n]  # the second write always crosses the limit
        fn = lambda top: _killed_writer(top / rel, flags, sizes)  # noqa: E731
        if fail:
            self._failing(f"killed failed writer {rel}", fn, rel, "EFBIG", creates=True)
            return
        self.ctx.stats["faults"] += 1
        if self._creates_bad_name(rel) and self._kind(rel) is None:
            self._both(f"killed writer {rel}", fn, expected=("err", "EINVAL"))
            return
        self._both(f"killed writer {rel}", fn)

    @rule(src=paths, dst=paths)
    def rename(self, src, dst):
        fn = lambda top: os.rename(top / src, top / dst)  # noqa: E731
        if (
            self._kind(src) is not None
            and self._creates_bad_name(dst)
            and not (dst + "/").startswith(src + "/")
        ):
            self._both(f"rename {src} {dst}", fn, expected=("err", "EINVAL"))
            return
        self._both(f"rename {src} {dst}", fn)

    @rule(rel=paths)
    def unlink(self, rel):
        self._both(f"unlink {rel}", lambda top: os.unlink(top / rel))

    @rule(rel=paths)
    def mkdir(self, rel):
        fn = lambda top: os.mkdir(top / rel)  # noqa: E731
        if self._creates_bad_name(rel):
            self._both(f"mkdir {rel}", fn, expected=("err", "EINVAL"))
            return
        self._both(f"mkdir {rel}", fn)

    @rule(rel=paths)
    def rmdir(self, rel):
        self._both(f"rmdir {rel}", lambda top: os.rmdir(top / rel))

    @rule(rel=paths)
    def read(self, rel):
        self._both(f"read {rel}", lambda top: (top / rel).read_bytes())

    @rule(rel=paths)
    def stat(self, rel):
        self._both(f"stat {rel}", lambda top: _stat(top / rel))

    @rule(rel=st.sampled_from(["", *PATHS[:12]]))
    def listdir(self, rel):
        self._both(f"listdir {rel}", lambda top: sorted(os.listdir(top / rel)))

    @rule()
    def sync(self):
        self.check_store()

    # -- checks -----------------------------------------------------------------------------
    @invariant()
    def trees_agree(self):
        if not hasattr(self, "model"):
            return
        assert walk(self.mount) == walk(self.model)
        dirs = lambda top: sorted(os.path.relpath(d, top) for d, _, _ in os.walk(top))  # noqa: E731
        assert dirs(self.mount) == dirs(self.model)

    def check_store(self):
        c = self.ctx
        c.syncs += 1
        answer = c.box.sync()
        assert answer.get("ok"), answer
        shown = walk(self.mount)
        prefix = f"/{self.name}/"
        stored = {
            p[len(prefix) - 1 :]: m["content"].encode()
            for p, m in c.rig.api.memories(c.rig.rw).items()
            if p.startswith(prefix)
        }
        valid = {p: b for p, b in shown.items() if _utf8(b)}
        local_only = len(shown) - len(valid)  # not UTF-8: stays local (its memory keeps the last good state)
        if not local_only:
            assert stored == valid, "the store does not hold what the mount shows"
        else:
            assert {p: stored.get(p) for p in valid} == valid
            assert len(set(stored) - set(valid)) <= local_only

    def teardown(self):
        if not hasattr(self, "model"):
            return
        try:
            self.check_store()
        finally:
            shutil.rmtree(self.mount, ignore_errors=True)
            shutil.rmtree(self.model, ignore_errors=True)


@pytest.fixture(scope="module", params=["counter", "hosted-api", "relay"])
def model_mount(tmp_path_factory, request):
    """The mount against memfs serve, against the hosted API (`--hosted-api`: no counter, the
    version feed tells the mount what changed, SEMANTICS.md#d-no-counter), and through a relay in
    front of the hosted API (`memfs serve --upstream`: the relay's counter, changes and watch;
    writes go through to the upstream, whose store the checks read)."""
    tmp = tmp_path_factory.mktemp("model")
    service = ServiceProcess(tmp / "service", hosted_api=request.param != "counter")
    relay = None
    rig = None
    try:
        if request.param == "relay":
            relay = ServiceProcess(
                tmp / "relay", extra_args=("--upstream", service.base_url, "--poll-interval", "1")
            )
        rig = rig_world(tmp, service=service)
        box = rig.sandbox("m", base_url=relay.base_url if relay else None)
        box.mount()
        yield rig, box, relay
    finally:
        if rig is not None:
            rig.close()
        if relay is not None:
            relay.stop()
        service.stop()


def test_mount_matches_a_plain_directory(model_mount, stats, tmp_path):
    rig, box, relay = model_mount
    Ctx.rig, Ctx.box, Ctx.model_top, Ctx.stats = rig, box, tmp_path / "model", stats
    try:
        run_state_machine_as_test(
            MountModel,
            settings=settings(
                max_examples=profile(10, 250),
                stateful_step_count=profile(25, 40),
                deadline=None,
                suppress_health_check=list(HealthCheck),
                print_blob=True,
            ),
        )
    except AssertionError:
        stats["divergences"] += 1
        raise
    # Every example ended with a sync and a store check; the mount is still healthy.
    assert box.status()["stores"][0]["last_error"] is None
    if relay is not None:  # and it goes through the relay (the short profile may write nothing)
        (box.root / RW / "through-the-relay.md").write_text("written through the relay\n")
        assert box.sync().get("ok")
        assert rig.api.contents(rig.rw)["/through-the-relay.md"] == "written through the relay\n"
        with httpx.Client(base_url=relay.base_url, headers={"x-api-key": relay.admin_key}) as c:
            status = c.get("/v1/relay_status").json()
        assert status["front_requests"].get("write", 0) > 0, status
        assert [s["cached"] for s in status["stores"]] == [True], status
