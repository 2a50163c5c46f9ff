"""Usage records (issue 38): the gateway's batch written in one insert, rolled up per hour, kept
BERTH_USAGE_DAYS; GET /api/v1/usage summing them per team, key, user or deployment.

The gateway's own process writing them as chats are answered is in test_gateway.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from console import keys
from console.models import Role
from gateway import usage
from gateway.models import UsageHour, UsageRecord
from gateway.usage import UsageBatch, UsageEntry
from tests import factories

pytestmark = pytest.mark.django_db

MARCH_1 = "2026-03-01"


def epoch(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


@pytest.fixture
def fleet():
    """Two teams' deployments; ann operates red, bob blue, viv only views red; root is staff."""
    red, blue = factories.make_team("red"), factories.make_team("blue")
    ann, bob = factories.make_user("ann"), factories.make_user("bob")
    viv, root = factories.make_user("viv"), factories.make_user("root", staff=True)
    factories.add_member(ann, red, Role.OPERATOR)
    factories.add_member(bob, blue, Role.OPERATOR)
    factories.add_member(viv, red, Role.VIEWER)
    red_qwen = factories.make_deployment("red-qwen", red)
    blue_qwen = factories.make_deployment("blue-qwen", blue)
    ann_key, _secret = keys.issue(ann, "ann-laptop")
    return {
        "red": red,
        "blue": blue,
        "ann": ann,
        "bob": bob,
        "viv": viv,
        "root": root,
        "red_qwen": red_qwen,
        "blue_qwen": blue_qwen,
        "ann_key": ann_key,
    }


def entry(fleet, when: str, team: str, **fields) -> UsageEntry:
    deployment = fleet[f"{team}_qwen"]
    values = {
        "at": epoch(when),
        "key_id": None,
        "user_id": fleet["ann" if team == "red" else "bob"].pk,
        "team_id": fleet[team].pk,
        "deployment_id": deployment.pk,
        "deployment_name": deployment.name,
        "copy_id": None,
        "model": deployment.name,
        "prompt_tokens": None,
        "completion_tokens": 0,
        "ttft_s": None,
        "duration_s": 1.0,
        "status": 200,
        **fields,
    }
    return UsageEntry(**values)


def record_march(fleet) -> None:
    """Three red requests (two at 10 h through ann's key, one at 11 h that timed out) and one
    blue at 10 h, written as the gateway writes a batch."""
    batch = UsageBatch()
    key = fleet["ann_key"].pk
    batch.add(entry(fleet, "2026-03-01T10:05", "red", key_id=key, prompt_tokens=10,
                    completion_tokens=20, ttft_s=0.1))  # fmt: skip
    batch.add(entry(fleet, "2026-03-01T10:40", "red", key_id=key, prompt_tokens=5,
                    completion_tokens=7, ttft_s=0.3))  # fmt: skip
    batch.add(entry(fleet, "2026-03-01T11:10", "red", completion_tokens=4, status=504))
    batch.add(entry(fleet, "2026-03-01T10:20", "blue", prompt_tokens=1, completion_tokens=2,
                    ttft_s=0.2))  # fmt: skip
    assert batch.flush() == 4


def usage_of(user, query: str) -> tuple[int, dict]:
    client = Client()
    client.force_login(user)
    response = client.get(f"/api/v1/usage?{query}")
    return response.status_code, response.json()


def brief(items: list[dict]) -> list[tuple]:
    return [
        (
            i["name"],
            i["bucket_start"],
            i["requests"],
            i["prompt_tokens"],
            i["completion_tokens"],
            i["mean_ttft_s"],
        )
        for i in items
    ]


RED_BY_HOUR = [
    ("red", "2026-03-01T10:00:00Z", 2, 15, 27, 0.2),
    ("red", "2026-03-01T11:00:00Z", 1, 0, 4, None),
]


def test_a_batch_is_written_with_one_insert(fleet):
    batch = UsageBatch()
    for minute in range(10):
        batch.add(entry(fleet, f"2026-03-01T10:{minute:02}", "red", completion_tokens=3))
    with CaptureQueriesContext(connection) as queries:
        assert batch.flush() == 10
    inserts = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("INSERT")]
    assert len(inserts) == 1
    assert UsageRecord.objects.filter(completion_tokens=3).count() == 10
    assert batch.pending == []


def test_an_operator_sees_the_teams_usage_per_hour(fleet):
    record_march(fleet)
    status, body = usage_of(fleet["ann"], f"group_by=team&bucket=hour&from={MARCH_1}&to={MARCH_1}")
    assert status == 200
    assert brief(body["items"]) == RED_BY_HOUR
    assert body["items"][0]["id"] == fleet["red"].pk
    assert body["next_cursor"] is None


def test_staff_see_every_team_per_deployment_and_day(fleet):
    record_march(fleet)
    status, body = usage_of(fleet["root"], f"group_by=deployment&from={MARCH_1}&to={MARCH_1}")
    assert status == 200
    assert brief(body["items"]) == [
        ("blue-qwen", "2026-03-01T00:00:00Z", 1, 1, 2, 0.2),
        ("red-qwen", "2026-03-01T00:00:00Z", 3, 15, 31, 0.2),
    ]


