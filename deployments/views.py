"""Deployment pages (the list and a deployment's page); the lifecycle issue adds the actions."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console.access import NEEDS_OPERATE, get_deployment, has_role, visible_deployments


def deployment_list(request: HttpRequest) -> HttpResponse:
    deployments = visible_deployments(request.user).order_by("name")
    return render(request, "deployments/list.html", {"deployments": deployments})


def deployment_detail(request: HttpRequest, pk: int) -> HttpResponse:
    deployment = get_deployment(request.user, pk)
    context = {
        "deployment": deployment,
        "copies": deployment.copies.select_related("machine").order_by("ordinal"),
        "events": deployment.events.select_related("actor")[:50],
        "can_operate": has_role(request.user, deployment.team_id, NEEDS_OPERATE),
    }
    return render(request, "deployments/detail.html", context)
