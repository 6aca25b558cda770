"""The console in a real headless chromium: every flow of docs/SEMANTICS.md#d-console, checked against the API.

One `memfs serve --console` and one browser for the module; each test has its own browser context
(its own cookies) and its own store, so tests do not see each other's data.
"""

from __future__ import annotations

import json
import re
import uuid

import anthropic
import httpx
import pytest

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def api(console_service):
    """The official client with the admin key: the API side of every comparison."""
    c = anthropic.Anthropic(
        api_key=console_service.admin_key, base_url=console_service.base_url, max_retries=0
    )
    yield c
    c.close()


def unique(name: str) -> str:
    return f"{name} {uuid.uuid4().hex[:6]}"


def store_id_from(url: str) -> str:
    return re.search(r"/stores/(memstore_[A-Za-z0-9]+)", url).group(1)


def memory_id_from(url: str) -> str:
    return re.search(r"/memories/(mem_[A-Za-z0-9]+)", url).group(1)


def all_memories(api, store_id: str) -> dict[str, str]:
    """path -> content of every memory of a store, read through the API."""
    out = {}
    for m in api.beta.memory_stores.memories.list(store_id, view="full", limit=20):
        out[m.path] = m.content
    return out


def test_sign_in_refuses_wrong_key_and_sign_out_ends_the_session(page, context, console_service):
    page.goto("/console/stores/memstore_x")  # any page: redirected to sign-in, then back
    assert "/console/login" in page.url
    page.fill("#admin_key", "not-the-key")
    page.click("button[type=submit]")
    assert "not the admin key" in page.inner_text("[role=alert]")

    page.fill("#admin_key", console_service.admin_key)
    page.click("button[type=submit]")
    page.wait_for_url("**/console/stores/memstore_x")  # back where it wanted to go (a 404 page)
    cookie = next(c for c in context.cookies() if c["name"] == "memfs_console")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/console"
    assert cookie["expires"] > 0  # an expiring cookie, not a browser-session one
    old_value = cookie["value"]

    page.goto("/console/")
    page.click("#sign-out")
    page.wait_for_url("**/console/login?msg=signed_out")
    assert "signed out" in page.inner_text("[role=status]")
    page.goto("/console/")
    assert "/console/login" in page.url

    # The signed-out cookie, replayed by hand, no longer opens anything.
    r = httpx.get(console_service.base_url + "/console/", cookies={"memfs_console": old_value})
    assert r.status_code == 303 and "/console/login" in r.headers["location"]


