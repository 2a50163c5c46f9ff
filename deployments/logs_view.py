"""A deployment's logs: both streams from every machine, filtered and searched in the database,
paged by seq (the page never holds more than a page of lines), downloadable as text."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render

from deployments.access import get_deployment
from deployments.choices import LogStream
from deployments.models import LogLine

PAGE = 200
LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]


def filtered(deployment_id: int, params: Any) -> QuerySet[LogLine]:
    """The lines the filters select: level (and above), stream, machine, and a search."""
    lines = LogLine.objects.filter(deployment_id=deployment_id)
    level = params.get("level", "")
    if level in LEVELS:
        lines = lines.filter(level__in=LEVELS[LEVELS.index(level) :])
    if params.get("stream") in LogStream.values:
        lines = lines.filter(stream=params["stream"])
    if params.get("machine"):
        lines = lines.filter(machine_name=params["machine"])
    if params.get("q"):
        lines = lines.filter(text__icontains=params["q"])
    if params.get("pattern"):
        lines = lines.filter(pattern=params["pattern"])
    return lines


def lines_after(deployment_id: int, after: int, limit: int = PAGE) -> list[LogLine]:
    return list(
        LogLine.objects.filter(deployment_id=deployment_id, seq__gt=after).order_by("seq")[:limit]
    )


def replay_start(deployment_id: int, after: int) -> int:
    """Where a log socket's catch-up starts: after `after`, but never more than the newest PAGE
    lines back (a reconnect with after=0 does not replay the whole retention; older lines are
    the page's to load)."""
    newest = LogLine.objects.filter(deployment_id=deployment_id).order_by("-seq")
    floor = list(newest.values_list("seq", flat=True)[PAGE : PAGE + 1])
    return max(after, floor[0] if floor else 0)


def page_of(lines: QuerySet[LogLine], before: int | None) -> list[LogLine]:
    """The newest PAGE lines (before a seq, to load older ones on demand), oldest first."""
    if before is not None:
        lines = lines.filter(seq__lt=before)
    return list(reversed(lines.order_by("-seq")[:PAGE]))


def as_int(raw: str | None) -> int | None:
    return int(raw) if raw and raw.isdigit() else None


def deployment_logs(request: HttpRequest, pk: int) -> HttpResponse:
    deployment = get_deployment(request.user, pk)
    lines = filtered(deployment.pk, request.GET)
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
    lines = filtered(deployment.pk, request.GET).order_by("seq")

    def text() -> Any:
        for line in lines.iterator(chunk_size=2000):
            when = f"{line.at:%Y-%m-%d %H:%M:%S}"
            yield f"{when} {line.level:<7} {line.stream:<7} {line.machine_name} {line.text}\n"

    response = StreamingHttpResponse(text(), content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{deployment.name}-logs.txt"'
    return response
