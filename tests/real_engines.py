"""What the real-engine tests share: this machine as the standalone cluster `local`, the tiny
model written and registered by `make_tiny_model`, and hosting through the REST API."""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from django.core.management import call_command

from clusters.inventory import apply_discovery
from clusters.models import Cluster, ClusterKind, SharingStrategy, Topology
from clusters.registry import backend_for
from deployments.models import Deployment

TINY = "berth/tiny-llama"
# A quarter of this machine's CPU budget: room for the tiny model and a few GiB of KV cache,
# without committing most of the machine's memory to one engine.
SHARE = "0.25"


def local_cluster(name: str = "local") -> Cluster:
    """This machine as a standalone cluster, discovered for real (it has no NVIDIA devices)."""
    cluster = Cluster.objects.create(
        name=name,
        kind=ClusterKind.STANDALONE,
        topology=Topology.STANDALONE,
        sharing_strategy=SharingStrategy.FRACTIONAL,
    )
    apply_discovery(cluster, backend_for(cluster).discover())
    return cluster


@contextmanager
def engine_readable_folder() -> Iterator[Path]:
    """A folder for models and engines' homes outside /tmp/pytest-of-<user>: a pytest run
    started meanwhile (a developer's, beside CI) sets that folder back to 0700, and the
    engine's own user could no longer enter it."""
    folder = Path(tempfile.mkdtemp(prefix="berth-test-models-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def tiny_model(models_dir: Path, settings) -> None:
    settings.MODELS_DIR = models_dir
    call_command("make_tiny_model")


def host_through_the_api(
    console_url: str, key: str, name: str, variant: str, size: str | None = SHARE, **fields
) -> int:
    """Host the tiny model's variant on `local`; a size of None leaves it to Berth."""
    body = {"model": TINY, "variant": variant, "cluster": "local", "name": name, **fields}
    if size is not None:
        body["accelerators_per_copy"] = size
    answer = httpx.post(
        f"{console_url}/api/v1/deployments",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert answer.status_code == 202, answer.text
    return int(answer.json()["id"])


def state_of(pk: int) -> str:
    return str(Deployment.objects.get(pk=pk).state)


def port_is_free(port: int) -> bool:
    """Nothing listens on the port, so a new engine can (as every server does, with
    SO_REUSEADDR: the gateway's closed connections may linger in TIME_WAIT for a minute)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
            probe.listen()
        except OSError:
            return False
    return True
