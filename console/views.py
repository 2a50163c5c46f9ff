"""Pages of the console itself: home, health, the user's API keys and the Events list."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from datetime import UTC

from django.contrib import messages
from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from console import events, keys
from console.forms import ApiKeyForm
from console.lists import FilterRefused
from console.models import ApiKey


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
EVENT_COLUMNS = ("Time (UTC)", "Team", "Actor", "Kind", "Object", "Message")
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
