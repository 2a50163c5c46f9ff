"""The quotas shown on the keys page and the team page, with the form that sets one: each tag
computes its own context, so a page includes it with what it already has."""

from __future__ import annotations

from typing import Any

from django import template
from django.db.models import Q

from gateway import quota_setting
from gateway.models import Quota

register = template.Library()


@register.inclusion_tag("gateway/_quotas.html", takes_context=True)
def key_quotas(context: template.Context) -> dict[str, Any]:
    request = context["request"]
    found = Quota.objects.select_related("api_key").filter(api_key__user=request.user)
    return page_part(context, found, quota_setting.key_subjects(request.user), "quotas")


@register.inclusion_tag("gateway/_quotas.html", takes_context=True)
def team_quotas(context: template.Context, team: Any) -> dict[str, Any]:
    request = context["request"]
    found = Quota.objects.select_related("team", "deployment").filter(
        Q(team=team) | Q(deployment__team=team)
    )
    return page_part(context, found, quota_setting.team_subjects(request.user, team), "quotas")


def page_part(
    context: template.Context, found: Any, subjects: list[tuple[str, str]], anchor: str
) -> dict[str, Any]:
    request = context["request"]
    return {
        "quotas": quota_setting.shown(request.user, found.order_by("pk")),
        "subjects": subjects,
        "next": f"{request.path}#{anchor}",
        "csrf_token": context.get("csrf_token"),
    }
