"""The console's import streams past the API's 1 MiB body limit: SEMANTICS
promises imports up to 256 MiB spooled to disk, and the service's frame refused any body over
1 MiB before the console saw it. A real `memfs serve --console`, a real browser."""

from __future__ import annotations

import json
import socket

import anthropic
import pytest

from tests.service.console.test_console import all_memories, store_id_from, unique

pytestmark = pytest.mark.timeout(180)

CONTENT = "x" * 99_000 + "\n"  # under the 100 KB a memory may hold


@pytest.fixture
def api(console_service):
    c = anthropic.Anthropic(
        api_key=console_service.admin_key, base_url=console_service.base_url, max_retries=0
    )
    yield c
    c.close()


def export_file(path, memories: dict[str, str], *, extra: list[str] = ()) -> None:
    lines = [json.dumps({"type": "memfs_store_export", "format": 1, "memory_store": {"name": "big"}})]
    lines += [json.dumps({"type": "memory", "path": p, "content": c}) for p, c in memories.items()]
    lines += list(extra)
    lines.append(json.dumps({"type": "memfs_store_export_end", "memory_count": len(memories)}))
    path.write_text("\n".join(lines) + "\n")


def test_a_5_mib_console_import_succeeds(signed_in, api, tmp_path):
    page = signed_in
    memories = {f"/big/{i:03d}.md": f"{i}\n{CONTENT}" for i in range(55)}
    big = tmp_path / "big.jsonl"
    export_file(big, memories)
    assert big.stat().st_size > 5 * 1024 * 1024
    page.goto("/console/import")
    page.set_input_files("#file", str(big))
    name = unique("Five MiB")
    page.fill("#name", name)
    page.click("#import")
    assert "Import finished." in page.inner_text("[role=status]")
    dst = store_id_from(page.url)
    assert api.beta.memory_stores.retrieve(dst).name == name
    assert all_memories(api, dst) == memories


def test_an_import_line_nested_too_deeply_is_named_and_nothing_is_imported(signed_in, api, tmp_path):
    page = signed_in
    deep = tmp_path / "deep.jsonl"
    export_file(
        deep, {"/ok.md": "fine"}, extra=['{"type": "memory", "x": ' + "[" * 50_000 + "]" * 50_000 + "}"]
    )
    before = {s.id for s in api.beta.memory_stores.list(include_archived=True, limit=100)}
    page.goto("/console/import")
    page.set_input_files("#file", str(deep))
    page.fill("#name", unique("must not exist"))
    page.click("#import")
    errors = page.inner_text("#import-errors")
    assert "Nothing was imported" in errors and "line 3: nested too deeply" in errors, errors
    assert {s.id for s in api.beta.memory_stores.list(include_archived=True, limit=100)} == before


def test_a_large_import_without_a_session_is_refused_before_its_body_is_read(console_service):
    head = (
        "POST /console/import HTTP/1.1\r\nhost: x\r\ncontent-type: multipart/form-data; boundary=b\r\n"
        f"content-length: {200 * 1024 * 1024}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", console_service.port), timeout=20) as sock:
        sock.sendall(head.encode() + b"--b\r\n" + b"x" * 65536)  # and nothing more of the 200 MiB
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.split()[1] in (b"303", b"401"), answer[:300]
    assert b"connection: close" in rest.lower(), answer[:500]
