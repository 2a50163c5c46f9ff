"""What each live partial of the deployment pages shows, built once: the page renders it inside
the whole page and the live socket (console/live_render.py) renders it alone, out of band."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import redis
from django.conf import settings
from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from console.access import operates_team
from deployments import autoscaling, load, machine_files, waking
from deployments import engine_figures as figures_of_engines
from deployments.choices import CopyState, RoutingPolicy
from deployments.models import Deployment, Reservation


def copies_with_placement(deployment: Deployment) -> list[Any]:
    copies = list(deployment.copies.select_related("machine").order_by("ordinal"))
    held = Reservation.objects.filter(copy__deployment=deployment).select_related(
        "accelerator__parent"
    )
    by_copy: dict[int, list[str]] = {}
    for row in held:
        gpu = row.accelerator
        if gpu is not None:
            where = (
                f"{gpu.parent.index} (MIG {gpu.mig_profile})" if gpu.parent_id else str(gpu.index)
            )
            by_copy.setdefault(row.copy_id, []).append(where)
    for copy in copies:
        copy.gpus = ", ".join(by_copy.get(copy.pk, [])) or "—"
    return copies


def health_and_copies(user: Any, deployment: Deployment) -> dict[str, Any]:
    """The head of a deployment's page (state, actions) and its table of copies."""
    return {
        "deployment": deployment,
        "copies": copies_with_placement(deployment),
        "copies_ready": deployment.copies.filter(state=CopyState.READY).count(),
        "operates_team": operates_team(user, deployment.team_id),
        "default_reply_wait": settings.GATEWAY_REPLY_WAIT_S,
        "routing_choices": RoutingPolicy.choices,
    }


def files_on_machines(user: Any, deployment: Deployment) -> dict[str, Any]:
    """The Machines and model files panel."""
    return {
        "deployment": deployment,
        "files": machine_files.summary(deployment),
        "operates_team": operates_team(user, deployment.team_id),
    }


def autoscaling_panel(deployment: Deployment) -> dict[str, Any]:
    """The Autoscaling panel: the policy, and the change the autoscaler is waiting to make."""
    policy = autoscaling.stored(deployment.autoscaling)
    pending = None
    if policy is not None:
        try:
            pending = load.read_pending(deployment.pk)
        except redis.RedisError:  # the panel says less, the page still opens
            pending = None
    an_hour_ago = timezone.now() - timedelta(hours=1)
    return {
        "policy": policy,
        "pending": pending,
        "chart": figures_of_engines.copies_and_load(deployment.pk, an_hour_ago) if policy else {},
        "pending_for_s": int(time.time() - pending.since) if pending else 0,
        "default_up_window": settings.AUTOSCALE_UP_WINDOW_S,
        "default_down_window": settings.AUTOSCALE_DOWN_WINDOW_S,
        "wakes": waking.recent_wakes(deployment.pk) if policy and policy.may_idle else [],
    }


def engine_figures(deployment_id: int) -> dict[str, Any]:
    return {"figures": figures_of_engines.summary(deployment_id), "every": settings.METRICS_EVERY_S}


def with_ready_counts(deployments: QuerySet[Deployment]) -> QuerySet[Deployment]:
    return deployments.annotate(
        copies_ready=Count("copies", filter=Q(copies__state=CopyState.READY))
    )


def for_user(user: Any, rows: list[Deployment]) -> list[Deployment]:
    """Rows of the deployments list, each knowing whether the user operates it."""
    for row in rows:
        row.operates_team = operates_team(user, row.team_id)
    return rows


def list_rows(user: Any, deployments: QuerySet[Deployment]) -> list[Deployment]:
    """Rows of the deployments list, each with its ready copies and whether the user operates it."""
    return for_user(user, list(with_ready_counts(deployments).order_by("name")))
