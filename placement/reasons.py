"""Why a copy does not fit, with the numbers and the fix, in words an operator understands.

`explain` looks at the state left after the copies that did fit were placed, and picks the
first reason that holds, from the most basic (wrong kind of card) to plain lack of room. It
looks at kinds of units (UnitType) and at the rooms units have now (ClusterState.rooms_now),
not GPU by GPU: only to name a GPU does it go through the machines, in name order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from placement.types import Accelerator, Estimate, NoFitReason, PlacementRequest
from placement.units import (
    SHARE_SCALE,
    TENSOR_PARALLEL_KINDS,
    UNIFIED_RESERVE_BYTES,
    ClusterState,
    CopyNeed,
    Kind,
    MachineState,
    Mode,
    Room,
    UnitType,
    at_least,
    engine_share,
    holds,
    meets_versions,
    mode_for,
    reserved,
    share_units,
    version_tuple,
)
from placement.words import gib

Unit = tuple[MachineState, int]  # a unit: its machine and its position there


def where(machine: MachineState, position: int) -> str:
    if machine.shape.types[position].kind is Kind.UNIFIED:
        return machine.name
    return f"{machine.name} GPU {machine.shape.indices[position][0]}"


def explain(
    state: ClusterState, request: PlacementRequest, estimate: Estimate, need: CopyNeed
) -> tuple[NoFitReason, str]:
    """The reason the next copy of the request does not fit now, and its message."""
    vendor = request.engine.vendor
    same_vendor = [t for t in state.types if t.accelerator.vendor == vendor]
    if not same_vendor:
        return NoFitReason.VENDOR_MISMATCH, vendor_mismatch(state, vendor)
    new_enough = [t for t in same_vendor if meets_versions(t.accelerator, request)]
    if not new_enough:
        return NoFitReason.ACCEL_VERSION_UNMET, accel_version_unmet(state, same_vendor, request)
    if need.tensor_parallel > 1:
        return _explain_tensor_parallel(state, new_enough, request, estimate, need)
    usable = [t for t in new_enough if mode_for(t.kind, need) is not None]
    room = RoomFacts.of(state, usable, request, estimate, need)
    if all(t.kind is Kind.UNIFIED for t in usable):
        return NoFitReason.INSUFFICIENT_SYSTEM_MEMORY, insufficient_system_memory(room)
    sharing_would_help = _gpu_with_room_if_shared(state, usable, need)
    if sharing_would_help is not None:
        message = sharing_not_configured(*sharing_would_help, need)
        return NoFitReason.SHARING_NOT_CONFIGURED, message
    return NoFitReason.INSUFFICIENT_CAPACITY, insufficient_capacity(room)


def _explain_tensor_parallel(
    state: ClusterState,
    new_enough: list[UnitType],
    request: PlacementRequest,
    estimate: Estimate,
    need: CopyNeed,
) -> tuple[NoFitReason, str]:
    capable = [t for t in new_enough if t.kind in TENSOR_PARALLEL_KINDS]
    numbers = {t.number for t in capable}
    total: dict[str, int] = {}
    free: dict[str, int] = {}
    for machine in state.machines:
        positions = [p for p, t in enumerate(machine.shape.types) if t.number in numbers]
        if positions:
            total[machine.name] = len(positions)
            free[machine.name] = sum(1 for p in positions if state.room(machine, p).untouched)
    if max(free.values(), default=0) < need.tensor_parallel:
        message = insufficient_gpu_count(need.tensor_parallel, total, free)
        return NoFitReason.INSUFFICIENT_GPU_COUNT, message
    room = RoomFacts.of(state, capable, request, estimate, need)
    return NoFitReason.INSUFFICIENT_CAPACITY, insufficient_capacity(room)


def _gpu_with_room_if_shared(
    state: ClusterState, usable: list[UnitType], need: CopyNeed
) -> tuple[MachineState, int, int] | None:
    """A whole-GPU-only GPU (machine, position), and its free bytes if its copies held only the
    shares they asked for, when those bytes would hold this share and no whole GPU is free."""
    if need.size >= 1:
        return None
    whole_only = {t.number for t in usable if t.kind is Kind.WHOLE}
    rooms = [room for room in state.rooms_now() if room.unit_type.number in whole_only]
    if any(room.untouched and holds(need, Mode.WHOLE, room.memory) for room in rooms):
        return None  # a whole GPU is free and big enough: lack of sharing is not the reason
    return _most_free_if_shared(_units_asked(state, whole_only, need), need)


def _most_free_if_shared(
    asked: dict[Unit, int], need: CopyNeed
) -> tuple[MachineState, int, int] | None:
    """Of the GPUs that would hold this share if their copies held only what they asked, the
    one with the most free (by machine name and index on a tie), and its free bytes."""
    holding = [
        (units, machine.name, machine.shape.indices[position][0], machine, position)
        for (machine, position), units in asked.items()
        if SHARE_SCALE - units >= need.size_units
        and holds(need, Mode.FRACTION, machine.shape.types[position].memory)
    ]
    if not holding:
        return None
    units, _, _, machine, position = min(holding, key=lambda candidate: candidate[:3])
    memory = machine.shape.types[position].memory
    return machine, position, (SHARE_SCALE - units) * memory // SHARE_SCALE


def _units_asked(state: ClusterState, types: set[int], need: CopyNeed) -> dict[Unit, int]:
    """Per unit of these types, the share units its copies asked for: a reservation's asked
    share where it took a whole GPU for less, and the copies this plan put there before, at
    this copy's size."""
    units = [
        (machine, position)
        for machine in state.machines
        for position, unit_type in enumerate(machine.shape.types)
        if unit_type.number in types
    ]
    asked = dict.fromkeys(units, 0)
    held = dict.fromkeys(units, 0)
    by_name = {machine.name: machine for machine, _ in units}
    for reservation in state.inventory.reservations:
        machine = by_name.get(reservation.machine)
        position = machine.shape.position_of.get(reservation.accelerator) if machine else None
        if machine is not None and position is not None and (machine, position) in asked:
            share = reservation.asked_share
            asked[(machine, position)] += share_units(reservation.share if share is None else share)
            held[(machine, position)] += 1
    for unit in units:
        asked[unit] += (state.room(*unit).copies - held[unit]) * need.size_units
    return asked


