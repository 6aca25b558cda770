"""Screenshots of the console's main pages, taken in the real browser on a store that looks lived in.

They go to tmp_path; to refresh the ones in the docs:
    MEMFS_SCREENSHOT_DIR=docs/console .venv/bin/python -m pytest tests/service/console/test_screenshots.py
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import anthropic
import pytest

pytestmark = pytest.mark.timeout(120)

NOTES = {
    "/profile/user.md": "# User profile\n\n- Name: Ann Example\n- Prefers concise answers, metric units\n"
    "- Time zone: Europe/Berlin\n",
    "/projects/memfs/decisions.md": "# Decisions\n\n1. The store is the source of truth.\n"
    "2. Renames keep the memory id.\n3. Conflicts are shown, never overwritten.\n",
    "/projects/memfs/todo.md": "# TODO\n\n- [x] console: sign-in\n- [x] console: history and diffs\n"
    "- [ ] PostgreSQL replicas\n",
    "/projects/website/notes.md": "Launch checklist lives in the wiki.\n",
    "/recipes/bread.md": "# Bread\n\n500 g flour, 350 g water, 10 g salt, 5 g yeast.\nBake 40 min at 230 °C.\n",
    "/style.md": "Write short sentences. Name things for what they hold.\n",
}


def shoot(page, out: Path, name: str) -> None:
    path = out / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000, name  # a rendered page, not a blank one


def test_screenshots_of_the_main_pages(browser, console_service, tmp_path):
    out = Path(os.environ.get("MEMFS_SCREENSHOT_DIR") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    api = anthropic.Anthropic(
        api_key=console_service.admin_key, base_url=console_service.base_url, max_retries=0
    )
    store = api.beta.memory_stores.create(
        name="Ann's assistant", description="What the assistant remembers about Ann and her projects."
    )
    api.beta.memory_stores.create(name="Team handbook", description="Shared, read-only for agents")
    api.beta.memory_stores.create(name="Support bot", description="Customer-facing agent's memory")
    mems = {p: api.beta.memory_stores.memories.create(store.id, path=p, content=c) for p, c in NOTES.items()}
    todo = mems["/projects/memfs/todo.md"]
    api.beta.memory_stores.memories.update(
        todo.id, memory_store_id=store.id,
        content=NOTES["/projects/memfs/todo.md"].replace("- [ ] PostgreSQL", "- [x] PostgreSQL") + "- [ ] screenshots\n",
    )  # fmt: skip
    session = console_service.create_session([(store.id, "read_write")])
    token = json.loads(base64.urlsafe_b64decode(session["work_secret"]))["sessions_token"]
    agent = anthropic.Anthropic(api_key=token, base_url=console_service.base_url, max_retries=0)

    ctx = browser.new_context(base_url=console_service.base_url, viewport={"width": 1200, "height": 760})
    try:
        page = ctx.new_page()
        page.goto("/console/")
        shoot(page, out, "login")
        page.fill("#admin_key", console_service.admin_key)
        page.click("button[type=submit]")
        page.wait_for_url("**/console/")
        shoot(page, out, "stores")
        page.goto(f"/console/stores/{store.id}")
        shoot(page, out, "store")
        page.goto(f"/console/stores/{store.id}/memories?prefix=/projects/memfs/")
        shoot(page, out, "browse")
        page.goto(f"/console/stores/{store.id}/memories/{todo.id}")
        shoot(page, out, "memory")
        page.goto(f"/console/stores/{store.id}/memories/{todo.id}/edit")
        page.fill("#content", page.input_value("#content") + "- [ ] write the release notes\n")
        shoot(page, out, "edit")
        agent.beta.memory_stores.memories.update(  # the agent writes meanwhile, through its session
            todo.id, memory_store_id=store.id,
            content=agent.beta.memory_stores.memories.retrieve(todo.id, memory_store_id=store.id).content
            + "- [ ] agent: benchmark the console\n",
        )  # fmt: skip
        page.click("#save")
        page.wait_for_selector("#conflict")
        shoot(page, out, "conflict")
        page.goto(f"/console/stores/{store.id}/memories/{todo.id}/history")
        shoot(page, out, "history")
        page.click("#compare")
        page.wait_for_selector("table.diff")
        shoot(page, out, "diff")
    finally:
        ctx.close()
        api.close()
        agent.close()
