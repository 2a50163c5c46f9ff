"""The fit check in words, for the wizard and the scale dialog, and the sizes of a copy in words.

The words come from placement's answer: how many copies fit now and on the empty cluster, what one
copy needs (the estimate's parts) against what each accelerator has, the NoFit reason with its
fix, and a size that would fit better.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

import placement
from deployments.engine.variant_advice import Hardware, hardware_of
from deployments.models import Deployment
from deployments.placing import (
    first_reason,
    fit_check_with_moves,
    for_cluster,
    placement_request,
)
from deployments.snapshot import inventory_for, reservation_rows, reservation_to_inventory
from placement.repack import Move, Repack
from placement.shares import engine_share
from placement.words import gib, percent, plural

SIZE_CHOICES = [
    ("0.25", "¼ of an accelerator"),
    ("0.333", "⅓ of an accelerator"),
    ("0.5", "½ of an accelerator"),
    ("0.75", "¾ of an accelerator"),
    ("1", "1 accelerator"),
    ("2", "2 accelerators (split)"),
    ("4", "4 accelerators (split)"),
    ("8", "8 accelerators (split)"),
]
FRACTIONS = {"0.25": "¼", "0.333": "⅓", "0.5": "½", "0.75": "¾"}


def size_text(size: Any) -> str:
    """A size as the forms carry it: 0.5, 1, 2 (no trailing zeros)."""
    value = Decimal(str(size)).normalize()
    return format(value, "f")


def size_label(size: Any) -> str:
    text = size_text(size)
    if text in FRACTIONS:
        return f"{FRACTIONS[text]} of an accelerator"
    value = Decimal(text)
    if value < 1:
        return f"{text} of an accelerator"
    return "1 accelerator" if value == 1 else f"{text} accelerators (split)"


def size_choices(*extra: Any) -> list[tuple[str, str]]:
    """The usual sizes, plus any other size in use (the current or the suggested one)."""
    known = dict(SIZE_CHOICES)
    for size in extra:
        if size not in (None, ""):
            known.setdefault(size_text(size), size_label(size))
    return sorted(known.items(), key=lambda item: Decimal(item[0]))


@dataclass(frozen=True)
class FitWords:
    """The fit check as the wizard and the scale dialog say it."""

    level: str  # ok | partial | none_now | never | invalid
    headline: str
    empty: str = ""
    needs: str = ""
    has: str = ""
    reason: str = ""
    suggestion: str = ""  # a size, as the forms carry it
    suggestion_label: str = ""
    suggestion_words: str = ""
    fit_now: int = 0
    fit_empty: int = 0


def needs_words(estimate: placement.Estimate, max_model_len: int) -> str:
    where = (
        f"each of its {estimate.tensor_parallel} accelerators"
        if estimate.tensor_parallel > 1
        else "its accelerator"
    )
    return (
        f"Each copy needs {gib(estimate.total_bytes)} on {where}: weights "
        f"{gib(estimate.weights_bytes)}, context cache {gib(estimate.kv_cache_bytes)} "
        f"({max_model_len:,} tokens), working memory {gib(estimate.activations_bytes)}, engine "
        f"overhead {gib(estimate.overhead_bytes)}."
    )


def has_words(hardware: Hardware, size: float, asked: float | None = None) -> str:
    if not hardware.gpu_memory_bytes:
        return "This cluster reports no accelerator memory."
    memory = hardware.gpu_memory_bytes
    share = engine_share(size, asked)
    product = f" ({hardware.product})" if hardware.product else ""
    engine = f"{gib(memory * share)} ({percent(share)} of its memory)"
    if size < 1:
        return (
            f"Each accelerator here has {gib(memory)}{product}; a copy of "
            f"{size_label(size)} gives the engine {engine}."
        )
    return f"Each accelerator here has {gib(memory)}{product}; the engine may use {engine}."


def headline(result: placement.PlanResult, copies: int) -> tuple[str, str]:
    now, empty = min(result.fit_now, copies), result.fit_empty
    if copies == 0:
        return "ok", "No copies asked for: the deployment is kept, but nothing runs."
    if now >= copies:
        return "ok", "The copy fits now." if copies == 1 else f"All {copies} copies fit now."
    if now > 0:
        return "partial", f"{now} of {copies} copies fit now; {the_rest(now, empty, copies)}"
    if empty > 0:
        return "none_now", (
            "No copy fits right now: hosting it now would fail at once. Free room first (stop or "
            "scale down a deployment on this cluster), or make each copy smaller."
        )
    return "never", "No copy can ever fit on this cluster as it is."


def the_rest(now: int, empty: int, copies: int) -> str:
    """What becomes of the copies that do not fit now."""
    if copies <= empty:
        rest = copies - now
        return f"the other {rest} start{'s' if rest == 1 else ''} when room frees up."
    if now < empty:
        return (
            f"{empty - now} more start when room frees up; this cluster holds at most {empty} of "
            "this size."
        )
    return (
        f"this cluster holds at most {empty} of this size, so the other {copies - now} cannot "
        "start until it has more room."
    )


def empty_words(result: placement.PlanResult) -> str:
    """How many copies of this size the cluster has room for, now and empty."""
    now, empty = result.fit_now, result.fit_empty
    if empty == 0:
        return "Even on an empty cluster, no copy of this size fits."
    return (
        f"Room now for {plural(now, 'copy', 'copies')} of this size; on an empty cluster, {empty}."
    )


def describe_fit(
    result: placement.PlanResult,
    request: placement.PlacementRequest,
    hardware: Hardware,
    better: placement.PlanResult | None = None,
) -> FitWords:
    level, words = headline(result, request.copies)
    reason = first_reason(result)
    size = request.accelerators_per_copy
    suggestion = suggestion_words(result, size, better)
    return FitWords(
        level=level,
        headline=words,
        empty=empty_words(result),
        needs=needs_words(result.estimate, request.max_model_len),
        has=has_words(hardware, size, request.engine.gpu_memory_utilization),
        reason=reason,
        fit_now=result.fit_now,
        fit_empty=result.fit_empty,
        **suggestion,
    )


def suggestion_words(
    result: placement.PlanResult, size: float, better: placement.PlanResult | None
) -> dict[str, str]:
    """A different size when it fits better: more copies now, or any at all."""
    suggested = result.suggested_accelerators_per_copy
    if suggested is None or better is None or abs(suggested - size) < 1e-9:
        return {}
    if not (better.fit_now > result.fit_now or result.fit_empty == 0):
        return {}
    label = size_label(suggested)
    now = plural(better.fit_now, "copy", "copies")
    return {
        "suggestion": size_text(suggested),
        "suggestion_label": label,
        "suggestion_words": (
            f"{label[0].upper()}{label[1:]} would fit better: {now} of "
            f"that size fit now, {better.fit_empty} on an empty cluster."
        ),
    }


def invalid(error: ValueError) -> FitWords:
    field, _, problem = str(error).partition(": ")
    words = (
        f"{field.replace('engine.', '').replace('_', ' ')}: {problem}" if problem else str(error)
    )
    return FitWords(level="invalid", headline=f"This cannot be placed: {words}.")


def check(
    inventory: placement.Inventory, request: placement.PlacementRequest, hardware: Hardware
) -> FitWords:
    """Plan on `inventory`, and once more at the suggested size when it differs."""
    try:
        result = placement.plan(inventory, request)
    except ValueError as error:
        return invalid(error)
    better = None
    suggested = result.suggested_accelerators_per_copy
    if suggested is not None and abs(suggested - request.accelerators_per_copy) > 1e-9:
        try:
            better = placement.plan(
                inventory, replace(request, accelerators_per_copy=suggested, copies=1)
            )
        except ValueError:
            better = None
    return describe_fit(result, request, hardware, better)


# --- the scale dialog --------------------------------------------------------------------------


def inventory_without(deployment: Deployment) -> placement.Inventory:
    """The cluster as if this deployment's copies held nothing: scaling re-uses their room."""
    inventory = inventory_for(deployment.cluster)
    rows = reservation_rows(copy__deployment=deployment)
    own = Counter(r for r in map(reservation_to_inventory, rows) if r is not None)
    kept = []
    for held in inventory.reservations:
        if own[held] > 0:
            own[held] -= 1
        else:
            kept.append(held)
    return placement.Inventory(inventory.machines, tuple(kept), inventory.sharing)


