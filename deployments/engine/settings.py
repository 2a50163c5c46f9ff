"""The vLLM settings Berth knows, their types and limits, and their validation.

A deployment stores only what differs from the engine's defaults, as a flat object of setting
name to value; a setting not in this catalog is refused, so nothing unknown ever reaches an
engine's command line. Anything else goes through `other_flags`, whose text is checked word by
word against the flags of the vLLM version (deployments/engine/other_flags.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deployments.engine import other_flags
from deployments.engine.versions import FlagList, flags_for

KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
RUNNERS = ("auto", "generate", "pooling")


# Settings that are no longer an operator's, with where they went.
NOT_SETTINGS = {
    "trust_remote_code": "is not an engine setting: a platform admin decides whether a model's "
    "own code runs (Django admin → Code trusts); ask for it in the deployment's engine settings",
}


class EngineSettingsError(ValueError):
    """A setting is unknown or its value is out of range; `field` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Setting:
    name: str  # as stored, e.g. max_model_len
    flag: str  # as vLLM takes it, e.g. --max-model-len
    kind: type
    label: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    default: Any = None  # the engine's own default; None: decided by vLLM or by Berth
    off_flag: str = ""  # how a switch that is on by default is turned off
    parsers: str = ""  # "tool_call_parsers" | "reasoning_parsers": choices come from the version


CATALOG = {
    s.name: s
    for s in [
        Setting(
            "max_model_len", "--max-model-len", int, "Longest conversation (tokens)", 16, 10_000_000
        ),
        Setting(
            "gpu_memory_utilization", "--gpu-memory-utilization", float, "Memory share", 0.01, 1.0
        ),
        Setting(
            "kv_cache_dtype",
            "--kv-cache-dtype",
            str,
            "Context cache precision",
            choices=KV_CACHE_DTYPES,
            default="auto",
        ),
        Setting("max_num_seqs", "--max-num-seqs", int, "Requests at once", 1, 65_536),
        Setting(
            "max_num_batched_tokens",
            "--max-num-batched-tokens",
            int,
            "Tokens per step",
            1,
            10_000_000,
        ),
        Setting("enforce_eager", "--enforce-eager", bool, "Without CUDA graphs", default=False),
        Setting(
            "enable_prefix_caching",
            "--enable-prefix-caching",
            bool,
            "Reuse shared prompt starts",
            default=True,
            off_flag="--no-enable-prefix-caching",
        ),
        Setting(
            "enable_chunked_prefill",
            "--enable-chunked-prefill",
            bool,
            "Split long prompts",
            default=True,
            off_flag="--no-enable-chunked-prefill",
        ),
        Setting(
            "enable_auto_tool_choice",
            "--enable-auto-tool-choice",
            bool,
            "Tool calling",
            default=False,
        ),
        Setting(
            "tool_call_parser",
            "--tool-call-parser",
            str,
            "Tool calling format",
            parsers="tool_call_parsers",
        ),
        Setting(
            "reasoning_parser",
            "--reasoning-parser",
            str,
            "Show its thinking separately",
            parsers="reasoning_parsers",
        ),
        Setting("runner", "--runner", str, "Runner", choices=RUNNERS, default="auto"),
        Setting("other_flags", "", str, "Other flags"),
    ]
}


def parse_value(setting: Setting, raw: Any, flags: FlagList | None = None) -> Any:
    if setting.kind is bool:
        if isinstance(raw, bool):
            return raw
        raise EngineSettingsError(setting.name, "must be true or false")
    if setting.name == "other_flags":
        return parse_other_flags(raw, flags or flags_for(""))
    if setting.kind is str:
        choices = setting.choices or parser_choices(setting, flags or flags_for(""))
        if raw not in choices:
            raise EngineSettingsError(setting.name, f"must be one of {', '.join(choices)}")
        return raw
    return parse_number(setting, raw)


def parser_choices(setting: Setting, flags: FlagList) -> tuple[str, ...]:
    return tuple(getattr(flags, setting.parsers)) if setting.parsers else ()


