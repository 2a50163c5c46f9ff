"""Heartbeats of the background processes: the one home of their names, keys, interval and
staleness.

Every HEARTBEAT_EVERY_S each background process writes a Redis key for its part: the control
worker and the transfers worker (one part per queue they consume, from a worker bootstep's
timer, console/celery.py), beat (from its scheduler's own tick, console/celery.py), the watcher
(a task in its event loop, deployments/watcher.py) and the gateway (a task of its lifespan,
gateway/app.py). A part whose newest heartbeat is older than HEARTBEAT_STALE_S, or that never
wrote one, is down. The key outlives that by far (KEEP_S), so the status page can still say when
a part that went away was last seen.

The loops that act in passes (the watcher's look at a cluster, the stray engines' sweep) also
say when their latest finished pass began (`finished_pass`): proof that a pass begun after some
change has run, which tests wait for instead of sleeping.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import socket
import time
from dataclasses import dataclass
from datetime import UTC, datetime

import redis
from django.conf import settings

log = logging.getLogger(__name__)

PARTS = {
    "worker": "Worker (control queue)",
    "transfers": "Worker (transfers queue)",
    "beat": "Beat (the reconciler's schedule)",
    "watcher": "Watcher",
    "gateway": "Gateway",
}
# A part's last heartbeat stays this long after its process stopped writing it (then the part
# reads as never seen): long enough to say "last seen 3 hours ago".
KEEP_S = 24 * 3600


def key(part: str) -> str:
    # Namespaced by the control queue's name, which already tells installs sharing one Redis
    # apart (BERTH_CELERY_QUEUE).
    return f"{settings.CELERY_TASK_DEFAULT_QUEUE}:heartbeat:{part}"


def part_of_queue() -> dict[str, str]:
    """The part each Celery queue's worker beats for."""
    return {
        settings.CELERY_TASK_DEFAULT_QUEUE: "worker",
        settings.CELERY_TRANSFER_QUEUE: "transfers",
    }


def client() -> redis.Redis:
    return client_for(settings.REDIS_URL)


@functools.cache
def client_for(url: str) -> redis.Redis:
    # Short timeouts: a status page or /health must answer "down", not hang, when Redis is away.
    return redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)


def write(part: str, queue: str = "") -> None:
    beat = {"at": time.time(), "host": socket.gethostname(), "pid": os.getpid(), "queue": queue}
    client().set(key(part), json.dumps(beat), ex=KEEP_S)


def write_quietly(part: str, queue: str = "") -> None:
    """A heartbeat that cannot be written must not stop the process: it will read as down."""
    try:
        write(part, queue)
    except redis.RedisError as error:
        log.warning("could not write the %s heartbeat: %s", part, error)


@dataclass(frozen=True)
class Beat:
    """A part's last heartbeat; `at` is None when it never wrote one (or it is long gone)."""

    part: str
    at: float | None = None
    host: str = ""
    pid: int | None = None
    queue: str = ""

    @property
    def words(self) -> str:
        return PARTS[self.part]

    @property
    def alive(self) -> bool:
        return self.at is not None and time.time() - self.at <= settings.HEARTBEAT_STALE_S

    @property
    def seen_at(self) -> datetime | None:
        return None if self.at is None else datetime.fromtimestamp(self.at, UTC)


def parsed(part: str, raw: bytes | None) -> Beat:
    if raw is None:
        return Beat(part)
    try:
        fields = json.loads(raw)
        return Beat(
            part, float(fields["at"]), str(fields["host"]), int(fields["pid"]), fields["queue"]
        )
    except (ValueError, KeyError, TypeError):  # not written by this code: as good as none
        return Beat(part)


def read_all() -> list[Beat]:
    """Every part's last heartbeat, in PARTS' order; raises redis.RedisError when Redis is away."""
    raws = client().mget([key(part) for part in PARTS])
    return [parsed(part, raw) for part, raw in zip(PARTS, raws, strict=True)]


async def keep_beating(part: str, stop: asyncio.Event) -> None:
    """For a process with an event loop (watcher, gateway): beat until `stop` is set. Beating
    from the loop itself means a loop that is stuck stops the heartbeat too."""
    while not stop.is_set():
        await asyncio.to_thread(write_quietly, part)
        try:
            await asyncio.wait_for(stop.wait(), settings.HEARTBEAT_EVERY_S)
        except TimeoutError:
            pass


def pass_key(name: str) -> str:
    return f"{settings.CELERY_TASK_DEFAULT_QUEUE}:passes:{name}"


def finished_pass(name: str, began: float) -> None:
    """A pass of the loop `name` that began at `began` (time.time()) has finished. The latest
    beginning is kept (GT), so a long pass ending after a newer one cannot make it older. A
    Redis that is away must not stop the loop."""
    try:
        with client().pipeline() as pipe:
            pipe.zadd(pass_key(name), {"began": began}, gt=True)
            pipe.expire(pass_key(name), KEEP_S)
            pipe.execute()
    except redis.RedisError as error:
        log.warning("could not write the %s pass: %s", name, error)


def last_pass_began(name: str) -> float | None:
    """When the latest finished pass of the loop `name` began; None if none is known."""
    return client().zscore(pass_key(name), "began")
