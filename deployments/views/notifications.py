"""A team's notifications page: its webhooks, its e-mail addresses and their delivery logs.
Every member sees them; the team's admins add, disable, enable, delete and test them
(deployments/notifications.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from console.access import is_platform_admin
from console.models import Team
from console.team_actions import manages_team
from console.views.teams import get_team
from deployments import notifications
from deployments.forms import EmailRecipientForm, WebhookForm
from deployments.models import EmailRecipient, Webhook

DELIVERY_LOG_LENGTH = 50


def get_webhook(team: Team, pk: int) -> Webhook:
    webhook = team.webhooks.filter(pk=pk).first()
    if webhook is None:
        raise Http404("No such webhook in this team.")
    return webhook


def get_recipient(team: Team, pk: int) -> EmailRecipient:
    recipient = team.email_recipients.filter(pk=pk).first()
    if recipient is None:
        raise Http404("No such e-mail address in this team.")
    return recipient


def webhooks_page(
    request: HttpRequest,
    team: Team,
    form: WebhookForm | None = None,
    email_form: EmailRecipientForm | None = None,
    **extra: Any,
) -> HttpResponse:
    context = {
        "team": team,
        "webhooks": team.webhooks.all(),
        "recipients": team.email_recipients.all(),
        "sends_email": notifications.sends_email(),
        "manages": manages_team(request.user, team),
        "staff": is_platform_admin(request.user),
        "form": form or WebhookForm(),
        "email_form": email_form or EmailRecipientForm(),
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
    return webhooks_page(request, team, new_webhook=webhook, new_secret=secret)


@require_POST
def add_email(request: HttpRequest, name: str) -> HttpResponse:
    team = get_team(request.user, name)
    notifications.require_team_admin(request.user, team)
    form = EmailRecipientForm(request.POST)
    if not form.is_valid():
        return webhooks_page(request, team, email_form=form)
    data = form.cleaned_data
    try:
        recipient = notifications.add_email(request.user, team, data["address"], data["events"])
    except notifications.NotificationRefused as refused:
        form.add_error(None, str(refused))
        return webhooks_page(request, team, email_form=form)
    messages.success(request, f"Notices now go to {recipient.address} too.")
    return redirect("team_webhooks", name=name)


@require_GET
def delivery_log(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    team = get_team(request.user, name)
    return log_page(request, team, get_webhook(team, pk))


@require_GET
def email_log(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    team = get_team(request.user, name)
    return log_page(request, team, get_recipient(team, pk))


def log_page(
    request: HttpRequest, team: Team, destination: notifications.Destination
) -> HttpResponse:
    context = {
        "team": team,
        "destination": destination,
        "is_webhook": isinstance(destination, Webhook),
        "test_url": test_url_of(team, destination),
        "deliveries": destination.deliveries.all()[:DELIVERY_LOG_LENGTH],
        "manages": manages_team(request.user, team),
    }
    return render(request, "deployments/webhook_log.html", context)


def test_url_of(team: Team, destination: notifications.Destination) -> str:
    kind = "webhook" if isinstance(destination, Webhook) else "email"
    return reverse(f"team_{kind}_test", args=[team.name, destination.pk])


Getter = Callable[[Team, int], notifications.Destination]
Act = Callable[[notifications.Destination], str]


def change(request: HttpRequest, name: str, pk: int, get: Getter, act: Act) -> None:
    """Run a team admin's change to one destination and say what it did, or why not."""
    team = get_team(request.user, name)
    destination = get(team, pk)
    if not manages_team(request.user, team):
        raise PermissionDenied(f"Only admins of team {team.name} may change its notifications.")
    try:
        messages.success(request, act(destination))
    except notifications.NotificationRefused as refused:
        messages.error(request, str(refused))


def enabling(request: HttpRequest, enabled: bool) -> Act:
    return lambda destination: notifications.set_enabled(request.user, destination, enabled)


def deleting(request: HttpRequest) -> Act:
    return lambda destination: notifications.delete_destination(request.user, destination)


def testing(request: HttpRequest) -> Act:
    return lambda destination: notifications.send_test(request.user, destination)


@require_POST
def enable_webhook(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    change(request, name, pk, get_webhook, enabling(request, True))
    return redirect("team_webhooks", name=name)


@require_POST
def disable_webhook(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    change(request, name, pk, get_webhook, enabling(request, False))
    return redirect("team_webhooks", name=name)


@require_POST
def delete_webhook(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    change(request, name, pk, get_webhook, deleting(request))
    return redirect("team_webhooks", name=name)


@require_POST
def test_webhook(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    change(request, name, pk, get_webhook, testing(request))
    return redirect("team_webhook_log", name=name, pk=pk)


@require_POST
def enable_email(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    change(request, name, pk, get_recipient, enabling(request, True))
    return redirect("team_webhooks", name=name)


@require_POST
def disable_email(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    change(request, name, pk, get_recipient, enabling(request, False))
    return redirect("team_webhooks", name=name)


@require_POST
def delete_email(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    change(request, name, pk, get_recipient, deleting(request))
    return redirect("team_webhooks", name=name)


@require_POST
def test_email(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    change(request, name, pk, get_recipient, testing(request))
    return redirect("team_email_log", name=name, pk=pk)
