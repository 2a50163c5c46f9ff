"""Why a copy does not fit, with the numbers and the fix, in words an operator understands.

`explain` looks at the state left after the copies that did fit were placed, and picks the
first reason that holds, from the most basic (wrong kind of card) to plain lack of room.
"""

from __future__ import annotations

from dataclasses import dataclass

from placement.types import Estimate, NoFitReason, PlacementRequest
from placement.units import (
    SHARE_SCALE,
    TENSOR_PARALLEL_KINDS,
    UNIFIED_RESERVE_BYTES,
    ClusterState,
    CopyNeed,
    GpuState,
    Kind,
    Mode,
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


def where(gpu: GpuState) -> str:
    if gpu.kind is Kind.UNIFIED:
        return gpu.machine.name
    return f"{gpu.machine.name} GPU {gpu.accelerator.index}"


def explain(
    state: ClusterState, request: PlacementRequest, estimate: Estimate, need: CopyNeed
) -> tuple[NoFitReason, str]:
    """The reason the next copy of the request does not fit now, and its message."""
    vendor = request.engine.vendor
    same_vendor = [gpu for gpu in state.gpus if gpu.accelerator.vendor == vendor]
    if not same_vendor:
        return NoFitReason.VENDOR_MISMATCH, vendor_mismatch(state, vendor)
    new_enough = _new_enough(same_vendor, request)
    if not new_enough:
        return NoFitReason.ACCEL_VERSION_UNMET, accel_version_unmet(same_vendor, request)
    if need.tensor_parallel > 1:
        return _explain_tensor_parallel(new_enough, request, estimate, need)
    modes = {kind: mode_for(kind, need) for kind in Kind}
    usable = [gpu for gpu in new_enough if modes[gpu.kind] is not None]
    room = RoomFacts.of(usable, request, estimate, need)
    if all(gpu.kind is Kind.UNIFIED for gpu in usable):
        return NoFitReason.INSUFFICIENT_SYSTEM_MEMORY, insufficient_system_memory(room)
    sharing_would_help = _gpu_with_room_if_shared(state, usable, need)
    if sharing_would_help is not None:
        message = sharing_not_configured(*sharing_would_help, need)
        return NoFitReason.SHARING_NOT_CONFIGURED, message
    return NoFitReason.INSUFFICIENT_CAPACITY, insufficient_capacity(room)


def _new_enough(gpus: list[GpuState], request: PlacementRequest) -> list[GpuState]:
    """The GPUs whose versions the engine accepts, checked once per kind of card."""
    verdicts: dict[tuple[str | None, str | None], bool] = {}
    for gpu in gpus:
        card = (gpu.accelerator.compute_capability, gpu.accelerator.driver)
        if card not in verdicts:
            verdicts[card] = meets_versions(gpu.accelerator, request)
    return [g for g in gpus if verdicts[(g.accelerator.compute_capability, g.accelerator.driver)]]


def _explain_tensor_parallel(
    new_enough: list[GpuState], request: PlacementRequest, estimate: Estimate, need: CopyNeed
) -> tuple[NoFitReason, str]:
    capable = [gpu for gpu in new_enough if gpu.kind in TENSOR_PARALLEL_KINDS]
    total: dict[str, int] = {}
    free: dict[str, int] = {}
    for gpu in capable:
        total[gpu.machine.name] = total.get(gpu.machine.name, 0) + 1
        free[gpu.machine.name] = free.get(gpu.machine.name, 0) + int(gpu.untouched)
    if max(free.values(), default=0) < need.tensor_parallel:
        message = insufficient_gpu_count(need.tensor_parallel, total, free)
        return NoFitReason.INSUFFICIENT_GPU_COUNT, message
    room = RoomFacts.of(capable, request, estimate, need)
    return NoFitReason.INSUFFICIENT_CAPACITY, insufficient_capacity(room)


def _gpu_with_room_if_shared(
    state: ClusterState, usable: list[GpuState], need: CopyNeed
) -> tuple[GpuState, int] | None:
    """A whole-GPU-only GPU, and its free bytes if its copies held only the shares they asked
    for, when those bytes would hold this share and no whole GPU is free."""
    if need.size >= 1:
        return None
    whole_only = [gpu for gpu in usable if gpu.kind is Kind.WHOLE]
    if any(gpu.untouched and holds(need, Mode.WHOLE, gpu.memory) for gpu in whole_only):
        return None  # a whole GPU is free and big enough: lack of sharing is not the reason
    asked = _units_asked(state, whole_only, need)
    for gpu in sorted(whole_only, key=lambda g: (asked[g.uid], g.machine.name, g.index)):
        free_units = SHARE_SCALE - asked[gpu.uid]
        if free_units >= need.size_units and holds(need, Mode.FRACTION, gpu.memory):
            return gpu, free_units * gpu.memory // SHARE_SCALE
    return None


def _units_asked(state: ClusterState, gpus: list[GpuState], need: CopyNeed) -> dict[int, int]:
    """Per GPU, the share units its copies asked for: a reservation's asked share where it took
    a whole GPU for less, and the copies this plan put there before, at this copy's size."""
    by_place = {(gpu.machine.name, gpu.index): gpu for gpu in gpus}
    asked = dict.fromkeys((gpu.uid for gpu in gpus), 0)
    held = dict.fromkeys(asked, 0)
    for reservation in state.inventory.reservations:
        gpu = by_place.get((reservation.machine, reservation.accelerator))
        if gpu is not None:
            share = reservation.asked_share
            asked[gpu.uid] += share_units(reservation.share if share is None else share)
            held[gpu.uid] += 1
    for gpu in gpus:
        asked[gpu.uid] += (gpu.copies - held[gpu.uid]) * need.size_units
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
        cls, units: list[GpuState], request: PlacementRequest, estimate: Estimate, need: CopyNeed
    ) -> RoomFacts:
        # What a unit offers depends only on its static kind: work it out once per kind.
        by_kind = {gpu.static_id: gpu for gpu in units}
        offers = [offer for gpu in by_kind.values() for offer in unit_offers(gpu, need)]
        holding = [reserve for reserve, budget in offers if budget >= need.estimate_bytes]
        modes = {kind: mode_for(kind, need) for kind in Kind}
        room = [(free_room(gpu, modes[gpu.kind]), gpu.machine.name, gpu) for gpu in units]
        largest, _, best = max(room, key=lambda r: r[:2], default=(0, "", None))
        return cls(
            estimate=estimate,
            request=request,
            reserve_needed=min(holding, default=0),
            largest_engine_budget=max((budget for _, budget in offers), default=0),
            largest_free=largest,
            largest_free_at=where(best) if best else "none",
            unified_only=all(gpu.kind is Kind.UNIFIED for gpu in units),
        )

    @property
    def fits_empty(self) -> bool:
        return self.reserve_needed > 0


