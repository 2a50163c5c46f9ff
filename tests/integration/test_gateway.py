"""The gateway (/v1/…): the official openai client through the gateway's own server process
(uvicorn, as the Procfile runs it) to engine simulators; routing, the reply wait, errors and
figures; the console's /metrics, the chat page and the deployment page's partials.

Engines are real simulator processes on free ports. Most tests point READY copies at them
(states moved only through deployments.transitions); one hosts through the real worker, beat and
watcher. Every fixture kills what it started.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import httpx
import openai
import pytest
from django.contrib.auth.models import AnonymousUser
from django.db import connection
from django.template.loader import render_to_string
from django.test import Client, RequestFactory
from django.utils import timezone

from clusters.simulator import build_env, serve_argv
from clusters.simulator.text import filler_text
from console import keys
from console.models import ApiKey, Membership
from deployments import transitions
from deployments.choices import CopyState, DeploymentState
from deployments.models import Copy, Deployment
from gateway import sse
from gateway.directory import Route, Table, Upstream
from gateway.errors import GatewayError
from gateway.keys import Caller
from gateway.models import MinuteFigures, UsageRecord
from gateway.picking import Picker
from gateway.reassemble import Reassembly
from tests import factories
from tests.integration.test_lifecycle import catalog, host, simulated_cluster  # noqa: F401
from tests.processes import console_processes, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
ENGINE_KEY = "sk-engine-only-the-gateway-knows"
FAST = build_env(load_s_per_gb=0.02, init_s=0.05, ttft_s=0.02, tokens_per_second=200)
BGE_M3 = {
    "architectures": ["XLMRobertaModel"],
    "hidden_size": 1024,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "vocab_size": 250002,
    "max_position_embeddings": 8192,
    "torch_dtype": "float32",
    "weights_bytes": 2_271_000_000,
}
# The deployment names each shared engine answers to (the gateway sends the deployment's name).
NAMES = {
    "a": ["red-qwen", "red-qwen-a", "red-counted", "blue-qwen", "red-metered"],
    "b": ["red-qwen-b"],
    "c": ["red-qwen-stopped"],
    "slow": ["red-slow-default", "red-slow-patient"],
}
DEFAULT_WAIT_S = 10  # the servers' BERTH_REPLY_WAIT_S: the lowest a wait may be
HELLO = [{"role": "user", "content": "Hello"}]
REPLY_WAIT_PASSED = (
    "The model did not start its reply within {} s; it may be busy. You can try again."
)


# ---------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Engine:
    """An engine simulator on a free port with its own --api-key, as a copy runs one."""

    def __init__(self, model: str, names: list[str], **env: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        argv = serve_argv(model, "--host", "127.0.0.1", "--port", str(self.port),
                          "--api-key", ENGINE_KEY, "--served-model-name", *names,
                          "--max-model-len", "4096")  # fmt: skip
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("BERTH_SIM_")}
        self.proc = subprocess.Popen(argv, cwd=ROOT, env={**inherited, **FAST, **env},
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)  # fmt: skip

    def healthy(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"the engine on port {self.port} exited {self.proc.returncode}")
        try:
            return httpx.get(f"{self.base}/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def metric(self, name: str) -> float:
        text = httpx.get(f"{self.base}/metrics", timeout=5).text
        found = re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)
        return sum(float(value) for value in found)

    def finished(self) -> int:
        """Requests the engine has ended (answered or aborted) since it started."""
        return int(self.metric("vllm:e2e_request_latency_seconds_count"))

    def running(self) -> int:
        return int(self.metric("vllm:num_requests_running"))


def serving_engines(**specs: tuple[str, list[str], dict[str, str]]) -> dict[str, Engine]:
    engines = {key: Engine(model, names, **env) for key, (model, names, env) in specs.items()}
    try:
        for engine in engines.values():
            wait_for(engine.healthy, 30, 0.1, f"the engine on port {engine.port}")
    except BaseException:
        for engine in engines.values():
            engine.kill()
        raise
    return engines


@pytest.fixture(scope="module")
def engines() -> Iterator[dict[str, Engine]]:
    """Three fast chat engines, an embedding model, and one that starts its replies after 11 s,
    just past the servers' default reply wait."""
    qwen = "Qwen/Qwen3-0.6B"
    started = serving_engines(
        a=(qwen, NAMES["a"], {}),
        b=(qwen, NAMES["b"], {}),
        c=(qwen, NAMES["c"], {}),
        embed=("BAAI/bge-m3", ["red-embed"], build_env(model_json=BGE_M3)),
        slow=(qwen, NAMES["slow"], build_env(ttft_s=DEFAULT_WAIT_S + 1.0)),
    )
    yield started
    for engine in started.values():
        engine.kill()


def database_url() -> str:
    s = connection.settings_dict
    return f"postgresql://{s['USER']}:{s['PASSWORD']}@{s['HOST']}:{s['PORT']}/{s['NAME']}"


