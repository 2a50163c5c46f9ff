"""A team's notifications page and what triggers a notice: its admins add webhooks (the secret
shown once), disable, enable, delete and test them; members see them; others get not found. A
deployment that fails, degrades or recovers owes each wanting webhook one delivery."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from console import audit, crypto
from console.models import AuditEntry, Role
from deployments import notifications, transitions
from deployments.choices import DeploymentState as S
from deployments.models import Delivery, EmailRecipient, Webhook
from tests import factories

pytestmark = pytest.mark.django_db
PUBLIC_URL = "https://93.184.215.14/hooks/berth"  # a public address: no DNS needed


def text(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def erin(red):
    """An admin of team red (not a platform admin)."""
    user = factories.make_user("erin")
    factories.add_member(user, red, Role.ADMIN)
    return user


@pytest.fixture
def as_erin(erin) -> Client:
    return client_of(erin)


def add(client, **fields):
    form = {"name": "on-call", "url": PUBLIC_URL, "events": ["failed", "recovered"], **fields}
    return client.post("/teams/red/notifications/", form)


def hook(red, events=("failed", "degraded", "recovered"), **fields) -> Webhook:
    webhook = Webhook(team=red, name=fields.pop("name", "ops"), url=PUBLIC_URL, events=events)
    webhook.set_secret("whsec_test")
    for key, value in fields.items():
        setattr(webhook, key, value)
    webhook.save()
    return webhook


# --- adding ------------------------------------------------------------------------------------


def test_an_admin_adds_a_webhook_and_sees_its_secret_once(as_erin, erin, red):
    page = text(add(as_erin))
    secret = re.search(r'id="new-webhook-secret">(whsec_[\w-]+)<', page).group(1)
    assert "Copy the secret of webhook “on-call” now." in page
    webhook = Webhook.objects.get()
    assert (webhook.team, webhook.events, webhook.enabled) == (red, ["failed", "recovered"], True)
    assert webhook.secret() == secret and secret not in webhook.secret_encrypted
    assert crypto.decrypt(webhook.secret_encrypted) == secret
    assert secret not in text(as_erin.get("/teams/red/notifications/"))
    row = AuditEntry.objects.get(action=audit.WEBHOOK_ADDED)
    assert (row.actor, row.team, row.target) == (erin, red, "team red: webhook on-call")
    assert secret not in row.message


@pytest.mark.parametrize(
    "url,words",
    [
        ("http://example.com/hook", "“http://example.com/hook” does not start with https://"),
        ("https://127.0.0.1/hook", "Webhooks may not reach 127.0.0.1: it is a loopback address."),
        ("https://10.0.0.5/hook", "Webhooks may not reach 10.0.0.5: it is a private address."),
        ("https://169.254.169.254/", "Webhooks may not reach 169.254.169.254: it is a link-local"),
        ("https://[::1]/hook", "Webhooks may not reach ::1: it is a loopback address."),
        ("https://localhost/hook", "Webhooks may not reach localhost (127.0.0.1): it is a loop"),
    ],
)
def test_addresses_that_are_not_public_https_are_refused_with_words(as_erin, url, words):
    page = text(add(as_erin, url=url))
    assert words in page
    assert not Webhook.objects.exists() and not AuditEntry.objects.exists()


def test_an_admin_who_is_not_staff_cannot_allow_private_addresses(as_erin, red):
    page = text(add(as_erin, url="https://127.0.0.1:9/hook", allow_private="on"))
    assert (
        "Only platform admins may let a webhook reach private addresses; leave it unticked."
    ) in page
    assert not Webhook.objects.exists()
    assert "Allow private" not in text(as_erin.get("/teams/red/notifications/"))


def test_a_platform_admin_allows_a_private_address(as_alice, red):
    assert "Allow private" in text(as_alice.get("/teams/red/notifications/"))
    add(as_alice, url="https://127.0.0.1:9/hook", allow_private="on")
    assert Webhook.objects.get().allow_private is True


@pytest.mark.parametrize(
    "events,words",
    [
        (["exploded"], "Unknown event “exploded”: choose failed, degraded or recovered."),
        ([], "Choose at least one event: failed, degraded or recovered."),
    ],
)
def test_unknown_or_no_events_are_refused_with_words(as_erin, events, words):
    assert words in text(add(as_erin, events=events))
    assert not Webhook.objects.exists()


def test_the_action_refuses_unknown_events_too(erin, red):
    with pytest.raises(notifications.NotificationRefused, match="Unknown event 'test'"):
        notifications.add_webhook(erin, red, "x", PUBLIC_URL, ["test"])


def test_a_second_webhook_of_the_same_name_is_refused(as_erin, red):
    add(as_erin)
    assert "Team red already has a webhook called “on-call”." in text(add(as_erin))
    assert Webhook.objects.count() == 1


# --- who sees and changes ----------------------------------------------------------------------


@pytest.mark.parametrize("who", ["bob", "carol"])
def test_operators_and_viewers_see_webhooks_and_their_log_but_no_controls(who, bob, carol, red):
    webhook = hook(red)
    client = client_of({"bob": bob, "carol": carol}[who])
    page = text(client.get("/teams/red/notifications/"))
    assert "ops" in page and PUBLIC_URL in page
    assert "Only the team's admins add, change and test its notifications." in page
    for control in ("Add webhook", "Send a test", "Disable", "Delete"):
        assert control not in page
    assert client.get(f"/teams/red/notifications/{webhook.pk}/").status_code == 200
    for action in ("disable", "delete", "test"):
        assert client.post(f"/teams/red/notifications/{webhook.pk}/{action}/").status_code == 403
    assert add(client).status_code == 403
    assert Webhook.objects.get().enabled and not Delivery.objects.exists()


def test_outsiders_get_not_found(as_dave, red, blue):
    webhook = hook(red)
    assert as_dave.get("/teams/red/notifications/").status_code == 404
    assert as_dave.get(f"/teams/red/notifications/{webhook.pk}/").status_code == 404
    assert as_dave.post(f"/teams/red/notifications/{webhook.pk}/delete/").status_code == 404
    frank = factories.make_user("frank")
    factories.add_member(frank, blue, Role.ADMIN)
    assert client_of(frank).get(f"/teams/blue/notifications/{webhook.pk}/").status_code == 404


def test_the_pages_need_a_login(red):
    response = Client().get("/teams/red/notifications/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_the_team_page_links_to_its_notifications(as_erin):
    assert 'href="/teams/red/notifications/"' in text(as_erin.get("/teams/red/"))


def test_an_admin_disables_enables_tests_and_deletes_with_audit_rows(as_erin, red):
    webhook = hook(red)
    base = f"/teams/red/notifications/{webhook.pk}"
    page = text(as_erin.post(f"{base}/disable/", follow=True))
    assert "Webhook “ops” was disabled." in page
    assert Webhook.objects.get().enabled is False
    as_erin.post(f"{base}/enable/")
    assert Webhook.objects.get().enabled is True
    page = text(as_erin.post(f"{base}/test/", follow=True))
    assert "A test notice is on its way to webhook “ops”; see its delivery log." in page
    delivery = Delivery.objects.get()
    assert (delivery.event, delivery.payload["event"], delivery.payload["team"]) == (
        "test",
        "test",
        "red",
    )
    assert 'id="delivery-' in page and "Pending" in page
    as_erin.post(f"{base}/delete/")
    assert not Webhook.objects.exists() and not Delivery.objects.exists()
    actions = list(AuditEntry.objects.order_by("pk").values_list("action", flat=True))
    assert actions == [
        audit.WEBHOOK_DISABLED,
        audit.WEBHOOK_ENABLED,
        audit.WEBHOOK_TESTED,
        audit.WEBHOOK_DELETED,
    ]


def test_the_delivery_log_shows_the_latest_50(as_erin, red, red_deployment):
    webhook = hook(red)
    for n in range(55):
        Delivery.objects.create(
            webhook=webhook,
            event="failed",
            deployment=red_deployment,
            deployment_name="red-qwen",
            payload={},
            attempts=n,
        )
    page = text(as_erin.get(f"/teams/red/notifications/{webhook.pk}/"))
    assert page.count('id="delivery-') == 50
    assert "The latest 50 deliveries, newest first (at most 50)." in page


# --- what triggers a notice --------------------------------------------------------------------


def notices(deployment) -> list[str]:
    return list(
        Delivery.objects.filter(deployment=deployment)
        .order_by("pk")
        .values_list("event", flat=True)
    )


def test_failing_degrading_and_recovering_each_owe_one_notice(red, red_deployment):
    hook(red)
    for state in (S.DEPLOYING, S.DEPLOYED, S.DEGRADED, S.DEPLOYED, S.FAILED):
        transitions.move_deployment(red_deployment.pk, state)
    for state in (S.REQUESTED, S.DEPLOYING, S.DEPLOYED, S.DEGRADED, S.DEPLOYING):
        transitions.move_deployment(red_deployment.pk, state)
    assert notices(red_deployment) == ["degraded", "recovered", "failed", "recovered", "degraded"]
    recovered = Delivery.objects.filter(event="recovered").order_by("pk")
    before = [delivery.payload["deployment"]["previous_state"] for delivery in recovered]
    assert before == ["DEGRADED", "DEPLOYING"]  # the state just before: failed ones start over


def test_a_deployment_that_becomes_deployed_for_the_first_time_owes_nothing(red, red_deployment):
    hook(red)
    for state in (S.DEPLOYING, S.DEPLOYED, S.STOPPING, S.STOPPED):
        transitions.move_deployment(red_deployment.pk, state)
    assert notices(red_deployment) == []


def test_only_enabled_webhooks_that_want_the_event_get_it(red, blue, red_deployment):
    hook(red, events=["recovered"], name="recoveries")
    hook(red, enabled=False, name="off")
    wants = hook(red, events=["failed"], name="failures")
    hook(blue, name="another-team")
    transitions.move_deployment(red_deployment.pk, S.FAILED)
    assert list(Delivery.objects.values_list("webhook", flat=True)) == [wants.pk]


def test_the_console_url_leads_the_link_when_set(settings, red, red_deployment):
    settings.CONSOLE_URL = "https://berth.example.com"
    hook(red)
    transitions.move_deployment(red_deployment.pk, S.FAILED)
    url = Delivery.objects.get().payload["url"]
    assert url == f"https://berth.example.com/deployments/{red_deployment.pk}/"


# --- e-mail ------------------------------------------------------------------------------------


@pytest.fixture
def smtp(settings):
    """This server sends e-mail (the delivery itself: test_email_delivery.py)."""
    settings.SMTP_HOST, settings.SMTP_FROM = "mail.example.com", "berth@example.com"


def add_email(client, **fields):
    form = {"address": "oncall@example.com", "events": ["failed", "recovered"], **fields}
    return client.post("/teams/red/notifications/email/", form, follow=True)


def test_an_admin_adds_an_email_address_with_an_audit_row(smtp, as_erin, erin, red):
    page = text(add_email(as_erin))
    assert "Notices now go to oncall@example.com too." in page
    assert 'id="email-' in page and "oncall@example.com" in page
    recipient = EmailRecipient.objects.get()
    assert (recipient.team, recipient.events, recipient.enabled) == (
        red,
        ["failed", "recovered"],
        True,
    )
    row = AuditEntry.objects.get(action=audit.EMAIL_ADDED)
    assert (row.actor, row.team, row.target) == (erin, red, "team red: e-mail oncall@example.com")


@pytest.mark.parametrize(
    "fields,words",
    [
        ({"address": "not-an-address"}, "“not-an-address” is not an e-mail address: give one"),
        ({"address": "two@@example.com"}, "“two@@example.com” is not an e-mail address"),
        ({"address": ""}, "This field is required."),
        ({"address": "a" * 250 + "@x.io"}, "Ensure this value has at most 254 characters"),
        ({"events": ["exploded"]}, "Unknown event “exploded”: choose failed, degraded or"),
        ({"events": []}, "Choose at least one event: failed, degraded or recovered."),
    ],
)
def test_bad_addresses_and_events_are_refused_with_words(smtp, as_erin, fields, words):
    page = text(add_email(as_erin, **fields))
    assert words in page
    assert not EmailRecipient.objects.exists() and not AuditEntry.objects.exists()


def test_an_address_the_team_already_has_is_refused_whatever_its_case(smtp, as_erin):
    add_email(as_erin)
    page = text(add_email(as_erin, address="OnCall@example.com"))
    assert "Team red already sends e-mail to OnCall@example.com." in page
    assert EmailRecipient.objects.count() == 1


def test_without_smtp_settings_the_page_says_so_and_adding_is_refused(as_erin, erin, red):
    page = text(as_erin.get("/teams/red/notifications/"))
    assert (
        "This server sends no e-mail yet: a platform admin sets <code>BERTH_SMTP_HOST</code>"
        in page
    )
    assert "Add e-mail address" not in page
    assert "This server sends no e-mail: a platform admin sets BERTH_SMTP_HOST" in text(
        add_email(as_erin)
    )
    with pytest.raises(notifications.NotificationRefused, match="sends no e-mail"):
        notifications.add_email(erin, red, "oncall@example.com", ["failed"])
    assert not EmailRecipient.objects.exists()


def test_operators_see_addresses_but_cannot_change_them(smtp, bob, red):
    recipient = EmailRecipient.objects.create(
        team=red, address="ops@example.com", events=["failed"]
    )
    client = client_of(bob)
    page = text(client.get("/teams/red/notifications/"))
    assert "ops@example.com" in page and "Add e-mail address" not in page
    assert client.get(f"/teams/red/notifications/email/{recipient.pk}/").status_code == 200
    for action in ("disable", "delete", "test"):
        url = f"/teams/red/notifications/email/{recipient.pk}/{action}/"
        assert client.post(url).status_code == 403
    assert add_email(client).status_code == 403
    assert EmailRecipient.objects.get().enabled and not Delivery.objects.exists()


def test_an_outsider_gets_not_found_for_an_address(smtp, as_dave, red):
    recipient = EmailRecipient.objects.create(
        team=red, address="ops@example.com", events=["failed"]
    )
    assert as_dave.get(f"/teams/red/notifications/email/{recipient.pk}/").status_code == 404
    url = f"/teams/red/notifications/email/{recipient.pk}/delete/"
    assert as_dave.post(url).status_code == 404 and EmailRecipient.objects.exists()


def test_an_admin_disables_enables_tests_and_deletes_an_address_with_audit_rows(smtp, as_erin, red):
    recipient = EmailRecipient.objects.create(
        team=red, address="ops@example.com", events=["failed"]
    )
    base = f"/teams/red/notifications/email/{recipient.pk}"
    assert "E-mail address ops@example.com was disabled." in text(
        as_erin.post(f"{base}/disable/", follow=True)
    )
    as_erin.post(f"{base}/enable/")
    page = text(as_erin.post(f"{base}/test/", follow=True))
    assert "A test notice is on its way to e-mail address ops@example.com; see its" in page
    assert "E-mail to ops@example.com" in page and 'id="delivery-' in page
    delivery = Delivery.objects.get()
    assert (delivery.recipient, delivery.webhook, delivery.event) == (recipient, None, "test")
    as_erin.post(f"{base}/delete/")
    assert not EmailRecipient.objects.exists() and not Delivery.objects.exists()
    actions = list(AuditEntry.objects.order_by("pk").values_list("action", flat=True))
    assert actions == [
        audit.EMAIL_DISABLED,
        audit.EMAIL_ENABLED,
        audit.EMAIL_TESTED,
        audit.EMAIL_DELETED,
    ]


def test_a_test_to_an_address_is_refused_in_words_once_smtp_is_gone(settings, as_erin, red):
    recipient = EmailRecipient.objects.create(
        team=red, address="ops@example.com", events=["failed"]
    )
    page = text(as_erin.post(f"/teams/red/notifications/email/{recipient.pk}/test/", follow=True))
    assert "This server sends no e-mail: a platform admin sets BERTH_SMTP_HOST" in page
    assert not Delivery.objects.exists()


def test_a_failure_is_owed_to_wanting_addresses_only_while_the_server_sends_email(
    settings, red, red_deployment
):
    wants = EmailRecipient.objects.create(team=red, address="a@example.com", events=["failed"])
    EmailRecipient.objects.create(team=red, address="b@example.com", events=["recovered"])
    EmailRecipient.objects.create(
        team=red, address="c@example.com", events=["failed"], enabled=False
    )
    transitions.move_deployment(red_deployment.pk, S.FAILED)
    assert not Delivery.objects.exists()  # no SMTP settings: nothing is owed
    settings.SMTP_HOST, settings.SMTP_FROM = "mail.example.com", "berth@example.com"
    transitions.move_deployment(red_deployment.pk, S.REQUESTED)
    transitions.move_deployment(red_deployment.pk, S.FAILED)
    assert list(Delivery.objects.values_list("recipient", flat=True)) == [wants.pk]
