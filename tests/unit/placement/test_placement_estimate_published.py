"""The estimator against vLLM's own published numbers (reference/vllm.md §3.2, §3.4, §4, §6).

One test per row, each citing its source. No constant here is tuned to a row: every figure the
estimator produces comes from the model's config facts, the engine settings the row used, and,
where a row is "end to end", the device total and memory share it logged.
"""

from __future__ import annotations

import dataclasses

import pytest
from placement_examples import (
    BGE_M3,
    DEEPSEEK_V3,
    GEMMA_3_4B,
    GEMMA_3_27B,
    GPT_OSS_20B,
    GPT_OSS_120B,
    LLAMA_3_1_8B,
    LLAMA_3_3_70B,
    META_LLAMA_3_8B,
    MISTRAL_SMALL_24B,
    PHI_4,
    QWEN3_0_6B,
    QWEN3_8B,
    QWEN3_30B_A3B,
    QWEN3_32B,
    R1_DISTILL_QWEN_7B,
    gib,
)

from placement import GIB, EngineSettings, MeasuredRuntime, ModelFacts
from placement.estimate import (
    available_kv_bytes,
    estimate_copy,
    kv_bytes_per_token,
    kv_cache_size_tokens,
    kv_tokens_for_bytes,
    modelled_activations_bytes,
    modelled_cuda_graph_bytes,
    weights_bytes,
)

BF16 = EngineSettings(vendor="nvidia")


def within(value: float, expected: float, tolerance: float) -> bool:
    return abs(value - expected) <= tolerance * expected


# --- KV bytes per token: exact -------------------------------------------------------------

# reference/vllm.md §6 "Derived KV bytes per token (bf16; halve for fp8). Whole model, TP = 1".
KV_BYTES_PER_TOKEN_ROWS = [
    pytest.param(QWEN3_0_6B, "auto", 114_688, id="Qwen3-0.6B GQA"),
    pytest.param(QWEN3_8B, "auto", 147_456, id="Qwen3-8B GQA"),
    pytest.param(QWEN3_32B, "auto", 262_144, id="Qwen3-32B GQA"),
    pytest.param(QWEN3_30B_A3B, "auto", 98_304, id="Qwen3-30B-A3B MoE"),
    pytest.param(LLAMA_3_1_8B, "auto", 131_072, id="Llama-3.1-8B (head_dim derived)"),
    pytest.param(LLAMA_3_1_8B, "fp8", 65_536, id="Llama-3.1-8B fp8 halves it"),
    pytest.param(LLAMA_3_3_70B, "auto", 327_680, id="Llama-3.3-70B"),
    pytest.param(MISTRAL_SMALL_24B, "auto", 163_840, id="Mistral-Small-24B"),
    pytest.param(GEMMA_3_27B, "auto", 81_920, id="gemma-3-27b sliding window, 10 global"),
    pytest.param(GPT_OSS_20B, "auto", 24_576, id="gpt-oss-20b sliding window, 12 full"),
    pytest.param(GPT_OSS_120B, "auto", 36_864, id="gpt-oss-120b sliding window, 18 full"),
    pytest.param(PHI_4, "auto", 204_800, id="Phi-4"),
    pytest.param(R1_DISTILL_QWEN_7B, "auto", 57_344, id="R1-Distill-Qwen-7B"),
    pytest.param(DEEPSEEK_V3, "auto", 70_272, id="DeepSeek-V3 MLA bf16"),
    pytest.param(DEEPSEEK_V3, "fp8_ds_mla", 40_016, id="DeepSeek-V3 MLA fp8_ds_mla"),
    pytest.param(BGE_M3, "auto", 0, id="bge-m3 encoder-only"),
]


@pytest.mark.parametrize(("model", "kv_cache_dtype", "expected"), KV_BYTES_PER_TOKEN_ROWS)
def test_kv_bytes_per_token_match_the_reference_table(
    model: ModelFacts, kv_cache_dtype: str, expected: int
) -> None:
    engine = dataclasses.replace(BF16, kv_cache_dtype=kv_cache_dtype)
    assert kv_bytes_per_token(model, engine) == expected