def test_create_store_and_memory_edit_rename_delete(signed_in, api):
    page = signed_in
    name = unique("Team notes")
    page.fill("#name", name)
    page.fill("#description", "what the agents learned")
    page.get_by_role("button", name="Create store", exact=True).click()
    assert "Store created." in page.inner_text("[role=status]")
    sid = store_id_from(page.url)
    assert api.beta.memory_stores.retrieve(sid).name == name

    page.get_by_role("link", name="Browse memories", exact=True).click()
    page.get_by_role("link", name="New memory here", exact=True).click()
    page.fill("#path", "/notes/todo.md")
    page.fill("#content", "- buy milk\n- call Ann\n")
    page.click("#create")
    mid = memory_id_from(page.url)
    assert page.inner_text("#memory-path") == "/notes/todo.md"
    mem = api.beta.memory_stores.memories.retrieve(mid, memory_store_id=sid)
    assert mem.content == "- buy milk\n- call Ann\n"  # the browser's CRLF line breaks stored as LF
    assert page.inner_text("#memory-sha") == mem.content_sha256

    page.get_by_role("link", name="Edit", exact=True).click()
    page.fill("#content", "- buy milk\n- call Ann\n- water plants\n")
    page.click("#save")
    assert "Saved." in page.inner_text("[role=status]")
    assert api.beta.memory_stores.memories.retrieve(mid, memory_store_id=sid).content.endswith(
        "water plants\n"
    )

    page.get_by_role("link", name="Rename", exact=True).click()
    page.fill("#path", "/notes/done.md")
    page.click("#rename")
    assert "renamed" in page.inner_text("[role=status]")
    renamed = api.beta.memory_stores.memories.retrieve(mid, memory_store_id=sid)
    assert (renamed.id, renamed.path) == (mid, "/notes/done.md")

    # A path the API refuses is refused here too, with the API's message, the typed text kept.
    page.get_by_role("link", name="Rename", exact=True).click()
    page.fill("#path", "/notes/../x")
    page.click("#rename")
    assert "segment" in page.inner_text("[role=alert]")

    versions = api.beta.memory_stores.memory_versions.list(sid, memory_id=mid).data
    assert [v.operation for v in versions] == ["modified", "modified", "created"]
    assert all(v.created_by.type == "api_actor" for v in versions)  # the console writes as the admin key

    page.goto(f"/console/stores/{sid}/memories/{mid}")
    page.get_by_role("link", name="Delete…", exact=True).click()
    page.click("button:has-text('Delete memory')")
    assert "Memory deleted." in page.inner_text("[role=status]")
    with pytest.raises(anthropic.NotFoundError):
        api.beta.memory_stores.memories.retrieve(mid, memory_store_id=sid)
    # The store page counts what the API holds.
    page.goto(f"/console/stores/{sid}")
    assert page.inner_text("#stat-memories") == "0"
    assert page.inner_text("#stat-counter") == "4"


def test_a_change_made_through_the_api_meanwhile_is_a_conflict_not_an_overwrite(signed_in, api):
    page = signed_in
    store = api.beta.memory_stores.create(name=unique("Conflicts"))
    mem = api.beta.memory_stores.memories.create(store.id, path="/plan.md", content="step 1\nstep 2\n")

    page.goto(f"/console/stores/{store.id}/memories/{mem.id}/edit")
    page.fill("#content", "step 1\nstep 2\nmine: step 3\n")
    # Meanwhile an agent changes the memory through the API.
    api.beta.memory_stores.memories.update(
        mem.id, memory_store_id=store.id, content="step 1\ntheirs: step 2b\n"
    )
    page.click("#save")

    assert "changed while you were editing" in page.inner_text("#conflict")
    assert page.inner_text("#theirs") == "step 1\ntheirs: step 2b\n"
    assert page.inner_text("#mine") == "step 1\nstep 2\nmine: step 3\n"
    assert "theirs: step 2b" in page.inner_text("table.diff tr.del")
    assert "mine: step 3" in page.inner_text("table.diff")
    # Nothing was overwritten.
    assert api.beta.memory_stores.memories.retrieve(mem.id, memory_store_id=store.id).content == (
        "step 1\ntheirs: step 2b\n"
    )

    # Keeping mine is an explicit second step, checked against the version just shown.
    page.click("#keep-mine")
    assert "Saved." in page.inner_text("[role=status]")
    assert api.beta.memory_stores.memories.retrieve(mem.id, memory_store_id=store.id).content == (
        "step 1\nstep 2\nmine: step 3\n"
    )


