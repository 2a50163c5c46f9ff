"""Where the copies of one request go: a plan over an inventory snapshot.

Every unit (GPU, MIG GPU, unified-memory pool) takes a number of copies that depends only on its
own free room, so "how many fit" is a sum, and placing a copy anywhere it fits lowers that sum by
exactly one. The policy only decides the order: a heap of units keyed by the policy, re-keyed
when a placement changes a unit or its machine. Ties break on (machine name, index), so a plan
never depends on the order of the input.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import Counter
from collections.abc import Iterable

from placement import reasons
from placement.estimate import estimate_copy
from placement.shares import HIGH_SHARE, tensor_parallel
from placement.types import (
    HIGH_ENGINE_SHARE_NOTICE,
    SHARING_NOT_CONFIGURED_NOTICE,
    ClusterSharing,
    Estimate,
    Inventory,
    NotPlaced,
    Placement,
    PlacementRequest,
    PlanResult,
    Policy,
)
from placement.units import (
    HARDWARE_CLASS,
    SHARE_SCALE,
    TENSOR_PARALLEL_KINDS,
    ClusterState,
    CopyNeed,
    GpuState,
    Kind,
    MachineShape,
    MachineState,
    Mode,
    Room,
    RoomGroup,
    Rules,
    SliceState,
    StaticKey,
    UnitRule,
    build_state,
    copies_that_fit,
    eligible,
    first_free_slice,
    sharing_class,
)

# Shares the fit check may suggest, smallest first; then 1 GPU, then n GPUs of one machine.
FRACTION_LADDER = (0.1, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.9)
FRACTION_KINDS = (Kind.SHARED, Kind.TIME_SLICED, Kind.UNIFIED)

UnitKey = tuple[int, int, int, str, int]


def plan(inventory: Inventory, request: PlacementRequest) -> PlanResult:
    """Place request.copies copies; say why the others do not fit and what would."""
    estimate = estimate_copy(request.model, request.engine, request.tensor_parallel)
    need = CopyNeed.of(request, estimate.total_bytes)
    state = build_state(inventory)
    rules = Rules(need, state.static_keys)
    usable = usable_types(state, request)
    summary = CandidateSummary.of(state, usable)
    placer = Placer(state, usable, rules, request.policy)
    placed = placer.place(request.copies)
    return PlanResult(
        estimate=estimate,
        placed=tuple(placed),
        not_placed=_not_placed(state, request, estimate, need, len(placed)),
        notices=_notices(inventory, request, placed),
        fit_now=placer.fit_now,
        fit_empty=summary.count_fit_empty(rules),
        suggested_accelerators_per_copy=suggest_size(summary, request),
    )


def usable_types(state: ClusterState, request: PlacementRequest) -> list[bool]:
    """Per unit type (by number), whether the engine accepts its vendor and versions (checked
    once per kind of card)."""
    verdicts: dict[tuple[str, str | None, str | None], bool] = {}
    usable = []
    for unit_type in state.types:
        accelerator = unit_type.accelerator
        card = (accelerator.vendor, accelerator.compute_capability, accelerator.driver)
        verdict = verdicts.get(card)
        if verdict is None:
            verdict = verdicts[card] = eligible(accelerator, request)
        usable.append(verdict)
    return usable


@dataclasses.dataclass
class CandidateSummary:
    """The eligible hardware with nothing on it, grouped by kind of unit and of machine.

    Questions about the empty cluster (how many fit, which size to suggest) then cost one pass
    over a handful of groups instead of one over every GPU.
    """

    static_keys: list[StaticKey]
    units: Counter[int]  # static id -> units
    machines: Counter[tuple[int, ...]]  # static ids of a machine's tensor-parallel GPUs -> machines

    @classmethod
    def of(cls, state: ClusterState, usable: list[bool]) -> CandidateSummary:
        units: Counter[int] = Counter()
        for unit_type in state.types:
            if usable[unit_type.number]:
                units[unit_type.static_id] += unit_type.units
        machines: Counter[tuple[int, ...]] = Counter()
        for shape in state.shapes:
            ids = tuple(
                sorted(
                    unit_type.static_id
                    for unit_type in shape.types
                    if usable[unit_type.number] and unit_type.kind in TENSOR_PARALLEL_KINDS
                )
            )
            if ids:
                machines[ids] += shape.machines
        return cls(state.static_keys, units, machines)

    def count_fit_empty(self, rules: Rules, kinds: Iterable[Kind] = tuple(Kind)) -> int:
        n = rules.need.tensor_parallel
        if n > 1:
            return sum(
                count * (sum(1 for i in ids if rules.by_id[i].holds) // n)
                for ids, count in self.machines.items()
            )
        wanted = set(kinds)
        return sum(
            count * rules.by_id[i].empty_count
            for i, count in self.units.items()
            if self.static_keys[i][0] in wanted
        )

    def most_tensor_parallel_gpus(self) -> int:
        return max((len(ids) for ids in self.machines), default=0)


# --- placing ---------------------------------------------------------------------------------

# What the policy orders units by on their own room: (tier, waste) for binpack, (copies, waste)
# for spread. Every unit of a group has the same.
RoomOrder = tuple[int, int]
# A unit in the heap: its key (UnitKey), its machine's version when pushed, the machine and the
# unit's position there. One flat tuple: a plan may push thousands.
UnitEntry = tuple[int, int, int, str, int, int, MachineState, int]


class Placer:
    """Counts what fits now and places copies in the policy's order, changing the state.

    It counts and orders groups of units with the same room rather than units: a group's units
    take the same copies and share the policy's order on their room, so a group's units enter
    the heap of units only once the least key any of them can have comes first. The state must
    be fresh: a unit becomes a GpuState of its own only when the placer puts a copy on it.
    """

    def __init__(
        self, state: ClusterState, usable: list[bool], rules: Rules, policy: Policy
    ) -> None:
        self.state, self.usable, self.rules, self.policy = state, usable, rules, policy
        self.need = rules.need
        self.binpack = policy is Policy.BINPACK
        if self.need.tensor_parallel > 1:
            self.free_by_machine = free_whole_gpus_by_machine(state, usable, rules)
            n = self.need.tensor_parallel
            self.fit_now = sum(len(free) // n for _, free in self.free_by_machine.values())
        else:
            self.groups = [
                group
                for group in state.groups
                if group.count and usable[group.unit_type.number] and self._fits(group)
            ]
            self.fit_now = sum(group.count * self._fits(group) for group in self.groups)
        self.expanded: set[int] = set()  # groups whose units have entered the heap

    def place(self, copies: int) -> list[Placement]:
        count = min(copies, self.fit_now)
        if count <= 0:
            return []
        if self.need.tensor_parallel > 1:
            return self._place_tensor_parallel(count)
        return self._place_on_units(count)

    def _fits(self, room: Room) -> int:
        return copies_that_fit(room, self.rules.of(room))

    def _room_order(self, room: Room) -> RoomOrder:
        waste = self._waste(room, self.rules.of(room))
        if self.binpack:
            # Units that cost no whole GPU first (partly used ones, MIG slices, MPS replicas),
            # then the tightest fit (the smallest MIG slice that holds it).
            return (0 if room.never_whole or room.copies else 1), waste
        return room.copies, waste  # spread: the least busy unit

    def _entry(self, order: RoomOrder, machine: MachineState, position: int) -> UnitEntry:
        index = machine.shape.indices[position][0]
        version = machine.version
        if self.binpack:
            # After the room: machines with the fewest untouched GPUs, so that whole GPUs and
            # machines stay free for large models.
            first, second, third = order[0], order[1], machine.untouched
        else:
            # Spread: machines with fewer of this request's copies first, then the room.
            first, second, third = machine.placed, order[0], order[1]
        return first, second, third, machine.name, index, version, machine, position

    def _least_key(self, order: RoomOrder) -> UnitKey:
        """The least key a unit with this room can have: its machine's counts at their least,
        and a name and index before any."""
        if self.binpack:
            return order[0], order[1], -1, "", -1
        return 0, order[0], order[1], "", -1

    def _waste(self, room: Room, rule: UnitRule) -> int:
        """Bytes of the unit the copy would leave unused: smaller is a tighter fit."""
        if rule.by_slice:
            mig_slice = first_free_slice(room, rule)
            return (mig_slice.memory if mig_slice else 0) - self.need.estimate_bytes
        if rule.whole:
            return room.memory - self.need.estimate_bytes
        return room.free_bytes - rule.room_bytes

    def _place_on_units(self, count: int) -> list[Placement]:
        groups = [
            (self._least_key(self._room_order(group)), group.number, group) for group in self.groups
        ]
        heapq.heapify(groups)
        units: list[UnitEntry] = []
        placements: list[Placement] = []
        while len(placements) < count:
            # Every unit not in the heap yet is in a group whose least key comes after the
            # heap's first: the first entry that is still valid is the unit to take.
            while groups and (not units or groups[0][0] <= units[0][:5]):  # [:5]: its key
                self._expand(heapq.heappop(groups)[2], units)
            if not units:
                break
            *_, version, machine, position = heapq.heappop(units)
            room = self.state.room(machine, position)
            if version != machine.version or not self._fits(room):
                continue  # a stale entry: the unit was re-keyed or filled since
            gpu = self.state.gpu(machine, position)
            placements.append(self._take(gpu, self.rules.of(gpu), len(placements) + 1))
            self._rekey(machine, units)
        return placements

    def _expand(self, group: RoomGroup, units: list[UnitEntry]) -> None:
        """Put the group's units on the heap of units."""
        self.expanded.add(group.number)
        order = self._room_order(group)
        if group.pristine:
            # One unit per machine: the machine's others of the type differ only by a larger
            # index, so they come after it, and enter when it is taken (the machine is re-keyed).
            for machine in self.state.machines:
                positions = self.state.pristine_positions(machine, group.unit_type)
                if positions:
                    units.append(self._entry(order, machine, positions[0]))
        else:
            rooms = self.state.rooms
            for machine, position in zip(group.machines, group.positions, strict=True):
                # Not one that has moved on (to the room of a later reservation, or its own).
                if rooms[machine.first_uid + position] is group:
                    units.append(self._entry(order, machine, position))
        heapq.heapify(units)

    def _rekey(self, machine: MachineState, units: list[UnitEntry]) -> None:
        """A copy was put on the machine: its units' keys changed (the machine's counts, and
        the unit's room). Their entries are stale now; push new ones."""
        machine.version += 1
        for position, unit_type in enumerate(machine.shape.types):
            if not self.usable[unit_type.number]:
                continue
            room = self.state.room(machine, position)
            if isinstance(room, RoomGroup) and room.number not in self.expanded:
                continue  # its units enter the heap with their group
            if self._fits(room):
                heapq.heappush(units, self._entry(self._room_order(room), machine, position))

    def _take(self, gpu: GpuState, rule: UnitRule, copy: int) -> Placement:
        """Put one copy on the unit and say where it went."""
        mig_slice: SliceState | None = None
        if rule.mode is Mode.SLICE:
            mig_slice = first_free_slice(gpu, rule)
            assert mig_slice is not None  # copies_that_fit said a slice holds it
            mig_slice.free = False
            room_bytes, room_share = mig_slice.memory, SHARE_SCALE
        else:
            room_bytes, room_share = rule.room_bytes, rule.room_share
            gpu.free_bytes -= room_bytes
            gpu.free_share -= room_share
        _count_copy(gpu)
        return Placement(
            copy=copy,
            machine=gpu.machine.name,
            accelerators=(gpu.accelerator.index,),
            slice=mig_slice.profile if mig_slice else None,
            slice_id=mig_slice.slice_id if mig_slice else None,
            allocated_bytes=room_bytes,
            share=room_share / SHARE_SCALE,
            gpu_memory_utilization=rule.engine_share,
            hardware_class=HARDWARE_CLASS[gpu.kind],
            sharing_class=sharing_class(gpu, mig_slice),
        )

    def _machine_key(self, machine: MachineState, free: int) -> tuple[int, int, str]:
        if self.policy is Policy.BINPACK:
            return free, 0, machine.name  # best fit: the machine with the fewest free GPUs
        return machine.placed, -free, machine.name

    def _place_tensor_parallel(self, count: int) -> list[Placement]:
        """Each copy takes n untouched GPUs of one machine (no multi-node tensor parallelism)."""
        n = self.need.tensor_parallel
        free = self.free_by_machine
        heap = [
            (self._machine_key(machine, len(positions)), name)
            for name, (machine, positions) in free.items()
            if len(positions) >= n
        ]
        heapq.heapify(heap)
        placements: list[Placement] = []
        while heap and len(placements) < count:
            _, name = heapq.heappop(heap)
            machine, positions = free[name]
            taken, rest = positions[:n], positions[n:]
            free[name] = machine, rest
            gpus = [self.state.gpu(machine, position) for position in taken]
            placements.append(self._take_whole_gpus(gpus, len(placements) + 1))
            if len(rest) >= n:
                heapq.heappush(heap, (self._machine_key(machine, len(rest)), name))
        return placements

    def _take_whole_gpus(self, gpus: list[GpuState], copy: int) -> Placement:
        for gpu in gpus:
            gpu.free_bytes, gpu.free_share = 0, 0
            _count_copy(gpu)
        first = gpus[0]
        first.machine.placed -= len(gpus) - 1  # one copy, however many GPUs it spans
        return Placement(
            copy=copy,
            machine=first.machine.name,
            accelerators=tuple(gpu.accelerator.index for gpu in gpus),
            slice=None,
            slice_id=None,
            # Each GPU is reserved whole; the smallest is what the engine can count on per GPU.
            allocated_bytes=min(gpu.memory for gpu in gpus),
            share=1.0,
            gpu_memory_utilization=self.rules.of(first).engine_share,
            hardware_class=HARDWARE_CLASS[first.kind],
            sharing_class=first.kind.value,
        )


