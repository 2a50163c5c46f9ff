"""The clusters list's filters and orders: its page and GET /api/v1/clusters read them alike."""

from __future__ import annotations

from django import forms
from django.db.models import Q, QuerySet

from clusters.models import Cluster, ClusterKind
from console.lists import ListFilter, both_ways


class ClusterFilter(ListFilter):
    list_name = "clusters"
    orders = (
        *both_ways("name", "Name", ("name", "pk")),
        *both_ways("kind", "Kind", ("kind", "name", "pk")),
        *both_ways("gpus", "GPUs", ("gpu_count", "name", "pk")),
    )

    kind = forms.ChoiceField(required=False, choices=[("", "any"), *ClusterKind.choices])
    q = forms.CharField(required=False, max_length=100)

    def filter_kind(self, rows: QuerySet[Cluster], kind: str) -> QuerySet[Cluster]:
        return rows.filter(kind=kind)

    def filter_q(self, rows: QuerySet[Cluster], query: str) -> QuerySet[Cluster]:
        return rows.filter(Q(name__icontains=query) | Q(description__icontains=query))
