"""Host → DEPLOYED on the simulator, with the real worker, beat and watcher; placement outcomes."""

from __future__ import annotations

import time

import pytest
from django.core.management import call_command

from catalog.models import Model, ServerModel
from clusters.backends.simulator import discover_inventory
from clusters.inventory import apply_discovery
from clusters.models import Cluster
from deployments import actions
from deployments.choices import CopyState, DeploymentState
from deployments.models import Copy, Deployment, Event, Reservation
from tests.processes import console_processes, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
H100 = {
    "vendor": "nvidia",
    "product": "NVIDIA-H100-80GB-HBM3",
    "memory_mib": 81559,
    "compute_capability": "9.0",
    "driver": "550.90.07",
    "cuda": "12.4",
}
FAST_ENGINE = {"BERTH_SIM_LOAD_S_PER_GB": "0.05", "BERTH_SIM_INIT_S": "0.1"}


def simulated_cluster(name: str, gpus: int = 2, **engine_env: str) -> Cluster:
    machines = [
        {
            "name": f"{name}-1",
            "cpus": 32,
            "system_memory_gib": 256,
            "accelerators": [{**H100, "index": i, "uuid": f"GPU-{name}-{i}"} for i in range(gpus)],
        }
    ]
    cluster = Cluster.objects.create(
        name=name,
        kind="simulator",
        sharing_strategy="fractional",
        simulated_inventory={"machines": machines, "engine_env": {**FAST_ENGINE, **engine_env}},
    )
    apply_discovery(cluster, discover_inventory({"machines": machines}))
    return cluster


@pytest.fixture
def catalog(db):
    call_command("load_catalog")


@pytest.fixture
def running(tmp_path, catalog):
    with console_processes(tmp_path) as processes:
        yield processes


def on_this_server(variant) -> None:
    """The variant's files are kept here already (downloads are tested on their own)."""
    ServerModel.objects.get_or_create(
        variant=variant,
        revision="main",
        defaults={
            "state": "ready",
            "size_bytes": variant.size_bytes,
            "path": f"/models/{variant.pk}",
        },
    )


def host(actor, team, cluster, name, repo="Qwen/Qwen3-0.6B", variant="bf16", **fields):
    model = Model.objects.get(repo_id=repo)
    on_this_server(model.variants.get(name=variant))
    request = actions.HostRequest(
        team=team,
        model=model,
        variant=model.variants.get(name=variant),
        cluster=cluster,
        name=name,
        **fields,
    )
    return actions.host(actor, request)


def state_of(deployment) -> str:
    return Deployment.objects.get(pk=deployment.pk).state


def reached(deployment, state):
    return lambda: state_of(deployment) == state


def test_host_goes_through_deploying_and_initializing_to_deployed(running, bob, red):
    cluster = simulated_cluster("sim")
    deployment = host(bob, red, cluster, "tiny", engine_settings={"max_model_len": 4096})
    assert deployment.state == DeploymentState.REQUESTED  # Host returns at once
    wait_for(reached(deployment, DeploymentState.DEPLOYED), 90, what="DEPLOYED")
    states = list(
        Event.objects.filter(deployment=deployment, copy=None, kind="state_change")
        .order_by("id")
        .values_list("to_state", flat=True)
    )
    assert states == ["DEPLOYING", "INITIALIZING", "DEPLOYED"]
    copy = Copy.objects.get(deployment=deployment)
    assert copy.state == CopyState.READY and copy.attempts == 1 and copy.port
    assert Deployment.objects.get(pk=deployment.pk).last_message == "The copy serves."


