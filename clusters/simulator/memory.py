"""The simulator's own model of how vLLM uses GPU memory (reference/vllm.md §3).

Deliberately independent of ``placement/``: the simulator is the referee that can prove an
estimate wrong, so it re-derives every figure from the rules vLLM applies:

- requested = gpu_memory_utilization x total; free memory at start must cover it;
- the weights (checkpoint bytes / (tp x pp)) must fit in the share, beside any hidden use
  (the share is treated as the engine's physical limit: on a packed GPU its neighbours hold
  the rest, which the simulator cannot see);
- KV available = requested - weights - hidden - activation peak - non-torch - CUDA graphs;
- one request at max_model_len must fit in the KV cache; capacity is counted in 16-token blocks.

Activation peak, non-torch and CUDA-graph sizes are the simulator's own rules of thumb, fitted
to the public logs quoted in the reference (Llama-3.1-8B: torch peak 1.21 GiB, graphs 0.36 GiB).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

GIB = 1 << 30
MIB = 1 << 20
DTYPE_BYTES = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0}
KV_DTYPE_BYTES = {
    "float16": 2.0,
    "bfloat16": 2.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "fp8_inc": 1.0,
    "fp8_ds_mla": 1.0,
    "int8_per_token_head": 1.0,
    "fp8_per_token_head": 1.0,
    "nvfp4": 0.5,
    "nvfp4_ds_mla": 0.5,
    "nvfp4_4over6": 0.5,
    "int4_per_token_head": 0.5,
    "turboquant_k8v4": 0.75,
    "turboquant_4bit_nc": 0.5,
    "turboquant_k3v4_nc": 0.5,
    "turboquant_3bit_nc": 0.375,
}
FP8_DS_MLA_BYTES_PER_LAYER = 656  # "block_size * 656" in vLLM's MLA spec
NON_TORCH = int(0.10 * GIB)  # cuBLAS workspaces and the like, as in the public logs
NCCL_EXTRA = int(0.25 * GIB)  # communicator buffers once there is more than one rank
CUDAGRAPH_PER_LAYER = 12 * MIB  # 32 layers -> 0.375 GiB, near Llama-3.1-8B's 0.36 GiB
ENCODER_ARCH_HINTS = ("Bert", "Roberta", "XLMRoberta", "Electra", "ModernBert")


@dataclass(frozen=True)
class ModelFacts:
    """What the memory model needs to know of a checkpoint. Defaults: a Qwen3-0.6B."""

    architecture: str = "Qwen3ForCausalLM"
    weights_bytes: int = 1_503_264_768
    num_layers: int = 28
    num_attention_heads: int = 16
    num_kv_heads: int = 8
    head_dim: int = 128
    hidden_size: int = 1024
    intermediate_size: int = 3072
    vocab_size: int = 151_936
    max_model_len: int = 40_960
    dtype: str = "bfloat16"
    encoder_only: bool = False
    sliding_window: int | None = None
    num_sliding_layers: int = 0
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int = 0
    quantization: str | None = None


def _first(config: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    return None


def _sliding_layers(config: Mapping[str, Any], layers: int | None) -> int | None:
    """Count sliding-window layers from layer_types, or from Gemma's every-Nth-global pattern."""
    layer_types = config.get("layer_types")
    if isinstance(layer_types, list):
        return sum(1 for kind in layer_types if "sliding" in str(kind))
    pattern = config.get("sliding_window_pattern")
    if config.get("sliding_window") and isinstance(pattern, int) and pattern > 1 and layers:
        return layers - layers // pattern
    return None


