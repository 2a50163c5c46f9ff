"""The standalone backend: this machine, its GPUs read with NVML, engines as local processes.

Without a GPU (or a driver) discovery reports one machine with no accelerators and the message
"no GPUs found on this machine"; nothing here crashes for want of a GPU. Before a copy starts
on a GPU it shares with others, NVML must show the copy's bytes free, or the launch raises
WaitForRoom and the copy waits (vLLM itself would refuse to start: DESIGN §5).

Imports no Django and nothing beyond the standard library and nvidia-ml-py.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from clusters.backends import nvml
from clusters.backends.base import (
    CopyHandle,
    CopySpec,
    DiscoveredMachine,
    Discovery,
    FilesResult,
)
from clusters.backends.local import (
    LocalProcessBackend,
    WaitForRoom,
    check_engine_argv,
    check_room,
    cuda_visible_devices,
    engine_environment,
)

__all__ = ["StandaloneBackend", "WaitForRoom", "system_memory_bytes"]


def system_memory_bytes() -> int:
    """Physical memory: MemTotal of /proc/meminfo, else what sysconf says; 0 if neither."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024  # the kernel writes kB (KiB)
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (OSError, ValueError, AttributeError):
        return 0


def missing_model_files(model_path: str, files: tuple[str, ...]) -> tuple[str, ...]:
    root = Path(model_path)
    return tuple(name for name in files if not (root / name).exists())


class StandaloneBackend(LocalProcessBackend):
    """This machine as a cluster of one."""

    def __init__(
        self,
        state_dir: str | Path,
        machine_name: str | None = None,
        nvml_module: Any = None,
        *,
        stop_timeout_s: float = 10.0,
        http_timeout_s: float = 1.0,
    ) -> None:
        super().__init__(
            state_dir,
            machine_name or socket.gethostname(),
            stop_timeout_s=stop_timeout_s,
            http_timeout_s=http_timeout_s,
        )
        self.nvml_module = nvml_module

    def discover(self) -> Discovery:
        report = nvml.discover_gpus(self.nvml_module)
        machine = DiscoveredMachine(
            name=self.machine_name,
            cpu_count=os.cpu_count() or 0,
            system_memory_bytes=system_memory_bytes(),
            accelerators=report.accelerators,
        )
        return Discovery(machines=(machine,), message=report.message)

    def prepare_files(self, spec: CopySpec) -> FilesResult:
        """The model must already be on this machine (the console downloads it there)."""
        if not spec.model_path:
            return FilesResult(False, message="the copy names no model folder on this machine")
        if not Path(spec.model_path).exists():
            return FilesResult(False, message=f"{spec.model_path} does not exist on this machine")
        missing = missing_model_files(spec.model_path, spec.model_files)
        if missing:
            shown = ", ".join(missing[:5]) + (" …" if len(missing) > 5 else "")
            return FilesResult(
                False, missing, f"{len(missing)} file(s) missing in {spec.model_path}: {shown}"
            )
        return FilesResult(True, message=f"the model is in {spec.model_path}")

    def launch(self, spec: CopySpec) -> CopyHandle:
        """Start the engine; a second launch of a running copy returns the running one."""
        running = self.running_handle(spec)
        if running is not None:
            return running
        check_engine_argv(spec.argv)
        check_room(spec, self._free_bytes)
        env = engine_environment(spec.env, cuda_visible_devices(spec))
        return self.start_engine(spec, spec.argv, env, extra={"gpu_uuids": self._gpu_uuids(spec)})

    def _free_bytes(self, index: int) -> int | None:
        return nvml.free_memory_bytes(index, self.nvml_module)

    def _gpu_uuids(self, spec: CopySpec) -> list[str]:
        """The UUIDs of the copy's GPUs (or its MIG slice), for the observation."""
        if spec.mig_slice_uuid:
            return [spec.mig_slice_uuid]
        if not spec.gpu_indexes:
            return []
        by_index = {
            gpu.index: gpu.uuid for gpu in nvml.discover_gpus(self.nvml_module).accelerators
        }
        return [by_index[index] for index in spec.gpu_indexes if index in by_index]