def test_history_diff_and_redaction(signed_in, api):
    page = signed_in
    store = api.beta.memory_stores.create(name=unique("History"))
    mems = api.beta.memory_stores.memories
    m = mems.create(store.id, path="/secret.md", content="user: ann\npassword: hunter2\n")
    mems.update(m.id, memory_store_id=store.id, content="user: ann\npassword: (removed)\nrole: admin\n")
    versions = api.beta.memory_stores.memory_versions.list(store.id, memory_id=m.id).data
    newest, oldest = versions[0], versions[1]

    page.goto(f"/console/stores/{store.id}/memories/{m.id}")
    page.get_by_role("link", name="History", exact=True).click()
    page.wait_for_load_state()  # click waits for the navigation to start; count() does not wait
    rows = page.locator("#versions tbody tr")
    assert rows.count() == 2
    assert "modified" in rows.nth(0).inner_text() and "created" in rows.nth(1).inner_text()
    assert "key apikey_" in rows.nth(0).inner_text()  # who wrote it

    page.click("#compare")  # defaults: the two newest versions, older -> newer
    page.wait_for_load_state()
    assert "/diff?" in page.url
    assert page.inner_text("table.diff tr.del").strip().endswith("password: hunter2")
    added = page.locator("table.diff tr.add").all_inner_texts()
    assert any("password: (removed)" in t for t in added) and any("role: admin" in t for t in added)

    # Redact the old version (the one with the password), after a confirmation page.
    page.goto(f"/console/stores/{store.id}/versions/{oldest.id}")
    assert "hunter2" in page.inner_text("#version-content")
    page.click("#redact")
    assert "cannot be undone" in page.inner_text("main")
    page.click("button:has-text('Redact version')")
    assert "Version redacted." in page.inner_text("[role=status]")
    assert "by key apikey_" in page.inner_text("#redacted")
    assert "hunter2" not in page.content()
    v = api.beta.memory_stores.memory_versions.retrieve(oldest.id, memory_store_id=store.id)
    assert v.redacted_at is not None and v.content is None and v.path is None

    page.goto(f"/console/stores/{store.id}/memories/{m.id}/history")
    assert "redacted" in page.locator("#versions tbody tr").nth(1).inner_text()
    page.goto(f"/console/stores/{store.id}/diff?a={oldest.id}&b={newest.id}")
    assert "redacted version has no content" in page.inner_text("#not-comparable")


def test_export_then_import_into_a_new_store_is_the_same_store(signed_in, api, tmp_path):
    page = signed_in
    src = api.beta.memory_stores.create(name=unique("Export me"), description="with <b>tags</b>")
    contents = {
        "/a.md": "alpha\n",
        "/dir/b.md": "beta ünïcödé ✓\n",
        "/dir/deeper/c.txt": "",
        "/crlf.txt": "one\r\ntwo\r\n",
    }
    for path, content in contents.items():
        api.beta.memory_stores.memories.create(src.id, path=path, content=content)

    page.goto(f"/console/stores/{src.id}")
    with page.expect_download() as dl:
        page.get_by_role("link", name="Export (.jsonl)", exact=True).click()
    exported = tmp_path / "export.jsonl"
    dl.value.save_as(exported)
    lines = [json.loads(x) for x in exported.read_text(encoding="utf-8").splitlines()]
    assert lines[0]["type"] == "memfs_store_export" and lines[-1] == {
        "type": "memfs_store_export_end", "memory_count": 4,
    }  # fmt: skip

    page.goto("/console/import")
    page.set_input_files("#file", str(exported))
    copy_name = unique("Imported copy")
    page.fill("#name", copy_name)
    page.click("#import")
    assert "Import finished." in page.inner_text("[role=status]")
    dst = store_id_from(page.url)
    assert dst != src.id
    assert api.beta.memory_stores.retrieve(dst).name == copy_name
    assert all_memories(api, dst) == all_memories(api, src.id) == contents
    assert page.inner_text("#stat-memories") == "4"

    # Into a store that is not empty: refused, nothing written.
    page.goto(f"/console/stores/{src.id}")
    assert page.locator("text=Import into this store").count() == 0  # offered only for empty stores