def parse_other_flags(raw: Any, flags: FlagList) -> str:
    if not isinstance(raw, str):
        raise EngineSettingsError("other_flags", "must be text")
    try:
        other_flags.check(raw, flags)
    except other_flags.OtherFlagsError as refused:
        raise EngineSettingsError("other_flags", "; ".join(refused.problems)) from None
    return raw.strip()


def kind_words(setting: Setting) -> str:
    return "whole " if setting.kind is int else ""


def parse_number(setting: Setting, raw: Any) -> Any:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise EngineSettingsError(setting.name, f"must be a {kind_words(setting)}number")
    # Before int(): JSON's 1e999 reads as infinity, which int() cannot take.
    if raw != raw or raw in (float("inf"), float("-inf")):  # NaN or infinite
        raise EngineSettingsError(setting.name, "must be a finite number")
    if setting.kind is int and raw != int(raw):
        raise EngineSettingsError(setting.name, f"must be a {kind_words(setting)}number")
    value = setting.kind(raw)
    if (setting.low is not None and value < setting.low) or (
        setting.high is not None and value > setting.high
    ):
        raise EngineSettingsError(
            setting.name, f"must be between {setting.low:g} and {setting.high:g}"
        )
    return value


def known_setting(name: str) -> Setting:
    if name in NOT_SETTINGS:
        raise EngineSettingsError(name, NOT_SETTINGS[name])
    setting = CATALOG.get(name)
    if setting is None:
        known = ", ".join(sorted(CATALOG))
        raise EngineSettingsError(name, f"is not a setting Berth knows; known settings: {known}")
    return setting


def validate_settings(settings: Any, version: str) -> dict[str, Any]:
    """The settings, checked and normalised; raises EngineSettingsError naming the bad one.

    `version` is the cluster's vLLM version (Cluster.engine_version; blank: the newest Berth
    knows): parser names and other flags are checked against its flag list, at save and again
    at launch.
    """
    if not isinstance(settings, dict):
        raise EngineSettingsError("engine_settings", "must be an object of setting names to values")
    flags = flags_for(version)
    checked = {}
    for name, raw in settings.items():
        setting = known_setting(name)
        value = parse_value(setting, raw, flags)
        if name != "other_flags" or value:
            checked[name] = value
    return checked


def without_defaults(settings: dict[str, Any]) -> dict[str, Any]:
    """Only what differs from the engine's defaults (what a deployment stores)."""
    return {
        name: value
        for name, value in settings.items()
        if value not in (None, "") and value != CATALOG[name].default
    }


# --- what the API's OpenAPI document states ------------------------------------------------


def setting_schema(setting: Setting) -> dict[str, Any]:
    """A setting's JSON Schema: what parse_value takes whatever the vLLM version. Parser names
    and other flags are text here; the cluster's version decides which it takes."""
    if setting.kind is bool:
        return {"type": "boolean"}
    if setting.choices:
        return {"type": "string", "enum": list(setting.choices)}
    if setting.kind is str:
        return {"type": "string"}
    return {
        "type": "integer" if setting.kind is int else "number",
        "minimum": setting.low,
        "maximum": setting.high,
    }


def json_schema() -> dict[str, Any]:
    properties = {name: setting_schema(setting) for name, setting in CATALOG.items()}
    return {"type": "object", "properties": properties, "additionalProperties": False}


def check_shape(settings: Any) -> dict[str, Any]:
    """What json_schema() states, checked (EngineSettingsError naming the setting): names,
    types, ranges and fixed choices; not the parser names or other flags of a version."""
    if not isinstance(settings, dict):
        raise EngineSettingsError("engine_settings", "must be an object of setting names to values")
    for name, raw in settings.items():
        setting = known_setting(name)
        if setting.parsers or setting.name == "other_flags":
            if not isinstance(raw, str):
                raise EngineSettingsError(name, "must be text")
        else:
            parse_value(setting, raw)
    return settings