def unit_offers(gpu: GpuState, need: CopyNeed) -> list[tuple[int, int]]:
    """(bytes reserved, engine budget) a copy could get on the unit if it were empty."""
    mode = mode_for(gpu.kind, need) or Mode.WHOLE
    replicas = gpu.accelerator.replicas
    if mode is Mode.SLICE:
        share = engine_share(mode, need)
        return [(s.memory, int(share * s.memory)) for s in gpu.slices]
    reserve, _ = reserved(mode, need, gpu.memory, replicas)
    return [(reserve, int(engine_share(mode, need, replicas) * gpu.memory))]


def free_room(gpu: GpuState, mode: Mode | None) -> int:
    """The most a copy placed this way could be given on the unit now, in bytes."""
    replicas = gpu.accelerator.replicas
    if mode is Mode.SLICE:
        return max((s.memory for s in gpu.slices if s.free), default=0)
    if mode is Mode.WHOLE or mode is None:
        return gpu.memory if gpu.untouched else 0
    if gpu.kind in (Kind.TIME_SLICED, Kind.MPS) and gpu.copies >= replicas:
        return 0
    if mode is Mode.REPLICA:
        return gpu.memory // replicas if gpu.free_bytes >= gpu.memory // replicas else 0
    by_share = gpu.free_share * gpu.memory // SHARE_SCALE
    return max(0, min(gpu.free_bytes, by_share))


# --- the messages ----------------------------------------------------------------------------


def vendor_mismatch(state: ClusterState, vendor: str) -> str:
    present = sorted({gpu.accelerator.vendor for gpu in state.gpus})
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


def accel_version_unmet(same_vendor: list[GpuState], request: PlacementRequest) -> str:
    engine = request.engine
    cards = [gpu.accelerator for gpu in same_vendor]
    problems, fixes = [], []
    best = max(cards, key=lambda a: version_tuple(a.compute_capability) or ())
    if not all(at_least(a.compute_capability, engine.min_compute_capability) for a in cards):
        problems.append(
            f"compute capability {engine.min_compute_capability} or newer, and the newest "
            f"here is {best.compute_capability} ({best.product})"
        )
        fixes.append(
            "pick a variant that runs on these accelerators (for example float16 instead of "
            "bfloat16, or one without FP8)"
        )
    newest_driver = max(cards, key=lambda a: version_tuple(a.driver) or ()).driver
    if not all(at_least(a.driver, engine.min_driver) for a in cards):
        problems.append(
            f"driver {engine.min_driver} or newer, and the newest here is {newest_driver}"
        )
        fixes.append("update the driver on the cluster's machines")
    fix = " or ".join(fixes) or "pick a variant that runs on these accelerators"
    return f"The engine needs {'; and '.join(problems)}. {fix[0].upper()}{fix[1:]}."


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


def sharing_not_configured(gpu: GpuState, free_if_shared: int, need: CopyNeed) -> str:
    share = f"{need.size:g}"
    reserve, _ = reserved(Mode.FRACTION, need, gpu.memory, 1)
    return (
        f"This cluster has no GPU sharing set up, so a copy of {share} of an accelerator takes a "
        f"whole one, and none that holds it is free. With sharing on, {where(gpu)} would have "
        f"{gib(free_if_shared)} free, enough for this copy's {gib(reserve)}. Ask your "
        "cluster admin to enable GPU sharing (time-slicing or MIG), or stop a deployment to "
        "free a whole accelerator."
    )
