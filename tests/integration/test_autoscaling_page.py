"""The Autoscaling panel of a deployment's page: what the policy is, the change waiting for its
window, and the operator's form (bad numbers said with the field; viewers get no form and their
posts are refused); the API's autoscaling object is the same policy."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from deployments import load
from deployments.autoscaling import Pending
from deployments.models import Deployment, EngineFigures, Event

pytestmark = pytest.mark.django_db

GOOD = {"min_copies": "1", "max_copies": "4", "target_in_flight": "2", "up_window_s": "5"}


def page(client, deployment) -> str:
    return client.get(f"/deployments/{deployment.pk}/").content.decode()


def post(client, deployment, **form) -> str:
    answer = client.post(f"/deployments/{deployment.pk}/autoscaling/", form, follow=True)
    return answer.content.decode()


def test_an_operator_turns_it_on_sees_the_policy_and_turns_it_off(as_bob, red_deployment):
    assert "Off: 1 copy, as set with Scale." in page(as_bob, red_deployment)
    shown = post(as_bob, red_deployment, **GOOD)
    assert "Autoscaling from 1 to 4 copies, target 2 requests in flight per copy" in shown
    assert "Between 1 and 4 copies" in shown and "2 requests in flight per copy" in shown
    assert "held above the target for 5 s" in shown
    stored = Deployment.objects.get(pk=red_deployment.pk).autoscaling
    assert stored["max_copies"] == 4 and stored["up_window_s"] == 5
    assert Event.objects.filter(deployment=red_deployment, message__startswith="Autoscale").exists()

    load.write_pending(red_deployment.pk, Pending(3, time.time() - 4))
    assert "Waiting to go to 3 copies: the load has asked for it for 4 s." in page(
        as_bob, red_deployment
    )

    assert 'id="autoscaling-chart"' not in page(as_bob, red_deployment)  # nothing scraped yet
    now = timezone.now()
    for seconds_ago, copies, running in ((120, 1, 1), (60, 2, 6), (0, 3, 9)):
        EngineFigures.objects.create(
            deployment=red_deployment, at=now - timedelta(seconds=seconds_ago),
            copies=copies, requests_running=running,
        )  # fmt: skip
    shown = page(as_bob, red_deployment)
    assert 'aria-label="Copies and load over the last 1 minute"' in shown
    assert "Copies (solid) and load" in shown

    off = post(as_bob, red_deployment, off="1")
    assert "Autoscaling is off: 1 copy from now on." in off
    assert Deployment.objects.get(pk=red_deployment.pk).autoscaling is None


def test_an_idle_time_is_set_said_and_each_wake_listed_with_its_cold_start(as_bob, red_deployment):
    shown = post(as_bob, red_deployment, **{**GOOD, "min_copies": "0", "idle_minutes": "20"})
    assert "to zero after 20 min idle" in shown
    assert "With no request for 20 min it goes to zero copies (Idle)" in shown
    assert Deployment.objects.get(pk=red_deployment.pk).autoscaling["idle_minutes"] == 20
    Event.objects.create(
        deployment=red_deployment, deployment_name=red_deployment.name, kind="autoscale",
        message="Woke from idle: a copy serves 12.5 s after the request that woke it",
    )  # fmt: skip
    assert "a copy serves 12.5 s after the request that woke it" in page(as_bob, red_deployment)


@pytest.mark.parametrize(
    "form,words",
    [
        ({**GOOD, "min_copies": "5"}, "Not done: min copies: 5 is above max_copies (4)"),
        ({**GOOD, "max_copies": "1001"}, "Not done: max copies: 1001 is not allowed"),
        ({**GOOD, "target_in_flight": "0"}, "Not done: target in flight: 0.0 is not allowed"),
        ({**GOOD, "max_copies": "many"}, "Not done: max copies: Enter a whole number."),
        ({**GOOD, "up_window_s": "-3"}, "Not done: up window s: -3 is not allowed"),
        (
            {**GOOD, "idle_minutes": "5"},
            "Not done: idle minutes: only a deployment whose min_copies is 0",
        ),
        (
            {**GOOD, "min_copies": "0", "idle_minutes": "0"},
            "Not done: idle minutes: 0 is not allowed",
        ),
    ],
)
def test_bad_numbers_are_refused_with_the_field_and_nothing_changes(
    as_bob, red_deployment, form, words
):
    shown = post(as_bob, red_deployment, **form)
    assert words in shown
    assert Deployment.objects.get(pk=red_deployment.pk).autoscaling is None


def test_a_viewer_sees_the_policy_but_no_form_and_cannot_post(as_carol, red_deployment):
    assert 'id="autoscaling-form"' not in page(as_carol, red_deployment)
    answer = as_carol.post(f"/deployments/{red_deployment.pk}/autoscaling/", GOOD)
    assert answer.status_code == 403
    assert Deployment.objects.get(pk=red_deployment.pk).autoscaling is None
