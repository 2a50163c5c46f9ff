"""A queue at the gateway for when every copy of a deployment is full, rather than an error.

A copy is full with as many requests in flight from this gateway process as its engine runs at
once (vLLM's max_num_seqs: the deployment's engine setting, else the engine's default). When
every ready copy is full, a request of a deployment with `max_waiting` above 0 waits here, up
to its queue wait (the deployment's `queue_wait_s`, else its reply wait), and goes on as soon as
a request ends; the waiting requests of different API keys take turns, so that one key's burst
does not starve another's requests. Past `max_waiting` a request gets 429, past its wait 503,
both with Retry-After and words. A deployment with `max_waiting` 0 queues nothing here: its
requests go to the least loaded copy, whose engine queues them itself. The queue is each
gateway process's; its length per deployment is on that process's /metrics.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Iterable

from gateway.directory import Route
from gateway.errors import GatewayError
from gateway.keys import Caller
from gateway.metrics import family

WAITING = "berth_gateway_queue_waiting"


class DeploymentQueue:
    """The requests waiting for one deployment, per API key, served by turns."""

    def __init__(self, route: Route) -> None:
        self.route = route
        self.by_key: OrderedDict[int | None, deque[asyncio.Future[None]]] = OrderedDict()
        self.count = 0

    def join(self, key_id: int | None) -> asyncio.Future[None]:
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.by_key.setdefault(key_id, deque()).append(turn)
        self.count += 1
        return turn

    def leave(self, key_id: int | None, turn: asyncio.Future[None]) -> None:
        waiting = self.by_key.get(key_id)
        if waiting is not None and turn in waiting:
            waiting.remove(turn)
            self.count -= 1
            if not waiting:
                del self.by_key[key_id]

    def next_turn(self) -> None:
        """Let the first waiting request of the key whose turn it is go on."""
        while self.by_key:
            key_id, waiting = next(iter(self.by_key.items()))
            turn = waiting.popleft()
            self.count -= 1
            if waiting:
                self.by_key.move_to_end(key_id)  # the next key's turn
            else:
                del self.by_key[key_id]
            if not turn.done():
                turn.set_result(None)
                return


class Queues:
    def __init__(self) -> None:
        self.queues: dict[int, DeploymentQueue] = {}

    def full(self, routes: Iterable[Route], in_flight: dict[int, int]) -> bool:
        copies = [(route, u) for route in routes for u in route.upstreams]
        return bool(copies) and all(
            in_flight.get(u.copy_id, 0) >= route.copy_capacity for route, u in copies
        )

    async def wait_for_room(self, route: Route, caller: Caller, wait_s: float) -> None:
        """Wait for a request at one of the route's copies to end; refused in words when the
        queue is full or the wait passes."""
        queue = self.queues.setdefault(route.id, DeploymentQueue(route))
        queue.route = route
        if queue.count >= route.max_waiting:
            raise queue_full(route)
        turn = queue.join(caller.limit_key)
        try:
            async with asyncio.timeout(max(wait_s, 0.0)):
                await turn
        except TimeoutError:
            raise waited_too_long(route, wait_s) from None
        finally:
            queue.leave(caller.limit_key, turn)

    def freed(self, deployment_id: int) -> None:
        queue = self.queues.get(deployment_id)
        if queue is not None:
            queue.next_turn()

    def text(self, caller: Caller) -> str:
        shown = sorted(
            (queue.route.name, queue.count)
            for queue in self.queues.values()
            if caller.is_staff or queue.route.team_id in caller.team_ids
        )
        doc = "Requests waiting in this process's queue for a copy."
        return "\n".join(family(WAITING, "gauge", doc, shown)) + "\n"


def queue_full(route: Route) -> GatewayError:
    return GatewayError(
        429,
        f"Every copy of {route.name} is busy and {route.max_waiting} requests already wait for "
        "one; try again in a few seconds, or ask an operator for more copies.",
        retry_after_s=2,
    )


def waited_too_long(route: Route, wait_s: float) -> GatewayError:
    return GatewayError(
        503,
        f"Every copy of {route.name} stayed busy for the {wait_s:.0f} s this request waited; "
        "try again shortly, or ask an operator for more copies.",
        retry_after_s=5,
    )
