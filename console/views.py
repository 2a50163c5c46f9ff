"""Pages of the console itself: home, health, the user's account, API keys and teams, and
the Events list."""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC
from typing import Any

from django.contrib import messages
from django.contrib.auth import update_session_auth_hash
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.forms import PasswordChangeForm
from django.db import connection
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_GET, require_POST

from console import accounts, events, keys, team_actions, time_zones
from console.access import NEEDS_VIEW, has_role
from console.forms import AddMemberForm, ApiKeyForm, HfTokenForm, RoleForm, TimeZoneForm
from console.lists import FilterRefused
from console.models import ApiKey, Membership, Role, Team


def home(request: HttpRequest) -> HttpResponse:
    return redirect("deployment_list")


@login_not_required
@require_GET
def health(request: HttpRequest) -> JsonResponse:
    """For load balancers and process managers: is the database reachable?"""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception:
        return JsonResponse({"status": "unavailable", "database": "unreachable"}, status=503)
    return JsonResponse({"status": "ok"})


@never_cache  # the page shows a new key's secret once: no cache may keep it
def api_keys(request: HttpRequest) -> HttpResponse:
    form = ApiKeyForm(request.POST or None)
    new_secret = None
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        _, new_secret = keys.issue(
            request.user, data["name"], data["scope"], data["expires_in_days"]
        )
        form = ApiKeyForm()
    context = {
        "form": form,
        "keys": ApiKey.objects.filter(user=request.user),
        "new_secret": new_secret,
    }
    return render(request, "console/api_keys.html", context)


@require_POST
def revoke_api_key(request: HttpRequest, pk: int) -> HttpResponse:
    key = get_object_or_404(
        ApiKey.objects.filter(revoked_at__isnull=True), pk=pk, user=request.user
    )
    keys.revoke(request.user, key)
    messages.success(request, f"API key “{key.name}” was revoked; requests using it now fail.")
    return redirect("api_keys")


# The headings of the Events table (templates/partials/list_table.html) and the CSV's columns.
EVENT_COLUMNS = ("Time", "Team", "Actor", "Kind", "Object", "Message")
CSV_COLUMNS = ("at_utc", "team", "actor", "kind", "object", "message")


@require_GET
def event_list(request: HttpRequest) -> HttpResponse:
    shown = events.page_for(request.user, request.GET)
    export_query = request.GET.copy()
    export_query.pop("cursor", None)
    next_query = export_query.copy()
    next_query["cursor"] = shown.page.next_cursor or ""
    context = {
        "columns": EVENT_COLUMNS,
        "shown": shown,
        "filters": shown.filters,
        "kinds": events.KINDS,
        "params": request.GET,
        "export_query": export_query,
        "next_query": next_query,
        "page_size": events.PAGE_SIZE,
    }
    return render(request, "console/events.html", context)


