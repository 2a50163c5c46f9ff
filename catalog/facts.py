"""A catalog model and variant as placement's ModelFacts, and engine settings as EngineSettings."""

from __future__ import annotations

from typing import Any

import placement
from catalog.models import Model, Variant

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def model_facts(model: Model, variant: Variant) -> placement.ModelFacts:
    mla = placement.MlaFacts(**model.mla) if model.mla else None
    return placement.ModelFacts(
        name=model.repo_id,
        layers=model.layers,
        attention_heads=model.attention_heads,
        kv_heads=model.kv_heads,
        head_dim=model.head_dim,
        hidden_size=model.hidden_size,
        vocab_size=model.vocab_size,
        max_context=model.max_context,
        weight_bytes=variant.size_bytes,
        parameters=model.params_total,
        sliding_window=model.sliding_window,
        global_layers=model.global_layers,
        mla=mla,
        encoder_only=model.encoder_only,
    )


# The engine settings that change a copy's memory, by their vLLM flag name.
MEMORY_SETTINGS = {
    "max_model_len": int,
    "kv_cache_dtype": str,
    "max_num_seqs": int,
    "max_num_batched_tokens": int,
    "enforce_eager": bool,
    "gpu_memory_utilization": float,
}


def engine_settings(
    model: Model, variant: Variant, settings: dict[str, Any]
) -> placement.EngineSettings:
    """Placement's view of a deployment's engine settings (only what changes memory)."""
    given = {
        name: kind(settings[name]) for name, kind in MEMORY_SETTINGS.items() if name in settings
    }
    given.setdefault("max_num_batched_tokens", max(2048, given.get("max_num_seqs", 256)))
    return placement.EngineSettings(
        vendor="nvidia",
        runtime=variant.engine,
        dtype_bytes=DTYPE_BYTES.get(model.native_dtype, 2),
        min_compute_capability=variant.min_compute_capability or None,
        **given,
    )