def start_server(argv: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    argv = [a.replace("PORT", str(port)) for a in argv]
    process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    return process, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def servers(django_db_setup, django_db_blocker) -> Iterator[dict[str, str]]:
    """The gateway as the Procfile runs it, and the console (daphne) for /metrics and the chat,
    both on the test database, re-reading the table every 0.2 s and flushing figures at 0.5 s."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "BERTH_REPLY_WAIT_S": str(DEFAULT_WAIT_S),
        "BERTH_GATEWAY_REFRESH_S": "0.2",
        "BERTH_GATEWAY_FLUSH_S": "0.5",
        "BERTH_GATEWAY_PORT": "8001",
    }
    python = sys.executable
    started = {
        "gateway": start_server([python, "-m", "uvicorn", "gateway.asgi:application", "--host",
                                 "127.0.0.1", "--port", "PORT", "--no-access-log"], env),
        "console": start_server([python, "-m", "daphne", "-b", "127.0.0.1", "-p", "PORT",
                                 "console.asgi:application"], env),
    }  # fmt: skip
    try:
        for process, url in started.values():
            wait_for(lambda u=url, p=process: up(u, p), 60, 0.2, f"the server at {url}")
        yield {name: url for name, (_process, url) in started.items()}
    finally:
        for process, _url in started.values():
            os.killpg(process.pid, signal.SIGTERM)
        for process, _url in started.values():
            process.wait(timeout=20)


def up(url: str, process: subprocess.Popen[bytes]) -> bool:
    if process.poll() is not None:
        raise AssertionError(f"the server for {url} exited with {process.returncode}")
    try:
        # The console's /health is 503 while its background processes are not running.
        return httpx.get(f"{url}/health", timeout=2).status_code in (200, 503)
    except httpx.HTTPError:
        return False


@pytest.fixture
def gateway_url(servers) -> str:
    return servers["gateway"]


@pytest.fixture
def console_url(servers) -> str:
    return servers["console"]


# ---------------------------------------------------------------- rows and clients


def key_for(user) -> str:
    return ApiKey.issue(user, "tests")[1]


def serving(deployment: Deployment, *ports: int) -> Deployment:
    """READY copies at these ports and the deployment DEPLOYED, as the lifecycle leaves them."""
    for ordinal, port in enumerate(ports):
        ready_copy(deployment, ordinal, port)
    transitions.move_deployment(deployment.pk, DeploymentState.DEPLOYED, message="serves")
    return Deployment.objects.get(pk=deployment.pk)


def ready_copy(deployment: Deployment, ordinal: int, port: int) -> Copy:
    copy = factories.make_copy(deployment, ordinal)
    copy.port = port
    copy.set_engine_api_key(ENGINE_KEY)
    copy.save()
    for state in (CopyState.COPYING_FILES, CopyState.STARTING, CopyState.READY):
        transitions.move_copy(copy.pk, state)
    return copy


def stopped(deployment: Deployment) -> Deployment:
    transitions.move_deployment(deployment.pk, DeploymentState.STOPPING)
    transitions.move_deployment(deployment.pk, DeploymentState.STOPPED)
    return deployment


def client(gateway_url: str, key: str, timeout: float = 30) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=key, max_retries=0, timeout=timeout)


def on_offer(gateway_url: str, key: str, *names: str) -> None:
    """Wait until the gateway's table has caught up with the rows this test wrote."""

    def listed() -> bool:
        return set(names) <= {m.id for m in client(gateway_url, key).models.list()}

    wait_for(listed, 10, 0.1, f"{', '.join(names)} on offer")


def post(url: str, key: str | None, body: object) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(url, content=content, headers=headers, timeout=30)


def chat(gateway_url: str, key: str, model: str, **fields) -> httpx.Response:
    body = {"model": model, "messages": HELLO, "max_tokens": 4, **fields}
    return post(f"{gateway_url}/v1/chat/completions", key, body)


def error_of(response: httpx.Response) -> str:
    return response.json()["error"]["message"]


# ---------------------------------------------------------------- the openai client


def test_the_openai_client_chats_streams_completes_embeds_and_lists_models(
    gateway_url, engines, bob, red
):
    serving(factories.make_deployment("red-qwen", red, chat_name="qwen"), engines["a"].port)
    serving(factories.make_deployment("red-embed", red), engines["embed"].port)
    key = key_for(bob)
    on_offer(gateway_url, key, "qwen", "red-qwen", "red-embed")
    openai_client = client(gateway_url, key)

    reply = openai_client.chat.completions.create(model="qwen", messages=HELLO, max_tokens=5)
    assert reply.choices[0].message.content and reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == 5 and reply.usage.prompt_tokens > 0

    chunks = list(
        openai_client.chat.completions.create(model="red-qwen", messages=HELLO, stream=True)
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(chunks) > 5 and text and chunks[-1].choices[0].finish_reason == "stop"

    completion = openai_client.completions.create(model="qwen", prompt="Once upon", max_tokens=4)
    assert completion.choices[0].text and completion.usage.completion_tokens == 4

    vectors = openai_client.embeddings.create(model="red-embed", input=["one", "two"])
    assert [len(v.embedding) for v in vectors.data] == [1024, 1024]

    listed = {model.id: model.owned_by for model in openai_client.models.list()}
    assert listed == {"qwen": "red", "red-qwen": "red", "red-embed": "red"}


def test_the_engines_own_key_stays_between_the_gateway_and_the_copy(gateway_url, engines, bob, red):
    serving(factories.make_deployment("red-qwen", red), engines["a"].port)
    key = key_for(bob)
    on_offer(gateway_url, key, "red-qwen")
    response = chat(gateway_url, key, "red-qwen")
    assert response.status_code == 200
    assert ENGINE_KEY not in response.text and ENGINE_KEY not in str(response.headers)
    # The copy itself refuses the console user's key: only the gateway can reach it.
    assert chat(engines["a"].base, key, "red-qwen").status_code == 401


# ---------------------------------------------------------------- routing


def test_a_chat_name_two_of_the_callers_teams_offer_is_refused_naming_both(
    gateway_url, engines, bob, carol, red, blue
):
    serving(factories.make_deployment("red-qwen", red, chat_name="qwen"), engines["a"].port)
    serving(factories.make_deployment("blue-qwen", blue, chat_name="qwen"), engines["b"].port)
    both = key_for(bob)  # red and blue
    on_offer(gateway_url, both, "red-qwen", "blue-qwen")
    assert "qwen" not in {m.id for m in client(gateway_url, both).models.list()}
    refused = chat(gateway_url, both, "qwen")
    assert refused.status_code == 409
    assert error_of(refused) == (
        "The chat name qwen is offered by more than one of your teams (blue: blue-qwen; red: "
        "red-qwen). Ask for a deployment by its name instead, or have one team choose another "
        "chat name."
    )
    assert chat(gateway_url, both, "red-qwen").status_code == 200
    only_red = key_for(carol)  # the chat name means red's deployment to her, never blue's
    before = engines["b"].finished()
    assert all(chat(gateway_url, only_red, "qwen").status_code == 200 for _ in range(4))
    assert engines["b"].finished() == before


def test_deployments_sharing_a_chat_name_share_the_traffic_and_a_stopped_one_gets_none(
    gateway_url, engines, bob, red
):
    serving(factories.make_deployment("red-qwen-a", red, chat_name="shared"), engines["a"].port)
    serving(factories.make_deployment("red-qwen-b", red, chat_name="shared"), engines["b"].port)
    resting = serving(
        factories.make_deployment("red-qwen-stopped", red, chat_name="shared"), engines["c"].port
    )
    stopped(resting)  # its copy still says READY: a stopped deployment gets no traffic anyway
    key = key_for(bob)
    on_offer(gateway_url, key, "shared", "red-qwen-a", "red-qwen-b")
    before = {name: engines[name].finished() for name in "abc"}

    with ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(lambda _: chat(gateway_url, key, "shared"), range(24)))

    assert [r.status_code for r in replies] == [200] * 24
    served = {name: engines[name].finished() - before[name] for name in "abc"}
    assert served["a"] > 0 and served["b"] > 0 and served["a"] + served["b"] == 24
    assert served["c"] == 0
    refused = chat(gateway_url, key, "red-qwen-stopped")
    assert refused.status_code == 503
    assert error_of(refused) == (
        "No copy of red-qwen-stopped is ready to serve: red-qwen-stopped is stopped. "
        "Try again later."
    )


def test_requests_go_to_the_copy_with_fewest_in_flight_and_ties_are_drawn_at_random():
    upstreams = tuple(Upstream(i, 1, f"http://127.0.0.1:{i}", {}) for i in (1, 2, 3))
    route = Route(1, "d", 1, "red", 0, "", "DEPLOYED", "d", 180, upstreams)
    picker = Picker()
    picker.start(upstreams[0])
    picker.start(upstreams[1])
    assert {picker.choose([route], set())[1].copy_id for _ in range(50)} == {3}
    picker.start(upstreams[2])
    assert {picker.choose([route], set())[1].copy_id for _ in range(200)} == {1, 2, 3}
    picker.set_aside(upstreams[0])
    assert {picker.choose([route], set())[1].copy_id for _ in range(100)} == {2, 3}
    assert picker.choose([route], {1, 2, 3}) is None


@pytest.fixture
def pair() -> Iterator[dict[str, Engine]]:
    """Two copies of one deployment whose replies take a few seconds (20 tokens/s)."""
    slow_tokens = build_env(tokens_per_second=20, reply_tokens=100)
    started = serving_engines(
        one=("Qwen/Qwen3-0.6B", ["red-pair"], slow_tokens),
        two=("Qwen/Qwen3-0.6B", ["red-pair"], slow_tokens),
    )
    yield started
    for engine in started.values():
        engine.kill()


def read_stream(openai_client: openai.OpenAI, first: threading.Event) -> str:
    """Read a streamed reply: its text, or the error that ended it."""
    pieces = []
    try:
        for chunk in openai_client.chat.completions.create(
            model="red-pair", messages=HELLO, stream=True
        ):
            first.set()
            pieces += [choice.delta.content or "" for choice in chunk.choices]
        return "".join(pieces)
    except openai.APIError as error:
        return f"broke off: {error.message}"
    finally:
        first.set()


def test_a_copy_killed_mid_stream_has_its_streams_continued_whole_at_the_other(
    gateway_url, pair, bob, red
):
    deployment = serving(
        factories.make_deployment("red-pair", red), pair["one"].port, pair["two"].port
    )
    key = key_for(bob)
    on_offer(gateway_url, key, "red-pair")
    openai_client = client(gateway_url, key)
    firsts = [threading.Event() for _ in range(6)]
    with ThreadPoolExecutor(6) as pool:
        streams = [pool.submit(read_stream, openai_client, first) for first in firsts]
        assert all(first.wait(20) for first in firsts)
        on_one, on_two = pair["one"].running(), pair["two"].running()
        assert (on_one, on_two) == (3, 3)  # fewest in flight: the six spread evenly
        pair["one"].kill()
        endings = [stream.result(timeout=30) for stream in streams]

    # Every stream has the whole answer, once: the 100 words the engines generate, the broken
    # ones' rest generated at the other copy from the words already sent.
    assert endings == [filler_text(100)] * 6
    assert pair["two"].finished() == 3 + 3  # its own three, and the three it continued
    said = wait_for(
        lambda: list(deployment.events.filter(message__contains="continued it")), 10, 0.2,
        "the continuations' events",
    )  # fmt: skip
    assert len(said) == 3 and all(
        re.fullmatch(r"A stream broke off at copy 0 after \d+ tokens \(.+\); copy 1 continued it\.",
                     event.message) for event in said
    )  # fmt: skip
    # The records are written in batches a second apart: wait for all six streams' records.
    records = wait_for(
        lambda: (rows := list(UsageRecord.objects.filter(deployment=deployment))) and
        len(rows) >= 6 and rows, 10, 0.2, "the six streams' usage records",
    )  # fmt: skip
    assert sorted((r.status, r.completion_tokens) for r in records) == [(200, 100)] * 6
    replies = [chat(gateway_url, key, "red-pair") for _ in range(5)]
    assert [r.status_code for r in replies] == [200] * 5
    assert pair["two"].finished() == 6 + 5


def test_a_reply_not_streamed_is_asked_again_whole_when_its_copy_dies(gateway_url, pair, bob, red):
    serving(factories.make_deployment("red-pair", red), pair["one"].port, pair["two"].port)
    key = key_for(bob)
    on_offer(gateway_url, key, "red-pair")
    with ThreadPoolExecutor(4) as pool:
        replies = [
            pool.submit(chat, gateway_url, key, "red-pair", max_tokens=100) for _ in range(4)
        ]
        wait_for(lambda: (pair["one"].running(), pair["two"].running()) == (2, 2), 20, 0.05,
                 "two requests at each copy")  # fmt: skip
        pair["one"].kill()
        answered = [reply.result(timeout=30) for reply in replies]
    assert [r.status_code for r in answered] == [200] * 4
    assert [r.json()["choices"][0]["message"]["content"] for r in answered] == [
        filler_text(100)
    ] * 4
    assert pair["two"].finished() == 2 + 2


# ---------------------------------------------------------------- the reply wait


def test_past_the_reply_wait_a_request_fails_with_504_and_a_deployments_own_wait_wins(
    gateway_url, engines, bob, red
):
    # The engine starts each reply after 11 s: past the default of 10 s, within the own 30 s.
    serving(factories.make_deployment("red-slow-default", red), engines["slow"].port)
    patient = factories.make_deployment("red-slow-patient", red, reply_wait_s=30)
    serving(patient, engines["slow"].port)
    key = key_for(bob)
    on_offer(gateway_url, key, "red-slow-default", "red-slow-patient")

    began = time.monotonic()
    with ThreadPoolExecutor(3) as pool:
        impatient = pool.submit(chat, gateway_url, key, "red-slow-default")
        streamed = pool.submit(chat, gateway_url, key, "red-slow-default", stream=True)
        waited = pool.submit(chat, gateway_url, key, "red-slow-patient")
        timed_out = impatient.result()
        waited_for = time.monotonic() - began
        results = [timed_out, streamed.result(), waited.result()]

    for response in results[:2]:
        assert response.status_code == 504
        assert response.json()["error"] == {
            "message": REPLY_WAIT_PASSED.format(DEFAULT_WAIT_S),
            "type": "timeout",
            "param": None,
            "code": 504,
        }
    assert DEFAULT_WAIT_S - 0.5 < waited_for < DEFAULT_WAIT_S + 3
    assert results[2].status_code == 200 and results[2].json()["choices"][0]["message"]["content"]
    # Giving up closes the request at the copy too, so it stops waiting for room there.
    wait_for(lambda: engines["slow"].running() == 0, 5, 0.1, "the abandoned requests to end")


# ---------------------------------------------------------------- errors a client can act on


def test_missing_bad_and_revoked_keys_get_401(gateway_url, bob):
    url = f"{gateway_url}/v1/chat/completions"
    body = {"model": "qwen", "messages": HELLO}
    assert post(url, None, body).status_code == 401
    assert error_of(post(url, None, body)) == (
        "Authentication required: send Authorization: Bearer <API key>."
    )
    made_up = post(url, "berth_not-a-key-anyone-was-given", body)
    assert made_up.status_code == 401
    assert error_of(made_up) == keys.NOT_VALID
    key, secret = ApiKey.issue(bob, "old")
    ApiKey.objects.filter(pk=key.pk).update(revoked_at=timezone.now())
    assert post(url, secret, body).status_code == 401
    assert httpx.get(f"{gateway_url}/v1/models", timeout=5).status_code == 401


def test_bodies_that_are_not_json_or_lack_a_model_get_400(gateway_url, bob):
    key = key_for(bob)
    url = f"{gateway_url}/v1/chat/completions"
    not_json = post(url, key, b"{model: qwen")
    assert not_json.status_code == 400
    assert error_of(not_json).startswith("The request body is not JSON: ")
    for body in ({"messages": HELLO}, [1, 2], {"model": ""}, {"model": 7}):
        lacking = post(url, key, body)
        assert lacking.status_code == 400
        assert error_of(lacking) == (
            'The request body must be a JSON object with a "model": a chat name or a deployment.'
        )


def test_an_unknown_name_gets_404_with_the_names_on_offer_to_that_caller(
    gateway_url, engines, bob, dave, red, blue
):
    serving(factories.make_deployment("red-qwen", red, chat_name="qwen"), engines["a"].port)
    serving(factories.make_deployment("blue-qwen", blue), engines["a"].port)
    key = key_for(bob)
    on_offer(gateway_url, key, "qwen", "red-qwen", "blue-qwen")
    unknown = chat(gateway_url, key, "gpt-4")
    assert unknown.status_code == 404
    assert error_of(unknown) == (
        "There is no model named 'gpt-4' on offer to you. On offer: qwen, blue-qwen, red-qwen."
    )
    # Someone outside the team is not told the team's deployments exist.
    outsider = chat(gateway_url, key_for(dave), "red-qwen")
    assert outsider.status_code == 404
    assert (
        error_of(outsider) == "There is no model named 'red-qwen' on offer to you. On offer: none."
    )


def test_a_deployment_with_no_ready_copy_gets_503_saying_its_state(gateway_url, bob, red):
    booting = factories.make_deployment("red-booting", red)
    transitions.move_deployment(booting.pk, DeploymentState.DEPLOYING)
    key = key_for(bob)
    wait_for(lambda: chat(gateway_url, key, "red-booting").status_code == 503, 10, 0.1, "503")
    assert error_of(chat(gateway_url, key, "red-booting")) == (
        "No copy of red-booting is ready to serve: red-booting is deploying. Try again later."
    )


def test_a_copy_that_cannot_be_reached_is_skipped_for_another_and_alone_gets_503(
    gateway_url, engines, bob, red
):
    serving(factories.make_deployment("red-qwen", red), free_port(), engines["a"].port)
    serving(factories.make_deployment("red-qwen-b", red), free_port())  # nothing listens
    key = key_for(bob)
    on_offer(gateway_url, key, "red-qwen", "red-qwen-b")
    before = engines["a"].finished()
    replies = [chat(gateway_url, key, "red-qwen") for _ in range(8)]
    assert [r.status_code for r in replies] == [200] * 8
    assert engines["a"].finished() - before == 8
    alone = chat(gateway_url, key, "red-qwen-b")
    assert alone.status_code == 503
    assert error_of(alone) == "No copy of red-qwen-b could be reached just now. Try again shortly."


def test_the_engines_own_error_responses_pass_through_unchanged(gateway_url, engines, bob, red):
    serving(factories.make_deployment("red-qwen", red), engines["a"].port)
    key = key_for(bob)
    on_offer(gateway_url, key, "red-qwen")
    too_long = {"max_tokens": 100_000}
    through = chat(gateway_url, key, "red-qwen", **too_long)
    direct = chat(engines["a"].base, ENGINE_KEY, "red-qwen", **too_long)
    assert through.status_code == direct.status_code == 400
    assert through.json() == direct.json()
    assert "'max_tokens' or 'max_completion_tokens' is too large: 100000." in error_of(through)


def test_unknown_paths_and_methods_are_refused(gateway_url, bob):
    key = key_for(bob)
    headers = {"Authorization": f"Bearer {key}"}
    assert httpx.get(f"{gateway_url}/v1/chat/completions", headers=headers).status_code == 405
    assert httpx.post(f"{gateway_url}/v1/images", headers=headers).status_code == 404


def test_a_viewers_key_may_chat_but_cannot_change_anything(
    gateway_url, console_url, engines, carol, red
):
    deployment = serving(factories.make_deployment("red-qwen", red), engines["a"].port)
    key = key_for(carol)
    on_offer(gateway_url, key, "red-qwen")
    assert chat(gateway_url, key, "red-qwen").status_code == 200
    stop = post(f"{console_url}/api/v1/deployments/{deployment.pk}/stop", key, {})
    assert stop.status_code == 403
    assert Deployment.objects.get(pk=deployment.pk).state == DeploymentState.DEPLOYED


def test_a_client_that_disconnects_cancels_the_request_at_the_copy(gateway_url, engines, bob, red):
    serving(factories.make_deployment("red-qwen", red), engines["a"].port)
    key = key_for(bob)
    on_offer(gateway_url, key, "red-qwen")
    body = {"model": "red-qwen", "messages": HELLO, "stream": True, "max_tokens": 2000,
            "ignore_eos": True}  # fmt: skip
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.stream("POST", f"{gateway_url}/v1/chat/completions", json=body,
                      headers=headers, timeout=10) as response:  # fmt: skip
        assert response.status_code == 200
        pieces = response.iter_raw()  # kept: a dropped iterator would close the response
        next(pieces)
        assert engines["a"].running() == 1
    wait_for(lambda: engines["a"].running() == 0, 5, 0.1, "the copy to drop the request")


def test_a_client_that_leaves_before_the_first_token_ends_the_request_at_once(
    gateway_url, engines, bob, red
):
    serving(
        factories.make_deployment("red-slow-patient", red, reply_wait_s=30), engines["slow"].port
    )
    key = key_for(bob)
    on_offer(gateway_url, key, "red-slow-patient")
    body = {"model": "red-slow-patient", "messages": HELLO, "stream": True}
    with pytest.raises(httpx.ReadTimeout):  # the client gives up after 1 s of silence
        httpx.post(f"{gateway_url}/v1/chat/completions", json=body,
                   headers={"Authorization": f"Bearer {key}"}, timeout=1)  # fmt: skip

    def ended() -> bool:  # counted as soon as the gateway let go, long before the first token
        rows = MinuteFigures.objects.filter(deployment_name="red-slow-patient")
        return sum(r.requests for r in rows) == 1 and not any(r.ttft_count for r in rows)

    wait_for(ended, 5, 0.1, "the gateway to end the request")


# ---------------------------------------------------------------- figures and /metrics


def test_each_minute_is_flushed_as_figures_and_exported_on_the_consoles_metrics(
    gateway_url, console_url, engines, bob, dave, alice, red
):
    serving(factories.make_deployment("red-counted", red), engines["a"].port)
    key = key_for(bob)
    on_offer(gateway_url, key, "red-counted")
    for stream in (False, False, True, True):
        assert chat(gateway_url, key, "red-counted", max_tokens=8, stream=stream).status_code == 200

    def flushed() -> MinuteFigures | None:
        rows = MinuteFigures.objects.filter(deployment_name="red-counted")
        return rows.first() if sum(r.requests for r in rows) == 4 else None

    row = wait_for(flushed, 10, 0.2, "the figures in the database")
    rows = MinuteFigures.objects.filter(deployment_name="red-counted")  # may straddle a minute
    assert row.deployment.name == "red-counted"
    assert sum(r.failures for r in rows) == 0 and sum(r.ttft_count for r in rows) == 4
    assert 0 < sum(r.ttft_sum_s for r in rows) < 4 and sum(r.latency_count for r in rows) == 4
    assert sum(r.generated_tokens for r in rows) == 4 * 8 and row.generation_s > 0

    scraped = httpx.get(f"{console_url}/metrics", headers={"Authorization": f"Bearer {key}"})
    assert scraped.status_code == 200
    assert 'berth_gateway_requests_total{deployment="red-counted"} 4' in scraped.text
    assert 'berth_gateway_generated_tokens_total{deployment="red-counted"} 32' in scraped.text
    assert 'berth_gateway_ready_copies{deployment="red-counted"} 1' in scraped.text
    outsider = httpx.get(
        f"{console_url}/metrics", headers={"Authorization": f"Bearer {key_for(dave)}"}
    )
    assert outsider.status_code == 200 and "red-counted" not in outsider.text
    assert httpx.get(f"{console_url}/metrics").status_code == 401
    assert scrape_as(console_url, alice).status_code == 200
    assert "red-counted" in scrape_as(console_url, alice).text
    assert scrape_as(console_url, bob).status_code == 403


# (stream, what else the client sends, prompt tokens, completion tokens, usage in the reply):
# the simulator counts "Hello" as 8 prompt tokens (its chat template's 7 and one word); the
# gateway asks for the usage of a stream whose client did not, and leaves it out of the reply.
METERED = [
    (False, {}, 8, 6, True),
    (True, {"stream_options": {"include_usage": True}}, 8, 5, True),
    (True, {}, 8, 4, False),
]


def test_each_chat_is_recorded_with_its_tokens_key_and_team_within_a_second(
    gateway_url, engines, bob, red
):
    deployment = serving(factories.make_deployment("red-metered", red), engines["a"].port)
    copy = deployment.copies.get()
    key, secret = ApiKey.issue(bob, "metered")
    on_offer(gateway_url, secret, "red-metered")
    for stream, extra, prompt, completion, usage_shown in METERED:
        reply = chat(
            gateway_url, secret, "red-metered", max_tokens=completion, stream=stream, **extra
        )
        assert reply.status_code == 200
        answered = time.monotonic()
        assert ('"usage"' in reply.text) is usage_shown

        def written(completion: int = completion) -> UsageRecord | None:
            rows = UsageRecord.objects.filter(deployment=deployment, completion_tokens=completion)
            return rows.first()

        row = wait_for(written, 5, 0.02, f"the usage record of a {completion}-token reply")
        assert time.monotonic() - answered < 1.5  # a batch is written at most a second later
        assert (row.api_key_id, row.user_id, row.team_id, row.copy_id) == (
            key.pk, bob.pk, red.pk, copy.pk
        )  # fmt: skip
        assert (row.model, row.deployment_name, row.status) == ("red-metered", "red-metered", 200)
        assert row.prompt_tokens == prompt
        assert 0 < row.ttft_s <= row.duration_s
    # The engine's own refusal is recorded with its status, and no tokens.
    assert chat(gateway_url, secret, "red-metered", max_tokens=100_000).status_code == 400

    def refused() -> UsageRecord | None:
        return UsageRecord.objects.filter(deployment=deployment, status=400).first()

    row = wait_for(refused, 5, 0.02, "the usage record of the refused request")
    assert (row.prompt_tokens, row.completion_tokens, row.ttft_s) == (None, 0, None)
    assert UsageRecord.objects.filter(deployment=deployment).count() == 4


def test_an_embedding_is_recorded_with_the_prompt_tokens_its_engine_counted(
    gateway_url, engines, bob, red
):
    deployment = serving(factories.make_deployment("red-embed", red), engines["embed"].port)
    secret = key_for(bob)
    on_offer(gateway_url, secret, "red-embed")
    body = {"model": "red-embed", "input": ["one two three", "four five"]}
    answered = post(f"{gateway_url}/v1/embeddings", secret, body)
    assert answered.status_code == 200
    assert answered.json()["usage"]["prompt_tokens"] == 5
    row = wait_for(
        lambda: UsageRecord.objects.filter(deployment=deployment).first(), 5, 0.02,
        "the embedding's usage record",
    )  # fmt: skip
    assert (row.prompt_tokens, row.completion_tokens, row.status) == (5, 0, 200)


def test_a_gateway_that_stops_writes_the_usage_records_it_holds(servers, engines, bob, red):
    """A gateway that would write its records only once an hour still writes them as it stops."""
    deployment = serving(factories.make_deployment("red-metered", red), engines["a"].port)
    env = {**os.environ, "DATABASE_URL": database_url(), "BERTH_GATEWAY_REFRESH_S": "0.2",
           "BERTH_GATEWAY_USAGE_FLUSH_S": "3600"}  # fmt: skip
    argv = [sys.executable, "-m", "uvicorn", "gateway.asgi:application", "--port", "PORT"]
    process, url = start_server(argv, env)
    try:
        wait_for(lambda: up(url, process), 60, 0.2, "the second gateway")
        key = key_for(bob)
        on_offer(url, key, "red-metered")
        assert chat(url, key, "red-metered", max_tokens=3).status_code == 200
        assert not UsageRecord.objects.filter(deployment=deployment).exists()
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
    assert UsageRecord.objects.filter(deployment=deployment).get().completion_tokens == 3


def scrape_as(console_url: str, user) -> httpx.Response:
    return httpx.get(f"{console_url}/metrics", cookies=session_of(user))


def session_of(user) -> dict[str, str]:
    browser = Client()
    browser.force_login(user)
    return {"sessionid": browser.cookies["sessionid"].value}


# ---------------------------------------------------------------- the chat page


def test_the_chat_page_lists_only_the_chat_names_the_users_teams_offer(
    engines, bob, dave, red, blue, as_bob, as_dave
):
    serving(factories.make_deployment("red-qwen", red, chat_name="qwen"), engines["a"].port)
    serving(factories.make_deployment("red-qwen-b", red), engines["b"].port)  # endpoint only
    factories.make_deployment("blue-qwen", blue, chat_name="not-yet")  # no copy serves
    page = as_bob.get("/chat/").content.decode()
    assert re.findall(r'<option value="([^"]+)"', page) == ["qwen"]
    assert "red-qwen-b" not in page and "not-yet" not in page
    assert "No model is offered in chat yet." in as_dave.get("/chat/").content.decode()


def logged_in_browser(console_url: str, user) -> tuple[httpx.Client, str]:
    browser = httpx.Client(base_url=console_url, cookies=session_of(user), timeout=30)
    page = browser.get("/chat/").text
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    return browser, token


def test_without_javascript_the_form_posts_one_message_and_shows_the_reply(
    console_url, engines, bob, red
):
    serving(factories.make_deployment("red-qwen", red, chat_name="qwen"), engines["a"].port)
    browser, token = logged_in_browser(console_url, bob)
    form = {"csrfmiddlewaretoken": token, "model": "qwen", "message": "Hello there"}
    page = browser.post("/chat/", data=form).text
    assert "Hello there" in page
    answer = re.search(
        r'<article class="turn turn-assistant" id="answer">\s*<strong>qwen</strong>\s*<p>(.+?)</p>',
        page,
    )
    assert answer and answer.group(1).strip()


def test_the_chat_streams_replies_under_the_session_with_csrf_and_no_api_key(
    console_url, engines, bob, dave, red
):
    serving(factories.make_deployment("red-qwen", red, chat_name="qwen"), engines["a"].port)
    browser, token = logged_in_browser(console_url, bob)
    body = {"model": "qwen", "messages": HELLO}
    with browser.stream("POST", "/chat/send", json=body, headers={"X-CSRFToken": token}) as reply:
        assert reply.status_code == 200
        assert reply.headers["content-type"] == "text/event-stream"
        events = b"".join(reply.iter_raw()).split(b"\n\n")
    payloads = [e.removeprefix(b"data: ") for e in events if e]
    assert payloads[-1] == b"[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert chunks[-1]["usage"]["completion_tokens"] > 0
    assert browser.post("/chat/send", json=body).status_code == 403  # no CSRF token
    outsider, outsider_token = logged_in_browser(console_url, dave)
    refused = outsider.post("/chat/send", json=body, headers={"X-CSRFToken": outsider_token})
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == "'qwen' is not offered in chat to you."


# ---------------------------------------------------------------- the deployment page's partials


def render_partial(name: str, deployment: Deployment, operates_team: bool = True) -> str:
    request = RequestFactory().get(f"/deployments/{deployment.pk}/")
    request.user = deployment.created_by or AnonymousUser()
    context = {"deployment": deployment, "request": request, "operates_team": operates_team}
    return render_to_string(f"deployments/{name}.html", context, request=request)


def test_the_endpoints_partial_shows_the_address_and_names_once_a_copy_serves(red):
    deployment = factories.make_deployment("red-qwen", red, chat_name="qwen")
    assert "The address appears here once the first copy serves." in render_partial(
        "_endpoints", deployment
    )
    serving(deployment, 9)
    shown = render_partial("_endpoints", deployment)
    assert '<code id="gateway-address">http://testserver:8001/v1</code>' in shown
    assert re.findall(r'<code class="endpoint-name">([^<]+)</code>', shown) == ["red-qwen", "qwen"]
    assert "curl http://testserver:8001/v1/chat/completions" in shown
    assert (
        "Gateway limits: Request bodies up to 8 MiB; per API key, up to 256 requests at once and "
        "6000 a minute."
    ) in shown
    assert (
        "Authorization: Bearer $BERTH_API_KEY" in shown
        and "&quot;model&quot;: &quot;qwen&quot;" in shown
    )


def minute_row(deployment: Deployment, minutes_ago: int, **figures) -> MinuteFigures:
    minute = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=minutes_ago)
    return MinuteFigures.objects.create(
        deployment=deployment, deployment_name=deployment.name, minute=minute, **figures
    )


