"""Fixtures of the console's browser tests: one `memfs serve --console` and one headless Debian
chromium (driven by Playwright) per module, a fresh browser context (cookies) per test."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.support.service import ServiceProcess

CHROMIUM = os.environ.get("MEMFS_CHROMIUM", "/usr/bin/chromium")


@pytest.fixture(scope="module")
def console_service(tmp_path_factory):
    svc = ServiceProcess(tmp_path_factory.mktemp("console-service"), console=True)
    try:
        yield svc
    finally:
        svc.stop()


@pytest.fixture(scope="module")
def browser():
    if not shutil.which(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: scripts/test installs Debian's chromium (ensure_chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def context(browser, console_service):
    ctx = browser.new_context(
        base_url=console_service.base_url, accept_downloads=True, viewport={"width": 1280, "height": 860}
    )
    ctx.set_default_timeout(10_000)
    try:
        yield ctx
    finally:
        ctx.close()


@pytest.fixture
def page(context):
    p = context.new_page()
    p.dialogs = []  # every alert/confirm a page opens: the XSS test asserts there are none
    p.on("dialog", lambda d: (p.dialogs.append(d.message), d.dismiss()))
    return p


def sign_in(page, service) -> None:
    page.goto("/console/")
    page.fill("#admin_key", service.admin_key)
    page.click("button[type=submit]")
    page.wait_for_url("**/console/")


@pytest.fixture
def signed_in(page, console_service):
    sign_in(page, console_service)
    return page
