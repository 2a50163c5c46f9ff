"""The engine's log lines and /metrics text, as the API server hands them over → plain values."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime

from prometheus_client.parser import text_string_to_metric_families

from clusters.backends.base import LogRecord, MetricSample

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# vLLM: "INFO 11-29 15:00:00 [api_server.py:1839] …", V1 adds "(APIServer pid=41) " in front;
# uvicorn: "INFO:     Started server process".
LEVEL = re.compile(
    r"^(?:\([^)]*\)\s+)?(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)(?::\s|\s+\d\d-\d\d\s)"
)
LEVELS = {"WARN": "WARNING", "CRITICAL": "ERROR"}  # Berth's levels: DEBUG, INFO, WARNING, ERROR
KUBE_TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d) ")


def split_timestamp(line: str) -> tuple[datetime | None, str]:
    """The time the kubelet put in front of a line (timestamps=true), and the rest."""
    match = KUBE_TIMESTAMP.match(line)
    if not match:
        return None, line
    whole, fraction, zone = match.groups()
    # Kubernetes gives nanoseconds; Python's datetime keeps microseconds.
    micro = f".{(fraction or '0')[:6]:0<6}"
    stamp = datetime.fromisoformat(whole + micro + ("+00:00" if zone == "Z" else zone))
    return stamp, line[match.end() :]


def level_of(text: str) -> str | None:
    match = LEVEL.match(text)
    if not match:
        return None
    level = match.group("level")
    return LEVELS.get(level, level)


def log_records(
    copy_id: int, machine: str, lines: Iterable[str], since: datetime | None, now: datetime
) -> list[LogRecord]:
    """One record per line after `since`. A line without a level (a traceback's frames, a
    progress bar) carries on the level of the line before it, so a traceback stays an error."""
    records: list[LogRecord] = []
    level = "INFO"
    for line in lines:
        record = log_record(copy_id, machine, line, level, now)
        if record is None:
            continue
        level = record.level
        if since is None or record.at > since:
            records.append(record)
    return records


def log_record(
    copy_id: int, machine: str, line: str, previous_level: str, now: datetime
) -> LogRecord | None:
    at, text = split_timestamp(line.rstrip("\r\n"))
    text = ANSI.sub("", text)
    if not text.strip():
        return None
    level = level_of(text) or previous_level
    return LogRecord(copy_id, "engine", level, at or now, text, machine)


def metric_samples(text: str) -> list[MetricSample]:
    """Prometheus text → samples; ValueError when the text is not Prometheus' format."""
    return [
        MetricSample(sample.name, dict(sample.labels), float(sample.value))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]
