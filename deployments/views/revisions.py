"""A deployment's Revisions tab: every change numbered, any two compared, and Roll back to N
(deployments/revisions.py keeps them; actions.roll_back makes the new one)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_POST

from console.access import operates_team
from deployments import actions, revisions
from deployments.access import get_deployment
from deployments.models import Deployment
from deployments.views.deployments import operate


def comparison(deployment: Any, request: HttpRequest) -> dict[str, Any]:
    """?compare=N&to=M: what changes from N to M; a number it has not is said in words."""
    first, second = request.GET.get("compare"), request.GET.get("to")
    if not first or not second:
        return {}
    try:
        a = actions.revision_numbered(deployment, first)
        b = actions.revision_numbered(deployment, second)
    except actions.ActionRefused as refused:
        return {"compare_error": refused.message}
    return {
        "compared": (a.number, b.number),
        "compared_changes": revisions.differences(a.spec, b.spec),
    }


def deployment_revisions(request: HttpRequest, pk: int) -> HttpResponse:
    deployment = get_deployment(request.user, pk)
    context = {
        "deployment": deployment,
        "rows": revisions.listed(deployment),
        "operates_team": operates_team(request.user, deployment.team_id),
        **comparison(deployment, request),
    }
    return render(request, "deployments/revisions.html", context)


@require_POST
def roll_back(request: HttpRequest, pk: int) -> HttpResponse:
    number, comment = request.POST.get("revision", ""), request.POST.get("comment", "")

    def act(deployment: Deployment) -> actions.Done:
        return actions.roll_back(request.user, deployment, number, comment)

    return operate(request, pk, act, back_to="deployment_revisions")


@require_POST
def auto_rollback(request: HttpRequest, pk: int) -> HttpResponse:
    enabled = request.POST.get("enabled", "")

    def act(deployment: Deployment) -> actions.Done:
        return actions.set_auto_rollback(request.user, deployment, enabled)

    return operate(request, pk, act, back_to="deployment_revisions")