def test_the_engine_saying_it_serves_makes_the_copy_ready_without_waiting_for_the_look(
    tmp_path, catalog, bob, red
):
    # The watcher asks for health once a minute here: only the engine's own start-up line
    # ("Application startup complete.") can bring the copy to READY within 30 s.
    cluster = simulated_cluster("sim-line", BERTH_SIM_LOAD_S_PER_GB="0", BERTH_SIM_INIT_S="0")
    with console_processes(tmp_path, BERTH_WATCH_EVERY_S="60"):
        time.sleep(3)  # past the watcher's first look at the cluster, which finds nothing yet
        deployment = host(bob, red, cluster, "prompt", engine_settings={"max_model_len": 4096})
        wait_for(reached(deployment, DeploymentState.DEPLOYED), 30, what="DEPLOYED")
    copy = Copy.objects.get(deployment=deployment)
    assert copy.state == CopyState.READY


def test_two_half_copies_land_on_one_gpu_and_start_one_after_the_other(running, bob, red):
    cluster = simulated_cluster("halves", gpus=1)
    deployment = host(
        bob,
        red,
        cluster,
        "pair",
        copies=2,
        accelerators_per_copy="0.5",
        engine_settings={"max_model_len": 4096},
    )
    wait_for(reached(deployment, DeploymentState.DEPLOYED), 90, what="DEPLOYED")
    gpus = set(
        Reservation.objects.filter(copy__deployment=deployment).values_list(
            "accelerator_id", flat=True
        )
    )
    assert len(gpus) == 1
    # Either copy may win the race to start; the other starts only once the first serves.
    starts = list(
        Event.objects.filter(copy__deployment=deployment, to_state="STARTING").order_by("at")
    )
    assert len(starts) == 2
    first_ready = Event.objects.get(copy=starts[0].copy, to_state="READY").at
    assert starts[1].at >= first_ready


def test_a_model_too_big_for_any_gpu_fails_at_once_with_no_process(running, bob, red):
    cluster = simulated_cluster("small")
    deployment = host(bob, red, cluster, "huge", repo="deepseek-ai/DeepSeek-V3", variant="fp8")
    wait_for(reached(deployment, DeploymentState.FAILED), 30, what="FAILED")
    failed = Deployment.objects.get(pk=deployment.pk)
    assert failed.last_error_code == "NoFitError"
    assert not Reservation.objects.exists()
    assert not Copy.objects.exclude(process_id=None).exists()


def test_a_full_cluster_fails_naming_what_holds_the_room_and_extra_copies_wait(running, bob, red):
    cluster = simulated_cluster("busy", gpus=2)
    first = host(bob, red, cluster, "first", copies=2, engine_settings={"max_model_len": 4096})
    wait_for(reached(first, DeploymentState.DEPLOYED), 90, what="first DEPLOYED")
    blocked = host(bob, red, cluster, "blocked", engine_settings={"max_model_len": 4096})
    wait_for(reached(blocked, DeploymentState.FAILED), 30, what="blocked FAILED")
    assert "first holds 2 copies" in Deployment.objects.get(pk=blocked.pk).last_error_message

    actions.stop(bob, Deployment.objects.get(pk=first.pk))
    wait_for(reached(first, DeploymentState.STOPPED), 60, what="first STOPPED")
    assert not Reservation.objects.filter(copy__deployment=first).exists()


def test_three_copies_where_two_fit_degrade_then_recover_when_room_frees(running, bob, red):
    cluster = simulated_cluster("three", gpus=3)
    other = host(bob, red, cluster, "other", engine_settings={"max_model_len": 4096})
    wait_for(reached(other, DeploymentState.DEPLOYED), 90, what="other DEPLOYED")
    trio = host(bob, red, cluster, "trio", copies=3, engine_settings={"max_model_len": 4096})
    wait_for(reached(trio, DeploymentState.DEGRADED), 90, what="trio DEGRADED")
    wait_for(
        lambda: Deployment.objects.get(pk=trio.pk).last_message.startswith(
            "2 of 3 copies serve; 1 waits for room"
        ),
        60,
        what="the DEGRADED message",
    )
    actions.stop(bob, Deployment.objects.get(pk=other.pk))
    wait_for(reached(trio, DeploymentState.DEPLOYED), 90, what="trio DEPLOYED with no action")
