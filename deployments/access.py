"""Which deployments a user may see and act on: console's roles applied to deployments' rows."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404

from console.access import NEEDS_VIEW, has_role, is_platform_admin, team_roles
from deployments.models import Deployment


def visible_deployments(user: Any) -> QuerySet[Any]:
    deployments = Deployment.objects.select_related("team", "cluster", "model", "variant")
    if is_platform_admin(user):
        return deployments
    return deployments.filter(team_id__in=list(team_roles(user)))


def get_deployment(user: Any, pk: int, needed: str = NEEDS_VIEW) -> Any:
    """The deployment if the user may act on it; "not found" when it is not in their teams,
    403 when they may see it but their role there is too low."""
    deployment = visible_deployments(user).filter(pk=pk).first()
    if deployment is None:
        raise Http404("No such deployment in your teams.")
    if not has_role(user, deployment.team_id, needed):
        raise PermissionDenied("Your role in this deployment's team only lets you read it.")
    return deployment
