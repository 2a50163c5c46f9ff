"""The list toolkit: one filter form per list, read alike by its page (a bad value is left out)
and by its API (a bad value or an unknown filter is refused, naming it)."""

from __future__ import annotations

import pytest

from deployments.choices import DeploymentState
from deployments.guard import state_change_allowed
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def three(red):
    with state_change_allowed():
        return [
            factories.make_deployment("alpha", red, state=DeploymentState.DEPLOYED),
            factories.make_deployment(
                "beta", red, state=DeploymentState.FAILED, chat_name="chatty"
            ),
            factories.make_deployment("gamma", red, state=DeploymentState.STOPPED),
        ]


def api_names(client, query: str) -> list[str]:
    response = client.get(f"/api/v1/deployments{query}")
    assert response.status_code == 200, response.content
    return [row["name"] for row in response.json()["items"]]


def page_names(client, query: str) -> list[str]:
    page = client.get(f"/deployments/{query}").content.decode()
    return [name for name in ("alpha", "beta", "gamma") if f">{name}</a>" in page]


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ("", ["alpha", "beta", "gamma"]),
        ("?state=serving", ["alpha"]),
        ("?state=failed", ["beta"]),
        ("?state=STOPPED", ["gamma"]),
        ("?q=chat", ["beta"]),
        ("?state=active&q=a", ["alpha"]),  # FAILED is not active: it stopped trying
    ],
)
def test_the_page_and_the_api_select_the_same_deployments(as_bob, three, query, names):
    assert api_names(as_bob, query) == names
    assert page_names(as_bob, query) == names


def test_the_page_leaves_a_bad_filter_out_and_applies_the_rest(as_bob, three):
    assert page_names(as_bob, "?state=sleeping&q=gam") == ["gamma"]


@pytest.mark.parametrize(
    ("query", "field", "detail"),
    [
        ("?state=sleeping", "state", "state: Select a valid choice. sleeping is not one of"),
        ("?cluster=x", "cluster", "cluster: Enter a whole number."),
        ("?cluster=0", "cluster", "cluster: Ensure this value is greater than or equal to 1."),
        (
            "?colour=red",
            "colour",
            "colour: no such filter; use one of state, cluster, model, q, sort, limit, cursor",
        ),
        ("?sort=colour", "sort", "sort: no such order colour; use one of name, -name, created"),
        ("?limit=0", "limit", "limit: Ensure this value is greater than or equal to 1."),
        ("?limit=201", "limit", "limit: Ensure this value is less than or equal to 200."),
        ("?limit=many", "limit", "limit: must be a whole number from 1 to 200"),
        ("?cursor=made-up", "cursor", "cursor: is not a cursor Berth gave"),
    ],
)
def test_the_api_refuses_a_bad_filter_naming_it(as_bob, three, query, field, detail):
    response = as_bob.get(f"/api/v1/deployments{query}")
    assert response.status_code == 400
    assert response.json()["field"] == field
    assert response.json()["detail"].startswith(detail)


def walk(client, query: str) -> tuple[list[str], list[str]]:
    """Every page of the API's list, following next_cursor: the names, and the cursors."""
    names, cursors, cursor = [], [], ""
    while True:
        answer = client.get(
            f"/api/v1/deployments?{query}" + (f"&cursor={cursor}" if cursor else "")
        )
        assert answer.status_code == 200, answer.content
        names += [row["name"] for row in answer.json()["items"]]
        cursor = answer.json()["next_cursor"]
        if cursor is None:
            return names, cursors
        cursors.append(cursor)


def test_the_api_pages_in_the_order_asked_until_next_cursor_is_null(as_bob, three, red):
    for name in ("delta", "epsilon"):
        factories.make_deployment(name, red)
    names, cursors = walk(as_bob, "limit=2")
    assert names == ["alpha", "beta", "delta", "epsilon", "gamma"] and len(cursors) == 2
    assert walk(as_bob, "limit=2&sort=-name")[0] == ["gamma", "epsilon", "delta", "beta", "alpha"]
    oldest_first = ["alpha", "beta", "gamma", "delta", "epsilon"]
    assert walk(as_bob, "limit=3&sort=created")[0] == oldest_first
    assert walk(as_bob, "limit=3&sort=-created")[0] == oldest_first[::-1]


