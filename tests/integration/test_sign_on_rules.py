"""Single sign-on's rules without a browser: groups to teams and roles (the highest role wins;
teams no rule names are left alone), the ID token's issuer, audience and expiry, a username a
local account holds already, and password login for platform admins only. The whole flow runs
in Chromium against a real provider: tests/e2e/test_single_sign_on.py."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup
from django.test import Client

from console import sso
from console.models import GroupRule, Membership, Role
from tests import factories

ISSUER = "http://127.0.0.1:9/provider"
NOW = 1_800_000_000


@pytest.fixture
def sso_settings(settings):
    settings.OIDC_ISSUER, settings.OIDC_CLIENT_ID = ISSUER, "berth"
    return settings


def test_the_highest_role_a_group_gives_wins_and_unruled_teams_stay(db, bob, red, blue):
    ops = factories.make_team("ops")
    GroupRule.objects.create(group="ml-ops", team=ops, role=Role.OPERATOR)
    GroupRule.objects.create(group="ml-leads", team=ops, role=Role.ADMIN)
    GroupRule.objects.create(group="red-watchers", team=red, role=Role.VIEWER)
    sso.follow_groups(bob, ["ml-ops", "ml-leads", "unknown"])
    roles = dict(Membership.objects.filter(user=bob).values_list("team__name", "role"))
    # ops: the higher of operator and admin; red: ruled, no group of bob's names it (gone);
    # blue: no rule names it, so bob's viewer membership there is the team admin's business.
    assert roles == {"ops": "admin", "blue": "viewer"}
    sso.follow_groups(bob, ["ml-ops"])
    assert Membership.objects.get(user=bob, team=ops).role == Role.OPERATOR


def test_an_id_token_from_another_issuer_for_another_client_or_expired_is_refused(sso_settings):
    good = {"iss": ISSUER, "aud": ["berth", "other"], "exp": NOW + 300}
    sso.check_id_token(good, NOW)  # one of its audiences is ours: accepted
    sso.check_id_token({**good, "exp": NOW - 59}, NOW)  # within the clocks' leeway
    cases = [
        ({**good, "iss": "http://evil.example"}, "Single sign-on refused: the ID token was "
         f"issued by 'http://evil.example', not by '{ISSUER}' (BERTH_OIDC_ISSUER)."),
        ({**good, "aud": "other"}, "Single sign-on refused: the ID token is meant for other, "
         "not for this console's client id berth. Check BERTH_OIDC_CLIENT_ID against the "
         "client registered at the provider."),
        ({**good, "exp": NOW - 61}, "Single sign-on refused: the ID token expired at "
         "2027-01-15 07:58:59 UTC. Check that the provider's clock and this server's agree, "
         "then log in again."),
        ({**good, "exp": None}, "Single sign-on refused: the ID token does not say when it "
         "expires."),
    ]  # fmt: skip
    for claims, words in cases:
        with pytest.raises(sso.SignOnRefused) as refused:
            sso.check_id_token(claims, NOW)
        assert str(refused.value) == words


def test_a_username_a_local_account_holds_gets_a_number(db):
    factories.make_user("ada")
    factories.make_user("ada-2")
    assert sso.free_username("ada") == "ada-3"
    assert sso.free_username("grace") == "grace"


def test_with_password_login_for_staff_only_an_operator_is_told_to_use_single_sign_on(
    sso_settings, bob, alice
):
    sso_settings.PASSWORD_LOGIN = "staff"
    refused = Client().post("/login/", {"username": "bob", "password": factories.PASSWORD})
    assert refused.status_code == 200
    page = BeautifulSoup(refused.content, "html.parser")
    assert page.select_one(".form-error").get_text(strip=True) == (
        "Only platform admins log in with a password here: use “Log in with single sign-on”."
    )
    assert page.select_one("#sign-on").get_text(strip=True) == "Log in with single sign-on"
    admin = Client().post("/login/", {"username": "alice", "password": factories.PASSWORD})
    assert (admin.status_code, admin["Location"]) == (302, "/")


def test_without_single_sign_on_the_login_page_offers_none_and_its_urls_are_404(db):
    page = BeautifulSoup(Client().get("/login/").content, "html.parser")
    assert page.select_one("#sign-on") is None
    assert Client().get("/login/sso/").status_code == 404
    assert Client().get("/login/sso/callback/?code=x&state=y").status_code == 404


def test_an_unreachable_provider_is_said_on_the_login_page(sso_settings):
    sso.discovery.cache_clear()
    answer = Client().get("/login/sso/")
    assert answer.status_code == 200
    words = BeautifulSoup(answer.content, "html.parser").select_one("#sign-on-error").get_text()
    assert words == (
        "Single sign-on is unavailable: the provider's discovery document at "
        f"{ISSUER}/.well-known/openid-configuration could not be read (ConnectionError). Try "
        "again shortly; if it persists, check BERTH_OIDC_ISSUER."
    )
