"""Who may see and change what: the one access helper every view, API endpoint and consumer uses.

Roles are per team (viewer < operator < admin). Staff users are platform admins: they manage
clusters, the catalog's server files, users and teams, and may act in every team.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet

from console.models import ROLE_RANK, Membership, Role, Team

NEEDS_VIEW = Role.VIEWER
NEEDS_OPERATE = Role.OPERATOR


def is_platform_admin(user: Any) -> bool:
    return bool(user.is_authenticated and user.is_active and user.is_staff)


def team_roles(user: Any) -> dict[int, str]:
    """The user's role in each of their teams, by team id."""
    if not user.is_authenticated:
        return {}
    cached: dict[int, str] | None = getattr(user, "_berth_team_roles", None)
    if cached is None:
        cached = dict(Membership.objects.filter(user=user).values_list("team_id", "role"))
        user._berth_team_roles = cached
    return cached


def has_role(user: Any, team_id: int, needed: str) -> bool:
    if is_platform_admin(user):
        return True
    role = team_roles(user).get(team_id)
    return role is not None and ROLE_RANK[Role(role)] >= ROLE_RANK[Role(needed)]


def operates_team(user: Any, team_id: int) -> bool:
    """Whether the user may change the team's deployments: operator or admin there (platform
    admins: every team). Not can_operate_somewhere, which is about any team at all."""
    return has_role(user, team_id, NEEDS_OPERATE)


def operated_teams(user: Any) -> QuerySet[Team]:
    """The teams the user may host in and download for: operator or admin there (platform
    admins: every team), by name."""
    if is_platform_admin(user):
        return Team.objects.order_by("name")
    operated = [team_id for team_id in team_roles(user) if operates_team(user, team_id)]
    return Team.objects.filter(pk__in=operated).order_by("name")


def can_operate_somewhere(user: Any) -> bool:
    """Operators of any team may add models to the shared catalog, download and host them (in
    the teams they operate). Not operates_team, which is about one team."""
    if is_platform_admin(user):
        return True
    return any(
        ROLE_RANK[Role(role)] >= ROLE_RANK[Role.OPERATOR] for role in team_roles(user).values()
    )


def require_platform_admin(user: Any) -> None:
    if not is_platform_admin(user):
        raise PermissionDenied("Only platform admins may do this.")


def require_operator_somewhere(user: Any) -> None:
    if not can_operate_somewhere(user):
        raise PermissionDenied("Only operators may do this.")
