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
    MachineState,
    Mode,
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
    candidates = eligible_units(state, request)
    summary = CandidateSummary.of(candidates, state.static_keys)
    placer = Placer(state, candidates, rules, request.policy)
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


def eligible_units(state: ClusterState, request: PlacementRequest) -> list[GpuState]:
    """Units whose vendor and versions the engine accepts (checked once per kind of card)."""
    verdicts: dict[tuple[str, str | None, str | None], bool] = {}
    chosen = []
    for gpu in state.gpus:
        accelerator = gpu.accelerator
        card = (accelerator.vendor, accelerator.compute_capability, accelerator.driver)
        verdict = verdicts.get(card)
        if verdict is None:
            verdict = verdicts[card] = eligible(accelerator, request)
        if verdict:
            chosen.append(gpu)
    return chosen


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
    def of(cls, candidates: list[GpuState], static_keys: list[StaticKey]) -> CandidateSummary:
        units = Counter(gpu.static_id for gpu in candidates)
        per_machine: dict[str, list[int]] = {}
        for gpu in candidates:
            if gpu.kind in TENSOR_PARALLEL_KINDS:
                per_machine.setdefault(gpu.machine.name, []).append(gpu.static_id)
        machines = Counter(tuple(sorted(ids)) for ids in per_machine.values())
        return cls(static_keys, units, machines)

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


class Placer:
    """Counts what fits now and places copies in the policy's order, changing the state."""

    def __init__(
        self, state: ClusterState, candidates: list[GpuState], rules: Rules, policy: Policy
    ) -> None:
        self.state, self.candidates, self.rules, self.policy = state, candidates, rules, policy
        self.need = rules.need
        self.binpack = policy is Policy.BINPACK
        if self.need.tensor_parallel > 1:
            self.free_by_machine = free_whole_gpus_by_machine(candidates, rules)
            n = self.need.tensor_parallel
            self.fit_now = sum(len(gpus) // n for gpus in self.free_by_machine.values())
        else:
            self.fit = [copies_that_fit(gpu, rules.of(gpu)) for gpu in candidates]
            self.fit_now = sum(self.fit)

    def place(self, copies: int) -> list[Placement]:
        count = min(copies, self.fit_now)
        if count <= 0:
            return []
        if self.need.tensor_parallel > 1:
            return self._place_tensor_parallel(count)
        return self._place_on_units(count)

    def _key(self, gpu: GpuState) -> UnitKey:
        machine = gpu.machine
        waste = self._waste(gpu, self.rules.by_id[gpu.static_id])
        if self.binpack:
            # Units that cost no whole GPU first (partly used ones, MIG slices, MPS replicas),
            # the tightest fit next (the smallest MIG slice that holds it), then machines with
            # the fewest untouched GPUs: whole GPUs and machines stay free for large models.
            tier = 0 if gpu.never_whole or gpu.copies else 1
            return tier, waste, machine.untouched, machine.name, gpu.index
        # Spread: machines with fewer of this request's copies first, then the least busy unit.
        return machine.placed, gpu.copies, waste, machine.name, gpu.index

    def _waste(self, gpu: GpuState, rule: UnitRule) -> int:
        """Bytes of the unit the copy would leave unused: smaller is a tighter fit."""
        if rule.by_slice:
            mig_slice = first_free_slice(gpu, rule)
            return (mig_slice.memory if mig_slice else 0) - self.need.estimate_bytes
        if rule.whole:
            return gpu.memory - self.need.estimate_bytes
        return gpu.free_bytes - rule.room_bytes

    def _place_on_units(self, count: int) -> list[Placement]:
        is_candidate = [False] * len(self.state.gpus)
        heap = []
        for gpu, fit in zip(self.candidates, self.fit, strict=True):
            is_candidate[gpu.uid] = True
            if fit:
                heap.append((self._key(gpu), gpu.uid, gpu.version))
        heapq.heapify(heap)
        placements: list[Placement] = []
        while heap and len(placements) < count:
            _, uid, version = heapq.heappop(heap)
            gpu = self.state.gpus[uid]
            rule = self.rules.of(gpu)
            if version != gpu.version or not copies_that_fit(gpu, rule):
                continue  # a stale entry: the unit was re-keyed or filled since
            placements.append(self._take(gpu, rule, len(placements) + 1))
            # The unit and its machine's counters changed: re-key every unit of that machine.
            for neighbour_uid in gpu.machine.units:
                neighbour = self.state.gpus[neighbour_uid]
                if is_candidate[neighbour_uid]:
                    neighbour.version += 1
                    if copies_that_fit(neighbour, self.rules.of(neighbour)):
                        entry = (self._key(neighbour), neighbour.uid, neighbour.version)
                        heapq.heappush(heap, entry)
        return placements

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
        machines = {name: gpus[0].machine for name, gpus in free.items()}
        heap = [(self._machine_key(machines[name], len(gpus)), name) for name, gpus in free.items()]
        heap = [entry for entry in heap if len(free[entry[1]]) >= n]
        heapq.heapify(heap)
        placements: list[Placement] = []
        while heap and len(placements) < count:
            _, name = heapq.heappop(heap)
            gpus, free[name] = free[name][:n], free[name][n:]
            placements.append(self._take_whole_gpus(gpus, len(placements) + 1))
            if len(free[name]) >= n:
                heapq.heappush(heap, (self._machine_key(machines[name], len(free[name])), name))
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
    candidates: Iterable[GpuState], rules: Rules
) -> dict[str, list[GpuState]]:
    """Untouched GPUs that hold one tensor-parallel shard, per machine, smallest first."""
    free: dict[str, list[GpuState]] = {}
    for gpu in candidates:
        if gpu.kind in TENSOR_PARALLEL_KINDS and gpu.untouched and rules.of(gpu).holds:
            free.setdefault(gpu.machine.name, []).append(gpu)
    for gpus in free.values():
        gpus.sort(key=lambda gpu: (gpu.memory, gpu.accelerator.index))
    return free


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
