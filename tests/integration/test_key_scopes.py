"""API keys carry a scope (read, chat, operate) and an optional expiry; a key makes only keys no
wider and no longer-lived than itself; the keys page, the API and createapikey say so, and
refuse bad values in words without saving anything."""

from __future__ import annotations

import io
from datetime import UTC, timedelta

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from console import keys
from console.models import ApiKey, KeyScope

pytestmark = pytest.mark.django_db


def api(secret: str):
    client = Client()
    headers = {"Authorization": f"Bearer {secret}"}
    return (
        lambda path: client.get(path, headers=headers),
        lambda path, body: client.post(
            path, body, content_type="application/json", headers=headers
        ),
    )


def test_a_read_key_reads_checks_fits_and_estimates_but_changes_nothing(bob):
    get, post = api(keys.issue(bob, "dashboard", "read")[1])
    assert get("/api/v1/deployments").status_code == 200
    assert post("/api/v1/fit-check", {}).status_code != 403  # refused for its body, not scope
    assert post("/api/v1/estimate", {}).status_code != 403
    refused = post("/api/v1/deployments", {"name": "x"})
    assert refused.status_code == 403
    assert refused.json()["detail"] == (
        "This API key's scope is read: it may read (GET), check a fit and estimate memory, "
        "but not change anything. Use an operate key for this."
    )


def test_a_chat_key_reaches_only_the_gateway(bob):
    get, _ = api(keys.issue(bob, "app", "chat")[1])
    refused = get("/api/v1/me")
    assert refused.status_code == 403
    assert "scope is chat: it may call the gateway" in refused.json()["detail"]


def test_keys_made_before_scopes_and_plain_keys_operate(bob):
    key, secret = ApiKey.issue(bob, "old")  # as the migration leaves existing keys
    assert key.scope == KeyScope.OPERATE and key.expires_at is None
    get, _ = api(secret)
    assert get("/api/v1/me").status_code == 200


