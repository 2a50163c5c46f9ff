"""Waking an IDLE deployment: the gateway asks on a request for it (any gateway process, as
often as requests come; the first asks, the rest find it waking), and the cold start is
recorded when a copy serves again (lifecycle.record_cold_start)."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from deployments import lifecycle, load
from deployments.choices import DeploymentState, EventKind
from deployments.models import Deployment, Event

# What a client is told to wait when no wake of the deployment was measured yet.
FIRST_WAKE_GUESS_S = 60


def wake(deployment_id: int, requested_by: str) -> None:
    """One copy for an idle deployment (the autoscaler takes it from there)."""
    load.note_request(deployment_id)  # the waking request counts: not idle again at once
    with transaction.atomic():
        locked = Deployment.objects.select_for_update().filter(pk=deployment_id).first()
        if locked is None or locked.state != DeploymentState.IDLE or locked.copies_wanted:
            return
        Deployment.objects.filter(pk=locked.pk).update(copies_wanted=1, waking_since=timezone.now())
        Event.objects.create(
            deployment=locked,
            deployment_name=locked.name,
            kind=EventKind.AUTOSCALE,
            message=f"0 → 1 copy: woken by a request from {requested_by}",
        )
        lifecycle.enqueue("converge_deployment", locked.pk)


def expected_wait_s(waking_since: float | None, last_cold_start_s: float | None, now: float) -> int:
    """Seconds until a waking deployment likely serves: its last cold start, less the time it
    has been waking (at least 1)."""
    took = FIRST_WAKE_GUESS_S if last_cold_start_s is None else last_cold_start_s
    waited = 0.0 if waking_since is None else now - waking_since
    return max(1, round(took - waited))


def recent_wakes(deployment_id: int, limit: int = 5) -> list[Event]:
    """The latest wakes' Events, each saying its cold start (lifecycle.record_cold_start)."""
    return list(
        Event.objects.filter(
            deployment_id=deployment_id,
            kind=EventKind.AUTOSCALE,
            message__startswith=lifecycle.COLD_START_WORDS,
        ).order_by("-at")[:limit]
    )
