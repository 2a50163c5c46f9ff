"""The planner's working state, and the rules for what one copy takes on each kind of GPU.

A plan builds this state once from an inventory (free bytes, free share, copies and free MIG
slices per GPU, each reservation applied once), then changes it as it places copies. Shares
are counted in integer millionths so that sums are exact.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import Enum, StrEnum

from placement.types import (
    GIB,
    Accelerator,
    ClusterSharing,
    GpuSharing,
    Inventory,
    Machine,
    MigSlice,
    PlacementRequest,
    Reservation,
)

SHARE_SCALE = 1_000_000
UNIFIED_RESERVE_BYTES = 8 * GIB  # kept for the operating system on unified-memory machines

# Default engine shares (--gpu-memory-utilization) and the highest an operator may set.
DEFAULT_SHARE_OF_BUDGET = 0.8  # of a copy's budget: 0.8 x s on a shared GPU, 0.8 whole
MAX_SHARE_OF_BUDGET_SHARED = 0.9  # neighbours on a shared GPU use memory outside budgets
DEFAULT_SHARE_OF_SLICE = 0.9


class Kind(StrEnum):
    """How a GPU can be divided; the value is the accelerator's sharing_class."""

    SHARED = "shared"  # Berth splits it by byte budgets
    WHOLE = "whole_gpu"  # no sharing strategy: one copy per GPU
    TIME_SLICED = "time_sliced"
    MPS = "mps"
    MIG = "mig"
    UNIFIED = "unified_memory"


HARDWARE_CLASS = {
    Kind.SHARED: "software_shared",
    Kind.WHOLE: "hardware_isolated",
    Kind.TIME_SLICED: "software_shared",
    Kind.MPS: "software_shared",
    Kind.MIG: "hardware_isolated",
    Kind.UNIFIED: "unified_memory",
}
TENSOR_PARALLEL_KINDS = (Kind.SHARED, Kind.WHOLE, Kind.TIME_SLICED)


class Mode(Enum):
    """What one copy takes on a unit."""

    FRACTION = "fraction"  # s of its share and s x its memory
    WHOLE = "whole"  # the whole GPU (or pool), which must be untouched
    REPLICA = "replica"  # one MPS replica: 1/replicas of memory and compute
    SLICE = "slice"  # one MIG slice


def share_units(share: float) -> int:
    return round(share * SHARE_SCALE)


class SliceState:
    __slots__ = ("profile", "slice_id", "memory", "position", "free")

    def __init__(self, mig_slice: MigSlice, position: int) -> None:
        self.profile = mig_slice.profile
        self.slice_id = mig_slice.slice_id or str(position)
        self.memory = mig_slice.memory_bytes
        self.position = position
        self.free = True


class MachineState:
    __slots__ = ("name", "gpus", "untouched", "placed", "version")

    def __init__(self, name: str) -> None:
        self.name = name
        self.gpus: list[GpuState] = []
        self.untouched = 0  # GPUs with nothing on them
        self.placed = 0  # copies of the current request placed here
        self.version = 0


class GpuState:
    """One placement unit: a GPU, or the memory pool of a unified-memory machine."""

    __slots__ = (
        "uid",
        "machine",
        "accelerator",
        "indices",
        "kind",
        "memory",
        "free_bytes",
        "free_share",
        "copies",
        "slices",
        "static_key",
        "version",
    )

    def __init__(
        self, uid: int, machine: MachineState, accelerator: Accelerator, kind: Kind, memory: int
    ) -> None:
        self.uid = uid
        self.machine = machine
        self.accelerator = accelerator
        self.indices: tuple[int, ...] = (accelerator.index,)
        self.kind = kind
        self.memory = memory
        self.free_bytes = memory
        self.free_share = SHARE_SCALE
        self.copies = 0  # reservations on it (or on its slices), of any deployment
        # Smallest first, so the first free slice that holds a copy is the smallest one.
        slices = [SliceState(s, position) for position, s in enumerate(accelerator.mig or ())]
        self.slices = sorted(slices, key=lambda s: (s.memory, s.position))
        slice_memories = tuple(s.memory for s in self.slices)
        self.static_key = (kind, memory, accelerator.replicas, slice_memories)
        self.version = 0

    @property
    def untouched(self) -> bool:
        return self.copies == 0


@dataclass
class ClusterState:
    inventory: Inventory
    machines: list[MachineState]
    gpus: list[GpuState]
    by_accelerator: dict[tuple[str, int], GpuState]