# --- the numbers a message carries -----------------------------------------------------------


@dataclass(frozen=True)
class RoomFacts:
    estimate: Estimate
    request: PlacementRequest
    reserve_needed: int  # the least a copy reserves on a unit that holds it (0: none does)
    largest_engine_budget: int  # the most the engine can be given on one unit
    largest_free: int
    largest_free_at: str
    unified_only: bool

    @classmethod
    def of(
        cls,
        state: ClusterState,
        types: list[UnitType],
        request: PlacementRequest,
        estimate: Estimate,
        need: CopyNeed,
    ) -> RoomFacts:
        # What a unit offers depends only on its static kind: work it out once per kind.
        by_kind = {unit_type.static_id: unit_type for unit_type in types}
        offers = {kind: unit_offers(t, need) for kind, t in by_kind.items()}
        holding = [
            reserve
            for kind_offers in offers.values()
            for reserve, budget in kind_offers
            if budget >= need.estimate_bytes
        ]
        # The free room that counts is on units that could hold a copy if empty: a smaller
        # unit's free room, however large, is not what the copy waits for.
        could_hold = {
            kind
            for kind, kind_offers in offers.items()
            if any(budget >= need.estimate_bytes for _, budget in kind_offers)
        }
        holders = [t for t in types if t.static_id in could_hold] or types
        largest, at = _largest_free(state, holders, need)
        return cls(
            estimate=estimate,
            request=request,
            reserve_needed=min(holding, default=0),
            largest_engine_budget=max(
                (budget for kind_offers in offers.values() for _, budget in kind_offers), default=0
            ),
            largest_free=largest,
            largest_free_at=at,
            unified_only=all(unit_type.kind is Kind.UNIFIED for unit_type in types),
        )

    @property
    def fits_empty(self) -> bool:
        return self.reserve_needed > 0


def _largest_free(state: ClusterState, types: list[UnitType], need: CopyNeed) -> tuple[int, str]:
    """The most a copy could be given on one unit of these types now, and where: of the units
    with the most, the last machine by name, and its first such unit by index."""
    numbers = {unit_type.number for unit_type in types}
    modes = {kind: mode_for(kind, need) for kind in Kind}
    free = {
        room: free_room(room, modes[room.kind])
        for room in state.rooms_now()
        if room.unit_type.number in numbers
    }
    largest = max(free.values(), default=0)
    for machine in reversed(state.machines):
        for position, unit_type in enumerate(machine.shape.types):
            if unit_type.number in numbers and free[state.room(machine, position)] == largest:
                return largest, where(machine, position)
    return 0, "none"


