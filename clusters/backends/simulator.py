"""The simulator backend: machines and GPUs described as data, each copy a real engine simulator.

The inventory has the shape of ``Cluster.simulated_inventory`` (console/demo.py's
DEMO_MACHINES): ``{"machines": [{"name", "cpus", "system_memory_gib", "accelerators": [{"index",
"vendor", "product", "memory_mib" | "memory_bytes", "compute_capability", "driver", "cuda",
"uuid", "sharing", "replicas", "mig": [{"profile", "memory_mib"}]}]}]}``.

A launch takes the vLLM command line the console built (``vllm serve MODEL FLAGS…``) and runs
the engine simulator with the same flags (clusters.simulator: ``serve_argv``), as a supervised
local process on 127.0.0.1. Its environment (``build_env``) gives it the memory of the GPU or
MIG slice it was placed on, the model's facts, and the memory that other running copies on that
GPU already hold, so that vLLM's own start-up check can fail exactly as it would. BERTH_SIM_*
values already in the copy's environment win (a test's injected failure, for one).

Copying model files to a machine is simulated too: it takes time in proportion to the bytes,
and the files are then recorded as present on that machine.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusters.backends.base import (
    NOTICE_PARTIAL_DISCOVERY,
    BackendError,
    CopyHandle,
    CopySpec,
    DiscoveredAccelerator,
    DiscoveredMachine,
    DiscoveredSlice,
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
from clusters.backends.supervisor import write_atomically
from clusters.simulator.contract import ENGINE_MODULE, build_env, serve_argv
from placement import GIB
from placement.words import gib

__all__ = ["SimulatorBackend", "WaitForRoom", "discover_inventory", "engine_argv"]

MIB = 1 << 20
LLAMA_MODULE = "clusters.simulator.llama"  # the simulator's llama-server mode
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_COPY_BYTES_PER_SECOND = 20 * GIB
COPY_STEP_S = 0.25  # how often a simulated copy of model files reports its bytes
ModelFacts = Mapping[str, Any]
ModelFactsFor = Callable[[CopySpec], ModelFacts | None] | Mapping[str, ModelFacts]


# ---------------------------------------------------------------- the inventory as data


def memory_bytes(entry: Mapping[str, Any]) -> int:
    """`memory_bytes`, or `memory_mib` as NVML and GPU Feature Discovery report it."""
    if "memory_bytes" in entry:
        return int(entry["memory_bytes"])
    return int(entry["memory_mib"]) * MIB


def slice_uuid(gpu_uuid: str, index: int) -> str:
    """A stable UUID for a slice the data gives none, in the MIG-… form CUDA accepts."""
    return f"MIG-{gpu_uuid.removeprefix('GPU-')}-{index}"


def sharing_of(gpu: Mapping[str, Any]) -> tuple[str, str]:
    """(hardware_class, sharing_class), read as clusters/inventory.py reads the same data."""
    if gpu.get("mig"):
        return "hardware_isolated", "mig"
    sharing = gpu.get("sharing") or ""
    if sharing in ("time_sliced", "mps"):
        return "software_shared", sharing
    return "software_shared", gpu.get("sharing_class", "shared")


def read_slice(gpu_uuid: str, index: int, entry: Mapping[str, Any]) -> DiscoveredSlice:
    uuid = str(entry.get("uuid") or slice_uuid(gpu_uuid, index))
    return DiscoveredSlice(index, str(entry["profile"]), memory_bytes(entry), uuid)


def read_accelerator(gpu: Mapping[str, Any]) -> DiscoveredAccelerator:
    uuid = str(gpu.get("uuid", ""))
    hardware_class, sharing_class = sharing_of(gpu)
    slices = tuple(read_slice(uuid, i, entry) for i, entry in enumerate(gpu.get("mig") or []))
    return DiscoveredAccelerator(
        index=int(gpu["index"]),
        vendor=str(gpu.get("vendor", "nvidia")),
        product=str(gpu["product"]),
        memory_bytes=memory_bytes(gpu),
        uuid=uuid,
        compute_capability=str(gpu.get("compute_capability", "")),
        driver_version=str(gpu.get("driver", "")),
        cuda_version=str(gpu.get("cuda", "")),
        hardware_class=hardware_class,  # type: ignore[arg-type]
        sharing_class=sharing_class,
        replicas=int(gpu.get("replicas", 1)),
        slices=slices,
    )


def read_machine(entry: Mapping[str, Any], problems: list[str]) -> DiscoveredMachine:
    accelerators = []
    for gpu in entry.get("accelerators", []):
        try:
            accelerators.append(read_accelerator(gpu))
        except (KeyError, TypeError, ValueError) as error:
            problems.append(f"{entry['name']}: an accelerator without a valid {error}")
    return DiscoveredMachine(
        name=str(entry["name"]),
        ready=bool(entry.get("ready", True)),
        labels=dict(entry.get("labels", {})),
        cpu_count=int(entry.get("cpus", 0)),
        system_memory_bytes=int(float(entry.get("system_memory_gib", 0)) * GIB),
        unified_memory=bool(entry.get("unified_memory", False)),
        accelerators=tuple(accelerators),
    )


def discover_inventory(inventory: Mapping[str, Any]) -> Discovery:
    """Machines and GPUs from the data; a malformed entry is left out and named, never raised."""
    problems: list[str] = []
    machines = []
    for entry in inventory.get("machines", []):
        try:
            machines.append(read_machine(entry, problems))
        except (KeyError, TypeError, ValueError) as error:
            problems.append(f"a machine without a valid {error}")
    if not machines and not problems:
        return Discovery((), message="the simulated inventory describes no machines")
    gpus = sum(len(machine.accelerators) for machine in machines)
    message = f"{len(machines)} simulated machine(s), {gpus} GPU(s)"
    if problems:
        message += "; left out: " + "; ".join(problems)
    notices = (NOTICE_PARTIAL_DISCOVERY,) if problems else ()
    return Discovery(tuple(machines), notices=notices, message=message)


# ---------------------------------------------------------------- a copy's place in the data


@dataclass(frozen=True)
class Placed:
    """The memory a copy sees: its GPU (or MIG slice), as the data describes it."""

    key: str  # machine/GPU or machine/GPU/slice: copies with the same key share memory
    index: int  # the GPU's index on its machine
    product: str
    memory_bytes: int
    uuid: str


def engine_argv(argv: Sequence[str], python: str = sys.executable) -> list[str]:
    """The simulator's argv for a ``vllm serve MODEL FLAGS…`` command line, or its llama-server
    mode for ``llama-server FLAGS…`` (kept as it is if it already starts the simulator)."""
    if ENGINE_MODULE in argv or LLAMA_MODULE in argv:
        return list(argv)
    if len(argv) >= 3 and Path(argv[0]).name == "vllm" and argv[1] == "serve":
        return serve_argv(argv[2], *argv[3:], python=python)
    if argv and Path(argv[0]).name == "llama-server":
        return [python, "-m", LLAMA_MODULE, *argv[1:]]
    raise BackendError(
        f"the simulator runs `vllm serve MODEL …` and `llama-server …` command lines, "
        f"not {argv[:2]}"
    )


def model_tag(argv: Sequence[str]) -> str:
    """The MODEL of ``… serve MODEL …``."""
    if "serve" in argv:
        position = list(argv).index("serve") + 1
        if position < len(argv):
            return argv[position]
    return ""


# ---------------------------------------------------------------- the backend


class SimulatorBackend(LocalProcessBackend):
    """A cluster described as data whose copies are engine simulator processes."""

    def __init__(
        self,
        inventory: Mapping[str, Any],
        state_dir: str | Path,
        model_facts_for: ModelFactsFor | None = None,
        *,
        copy_bytes_per_second: float = DEFAULT_COPY_BYTES_PER_SECOND,
        python: str = sys.executable,
        stop_timeout_s: float = 10.0,
        http_timeout_s: float = 1.0,
        engine_sockets: bool = False,
    ) -> None:
        super().__init__(
            state_dir,
            "simulator",
            stop_timeout_s=stop_timeout_s,
            http_timeout_s=http_timeout_s,
            engine_sockets=engine_sockets,
        )
        self.inventory = inventory
        self.model_facts_for = model_facts_for
        self.copy_bytes_per_second = copy_bytes_per_second
        self.python = python

    def discover(self) -> Discovery:
        return discover_inventory(self.inventory)

    # -------------------------------------------------------- files

    def files_marker(self, machine: str, files: ModelFiles) -> Path:
        return self.state_dir / "machines" / machine / "files" / f"{files.key}.json"

    def prepare_files(
        self, machine: str, files: ModelFiles, progress: Progress | None = None
    ) -> FilesResult:
        """Copy the model to the machine: time in proportion to its bytes, instant once there.
        A machine the inventory marks not ready cannot be copied to (as an unreachable one)."""
        entry = self._machine(machine)
        marker = self.files_marker(entry["name"], files)
        if marker.exists():
            return FilesResult(True, message=f"the model is already on {entry['name']}")
        if not entry.get("ready", True):
            raise BackendError(f"{entry['name']} is not ready: the files cannot be copied to it")
        seconds = self.copy_in_steps(files.size_bytes, progress)
        marker.parent.mkdir(parents=True, exist_ok=True)
        record = {"repo_id": files.repo_id, "revision": files.revision, "files": files.files}
        write_atomically(marker, json.dumps(record))
        copied = f"copied {gib(files.size_bytes)} to {entry['name']} in {seconds:.1f} s"
        return FilesResult(True, message=copied)

    def copy_in_steps(self, size: int, progress: Progress | None) -> float:
        """Sleep as long as copying `size` bytes takes, telling `progress` as the bytes arrive."""
        seconds = size / self.copy_bytes_per_second
        steps = max(1, math.ceil(seconds / COPY_STEP_S))
        for step in range(1, steps + 1):
            time.sleep(seconds / steps)
            if progress is not None:
                progress(size * step // steps)
        return seconds

    # -------------------------------------------------------- launch

    def launch(self, spec: CopySpec) -> CopyHandle:
        """Start the engine simulator where the copy was placed; idempotent while it runs."""
        running = self.running_handle(spec)
        if running is not None:
            return running
        check_engine_argv(spec.argv)
        argv = engine_argv(self.listening_argv(spec), self.python)
        placed = self._placed(spec)
        free = self._free_bytes(placed)
        check_room(spec, lambda index: free.get(index))
        hardware = self._simulated_hardware(spec, placed, min(free.values(), default=None))
        env = engine_environment(
            {"PYTHONPATH": str(REPO_ROOT), **hardware, **spec.env},
            self._visible_devices(spec, placed),
            secrets=spec.secret_env,
        )
        extra = {
            "gpu_uuids": [gpu.uuid for gpu in placed],
            "memory": {gpu.key: self._uses(spec, gpu) for gpu in placed},
        }
        return self.start_engine(spec, argv, env, cwd=REPO_ROOT, extra=extra)

    def _simulated_hardware(
        self, spec: CopySpec, placed: list[Placed], free: int | None
    ) -> dict[str, str]:
        facts = self._model_facts(spec)
        settings: dict[str, Any] = {"model_json": dict(facts) if facts else None}
        if placed:
            smallest = min(placed, key=lambda gpu: gpu.memory_bytes)
            settings["gpu_memory"] = smallest.memory_bytes
            settings["gpu_name"] = smallest.product
            settings["free_memory"] = free
        return build_env(**settings)

    @staticmethod
    def _visible_devices(spec: CopySpec, placed: list[Placed]) -> str | None:
        """A MIG copy sees its slice (by UUID, found from the profile if need be)."""
        if spec.mig_profile and not spec.mig_slice_uuid and placed:
            return placed[0].uuid
        return cuda_visible_devices(spec)

    def _model_facts(self, spec: CopySpec) -> ModelFacts | None:
        source = self.model_facts_for
        if source is None:
            return None
        if callable(source):
            return source(spec)
        for key in (model_tag(spec.argv), spec.deployment_name):
            if key and key in source:
                return source[key]
        return None

    # -------------------------------------------------------- where it runs, what it holds

    def _machine(self, name: str) -> Mapping[str, Any]:
        machines: list[Mapping[str, Any]] = list(self.inventory.get("machines", []))
        for machine in machines:
            if machine.get("name") == name:
                return machine
        raise BackendError(f"machine {name!r} is not in the simulated inventory")

    def _placed(self, spec: CopySpec) -> list[Placed]:
        """The GPUs (or the one MIG slice) the copy was placed on, from the data."""
        machine = self._machine(spec.machine)
        gpus = {int(gpu["index"]): gpu for gpu in machine.get("accelerators", [])}
        placed = []
        for index in spec.gpu_indexes:
            if index not in gpus:
                raise BackendError(f"{spec.machine} has no GPU {index}")
            gpu = gpus[index]
            if spec.mig_slice_uuid or spec.mig_profile:
                placed.append(self._slice(spec, gpu))
            else:
                key = f"{spec.machine}/gpu{index}"
                uuid = str(gpu.get("uuid", ""))
                placed.append(Placed(key, index, str(gpu["product"]), memory_bytes(gpu), uuid))
        return placed

    def _slice(self, spec: CopySpec, gpu: Mapping[str, Any]) -> Placed:
        gpu_uuid = str(gpu.get("uuid", ""))
        for index, entry in enumerate(gpu.get("mig") or []):
            uuid = entry.get("uuid") or slice_uuid(gpu_uuid, index)
            if uuid == spec.mig_slice_uuid or (
                not spec.mig_slice_uuid and entry["profile"] == spec.mig_profile
            ):
                product = f"{gpu['product']} MIG {entry['profile']}"
                key = f"{spec.machine}/gpu{gpu['index']}/mig{index}"
                return Placed(key, int(gpu["index"]), product, memory_bytes(entry), uuid)
        wanted = spec.mig_slice_uuid or spec.mig_profile
        raise BackendError(f"{spec.machine} GPU {gpu['index']} has no MIG slice {wanted}")

    @staticmethod
    def _uses(spec: CopySpec, gpu: Placed) -> int:
        """What a running vLLM holds on its GPU: its share of the total (the reservation if the
        share is not given)."""
        if spec.memory_share:
            return int(spec.memory_share * gpu.memory_bytes)
        return spec.reserved_bytes

    def _free_bytes(self, placed: list[Placed]) -> dict[int, int]:
        """Per GPU index: its memory less what running copies already hold on it."""
        held: dict[str, int] = {}
        for record in self.live_records():
            for key, used in record.get("memory", {}).items():
                held[key] = held.get(key, 0) + int(used)
        return {gpu.index: max(0, gpu.memory_bytes - held.get(gpu.key, 0)) for gpu in placed}
