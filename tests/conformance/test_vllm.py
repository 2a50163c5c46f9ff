"""vLLM's CPU build and the engine simulator, side by side: each scenario runs on both with the
same argv and environment and asserts what the real engine does, read through Berth's own code.
Where the simulator says something else, the simulator is wrong (it is vLLM's double).

The serving engines are started once per kind for the module (`--enforce-eager`, as the CPU
build starts fastest so); the failure scenarios each start and end their own.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from clusters.registry import engine_programs
from deployments import engine_figures
from deployments.choices import ErrorCode
from tests import factories
from tests.conformance.harness import KEY, REAL, SERVED, SIMULATED, Started, start
from tests.integration.test_gateway import client, key_for, on_offer
from tests.integration.test_gateway import serving as ready_deployment
from tests.processes import gateway_server
from tests.real_engines import port_is_free

pytestmark = pytest.mark.timeout(600)
KINDS = [REAL, SIMULATED]
# What the CPU build needs to start small (reference/real-engines.md §1); the simulator ignores
# the variables it has no use for, as vLLM ignores BERTH_SIM_*.
# BERTH_SIM_VLLM_VERSION: the simulator answers as the vLLM version installed here.
THREADS = {"OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
ENV = {**THREADS, "VLLM_CPU_KVCACHE_SPACE": "1", "BERTH_SIM_VLLM_VERSION": "0.32.0"}
HELLO = [{"role": "user", "content": "Hello"}]


def vllm(tiny: Path, *flags: str) -> list[str]:
    return ["vllm", "serve", str(tiny), "--dtype", "float32", *flags]


@pytest.fixture(scope="module")
def serving(tiny, state_dir) -> Iterator[dict[str, Started]]:
    """One serving engine of each kind, started at once (they load side by side)."""
    engine_programs().binary("vllm")  # missing: fails here, naming `make engines`
    env = {**ENV, "VLLM_CACHE_ROOT": str(state_dir / "vllm-cache")}
    flags = ["--served-model-name", SERVED, "--max-model-len", "512", "--enforce-eager"]
    started = {kind: start(kind, state_dir, tiny, vllm(tiny, *flags), env) for kind in KINDS}
    for engine in started.values():
        engine.wait({"ready"}, 400)
    yield started
    for engine in started.values():
        engine.stop()


@pytest.mark.parametrize("kind", KINDS)
def test_health_answers_200_with_an_empty_body_once_ready(kind, serving):
    assert serving[kind].observe().status == "ready"
    assert serving[kind].get("/health") == (200, b"")


@pytest.mark.parametrize("kind", KINDS)
def test_the_models_list_names_the_served_model(kind, serving):
    status, body = serving[kind].get("/v1/models")
    assert status == 200
    assert [entry["id"] for entry in json.loads(body)["data"]] == [SERVED]


@pytest.mark.parametrize("kind", KINDS)
def test_without_a_served_name_the_models_list_names_the_folder(kind, tiny, state_dir):
    engine = start(
        kind, state_dir, tiny, vllm(tiny, "--max-model-len", "512", "--enforce-eager"), ENV
    )
    try:
        engine.wait({"ready"}, 400)
        status, body = engine.get("/v1/models")
    finally:
        engine.stop()
        engine.wait({"exited", "gone"}, 60)  # its (simulated) memory is free for the next
    assert status == 200
    assert [entry["id"] for entry in json.loads(body)["data"]] == [str(tiny)]


@pytest.mark.parametrize("kind", KINDS)
def test_without_the_key_the_engine_refuses_with_401(kind, serving):
    assert serving[kind].get("/v1/models", key="")[0] == 401
    assert serving[kind].get("/v1/models", key="wrong")[0] == 401


@pytest.mark.parametrize("kind", KINDS)
def test_an_unknown_model_is_a_404_naming_it(kind, serving):
    body = {"model": "x", "messages": HELLO, "max_tokens": 2}
    answer = httpx.post(
        f"http://127.0.0.1:{serving[kind].port}/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=30,
    )
    assert answer.status_code == 404
    error = answer.json()["error"]
    assert error["message"] == f"The model `x` does not exist. Valid aliases: {SERVED}."
    assert (error["type"], error["code"]) == ("NotFoundError", 404)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", KINDS)
def test_chat_through_the_gateway_streams_and_reassembles_with_the_engines_fingerprint(
    kind, serving
):
    team = factories.make_team("red")
    bob = factories.make_user("bob")
    factories.add_member(bob, team, "operator")
    deployment = ready_deployment(factories.make_deployment(SERVED, team), serving[kind].port)
    key = key_for(bob)
    with gateway_server(BERTH_GATEWAY_REFRESH_S="0.2") as url:
        on_offer(url, key, deployment.name)
        openai = client(url, key)
        reply = openai.chat.completions.create(model=SERVED, messages=HELLO, max_tokens=5)
        chunks = list(
            openai.chat.completions.create(model=SERVED, messages=HELLO, max_tokens=5, stream=True)
        )
        text = openai.completions.create(model=SERVED, prompt="Hello", max_tokens=5)
    assert reply.usage.completion_tokens == 5 and reply.usage.prompt_tokens > 0
    assert reply.choices[0].finish_reason == "length"
    assert reply.system_fingerprint.startswith("vllm-0.32.0-")
    assert {c.system_fingerprint for c in chunks} - {None} == {reply.system_fingerprint}
    assert chunks[-1].choices[0].finish_reason == "length"
    assert text.choices[0].finish_reason == "length" and text.usage.completion_tokens == 5


@pytest.mark.parametrize("kind", KINDS)
def test_metrics_become_berths_engine_figures(kind, serving):
    totals: dict[str, float] = {}
    engine_figures.add_copy(totals, serving[kind].backend.metrics(serving[kind].handle))
    assert set(totals) == {
        "requests_running",
        "requests_waiting",
        "prompt_tokens_total",
        "generation_tokens_total",
        "ttft_seconds_sum",
        "ttft_count",
        "kv_cache_usage",
    }


@pytest.mark.parametrize("kind", KINDS)
def test_the_prefix_cache_hits_a_prompts_whole_blocks_the_second_time_and_none_the_first(
    kind, serving
):
    engine = serving[kind]
    block = block_size_of(engine)
    words = " ".join(f"{kind}-word{i}" for i in range(60))  # a prompt no other test sends

    def sent(prompt: str) -> tuple[float, float, int]:
        before = cache_counters(engine)
        body = {"model": SERVED, "prompt": prompt, "max_tokens": 1}
        answer = httpx.post(f"http://127.0.0.1:{engine.port}/v1/completions", json=body,
                            headers={"Authorization": f"Bearer {KEY}"}, timeout=60)  # fmt: skip
        assert answer.status_code == 200, answer.text
        after = cache_counters(engine)
        prompt_tokens = answer.json()["usage"]["prompt_tokens"]
        return after[0] - before[0], after[1] - before[1], prompt_tokens

    hits, queries, tokens = sent(words)
    assert (hits, queries) == (0, tokens)
    hits, queries, tokens = sent(words)  # all of it cached: whole blocks, short of the last token
    assert (hits, queries) == ((tokens - 1) // block * block, tokens)
    hits, _queries, _tokens = sent("Another prompt entirely, " + words)
    assert hits == 0  # its first block differs: no later block can match


def cache_counters(engine: Started) -> tuple[float, float]:
    """vllm:prefix_cache_hits_total and _queries_total (in tokens) on the engine's /metrics."""
    status, body = engine.get("/metrics")
    assert status == 200
    found = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name in ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"):
                found[sample.name] = found.get(sample.name, 0.0) + sample.value
    return found["vllm:prefix_cache_hits_total"], found["vllm:prefix_cache_queries_total"]


