"""Transfers have their own queue and worker: two slow downloads are still running when a host,
a scale and a stop have each completed (by order of events, not by time; with the control
tasks on the same two worker slots as the downloads, the host waited for them to end)."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from catalog import downloads
from catalog.models import ServerModel
from deployments import actions
from deployments.choices import DeploymentState
from deployments.models import Deployment
from tests.hub import running_hub, safetensors_repo
from tests.integration.test_downloads import variant_of
from tests.integration.test_lifecycle import host, reached, simulated_cluster
from tests.processes import console_processes, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
SETTINGS = {"max_model_len": 4096}


@pytest.fixture
def catalog(db):
    call_command("load_catalog")


def downloading(rows) -> bool:
    states = set(
        ServerModel.objects.filter(pk__in=[r.pk for r in rows]).values_list("state", flat=True)
    )
    return states == {"downloading"}


def test_slow_downloads_do_not_hold_up_host_scale_and_stop(tmp_path, catalog, bob, red):
    with running_hub() as hub:
        hub.rate = 50_000  # bytes a second per file: each download takes about a minute
        for name in ("acme/slow-a", "acme/slow-b"):
            hub.add(safetensors_repo(name, megabytes=3))
        env = {"HF_ENDPOINT": hub.url, "BERTH_MODELS_DIR": str(tmp_path / "models")}
        with console_processes(tmp_path, **env):
            rows = [
                downloads.request_download(variant_of(name), "", red, bob)
                for name in ("acme/slow-a", "acme/slow-b")
            ]
            wait_for(lambda: downloading(rows), 30, what="both downloads running")
            cluster = simulated_cluster("busy", gpus=2)
            deployment = host(bob, red, cluster, "quick", engine_settings=SETTINGS)
            wait_for(reached(deployment, DeploymentState.DEPLOYED), 60, what="DEPLOYED")
            assert downloading(rows)
            actions.scale(bob, Deployment.objects.get(pk=deployment.pk), 2)
            wait_for(
                lambda: (
                    Deployment.objects.get(pk=deployment.pk).copies.filter(state="READY").count()
                    == 2
                ),
                60,
                what="two copies serving",
            )
            assert downloading(rows)
            actions.stop(bob, Deployment.objects.get(pk=deployment.pk))
            wait_for(reached(deployment, DeploymentState.STOPPED), 60, what="STOPPED")
            assert downloading(rows)
