"""A deployment's settings and a copy's placement become the exact argv launched."""

from __future__ import annotations

import pytest

from deployments.engine.argv import LaunchFacts, llamacpp_argv, redacted, vllm_argv
from deployments.engine.settings import EngineSettingsError, validate_settings

FACTS = LaunchFacts(
    model="Qwen/Qwen3-8B",
    served_name="qwen",
    port=8123,
    api_key="k-123",
    gpu_memory_utilization=0.4,
    tensor_parallel=1,
)


def test_the_vllm_argv_carries_every_setting_as_its_own_argument():
    settings = {
        "max_model_len": 8192,
        "kv_cache_dtype": "fp8",
        "max_num_seqs": 64,
        "max_num_batched_tokens": 4096,
        "enforce_eager": True,
    }
    argv = vllm_argv(
        settings, LaunchFacts(**{**FACTS.__dict__, "tensor_parallel": 2, "revision": "abc123"})
    )
    assert argv == [
        "vllm",
        "serve",
        "Qwen/Qwen3-8B",
        "--served-model-name",
        "qwen",
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
        "--api-key",
        "k-123",
        "--gpu-memory-utilization",
        "0.4",
        "--tensor-parallel-size",
        "2",
        "--revision",
        "abc123",
        "--enforce-eager",
        "--kv-cache-dtype",
        "fp8",
        "--max-model-len",
        "8192",
        "--max-num-batched-tokens",
        "4096",
        "--max-num-seqs",
        "64",
    ]


def test_the_placements_memory_share_wins_over_a_stored_one():
    argv = vllm_argv({"gpu_memory_utilization": 0.95}, FACTS)
    assert argv.count("--gpu-memory-utilization") == 1
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.4"


def test_a_value_with_shell_characters_stays_one_argument():
    argv = vllm_argv({}, LaunchFacts(**{**FACTS.__dict__, "served_name": "x; rm -rf /"}))
    assert "x; rm -rf /" in argv


@pytest.mark.parametrize(
    "given,field,message",
    [
        ({"max_lora_rank": 8}, "max_lora_rank", "is not a setting Berth knows"),
        ({"max_model_len": "8192"}, "max_model_len", "must be a whole number"),
        ({"max_model_len": 8.5}, "max_model_len", "must be a whole number"),
        ({"max_model_len": 0}, "max_model_len", "must be between 16 and"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization", "must be between 0.01 and 1"),
        ({"kv_cache_dtype": "int3"}, "kv_cache_dtype", "must be one of auto, fp8"),
        ({"enforce_eager": "yes"}, "enforce_eager", "must be true or false"),
        ({"max_num_seqs": True}, "max_num_seqs", "must be a whole number"),
        ([], "engine_settings", "must be an object"),
    ],
)
def test_bad_settings_are_refused_naming_the_setting(given, field, message):
    with pytest.raises(EngineSettingsError) as raised:
        validate_settings(given)
    assert raised.value.field == field
    assert message in raised.value.message


def test_gguf_variants_run_on_llama_server():
    argv = llamacpp_argv({"max_model_len": 4096}, FACTS, "/models/qwen3-8b-q4_k_m.gguf")
    assert argv[:3] == ["llama-server", "--model", "/models/qwen3-8b-q4_k_m.gguf"]
    assert argv[argv.index("--ctx-size") + 1] == "4096"


def test_the_api_key_is_hidden_when_an_argv_is_shown():
    assert "k-123" not in redacted(vllm_argv({}, FACTS))


def test_an_engine_key_is_never_read_as_a_flag():
    """Found by the lifecycle benchmark: a random key starting with '-' made vLLM's parser
    fail with 'argument --api-key: expected one argument'."""
    import argparse

    from deployments.launching import new_engine_key

    parser = argparse.ArgumentParser()
    parser.add_argument("--api-key")
    for _ in range(2000):  # a bare random key starts with '-' once in 64
        key = new_engine_key()
        assert parser.parse_args(["--api-key", key]).api_key == key
