"""The clusters API: where copies can be placed, with machines and GPUs (never credentials)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Prefetch
from django.http import HttpRequest
from ninja import Field, Router, Schema

from clusters.forms import ClusterFilter
from clusters.models import Accelerator, Cluster, Machine, with_counts
from console.api_schema import ERRORS
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
    gpu_count: int
    gpu_memory_gb: float = Field(description="all its GPUs together")
    gpus: list[GpuOut]


class ClusterOut(Schema):
    name: str
    description: str
    kind: str
    topology: str
    state: str
    sharing_strategy: str | None
    notices: list[str]
    last_seen: datetime | None
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
    gpus = list(machine.gpus)  # type: ignore[attr-defined]
    return {
        "name": machine.name,
        "ready": machine.ready,
        "gpu_count": len(gpus),
        "gpu_memory_gb": in_gib(sum(gpu.memory_bytes for gpu in gpus)),
        "gpus": [gpu_out(gpu) for gpu in gpus],
    }


def cluster_out(cluster: Cluster) -> dict[str, Any]:
    # Only what an operator needs to choose a cluster: never its kubeconfig or other credentials.
    return {
        "name": cluster.name,
        "description": cluster.description,
        "kind": cluster.kind,
        "topology": cluster.topology,
        "state": cluster.state,
        "sharing_strategy": cluster.sharing_strategy or None,
        "notices": cluster.notices,
        "last_seen": cluster.last_seen,
        "machines": [machine_out(machine) for machine in cluster.machines.all()],
    }


class ClustersOut(Schema):
    items: list[ClusterOut]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page; null: last")


@router.get("/clusters", response={200: ClustersOut, **ERRORS})
def list_clusters(request: HttpRequest) -> dict[str, Any]:
    """The clusters copies can be placed on, with their machines and GPUs, filtered as the list
    page is: ?kind=, ?q= (in the name or description); ?sort= (name, kind, gpus; "-" first
    reverses), ?limit= (1 to 200, 50) and ?cursor=."""
    # Only what discovery still reports: placement ignores the rest (deployments/snapshot.py).
    gpus = Accelerator.objects.present_gpus().prefetch_related(
        Prefetch("slices", queryset=Accelerator.objects.present())
    )
    machines = Machine.objects.prefetch_related(
        Prefetch("accelerators", queryset=gpus, to_attr="gpus")
    )
    clusters = with_counts(Cluster.objects).prefetch_related(
        Prefetch("machines", queryset=machines)
    )
    filters = ClusterFilter(request.GET)
    page = filters.page(filters.strictly(clusters))
    return {"items": [cluster_out(c) for c in page.rows], "next_cursor": page.next_cursor}
