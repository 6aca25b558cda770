"""Failed writers and half-created files never reach the store (docs/SEMANTICS.md#d-fs, "Failed writers").

Real tools through a real mount against a real `memfs serve`: each tool is given more than a
memory can hold (150,000 bytes; the limit is 102,400) or content the store cannot hold, fails,
and after a forced sync the store still holds the previous content, the memory's version history
holds nothing but its creation, and a file the failed tool created never reaches the store.
"""

from __future__ import annotations

import os
import textwrap

import pytest

from tests.support.mounts import sh

pytestmark = pytest.mark.timeout(120)

RW = "work-notes"
BIG = 150_000

# The official agent file tools (package `anthropic`), called as the worker calls them.
AGENT_TOOL = textwrap.dedent("""
    import asyncio, sys
    from anthropic.lib.tools.agent_toolset import AgentToolContext, beta_edit_tool, beta_write_tool
    async def main():
        ctx = AgentToolContext(workdir=sys.argv[1])
        if sys.argv[2] == "write":
            tool, args = beta_write_tool(ctx), {"file_path": sys.argv[3], "content": "w" * 150_000}
        else:
            tool = beta_edit_tool(ctx)
            args = {"file_path": sys.argv[3], "old_string": sys.argv[4], "new_string": "e" * 150_000}
        try:
            result = await tool.call(args)
        except Exception as e:
            sys.exit(f"{type(e).__name__}: {e}")
        if "too large" in str(result).lower() or "error" in str(result).lower():
            sys.exit(str(result))
        print(result)
    asyncio.run(main())
""")

# name -> (shell command run in the store's directory, the memory path it aims at, a file the
# tool creates that must never reach the store or None). $BIGFILE is a 150,000-byte file.
CASES = {
    "python-o-trunc": ("\"$PY\" -c \"open('profile.md', 'w').write('x' * 150000)\"", "/profile.md"),
    "agent-write": (f'"$PY" -c \'{AGENT_TOOL}\' "$PWD" write profile.md', "/profile.md"),
    "agent-edit": (f'"$PY" -c \'{AGENT_TOOL}\' "$PWD" edit notes/todo.md "buy milk"', "/notes/todo.md"),
    "cp": ('cp "$BIGFILE" profile.md', "/profile.md"),
    "tar-x": ('tar -xf "$ARCHIVE"', "/notes/todo.md"),
    "printf-new": ('printf "%s" "$(cat "$BIGFILE")" > new.md', "/new.md"),
    "sqlite3-new": (
        "\"$PY\" -c \"import sqlite3; c = sqlite3.connect('x.db'); c.execute('create table t(a)'); c.commit()\"",
        "/x.db",
    ),
}


def _history(api, store, memory_id) -> list[tuple[str, int | None]]:
    return [(v["operation"], v["content_size_bytes"]) for v in api.versions(store, memory_id)]


@pytest.mark.parametrize("case", list(CASES))
def test_a_failed_writer_leaves_the_store_as_it_was(world, mounted, api, tmp_path, case):
    cmd, target = CASES[case]
    store = mounted.root / RW
    before = api.memories(world.rw)
    big = tmp_path / "big"
    big.write_bytes(b"b" * BIG)
    archive_src = tmp_path / "tree"
    (archive_src / "notes").mkdir(parents=True)
    (archive_src / "notes" / "todo.md").write_bytes(b"t" * BIG)
    archive = tmp_path / "tree.tar"
    sh(f"tar -cf {archive} -C {archive_src} notes/todo.md", check=True)

    out = sh(cmd, cwd=store, env={"BIGFILE": str(big), "ARCHIVE": str(archive)})
    assert out.returncode != 0, f"{case}: the tool did not notice its failure:\n{out.stdout}\n{out.stderr}"

    mounted.sync()
    after = api.memories(world.rw)
    assert {p: m["content"] for p, m in after.items()} == {p: m["content"] for p, m in before.items()}
    for path, m in after.items():  # no empty, cut or any other new version
        assert _history(api, world.rw, m["id"]) == [("created", len(m["content"].encode()))], path
    local = store / target.lstrip("/")
    if target in before:
        assert local.read_text() == before[target]["content"]  # the mount shows it as it was
    else:
        assert not local.exists()
    assert not [p for p in os.listdir(store) if p.startswith("x.db")]  # no journal left either
    failed = [line for line in mounted.notices(RW) if " write-failed " in line]
    assert failed and all(f" {target}" in line or "x.db" in line for line in failed), failed


def test_a_new_file_held_open_by_its_writer_is_not_pushed(world, mounted, api):
    path = mounted.root / RW / "held.md"
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        os.write(fd, b"x")
        mounted.sync()
        assert "/held.md" not in api.memories(world.rw)  # not even empty
    finally:
        os.close(fd)
    mounted.sync()
    m = api.memories(world.rw)["/held.md"]
    assert m["content"] == "x"
    assert _history(api, world.rw, m["id"]) == [("created", 1)]
