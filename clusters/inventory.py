"""Writes a cluster's discovered inventory into Machine and Accelerator rows.

Rows are updated in place (never deleted and re-created), so reservations that point at them
survive a refresh; a machine that is no longer reported is marked not ready, not deleted.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from clusters.models import Accelerator, Cluster, ClusterState, HardwareClass, Machine, SharingClass

GIB = 2**30
MIB = 2**20


def memory_bytes(entry: dict[str, Any]) -> int:
    """Memory as the device reports it: `memory_bytes`, or `memory_mib` as NVML and GFD give it."""
    if "memory_bytes" in entry:
        return int(entry["memory_bytes"])
    return int(entry["memory_mib"]) * MIB


def gpu_fields(gpu: dict[str, Any]) -> dict[str, Any]:
    replicas = int(gpu.get("replicas", 1))
    sharing = gpu.get("sharing") or ""
    sharing_class = {"time_sliced": SharingClass.TIME_SLICED, "mps": SharingClass.MPS}.get(
        sharing, ""
    )
    if gpu.get("mig"):
        sharing_class = SharingClass.MIG
    return {
        "uuid": gpu.get("uuid", ""),
        "vendor": gpu.get("vendor", "nvidia"),
        "product": gpu["product"],
        "memory_bytes": memory_bytes(gpu),
        "compute_capability": gpu.get("compute_capability", ""),
        "driver_version": gpu.get("driver", ""),
        "cuda_version": gpu.get("cuda", ""),
        "hardware_class": HardwareClass.HARDWARE_ISOLATED
        if gpu.get("mig")
        else HardwareClass.SOFTWARE_SHARED,
        "sharing_class": sharing_class or gpu.get("sharing_class", SharingClass.SHARED),
        "replicas": replicas,
    }


def write_slices(machine: Machine, parent: Accelerator, slices: list[dict[str, Any]]) -> None:
    for index, entry in enumerate(slices):
        Accelerator.objects.update_or_create(
            machine=machine,
            parent=parent,
            index=index,
            defaults={
                "vendor": parent.vendor,
                "product": parent.product,
                "memory_bytes": memory_bytes(entry),
                "compute_capability": parent.compute_capability,
                "driver_version": parent.driver_version,
                "hardware_class": HardwareClass.HARDWARE_ISOLATED,
                "sharing_class": SharingClass.MIG,
                "mig_profile": entry["profile"],
            },
        )


def write_machine(cluster: Cluster, entry: dict[str, Any], now: Any) -> Machine:
    machine, _ = Machine.objects.update_or_create(
        cluster=cluster,
        name=entry["name"],
        defaults={
            "ready": True,
            "labels": entry.get("labels", {}),
            "cpu_count": int(entry.get("cpus", 0)),
            "system_memory_bytes": int(entry.get("system_memory_gib", 0)) * GIB,
            "unified_memory": bool(entry.get("unified_memory", False)),
            "last_seen": now,
        },
    )
    for gpu in entry.get("accelerators", []):
        parent, _ = Accelerator.objects.update_or_create(
            machine=machine, parent=None, index=int(gpu["index"]), defaults=gpu_fields(gpu)
        )
        write_slices(machine, parent, gpu.get("mig") or [])
    return machine


def apply_inventory(cluster: Cluster, machines: list[dict[str, Any]]) -> None:
    """Make the cluster's rows match what discovery reported."""
    now = timezone.now()
    with transaction.atomic():
        seen = [write_machine(cluster, entry, now).pk for entry in machines]
        cluster.machines.exclude(pk__in=seen).update(ready=False)
        Cluster.objects.filter(pk=cluster.pk).update(state=ClusterState.READY, last_seen=now)
