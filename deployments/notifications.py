"""Telling a team that one of its deployments failed, degraded or recovered: its webhooks and,
when the server has SMTP settings, its e-mail addresses (together: its destinations).

The doors for a team admin's changes to the team's destinations (each checks the role, refuses
bad input with words, writes one audit row), and the trigger transitions.py calls when a
deployment's state changes. A delivery is a row written in the same transaction as the state
change and sent on commit (webhook_delivery.py), so that a state change and its notice are
never half-written. Payloads carry no secret: no engine keys, tokens or kubeconfigs.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.text import capfirst

from console import audit, outbound
from console.access import is_platform_admin
from console.models import Team
from console.team_actions import manages_team
from deployments.choices import (
    NOTIFICATION_SUBSCRIBABLE,
    DeploymentState,
    EventKind,
    NotificationEvent,
)
from deployments.models import Delivery, Deployment, EmailRecipient, Event, Webhook

NAME_MAX_LENGTH = 100
EVENT_WORDS = "Choose one or more of: failed, degraded, recovered."
NO_SMTP_WORDS = (
    "This server sends no e-mail: a platform admin sets BERTH_SMTP_HOST and BERTH_SMTP_FROM "
    '(README, "Notifications") first. Webhooks work without it.'
)
Destination = Webhook | EmailRecipient
# The audit action of each change, by kind of destination.
AUDIT_ACTIONS = {
    Webhook: {
        "added": audit.WEBHOOK_ADDED,
        "enabled": audit.WEBHOOK_ENABLED,
        "disabled": audit.WEBHOOK_DISABLED,
        "deleted": audit.WEBHOOK_DELETED,
        "tested": audit.WEBHOOK_TESTED,
    },
    EmailRecipient: {
        "added": audit.EMAIL_ADDED,
        "enabled": audit.EMAIL_ENABLED,
        "disabled": audit.EMAIL_DISABLED,
        "deleted": audit.EMAIL_DELETED,
        "tested": audit.EMAIL_TESTED,
    },
}


class NotificationRefused(Exception):
    """A webhook change that cannot be made as asked; its words say why and what to do."""


def require_team_admin(actor: Any, team: Team) -> None:
    if not manages_team(actor, team):
        raise PermissionDenied(f"Only admins of team {team.name} may change its notifications.")


def sends_email() -> bool:
    return bool(settings.SMTP_HOST)


# --- a team admin's changes ----------------------------------------------------------------


def checked_events(events: list[str]) -> list[str]:
    unknown = [event for event in events if event not in NOTIFICATION_SUBSCRIBABLE]
    if unknown:
        raise NotificationRefused(f"Unknown event {', '.join(map(repr, unknown))}. {EVENT_WORDS}")
    if not events:
        raise NotificationRefused(f"A notification needs at least one event. {EVENT_WORDS}")
    return [event for event in NOTIFICATION_SUBSCRIBABLE if event in events]


def checked_name(team: Team, name: str) -> str:
    name = name.strip()
    if not name or len(name) > NAME_MAX_LENGTH:
        raise NotificationRefused(f"Give the webhook a name of 1 to {NAME_MAX_LENGTH} characters.")
    if team.webhooks.filter(name=name).exists():
        raise NotificationRefused(f"Team {team.name} already has a webhook called “{name}”.")
    return name


def checked_url(actor: Any, url: str, allow_private: bool) -> str:
    if allow_private and not is_platform_admin(actor):
        raise NotificationRefused(
            "Only platform admins may let a webhook reach private addresses; leave it unticked."
        )
    try:
        return outbound.check(url, allow_private=allow_private).url
    except outbound.OutboundRefused as refused:
        raise NotificationRefused(str(refused)) from None


def add_webhook(
    actor: Any, team: Team, name: str, url: str, events: list[str], allow_private: bool = False
) -> tuple[Webhook, str]:
    """The new webhook and its secret, which is never shown again."""
    require_team_admin(actor, team)
    name, events = checked_name(team, name), checked_events(events)
    url = checked_url(actor, url, allow_private)
    secret = f"whsec_{secrets.token_urlsafe(32)}"
    webhook = Webhook(
        team=team,
        name=name,
        url=url,
        events=events,
        allow_private=allow_private,
        created_by=actor,
    )
    webhook.set_secret(secret)
    try:
        with transaction.atomic():
            webhook.save()
            words = f"Webhook “{name}” of team {team.name} was added ({', '.join(events)})."
            audit.record(actor, audit.WEBHOOK_ADDED, target_of(webhook), words, team=team)
    except IntegrityError:  # two admins adding one name at once
        raise NotificationRefused(
            f"Team {team.name} already has a webhook called “{name}”."
        ) from None
    return webhook, secret


def add_email(actor: Any, team: Team, address: str, events: list[str]) -> EmailRecipient:
    require_team_admin(actor, team)
    if not sends_email():
        raise NotificationRefused(NO_SMTP_WORDS)
    address, events = checked_address(team, address), checked_events(events)
    recipient = EmailRecipient(team=team, address=address, events=events, created_by=actor)
    try:
        with transaction.atomic():
            recipient.save()
            words = f"E-mail address {address} of team {team.name} was added ({', '.join(events)})."
            audit.record(actor, audit.EMAIL_ADDED, target_of(recipient), words, team=team)
    except IntegrityError:  # two admins adding one address at once
        raise NotificationRefused(f"Team {team.name} already sends e-mail to {address}.") from None
    return recipient


def checked_address(team: Team, address: str) -> str:
    address = address.strip()
    try:
        validate_email(address)
    except ValidationError:
        raise NotificationRefused(
            f"“{address[:80]}” is not an e-mail address: give one like oncall@example.com."
        ) from None
    if team.email_recipients.filter(address__iexact=address).exists():
        raise NotificationRefused(f"Team {team.name} already sends e-mail to {address}.")
    return address


def set_enabled(actor: Any, destination: Destination, enabled: bool) -> str:
    require_team_admin(actor, destination.team)
    what = capfirst(called(destination))
    if destination.enabled == enabled:
        return f"{what} already is {'enabled' if enabled else 'disabled'}."
    with transaction.atomic():
        type(destination).objects.filter(pk=destination.pk).update(enabled=enabled)
        words = f"{what} was {'enabled' if enabled else 'disabled'}."
        action = audit_action(destination, "enabled" if enabled else "disabled")
        audit.record(actor, action, target_of(destination), words, team=destination.team)
    return words


def delete_destination(actor: Any, destination: Destination) -> str:
    require_team_admin(actor, destination.team)
    with transaction.atomic():
        target = target_of(destination)
        destination.delete()
        words = f"{capfirst(called(destination))} and its delivery log were deleted."
        audit.record(
            actor, audit_action(destination, "deleted"), target, words, team=destination.team
        )
    return words


def send_test(actor: Any, destination: Destination) -> str:
    require_team_admin(actor, destination.team)
    if isinstance(destination, EmailRecipient) and not sends_email():
        raise NotificationRefused(NO_SMTP_WORDS)
    team = destination.team
    payload = {"event": NotificationEvent.TEST.value, "team": team.name, "at": now_iso()}
    with transaction.atomic():
        enqueue_delivery(destination, NotificationEvent.TEST, None, payload)
        words = f"A test notice is on its way to {called(destination)}; see its delivery log."
        audit.record(
            actor, audit_action(destination, "tested"), target_of(destination), words, team=team
        )
    return words


def called(destination: Destination) -> str:
    """How the words call it: webhook “on-call”, e-mail address oncall@example.com."""
    if isinstance(destination, Webhook):
        return f"webhook “{destination.name}”"
    return f"e-mail address {destination.address}"


def audit_action(destination: Destination, change: str) -> str:
    return AUDIT_ACTIONS[type(destination)][change]


def target_of(destination: Destination) -> str:
    kind = "webhook" if isinstance(destination, Webhook) else "e-mail"
    return f"team {destination.team.name}: {kind} {destination.name}"


# --- the trigger -------------------------------------------------------------------------------


def on_state_change(deployment: Deployment, before: str, event: Event) -> None:
    """Called by transitions.move_deployment inside its transaction, after the change."""
    kind = notice_of(deployment, event)
    if kind is None:
        return
    destinations = [d for d in destinations_of(deployment.team) if d.wants(kind)]
    if not destinations:
        return
    payload = payload_of(deployment, before, kind)
    for destination in destinations:
        enqueue_delivery(destination, kind, deployment, payload)


def destinations_of(team: Team) -> list[Destination]:
    """Its enabled webhooks, and its e-mail addresses while the server sends e-mail."""
    found: list[Destination] = list(team.webhooks.filter(enabled=True))
    if sends_email():
        found += team.email_recipients.filter(enabled=True)
    return found


def notice_of(deployment: Deployment, event: Event) -> NotificationEvent | None:
    if deployment.state == DeploymentState.FAILED:
        return NotificationEvent.FAILED
    if deployment.state == DeploymentState.DEGRADED:
        return NotificationEvent.DEGRADED
    if deployment.state == DeploymentState.DEPLOYED and was_in_trouble(deployment, event):
        return NotificationEvent.RECOVERED
    return None


def was_in_trouble(deployment: Deployment, event: Event) -> bool:
    """Whether it serves again after it failed or degraded: the last of its changes to failed,
    degraded or deployed before this one went to failed or degraded (a failed deployment is
    started over, so it becomes deployed again through other states)."""
    watched = (DeploymentState.FAILED, DeploymentState.DEGRADED, DeploymentState.DEPLOYED)
    last = (
        Event.objects.filter(
            deployment=deployment, copy=None, kind=EventKind.STATE_CHANGE, to_state__in=watched
        )
        .exclude(pk=event.pk)
        .values_list("to_state", flat=True)
        .first()
    )
    return last in (DeploymentState.FAILED, DeploymentState.DEGRADED)


def payload_of(deployment: Deployment, before: str, kind: str) -> dict[str, Any]:
    """What a receiver is told: the deployment in words, never a secret."""
    path = reverse("deployment_detail", args=[deployment.pk])
    return {
        "event": kind,
        "deployment": {
            "id": deployment.pk,
            "name": deployment.name,
            "team": deployment.team.name,
            "state": str(deployment.state),
            "previous_state": before,
            "message": deployment.last_message,
            "last_error_code": deployment.last_error_code,
        },
        "at": now_iso(),
        "url": f"{settings.CONSOLE_URL}{path}",
    }


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def enqueue_delivery(
    destination: Destination, kind: str, deployment: Deployment | None, payload: dict[str, Any]
) -> Delivery:
    delivery = Delivery.objects.create(
        webhook=destination if isinstance(destination, Webhook) else None,
        recipient=destination if isinstance(destination, EmailRecipient) else None,
        event=kind,
        deployment=deployment,
        deployment_name=deployment.name if deployment else "",
        payload=payload,
        next_attempt_at=timezone.now(),
    )
    send_on_commit(delivery.pk)
    return delivery


def send_on_commit(delivery_id: int) -> None:
    from deployments import tasks  # tasks import the modules that import this one

    transaction.on_commit(lambda: tasks.deliver_notification.delay(delivery_id))