def test_the_figures_partial_shows_the_last_minutes_and_advises_room_when_replies_time_out(red):
    # A name no other test routes traffic to: the gateway process flushes figures by name,
    # and a late flush from an earlier test must not land in this one.
    deployment = factories.make_deployment("figures-only", red)
    assert "No requests through the gateway in the last 15 minutes." in render_partial(
        "_gateway_figures", deployment
    )
    minute_row(
        deployment,
        1,
        requests=10,
        failures=1,
        ttft_sum_s=2.0,
        ttft_count=9,
        latency_sum_s=27.0,
        latency_count=9,
        generated_tokens=900,
        generation_s=20.0,
    )
    minute_row(deployment, 40, requests=1000)  # outside the window
    shown = render_partial("_gateway_figures", deployment)
    values = dict(re.findall(r"<small>([^<]+)</small><strong>([^<]+)</strong>", shown))
    assert values == {
        "Requests": "10",
        "Generation speed": "45.0 tokens/s",
        "Time to first token": "222 ms",
        "Request latency": "3.00 s",
        "Failed": "1 (10%)",
    }
    assert shown.count("<polyline") == 5 and "Replies time out often" not in shown

    minute_row(deployment, 0, requests=10, failures=4, timeouts=4)
    advised = render_partial("_gateway_figures", deployment)
    assert (
        "4 of 20 requests in the last 15 minutes did not start their reply within the reply "
        "wait. The model needs more room rather than more patience: more copies, or more "
        "memory per copy."
    ) in " ".join(advised.split())
    assert f'<a href="/deployments/{deployment.pk}/scale/dialog/">Scale</a>' in advised
    viewer = render_partial("_gateway_figures", deployment, operates_team=False)
    assert "An operator of its team can scale it." in viewer and "/scale/" not in viewer


