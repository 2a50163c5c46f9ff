"""The planner's working state, and the rules for what one copy takes on each kind of GPU.

A plan builds this state once from an inventory (free bytes, free share, copies and free MIG
slices per unit, each reservation applied once), then changes it as it places copies. Shares
are counted in integer millionths so that sums are exact.

A cluster of thousands of GPUs is mostly a few models of machine with many GPUs that nothing
is on, so the state indexes free room instead of keeping one object per GPU:

- a UnitType is what the units of one kind share: their rules (kind, memory, replicas, MIG
  slices: the StaticKey) and their card (vendor and versions: whether an engine may use them);
- a MachineShape is a machine's layout of unit types, shared by the machines of one model;
- a RoomGroup is the units of one type with exactly the same free room, so that the planner
  asks "how many copies fit, at what cost" once per group. A type's units start in its
  pristine group (nothing on them); a unit that holds reservations is in the group of the room
  they leave.

A unit becomes a GpuState of its own only when a copy is put on it, or when every GPU is asked
for (`ClusterState.gpus`: the clusters API, re-packing's over-commit check).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from operator import attrgetter

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
# A unit type's number, then its free bytes, free share, copies and which slices are free.
RoomKey = tuple[int, int, int, int, tuple[bool, ...]]
# A group's number, and what decides the room a reservation leaves on a unit of that group: its
# bytes, share and slice.
ReservationStep = tuple[int, int, float, str | None]


def share_units(share: float) -> int:
    return round(share * SHARE_SCALE)


class SliceState:
    __slots__ = ("profile", "slice_id", "memory", "position", "free")

    def __init__(self, profile: str, slice_id: str, memory: int, position: int) -> None:
        self.profile = profile
        self.slice_id = slice_id
        self.memory = memory
        self.position = position
        self.free = True

    def copy(self) -> SliceState:
        twin = SliceState(self.profile, self.slice_id, self.memory, self.position)
        twin.free = self.free
        return twin


def slices_of(accelerator: Accelerator) -> tuple[SliceState, ...]:
    """The accelerator's MIG slices, all free, smallest first: so the first free slice that
    holds a copy is the smallest one."""
    slices = [
        SliceState(s.profile, s.slice_id or str(position), s.memory_bytes, position)
        for position, s in enumerate(accelerator.mig or ())
    ]
    return tuple(sorted(slices, key=lambda s: (s.memory, s.position)))


class Room:
    """What is free on a unit (or on each unit of a group), and what decides how copies fit."""

    __slots__ = (
        "unit_type",
        "kind",
        "memory",
        "static_id",
        "never_whole",
        "free_bytes",
        "free_share",
        "copies",
        "slices",
    )

    def __init__(
        self, unit_type: UnitType, free: tuple[int, int, int], slices: tuple[SliceState, ...]
    ) -> None:
        self.unit_type = unit_type
        # The type's, at hand: the planner reads them for every unit it looks at.
        self.kind = unit_type.kind
        self.memory = unit_type.memory
        self.static_id = unit_type.static_id
        # MIG slices and MPS replicas never host a whole-GPU copy: using one costs no whole GPU.
        self.never_whole = self.kind in (Kind.MIG, Kind.MPS)
        # Free bytes and share, and copies on it (or on its slices) of any deployment.
        self.free_bytes, self.free_share, self.copies = free
        self.slices = slices

    @property
    def untouched(self) -> bool:
        return self.copies == 0


class UnitType:
    """What the units of one kind share: their rules and their card."""

    __slots__ = ("number", "static_id", "kind", "memory", "accelerator", "pristine", "units")

    def __init__(
        self,
        number: int,
        static_id: int,
        kind: Kind,
        memory: int,
        accelerator: Accelerator,
        slices: tuple[SliceState, ...],
    ) -> None:
        self.number = number
        # Types with the same rules (StaticKey), whatever their card, share a small number.
        self.static_id = static_id
        self.kind = kind
        self.memory = memory
        # The first unit's accelerator: its vendor, versions and replicas are every unit's.
        self.accelerator = accelerator
        self.pristine = RoomGroup(self, (memory, SHARE_SCALE, 0), slices)
        self.units = 0  # in the cluster


class RoomGroup(Room):
    """The units of one type with exactly the same free room: each takes the same copies."""

    __slots__ = ("number", "count", "machines", "positions")

    def __init__(
        self, unit_type: UnitType, free: tuple[int, int, int], slices: tuple[SliceState, ...]
    ) -> None:
        super().__init__(unit_type, free, slices)
        self.number = -1  # its place in ClusterState.groups
        self.count = 0  # units in it now
        # Its units, as (machine, position) pairs in two lists (no tuple per unit: a cluster may
        # have tens of thousands). They may name units that moved on to another group since (a
        # unit with several reservations passes through several): ClusterState.rooms says
        # where a unit is. A type's pristine group lists none: its units are those of the type
        # that ClusterState.rooms does not name.
        self.machines: list[MachineState] = []
        self.positions: list[int] = []

    @property
    def pristine(self) -> bool:
        return self is self.unit_type.pristine


class MachineShape:
    """A machine's units in index order (one unit: a unified-memory pool), by type."""

    __slots__ = ("types", "indices", "accelerator_at", "position_of", "machines")

    def __init__(
        self,
        types: tuple[UnitType, ...],
        indices: tuple[tuple[int, ...], ...],
        accelerator_at: tuple[int, ...],
    ) -> None:
        self.types = types
        self.indices = indices  # per unit, the accelerator indexes it stands for
        self.accelerator_at = accelerator_at  # per unit, its accelerator's place in the Machine
        self.position_of = {index: p for p, indexes in enumerate(indices) for index in indexes}
        self.machines = 0  # machines of this shape


