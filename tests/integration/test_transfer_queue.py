"""Transfers have their own queue and worker: two slow downloads and a slow sync are still
running when a host, a scale and a stop have each completed (by order of events, not by time;
with the control tasks on the same two worker slots as the transfers, the host waited for them
to end)."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from catalog import downloads
from catalog.models import Model, ServerModel
from deployments import actions
from deployments.choices import DeploymentState, MachineFilesState
from deployments.models import Deployment, MachineFiles
from tests import factories
from tests.hub import running_hub, safetensors_repo
from tests.integration.test_downloads import variant_of
from tests.integration.test_lifecycle import host, on_this_server, reached, simulated_cluster
from tests.processes import console_processes, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
SETTINGS = {"max_model_len": 4096}
# The simulator copies files at this rate: the small model's in seconds, the big one's (about
# 65 GB) in minutes.
COPY_RATE = str(2**29)


@pytest.fixture
def catalog(db):
    call_command("load_catalog")


def downloading(rows) -> bool:
    states = set(
        ServerModel.objects.filter(pk__in=[r.pk for r in rows]).values_list("state", flat=True)
    )
    return states == {"downloading"}


def start_slow_sync(bob, red):
    """A sync of a big model's files to the one machine of another cluster."""
    far = simulated_cluster("far", gpus=1)
    model = Model.objects.get(repo_id="Qwen/Qwen3-32B")
    big = factories.make_deployment(
        "big", red, cluster=far, model=model, variant=model.variants.get(name="bf16")
    )
    on_this_server(big.variant)
    actions.sync_files(bob, big)
    return far


def syncing(cluster) -> bool:
    return MachineFiles.objects.filter(
        machine__cluster=cluster, state=MachineFilesState.COPYING
    ).exists()


def transfers_running(rows, cluster) -> bool:
    return downloading(rows) and syncing(cluster)


def test_slow_downloads_do_not_hold_up_host_scale_and_stop(tmp_path, catalog, bob, red):
    with running_hub() as hub:
        hub.rate = 50_000  # bytes a second per file: each download takes about a minute
        for name in ("acme/slow-a", "acme/slow-b"):
            hub.add(safetensors_repo(name, megabytes=3))
        env = {
            "HF_ENDPOINT": hub.url,
            "BERTH_MODELS_DIR": str(tmp_path / "models"),
            "BERTH_SIMULATOR_COPY_BYTES_PER_S": COPY_RATE,
        }
        with console_processes(tmp_path, **env):
            rows = [
                downloads.request_download(variant_of(name), "", red, bob)
                for name in ("acme/slow-a", "acme/slow-b")
            ]
            far = start_slow_sync(bob, red)
            wait_for(lambda: transfers_running(rows, far), 30, what="downloads and sync running")
            cluster = simulated_cluster("busy", gpus=2)
            deployment = host(bob, red, cluster, "quick", engine_settings=SETTINGS)
            wait_for(reached(deployment, DeploymentState.DEPLOYED), 60, what="DEPLOYED")
            assert transfers_running(rows, far)
            actions.scale(bob, Deployment.objects.get(pk=deployment.pk), 2)
            wait_for(
                lambda: (
                    Deployment.objects.get(pk=deployment.pk).copies.filter(state="READY").count()
                    == 2
                ),
                60,
                what="two copies serving",
            )
            assert transfers_running(rows, far)
            actions.stop(bob, Deployment.objects.get(pk=deployment.pk))
            wait_for(reached(deployment, DeploymentState.STOPPED), 60, what="STOPPED")
            assert transfers_running(rows, far)
