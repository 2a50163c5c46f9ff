"""Quotas through the real gateway: two gateway server processes (uvicorn, as the Procfile runs
it) on one Redis and one database, in front of an engine simulator. A quota's counters are
shared by both processes; a request quota is never passed, even by 64 requests at once; a
shadow quota never refuses but counts what it would have refused; a token quota refuses once
its tokens are spent."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from console.models import ApiKey
from gateway import quotas
from gateway.models import Quota, UsageRecord
from tests import factories
from tests.integration.test_gateway import (
    DEFAULT_WAIT_S,
    chat,
    database_url,
    error_of,
    free_port,
    on_offer,
    serving,
    serving_engines,
    start_server,
    up,
)
from tests.processes import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

NAMES = [
    "red-rpm", "red-shared", "red-shadow", "red-burst", "red-tokens", "red-token-burst",
    "red-no-redis", "red-at-limit",
]  # fmt: skip
OVER_REQUESTS = re.compile(
    r'API key "tests"\'s quota of (\d+) requests per minute is used up: (\d+) requests in '
    r"the last minute\. Try again in (\d+) s\."
)


@pytest.fixture(scope="module")
def engine() -> Iterator[object]:
    started = serving_engines(a=("Qwen/Qwen3-0.6B", NAMES, {}))
    yield started["a"]
    started["a"].kill()


@pytest.fixture(scope="module")
def gateways(django_db_setup, django_db_blocker) -> Iterator[list[str]]:
    """Two gateway processes, re-reading the table (and the quotas) every 0.2 s."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "BERTH_REPLY_WAIT_S": str(DEFAULT_WAIT_S),
        "BERTH_GATEWAY_REFRESH_S": "0.2",
    }
    argv = [sys.executable, "-m", "uvicorn", "gateway.asgi:application", "--host", "127.0.0.1",
            "--port", "PORT", "--no-access-log"]  # fmt: skip
    started = [start_server(argv, env), start_server(argv, env)]
    try:
        for process, url in started:
            wait_for(lambda u=url, p=process: up(u, p), 60, 0.2, f"the gateway at {url}")
        yield [url for _process, url in started]
    finally:
        for process, _url in started:
            os.killpg(process.pid, signal.SIGTERM)
        for process, _url in started:
            process.wait(timeout=20)


def key_with_quota(user, **limits) -> str:
    """A key named "tests" with this quota, set before the deployment is served: once the
    deployment is on offer at a gateway, that gateway has read the quota too."""
    key, secret = ApiKey.issue(user, "tests")
    Quota.objects.create(api_key=key, **limits)
    return secret


def served(name: str, team, engine, gateways: list[str], secret: str) -> None:
    serving(factories.make_deployment(name, team), engine.port)
    for url in gateways:
        on_offer(url, secret, name)


def test_a_key_over_its_requests_per_minute_gets_429_with_retry_after_and_the_quota_named(
    gateways, engine, bob, red
):
    secret = key_with_quota(bob, requests_per_minute=3)
    served("red-rpm", red, engine, gateways, secret)
    first = gateways[0]
    assert [chat(first, secret, "red-rpm").status_code for _ in range(3)] == [200, 200, 200]
    refused = chat(first, secret, "red-rpm")
    assert refused.status_code == 429
    words = OVER_REQUESTS.fullmatch(error_of(refused))
    assert words is not None, error_of(refused)
    assert words.group(1, 2) == ("3", "3")
    wait = int(refused.headers["retry-after"])
    assert words.group(3) == str(wait) and 1 <= wait <= 60
    # Refused before any copy saw it, it has its usage record all the same: no copy, no tokens.
    row = wait_for(
        lambda: UsageRecord.objects.filter(model="red-rpm", status=429).first(), 5, 0.02,
        "the refused request's usage record",
    )  # fmt: skip
    assert (row.copy_id, row.prompt_tokens, row.completion_tokens) == (None, None, 0)
    assert row.deployment_name == "red-rpm"
    assert UsageRecord.objects.filter(model="red-rpm").count() == 4


def test_a_key_at_its_limit_sends_none_of_its_refused_requests_on_to_the_engine(
    gateways, engine, bob, red
):
    """Redis is asked while a call goes on to its copy, except where the last answer left the
    quota half used or more: from then on each call waits for its answer, and a refused one
    never reaches the engine (which counts a request's prompt as it takes it in)."""
    secret = key_with_quota(bob, requests_per_minute=4)
    plain = ApiKey.issue(bob, "no quota")[1]
    served("red-at-limit", red, engine, gateways, secret)
    first = gateways[0]
    finished, prompts = engine.finished(), engine.metric("vllm:prompt_tokens_total")
    answers = [chat(first, secret, "red-at-limit") for _ in range(7)]
    assert [answer.status_code for answer in answers] == [200] * 4 + [429] * 3
    last = chat(first, plain, "red-at-limit")  # taken in after any refused call that got there
    assert last.status_code == 200
    wait_for(lambda: engine.finished() == finished + 5, 10, 0.05, "5 requests ended")
    prompt_tokens = last.json()["usage"]["prompt_tokens"]
    assert engine.metric("vllm:prompt_tokens_total") - prompts == 5 * prompt_tokens