# ---------------------------------------------------------------- pieces on their own


def test_a_role_only_opening_chunk_is_not_the_first_token():
    role = b'{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}'
    token = b'{"choices":[{"index":0,"delta":{"content":"Hi"}}]}'
    finish = b'{"choices":[{"index":0,"text":"","finish_reason":"length"}]}'
    assert not sse.starts_reply(role)
    assert sse.starts_reply(token) and sse.starts_reply(finish) and sse.starts_reply(b"[DONE]")
    events, rest = sse.split_events(b"data: " + role + b"\n\ndata: " + token + b"\n\ndata: {")
    assert events == [role, token] and rest == b"data: {"


def test_a_streamed_reply_is_reassembled_with_its_tool_calls_and_usage():
    chunks = [
        {
            "id": "c1",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
        },
        {
            "id": "c1",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "t1",
                                "function": {"name": "get", "arguments": '{"a"'},
                            }
                        ]
                    },
                }
            ],
        },
        {
            "id": "c1",
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]},
                    "finish_reason": "tool_calls",
                }
            ],
        },
        {
            "id": "c1",
            "choices": [],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        },
    ]
    reassembly = Reassembly(chat=True)
    for chunk in chunks:
        reassembly.feed(json.dumps(chunk).encode())
    reply = json.loads(reassembly.body())
    assert reply["object"] == "chat.completion" and reply["id"] == "c1"
    assert reply["choices"][0]["message"] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "get", "arguments": '{"a": 1}'}}
        ],
    }
    assert reply["choices"][0]["finish_reason"] == "tool_calls"
    assert reply["usage"]["completion_tokens"] == 2 == reassembly.completion_tokens()


