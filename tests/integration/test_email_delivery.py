"""E-mail notifications, end to end: a deployment that fails (through transitions.py) is told to
the team's e-mail address by the real worker, through a real SMTP server (STARTTLS, a login
whose password comes from a file), in words and without secrets; an address the server refuses
is tried again and given up after the attempts, with the server's reply in the delivery log."""

from __future__ import annotations

import pytest

from deployments import notifications, transitions
from deployments.choices import DeliveryState, DeploymentState
from deployments.models import Delivery
from tests import factories
from tests.mail_receiver import PASSWORD, smtp_receiver
from tests.processes import console_processes, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def erin(red):
    user = factories.make_user("erin")
    factories.add_member(user, red, "admin")
    return user


@pytest.fixture
def mail_server(tmp_path, settings):
    """The SMTP server, with this process's settings naming it (the console's processes get
    the same settings through their environment)."""
    with smtp_receiver(tmp_path) as receiver:
        settings.SMTP_HOST, settings.SMTP_FROM = receiver.host, "berth@example.com"
        yield receiver


def settled(delivery_id: int) -> Delivery | None:
    delivery = Delivery.objects.get(pk=delivery_id)
    return delivery if delivery.state != DeliveryState.PENDING else None


def fail(deployment) -> None:
    transitions.move_deployment(
        deployment.pk,
        DeploymentState.FAILED,
        message="The engine ran out of GPU memory.",
        last_error_code="OOM",
    )


def test_a_failed_deployment_is_mailed_to_the_team_in_words_without_secrets(
    tmp_path, mail_server, erin, red, red_deployment
):
    copy = factories.make_copy(red_deployment)
    copy.set_engine_api_key("sk-engine-secret-key")
    copy.save()
    notifications.add_email(erin, red, "oncall@example.com", ["failed"])
    env = {**mail_server.env(tmp_path / "smtp-password"), "BERTH_WEBHOOK_RETRY_BASE_S": "0.2"}
    with console_processes(tmp_path, **env):
        fail(red_deployment)
        delivery = wait_for(lambda: settled(Delivery.objects.get().pk), 30, what="the e-mail")
    assert (delivery.state, delivery.attempts, delivery.last_status_code) == (
        DeliveryState.DELIVERED,
        1,
        250,
    )
    assert delivery.recipient.address == "oncall@example.com" and delivery.webhook is None
    assert mail_server.logins == ["berth-mailer"]  # over STARTTLS: the server allows no other
    [message] = mail_server.messages
    assert message["From"] == "berth@example.com" and message["To"] == "oncall@example.com"
    assert message["Subject"] == "[Berth] red-qwen of team red failed"
    body = message.get_content()
    assert "Deployment red-qwen of team red failed." in body
    assert "State: FAILED (was REQUESTED)" in body
    assert "What Berth saw: The engine ran out of GPU memory." in body
    assert "Error code: OOM" in body
    assert f"Its page: /deployments/{red_deployment.pk}/" in body
    assert "sk-engine-secret-key" not in message.as_string()
    assert PASSWORD not in message.as_string()


def test_an_address_the_server_refuses_is_tried_again_then_given_up_with_its_reply(
    tmp_path, mail_server, erin, red, red_deployment
):
    mail_server.refused.add("gone@example.com")
    notifications.add_email(erin, red, "gone@example.com", ["failed"])
    env = {
        **mail_server.env(tmp_path / "smtp-password"),
        "BERTH_WEBHOOK_RETRY_BASE_S": "0.2",
        "BERTH_WEBHOOK_ATTEMPTS": "2",
    }
    with console_processes(tmp_path, **env):
        fail(red_deployment)
        delivery = wait_for(lambda: settled(Delivery.objects.get().pk), 60, what="the e-mail")
    assert (delivery.state, delivery.attempts, delivery.last_status_code) == (
        DeliveryState.FAILED,
        2,
        550,
    )
    assert delivery.last_error == (
        f"The mail server 127.0.0.1:{mail_server.port} refused the address: "
        "550 5.1.1 No such mailbox here. Gave up after 2 tries."
    )
    assert mail_server.messages == []