class MachineState:
    __slots__ = ("name", "machine", "shape", "first_uid", "untouched", "placed", "version")

    def __init__(self, machine: Machine, shape: MachineShape, first_uid: int) -> None:
        self.name = machine.name
        self.machine = machine
        self.shape = shape
        self.first_uid = first_uid  # its units' uids follow on in index order
        self.untouched = len(shape.types)  # units with nothing on them
        self.placed = 0  # copies of the current request placed here
        self.version = 0  # changes whenever the planner's keys for its units do

    def accelerator(self, position: int) -> Accelerator:
        """The unit's accelerator (a unified-memory pool's: its first)."""
        return self.machine.accelerators[self.shape.accelerator_at[position]]


class GpuState(Room):
    """One placement unit on its own: a GPU, or the memory pool of a unified-memory machine."""

    __slots__ = ("uid", "machine", "accelerator", "index", "indices")

    def __init__(self, machine: MachineState, position: int, room: Room) -> None:
        # It starts with its group's room, in slices of its own: from now on it changes alone.
        # The fields are copied as they are (no Room.__init__): the API may make thousands.
        self.unit_type, self.kind, self.memory = room.unit_type, room.kind, room.memory
        self.static_id, self.never_whole = room.static_id, room.never_whole
        self.free_bytes, self.free_share = room.free_bytes, room.free_share
        self.copies = room.copies
        self.slices = tuple(map(SliceState.copy, room.slices)) if room.slices else ()
        self.uid = machine.first_uid + position
        self.machine = machine
        self.accelerator = machine.accelerator(position)
        self.indices = machine.shape.indices[position]
        self.index = self.indices[0]


class ClusterState:
    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory
        self.machines: list[MachineState] = []  # by name; only those with accelerators
        self.shapes: list[MachineShape] = []
        self.types: list[UnitType] = []
        self.groups: list[RoomGroup] = []  # each type's pristine group, and held rooms
        self.static_ids: dict[StaticKey, int] = {}
        # Uid -> room, for each unit not in its type's pristine group: the group of the room its
        # reservations leave, or its own GpuState once it has one. (One dict for the cluster, not
        # one per machine: fewer objects for Python's garbage collector to walk.)
        self.rooms: dict[int, Room] = {}
        self.own: list[GpuState] = []  # the units that have a GpuState of their own
        self._gpus: list[GpuState] | None = None

    @property
    def static_keys(self) -> list[StaticKey]:
        return list(self.static_ids)  # in id order: ids are given in insertion order

    def room(self, machine: MachineState, position: int) -> Room:
        """What is free on a unit now: its own GpuState's, or its group's."""
        room = self.rooms.get(machine.first_uid + position)
        return room if room is not None else machine.shape.types[position].pristine

    def rooms_now(self) -> list[Room]:
        """Every room some unit has now: the groups that still have units, and the units' own."""
        return [*(group for group in self.groups if group.count), *self.own]

    def gpu(self, machine: MachineState, position: int) -> GpuState:
        """The unit as a GpuState of its own (which then stands for it: its group no longer)."""
        room = self.room(machine, position)
        if isinstance(room, GpuState):
            return room
        assert isinstance(room, RoomGroup)
        room.count -= 1
        gpu = self.rooms[machine.first_uid + position] = GpuState(machine, position, room)
        self.own.append(gpu)
        return gpu

    @property
    def gpus(self) -> list[GpuState]:
        """Every unit as a GpuState, by machine name and index (made once, then kept)."""
        if self._gpus is None:
            self._gpus = [
                self.gpu(machine, position)
                for machine in self.machines
                for position in range(len(machine.shape.types))
            ]
        return self._gpus

    def pristine_positions(
        self, machine: MachineState, unit_type: UnitType | None = None
    ) -> list[int]:
        """The machine's units (of this type, or any) still in their type's pristine group:
        nothing is on them, and the planner has put nothing there yet."""
        first = machine.first_uid
        return [
            p
            for p, of_type in enumerate(machine.shape.types)
            if (unit_type is None or of_type is unit_type) and first + p not in self.rooms
        ]

    def first_unit(self, types: set[int]) -> tuple[MachineState, int] | None:
        """The first unit, by machine name and index, of these types (by number)."""
        for machine in self.machines:
            for position, unit_type in enumerate(machine.shape.types):
                if unit_type.number in types:
                    return machine, position
        return None

    def add_group(self, group: RoomGroup) -> RoomGroup:
        group.number = len(self.groups)
        self.groups.append(group)
        return group


