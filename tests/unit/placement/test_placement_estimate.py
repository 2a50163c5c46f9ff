"""The estimate's parts, and how each model form and setting changes them."""

from __future__ import annotations

import dataclasses

import pytest
from placement_examples import (
    BGE_M3,
    DEEPSEEK_V3,
    GEMMA_3_27B,
    GPT_OSS_20B,
    LLAMA_3_1_8B,
    QWEN3_8B,
    gib,
)

from placement import EngineSettings, MeasuredRuntime, ModelFacts, estimate_copy
from placement.estimate import (
    BLOCK_TOKENS,
    available_kv_bytes,
    kv_bytes_for_request,
    kv_bytes_per_token,
    largest_context,
    requests_at_full_context,
    weights_bytes,
)

ENGINE = EngineSettings(vendor="nvidia", max_model_len=8192)


def test_total_is_the_sum_of_the_parts() -> None:
    part = estimate_copy(QWEN3_8B, ENGINE)
    assert part.total_bytes == (
        part.weights_bytes + part.kv_cache_bytes + part.activations_bytes + part.overhead_bytes
    )
    # One request at max_model_len, beside the pool's null block of 16 tokens.
    assert part.kv_cache_bytes == (8192 + 16) * 147_456


def test_tensor_parallel_splits_weights_and_kv_heads() -> None:
    one, two = estimate_copy(LLAMA_3_1_8B, ENGINE, 1), estimate_copy(LLAMA_3_1_8B, ENGINE, 2)
    assert two.weights_bytes == one.weights_bytes // 2
    assert two.kv_bytes_per_token == one.kv_bytes_per_token // 2
    assert two.tensor_parallel == 2


def test_kv_heads_replicate_when_tensor_parallel_exceeds_them() -> None:
    # 8 KV heads over 16 GPUs: each GPU still holds one head, so KV stops shrinking at TP 8.
    at_8 = kv_bytes_per_token(LLAMA_3_1_8B, ENGINE, 8)
    assert kv_bytes_per_token(LLAMA_3_1_8B, ENGINE, 16) == at_8 == 32 * 2 * 1 * 128 * 2


def test_fp8_kv_cache_halves_the_context_cache() -> None:
    fp8 = dataclasses.replace(ENGINE, kv_cache_dtype="fp8")
    assert (
        estimate_copy(QWEN3_8B, fp8).kv_cache_bytes * 2
        == estimate_copy(QWEN3_8B, ENGINE).kv_cache_bytes
    )


