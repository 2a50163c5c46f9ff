"""A team's own page: its admins add members, change roles, remove members and set the team's
Hugging Face token; viewers and operators only see the members; other teams see nothing."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from console import audit
from console.models import AuditEntry, Membership, Role, Team
from tests import factories

pytestmark = pytest.mark.django_db
TOKEN = "hf_erin_pasted_this_secret_token"


def text(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


@pytest.fixture
def erin(red):
    """An admin of team red (not a platform admin)."""
    user = factories.make_user("erin")
    factories.add_member(user, red, Role.ADMIN)
    return user


@pytest.fixture
def frank(blue):
    """An admin of team blue only."""
    user = factories.make_user("frank")
    factories.add_member(user, blue, Role.ADMIN)
    return user


def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def as_erin(erin) -> Client:
    return client_of(erin)


def membership(user, team) -> Membership:
    return Membership.objects.get(user=user, team=team)


def role_of(user, team) -> str | None:
    found = Membership.objects.filter(user=user, team=team).first()
    return found.role if found else None


# --- seeing the team ---------------------------------------------------------------------------


def test_an_admin_sees_the_members_with_controls(as_erin, bob, carol):
    page = text(as_erin.get("/teams/red/"))
    assert 'id="member-bob"' in page and 'id="member-carol"' in page and 'id="member-erin"' in page
    assert "Add member" in page and "Change role" in page and "Save token" in page


@pytest.mark.parametrize("who", ["bob", "carol"])
def test_operators_and_viewers_see_the_members_but_no_controls(who, bob, carol, erin):
    page = text(client_of({"bob": bob, "carol": carol}[who]).get("/teams/red/"))
    assert 'id="member-erin"' in page
    assert "Only the team's admins change its members and its Hugging Face token." in page
    for control in ("Add member", "Change role", "Remove", "Save token", "Clear the token"):
        assert control not in page


def test_an_outsider_and_another_team_s_admin_get_not_found(as_dave, frank, erin):
    assert as_dave.get("/teams/red/").status_code == 404
    assert client_of(frank).get("/teams/red/").status_code == 404
    assert as_dave.get("/teams/no-such-team/").status_code == 404


def test_a_platform_admin_manages_every_team(as_alice, erin, carol, red):
    assert "Add member" in text(as_alice.get("/teams/red/"))
    as_alice.post(f"/teams/red/members/{membership(carol, red).pk}/role/", {"role": "operator"})
    assert role_of(carol, red) == Role.OPERATOR


def test_team_pages_need_a_login(red):
    response = Client().get("/teams/red/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


# --- adding a member ---------------------------------------------------------------------------


def test_an_admin_adds_an_existing_user_with_a_role_and_an_audit_row(as_erin, erin, dave, red):
    response = as_erin.post("/teams/red/members/add/", {"username": "dave", "role": "operator"})
    assert response.status_code == 302
    assert role_of(dave, red) == Role.OPERATOR
    assert "dave joined team red as operator." in text(as_erin.get("/teams/red/"))
    row = AuditEntry.objects.get(action=audit.TEAM_MEMBER_ADDED)
    assert (row.actor, row.team, row.target) == (erin, red, "team red: dave")


def test_an_unknown_user_is_refused_with_words(as_erin, red):
    response = as_erin.post(
        "/teams/red/members/add/", {"username": "zed", "role": "viewer"}, follow=True
    )
    assert (
        "No user is called “zed”. Give the username of an existing account "
        "(a platform admin creates accounts in the admin)."
    ) in text(response)
    assert not AuditEntry.objects.filter(action=audit.TEAM_MEMBER_ADDED).exists()


def test_someone_already_a_member_is_refused_with_their_role(as_erin, carol, red):
    response = as_erin.post(
        "/teams/red/members/add/", {"username": "carol", "role": "admin"}, follow=True
    )
    assert (
        "carol is already a member of team red, as viewer: change their role in the list instead."
        in text(response)
    )
    assert role_of(carol, red) == Role.VIEWER


@pytest.mark.parametrize("role", ["owner", "", "ADMIN"])
def test_a_role_that_does_not_exist_is_refused(as_erin, dave, red, role):
    response = as_erin.post("/teams/red/members/add/", {"username": "dave", "role": role})
    assert "Choose viewer, operator or admin as the role." in text(response)
    assert role_of(dave, red) is None


def test_an_empty_username_is_refused(as_erin):
    page = text(as_erin.post("/teams/red/members/add/", {"username": "", "role": "viewer"}))
    assert "Give the username of the person to add." in page


# --- roles and removal -------------------------------------------------------------------------


def test_an_admin_changes_a_role_with_an_audit_row(as_erin, carol, red):
    pk = membership(carol, red).pk
    response = as_erin.post(f"/teams/red/members/{pk}/role/", {"role": "operator"}, follow=True)
    assert "carol is now operator in team red (was viewer)." in text(response)
    assert role_of(carol, red) == Role.OPERATOR
    row = AuditEntry.objects.get(action=audit.TEAM_ROLE_CHANGED)
    assert row.target == "team red: carol" and row.message == (
        "carol is now operator in team red (was viewer)."
    )


def test_a_bad_role_on_change_is_refused(as_erin, carol, red):
    pk = membership(carol, red).pk
    response = as_erin.post(f"/teams/red/members/{pk}/role/", {"role": "root"}, follow=True)
    assert "Choose viewer, operator or admin as the role." in text(response)
    assert role_of(carol, red) == Role.VIEWER


def test_the_last_admin_cannot_step_down_or_be_removed(as_erin, erin, red):
    pk = membership(erin, red).pk
    demoted = as_erin.post(f"/teams/red/members/{pk}/role/", {"role": "viewer"}, follow=True)
    assert (
        "erin is the last admin of team red: make another member admin first, so that someone "
        "can still manage the team."
    ) in text(demoted)
    removed = as_erin.post(f"/teams/red/members/{pk}/remove/", follow=True)
    assert (
        "erin is the last admin of team red and cannot be removed: make another member admin first."
    ) in text(removed)
    assert role_of(erin, red) == Role.ADMIN


def test_with_a_second_admin_an_admin_may_leave(as_erin, erin, carol, red):
    as_erin.post(f"/teams/red/members/{membership(carol, red).pk}/role/", {"role": "admin"})
    response = as_erin.post(f"/teams/red/members/{membership(erin, red).pk}/remove/")
    assert response.status_code == 302 and role_of(erin, red) is None
    assert AuditEntry.objects.get(action=audit.TEAM_MEMBER_REMOVED).target == "team red: erin"
    assert client_of(erin).get("/teams/red/").status_code == 404  # no longer hers to see


def test_an_admin_removes_a_member_with_an_audit_row(as_erin, bob, red):
    response = as_erin.post(f"/teams/red/members/{membership(bob, red).pk}/remove/", follow=True)
    assert "bob was removed from team red." in text(response)
    assert role_of(bob, red) is None
    assert client_of(bob).get("/teams/red/").status_code == 404


def test_a_member_of_another_team_cannot_be_changed_through_this_one(as_erin, bob, blue):
    pk = membership(bob, blue).pk
    response = as_erin.post(f"/teams/red/members/{pk}/role/", {"role": "admin"}, follow=True)
    assert "That person is no longer a member of team red." in text(response)
    assert role_of(bob, blue) == Role.VIEWER


# --- who may change ----------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["bob", "carol"])
def test_operators_and_viewers_cannot_change_the_team(who, bob, carol, dave, erin, red):
    client = client_of({"bob": bob, "carol": carol}[who])
    erin_pk = membership(erin, red).pk
    attempts = [
        ("/teams/red/members/add/", {"username": "dave", "role": "admin"}),
        (f"/teams/red/members/{erin_pk}/role/", {"role": "viewer"}),
        (f"/teams/red/members/{erin_pk}/remove/", {}),
        ("/teams/red/hf-token/", {"hf_token": TOKEN}),
        ("/teams/red/hf-token/clear/", {}),
    ]
    for url, data in attempts:
        assert client.post(url, data).status_code == 403, url
    assert role_of(dave, red) is None and role_of(erin, red) == Role.ADMIN
    assert not Team.objects.get(pk=red.pk).has_hf_token
    assert not AuditEntry.objects.exists()


def test_another_team_s_admin_cannot_change_this_team(frank, dave, erin, red):
    client = client_of(frank)
    assert (
        client.post("/teams/red/members/add/", {"username": "dave", "role": "admin"}).status_code
        == 404
    )
    assert client.post("/teams/red/hf-token/", {"hf_token": TOKEN}).status_code == 404
    assert role_of(dave, red) is None and not Team.objects.get(pk=red.pk).has_hf_token


def test_every_team_form_needs_its_csrf_token(erin, red):
    guarded = Client(enforce_csrf_checks=True)
    guarded.force_login(erin)
    response = guarded.post("/teams/red/members/add/", {"username": "erin", "role": "viewer"})
    assert response.status_code == 403
    assert guarded.get("/teams/red/members/add/").status_code == 405


# --- the Hugging Face token --------------------------------------------------------------------


def test_an_admin_sets_the_token_which_is_never_shown_back(as_erin, red):
    response = as_erin.post("/teams/red/hf-token/", {"hf_token": TOKEN}, follow=True)
    page = text(response)
    assert "The Hugging Face token of team red was set." in page
    assert "Set, last changed <time" in page and "just now</time>" in page
    assert TOKEN not in page
    stored = Team.objects.get(pk=red.pk)
    assert stored.hf_token() == TOKEN and TOKEN not in stored.hf_token_encrypted
    row = AuditEntry.objects.get(action=audit.TEAM_HF_TOKEN_SET)
    assert TOKEN not in f"{row.target} {row.message}"


def test_a_new_token_replaces_the_old_one(as_erin, red):
    as_erin.post("/teams/red/hf-token/", {"hf_token": TOKEN})
    response = as_erin.post(
        "/teams/red/hf-token/", {"hf_token": "hf_the_second_token"}, follow=True
    )
    assert "The Hugging Face token of team red was replaced." in text(response)
    assert Team.objects.get(pk=red.pk).hf_token() == "hf_the_second_token"


@pytest.mark.parametrize("bad", ["hf_has a space", "short", "hf_tab\tinside_it"])
def test_a_malformed_token_is_refused_without_repeating_it(as_erin, red, bad):
    page = text(as_erin.post("/teams/red/hf-token/", {"hf_token": bad}))
    assert "That is not a Hugging Face token: one word of at least 8 characters, e.g. hf_…" in page
    assert bad not in page and not Team.objects.get(pk=red.pk).has_hf_token


def test_an_empty_token_is_refused_and_the_stored_one_kept(as_erin, red):
    as_erin.post("/teams/red/hf-token/", {"hf_token": TOKEN})
    page = text(as_erin.post("/teams/red/hf-token/", {"hf_token": ""}))
    assert "Paste the token to store (or use Clear to remove it)." in page
    assert Team.objects.get(pk=red.pk).hf_token() == TOKEN


def test_an_admin_clears_the_token_with_an_audit_row(as_erin, red):
    as_erin.post("/teams/red/hf-token/", {"hf_token": TOKEN})
    response = as_erin.post("/teams/red/hf-token/clear/", follow=True)
    page = text(response)
    assert "The Hugging Face token of team red was cleared" in page
    assert "Not set (cleared <time" in page
    assert not Team.objects.get(pk=red.pk).has_hf_token
    row = AuditEntry.objects.get(action=audit.TEAM_HF_TOKEN_CLEARED)
    assert TOKEN not in f"{row.target} {row.message}"


def test_members_see_only_that_a_token_is_set(as_erin, carol):
    as_erin.post("/teams/red/hf-token/", {"hf_token": TOKEN})
    page = text(client_of(carol).get("/teams/red/"))
    assert "Set, last changed <time" in page and TOKEN not in page
