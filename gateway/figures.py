"""Per deployment and minute: requests, failures, time to first token, latency and tokens.

Kept in memory (one lock; recording costs a few dict operations) and flushed to the database
once a minute as sums and counts, which add up across flushes and processes (gateway/metrics.py
exports their totals).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, fields
from datetime import UTC, datetime

from django.db import connection, transaction

log = logging.getLogger(__name__)

UPSERT = """
INSERT INTO gateway_minutefigures (
    deployment_id, deployment_name, minute, requests, failures, timeouts, ttft_sum_s,
    ttft_count, latency_sum_s, latency_count, generated_tokens, generation_s
) VALUES (
    (SELECT id FROM deployments_deployment WHERE id = %s), %s, %s, %s, %s, %s, %s, %s, %s, %s,
    %s, %s
)
ON CONFLICT (deployment_id, minute) DO UPDATE SET
    requests = gateway_minutefigures.requests + EXCLUDED.requests,
    failures = gateway_minutefigures.failures + EXCLUDED.failures,
    timeouts = gateway_minutefigures.timeouts + EXCLUDED.timeouts,
    ttft_sum_s = gateway_minutefigures.ttft_sum_s + EXCLUDED.ttft_sum_s,
    ttft_count = gateway_minutefigures.ttft_count + EXCLUDED.ttft_count,
    latency_sum_s = gateway_minutefigures.latency_sum_s + EXCLUDED.latency_sum_s,
    latency_count = gateway_minutefigures.latency_count + EXCLUDED.latency_count,
    generated_tokens = gateway_minutefigures.generated_tokens + EXCLUDED.generated_tokens,
    generation_s = gateway_minutefigures.generation_s + EXCLUDED.generation_s
"""


@dataclass(frozen=True)
class Outcome:
    """How one request went."""

    deployment_id: int
    deployment_name: str
    failed: bool = False
    timed_out: bool = False
    ttft_s: float | None = None
    latency_s: float | None = None
    tokens: int = 0
    generation_s: float = 0.0


@dataclass
class Tally:
    requests: int = 0
    failures: int = 0
    timeouts: int = 0
    ttft_sum_s: float = 0.0
    ttft_count: int = 0
    latency_sum_s: float = 0.0
    latency_count: int = 0
    generated_tokens: int = 0
    generation_s: float = 0.0

    def add(self, outcome: Outcome) -> None:
        self.requests += 1
        self.failures += outcome.failed
        self.timeouts += outcome.timed_out
        if outcome.ttft_s is not None:
            self.ttft_sum_s += outcome.ttft_s
            self.ttft_count += 1
        if outcome.latency_s is not None:
            self.latency_sum_s += outcome.latency_s
            self.latency_count += 1
        self.generated_tokens += outcome.tokens
        self.generation_s += outcome.generation_s

    def merge(self, other: Tally) -> None:
        for spec in fields(self):
            setattr(self, spec.name, getattr(self, spec.name) + getattr(other, spec.name))

    def values(self) -> list[float | int]:
        return [getattr(self, spec.name) for spec in fields(self)]


MinuteKey = tuple[int, str, int]  # (deployment id, name, minute as epoch seconds)


def minute_of(epoch_s: float) -> int:
    return int(epoch_s // 60) * 60


class Figures:
    """The in-memory book: each minute's tallies until they are flushed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # the flush runs in another thread
        self.pending: dict[MinuteKey, Tally] = {}

    def record(self, outcome: Outcome) -> None:
        minute = (outcome.deployment_id, outcome.deployment_name, minute_of(time.time()))
        with self.lock:
            self.pending.setdefault(minute, Tally()).add(outcome)

    def take_pending(self) -> dict[MinuteKey, Tally]:
        with self.lock:
            taken, self.pending = self.pending, {}
        return taken

    def give_back(self, taken: dict[MinuteKey, Tally]) -> None:
        with self.lock:
            for key, tally in taken.items():
                self.pending.setdefault(key, Tally()).merge(tally)

    def flush(self) -> int:
        """Blocking: add what was recorded since the last flush to the database's rows."""
        taken = self.take_pending()
        if not taken:
            return 0
        try:
            write_rows(taken)
        except Exception:
            self.give_back(taken)  # keep them for the next flush rather than lose them
            log.exception("flushing the gateway's figures failed; kept for the next flush")
            return 0
        return len(taken)


def write_rows(taken: dict[MinuteKey, Tally]) -> None:
    rows = [
        [deployment_id, name, datetime.fromtimestamp(minute, UTC), *tally.values()]
        for (deployment_id, name, minute), tally in sorted(taken.items(), key=lambda i: i[0][1:])
    ]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(UPSERT, rows)