def test_mla_cache_is_not_split_across_tensor_parallel_ranks() -> None:
    # reference/vllm.md §6: DeepSeek-V3/R1 (MLA) 70,272 B/token, "not divided by TP".
    assert kv_bytes_per_token(DEEPSEEK_V3, BF16, tensor_parallel=8) == 70_272


# --- weights: within 2 % -------------------------------------------------------------------


def test_meta_llama_3_8b_weights_match_vllm_profile_line() -> None:
    # vllm PR #10511: `vllm serve meta-llama/Meta-Llama-3-8B` -> "model weights take 14.96GiB".
    assert within(weights_bytes(META_LLAMA_3_8B, BF16), gib(14.96), 0.02)


def test_meta_llama_3_8b_weights_at_tp2_match_vllm_profile_line() -> None:
    # vllm PR #10511: `vllm serve meta-llama/Meta-Llama-3-8B -tp 2` -> "model weights take 7.48GiB".
    assert within(weights_bytes(META_LLAMA_3_8B, BF16, 2), gib(7.48), 0.02)


def test_llama_3_1_8b_weights_match_model_loading_line() -> None:
    # reference/vllm.md §3.4: "Model loading took 14.99 GiB memory and 6.720924 seconds".
    assert within(weights_bytes(LLAMA_3_1_8B, BF16), gib(14.99), 0.02)


def test_llama_3_1_8b_weights_from_parameter_count_match_model_loading_line() -> None:
    # reference/vllm.md §6: "8.03e9 params x 2 B = 14.96 GiB, and vLLM logs 14.99 GiB".
    by_parameters = dataclasses.replace(LLAMA_3_1_8B, weight_bytes=None, parameters=8_030_261_248)
    assert within(weights_bytes(by_parameters, BF16), gib(14.99), 0.02)


def test_phi_4_weights_match_the_safetensors_header() -> None:
    # reference/vllm.md §4, llm-cal: Phi-4 safetensors 27.31 GB "[verified]", 0.0 % error.
    assert within(weights_bytes(PHI_4, BF16), gib(27.31), 0.02)


# --- KV capacity in tokens -------------------------------------------------------------------


def test_llama_3_1_8b_kv_cache_size_matches_the_log_exactly() -> None:
    # reference/vllm.md §3.4: "Available KV cache memory: 19.28 GiB",
    # "GPU KV cache size: 157,936 tokens", "Maximum concurrency for 131,072 tokens: 1.20x".
    tokens = kv_tokens_for_bytes(LLAMA_3_1_8B, BF16, gib(19.28))
    assert tokens == 157_936
    assert round(tokens / 131_072, 2) == 1.20


def test_llama_3_1_8b_on_v0_19_kv_cache_size_matches_the_log() -> None:
    # reference/vllm.md §4: vLLM v0.19.0, 58.11 GiB -> 476,000 tokens; 58.11x at 8,192.
    tokens = kv_tokens_for_bytes(LLAMA_3_1_8B, BF16, gib(58.11))
    assert within(tokens, 476_000, 0.001)
    assert round(tokens / 8192, 2) == 58.11


def test_meta_llama_3_8b_on_a100_40gb_end_to_end() -> None:
    # reference/vllm.md §4, vllm issue #12330 (V0): A100 40GB, CUDA total 39.50 GiB, gmu 0.90;
    # weights 14.96, activation 9.37, non-torch 0.10 GiB; 5,691 blocks (x 16 tokens),
    # "Maximum concurrency for 8192 tokens per request: 11.12x".
    # The activation peak of that run is what vLLM profiled, passed in as the console passes
    # a launch's logged profile; V0 kept CUDA graphs outside the budget (§3.1), hence 0.
    logged = MeasuredRuntime(gib(9.37), gib(0.10), 0)
    engine = EngineSettings(vendor="nvidia", max_model_len=8192, measured=logged)
    budget = int(gib(39.50) * 0.90)
    tokens = kv_cache_size_tokens(META_LLAMA_3_8B, engine, budget)
    assert within(tokens, 5_691 * 16, 0.05)
    assert within(tokens / 8192, 11.12, 0.05)


