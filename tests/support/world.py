"""End-to-end fixtures: a real `memfs serve`, stores seeded through its API, real mounts."""

from __future__ import annotations

import pytest

from tests.support.api import Api
from tests.support.sandbox import Sandbox

RW_SEED = {
    "/notes/todo.md": "# TODO\n- buy milk\n- write tests\n",
    "/notes/deep/nested/idea.md": "an idea, deeply nested\n",
    "/profile.md": "name: agent\nlikes: grep\n",
    "/unicode/café.md": "naïve résumé — ünïcödé ✓\n",
    "/empty.md": "",
}
RO_SEED = {
    "/handbook/style.md": "Write short sentences.\n",
    "/handbook/oncall.md": "Page only for outages.\n",
}


@pytest.fixture
def api(service):
    client = Api(service.base_url, service.admin_key)
    yield client
    client.close()


class World:
    """Two stores (read_write 'work notes', read_only 'team handbook') attached to one session."""

    def __init__(self, service, api: Api, tmp_path):
        self.service = service
        self.api = api
        self.tmp = tmp_path
        self.rw = api.create_store("Work Notes")
        self.ro = api.create_store("Team Handbook")
        for path, content in RW_SEED.items():
            api.create(self.rw, path, content)
        for path, content in RO_SEED.items():
            api.create(self.ro, path, content)
        self.session = api.create_session([(self.rw, "read_write"), (self.ro, "read_only")])
        self.sandboxes: list[Sandbox] = []

    def sandbox(self, name: str = "a", session: dict | None = None) -> Sandbox:
        s = session or self.session
        box = Sandbox(
            self.tmp, name, base_url=self.service.base_url, session_id=s["id"], work_secret=s["work_secret"]
        )
        self.sandboxes.append(box)
        return box

    def close(self) -> None:
        for box in self.sandboxes:
            box.close()


@pytest.fixture
def world(service, api, tmp_path):
    w = World(service, api, tmp_path)
    try:
        yield w
    finally:
        w.close()


@pytest.fixture
def mounted(world):
    box = world.sandbox("a")
    box.mount()
    return box
