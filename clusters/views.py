"""Cluster pages: the list, and a cluster's machines, accelerators and who holds their room."""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from clusters.backends import isolation
from clusters.forms import ClusterFilter
from clusters.models import (
    Accelerator,
    Cluster,
    ClusterKind,
    Machine,
    RepackPolicy,
    Vendor,
    with_counts,
)
from console.lists import headings, pager
from deployments import room
from deployments.models import Reservation
from deployments.snapshot import inventory_for
from placement.repack import fragmentation
from placement.words import gib, plural

LOCAL_KINDS = {ClusterKind.STANDALONE, ClusterKind.SIMULATOR}
NOTICE_WORDS = {
    "SharingNotConfigured": (
        "GPUs are not shared: this cluster runs a GPU operator without a sharing strategy, so a "
        "copy smaller than one GPU still takes a whole one. Enable time-slicing, MPS or MIG on "
        "the cluster, then set its sharing strategy here."
    ),
    "DriverNotWorking": (
        "This machine has NVIDIA devices, but their driver does not answer, so it offers no GPU "
        "(and is not used as a CPU machine instead). Reload the NVIDIA driver until nvidia-smi "
        "answers, then refresh the cluster."
    ),
    "PartialDiscovery": (
        "Some machines did not report their GPUs fully (labels missing), so they receive no "
        "copies. Check that GPU Feature Discovery runs on every GPU node."
    ),
}


# The headings of the list's table (templates/partials/list_table.html), each with the order
# it sorts by (ClusterFilter.orders), or none.
CLUSTER_COLUMNS = (
    ("Name", "name"),
    ("Kind", "kind"),
    ("State", ""),
    ("Machines", ""),
    ("Hardware", "gpus"),
    ("Sharing", ""),
)


def cluster_list(request: HttpRequest) -> HttpResponse:
    filters = ClusterFilter(request.GET)
    shown, cursor_error = filters.page_leniently(filters.apply(with_counts(Cluster.objects)))
    for row in shown.rows:
        row.hardware = hardware_words(row)  # type: ignore[attr-defined]
    context = {
        "clusters": shown.rows,
        "columns": headings(CLUSTER_COLUMNS, filters, request.GET),
        **pager(shown, cursor_error, request.GET),
    }
    return render(request, "clusters/list.html", context)


def hardware_words(cluster: Cluster) -> str:
    """What a cluster (annotated by with_counts) offers, in words: its GPUs, and its CPU
    machines by cores and the memory they give engines, never a CPU counted as a GPU:
    "8 GPUs", "1 CPU machine · 16 cores · 24.00 GiB for engines"."""
    parts = []
    if cluster.gpu_count or not cluster.cpu_machine_count:
        parts.append(plural(cluster.gpu_count, "GPU", "GPUs"))
    if cluster.cpu_machine_count:
        parts += [
            plural(cluster.cpu_machine_count, "CPU machine", "CPU machines"),
            plural(cluster.cpu_cores, "core", "cores"),
            f"{gib(cluster.cpu_memory_bytes)} for engines",
        ]
    return " · ".join(parts)


def cluster_detail(request: HttpRequest, pk: int) -> HttpResponse:
    gpus = Accelerator.objects.filter(parent__isnull=True).prefetch_related("slices")
    machines = Machine.objects.prefetch_related(
        Prefetch("accelerators", queryset=gpus, to_attr="gpus")
    )
    cluster = get_object_or_404(
        with_counts(Cluster.objects).prefetch_related(Prefetch("machines", queryset=machines)),
        pk=pk,
    )
    held = room.holders_by_accelerator(
        request.user, Reservation.objects.filter(machine__cluster=cluster)
    )
    for machine in cluster.machines.all():
        for gpu in machine.gpus:
            room.annotate_room(gpu, held)
    notices: list[Any] = [NOTICE_WORDS.get(n, n) for n in cluster.notices]
    if cluster.kind in LOCAL_KINDS:  # engines on this machine: how far they are fenced in
        notices += isolation.status_words()
    context = {
        "cluster": cluster,
        "notices": notices,
        "hardware": hardware_words(cluster),
        "free_room": free_room_words(cluster),
        "repack_words": repack_words(cluster),
    }
    return render(request, "clusters/detail.html", context)


def repack_words(cluster: Cluster) -> str:
    """The cluster's re-packing policy, and when it consolidates."""
    words = f"Re-packing: {cluster.get_repack_policy_display()}"
    if cluster.repack_policy != RepackPolicy.CONSOLIDATE:
        return words
    window = cluster.consolidate_window or "any time"
    return (
        f"{words} ({window}, above {cluster.consolidate_above_percent}% in pieces, below "
        f"{cluster.consolidate_below_load} requests in flight per copy)"
    )


def free_room_words(cluster: Cluster) -> list[str]:
    """How the free room lies, per GPU product: in all, the most on one GPU, and the share in
    pieces (on GPUs some copy already uses): what consolidation would gather. A CPU's room
    lies on its machine, and is said so."""
    cpus = set(
        Accelerator.objects.present()
        .filter(machine__cluster=cluster, vendor=Vendor.CPU)
        .values_list("product", flat=True)
    )
    words = []
    # Read afresh: the page's cluster has its machines prefetched another way.
    for row in fragmentation(inventory_for(Cluster.objects.get(pk=cluster.pk))):
        unit = "CPU machine" if row.product in cpus else "GPU"
        words.append(
            f"{row.product}: {gib(row.free_bytes)} free, at most {gib(row.largest_free_bytes)} "
            f"on one {unit}; {row.percent}% of the free room lies in pieces (on {unit}s some "
            "copy uses)."
        )
    return words
