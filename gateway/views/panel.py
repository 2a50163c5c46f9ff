"""What the deployment page shows of the gateway: its endpoint, and the figures it measured."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.http import HttpRequest
from django.utils import timezone

from clusters.models import ClusterKind
from deployments.choices import CopyState
from deployments.models import Deployment
from gateway import conf
from gateway.directory import upstream_url
from gateway.models import MinuteFigures
from placement.words import per_second, percent

WINDOW_MINUTES = 15
# "Often": at least this share of the window's requests, and at least this many.
TIMEOUTS_OFTEN_SHARE = 0.1
TIMEOUTS_OFTEN_COUNT = 3
SPARK_WIDTH, SPARK_HEIGHT = 120, 24


# ---------------------------------------------------------------- endpoints


def endpoints(request: HttpRequest, deployment: Deployment) -> dict[str, Any]:
    """The gateway's address and the names this deployment answers to, once a copy serves."""
    serving = deployment.copies.filter(state=CopyState.READY)  # type: ignore[attr-defined]
    names = [deployment.name] + ([deployment.chat_name] if deployment.chat_name else [])
    address = conf.gateway_url(request.scheme or "http", request.get_host())
    return {
        "serves": serving.exists(),
        "relays": relays(deployment, serving),
        "address": address,
        "names": names,
        "example": example_request(address, names[-1], deployment.model.encoder_only),
        "limits": limits_words(),
    }


def relays(deployment: Deployment, serving: Any) -> list[str]:
    """Where the gateway reaches a Ray deployment's copies: each copy's relay on its node's
    address (said on the page, since that address must be reachable from the console)."""
    if deployment.cluster.kind != ClusterKind.RAY:
        return []
    return [upstream_url(copy) for copy in serving.select_related("deployment__cluster", "machine")]


def limits_words() -> str:
    return (
        f"Request bodies up to {conf.max_body_bytes() >> 20} MiB; per API key, up to "
        f"{conf.key_concurrent()} requests at once and {conf.key_per_minute()} a minute."
    )


def example_request(address: str, model: str, embeddings: bool) -> str:
    if embeddings:
        path, body = "embeddings", {"model": model, "input": "Hello"}
    else:
        path, body = (
            "chat/completions",
            {
                "model": model,
                "messages": [{"role": "user", "content": "Hello"}],
            },
        )
    return (
        f"curl {address}/{path} \\\n"
        '  -H "Authorization: Bearer $BERTH_API_KEY" \\\n'
        '  -H "Content-Type: application/json" \\\n'
        f"  -d '{json.dumps(body)}'"
    )


# ---------------------------------------------------------------- figures


@dataclass(frozen=True)
class Figure:
    """One figure: its value in words, and a sparkline of its minutes."""

    label: str
    value: str
    points: str
    key: str


def figures(deployment: Deployment, now: datetime | None = None) -> dict[str, Any]:
    """The last minutes' figures, a sparkline each, and whether replies time out often."""
    minutes = window(now or timezone.now())
    rows = {
        row.minute: row
        for row in MinuteFigures.objects.filter(deployment=deployment, minute__gte=minutes[0])
    }
    series = [rows.get(minute) for minute in minutes]
    total = summed(row for row in series if row is not None)
    return {
        "window_minutes": WINDOW_MINUTES,
        "measured": total.requests > 0,
        "figures": figure_list(series, total),
        "timeouts": total.timeouts,
        "requests": total.requests,
        "timeouts_often": timeouts_often(total),
    }


def window(now: datetime) -> list[datetime]:
    this_minute = now.replace(second=0, microsecond=0)
    return [this_minute - timedelta(minutes=i) for i in range(WINDOW_MINUTES - 1, -1, -1)]


def summed(rows: Any) -> MinuteFigures:
    total = MinuteFigures()
    for row in rows:
        for name in SUMMED:
            setattr(total, name, getattr(total, name) + getattr(row, name))
    return total


SUMMED = (
    "requests",
    "failures",
    "timeouts",
    "ttft_sum_s",
    "ttft_count",
    "latency_sum_s",
    "latency_count",
    "generated_tokens",
    "generation_s",
)


def ratio(top: float, bottom: float) -> float | None:
    return top / bottom if bottom else None


def speed(row: MinuteFigures | None) -> float | None:
    return ratio(row.generated_tokens, row.generation_s) if row else None


def ttft(row: MinuteFigures | None) -> float | None:
    return ratio(row.ttft_sum_s, row.ttft_count) if row else None


def latency(row: MinuteFigures | None) -> float | None:
    return ratio(row.latency_sum_s, row.latency_count) if row else None


def figure_list(series: list[MinuteFigures | None], total: MinuteFigures) -> list[Figure]:
    failed_share = ratio(total.failures, total.requests)
    return [
        Figure("Requests", f"{total.requests:,}", spark([r.requests if r else 0 for r in series]),
               "requests"),
        Figure("Generation speed", per_second(speed(total), "tokens"),
               spark([speed(r) for r in series]), "speed"),
        Figure("Time to first token", seconds(ttft(total)), spark([ttft(r) for r in series]),
               "ttft"),
        Figure("Request latency", seconds(latency(total)), spark([latency(r) for r in series]),
               "latency"),
        Figure("Failed", failed_words(total.failures, failed_share),
               spark([r.failures if r else 0 for r in series]), "failed"),
    ]  # fmt: skip


def seconds(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value * 1000:,.0f} ms" if value < 1 else f"{value:,.2f} s"


def failed_words(failures: int, share: float | None) -> str:
    return "—" if share is None else f"{failures:,} ({percent(share)})"


def spark(values: list[float | None]) -> str:
    """SVG polyline points for a sparkline; minutes without a value sit at the bottom."""
    present = [v for v in values if v is not None]
    top = max(present, default=0) or 1
    step = SPARK_WIDTH / max(len(values) - 1, 1)
    return " ".join(
        f"{i * step:.1f},{SPARK_HEIGHT - 2 - (v or 0) / top * (SPARK_HEIGHT - 4):.1f}"
        for i, v in enumerate(values)
    )


def timeouts_often(total: MinuteFigures) -> bool:
    share = ratio(total.timeouts, total.requests) or 0
    return total.timeouts >= TIMEOUTS_OFTEN_COUNT and share >= TIMEOUTS_OFTEN_SHARE
