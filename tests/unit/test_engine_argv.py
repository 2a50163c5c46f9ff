"""A deployment's settings and a copy's placement become the exact argv launched."""

from __future__ import annotations

import pytest

from deployments.engine.argv import (
    LaunchFacts,
    cpu_environment,
    cpu_threads,
    key_environment,
    llamacpp_argv,
    vllm_argv,
)
from deployments.engine.settings import EngineSettingsError, validate_settings
from placement import GIB

FACTS = LaunchFacts(
    model="Qwen/Qwen3-8B",
    served_name="qwen",
    port=8123,
    gpu_memory_utilization=0.4,
    tensor_parallel=1,
)
ON_CPU = LaunchFacts(
    **{
        **FACTS.__dict__,
        "on_cpu": True,
        "cpu_threads": 3,
        "kv_cache_bytes": 7 * GIB,
    }
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
        validate_settings(given, "0.32.0")
    assert raised.value.field == field
    assert message in raised.value.message


def test_gguf_variants_run_on_llama_server():
    argv = llamacpp_argv({"max_model_len": 4096}, FACTS, "/models/qwen3-8b-q4_k_m.gguf")
    assert argv[:3] == ["llama-server", "--model", "/models/qwen3-8b-q4_k_m.gguf"]
    assert argv[argv.index("--ctx-size") + 1] == "4096"


def test_the_engine_key_is_never_on_the_command_line_but_in_the_variable_each_engine_reads():
    for argv in (vllm_argv({}, FACTS), llamacpp_argv({}, FACTS, "/m.gguf")):
        assert "--api-key" not in argv and "--api-key-file" not in argv
    assert key_environment("vllm", "k-123") == {"VLLM_API_KEY": "k-123"}
    assert key_environment("llamacpp", "k-123") == {"LLAMA_API_KEY": "k-123"}


def test_a_copy_on_a_cpu_gets_no_cuda_only_flags():
    argv = vllm_argv({}, LaunchFacts(**{**ON_CPU.__dict__, "tensor_parallel": 2}))
    assert "--gpu-memory-utilization" not in argv and "--tensor-parallel-size" not in argv
    gguf = llamacpp_argv({}, ON_CPU, "/m.gguf")
    assert "--n-gpu-layers" not in gguf
    assert gguf[gguf.index("--threads") + 1] == "3"
    assert gguf[gguf.index("--cache-ram") + 1] == "256"  # its prompt cache, within the budget
    assert "--cache-ram" not in llamacpp_argv({}, FACTS, "/m.gguf")  # on a GPU: host memory
    assert "--n-gpu-layers" in llamacpp_argv({}, FACTS, "/m.gguf")  # on a GPU: every layer there


def test_vllm_on_a_cpu_sizes_its_cache_to_the_byte_and_uses_its_threads():
    argv = vllm_argv({}, ON_CPU)
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == str(7 * GIB)
    # Not VLLM_CPU_KVCACHE_SPACE: whole GiB only, and it would override the flag.
    assert cpu_environment("vllm", ON_CPU) == {
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "OMP_NUM_THREADS": "3",
    }
    assert cpu_environment("vllm", FACTS) == {} and cpu_environment("llamacpp", ON_CPU) == {}
    assert "--kv-cache-memory-bytes" not in vllm_argv({}, FACTS)


@pytest.mark.parametrize(
    "share,cores,threads", [(0.5, 2, 1), (0.25, 2, 1), (1, 2, 2), (0.5, 16, 8), (0.3, 10, 3)]
)
def test_a_share_of_a_cpu_machine_gets_that_share_of_its_cores_and_at_least_one(
    share, cores, threads
):
    assert cpu_threads(share, cores) == threads


def test_the_launcher_checks_stored_settings_again_against_the_clusters_version():

    stored = {"other_flags": "--kv-cache-memory-bytes 80G"}  # saved before the allow-list
    with pytest.raises(EngineSettingsError, match="outside the copy's share"):
        vllm_argv(stored, FACTS)
    old = LaunchFacts(**{**FACTS.__dict__, "engine_version": "0.16.0"})
    with pytest.raises(EngineSettingsError, match="not a flag of vLLM 0.16.0"):
        vllm_argv({"other_flags": "--performance-mode interactivity"}, old)
