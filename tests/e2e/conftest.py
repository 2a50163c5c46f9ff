"""End to end: the real ASGI server (daphne) against the test database, driven by Debian's Chromium.

These tests fail, never skip, when Chromium is missing: `make test` installs it with apt.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.processes import console_server

# Playwright's sync API runs an event loop in this thread; the ORM calls in tests are still sync.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = Path(os.environ.get("BERTH_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


@pytest.fixture(scope="session")
def console_url(django_db_setup, django_db_blocker) -> Iterator[str]:
    """The console served by daphne, as `make run` serves it, on the test database."""
    with console_server() as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    """Per module: Playwright's sync API keeps an event loop running in this thread while it is
    open, which would break other tests' event loops if it stayed open for the session."""
    if not CHROMIUM.exists():
        pytest.fail(
            f"Chromium is missing at {CHROMIUM}: install it with `apt-get install -y chromium`."
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        yield launched
        launched.close()


@pytest.fixture
def page(browser, transactional_db):
    context = browser.new_context()
    opened = context.new_page()
    opened.set_default_timeout(15_000)
    yield opened
    context.close()


@pytest.fixture(autouse=True)
def fast_password_hashing():
    """The console server runs in its own process with the real hasher: keep it here too."""
