"""This gateway process's own Prometheus counters and histograms, per deployment and team.

Counted in memory on the request's path (a few dictionary additions when a request ends) and
rendered at the gateway process's /metrics, after the console's figures. They are this process's
counts since it started: where several gateway processes run, each exposes its own, and
Prometheus sums them (a restarted process starts again from zero, which rate() allows for).

Names follow the OpenTelemetry GenAI semantic conventions, dots as underscores:
gen_ai_client_token_usage (gen_ai_token_type input|output), gen_ai_server_time_to_first_token
and gen_ai_server_request_duration (seconds), with those conventions' bucket boundaries and
their gen_ai_operation_name and gen_ai_request_model labels. What they do not name is berth_*:
requests by status and quota refusals (by the quota's scope, its limit and whether it is a
shadow quota, which only counts).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

from console.prometheus import escaped
from gateway.keys import Caller

# The conventions' ExplicitBucketBoundaries.
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304,
                 16777216, 67108864)  # fmt: skip
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0)  # fmt: skip
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48,
                    40.96, 81.92)  # fmt: skip
OPERATIONS = {"/v1/chat/completions": "chat", "/v1/completions": "text_completion",
              "/v1/embeddings": "embeddings"}  # fmt: skip

TOKENS = "gen_ai_client_token_usage"
TTFT = "gen_ai_server_time_to_first_token"
DURATION = "gen_ai_server_request_duration"
REQUESTS = "berth_gen_ai_requests_total"
REFUSALS = "berth_quota_refusals_total"
HELP = {
    TOKENS: "Tokens per request, input (the prompt) and output (the completion).",
    TTFT: "Seconds from the request to its first token, for replies that started.",
    DURATION: "Seconds from the request to the end of its reply.",
    REQUESTS: "Requests routed to a deployment, by the status the client got.",
    REFUSALS: "Requests a quota refused (shadow=true: would have refused; let through).",
}


@dataclass(frozen=True)
class Where:
    """Who served a request: the labels every series carries, and its team for access."""

    team_id: int
    team: str
    deployment: str
    operation: str
    model: str

    def labels(self) -> str:
        return (
            f'deployment="{escaped(self.deployment)}",team="{escaped(self.team)}",'
            f'gen_ai_operation_name="{self.operation}",'
            f'gen_ai_request_model="{escaped(self.model)}"'
        )


@dataclass
class Histogram:
    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)  # per bucket, not cumulative; then +Inf
    total: float = 0.0

    def observe(self, value: float) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def lines(self, metric: str, labels: str) -> list[str]:
        out, running = [], 0
        for bound, count in zip((*self.bounds, "+Inf"), self.counts, strict=True):
            running += count
            out.append(f'{metric}_bucket{{{labels},le="{bound}"}} {running}')
        out.append(f"{metric}_sum{{{labels}}} {self.total:.6g}")
        out.append(f"{metric}_count{{{labels}}} {running}")
        return out


class Meter:
    """The process's series, keyed by their labels. One event loop writes them; /metrics reads
    them on the same loop, so no lock is needed."""

    def __init__(self) -> None:
        self.histograms: dict[tuple[str, Where, str], Histogram] = {}
        self.requests: dict[tuple[Where, int], int] = {}
        self.refusals: dict[tuple[Where, str, str, bool], int] = {}

    def observe(self, metric: str, where: Where, value: float, extra: str = "") -> None:
        key = (metric, where, extra)
        histogram = self.histograms.get(key)
        if histogram is None:
            bounds = {TOKENS: TOKEN_BUCKETS, TTFT: TTFT_BUCKETS}.get(metric, DURATION_BUCKETS)
            histogram = self.histograms[key] = Histogram(bounds)
        histogram.observe(value)

    def ended(
        self,
        where: Where,
        status: int,
        input_tokens: int | None,
        output_tokens: int,
        ttft_s: float | None,
        duration_s: float,
    ) -> None:
        """A request that reached a copy has ended (its status is the client's)."""
        self.requests[(where, status)] = self.requests.get((where, status), 0) + 1
        if input_tokens is not None:
            self.observe(TOKENS, where, input_tokens, 'gen_ai_token_type="input"')
        self.observe(TOKENS, where, output_tokens, 'gen_ai_token_type="output"')
        if ttft_s is not None:
            self.observe(TTFT, where, ttft_s)
        self.observe(DURATION, where, duration_s)

    def refused(self, where: Where, scope: str, limit: str, shadow: bool) -> None:
        """A quota refused the request (or, shadow, would have)."""
        key = (where, scope, limit, shadow)
        self.refusals[key] = self.refusals.get(key, 0) + 1
        if not shadow:
            self.requests[(where, 429)] = self.requests.get((where, 429), 0) + 1

    def text(self, caller: Caller) -> str:
        """Prometheus' text format, for the deployments of the caller's teams (staff: all)."""

        def shown(where: Where) -> bool:
            return caller.is_staff or where.team_id in caller.team_ids

        lines: list[str] = []
        for metric in (TOKENS, TTFT, DURATION):
            lines += head(metric, "histogram")
            for (name, where, extra), histogram in sorted_items(self.histograms):
                if name == metric and shown(where):
                    labels = where.labels() + ("," + extra if extra else "")
                    lines += histogram.lines(metric, labels)
        lines += head(REQUESTS, "counter")
        for (where, status), count in sorted_items(self.requests):
            if shown(where):
                lines.append(f'{REQUESTS}{{{where.labels()},status="{status}"}} {count}')
        lines += head(REFUSALS, "counter")
        for (where, scope, limit, shadow), count in sorted_items(self.refusals):
            if shown(where):
                labels = f'{where.labels()},scope="{scope}",limit="{limit}"'
                lines.append(f'{REFUSALS}{{{labels},shadow="{str(shadow).lower()}"}} {count}')
        return "\n".join(lines) + "\n"


def head(metric: str, kind: str) -> list[str]:
    return [f"# HELP {metric} {HELP[metric]}", f"# TYPE {metric} {kind}"]


def sorted_items(series: dict) -> Iterable:  # type: ignore[type-arg]
    return sorted(series.items(), key=lambda item: repr(item[0]))


METER = Meter()  # this process's