def facts_from_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Map HF config.json keys (or Berth's own names) onto ModelFacts fields.

    Accepted keys: weights_bytes, num_hidden_layers|num_layers|layers, num_attention_heads|heads,
    num_key_value_heads|num_kv_heads|kv_heads, head_dim, hidden_size, intermediate_size,
    vocab_size, max_model_len|max_position_embeddings, torch_dtype|dtype, architectures|
    architecture, encoder_only, sliding_window (+ layer_types or sliding_window_pattern, or
    num_sliding_layers), kv_lora_rank, qk_rope_head_dim, quantization_config.quant_method|
    quantization. A nested text_config (multimodal models) is read first and then overridden.
    """
    text = config.get("text_config")
    base = facts_from_config(text) if isinstance(text, Mapping) else {}
    layers = _first(config, "num_hidden_layers", "num_layers", "layers")
    heads = _first(config, "num_attention_heads", "heads")
    hidden = config.get("hidden_size")
    arch = _first(config, "architecture", "architectures")
    quant = config.get("quantization_config")
    found = {
        "weights_bytes": config.get("weights_bytes"),
        "num_layers": layers,
        "num_attention_heads": heads,
        "num_kv_heads": _first(config, "num_key_value_heads", "num_kv_heads", "kv_heads"),
        "head_dim": config.get("head_dim") or (hidden // heads if hidden and heads else None),
        "hidden_size": hidden,
        "intermediate_size": config.get("intermediate_size"),
        "vocab_size": config.get("vocab_size"),
        "max_model_len": _first(config, "max_model_len", "max_position_embeddings"),
        "dtype": _first(config, "torch_dtype", "dtype"),
        "architecture": arch[0] if isinstance(arch, list) and arch else arch,
        "encoder_only": config.get("encoder_only"),
        "sliding_window": config.get("sliding_window"),
        "num_sliding_layers": _first(config, "num_sliding_layers")
        or _sliding_layers(config, layers),
        "kv_lora_rank": config.get("kv_lora_rank"),
        "qk_rope_head_dim": config.get("qk_rope_head_dim"),
        "quantization": _first(config, "quantization")
        or (quant.get("quant_method") if isinstance(quant, Mapping) else None),
    }
    arch_name = found["architecture"] if isinstance(found["architecture"], str) else ""
    if found["encoder_only"] is None and any(hint in arch_name for hint in ENCODER_ARCH_HINTS):
        found["encoder_only"] = True
    if found["intermediate_size"] is None and hidden:
        found["intermediate_size"] = 4 * hidden
    return {**base, **{k: v for k, v in found.items() if v is not None}}


def build_facts(*layers: Mapping[str, Any]) -> ModelFacts:
    """Defaults, overridden by each mapping of ModelFacts fields in turn."""
    merged: dict[str, Any] = {}
    for layer in layers:
        merged.update({k: v for k, v in layer.items() if v is not None})
    return replace(ModelFacts(), **merged)


@dataclass(frozen=True)
class EngineShape:
    """The engine settings that decide memory use, resolved from argv and the model."""

    gpu_memory_utilization: float
    max_model_len: int | None  # None: --max-model-len auto, fit the context to memory
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    dtype: str  # resolved: float16 | bfloat16 | float32
    kv_cache_dtype: str
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    enforce_eager: bool = False
    kv_cache_memory_bytes: int | None = None


@dataclass(frozen=True)
class GpuState:
    total: int
    free: int
    hidden: int


@dataclass(frozen=True)
class MemoryPlan:
    """Every figure vLLM prints while it starts, per GPU."""

    total: int
    requested: int
    weights: int
    hidden: int
    activation: int
    non_torch: int
    cudagraph: int
    kv_available: int
    kv_bytes_per_token: int
    max_model_len: int
    num_gpu_blocks: int
    kv_tokens: int
    concurrency: float

    @property
    def non_kv(self) -> int:
        return self.weights + self.hidden + self.activation + self.non_torch + self.cudagraph


class StartupFailure(Exception):
    """vLLM stops here: ``stage`` says at which startup step, ``exc_type`` what it raises."""

    def __init__(self, stage: str, exc_type: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage
        self.exc_type = exc_type
        self.message = message

    @property
    def line(self) -> str:
        return f"{self.exc_type}: {self.message}"


def gib(value: float) -> str:
    return f"{value / GIB:.2f}"


def torch_size(value: float) -> str:
    """torch's format_size: the unit of CUDA OOM messages."""
    if value < 1024:
        return f"{int(value)} bytes"
    if value < MIB:
        return f"{value / 1024:.2f} KiB"
    if value < GIB:
        return f"{value / MIB:.2f} MiB"
    return f"{value / GIB:.2f} GiB"


def weights_per_gpu(facts: ModelFacts, shape: EngineShape) -> int:
    """Checkpoint bytes split over the ranks, rescaled when --dtype casts an unquantized model."""
    native = DTYPE_BYTES.get(facts.dtype, 2.0)
    scale = 1.0 if facts.quantization else DTYPE_BYTES[shape.dtype] / native
    ranks = shape.tensor_parallel_size * shape.pipeline_parallel_size
    return int(facts.weights_bytes * scale / ranks)


def layers_per_gpu(facts: ModelFacts, shape: EngineShape) -> int:
    return math.ceil(facts.num_layers / shape.pipeline_parallel_size)


def kv_dtype_bytes(shape: EngineShape) -> float:
    if shape.kv_cache_dtype == "auto":
        return DTYPE_BYTES[shape.dtype]
    return KV_DTYPE_BYTES.get(shape.kv_cache_dtype, DTYPE_BYTES[shape.dtype])


def kv_bytes_per_token_per_layer(facts: ModelFacts, shape: EngineShape) -> float:
    """One token's KV in one attention layer on one GPU (§3.2)."""
    if facts.encoder_only:
        return 0.0
    if facts.kv_lora_rank:  # MLA: one latent "head", not split over TP
        if shape.kv_cache_dtype == "fp8_ds_mla":
            return float(FP8_DS_MLA_BYTES_PER_LAYER)
        return (facts.kv_lora_rank + facts.qk_rope_head_dim) * kv_dtype_bytes(shape)
    heads = max(1, facts.num_kv_heads // shape.tensor_parallel_size)
    return 2 * heads * facts.head_dim * kv_dtype_bytes(shape)


def _layer_split(facts: ModelFacts, shape: EngineShape) -> tuple[int, int]:
    """(full-attention layers, sliding-window layers) on one GPU."""
    layers = layers_per_gpu(facts, shape)
    sliding = 0
    if facts.sliding_window:
        sliding = math.ceil(facts.num_sliding_layers / shape.pipeline_parallel_size)
    return layers - sliding, min(sliding, layers)


def kv_bytes_per_token(facts: ModelFacts, shape: EngineShape) -> int:
    """All KV layers of one GPU for one token: the size of a block is block_size times this."""
    return math.ceil(kv_bytes_per_token_per_layer(facts, shape) * layers_per_gpu(facts, shape))


def kv_needed(facts: ModelFacts, shape: EngineShape, max_len: int) -> int:
    """KV bytes one request of max_len tokens needs; sliding layers hold only their window.

    The pool keeps one block of every layer empty (vLLM's null block), so the request's blocks
    must fit beside it: 1 MiB of the tiny Llama's cache is 4 blocks of 128 tokens on the CPU
    build, and the engine says 384 tokens fit, not 512."""
    per_layer_block = kv_bytes_per_token_per_layer(facts, shape) * shape.block_size
    full, sliding = _layer_split(facts, shape)
    blocks = math.ceil(max_len / shape.block_size)
    need = (full + sliding) * per_layer_block + full * blocks * per_layer_block
    if sliding and facts.sliding_window:
        window = min(facts.sliding_window - 1 + shape.max_num_batched_tokens, max_len)
        need += sliding * (math.ceil(window / shape.block_size) + 1) * per_layer_block
    return math.ceil(need)


def estimate_max_model_len(facts: ModelFacts, shape: EngineShape, available: int) -> int:
    """The longest context whose one request fits in ``available`` (vLLM's binary search)."""
    low, high = 0, facts.max_model_len
    while low < high:
        middle = (low + high + 1) // 2
        if kv_needed(facts, shape, middle) <= available:
            low = middle
        else:
            high = middle - 1
    return low


def activation_peak(facts: ModelFacts, shape: EngineShape) -> int:
    """Torch peak of the profiling forward pass at max_num_batched_tokens, plus the sampler's
    fp32 logits for max_num_seqs dummy requests."""
    tp = shape.tensor_parallel_size
    width = 2 * facts.intermediate_size / tp + 4 * facts.hidden_size
    forward = shape.max_num_batched_tokens * width * DTYPE_BYTES[shape.dtype]
    sampler = min(shape.max_num_seqs, shape.max_num_batched_tokens) * facts.vocab_size / tp * 4
    if facts.encoder_only:
        sampler = 0.0
    return int(forward + sampler)


def non_torch_memory(shape: EngineShape) -> int:
    ranks = shape.tensor_parallel_size * shape.pipeline_parallel_size
    return NON_TORCH + (NCCL_EXTRA if ranks > 1 else 0)


def cudagraph_memory(facts: ModelFacts, shape: EngineShape) -> int:
    return 0 if shape.enforce_eager else CUDAGRAPH_PER_LAYER * layers_per_gpu(facts, shape)


def check_free_memory(shape: EngineShape, gpu: GpuState) -> None:
    requested = int(shape.gpu_memory_utilization * gpu.total)
    if shape.kv_cache_memory_bytes is None and gpu.free < requested:
        raise StartupFailure(
            "init_device",
            "ValueError",
            f"Free memory on device cuda:0 ({gib(gpu.free)}/{gib(gpu.total)} GiB) on startup "
            f"is less than desired GPU memory utilization ({shape.gpu_memory_utilization}, "
            f"{gib(requested)} GiB). Decrease GPU memory utilization or reduce GPU memory used "
            "by other processes.",
        )


def cuda_oom(
    limit: int, in_use: int, chunk: int, total: int, hidden: int, stage: str = "load"
) -> StartupFailure:
    """torch's OOM text for an allocation of ``chunk`` that does not fit under ``limit``."""
    return StartupFailure(
        stage,
        "torch.OutOfMemoryError",
        f"CUDA out of memory. Tried to allocate {torch_size(chunk)}. GPU 0 has a total capacity "
        f"of {torch_size(total)} of which {torch_size(max(0, limit - in_use))} is free. "
        f"Including non-PyTorch memory, this process has {torch_size(in_use)} memory in use. "
        f"Of the allocated memory {torch_size(in_use - hidden)} is allocated by PyTorch, and "
        "0 bytes is reserved by PyTorch but unallocated. If reserved but unallocated memory "
        "is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
        "fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
    )


def load_oom(facts: ModelFacts, shape: EngineShape, gpu: GpuState, limit: int) -> StartupFailure:
    """Weights arrive layer by layer; the first layer that crosses ``limit`` fails."""
    weights = weights_per_gpu(facts, shape)
    chunk = max(1, weights // max(1, layers_per_gpu(facts, shape)))
    loaded = max(0, min(weights, limit - gpu.hidden)) // chunk * chunk
    return cuda_oom(limit, gpu.hidden + loaded, chunk, gpu.total, gpu.hidden)


def check_weights(facts: ModelFacts, shape: EngineShape, gpu: GpuState) -> None:
    limit = budget_limit(shape, gpu)
    if weights_per_gpu(facts, shape) + gpu.hidden > limit:
        raise load_oom(facts, shape, gpu, limit)


def budget_limit(shape: EngineShape, gpu: GpuState) -> int:
    """What this engine may hold: its share, or the free memory with --kv-cache-memory-bytes."""
    if shape.kv_cache_memory_bytes is not None:
        return gpu.free
    return int(shape.gpu_memory_utilization * gpu.total)


def no_cache_memory() -> StartupFailure:
    return StartupFailure(
        "profile",
        "ValueError",
        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
        "when initializing the engine.",
    )


def kv_too_small(
    facts: ModelFacts, shape: EngineShape, max_len: int, available: int
) -> StartupFailure:
    needed = kv_needed(facts, shape, max_len)
    estimate = estimate_max_model_len(facts, shape, available)
    return StartupFailure(
        "profile",
        "ValueError",
        f"To serve at least one request with the model's max seq len ({max_len}), "
        f"({gib(needed)} GiB KV cache is needed, which is larger than the available KV cache "
        f"memory ({gib(available)} GiB). Based on the available memory, the estimated maximum "
        f"model length is {estimate}. Try increasing `gpu_memory_utilization` or decreasing "
        "`max_model_len` when initializing the engine.",
    )


def resolve_max_len(facts: ModelFacts, shape: EngineShape, available: int) -> int:
    """--max-model-len, or (auto) the longest context that fits, capped by the model's own."""
    if shape.max_model_len is not None:
        return shape.max_model_len
    if facts.encoder_only:
        return facts.max_model_len
    return estimate_max_model_len(facts, shape, available) or facts.max_model_len


@dataclass(frozen=True)
class Profile:
    """What vLLM's memory profiling finds, before it checks that the KV cache is usable."""

    requested: int
    weights: int
    hidden: int
    activation: int
    non_torch: int
    cudagraph: int
    kv_available: int

    @property
    def non_kv(self) -> int:
        return self.weights + self.hidden + self.activation + self.non_torch + self.cudagraph


def profile(facts: ModelFacts, shape: EngineShape, gpu: GpuState) -> Profile:
    """The share minus everything that is not KV cache (or --kv-cache-memory-bytes as given)."""
    weights = weights_per_gpu(facts, shape)
    activation = activation_peak(facts, shape)
    non_torch = non_torch_memory(shape)
    graphs = cudagraph_memory(facts, shape)
    non_kv = weights + gpu.hidden + activation + non_torch + graphs
    if shape.kv_cache_memory_bytes is not None:
        available = shape.kv_cache_memory_bytes
        requested = non_kv + available
    else:
        requested = int(shape.gpu_memory_utilization * gpu.total)
        available = requested - non_kv
    return Profile(requested, weights, gpu.hidden, activation, non_torch, graphs, available)


def check_kv_cache(facts: ModelFacts, shape: EngineShape, gpu: GpuState, found: Profile) -> int:
    """vLLM's checks after profiling; returns the max_model_len the engine will serve."""
    if shape.kv_cache_memory_bytes is not None and found.requested > gpu.free:
        in_use = found.non_kv
        raise cuda_oom(gpu.free, in_use, found.kv_available, gpu.total, gpu.hidden, "profile")
    if found.kv_available <= 0:
        raise no_cache_memory()
    max_len = resolve_max_len(facts, shape, found.kv_available)
    if kv_bytes_per_token(facts, shape) and kv_needed(facts, shape, max_len) > found.kv_available:
        raise kv_too_small(facts, shape, max_len, found.kv_available)
    return max_len


def plan_memory(facts: ModelFacts, shape: EngineShape, gpu: GpuState) -> MemoryPlan:
    """The whole startup accounting; raises StartupFailure where vLLM would stop."""
    check_free_memory(shape, gpu)
    check_weights(facts, shape, gpu)
    found = profile(facts, shape, gpu)
    max_len = check_kv_cache(facts, shape, gpu, found)
    per_token = kv_bytes_per_token(facts, shape)
    blocks = found.kv_available // (per_token * shape.block_size) if per_token else 0
    need = kv_needed(facts, shape, max_len)
    return MemoryPlan(
        total=gpu.total,
        requested=found.requested,
        weights=found.weights,
        hidden=found.hidden,
        activation=found.activation,
        non_torch=found.non_torch,
        cudagraph=found.cudagraph,
        kv_available=found.kv_available,
        kv_bytes_per_token=per_token,
        max_model_len=max_len,
        num_gpu_blocks=blocks,
        kv_tokens=blocks * shape.block_size,
        concurrency=blocks * per_token * shape.block_size / need if need else 0.0,
    )
