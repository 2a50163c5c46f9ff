"""Setting, listing and removing quotas: the one door the API (and the CLI through it) and the
pages go through. Operators of a team may set quotas on the team, its deployments and their own
API keys; platform admins on any. Team members see the quotas of their team and its
deployments, everyone those of their own keys. The gateway reads the change with its next table
(gateway/quotas.py)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Q, QuerySet
from django.http import Http404

from console.access import can_operate_somewhere, is_platform_admin, operates_team, team_roles
from console.models import ApiKey, Team
from deployments import revisions
from deployments.actions import ActionRefused
from deployments.models import Deployment
from gateway import quotas
from gateway.models import Quota
from gateway.quotas import QuotaRefused, check_one_subject, checked_limits, subject_words

Subject = dict[str, Any]  # api_key, team or deployment: the row


def subject_for(
    user: Any, api_key: int | None = None, team: str | None = None, deployment: str | None = None
) -> Subject:
    """The one row a quota is to name, if the user may set quotas on it."""
    check_one_subject(api_key, team, deployment)
    if api_key:
        key = ApiKey.objects.filter(pk=api_key).first()
        if key is None or not (is_platform_admin(user) or key.user_id == user.pk):
            raise Http404(f"api_key: no key {api_key} of yours; GET /api/v1/keys lists them.")
        if not can_operate_somewhere(user):
            raise PermissionDenied("Only operators of a team may set quotas on their keys.")
        return {"api_key": key}
    if team:
        found = Team.objects.filter(name=team).first()
        if found is None or not (is_platform_admin(user) or found.pk in team_roles(user)):
            raise Http404(f"team: no team {team} of yours.")
        if not operates_team(user, found.pk):
            raise PermissionDenied(f"Only operators of team {team} may set its quota.")
        return {"team": found}
    hosted = Deployment.objects.filter(name=deployment).first()
    if hosted is None or not (is_platform_admin(user) or hosted.team_id in team_roles(user)):
        raise Http404(f"deployment: no deployment {deployment} in your teams.")
    if not operates_team(user, hosted.team_id):
        raise PermissionDenied(f"Only operators of team {hosted.team} may set quotas on it.")
    return {"deployment": hosted}


def set_quota(user: Any, subject: Subject, limits: dict[str, Any], shadow: bool = False) -> Quota:
    """The subject's quota, made or replaced with these limits (those left out: none)."""
    checked = checked_limits(limits)
    if not isinstance(shadow, bool):
        raise QuotaRefused(f"shadow: must be true or false, not {shadow!r}", "shadow")
    with transaction.atomic():
        quota, _made = Quota.objects.update_or_create(
            **subject, defaults={**checked, "shadow": shadow}
        )
        if "deployment" in subject:  # a deployment's quota is part of what it is asked to be
            revisions.keep(subject["deployment"].pk, user, f"Quota: {quotas.limits_words(quota)}")
    return quota


def visible_quotas(user: Any) -> QuerySet[Quota]:
    quotas = Quota.objects.select_related("api_key", "team", "deployment")
    if is_platform_admin(user):
        return quotas
    teams = list(team_roles(user))
    return quotas.filter(Q(api_key__user=user) | Q(team__in=teams) | Q(deployment__team__in=teams))


def may_change(user: Any, quota: Quota) -> bool:
    if is_platform_admin(user):
        return True
    if quota.api_key_id:
        return quota.api_key.user_id == user.pk and can_operate_somewhere(user)
    team_id = quota.team_id or quota.deployment.team_id
    return operates_team(user, team_id)


def remove_quota(user: Any, quota_id: int) -> str:
    """Remove a quota the user may change; what it limited, in words."""
    quota = visible_quotas(user).filter(pk=quota_id).first()
    if quota is None:
        raise Http404(f"No quota {quota_id} you can see; GET /api/v1/quotas lists them.")
    if not may_change(user, quota):
        raise PermissionDenied(f"Your role does not let you remove {subject_words(quota)}'s quota.")
    words = subject_words(quota)
    with transaction.atomic():
        quota.delete()
        if quota.deployment_id:
            revisions.keep(quota.deployment_id, user, "Quota removed")
    return words


# ---------------------------------------------------------------- the pages' view of them


def shown(user: Any, found: QuerySet[Quota]) -> list[dict[str, Any]]:
    """Quotas as the keys and team pages show them: words, what is used, who may remove."""
    rows = []
    for quota in found:
        use = quotas.standing(quota)
        used = ", ".join(
            f"{figures['used']:,} {quotas.LIMIT_WORDS[name]}"
            + (f" ({figures['shadow_refusals']:,} would have been refused)" if quota.shadow else "")
            for name, figures in use.items()
        )
        rows.append(
            {
                "id": quota.pk,
                "subject": subject_words(quota),
                "limits": quotas.limits_words(quota),
                "used": used or "not known just now",
                "may_change": may_change(user, quota),
            }
        )
    return rows


def key_subjects(user: Any) -> list[tuple[str, str]]:
    """The keys a user may set quotas on, as the keys page's form offers them."""
    if not can_operate_somewhere(user):
        return []
    keys = ApiKey.objects.filter(user=user, revoked_at__isnull=True).order_by("name")
    return [(f"api_key:{key.pk}", f'API key "{key.name}"') for key in keys]


def team_subjects(user: Any, team: Team) -> list[tuple[str, str]]:
    """The team and its deployments, as the team page's form offers them to its operators."""
    if not operates_team(user, team.pk):
        return []
    hosted = team.deployments.order_by("name").values_list("name", flat=True)
    return [(f"team:{team.name}", f"team {team.name}")] + [
        (f"deployment:{name}", f"deployment {name}") for name in hosted
    ]


def subject_from_form(user: Any, value: str) -> Subject:
    """A form's "kind:name" choice (api_key:12, team:red, deployment:red-qwen)."""
    kind, _, name = value.partition(":")
    if kind == "api_key" and name.isdigit():
        return subject_for(user, api_key=int(name))
    if kind in ("team", "deployment") and name:
        return subject_for(user, **{kind: name})
    raise QuotaRefused("choose the key, team or deployment the quota is on", "subject")


# ------------------------------------------- a deployment's quota, as its revisions keep it


def quota_spec(deployment: Deployment) -> dict[str, Any] | None:
    quota = Quota.objects.filter(deployment=deployment).first()
    if quota is None:
        return None
    return {**{name: getattr(quota, name) for name in Quota.LIMITS}, "shadow": quota.shadow}


def checked_quota_spec(value: Any) -> dict[str, Any] | None:
    """A deployment's quota as a file gives it: null (none), or its limits and shadow."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ActionRefused("give the limits as an object, or null for no quota", "quota")
    unknown = sorted(set(value) - {*quotas.LIMIT_FIELDS, "shadow"})
    if unknown:
        raise ActionRefused(
            f"{unknown[0]} is not a limit: use {', '.join(quotas.LIMIT_FIELDS)}", "quota"
        )
    try:
        limits = checked_limits(value)
    except QuotaRefused as refused:
        raise ActionRefused(str(refused), "quota") from None
    return {**limits, "shadow": value.get("shadow", False) is True}


def write_quota_spec(actor: Any, deployment: Deployment, value: dict[str, Any] | None) -> None:
    """A rollback's or an apply's quota (checked where it was kept); its revision is theirs."""
    if value is None:
        Quota.objects.filter(deployment=deployment).delete()
        return
    Quota.objects.update_or_create(deployment=deployment, defaults=value)


QUOTA_PART = revisions.Part("quota", quota_spec, checked_quota_spec, write_quota_spec)