def test_a_callers_teams_decide_what_a_name_means():
    upstream = (Upstream(1, 1, "http://127.0.0.1:1", {}),)
    red = Route(1, "red-qwen", 1, "red", 0, "qwen", "DEPLOYED", "red-qwen", 180, upstream)
    blue = Route(2, "blue-qwen", 2, "blue", 0, "qwen", "DEPLOYED", "blue-qwen", 180, upstream)
    table = Table.of([red, blue])
    bob = Caller(1, "bob", False, frozenset({1}))
    assert table.resolve("qwen", bob) == [red] and table.resolve("blue-qwen", bob) is None
    assert table.on_offer(bob) == ["qwen", "red-qwen"]
    alice = Caller(2, "alice", True, frozenset())  # staff: every team's, so two of them here
    with pytest.raises(GatewayError) as refused:
        table.resolve("qwen", alice)
    assert refused.value.status == 409
    assert table.on_offer(alice) == ["blue-qwen", "red-qwen"]


# ---------------------------------------------------------------- end to end


@pytest.mark.usefixtures("catalog")
def test_a_model_hosted_through_the_console_answers_at_the_gateway_by_its_chat_name(
    gateway_url, tmp_path, bob, red
):
    with console_processes(tmp_path):
        cluster = simulated_cluster("gw", gpus=1, BERTH_SIM_TTFT_S="0.02")
        deployment = host(bob, red, cluster, "red-hosted", chat_name="hosted",
                          engine_settings={"max_model_len": 4096})  # fmt: skip
        wait_for(
            lambda: Deployment.objects.get(pk=deployment.pk).state == DeploymentState.DEPLOYED,
            90,
            what="DEPLOYED",
        )
        key = key_for(bob)
        on_offer(gateway_url, key, "hosted", "red-hosted")
        reply = client(gateway_url, key).chat.completions.create(
            model="hosted", messages=HELLO, max_tokens=3
        )
        assert reply.choices[0].message.content and reply.usage.completion_tokens == 3


