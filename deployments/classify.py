"""Reads what an engine printed, and how it exited, as an error code an operator can act on.

The patterns are vLLM's own messages (reference/vllm.md §3.4). A "permanent" failure comes back
on every attempt (the deployment goes FAILED and is not tried again until the operator changes
something); a passing one is retried with backoff.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from deployments.choices import ErrorCode, LogPattern

ANSI = re.compile(r"\x1b\[[0-9;]*m")
# llama.cpp's own prefix: time since start and a level letter, "0.00.004.029 E ".
LLAMA_CPP_PREFIX = re.compile(r"^\d+\.\d+\.\d+\.\d+ [DIWE] ")


@dataclass(frozen=True)
class Failure:
    """A classified failure: its code, whether retrying can help, the engine's line and a fix."""

    code: str
    permanent: bool
    line: str
    fix: str = ""


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str]
    code: str
    log_pattern: str
    permanent: bool
    fix: str


def rule(regex: str, code: str, log_pattern: str, permanent: bool, fix: str) -> Rule:
    return Rule(re.compile(regex), code, log_pattern, permanent, fix)


# First match wins, so the specific memory messages come before the generic CUDA ones.
RULES = [
    rule(
        r"To serve at least one request with the model's max seq len",
        ErrorCode.OOM,
        LogPattern.OOM,
        True,
        "Shorten the longest conversation (max model length), use an 8-bit context cache, or give "
        "each copy more memory.",
    ),
    rule(
        r"Free memory on device .* is less than desired GPU memory utilization",
        ErrorCode.OOM,
        LogPattern.OOM,
        False,
        "Another process holds memory on the GPU; the copy is tried again when memory frees up.",
    ),
    rule(
        r"No available memory for the cache blocks",
        ErrorCode.OOM,
        LogPattern.OOM,
        True,
        "The weights leave no room for the context cache: give each copy more memory or use a "
        "smaller variant.",
    ),
    rule(
        r"CUDA out of memory|OutOfMemoryError",
        ErrorCode.OOM,
        LogPattern.OOM,
        True,
        "Use a smaller variant, a shorter context, or a larger share of the GPU.",
    ),
    rule(
        r"CUDA error|cudaError|CUDA driver|NCCL error|no CUDA-capable device",
        ErrorCode.CUDA_ERROR,
        LogPattern.CUDA_ERROR,
        False,
        "Check the GPU driver and that the engine can see the GPU; restart GPU services if needed.",
    ),
    rule(
        r"User-specified max_model_len \(\d+\) is greater than the derived max_model_len",
        ErrorCode.RUNTIME_ERROR,
        LogPattern.NONE,
        True,
        "The longest conversation (max model length) is longer than the model's own maximum: "
        "lower it under Engine settings, or leave it empty for the model's own.",
    ),
    rule(
        r"(Error loading|Failed to load|Cannot load|could not load) (the )?model|"
        r"Cannot find any model weights|"
        r"failed to open GGUF file|data is not within the file bounds|"
        r"does not appear to have a file named|safetensors_rust\.SafetensorError|"
        r"No such file or directory: .*(safetensors|config\.json|\.gguf)|"
        r"is not a valid model|Repository Not Found",
        ErrorCode.MODEL_LOADING_FAILURE,
        LogPattern.LOADING_FAILURE,
        True,
        "Check that every model file is present and matches the revision; re-download the model.",
    ),
    rule(
        r"error: unrecognized arguments|error: argument --|invalid choice:|"
        r"^error: invalid argument: ",  # llama.cpp's words for a flag it does not know
        ErrorCode.RUNTIME_ERROR,
        LogPattern.NONE,
        True,
        "The engine rejected a setting: change it under Engine settings.",
    ),
    rule(
        r"^(\S+Error|RuntimeError|Exception)\b|Traceback \(most recent call last\)",
        ErrorCode.RUNTIME_ERROR,
        LogPattern.NONE,
        False,
        "Open the logs for the engine's own explanation.",
    ),
]

LONGEST_CONTEXT = re.compile(r"estimated maximum model length is (\d+)")


def clean(line: str) -> str:
    """Strip colour codes, llama.cpp's time and level, and vLLM's process prefix: '(APIServer
    pid=12) ', '(EngineCore pid=3) ', '(Worker pid=7) ' (the CPU build's workers print the root
    cause of a failed load)."""
    text = ANSI.sub("", line).strip()
    text = LLAMA_CPP_PREFIX.sub("", text)
    return re.sub(r"^\(\w+ pid=\d+\)\s*", "", text)


def message_of(line: str) -> str:
    """The message of a vLLM log line, without its level, time and source location."""
    text = clean(line)
    match = re.match(
        r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d [\d:.]+ \[[^\]]*\] ?(.*)$", text
    )
    return match.group(2) if match else text


def log_pattern(line: str) -> str:
    """The pattern a log line shows (OOM, CUDA error, loading failure), or '' for none."""
    text = message_of(line)
    for candidate in RULES:
        if candidate.log_pattern and candidate.pattern.search(text):
            return candidate.log_pattern
    return LogPattern.NONE


def with_longest_context(fix: str, text: str) -> str:
    found = LONGEST_CONTEXT.search(text)
    if not found:
        return fix
    longest = int(found.group(1))
    return (
        f"The engine says a longest conversation of {longest:,} tokens would fit: "
        f"set it to that or less. {fix}"
    )


def classify(lines: Iterable[str], exit_code: int | None = None) -> Failure | None:
    """The failure these lines (an engine's output, oldest first) and exit status show, if any.

    The most specific rule that matches any line wins; among lines matching the same rule,
    the first is kept: vLLM prints the root cause first, then the wrappers of its other
    processes ("… See root cause above."), as the real engine showed.
    """
    best: tuple[int, str] | None = None
    for line in lines:
        text = message_of(line)
        for rank, candidate in enumerate(RULES):
            if candidate.pattern.search(text) and (best is None or rank < best[0]):
                best = (rank, text)
                break
    if best is not None:
        chosen = RULES[best[0]]
        return Failure(
            chosen.code, chosen.permanent, best[1], with_longest_context(chosen.fix, best[1])
        )
    if exit_code not in (None, 0):
        return Failure(
            ErrorCode.CONTAINER_EXITED,
            False,
            f"The engine exited with code {exit_code}.",
            "Open the logs for details; check memory limits and engine settings.",
        )
    return None
