"""The room on each accelerator as a person reads it: what is left, and which copies hold the
rest (the cluster page's table and the fleet overview's map of GPUs)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.db.models import QuerySet

from clusters.models import Accelerator
from deployments.access import visible_deployments
from deployments.models import Reservation
from placement.words import percent_of


def holders_by_accelerator(
    user: Any, reservations: QuerySet[Reservation]
) -> dict[int, list[Reservation]]:
    """Who holds each accelerator's room; a deployment the user may not see is shown as
    "another team" with its size only (`shown` False)."""
    rows = reservations.select_related("copy__deployment")
    visible = set(visible_deployments(user).values_list("pk", flat=True))
    held: dict[int, list[Reservation]] = defaultdict(list)
    for row in rows:
        row.shown = row.copy.deployment_id in visible  # type: ignore[attr-defined]
        if row.accelerator_id is not None:
            held[row.accelerator_id].append(row)
    return held


def annotate_room(gpu: Accelerator, held: dict[int, list[Reservation]]) -> None:
    """What each accelerator (and slice) has left, and which copies hold the rest; on the GPU
    itself, also every holder of it or its slices with the part of the card it takes
    (`all_holders`, each with its `percent` and the `offset` it begins at)."""
    gpu.all_holders = []
    for unit in [gpu, *gpu.slices.all()]:
        unit.holders = held.get(unit.pk, [])
        used = sum(r.reserved_bytes for r in unit.holders)
        unit.free_bytes = max(0, unit.memory_bytes - used)
        unit.used_percent = percent_of(used, unit.memory_bytes)
        for holder in unit.holders:
            holder.offset = sum(h.percent for h in gpu.all_holders)  # where its part begins
            holder.percent = percent_of(holder.reserved_bytes, gpu.memory_bytes)
            gpu.all_holders.append(holder)
