"""The console's pages and form actions, mounted at /console by the service app.

Every GET page needs a signed-in session (else it redirects to the sign-in page); every POST also
needs the session's CSRF token in the form. Reads and writes go through `ConsoleBackend` only.
Pages work without JavaScript: every action is a plain form, every destructive one asks first.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlencode

import anyio
from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from memfs.limits import slugify
from memfs.service.auth import is_admin_key
from memfs.service.console import transfer
from memfs.service.console.backend import ConsoleBackend
from memfs.service.console.diff import line_diff, summary
from memfs.service.console.pages import BASE, render
from memfs.service.console.session import (
    COOKIE_PATH,
    LOGIN_COOKIE,
    LOGIN_SECONDS,
    SESSION_COOKIE,
    SESSION_SECONDS,
    ConsoleSessions,
)
from memfs.service.errors import ApiError
from memfs.service.storage import MemoryRecord

log = logging.getLogger("memfs.service.console")

FORM_MAX_BYTES = 2 * 1024 * 1024  # a 100 KiB memory, percent-encoded, fits many times over
IMPORT_MAX_BYTES = 256 * 1024 * 1024  # an import upload; spooled to a temp file, never held in memory
_FAILED_SIGN_IN_DELAY = 0.5

MESSAGES = {  # ?msg= codes shown after a redirect; a code, never free text, so nothing is reflected
    "signed_out": "You are signed out.",
    "store_created": "Store created.",
    "store_saved": "Store saved.",
    "store_archived": "Store archived: its memories can be read and deleted, not changed.",
    "store_deleted": "Store deleted.",
    "created": "Memory created.",
    "saved": "Saved.",
    "unchanged": "Nothing changed: no new version was written.",
    "renamed": "Memory renamed (same id, history kept).",
    "deleted": "Memory deleted. Its history is still listed in the store's history.",
    "redacted": "Version redacted.",
    "imported": "Import finished.",
}


class _Forbidden(Exception):
    """A form post without a valid CSRF token, or from another origin."""


class _TooLarge(Exception):
    pass


def _url(path: str, **query) -> str:
    q = {k: v for k, v in query.items() if v not in (None, "")}
    return BASE + path + ("?" + urlencode(q) if q else "")


def _see_other(path: str, **query) -> RedirectResponse:
    return RedirectResponse(_url(path, **query), status_code=303)


def _parent_prefix(path: str) -> str:
    return path.rsplit("/", 1)[0] + "/"


def _crumbs(prefix: str) -> list[tuple[str, str]]:
    """[(label, prefix)] from the root to `prefix`."""
    out = [("/", "/")]
    acc = "/"
    for seg in prefix.strip("/").split("/") if prefix != "/" else []:
        acc += seg + "/"
        out.append((seg, acc))
    return out


def _text(value: object) -> str | None:
    """A form field or error detail that must be text: anything else (an uploaded file where a
    token belongs) counts as absent."""
    return value if isinstance(value, str) else None


def _lf(text: str) -> str:
    # Browsers send every line break of a textarea as CRLF (HTML's form encoding).
    return text.replace("\r\n", "\n")


_STATIC_TYPES = {"console.css": "text/css; charset=utf-8", "console.js": "text/javascript; charset=utf-8"}


class Console:
    def __init__(self, backend: ConsoleBackend, admin_key: str):
        self.backend = backend
        self.sessions = ConsoleSessions(admin_key)
        self._admin_key = admin_key
        here = Path(__file__).parent / "static"
        self._static = {name: (here / name).read_bytes() for name in _STATIC_TYPES}

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in self._static:
            raise HTTPException(404)
        return Response(
            self._static[name], media_type=_STATIC_TYPES[name], headers={"cache-control": "max-age=3600"}
        )

    # --- plumbing: who is signed in, forms, rendering ------------------------------------------

    def _nonce(self, request: Request) -> str | None:
        return self.sessions.nonce_of(request.cookies.get(SESSION_COOKIE))

    def page(self, request: Request, template: str, status: int = 200, **ctx) -> Response:
        nonce = self._nonce(request)
        msg = MESSAGES.get(request.query_params.get("msg", ""))
        return render(
            template,
            status,
            csrf=self.sessions.csrf_token(nonce) if nonce else "",
            signed_in=nonce is not None,
            message=msg,
            **ctx,
        )

    def _same_origin(self, request: Request) -> bool:
        # Defence in depth beside the token: browsers send Origin on form posts; a post from another
        # site names that site. No Origin (old browsers, curl) leaves the decision to the token.
        origin = request.headers.get("origin")
        if origin is None or (origin == "null" and request.headers.get("sec-fetch-site") == "same-origin"):
            return True
        host = request.headers.get("host", "")
        return origin.split("://", 1)[-1] == host

    async def form(self, request: Request, *, max_bytes: int = FORM_MAX_BYTES):
        """The posted form of a signed-in session, after the CSRF and origin checks. The session
        is checked before the body is read: an import's may be 256 MiB, spooled to disk."""
        if self._nonce(request) is None:
            raise HTTPException(401)
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_bytes:
            raise _TooLarge()
        seen = 0
        receive = request.receive

        async def counted():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > max_bytes:
                raise _TooLarge()
            return message

        # The same request read through the counting receive (Starlette's public constructor).
        counting = Request(request.scope, counted)
        form = await counting.form(max_part_size=FORM_MAX_BYTES, max_files=1, max_fields=50)
        nonce = self._nonce(request)
        if nonce is None:
            raise HTTPException(401)
        if not self._same_origin(request) or not self.sessions.csrf_ok(nonce, _text(form.get("csrf"))):
            raise _Forbidden()
        return form

    def _require_session(self, request: Request) -> Response | None:
        if self._nonce(request) is not None:
            return None
        path = request.url.path
        query = request.url.query
        return _see_other("/login", next=path + ("?" + query if query else ""))

    # --- sign-in -------------------------------------------------------------------------------

    async def login_form(self, request: Request, *, error: str | None = None, status: int = 200,
                         next_url: str | None = None) -> Response:  # fmt: skip
        if self._nonce(request) is not None and error is None:
            return _see_other("/")
        login_nonce = self.sessions.new_login_nonce()
        resp = self.page(
            request,
            "login.html",
            status,
            login_token=self.sessions.login_token(login_nonce),
            next=request.query_params.get("next", "") if next_url is None else next_url,
            error=error,
        )
        resp.set_cookie(
            LOGIN_COOKIE, login_nonce, max_age=LOGIN_SECONDS, path=COOKIE_PATH, httponly=True,
            samesite="strict", secure=request.url.scheme == "https",
        )  # fmt: skip
        return resp

    async def login(self, request: Request) -> Response:
        form = await request.form(max_part_size=64 * 1024, max_files=0, max_fields=10)
        nxt = str(form.get("next") or "")
        if not self.sessions.login_ok(request.cookies.get(LOGIN_COOKIE), _text(form.get("csrf"))):
            return await self.login_form(
                request, error="The sign-in form expired or was not sent by this page: try again.", status=403,
                next_url=nxt,
            )  # fmt: skip
        key = str(form.get("admin_key") or "")
        if not key or not is_admin_key(key, self._admin_key):
            await anyio.sleep(_FAILED_SIGN_IN_DELAY)  # slows guessing; the key is compared in constant time
            return await self.login_form(request, error="That is not the admin key of this service.", status=401,
                                         next_url=nxt)  # fmt: skip
        if not nxt.startswith(BASE + "/") or nxt.startswith("//") or "\\" in nxt:
            nxt = BASE + "/"
        resp = RedirectResponse(nxt, status_code=303)
        resp.set_cookie(
            SESSION_COOKIE, self.sessions.new_session(), max_age=SESSION_SECONDS, path=COOKIE_PATH,
            httponly=True, samesite="strict", secure=request.url.scheme == "https",
        )  # fmt: skip
        resp.delete_cookie(LOGIN_COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict")
        return resp

    async def logout(self, request: Request) -> Response:
        await self.form(request)
        self.sessions.revoke(request.cookies.get(SESSION_COOKIE))
        resp = _see_other("/login", msg="signed_out")
        resp.delete_cookie(SESSION_COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict")
        return resp

    # --- stores --------------------------------------------------------------------------------

    async def stores(self, request: Request, *, error: str | None = None, status: int = 200, name: str = "",
                     description: str = "") -> Response:  # fmt: skip
        q = request.query_params.get("q", "").strip()
        archived = request.query_params.get("archived") == "1"
        cursor = request.query_params.get("page") or None
        more = False
        next_page = None
        if q:
            items, more = await self.backend.search_stores(q, include_archived=archived)
        else:
            p = await self.backend.list_stores(page=cursor, include_archived=archived)
            items, next_page = p.items, p.next_page
        counters = await self.backend.counters([s.id for s in items])
        return self.page(
            request, "stores.html", status, stores=items, counters=counters, q=q, archived=archived,
            next_page=next_page, more=more, paged=cursor is not None, error=error, name=name,
            description=description,
        )  # fmt: skip

    async def create_store(self, request: Request) -> Response:
        form = await self.form(request)
        name, desc = str(form.get("name", "")), _lf(str(form.get("description", "")))
        try:
            store = await self.backend.create_store(name, desc)
        except ApiError as e:
            return await self.stores(request, error=e.message, status=e.status, name=name, description=desc)
        return _see_other(f"/stores/{store.id}", msg="store_created")

    async def store(self, request: Request, *, error: str | None = None, status: int = 200) -> Response:
        sid = request.path_params["store_id"]
        store = await self.backend.get_store(sid)
        stats = await self.backend.store_stats(sid)
        sessions = await self.backend.sessions(sid)
        return self.page(
            request, "store.html", status, store=store, stats=stats, sessions=sessions, error=error,
            max_memories=self.backend.max_memories,
        )  # fmt: skip

    async def update_store(self, request: Request) -> Response:
        sid = request.path_params["store_id"]
        form = await self.form(request)
        try:
            await self.backend.update_store(
                sid, str(form.get("name", "")), _lf(str(form.get("description", "")))
            )
        except ApiError as e:
            if e.status == 404:
                raise
            return await self.store(request, error=e.message, status=e.status)
        return _see_other(f"/stores/{sid}", msg="store_saved")

    async def archive_confirm(self, request: Request) -> Response:
        sid = request.path_params["store_id"]
        store = await self.backend.get_store(sid)
        stats = await self.backend.store_stats(sid)
        return self.page(
            request, "confirm.html", title=f"Archive {store.name}?", store=store,
            lines=[
                "Archiving is one-way: it cannot be undone.",
                f"Its {stats.memories} memories stay readable and deletable, but nothing can be created or "
                "changed, and no new session can attach it.",
            ],
            action=_url(f"/stores/{sid}/archive"), button="Archive store", danger=True,
            cancel=_url(f"/stores/{sid}"),
        )  # fmt: skip

    async def archive(self, request: Request) -> Response:
        sid = request.path_params["store_id"]
        await self.form(request)
        await self.backend.archive_store(sid)
        return _see_other(f"/stores/{sid}", msg="store_archived")

    async def delete_store_confirm(
        self, request: Request, *, error: str | None = None, status: int = 200
    ) -> Response:
        sid = request.path_params["store_id"]
        store = await self.backend.get_store(sid)
        stats = await self.backend.store_stats(sid)
        sessions = await self.backend.sessions(sid)
        live = [s for s in sessions if s.archived_at is None]
        lines = [
            f"This deletes the store {store.name} ({store.id}) for good: its {stats.memories} memories "
            f"({stats.bytes} bytes) and every version of their history are lost.",
        ]
        if live:
            lines.append(f"{len(live)} active session(s) attach it; their mounts will find it gone.")
        lines.append("Export it first if you may need it again.")
        return self.page(
            request, "confirm.html", status, title=f"Delete {store.name}?", store=store, lines=lines,
            action=_url(f"/stores/{sid}/delete"), button="Delete store and all its memories", danger=True,
            cancel=_url(f"/stores/{sid}"), type_name=store.name, error=error,
        )  # fmt: skip

    async def delete_store(self, request: Request) -> Response:
        sid = request.path_params["store_id"]
        form = await self.form(request)
        store = await self.backend.get_store(sid)
        if form.get("confirm_name") != store.name:
            return await self.delete_store_confirm(
                request, error="Type the store's name exactly to confirm; nothing was deleted.", status=400
            )
        await self.backend.delete_store(sid)
        return _see_other("/", msg="store_deleted")

    # --- export and import ---------------------------------------------------------------------

    async def export(self, request: Request) -> Response:
        sid = request.path_params["store_id"]
        store = await self.backend.get_store(sid)
        reader = await self.backend.open_snapshot(sid)
        exported_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        head = {"id": store.id, "name": store.name, "description": store.description, "metadata": store.metadata,
                "created_at": store.created_at}  # fmt: skip

        async def body():
            try:
                yield transfer.header_line(head, reader.counter, exported_at)
                count = 0
                while batch := await self.backend.read_snapshot(reader, 100):
                    count += len(batch)
                    yield b"".join(
                        transfer.memory_line(m.path, m.content or "", m.content_sha256) for m in batch
                    )
                yield transfer.end_line(count)
            finally:
                reader.close()

        filename = f"{slugify(store.name) or 'store'}-{exported_at[:10]}.jsonl"
        return StreamingResponse(
            body(),
            media_type="application/x-ndjson",
            headers={
                "content-disposition": f'attachment; filename="{filename}"',
                "cache-control": "no-store",
            },
        )

    async def import_form(self, request: Request) -> Response:
        return self.page(request, "import.html", errors=[], name="")

    async def import_new(self, request: Request) -> Response:
        return await self._import(request, None)

    async def import_into(self, request: Request) -> Response:
        return await self._import(request, request.path_params["store_id"])

    async def _import(self, request: Request, store_id: str | None) -> Response:
        form = await self.form(request, max_bytes=IMPORT_MAX_BYTES)
        upload = form.get("file")
        name = str(form.get("name", "")).strip()
        target = await self.backend.get_store(store_id) if store_id else None

        def again(errors: list[str], status: int) -> Response:
            return self.page(request, "import.html", status, errors=errors, name=name, target=target)

        if not isinstance(upload, UploadFile) or not upload.filename:
            return again(["Choose an export file (.jsonl) to import."], 400)
        f = upload.file
        plan = await anyio.to_thread.run_sync(
            lambda: transfer.validate(
                transfer.lines_of(f), check_path=self.backend.check_path, check_content=self.backend.check_content,
                max_memories=self.backend.max_memories,
            )
        )  # fmt: skip
        if plan.errors:
            return again(["Nothing was imported. The file has these problems:", *plan.errors], 400)
        if target is not None:
            if not await self.backend.is_empty(target.id):
                return again(
                    [f"Nothing was imported: {target.name} is not empty (import only into an empty store)."],
                    409,
                )
        try:
            if target is None:
                target = await self.backend.create_store(name or plan.store_name or "imported store",
                                                         plan.store_description)  # fmt: skip
                created_store = True
            else:
                created_store = False
        except ApiError as e:
            return again([f"Nothing was imported: {e.message}"], e.status)

        def items():
            f.seek(0)
            return transfer.memories(transfer.lines_of(f))

        try:
            count = await self.backend.import_memories(
                target.id, items(), drop_store_on_failure=created_store
            )
        except ApiError as e:
            return again(
                [f"Nothing was imported: {e.message} (what had been written was removed again)"], e.status
            )
        log.info("console: imported %d memories into %s", count, target.id)
        return _see_other(f"/stores/{target.id}", msg="imported")

    # --- memories ------------------------------------------------------------------------------

    async def browse(self, request: Request) -> Response:
        sid = request.path_params["store_id"]
        store = await self.backend.get_store(sid)
        raw = request.query_params.get("prefix", "/")
        try:
            prefix = self.backend.check_prefix(raw)
        except ApiError as e:
            return self.page(request, "browse.html", 400, store=store, prefix="/", crumbs=_crumbs("/"), items=[],
                             next_page=None, counter=None, error=e.message, paged=False)  # fmt: skip
        cursor = request.query_params.get("page") or None
        page = await self.backend.browse(sid, prefix, cursor)
        return self.page(
            request, "browse.html", store=store, prefix=prefix, crumbs=_crumbs(prefix), items=page.items,
            next_page=page.next_page, counter=page.counter, error=None, paged=cursor is not None,
        )  # fmt: skip

    async def new_memory(self, request: Request, *, path: str | None = None, content: str = "",
                         error: str | None = None, status: int = 200, conflict_id: str | None = None) -> Response:  # fmt: skip
        sid = request.path_params["store_id"]
        store = await self.backend.get_store(sid)
        if path is None:
            path = request.query_params.get("prefix", "/")
        return self.page(request, "memory_new.html", status, store=store, path=path, content=content, error=error,
                         conflict_id=conflict_id)  # fmt: skip

    async def create_memory(self, request: Request) -> Response:
        sid = request.path_params["store_id"]
        form = await self.form(request)
        path, content = str(form.get("path", "")), _lf(str(form.get("content", "")))
        try:
            mem = await self.backend.create_memory(sid, path, content)
        except ApiError as e:
            if e.status == 404:
                raise
            return await self.new_memory(request, path=path, content=content, error=e.message, status=e.status,
                                         conflict_id=_text(e.extra.get("conflicting_memory_id")))  # fmt: skip
        return _see_other(f"/stores/{sid}/memories/{mem.id}", msg="created")

    async def memory(self, request: Request) -> Response:
        sid, mid = request.path_params["store_id"], request.path_params["memory_id"]
        store = await self.backend.get_store(sid)
        mem = await self.backend.get_memory(sid, mid)
        latest = await self.backend.latest_version(sid, mid)
        return self.page(request, "memory.html", store=store, mem=mem, latest=latest,
                         parent=_parent_prefix(mem.path))  # fmt: skip

    async def edit_form(self, request: Request) -> Response:
        sid, mid = request.path_params["store_id"], request.path_params["memory_id"]
        store = await self.backend.get_store(sid)
        mem = await self.backend.get_memory(sid, mid)
        return self.page(request, "edit.html", store=store, mem=mem, content=mem.content or "",
                         base_sha=mem.content_sha256, newlines=_newlines(mem.content), error=None)  # fmt: skip

    async def save(self, request: Request) -> Response:
        sid, mid = request.path_params["store_id"], request.path_params["memory_id"]
        form = await self.form(request)
        content = str(form.get("content", ""))
        if form.get("newlines") != "crlf":
            content = _lf(content)
        base_sha = str(form.get("base_sha", ""))
        store = await self.backend.get_store(sid)
        try:
            before = base_sha
            mem = await self.backend.update_memory(
                sid, mid, content=content, path=None, expected_sha256=base_sha
            )
        except ApiError as e:
            if e.type in ("memory_precondition_failed_error", "not_found_error"):
                return await self._conflict(request, store, mid, content, form.get("newlines"))
            mem = await self.backend.get_memory(sid, mid)
            return self.page(request, "edit.html", e.status, store=store, mem=mem, content=content,
                             base_sha=base_sha, newlines=form.get("newlines"), error=e.message)  # fmt: skip
        msg = "unchanged" if mem.content_sha256 == before else "saved"
        return _see_other(f"/stores/{sid}/memories/{mid}", msg=msg)

    async def _conflict(self, request: Request, store, mid: str, mine: str, newlines) -> Response:
        """The memory changed (or went) since the person opened it: show both, overwrite nothing."""
        try:
            current: MemoryRecord | None = await self.backend.get_memory(store.id, mid)
        except ApiError as e:
            if e.status != 404:
                raise
            current = None
        latest = await self.backend.latest_version(store.id, mid)
        rows = line_diff(current.content or "", mine) if current else []
        return self.page(
            request, "conflict.html", 409, store=store, mid=mid, current=current, latest=latest, mine=mine,
            rows=rows, stat=summary(rows), newlines=newlines,
        )  # fmt: skip

    async def rename_form(self, request: Request, *, path: str | None = None, error: str | None = None,
                          status: int = 200, conflict_id: str | None = None) -> Response:  # fmt: skip
        sid, mid = request.path_params["store_id"], request.path_params["memory_id"]
        store = await self.backend.get_store(sid)
        mem = await self.backend.get_memory(sid, mid)
        return self.page(request, "rename.html", status, store=store, mem=mem, path=path or mem.path, error=error,
                         conflict_id=conflict_id)  # fmt: skip

    async def rename(self, request: Request) -> Response:
        sid, mid = request.path_params["store_id"], request.path_params["memory_id"]
        form = await self.form(request)
        path = str(form.get("path", ""))
        try:
            await self.backend.update_memory(sid, mid, content=None, path=path,
                                             expected_sha256=str(form.get("base_sha", "")))  # fmt: skip
        except ApiError as e:
            if e.status == 404:
                raise
            msg = e.message
            if e.type == "memory_precondition_failed_error":
                msg = ("The memory's content changed since you opened this page; nothing was renamed. "
                       "Check its content below and rename again.")  # fmt: skip
            return await self.rename_form(request, path=path, error=msg, status=e.status,
                                          conflict_id=_text(e.extra.get("conflicting_memory_id")))  # fmt: skip
        return _see_other(f"/stores/{sid}/memories/{mid}", msg="renamed")

    async def delete_confirm(
        self, request: Request, *, error: str | None = None, status: int = 200
    ) -> Response:
        sid, mid = request.path_params["store_id"], request.path_params["memory_id"]
        store = await self.backend.get_store(sid)
        mem = await self.backend.get_memory(sid, mid)
        return self.page(
            request, "confirm.html", status, title=f"Delete {mem.path}?", store=store,
            lines=[f"The memory {mem.path} ({mem.content_size_bytes} bytes, sha {mem.content_sha256[:12]}) is deleted "
                   "from the store and from every mount of it.",
                   "Its versions stay in the store's history (until they age out or are redacted)."],
            action=_url(f"/stores/{sid}/memories/{mid}/delete"), button="Delete memory", danger=True,
            cancel=_url(f"/stores/{sid}/memories/{mid}"), base_sha=mem.content_sha256, error=error,
        )  # fmt: skip

    async def delete(self, request: Request) -> Response:
        sid, mid = request.path_params["store_id"], request.path_params["memory_id"]
        form = await self.form(request)
        mem = await self.backend.get_memory(sid, mid)
        try:
            await self.backend.delete_memory(sid, mid, str(form.get("base_sha", "")))
        except ApiError as e:
            if e.type != "memory_precondition_failed_error":
                raise
            return await self.delete_confirm(
                request, status=409,
                error="The memory changed since you asked to delete it; nothing was deleted. Look at it again first.",
            )  # fmt: skip
        return _see_other(f"/stores/{sid}/memories", prefix=_parent_prefix(mem.path), msg="deleted")

    # --- history, diffs, redaction -------------------------------------------------------------

    async def history(self, request: Request) -> Response:
        sid = request.path_params["store_id"]
        mid = request.path_params.get("memory_id")
        store = await self.backend.get_store(sid)
        cursor = request.query_params.get("page") or None
        page = await self.backend.versions(sid, memory_id=mid, page=cursor)
        mem = None
        if mid is not None:
            try:
                mem = await self.backend.get_memory(sid, mid)
            except ApiError as e:
                if e.status != 404:
                    raise
        return self.page(request, "history.html", store=store, mid=mid, mem=mem, versions=page.items,
                         next_page=page.next_page, paged=cursor is not None)  # fmt: skip

    async def version(self, request: Request) -> Response:
        sid, vid = request.path_params["store_id"], request.path_params["version_id"]
        store = await self.backend.get_store(sid)
        v = await self.backend.get_version(sid, vid)
        return self.page(request, "version.html", store=store, v=v)

    async def diff(self, request: Request) -> Response:
        sid = request.path_params["store_id"]
        store = await self.backend.get_store(sid)
        a_id, b_id = request.query_params.get("a", ""), request.query_params.get("b", "")
        if not a_id or not b_id:
            raise ApiError(400, "invalid_request_error", "choose two versions to compare (a and b)")
        a = await self.backend.get_version(sid, a_id)
        b = await self.backend.get_version(sid, b_id)
        if a.memory_id != b.memory_id:
            raise ApiError(400, "invalid_request_error", "these two versions belong to different memories")
        comparable = a.content is not None and b.content is not None  # a redacted version has none
        rows = line_diff(a.content, b.content) if a.content is not None and b.content is not None else []
        return self.page(request, "diff.html", store=store, a=a, b=b, rows=rows, stat=summary(rows),
                         comparable=comparable, identical=comparable and a.content == b.content)  # fmt: skip

    async def redact_confirm(self, request: Request) -> Response:
        sid, vid = request.path_params["store_id"], request.path_params["version_id"]
        store = await self.backend.get_store(sid)
        v = await self.backend.get_version(sid, vid)
        lines = [f"The content and path of version {v.id} ({v.operation}, {v.created_at}) are erased for good. "
                 "This cannot be undone.", "The version stays in the history, marked as redacted."]  # fmt: skip
        try:
            mem = await self.backend.get_memory(sid, v.memory_id)
            if mem.memory_version_id == v.id:
                lines.append("This is the memory's current version: the memory itself keeps its content "
                             "(edit or delete it to change that); only this history entry is erased.")  # fmt: skip
        except ApiError as e:
            if e.status != 404:
                raise
        return self.page(
            request, "confirm.html", title="Redact this version?", store=store, lines=lines,
            preview=v.content, action=_url(f"/stores/{sid}/versions/{vid}/redact"), button="Redact version",
            danger=True, cancel=_url(f"/stores/{sid}/versions/{vid}"),
        )  # fmt: skip

    async def redact(self, request: Request) -> Response:
        sid, vid = request.path_params["store_id"], request.path_params["version_id"]
        await self.form(request)
        await self.backend.redact_version(sid, vid)
        return _see_other(f"/stores/{sid}/versions/{vid}", msg="redacted")

    # --- app -----------------------------------------------------------------------------------

    def routes(self) -> list[Route]:
        s = "/stores/{store_id}"
        m = s + "/memories/{memory_id}"
        v = s + "/versions/{version_id}"
        table = [
            ("/", "GET", self.stores, True),
            ("/static/{name}", "GET", self.static, False),
            ("/login", "GET", self.login_form, False),
            ("/login", "POST", self.login, False),
            ("/logout", "POST", self.logout, False),
            ("/stores", "POST", self.create_store, False),
            ("/import", "GET", self.import_form, True),
            ("/import", "POST", self.import_new, False),
            (s, "GET", self.store, True),
            (s + "/settings", "POST", self.update_store, False),
            (s + "/archive", "GET", self.archive_confirm, True),
            (s + "/archive", "POST", self.archive, False),
            (s + "/delete", "GET", self.delete_store_confirm, True),
            (s + "/delete", "POST", self.delete_store, False),
            (s + "/export", "GET", self.export, True),
            (s + "/import", "POST", self.import_into, False),
            (s + "/history", "GET", self.history, True),
            (s + "/diff", "GET", self.diff, True),
            (s + "/memories", "GET", self.browse, True),
            (s + "/memories", "POST", self.create_memory, False),
            (s + "/memories/new", "GET", self.new_memory, True),
            (m, "GET", self.memory, True),
            (m + "/edit", "GET", self.edit_form, True),
            (m + "/edit", "POST", self.save, False),
            (m + "/rename", "GET", self.rename_form, True),
            (m + "/rename", "POST", self.rename, False),
            (m + "/delete", "GET", self.delete_confirm, True),
            (m + "/delete", "POST", self.delete, False),
            (m + "/history", "GET", self.history, True),
            (v, "GET", self.version, True),
            (v + "/redact", "GET", self.redact_confirm, True),
            (v + "/redact", "POST", self.redact, False),
        ]
        return [
            Route(path, self._guard(fn) if guard else fn, methods=[method])
            for path, method, fn, guard in table
        ]

    def _guard(self, fn):
        async def guarded(request: Request) -> Response:
            return self._require_session(request) or await fn(request)

        return guarded

    def app(self) -> Starlette:
        return Starlette(
            routes=self.routes(),
            exception_handlers={
                ApiError: self._on_api_error,
                _Forbidden: self._on_forbidden,
                _TooLarge: self._on_too_large,
                HTTPException: self._on_http_exception,
                Exception: self._on_unexpected,
            },
        )

    # --- error pages ---------------------------------------------------------------------------

    def _error(self, request: Request, status: int, title: str, message: str) -> Response:
        return self.page(request, "error.html", status, title=title, error_message=message)

    async def _on_api_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        titles = {404: "Not found", 400: "Not possible", 409: "Conflict", 403: "Not allowed"}
        return self._error(request, exc.status, titles.get(exc.status, "Error"), exc.message)

    async def _on_forbidden(self, request: Request, exc: Exception) -> Response:
        return self._error(
            request, 403, "Form refused",
            "This form was not sent by a console page of this session (its security token is missing or "
            "wrong, or it came from another site). Nothing was changed. Go back, reload the page and try again.",
        )  # fmt: skip

    async def _on_too_large(self, request: Request, exc: Exception) -> Response:
        return self._error(
            request, 413, "Too large", "The form or file sent is larger than the console accepts."
        )

    async def _on_http_exception(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 401:  # a form post with no (or an expired) session
            return _see_other("/login")
        if exc.status_code == 404:
            return self._error(request, 404, "Not found", f"There is no console page at {request.url.path}.")
        return self._error(request, exc.status_code, "Error", str(exc.detail))

    async def _on_unexpected(self, request: Request, exc: Exception) -> Response:
        log.exception("console: unhandled error in %s %s", request.method, request.url.path)
        return self._error(
            request, 500, "Internal error", "Something went wrong in the console; see the service log."
        )


def _newlines(content: str | None) -> str:
    return "crlf" if content and "\r\n" in content else "lf"
