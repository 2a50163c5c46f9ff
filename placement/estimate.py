"""The memory one copy of a model needs on each of its GPUs, the way vLLM spends it.

vLLM's budget on a GPU is `total x gpu_memory_utilization`, and it must hold the weights, the
activation peak of one profiling step of `max_num_batched_tokens` tokens, non-torch allocations,
CUDA graphs (inside the budget since vLLM 0.21) and the KV cache. vLLM refuses to start unless
the KV cache holds at least one request at `max_model_len`, so that is what the estimate counts;
whatever the budget has left over becomes more KV cache (more requests at once).
Sources: reference/vllm.md §3 (memory) and §6 (model facts).
"""

from __future__ import annotations

import dataclasses
import math

from placement.types import GIB, EngineSettings, Estimate, ModelFacts

BLOCK_TOKENS = 16  # vLLM's default --block-size: KV is allocated in pages of 16 tokens
# The CPU build's default: its cache's size moves in steps of 128 tokens (measured, the tiny
# Llama: 1 MiB and 1.25 MiB of cache hold 384 and 512 tokens).
CPU_BLOCK_TOKENS = 128

# Non-torch allocations (cuBLAS workspaces, the CUDA context's share): logs show 0.07-0.31 GiB.
NON_TORCH_BYTES = 256 << 20
# NCCL buffers when the copy is split over several GPUs.
NCCL_BYTES = 256 << 20
# vLLM's CPU build beside its weights and KV cache: the API server, engine core and worker
# processes with torch loaded. Measured as the process tree's PSS once ready, less the KV cache
# it was given, for the tiny Llama, on three installs of the same vLLM (its dependencies are not
# pinned): 1.31, 1.53 (API server 0.51, engine core 0.48, worker 0.53 beyond its cache) and 1.41
# GiB, and 0.07 GiB apart from run to run on one install (shared pages are split among whatever
# else runs). Counted at the top of that spread, so that the budget holds on every install: the
# engine then leaves 0 to 0.3 GiB of its budget unused (the memory benchmark holds it to at most
# 0.5 GiB, and never over). No CUDA context, no CUDA graphs.
VLLM_CPU_RUNTIME_BYTES = int(1.6 * GIB)
# llama.cpp's server on a CPU, beside its weights (mapped from the GGUF), KV cache and compute
# buffer: one process, no Python. Measured for the tiny Llama's GGUF (`llama-server --model
# tiny-llama-f32.gguf --ctx-size 512 --threads 1`, PSS from /proc/PID/smaps_rollup once it
# served three chats): 22.9-23.5 MiB in all, of which 5.50 MiB weights, 0.50 MiB KV cache and
# 4.51 MiB compute buffer as it logs them: 12.4-13.0 MiB its own (30.6 MiB in all as the
# launcher starts it, in the memory benchmark). Counted at 32 MiB (a larger model's vocabulary
# and graph add a few MiB more), plus the prompt cache it keeps in memory,
# which the launcher bounds to LLAMACPP_PROMPT_CACHE_MIB (its default, 8 GiB, would outgrow
# any budget).
LLAMACPP_RUNTIME_BYTES = 32 << 20
LLAMACPP_PROMPT_CACHE_MIB = 256
LLAMACPP_CPU_OVERHEAD_BYTES = LLAMACPP_RUNTIME_BYTES + (LLAMACPP_PROMPT_CACHE_MIB << 20)

# CUDA graphs are captured for batch sizes up to min(2 x max_num_seqs, 512); their memory grows
# with that size, the hidden size and the number of layers. One constant for every model, from
# logged graph sizes: Llama-3.1-8B 0.84 GiB (model: 0.88), gemma-3-4b 0.65 GiB (0.58),
# a 5376-hidden 62-layer Gemma at TP 2 2.23 GiB (2.22).
CUDA_GRAPH_BYTES_PER_UNIT = 14
MAX_CUDA_GRAPH_BATCH = 512

# The profiling step keeps the residual stream and the widest MLP tensors alive at once; the
# measured peak is about 1.5x their sum (Meta-Llama-3-8B at 8192 tokens: 1.26 GiB logged).
FORWARD_PEAK_FACTOR = 1.5
# The sampler warm-up holds float32 logits and probabilities for max_num_seqs rows.
SAMPLER_BYTES_PER_LOGIT = 8

KV_DTYPE_BYTES = {
    "float16": 2,
    "bfloat16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
    "fp8_ds_mla": 1,
}
# DeepSeek's fp8 MLA cache: 512 fp8 latent values, 4 float32 scales, 64 bf16 rope values.
FP8_DS_MLA_BYTES_PER_LAYER = 656


