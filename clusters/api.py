"""The clusters API: where copies can be placed, with machines and GPUs (never credentials), and
the room on each GPU as placement sees it now."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from django.db.models import Prefetch, QuerySet
from django.http import Http404, HttpRequest
from ninja import Field, Router, Schema

from clusters.forms import ClusterFilter
from clusters.models import Accelerator, Cluster, Machine, with_counts
from console.api_schema import ERRORS
from deployments.snapshot import inventory_for
from placement.units import GpuState, Kind, build_state
from placement.words import in_gib

router = Router(tags=["clusters"])


class SliceOut(Schema):
    profile: str
    memory_gb: float


class GpuOut(Schema):
    index: int
    vendor: str
    product: str
    memory_gb: float
    compute_capability: str | None
    sharing_class: str
    replicas: int
    mig_slices: list[SliceOut]


class MachineOut(Schema):
    name: str
    ready: bool
    gpu_count: int = Field(description="its GPUs: a CPU machine has none")
    gpu_memory_gb: float = Field(description="all its GPUs together")
    cpu_cores: int = Field(description="a CPU machine (one that hosts on its CPU): its cores")
    cpu_memory_gb: float = Field(
        description="a CPU machine: the memory it gives engines (its system memory less the "
        "reserve)"
    )
    gpus: list[GpuOut] = Field(
        description="its accelerators as discovery reports them: a CPU machine's one, of vendor "
        "cpu, is no GPU and not in gpu_count"
    )


class ClusterOut(Schema):
    id: int
    name: str
    description: str
    kind: str
    topology: str
    state: str
    sharing_strategy: str | None
    notices: list[str]
    last_seen: datetime | None
    gpu_count: int = Field(description="its machines' GPUs together (a CPU is not one)")
    cpu_machines: int = Field(description="its machines that host on their CPU")
    cpu_cores: int = Field(description="the cores of its CPU machines together")
    cpu_memory_gb: float = Field(description="the memory its CPU machines give engines")
    machines: list[MachineOut]


def gpu_out(gpu: Accelerator) -> dict[str, Any]:
    return {
        "index": gpu.index,
        "vendor": gpu.vendor,
        "product": gpu.product,
        "memory_gb": in_gib(gpu.memory_bytes),
        "compute_capability": gpu.compute_capability or None,
        "sharing_class": gpu.sharing_class,
        "replicas": gpu.replicas,
        "mig_slices": [
            {"profile": s.mig_profile, "memory_gb": in_gib(s.memory_bytes)}
            for s in gpu.slices.all()
        ],
    }


def machine_out(machine: Machine) -> dict[str, Any]:
    accelerators = list(machine.gpus)  # type: ignore[attr-defined]
    gpus = [unit for unit in accelerators if not unit.is_cpu]
    cpus = [unit for unit in accelerators if unit.is_cpu]
    return {
        "name": machine.name,
        "ready": machine.ready,
        "gpu_count": len(gpus),
        "gpu_memory_gb": in_gib(sum(gpu.memory_bytes for gpu in gpus)),
        "cpu_cores": machine.cpu_count if cpus else 0,
        "cpu_memory_gb": in_gib(sum(cpu.memory_bytes for cpu in cpus)),
        "gpus": [gpu_out(unit) for unit in accelerators],
    }


def cluster_out(cluster: Cluster) -> dict[str, Any]:
    # Only what an operator needs to choose a cluster: never its kubeconfig or other credentials.
    return {
        "id": cluster.pk,
        "name": cluster.name,
        "description": cluster.description,
        "kind": cluster.kind,
        "topology": cluster.topology,
        "state": cluster.state,
        "sharing_strategy": cluster.sharing_strategy or None,
        "notices": cluster.notices,
        "last_seen": cluster.last_seen,
        # Counted as the list page counts them (with_counts).
        "gpu_count": cluster.gpu_count,  # type: ignore[attr-defined]
        "cpu_machines": cluster.cpu_machine_count,  # type: ignore[attr-defined]
        "cpu_cores": cluster.cpu_cores,  # type: ignore[attr-defined]
        "cpu_memory_gb": in_gib(cluster.cpu_memory_bytes),  # type: ignore[attr-defined]
        "machines": [machine_out(machine) for machine in cluster.machines.all()],
    }


class GpuRoomOut(Schema):
    index: int = Field(description="a unified-memory machine's one pool: its first accelerator's")
    sharing_class: str = Field(
        description="how placement divides it: shared, whole_gpu, time_sliced, mps, mig or "
        "unified_memory"
    )
    memory_gb: float = Field(
        description="what placement budgets against: the GPU's memory (a unified-memory "
        "machine: its system memory less 8 GiB)"
    )
    free_gb: float = Field(description="what no copy holds (MIG: its free slices together)")
    copies: int = Field(description="the copies holding room on it, of every team")
    free_slices: list[SliceOut] = Field(description="MIG: the slices no copy holds")


class MachineRoomOut(Schema):
    machine: str
    ready: bool
    gpus: list[GpuRoomOut] = Field(description="none when not ready: placement leaves it out")


class ClusterRoomOut(ClusterOut):
    free: list[MachineRoomOut] = Field(description="the room now, as a fit check sees it")


def gpu_room_out(gpu: GpuState) -> dict[str, Any]:
    free_slices = [s for s in gpu.slices if s.free]
    if gpu.kind is Kind.MIG:  # a copy takes a whole slice: what is free is the slices no one holds
        free_bytes = sum(s.memory for s in free_slices)
    else:  # reservations may exceed a GPU that now reports less memory
        free_bytes = max(0, gpu.free_bytes)
    return {
        "index": gpu.index,
        "sharing_class": gpu.kind.value,
        "memory_gb": in_gib(gpu.memory),
        "free_gb": in_gib(free_bytes),
        "copies": gpu.copies,
        "free_slices": [{"profile": s.profile, "memory_gb": in_gib(s.memory)} for s in free_slices],
    }


def free_room(cluster: Cluster) -> list[dict[str, Any]]:
    """Per machine and GPU, the room placement sees now: the fit check's own snapshot and state,
    so that this never disagrees with what a fit check or a host would find."""
    rooms: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for gpu in build_state(inventory_for(cluster)).gpus:
        rooms[gpu.machine.name].append(gpu_room_out(gpu))
    return [
        {"machine": m.name, "ready": m.ready, "gpus": rooms[m.name]} for m in cluster.machines.all()
    ]


def with_machines(clusters: QuerySet[Cluster]) -> QuerySet[Cluster]:
    """Clusters with their machines and GPUs: only what discovery still reports, as placement
    ignores the rest (deployments/snapshot.py)."""
    gpus = Accelerator.objects.present_gpus().prefetch_related(
        Prefetch("slices", queryset=Accelerator.objects.present())
    )
    machines = Machine.objects.prefetch_related(
        Prefetch("accelerators", queryset=gpus, to_attr="gpus")
    )
    return clusters.prefetch_related(Prefetch("machines", queryset=machines))


class ClustersOut(Schema):
    items: list[ClusterOut]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page; null: last")


@router.get("/clusters", response={200: ClustersOut, **ERRORS})
def list_clusters(request: HttpRequest) -> dict[str, Any]:
    """The clusters copies can be placed on, with their machines and GPUs, filtered as the list
    page is: ?kind=, ?q= (in the name or description); ?sort= (name, kind, gpus; "-" first
    reverses), ?limit= (1 to 200, 50) and ?cursor=."""
    filters = ClusterFilter(request.GET)
    page = filters.page(filters.strictly(with_machines(with_counts(Cluster.objects))))
    return {"items": [cluster_out(c) for c in page.rows], "next_cursor": page.next_cursor}


def cluster_or_404(clusters: QuerySet[Cluster]) -> Cluster:
    cluster = clusters.first()
    if cluster is None:
        raise Http404("No such cluster.")
    return cluster


@router.get("/clusters/{int:id}", response={200: ClusterRoomOut, **ERRORS})
def show_cluster(request: HttpRequest, id: int) -> dict[str, Any]:
    """One cluster as the list shows it, with `free`: the room on each machine's GPUs now, as
    a fit check sees it (reservations of every team, by size only)."""
    # The snapshot prefetches the machines' GPUs its own way: give it a cluster without ours.
    free = free_room(cluster_or_404(Cluster.objects.filter(pk=id)))
    cluster = cluster_or_404(with_machines(with_counts(Cluster.objects.filter(pk=id))))
    return {**cluster_out(cluster), "free": free}
