"""The REST API's own endpoints (session or API key). Later issues add deployments and models."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from console.access import is_platform_admin
from console.models import Membership


@require_GET
def me(request: HttpRequest) -> JsonResponse:
    """Who the request acts as, and with which roles: what a client checks its key with."""
    memberships = Membership.objects.filter(user=request.user).select_related("team")
    return JsonResponse(
        {
            "username": request.user.get_username(),
            "platform_admin": is_platform_admin(request.user),
            "teams": [{"team": m.team.name, "role": m.role} for m in memberships],
        }
    )
