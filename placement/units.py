"""The planner's working state, and the rules for what one copy takes on each kind of GPU.

A plan builds this state once from an inventory (free bytes, free share, copies and free MIG
slices per GPU, each reservation applied once), then changes it as it places copies. Shares
are counted in integer millionths so that sums are exact.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum, StrEnum

from placement.shares import (
    DEFAULT_SHARE,
    DEFAULT_SHARE_OF_SLICE,
    SHARED_LIMIT,
    four_decimals_down,
)
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


# What decides how copies fit on a unit, apart from what is on it: kind, memory, replicas and
# the memory of each MIG slice (smallest first).
StaticKey = tuple[Kind, int, int, tuple[int, ...]]


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
    __slots__ = ("name", "units", "untouched", "placed")

    def __init__(self, name: str, units: range) -> None:
        self.name = name
        # Unit ids, not the units: no reference cycle, so a plan's state is freed at once.
        self.units = units
        self.untouched = 0  # GPUs with nothing on them
        self.placed = 0  # copies of the current request placed here


class GpuState:
    """One placement unit: a GPU, or the memory pool of a unified-memory machine."""

    __slots__ = (
        "uid",
        "machine",
        "accelerator",
        "index",
        "never_whole",
        "indices",
        "kind",
        "memory",
        "free_bytes",
        "free_share",
        "copies",
        "slices",
        "static_id",
        "version",
    )

    def __init__(
        self,
        uid: int,
        machine: MachineState,
        accelerator: Accelerator,
        kind: Kind,
        memory: int,
        static_ids: dict[StaticKey, int],
    ) -> None:
        self.uid = uid
        self.machine = machine
        self.accelerator = accelerator
        self.index = accelerator.index
        self.indices: tuple[int, ...] = (accelerator.index,)
        self.kind = kind
        # MIG slices and MPS replicas never host a whole-GPU copy: using one costs no whole GPU.
        self.never_whole = kind in (Kind.MIG, Kind.MPS)
        self.memory = memory
        self.free_bytes = memory
        self.free_share = SHARE_SCALE
        self.copies = 0  # reservations on it (or on its slices), of any deployment
        self.slices: tuple[SliceState, ...] = ()
        slice_memories: tuple[int, ...] = ()
        if accelerator.mig:
            # Smallest first, so the first free slice that holds a copy is the smallest one.
            slices = [SliceState(s, position) for position, s in enumerate(accelerator.mig)]
            self.slices = tuple(sorted(slices, key=lambda s: (s.memory, s.position)))
            slice_memories = tuple(s.memory for s in self.slices)
        # Units of one static kind share their rules: intern the kind as a small number.
        static_key = (kind, memory, accelerator.replicas, slice_memories)
        self.static_id = static_ids.setdefault(static_key, len(static_ids))
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
    static_ids: dict[StaticKey, int]

    @property
    def static_keys(self) -> list[StaticKey]:
        return list(self.static_ids)  # in id order: ids are given in insertion order


def kind_of(machine: Machine, accelerator: Accelerator, sharing: ClusterSharing) -> Kind:
    if machine.unified_memory:
        return Kind.UNIFIED
    if accelerator.mig is not None:
        return Kind.MIG
    if accelerator.sharing is not None:
        return _KIND_OF_SHARING[accelerator.sharing]
    # A GPU with its own strategy shares whatever the cluster says; one without follows it.
    return _KIND_OF_CLUSTER[sharing]


_KIND_OF_SHARING = {GpuSharing.MPS: Kind.MPS, GpuSharing.TIME_SLICED: Kind.TIME_SLICED}
_KIND_OF_CLUSTER = {ClusterSharing.WHOLE_GPU: Kind.WHOLE, ClusterSharing.FRACTIONAL: Kind.SHARED}


def build_state(inventory: Inventory) -> ClusterState:
    state = ClusterState(inventory, [], [], {}, {})
    for machine in sorted(inventory.machines, key=lambda m: m.name):
        _add_machine(state, machine)
    for reservation in inventory.reservations:
        gpu = state.by_accelerator.get((reservation.machine, reservation.accelerator))
        if gpu is not None:  # a reservation on hardware that is gone holds nothing
            _apply_reservation(gpu, reservation)
    for gpu in state.gpus:
        gpu.machine.untouched += gpu.copies == 0
    return state


def _add_machine(state: ClusterState, machine: Machine) -> None:
    if not machine.accelerators:
        return  # a machine without accelerators receives no placements
    first = len(state.gpus)
    units = range(first, first + (1 if machine.unified_memory else len(machine.accelerators)))
    machine_state = MachineState(machine.name, units)
    state.machines.append(machine_state)
    accelerators = sorted(machine.accelerators, key=lambda a: a.index)
    if machine.unified_memory:
        # Every accelerator of the machine draws on one pool: system memory less a reserve.
        pool = max(0, machine.system_memory_bytes - UNIFIED_RESERVE_BYTES)
        gpu = GpuState(first, machine_state, accelerators[0], Kind.UNIFIED, pool, state.static_ids)
        gpu.indices = tuple(a.index for a in accelerators)
        _register(state, gpu)
        return
    sharing = state.inventory.sharing
    for accelerator in accelerators:
        kind = kind_of(machine, accelerator, sharing)
        memory = accelerator.memory_bytes
        gpu = GpuState(len(state.gpus), machine_state, accelerator, kind, memory, state.static_ids)
        _register(state, gpu)


def _register(state: ClusterState, gpu: GpuState) -> None:
    state.gpus.append(gpu)
    for index in gpu.indices:
        state.by_accelerator[(gpu.machine.name, index)] = gpu


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
    return four_decimals_down(_engine_share(mode, need, replicas))


def _engine_share(mode: Mode, need: CopyNeed, replicas: int) -> float:
    asked = need.engine_share
    if mode is Mode.FRACTION:
        return asked if asked is not None else DEFAULT_SHARE * need.size
    if mode is Mode.REPLICA:
        unit = 1 / replicas
        limit = SHARED_LIMIT * unit
        return min(asked, limit) if asked is not None else DEFAULT_SHARE * unit
    if mode is Mode.SLICE:
        return asked if asked is not None else DEFAULT_SHARE_OF_SLICE
    return asked if asked is not None else DEFAULT_SHARE


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


@dataclass(frozen=True)
class UnitRule:
    """What one copy takes on units of one static kind: worked out once per kind and request."""

    mode: Mode | None  # None: the copy cannot use such a unit
    holds: bool  # the engine's share of the unit holds the copy's estimate
    room_bytes: int
    room_share: int
    replica_limit: int  # copies a time-sliced or MPS GPU takes; 0: no such limit
    slice_holds: tuple[bool, ...]  # per MIG slice, smallest first
    engine_share: float
    empty_count: int  # copies such a unit takes with nothing on it

    # The mode as flags, for the hot loops (an enum member lookup costs more than the test).
    by_slice: bool = field(init=False)
    whole: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_slice", self.mode is Mode.SLICE)
        object.__setattr__(self, "whole", self.mode is Mode.WHOLE)


NO_RULE = UnitRule(None, False, 1, 1, 0, (), 0.0, 0)


def unit_rule(key: StaticKey, need: CopyNeed) -> UnitRule:
    kind, memory, replicas, slice_memories = key
    mode = mode_for(kind, need)
    if mode is None:
        return NO_RULE
    share = engine_share(mode, need, replicas)
    room_bytes, room_share = reserved(mode, need, memory, replicas)
    room_bytes, room_share = max(room_bytes, 1), max(room_share, 1)
    fits = need.estimate_bytes <= int(share * memory)
    slice_holds = tuple(need.estimate_bytes <= int(share * m) for m in slice_memories)
    limit = replicas if kind in (Kind.TIME_SLICED, Kind.MPS) else 0
    if mode is Mode.SLICE:
        empty = sum(slice_holds)
    elif not fits:
        empty = 0
    elif mode is Mode.WHOLE:
        empty = 1
    else:
        empty = min(SHARE_SCALE // room_share, memory // room_bytes, limit or SHARE_SCALE)
    return UnitRule(mode, fits, room_bytes, room_share, limit, slice_holds, share, empty)


class Rules:
    """The unit rules of one request, per static kind of unit (a cluster has only a few)."""

    def __init__(self, need: CopyNeed, static_keys: list[StaticKey]) -> None:
        self.need = need
        self.by_id = [unit_rule(key, need) for key in static_keys]

    def of(self, gpu: GpuState) -> UnitRule:
        return self.by_id[gpu.static_id]


def first_free_slice(gpu: GpuState, rule: UnitRule) -> SliceState | None:
    """The smallest free slice whose engine share holds the copy."""
    for mig_slice, fits in zip(gpu.slices, rule.slice_holds, strict=True):
        if fits and mig_slice.free:
            return mig_slice
    return None


def copies_that_fit(gpu: GpuState, rule: UnitRule) -> int:
    """How many more copies the unit takes now (each unit independently of the others)."""
    if rule.by_slice:
        return sum(
            1 for s, fits in zip(gpu.slices, rule.slice_holds, strict=True) if fits and s.free
        )
    if not rule.holds:  # also when the copy cannot use such a unit at all
        return 0
    if rule.whole:
        return 1 if gpu.copies == 0 else 0
    count = min(gpu.free_share // rule.room_share, gpu.free_bytes // rule.room_bytes)
    if rule.replica_limit:
        count = min(count, rule.replica_limit - gpu.copies)
    return count if count > 0 else 0


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
