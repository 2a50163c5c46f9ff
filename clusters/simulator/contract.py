"""The engine simulator's environment contract: every ``BERTH_SIM_*`` variable, parsed once.

The simulated hardware, speed and failures come from the environment, never from argv, so the
argv stays exactly what a real ``vllm serve`` would get. One table (the dataclass fields of
:class:`SimSettings`) defines each variable, its parser and its default; :func:`build_env`
renders values back into strings for a launcher, so the two directions cannot drift apart.

Memory sizes accept bytes (``85899345920``), a unit (``80GiB``, ``79.2 GiB``, ``512MiB``,
``80GB``), or a bare decimal number, read as GiB (``79.2``); a bare integer below 1 Mi counts
as GiB too (``80``), since no GPU has less than a mebibyte.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

GIB = 1 << 30
ENGINE_MODULE = "clusters.simulator.engine"
FAIL_KINDS = ("free_memory", "oom", "cuda_error")
CRASH_KINDS = ("cuda_error", "oom")

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1 << 10,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1 << 20,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": GIB,
    "t": 1000**4,
    "tb": 1000**4,
    "tib": 1 << 40,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


class SettingsError(ValueError):
    """A BERTH_SIM_* variable holds a value the simulator cannot read."""


def parse_bytes(text: str) -> int:
    """Read a memory size: bytes, a unit suffix, or a bare number of GiB (see module doc)."""
    match = _SIZE.match(text)
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"not a memory size: {text!r} (try 80GiB or 85899345920)")
    number, unit = match.group(1), match.group(2).lower()
    if unit:
        return int(float(number) * _UNITS[unit])
    if "." in number or int(number) < (1 << 20):
        return int(float(number) * GIB)
    return int(number)


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean: {text!r} (use 1 or 0)")


def parse_choice(choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"{text!r} is not one of {', '.join(choices)}")
        return text

    return parse


def parse_json_or_path(text: str) -> dict[str, Any]:
    """Inline JSON (starts with ``{``) or the path of a JSON file such as a config.json."""
    raw = text if text.lstrip().startswith("{") else _read_text(text)
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError("model facts must be a JSON object")
    return value


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _var(env: str, parse: Callable[[str], Any], default: Any, doc: str) -> Any:
    return field(default=default, metadata={"env": env, "parse": parse, "doc": doc})


@dataclass(frozen=True)
class SimSettings:
    """Simulated hardware, speed and failures of one engine process (one row per variable)."""

    gpu_memory: int = _var(
        "BERTH_SIM_GPU_MEMORY",
        parse_bytes,
        80 * GIB,
        "Memory of each GPU the engine was given, as CUDA reports it (the total).",
    )
    gpu_name: str = _var(
        "BERTH_SIM_GPU_NAME",
        str,
        "NVIDIA H100 80GB HBM3",
        "Product name; 'A100' in it (or < 70 GiB) selects vLLM's smaller scheduler defaults.",
    )
    free_memory: int | None = _var(
        "BERTH_SIM_FREE_MEMORY",
        parse_bytes,
        None,
        "Free memory on the device at startup (default: the whole GPU). Below "
        "gpu_memory_utilization x total, the engine fails with vLLM's 'Free memory on device'.",
    )
    hidden_memory: int = _var(
        "BERTH_SIM_HIDDEN_MEMORY",
        parse_bytes,
        0,
        "Extra memory the engine uses inside its share that no estimate knows of; reproduces "
        "an OOM (or a KV cache too small) after a placement that looked right.",
    )
    model_json: dict[str, Any] | None = _var(
        "BERTH_SIM_MODEL_JSON",
        parse_json_or_path,
        None,
        "The model's facts: inline JSON or a file path; HF config.json keys plus weights_bytes, "
        "encoder_only, max_model_len (see memory.facts_from_config).",
    )
    weights_bytes: int | None = _var(
        "BERTH_SIM_WEIGHTS_BYTES",
        parse_bytes,
        None,
        "Checkpoint size (all shards, native dtype); overrides the JSON.",
    )
    num_layers: int | None = _var(
        "BERTH_SIM_NUM_LAYERS", int, None, "num_hidden_layers; overrides the JSON."
    )
    num_kv_heads: int | None = _var(
        "BERTH_SIM_NUM_KV_HEADS", int, None, "num_key_value_heads; overrides the JSON."
    )
    head_dim: int | None = _var("BERTH_SIM_HEAD_DIM", int, None, "head_dim; overrides the JSON.")
    encoder_only: bool | None = _var(
        "BERTH_SIM_ENCODER_ONLY",
        parse_bool,
        None,
        "1 = encoder-only model (no KV cache, embeddings only); overrides the JSON.",
    )
    load_s_per_gb: float = _var(
        "BERTH_SIM_LOAD_S_PER_GB",
        float,
        0.5,
        "Seconds to load each GB (10^9 bytes) of weights per GPU.",
    )
    init_s: float = _var(
        "BERTH_SIM_INIT_S",
        float,
        1.0,
        "Seconds spent profiling memory and capturing CUDA graphs after the load.",
    )
    tokens_per_second: float = _var(
        "BERTH_SIM_TOKENS_PER_SECOND",
        float,
        40.0,
        "Generated tokens per second of each stream (paced with sleeps).",
    )
    ttft_s: float = _var(
        "BERTH_SIM_TTFT_S",
        float,
        0.1,
        "Time to first token, before the prompt's own prefill time.",
    )
    prefill_tokens_per_second: float = _var(
        "BERTH_SIM_PREFILL_TOKENS_PER_SECOND",
        float,
        20000.0,
        "Prompt tokens processed per second; adds prompt_tokens / this to the first token.",
    )
    reply_tokens: int = _var(
        "BERTH_SIM_REPLY_TOKENS",
        int,
        32,
        "Natural reply length: a reply stops ('stop') after this many tokens unless max_tokens "
        "cuts it first ('length') or the request sets ignore_eos.",
    )
    crash_after_s: float | None = _var(
        "BERTH_SIM_CRASH_AFTER_S",
        float,
        None,
        "The engine dies this many seconds after it starts serving: /health answers 503, "
        "then the process exits 1.",
    )
    crash_kind: str = _var(
        "BERTH_SIM_CRASH_KIND",
        parse_choice(CRASH_KINDS),
        "cuda_error",
        "What the crash prints: cuda_error (illegal memory access) or oom.",
    )
    dead_linger_s: float = _var(
        "BERTH_SIM_DEAD_LINGER_S",
        float,
        1.0,
        "Seconds a dead engine keeps answering 503 before it exits (negative: never exits).",
    )
    hang_at_start: bool = _var(
        "BERTH_SIM_HANG_AT_START",
        parse_bool,
        False,
        "1 = hang while loading the model; its port refuses connections (a startup timeout).",
    )
    oom_at_load: bool = _var(
        "BERTH_SIM_OOM_AT_LOAD",
        parse_bool,
        False,
        "1 = fail with torch.OutOfMemoryError while loading the weights, whatever the memory.",
    )
    fail_attempts: int = _var(
        "BERTH_SIM_FAIL_ATTEMPTS",
        int,
        0,
        "The first N starts fail (counted in BERTH_SIM_ATTEMPTS_FILE), the next ones succeed.",
    )
    attempts_file: str | None = _var(
        "BERTH_SIM_ATTEMPTS_FILE",
        str,
        None,
        "Counter file of starts for BERTH_SIM_FAIL_ATTEMPTS; without it every start is the first.",
    )
    shutdown_delay_s: float = _var(
        "BERTH_SIM_SHUTDOWN_DELAY_S",
        float,
        0.0,
        "Seconds a serving engine takes to stop after SIGTERM (a slow drain), holding its memory.",
    )
    fail_kind: str = _var(
        "BERTH_SIM_FAIL_KIND",
        parse_choice(FAIL_KINDS),
        "free_memory",
        "How a failing attempt fails: free_memory (retryable), oom, or cuda_error.",
    )
    vllm_version: str = _var(
        "BERTH_SIM_VLLM_VERSION", str, "0.11.0", "Version printed at start and on /version."
    )
    stats_interval_s: float = _var(
        "BERTH_SIM_STATS_INTERVAL_S",
        float,
        10.0,
        "Seconds between vLLM's 'Avg prompt throughput' lines while there is traffic.",
    )

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> SimSettings:
        """Read every BERTH_SIM_* variable; a malformed one raises SettingsError naming it."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for spec in dataclasses.fields(cls):
            raw = environ.get(spec.metadata["env"])
            if raw is None or raw == "":
                continue
            try:
                values[spec.name] = spec.metadata["parse"](raw)
            except (ValueError, OSError) as error:
                raise SettingsError(f"{spec.metadata['env']}={raw!r}: {error}") from error
        return cls(**values)


def env_names() -> dict[str, str]:
    """Each BERTH_SIM_* variable and what it means, for docs and error messages."""
    return {f.metadata["env"]: f.metadata["doc"] for f in dataclasses.fields(SimSettings)}


def _render(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, Mapping):
        return json.dumps(value, sort_keys=True)
    return str(value)


def build_env(**values: Any) -> dict[str, str]:
    """Render settings into BERTH_SIM_* strings, e.g. ``build_env(gpu_memory="24GiB")``.

    Keyword names are SimSettings' field names; None leaves a variable unset. The result
    holds only the simulator's variables: merge it over the launcher's own environment.
    """
    specs = {f.name: f for f in dataclasses.fields(SimSettings)}
    unknown = sorted(set(values) - set(specs))
    if unknown:
        raise TypeError(f"unknown simulator settings: {', '.join(unknown)}")
    env = {specs[k].metadata["env"]: _render(v) for k, v in values.items() if v is not None}
    SimSettings.from_environ(env)  # fail here, in the launcher, rather than in the child
    return env


def serve_argv(model: str, *flags: str, python: str = sys.executable) -> list[str]:
    """The argv that starts the simulator the way ``vllm serve MODEL FLAGS…`` starts vLLM."""
    return [python, "-m", ENGINE_MODULE, "serve", model, *flags]
