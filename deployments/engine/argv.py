"""Renders a deployment's engine settings and a copy's placement into the exact argv launched.

One function per engine. The result is an argument list, never a shell string: each value is
its own element, so nothing in a setting can be read as a shell command. The copy's engine key
is never on it: each engine reads its key from the environment (`key_environment`), so it shows
in no process list and no record of the command line.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from typing import Any

from clusters.backends.argv import without_key
from deployments.engine.settings import CATALOG, validate_settings
from placement.estimate import LLAMACPP_PROMPT_CACHE_MIB

PORT_SHOWN = "<port>"  # a copy's port is chosen when it launches
# The variable each engine reads its API key from (vLLM: VLLM_API_KEY; llama.cpp: LLAMA_API_KEY).
KEY_VARIABLE = {"vllm": "VLLM_API_KEY", "llamacpp": "LLAMA_API_KEY"}


@dataclass(frozen=True)
class LaunchFacts:
    """What the argv needs beyond the settings: where the copy runs and how it is reached."""

    model: str  # repository id, or a local path
    served_name: str
    port: int
    gpu_memory_utilization: float
    tensor_parallel: int = 1
    revision: str = ""
    host: str = "127.0.0.1"
    # On a machine's CPU (vendor `cpu`): its threads, and the KV cache its budget leaves.
    on_cpu: bool = False
    cpu_threads: int = 0
    kv_cache_bytes: int = 0
    # The cluster's vLLM version: the settings are checked again against its flags at launch.
    engine_version: str = ""
    # A platform admin trusts the model's own code (catalog/trust.py): vLLM may run it.
    trust_remote_code: bool = False


def flag_arguments(settings: dict[str, Any]) -> list[str]:
    """Each setting as its flag (sorted by name, so the argv is stable), then the other flags."""
    arguments: list[str] = []
    for name, value in sorted(settings.items()):
        setting = CATALOG[name]
        if name == "other_flags":
            continue
        if isinstance(value, bool):
            arguments += [setting.flag] if value else [setting.off_flag] if setting.off_flag else []
        else:
            arguments += [setting.flag, str(value)]
    # Already checked word by word by validate_settings; split exactly as it was checked.
    return arguments + shlex.split(settings.get("other_flags", ""), posix=True)


def vllm_argv(settings: dict[str, Any], facts: LaunchFacts) -> list[str]:
    """`vllm serve …` for one copy. The placement's memory share overrides any stored value."""
    checked = validate_settings(settings, facts.engine_version)
    checked.pop("gpu_memory_utilization", None)
    argv = ["vllm", "serve", facts.model, "--served-model-name", facts.served_name]
    argv += ["--host", facts.host, "--port", str(facts.port)]
    if facts.on_cpu:  # no GPU share: the cache is sized in bytes from the copy's budget
        argv += ["--kv-cache-memory-bytes", str(facts.kv_cache_bytes)]
        return argv + revision_arguments(facts) + flag_arguments(checked)
    argv += ["--gpu-memory-utilization", f"{facts.gpu_memory_utilization:.4g}"]
    if facts.tensor_parallel > 1:
        argv += ["--tensor-parallel-size", str(facts.tensor_parallel)]
    return argv + revision_arguments(facts) + flag_arguments(checked)


def revision_arguments(facts: LaunchFacts) -> list[str]:
    """The revision, and the model's own code where an admin trusts it (for that revision)."""
    trusted = ["--trust-remote-code"] if facts.trust_remote_code else []
    return (["--revision", facts.revision] if facts.revision else []) + trusted


def llamacpp_argv(settings: dict[str, Any], facts: LaunchFacts, gguf_path: str) -> list[str]:
    """`llama-server …` for a GGUF variant (all layers on the GPU when there is one)."""
    checked = validate_settings(settings, facts.engine_version)
    argv = ["llama-server", "--model", gguf_path, "--alias", facts.served_name]
    # --metrics: llama.cpp serves /metrics only when asked, and the watcher reads it.
    argv += ["--host", facts.host, "--port", str(facts.port), "--metrics"]
    if facts.on_cpu:
        # Its prompt cache lives in the machine's memory, the copy's budget: bounded, as counted.
        argv += ["--threads", str(facts.cpu_threads or 1)]
        argv += ["--cache-ram", str(LLAMACPP_PROMPT_CACHE_MIB)]
    else:
        argv += ["--n-gpu-layers", "999"]
    if "max_model_len" in checked:
        argv += ["--ctx-size", str(checked["max_model_len"])]
    if "max_num_seqs" in checked:
        argv += ["--parallel", str(checked["max_num_seqs"])]
    return argv


def key_environment(engine: str, api_key: str) -> dict[str, str]:
    """The copy's engine key, in the variable its engine reads it from."""
    return {KEY_VARIABLE.get(engine, KEY_VARIABLE["vllm"]): api_key}


def cpu_threads(share: float, cores: int) -> int:
    """A copy of share s of a CPU machine gets ⌊s × cores⌋ threads, and at least one."""
    return max(1, math.floor(share * cores))


def cpu_environment(engine: str, facts: LaunchFacts) -> dict[str, str]:
    """The threads vLLM's CPU build may use. Not pinned to cores (copies that share a machine
    would pin the same ones). No VLLM_CPU_KVCACHE_SPACE: it takes whole GiB and overrides
    --kv-cache-memory-bytes, which sizes the cache to the byte."""
    if not facts.on_cpu or engine != "vllm":
        return {}
    threads = str(facts.cpu_threads or 1)
    return {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": threads}


def preview_argv(
    settings: dict[str, Any], facts: LaunchFacts, engine: str = "vllm", gguf_path: str = ""
) -> list[str]:
    """The argv a copy will be launched with, as the editor shows it: built by the same
    function the launcher calls, with the port (chosen at launch) and the key hidden."""
    if engine == "llamacpp":
        argv = llamacpp_argv(settings, facts, gguf_path)
    else:
        argv = vllm_argv(settings, facts)
    return [
        PORT_SHOWN if item == str(facts.port) and argv[i - 1] == "--port" else item
        for i, item in enumerate(without_key(argv))
    ]
