"""Benchmark: how soon a revoked key is refused by the gateway (a real gateway process that had
the key cached), from the revocation's commit to the first 401.

The gateway forgets a user's cached keys on the access broadcast (console/keys.py); before, a
revoked key kept working for up to the cache's 30 s. Baseline, measured in the same run: one
authenticated request to the same gateway (GET /v1/models, the key cached). `make bench` runs
20 revocations; `make test` a smoke size of 3. No timing is asserted (machines here are noisy).
"""

from __future__ import annotations

import os
import statistics
import time

import httpx
import pytest

from console import keys
from tests import factories
from tests.processes import gateway_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.bench]
ROUNDS = 20 if os.environ.get("BERTH_BENCH_FULL") == "1" else 3


def models(client: httpx.Client, url: str, secret: str) -> int:
    answer = client.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {secret}"})
    return answer.status_code


def request_time(client: httpx.Client, url: str, secret: str) -> float:
    began = time.perf_counter()
    assert models(client, url, secret) == 200
    return time.perf_counter() - began


def revocation_time(client: httpx.Client, url: str, user) -> float:
    key, secret = keys.issue(user, "bench", "chat")
    assert models(client, url, secret) == 200  # cached in the gateway from here on
    began = time.perf_counter()
    keys.revoke(user, key)
    while models(client, url, secret) != 401:
        if time.perf_counter() - began > 30:
            raise AssertionError("the revoked key was still served after 30 s")
    return time.perf_counter() - began


def test_a_revoked_key_is_refused_within_a_few_requests_of_its_revocation() -> None:
    user = factories.make_user("bench")
    with gateway_server() as url, httpx.Client(timeout=10) as client:
        _, steady = keys.issue(user, "steady", "chat")
        baseline = statistics.median(request_time(client, url, steady) for _ in range(20))
        revoked = statistics.median(revocation_time(client, url, user) for _ in range(ROUNDS))
    print(
        f"\nA revoked key refused by the gateway: median {revoked * 1000:.1f} ms after the "
        f"revocation over {ROUNDS} revocations; one cached request takes {baseline * 1000:.1f} "
        f"ms: ratio {revoked / baseline:.1f} (was: up to the key cache's 30 s)"
    )
