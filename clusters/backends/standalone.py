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
    ModelFiles,
    Progress,
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

    def files_here(self, machine: str, files: ModelFiles) -> FilesResult:
        """The console downloads to this machine itself: the files are where it keeps them."""
        if machine != self.machine_name:
            return FilesResult(False, files.names, f"{machine} is not this machine")
        folder = files.source_path
        if not folder:
            return FilesResult(False, files.names, "this server keeps no copy of the model")
        if not Path(folder).exists():
            return FilesResult(False, files.names, f"{folder} does not exist on this machine")
        missing = missing_model_files(folder, files.names)
        if missing:
            shown = ", ".join(missing[:5]) + (" …" if len(missing) > 5 else "")
            words = f"{len(missing)} file(s) missing in {folder}: {shown}"
            return FilesResult(False, missing, words)
        return FilesResult(True, message=f"the model is in {folder}")

    def prepare_files(
        self, machine: str, files: ModelFiles, progress: Progress | None = None
    ) -> FilesResult:
        """Nothing to copy: the server's download is on this very machine, or it is missing."""
        result = self.files_here(machine, files)
        if result.present and progress is not None:
            progress(files.size_bytes)
        return result

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
