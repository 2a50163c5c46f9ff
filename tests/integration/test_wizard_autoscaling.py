"""The wizard's review step in advanced mode offers autoscaling: bounds and a target, the copies
of the Where step as the starting number; bad bounds are said beside their field and nothing
is hosted. Novice mode does not show it and hosts a fixed number."""

from __future__ import annotations

import pytest

from deployments.models import Deployment
from tests.integration.test_wizard import catalog, cluster_of, model, start, step, text  # noqa: F401

pytestmark = pytest.mark.django_db

HOST = {"name": "auto", "chat_name": "", "revision": "", "action": "host"}


def review_url(client, copies: int = 2) -> str:
    cluster = cluster_of("lab")
    where = start(client, model=model().pk)
    values = {"cluster": cluster.pk, "size": "1", "copies": copies, "action": "next"}
    settings = client.post(where, values)["Location"]
    client.post(settings, {"editor_mode": "novice", "max_model_len": "4096", "action": "next"})
    return step(where, "review")


def advanced(client) -> None:
    client.post("/deployments/new/mode/", {"mode": "advanced", "next": "/deployments/"})


def test_advanced_review_hosts_with_autoscaling_from_the_copies_chosen(as_bob, red):
    advanced(as_bob)
    review = review_url(as_bob, copies=2)
    page = text(as_bob.get(review))
    assert "Autoscaling" in page and "The 2 copies above start it" in page
    chosen = {"autoscale": "on", "min_copies": "1", "max_copies": "4", "target_in_flight": "2"}
    hosted = as_bob.post(review, {**HOST, "team": red.pk, **chosen})
    deployment = Deployment.objects.get(name="auto")
    assert hosted["Location"] == f"/deployments/{deployment.pk}/"
    assert deployment.copies_wanted == 2
    assert deployment.autoscaling == {
        "min_copies": 1, "max_copies": 4, "target_in_flight": 2.0, "target_ttft_ms": None,
        "up_window_s": None, "down_window_s": None, "idle_minutes": None,
    }  # fmt: skip


@pytest.mark.parametrize(
    "chosen,words",
    [
        ({"min_copies": "5", "max_copies": "3"}, "5 is above max_copies (3)"),
        ({"min_copies": "1", "max_copies": "2000"}, "2000 is not allowed: a whole number from 1 to 1000"),
        ({"min_copies": "1", "max_copies": "3", "target_in_flight": "-1"}, "-1.0 is not allowed"),
        ({"max_copies": "3"}, "required"),
    ],
)  # fmt: skip
def test_bad_bounds_are_said_on_the_review_page_and_nothing_is_hosted(as_bob, red, chosen, words):
    advanced(as_bob)
    review = review_url(as_bob)
    answer = as_bob.post(review, {**HOST, "team": red.pk, "autoscale": "on", **chosen})
    assert answer.status_code == 200
    assert words in text(answer)
    assert not Deployment.objects.exists()


def test_novice_review_has_no_autoscaling_and_hosts_a_fixed_number(as_bob, red):
    review = review_url(as_bob, copies=2)
    assert "Autoscaling" not in text(as_bob.get(review))
    as_bob.post(review, {**HOST, "team": red.pk})
    deployment = Deployment.objects.get(name="auto")
    assert deployment.autoscaling is None and deployment.copies_wanted == 2