def test_a_cursor_from_another_order_or_another_list_is_refused_naming_it(as_bob, three):
    by_name = as_bob.get("/api/v1/deployments?limit=1").json()["next_cursor"]
    other_order = as_bob.get(f"/api/v1/deployments?limit=1&sort=-name&cursor={by_name}")
    assert other_order.status_code == 400 and other_order.json()["field"] == "cursor"
    assert "is a cursor of the deployments sorted by name list" in other_order.json()["detail"]
    from console.lists import encode_cursor

    foreign = encode_cursor("events", ["newest", "2026-01-01T00:00:00+00:00", "a", 1])
    refused = as_bob.get(f"/api/v1/deployments?cursor={foreign}")
    assert refused.status_code == 400 and refused.json()["field"] == "cursor"
    assert refused.json()["detail"].startswith("cursor: is a cursor of the events list")


def test_the_page_sorts_by_a_column_heading_and_pages_on(as_bob, three, red, settings):
    page = as_bob.get("/deployments/?sort=-name").content.decode()
    assert page.index(">gamma</a>") < page.index(">beta</a>") < page.index(">alpha</a>")
    assert 'aria-sort="descending"' in page and 'href="?sort=name"' in page  # toggles back
    for n in range(50):
        factories.make_deployment(f"more-{n:02d}", red)
    first = as_bob.get("/deployments/").content.decode()
    assert ">more-46</a>" in first and ">more-47</a>" not in first  # 50 a page, by name
    next_href = first.split('id="next-page"')[0].rsplit('href="', 1)[1].split('"')[0]
    second = as_bob.get(f"/deployments/{next_href.replace('&amp;', '&')}").content.decode()
    assert ">more-47</a>" in second and ">more-46</a>" not in second and "next-page" not in second


def test_the_page_starts_again_at_the_first_page_for_a_cursor_it_did_not_give(as_bob, three):
    page = as_bob.get("/deployments/?cursor=made-up").content.decode()
    assert "The page asked for is not one of this list: it is not a cursor Berth gave" in page
    assert ">alpha</a>" in page


def test_the_marketplace_and_the_models_api_sort_and_page_alike(as_carol, db):
    from django.core.management import call_command

    call_command("load_catalog", stdout=open("/dev/null", "w"))  # noqa: SIM115
    listed = as_carol.get("/api/v1/models?sort=-size&limit=3").json()
    sizes = [m["name"] for m in listed["items"]]
    assert len(sizes) == 3 and listed["next_cursor"]
    biggest = as_carol.get("/models/?sort=-size").content.decode()
    places = [biggest.index(f"<strong>{name}</strong>") for name in sizes]
    assert places == sorted(places)
    assert 'name="cursor"' not in biggest and 'name="limit"' not in biggest  # not filters
    every = []
    cursor = ""
    while True:
        page = as_carol.get(f"/api/v1/models?limit=5&cursor={cursor}").json()
        every += [m["repo_id"] for m in page["items"]]
        if not (cursor := page["next_cursor"] or ""):
            break
    names = [m["repo_id"] for m in as_carol.get("/api/v1/models?limit=200").json()["items"]]
    assert every == names and len(every) == len(set(every)) > 5
    refused = as_carol.get("/api/v1/models?family=nope")
    assert refused.status_code == 400 and refused.json()["field"] == "family"