def kind_of(machine: Machine, accelerator: Accelerator, sharing: ClusterSharing) -> Kind:
    if machine.unified_memory:
        return Kind.UNIFIED
    if accelerator.mig is not None:
        return Kind.MIG
    if accelerator.sharing is GpuSharing.MPS:
        return Kind.MPS
    if accelerator.sharing is GpuSharing.TIME_SLICED:
        return Kind.TIME_SLICED
    # A GPU with its own strategy shares whatever the cluster says; one without follows it.
    return Kind.WHOLE if sharing is ClusterSharing.WHOLE_GPU else Kind.SHARED


def build_state(inventory: Inventory) -> ClusterState:
    state = ClusterState(inventory, [], [], {})
    for machine in sorted(inventory.machines, key=lambda m: m.name):
        _add_machine(state, machine)
    for reservation in inventory.reservations:
        gpu = state.by_accelerator.get((reservation.machine, reservation.accelerator))
        if gpu is not None:  # a reservation on hardware that is gone holds nothing
            _apply_reservation(gpu, reservation)
    for machine_state in state.machines:
        machine_state.untouched = sum(1 for gpu in machine_state.gpus if gpu.untouched)
    return state


def _add_machine(state: ClusterState, machine: Machine) -> None:
    if not machine.accelerators:
        return  # a machine without accelerators receives no placements
    machine_state = MachineState(machine.name)
    state.machines.append(machine_state)
    accelerators = sorted(machine.accelerators, key=lambda a: a.index)
    if machine.unified_memory:
        # Every accelerator of the machine draws on one pool: system memory less a reserve.
        pool = max(0, machine.system_memory_bytes - UNIFIED_RESERVE_BYTES)
        gpu = GpuState(len(state.gpus), machine_state, accelerators[0], Kind.UNIFIED, pool)
        gpu.indices = tuple(a.index for a in accelerators)
        _register(state, machine_state, gpu)
        return
    for accelerator in accelerators:
        kind = kind_of(machine, accelerator, state.inventory.sharing)
        gpu = GpuState(len(state.gpus), machine_state, accelerator, kind, accelerator.memory_bytes)
        _register(state, machine_state, gpu)


def _register(state: ClusterState, machine_state: MachineState, gpu: GpuState) -> None:
    state.gpus.append(gpu)
    machine_state.gpus.append(gpu)
    for index in gpu.indices:
        state.by_accelerator[(machine_state.name, index)] = gpu


def _apply_reservation(gpu: GpuState, reservation: Reservation) -> None:
    gpu.copies += 1
    if gpu.kind is Kind.MIG:
        taken = _slice_for_reservation(gpu, reservation)
        if taken is not None:
            taken.free = False
        return
    gpu.free_bytes -= reservation.bytes
    gpu.free_share -= share_units(reservation.share)


def _slice_for_reservation(gpu: GpuState, reservation: Reservation) -> SliceState | None:
    free = [s for s in gpu.slices if s.free]
    wanted = reservation.slice
    by_id = [s for s in free if s.slice_id == wanted]
    # Kubernetes may only say which profile the device plugin handed out, not which slice.
    by_profile = [s for s in free if s.profile == wanted]
    by_size = [s for s in free if s.memory >= reservation.bytes] or free[-1:]
    candidates = by_id or by_profile or (by_size if wanted is None else [])
    return candidates[0] if candidates else None


# --- what one copy takes ---------------------------------------------------------------------


@dataclass(frozen=True)
class CopyNeed:
    """One copy of the request, as the unit rules see it."""

    estimate_bytes: int  # per GPU
    size: float
    size_units: int
    tensor_parallel: int
    engine_share: float | None  # what the operator set, if anything

    @classmethod
    def of(cls, request: PlacementRequest, estimate_bytes: int) -> CopyNeed:
        size = request.accelerators_per_copy
        units = share_units(size) if size < 1 else SHARE_SCALE
        share = request.engine.gpu_memory_utilization
        return cls(estimate_bytes, size, units, request.tensor_parallel, share)


def mode_for(kind: Kind, need: CopyNeed) -> Mode | None:
    """How a copy of this size uses a unit of this kind; None when it cannot use it at all."""
    if need.tensor_parallel > 1:
        return Mode.WHOLE if kind in TENSOR_PARALLEL_KINDS else None
    if kind is Kind.MIG:
        return Mode.SLICE
    if kind is Kind.MPS:
        return Mode.REPLICA  # whatever s asks: the device plugin hands out one replica
    if kind is Kind.WHOLE or need.size >= 1:
        return Mode.WHOLE
    return Mode.FRACTION


def engine_share(mode: Mode, need: CopyNeed, replicas: int = 1) -> float:
    """--gpu-memory-utilization for a copy placed this way (a fraction of what the engine sees)."""
    return _four_decimals_down(_engine_share(mode, need, replicas))


