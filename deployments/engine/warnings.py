"""Warnings before a setting that will not start (or that runs code), computed with the estimator.

Each warning names the setting it is about, so the editor shows it beside that setting. The
checks follow reference/vllm.md §1.5: a conversation longer than the model supports, or longer
than fits in the memory of one copy; a memory share above 95 %; tool calling without a format, or
a format without tool calling; and the model's own code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deployments.engine.context import EngineContext
from placement.shares import HIGH_SHARE, SHARED_LIMIT
from placement.words import gib, percent


@dataclass(frozen=True)
class EngineWarning:
    code: str
    setting: str
    message: str


def warnings_for(settings: dict[str, Any], context: EngineContext) -> list[EngineWarning]:
    found: list[EngineWarning] = []
    for check in CHECKS:
        found += check(settings, context)
    return found


def context_beyond_model(settings: dict[str, Any], context: EngineContext) -> list[EngineWarning]:
    asked = settings.get("max_model_len")
    longest = context.model.max_context
    if not asked or asked <= longest:
        return []
    message = (
        f"A conversation of {asked:,} tokens is longer than {context.model.name} supports "
        f"({longest:,} tokens): vLLM will not start. Use {longest:,} or less."
    )
    return [EngineWarning("context_beyond_model", "max_model_len", message)]


def context_beyond_memory(settings: dict[str, Any], context: EngineContext) -> list[EngineWarning]:
    asked = min(
        settings.get("max_model_len") or context.model.max_context, context.model.max_context
    )
    budget = context.budget_bytes(settings)
    try:
        fits = context.largest_context(settings)
    except ValueError as error:
        return [EngineWarning("impossible", "max_num_batched_tokens", placement_words(error))]
    if budget is None or fits is None or asked <= fits:
        return []
    room = f"the {gib(budget)} the engine of one copy may use"
    if fits == 0:
        message = (
            f"The model does not fit in {room}, even with a short conversation: give each copy "
            "more memory (a larger share, or more accelerators), or pick a smaller variant."
        )
    else:
        message = (
            f"A conversation of {asked:,} tokens does not fit in {room}: at most {fits:,} "
            "tokens fit. Shorten the longest conversation, turn on the 8-bit context cache, or "
            "give each copy more memory."
        )
    return [EngineWarning("context_beyond_memory", "max_model_len", message)]


def placement_words(error: ValueError) -> str:
    field, _, problem = str(error).partition(": ")
    return f"{field.replace('_', ' ')}: {problem}" if problem else str(error)


def share_too_high(settings: dict[str, Any], context: EngineContext) -> list[EngineWarning]:
    share = settings.get("gpu_memory_utilization")
    if not share or share <= HIGH_SHARE:
        return []
    message = (
        f"A memory share of {percent(share)} leaves vLLM too little room outside it (CUDA "
        "graphs, the sampler's warm-up, other processes): it may not start. "
        f"{percent(HIGH_SHARE)} or less is safer."
    )
    return [EngineWarning("share_above_95", "gpu_memory_utilization", message)]


def tool_format_mismatch(settings: dict[str, Any], context: EngineContext) -> list[EngineWarning]:
    parser = settings.get("tool_call_parser")
    calling = settings.get("enable_auto_tool_choice")
    if parser and not calling:
        message = (
            f"A tool format ({parser}) is set but tool calling is off: the model answers in "
            "text only and the format is not used. Turn tool calling on, or clear the format."
        )
        return [EngineWarning("tool_format_without_tool_calling", "tool_call_parser", message)]
    if calling and not parser:
        message = "Tool calling needs a format: vLLM refuses to start without one."
        return [EngineWarning("tool_calling_without_format", "tool_call_parser", message)]
    return []


CHECKS = [
    context_beyond_model,
    context_beyond_memory,
    share_too_high,
    tool_format_mismatch,
]


def cap_share(asked: float | None, context: EngineContext) -> tuple[float | None, str]:
    """The memory share within its limit (DESIGN §4), and what to say when it was lowered."""
    limit = context.share_limit()
    if asked is None or asked <= limit:
        return asked, ""
    if context.size < 1:
        why = (
            f"{percent(asked)} is more than a copy of {context.size:g} of an accelerator may use: "
            f"capped at {percent(limit, decimals=1)} ({SHARED_LIMIT:g} × its share; neighbours on "
            "the accelerator need the rest)."
        )
    else:
        why = f"{percent(asked)} is more than the whole accelerator: capped at {percent(limit)}."
    return limit, why
