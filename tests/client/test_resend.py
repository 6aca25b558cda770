"""The hosted API's 503s that ask for a request again, and a repeated write that meets its own first
attempt, against the emulator's app in process (`memfs serve --hosted-api --test-unavailable`):

- `change_outcome_unknown` ("send the same request again to finish it"): the client sends the same
  request again at once, retry-after or not; the change was saved, so a create meets 409 (its path is
  taken) and a rename 409 (its precondition names the old sha): the client finds its own write in the
  store (path and sha as sent) and takes it as the answer - one memory, one version, no error;
- a 409 to a repeated request whose memory holds something else stays a 409 (someone else's change);
- `storage_not_ready` ("try again in a minute"): nothing was done; without a short retry-after the
  request fails as retryable, never as refused, and the same request later goes through.
memfs reads the error's `error.details.error_code`, never its text.
"""

from __future__ import annotations

import hashlib

import httpx
import pytest

from memfs.client import StoreClient
from memfs.client.errors import ApiError
from memfs.service.hosted import UNAVAILABLE_HEADER
from tests.support.inprocess import ADMIN_KEY, BASE_URL, FaultTransport, InProcessService

pytestmark = [pytest.mark.trio, pytest.mark.timeout(60)]


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Arming(httpx.AsyncBaseTransport):
    """Adds the emulator's test header to the requests a test arms (method, path end), as the same
    header on every attempt: the emulator answers each distinct value once, as a client's own
    repeat of the same request would meet it."""

    def __init__(self, inner: httpx.AsyncBaseTransport):
        self.inner = inner
        self.armed: list[tuple[str, str, str]] = []  # (method, path suffix, header value)

    def arm(self, method: str, suffix: str, value: str) -> None:
        self.armed.append((method, suffix, value))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        for method, suffix, value in self.armed:
            if request.method == method and request.url.path.endswith(suffix):
                request.headers[UNAVAILABLE_HEADER] = value
        return await self.inner.handle_async_request(request)


@pytest.fixture
async def wired(emulator):
    counted = FaultTransport(emulator.transport)
    arming = Arming(counted)
    client = StoreClient(BASE_URL, ADMIN_KEY, transport=arming)
    try:
        yield emulator, client, arming, counted
    finally:
        await client.aclose()


async def versions(svc: InProcessService, store: str, memory_id: str) -> list[str]:
    r = await svc.admin.get(f"/v1/memory_stores/{store}/memory_versions", params={"memory_id": memory_id})
    return [v["operation"] for v in r.json()["data"]]


async def test_a_create_whose_outcome_was_unknown_is_sent_again_and_settled_as_our_own(wired):
    svc, client, arming, counted = wired
    store = await svc.create_store("s")
    arming.arm("POST", "/memories", "change_outcome_unknown#create")
    m = await client.create_memory(store, "/notes/a.md", "hello\n")
    assert m["path"] == "/notes/a.md" and m["content_sha256"] == sha("hello\n")
    # the create (saved, 503), the same create (409: the path is ours now), the memory read
    assert counted.requests == [
        ("POST", f"/v1/memory_stores/{store}/memories"),
        ("POST", f"/v1/memory_stores/{store}/memories"),
        ("GET", f"/v1/memory_stores/{store}/memories/{m['id']}"),
    ]
    assert list(await svc.contents(store)) == ["/notes/a.md"]
    assert await versions(svc, store, m["id"]) == ["created"]
    assert client.retried == 1


async def test_a_rename_whose_outcome_was_unknown_is_settled_and_a_content_edit_left_to_the_listing(wired):
    svc, client, arming, counted = wired
    store = await svc.create_store("s")
    m = await svc.create(store, "/a.md", "one\n")
    arming.arm("POST", f"/memories/{m['id']}", "change_outcome_unknown#rename")
    moved = await client.update_memory(
        store, m["id"], expected_sha=sha("one\n"), content="two\n", path="/b.md"
    )
    assert (moved["path"], moved["content_sha256"]) == ("/b.md", sha("two\n"))
    assert await versions(svc, store, m["id"]) == ["modified", "created"]
    # A content-only edit does not say where the memory was: its repeated 409 is left to the
    # engine's next listing (a remote sha equal to what was sent is our own write).
    arming.arm("POST", f"/memories/{m['id']}", "change_outcome_unknown#edit")
    with pytest.raises(ApiError) as e:
        await client.update_memory(store, m["id"], expected_sha=sha("two\n"), content="three\n")
    assert e.value.status == 409 and e.value.repeated
    assert e.value.type == "memory_precondition_failed_error"
    assert (await svc.contents(store)) == {"/b.md": "three\n"}  # saved once, by the first attempt
    assert await versions(svc, store, m["id"]) == ["modified", "modified", "created"]


async def test_a_repeated_request_meeting_someone_elses_change_keeps_its_409(wired):
    """Between our first attempt (refused with change_outcome_unknown, saved) and the repeat,
    another writer changes the memory: the repeat's 409 is not taken as ours."""
    svc, client, arming, counted = wired
    store = await svc.create_store("s")
    arming.arm("POST", "/memories", "change_outcome_unknown#twin")

    creates = 0

    async def other_writer(request: httpx.Request) -> None:
        nonlocal creates
        creates += 1
        if creates == 2:  # the repeat: the other writer changes what the first attempt saved
            mem = (await svc.memories(store))["/x.md"]
            await svc.update(store, mem["id"], content="theirs\n")

    counted.add("POST", r"/memories$", before=other_writer, times=None)
    with pytest.raises(ApiError) as e:
        await client.create_memory(store, "/x.md", "ours\n")
    assert e.value.status == 409 and e.value.type == "memory_path_conflict_error" and e.value.repeated
    assert (await svc.contents(store)) == {"/x.md": "theirs\n"}


async def test_storage_not_ready_fails_as_retryable_and_the_same_request_later_goes_through(wired):
    svc, client, arming, counted = wired
    store = await svc.create_store("s")
    arming.arm("POST", "/memories", "storage_not_ready#first")
    with pytest.raises(ApiError) as e:
        await client.create_memory(store, "/a.md", "a\n")
    assert e.value.status == 503 and e.value.retryable and not e.value.refused
    assert e.value.body["error"]["details"] == {"error_code": "storage_not_ready"}
    assert await svc.contents(store) == {}  # nothing was done
    # the next tick sends the same request: the emulator answers each header value once
    m = await client.create_memory(store, "/a.md", "a\n")
    assert await svc.contents(store) == {"/a.md": "a\n"} and m["path"] == "/a.md"


async def test_a_delete_whose_outcome_was_unknown_answers_404_when_sent_again(wired):
    """The repeat of a landed delete meets 404: what the engine books as done (memfs/sync/push.py)."""
    svc, client, arming, counted = wired
    store = await svc.create_store("s")
    m = await svc.create(store, "/gone.md", "x\n")
    arming.arm("DELETE", f"/memories/{m['id']}", "change_outcome_unknown#delete")
    with pytest.raises(ApiError) as e:
        await client.delete_memory(store, m["id"], expected_sha=sha("x\n"))
    assert e.value.status == 404 and e.value.repeated
    assert await svc.contents(store) == {}
    assert await versions(svc, store, m["id"]) == ["deleted", "created"]
