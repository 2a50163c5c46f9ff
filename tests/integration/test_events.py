"""The Events list: every audit row of a user's teams in one page, one CSV and one API list."""

from __future__ import annotations

import csv
import importlib
import io
from datetime import UTC, datetime, timedelta

import pytest
from django.apps import apps
from django.test import Client

from console import audit, keys
from console.lists import encode_cursor
from console.models import AuditEntry, Role
from deployments import actions, transitions
from deployments.choices import DeploymentState
from deployments.models import Event
from tests import factories

pytestmark = pytest.mark.django_db
add_team_migration = importlib.import_module("deployments.migrations.0010_event_team")

MARCH = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def at(row, moment: datetime) -> None:
    """Set when a row happened (both tables stamp the time on insert)."""
    type(row).objects.filter(pk=row.pk).update(at=moment)


def event(deployment, message: str, by=None, when: datetime | None = None) -> Event:
    actions.record(deployment, by, message)
    written = Event.objects.filter(deployment=deployment).latest("id")
    if when:
        at(written, when)
    return written


def rows_of(client: Client, query: str = "") -> list[list[str]]:
    """The Events page's table, as the cells' texts."""
    html = client.get(f"/events/{query}").content.decode()
    body = html.split("<tbody", 1)[1].split("</tbody>", 1)[0] if "<tbody" in html else ""
    rows = []
    for row in body.split("<tr>")[1:]:
        cells = [cell.split("</td>", 1)[0] for cell in row.split("<td>")[1:]]
        texts = [" ".join(strip_tags(cell).split()) for cell in cells]
        rows.append([exact_time(cells[0]), *texts[1:]])
    return rows


def exact_time(cell: str) -> str:
    """The time cell's moment (its <time datetime=…>, shown in the viewer's zone), in UTC."""
    moment = datetime.fromisoformat(cell.split('datetime="', 1)[1].split('"', 1)[0])
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def strip_tags(html: str) -> str:
    from django.utils.html import strip_tags as strip

    return strip(html)


def objects_on(client: Client, query: str = "") -> list[str]:
    return [row[4] for row in rows_of(client, query)]


@pytest.fixture
def history(bob, red, blue, red_deployment, blue_deployment):
    """Red: a stop by bob (March 1st) and a download (March 2nd); blue: a start (March 3rd)."""
    event(red_deployment, "Stop", bob, MARCH)
    download = audit.record(bob, audit.DOWNLOAD_REQUESTED, "acme/small bf16", "Queued.", team=red)
    at(download, MARCH + timedelta(days=1))
    event(blue_deployment, "Start", None, MARCH + timedelta(days=2))


# --- the page ------------------------------------------------------------------------------


def test_the_events_page_is_in_the_navigation_and_lists_both_kinds_newest_first(as_bob, history):
    page = as_bob.get("/events/").content.decode()
    assert '<a href="/events/" aria-current="page">Events</a>' in page
    assert rows_of(as_bob) == [
        ["2026-03-03 12:00:00", "blue", "system", "deployment.action", "blue-qwen", "Start"],
        ["2026-03-02 12:00:00", "red", "bob", "download.requested", "acme/small bf16", "Queued."],
        ["2026-03-01 12:00:00", "red", "bob", "deployment.action", "red-qwen", "Stop"],
    ]


def test_oldest_first_turns_the_list_around(as_bob, history):
    assert objects_on(as_bob, "?order=oldest") == ["red-qwen", "acme/small bf16", "blue-qwen"]


@pytest.mark.parametrize(
    ("query", "shown"),
    [
        ("?team=red", ["acme/small bf16", "red-qwen"]),
        ("?actor=BOB", ["acme/small bf16", "red-qwen"]),
        ("?actor=system", ["blue-qwen"]),
        ("?object=qwen", ["blue-qwen", "red-qwen"]),
        ("?object=acme", ["acme/small bf16"]),
        ("?kind=download.requested", ["acme/small bf16"]),
        ("?kind=deployment.action", ["blue-qwen", "red-qwen"]),
        ("?kind=deployment.state_change", []),
        ("?since=2026-03-02", ["blue-qwen", "acme/small bf16"]),
        ("?until=2026-03-02", ["acme/small bf16", "red-qwen"]),  # a date includes its day
        ("?since=2026-03-01T12:00:01&until=2026-03-03T12:00Z", ["acme/small bf16"]),
        ("?since=2026-03-02T13:00%2B01:00", ["blue-qwen", "acme/small bf16"]),
    ],
)
def test_each_filter_narrows_the_page(as_bob, history, query, shown):
    assert objects_on(as_bob, query) == shown


