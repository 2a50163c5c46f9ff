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
from collections.abc import Callable, Iterable

from placement import reasons
from placement.estimate import estimate_copy
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
    SliceState,
    build_state,
    copies_that_fit,
    copies_that_fit_empty,
    eligible,
    engine_share,
    first_free_slice,
    holds,
    mode_for,
    reserved,
    sharing_class,
)

# Shares the fit check may suggest, smallest first; then 1 GPU, then n GPUs of one machine.
FRACTION_LADDER = (0.1, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.9)
FRACTION_KINDS = (Kind.SHARED, Kind.TIME_SLICED, Kind.UNIFIED)
HIGH_ENGINE_SHARE = 0.95

UnitKey = tuple[int, int, int, str, int]


def plan(inventory: Inventory, request: PlacementRequest) -> PlanResult:
    """Place request.copies copies; say why the others do not fit and what would."""
    estimate = estimate_copy(request.model, request.engine, request.tensor_parallel)
    need = CopyNeed.of(request, estimate.total_bytes)
    state = build_state(inventory)
    candidates = eligible_units(state, request)
    summary = CandidateSummary.of(candidates)
    fit_now = count_fit_now(candidates, need)
    placed = place(state, candidates, need, request.policy, min(request.copies, fit_now))
    return PlanResult(
        estimate=estimate,
        placed=tuple(placed),
        not_placed=_not_placed(state, request, estimate, need, len(placed)),
        notices=_notices(inventory, request, placed),
        fit_now=fit_now,
        fit_empty=summary.count_fit_empty(need),
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


# --- how many fit ----------------------------------------------------------------------------


def count_fit_now(candidates: list[GpuState], need: CopyNeed) -> int:
    if need.tensor_parallel > 1:
        free = free_whole_gpus_by_machine(candidates, need)
        return sum(len(gpus) // need.tensor_parallel for gpus in free.values())
    return sum(copies_that_fit(gpu, need) for gpu in candidates)


def free_whole_gpus_by_machine(
    candidates: Iterable[GpuState], need: CopyNeed
) -> dict[str, list[GpuState]]:
    """Untouched GPUs that hold one tensor-parallel shard, per machine, best first."""
    free: dict[str, list[GpuState]] = {}
    for gpu in candidates:
        if (
            gpu.kind in TENSOR_PARALLEL_KINDS
            and gpu.untouched
            and holds(need, Mode.WHOLE, gpu.memory)
        ):
            free.setdefault(gpu.machine.name, []).append(gpu)
    for gpus in free.values():
        gpus.sort(key=lambda gpu: (gpu.memory, gpu.accelerator.index))
    return free


StaticKey = tuple[Kind, int, int, tuple[int, ...]]


@dataclasses.dataclass
class CandidateSummary:
    """The eligible hardware with nothing on it, grouped by kind of unit and of machine.

    Questions about the empty cluster (how many fit, which size to suggest) then cost one pass
    over a handful of groups instead of one over every GPU.
    """

    units: Counter[StaticKey]
    machines: Counter[tuple[int, ...]]  # memories of a machine's tensor-parallel-capable GPUs

    @classmethod
    def of(cls, candidates: list[GpuState]) -> CandidateSummary:
        units = Counter(gpu.static_key for gpu in candidates)
        per_machine: dict[str, list[int]] = {}
        for gpu in candidates:
            if gpu.kind in TENSOR_PARALLEL_KINDS:
                per_machine.setdefault(gpu.machine.name, []).append(gpu.memory)
        machines = Counter(tuple(sorted(memories)) for memories in per_machine.values())
        return cls(units, machines)

    def count_fit_empty(self, need: CopyNeed, kinds: Iterable[Kind] = tuple(Kind)) -> int:
        if need.tensor_parallel > 1:
            return sum(
                count
                * (sum(1 for m in memories if holds(need, Mode.WHOLE, m)) // need.tensor_parallel)
                for memories, count in self.machines.items()
            )
        wanted = set(kinds)
        return sum(
            count * copies_that_fit_empty(key, need)
            for key, count in self.units.items()
            if key[0] in wanted
        )

    def most_tensor_parallel_gpus(self) -> int:
        return max((len(memories) for memories in self.machines), default=0)


# --- placing ---------------------------------------------------------------------------------


def place(
    state: ClusterState, candidates: list[GpuState], need: CopyNeed, policy: Policy, count: int
) -> list[Placement]:
    """Place `count` copies (no more than fit) in the policy's order, changing the state."""
    if count <= 0:
        return []
    if need.tensor_parallel > 1:
        return _place_tensor_parallel(candidates, need, policy, count)
    return _place_on_units(state, candidates, need, policy, count)


def _waste(gpu: GpuState, need: CopyNeed) -> int:
    """Bytes of the unit the copy would leave unused: smaller is a tighter fit."""
    mode = mode_for(gpu.kind, need)
    if mode is Mode.SLICE:
        mig_slice = first_free_slice(gpu, need)
        return (mig_slice.memory if mig_slice else 0) - need.estimate_bytes
    if mode is Mode.WHOLE:
        return gpu.memory - need.estimate_bytes
    room_bytes, _ = reserved(mode or Mode.FRACTION, need, gpu.memory, gpu.accelerator.replicas)
    return gpu.free_bytes - room_bytes


def _binpack_key(gpu: GpuState, need: CopyNeed) -> UnitKey:
    # Partly used units first (MIG: any GPU, the smallest slice that holds it wins), tightest
    # fit next, then machines with the fewest untouched GPUs, to keep whole machines free.
    tier = 0 if gpu.kind is Kind.MIG or not gpu.untouched else 1
    name, index = gpu.machine.name, gpu.accelerator.index
    return tier, _waste(gpu, need), gpu.machine.untouched, name, index


def _spread_key(gpu: GpuState, need: CopyNeed) -> UnitKey:
    # Machines with fewer of this request's copies first, then the least busy unit.
    name, index = gpu.machine.name, gpu.accelerator.index
    return gpu.machine.placed, gpu.copies, _waste(gpu, need), name, index


def _place_on_units(
    state: ClusterState, candidates: list[GpuState], need: CopyNeed, policy: Policy, count: int
) -> list[Placement]:
    key: Callable[[GpuState, CopyNeed], UnitKey] = (
        _binpack_key if policy is Policy.BINPACK else _spread_key
    )
    is_candidate = [False] * len(state.gpus)
    heap = []
    for gpu in candidates:
        is_candidate[gpu.uid] = True
        if copies_that_fit(gpu, need) > 0:
            heap.append((key(gpu, need), gpu.uid, gpu.version))
    heapq.heapify(heap)
    placements: list[Placement] = []
    while heap and len(placements) < count:
        _, uid, version = heapq.heappop(heap)
        gpu = state.gpus[uid]
        if version != gpu.version or copies_that_fit(gpu, need) == 0:
            continue  # a stale entry: the unit was re-keyed or filled since
        placements.append(_take(gpu, need, len(placements) + 1))
        # The unit and its machine's counters changed: re-key every unit of that machine.
        for neighbour in gpu.machine.gpus:
            if is_candidate[neighbour.uid]:
                neighbour.version += 1
                if copies_that_fit(neighbour, need) > 0:
                    entry = (key(neighbour, need), neighbour.uid, neighbour.version)
                    heapq.heappush(heap, entry)
    return placements


def _take(gpu: GpuState, need: CopyNeed, copy: int) -> Placement:
    """Put one copy on the unit and say where it went."""
    mode = mode_for(gpu.kind, need) or Mode.FRACTION
    replicas = gpu.accelerator.replicas
    mig_slice: SliceState | None = None
    if mode is Mode.SLICE:
        mig_slice = first_free_slice(gpu, need)
        assert mig_slice is not None  # copies_that_fit said a slice holds it
        mig_slice.free = False
        room_bytes, room_share = mig_slice.memory, SHARE_SCALE
    else:
        room_bytes, room_share = reserved(mode, need, gpu.memory, replicas)
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
        gpu_memory_utilization=engine_share(mode, need, replicas),
        hardware_class=HARDWARE_CLASS[gpu.kind],
        sharing_class=sharing_class(gpu, mig_slice),
    )


def _count_copy(gpu: GpuState) -> None:
    if gpu.untouched:
        gpu.machine.untouched -= 1
    gpu.copies += 1
    gpu.machine.placed += 1


def _machine_key(machine: MachineState, free: int, policy: Policy) -> tuple[int, int, str]:
    if policy is Policy.BINPACK:
        return free, 0, machine.name  # best fit: the machine with the fewest free GPUs
    return machine.placed, -free, machine.name


def _place_tensor_parallel(
    candidates: list[GpuState], need: CopyNeed, policy: Policy, count: int
) -> list[Placement]:
    """Each copy takes n untouched GPUs of one machine (no multi-node tensor parallelism)."""
    n = need.tensor_parallel
    free = free_whole_gpus_by_machine(candidates, need)
    machines = {gpus[0].machine.name: gpus[0].machine for gpus in free.values()}
    heap = [(_machine_key(machines[name], len(gpus), policy), name) for name, gpus in free.items()]
    heap = [entry for entry in heap if len(free[entry[1]]) >= n]
    heapq.heapify(heap)
    placements: list[Placement] = []
    while heap and len(placements) < count:
        _, name = heapq.heappop(heap)
        gpus, free[name] = free[name][:n], free[name][n:]
        placements.append(_take_whole_gpus(gpus, need, len(placements) + 1))
        if len(free[name]) >= n:
            heapq.heappush(heap, (_machine_key(machines[name], len(free[name]), policy), name))
    return placements


def _take_whole_gpus(gpus: list[GpuState], need: CopyNeed, copy: int) -> Placement:
    for gpu in gpus:
        gpu.free_bytes, gpu.free_share = 0, 0
        _count_copy(gpu)
    gpus[0].machine.placed -= len(gpus) - 1  # one copy, however many GPUs it spans
    first = gpus[0]
    return Placement(
        copy=copy,
        machine=first.machine.name,
        accelerators=tuple(gpu.accelerator.index for gpu in gpus),
        slice=None,
        slice_id=None,
        # Each GPU is reserved whole; the smallest is what the engine can count on per GPU.
        allocated_bytes=min(gpu.memory for gpu in gpus),
        share=1.0,
        gpu_memory_utilization=engine_share(Mode.WHOLE, need),
        hardware_class=HARDWARE_CLASS[first.kind],
        sharing_class=first.kind.value,
    )


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
    if any(p.gpu_memory_utilization > HIGH_ENGINE_SHARE for p in placed):
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
        tp = int(size) if size > 1 else 1
        if tp not in totals:
            totals[tp] = estimate_copy(request.model, engine, tp).total_bytes
        need = CopyNeed(totals[tp], size, _units(size), tp, None)
        # A share below one GPU means something only where Berth or time-slicing divides it.
        kinds = FRACTION_KINDS if size < 1 else tuple(Kind)
        if summary.count_fit_empty(need, kinds) > 0:
            return size
    return None


def _units(size: float) -> int:
    return round(size * SHARE_SCALE) if size < 1 else SHARE_SCALE
