"""Placement inside the console: fit checks, estimates, and the reservation writer.

The reservation writer takes one lock per cluster (its row, SELECT … FOR UPDATE, always before
any Deployment or Copy row), re-plans against the locked state and writes Reservations, so two
requests racing for the last GPU can never both get it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction

import placement
from catalog.facts import engine_settings, model_facts
from catalog.models import Model, Variant
from clusters.models import Accelerator, Cluster, Machine
from deployments.models import Copy, Deployment, Reservation, record_held
from deployments.snapshot import inventory_for
from placement.repack import Repack, plan_with_moves


def placement_request(
    model: Model,
    variant: Variant,
    settings: dict[str, Any],
    accelerators_per_copy: float | Decimal,
    copies: int,
) -> placement.PlacementRequest:
    return placement.PlacementRequest(
        model=model_facts(model, variant),
        engine=engine_settings(model, variant, settings),
        accelerators_per_copy=float(accelerators_per_copy),
        copies=copies,
    )


def request_for(deployment: Deployment, copies: int | None = None) -> placement.PlacementRequest:
    wanted = deployment.copies_wanted if copies is None else copies
    return placement_request(
        deployment.model,
        deployment.variant,
        deployment.engine_settings,
        deployment.accelerators_per_copy,
        wanted,
    )


def vendor_of(vendors: Iterable[str]) -> str:
    """The accelerators engines run on among these: `cpu` where there are only CPU machines
    (vLLM's CPU build and llama.cpp run there), else NVIDIA GPUs."""
    return "cpu" if set(vendors) == {"cpu"} else "nvidia"


def engine_vendor(cluster: Cluster) -> str:
    return vendor_of(
        Accelerator.objects.present_gpus()
        .filter(machine__cluster=cluster, machine__ready=True)
        .values_list("vendor", flat=True)
    )


def for_cluster(
    cluster: Cluster, request: placement.PlacementRequest
) -> placement.PlacementRequest:
    """The request for the engine builds that run on the cluster's accelerators."""
    return for_vendor(request, engine_vendor(cluster))


def for_vendor(request: placement.PlacementRequest, vendor: str) -> placement.PlacementRequest:
    return replace(request, engine=replace(request.engine, vendor=vendor))


def fit_check(cluster: Cluster, request: placement.PlacementRequest) -> placement.PlanResult:
    """How many copies fit now and on the empty cluster, and why the rest do not (no writes)."""
    return placement.plan(inventory_for(cluster), for_cluster(cluster, request))


def fit_check_with_moves(
    cluster: Cluster,
    request: placement.PlacementRequest,
    inventory: placement.Inventory | None = None,
) -> Repack:
    """The fit check, and when the request does not fit now, the fewest moves of other copies
    after which it does (nothing is moved or reserved). On the cluster as it is, or as
    `inventory` has it (a scale: without the deployment's own copies)."""
    budget_s = settings.REPACK_BUDGET_MS / 1000
    inventory = inventory_for(cluster) if inventory is None else inventory
    return plan_with_moves(inventory, for_cluster(cluster, request), budget_s)


def first_reason(result: placement.PlanResult, otherwise: str = "") -> str:
    """Why the first copy that found no room did not, in placement's words."""
    return result.not_placed[0].message if result.not_placed else otherwise


def estimate(
    model: Model, variant: Variant, settings: dict[str, Any], tensor_parallel: int = 1
) -> placement.Estimate:
    return placement.estimate_copy(
        model_facts(model, variant), engine_settings(model, variant, settings), tensor_parallel
    )


def cpu_kv_cache_bytes(
    model: Model, variant: Variant, settings: dict[str, Any], budget_bytes: int
) -> int:
    """What a copy's budget on a CPU machine leaves for vLLM's KV cache once the weights, the
    activations and the CPU build's runtime are counted: the same estimate placement fitted the
    copy with, so that the engine's whole memory is its budget (the console's database shares
    this machine's memory)."""
    engine = replace(engine_settings(model, variant, settings), vendor="cpu")
    return placement.available_kv_bytes(model_facts(model, variant), engine, budget_bytes)


def accelerator_rows(cluster: Cluster, placed: placement.Placement) -> list[Accelerator]:
    """The rows a placement names: the MIG slice, or the GPUs by index on its machine."""
    if placed.slice_id is not None:
        return [Accelerator.objects.get(pk=int(placed.slice_id))]
    gpus = Accelerator.objects.filter(
        machine__cluster=cluster, machine__name=placed.machine, parent__isnull=True
    )
    by_index = {gpu.index: gpu for gpu in gpus.filter(index__in=placed.accelerators)}
    return [by_index[index] for index in placed.accelerators]


def write_reservation(cluster: Cluster, copy: Copy, placed: placement.Placement) -> None:
    machine = Machine.objects.get(cluster=cluster, name=placed.machine)
    held = [
        Reservation.objects.create(
            copy=copy, machine=machine, accelerator=gpu, **reservation_size(placed)
        )
        for gpu in accelerator_rows(cluster, placed)
    ]
    record_held(held)
    Copy.objects.filter(pk=copy.pk).update(**copy_fields(placed, machine))


def reservation_size(placed: placement.Placement) -> dict[str, Any]:
    """What each Reservation row of a placement holds."""
    return {
        "reserved_bytes": placed.allocated_bytes,
        "share": Decimal(str(round(placed.share, 4))),
    }


def copy_fields(placed: placement.Placement, machine: Machine) -> dict[str, Any]:
    """What a copy records of where it was placed."""
    return {
        "machine": machine,
        "allocated_bytes": placed.allocated_bytes,
        "gpu_memory_utilization": placed.gpu_memory_utilization,
        "hardware_class": placed.hardware_class,
        "sharing_class": placed.sharing_class,
        "pending_reason": "",
    }


def placed_words(placed: placement.Placement) -> str:
    """The Event of a copy's move to COPYING_FILES: where it goes."""
    where = f"{placed.machine} GPU {','.join(map(str, placed.accelerators))}"
    where += f" (MIG {placed.slice})" if placed.slice else ""
    return f"Placed on {where}."


def reserve(deployment: Deployment, copies: list[Copy]) -> placement.PlanResult:
    """Place `copies` (not yet holding room) of the deployment, writing their Reservations.

    Returns the plan: copies placed in order, and for the rest the reason they do not fit now.
    """
    with transaction.atomic():
        cluster = Cluster.objects.select_for_update().get(pk=deployment.cluster_id)
        asked = for_cluster(cluster, request_for(deployment, len(copies)))
        result = placement.plan(inventory_for(cluster), asked)
        for copy, placed in zip(copies, result.placed, strict=False):
            write_reservation(cluster, copy, placed)
        return result


def release(copy: Copy) -> int:
    """Give back a stopped copy's room. Called when the copy is observed stopped."""
    deleted, _ = Reservation.objects.filter(copy=copy).delete()
    return deleted


def with_copies(request: placement.PlacementRequest, copies: int) -> placement.PlacementRequest:
    return replace(request, copies=copies)
