"""Finding a deployment's log lines: its pages by seq, and where a log
socket's catch-up starts (the pages and the live sockets read lines the same way)."""

from __future__ import annotations

from django.db.models import QuerySet

from deployments.choices import LogLevel
from deployments.models import LogLine

PAGE = 200
LEVELS = list(LogLevel.values)  # lowest first: a level filter shows that level and above


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