def unit_offers(unit_type: UnitType, need: CopyNeed) -> list[tuple[int, int]]:
    """(bytes reserved, engine budget) a copy could get on a unit of the type if it were empty."""
    mode = mode_for(unit_type.kind, need) or Mode.WHOLE
    replicas, memory = unit_type.accelerator.replicas, unit_type.memory
    if mode is Mode.SLICE:
        share = engine_share(mode, need)
        return [(s.memory, int(share * s.memory)) for s in unit_type.pristine.slices]
    reserve, _ = reserved(mode, need, memory, replicas)
    return [(reserve, int(engine_share(mode, need, replicas) * memory))]


def free_room(room: Room, mode: Mode | None) -> int:
    """The most a copy placed this way could be given on a unit with this room now, in bytes."""
    replicas = room.unit_type.accelerator.replicas
    if mode is Mode.SLICE:
        return max((s.memory for s in room.slices if s.free), default=0)
    if mode is Mode.WHOLE or mode is None:
        return room.memory if room.untouched else 0
    if room.kind in (Kind.TIME_SLICED, Kind.MPS) and room.copies >= replicas:
        return 0
    if mode is Mode.REPLICA:
        return room.memory // replicas if room.free_bytes >= room.memory // replicas else 0
    by_share = room.free_share * room.memory // SHARE_SCALE
    return max(0, min(room.free_bytes, by_share))


# --- the messages ----------------------------------------------------------------------------


def vendor_mismatch(state: ClusterState, vendor: str) -> str:
    present = sorted({unit_type.accelerator.vendor for unit_type in state.types})
    if not present:
        return (
            "This cluster has no machines with accelerators that can take a copy. "
            f"Add a machine with {vendor} accelerators."
        )
    have = " and ".join(present)
    return (
        f"The engine is set up for {vendor} accelerators, but this cluster has only {have} "
        f"accelerators. Pick a variant and engine made for {have} accelerators, or a cluster "
        f"with {vendor} accelerators."
    )


def accel_version_unmet(
    state: ClusterState, same_vendor: list[UnitType], request: PlacementRequest
) -> str:
    engine = request.engine
    cards = [unit_type.accelerator for unit_type in same_vendor]  # their vendor and versions
    problems, fixes = [], []
    if not all(at_least(a.compute_capability, engine.min_compute_capability) for a in cards):
        best = _first_newest(state, same_vendor, lambda a: a.compute_capability)
        problems.append(
            f"compute capability {engine.min_compute_capability} or newer, and the newest "
            f"here is {best.compute_capability} ({best.product})"
        )
        fixes.append(
            "pick a variant that runs on these accelerators (for example float16 instead of "
            "bfloat16, or one without FP8)"
        )
    if not all(at_least(a.driver, engine.min_driver) for a in cards):
        newest_driver = _first_newest(state, same_vendor, lambda a: a.driver).driver
        problems.append(
            f"driver {engine.min_driver} or newer, and the newest here is {newest_driver}"
        )
        fixes.append("update the driver on the cluster's machines")
    fix = " or ".join(fixes) or "pick a variant that runs on these accelerators"
    return f"The engine needs {'; and '.join(problems)}. {fix[0].upper()}{fix[1:]}."


def _first_newest(
    state: ClusterState, types: list[UnitType], version: Callable[[Accelerator], str | None]
) -> Accelerator:
    """The accelerator of the first unit, by machine name and index, of the newest version
    among these types (an unknown version is the oldest)."""
    newest = max(version_tuple(version(t.accelerator)) or () for t in types)
    numbers = {t.number for t in types if (version_tuple(version(t.accelerator)) or ()) == newest}
    unit = state.first_unit(numbers)
    assert unit is not None  # every type has a unit
    machine, position = unit
    return machine.accelerator(position)


