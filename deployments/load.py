"""The live load of copies, shared through Redis: what every gateway process has in flight,
and the autoscaler's wishes that wait for their window. Deployments own these keys (the
gateway only reports into them), so the autoscaler and the drain read one place however many
gateway processes run.

Each gateway process writes its own hash of copy → requests in flight, replaced every report
and expiring soon after: a process that dies stops counting by itself. The time of each
deployment's latest request is one hash for all (what idleness is measured from).
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Mapping

from django.conf import settings

from console.heartbeats import client
from deployments.autoscaling import Pending

# Each gateway process reports this often; a report outlives a few missed ones, not a dead
# process.
REPORT_EVERY_S = 0.5
REPORT_KEEP_S = 5
PROCESS = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def prefix() -> str:
    # Namespaced as the heartbeats are: installs (and test runs) sharing a Redis stay apart.
    return f"{settings.CELERY_TASK_DEFAULT_QUEUE}:load"


def report_key(process: str) -> str:
    return f"{prefix()}:in-flight:{process}"


def last_request_key() -> str:
    return f"{prefix()}:last-request"


def report_in_flight(
    in_flight: Mapping[int, int],
    last_requests: Mapping[int, float] | None = None,
    process: str = PROCESS,
) -> None:
    """This gateway process's requests in flight per copy, and the deployments it sent a
    request to since its last report, with when (epoch seconds). Blocking: the gateway calls
    it in a thread."""
    counts = {str(copy): n for copy, n in in_flight.items() if n > 0}
    key = report_key(process)
    with client().pipeline() as pipe:  # one round trip, and never half a report
        pipe.delete(key)
        if counts:
            pipe.hset(key, mapping=counts)
            pipe.expire(key, REPORT_KEEP_S)
        if last_requests:
            latest = {str(deployment): at for deployment, at in last_requests.items()}
            pipe.hset(last_request_key(), mapping=latest)
        pipe.execute()


def seconds_since_request(deployment_id: int, now: float | None = None) -> float:
    """How long no gateway process sent the deployment a request. Never seen one: counted
    from now (the first time it is asked), so a deployment is never idle before its time."""
    now = time.time() if now is None else now
    redis = client()
    raw = redis.hget(last_request_key(), str(deployment_id))
    if raw is None:
        redis.hsetnx(last_request_key(), str(deployment_id), now)
        return 0.0
    return max(0.0, now - float(raw))


def note_request(deployment_id: int, at: float | None = None) -> None:
    client().hset(last_request_key(), str(deployment_id), time.time() if at is None else at)


def forget_requests(deployment_id: int) -> None:
    client().hdel(last_request_key(), str(deployment_id))


def in_flight_by_copy() -> dict[int, int]:
    """Requests in flight per copy, summed over every gateway process that reported lately."""
    redis = client()
    totals: dict[int, int] = {}
    for key in redis.scan_iter(match=report_key("*"), count=100):
        for copy, count in redis.hgetall(key).items():
            totals[int(copy)] = totals.get(int(copy), 0) + int(count)
    return totals


# --- the autoscaler's wishes ----------------------------------------------------------------


def pending_key(deployment_id: int) -> str:
    return f"{prefix()}:pending:{deployment_id}"


def read_pending(deployment_id: int) -> Pending | None:
    raw = client().get(pending_key(deployment_id))
    if raw is None:
        return None
    data = json.loads(raw)
    return Pending(int(data["copies"]), float(data["since"]))


def write_pending(deployment_id: int, pending: Pending | None) -> None:
    if pending is None:
        client().delete(pending_key(deployment_id))
        return
    body = json.dumps({"copies": pending.copies, "since": pending.since})
    client().set(pending_key(deployment_id), body, ex=24 * 3600)