def test_the_clusters_list_and_api_filter_sort_and_page(as_carol, db):
    for name, gpus in (("aa", 1), ("bb", 4), ("cc", 2)):
        factories.make_cluster(name, gpus=gpus)
    by_gpus = as_carol.get("/api/v1/clusters?sort=-gpus").json()
    assert [c["name"] for c in by_gpus["items"]] == ["bb", "cc", "aa"]
    first = as_carol.get("/api/v1/clusters?limit=2").json()
    rest = as_carol.get(f"/api/v1/clusters?limit=2&cursor={first['next_cursor']}").json()
    assert [c["name"] for c in first["items"] + rest["items"]] == ["aa", "bb", "cc"]
    assert rest["next_cursor"] is None
    assert as_carol.get("/api/v1/clusters?q=b").json()["items"][0]["name"] == "bb"
    page = as_carol.get("/clusters/?sort=-gpus").content.decode()
    assert page.index(">bb</a>") < page.index(">cc</a>") < page.index(">aa</a>")
    wrong = as_carol.get("/api/v1/clusters?kind=mainframe")
    assert wrong.status_code == 400 and wrong.json()["field"] == "kind"
    foreign = as_carol.get(f"/api/v1/clusters?cursor={first['next_cursor']}&sort=-name")
    assert foreign.status_code == 400 and foreign.json()["field"] == "cursor"


def test_on_this_server_filters_sorts_and_says_when_nothing_matches(as_carol, db):
    from django.core.management import call_command

    from catalog.models import Model
    from tests.integration.test_lifecycle import on_this_server

    call_command("load_catalog", stdout=open("/dev/null", "w"))  # noqa: SIM115
    kept = [
        Model.objects.get(repo_id=r).variants.first() for r in ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-8B")
    ]
    for variant in kept:
        on_this_server(variant)
    biggest_first = as_carol.get("/models/on-this-server/?sort=-size").content.decode()
    assert biggest_first.index(">Qwen3 8B</a>") < biggest_first.index(">Qwen3 0.6B</a>")
    assert 'aria-sort="descending"' in biggest_first
    only = as_carol.get("/models/on-this-server/?q=0.6").content.decode()
    assert ">Qwen3 0.6B</a>" in only and ">Qwen3 8B</a>" not in only
    none = as_carol.get("/models/on-this-server/?state=failed").content.decode()
    assert "No model files match these filters." in none
    ignored = as_carol.get("/models/on-this-server/?state=sleeping").content.decode()
    assert ">Qwen3 8B</a>" in ignored  # a bad value is left out on a page


def test_a_deployments_log_lines_through_the_api_filter_page_and_follow(as_bob, as_dave, red):
    from django.utils import timezone

    from deployments.logs import write_lines

    deployment = factories.make_deployment("logged", red)
    now = timezone.now()
    levels = ["INFO", "WARNING", "ERROR", "INFO", "INFO"]
    write_lines(
        deployment.pk, [(None, "stdout", lv, now, f"line {n} {lv}") for n, lv in enumerate(levels)]
    )
    url = f"/api/v1/deployments/{deployment.pk}/logs"
    first = as_bob.get(f"{url}?limit=2").json()
    assert [line["text"] for line in first["items"]] == ["line 0 INFO", "line 1 WARNING"]
    rest = as_bob.get(f"{url}?limit=10&cursor={first['next_cursor']}").json()
    assert [line["seq"] for line in rest["items"]] == [3, 4, 5] and rest["next_cursor"] is None
    assert [line["text"] for line in as_bob.get(f"{url}?level=WARNING").json()["items"]] == [
        "line 1 WARNING",
        "line 2 ERROR",
    ]
    last_seen = rest["items"][-1]["seq"]
    assert as_bob.get(f"{url}?after={last_seen}").json() == {"items": [], "next_cursor": None}
    write_lines(deployment.pk, [(None, "stderr", "INFO", now, "a new one")])
    (new,) = as_bob.get(f"{url}?after={last_seen}").json()["items"]  # following the log
    assert (new["seq"], new["stream"], new["text"]) == (6, "stderr", "a new one")
    newest = as_bob.get(f"{url}?sort=-seq&limit=1").json()["items"]
    assert newest[0]["text"] == "a new one"
    for query, field in (("after=-1", "after"), ("level=LOUD", "level"), ("colour=red", "colour")):
        refused = as_bob.get(f"{url}?{query}")
        assert refused.status_code == 400 and refused.json()["field"] == field
    assert as_dave.get(url).status_code == 404  # not in the team
