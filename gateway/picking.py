"""Which ready copy gets a request: the one with the fewest requests in flight, ties at random;
or the one its wish names (gateway/routing.py) unless that copy has more than the load margin
in flight over the least loaded.

A copy that failed to connect is set aside for a short while, so that the requests after it go
to the copies that answer without each paying for a failed connection first.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable

from django.conf import settings

from gateway.directory import Route, Upstream
from gateway.routing import Wish

DOWN_FOR_S = 10.0


class Picker:
    """Requests in flight per copy and per deployment; copies recently found unreachable."""

    def __init__(self) -> None:
        self.in_flight: dict[int, int] = {}
        self.by_deployment: dict[int, int] = {}
        self.down_until: dict[int, float] = {}
        # Deployments sent a request since the last load report, and when (epoch seconds).
        self.requested_at: dict[int, float] = {}

    def choose(
        self, routes: Iterable[Route], tried: set[int], wish: Wish | None = None
    ) -> tuple[Route, Upstream] | None:
        pairs = [(r, u) for r in routes for u in r.upstreams if u.copy_id not in tried]
        now = time.monotonic()
        # When every copy looks down, try them anyway: one may be back.
        live = [p for p in pairs if self.down_until.get(p[1].copy_id, 0.0) <= now] or pairs
        if not live:
            return None
        load = self.in_flight
        least = min(load.get(u.copy_id, 0) for _, u in live)
        if wish is not None:
            wanted = wish.preferred(u for _, u in live)
            margin = settings.GATEWAY_ROUTING_MARGIN
            if wanted is not None and load.get(wanted, 0) <= least + margin:
                return next(p for p in live if p[1].copy_id == wanted)
        return random.choice([p for p in live if load.get(p[1].copy_id, 0) == least])

    def start(self, upstream: Upstream) -> None:
        self.in_flight[upstream.copy_id] = self.in_flight.get(upstream.copy_id, 0) + 1
        deployment = upstream.deployment_id
        self.by_deployment[deployment] = self.by_deployment.get(deployment, 0) + 1
        self.requested_at[deployment] = time.time()

    def done(self, upstream: Upstream) -> None:
        self.in_flight[upstream.copy_id] = self.in_flight.get(upstream.copy_id, 1) - 1
        deployment = upstream.deployment_id
        self.by_deployment[deployment] = self.by_deployment.get(deployment, 1) - 1

    def take_requested(self) -> dict[int, float]:
        """The deployments requested since the last call, and when (for the load report)."""
        taken, self.requested_at = self.requested_at, {}
        return taken

    def set_aside(self, upstream: Upstream) -> None:
        self.down_until[upstream.copy_id] = time.monotonic() + DOWN_FOR_S
