"""From argv, environment and model files to the engine's settings, checked as vLLM checks them.

The model's facts come, in order of precedence, from the single BERTH_SIM_* overrides, then
BERTH_SIM_MODEL_JSON, then the model directory's own config.json (when MODEL is a local path;
its *.safetensors sizes give the weights), then the defaults (a Qwen3-0.6B).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusters.simulator.cli import is_pooling
from clusters.simulator.contract import GIB, SimSettings
from clusters.simulator.memory import (
    EngineShape,
    GpuState,
    ModelFacts,
    build_facts,
    facts_from_config,
)

BIG_GPU = 70 * GIB  # vLLM's larger scheduler defaults start here (and never on an A100)
DTYPE_NAMES = {"half": "float16", "float16": "float16", "bfloat16": "bfloat16"}
DTYPE_NAMES |= {"float": "float32", "float32": "float32"}


class ConfigFailure(Exception):
    """vLLM's API server rejects its arguments before any engine starts."""

    def __init__(self, exc_type: str, message: str) -> None:
        super().__init__(message)
        self.line = f"{exc_type}: {message}"


def model_dir_facts(model: str) -> dict[str, Any]:
    """config.json and checkpoint size of a local model directory, if MODEL is one."""
    folder = Path(model)
    config = folder / "config.json"
    if not config.is_file():
        return {}
    found = facts_from_config(json.loads(config.read_text(encoding="utf-8")))
    size = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    if size > 0:
        found["weights_bytes"] = size
    return found


def load_facts(model: str, settings: SimSettings) -> ModelFacts:
    overrides = {
        "weights_bytes": settings.weights_bytes,
        "num_layers": settings.num_layers,
        "num_kv_heads": settings.num_kv_heads,
        "head_dim": settings.head_dim,
        "encoder_only": settings.encoder_only,
    }
    from_json = facts_from_config(settings.model_json) if settings.model_json else {}
    return build_facts(model_dir_facts(model), from_json, overrides)


def gpu_state(settings: SimSettings) -> GpuState:
    free = settings.free_memory if settings.free_memory is not None else settings.gpu_memory
    return GpuState(total=settings.gpu_memory, free=free, hidden=settings.hidden_memory)


def resolve_dtype(requested: str, facts: ModelFacts) -> str:
    """--dtype auto keeps a bf16/fp16 checkpoint's dtype and runs fp32 checkpoints in fp16."""
    if requested != "auto":
        return DTYPE_NAMES[requested]
    return facts.dtype if facts.dtype in ("float16", "bfloat16") else "float16"


def scheduler_defaults(settings: SimSettings) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) for the API server, as vLLM picks them."""
    big = settings.gpu_memory >= BIG_GPU and "A100" not in settings.gpu_name
    return (8192, 1024) if big else (2048, 256)


@dataclass(frozen=True)
class Resolved:
    facts: ModelFacts
    shape: EngineShape
    pooling: bool


def resolve(ns: argparse.Namespace, model: str, settings: SimSettings) -> Resolved:
    facts = load_facts(model, settings)
    check_utilization(ns.gpu_memory_utilization)
    # None: the model's own context; -1: auto, the longest that fits (known after profiling)
    max_len = facts.max_model_len if ns.max_model_len is None else ns.max_model_len
    max_len = None if max_len == -1 else max_len
    if max_len is not None:
        check_max_len(max_len, facts)
    check_tensor_parallel(ns.tensor_parallel_size, facts)
    batched, seqs = scheduler_limits(ns, settings, max_len or facts.max_model_len)
    shape = EngineShape(
        gpu_memory_utilization=ns.gpu_memory_utilization,
        max_model_len=max_len,
        block_size=ns.block_size,
        max_num_seqs=seqs,
        max_num_batched_tokens=batched,
        dtype=resolve_dtype(ns.dtype, facts),
        kv_cache_dtype=ns.kv_cache_dtype,
        tensor_parallel_size=ns.tensor_parallel_size,
        pipeline_parallel_size=ns.pipeline_parallel_size,
        enforce_eager=ns.enforce_eager,
        kv_cache_memory_bytes=ns.kv_cache_memory_bytes if ns.kv_cache_memory_bytes > 0 else None,
    )
    pooling = is_pooling(ns, facts.encoder_only, facts.architecture)
    return Resolved(facts, shape, pooling)


def check_utilization(value: float) -> None:
    if not 0 < value <= 1:
        raise ConfigFailure(
            "ValueError", f"GPU memory utilization must be less than 1.0. Got {value}."
        )


def check_max_len(max_len: int, facts: ModelFacts) -> None:
    """vLLM 0.32 refuses it in pydantic's validation of ModelConfig, in pydantic's words."""
    if max_len <= facts.max_model_len or os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") == "1":
        return
    reason = (
        f"User-specified max_model_len ({max_len}) is greater than the derived max_model_len "
        f"(max_position_embeddings={float(facts.max_model_len)} or model_max_length=None in "
        "model's config.json). To allow overriding this maximum, set the env var "
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with "
        "extreme caution. If the model uses relative position encoding (RoPE), positions "
        "exceeding derived_max_model_len lead to nan. If the model uses absolute position "
        "encoding, positions exceeding derived_max_model_len will cause a CUDA array "
        "out-of-bounds error."
    )
    raise ConfigFailure(
        "pydantic_core._pydantic_core.ValidationError",
        "1 validation error for ModelConfig\n"
        f"  Value error, {reason} [type=value_error, input_type=ArgsKwargs]\n"
        "    For further information visit https://errors.pydantic.dev/2.14/v/value_error",
    )


def check_tensor_parallel(size: int, facts: ModelFacts) -> None:
    if size < 1 or facts.num_attention_heads % size:
        raise ConfigFailure(
            "ValueError",
            f"Total number of attention heads ({facts.num_attention_heads}) must be divisible "
            f"by tensor parallel size ({size}).",
        )


def scheduler_limits(
    ns: argparse.Namespace, settings: SimSettings, max_len: int
) -> tuple[int, int]:
    default_batched, default_seqs = scheduler_defaults(settings)
    chunked = ns.enable_chunked_prefill is not False
    seqs = ns.max_num_seqs or default_seqs
    batched = ns.max_num_batched_tokens
    if batched is None:
        batched = default_batched if chunked else max(max_len, default_batched)
    if batched < seqs:
        raise ConfigFailure(
            "ValueError",
            f"max_num_batched_tokens ({batched}) must be greater than or equal to "
            f"max_num_seqs ({seqs}).",
        )
    if not chunked and batched < max_len:
        raise ConfigFailure(
            "ValueError",
            f"max_num_batched_tokens ({batched}) is smaller than max_model_len ({max_len}). "
            "This effectively limits the maximum sequence length to max_num_batched_tokens "
            "and makes vLLM reject longer sequences. Please increase max_num_batched_tokens "
            "or decrease max_model_len.",
        )
    return batched, seqs


def next_attempt(path: str) -> int:
    """Count this start in the attempts file (locked: copies may share one) and return it."""
    with open(path, "a+", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        previous = handle.read().strip()
        attempt = (int(previous) if previous.isdigit() else 0) + 1
        handle.seek(0)
        handle.truncate()
        handle.write(str(attempt))
    return attempt
