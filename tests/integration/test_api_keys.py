"""Personal API keys: shown once, stored as a hash, revocable, and acting with the owner's roles."""

from __future__ import annotations

import hashlib

import pytest
from django.core.management import call_command
from django.test import Client

from console.models import ApiKey

pytestmark = pytest.mark.django_db


def test_a_new_key_is_shown_once_and_only_its_hash_is_stored(as_bob, bob):
    page = as_bob.post("/account/api-keys/", {"name": "notebook"}).content.decode()
    assert "Copy your new key now." in page
    secret = page.split('<code id="new-key-secret">')[1].split("</code>")[0]
    key = ApiKey.objects.get(user=bob)
    assert secret.startswith("berth_") and len(secret) >= 6 + 43
    assert key.secret_hash == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in str(ApiKey.objects.filter(user=bob).values())
    again = as_bob.get("/account/api-keys/").content.decode()
    assert secret not in again
    assert f"berth_{key.prefix}…" in again


def test_a_key_without_a_name_is_refused_with_a_message(as_bob, bob):
    page = as_bob.post("/account/api-keys/", {"name": "   "}).content.decode()
    assert "Give the key a name, so you can tell your keys apart." in page
    assert not ApiKey.objects.filter(user=bob).exists()


def test_a_too_long_name_is_refused(as_bob, bob):
    page = as_bob.post("/account/api-keys/", {"name": "x" * 101}).content.decode()
    assert "Ensure this value has at most 100 characters" in page
    assert not ApiKey.objects.exists()


def test_a_key_authenticates_the_api_as_its_owner_with_their_roles(bob):
    _key, secret = ApiKey.issue(bob, "ci")
    response = Client().get("/api/v1/me", headers={"Authorization": f"Bearer {secret}"})
    assert response.status_code == 200
    assert response.json() == {
        "username": "bob",
        "platform_admin": False,
        "teams": [{"team": "blue", "role": "viewer"}, {"team": "red", "role": "operator"}],
        "gateway_url": "http://testserver:8001/v1",
    }


def test_a_wrong_or_revoked_key_gets_401(as_bob, bob):
    key, secret = ApiKey.issue(bob, "ci")
    wrong = secret[:-4] + ("aaaa" if not secret.endswith("aaaa") else "bbbb")
    response = Client().get("/api/v1/me", headers={"Authorization": f"Bearer {wrong}"})
    assert response.status_code == 401
    as_bob.post(f"/account/api-keys/{key.pk}/revoke/")
    response = Client().get("/api/v1/me", headers={"Authorization": f"Bearer {secret}"})
    assert response.status_code == 401
    assert "not valid: it was revoked, it expired" in response.json()["detail"]


def test_nobody_can_revoke_someone_elses_key(as_carol, bob):
    key, _ = ApiKey.issue(bob, "ci")
    assert as_carol.post(f"/account/api-keys/{key.pk}/revoke/").status_code == 404
    assert ApiKey.objects.get(pk=key.pk).revoked_at is None


def test_createapikey_prints_a_working_key_as_its_last_line(bob, capsys):
    call_command("createapikey", "bob")
    last_line = capsys.readouterr().out.strip().splitlines()[-1]
    response = Client().get("/api/v1/me", headers={"Authorization": f"Bearer {last_line}"})
    assert response.json()["username"] == "bob"


def test_createapikey_names_an_unknown_user(db):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="No user named 'nobody'"):
        call_command("createapikey", "nobody")


def test_the_admin_never_shows_a_key_hash(as_alice, bob):
    key, secret = ApiKey.issue(bob, "ci")
    page = as_alice.get(f"/admin/console/apikey/{key.pk}/change/").content.decode()
    assert key.secret_hash not in page and secret not in page
