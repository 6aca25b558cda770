"""One way to describe a test world — its stores, what each holds, one session over them — and one
builder that makes it on a store service of any rung.

A world is a list of `StoreSpec`s. `World.build` makes it through a synchronous admin client (the
real `memfs serve` over HTTP: tests/support/api.py's `Api`), `World.abuild` through an async one
(the in-process service: tests/support/inprocess.py's `InProcessService`); both speak the same three
calls (create_store, create, create_session), and the steps are written once, in `_steps`, which
either driver feeds. What a rung puts on top is its own: engine mounts (inprocess.EngineWorld),
`memfs mount` in sandboxes (sandbox.SandboxWorld), the fake platform (worker_world.WorkerWorld).

This module brings nothing up by itself (tests/support/rungs.py): the client handed to it does.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memfs.limits import slugify
from memfs.protocol import Access
from tests.support.api import sessions_token

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


@dataclass(frozen=True)
class StoreSpec:
    """One store of a world: its name (its mount slug follows from it), the session's access to it,
    and the memories it is created with (path -> content). `in_database`: the store and its memories
    are written into the service's database before the service starts (tests/support/seed.py), for
    thousands of memories that would be thousands of requests; the world's maker does that (it
    starts the service: sandbox.SandboxWorld.serving) and hands the builder the stores it made."""

    name: str
    access: Access = "read_write"
    seed: Mapping[str, str] = field(default_factory=dict)
    in_database: bool = False

    @property
    def slug(self) -> str:
        return slugify(self.name)


def notes_and_handbook(
    notes: Mapping[str, str] = RW_SEED,
    handbook: Mapping[str, str] = RO_SEED,
    names: tuple[str, str] = ("Work Notes", "Team Handbook"),
) -> tuple[StoreSpec, StoreSpec]:
    """The usual world: a read_write store of notes and a read_only handbook."""
    return StoreSpec(names[0], "read_write", notes), StoreSpec(names[1], "read_only", handbook)


_Call = tuple[str, tuple[Any, ...]]  # (the admin client method, its arguments)


def _steps(
    specs: Sequence[StoreSpec], premade: Mapping[str, str]
) -> Generator[_Call, Any, tuple[list[str], dict[str, str], dict]]:
    """The admin calls that make a world, each sent to the driver, which sends back the answer. A
    spec named in `premade` (name -> store id) is on the service already, memories and all (one
    `in_database`, or a big store a module's tests share): the session is all that is asked for it."""
    store_ids: list[str] = []
    ids: dict[str, str] = {}
    for spec in specs:
        if spec.in_database or spec.name in premade:
            store_ids.append(premade[spec.name])
            continue
        store = yield "create_store", (spec.name,)
        store_ids.append(store)
        for path, content in spec.seed.items():
            ids[path] = (yield "create", (store, path, content))["id"]
    session = yield "create_session", ([(s, spec.access) for s, spec in zip(store_ids, specs, strict=True)],)
    return store_ids, ids, session


class World:
    """A world made on a service: its stores' ids (in the specs' order), its seeded memories' ids by
    path (a path seeded in two stores: the later one's; none of a store `premade`), and its
    session (the service's record)."""

    specs: tuple[StoreSpec, ...]
    store_ids: list[str]
    ids: dict[str, str]
    session: dict

    def build(self, admin: Any, specs: Sequence[StoreSpec], premade: Mapping[str, str] | None = None) -> None:
        """Make the world through a synchronous admin client."""
        steps, answer = _steps(specs, premade or {}), None
        try:
            while True:
                call, args = steps.send(answer)
                answer = getattr(admin, call)(*args)
        except StopIteration as done:
            self._built(specs, *done.value)

    async def abuild(
        self, admin: Any, specs: Sequence[StoreSpec], premade: Mapping[str, str] | None = None
    ) -> None:
        """Make the world through an async admin client."""
        steps, answer = _steps(specs, premade or {}), None
        try:
            while True:
                call, args = steps.send(answer)
                answer = await getattr(admin, call)(*args)
        except StopIteration as done:
            self._built(specs, *done.value)

    def _built(
        self, specs: Sequence[StoreSpec], store_ids: list[str], ids: dict[str, str], session: dict
    ) -> None:
        self.specs, self.store_ids, self.ids, self.session = tuple(specs), store_ids, ids, session

    def made(self) -> list[tuple[str, StoreSpec]]:
        """(store id, its spec) of each store, in the specs' order."""
        return list(zip(self.store_ids, self.specs, strict=True))

    def store(self, slug: str) -> str:
        """The id of the store whose slug is `slug`."""
        return next(s for s, spec in self.made() if spec.slug == slug)

    def _first(self, access: Access) -> str:
        return next(s for s, spec in self.made() if spec.access == access)

    @property
    def rw(self) -> str:
        """The first read_write store's id."""
        return self._first("read_write")

    @property
    def ro(self) -> str:
        """The first read_only store's id."""
        return self._first("read_only")

    @property
    def token(self) -> str:
        """The session's bearer token (what its work secret carries)."""
        return sessions_token(self.session["work_secret"])
