"""The console's Prometheus /metrics: the gateway's figures per deployment, from the database.

Totals are sums over the minute rows every gateway process flushes, so they only grow (a
restarted gateway does not reset them) and several gateway processes add up. They lag the
traffic by up to a minute, the flush interval.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db.models import Count, Q, QuerySet, Sum

from console import prometheus, task_figures
from console.models import KeyScope
from deployments import fleet_metrics
from deployments.choices import CopyState
from deployments.models import Deployment
from gateway import conf
from gateway.keys import Caller
from gateway.models import MinuteFigures

COUNTERS = (
    ("requests", "berth_gateway_requests_total", "Requests routed to the deployment."),
    ("failures", "berth_gateway_failures_total", "Requests that failed (5xx or broken off)."),
    ("timeouts", "berth_gateway_timeouts_total", "Requests whose reply did not start in time."),
    ("generated_tokens", "berth_gateway_generated_tokens_total", "Tokens generated."),
    ("generation_s", "berth_gateway_generation_seconds_total", "Seconds spent generating."),
)
SUMMARIES = (
    ("ttft", "berth_gateway_time_to_first_token_seconds", "Time to the first token."),
    ("latency", "berth_gateway_request_latency_seconds", "Time to the end of the reply."),
)
# The scrape token reads what a platform admin reads, without being anyone.
SCRAPER = Caller(user_id=0, username="the scrape token", is_staff=True, team_ids=frozenset(),
                 scope=KeyScope.READ)  # fmt: skip
SUMMED = [field for field, _metric, _doc in COUNTERS] + [
    f"{field}_{part}" for field, _metric, _doc in SUMMARIES for part in ("sum_s", "count")
]


def shown_rows(caller: Caller) -> QuerySet[MinuteFigures]:
    rows = MinuteFigures.objects.all()
    if caller.is_staff:
        return rows
    # Rows of a deleted deployment have no team any more: only staff see them.
    return rows.filter(deployment__team_id__in=caller.team_ids)


def totals(caller: Caller) -> list[dict[str, Any]]:
    """Per deployment (by id: a name used again is another deployment); the figures of deleted
    deployments, which only staff see, are summed under "NAME (deleted)"."""
    sums = {name: Sum(name) for name in SUMMED}
    grouped = shown_rows(caller).values("deployment_id", "deployment_name").annotate(**sums)
    by_label: dict[str, dict[str, Any]] = {}
    for row in grouped:
        label = row["deployment_name"] + ("" if row["deployment_id"] else " (deleted)")
        kept = by_label.setdefault(label, {"deployment_name": label, **dict.fromkeys(SUMMED, 0)})
        for name in SUMMED:
            kept[name] += row[name] or 0
    return sorted(by_label.values(), key=lambda row: row["deployment_name"])


def ready_copies(caller: Caller) -> list[tuple[str, int]]:
    deployments = Deployment.objects.all()
    if not caller.is_staff:
        deployments = deployments.filter(team_id__in=caller.team_ids)
    counted = deployments.annotate(ready=Count("copies", filter=Q(copies__state=CopyState.READY)))
    return sorted(counted.values_list("name", "ready"))


def text(caller: Caller) -> str:
    """Blocking: Prometheus' text format for the deployments this caller may see."""
    rows = totals(caller)
    lines: list[str] = []
    for field, metric, doc in COUNTERS:
        lines += family(metric, "counter", doc, ((r["deployment_name"], r[field]) for r in rows))
    for field, metric, doc in SUMMARIES:
        lines += [f"# HELP {metric} {doc}", f"# TYPE {metric} summary"]
        for row in rows:
            name = row["deployment_name"]
            lines.append(f'{metric}_sum{{deployment="{name}"}} {row[field + "_sum_s"] or 0}')
            lines.append(f'{metric}_count{{deployment="{name}"}} {row[field + "_count"] or 0}')
    doc = "Copies ready to serve, which the gateway routes to."
    lines += family("berth_gateway_ready_copies", "gauge", doc, ready_copies(caller))
    fleet = fleet_metrics.text() + task_figures.text() if caller.is_staff else ""
    return "\n".join(lines) + "\n" + fleet


def scrape_token_matches(secret: str | None) -> bool:
    """Whether `secret` is the scrape token (BERTH_METRICS_TOKEN), compared in constant time."""
    token = settings.METRICS_TOKEN
    return bool(token and secret) and hmac.compare_digest(str(secret).encode(), token.encode())


def access_changes(seen: int) -> str:
    """This gateway process's count of access changes applied (keys revoked, roles changed)."""
    metric = "berth_gateway_access_changes_total"
    doc = "Changes of a user's keys or roles this gateway applied to its key cache."
    return f"# HELP {metric} {doc}\n# TYPE {metric} counter\n{metric} {seen}\n"


def limits_text(refused: dict[str, int]) -> str:
    """The gateway's limits (the settings) and how many requests each refused here."""
    lines = []
    for metric, value, doc in [
        ("berth_gateway_max_body_bytes", conf.max_body_bytes(), "Largest request body read."),
        ("berth_gateway_key_concurrent_limit", conf.key_concurrent(), "Requests at once a key."),
        ("berth_gateway_key_per_minute_limit", conf.key_per_minute(), "Requests a minute a key."),
    ]:
        lines += [f"# HELP {metric} {doc}", f"# TYPE {metric} gauge", f"{metric} {value}"]
    metric = "berth_gateway_refused_total"
    lines += [f"# HELP {metric} Requests refused by a per-key limit.", f"# TYPE {metric} counter"]
    lines += [f'{metric}{{limit="{name}"}} {count}' for name, count in sorted(refused.items())]
    return "\n".join(lines) + "\n"


def family(metric: str, kind: str, doc: str, values: Iterable[tuple[str, Any]]) -> list[str]:
    """A family of per-deployment samples."""
    return prometheus.family(metric, kind, doc, (({"deployment": n}, v) for n, v in values))
