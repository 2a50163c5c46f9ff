"""Autoscaling through the API: host with bounds (copies start within them), read them back,
change or drop them (a fixed scale drops them too), and every bad value refused naming the
field with nothing changed; viewers may read but not change."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from deployments.models import Deployment
from tests.integration.test_api import Caller, host_body

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(db) -> None:
    call_command("seed_demo")


POLICY = {"min_copies": 2, "max_copies": 5, "target_in_flight": 3}
EXPECTED = {
    "min_copies": 2, "max_copies": 5, "target_in_flight": 3.0, "target_ttft_ms": None,
    "up_window_s": None, "down_window_s": None, "idle_minutes": None,
}  # fmt: skip


def hosted(bob, **autoscaling) -> int:
    answer = Caller(bob).post("/deployments", host_body(copies=1, autoscaling=POLICY))
    assert answer.status_code == 202, answer.content
    return answer.json()["id"]


def test_hosted_with_bounds_it_starts_within_them_and_reads_them_back(demo, bob):
    pk = hosted(bob)
    shown = Caller(bob).get(f"/deployments/{pk}").json()
    assert shown["autoscaling"] == EXPECTED
    assert shown["copies_wanted"] == 2  # asked 1, clamped to the lowest


def test_bounds_change_and_go_and_a_fixed_scale_turns_them_off(demo, bob):
    pk = hosted(bob)
    wider = {**POLICY, "max_copies": 8, "up_window_s": 5, "target_ttft_ms": 800}
    changed = Caller(bob).post(f"/deployments/{pk}/autoscaling", {"autoscaling": wider})
    assert changed.status_code == 200, changed.content
    assert changed.json()["autoscaling"] == {**EXPECTED, "max_copies": 8, "up_window_s": 5,
                                             "target_ttft_ms": 800.0}  # fmt: skip
    off = Caller(bob).post(f"/deployments/{pk}/autoscaling", {"autoscaling": None})
    assert off.status_code == 200 and off.json()["autoscaling"] is None
    assert off.json()["copies_wanted"] == 2  # the number it had, now fixed

    Caller(bob).post(f"/deployments/{pk}/autoscaling", {"autoscaling": POLICY})
    scaled = Caller(bob).post(f"/deployments/{pk}/scale", {"copies": 4})
    assert scaled.status_code == 202
    assert scaled.json()["autoscaling"] is None and scaled.json()["copies_wanted"] == 4


@pytest.mark.parametrize(
    "policy,status,field",
    [
        ({**POLICY, "min_copies": 6}, 400, "autoscaling.min_copies"),
        ({**POLICY, "max_copies": 1001}, 422, "autoscaling.max_copies"),
        ({**POLICY, "min_copies": -1}, 422, "autoscaling.min_copies"),
        ({**POLICY, "target_in_flight": 0}, 422, "autoscaling.target_in_flight"),
        ({**POLICY, "up_window_s": 90000}, 422, "autoscaling.up_window_s"),
        ({**POLICY, "idle_minutes": 10}, 400, "autoscaling.idle_minutes"),
        ({**POLICY, "min_copies": 0, "idle_minutes": 0}, 422, "autoscaling.idle_minutes"),
        ({**POLICY, "min_copies": 0, "idle_minutes": 10081}, 422, "autoscaling.idle_minutes"),
        ({**POLICY, "scale_to": 3}, 422, "autoscaling.scale_to"),
        ({"max_copies": 3}, 422, "autoscaling.min_copies"),
        ("two to five", 422, "autoscaling"),
    ],
)
def test_bad_bounds_are_refused_naming_the_field_and_nothing_changes(
    demo, bob, policy, status, field
):
    pk = hosted(bob)
    before = Deployment.objects.filter(pk=pk).values("autoscaling", "copies_wanted").get()
    answer = Caller(bob).post(f"/deployments/{pk}/autoscaling", {"autoscaling": policy})
    assert answer.status_code == status, answer.content
    assert answer.json()["field"] == field
    assert Deployment.objects.filter(pk=pk).values("autoscaling", "copies_wanted").get() == before
    refused_host = Caller(bob).post("/deployments", host_body(name="other", autoscaling=policy))
    assert refused_host.status_code == status and refused_host.json()["field"] == field
    assert not Deployment.objects.filter(name="other").exists()


def test_a_viewer_reads_the_bounds_but_cannot_change_them(demo, bob, carol):
    pk = hosted(bob)
    assert Caller(carol).get(f"/deployments/{pk}").json()["autoscaling"] == EXPECTED
    refused = Caller(carol).post(f"/deployments/{pk}/autoscaling", {"autoscaling": None})
    assert refused.status_code == 403
    assert Deployment.objects.get(pk=pk).autoscaling is not None


def test_an_idle_time_with_a_lowest_of_zero_is_kept_and_read_back(demo, bob):
    pk = hosted(bob)
    idle = {**POLICY, "min_copies": 0, "idle_minutes": 15}
    answer = Caller(bob).post(f"/deployments/{pk}/autoscaling", {"autoscaling": idle})
    assert answer.status_code == 200, answer.content
    assert answer.json()["autoscaling"]["idle_minutes"] == 15
    assert Caller(bob).get(f"/deployments/{pk}").json()["autoscaling"]["idle_minutes"] == 15
