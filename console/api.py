"""Who the API key (or session) acts as: its user, their roles and where the gateway answers.
What a client checks its key with; never a secret."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Field, Router, Schema

from console.access import is_platform_admin
from console.api_schema import ERRORS
from console.models import Membership
from gateway import conf

router = Router(tags=["me"])


class TeamRoleOut(Schema):
    team: str
    role: str = Field(description="viewer, operator or admin")


class MeOut(Schema):
    username: str
    platform_admin: bool = Field(description="may act in every team and manage clusters")
    teams: list[TeamRoleOut] = Field(description="the user's own teams, by name")
    gateway_url: str = Field(
        description="the OpenAI-compatible gateway's base URL, as the deployment pages show it"
    )


def team_roles_out(user: Any) -> list[dict[str, str]]:
    memberships = Membership.objects.filter(user=user).select_related("team")
    return [{"team": m.team.name, "role": m.role} for m in memberships.order_by("team__name")]


@router.get("/me", response={200: MeOut, **ERRORS})
def me(request: HttpRequest) -> dict[str, Any]:
    """Who the request acts as, with which roles, and where the gateway takes its chat."""
    return {
        "username": request.user.get_username(),
        "platform_admin": is_platform_admin(request.user),
        "teams": team_roles_out(request.user),
        "gateway_url": conf.gateway_url(request.scheme or "http", request.get_host()),
    }