def test_gemma_3_4b_on_b200_end_to_end() -> None:
    # reference/vllm.md §4, vllm PR #21489: B200, CUDA total 178.36 GiB, gmu 0.9 -> 160.53 GiB;
    # peak activation 9.96 (multimodal profiling), non-torch 0.07, CUDA graphs 0.65 GiB;
    # the log suggests --kv-cache-memory=151519866880 bytes for the KV cache.
    # Weights come from the parameter count (4.3B x bf16); the logged runtime is passed in.
    logged = MeasuredRuntime(gib(9.96), gib(0.07), gib(0.65))
    engine = EngineSettings(vendor="nvidia", max_model_len=131072, measured=logged)
    budget = int(gib(178.36) * 0.9)
    available = available_kv_bytes(GEMMA_3_4B, engine, budget)
    assert within(available, 151_519_866_880, 0.05)
    expected_tokens = kv_tokens_for_bytes(GEMMA_3_4B, engine, 151_519_866_880)
    assert within(kv_cache_size_tokens(GEMMA_3_4B, engine, budget), expected_tokens, 0.05)


# --- the modelled runtime against logs of runs whose settings are known ----------------------


def test_llama_3_1_8b_activation_peak_matches_h100_profile() -> None:
    # reference/vllm.md §3.3: Llama-3.1-8B on H100, "torch peak memory increase: 1.21GiB",
    # with the H100 defaults (8192 batched tokens, 1024 sequences: GPUs of >= 70 GiB, §1.1).
    engine = EngineSettings(vendor="nvidia", max_num_batched_tokens=8192, max_num_seqs=1024)
    assert within(modelled_activations_bytes(LLAMA_3_1_8B, engine), gib(1.21), 0.10)


def test_llama_3_1_8b_non_kv_memory_matches_h100_profile() -> None:
    # reference/vllm.md §3.4: "Total non KV cache memory: 16.51GiB" (graphs outside, then).
    engine = EngineSettings(
        vendor="nvidia", max_num_batched_tokens=8192, max_num_seqs=1024, enforce_eager=True
    )
    part = estimate_copy(LLAMA_3_1_8B, engine)
    non_kv = part.weights_bytes + part.activations_bytes + part.overhead_bytes
    assert within(non_kv, gib(16.51), 0.05)


@pytest.mark.parametrize(
    ("model", "engine", "logged_gib"),
    [
        # reference/vllm.md §4: "Estimated CUDA graph memory: 0.84 GiB total" (v0.19.0).
        pytest.param(LLAMA_3_1_8B, BF16, 0.84, id="Llama-3.1-8B"),
        # vllm PR #21489: gemma-3-4b-it on B200, CUDA graphs 0.65 GiB (1024 sequences).
        pytest.param(
            GEMMA_3_4B, dataclasses.replace(BF16, max_num_seqs=1024), 0.65, id="gemma-3-4b"
        ),
        # reference/vllm.md §3.1: "2.23 GiB for a Gemma-class 5376-hidden model at TP 2".
        pytest.param(GEMMA_3_27B, BF16, 2.23, id="gemma-3-27b at TP 2"),
    ],
)
def test_one_cuda_graph_constant_describes_every_logged_graph_size(
    model: ModelFacts, engine: EngineSettings, logged_gib: float
) -> None:
    # The constant was fitted across these three rows together, so this is a check that one
    # constant is enough (within 15 %), not a check of a prediction.
    assert within(modelled_cuda_graph_bytes(model, engine), gib(logged_gib), 0.15)


def test_enforce_eager_removes_cuda_graph_memory() -> None:
    eager = dataclasses.replace(BF16, enforce_eager=True)
    assert modelled_cuda_graph_bytes(LLAMA_3_1_8B, eager) == 0
    assert estimate_copy(LLAMA_3_1_8B, eager).overhead_bytes < 1 * GIB
