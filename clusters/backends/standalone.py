"""The standalone backend: this machine, its GPUs read with NVML, engines as local processes.

A machine with no NVIDIA device at all (no /dev/nvidia*) hosts on its CPU: one accelerator of
vendor `cpu` whose memory is the machine's less a reserve, shared by byte budgets; its engines
are vLLM's CPU build and llama.cpp's server. A machine whose NVIDIA devices exist but whose
driver does not answer reports "no GPUs found on this machine" with the DriverNotWorking notice
and no accelerator: it is never quietly offered as a CPU machine, which would hide the broken
driver and host models a hundred times slower than the operator expects. Nothing here crashes
for want of a GPU. Before a copy starts on a GPU it shares with others, NVML must show the copy's
bytes free, or the launch raises WaitForRoom and the copy waits (vLLM itself would refuse to
start: DESIGN §5).

Imports no Django and nothing beyond the standard library and nvidia-ml-py.
"""

from __future__ import annotations

import glob
import os
import socket
from pathlib import Path
from typing import Any

from clusters.backends import nvml
from clusters.backends.base import (
    NOTICE_DRIVER_NOT_WORKING,
    CopyHandle,
    CopySpec,
    DiscoveredAccelerator,
    DiscoveredMachine,
    Discovery,
    FilesResult,
    ModelFiles,
    Progress,
)
from clusters.backends.engines import EnginePrograms, with_binary
from clusters.backends.local import (
    LocalProcessBackend,
    WaitForRoom,
    check_engine_argv,
    check_room,
    cuda_visible_devices,
    engine_environment,
)
from placement import GIB
from placement.words import gib

__all__ = ["StandaloneBackend", "WaitForRoom", "system_memory_bytes"]

NVIDIA_DEVICE_NODES = "/dev/nvidia*"
CPU_UUID = "CPU-0"  # the machine's CPU as an accelerator has no UUID of its own
DEFAULT_CPU_RESERVE_BYTES = 4 * GIB


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


def cpu_product() -> str:
    """The processor's name as /proc/cpuinfo gives it ("model name"), else "CPU"."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name") and ":" in line:
                    return line.split(":", 1)[1].strip() or "CPU"
    except OSError:
        pass
    return "CPU"


def cpu_accelerator(system_bytes: int, reserve_bytes: int, cores: int) -> DiscoveredAccelerator:
    """The machine's CPU as one accelerator: its memory less the reserve, shared by budgets."""
    return DiscoveredAccelerator(
        index=0,
        vendor="cpu",
        product=f"{cpu_product()} ({cores} cores)",
        memory_bytes=max(0, system_bytes - reserve_bytes),
        uuid=CPU_UUID,
        hardware_class="unified_memory",
        sharing_class="shared",
    )


def driver_not_working(nodes: list[str], report_message: str) -> str:
    return (
        f"{report_message}; {nodes[0]} exists, so this machine has NVIDIA devices, but their "
        "driver is not working: reload the NVIDIA driver (nvidia-smi must answer), then refresh"
    )


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
        programs: EnginePrograms | None = None,
        cpu_reserve_bytes: int = DEFAULT_CPU_RESERVE_BYTES,
        device_nodes: str = NVIDIA_DEVICE_NODES,
        engine_sockets: bool = False,
    ) -> None:
        super().__init__(
            state_dir,
            machine_name or socket.gethostname(),
            stop_timeout_s=stop_timeout_s,
            http_timeout_s=http_timeout_s,
            engine_sockets=engine_sockets,
        )
        self.nvml_module = nvml_module
        self.programs = programs or EnginePrograms()
        self.cpu_reserve_bytes = cpu_reserve_bytes
        self.device_nodes = device_nodes

    def discover(self) -> Discovery:
        report = nvml.discover_gpus(self.nvml_module)
        if report.accelerators:
            return self._machine_with(report.accelerators, report.message)
        nodes = sorted(glob.glob(self.device_nodes))
        if nodes:
            words = driver_not_working(nodes, report.message)
            return self._machine_with((), words, notices=(NOTICE_DRIVER_NOT_WORKING,))
        cores = os.cpu_count() or 1
        cpu = cpu_accelerator(system_memory_bytes(), self.cpu_reserve_bytes, cores)
        words = (
            f"no NVIDIA devices on this machine: it hosts on its CPU ({cores} cores, "
            f"{gib(cpu.memory_bytes)} for engines after a {gib(self.cpu_reserve_bytes)} reserve)"
        )
        return self._machine_with((cpu,), words)

    def _machine_with(
        self,
        accelerators: tuple[DiscoveredAccelerator, ...],
        message: str,
        notices: tuple[str, ...] = (),
    ) -> Discovery:
        machine = DiscoveredMachine(
            name=self.machine_name,
            cpu_count=os.cpu_count() or 0,
            system_memory_bytes=system_memory_bytes(),
            accelerators=accelerators,
        )
        return Discovery(machines=(machine,), notices=notices, message=message)

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
        # Not installed: fails now, in words.
        argv = with_binary(self.listening_argv(spec), self.programs)
        if spec.on_cpu:
            env = engine_environment(spec.env, None, secrets=spec.secret_env)
            return self.start_engine(spec, argv, env, extra={"gpu_uuids": [CPU_UUID]})
        check_room(spec, self._free_bytes)
        env = engine_environment(spec.env, cuda_visible_devices(spec), secrets=spec.secret_env)
        return self.start_engine(spec, argv, env, extra={"gpu_uuids": self._gpu_uuids(spec)})

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