@dataclass(frozen=True)
class ScaleWords:
    fit: FitWords
    per_copy: str
    cluster: str
    cannot_start: str
    own_accelerator: str


def scale_words(deployment: Deployment, copies: int, size: Decimal) -> ScaleWords:
    hardware = hardware_of(deployment.cluster)
    try:
        asked = placement_request(
            deployment.model, deployment.variant, deployment.engine_settings, size, copies
        )
    except ValueError as error:
        return ScaleWords(invalid(error), "", "", "", "")
    fit = check(inventory_without(deployment), for_cluster(deployment.cluster, asked), hardware)
    return ScaleWords(
        fit=fit,
        per_copy=per_copy_words(hardware, float(size), deployment.engine_settings),
        cluster=cluster_words(hardware, fit, float(size)),
        cannot_start=cannot_start_words(fit, copies),
        own_accelerator=(
            "A share above 0.5 keeps each copy on an accelerator of its own."
            if 0.5 < size < 1
            else ""
        ),
    )


def moves_for_scale(deployment: Deployment, copies: int, size: Decimal) -> Repack | None:
    """When not all the copies asked for fit now: the moves of other copies after which they
    would (None where they fit, or the size is not one placement takes)."""
    try:
        asked = placement_request(
            deployment.model, deployment.variant, deployment.engine_settings, size, copies
        )
        return fit_check_with_moves(deployment.cluster, asked, inventory_without(deployment))
    except ValueError:
        return None