def insufficient_gpu_count(needed: int, total: dict[str, int], free: dict[str, int]) -> str:
    largest = max(total.values(), default=0)
    if largest == 0:
        return (
            f"Each copy needs {needed} whole accelerators on one machine, but this cluster's "
            "accelerators are only shared as MIG slices, MPS replicas or unified memory, which a "
            "copy cannot span. Use one accelerator or less per copy."
        )
    if largest < needed:
        return (
            f"Each copy needs {needed} accelerators on one machine, but no machine in this "
            f"cluster has {needed}: the largest has {largest}. Use fewer accelerators per copy "
            "(a copy cannot span machines), or add a machine with more accelerators."
        )
    most_free = max(free.values(), default=0)
    machine = min((name for name, count in free.items() if count == most_free), default="none")
    return (
        f"Each copy needs {needed} free accelerators on one machine, but the most free on any "
        f"machine is {most_free} ({machine}). Use fewer accelerators per copy, or stop a "
        "deployment on a multi-GPU machine to free its accelerators."
    )


def _what_takes_the_room(estimate: Estimate) -> str:
    return (
        f"weights {gib(estimate.weights_bytes)}, context cache {gib(estimate.kv_cache_bytes)}, "
        f"working memory {gib(estimate.activations_bytes)}, engine overhead "
        f"{gib(estimate.overhead_bytes)}"
    )


def _smaller_copy_fixes(room: RoomFacts) -> str:
    request = room.request
    fixes = [
        "pick a smaller or more quantized variant",
        f"shorten the longest conversation (now {request.max_model_len} tokens)",
    ]
    sixteen_bit = request.engine.kv_cache_dtype in ("auto", "float16", "bfloat16")
    if room.estimate.kv_cache_bytes > 0 and sixteen_bit:
        fixes.append("use the 8-bit context cache")
    if not room.fits_empty and not room.unified_only:  # more room helps only if it exists
        if request.accelerators_per_copy < 1:
            fixes.append("give each copy a larger share of an accelerator")
        else:
            fixes.append("split each copy over more accelerators")
    return ", ".join(fixes[:-1]) + f", or {fixes[-1]}"


def _needs(room: RoomFacts, where_to: str) -> str:
    """The first half of a capacity message: what one copy needs."""
    per = "each of its accelerators" if room.estimate.tensor_parallel > 1 else where_to
    model = f"{gib(room.estimate.total_bytes)} ({_what_takes_the_room(room.estimate)})"
    if room.fits_empty:
        return f"Each copy reserves {gib(room.reserve_needed)} on {per} for the model's {model}"
    return f"Each copy needs {model} on {per}"


def insufficient_capacity(room: RoomFacts) -> str:
    needs = _needs(room, "one accelerator")
    if not room.fits_empty:
        budget = gib(room.largest_engine_budget)
        return (
            f"{needs}, but the engine can be given at most {budget} on any suitable accelerator "
            f"here. Make each copy smaller: {_smaller_copy_fixes(room)}."
        )
    free = f"the most free on any suitable accelerator now is {gib(room.largest_free)}"
    if room.largest_free:
        free += f" ({room.largest_free_at})"
    return (
        f"{needs}, but {free}. Stop a deployment to free room, or make each copy smaller: "
        f"{_smaller_copy_fixes(room)}."
    )


def insufficient_system_memory(room: RoomFacts) -> str:
    needs = _needs(room, "one machine")
    kept = f"its memory less the {gib(UNIFIED_RESERVE_BYTES)} kept for the system"
    if not room.fits_empty:
        budget = gib(room.largest_engine_budget)
        return (
            f"{needs}, but the engine can be given at most {budget} on any unified-memory "
            f"machine here ({kept}). Make each copy smaller: {_smaller_copy_fixes(room)}."
        )
    return (
        f"{needs}, but the most free on any unified-memory machine now is "
        f"{gib(room.largest_free)} ({room.largest_free_at}; {kept}). Stop a deployment to "
        f"free memory, or make each copy smaller: {_smaller_copy_fixes(room)}."
    )


def sharing_not_configured(
    machine: MachineState, position: int, free_if_shared: int, need: CopyNeed
) -> str:
    share = f"{need.size:g}"
    reserve, _ = reserved(Mode.FRACTION, need, machine.shape.types[position].memory, 1)
    return (
        f"This cluster has no GPU sharing set up, so a copy of {share} of an accelerator takes a "
        f"whole one, and none that holds it is free. With sharing on, {where(machine, position)} "
        f"would have {gib(free_if_shared)} free, enough for this copy's {gib(reserve)}. Ask your "
        "cluster admin to enable GPU sharing (time-slicing or MIG), or stop a deployment to "
        "free a whole accelerator."
    )
