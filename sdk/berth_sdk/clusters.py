"""client.clusters: where copies can be placed, and the free room on each machine and GPU."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

from berth_sdk import _calls as calls
from berth_sdk._calls import ClusterRef
from berth_sdk._http import AsyncTransport, Transport
from berth_sdk._paging import async_pages, pages
from berth_sdk.results import Cluster


class Clusters:
    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    def list(
        self, search: str | None = None, *, kind: str | None = None, sort: str | None = None
    ) -> Iterator[Cluster]:
        """Every cluster (search: in the name or description; kind: simulator, standalone,
        kubernetes; sort: name, kind, gpus, "-" first reverses), page after page."""
        request = calls.clusters({"q": search, "kind": kind, "sort": sort})
        return pages(self._transport, request, Cluster.from_api)

    def get(self, cluster: ClusterRef) -> Cluster:
        """One cluster by id or name, with `free`: the room left on each machine and GPU."""
        pk = self.id_of(cluster)
        return Cluster.from_api(self._transport.send(calls.cluster_by_id(pk)))

    def id_of(self, cluster: ClusterRef) -> int:
        if isinstance(cluster, Cluster):
            return cluster.id
        if isinstance(cluster, int):
            return cluster
        return calls.picked_cluster_id(cluster, self._transport.send(calls.cluster_named(cluster)))


class AsyncClusters:
    def __init__(self, transport: AsyncTransport) -> None:
        self._transport = transport

    def list(
        self, search: str | None = None, *, kind: str | None = None, sort: str | None = None
    ) -> AsyncIterator[Cluster]:
        """Every cluster (search: in the name or description; kind: simulator, standalone,
        kubernetes; sort: name, kind, gpus, "-" first reverses), page after page."""
        request = calls.clusters({"q": search, "kind": kind, "sort": sort})
        return async_pages(self._transport, request, Cluster.from_api)

    async def get(self, cluster: ClusterRef) -> Cluster:
        """One cluster by id or name, with `free`: the room left on each machine and GPU."""
        pk = await self.id_of(cluster)
        return Cluster.from_api(await self._transport.send(calls.cluster_by_id(pk)))

    async def id_of(self, cluster: ClusterRef) -> int:
        if isinstance(cluster, Cluster):
            return cluster.id
        if isinstance(cluster, int):
            return cluster
        answer = await self._transport.send(calls.cluster_named(cluster))
        return calls.picked_cluster_id(cluster, answer)
