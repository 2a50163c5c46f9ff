"""Suggested engine settings for a model, each with why.

First from a curated copy of vLLM's recipe facts (vllm-project/recipes@8959cf6, Apache-2.0, as
summarised in reference/vllm.md §2.2) when the model has a recipe; otherwise from rules for the
model's family and tasks. Then from memory: when the model's whole context does not fit in one
copy, the longest round length that does. A parser the cluster's vLLM version does not have is
not suggested.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deployments.engine.context import EngineContext, nice_context
from deployments.engine.versions import flag_list

RECIPES_SOURCE = "vLLM's recipe for {model} (vllm-project/recipes)"


@dataclass(frozen=True)
class Suggestion:
    setting: str
    value: Any
    why: str


@dataclass(frozen=True)
class Recipe:
    """What a recipe's YAML says: base args, and the tool-calling and reasoning features."""

    tool_call_parser: str = ""
    reasoning_parser: str = ""
    trust_remote_code: bool = False
    runner: str = ""
    note: str = ""


QWEN3 = Recipe(tool_call_parser="hermes", reasoning_parser="qwen3")
DEEPSEEK_NOTE = "the recipe also passes its own chat template, which Berth does not load"
# reference/vllm.md §2.2, by repository id.
RECIPES: dict[str, Recipe] = {
    "Qwen/Qwen3-0.6B": QWEN3,
    "Qwen/Qwen3-8B": QWEN3,
    "Qwen/Qwen3-32B": QWEN3,
    "Qwen/Qwen3-30B-A3B": QWEN3,
    "openai/gpt-oss-20b": Recipe(tool_call_parser="openai"),
    "openai/gpt-oss-120b": Recipe(tool_call_parser="openai"),
    "deepseek-ai/DeepSeek-V3": Recipe(
        tool_call_parser="deepseek_v3",
        reasoning_parser="deepseek_v3",
        trust_remote_code=True,
        note=DEEPSEEK_NOTE,
    ),
    "deepseek-ai/DeepSeek-R1": Recipe(
        tool_call_parser="deepseek_v3",
        reasoning_parser="deepseek_r1",
        trust_remote_code=True,
        note=DEEPSEEK_NOTE,
    ),
    "meta-llama/Llama-3.1-8B-Instruct": Recipe(),
    "meta-llama/Llama-3.3-70B-Instruct": Recipe(),
}
# Rules for a family without a recipe (vLLM's parser for the family's chat format).
FAMILY_RULES: dict[str, Recipe] = {
    "Qwen3": QWEN3,
    "Qwen2.5": Recipe(tool_call_parser="hermes"),
    "Llama 3": Recipe(tool_call_parser="llama3_json"),
    "Mistral": Recipe(tool_call_parser="mistral"),
    "DeepSeek R1 Distill": Recipe(reasoning_parser="deepseek_r1"),
    "gpt-oss": Recipe(tool_call_parser="openai"),
}


def suggest(context: EngineContext) -> list[Suggestion]:
    """Every suggestion for the model where it will run, each with why."""
    if context.engine != "vllm":
        return memory_suggestions(context)
    return recipe_suggestions(context) + memory_suggestions(context)


def source_of(context: EngineContext) -> tuple[Recipe, str]:
    model = context.model
    if model.repo_id in RECIPES:
        return RECIPES[model.repo_id], RECIPES_SOURCE.format(model=model.repo_id)
    if "embeddings" in (model.tasks or []):
        return Recipe(runner="pooling"), f"{model.name} is an embedding model"
    family = FAMILY_RULES.get(model.family)
    if family is not None:
        return family, f"the rule for the {model.family} family"
    return Recipe(), ""


def recipe_suggestions(context: EngineContext) -> list[Suggestion]:
    recipe, source = source_of(context)
    flags = flag_list(context.version)
    found: list[Suggestion] = []
    note = f" ({recipe.note})" if recipe.note else ""
    if recipe.tool_call_parser in flags.tool_call_parsers:
        why = f"Tool calling in the {recipe.tool_call_parser} format: from {source}{note}."
        found.append(Suggestion("enable_auto_tool_choice", True, why))
        found.append(Suggestion("tool_call_parser", recipe.tool_call_parser, why))
    if recipe.reasoning_parser in flags.reasoning_parsers:
        why = f"Its thinking shown apart with the {recipe.reasoning_parser} parser: from {source}."
        found.append(Suggestion("reasoning_parser", recipe.reasoning_parser, why))
    if recipe.runner:
        found.append(Suggestion("runner", recipe.runner, f"Serve embeddings: {source}."))
    return found


def needs_own_code(context: EngineContext) -> str:
    """Why the model needs its own code to run, where a recipe says so ("" otherwise): not a
    suggestion an operator applies, since a platform admin decides (catalog/trust.py)."""
    recipe, source = source_of(context)
    if not recipe.trust_remote_code:
        return ""
    return f"The model's repository carries code it needs to run: from {source}."


def memory_suggestions(context: EngineContext) -> list[Suggestion]:
    """A shorter longest conversation when the model's own does not fit one copy's memory."""
    try:
        fits = context.largest_context({})
    except ValueError:
        return []
    longest = context.model.max_context
    if fits is None or fits >= longest or fits < 256:
        return []
    value = nice_context(fits)
    why = (
        f"The model's full {longest:,} tokens do not fit in the memory of one copy; "
        f"{fits:,} do, so {value:,} leaves some room."
    )
    return [Suggestion("max_model_len", value, why)]


def suggested_settings(context: EngineContext) -> dict[str, Any]:
    """The suggestions as settings, to pre-fill a new deployment's editor."""
    return {s.setting: s.value for s in suggest(context)}


def reasons(context: EngineContext) -> dict[str, str]:
    """Why each suggested setting is suggested, by setting name."""
    return {s.setting: s.why for s in suggest(context)}