def free_whole_gpus_by_machine(
    state: ClusterState, usable: list[bool], rules: Rules
) -> dict[str, tuple[MachineState, list[int]]]:
    """Untouched GPUs that hold one tensor-parallel shard, per machine name: the machine and
    the GPUs' positions, smallest first."""
    holding = [
        usable[t.number] and t.kind in TENSOR_PARALLEL_KINDS and rules.of(t.pristine).holds
        for t in state.types
    ]
    # What the machines of one shape offer with nothing on them (shared: never changed in place).
    by_shape: dict[MachineShape, list[int]] = {}
    free: dict[str, tuple[MachineState, list[int]]] = {}
    for machine in state.machines:
        shape = machine.shape
        offered = by_shape.get(shape)
        if offered is None:
            offered = by_shape[shape] = _smallest_first(shape, holding)
        if machine.untouched < len(shape.types):  # something is on it: look GPU by GPU
            offered = [p for p in offered if state.room(machine, p).untouched]
        if offered:
            free[machine.name] = machine, offered
    return free


def _smallest_first(shape: MachineShape, holding: list[bool]) -> list[int]:
    """The shape's units whose type holds a shard, by (memory, index)."""
    positions = [p for p, unit_type in enumerate(shape.types) if holding[unit_type.number]]
    return sorted(positions, key=lambda p: (shape.types[p].memory, shape.indices[p][0]))


