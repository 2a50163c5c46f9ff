"""The autoscaler (a beat task, every BERTH_AUTOSCALE_EVERY_S): each autoscaled deployment that
serves is given the copies its live load asks for. What the load is and what it asks for is
deployments/autoscaling.py's; this module only gathers the figures and carries out the decision
(actions.autoscale_to, which writes the Event with its numbers)."""

from __future__ import annotations

import time
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from deployments import actions, autoscaling, engine_figures, load
from deployments.choices import DEPLOYMENT_SERVING, CopyState
from deployments.models import Copy, Deployment

# Engine figures older than this many scrapes say nothing about the load now.
FRESH_SCRAPES = 3


def run() -> int:
    """One pass over every autoscaled deployment that serves; how many changed their copies."""
    deployments = list(
        Deployment.objects.filter(autoscaling__isnull=False, state__in=DEPLOYMENT_SERVING).only(
            "pk", "copies_wanted", "autoscaling"
        )
    )
    if not deployments:
        return 0
    in_flight = in_flight_by_deployment([d.pk for d in deployments])
    changed = 0
    for deployment in deployments:
        changed += step(deployment, in_flight.get(deployment.pk, 0))
    return changed


def step(deployment: Deployment, in_flight: int) -> int:
    policy = autoscaling.stored(deployment.autoscaling)
    assert policy is not None  # filtered on
    waiting, ttft_ms = engine_load(deployment)
    measured = autoscaling.Load(in_flight=in_flight, waiting=waiting, ttft_ms=ttft_ms)
    pending = load.read_pending(deployment.pk)
    now = time.time()
    idle_s = load.seconds_since_request(deployment.pk, now) if policy.may_idle else 0.0
    decision = autoscaling.decide(policy, measured, deployment.copies_wanted, pending, now, idle_s)
    load.write_pending(deployment.pk, decision.pending)
    if decision.copies == deployment.copies_wanted:
        return 0
    actions.autoscale_to(deployment.pk, decision.copies, decision.why)
    return 1


def in_flight_by_deployment(deployment_ids: list[int]) -> dict[int, int]:
    """Requests in flight at every gateway process, per deployment (draining copies count:
    their requests are still being answered)."""
    by_copy = load.in_flight_by_copy()
    copies = Copy.objects.filter(deployment_id__in=deployment_ids).exclude(state=CopyState.STOPPED)
    totals: dict[int, int] = {}
    for copy_id, deployment_id in copies.values_list("pk", "deployment_id"):
        totals[deployment_id] = totals.get(deployment_id, 0) + by_copy.get(copy_id, 0)
    return totals


def engine_load(deployment: Deployment) -> tuple[float, float | None]:
    """Requests waiting inside the engines, and their mean time to first token (ms) between
    the last two scrapes; nothing when the figures are not fresh."""
    fresh_since = timezone.now() - timedelta(seconds=FRESH_SCRAPES * settings.METRICS_EVERY_S)
    latest = engine_figures.points(deployment.pk, limit=1)
    if not latest or latest[-1].at < fresh_since:
        return 0.0, None
    return latest[-1].waiting, latest[-1].ttft_ms
