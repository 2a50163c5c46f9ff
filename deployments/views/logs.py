"""A deployment's logs: both streams from every machine, filtered and searched in the database,
paged by seq (the page never holds more than a page of lines), downloadable as text."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render

from deployments.access import get_deployment
from deployments.choices import LogStream
from deployments.forms import LogFilter
from deployments.log_search import LEVELS, PAGE, page_of
from deployments.models import LogLine


def utc_iso(moment: datetime) -> str:
    """ "2026-12-01T20:24:05.123Z": to the millisecond, in UTC, the zone written."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def as_int(raw: str | None) -> int | None:
    return int(raw) if raw and raw.isdigit() else None


def deployment_logs(request: HttpRequest, pk: int) -> HttpResponse:
    deployment = get_deployment(request.user, pk)
    lines = LogFilter(request.GET).apply(LogLine.objects.filter(deployment=deployment))
    shown = page_of(lines, as_int(request.GET.get("before")))
    machines = (
        LogLine.objects.filter(deployment=deployment)
        .exclude(machine_name="")
        .values_list("machine_name", flat=True)
        .distinct()
    )
    context = {
        "deployment": deployment,
        "lines": shown,
        "older": shown[0].seq if len(shown) == PAGE else None,
        "last_seq": deployment.log_seq,
        "machines": sorted(set(machines)),
        "levels": LEVELS,
        "streams": LogStream.choices,
        "params": request.GET,
        "query": request.GET.urlencode(),
        "live": not request.GET.get("before"),
    }
    if request.htmx:  # a filter changed, or older lines were asked for: just the lines
        return render(request, "deployments/_log_page.html", context)
    return render(request, "deployments/logs.html", context)


def download_logs(request: HttpRequest, pk: int) -> StreamingHttpResponse:
    """Every line the filters select, as plain text, streamed (it may be long)."""
    deployment = get_deployment(request.user, pk)
    lines = (
        LogFilter(request.GET).apply(LogLine.objects.filter(deployment=deployment)).order_by("seq")
    )

    def text() -> Any:
        # In UTC whatever the viewer's zone, said once at the top: a file outlives the page,
        # travels, and is read beside other systems' logs.
        yield f"# {deployment.name}: times in UTC (ISO 8601)\n"
        for line in lines.iterator(chunk_size=2000):
            when = utc_iso(line.at)
            yield f"{when} {line.level:<7} {line.stream:<7} {line.machine_name} {line.text}\n"

    response = StreamingHttpResponse(text(), content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{deployment.name}-logs.txt"'
    return response
