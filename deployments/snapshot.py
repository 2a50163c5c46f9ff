"""Turns a cluster's rows into placement's Inventory: machines, GPUs, MIG slices, reservations.

Free room is always derived from Reservation rows, never from what a device happens to show.
"""

from __future__ import annotations

from typing import Any

from django.db.models import F, Prefetch, QuerySet

import placement
from clusters.models import Accelerator, Cluster, SharingClass
from deployments.models import Deployment, Reservation

SHARING_BY_CLASS = {
    SharingClass.TIME_SLICED: placement.GpuSharing.TIME_SLICED,
    SharingClass.MPS: placement.GpuSharing.MPS,
}


def slice_id(row: Accelerator) -> str:
    """A MIG slice's id in the inventory: its row id, stable across refreshes."""
    return str(row.pk)


def gpu_to_inventory(gpu: Accelerator) -> placement.Accelerator:
    slices = tuple(
        placement.MigSlice(profile=s.mig_profile, memory_bytes=s.memory_bytes, slice_id=slice_id(s))
        for s in gpu.slices.all()
        if s.present
    )
    return placement.Accelerator(
        index=gpu.index,
        vendor=gpu.vendor,
        product=gpu.product,
        memory_bytes=gpu.memory_bytes,
        compute_capability=gpu.compute_capability or None,
        driver=gpu.driver_version or None,
        sharing=SHARING_BY_CLASS.get(gpu.sharing_class),
        replicas=gpu.replicas,
        mig=slices or None,
    )


def reservation_rows(**where: Any) -> QuerySet[Reservation]:
    """Reservations as reservation_to_inventory reads them: with their machine and GPU, and the
    size per copy their deployment asked for."""
    rows = Reservation.objects.filter(**where).select_related("machine", "accelerator__parent")
    return rows.annotate(
        asked=F("copy__deployment__accelerators_per_copy"),
        deployment_name=F("copy__deployment__name"),
        ordinal=F("copy__ordinal"),
        movable=F("copy__deployment__movable"),
    )


def reservation_to_inventory(row: Reservation) -> placement.Reservation | None:
    gpu = row.accelerator
    if gpu is None:  # Kubernetes before the device plugin's choice is observed: see DESIGN §4
        return None
    parent = gpu.parent if gpu.parent_id else gpu
    return placement.Reservation(
        machine=row.machine.name,
        accelerator=parent.index,
        bytes=row.reserved_bytes,
        share=float(row.share),
        slice=slice_id(gpu) if gpu.parent_id else None,
        asked_share=asked_share(float(row.asked), float(row.share)),  # see reservation_rows
        deployment=row.deployment_name,  # see reservation_rows: who holds it, for re-packing
        copy=row.ordinal,
        movable=row.movable,
    )


def placed_to_inventory(
    placed: placement.Placement, deployment: Deployment, ordinal: int
) -> tuple[placement.Reservation, ...]:
    """What a placement about to be written holds, as reservation_to_inventory will read it
    back: so that a batch of plans sees the copies planned before it."""
    return tuple(
        placement.Reservation(
            machine=placed.machine,
            accelerator=index,
            bytes=placed.allocated_bytes,
            share=round(placed.share, 4),  # as the row keeps it
            slice=placed.slice_id,
            asked_share=asked_share(float(deployment.accelerators_per_copy), placed.share),
            deployment=deployment.name,
            copy=ordinal,
            movable=deployment.movable,
        )
        for index in placed.accelerators
    )


def asked_share(asked: float, share: float) -> float | None:
    """What a copy of less than one GPU asked for, where it holds a whole one (no sharing on
    its cluster): placement says when sharing would have made room (DESIGN §4)."""
    return asked if asked < 1 and share == 1 else None


def inventory_for(cluster: Cluster) -> placement.Inventory:
    """The cluster as placement sees it now: ready machines with GPU facts, and what is held."""
    gpus = Accelerator.objects.present_gpus().prefetch_related("slices")
    machines = cluster.machines.filter(ready=True).prefetch_related(
        Prefetch("accelerators", queryset=gpus, to_attr="gpus")
    )
    inventory_machines = tuple(
        placement.Machine(
            name=m.name,
            accelerators=tuple(gpu_to_inventory(g) for g in m.gpus),
            system_memory_bytes=m.system_memory_bytes,
            unified_memory=m.unified_memory,
        )
        for m in machines
    )
    rows = reservation_rows(machine__cluster=cluster, machine__ready=True)
    reservations = tuple(r for r in map(reservation_to_inventory, rows) if r is not None)
    sharing = (
        placement.ClusterSharing.FRACTIONAL
        if cluster.sharing_strategy
        else placement.ClusterSharing.WHOLE_GPU
    )
    return placement.Inventory(inventory_machines, reservations, sharing)
