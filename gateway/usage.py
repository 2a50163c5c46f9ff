"""Usage records: one per request through the gateway, written in batches, rolled up per hour.

The request's path only appends an entry to the process's batch (a list under a lock); the
gateway's writer (service.flush_usage_every_second) inserts the batch with one bulk insert
every second (BERTH_GATEWAY_USAGE_FLUSH_S), and once more at exit. A gateway process that dies
loses at most that second. Beat rolls each finished hour up into UsageHour (`roll_up`) and
deletes records older than BERTH_USAGE_DAYS (`prune`).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Count, Sum
from django.db.models.functions import TruncHour
from django.utils import timezone

from console.models import ApiKey, Team
from deployments.models import Deployment
from gateway.models import UsageHour, UsageRecord

log = logging.getLogger(__name__)

# What a batch holds while the database cannot be written (the oldest go first past it).
MOST_PENDING = 100_000
# An hour is rolled up once it has been over this long: a request is recorded when it ends,
# under the time it came in, so a long stream lands in its hour after the hour is over.
ROLL_UP_AFTER = timedelta(minutes=45)
# Each roll-up counts the last hours it rolled up again, for records that came in late.
ROLLED_AGAIN = timedelta(hours=2)


@dataclass(frozen=True)
class UsageEntry:
    """One request's usage, as the gateway's request path hands it over (ids, not rows)."""

    at: float  # epoch seconds: when the request came in
    key_id: int | None
    user_id: int | None
    team_id: int | None
    deployment_id: int | None
    deployment_name: str
    copy_id: int | None
    model: str
    prompt_tokens: int | None
    completion_tokens: int
    ttft_s: float | None
    duration_s: float
    status: int


class UsageBatch:
    """The entries of one gateway process not yet written."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # the flush runs in a database thread
        self.pending: list[UsageEntry] = []

    def add(self, entry: UsageEntry) -> None:
        with self.lock:
            self.pending.append(entry)

    def take(self) -> list[UsageEntry]:
        with self.lock:
            taken, self.pending = self.pending, []
        return taken

    def give_back(self, taken: list[UsageEntry]) -> None:
        with self.lock:
            self.pending[:0] = taken
            dropped = len(self.pending) - MOST_PENDING
            if dropped > 0:
                del self.pending[:dropped]
                log.error("the usage batch is full: %d oldest records dropped", dropped)

    def flush(self) -> int:
        """Blocking: write the pending entries with one bulk insert; on failure keep them."""
        taken = self.take()
        if not taken:
            return 0
        try:
            write_records(taken)
        except Exception:
            self.give_back(taken)
            log.exception("writing the usage records failed; kept for the next flush")
            return 0
        return len(taken)


def write_records(entries: list[UsageEntry]) -> None:
    # A key, user, team or deployment deleted since the request is left empty, as deleting it
    # would have left its older records (SET_NULL), rather than failing the whole batch.
    keys = existing(ApiKey, {e.key_id for e in entries})
    users = existing(get_user_model(), {e.user_id for e in entries})
    teams = existing(Team, {e.team_id for e in entries})
    deployments = existing(Deployment, {e.deployment_id for e in entries})
    UsageRecord.objects.bulk_create(
        [
            UsageRecord(
                at=datetime.fromtimestamp(e.at, UTC),
                api_key_id=e.key_id if e.key_id in keys else None,
                user_id=e.user_id if e.user_id in users else None,
                team_id=e.team_id if e.team_id in teams else None,
                deployment_id=e.deployment_id if e.deployment_id in deployments else None,
                deployment_name=e.deployment_name,
                copy_id=e.copy_id,
                model=e.model[:255],
                prompt_tokens=e.prompt_tokens,
                completion_tokens=e.completion_tokens,
                ttft_s=e.ttft_s,
                duration_s=e.duration_s,
                status=e.status,
            )
            for e in entries
        ]
    )


def existing(model: type, ids: set[int | None]) -> set[int]:
    wanted = {i for i in ids if i}
    if not wanted:
        return set()
    return set(model.objects.filter(pk__in=wanted).values_list("pk", flat=True))


# --- beat's tasks (gateway/tasks.py) ---------------------------------------------------------


def hour_of(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def rolled_up_until() -> datetime | None:
    """The end of the last hour rolled up (the usage API reads records from there on)."""
    last = UsageHour.objects.order_by("-hour").values_list("hour", flat=True).first()
    return last + timedelta(hours=1) if last is not None else None


def roll_up(now: datetime | None = None) -> int:
    """Sum the records of each hour over (ROLL_UP_AFTER ago) into UsageHour, counting again the
    last hours rolled up; returns the rows written."""
    end = hour_of((now or timezone.now()) - ROLL_UP_AFTER)
    done = rolled_up_until()
    if done is None:
        first = UsageRecord.objects.order_by("at").values_list("at", flat=True).first()
        if first is None:
            return 0
        start = hour_of(first)
    else:
        start = done - ROLLED_AGAIN
    if start >= end:
        return 0
    sums = (
        UsageRecord.objects.filter(at__gte=start, at__lt=end)
        .annotate(hour=TruncHour("at", tzinfo=UTC))
        .values("hour", "api_key_id", "user_id", "team_id", "deployment_id", "deployment_name")
        .annotate(
            requests=Count("id"),
            prompt=Sum("prompt_tokens", default=0),
            completion=Sum("completion_tokens", default=0),
            ttft_sum=Sum("ttft_s", default=0.0),
            ttft_count=Count("ttft_s"),
        )
        .order_by()
    )
    rows = [
        UsageHour(
            hour=s["hour"],
            api_key_id=s["api_key_id"],
            user_id=s["user_id"],
            team_id=s["team_id"],
            deployment_id=s["deployment_id"],
            deployment_name=s["deployment_name"],
            requests=s["requests"],
            prompt_tokens=s["prompt"],
            completion_tokens=s["completion"],
            ttft_sum_s=s["ttft_sum"],
            ttft_count=s["ttft_count"],
        )
        for s in sums
    ]
    with transaction.atomic():
        UsageHour.objects.filter(hour__gte=start, hour__lt=end).delete()
        UsageHour.objects.bulk_create(rows)
    return len(rows)


def prune(now: datetime | None = None) -> int:
    """Delete the records (and hours) older than BERTH_USAGE_DAYS; returns the records gone."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.USAGE_DAYS)
    UsageHour.objects.filter(hour__lt=hour_of(cutoff)).delete()
    deleted, _ = UsageRecord.objects.filter(at__lt=cutoff).delete()
    return deleted
