"""Which backend serves a cluster: one instance per cluster per process (they keep log cursors
and, for local engines, the state directory where processes are recorded for re-adoption)."""

from __future__ import annotations

import os
import secrets
import threading
from pathlib import Path
from typing import Any

from django.conf import settings

from clusters.backends.base import ClusterBackend
from clusters.backends.engines import EnginePrograms
from clusters.models import Cluster, ClusterKind
from placement import GIB

_backends: dict[tuple[int, str], Any] = {}
_lock = threading.Lock()


def state_dir(cluster: Cluster) -> Path:
    return Path(settings.STATE_DIR) / f"cluster-{cluster.pk}"


def install_id() -> str:
    """This install's id, generated once into the state folder (var/state/install-id). Every
    engine it launches carries it, so that the sweep of engines no copy owns never touches an
    engine another install (a second console, a test run) started."""
    path = Path(settings.STATE_DIR) / "install-id"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        written = path.with_name(f"install-id.{os.getpid()}.{threading.get_ident()}.tmp")
        written.write_text(secrets.token_hex(8) + "\n")
        try:  # a link never replaces: of two processes starting at once, the first one's id wins
            os.link(written, path)
        except FileExistsError:
            pass
        finally:
            written.unlink()
    return path.read_text().strip()


def engine_programs() -> EnginePrograms:
    """Where this machine's real engines are, by the settings (BERTH_ENGINE_CACHE, *_BIN)."""
    return EnginePrograms(settings.ENGINE_CACHE_DIR, settings.VLLM_BIN, settings.LLAMA_SERVER_BIN)


def make_backend(cluster: Cluster) -> ClusterBackend:
    if cluster.kind == ClusterKind.SIMULATOR:
        from clusters.backends.simulator import SimulatorBackend

        return SimulatorBackend(
            cluster.simulated_inventory or {},
            state_dir(cluster),
            copy_bytes_per_second=settings.SIMULATOR_COPY_BYTES_PER_S,
            engine_sockets=True,
        )
    if cluster.kind == ClusterKind.STANDALONE:
        from clusters.backends.standalone import StandaloneBackend

        reserve = int(settings.CPU_RESERVE_GIB * GIB)
        return StandaloneBackend(
            state_dir(cluster),
            programs=engine_programs(),
            cpu_reserve_bytes=reserve,
            engine_sockets=True,  # only the console and the gateway reach an engine
        )
    if cluster.kind == ClusterKind.RAY:
        from clusters.backends.ray.backend import RayBackend, RayCluster

        return RayBackend(
            RayCluster(
                cluster.address,
                cluster.dashboard_url,
                cluster.gpu_memory_gib or {},
                state_dir(cluster),
                cluster.simulated_engines,
                cluster.ray_token(),
            )
        )
    from clusters.backends.kubernetes import KubernetesBackend

    image = f"{cluster.engine_image}:{cluster.engine_version or 'latest'}"
    return KubernetesBackend(cluster.kubeconfig(), cluster.namespace, image)  # type: ignore[return-value]


def backend_for(cluster: Cluster) -> ClusterBackend:
    """The cluster's backend, made once per process and per version of the cluster's data."""
    key = (
        cluster.pk,
        repr(cluster.simulated_inventory)
        + cluster.kubeconfig_encrypted
        + cluster.address
        + cluster.dashboard_url
        + str(cluster.simulated_engines)
        + cluster.ray_token_encrypted
        + repr(cluster.gpu_memory_gib),
    )
    with _lock:
        if key not in _backends:
            _backends[key] = make_backend(cluster)
        return _backends[key]  # type: ignore[no-any-return]
