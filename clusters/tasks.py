"""Celery tasks of clusters: refreshing what a cluster has (ids only, idempotent)."""

from __future__ import annotations

from celery import shared_task

from clusters.inventory import refresh
from clusters.models import Cluster


@shared_task(acks_late=True)
def refresh_inventory(cluster_id: int) -> None:
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is not None:
        refresh(cluster)


@shared_task(acks_late=True)
def refresh_all_inventories() -> None:
    for cluster in Cluster.objects.all():
        refresh(cluster)