def per_copy_words(hardware: Hardware, size: float, settings: dict[str, Any]) -> str:
    used = size_label(size)
    text = f"Each copy uses {used}."
    if hardware.gpu_memory_bytes:
        share = engine_share(size, settings.get("gpu_memory_utilization"))
        text += (
            f" The engine takes {percent(share)} of each accelerator's memory: "
            f"{gib(hardware.gpu_memory_bytes * share)} of {gib(hardware.gpu_memory_bytes)}."
        )
    return text


def cluster_words(hardware: Hardware, fit: FitWords, size: float) -> str:
    count = hardware.gpu_count
    has = f"This cluster has {plural(count, 'accelerator', 'accelerators')}"
    empty = plural(fit.fit_empty, "copy", "copies")
    words = f"{has}, so up to {empty} fit when nothing else is running on it."
    return f"{words} Now {fit.fit_now} fit beside what else runs there."


def cannot_start_words(fit: FitWords, copies: int) -> str:
    if fit.level in ("ok", "invalid") or copies <= fit.fit_now:
        return ""
    missing = copies - fit.fit_now
    reason = fit.reason.rstrip(".")
    fix = (
        f"Scale to {fit.fit_now}, or add a machine to the cluster."
        if fit.fit_now
        else "Free room on the cluster, make each copy smaller, or add a machine to the cluster."
    )
    return f"{missing} cannot start: {reason}. {fix}"


# --- room made by moving other copies (placement/repack.py) --------------------------------

NO_DOWNTIME = "no downtime: each starts at its new place before the old one stops"


def moves_words(
    repack: Repack, sizes: dict[str, str], may_name: set[str], lead: str = "Fits after moving"
) -> str:
    """ "Fits after moving 2 copies: qwen3-8b copy 1 (h100-1 GPU 2 → h100-2 GPU 0), another
    team's copy of 0.5 GPU (…); no downtime: …". `sizes` gives each deployment's size in
    words; a deployment not in `may_name` (another team's, to a non-staff viewer) is not named."""
    if not repack.found:
        return repack.message
    if not repack.moves:
        return ""
    told = ", ".join(move_words(move, sizes, may_name) for move in repack.moves)
    count = plural(len(repack.moves), "copy", "copies")
    return f"{lead} {count}: {told}; {NO_DOWNTIME}."


def move_words(move: Move, sizes: dict[str, str], may_name: set[str]) -> str:
    where = f"{gpus_words(move.from_machine, move.from_accelerators)} → " + gpus_words(
        move.to_machine, move.to_accelerators
    )
    if move.deployment in may_name:
        return f"{move.deployment} copy {move.copy} ({where})"
    size = sizes.get(move.deployment, "")
    return f"another team's copy{f' of {size}' if size else ''} ({where})"


def gpus_words(machine: str, accelerators: tuple[int, ...]) -> str:
    indexes = ",".join(str(index) for index in accelerators)
    return f"{machine} GPU {indexes}"