def test_a_bad_import_names_the_line_and_imports_nothing(signed_in, api, tmp_path):
    page = signed_in
    good = {"type": "memory", "path": "/ok.md", "content": "fine"}
    bad_file = tmp_path / "bad.jsonl"
    bad_file.write_text(
        "\n".join(
            json.dumps(x)
            for x in [
                {"type": "memfs_store_export", "format": 1, "memory_store": {"name": "bad"}},
                good,
                {"type": "memory", "path": "no-slash.md", "content": "x"},
                {"type": "memory", "path": "/ok.md", "content": "again"},
                {"type": "memfs_store_export_end", "memory_count": 3},
            ]
        )
        + "\n"
    )
    before = {s.id for s in api.beta.memory_stores.list(include_archived=True, limit=100)}
    page.goto("/console/import")
    page.set_input_files("#file", str(bad_file))
    name = unique("must not exist")
    page.fill("#name", name)
    page.click("#import")
    errors = page.inner_text("#import-errors")
    assert "Nothing was imported" in errors
    assert "line 3: path: path must start with '/'" in errors
    assert "line 4: /ok.md appears twice (first on line 2)" in errors
    after = {s.id for s in api.beta.memory_stores.list(include_archived=True, limit=100)}
    assert after == before  # no store was created, so nothing was imported

    # Into an existing empty store: the same all-or-nothing rule, and the store stays empty.
    empty = api.beta.memory_stores.create(name=unique("Empty target"))
    page.goto(f"/console/stores/{empty.id}")
    page.set_input_files("#file", str(bad_file))
    page.get_by_role("button", name="Import", exact=True).click()
    assert "line 3" in page.inner_text("#import-errors")
    assert all_memories(api, empty.id) == {}


def test_a_form_post_without_the_csrf_token_is_refused(signed_in, api, console_service):
    page = signed_in
    before = {s.id for s in api.beta.memory_stores.list(limit=100)}
    # The browser's own request context carries the session cookie, like a forged form would.
    r = page.request.post("/console/stores", form={"name": "forged", "description": ""}, max_redirects=0)
    assert r.status == 403 and "Form refused" in r.text()
    r = page.request.post("/console/stores", form={"name": "forged", "csrf": "0" * 64}, max_redirects=0)
    assert r.status == 403
    # A genuine token from another session (another browser) does not fit this session either.
    html = page.content()
    token = re.search(r'name="csrf" value="([0-9a-f]{64})"', html).group(1)
    other = httpx.Client(base_url=console_service.base_url)
    login = other.get("/console/login")
    other.post("/console/login", data={
        "csrf": re.search(r'name="csrf" value="([^"]+)"', login.text).group(1), "admin_key": console_service.admin_key,
    })  # fmt: skip
    r = other.post("/console/stores", data={"name": "forged", "csrf": token})
    assert r.status_code == 403
    other.close()
    # A post from another origin, even with the token, is refused too.
    r = page.request.post("/console/stores", form={"name": "forged", "csrf": token},
                          headers={"origin": "http://evil.example"}, max_redirects=0)  # fmt: skip
    assert r.status == 403
    # Without any session: off to the sign-in page, nothing done.
    r = httpx.post(console_service.base_url + "/console/stores", data={"name": "forged", "csrf": token})
    assert r.status_code == 303 and "/console/login" in r.headers["location"]
    assert {s.id for s in api.beta.memory_stores.list(limit=100)} == before
    # With the page's own token, the same post works.
    r = page.request.post("/console/stores", form={"name": unique("genuine"), "csrf": token}, max_redirects=0)
    assert r.status == 303


def test_a_csrf_token_sent_as_a_file_is_refused_not_a_500(console_service):
    # The forms take one upload (the import); a file where the token belongs is no token.
    with httpx.Client(base_url=console_service.base_url) as client:
        login = client.get("/console/login")
        client.post("/console/login", data={
            "csrf": re.search(r'name="csrf" value="([^"]+)"', login.text).group(1), "admin_key": console_service.admin_key,
        })  # fmt: skip
        r = client.post("/console/stores", data={"name": "forged"}, files={"csrf": ("csrf.txt", b"0" * 64)})
        assert r.status_code == 403, r.text


