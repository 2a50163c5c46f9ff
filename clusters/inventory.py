"""Writes what a cluster's backend discovered into Machine and Accelerator rows.

Rows are updated in place (never deleted and re-created), so reservations that point at them
survive a refresh; a machine that is no longer reported is marked not ready, not deleted.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from clusters.backends.base import DiscoveredAccelerator, DiscoveredMachine, Discovery
from clusters.models import Accelerator, Cluster, ClusterState, HardwareClass, Machine, SharingClass


def gpu_fields(gpu: DiscoveredAccelerator) -> dict[str, object]:
    return {
        "uuid": gpu.uuid,
        "vendor": gpu.vendor,
        "product": gpu.product,
        "memory_bytes": gpu.memory_bytes,
        "compute_capability": gpu.compute_capability,
        "driver_version": gpu.driver_version,
        "cuda_version": gpu.cuda_version,
        "hardware_class": gpu.hardware_class,
        "sharing_class": gpu.sharing_class,
        "replicas": gpu.replicas,
        "present": True,
    }


def write_slices(machine: Machine, parent: Accelerator, gpu: DiscoveredAccelerator) -> None:
    seen = [piece.index for piece in gpu.slices]
    parent.slices.exclude(index__in=seen).update(present=False)
    for piece in gpu.slices:
        Accelerator.objects.update_or_create(
            machine=machine,
            parent=parent,
            index=piece.index,
            defaults={
                "uuid": piece.uuid,
                "vendor": parent.vendor,
                "product": parent.product,
                "memory_bytes": piece.memory_bytes,
                "compute_capability": parent.compute_capability,
                "driver_version": parent.driver_version,
                "hardware_class": HardwareClass.HARDWARE_ISOLATED,
                "sharing_class": SharingClass.MIG,
                "mig_profile": piece.profile,
                "present": True,
            },
        )


def write_machine(cluster: Cluster, found: DiscoveredMachine, now: object) -> Machine:
    machine, _ = Machine.objects.update_or_create(
        cluster=cluster,
        name=found.name,
        defaults={
            # A machine without GPU capacity facts receives no placements.
            "ready": found.ready and found.capacity_known,
            "labels": dict(found.labels),
            "cpu_count": found.cpu_count,
            "system_memory_bytes": found.system_memory_bytes,
            "unified_memory": found.unified_memory,
            "last_seen": now,
        },
    )
    reported = [gpu.index for gpu in found.accelerators]
    machine.accelerators.filter(parent=None).exclude(index__in=reported).update(present=False)
    for gpu in found.accelerators:
        parent, _ = Accelerator.objects.update_or_create(
            machine=machine, parent=None, index=gpu.index, defaults=gpu_fields(gpu)
        )
        write_slices(machine, parent, gpu)
    return machine


def apply_discovery(cluster: Cluster, discovery: Discovery) -> None:
    """Make the cluster's rows match what discovery reported."""
    now = timezone.now()
    if not discovery.reachable:
        Cluster.objects.filter(pk=cluster.pk).update(
            state=ClusterState.UNREACHABLE, discovery_message=discovery.message
        )
        return
    with transaction.atomic():
        seen = [write_machine(cluster, found, now).pk for found in discovery.machines]
        cluster.machines.exclude(pk__in=seen).update(ready=False)
        state = ClusterState.DEGRADED if discovery.notices else ClusterState.READY
        Cluster.objects.filter(pk=cluster.pk).update(
            state=state,
            last_seen=now,
            notices=list(discovery.notices),
            discovery_message=discovery.message,
        )


def refresh(cluster: Cluster) -> Discovery:
    """Ask the cluster's backend what it has now, and write it down."""
    from clusters.registry import backend_for

    discovery = backend_for(cluster).discover()
    apply_discovery(cluster, discovery)
    return discovery
