"""Figures the engines report on /metrics: scraped by the watcher, kept for an hour, shown on
the deployment's page as the latest values and small charts."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from clusters.backends.base import MetricSample
from console import live
from deployments.models import EngineFigures

KEEP = timedelta(hours=1)
SUMMED = {
    "vllm:num_requests_running": "requests_running",
    "vllm:num_requests_waiting": "requests_waiting",
    "vllm:prompt_tokens_total": "prompt_tokens_total",
    "vllm:generation_tokens_total": "generation_tokens_total",
    "vllm:time_to_first_token_seconds_sum": "ttft_seconds_sum",
    "vllm:time_to_first_token_seconds_count": "ttft_count",
    # llama.cpp's names for the same figures (it reports no cache use and no TTFT histogram).
    "llamacpp:requests_processing": "requests_running",
    "llamacpp:requests_deferred": "requests_waiting",
    "llamacpp:prompt_tokens_total": "prompt_tokens_total",
    "llamacpp:tokens_predicted_total": "generation_tokens_total",
}
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")


def add_copy(totals: dict[str, float], samples: Iterable[MetricSample]) -> None:
    for sample in samples:
        field = SUMMED.get(sample.name)
        if field:
            totals[field] = totals.get(field, 0.0) + sample.value
        elif sample.name in KV_USAGE:
            totals["kv_cache_usage"] = max(totals.get("kv_cache_usage", 0.0), sample.value)


def record(deployment_id: int, per_copy: list[list[MetricSample]]) -> None:
    """Store one moment of a deployment's figures (copies that answered), and announce it."""
    answered = [samples for samples in per_copy if samples]
    if not answered:
        return
    totals: dict[str, float] = {}
    for samples in answered:
        add_copy(totals, samples)
    EngineFigures.objects.create(
        deployment_id=deployment_id, at=timezone.now(), copies=len(answered), **totals
    )
    live.broadcast_on_commit(live.deployment_group(deployment_id), "figures", deployment_id)


def prune() -> int:
    deleted, _ = EngineFigures.objects.filter(at__lt=timezone.now() - KEEP).delete()
    return deleted


@dataclass(frozen=True)
class Point:
    at: datetime
    copies: int
    running: float
    waiting: float
    kv_percent: float
    tokens_per_second: float
    ttft_ms: float | None


def rate(newer: EngineFigures, older: EngineFigures, field: str) -> float:
    seconds = (newer.at - older.at).total_seconds()
    change = getattr(newer, field) - getattr(older, field)
    return max(0.0, change / seconds) if seconds > 0 else 0.0


def points(deployment_id: int, limit: int = 60) -> list[Point]:
    """The last moments, oldest first, with rates between consecutive moments."""
    rows = list(
        EngineFigures.objects.filter(deployment_id=deployment_id).order_by("-at")[: limit + 1]
    )
    rows.reverse()
    result = []
    for older, newer in zip(rows, rows[1:], strict=False):
        answers = newer.ttft_count - older.ttft_count
        ttft = (
            (newer.ttft_seconds_sum - older.ttft_seconds_sum) / answers * 1000
            if answers > 0
            else None
        )
        result.append(
            Point(
                at=newer.at,
                copies=newer.copies,
                running=newer.requests_running,
                waiting=newer.requests_waiting,
                kv_percent=newer.kv_cache_usage * 100,
                tokens_per_second=rate(newer, older, "generation_tokens_total"),
                ttft_ms=ttft,
            )
        )
    return result


def copies_and_load(deployment_id: int, since: datetime) -> dict[str, object]:
    """The Autoscaling panel's chart: copies and load (requests running and waiting in the
    engines) at each scrape since `since`, on one scale so that they can be compared."""
    series = [p for p in points(deployment_id, limit=720) if p.at >= since]
    if len(series) < 2:
        return {}
    copies = [float(p.copies) for p in series]
    load = [p.running + p.waiting for p in series]
    top = max(*copies, *load, 1.0)
    return {
        "copies": sparkline(copies, top=top),
        "load": sparkline(load, top=top),
        "top": top,
        "minutes": round((series[-1].at - series[0].at).total_seconds() / 60),
    }


def sparkline(
    values: list[float], width: int = 120, height: int = 24, top: float | None = None
) -> str:
    """An SVG polyline's points for a small chart (no script, no library)."""
    if len(values) < 2:
        return ""
    top = top or max(values) or 1.0
    step = width / (len(values) - 1)
    return " ".join(f"{i * step:.1f},{height - v / top * height:.1f}" for i, v in enumerate(values))


def summary(deployment_id: int) -> dict[str, object]:
    """What the page shows: the latest figures and a chart for each."""
    series = points(deployment_id)
    if not series:
        return {}
    latest = series[-1]
    return {
        "latest": latest,
        "charts": {
            "running": sparkline([p.running for p in series]),
            "waiting": sparkline([p.waiting for p in series]),
            "kv": sparkline([p.kv_percent for p in series]),
            "tokens": sparkline([p.tokens_per_second for p in series]),
        },
    }