def test_script_in_content_path_and_name_renders_inert(signed_in, api):
    page = signed_in
    evil = "<script>alert('xss')</script><img src=x onerror=alert(2)>"
    store = api.beta.memory_stores.create(name=f"<script>alert(1)</script> {uuid.uuid4().hex[:4]}",
                                          description=evil)  # fmt: skip
    path = "/<img src=x onerror=alert(3)><script>alert(4)<"
    mem = api.beta.memory_stores.memories.create(store.id, path=path, content=evil + "\n</textarea>" + evil)
    api.beta.memory_stores.memories.update(mem.id, memory_store_id=store.id, content=evil + "\nmore")

    urls = [
        "/console/",
        f"/console/stores/{store.id}",
        f"/console/stores/{store.id}/memories",
        f"/console/stores/{store.id}/memories/{mem.id}",
        f"/console/stores/{store.id}/memories/{mem.id}/edit",
        f"/console/stores/{store.id}/memories/{mem.id}/history",
        f"/console/stores/{store.id}/history",
    ]
    for url in urls:
        resp = page.goto(url)
        assert resp.status == 200, url
        assert "script-src 'self'" in resp.headers["content-security-policy"]
        assert page.locator("main script").count() == 0, url  # no script element came from the data
        assert page.locator("main img").count() == 0, url
    page.goto(f"/console/stores/{store.id}/memories/{mem.id}")
    assert page.inner_text("#memory-path") == path  # shown as text, escaped
    assert page.inner_text("#memory-content") == evil + "\nmore"
    page.goto(f"/console/stores/{store.id}/memories/{mem.id}/edit")
    assert page.input_value("#content") == evil + "\nmore"  # the textarea holds it exactly
    versions = api.beta.memory_stores.memory_versions.list(store.id, memory_id=mem.id).data
    page.goto(f"/console/stores/{store.id}/diff?a={versions[1].id}&b={versions[0].id}")
    assert "</textarea>" in page.inner_text("table.diff")
    assert page.dialogs == []  # no alert() ran anywhere


def test_archive_and_delete_a_store_ask_first(signed_in, api):
    page = signed_in
    store = api.beta.memory_stores.create(name=unique("Doomed"))
    api.beta.memory_stores.memories.create(store.id, path="/x.md", content="x")
    page.goto(f"/console/stores/{store.id}")
    page.get_by_role("link", name="Archive…", exact=True).click()
    assert "one-way" in page.inner_text("main")
    page.click("button:has-text('Archive store')")
    assert "Store archived" in page.inner_text("[role=status]")
    assert api.beta.memory_stores.retrieve(store.id).archived_at is not None
    page.goto("/console/")
    assert store.name not in page.inner_text("#stores")  # hidden unless "include archived"
    page.check("input[name=archived]")
    page.fill("input[name=q]", store.name)
    page.get_by_role("button", name="Search", exact=True).click()
    assert store.name in page.inner_text("#stores")

    page.goto(f"/console/stores/{store.id}")
    page.get_by_role("link", name="Delete…", exact=True).click()
    assert "1 memories" in page.inner_text("main")  # names what is lost
    page.fill("#confirm_name", "wrong name")
    page.click("button:has-text('Delete store')")
    assert "nothing was deleted" in page.inner_text("[role=alert]")
    assert api.beta.memory_stores.retrieve(store.id)
    page.fill("#confirm_name", store.name)
    page.click("button:has-text('Delete store')")
    assert "Store deleted." in page.inner_text("[role=status]")
    with pytest.raises(anthropic.NotFoundError):
        api.beta.memory_stores.retrieve(store.id)


def test_store_page_shows_the_sessions_that_attach_it(signed_in, api, console_service):
    page = signed_in
    store = api.beta.memory_stores.create(name=unique("Shared"))
    session = console_service.create_session([(store.id, "read_only")])
    page.goto(f"/console/stores/{store.id}")
    row = page.inner_text("#sessions")
    assert session["id"] in row and "read_only" in row and "/mnt/memory/shared-" in row