def test_the_team_filter_is_offered_only_to_members_of_several_teams(as_bob, as_carol, history):
    assert '<select name="team"' in as_bob.get("/events/").content.decode()
    assert '<select name="team"' not in as_carol.get("/events/").content.decode()


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("?kind=deployment.exploded", "deployment.exploded is not a kind of event; use one of"),
        ("?team=green", "green is not a team of yours; use one of blue, red"),
        ("?since=yesterday", "“yesterday” is not a date or a time; write 2026-03-01 or"),
        ("?since=2026-02-30", "“2026-02-30” is not a date or a time"),
        ("?since=2026-03-01&until=2026-03-01T00:00", "must be later than since"),
    ],
)
def test_a_bad_filter_value_is_said_beside_its_field_and_left_out(as_bob, history, query, words):
    page = as_bob.get(f"/events/{query}&object=red").content.decode()
    assert words in page
    assert objects_on(as_bob, f"{query}&object=red") == ["red-qwen"]  # the good filter holds


def test_the_page_goes_on_page_by_page_by_cursor(as_bob, red_deployment):
    for n in range(55):
        event(red_deployment, f"Check {n}", None, MARCH + timedelta(minutes=n))
    page = as_bob.get("/events/?kind=deployment.action").content.decode()
    first = [row[5] for row in rows_of(as_bob, "?kind=deployment.action")]
    assert first == [f"Check {n}" for n in range(54, 4, -1)]
    link = page.split('id="next-page"')[0].rsplit('href="', 1)[1].split('"', 1)[0]
    assert "kind=deployment.action" in link and "cursor=" in link
    second = [row[5] for row in rows_of(as_bob, link.replace("&amp;", "&"))]
    assert second == [f"Check {n}" for n in range(4, -1, -1)]
    assert 'id="next-page"' not in as_bob.get(link.replace("&amp;", "&")).content.decode()


def test_rows_of_the_same_moment_are_neither_lost_nor_repeated_across_pages(as_bob, bob, red):
    deployment = factories.make_deployment("tied", red)
    for n in range(30):
        event(deployment, f"Event {n}", None, MARCH)
        at(audit.record(bob, audit.FILES_DELETED, f"files {n}", team=red), MARCH)
    page = as_bob.get("/events/").content.decode()
    link = page.split('id="next-page"')[0].rsplit('href="', 1)[1].split('"', 1)[0]
    seen = rows_of(as_bob) + rows_of(as_bob, link.replace("&amp;", "&"))
    assert len(seen) == 60 and len({(row[4], row[5]) for row in seen}) == 60


def test_a_changed_cursor_on_the_page_says_so_and_shows_the_first_page(as_bob, history):
    page = as_bob.get("/events/?cursor=not-a-cursor").content.decode()
    assert "This page link is not one Berth gave: cursor is not a cursor Berth gave" in page
    assert len(rows_of(as_bob, "?cursor=not-a-cursor")) == 3


def test_a_deleted_deployments_events_stay_with_its_team_only(as_carol, blue, bob, red):
    gone = factories.make_deployment("gone", red)
    transitions.move_deployment(gone.pk, DeploymentState.DEPLOYING, message="placing")
    event(gone, "Delete", bob)
    gone.delete()
    assert objects_on(as_carol, "?object=gone") == ["gone", "gone"]
    outsider = factories.make_user("erin")
    factories.add_member(outsider, blue, Role.ADMIN)
    erin = Client()
    erin.force_login(outsider)
    assert objects_on(erin, "?object=gone") == []


def test_an_outsider_sees_nothing_and_an_empty_state(as_dave, history):
    page = as_dave.get("/events/").content.decode()
    assert rows_of(as_dave) == []
    assert "Nothing has happened in your teams yet." in page


def test_a_platform_admin_sees_every_team_the_teamless_rows_and_the_admins_actions(
    as_alice, alice, red, history
):
    audit.record(alice, audit.CLUSTER_CHECKED, "cluster lab", "Connected.")
    newcomer = factories.make_user("frank")
    added = as_alice.post(
        "/admin/console/membership/add/", {"user": newcomer.pk, "team": red.pk, "role": "admin"}
    )
    assert added.status_code == 302
    objects = objects_on(as_alice)
    assert objects[1:] == ["cluster lab", "blue-qwen", "acme/small bf16", "red-qwen"]
    (admin_row,) = [row for row in rows_of(as_alice, "?kind=admin.added")]
    assert admin_row[1:4] == ["—", "alice", "admin.added"] and admin_row[4].startswith("membership")


