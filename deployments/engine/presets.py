"""Tuned for: Balanced, Long documents, Many users, Low memory.

A preset is about a few settings and changes only those; every other setting keeps its value.
A value of None puts a setting back to the engine's default.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from deployments.engine.context import EngineContext, nice_context
from deployments.engine.settings import CATALOG

BALANCED_CONTEXT = 32_768
MANY_USERS_CONTEXT = 8_192
MANY_USERS_SEQS = 512
LOW_MEMORY_CONTEXT = 4_096
LOW_MEMORY_SEQS = 64


@dataclass(frozen=True)
class Preset:
    key: str
    label: str
    description: str
    about: tuple[str, ...]
    values: Callable[[EngineContext], dict[str, Any]]

    def labels(self) -> list[str]:
        return [CATALOG[name].label for name in self.about]


def fitting(context: EngineContext, settings: dict[str, Any], cap: int) -> int:
    """The longest round context up to `cap` (and the model's own) that fits one copy."""
    cap = min(cap, context.model.max_context)
    try:
        fits = context.largest_context(settings)
    except ValueError:
        fits = None
    if fits is None or fits >= cap:
        return cap
    return max(256, nice_context(fits))


def balanced(context: EngineContext) -> dict[str, Any]:
    return {
        "max_model_len": fitting(context, {}, BALANCED_CONTEXT),
        "max_num_seqs": None,
        "kv_cache_dtype": None,
    }


def long_documents(context: EngineContext) -> dict[str, Any]:
    fp8 = {"kv_cache_dtype": "fp8"}
    return {
        "max_model_len": fitting(context, fp8, context.model.max_context),
        "kv_cache_dtype": "fp8",
        "enable_chunked_prefill": None,
    }


def many_users(context: EngineContext) -> dict[str, Any]:
    return {
        "max_num_seqs": MANY_USERS_SEQS,
        "max_model_len": fitting(context, {}, MANY_USERS_CONTEXT),
        "enable_prefix_caching": None,
    }


def low_memory(context: EngineContext) -> dict[str, Any]:
    return {
        "max_model_len": min(LOW_MEMORY_CONTEXT, context.model.max_context),
        "kv_cache_dtype": "fp8",
        "max_num_seqs": LOW_MEMORY_SEQS,
        "enforce_eager": True,
    }


PRESETS = {
    p.key: p
    for p in [
        Preset(
            "balanced",
            "Balanced",
            "Suits most uses: a conversation of up to 32K tokens and the engine's defaults.",
            ("max_model_len", "max_num_seqs", "kv_cache_dtype"),
            balanced,
        ),
        Preset(
            "long_documents",
            "Long documents",
            "The longest conversation that fits, with an 8-bit context cache and long prompts "
            "split into steps.",
            ("max_model_len", "kv_cache_dtype", "enable_chunked_prefill"),
            long_documents,
        ),
        Preset(
            "many_users",
            "Many users",
            "More requests at once, shorter conversations, and shared prompt starts reused.",
            ("max_num_seqs", "max_model_len", "enable_prefix_caching"),
            many_users,
        ),
        Preset(
            "low_memory",
            "Low memory",
            "Short conversations, an 8-bit context cache, fewer requests at once and no graph "
            "capture.",
            ("max_model_len", "kv_cache_dtype", "max_num_seqs", "enforce_eager"),
            low_memory,
        ),
    ]
}


def apply(key: str, settings: dict[str, Any], context: EngineContext) -> dict[str, Any]:
    """The settings tuned for a preset: only the preset's own settings change."""
    preset = PRESETS[key]
    values = preset.values(context)
    tuned = {name: value for name, value in settings.items() if name not in preset.about}
    for name in preset.about:
        value = values.get(name)
        if value is not None and value != CATALOG[name].default:
            tuned[name] = value
    return tuned


def changed(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The settings whose value a preset changed, by name."""
    return sorted(name for name in set(before) | set(after) if before.get(name) != after.get(name))


def matching(settings: dict[str, Any], context: EngineContext) -> str:
    """The preset these settings are tuned for, or "" when none matches them."""
    for key in PRESETS:
        if apply(key, settings, context) == settings:
            return key
    return ""
