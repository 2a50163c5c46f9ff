"""The gateway process's own Prometheus metrics (gateway/meter.py), against the real gateway
(uvicorn, as the Procfile runs it) in front of an engine simulator: after known chats its
/metrics has these lines, per deployment and team, in the OpenTelemetry GenAI conventions' names;
a quota's refusals are counted by scope, limit and shadow; a caller sees only its teams' series;
with BERTH_USAGE_METERING=false nothing is metered."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from console.models import ApiKey
from gateway.models import Quota
from tests import factories
from tests.integration.test_gateway import (
    DEFAULT_WAIT_S,
    chat,
    database_url,
    on_offer,
    serving,
    serving_engines,
    session_of,
    start_server,
    up,
)
from tests.processes import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

NAMES = [
    "red-measured",
    "red-refused",
    "red-rationed",
    "red-shadowed",
    "red-shown",
    "red-unmetered",
]
SERIES = 'deployment="{}",team="red",gen_ai_operation_name="chat",gen_ai_request_model="{}"'


def labels(deployment: str) -> str:
    return SERIES.format(deployment, deployment)


@pytest.fixture(scope="module")
def engine() -> Iterator[object]:
    started = serving_engines(a=("Qwen/Qwen3-0.6B", NAMES, {}))
    yield started["a"]
    started["a"].kill()


@contextmanager
def gateway_process(**extra: str) -> Iterator[str]:
    env = {**os.environ, "DATABASE_URL": database_url(), "BERTH_REPLY_WAIT_S": str(DEFAULT_WAIT_S),
           "BERTH_GATEWAY_REFRESH_S": "0.2", **extra}  # fmt: skip
    argv = [sys.executable, "-m", "uvicorn", "gateway.asgi:application", "--host", "127.0.0.1",
            "--port", "PORT", "--no-access-log"]  # fmt: skip
    process, url = start_server(argv, env)
    try:
        wait_for(lambda: up(url, process), 60, 0.2, f"the gateway at {url}")
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)


@pytest.fixture(scope="module")
def gateway(django_db_setup, django_db_blocker) -> Iterator[str]:
    with gateway_process() as url:
        yield url


def scraped(gateway_url: str, secret: str) -> list[str]:
    answer = httpx.get(f"{gateway_url}/metrics", headers={"Authorization": f"Bearer {secret}"})
    assert answer.status_code == 200
    return answer.text.splitlines()


def test_two_chats_are_counted_in_the_genai_histograms_and_by_status(gateway, engine, bob, red):
    serving(factories.make_deployment("red-measured", red), engine.port)
    secret = ApiKey.issue(bob, "tests")[1]
    on_offer(gateway, secret, "red-measured")
    for _ in range(2):  # the simulator counts "Hello" as 8 prompt tokens
        assert chat(gateway, secret, "red-measured", max_tokens=4).status_code == 200
    lines = scraped(gateway, secret)
    series = labels("red-measured")
    for expected in [
        "# TYPE gen_ai_client_token_usage histogram",
        f'gen_ai_client_token_usage_bucket{{{series},gen_ai_token_type="input",le="4"}} 0',
        f'gen_ai_client_token_usage_bucket{{{series},gen_ai_token_type="input",le="16"}} 2',
        f'gen_ai_client_token_usage_sum{{{series},gen_ai_token_type="input"}} 16',
        f'gen_ai_client_token_usage_bucket{{{series},gen_ai_token_type="output",le="1"}} 0',
        f'gen_ai_client_token_usage_bucket{{{series},gen_ai_token_type="output",le="4"}} 2',
        f'gen_ai_client_token_usage_sum{{{series},gen_ai_token_type="output"}} 8',
        f'gen_ai_client_token_usage_count{{{series},gen_ai_token_type="output"}} 2',
        "# TYPE gen_ai_server_time_to_first_token histogram",
        # The engine's first token comes after 20 ms.
        f'gen_ai_server_time_to_first_token_bucket{{{series},le="0.01"}} 0',
        f'gen_ai_server_time_to_first_token_bucket{{{series},le="+Inf"}} 2',
        f"gen_ai_server_time_to_first_token_count{{{series}}} 2",
        "# TYPE gen_ai_server_request_duration histogram",
        f'gen_ai_server_request_duration_bucket{{{series},le="81.92"}} 2',
        f"gen_ai_server_request_duration_count{{{series}}} 2",
        "# TYPE berth_gen_ai_requests_total counter",
        f'berth_gen_ai_requests_total{{{series},status="200"}} 2',
    ]:
        assert expected in lines, expected


def test_the_engines_refusal_is_counted_under_its_status(gateway, engine, bob, red):
    secret = ApiKey.issue(bob, "tests")[1]
    serving(factories.make_deployment("red-refused", red), engine.port)
    on_offer(gateway, secret, "red-refused")
    assert chat(gateway, secret, "red-refused", max_tokens=100_000).status_code == 400
    series = labels("red-refused")
    lines = scraped(gateway, secret)
    assert f'berth_gen_ai_requests_total{{{series},status="400"}} 1' in lines
    assert f'gen_ai_client_token_usage_count{{{series},gen_ai_token_type="output"}} 1' in lines
    ttft = f"gen_ai_server_time_to_first_token_count{{{series}}}"
    assert not [line for line in lines if line.startswith(ttft)]  # no token came


def test_a_keys_quota_refusals_and_a_shadow_quotas_are_counted_by_scope_and_limit(
    gateway, engine, bob, red
):
    key, secret = ApiKey.issue(bob, "tests")
    Quota.objects.create(api_key=key, requests_per_minute=2)
    rationed = factories.make_deployment("red-rationed", red)
    shadowed = factories.make_deployment("red-shadowed", red)
    Quota.objects.create(deployment=shadowed, requests_per_minute=1, shadow=True)
    other = ApiKey.issue(bob, "other")[1]
    serving(rationed, engine.port)
    serving(shadowed, engine.port)
    on_offer(gateway, other, "red-rationed", "red-shadowed")
    assert [chat(gateway, secret, "red-rationed").status_code for _ in range(3)] == [200, 200, 429]
    assert [chat(gateway, other, "red-shadowed").status_code for _ in range(3)] == [200] * 3
    lines = scraped(gateway, other)
    rationed_series, shadowed_series = labels("red-rationed"), labels("red-shadowed")
    assert "# TYPE berth_quota_refusals_total counter" in lines
    assert (
        f'berth_quota_refusals_total{{{rationed_series},scope="key",'
        f'limit="requests_per_minute",shadow="false"}} 1'
    ) in lines
    assert (
        f'berth_quota_refusals_total{{{shadowed_series},scope="deployment",'
        f'limit="requests_per_minute",shadow="true"}} 2'
    ) in lines
    assert f'berth_gen_ai_requests_total{{{rationed_series},status="200"}} 2' in lines
    assert f'berth_gen_ai_requests_total{{{rationed_series},status="429"}} 1' in lines
    assert f'berth_gen_ai_requests_total{{{shadowed_series},status="200"}} 3' in lines


def test_a_caller_sees_only_its_teams_series_and_staff_see_all(
    gateway, engine, bob, dave, alice, red
):
    serving(factories.make_deployment("red-shown", red), engine.port)
    secret = ApiKey.issue(bob, "tests")[1]
    on_offer(gateway, secret, "red-shown")
    assert chat(gateway, secret, "red-shown").status_code == 200
    outsider = "\n".join(scraped(gateway, ApiKey.issue(dave, "tests")[1]))
    assert "# TYPE gen_ai_client_token_usage histogram" in outsider
    assert "red-shown" not in outsider
    as_staff = httpx.get(f"{gateway}/metrics", cookies=session_of(alice))
    assert as_staff.status_code == 200
    shown = f'berth_gen_ai_requests_total{{{labels("red-shown")},status="200"}} 1'
    assert shown in as_staff.text.splitlines()
    assert httpx.get(f"{gateway}/metrics").status_code == 401


def test_with_metering_off_a_chat_is_served_and_not_metered(
    django_db_setup, django_db_blocker, engine, bob, red
):
    with gateway_process(BERTH_USAGE_METERING="false") as url:
        serving(factories.make_deployment("red-unmetered", red), engine.port)
        secret = ApiKey.issue(bob, "tests")[1]
        on_offer(url, secret, "red-unmetered")
        # A reply without a stream is metered before it is sent: nothing came of it here.
        assert chat(url, secret, "red-unmetered").status_code == 200
        lines = scraped(url, secret)
        assert "# TYPE berth_gen_ai_requests_total counter" in lines
        # Only the console's figures (from the database) name it.
        assert 'berth_gateway_ready_copies{deployment="red-unmetered"} 1' in lines
        named = [line for line in lines if "red-unmetered" in line]
        assert [line for line in named if not line.startswith("berth_gateway_")] == []
