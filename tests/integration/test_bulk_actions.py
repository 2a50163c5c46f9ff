"""The deployments list's bulk bar: pick rows, confirm once on a page that names them, and each
is stopped, started, checked or deleted on its own through actions.py (one that cannot be is
named with why; the rest are done). Bad selections are refused with words, and nothing runs."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages

from deployments.choices import DeploymentState
from deployments.forms import BULK_MOST
from deployments.guard import state_change_allowed
from deployments.models import Deployment, Event
from tests import factories

pytestmark = pytest.mark.django_db


def said(response) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


@pytest.fixture
def three(red):
    """Two serving and one stopped, as the transitions would have left them (set directly)."""
    with state_change_allowed():
        return [
            factories.make_deployment(name, red, state=state)
            for name, state in (
                ("one", DeploymentState.DEPLOYED),
                ("two", DeploymentState.DEPLOYED),
                ("off", DeploymentState.STOPPED),
            )
        ]


def test_the_list_offers_a_box_per_row_the_user_operates_named_after_its_deployment(
    as_bob, three, blue
):
    factories.make_deployment("theirs", blue)  # bob only views blue
    page = as_bob.get("/deployments/").content.decode()
    assert 'aria-label="Select one"' in page and 'form="bulk-form"' in page
    assert 'aria-label="Select theirs"' not in page
    assert 'aria-label="Stop one"' in page and 'aria-label="Start off"' in page


def test_the_confirmation_names_each_chosen_deployment_and_runs_nothing(as_bob, three):
    ids = [d.pk for d in three[:2]]
    page = as_bob.post("/deployments/bulk/", {"action": "stop", "selected": ids})
    assert page.status_code == 200
    text = page.content.decode()
    assert "Stop 2 deployments?" in text and ">one</a>" in text and ">two</a>" in text
    assert 'name="confirmed" value="on"' in text
    assert set(Deployment.objects.values_list("state", flat=True)) == {"DEPLOYED", "STOPPED"}


def test_confirmed_each_is_done_on_its_own_and_one_that_cannot_be_is_named(as_bob, three):
    ids = [d.pk for d in three]
    done = as_bob.post("/deployments/bulk/", {"action": "stop", "selected": ids, "confirmed": "on"})
    assert done.status_code == 302 and done["Location"] == "/deployments/"
    assert said(done) == [
        "one: Stopping every copy.",
        "two: Stopping every copy.",
        "off: not done: it is already stopped.",
    ]
    states = dict(Deployment.objects.values_list("name", "state"))
    assert states == {"one": "STOPPING", "two": "STOPPING", "off": "STOPPED"}
    assert Event.objects.filter(message="Stop", actor_name="bob").count() == 2


def test_bulk_start_and_delete_go_through_the_same_actions(as_bob, three):
    off = three[2]
    as_bob.post("/deployments/bulk/", {"action": "start", "selected": [off.pk], "confirmed": "on"})
    assert Deployment.objects.get(pk=off.pk).state == DeploymentState.REQUESTED
    with state_change_allowed():
        Deployment.objects.filter(pk=off.pk).update(state=DeploymentState.STOPPED)
    gone = as_bob.post(
        "/deployments/bulk/", {"action": "delete", "selected": [off.pk], "confirmed": "on"}
    )
    assert said(gone)[-1].startswith("off: Deleting")
    assert not Deployment.objects.filter(pk=off.pk).exists()


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"action": "stop"}, "Not done: select at least one deployment first."),
        ({"action": "reboot", "selected": ["1"]}, "Not done: no such action reboot; use one of"),
        ({"selected": ["1"]}, "Not done: choose what to do with the selected deployments."),
        ({"action": "stop", "selected": ["1", "x"]}, "Not done: a selected row is not a deploy"),
        (
            {"action": "stop", "selected": [str(n) for n in range(1, BULK_MOST + 2)]},
            f"Not done: select at most {BULK_MOST} deployments at once.",
        ),
    ],
)
def test_a_bad_selection_is_refused_with_words_and_nothing_runs(as_bob, three, body, words):
    refused = as_bob.post("/deployments/bulk/", {**body, "confirmed": "on"})
    assert refused.status_code == 302
    assert said(refused)[0].startswith(words), said(refused)
    assert not Event.objects.filter(actor_name="bob").exists()


def test_a_deployment_of_a_team_the_user_only_views_or_is_not_in_stops_the_whole_request(
    as_bob, as_carol, three, blue
):
    theirs = factories.make_deployment("theirs", blue)  # bob views blue
    mixed = {"action": "stop", "selected": [three[0].pk, theirs.pk], "confirmed": "on"}
    assert as_bob.post("/deployments/bulk/", mixed).status_code == 403
    assert (
        as_carol.post("/deployments/bulk/", {**mixed, "selected": [three[0].pk]}).status_code == 403
    )
    outsider = factories.make_deployment("outside", factories.make_team("green"))
    alone = {"action": "stop", "selected": [outsider.pk], "confirmed": "on"}
    assert as_bob.post("/deployments/bulk/", alone).status_code == 404
    assert Deployment.objects.get(pk=three[0].pk).state == DeploymentState.DEPLOYED


def test_bulk_needs_a_post_with_the_csrf_token(bob, three):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(bob)
    assert client.get("/deployments/bulk/").status_code == 405
    body = {"action": "stop", "selected": [three[0].pk], "confirmed": "on"}
    assert client.post("/deployments/bulk/", body).status_code == 403
    assert Deployment.objects.get(pk=three[0].pk).state == DeploymentState.DEPLOYED
