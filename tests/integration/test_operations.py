"""Scale, stop, start and delete on the simulator, and faults in the console's own processes.

After every step, the room held (Reservation rows) is exactly the room of the placed copies, and
those are the copies whose engines really run.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db.models import Sum

from clusters.backends.local import LocalProcessBackend
from clusters.backends.simulator import discover_inventory
from clusters.inventory import apply_discovery
from clusters.models import Cluster
from deployments import actions, watcher
from deployments.choices import CopyState, DeploymentState
from deployments.models import Copy, Deployment, Event, Reservation
from tests.integration.test_lifecycle import host, reached, simulated_cluster
from tests.processes import console_processes, wait_for, wait_for_a_pass_begun_now

pytestmark = pytest.mark.django_db(transaction=True)
SETTINGS = {"max_model_len": 4096}
HOLDING = [CopyState.COPYING_FILES, CopyState.STARTING, CopyState.READY, CopyState.STOPPING]


@pytest.fixture
def catalog(db):
    call_command("load_catalog")


def reservations_match_placed_copies() -> None:
    held = Reservation.objects.aggregate(total=Sum("reserved_bytes"))["total"] or 0
    placed = 0
    for copy in Copy.objects.filter(state__in=HOLDING):
        gpus = Reservation.objects.filter(copy=copy).count()
        assert gpus >= 1, f"{copy} holds no room"
        placed += copy.allocated_bytes * gpus
    assert held == placed
    assert not Reservation.objects.exclude(copy__state__in=HOLDING).exists()


def room_matches_running_engines(state_dir: Path) -> None:
    """The room held is the room of the placed copies, and those are what really runs: every
    copy starting or serving has its engine running, and no engine runs for any other copy (a
    stopping one's may still be on its way out)."""
    reservations_match_placed_copies()
    running = {
        record["copy_id"]
        for folder in state_dir.glob("cluster-*")
        for record in LocalProcessBackend(folder, "").live_records()
    }
    with_engine = set(
        Copy.objects.filter(state__in=[CopyState.STARTING, CopyState.READY]).values_list(
            "pk", flat=True
        )
    )
    stopping = set(Copy.objects.filter(state=CopyState.STOPPING).values_list("pk", flat=True))
    assert with_engine <= running <= with_engine | stopping, (running, with_engine, stopping)


def ready_copies(deployment) -> int:
    return Copy.objects.filter(deployment=deployment, state=CopyState.READY).count()


def settled(deployment, state, ready):
    return lambda: (
        Deployment.objects.get(pk=deployment.pk).state == state
        and ready_copies(deployment) == ready
    )


def fresh(deployment) -> Deployment:
    return Deployment.objects.get(pk=deployment.pk)


def test_scale_stop_start_and_delete_keep_reservations_exact(tmp_path, catalog, bob, red):
    cluster = simulated_cluster("ops", gpus=4)
    with console_processes(tmp_path):
        deployment = host(bob, red, cluster, "ops", engine_settings=SETTINGS)
        wait_for(settled(deployment, DeploymentState.DEPLOYED, 1), 60, what="1 copy serving")
        room_matches_running_engines(tmp_path)

        actions.scale(bob, fresh(deployment), 3)
        wait_for(settled(deployment, DeploymentState.DEPLOYED, 3), 60, what="3 copies serving")
        room_matches_running_engines(tmp_path)

        first_ready = set(
            Copy.objects.filter(deployment=deployment, ordinal__lt=1).values_list("pk", flat=True)
        )
        actions.scale(bob, fresh(deployment), 1)
        # Down to one copy, and that one serving: the survivor is awaited READY rather than read
        # at the instant the others stopped (a full run on 2 cores once saw it in another state).
        wait_for(
            lambda: (
                list(
                    Copy.objects.filter(deployment=deployment)
                    .exclude(state=CopyState.STOPPED)
                    .values_list("state", flat=True)
                )
                == [CopyState.READY]
            ),
            60,
            what="scaled down to 1 serving",
        )
        kept = set(
            Copy.objects.filter(deployment=deployment, state=CopyState.READY).values_list(
                "pk", flat=True
            )
        )
        assert kept == first_ready  # the newest stopped, the oldest kept serving
        room_matches_running_engines(tmp_path)

        actions.scale(bob, fresh(deployment), 1, "0.5")
        wait_for(
            lambda: (
                Copy.objects.filter(
                    deployment=deployment, generation=2, state=CopyState.READY
                ).exists()
                and not Copy.objects.filter(deployment=deployment, generation=1)
                .exclude(state=CopyState.STOPPED)
                .exists()
            ),
            60,
            what="the new size replacing the old",
        )
        wait_for(
            settled(deployment, DeploymentState.DEPLOYED, 1), 60, what="DEPLOYED at the new size"
        )
        assert Copy.objects.get(
            deployment=deployment, state=CopyState.READY
        ).gpu_memory_utilization == pytest.approx(0.4)
        room_matches_running_engines(tmp_path)

        actions.stop(bob, fresh(deployment))
        wait_for(reached(deployment, DeploymentState.STOPPED), 60, what="STOPPED")
        assert not Reservation.objects.exists()
        assert (
            not Copy.objects.filter(deployment=deployment).exclude(state=CopyState.STOPPED).exists()
        )

        actions.start(bob, fresh(deployment))
        wait_for(settled(deployment, DeploymentState.DEPLOYED, 1), 60, what="DEPLOYED again")
        room_matches_running_engines(tmp_path)

        actions.delete(bob, fresh(deployment))
        wait_for(
            lambda: not Deployment.objects.filter(pk=deployment.pk).exists(), 60, what="deleted"
        )
        assert not Reservation.objects.exists()
        assert Event.objects.filter(deployment_name="ops", message="Delete").exists()


def test_a_worker_killed_mid_launch_leaves_no_duplicate_and_no_leak(tmp_path, catalog, bob, red):
    cluster = simulated_cluster("kill", gpus=2, BERTH_SIM_LOAD_S_PER_GB="2")
    with console_processes(tmp_path) as processes:
        deployment = host(bob, red, cluster, "killed", copies=2, engine_settings=SETTINGS)
        wait_for(
            lambda: Copy.objects.filter(deployment=deployment, state__in=HOLDING).exists(),
            30,
            what="a copy being placed",
        )
        processes.kill("worker", signal.SIGKILL)
        processes.start("worker")
        wait_for(
            settled(deployment, DeploymentState.DEPLOYED, 2), 120, what="DEPLOYED after the kill"
        )
        assert Copy.objects.filter(deployment=deployment).count() == 2
        room_matches_running_engines(tmp_path)


def test_a_restarted_watcher_re_adopts_running_copies(tmp_path, catalog, bob, red):
    cluster = simulated_cluster("adopt")
    with console_processes(tmp_path) as processes:
        deployment = host(bob, red, cluster, "adopted", engine_settings=SETTINGS)
        wait_for(settled(deployment, DeploymentState.DEPLOYED, 1), 60, what="DEPLOYED")
        copy = Copy.objects.get(deployment=deployment)
        processes.kill("watcher", signal.SIGKILL)
        processes.start("watcher")
        wait_for(
            lambda: processes.log("watcher").count("Watching clusters.") == 2,
            30,
            what="the second watcher to start",
        )
        # A whole look of the new watcher at the cluster, begun after it started: a copy it
        # took for gone would be failed and launched again by now.
        wait_for_a_pass_begun_now(
            watcher.look_pass(cluster.pk), 30, what="a look of the new watcher"
        )
        again = Copy.objects.get(pk=copy.pk)
        assert (again.state, again.process_id, again.attempts) == (
            CopyState.READY,
            copy.process_id,
            1,
        )
        assert fresh(deployment).state == DeploymentState.DEPLOYED


def test_a_lost_machine_sends_its_copies_elsewhere(tmp_path, catalog, bob, red):
    cluster = simulated_cluster("lose", gpus=1)
    machines = list(cluster.simulated_inventory["machines"])
    second = {
        **machines[0],
        "name": "lose-2",
        "accelerators": [{**machines[0]["accelerators"][0], "uuid": "GPU-lose-2-0"}],
    }
    with console_processes(tmp_path):
        deployment = host(bob, red, cluster, "movable", engine_settings=SETTINGS)
        wait_for(settled(deployment, DeploymentState.DEPLOYED, 1), 60, what="DEPLOYED")
        inventory = {**cluster.simulated_inventory, "machines": [second]}
        Cluster.objects.filter(pk=cluster.pk).update(simulated_inventory=inventory)
        apply_discovery(Cluster.objects.get(pk=cluster.pk), discover_inventory(inventory))
        wait_for(
            lambda: Copy.objects.filter(
                deployment=deployment, state=CopyState.READY, machine__name="lose-2"
            ).exists(),
            90,
            what="the copy serving on the other machine",
        )
        room_matches_running_engines(tmp_path)


def restart_embedded_redis() -> None:
    """Kill the embedded Redis (make test starts one under var/) and start it again."""
    from console import services

    port = services.load_state()["redis_port"]
    pid = int((services.REDIS_DIR / "redis.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not services.port_open(port), 10, what="Redis to go down")
    services.start_redis(port, services.generated_keys()[services.REDIS_PASSWORD])


@pytest.mark.alone
def test_a_redis_restart_in_the_middle_converges(tmp_path, catalog, bob, red):
    cluster = simulated_cluster("redis")
    with console_processes(tmp_path):
        deployment = host(bob, red, cluster, "survives", engine_settings=SETTINGS)
        restart_embedded_redis()
        wait_for(
            settled(deployment, DeploymentState.DEPLOYED, 1), 120, what="DEPLOYED after the restart"
        )
        room_matches_running_engines(tmp_path)