# ---------------------------------------------------------------- key scopes and access changes


def access_changes_seen(gateway_url: str, reader: str) -> int:
    text = httpx.get(
        f"{gateway_url}/metrics", headers={"Authorization": f"Bearer {reader}"}, timeout=10
    ).text
    (line,) = [x for x in text.splitlines() if x.startswith("berth_gateway_access_changes_total ")]
    return int(float(line.split()[1]))


def test_a_read_key_lists_models_but_cannot_chat_and_a_chat_key_can(gateway_url, engines, bob, red):
    serving(factories.make_deployment("red-qwen", red, chat_name="qwen"), engines["a"].port)
    read_key = keys.issue(bob, "dashboards", "read")[1]
    chat_key = keys.issue(bob, "app", "chat")[1]
    listed = httpx.get(
        f"{gateway_url}/v1/models", headers={"Authorization": f"Bearer {read_key}"}, timeout=10
    )
    assert listed.status_code == 200 and "qwen" in {m["id"] for m in listed.json()["data"]}
    refused = chat(gateway_url, read_key, "qwen")
    assert refused.status_code == 403
    assert error_of(refused).startswith("This API key's scope is read: it may list models")
    assert chat(gateway_url, chat_key, "qwen").status_code == 200


def test_a_cached_key_is_kept_no_longer_than_its_expiry(gateway_url, engines, bob, red):
    serving(factories.make_deployment("red-qwen", red, chat_name="qwen"), engines["a"].port)
    key, secret = keys.issue(bob, "expiring", "chat")
    ApiKey.objects.filter(pk=key.pk).update(expires_at=timezone.now() + timedelta(seconds=2))
    assert chat(gateway_url, secret, "qwen").status_code == 200  # cached, with its expiry
    time.sleep(2.2)  # past the key's expiry, well within the cache's 30 s
    expired = chat(gateway_url, secret, "qwen")
    assert expired.status_code == 401 and error_of(expired) == keys.NOT_VALID


