"""Cluster pages: the list and a cluster's machines and accelerators."""

from __future__ import annotations

from django.db.models import Count, Prefetch, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from clusters.models import Accelerator, Cluster, Machine


def cluster_list(request: HttpRequest) -> HttpResponse:
    clusters = Cluster.objects.annotate(
        machine_count=Count("machines", distinct=True),
        gpu_count=Count(
            "machines__accelerators",
            filter=Q(machines__accelerators__parent__isnull=True),
            distinct=True,
        ),
    )
    return render(request, "clusters/list.html", {"clusters": clusters})


def cluster_detail(request: HttpRequest, pk: int) -> HttpResponse:
    gpus = Accelerator.objects.filter(parent__isnull=True).prefetch_related("slices")
    machines = Machine.objects.prefetch_related(
        Prefetch("accelerators", queryset=gpus, to_attr="gpus")
    )
    cluster = get_object_or_404(
        Cluster.objects.prefetch_related(Prefetch("machines", queryset=machines)), pk=pk
    )
    return render(request, "clusters/detail.html", {"cluster": cluster})
