"""Properties of every plan, over generated clusters with existing reservations.

The over-commit check is written from the inventory and the plan alone; it does not reuse the
planner's own bookkeeping, so a planner bug cannot hide behind it. The planner groups GPUs of
one kind with the same free room and orders groups rather than GPUs; clusters of a few machine
models with many machines each (`alike_inventories`) are where that shows.
"""

from __future__ import annotations

import dataclasses
import random
from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_examples import (
    BGE_M3,
    GEMMA_3_27B,
    GPT_OSS_20B,
    LLAMA_3_1_8B,
    QWEN3_0_6B,
    QWEN3_8B,
    QWEN3_32B,
    gib,
)

from placement import (
    GIB,
    Accelerator,
    ClusterSharing,
    EngineSettings,
    GpuSharing,
    Inventory,
    Machine,
    MigSlice,
    PlacementRequest,
    PlanResult,
    Policy,
    Reservation,
    plan,
)
from placement.estimate import estimate_copy
from placement.types import MAX_COPIES
from placement.units import (
    SHARE_SCALE,
    TENSOR_PARALLEL_KINDS,
    CopyNeed,
    GpuState,
    Kind,
    Rules,
    UnitRule,
    build_state,
    copies_that_fit,
    eligible,
    first_free_slice,
)

BOUNDED = settings(
    derandomize=True,
    database=None,  # the same examples every run: nothing to remember between runs
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
MEMORIES = (gib(22.0), gib(39.5), gib(79.2), gib(139.8))
UNIFIED_RESERVE = 8 * GIB


@st.composite
def accelerators(draw: st.DrawFn, index: int) -> Accelerator:
    memory = draw(st.sampled_from(MEMORIES))
    kind = draw(st.sampled_from(["plain", "plain", "time_sliced", "mps", "mig"]))
    facts: dict[str, object] = {}
    if kind in ("time_sliced", "mps"):
        facts = {"sharing": GpuSharing(kind), "replicas": draw(st.integers(2, 7))}
    if kind == "mig":
        quarters = draw(st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=4))
        slices = [MigSlice(f"{q}g", memory * q // 8, f"s{i}") for i, q in enumerate(quarters)]
        facts = {"mig": tuple(slices)}
    capability = draw(st.sampled_from(["7.5", "8.0", "9.0"]))
    return Accelerator(index, "nvidia", f"gpu-{memory}", memory, capability, **facts)  # type: ignore[arg-type]


@st.composite
def machines(draw: st.DrawFn, name: str) -> Machine:
    if draw(st.integers(0, 5)) == 0:
        card = Accelerator(0, "nvidia", "GB10", gib(119.7), "12.1")
        return Machine(name, (card,), draw(st.sampled_from([gib(64), gib(128)])), True)
    count = draw(st.integers(1, 4))
    cards = tuple(draw(accelerators(i)) for i in range(count))
    return Machine(name, cards, gib(512))


@st.composite
def inventories(draw: st.DrawFn) -> Inventory:
    names = [f"m{i}" for i in range(draw(st.integers(1, 4)))]
    cluster_machines = tuple(draw(machines(name)) for name in names)
    sharing = draw(st.sampled_from(list(ClusterSharing)))
    wishes = draw(st.lists(st.tuples(st.integers(0, 99), st.integers(0, 99), st.integers(1, 4))))
    return Inventory(cluster_machines, valid_reservations(cluster_machines, wishes), sharing)


@st.composite
def alike_inventories(draw: st.DrawFn) -> Inventory:
    """Up to 12 machines of one or two models, some with reservations: GPUs of a kind alike."""
    models = [draw(machines("model")) for _ in range(draw(st.integers(1, 2)))]
    picks = draw(st.lists(st.integers(0, len(models) - 1), min_size=2, max_size=12))
    cluster_machines = tuple(
        dataclasses.replace(models[pick], name=f"m{number:02d}")
        for number, pick in enumerate(picks)
    )
    sharing = draw(st.sampled_from(list(ClusterSharing)))
    wishes = draw(st.lists(st.tuples(st.integers(0, 99), st.integers(0, 99), st.integers(1, 4))))
    return Inventory(cluster_machines, valid_reservations(cluster_machines, wishes), sharing)


ANY_INVENTORY = st.one_of(inventories(), alike_inventories())


def valid_reservations(
    cluster_machines: tuple[Machine, ...], wishes: list[tuple[int, int, int]]
) -> tuple[Reservation, ...]:
    """Turn drawn wishes into reservations an honest past could have made."""
    held: list[Reservation] = []
    used_share: dict[tuple[str, int], float] = defaultdict(float)
    used_slices: set[tuple[str, int, str]] = set()
    count: dict[tuple[str, int], int] = defaultdict(int)
    for machine_pick, card_pick, quarters in wishes:
        machine = cluster_machines[machine_pick % len(cluster_machines)]
        card = machine.accelerators[card_pick % len(machine.accelerators)]
        key = (machine.name, card.index)
        if card.mig is not None:
            free = [
                s for s in card.mig if (machine.name, card.index, s.slice_id) not in used_slices
            ]
            if free:
                taken = free[quarters % len(free)]
                used_slices.add((machine.name, card.index, str(taken.slice_id)))
                held.append(
                    Reservation(machine.name, card.index, taken.memory_bytes, 1.0, taken.slice_id)
                )
            continue
        share = 1 / card.replicas if card.sharing is GpuSharing.MPS else quarters / 4
        full = card.sharing is not None and count[key] >= card.replicas
        if used_share[key] + share > 1 + 1e-9 or full:
            continue
        memory = (
            max(0, machine.system_memory_bytes - UNIFIED_RESERVE)
            if machine.unified_memory
            else card.memory_bytes
        )
        used_share[key] += share
        count[key] += 1
        held.append(Reservation(machine.name, card.index, int(share * memory), share))
    return tuple(held)


@st.composite
def requests(draw: st.DrawFn) -> PlacementRequest:
    model = draw(
        st.sampled_from(
            [QWEN3_0_6B, QWEN3_8B, LLAMA_3_1_8B, QWEN3_32B, GEMMA_3_27B, GPT_OSS_20B, BGE_M3]
        )
    )
    engine = EngineSettings(
        vendor="nvidia",
        max_model_len=min(model.max_context, draw(st.sampled_from([2048, 8192]))),
        kv_cache_dtype=draw(st.sampled_from(["auto", "fp8"])),
        min_compute_capability=draw(st.sampled_from([None, "8.0"])),
    )
    size = draw(st.sampled_from([0.1, 0.25, 0.3, 0.5, 0.75, 1.0, 2.0, 4.0]))
    copies = draw(st.integers(0, 8))
    return PlacementRequest(model, engine, size, copies, draw(st.sampled_from(list(Policy))))


# --- an independent check of a plan ---------------------------------------------------------


def unit_memory(inventory: Inventory, machine_name: str, index: int) -> int:
    machine = next(m for m in inventory.machines if m.name == machine_name)
    if machine.unified_memory:
        return max(0, machine.system_memory_bytes - UNIFIED_RESERVE)
    return next(a.memory_bytes for a in machine.accelerators if a.index == index)


def card_of(inventory: Inventory, machine_name: str, index: int) -> Accelerator:
    machine = next(m for m in inventory.machines if m.name == machine_name)
    return next(a for a in machine.accelerators if a.index == index)


def assert_never_over_committed(inventory: Inventory, result: PlanResult) -> None:
    everything = inventory.reservations + result.reservations()
    by_gpu: dict[tuple[str, int], list[Reservation]] = defaultdict(list)
    for r in everything:
        by_gpu[(r.machine, r.accelerator)].append(r)
    for (name, index), held in by_gpu.items():
        card = card_of(inventory, name, index)
        if card.mig is not None:
            slices = [r.slice for r in held]
            assert len(slices) == len(set(slices)), "a MIG slice holds two copies"
            continue
        assert sum(r.bytes for r in held) <= unit_memory(inventory, name, index)
        assert sum(r.share for r in held) <= 1 + 1e-9
        if card.sharing is not None:
            assert len(held) <= card.replicas
        if any(r.share == 1.0 for r in held):
            assert len(held) == 1, "a whole-GPU copy shares its GPU"
    for placement in result.placed:
        index = placement.accelerators[0]
        card = card_of(inventory, placement.machine, index)
        memory = unit_memory(inventory, placement.machine, index)
        if placement.slice_id is not None:
            memory = next(
                s.memory_bytes for s in card.mig or () if s.slice_id == placement.slice_id
            )
        budget = placement.gpu_memory_utilization * memory
        assert result.estimate.total_bytes <= budget, "the engine's share does not hold the copy"
        if placement.share < 1:
            assert placement.gpu_memory_utilization <= 0.9 * placement.share + 1e-9
        assert card.vendor == "nvidia"


@BOUNDED
@given(ANY_INVENTORY, requests())
def test_a_plan_never_exceeds_a_gpus_budget_share_or_slice(
    inventory: Inventory, wanted: PlacementRequest
) -> None:
    assert_never_over_committed(inventory, plan(inventory, wanted))


@BOUNDED
@given(inventories(), requests())
def test_a_plan_is_deterministic_whatever_the_input_order(
    inventory: Inventory, wanted: PlacementRequest
) -> None:
    shuffled = Inventory(inventory.machines[::-1], inventory.reservations[::-1], inventory.sharing)
    assert plan(inventory, wanted) == plan(inventory, wanted) == plan(shuffled, wanted)


@BOUNDED
@given(inventories(), requests())
def test_copies_that_fit_now_never_exceed_those_on_the_empty_cluster(
    inventory: Inventory, wanted: PlacementRequest
) -> None:
    result = plan(inventory, wanted)
    assert result.fit_now <= result.fit_empty
    assert len(result.placed) == min(wanted.copies, result.fit_now)
    numbers = [p.copy for p in result.placed] + [n.copy for n in result.not_placed]
    assert numbers == list(range(1, wanted.copies + 1))
    assert plan(inventory.empty(), wanted).fit_now == result.fit_empty


@BOUNDED
@given(inventories(), requests())
def test_each_placed_copy_takes_exactly_one_copy_of_room(
    inventory: Inventory, wanted: PlacementRequest
) -> None:
    result = plan(inventory, wanted)
    after = dataclasses.replace(
        inventory, reservations=inventory.reservations + result.reservations()
    )
    assert plan(after, wanted).fit_now == result.fit_now - len(result.placed)


def shuffled(inventory: Inventory, rng: random.Random) -> Inventory:
    """The same cluster, its machines, each machine's GPUs and the reservations in another order.
    (The reservations generated here name their MIG slice, so their order does not matter.)"""
    machines_ = [
        dataclasses.replace(m, accelerators=tuple(rng.sample(m.accelerators, len(m.accelerators))))
        for m in rng.sample(inventory.machines, len(inventory.machines))
    ]
    held = rng.sample(inventory.reservations, len(inventory.reservations))
    return Inventory(tuple(machines_), tuple(held), inventory.sharing)


@BOUNDED
@given(ANY_INVENTORY, requests(), st.randoms(use_true_random=False))
def test_a_plan_is_the_same_whatever_order_machines_gpus_and_reservations_come_in(
    inventory: Inventory, wanted: PlacementRequest, rng: random.Random
) -> None:
    assert plan(shuffled(inventory, rng), wanted) == plan(inventory, wanted)


@BOUNDED
@given(ANY_INVENTORY, requests())
def test_asking_for_one_more_copy_than_fit_places_every_copy_counted_and_no_more(
    inventory: Inventory, wanted: PlacementRequest
) -> None:
    counted = plan(inventory, dataclasses.replace(wanted, copies=0)).fit_now
    asked = dataclasses.replace(wanted, copies=min(counted + 1, MAX_COPIES))
    result = plan(inventory, asked)
    assert len(result.placed) == min(counted, MAX_COPIES)
    assert_never_over_committed(inventory, result)
    assert plan(inventory, wanted).placed == result.placed[: wanted.copies]


@BOUNDED
@given(ANY_INVENTORY)
def test_each_gpu_holds_what_its_reservations_leave_free(inventory: Inventory) -> None:
    state = build_state(inventory)
    for gpu in state.gpus:
        held = [
            r
            for r in inventory.reservations
            if r.machine == gpu.machine.name and r.accelerator in gpu.indices
        ]
        assert gpu.copies == len(held)
        if gpu.kind is Kind.MIG:
            taken = {s.slice_id for s in gpu.slices if not s.free}
            assert taken == {r.slice for r in held}
            continue
        memory = unit_memory(inventory, gpu.machine.name, gpu.index)
        assert gpu.free_bytes == memory - sum(r.bytes for r in held)
        assert gpu.free_share == SHARE_SCALE - sum(round(r.share * SHARE_SCALE) for r in held)


# --- the policy by its definition, GPU by GPU (placement/README.md, "Placing") ---------------

Where = tuple[str, tuple[int, ...], str | None]  # machine, GPUs, MIG slice


def one_gpu_at_a_time(inventory: Inventory, wanted: PlacementRequest) -> list[Where]:
    """Each copy on the GPU with the least key of all the GPUs that take one, then the next:
    what the planner's groups and heap must come to."""
    estimate = estimate_copy(wanted.model, wanted.engine, wanted.tensor_parallel)
    need = CopyNeed.of(wanted, estimate.total_bytes)
    state = build_state(inventory)
    rules = Rules(need, state.static_keys)
    gpus = [gpu for gpu in state.gpus if eligible(gpu.accelerator, wanted)]
    if need.tensor_parallel > 1:
        return whole_gpus_one_machine_at_a_time(gpus, rules, wanted)
    placed: list[Where] = []
    for _ in range(wanted.copies):
        fitting = [gpu for gpu in gpus if copies_that_fit(gpu, rules.of(gpu))]
        if not fitting:
            break
        gpu = min(fitting, key=lambda g: policy_key(g, rules.of(g), wanted.policy, need))
        placed.append(take_one_copy(gpu, rules.of(gpu)))
    return placed


def policy_key(
    gpu: GpuState, rule: UnitRule, policy: Policy, need: CopyNeed
) -> tuple[int, int, int, str, int]:
    if rule.by_slice:
        mig_slice = first_free_slice(gpu, rule)
        assert mig_slice is not None
        waste = mig_slice.memory - need.estimate_bytes
    elif rule.whole:
        waste = gpu.memory - need.estimate_bytes
    else:
        waste = gpu.free_bytes - rule.room_bytes
    machine = gpu.machine
    if policy is Policy.BINPACK:
        costs_a_whole_gpu = gpu.kind not in (Kind.MIG, Kind.MPS) and gpu.copies == 0
        return int(costs_a_whole_gpu), waste, machine.untouched, machine.name, gpu.index
    return machine.placed, gpu.copies, waste, machine.name, gpu.index


def take_one_copy(gpu: GpuState, rule: UnitRule) -> Where:
    slice_id = None
    if rule.by_slice:
        mig_slice = first_free_slice(gpu, rule)
        assert mig_slice is not None
        mig_slice.free, slice_id = False, mig_slice.slice_id
    else:
        gpu.free_bytes -= rule.room_bytes
        gpu.free_share -= rule.room_share
    if gpu.copies == 0:
        gpu.machine.untouched -= 1
    gpu.copies += 1
    gpu.machine.placed += 1
    return gpu.machine.name, (gpu.index,), slice_id


def whole_gpus_one_machine_at_a_time(
    gpus: list[GpuState], rules: Rules, wanted: PlacementRequest
) -> list[Where]:
    """n untouched GPUs of one machine per copy: binpack takes the machine with the fewest free
    GPUs that has n, spread the one with the fewest of these copies, then the most free."""
    n = wanted.tensor_parallel
    free: dict[str, list[GpuState]] = defaultdict(list)
    for gpu in gpus:
        if gpu.kind in TENSOR_PARALLEL_KINDS and gpu.untouched and rules.of(gpu).holds:
            free[gpu.machine.name].append(gpu)
    placed: list[Where] = []
    for _ in range(wanted.copies):
        ready = [name for name, left in free.items() if len(left) >= n]
        if not ready:
            break

        def order(name: str) -> tuple[int, int, str]:
            count, machine = len(free[name]), free[name][0].machine
            if wanted.policy is Policy.BINPACK:
                return count, 0, name
            return machine.placed, -count, name

        name = min(ready, key=order)
        taken = sorted(free[name], key=lambda gpu: (gpu.memory, gpu.index))[:n]
        free[name] = [gpu for gpu in free[name] if gpu not in taken]
        taken[0].machine.placed += 1
        placed.append((name, tuple(gpu.index for gpu in taken), None))
    return placed


@BOUNDED
@given(ANY_INVENTORY, requests())
def test_copies_go_where_the_policy_puts_them_one_gpu_at_a_time(
    inventory: Inventory, wanted: PlacementRequest
) -> None:
    placed = [(p.machine, p.accelerators, p.slice_id) for p in plan(inventory, wanted).placed]
    assert placed == one_gpu_at_a_time(inventory, wanted)