def kind_of(accelerator: Accelerator, sharing: ClusterSharing) -> Kind:
    """The kind of a GPU of a machine without unified memory (whose GPUs share one pool)."""
    if accelerator.mig is not None:
        return Kind.MIG
    if accelerator.sharing is not None:
        return _KIND_OF_SHARING[accelerator.sharing]
    # A GPU with its own strategy shares whatever the cluster says; one without follows it.
    return _KIND_OF_CLUSTER[sharing]


_KIND_OF_SHARING = {GpuSharing.MPS: Kind.MPS, GpuSharing.TIME_SLICED: Kind.TIME_SLICED}
_KIND_OF_CLUSTER = {ClusterSharing.WHOLE_GPU: Kind.WHOLE, ClusterSharing.FRACTIONAL: Kind.SHARED}

_INDEX = attrgetter("index")
# Everything else about an accelerator that the planner reads (not its product name).
_CARD_FACTS = attrgetter(
    "vendor", "compute_capability", "driver", "memory_bytes", "sharing", "replicas", "mig"
)
CardFacts = tuple[object, ...]


def build_state(inventory: Inventory) -> ClusterState:
    state = ClusterState(inventory)
    builder = _Builder(state)
    for machine in sorted(inventory.machines, key=lambda m: m.name):
        if machine.accelerators:  # a machine without accelerators receives no placements
            builder.add_machine(machine)
    builder.hold_reservations(inventory.reservations)
    builder.count_units()
    return state


