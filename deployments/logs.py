"""Writing a deployment's log lines: counted batches under the deployment's row lock, announced
once committed (a reader resuming after seq N never skips a line that committed late)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from console import live
from deployments.choices import LogLevel, LogStream
from deployments.classify import log_pattern, message_of
from deployments.models import Copy, Deployment, LogLine
from deployments.redaction import redact

MAX_LINE = 8000


def write_lines(
    deployment_id: int,
    lines: Sequence[tuple[Copy | None, str, str, datetime, str]],
) -> int:
    """Store (copy, stream, level, time, text) lines with the next seqs; returns the last seq.
    Secrets are taken out first (deployments/redaction.py): every line is shown to viewers."""
    if not lines:
        return 0
    copies = {copy for copy, *_ in lines if copy is not None}
    keys = {copy.pk: copy.engine_api_key() for copy in copies}
    lines = [
        (copy, stream, level, at, redact(text, [keys.get(copy.pk, "")] if copy else []))
        for copy, stream, level, at, text in lines
    ]
    with transaction.atomic():
        deployment = Deployment.objects.select_for_update().only("log_seq").get(pk=deployment_id)
        first = deployment.log_seq + 1
        rows = [
            LogLine(
                deployment_id=deployment_id,
                copy=copy,
                machine_name=copy.machine.name if copy is not None and copy.machine_id else "",
                stream=stream,
                seq=first + offset,
                at=at,
                level=level if level in LogLevel.values else LogLevel.INFO,
                text=text[:MAX_LINE],
                pattern=log_pattern(text) if stream == LogStream.ENGINE else "",
            )
            for offset, (copy, stream, level, at, text) in enumerate(lines)
        ]
        LogLine.objects.bulk_create(rows, batch_size=500)
        last = first + len(rows) - 1
        Deployment.objects.filter(pk=deployment_id).update(log_seq=F("log_seq") + len(rows))
        group = f"{live.deployment_group(deployment_id)}-logs"
        live.broadcast_on_commit(group, "logs", deployment_id, last)
    return last


def serving(copy: Copy, text: str, level: str = LogLevel.INFO) -> None:
    """A line of the Model serving stream: what happened to a copy, in words."""
    write_lines(copy.deployment_id, [(copy, LogStream.SERVING, level, timezone.now(), text)])


def recent_engine_lines(copy: Copy, limit: int = 400) -> list[str]:
    """The copy's last engine lines, oldest first, for classifying how it failed."""
    rows = LogLine.objects.filter(copy=copy, stream=LogStream.ENGINE).order_by("-seq")[:limit]
    return [message_of(text) for text in reversed(list(rows.values_list("text", flat=True)))]


def last_engine_line_at(copy: Copy) -> datetime | None:
    row = LogLine.objects.filter(copy=copy, stream=LogStream.ENGINE).order_by("-seq").first()
    return row.at if row else None


def prune(keep_per_copy: int) -> int:
    """Delete the oldest lines beyond `keep_per_copy` for each copy (and for lines of no copy,
    per deployment). Returns how many went."""
    from django.db import connection

    # One statement: number each copy's lines newest first, delete those past the limit.
    sql = """
        DELETE FROM deployments_logline WHERE id IN (
            SELECT id FROM (
                SELECT id, row_number() OVER (
                    PARTITION BY deployment_id, copy_id ORDER BY seq DESC
                ) AS newest_first
                FROM deployments_logline
            ) numbered WHERE newest_first > %s
        )
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, [keep_per_copy])
        return int(cursor.rowcount)
