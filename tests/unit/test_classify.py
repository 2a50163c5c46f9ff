"""Engine output becomes an error code with the engine's own line, and a fix in words."""

from __future__ import annotations

import pytest

from deployments.classify import classify, log_pattern

KV_LINE = (
    "ERROR 11-29 15:00:01 [core.py:700] ValueError: To serve at least one request with the model's "
    "max seq len (131072), (16.00 GiB KV cache is needed, which is larger than the available KV cache "
    "memory (4.21 GiB). Based on the available memory, the estimated maximum model length is 34480. "
    "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
)
CASES = [
    (
        "(EngineCore_DP0 pid=12) ERROR 11-29 15:00:01 [core.py:700] torch.OutOfMemoryError: CUDA out of "
        "memory. Tried to allocate 1.16 GiB. GPU 0 has a total capacity of 22.04 GiB",
        "OOM",
        True,
    ),
    (
        "ValueError: Free memory on device cuda:0 (10.1/79.2 GiB) on startup is less than desired GPU "
        "memory utilization (0.8, 63.4 GiB). Decrease GPU memory utilization or reduce GPU memory used by "
        "other processes.",
        "OOM",
        False,
    ),
    (
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
        "when initializing the engine.",
        "OOM",
        True,
    ),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "CUDA_ERROR", False),
    (
        "OSError: Qwen/Qwen3-8B does not appear to have a file named model-00001-of-00005.safetensors.",
        "MODEL_LOADING_FAILURE",
        True,
    ),
    ("vllm serve: error: unrecognized arguments: --max-lora-rnak 8", "RUNTIME_ERROR", True),
    (
        "RuntimeError: Engine core initialization failed. See root cause above.",
        "RUNTIME_ERROR",
        False,
    ),
]


@pytest.mark.parametrize("line,code,permanent", CASES)
def test_each_engine_message_gets_its_code(line, code, permanent):
    failure = classify(
        ["INFO 11-29 15:00:00 [api_server.py:1] vLLM API server version 0.11.0", line]
    )
    assert (failure.code, failure.permanent) == (code, permanent)
    assert failure.line in line and len(failure.line) > 20


def test_the_kv_cache_error_offers_the_longest_context_that_fits():
    failure = classify([KV_LINE])
    assert failure.code == "OOM" and failure.permanent
    assert failure.fix.startswith(
        "The engine says a longest conversation of 34,480 tokens would fit"
    )
    assert failure.line.startswith("ValueError: To serve at least one request")


def test_the_root_cause_wins_over_the_generic_error_printed_after_it():
    lines = [
        "ERROR 11-29 15:00:01 [core.py:1] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    ]
    assert classify(lines).code == "OOM"


def test_an_exit_without_a_known_line_is_container_exited():
    failure = classify(["INFO 11-29 15:00:00 [x.py:1] loading"], exit_code=137)
    assert (failure.code, failure.permanent) == ("CONTAINER_EXITED", False)
    assert failure.line == "The engine exited with code 137."


def test_a_clean_start_is_no_failure():
    assert (
        classify(["INFO 11-29 15:00:00 [launcher.py:1] Application startup complete."], 0) is None
    )


def test_log_lines_are_tagged_with_their_pattern():
    assert log_pattern(CASES[0][0]) == "oom"
    assert log_pattern(CASES[3][0]) == "cuda_error"
    assert log_pattern(CASES[4][0]) == "loading_failure"
    assert log_pattern("INFO 11-29 15:00:00 [x.py:1] Model loading took 14.99 GiB") == ""