def test_sign_in_form_needs_its_own_token(console_service):
    # Login CSRF: a cross-site form cannot sign a browser in with someone else's key.
    r = httpx.post(console_service.base_url + "/console/login", data={"admin_key": console_service.admin_key})
    assert r.status_code == 403 and "memfs_console=" not in r.headers.get("set-cookie", "")


def test_unchanged_save_writes_nothing_and_a_deletion_meanwhile_keeps_your_text(signed_in, api):
    page = signed_in
    store = api.beta.memory_stores.create(name=unique("Edge cases"))
    crlf = api.beta.memory_stores.memories.create(store.id, path="/win.txt", content="a\r\nb\r\n")
    page.goto(f"/console/stores/{store.id}/memories/{crlf.id}/edit")
    page.click("#save")
    assert "Nothing changed" in page.inner_text("[role=status]")
    assert len(api.beta.memory_stores.memory_versions.list(store.id, memory_id=crlf.id).data) == 1
    page.goto(f"/console/stores/{store.id}/memories/{crlf.id}/edit")
    page.fill("#content", "a\nb\nc\n")  # a memory that used CRLF keeps CRLF
    page.click("#save")
    assert (
        api.beta.memory_stores.memories.retrieve(crlf.id, memory_store_id=store.id).content
        == "a\r\nb\r\nc\r\n"
    )

    gone = api.beta.memory_stores.memories.create(store.id, path="/gone.md", content="old")
    page.goto(f"/console/stores/{store.id}/memories/{gone.id}/edit")
    page.fill("#content", "my new text")
    api.beta.memory_stores.memories.delete(gone.id, memory_store_id=store.id)
    page.click("#save")
    assert "was deleted while you were editing" in page.inner_text("#conflict")
    assert page.inner_text("#mine") == "my new text"
    page.get_by_role("button", name="Create it again at /gone.md").click()
    assert "Memory created." in page.inner_text("[role=status]")
    assert all_memories(api, store.id)["/gone.md"] == "my new text"


def test_the_browser_rolls_up_subdirectories_and_pages_long_listings(signed_in, console_service):
    page = signed_in
    store = console_service.create_store(unique("Many"))
    with console_service.admin_client() as c:
        for i in range(105):
            assert c.post(f"/v1/memory_stores/{store['id']}/memories",
                          json={"path": f"/many/n{i:03d}.md", "content": str(i)}).status_code == 200  # fmt: skip
        for path in ("/deep/a/b/c.md", "/deep/a/d.md", "/top.md"):
            assert (
                c.post(
                    f"/v1/memory_stores/{store['id']}/memories", json={"path": path, "content": "x"}
                ).status_code
                == 200
            )
    page.goto(f"/console/stores/{store['id']}/memories")
    assert page.locator("#memories tr.prefix a").all_inner_texts() == ["deep/", "many/"]
    assert page.locator("#memories tr.memory").count() == 1
    page.get_by_role("link", name="many/").click()
    page.wait_for_load_state()
    assert page.locator("#memories tr.memory").count() == 100
    assert page.locator("#memories tr.memory").first.inner_text().startswith("n000.md")
    page.click("#next-page")
    page.wait_for_load_state()
    names = page.locator("#memories tr.memory a").all_inner_texts()
    assert names == [f"n{i:03d}.md" for i in range(100, 105)]
    assert page.locator("#next-page").count() == 0
    # The page token is signed for its listing: edited, or carried to another prefix, it is refused.
    second = page.url
    token = re.search(r"page=([^&]+)", second).group(1)
    for url in (
        second.replace(token, token[:-2] + ("AA" if token[-2:] != "AA" else "BB")),
        second.replace("prefix=/many/", "prefix=/deep/").replace("prefix=%2Fmany%2F", "prefix=%2Fdeep%2F"),
    ):
        assert url != second
        r = page.goto(url)
        assert r.status == 400 and "cursor" in page.inner_text("main"), url
