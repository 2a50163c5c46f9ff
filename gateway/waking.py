"""Requests for an idle deployment: the first asks for a copy (deployments/waking.py: any
gateway process may ask, the deployment's row lock makes it once), and each request is held
until a copy serves, within its reply wait. Past the wait, or past the number one process
holds (BERTH_GATEWAY_WAKE_HOLD), the client gets a 503 with Retry-After and words saying the
model is starting, never a 404: the deployment is there, asleep."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from deployments.choices import DeploymentState
from deployments.waking import expected_wait_s
from gateway import conf, errors
from gateway.directory import Route

if TYPE_CHECKING:
    from gateway.relay import Call
    from gateway.service import Gateway

# How often a held request looks at the table (which broadcasts keep fresh) for a copy.
LOOK_EVERY_S = 0.1


class Waker:
    """The requests this process holds, per deployment."""

    def __init__(self) -> None:
        self.held: dict[int, int] = {}

    async def until_serving(self, hub: Gateway, call: Call, routes: list[Route]) -> list[Route]:
        """The routes to relay to once a copy serves; as they are when none sleeps."""
        sleeping = next((r for r in routes if r.wakes_on_request), None)
        if sleeping is None:
            return routes
        held = self.held.get(sleeping.id, 0)
        if held >= conf.wake_hold():
            raise errors.too_many_waiting(sleeping.name, held, wait_s(sleeping))
        self.held[sleeping.id] = held + 1
        try:
            if sleeping.state == DeploymentState.IDLE:
                await hub.wake(sleeping.id, call.caller.username)
            return await held_until_serving(hub, call, sleeping)
        finally:
            self.held[sleeping.id] -= 1


async def held_until_serving(hub: Gateway, call: Call, route: Route) -> list[Route]:
    while True:
        remaining = route.reply_wait_s - (time.monotonic() - call.started)
        if remaining <= 0:
            raise errors.still_waking(route.name, wait_s(route))
        await asyncio.sleep(min(LOOK_EVERY_S, remaining))
        now = (await hub.table()).resolve(call.model, call.caller) or []
        if any(r.upstreams for r in now) or not any(r.wakes_on_request for r in now):
            return now or [route]  # serving, or no longer waking (the relay says why)
        route = next(r for r in now if r.wakes_on_request)


def wait_s(route: Route) -> int:
    return expected_wait_s(route.waking_since, route.last_cold_start_s, time.time())