def test_sliding_window_layers_stop_growing_with_the_context() -> None:
    short = kv_bytes_for_request(GEMMA_3_27B, ENGINE, 32_768)
    long = kv_bytes_for_request(GEMMA_3_27B, ENGINE, 65_536)
    # Only the 10 global layers grow: 32,768 more tokens x 81,920 B.
    assert long - short == 32_768 * 81_920
    # The 52 window layers hold window - 1 + one step of tokens, plus a page each.
    window_tokens = 1024 - 1 + ENGINE.max_num_batched_tokens
    pages = -(-window_tokens // BLOCK_TOKENS) + 1
    per_layer_page = BLOCK_TOKENS * 2 * 16 * 128 * 2
    null_block = 62 * per_layer_page
    full = 10 * (32_768 // BLOCK_TOKENS) * per_layer_page
    assert short == null_block + full + 52 * pages * per_layer_page


def test_sliding_window_layers_hold_no_more_than_the_context() -> None:
    tiny = kv_bytes_for_request(GPT_OSS_20B, ENGINE, 16)
    null_block = 24 * BLOCK_TOKENS * 2048
    assert tiny == null_block + 12 * 1 * BLOCK_TOKENS * 2048 + 12 * 2 * BLOCK_TOKENS * 2048


def test_mla_cache_has_no_separate_keys_and_values() -> None:
    assert kv_bytes_per_token(DEEPSEEK_V3, ENGINE) == 61 * (512 + 64) * 2


def test_fp8_ds_mla_is_refused_for_a_model_without_mla() -> None:
    with pytest.raises(ValueError, match="only for MLA models"):
        kv_bytes_per_token(QWEN3_8B, dataclasses.replace(ENGINE, kv_cache_dtype="fp8_ds_mla"))


def test_encoder_only_models_have_no_kv_cache() -> None:
    part = estimate_copy(BGE_M3, ENGINE)
    assert (part.kv_cache_bytes, part.kv_bytes_per_token) == (0, 0)
    assert part.weights_bytes == 568_000_000 * 4  # float32 checkpoint


def test_a_quantized_checkpoint_counts_its_own_bytes() -> None:
    awq = dataclasses.replace(QWEN3_8B, weight_bytes=5_900_000_000)
    assert weights_bytes(awq, ENGINE) == 5_900_000_000
    by_bits = dataclasses.replace(
        QWEN3_8B, weight_bytes=None, parameters=8_000_000_000, checkpoint_bits=4
    )
    assert weights_bytes(by_bits, ENGINE) == 4_000_000_000


def test_enforce_eager_drops_cuda_graphs_only() -> None:
    eager = estimate_copy(QWEN3_8B, dataclasses.replace(ENGINE, enforce_eager=True))
    graphs = estimate_copy(QWEN3_8B, ENGINE)
    assert eager.overhead_bytes < graphs.overhead_bytes
    assert eager.weights_bytes == graphs.weights_bytes


def test_activations_grow_with_the_batched_tokens() -> None:
    small = estimate_copy(QWEN3_8B, dataclasses.replace(ENGINE, max_num_batched_tokens=2048))
    large = estimate_copy(QWEN3_8B, dataclasses.replace(ENGINE, max_num_batched_tokens=16384))
    assert large.activations_bytes > 4 * small.activations_bytes


def test_a_logged_profile_replaces_the_modelled_runtime() -> None:
    logged = MeasuredRuntime(activations_bytes=gib(2), non_torch_bytes=gib(0.5), cuda_graph_bytes=0)
    part = estimate_copy(QWEN3_8B, dataclasses.replace(ENGINE, measured=logged))
    assert (part.activations_bytes, part.overhead_bytes) == (gib(2), gib(0.5))


def test_largest_context_is_the_longest_that_fits_the_budget() -> None:
    budget = gib(20)
    longest = largest_context(QWEN3_8B, ENGINE, budget)
    fits = dataclasses.replace(ENGINE, max_model_len=longest)
    too_long = dataclasses.replace(ENGINE, max_model_len=longest + 1)
    assert estimate_copy(QWEN3_8B, fits).total_bytes <= budget
    assert estimate_copy(QWEN3_8B, too_long).total_bytes > budget
    assert longest % BLOCK_TOKENS == 0


def test_largest_context_is_capped_by_the_model_and_zero_when_nothing_fits() -> None:
    assert largest_context(QWEN3_8B, ENGINE, gib(1000)) == QWEN3_8B.max_context
    assert largest_context(QWEN3_8B, ENGINE, gib(10)) == 0


def test_requests_at_full_context_divides_the_leftover_kv_memory() -> None:
    part = estimate_copy(QWEN3_8B, ENGINE)
    budget = part.total_bytes + 3 * part.kv_cache_bytes + 1
    assert requests_at_full_context(QWEN3_8B, ENGINE, budget) == 4
    assert requests_at_full_context(QWEN3_8B, ENGINE, part.total_bytes - 1) == 0


def test_requests_for_an_encoder_only_model_are_limited_by_the_scheduler() -> None:
    assert requests_at_full_context(BGE_M3, ENGINE, gib(40)) == ENGINE.max_num_seqs


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"layers": 0}, "layers"),
        ({"global_layers": 99}, "global_layers"),
        ({"weight_bytes": None, "parameters": None}, "weight_bytes"),
    ],
)
def test_impossible_model_facts_are_refused_naming_the_field(
    changes: dict[str, object], field: str
) -> None:
    with pytest.raises(ValueError, match=f"^{field}: "):
        dataclasses.replace(QWEN3_8B, **changes)  # type: ignore[arg-type]


def test_model_facts_default_the_head_dim_as_vllm_does() -> None:
    facts = ModelFacts("x", 2, 32, 8, 4096, 1000, 4096, weight_bytes=1)
    assert facts.effective_head_dim == 128


VLLM_CPU_RUNTIME = 1_717_986_918  # 1.6 GiB, the top of the measured spread
LLAMACPP_CPU_OVERHEAD = 301_989_888  # 32 MiB of its own and its prompt cache's 256 MiB


def test_on_a_cpu_the_runtime_is_the_cpu_builds_processes_not_cuda_graphs():
    on_gpu = estimate_copy(LLAMA_3_1_8B, ENGINE)
    on_cpu = estimate_copy(LLAMA_3_1_8B, dataclasses.replace(ENGINE, vendor="cpu"))
    assert on_cpu.overhead_bytes == VLLM_CPU_RUNTIME != on_gpu.overhead_bytes
    assert on_cpu.weights_bytes == on_gpu.weights_bytes
    # The CPU build's blocks are of 128 tokens: 8192 tokens and the null block are 65 of them.
    assert on_cpu.kv_cache_bytes == 65 * 128 * on_cpu.kv_bytes_per_token
    assert on_gpu.kv_cache_bytes == 513 * 16 * on_gpu.kv_bytes_per_token
    budget = 40 * (1 << 30)
    fixed = on_cpu.weights_bytes + on_cpu.activations_bytes + VLLM_CPU_RUNTIME
    cpu = dataclasses.replace(ENGINE, vendor="cpu")
    assert available_kv_bytes(LLAMA_3_1_8B, cpu, budget) == budget - fixed


def test_llama_cpp_on_a_cpu_is_charged_its_own_runtime_not_vllms():
    llama = dataclasses.replace(ENGINE, vendor="cpu", runtime="llamacpp")
    vllm = dataclasses.replace(ENGINE, vendor="cpu", runtime="vllm")
    assert estimate_copy(LLAMA_3_1_8B, llama).overhead_bytes == LLAMACPP_CPU_OVERHEAD
    assert estimate_copy(LLAMA_3_1_8B, vllm).overhead_bytes == VLLM_CPU_RUNTIME


def test_an_unknown_engine_program_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="^runtime: must be one of vllm, llamacpp$"):
        EngineSettings(vendor="cpu", runtime="ollama")