def block_size_of(engine: Started) -> int:
    """The engine's KV block size, as its vllm:cache_config_info says."""
    _status, body = engine.get("/metrics")
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == "vllm:cache_config_info":
                return int(sample.labels["block_size"])
    raise AssertionError("no vllm:cache_config_info on the engine's /metrics")


# ---------------------------------------------------------------- failures at start


@pytest.mark.parametrize("kind", KINDS)
def test_a_longer_context_than_the_models_fails_for_good_with_the_engines_line(
    kind, tiny, state_dir
):
    engine = start(kind, state_dir, tiny, vllm(tiny, "--max-model-len", "4096"), ENV)
    failure = engine.failed_for_good(1)
    assert failure.line.startswith(
        "Value error, User-specified max_model_len (4096) is greater than the derived "
        "max_model_len (max_position_embeddings=2048"
    )


@pytest.mark.parametrize("kind", KINDS)
def test_an_unknown_flag_fails_for_good_with_exit_code_2(kind, tiny, state_dir):
    engine = start(kind, state_dir, tiny, vllm(tiny, "--no-such-flag", "3"), ENV)
    failure = engine.failed_for_good(2)
    assert failure.code == ErrorCode.RUNTIME_ERROR
    assert failure.line == "vllm: error: unrecognized arguments: --no-such-flag 3"


@pytest.mark.parametrize("kind", KINDS)
def test_missing_weights_are_a_loading_failure_named_by_the_root_cause(
    kind, tiny, state_dir, engine_tmp
):
    without = engine_tmp / "no-weights"
    shutil.copytree(tiny, without)
    (without / "model.safetensors").unlink()
    (without / "tiny-llama-f32.gguf").unlink()
    engine = start(kind, state_dir, without, vllm(without, "--max-model-len", "512"), ENV)
    failure = engine.failed_for_good(1)
    assert failure.code == ErrorCode.MODEL_LOADING_FAILURE
    assert failure.line == f"RuntimeError: Cannot find any model weights with `{without}`"


@pytest.mark.parametrize("kind", KINDS)
def test_a_cache_too_small_for_the_context_is_an_oom_naming_the_longest_that_fits(
    kind, tiny, state_dir
):
    """1 MiB of cache is 4 blocks of 128 tokens (the CPU build's block size, given to both: the
    simulator's GPU default is 16); one is the pool's null block, so 384 tokens fit."""
    flags = ["--max-model-len", "2048", "--kv-cache-memory-bytes", "1048576", "--enforce-eager"]
    flags += ["--block-size", "128"]
    # The CPU build takes VLLM_CPU_KVCACHE_SPACE over the flag: here the flag must size it.
    env = {name: value for name, value in ENV.items() if name != "VLLM_CPU_KVCACHE_SPACE"}
    engine = start(kind, state_dir, tiny, vllm(tiny, *flags), env)
    failure = engine.failed_for_good(1)
    assert failure.code == ErrorCode.OOM
    assert failure.line.startswith(
        "ValueError: To serve at least one request with the model's max seq len (2048)"
    )
    assert "the estimated maximum model length is 384." in failure.line
    assert "The engine says a longest conversation of 384 tokens would fit" in failure.fix


# ---------------------------------------------------------------- the end


@pytest.mark.parametrize("kind", KINDS)
def test_sigterm_ends_the_engine_with_exit_0_and_frees_its_port(kind, serving):
    engine = serving[kind]
    engine.stop()
    seen = engine.wait({"exited", "gone"}, 30)
    assert (seen.status, seen.exit_code) == ("exited", 0)
    assert port_is_free(engine.port)