def _engine_share(mode: Mode, need: CopyNeed, replicas: int) -> float:
    asked = need.engine_share
    if mode is Mode.FRACTION:
        return asked if asked is not None else DEFAULT_SHARE_OF_BUDGET * need.size
    if mode is Mode.REPLICA:
        unit = 1 / replicas
        limit = MAX_SHARE_OF_BUDGET_SHARED * unit
        return min(asked, limit) if asked is not None else DEFAULT_SHARE_OF_BUDGET * unit
    if mode is Mode.SLICE:
        return asked if asked is not None else DEFAULT_SHARE_OF_SLICE
    return asked if asked is not None else DEFAULT_SHARE_OF_BUDGET


def _four_decimals_down(value: float) -> float:
    # The engine gets the value printed on its command line; rounding down keeps it in budget.
    return math.floor(value * 10_000 + 1e-9) / 10_000


def reserved(mode: Mode, need: CopyNeed, memory: int, replicas: int) -> tuple[int, int]:
    """(bytes, share units) a copy reserves on a unit of `memory` bytes."""
    if mode is Mode.FRACTION:
        return need.size_units * memory // SHARE_SCALE, need.size_units
    if mode is Mode.REPLICA:
        return memory // replicas, round(SHARE_SCALE / replicas)
    return memory, SHARE_SCALE


def holds(need: CopyNeed, mode: Mode, memory: int, replicas: int = 1) -> bool:
    """Whether the engine's share of a unit of `memory` bytes holds the copy's estimate."""
    return need.estimate_bytes <= int(engine_share(mode, need, replicas) * memory)


def first_free_slice(gpu: GpuState, need: CopyNeed) -> SliceState | None:
    """The smallest free slice whose engine share holds the copy."""
    for mig_slice in gpu.slices:
        if mig_slice.free and holds(need, Mode.SLICE, mig_slice.memory):
            return mig_slice
    return None


def copies_that_fit(gpu: GpuState, need: CopyNeed) -> int:
    """How many more copies of this size the unit takes now."""
    mode = mode_for(gpu.kind, need)
    replicas = gpu.accelerator.replicas
    if mode is None:
        return 0
    if mode is Mode.SLICE:
        return sum(1 for s in gpu.slices if s.free and holds(need, mode, s.memory))
    if not holds(need, mode, gpu.memory, replicas):
        return 0
    if mode is Mode.WHOLE:
        return 1 if gpu.untouched else 0
    room_bytes, room_share = reserved(mode, need, gpu.memory, replicas)
    count = min(gpu.free_share // max(room_share, 1), gpu.free_bytes // max(room_bytes, 1))
    if gpu.kind in (Kind.TIME_SLICED, Kind.MPS):
        count = min(count, replicas - gpu.copies)
    return max(0, count)


def copies_that_fit_empty(
    static_key: tuple[Kind, int, int, tuple[int, ...]], need: CopyNeed
) -> int:
    """copies_that_fit for a unit of this static kind with nothing on it."""
    kind, memory, replicas, slice_memories = static_key
    mode = mode_for(kind, need)
    if mode is None:
        return 0
    if mode is Mode.SLICE:
        return sum(1 for size in slice_memories if holds(need, mode, size))
    if not holds(need, mode, memory, replicas):
        return 0
    if mode is Mode.WHOLE:
        return 1
    room_bytes, room_share = reserved(mode, need, memory, replicas)
    count = min(SHARE_SCALE // max(room_share, 1), memory // max(room_bytes, 1))
    return min(count, replicas) if kind in (Kind.TIME_SLICED, Kind.MPS) else count


def sharing_class(gpu: GpuState, mig_slice: SliceState | None) -> str:
    if mig_slice is not None:
        # Kubernetes-style names with dots replaced: mig_2g_20gb.
        return "mig_" + re.sub(r"[^0-9A-Za-z]+", "_", mig_slice.profile)
    return gpu.kind.value


# --- filters -------------------------------------------------------------------------------


def version_tuple(text: str | None) -> tuple[int, ...] | None:
    """'9.0' -> (9, 0), '550.90.07' -> (550, 90, 7); None when it has no numbers."""
    numbers = re.findall(r"\d+", text or "")
    return tuple(int(n) for n in numbers) if numbers else None


def at_least(have: str | None, need: str | None) -> bool:
    """Whether a version meets a minimum; an unknown version on either side does not block."""
    have_version, need_version = version_tuple(have), version_tuple(need)
    if have_version is None or need_version is None:
        return True
    return have_version >= need_version


def meets_versions(accelerator: Accelerator, request: PlacementRequest) -> bool:
    engine = request.engine
    capability_ok = at_least(accelerator.compute_capability, engine.min_compute_capability)
    return capability_ok and at_least(accelerator.driver, engine.min_driver)


def eligible(accelerator: Accelerator, request: PlacementRequest) -> bool:
    return accelerator.vendor == request.engine.vendor and meets_versions(accelerator, request)
