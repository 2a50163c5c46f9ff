"""The account page: the zone times are shown in (chosen, the browser's, or UTC), every time
with its date and zone, downloads in UTC, and changing one's password."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.test import Client
from django.utils import timezone

from console import audit
from console.models import ApiKey, AuditEntry, UserSettings
from console.time_zones import BROWSER_ZONE_COOKIE
from deployments.choices import LogStream
from deployments.logs import write_lines
from deployments.models import Event
from tests import factories

pytestmark = pytest.mark.django_db
# 12:00 UTC on 15 January: 13:00 in Paris (CET), 21:00 in Tokyo (JST), 07:00 in New York (EST).
NOON_UTC = datetime(2026, 1, 15, 12, 0, 5, tzinfo=UTC)


def text(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


def event_at(deployment, moment: datetime) -> Event:
    event = Event.objects.create(
        deployment=deployment, deployment_name=deployment.name, kind="action", message="scaled"
    )
    Event.objects.filter(pk=event.pk).update(at=moment)  # `at` is set on insert; move it
    return event


def test_the_account_page_is_linked_from_every_page_and_lists_the_user_s_teams(as_bob):
    page = text(as_bob.get("/deployments/"))
    assert 'href="/account/"' in page and 'href="/account/api-keys/"' in page
    account = text(as_bob.get("/account/"))
    assert "Signed in as <strong>bob</strong>" in account
    assert 'href="/teams/red/"' in account and 'href="/teams/blue/"' in account


def test_the_account_page_needs_a_login():
    response = Client().get("/account/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_without_javascript_times_are_in_utc_and_the_page_says_so(as_bob):
    page = text(as_bob.get("/account/"))
    assert "Times are shown in UTC: your browser has not said its zone" in page
    assert "Times in UTC" in page  # the sidebar's foot, on every page


def test_a_chosen_zone_is_saved_and_the_page_says_it(as_bob, bob):
    response = as_bob.post("/account/time-zone/", {"time_zone": "Europe/Paris"}, follow=True)
    assert UserSettings.objects.get(user=bob).time_zone == "Europe/Paris"
    page = text(response)
    assert "Times are now shown in Europe/Paris." in page
    assert "Times are shown in Europe/Paris, as you chose." in page
    assert '<option value="Europe/Paris" selected>' in page
    assert "Times in Europe/Paris" in page


def test_a_zone_that_does_not_exist_is_refused_with_words(as_bob, bob):
    response = as_bob.post("/account/time-zone/", {"time_zone": "Mars/Olympus_Mons"})
    page = text(response)
    assert response.status_code == 200
    assert (
        "“Mars/Olympus_Mons” is not a time zone Berth knows. Pick one from the list: IANA names "
        "such as Europe/Paris or America/New_York."
    ) in page
    assert not UserSettings.objects.filter(user=bob).exists()


def test_an_empty_choice_goes_back_to_the_browser_s_zone(as_bob, bob):
    as_bob.post("/account/time-zone/", {"time_zone": "Asia/Tokyo"})
    as_bob.cookies[BROWSER_ZONE_COOKIE] = "America/New_York"
    response = as_bob.post("/account/time-zone/", {"time_zone": ""}, follow=True)
    assert UserSettings.objects.get(user=bob).time_zone == ""
    assert "Times are shown in your browser's zone, America/New_York." in text(response)


def test_the_time_zone_form_takes_posts_only_with_its_csrf_token(bob):
    guarded = Client(enforce_csrf_checks=True)
    guarded.force_login(bob)
    assert guarded.post("/account/time-zone/", {"time_zone": "Asia/Tokyo"}).status_code == 403
    assert guarded.get("/account/time-zone/").status_code == 405


def test_events_are_shown_in_the_chosen_zone_with_date_and_zone(as_bob, bob, red_deployment):
    event_at(red_deployment, NOON_UTC)
    UserSettings.objects.create(user=bob, time_zone="Europe/Paris")
    page = text(as_bob.get(f"/deployments/{red_deployment.pk}/"))
    assert "<td>15 Jan 2026, 13:00:05 CET</td>" in page


def test_the_browser_s_zone_is_used_when_none_was_chosen(as_bob, red_deployment):
    event_at(red_deployment, NOON_UTC)
    as_bob.cookies[BROWSER_ZONE_COOKIE] = "Asia/Tokyo"
    page = text(as_bob.get(f"/deployments/{red_deployment.pk}/"))
    assert "<td>15 Jan 2026, 21:00:05 JST</td>" in page


def test_a_chosen_zone_wins_over_the_browser_s(as_bob, bob, red_deployment):
    event_at(red_deployment, NOON_UTC)
    UserSettings.objects.create(user=bob, time_zone="Europe/Paris")
    as_bob.cookies[BROWSER_ZONE_COOKIE] = "Asia/Tokyo"
    page = text(as_bob.get(f"/deployments/{red_deployment.pk}/"))
    assert "<td>15 Jan 2026, 13:00:05 CET</td>" in page


@pytest.mark.parametrize("cookie", ["Mars/Olympus_Mons", "", "../../etc/passwd", "x" * 500])
def test_a_bad_browser_zone_cookie_is_ignored_and_times_stay_in_utc(as_bob, red_deployment, cookie):
    event_at(red_deployment, NOON_UTC)
    as_bob.cookies[BROWSER_ZONE_COOKIE] = cookie
    response = as_bob.get(f"/deployments/{red_deployment.pk}/")
    assert response.status_code == 200
    assert "<td>15 Jan 2026, 12:00:05 UTC</td>" in text(response)


def test_a_recent_time_reads_as_minutes_ago_with_the_exact_time_on_hover(as_bob, bob):
    UserSettings.objects.create(user=bob, time_zone="Europe/Paris")
    key, _ = ApiKey.issue(bob, "notebook")
    used = timezone.now() - timedelta(minutes=3)
    ApiKey.objects.filter(pk=key.pk).update(last_used_at=used)
    page = text(as_bob.get("/account/api-keys/"))
    local = timezone.localtime(used, timezone=ZoneInfo("Europe/Paris"))
    exact = f"{local.day} {local:%b %Y, %H:%M:%S} {local:%Z}"
    assert f'<time datetime="{used.isoformat()}" title="{exact}">3 minutes ago</time>' in page


def test_every_time_on_the_logs_page_has_its_date_and_zone(as_bob, bob, red_deployment):
    write_lines(red_deployment.pk, [(None, LogStream.ENGINE, "INFO", NOON_UTC, "ready")])
    UserSettings.objects.create(user=bob, time_zone="America/New_York")
    page = text(as_bob.get(f"/deployments/{red_deployment.pk}/logs/"))
    assert '<td class="log-time">15 Jan 2026, 07:00:05 EST</td>' in page


def test_the_logs_download_is_in_utc_and_says_so_whatever_the_viewer_s_zone(
    as_bob, bob, red_deployment
):
    moment = NOON_UTC.replace(microsecond=123000)
    write_lines(red_deployment.pk, [(None, LogStream.ENGINE, "INFO", moment, "ready")])
    UserSettings.objects.create(user=bob, time_zone="Asia/Tokyo")
    response = as_bob.get(f"/deployments/{red_deployment.pk}/logs/download/")
    lines = b"".join(response.streaming_content).decode().splitlines()
    assert lines[0] == "# red-qwen: times in UTC (ISO 8601)"
    assert lines[1].startswith("2026-01-15T12:00:05.123Z INFO ")
    assert lines[1].endswith(" ready")


# --- the password ------------------------------------------------------------------------------

NEW_PASSWORD = "a-much-longer-passphrase-42"


def change(client: Client, old: str, new: str, again: str | None = None):
    data = {"old_password": old, "new_password1": new, "new_password2": again or new}
    return client.post("/account/password/", data, follow=True)


def test_a_password_change_keeps_this_session_and_writes_an_audit_row(as_bob, bob):
    response = change(as_bob, factories.PASSWORD, NEW_PASSWORD)
    assert "Your password was changed." in text(response)
    bob.refresh_from_db()
    assert bob.check_password(NEW_PASSWORD)
    assert as_bob.get("/account/").status_code == 200  # still logged in here
    row = AuditEntry.objects.get(action=audit.PASSWORD_CHANGED)
    assert row.actor == bob and row.target == "user bob" and row.message == "Password changed."
    stored = f"{row.target} {row.message} {row.actor_name}"
    assert NEW_PASSWORD not in stored and factories.PASSWORD not in stored


def test_another_browser_of_the_user_must_log_in_again(bob):
    here, elsewhere = Client(), Client()
    here.force_login(bob)
    elsewhere.force_login(bob)
    change(here, factories.PASSWORD, NEW_PASSWORD)
    assert elsewhere.get("/account/").status_code == 302


def test_a_wrong_old_password_is_refused_and_nothing_changes(as_bob, bob):
    response = change(as_bob, "not-my-password", NEW_PASSWORD)
    page = text(response)
    assert "Your old password was entered incorrectly. Please enter it again." in page
    bob.refresh_from_db()
    assert bob.check_password(factories.PASSWORD)
    assert not AuditEntry.objects.filter(action=audit.PASSWORD_CHANGED).exists()
    assert "not-my-password" not in page and NEW_PASSWORD not in page


@pytest.mark.parametrize(
    ("new", "again", "words"),
    [
        ("short-one", None, "This password is too short. It must contain at least 12 characters."),
        ("123456789012345", None, "This password is entirely numeric."),
        (NEW_PASSWORD, "something-else-entirely", "The two password fields didn’t match."),
    ],
)
def test_a_weak_or_mistyped_new_password_is_refused_with_words(as_bob, bob, new, again, words):
    page = text(change(as_bob, factories.PASSWORD, new, again))
    assert words in page
    bob.refresh_from_db()
    assert bob.check_password(factories.PASSWORD)


# --- live updates: each socket renders for its own user, so in its own user's zone -------------


@pytest.fixture
def fresh_channel_layer():
    """Each async test runs on an event loop of its own; a layer kept from another test keeps
    locks of that loop (as in test_live)."""
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


def log_socket(user, deployment, browser_zone: str = ""):
    from channels.routing import URLRouter
    from channels.testing import WebsocketCommunicator

    from console.routing import websocket_urls

    path = f"/ws/live/deployment-{deployment.pk}-logs/?after=0"
    communicator = WebsocketCommunicator(URLRouter(websocket_urls), path)
    communicator.scope["user"] = user
    communicator.scope["cookies"] = {"csrftoken": "a" * 32, BROWSER_ZONE_COOKIE: browser_zone}
    communicator.scope["query_string"] = b"after=0"
    return communicator


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_live_log_lines_reach_each_viewer_in_their_own_zone(
    fresh_channel_layer, bob, carol, red
):
    from asgiref.sync import sync_to_async

    deployment = await sync_to_async(factories.make_deployment)("live-zones", red)
    await sync_to_async(UserSettings.objects.create)(user=bob, time_zone="Asia/Tokyo")
    await sync_to_async(write_lines)(
        deployment.pk, [(None, LogStream.ENGINE, "INFO", NOON_UTC, "ready")]
    )
    in_tokyo = log_socket(bob, deployment, browser_zone="Europe/Paris")  # bob's choice wins
    in_new_york = log_socket(carol, deployment, browser_zone="America/New_York")
    assert (await in_tokyo.connect())[0] and (await in_new_york.connect())[0]
    assert "15 Jan 2026, 21:00:05 JST" in await in_tokyo.receive_from(5)
    assert "15 Jan 2026, 07:00:05 EST" in await in_new_york.receive_from(5)
    later = NOON_UTC + timedelta(hours=1)  # a line written while they watch
    await sync_to_async(write_lines)(
        deployment.pk, [(None, LogStream.ENGINE, "INFO", later, "serving")]
    )
    assert "15 Jan 2026, 22:00:05 JST" in await in_tokyo.receive_from(5)
    assert "15 Jan 2026, 08:00:05 EST" in await in_new_york.receive_from(5)
    await in_tokyo.disconnect()
    await in_new_york.disconnect()
