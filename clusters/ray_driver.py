"""The driver process of a Ray cluster (clusters/backends/ray/driver.py), which the watcher
holding the cluster's lock starts, restarts when it dies, and stops when it lets the lock go:
one per Ray cluster, whatever the number of console processes."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

from clusters.backends.ray.backend import DRIVER_SOCKET, namespace_of
from clusters.backends.ray.dashboard import token_env
from clusters.models import Cluster, ClusterKind
from clusters.registry import install_id, state_dir

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def start_if_ray(cluster_id: int) -> subprocess.Popen[bytes] | None:
    """The driver of the cluster when it is a Ray cluster (None for any other kind)."""
    cluster = Cluster.objects.filter(pk=cluster_id, kind=ClusterKind.RAY).first()
    if cluster is None:
        return None
    folder = state_dir(cluster)
    folder.mkdir(parents=True, exist_ok=True)
    socket = folder / DRIVER_SOCKET
    socket.unlink(missing_ok=True)  # one a dead driver left: the backend waits for the new one
    env = {
        **os.environ,
        "RAY_USAGE_STATS_ENABLED": "0",
        "BERTH_RAY_NAMESPACE": namespace_of(install_id()),
        **token_env(cluster.ray_token()),
    }
    argv = [sys.executable, "-m", "clusters.backends.ray.driver", "serve", cluster.address]
    with open(folder / "ray-driver.log", "ab") as log:
        return subprocess.Popen(
            [*argv, str(socket)], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=PROJECT_ROOT
        )


def stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(10)
        return
    process.kill()
    process.wait()
