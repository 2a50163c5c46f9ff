"""Webhooks, end to end: a deployment that fails (through transitions.py) is told to the team's
webhook by the real worker, signed, over HTTPS to a real receiver; refused tries are tried again
by beat until they are delivered, or given up after the attempts."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from deployments import notifications, transitions
from deployments.choices import DeliveryState, DeploymentState
from deployments.models import Delivery, Deployment
from tests import factories
from tests.processes import console_processes, wait_for
from tests.webhook_receiver import https_receiver

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def erin(red):
    user = factories.make_user("erin", staff=True)
    factories.add_member(user, red, "admin")
    return user


def add_hook(erin, red, url: str, name: str = "on-call"):
    return notifications.add_webhook(erin, red, name, url, ["failed"], allow_private=True)


def env_for(receiver, **extra: str) -> dict[str, str]:
    return {
        "BERTH_WEBHOOK_CA_FILE": str(receiver.ca_file),
        "BERTH_WEBHOOK_RETRY_BASE_S": "0.2",
        **extra,
    }


def settled(delivery_id: int) -> Delivery | None:
    delivery = Delivery.objects.get(pk=delivery_id)
    return delivery if delivery.state != DeliveryState.PENDING else None


def fail(deployment: Deployment) -> None:
    transitions.move_deployment(
        deployment.pk,
        DeploymentState.FAILED,
        message="The engine ran out of GPU memory.",
        last_error_code="OOM",
    )


def test_a_failed_deployment_is_posted_once_signed_and_without_secrets(
    tmp_path, erin, red, red_deployment
):
    copy = factories.make_copy(red_deployment)
    copy.set_engine_api_key("sk-engine-secret-key")
    copy.save()
    with https_receiver(tmp_path) as receiver:
        webhook, secret = add_hook(erin, red, f"{receiver.url}/hooks/berth")
        with console_processes(tmp_path, **env_for(receiver)):
            fail(red_deployment)
            delivery = wait_for(lambda: settled(Delivery.objects.get().pk), 30, what="the delivery")
    assert delivery.state == DeliveryState.DELIVERED and delivery.attempts == 1
    assert delivery.last_status_code == 200 and delivery.delivered_at is not None
    [post] = receiver.received
    assert post.path == "/hooks/berth"
    assert post.headers["X-Berth-Event"] == "failed"
    assert post.headers["X-Berth-Delivery"] == str(delivery.pk)
    signed = post.headers["X-Berth-Timestamp"].encode() + b"." + post.body
    expected = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    assert post.headers["X-Berth-Signature"] == f"sha256={expected}"
    payload = post.json()
    assert payload["event"] == "failed"
    assert payload["deployment"] == {
        "id": red_deployment.pk,
        "name": "red-qwen",
        "team": "red",
        "state": "FAILED",
        "previous_state": "REQUESTED",
        "message": "The engine ran out of GPU memory.",
        "last_error_code": "OOM",
    }
    assert payload["url"] == f"/deployments/{red_deployment.pk}/"
    assert payload["at"].endswith("Z")
    assert secret.encode() not in post.body and b"sk-engine-secret-key" not in post.body


def test_a_receiver_that_refuses_twice_gets_it_on_the_third_try(
    tmp_path, erin, red, red_deployment
):
    with https_receiver(tmp_path, statuses=[500, 500, 200]) as receiver:
        add_hook(erin, red, f"{receiver.url}/flaky")
        with console_processes(tmp_path, **env_for(receiver)):
            fail(red_deployment)
            delivery = wait_for(lambda: settled(Delivery.objects.get().pk), 60, what="the delivery")
    assert (delivery.state, delivery.attempts, delivery.last_status_code) == (
        DeliveryState.DELIVERED,
        3,
        200,
    )
    assert len(receiver.received) == 3
    assert len({post.headers["X-Berth-Delivery"] for post in receiver.received}) == 1


def test_a_receiver_that_never_answers_2xx_fails_after_the_attempts(
    tmp_path, erin, red, red_deployment
):
    with https_receiver(tmp_path, statuses=[503]) as receiver:
        add_hook(erin, red, f"{receiver.url}/down")
        env = env_for(receiver, BERTH_WEBHOOK_ATTEMPTS="3")
        with console_processes(tmp_path, **env):
            fail(red_deployment)
            delivery = wait_for(lambda: settled(Delivery.objects.get().pk), 60, what="the delivery")
    assert (delivery.state, delivery.attempts, delivery.last_status_code) == (
        DeliveryState.FAILED,
        3,
        503,
    )
    assert delivery.last_error == (
        "The server answered 503 Service Unavailable. Gave up after 3 tries."
    )
    assert len(receiver.received) == 3
