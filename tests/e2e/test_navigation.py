"""A person logs in, finds the navigation, opens each section and sees what to do next."""

from __future__ import annotations

import pytest

from console.models import Role
from tests import factories

pytestmark = pytest.mark.e2e

SECTIONS = [
    ("Overview", "Nothing to look over yet."),
    ("Deployments", "No deployments yet."),
    ("Marketplace", "The catalog is empty."),
    ("On this server", "No models on this server yet."),
    ("Clusters", "No clusters yet."),
    ("Chat", "No model is offered in chat yet."),
    ("Usage", "No requests through the gateway in the last week."),
    ("Events", "Nothing has happened in your teams yet."),
]


def log_in(page, console_url: str, username: str) -> None:
    """Logs in (landing on the overview, the home page), then opens the deployments list, where
    the tours begin."""
    page.goto(f"{console_url}/")
    page.fill("#id_username", username)
    page.fill("#id_password", factories.PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{console_url}/")
    page.locator("#fleet-overview").wait_for()
    page.goto(f"{console_url}/deployments/")


def test_log_in_see_the_navigation_and_every_sections_empty_state(page, console_url):
    factories.add_member(factories.make_user("bob"), factories.make_team("red"), Role.OPERATOR)
    log_in(page, console_url, "bob")
    nav = page.locator("nav[aria-label=Main]")
    for label, empty_text in SECTIONS:
        nav.get_by_role("link", name=label, exact=True).click()
        assert page.locator(".empty-state").inner_text().startswith(empty_text), label
        assert page.locator("nav[aria-label=Main] a[aria-current=page]").inner_text() == label
    assert nav.get_by_role("link", name="Admin").count() == 0  # bob is not a platform admin


def test_a_platform_admin_also_sees_admin(page, console_url):
    factories.make_user("alice", staff=True)
    log_in(page, console_url, "alice")
    page.locator("nav[aria-label=Main]").get_by_role("link", name="Admin").click()
    header = page.locator("#site-name").inner_text()  # waits for the admin page to load
    assert header == "Berth administration"


def test_a_wrong_password_says_so_and_stays_on_login(page, console_url):
    factories.make_user("bob")
    page.goto(f"{console_url}/login/")
    page.fill("#id_username", "bob")
    page.fill("#id_password", "not-the-password")
    page.click("button[type=submit]")
    assert (
        "Please enter a correct username and password" in page.locator("[role=alert]").inner_text()
    )


OPEN_SOCKET = """(url) => new Promise((resolve) => {
  const socket = new WebSocket(url);
  socket.onopen = () => { resolve('open'); socket.close(); };
  socket.onclose = (event) => resolve('closed ' + event.code);
  setTimeout(() => resolve('timeout'), 8000);
})"""


def test_a_websocket_connects_for_a_logged_in_user_and_not_for_an_anonymous_one(page, console_url):
    factories.add_member(factories.make_user("bob"), factories.make_team("red"), Role.OPERATOR)
    ws_url = console_url.replace("http://", "ws://") + "/ws/live/deployments/"
    page.goto(f"{console_url}/login/")
    assert page.evaluate(OPEN_SOCKET, ws_url).startswith("closed")
    log_in(page, console_url, "bob")
    assert page.evaluate(OPEN_SOCKET, ws_url) == "open"
