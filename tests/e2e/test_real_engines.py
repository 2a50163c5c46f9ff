"""The tiny model hosted for real on this CPU-only machine: vLLM's CPU build for its safetensors,
llama.cpp's server for its GGUF. Hosted through the REST API on the standalone cluster `local`
with the real worker, beat, watcher and gateway; a chat answers through the gateway; the logs
page (Chromium) shows the engine's own start-up lines; the engine listens on its own Unix
socket, never on a port; a stop leaves no process, no socket answering and no room reserved.

The engines come from `make engines` (which `make test` runs first); without them these tests
fail, naming what is missing, rather than skip.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

import httpx
import openai
import pytest

from clusters.backends import supervisor
from clusters.registry import engine_programs
from console.models import ApiKey, Role
from deployments.choices import DeploymentState
from deployments.models import Copy, Deployment, EngineFigures, LogLine, Reservation
from tests import factories
from tests.e2e.test_navigation import log_in
from tests.processes import console_processes, gateway_server, wait_for
from tests.real_engines import (
    engine_readable_folder,
    host_through_the_api,
    local_cluster,
    port_is_free,
    state_of,
    tiny_model,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

ENGINE_START_S = 400  # vLLM's CPU build loads in 30-70 s on 2 cores; this machine is busy too
HELLO = [{"role": "user", "content": "Hello, who are you?"}]


@dataclass(frozen=True)
class Engine:
    variant: str
    command: str
    settings: dict[str, object]
    start_up_line: str  # a line the engine itself prints once it serves


VLLM = Engine(
    "safetensors",
    "vllm",
    {"max_model_len": 512, "enforce_eager": True},
    "Starting vLLM server on unix:/tmp/berth-engines/",
)
LLAMA_CPP = Engine(
    "gguf",
    "llama-server",
    {"max_model_len": 512},
    "llama_server: listening on unix:///tmp/berth-engines/",
)


@pytest.fixture
def bob_and_key(transactional_db):
    bob = factories.make_user("bob")
    factories.add_member(bob, factories.make_team("red"), Role.OPERATOR)
    return bob, ApiKey.issue(bob, "real engines")[1]


@pytest.fixture
def gateway(transactional_db, settings):
    with engine_readable_folder() as home:  # the engines' user reads the models, keeps its home
        tiny_model(home / "models", settings)
        local_cluster()
        compiled = home / "vllm-cache"  # each run compiles afresh: nothing left from another
        with (
            console_processes(home, VLLM_CACHE_ROOT=str(compiled), BERTH_METRICS_EVERY_S="0.5"),
            gateway_server(BERTH_GATEWAY_REFRESH_S="0.2") as url,
        ):
            yield url


def deployed(pk: int) -> bool:
    deployment = Deployment.objects.get(pk=pk)
    if deployment.state in (
        DeploymentState.FAILED,
        DeploymentState.ERROR,
        DeploymentState.MUST_REDOWNLOAD,
    ):
        pytest.fail(f"{deployment.state}: {deployment.last_error_code} {deployment.last_message}")
    return deployment.state == DeploymentState.DEPLOYED


def chat(gateway_url: str, key: str, name: str) -> openai.types.chat.ChatCompletion:
    client = openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=key, max_retries=0, timeout=120)
    return client.chat.completions.create(model=name, messages=HELLO, max_tokens=8, temperature=0)


def streamed(gateway_url: str, key: str, name: str) -> list[openai.types.chat.ChatCompletionChunk]:
    client = openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=key, max_retries=0, timeout=120)
    stream = client.chat.completions.create(
        model=name, messages=HELLO, max_tokens=8, temperature=0, stream=True
    )
    return list(stream)


def refused_without_the_key(socket_path: str) -> int:
    body = {"model": "x", "messages": HELLO, "max_tokens": 1}
    with httpx.Client(transport=httpx.HTTPTransport(uds=socket_path), timeout=30) as engine:
        return engine.post("http://localhost/v1/chat/completions", json=body).status_code


def answers_on(socket_path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(socket_path)
        except OSError:
            return False
    return True


def engine_processes(pid: int) -> list[int]:
    """The engine's live processes: vLLM's API server and its engine-core and worker children
    share the process group the supervisor started (a zombie not yet reaped holds nothing)."""
    return supervisor.group_members(pid)


def test_the_tiny_models_two_engines_share_this_machine_answer_through_the_gateway_and_stop_clean(
    bob_and_key, gateway, console_url, page
):
    """Both hosted at once with the size left out: each takes the smallest usual share that
    holds it (a quarter of this machine), so both fit side by side, and both answer."""
    _bob, key = bob_and_key
    hosted = []
    for engine in (VLLM, LLAMA_CPP):
        engine_programs().binary(engine.command)  # missing: fails here, saying to run make engines
        name = f"tiny-{engine.variant}"
        pk = host_through_the_api(
            console_url, key, name, engine.variant, size=None, engine_settings=engine.settings
        )
        hosted.append((engine, pk))
    for engine, pk in hosted:
        wait_for(lambda pk=pk: deployed(pk), ENGINE_START_S, 1, f"tiny-{engine.variant} DEPLOYED")
        assert str(Deployment.objects.get(pk=pk).accelerators_per_copy) == "0.250"
    log_in(page, console_url, "bob")
    for engine, pk in hosted:
        serves_and_answers(engine, pk, key, gateway, console_url, page)
    for engine, pk in hosted:
        stops_clean(engine, pk, key, console_url)


def serves_and_answers(engine: Engine, pk: int, key: str, gateway: str, console_url: str, page):
    name = f"tiny-{engine.variant}"
    copy = Copy.objects.get(deployment_id=pk)
    assert engine_processes(copy.process_id)

    # It listens on its own Unix socket, not on a port any local process could reach; and its
    # own key guards it there: without it, the engine itself refuses the request.
    assert copy.socket_path.endswith("/engine.sock") and port_is_free(copy.port)
    assert refused_without_the_key(copy.socket_path) == 401
    reply = chat(gateway, key, name)
    assert reply.usage.completion_tokens >= 1
    assert reply.choices[0].finish_reason in ("length", "stop")
    chunks = streamed(gateway, key, name)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == (reply.choices[0].message.content or "")  # temperature 0: the same words
    if engine is VLLM:  # the engine's own build answered, relayed as it sent it
        assert {c.system_fingerprint for c in chunks} - {None} == {reply.system_fingerprint}
        assert reply.system_fingerprint.startswith("vllm-0.32.0")

    # The watcher reads the engine's /metrics (llama.cpp guards it with the key too).
    wait_for(lambda: EngineFigures.objects.filter(deployment_id=pk).exists(), 30, 0.5, "figures")

    page.goto(f"{console_url}/deployments/{pk}/logs/")
    page.locator("#log-lines tr", has_text=engine.start_up_line).first.wait_for(timeout=30_000)

    # The engine's key is in no stored line and on no page its viewers open.
    engine_key = copy.engine_api_key()
    assert engine_key and not LogLine.objects.filter(text__contains=engine_key).exists()
    assert engine_key not in page.content()
    page.goto(f"{console_url}/deployments/{pk}/")
    assert engine_key not in page.content()


def stops_clean(engine: Engine, pk: int, key: str, console_url: str) -> None:
    copy = Copy.objects.get(deployment_id=pk)
    stopped = httpx.post(
        f"{console_url}/api/v1/deployments/{pk}/stop",
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert stopped.status_code == 202, stopped.text
    name = f"tiny-{engine.variant}"
    wait_for(lambda: state_of(pk) == DeploymentState.STOPPED, 60, 0.5, f"{name} STOPPED")
    assert engine_processes(copy.process_id) == []
    assert not answers_on(copy.socket_path)
    assert not Reservation.objects.filter(copy__deployment_id=pk).exists()
