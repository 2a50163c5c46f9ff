"""Telling a team that one of its deployments failed, degraded or recovered: its webhooks.

The doors for a team admin's changes to the team's webhooks (each checks the role, refuses bad
input with words, writes one audit row), and the trigger transitions.py calls when a
deployment's state changes. A delivery is a row written in the same transaction as the state
change and sent on commit (webhook_delivery.py), so that a state change and its notice are
never half-written. Payloads carry no secret: no engine keys, tokens or kubeconfigs.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

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
from deployments.models import Delivery, Deployment, Event, Webhook

NAME_MAX_LENGTH = 100
EVENT_WORDS = "Choose one or more of: failed, degraded, recovered."


class NotificationRefused(Exception):
    """A webhook change that cannot be made as asked; its words say why and what to do."""


def require_team_admin(actor: Any, team: Team) -> None:
    if not manages_team(actor, team):
        raise PermissionDenied(f"Only admins of team {team.name} may change its webhooks.")


# --- a team admin's changes ----------------------------------------------------------------


def checked_events(events: list[str]) -> list[str]:
    unknown = [event for event in events if event not in NOTIFICATION_SUBSCRIBABLE]
    if unknown:
        raise NotificationRefused(f"Unknown event {', '.join(map(repr, unknown))}. {EVENT_WORDS}")
    if not events:
        raise NotificationRefused(f"A webhook needs at least one event. {EVENT_WORDS}")
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


def set_enabled(actor: Any, webhook: Webhook, enabled: bool) -> str:
    require_team_admin(actor, webhook.team)
    if webhook.enabled == enabled:
        return f"Webhook “{webhook.name}” already is {'enabled' if enabled else 'disabled'}."
    with transaction.atomic():
        Webhook.objects.filter(pk=webhook.pk).update(enabled=enabled)
        words = f"Webhook “{webhook.name}” was {'enabled' if enabled else 'disabled'}."
        action = audit.WEBHOOK_ENABLED if enabled else audit.WEBHOOK_DISABLED
        audit.record(actor, action, target_of(webhook), words, team=webhook.team)
    return words


def delete_webhook(actor: Any, webhook: Webhook) -> str:
    require_team_admin(actor, webhook.team)
    with transaction.atomic():
        target = target_of(webhook)
        webhook.delete()
        words = f"Webhook “{webhook.name}” and its delivery log were deleted."
        audit.record(actor, audit.WEBHOOK_DELETED, target, words, team=webhook.team)
    return words


def send_test(actor: Any, webhook: Webhook) -> str:
    require_team_admin(actor, webhook.team)
    payload = {"event": NotificationEvent.TEST.value, "team": webhook.team.name, "at": now_iso()}
    with transaction.atomic():
        enqueue_delivery(webhook, NotificationEvent.TEST, None, payload)
        words = f"A test notice is on its way to webhook “{webhook.name}”; see its delivery log."
        audit.record(actor, audit.WEBHOOK_TESTED, target_of(webhook), words, team=webhook.team)
    return words


def target_of(webhook: Webhook) -> str:
    return f"team {webhook.team.name}: webhook {webhook.name}"


# --- the trigger -------------------------------------------------------------------------------


def on_state_change(deployment: Deployment, before: str, event: Event) -> None:
    """Called by transitions.move_deployment inside its transaction, after the change."""
    kind = notice_of(deployment, event)
    if kind is None:
        return
    webhooks = [w for w in deployment.team.webhooks.filter(enabled=True) if w.wants(kind)]
    if not webhooks:
        return
    payload = payload_of(deployment, before, kind)
    for webhook in webhooks:
        enqueue_delivery(webhook, kind, deployment, payload)


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
    webhook: Webhook, kind: str, deployment: Deployment | None, payload: dict[str, Any]
) -> Delivery:
    delivery = Delivery.objects.create(
        webhook=webhook,
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