def test_a_revoked_key_and_a_lost_membership_take_effect_on_their_announcement(
    gateway_url, engines, bob, red
):
    serving(factories.make_deployment("red-qwen", red, chat_name="qwen"), engines["a"].port)
    admin = factories.make_user("ada")
    admin.is_staff = True
    admin.save()
    reader = keys.issue(admin, "metrics", "read")[1]
    key, secret = keys.issue(bob, "app", "chat")
    assert chat(gateway_url, secret, "qwen").status_code == 200  # cached from here on

    seen = access_changes_seen(gateway_url, reader)
    keys.revoke(bob, key)
    wait_for(lambda: access_changes_seen(gateway_url, reader) > seen, 10, 0.05, "the revocation")
    revoked = chat(gateway_url, secret, "qwen")  # the first request after it
    assert revoked.status_code == 401 and error_of(revoked) == keys.NOT_VALID

    other = keys.issue(bob, "app 2", "chat")[1]
    assert chat(gateway_url, other, "qwen").status_code == 200
    seen = access_changes_seen(gateway_url, reader)
    Membership.objects.filter(user=bob, team=red).delete()  # as the admin's team page does
    wait_for(lambda: access_changes_seen(gateway_url, reader) > seen, 10, 0.05, "the change")
    assert chat(gateway_url, other, "qwen").status_code == 404  # red's model is not on offer


