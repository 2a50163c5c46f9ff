"""The one door for changes to a team by its admins: members, roles and the Hugging Face token.

Each action checks that its actor is an admin of the team (or a platform admin), refuses what
would break the team with words that say why, changes the rows in a transaction and writes one
audit row. Views call these and never the ORM. The token never reaches a log, a message or an
audit row: only that it was set or cleared.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db import transaction

from console import audit
from console.access import has_role
from console.models import Membership, Role, Team

ROLE_CHOICE_WORDS = "Choose viewer, operator or admin as the role."


class TeamActionRefused(Exception):
    """A change that cannot be made as asked; its words say why and what to do instead."""


def manages_team(user: Any, team: Team) -> bool:
    """Admins of the team, and platform admins, manage its members and its token."""
    return has_role(user, team.pk, Role.ADMIN)


def require_team_admin(user: Any, team: Team) -> None:
    if not manages_team(user, team):
        raise PermissionDenied(f"Only admins of team {team.name} may change its members or token.")


def hf_token_problem(token: str) -> str:
    """What is wrong with a pasted token, in words that never repeat it; empty when fine."""
    if len(token) < 8 or any(c.isspace() or not c.isprintable() for c in token):
        return "That is not a Hugging Face token: one word of at least 8 characters, e.g. hf_…"
    return ""


def checked_role(role: str) -> Role:
    if role not in Role.values:
        raise TeamActionRefused(ROLE_CHOICE_WORDS)
    return Role(role)


def locked(team: Team) -> Team:
    """The team's row, locked: two admins changing members at once cannot both remove the
    other and leave the team with no admin."""
    return Team.objects.select_for_update().get(pk=team.pk)


def membership_of(team: Team, membership_id: int) -> Membership:
    membership = (
        Membership.objects.select_related("user").filter(team=team, pk=membership_id).first()
    )
    if membership is None:
        raise TeamActionRefused(f"That person is no longer a member of team {team.name}.")
    return membership


def is_last_admin(membership: Membership) -> bool:
    if membership.role != Role.ADMIN:
        return False
    return (
        not membership.team.memberships.filter(role=Role.ADMIN).exclude(pk=membership.pk).exists()
    )


def add_member(actor: Any, team: Team, username: str, role: str) -> str:
    require_team_admin(actor, team)
    role = checked_role(role)
    user = get_user_model().objects.filter(username=username.strip()).first()
    if user is None:
        raise TeamActionRefused(
            f"No user is called “{username.strip()}”. Give the username of an existing account "
            "(a platform admin creates accounts in the admin)."
        )
    with transaction.atomic():
        team = locked(team)
        existing = Membership.objects.filter(team=team, user=user).first()
        if existing is not None:
            raise TeamActionRefused(
                f"{user.get_username()} is already a member of team {team.name}, as "
                f"{existing.get_role_display().lower()}: change their role in the list instead."
            )
        Membership.objects.create(team=team, user=user, role=role)
        words = f"{user.get_username()} joined team {team.name} as {role.label.lower()}."
        audit.record(actor, audit.TEAM_MEMBER_ADDED, member_target(team, user), words, team=team)
    return words


def change_role(actor: Any, team: Team, membership_id: int, role: str) -> str:
    require_team_admin(actor, team)
    role = checked_role(role)
    with transaction.atomic():
        team = locked(team)
        membership = membership_of(team, membership_id)
        name = membership.user.get_username()
        if membership.role == role:
            return f"{name} already is {role.label.lower()} in team {team.name}."
        if is_last_admin(membership):
            raise TeamActionRefused(
                f"{name} is the last admin of team {team.name}: make another member admin "
                "first, so that someone can still manage the team."
            )
        before = membership.get_role_display().lower()
        membership.role = role
        membership.save(update_fields=["role"])
        words = f"{name} is now {role.label.lower()} in team {team.name} (was {before})."
        target = member_target(team, membership.user)
        audit.record(actor, audit.TEAM_ROLE_CHANGED, target, words, team=team)
    return words


def remove_member(actor: Any, team: Team, membership_id: int) -> str:
    require_team_admin(actor, team)
    with transaction.atomic():
        team = locked(team)
        membership = membership_of(team, membership_id)
        name = membership.user.get_username()
        if is_last_admin(membership):
            raise TeamActionRefused(
                f"{name} is the last admin of team {team.name} and cannot be removed: make "
                "another member admin first."
            )
        target = member_target(team, membership.user)
        membership.delete()
        words = f"{name} was removed from team {team.name}."
        audit.record(actor, audit.TEAM_MEMBER_REMOVED, target, words, team=team)
    return words


def set_hf_token(actor: Any, team: Team, token: str) -> str:
    require_team_admin(actor, team)
    problem = hf_token_problem(token)
    if problem:
        raise TeamActionRefused(problem)
    with transaction.atomic():
        team = locked(team)
        replaced = team.has_hf_token
        team.set_hf_token(token)
        team.save(update_fields=["hf_token_encrypted", "hf_token_changed_at"])
        words = (
            f"The Hugging Face token of team {team.name} was {'replaced' if replaced else 'set'}."
        )
        audit.record(actor, audit.TEAM_HF_TOKEN_SET, f"team {team.name}", words, team=team)
    return words


def clear_hf_token(actor: Any, team: Team) -> str:
    require_team_admin(actor, team)
    with transaction.atomic():
        team = locked(team)
        if not team.has_hf_token:
            return f"Team {team.name} has no Hugging Face token to clear."
        team.set_hf_token("")
        team.save(update_fields=["hf_token_encrypted", "hf_token_changed_at"])
        words = (
            f"The Hugging Face token of team {team.name} was cleared: gated models can no "
            "longer be downloaded for it."
        )
        audit.record(actor, audit.TEAM_HF_TOKEN_CLEARED, f"team {team.name}", words, team=team)
    return words


def member_target(team: Team, user: Any) -> str:
    return f"team {team.name}: {user.get_username()}"
