"""Renders a deployment's engine settings and a copy's placement into the exact argv launched.

One function per engine. The result is an argument list, never a shell string: each value is
its own element, so nothing in a setting can be read as a shell command.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deployments.engine.settings import CATALOG, validate_settings


@dataclass(frozen=True)
class LaunchFacts:
    """What the argv needs beyond the settings: where the copy runs and how it is reached."""

    model: str  # repository id, or a local path
    served_name: str
    port: int
    api_key: str
    gpu_memory_utilization: float
    tensor_parallel: int = 1
    revision: str = ""
    host: str = "127.0.0.1"


def flag_arguments(settings: dict[str, Any]) -> list[str]:
    arguments: list[str] = []
    for name, value in sorted(settings.items()):
        flag = CATALOG[name].flag
        if isinstance(value, bool):
            arguments += [flag] if value else []
        else:
            arguments += [flag, str(value)]
    return arguments


def vllm_argv(settings: dict[str, Any], facts: LaunchFacts) -> list[str]:
    """`vllm serve …` for one copy. The placement's memory share overrides any stored value."""
    checked = validate_settings(settings)
    checked.pop("gpu_memory_utilization", None)
    argv = ["vllm", "serve", facts.model, "--served-model-name", facts.served_name]
    argv += ["--host", facts.host, "--port", str(facts.port), "--api-key", facts.api_key]
    argv += ["--gpu-memory-utilization", f"{facts.gpu_memory_utilization:.4g}"]
    if facts.tensor_parallel > 1:
        argv += ["--tensor-parallel-size", str(facts.tensor_parallel)]
    if facts.revision:
        argv += ["--revision", facts.revision]
    return argv + flag_arguments(checked)


def llamacpp_argv(settings: dict[str, Any], facts: LaunchFacts, gguf_path: str) -> list[str]:
    """`llama-server …` for a GGUF variant (all layers on the GPU when there is one)."""
    checked = validate_settings(settings)
    argv = ["llama-server", "--model", gguf_path, "--alias", facts.served_name]
    argv += ["--host", facts.host, "--port", str(facts.port), "--api-key", facts.api_key]
    argv += ["--n-gpu-layers", "999"]
    if "max_model_len" in checked:
        argv += ["--ctx-size", str(checked["max_model_len"])]
    if "max_num_seqs" in checked:
        argv += ["--parallel", str(checked["max_num_seqs"])]
    return argv


def redacted(argv: list[str]) -> list[str]:
    """The argv with its API key hidden, for logs and pages."""
    shown = list(argv)
    for position, item in enumerate(shown[:-1]):
        if item == "--api-key":
            shown[position + 1] = "********"
    return shown