# ---------------------------------------------------------------- limits: no one stalls the gateway


@pytest.fixture
def strict_gateway(servers) -> Iterator[str]:
    """A second gateway process with small limits: 1 MiB bodies, 2 requests at once a key, 6 a
    minute."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "BERTH_GATEWAY_REFRESH_S": "0.2",
        "BERTH_GATEWAY_MAX_BODY_MIB": "1",
        "BERTH_GATEWAY_KEY_CONCURRENT": "2",
        "BERTH_GATEWAY_KEY_PER_MINUTE": "6",
    }
    argv = [sys.executable, "-m", "uvicorn", "gateway.asgi:application", "--port", "PORT"]
    process, url = start_server(argv, env)
    try:
        wait_for(lambda: up(url, process), 60, 0.2, "the strict gateway")
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)


def test_a_body_over_the_limit_gets_413_in_words(strict_gateway, bob):
    big = {"model": "qwen", "messages": [{"role": "user", "content": "x" * (2 << 20)}]}
    refused = post(f"{strict_gateway}/v1/chat/completions", key_for(bob), big)
    assert refused.status_code == 413
    assert error_of(refused) == (
        "The request body is over 1 MiB, the gateway's limit (BERTH_GATEWAY_MAX_BODY_MIB): send "
        "a smaller one."
    )


def sent_whole(url: str, key: str, body: bytes) -> tuple[int, dict[str, object]]:
    """POST the whole body with http.client, which reads the answer only once all is sent, on a
    connection the client asks to close after it (as urllib and many others do): a server that
    closes on unread bytes resets it, and this raises ConnectionResetError instead."""
    where = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=60)
    headers = {"Authorization": f"Bearer {key}", "Connection": "close"}
    try:
        connection.request("POST", where.path, body=body, headers=headers)
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        connection.close()


def test_a_20_mib_body_gets_its_413_in_words_before_the_connection_closes(gateway_url, bob):
    content = json.dumps(
        {"model": "qwen", "messages": [{"role": "user", "content": "x" * (20 << 20)}]}
    )
    url = f"{gateway_url}/v1/chat/completions"
    status, answer = sent_whole(url, key_for(bob), content.encode())
    assert status == 413
    assert answer["error"]["message"] == (
        "The request body is over 8 MiB, the gateway's limit (BERTH_GATEWAY_MAX_BODY_MIB): send "
        "a smaller one."
    )
    # Refused before any of the body is read, too: the words arrive all the same.
    status, answer = sent_whole(url, "sk-not-a-key", content.encode())
    assert (status, answer["error"]["message"]) == (
        401,
        "The API key is not valid: it was revoked, it expired, or it never existed. Create one "
        "under API keys.",
    )


def test_one_key_over_its_limits_gets_429_with_retry_after_and_others_are_served(
    strict_gateway, pair, bob, carol, red
):
    serving(factories.make_deployment("red-pair", red), pair["one"].port, pair["two"].port)
    key, other = key_for(bob), key_for(carol)
    on_offer(strict_gateway, key, "red-pair")
    with ThreadPoolExecutor(2) as pool:
        running = [pool.submit(chat, strict_gateway, key, "red-pair", max_tokens=60) for _ in "ab"]
        wait_for(lambda: pair["one"].running() + pair["two"].running() == 2, 10, 0.05, "two")
        third = chat(strict_gateway, key, "red-pair")  # while both of its requests run
        assert third.status_code == 429 and third.headers["retry-after"] == "1"
        assert error_of(third).startswith("This API key has 2 requests running, its limit")
        assert chat(strict_gateway, other, "red-pair", max_tokens=1).status_code == 200
        assert [r.result().status_code for r in running] == [200, 200]
    for _ in range(4):  # 2 started + 4 = the key's 6 starts of this minute (a refusal is none)
        assert chat(strict_gateway, key, "red-pair", max_tokens=1).status_code == 200
    over = chat(strict_gateway, key, "red-pair", max_tokens=1)
    assert over.status_code == 429 and int(over.headers["retry-after"]) >= 1
    assert "started 6 requests in the last minute, its limit (BERTH_GATEWAY_KEY_PER_MINUTE)" in (
        error_of(over)
    )
    metrics = httpx.get(
        f"{strict_gateway}/metrics", headers={"Authorization": f"Bearer {key}"}, timeout=10
    ).text
    assert "berth_gateway_key_concurrent_limit 2" in metrics
    assert 'berth_gateway_refused_total{limit="per_minute"} 1' in metrics


def test_sixty_four_streams_from_one_key_pass_under_the_default_limits(
    gateway_url, engines, bob, red
):
    serving(factories.make_deployment("red-qwen", red, chat_name="qwen"), engines["a"].port)
    key = key_for(bob)
    on_offer(gateway_url, key, "qwen")
    with ThreadPoolExecutor(64) as pool:
        replies = list(pool.map(lambda _: chat(gateway_url, key, "qwen", stream=True), range(64)))
    assert [r.status_code for r in replies] == [200] * 64