def test_an_expired_key_gets_401(bob):
    key, secret = keys.issue(bob, "short", "operate", 1)
    ApiKey.objects.filter(pk=key.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    get, _ = api(secret)
    answer = get("/api/v1/me")
    assert answer.status_code == 401 and answer.json()["detail"] == keys.NOT_VALID


def test_a_key_makes_only_keys_no_wider_and_no_longer_lived_than_itself(bob):
    parent, secret = keys.issue(bob, "ci", "operate", 5)
    _, post = api(secret)
    made = post("/api/v1/keys", {"name": "reader", "scope": "read"})
    assert made.status_code == 201, made.content
    child = ApiKey.objects.get(pk=made.json()["id"])
    assert child.scope == "read" and made.json()["key"].startswith("berth_")
    assert child.expires_at == parent.expires_at  # no days asked: it ends with its maker
    longer = post("/api/v1/keys", {"name": "longer", "scope": "read", "expires_in_days": 10})
    assert longer.status_code == 400
    assert longer.json()["field"] == "expires_in_days"
    assert "cannot outlive it: ask for fewer days" in longer.json()["detail"]
    reader = ApiKey.objects.get(pk=made.json()["id"])
    with pytest.raises(keys.KeyRefused, match="can create only read keys, not operate"):
        keys.issue(bob, "wider", "operate", made_with=reader)
    assert ApiKey.objects.filter(user=bob).count() == 2  # nothing refused was saved


@pytest.mark.parametrize(
    "body,field,words",
    [
        ({"name": "x", "scope": "admin"}, "scope", "scope 'admin' is not one of read, chat"),
        ({"name": "x", "expires_in_days": 0}, "expires_in_days", "from 1 to 3650"),
        ({"name": "x", "expires_in_days": 5000}, "expires_in_days", "from 1 to 3650"),
        ({"name": "  "}, "name", "give the key a name of 1 to 100 characters"),
    ],
)
def test_bad_key_requests_are_refused_in_words(bob, body, field, words):
    _, post = api(keys.issue(bob, "ci")[1])
    answer = post("/api/v1/keys", body)
    assert answer.status_code == 422, answer.content  # against a rule the schema states
    assert answer.json()["field"] == field and words in answer.json()["detail"]
    assert ApiKey.objects.filter(user=bob).count() == 1


def test_the_api_lists_and_revokes_its_callers_keys(bob, carol):
    key, secret = keys.issue(bob, "ci")
    theirs, _ = keys.issue(carol, "theirs")
    get, post = api(secret)
    listed = get("/api/v1/keys").json()
    assert listed["next_cursor"] is None
    assert [(k["name"], k["scope"], k["revoked"]) for k in listed["items"]] == [
        ("ci", "operate", False)
    ]
    assert get("/api/v1/keys?sort=oldest").json()["field"] == "sort"
    assert post(f"/api/v1/keys/{theirs.pk}/revoke", {}).status_code == 404
    assert post(f"/api/v1/keys/{key.pk}/revoke", {}).json()["revoked"] is True
    assert get("/api/v1/me").status_code == 401


def test_the_keys_page_makes_scoped_expiring_keys_shows_them_and_is_never_cached(as_bob, bob):
    page = as_bob.post(
        "/account/api-keys/", {"name": "dash", "scope": "read", "expires_in_days": "30"}
    )
    assert "no-store" in page["Cache-Control"]
    key = ApiKey.objects.get(user=bob)
    assert key.scope == "read" and key.expires_at is not None
    listed = as_bob.get("/account/api-keys/")
    assert "no-store" in listed["Cache-Control"]
    row = listed.content.decode().split(f"berth_{key.prefix}…")[1].split("</tr>")[0]
    expires = key.expires_at.astimezone(UTC)  # no zone chosen, none from the browser: UTC
    assert f"<td>{expires.day} {expires:%b %Y, %H:%M} UTC</td>" in row
    assert "read" in row and "never" in row  # unused


@pytest.mark.parametrize(
    "fields,words",
    [
        ({"scope": "root"}, "Choose read, chat or operate as the key&#x27;s scope."),
        ({"expires_in_days": "0"}, "A key must live at least 1 day"),
        ({"expires_in_days": "soon"}, "Give the days as a whole number, or leave it empty."),
        ({"expires_in_days": "99999"}, "At most 3650 days"),
    ],
)
def test_the_keys_page_refuses_bad_values_in_words(as_bob, bob, fields, words):
    page = as_bob.post("/account/api-keys/", {"name": "x", "scope": "operate", **fields})
    assert words in page.content.decode()
    assert not ApiKey.objects.filter(user=bob).exists()


def test_createapikey_takes_a_scope_and_an_expiry(bob):
    out = io.StringIO()
    call_command("createapikey", "bob", "--scope", "chat", "--expires-in", "7", stdout=out)
    key = ApiKey.objects.get(user=bob)
    assert key.scope == "chat"
    assert timedelta(days=6, hours=23) < key.expires_at - timezone.now() <= timedelta(days=7)
    assert out.getvalue().startswith("Scope chat, expires ")
    assert out.getvalue().strip().splitlines()[-1].startswith("berth_")


@pytest.mark.parametrize(
    "options,words",
    [
        (["--scope", "admin"], "--scope: scope 'admin' is not one of read, chat, operate"),
        (["--expires-in", "0"], "--expires-in 0: give 1 to 3650 days"),
        (["--expires-in", "soon"], "--expires-in 'soon': give a whole number of days"),
    ],
)
def test_createapikey_refuses_bad_values_in_words(bob, options, words):
    with pytest.raises(CommandError, match=words.replace("(", r"\(")):
        call_command("createapikey", "bob", *options, stdout=io.StringIO())
    assert not ApiKey.objects.filter(user=bob).exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_a_flood_of_made_up_keys_never_evicts_a_valid_one():
    from asgiref.sync import sync_to_async

    from gateway.keys import KeyCache
    from tests import factories

    bob = await sync_to_async(factories.make_user)("bob")
    _, secret = await sync_to_async(keys.issue)(bob, "app", "chat")
    look_ups = []

    def look_up(work):  # the gateway's key threads, counted
        look_ups.append(work)
        return sync_to_async(work)()

    cache = KeyCache(look_up, max_unknown=20)
    assert (await cache.caller(secret)).username == "bob"
    for number in range(100):
        assert await cache.caller(f"berth_made-up-{number}") is None
    assert len(cache.unknown) == 20  # bounded: the oldest made-up ones went
    assert len(look_ups) == 101
    assert (await cache.caller(secret)).scope == "chat"  # still cached: no look-up
    assert len(look_ups) == 101
