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
    return [row["name"] for row in response.json()]


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
        ("?colour=red", "colour", "colour: no such filter; use one of state, cluster, model, q"),
    ],
)
def test_the_api_refuses_a_bad_filter_naming_it(as_bob, three, query, field, detail):
    response = as_bob.get(f"/api/v1/deployments{query}")
    assert response.status_code == 400
    assert response.json()["field"] == field
    assert response.json()["detail"].startswith(detail)