def test_usage_per_key_and_per_user(fleet):
    record_march(fleet)
    _, by_key = usage_of(fleet["ann"], f"group_by=key&from={MARCH_1}&to={MARCH_1}")
    assert brief(by_key["items"]) == [
        (None, "2026-03-01T00:00:00Z", 1, 0, 4, None),  # the chat page's: no key
        ("ann-laptop", "2026-03-01T00:00:00Z", 2, 15, 27, 0.2),
    ]
    _, by_user = usage_of(fleet["root"], f"group_by=user&from={MARCH_1}&to={MARCH_1}")
    assert brief(by_user["items"]) == [
        ("ann", "2026-03-01T00:00:00Z", 3, 15, 31, 0.2),
        ("bob", "2026-03-01T00:00:00Z", 1, 1, 2, 0.2),
    ]


def test_hours_rolled_up_and_records_after_them_add_up(fleet):
    record_march(fleet)
    assert usage.roll_up(now=datetime(2026, 3, 1, 13, 0, tzinfo=UTC)) == 3  # red 10, 11; blue 10
    red_ten = UsageHour.objects.get(team=fleet["red"], hour=datetime(2026, 3, 1, 10, tzinfo=UTC))
    assert (red_ten.requests, red_ten.prompt_tokens, red_ten.completion_tokens) == (2, 15, 27)
    assert red_ten.ttft_count == 2
    # Rolling up again changes nothing; a record after the rolled-up hours is read as it is.
    assert usage.roll_up(now=datetime(2026, 3, 1, 13, 0, tzinfo=UTC)) == 3
    UsageRecord.objects.filter(at__hour=10).delete()  # only the hours know them now
    batch = UsageBatch()
    batch.add(entry(fleet, "2026-03-01T12:30", "red", prompt_tokens=2, completion_tokens=9))
    batch.flush()
    _, body = usage_of(fleet["ann"], f"group_by=team&bucket=hour&from={MARCH_1}&to={MARCH_1}")
    assert brief(body["items"]) == [
        *RED_BY_HOUR,
        ("red", "2026-03-01T12:00:00Z", 1, 2, 9, None),
    ]


def test_pages_follow_the_cursor(fleet):
    record_march(fleet)
    query = f"group_by=team&bucket=hour&from={MARCH_1}&to={MARCH_1}&limit=1"
    _, first = usage_of(fleet["ann"], query)
    assert brief(first["items"]) == RED_BY_HOUR[:1]
    _, second = usage_of(fleet["ann"], f"{query}&cursor={first['next_cursor']}")
    assert brief(second["items"]) == RED_BY_HOUR[1:]
    assert second["next_cursor"] is None


def test_records_past_the_kept_days_are_deleted(fleet):
    now = datetime(2027, 4, 10, 12, 0, tzinfo=UTC)
    batch = UsageBatch()
    for days_ago in (401, 399):
        at = (now - timedelta(days=days_ago)).strftime("%Y-%m-%dT%H:%M")
        batch.add(entry(fleet, at, "red", completion_tokens=days_ago))
    batch.flush()
    assert usage.prune(now=now) == 1
    assert list(UsageRecord.objects.values_list("completion_tokens", flat=True)) == [399]


def test_a_deployment_deleted_before_the_flush_keeps_its_name(fleet):
    batch = UsageBatch()
    batch.add(entry(fleet, "2026-03-01T10:05", "blue", completion_tokens=5))
    fleet["blue_qwen"].delete()
    assert batch.flush() == 1
    written = UsageRecord.objects.get()
    assert (written.deployment_id, written.deployment_name) == (None, "blue-qwen")


@pytest.mark.parametrize(
    ("query", "detail"),
    [
        ("group_by=org", "group_by: 'org' is not one of team, key, user, deployment"),
        ("bucket=week", "bucket: 'week' is not one of hour, day"),
        (
            "from=yesterday",
            "from: 'yesterday' is not a date or time: write 2026-03-01 or 2026-03-01T14:30 "
            "(UTC, or with an offset such as +02:00)",
        ),
        (
            "from=2026-03-02&to=2026-03-01",
            "from: 2026-03-02T00:00:00+00:00 is not before to (2026-03-02T00:00:00+00:00); "
            "give a from before to",
        ),
        ("limit=0", "limit: must be a whole number from 1 to 200"),
        (
            "team=red",
            "team: no such parameter; use one of group_by, from, to, bucket, limit, cursor",
        ),
    ],
)
def test_bad_values_are_refused_in_words(fleet, query, detail):
    status, body = usage_of(fleet["ann"], query)
    assert status == 400
    assert body["detail"] == detail


def test_a_viewer_is_refused(fleet):
    status, body = usage_of(fleet["viv"], "")
    assert status == 403
    assert body["detail"] == "Only operators may do this."


def test_beat_names_the_tasks_that_roll_up_and_prune(fleet, settings):
    from console.celery import app

    app.loader.import_default_modules()  # as a worker starts: each app's tasks module
    schedule = settings.CELERY_BEAT_SCHEDULE
    prune_task = app.tasks[schedule["prune-usage"]["task"]]
    roll_up_task = app.tasks[schedule["roll-up-usage"]["task"]]
    assert prune_task.apply().get() == 0
    record_march(fleet)
    assert roll_up_task.apply().get() == 3  # red at 10 and 11 h, blue at 10 h
    assert UsageHour.objects.count() == 3