@require_GET
def export_events(request: HttpRequest) -> HttpResponse:
    """The filtered Events as CSV, every row (not a page), times in UTC."""
    try:
        rows = events.every_row(request.user, request.GET)
    except FilterRefused as refused:
        text = f"{refused.field}: {refused.message}\n"
        return HttpResponse(text, status=400, content_type="text/plain; charset=utf-8")
    response = StreamingHttpResponse(csv_lines(rows), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="berth-events.csv"'
    return response


class Echo:
    """A file csv.writer writes to that hands each line back (the response streams them)."""

    def write(self, line: str) -> str:
        return line


def csv_lines(rows: Iterable[events.Row]) -> Iterator[str]:
    writer = csv.writer(Echo())
    yield writer.writerow(CSV_COLUMNS)
    for row in rows:
        at = row.at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        cells = (at, row.team, row.actor, row.kind, row.object, row.message)
        yield writer.writerow([spreadsheet_safe(cell) for cell in cells])


def spreadsheet_safe(cell: str) -> str:
    # Names and messages are typed by users; a cell starting like a formula would run as one
    # when the file is opened in a spreadsheet.
    return f"'{cell}" if cell[:1] in ("=", "+", "-", "@", "\t", "\r") else cell


# --- the user's account: time zone, password, teams ------------------------------------------


def account_page(request: HttpRequest, **forms: Any) -> HttpResponse:
    """The account page, with the forms given (bound, with their errors) or fresh ones."""
    chosen = time_zones.chosen_zone(request.user)
    context = {
        "time_zone_form": forms.get("time_zone_form")
        or TimeZoneForm(initial={"time_zone": chosen}),
        "password_form": forms.get("password_form") or PasswordChangeForm(request.user),
        "chosen_zone": chosen,
        "browser_zone": browser_zone(request),
        "zones": time_zones.known_zones(),
        "memberships": Membership.objects.filter(user=request.user).select_related("team"),
    }
    return render(request, "console/account.html", context)


def browser_zone(request: HttpRequest) -> str:
    """The zone the browser said, when it is a real one; empty without JavaScript."""
    said = request.COOKIES.get(time_zones.BROWSER_ZONE_COOKIE, "")
    return said if time_zones.is_known_zone(said) else ""


@require_GET
def account(request: HttpRequest) -> HttpResponse:
    return account_page(request)


@require_POST
def set_time_zone(request: HttpRequest) -> HttpResponse:
    form = TimeZoneForm(request.POST)
    if not form.is_valid():
        return account_page(request, time_zone_form=form)
    messages.success(request, accounts.set_time_zone(request.user, form.cleaned_data["time_zone"]))
    return redirect("account")


@require_POST
@sensitive_post_parameters("old_password", "new_password1", "new_password2")
def change_password(request: HttpRequest) -> HttpResponse:
    form = PasswordChangeForm(request.user, request.POST)
    if not form.is_valid():
        return account_page(request, password_form=form)
    done = accounts.change_password(request.user, form.cleaned_data["new_password1"])
    update_session_auth_hash(request, request.user)  # this browser stays logged in
    messages.success(request, done)
    return redirect("account")


# --- a team: its members and its Hugging Face token, managed by its admins -------------------


def get_team(user: Any, name: str) -> Team:
    """The team if the user is one of its members (or a platform admin); else "not found"."""
    team = Team.objects.filter(name=name).first()
    if team is None or not has_role(user, team.pk, NEEDS_VIEW):
        raise Http404("No such team among yours.")
    return team


def team_page(request: HttpRequest, team: Team, **forms: Any) -> HttpResponse:
    context = {
        "team": team,
        "members": team.memberships.select_related("user").order_by("user__username"),
        "manages": team_actions.manages_team(request.user, team),
        "roles": Role.choices,
        "add_form": forms.get("add_form") or AddMemberForm(),
        "token_form": forms.get("token_form") or HfTokenForm(),
    }
    return render(request, "console/team.html", context)


@require_GET
def team_detail(request: HttpRequest, name: str) -> HttpResponse:
    return team_page(request, get_team(request.user, name))


def refused_or_done(request: HttpRequest, team: Team, change: Callable[[], str]) -> HttpResponse:
    """Run a team action; show its words, or the words of its refusal; back to the team."""
    try:
        messages.success(request, change())
    except team_actions.TeamActionRefused as refused:
        messages.error(request, str(refused))
    return redirect("team_detail", name=team.name)


@require_POST
def add_team_member(request: HttpRequest, name: str) -> HttpResponse:
    team = get_team(request.user, name)
    team_actions.require_team_admin(request.user, team)
    form = AddMemberForm(request.POST)
    if not form.is_valid():
        return team_page(request, team, add_form=form)
    data = form.cleaned_data
    return refused_or_done(
        request,
        team,
        lambda: team_actions.add_member(request.user, team, data["username"], data["role"]),
    )


@require_POST
def change_team_role(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    team = get_team(request.user, name)
    team_actions.require_team_admin(request.user, team)
    form = RoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, team_actions.ROLE_CHOICE_WORDS)
        return redirect("team_detail", name=team.name)
    role = form.cleaned_data["role"]
    return refused_or_done(
        request, team, lambda: team_actions.change_role(request.user, team, pk, role)
    )


@require_POST
def remove_team_member(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    team = get_team(request.user, name)
    return refused_or_done(
        request, team, lambda: team_actions.remove_member(request.user, team, pk)
    )


@require_POST
@sensitive_post_parameters("hf_token")
def set_team_hf_token(request: HttpRequest, name: str) -> HttpResponse:
    team = get_team(request.user, name)
    team_actions.require_team_admin(request.user, team)
    form = HfTokenForm(request.POST)
    if not form.is_valid():
        return team_page(request, team, token_form=form)
    token = form.cleaned_data["hf_token"]
    return refused_or_done(
        request, team, lambda: team_actions.set_hf_token(request.user, team, token)
    )


@require_POST
def clear_team_hf_token(request: HttpRequest, name: str) -> HttpResponse:
    team = get_team(request.user, name)
    return refused_or_done(request, team, lambda: team_actions.clear_hf_token(request.user, team))