class _Builder:
    """Builds a ClusterState: each machine model's shape worked out once, each unit type and
    each room interned."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.shapes: dict[object, MachineShape] = {}
        # A GPU's card facts, or a pool's (memory, card facts) -> its type.
        self.types: dict[object, UnitType] = {}
        self.rooms: dict[RoomKey, RoomGroup] = {}
        self.after: dict[ReservationStep, RoomGroup] = {}  # the group a reservation moves a unit to
        self.by_name: dict[str, MachineState] = {}
        self.units = 0

    def add_machine(self, machine: Machine) -> None:
        # Machines of one model differ only by name: the same facts, the same shape.
        indexes = tuple(map(_INDEX, machine.accelerators))
        cards = tuple(map(_CARD_FACTS, machine.accelerators))
        key = (machine.unified_memory, machine.system_memory_bytes, indexes, cards)
        shape = self.shapes.get(key)
        if shape is None:
            shape = self.shapes[key] = self._shape(machine, indexes, cards)
            self.state.shapes.append(shape)
        shape.machines += 1
        machine_state = MachineState(machine, shape, self.units)
        self.units += len(shape.types)
        self.state.machines.append(machine_state)
        self.by_name[machine.name] = machine_state

    def _shape(
        self, machine: Machine, indexes: tuple[int, ...], cards: tuple[CardFacts, ...]
    ) -> MachineShape:
        accelerators = machine.accelerators
        order = sorted(range(len(indexes)), key=indexes.__getitem__)
        if machine.unified_memory:
            # Every accelerator of the machine draws on one pool: system memory less a reserve.
            pool = max(0, machine.system_memory_bytes - UNIFIED_RESERVE_BYTES)
            first = order[0]
            key = (pool, cards[first])
            pool_type = self.types.get(key) or self._new_type(key, accelerators[first], pool)
            return MachineShape((pool_type,), (tuple(indexes[i] for i in order),), (first,))
        types = tuple(
            self.types.get(cards[i]) or self._new_type(cards[i], accelerators[i]) for i in order
        )
        return MachineShape(types, tuple((indexes[i],) for i in order), tuple(order))

    def _new_type(self, key: object, accelerator: Accelerator, pool: int | None = None) -> UnitType:
        """The type of units with this accelerator's facts, or of a unified-memory pool."""
        if pool is None:
            kind = kind_of(accelerator, self.state.inventory.sharing)
            memory = accelerator.memory_bytes
        else:
            kind, memory = Kind.UNIFIED, pool
        slices = slices_of(accelerator)
        static_key = (kind, memory, accelerator.replicas, tuple(s.memory for s in slices))
        static_id = self.state.static_ids.setdefault(static_key, len(self.state.static_ids))
        number = len(self.state.types)
        unit_type = self.types[key] = UnitType(number, static_id, kind, memory, accelerator, slices)
        self.state.types.append(unit_type)
        self.state.add_group(unit_type.pristine)
        return unit_type

    def hold_reservations(self, reservations: tuple[Reservation, ...]) -> None:
        """Each reservation moves its unit from the group of the room it had to the group of
        the room it leaves. In input order: that decides which MIG slice a reservation holds."""
        held: dict[int, RoomGroup] = {}  # uid -> group, for the units that hold any
        for reservation in reservations:
            machine = self.by_name.get(reservation.machine)
            position = machine.shape.position_of.get(reservation.accelerator) if machine else None
            if machine is None or position is None:
                continue  # a reservation on hardware that is gone holds nothing
            uid = machine.first_uid + position
            room = held.get(uid)
            if room is None:
                room = machine.shape.types[position].pristine
                machine.untouched -= 1
            else:
                room.count -= 1
            step = (room.number, reservation.bytes, reservation.share, reservation.slice)
            group = self.after.get(step) or self._group_after(room, reservation, step)
            group.count += 1
            group.machines.append(machine)
            group.positions.append(position)
            held[uid] = group
        self.state.rooms.update(held)

    def _group_after(
        self, room: RoomGroup, reservation: Reservation, step: ReservationStep
    ) -> RoomGroup:
        """The group of the room a reservation leaves on a unit of this room."""
        if room.kind is Kind.MIG:
            slices = tuple(map(SliceState.copy, room.slices))
            taken = _slice_for_reservation(slices, reservation)
            if taken is not None:
                taken.free = False
            free_bytes, free_share = room.free_bytes, room.free_share
        else:
            slices = room.slices  # none, or all free: a group never changes its slices
            free_bytes = room.free_bytes - reservation.bytes
            free_share = room.free_share - share_units(reservation.share)
        copies = room.copies + 1
        free_slices = tuple(s.free for s in slices) if slices else ()
        key = (room.unit_type.number, free_bytes, free_share, copies, free_slices)
        group = self.rooms.get(key)
        if group is None:
            group = RoomGroup(room.unit_type, (free_bytes, free_share, copies), slices)
            self.rooms[key] = self.state.add_group(group)
        self.after[step] = group
        return group

    def count_units(self) -> None:
        """The units of each type, and of its pristine group: those that hold nothing."""
        for shape in self.state.shapes:
            for unit_type in shape.types:
                unit_type.units += shape.machines
        for unit_type in self.state.types:
            unit_type.pristine.count = unit_type.units
        for group in self.rooms.values():
            group.unit_type.pristine.count -= group.count


def _slice_for_reservation(
    slices: tuple[SliceState, ...], reservation: Reservation
) -> SliceState | None:
    free = [s for s in slices if s.free]
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

    def of(self, room: Room) -> UnitRule:
        return self.by_id[room.static_id]


def first_free_slice(room: Room, rule: UnitRule) -> SliceState | None:
    """The smallest free slice whose engine share holds the copy."""
    for mig_slice, fits in zip(room.slices, rule.slice_holds, strict=True):
        if fits and mig_slice.free:
            return mig_slice
    return None


def copies_that_fit(room: Room, rule: UnitRule) -> int:
    """How many more copies the unit (each unit of a group) takes now, independently of the
    others."""
    if rule.by_slice:
        return sum(
            1 for s, fits in zip(room.slices, rule.slice_holds, strict=True) if fits and s.free
        )
    if not rule.holds:  # also when the copy cannot use such a unit at all
        return 0
    if rule.whole:
        return 1 if room.copies == 0 else 0
    count = min(room.free_share // rule.room_share, room.free_bytes // rule.room_bytes)
    if rule.replica_limit:
        count = min(count, rule.replica_limit - room.copies)
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
