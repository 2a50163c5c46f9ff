"""A team's notifications page: its webhooks and their delivery logs. Every member sees them;
the team's admins add, disable, enable, delete and test them (deployments/notifications.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from console.access import is_platform_admin
from console.models import Team
from console.team_actions import manages_team
from console.views.teams import get_team
from deployments import notifications
from deployments.forms import WebhookForm
from deployments.models import Webhook

DELIVERY_LOG_LENGTH = 50


def get_webhook(team: Team, pk: int) -> Webhook:
    webhook = team.webhooks.filter(pk=pk).first()
    if webhook is None:
        raise Http404("No such webhook in this team.")
    return webhook


def webhooks_page(
    request: HttpRequest, team: Team, form: WebhookForm, **extra: Any
) -> HttpResponse:
    context = {
        "team": team,
        "webhooks": team.webhooks.all(),
        "manages": manages_team(request.user, team),
        "staff": is_platform_admin(request.user),
        "form": form,
        **extra,
    }
    return render(request, "deployments/webhooks.html", context)


@never_cache  # the page shows a new webhook's secret once: no cache may keep it
def webhooks(request: HttpRequest, name: str) -> HttpResponse:
    team = get_team(request.user, name)
    if request.method != "POST":
        return webhooks_page(request, team, WebhookForm())
    notifications.require_team_admin(request.user, team)
    form = WebhookForm(request.POST)
    if not form.is_valid():
        return webhooks_page(request, team, form)
    data = form.cleaned_data
    try:
        webhook, secret = notifications.add_webhook(
            request.user, team, data["name"], data["url"], data["events"], data["allow_private"]
        )
    except notifications.NotificationRefused as refused:
        form.add_error(None, str(refused))
        return webhooks_page(request, team, form)
    return webhooks_page(request, team, WebhookForm(), new_webhook=webhook, new_secret=secret)


@require_GET
def delivery_log(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    team = get_team(request.user, name)
    webhook = get_webhook(team, pk)
    context = {
        "team": team,
        "webhook": webhook,
        "deliveries": webhook.deliveries.all()[:DELIVERY_LOG_LENGTH],
        "manages": manages_team(request.user, team),
    }
    return render(request, "deployments/webhook_log.html", context)


def change(request: HttpRequest, name: str, pk: int, act: Callable[[Webhook], str]) -> Webhook:
    """Run a team admin's change to one webhook and say what it did."""
    team = get_team(request.user, name)
    webhook = get_webhook(team, pk)
    if not manages_team(request.user, team):
        raise PermissionDenied(f"Only admins of team {team.name} may change its webhooks.")
    messages.success(request, act(webhook))
    return webhook


@require_POST
def enable_webhook(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    change(request, name, pk, lambda w: notifications.set_enabled(request.user, w, True))
    return redirect("team_webhooks", name=name)


@require_POST
def disable_webhook(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    change(request, name, pk, lambda w: notifications.set_enabled(request.user, w, False))
    return redirect("team_webhooks", name=name)


@require_POST
def delete_webhook(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    change(request, name, pk, lambda w: notifications.delete_webhook(request.user, w))
    return redirect("team_webhooks", name=name)


@require_POST
def test_webhook(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    change(request, name, pk, lambda w: notifications.send_test(request.user, w))
    return redirect("team_webhook_log", name=name, pk=pk)