def kv_dtype_bytes(engine: EngineSettings) -> int:
    if engine.kv_cache_dtype == "auto":
        return engine.dtype_bytes
    return KV_DTYPE_BYTES[engine.kv_cache_dtype]  # EngineSettings accepts no other name


def kv_heads_per_gpu(model: ModelFacts, tensor_parallel: int) -> int:
    # When TP exceeds the KV heads, vLLM replicates them: each GPU still holds one.
    return max(1, model.kv_heads // tensor_parallel)


def kv_bytes_per_layer_token(model: ModelFacts, engine: EngineSettings, tp: int) -> int:
    """Bytes one layer keeps per token of context, on one GPU."""
    if model.encoder_only:
        return 0  # EncoderOnlyAttentionSpec: no KV cache
    if model.mla is not None:
        if engine.kv_cache_dtype == "fp8_ds_mla":
            return FP8_DS_MLA_BYTES_PER_LAYER
        # One latent "head", no separate K and V, and not split across TP ranks.
        return (model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * kv_dtype_bytes(engine)
    if engine.kv_cache_dtype == "fp8_ds_mla":
        raise ValueError("kv_cache_dtype: fp8_ds_mla is only for MLA models (DeepSeek)")
    heads = kv_heads_per_gpu(model, tp)
    return 2 * heads * model.effective_head_dim * kv_dtype_bytes(engine)


def full_attention_layers(model: ModelFacts) -> int:
    """Layers whose KV grows with the context (all, unless some use a sliding window)."""
    if model.sliding_window is None:
        return model.layers
    return model.global_layers or 0


def kv_bytes_per_token(model: ModelFacts, engine: EngineSettings, tensor_parallel: int = 1) -> int:
    """KV growth per token of context on one GPU: sliding-window layers stop growing."""
    return full_attention_layers(model) * kv_bytes_per_layer_token(model, engine, tensor_parallel)


def block_tokens(engine: EngineSettings) -> int:
    return CPU_BLOCK_TOKENS if engine.vendor == "cpu" else BLOCK_TOKENS


def kv_bytes_for_request(
    model: ModelFacts, engine: EngineSettings, context: int, tensor_parallel: int = 1
) -> int:
    """KV one request of `context` tokens needs on one GPU, in whole pages, as vLLM checks it:
    beside the pool's null block (one page of every layer, kept empty)."""
    block = block_tokens(engine)
    per_layer_page = block * kv_bytes_per_layer_token(model, engine, tensor_parallel)
    null_block = model.layers * per_layer_page
    full_layers = full_attention_layers(model)
    full = null_block + full_layers * math.ceil(context / block) * per_layer_page
    window_layers = model.layers - full_layers
    if window_layers == 0 or model.sliding_window is None:
        return full
    # A sliding-window layer keeps at most window - 1 + one step of tokens, plus one page.
    window_tokens = min(model.sliding_window - 1 + engine.max_num_batched_tokens, context)
    return full + window_layers * (math.ceil(window_tokens / block) + 1) * per_layer_page


def weights_bytes(model: ModelFacts, engine: EngineSettings, tensor_parallel: int = 1) -> int:
    """The checkpoint's bytes when known (quantized checkpoints keep some layers wider)."""
    if model.weight_bytes is not None:
        total = model.weight_bytes
    else:
        bits = model.checkpoint_bits or engine.dtype_bytes * 8
        total = math.ceil((model.parameters or 0) * bits / 8)
    # Embeddings and the LM head are vocab-parallel, so every part splits across TP ranks.
    return math.ceil(total / tensor_parallel)


def modelled_activations_bytes(
    model: ModelFacts, engine: EngineSettings, tensor_parallel: int = 1
) -> int:
    """The profiling step's peak: a forward pass of max_num_batched_tokens, or the sampler."""
    tokens = engine.max_num_batched_tokens
    width = model.intermediate_size or 4 * model.hidden_size
    # Residual stream and normed input, plus the MLP's gate/up output and its activation.
    per_token = 2 * model.hidden_size + 3 * math.ceil(width / tensor_parallel)
    forward = int(FORWARD_PEAK_FACTOR * tokens * engine.dtype_bytes * per_token)
    if model.encoder_only:
        return forward  # pooling models sample nothing
    rows = min(engine.max_num_seqs, tokens)
    hidden_states = tokens * model.hidden_size * engine.dtype_bytes
    # Logits are gathered to the full vocabulary on every TP rank.
    sampler = hidden_states + rows * model.vocab_size * SAMPLER_BYTES_PER_LOGIT
    return max(forward, sampler)


def modelled_cuda_graph_bytes(model: ModelFacts, engine: EngineSettings) -> int:
    if engine.enforce_eager:
        return 0  # --enforce-eager captures no graphs
    batch = min(2 * engine.max_num_seqs, MAX_CUDA_GRAPH_BATCH)
    return CUDA_GRAPH_BYTES_PER_UNIT * batch * model.hidden_size * model.layers


def _measured_or(value: int | None, modelled: int) -> int:
    return modelled if value is None else value


def activations_bytes(model: ModelFacts, engine: EngineSettings, tensor_parallel: int = 1) -> int:
    measured = engine.measured.activations_bytes if engine.measured else None
    return _measured_or(measured, modelled_activations_bytes(model, engine, tensor_parallel))


def cpu_runtime_bytes(runtime: str) -> int:
    """What the engine program takes on a CPU machine beyond weights, KV cache and activations."""
    return LLAMACPP_CPU_OVERHEAD_BYTES if runtime == "llamacpp" else VLLM_CPU_RUNTIME_BYTES


def overhead_bytes(model: ModelFacts, engine: EngineSettings, tensor_parallel: int = 1) -> int:
    if engine.vendor == "cpu":
        return cpu_runtime_bytes(engine.runtime)
    measured = engine.measured
    non_torch = NON_TORCH_BYTES + (NCCL_BYTES if tensor_parallel > 1 else 0)
    non_torch = _measured_or(measured.non_torch_bytes if measured else None, non_torch)
    graphs = modelled_cuda_graph_bytes(model, engine)
    graphs = _measured_or(measured.cuda_graph_bytes if measured else None, graphs)
    return non_torch + graphs


def estimate_copy(model: ModelFacts, engine: EngineSettings, tensor_parallel: int = 1) -> Estimate:
    """The per-GPU footprint of one copy split over `tensor_parallel` GPUs, in parts."""
    if tensor_parallel < 1:
        raise ValueError("tensor_parallel: must be at least 1")
    context = engine.max_model_len or model.max_context
    return Estimate(
        weights_bytes=weights_bytes(model, engine, tensor_parallel),
        kv_cache_bytes=kv_bytes_for_request(model, engine, context, tensor_parallel),
        activations_bytes=activations_bytes(model, engine, tensor_parallel),
        overhead_bytes=overhead_bytes(model, engine, tensor_parallel),
        kv_bytes_per_token=kv_bytes_per_token(model, engine, tensor_parallel),
        tensor_parallel=tensor_parallel,
    )


def available_kv_bytes(
    model: ModelFacts, engine: EngineSettings, budget_bytes: int, tensor_parallel: int = 1
) -> int:
    """What a budget (total x gpu_memory_utilization) leaves for the KV cache after the rest."""
    part = estimate_copy(model, engine, tensor_parallel)
    fixed = part.weights_bytes + part.activations_bytes + part.overhead_bytes
    return max(0, budget_bytes - fixed)


def kv_tokens_for_bytes(
    model: ModelFacts, engine: EngineSettings, kv_bytes: int, tensor_parallel: int = 1
) -> int:
    """Tokens `kv_bytes` of KV cache hold, in whole pages of every KV layer, as vLLM counts."""
    per_token = model.layers * kv_bytes_per_layer_token(model, engine, tensor_parallel)
    if per_token == 0:
        return 0
    block = block_tokens(engine)
    return kv_bytes // (block * per_token) * block


def kv_cache_size_tokens(
    model: ModelFacts, engine: EngineSettings, budget_bytes: int, tensor_parallel: int = 1
) -> int:
    """vLLM's "GPU KV cache size: N tokens" for a budget of total x gpu_memory_utilization."""
    available = available_kv_bytes(model, engine, budget_bytes, tensor_parallel)
    return kv_tokens_for_bytes(model, engine, available, tensor_parallel)


def requests_at_full_context(
    model: ModelFacts, engine: EngineSettings, budget_bytes: int, tensor_parallel: int = 1
) -> int:
    """How many requests of max_model_len tokens the budget's KV cache holds at once."""
    per_request = estimate_copy(model, engine, tensor_parallel).kv_cache_bytes
    available = available_kv_bytes(model, engine, budget_bytes, tensor_parallel)
    if per_request == 0:
        # No KV cache (encoder-only): only the scheduler limits it, if the rest fits at all.
        fits = estimate_copy(model, engine, tensor_parallel).total_bytes <= budget_bytes
        return engine.max_num_seqs if fits else 0
    return available // per_request


def largest_context(
    model: ModelFacts, engine: EngineSettings, budget_bytes: int, tensor_parallel: int = 1
) -> int:
    """The longest max_model_len (up to the model's own) that fits the budget; 0 if none."""

    def fits(context: int) -> bool:
        settings = dataclasses.replace(engine, max_model_len=context)
        return estimate_copy(model, settings, tensor_parallel).total_bytes <= budget_bytes

    low, high = 0, model.max_context
    while low < high:  # KV only grows with the context, so the answer can be bisected
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low
