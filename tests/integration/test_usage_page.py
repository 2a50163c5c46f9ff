"""The Usage page (issue 38): requests and tokens per team, key, user or deployment per hour or
day, as charts and a table, cost per day beside them, and the same rows as CSV. Members of a team
(any role) see its usage, platform admins everyone's; bad filters are refused in words."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from html.parser import HTMLParser

import pytest

from clusters.models import Price, PriceUnit
from console import keys
from gateway.models import UsageRecord
from tests import factories
from tests.integration.test_cost import H100, T0, held_copy, pin

RANGE = "from=2026-03-01&to=2026-03-02"


def served(deployment, user, when: str, prompt: int | None, completion: int, **fields) -> None:
    UsageRecord.objects.create(
        at=datetime.fromisoformat(when).replace(tzinfo=UTC),
        user=user,
        team=deployment.team,
        deployment=deployment,
        deployment_name=deployment.name,
        model=deployment.name,
        prompt_tokens=prompt,
        completion_tokens=completion,
        duration_s=1.0,
        status=200,
        **fields,
    )


@pytest.fixture
def march(bob, red_deployment, blue_deployment):
    """red-qwen: two requests on 1 March at 10 h (one through bob's key), one on 2 March;
    blue-qwen: one on 1 March at 10 h."""
    key, _secret = keys.issue(bob, "bob-laptop")
    served(red_deployment, bob, "2026-03-01T10:05", 10, 20, ttft_s=0.1, api_key=key)
    served(red_deployment, bob, "2026-03-01T10:40", 5, 7, ttft_s=0.3)
    served(red_deployment, bob, "2026-03-02T09:00", 100, 50)
    served(blue_deployment, bob, "2026-03-01T10:20", 1, 2, ttft_s=0.2)


class Tables(HTMLParser):
    """The text of each cell of each table's body rows, by the table's caption."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.caption: str | None = None
        self.in_caption = self.in_body = False
        self.cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "caption":
            self.in_caption, self.caption = True, ""
        elif tag == "tbody":
            self.in_body = True
        elif tag == "tr" and self.in_body:
            self.tables.setdefault(self.caption or "", []).append([])
        elif tag == "td" and self.in_body:
            self.cell = []

    def handle_endtag(self, tag):
        if tag == "caption":
            self.in_caption = False
        elif tag == "tbody":
            self.in_body = False
        elif tag == "td" and self.cell is not None:
            self.tables[self.caption or ""][-1].append(" ".join("".join(self.cell).split()))
            self.cell = None

    def handle_data(self, data):
        if self.in_caption:
            self.caption = (self.caption or "") + data
        elif self.cell is not None:
            self.cell.append(data)


def table(response, caption: str) -> list[list[str]]:
    parser = Tables()
    parser.feed(response.content.decode())
    return parser.tables.get(caption, [])


def chart_data(response) -> dict:
    found = re.search(
        r'<script id="usage-chart-data" type="application/json">(.*?)</script>',
        response.content.decode(),
    )
    assert found is not None, "the page embeds no chart data"
    return json.loads(found.group(1))


def refusal(response) -> str:
    found = re.search(r'id="usage-refusal"[^>]*>\s*<p>(.*?)</p>', response.content.decode(), re.S)
    assert found is not None, "the page shows no refusal"
    return found.group(1).replace("&#x27;", "'")


def test_a_viewer_sees_their_teams_tokens_per_day_in_the_table_and_the_charts(as_carol, march):
    response = as_carol.get(f"/usage/?group_by=deployment&{RANGE}")
    assert response.status_code == 200
    assert table(response, "Usage") == [
        ["2026-03-01", "red-qwen", "2", "15", "27", "42", "0.200 s"],
        ["2026-03-02", "red-qwen", "1", "100", "50", "150", "—"],
    ]
    assert chart_data(response) == {
        "labels": ["2026-03-01", "2026-03-02"],
        "series": [{"name": "red-qwen", "tokens": [42, 150], "requests": [2, 1]}],
    }
    assert "blue-qwen" not in response.content.decode()  # carol is not in blue


def test_per_hour_and_team_every_team_of_the_user_is_shown(as_bob, march):
    response = as_bob.get(f"/usage/?group_by=team&bucket=hour&{RANGE}")
    assert table(response, "Usage") == [
        ["2026-03-01 10:00", "blue", "1", "1", "2", "3", "0.200 s"],
        ["2026-03-01 10:00", "red", "2", "15", "27", "42", "0.200 s"],
        ["2026-03-02 09:00", "red", "1", "100", "50", "150", "—"],
    ]


def test_the_team_filter_shows_that_team_alone(as_bob, march):
    response = as_bob.get(f"/usage/?group_by=key&team=blue&{RANGE}")
    assert table(response, "Usage") == [["2026-03-01", "(no key)", "1", "1", "2", "3", "0.200 s"]]


def test_grouped_by_key_a_request_without_one_is_named_so(as_carol, march):
    response = as_carol.get(f"/usage/?group_by=key&{RANGE}")
    assert table(response, "Usage") == [
        ["2026-03-01", "(no key)", "1", "5", "7", "12", "0.300 s"],
        ["2026-03-01", "bob-laptop", "1", "10", "20", "30", "0.100 s"],
        ["2026-03-02", "(no key)", "1", "100", "50", "150", "—"],
    ]
    assert table(response, "Cost per day") == []
    assert "Cost is counted per deployment and per team: group by one to see it." in (
        response.content.decode()
    )


def test_an_outsider_sees_none_of_another_teams_usage(as_dave, march):
    response = as_dave.get(f"/usage/?group_by=deployment&{RANGE}")
    page = response.content.decode()
    assert (table(response, "Usage"), "red-qwen" in page, "blue-qwen" in page) == ([], False, False)
    assert "No usage matches these filters." in page
    csv_text = as_dave.get(f"/usage/export.csv?group_by=deployment&{RANGE}").content.decode()
    assert csv_text == (
        "bucket_start_utc,group_by,id,name,requests,prompt_tokens,completion_tokens,mean_ttft_s\r\n"
    )


def test_an_outsider_naming_another_team_is_told_it_is_not_theirs(as_dave, march):
    response = as_dave.get(f"/usage/?team=red&{RANGE}")
    assert refusal(response) == "team: 'red' is not one of your teams; choose one from the list"


def test_a_platform_admin_sees_every_team(as_alice, march):
    response = as_alice.get(f"/usage/?group_by=team&{RANGE}")
    assert [row[:3] for row in table(response, "Usage")] == [
        ["2026-03-01", "blue", "1"],
        ["2026-03-01", "red", "2"],
        ["2026-03-02", "red", "1"],
    ]


def test_the_csv_has_the_pages_rows_with_ids(as_bob, march, red_deployment):
    response = as_bob.get(f"/usage/export.csv?group_by=deployment&team=red&{RANGE}")
    assert (response.status_code, response["Content-Type"]) == (200, "text/csv; charset=utf-8")
    assert response.content.decode().splitlines() == [
        "bucket_start_utc,group_by,id,name,requests,prompt_tokens,completion_tokens,mean_ttft_s",
        f"2026-03-01T00:00:00Z,deployment,{red_deployment.pk},red-qwen,2,15,27,0.2",
        f"2026-03-02T00:00:00Z,deployment,{red_deployment.pk},red-qwen,1,100,50,",
    ]


def test_cost_per_day_and_per_million_tokens_are_shown_beside_the_tokens(as_bob, red):
    factories.make_cluster()
    Price.objects.create(unit=PriceUnit.GPU_HOUR, product=H100, per_hour=Decimal("2.00"))
    deployment = factories.make_deployment("priced", red, accelerators_per_copy=Decimal("0.5"))
    pin(held_copy(deployment), T0, T0 + timedelta(hours=3))  # 2 March, 09:00 to 12:00
    served(deployment, None, "2026-03-02T10:00", 1_000_000, 500_000)
    response = as_bob.get(f"/usage/?group_by=deployment&{RANGE}")
    assert table(response, "Usage") == [
        ["2026-03-02", "priced", "1", "1000000", "500000", "1500000", "—"]
    ]
    assert table(response, "Cost per day") == [
        ["2026-03-02", "priced", "3.00 USD", "1500000", "2.0000 USD"]
    ]


BAD_FILTERS = [
    ("group_by=region", "group_by: 'region' is not one of team, key, user, deployment"),
    ("bucket=week", "bucket: 'week' is not one of hour, day"),
    (
        "from=2026-03-05&to=2026-03-01",
        "from: 2026-03-05T00:00:00+00:00 is not before to (2026-03-02T00:00:00+00:00); "
        "give a from before to",
    ),
    (
        "from=yesterday",
        "from: 'yesterday' is not a date or time: write 2026-03-01 or 2026-03-01T14:30 (UTC, or "
        "with an offset such as +02:00)",
    ),
    ("limit=5", "limit: no such filter; use one of group_by, from, to, bucket, team"),
]


def test_the_table_stops_at_500_rows_and_says_the_csv_has_them_all(as_bob, red_deployment):
    UsageRecord.objects.bulk_create(
        UsageRecord(
            at=datetime(2026, 3, 1, tzinfo=UTC) + timedelta(hours=hour), team=red_deployment.team,
            deployment=red_deployment, deployment_name="red-qwen", model="red-qwen",
            prompt_tokens=1, completion_tokens=1, duration_s=1.0, status=200,
        )
        for hour in range(501)
    )  # fmt: skip
    query = "from=2026-03-01&to=2026-03-31&bucket=hour&group_by=deployment"
    page = as_bob.get(f"/usage/?{query}")
    assert len(table(page, "Usage")) == 500
    assert (
        "The table shows the first 500 of 501 rows; the charts and the CSV have them all."
        in page.content.decode()
    )
    assert len(chart_data(page)["labels"]) == 501
    exported = as_bob.get(f"/usage/export.csv?{query}")
    assert len(exported.content.decode().strip().splitlines()) == 1 + 501


@pytest.mark.parametrize(("query", "words"), BAD_FILTERS)
def test_a_bad_filter_is_named_on_the_page(as_bob, query, words):
    response = as_bob.get(f"/usage/?{query}")
    assert (response.status_code, refusal(response)) == (200, words)


def test_the_refused_field_is_marked_invalid_and_keeps_what_was_typed(as_bob):
    page = as_bob.get("/usage/?from=yesterday").content.decode()
    marked = re.findall(r'<(?:input|select)[^>]*name="(\w+)"[^>]*aria-invalid="true"', page)
    assert marked == ["from"]
    assert 'name="from" value="yesterday"' in page


@pytest.mark.parametrize(("query", "words"), BAD_FILTERS)
def test_a_bad_filter_refuses_the_csv_with_a_400(as_bob, query, words):
    response = as_bob.get(f"/usage/export.csv?{query}")
    assert (response.status_code, response.content.decode()) == (400, f"{words}\n")


def test_the_page_needs_a_login(client):
    response = client.get("/usage/")
    assert (response.status_code, response["Location"]) == (302, "/login/?next=/usage/")


def test_the_navigation_links_the_usage_page(as_carol):
    page = as_carol.get("/usage/").content.decode()
    assert '<a href="/usage/" aria-current="page">Usage</a>' in page
    assert "No requests through the gateway in the last week." in page
