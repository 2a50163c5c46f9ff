"""The vLLM settings Berth knows, their types and limits, and their validation.

A deployment stores only what differs from the engine's defaults; a setting not in this
catalog is refused, so nothing unknown ever reaches an engine's command line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")


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
        Setting("enforce_eager", "--enforce-eager", bool, "Without CUDA graphs"),
    ]
}


def parse_value(setting: Setting, raw: Any) -> Any:
    if setting.kind is bool:
        if isinstance(raw, bool):
            return raw
        raise EngineSettingsError(setting.name, "must be true or false")
    if setting.kind is str:
        if raw not in setting.choices:
            raise EngineSettingsError(setting.name, f"must be one of {', '.join(setting.choices)}")
        return raw
    if (
        isinstance(raw, bool)
        or not isinstance(raw, int | float)
        or (setting.kind is int and raw != int(raw))
    ):
        raise EngineSettingsError(
            setting.name, f"must be a {'whole ' if setting.kind is int else ''}number"
        )
    if raw != raw or raw in (float("inf"), float("-inf")):  # NaN or infinite
        raise EngineSettingsError(setting.name, "must be a finite number")
    value = setting.kind(raw)
    if (setting.low is not None and value < setting.low) or (
        setting.high is not None and value > setting.high
    ):
        raise EngineSettingsError(
            setting.name, f"must be between {setting.low:g} and {setting.high:g}"
        )
    return value


def validate_settings(settings: Any) -> dict[str, Any]:
    """The settings, checked and normalised; raises EngineSettingsError naming the bad one."""
    if not isinstance(settings, dict):
        raise EngineSettingsError("engine_settings", "must be an object of setting names to values")
    checked = {}
    for name, raw in settings.items():
        setting = CATALOG.get(name)
        if setting is None:
            known = ", ".join(sorted(CATALOG))
            raise EngineSettingsError(
                name, f"is not a setting Berth knows; known settings: {known}"
            )
        checked[name] = parse_value(setting, raw)
    return checked