def test_a_member_sees_their_own_teamless_actions_but_not_anothers(as_bob, as_carol, bob):
    keys.issue(bob, "laptop", "read")
    assert objects_on(as_bob) == ["API key “laptop” of bob"]
    assert objects_on(as_carol) == []


def test_the_events_page_needs_a_login(client):
    assert client.get("/events/").status_code == 302
    assert client.get("/events/export.csv").status_code == 302


# --- the CSV -------------------------------------------------------------------------------


def exported(client: Client, query: str = "") -> list[list[str]]:
    response = client.get(f"/events/export.csv{query}")
    assert response.status_code == 200 and response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == 'attachment; filename="berth-events.csv"'
    text = b"".join(response.streaming_content).decode()
    return list(csv.reader(io.StringIO(text)))


def test_the_csv_has_every_filtered_row_with_times_in_utc(as_bob, history):
    assert exported(as_bob, "?team=red") == [
        ["at_utc", "team", "actor", "kind", "object", "message"],
        ["2026-03-02T12:00:00Z", "red", "bob", "download.requested", "acme/small bf16", "Queued."],
        ["2026-03-01T12:00:00Z", "red", "bob", "deployment.action", "red-qwen", "Stop"],
    ]


def test_the_csv_is_not_cut_to_a_page(as_bob, red_deployment):
    for n in range(60):
        event(red_deployment, f"Check {n}")
    assert len(exported(as_bob)) == 61


def test_the_page_links_its_filters_to_the_csv(as_bob, history):
    page = as_bob.get("/events/?team=red&kind=download.requested").content.decode()
    assert 'href="/events/export.csv?team=red&amp;kind=download.requested"' in page


def test_a_bad_filter_value_is_refused_rather_than_exported(as_bob, history):
    response = as_bob.get("/events/export.csv?kind=nope")
    assert response.status_code == 400
    assert response.content.decode().startswith("kind: nope is not a kind of event; use one of")


def test_a_cell_that_would_run_as_a_formula_is_written_as_text(as_bob, bob, red):
    audit.record(bob, audit.MODEL_ADDED, '=HYPERLINK("http://evil")', team=red)
    assert exported(as_bob)[1][4] == '\'=HYPERLINK("http://evil")'


def test_a_key_shaped_text_in_a_message_is_hidden_everywhere(as_bob, red_deployment):
    event(red_deployment, "engine said Authorization: Bearer abcdefgh12345678")
    assert exported(as_bob)[1][5] == "engine said Authorization: Bearer [hidden]"
    assert "abcdefgh12345678" not in as_bob.get("/events/").content.decode()


# --- the API -------------------------------------------------------------------------------


def api(client: Client, query: str = "", **headers):
    response = client.get(f"/api/v1/events{query}", headers=headers)
    return response.status_code, response.json()


def test_the_api_answers_items_and_next_cursor(as_bob, history):
    status, body = api(as_bob, "?team=red")
    assert status == 200 and body["next_cursor"] is None
    assert body["items"] == [
        {
            "at": "2026-03-02T12:00:00Z",
            "team": "red",
            "actor": "bob",
            "kind": "download.requested",
            "object": "acme/small bf16",
            "message": "Queued.",
        },
        {
            "at": "2026-03-01T12:00:00Z",
            "team": "red",
            "actor": "bob",
            "kind": "deployment.action",
            "object": "red-qwen",
            "message": "Stop",
        },
    ]


def test_the_api_pages_until_next_cursor_is_null(as_bob, red_deployment):
    for n in range(7):
        event(red_deployment, f"Check {n}", None, MARCH + timedelta(minutes=n))
    seen, cursor, calls = [], "", 0
    while True:
        status, body = api(as_bob, f"?limit=3&order=oldest{cursor}")
        assert status == 200 and len(body["items"]) <= 3
        seen += [item["message"] for item in body["items"]]
        calls += 1
        if body["next_cursor"] is None:
            break
        cursor = f"&cursor={body['next_cursor']}"
    assert seen == [f"Check {n}" for n in range(7)] and calls == 3


def test_a_cursor_of_another_list_is_refused(as_bob, history):
    other = encode_cursor("deployments", ["newest", MARCH.isoformat(), "deployment", 1])
    assert api(as_bob, f"?cursor={other}") == (
        400,
        {
            "detail": "cursor: is a cursor of the deployments list, not of the events list; "
            "pass the next_cursor the events list answered",
            "field": "cursor",
        },
    )


