"""Ray clusters: Berth places, Ray runs. This part reads a Ray cluster through its dashboard's
HTTP API with Ray's own client (ray.util.state): the versions, and the nodes with their GPUs.
Ray is an optional extra (berth[ray]); without it, asking for a Ray cluster says how to
install it."""

from __future__ import annotations

from clusters.backends.ray.dashboard import (
    RayCheck,
    RayNotInstalled,
    check_cluster,
    discover,
    parse_gpu_memory,
)

__all__ = ["RayCheck", "RayNotInstalled", "check_cluster", "discover", "parse_gpu_memory"]
