"""The Events page: the audit trail of the user's teams, filtered and paged, and its CSV."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from datetime import UTC

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from console import events
from console.lists import FilterRefused

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