def _count_copy(gpu: GpuState) -> None:
    if gpu.untouched:
        gpu.machine.untouched -= 1
    gpu.copies += 1
    gpu.machine.placed += 1


# --- what the plan says besides placements ---------------------------------------------------


def _not_placed(
    state: ClusterState, request: PlacementRequest, estimate: Estimate, need: CopyNeed, done: int
) -> tuple[NotPlaced, ...]:
    if done >= request.copies:
        return ()
    reason, message = reasons.explain(state, request, estimate, need)
    return tuple(NotPlaced(copy, reason, message) for copy in range(done + 1, request.copies + 1))


def _notices(
    inventory: Inventory, request: PlacementRequest, placed: list[Placement]
) -> tuple[str, ...]:
    notices = []
    shared = request.accelerators_per_copy < 1
    if shared and inventory.sharing is ClusterSharing.WHOLE_GPU:
        notices.append(SHARING_NOT_CONFIGURED_NOTICE)
    if any(p.gpu_memory_utilization > HIGH_SHARE for p in placed):
        notices.append(HIGH_ENGINE_SHARE_NOTICE)
    return tuple(notices)


def candidate_sizes(request: PlacementRequest, most_gpus: int) -> list[float]:
    """Sizes worth suggesting, smallest first: shares, one GPU, then n GPUs dividing the heads."""
    heads = request.model.attention_heads
    whole = [float(n) for n in range(2, most_gpus + 1) if heads % n == 0]
    return [*FRACTION_LADDER, 1.0, *whole]


def suggest_size(summary: CandidateSummary, request: PlacementRequest) -> float | None:
    """The smallest size one copy of which fits on the empty cluster (default engine shares)."""
    engine = dataclasses.replace(request.engine, gpu_memory_utilization=None)
    totals: dict[int, int] = {}
    for size in candidate_sizes(request, summary.most_tensor_parallel_gpus()):
        tp = tensor_parallel(size)
        if tp not in totals:
            totals[tp] = estimate_copy(request.model, engine, tp).total_bytes
        units = round(size * SHARE_SCALE) if size < 1 else SHARE_SCALE
        rules = Rules(CopyNeed(totals[tp], size, units, tp, None), summary.static_keys)
        # A share below one GPU means something only where Berth or time-slicing divides it.
        kinds = FRACTION_KINDS if size < 1 else tuple(Kind)
        if summary.count_fit_empty(rules, kinds) > 0:
            return size
    return None