def test_two_gateway_processes_share_one_counter(gateways, engine, bob, red):
    secret = key_with_quota(bob, requests_per_minute=4)
    served("red-shared", red, engine, gateways, secret)
    one, other = gateways
    statuses = [chat(url, secret, "red-shared").status_code for url in (one, other, one, other)]
    assert statuses == [200, 200, 200, 200]
    assert chat(one, secret, "red-shared").status_code == 429
    refused = chat(other, secret, "red-shared")
    assert refused.status_code == 429
    assert OVER_REQUESTS.fullmatch(error_of(refused)).group(1, 2) == ("4", "4")


def test_a_shadow_quota_never_refuses_but_counts_what_it_would_have(
    gateways, engine, bob, red, as_bob
):
    secret = key_with_quota(bob, requests_per_minute=2, shadow=True)
    served("red-shadow", red, engine, gateways, secret)
    one, other = gateways
    statuses = [chat(url, secret, "red-shadow").status_code for url in (one, other) * 3]
    assert statuses == [200] * 6
    listed = as_bob.get("/api/v1/quotas").json()["items"]
    assert [item["use"] for item in listed] == [
        {"requests_per_minute": {"used": 6, "shadow_refusals": 4}}
    ]


def test_sixty_four_requests_at_once_pass_a_request_quota_not_once(gateways, engine, bob, red):
    secret = key_with_quota(bob, requests_per_minute=10)
    served("red-burst", red, engine, gateways, secret)
    with ThreadPoolExecutor(max_workers=64) as pool:
        statuses = list(
            pool.map(lambda n: chat(gateways[n % 2], secret, "red-burst").status_code, range(64))
        )
    assert (statuses.count(200), statuses.count(429)) == (10, 54)


def test_a_deployment_over_its_tokens_per_day_is_refused_until_the_day_ends(
    gateways, engine, bob, red
):
    hosted = factories.make_deployment("red-tokens", red)
    quota = Quota.objects.create(deployment=hosted, tokens_per_day=40)
    secret = ApiKey.issue(bob, "tests")[1]
    serving(hosted, engine.port)
    for url in gateways:
        on_offer(url, secret, "red-tokens")
    spent = before_the_last = 0
    answered = chat(gateways[0], secret, "red-tokens")
    for turn in range(1, 40):
        if answered.status_code != 200:
            break
        usage = answered.json()["usage"]
        before_the_last, spent = spent, spent + usage["prompt_tokens"] + usage["completion_tokens"]
        wait_for(
            lambda spent=spent: quotas.standing(quota)["tokens_per_day"]["used"] == spent,
            10,
            0.05,
            f"{spent} tokens counted",
        )
        answered = chat(gateways[turn % 2], secret, "red-tokens")  # each process in turn
    assert answered.status_code == 429
    assert before_the_last < 40 <= spent  # admitted while under, refused once over
    wait = int(answered.headers["retry-after"])
    assert error_of(answered) == (
        f"deployment red-tokens's quota of 40 tokens per day is used up: {spent} used since "
        f"00:00 UTC today. Try again in {wait:,} s, when the window starts again."
    )
    midnight = (time.time() // 86400 + 1) * 86400
    assert abs(wait - (midnight - time.time())) <= 2


def test_sixty_four_requests_at_once_overshoot_a_token_quota_by_one_request_at_most(
    gateways, engine, bob, red
):
    hosted = factories.make_deployment("red-token-burst", red)
    Quota.objects.create(deployment=hosted, tokens_per_day=40)
    secret = ApiKey.issue(bob, "tests")[1]
    serving(hosted, engine.port)
    for url in gateways:
        on_offer(url, secret, "red-token-burst")
    with ThreadPoolExecutor(max_workers=64) as pool:
        answers = list(
            pool.map(lambda n: chat(gateways[n % 2], secret, "red-token-burst"), range(64))
        )
    spent = [
        a.json()["usage"]["prompt_tokens"] + a.json()["usage"]["completion_tokens"]
        for a in answers
        if a.status_code == 200
    ]
    refused = [a for a in answers if a.status_code == 429]
    assert len(spent) + len(refused) == 64 and spent and refused
    assert sum(spent) - max(spent) < 40  # without the last one admitted, still under
    for answer in refused:
        assert error_of(answer).startswith(
            "deployment red-token-burst's quota of 40 tokens per day is "
        )


def test_a_gateway_that_cannot_reach_redis_lets_requests_through(engine, bob, red):
    """A quota must not take the gateway down with it: without Redis it is not held."""
    secret = key_with_quota(bob, requests_per_minute=1)
    env = {**os.environ, "DATABASE_URL": database_url(), "BERTH_GATEWAY_REFRESH_S": "0.2",
           "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}  # fmt: skip
    argv = [sys.executable, "-m", "uvicorn", "gateway.asgi:application", "--host", "127.0.0.1",
            "--port", "PORT", "--no-access-log"]  # fmt: skip
    process, url = start_server(argv, env)
    try:
        wait_for(lambda: up(url, process), 60, 0.2, f"the gateway at {url}")
        served("red-no-redis", red, engine, [url], secret)
        assert [chat(url, secret, "red-no-redis").status_code for _ in range(3)] == [200] * 3
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