def test_a_changed_cursor_is_refused(as_bob, red_deployment):
    for n in range(3):
        event(red_deployment, f"Check {n}")
    cursor = api(as_bob, "?limit=1")[1]["next_cursor"]
    changed = cursor[:-3] + ("aaa" if not cursor.endswith("aaa") else "bbb")
    status, body = api(as_bob, f"?limit=1&cursor={changed}")
    assert status == 400 and body["field"] == "cursor"
    assert body["detail"].startswith("cursor: is not a cursor Berth gave (changed or cut short)")
    assert api(as_bob, f"?limit=1&order=oldest&cursor={cursor}")[1]["field"] == "cursor"


@pytest.mark.parametrize(
    ("query", "field", "words"),
    [
        ("?kind=exploded", "kind", "kind: exploded is not a kind of event; use one of"),
        ("?team=green", "team", "team: green is not a team of yours; use one of blue, red"),
        ("?since=soon", "since", "since: “soon” is not a date or a time"),
        ("?until=2026-13-01", "until", "until: “2026-13-01” is not a date or a time"),
        ("?order=random", "order", "order: random is not an order; use newest or oldest"),
        ("?limit=0", "limit", "limit: must be a whole number from 1 to 200"),
        ("?limit=201", "limit", "limit: must be a whole number from 1 to 200"),
        ("?limit=ten", "limit", "limit: must be a whole number from 1 to 200"),
        ("?actor=bo%00b", "actor", "actor: Null characters are not allowed."),
        ("?colour=red", "colour", "colour: no such filter; use one of team, actor, object"),
    ],
)
def test_a_bad_value_is_refused_with_its_name(as_bob, query, field, words):
    status, body = api(as_bob, query)
    assert status == 400 and body["field"] == field and body["detail"].startswith(words)


def test_a_read_scoped_key_may_read_the_events_and_a_chat_key_may_not(bob, history):
    _, reader = keys.issue(bob, "dashboard", "read")
    status, body = api(Client(), "?limit=1", Authorization=f"Bearer {reader}")
    assert status == 200 and len(body["items"]) == 1
    _, chatter = keys.issue(bob, "app", "chat")
    assert (
        Client().get("/api/v1/events", headers={"Authorization": f"Bearer {chatter}"}).status_code
        == 403
    )


def test_a_user_of_another_team_sees_none_of_it(as_dave, history):
    assert api(as_dave) == (200, {"items": [], "next_cursor": None})
    assert api(as_dave, "?team=red")[1]["field"] == "team"


def test_the_api_needs_a_login(client):
    assert client.get("/api/v1/events").status_code == 401


# --- the team on every event ---------------------------------------------------------------


def test_every_event_written_knows_its_team(red, red_deployment):
    transitions.move_deployment(red_deployment.pk, DeploymentState.DEPLOYING, message="placing")
    event(red_deployment, "Stop")
    assert set(Event.objects.values_list("team__name", flat=True)) == {"red"}


def test_the_migration_gives_existing_events_their_deployments_team(red, red_deployment):
    old = event(red_deployment, "Stop")
    Event.objects.filter(pk=old.pk).update(team=None)  # as events were before the column
    orphan = Event.objects.create(deployment=None, deployment_name="long-gone", kind="system")
    add_team_migration.fill_teams(apps, None)
    assert Event.objects.get(pk=old.pk).team == red
    assert Event.objects.get(pk=orphan.pk).team is None


def test_audit_entries_keep_their_team(red, bob):
    entry = audit.record(bob, audit.FILES_DELETED, "files", team=red)
    assert AuditEntry.objects.get(pk=entry.pk).team == red


@pytest.mark.django_db(transaction=True)  # migrations run outside a test's transaction
def test_the_team_migration_runs_backwards_and_forwards_keeping_the_events(red, red_deployment):
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    kept = event(red_deployment, "Stop")
    try:
        state = MigrationExecutor(connection).migrate([("deployments", "0009_move_machine_files")])
        before = state.apps.get_model("deployments", "Event")
        assert "team" not in {field.name for field in before._meta.get_fields()}
        assert before.objects.filter(pk=kept.pk).exists()
    finally:  # back to the newest migrations, whatever happened
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    assert Event.objects.get(pk=kept.pk).team == red  # filled again on the way forward
