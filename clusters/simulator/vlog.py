"""vLLM's log format, so Berth's log classifier reads the simulator exactly as it reads vLLM.

V1 vLLM runs an API-server process and an engine-core process and prefixes each line with the
process it came from: ``(APIServer pid=41) INFO 11-29 15:00:00 [api_server.py:1839] …``. The
simulator is one process, so both prefixes carry its own pid. Logger lines go to stdout (vLLM's
default stream) and tracebacks to stderr, as Python prints them.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

API = "APIServer"
CORE = "EngineCore_DP0"
VLLM_ROOT = "/usr/local/lib/python3.12/dist-packages/vllm"

# Plausible frames per failing stage: only so that a traceback reads like vLLM's.
_CORE_PROC = ("v1/engine/core.py", 699, "run_engine_core", "engine_core = EngineCoreProc(**kw)")
FRAMES: dict[str, list[tuple[str, int, str, str]]] = {
    "init_device": [
        _CORE_PROC,
        ("v1/worker/gpu_worker.py", 185, "init_device", "raise ValueError("),
    ],
    "load": [
        _CORE_PROC,
        ("v1/worker/gpu_model_runner.py", 2635, "load_model", "self.model = loader.load_model("),
        (
            "model_executor/model_loader/default_loader.py",
            264,
            "load_weights",
            "model.load_weights(",
        ),
    ],
    "profile": [
        _CORE_PROC,
        ("v1/engine/core.py", 195, "_initialize_kv_caches", "get_kv_cache_configs("),
        ("v1/core/kv_cache_utils.py", 686, "check_enough_kv_cache_memory", "raise ValueError("),
    ],
    "api_startup": [
        ("entrypoints/openai/api_server.py", 1953, "run_server", "await run_server_worker("),
        ("v1/engine/utils.py", 903, "wait_for_engine_startup", "raise RuntimeError("),
    ],
    "config": [
        (
            "entrypoints/openai/api_server.py",
            186,
            "build_async_engine_client",
            "create_engine_config(",
        ),
        ("engine/arg_utils.py", 1129, "create_model_config", "return ModelConfig("),
    ],
    "serve": [
        ("v1/engine/core.py", 757, "run_busy_loop", "self._process_engine_step()"),
        ("v1/worker/gpu_model_runner.py", 2258, "execute_model", "model_output = self.model("),
    ],
}


class VllmLog:
    """Writes lines as vLLM's logger, uvicorn and Python's traceback printer would."""

    def __init__(self, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.pid = os.getpid()

    def prefix(self, process: str) -> str:
        return f"({process} pid={self.pid})"

    def write(self, stream: TextIO, text: str) -> None:
        try:
            stream.write(text + "\n")
            stream.flush()
        except (BrokenPipeError, ValueError):
            pass  # the reader went away; the engine keeps its own course, as vLLM does

    def line(self, process: str, level: str, where: str, message: str) -> None:
        stamp = time.strftime("%m-%d %H:%M:%S")
        self.write(self.out, f"{self.prefix(process)} {level} {stamp} [{where}] {message}")

    def api(self, where: str, message: str, level: str = "INFO") -> None:
        self.line(API, level, where, message)

    def core(self, where: str, message: str, level: str = "INFO") -> None:
        self.line(CORE, level, where, message)

    def plain(self, process: str, text: str) -> None:
        """A line not from vLLM's logger: tqdm bars, uvicorn's own 'INFO:     …' lines."""
        self.write(self.out, f"{self.prefix(process)} {text}")

    def uvicorn(self, text: str) -> None:
        self.plain(API, f"INFO:     {text}")

    def logged_traceback(self, process: str, where: str, stage: str, exception_line: str) -> None:
        """logger.exception(): the traceback on ERROR lines, the exception last."""
        lines = ["Traceback (most recent call last):", *frame_lines(stage)]
        for text in [*lines, *exception_line.splitlines()]:
            self.line(process, "ERROR", where, text)

    def printed_traceback(self, process: str, stage: str, exception_line: str) -> None:
        """An uncaught exception: Python prints it to stderr."""
        lines = ["Traceback (most recent call last):", *frame_lines(stage)]
        for text in [*lines, *exception_line.splitlines()]:
            self.write(self.err, f"{self.prefix(process)} {text}")


def frame_lines(stage: str) -> list[str]:
    lines: list[str] = []
    for path, number, function, code in FRAMES.get(stage, []):
        lines.append(f'  File "{VLLM_ROOT}/{path}", line {number}, in {function}')
        lines.append(f"    {code}")
    return lines
