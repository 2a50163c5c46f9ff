"""Single sign-on in Chromium against a real OpenID Connect provider started here
(tests/oidc_provider.py, an HTTP server speaking the code flow with PKCE): the first login
creates the user with the team and role its groups' rule gives; at the next login the role
follows the groups, and an open socket of the user is closed once it may no longer see what it
watches; an ID token for another audience, or one that expired, is refused in words on the
login page, and nobody is logged in."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from console.models import GroupRule, Membership, Role, SignOnIdentity
from tests import factories
from tests.processes import ROOT, console_server, free_port

pytestmark = pytest.mark.e2e

SECRET = "provider-client-secret-for-tests"
WATCH_SOCKET = """(url) => { window.closedWith = new Promise((resolve) => {
  const socket = new WebSocket(url);
  socket.onopen = () => { window.socketOpen = true; };
  socket.onclose = (event) => resolve('closed ' + event.code);
}); }"""


class Provider:
    def __init__(self, state_file: Path, url: str) -> None:
        self.state_file, self.url = state_file, url

    def write(self, **changes: object) -> None:
        state = json.loads(self.state_file.read_text())
        state.update(changes)
        self.state_file.write_text(json.dumps(state))

    def groups(self, person: str, groups: list[str]) -> None:
        state = json.loads(self.state_file.read_text())
        state["people"][person]["groups"] = groups
        self.state_file.write_text(json.dumps(state))


@pytest.fixture
def provider(tmp_path) -> Iterator[Provider]:
    state_file = tmp_path / "provider.json"
    people = {"ada": {"password": "ada-pass", "sub": "sub-ada-1", "email": "ada@example.com",
                      "groups": ["ml-ops"]}}  # fmt: skip
    state_file.write_text(json.dumps({"clients": {}, "people": people, "id_token": {}}))
    port = free_port()
    process = subprocess.Popen([sys.executable, str(ROOT / "tests" / "oidc_provider.py"),
                                str(state_file), str(port)], stdout=subprocess.PIPE)  # fmt: skip
    try:
        assert process.stdout is not None
        assert process.stdout.readline().decode().startswith("listening on")
        yield Provider(state_file, f"http://127.0.0.1:{port}")
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def signing_on(provider, transactional_db) -> Iterator[str]:
    """The console with single sign-on through the provider, its callback registered there."""
    env = {"BERTH_OIDC_ISSUER": provider.url, "BERTH_OIDC_CLIENT_ID": "berth",
           "BERTH_OIDC_CLIENT_SECRET": SECRET}  # fmt: skip
    with console_server(**env) as url:
        provider.write(clients={"berth": {"secret": SECRET,
                                          "redirect_uris": [f"{url}/login/sso/callback/"]}})  # fmt: skip
        yield url


def sign_on(page, console_url: str, login: str = "ada", password: str = "ada-pass") -> None:
    page.goto(f"{console_url}/login/")
    page.get_by_role("button", name="Log in with single sign-on").click()
    page.fill("#login", login)
    page.fill("#secret", password)
    page.click("#sign-in")


def test_groups_give_the_team_and_role_at_each_login_and_sockets_follow(
    browser, signing_on, provider
):
    ops = factories.make_team("ops")
    GroupRule.objects.create(group="ml-ops", team=ops, role=Role.OPERATOR)
    GroupRule.objects.create(group="ml-viewers", team=ops, role=Role.VIEWER)
    watched = factories.make_deployment("ops-chat", ops)
    first = browser.new_context().new_page()
    sign_on(first, signing_on)
    first.wait_for_url(f"{signing_on}/")
    assert first.locator("button", has_text="Log out ada").count() == 1
    ada = get_user_model().objects.get(username="ada")
    assert SignOnIdentity.objects.get(user=ada).subject == "sub-ada-1"
    assert Membership.objects.get(user=ada, team=ops).role == Role.OPERATOR
    ws = signing_on.replace("http://", "ws://") + f"/ws/live/deployment-{watched.pk}/"
    first.evaluate(WATCH_SOCKET, ws)
    first.wait_for_function("() => window.socketOpen === true")

    provider.groups("ada", ["ml-viewers"])  # the provider's groups change; the next login follows
    second = browser.new_context().new_page()
    sign_on(second, signing_on)
    second.wait_for_url(f"{signing_on}/")
    assert Membership.objects.get(user=ada, team=ops).role == Role.VIEWER
    assert get_user_model().objects.filter(username__startswith="ada").count() == 1

    provider.groups("ada", [])  # no group of a rule for ops: no membership, the socket closes
    third = browser.new_context().new_page()
    sign_on(third, signing_on)
    third.wait_for_url(f"{signing_on}/")
    assert not Membership.objects.filter(user=ada, team=ops).exists()
    assert first.evaluate("() => window.closedWith") == "closed 4403"


@pytest.mark.parametrize(
    "odd,words",
    [
        (
            {"aud": "someone-else"},
            "Single sign-on refused: the ID token is meant for "
            "someone-else, not for this console's client id berth. Check BERTH_OIDC_CLIENT_ID "
            "against the client registered at the provider.",
        ),
        (
            {"clock_offset_s": -3600},
            "Check that the provider's clock and this server's agree, then log in again.",
        ),
    ],
    ids=["another audience", "expired"],
)
def test_a_token_for_another_audience_or_expired_is_refused_in_words(
    page, signing_on, provider, odd, words
):
    provider.write(id_token=odd)
    sign_on(page, signing_on)
    page.wait_for_url(f"{signing_on}/login/")
    assert words in page.locator(".messages").inner_text()
    assert not get_user_model().objects.filter(username="ada").exists()
    assert page.locator("#id_username").count() == 1  # still the login page, nobody logged in
