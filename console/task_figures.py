"""How long the background tasks run and how many wait: the figures of the console's /metrics
about Celery (gateway/metrics.py renders them).

Every worker process adds each finished task's run time to one histogram in Redis (console/celery.py
records it when the task ends), so the figures add up across workers and survive a worker's
restart; the waiting tasks are the length of each queue's list in the broker (Redis too).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import redis
from django.conf import settings

from console.heartbeats import client
from console.prometheus import family, labelled

log = logging.getLogger(__name__)

# Seconds: the control tasks take milliseconds, a placement pass up to a second, a copy of a
# model's files minutes.
BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0, 600.0)
INFINITY = "+Inf"
# Each bucket's `le` label, as Prometheus' text writes it ("0.01" … "600", then "+Inf").
LABELS = (*(f"{bound:g}" for bound in BUCKETS), INFINITY)


def key(what: str) -> str:
    # Namespaced by the control queue's name, as the heartbeats are (installs sharing a Redis).
    return f"{settings.CELERY_TASK_DEFAULT_QUEUE}:task-figures:{what}"


@dataclass
class TaskFigures:
    """One task's runs: how many ended within each bucket's seconds (cumulative, as Prometheus'
    histograms count), their total seconds, and how many raised."""

    within: dict[str, int] = field(default_factory=dict)
    runs: int = 0
    seconds: float = 0.0
    failures: int = 0


def bucket_labels(seconds: float) -> list[str]:
    """The buckets a run of `seconds` counts in (every bound at or above it, and +Inf)."""
    within = [label for bound, label in zip(BUCKETS, LABELS[:-1], strict=True) if seconds <= bound]
    return [*within, INFINITY]


def record(task: str, seconds: float, failed: bool) -> None:
    """Adds one finished run; a Redis that is away costs the figure, never the task."""
    try:
        with client().pipeline(transaction=False) as pipe:
            for label in bucket_labels(seconds):
                pipe.hincrby(key("within"), f"{task}|{label}", 1)
            pipe.hincrbyfloat(key("seconds"), task, seconds)
            if failed:
                pipe.hincrby(key("failures"), task, 1)
            pipe.execute()
    except redis.RedisError as error:
        log.warning("could not record the run time of %s: %s", task, error)


def read() -> dict[str, TaskFigures]:
    """Every task's figures, by task name; raises redis.RedisError when Redis is away."""
    figures: dict[str, TaskFigures] = {}
    for raw, count in client().hgetall(key("within")).items():
        task, _, label = raw.decode().rpartition("|")
        kept = figures.setdefault(task, TaskFigures())
        kept.within[label] = int(count)
        if label == INFINITY:
            kept.runs = int(count)
    for raw, seconds in client().hgetall(key("seconds")).items():
        figures.setdefault(raw.decode(), TaskFigures()).seconds = float(seconds)
    for raw, count in client().hgetall(key("failures")).items():
        figures.setdefault(raw.decode(), TaskFigures()).failures = int(count)
    return figures


def queue_lengths() -> dict[str, int]:
    """How many tasks wait in each of Berth's queues (Celery's Redis transport keeps a queue as
    a list named after it)."""
    queues = (settings.CELERY_TASK_DEFAULT_QUEUE, settings.CELERY_TRANSFER_QUEUE)
    return {queue: int(client().llen(queue)) for queue in queues}


def text() -> str:
    """The tasks' families in Prometheus' text format; none while Redis is away (the scrape
    still gets the rest)."""
    try:
        figures, waiting = read(), queue_lengths()
    except redis.RedisError as error:
        log.warning("task figures left out of /metrics: %s", error)
        return ""
    metric = "berth_task_duration_seconds"
    lines = [f"# HELP {metric} How long each background task ran.", f"# TYPE {metric} histogram"]
    for task, kept in sorted(figures.items()):
        for label in LABELS:
            bucket = labelled(f"{metric}_bucket", {"task": task, "le": label})
            lines.append(f"{bucket} {kept.within.get(label, 0)}")
        lines.append(f"{labelled(metric + '_sum', {'task': task})} {kept.seconds}")
        lines.append(f"{labelled(metric + '_count', {'task': task})} {kept.runs}")
    failures = (({"task": task}, kept.failures) for task, kept in sorted(figures.items()))
    lines += family("berth_task_failures_total", "counter", "Task runs that raised.", failures)
    lines += family("berth_task_queue_length", "gauge", "Background tasks waiting to run.",
                    (({"queue": queue}, n) for queue, n in waiting.items()))  # fmt: skip
    return "\n".join(lines) + "\n"
