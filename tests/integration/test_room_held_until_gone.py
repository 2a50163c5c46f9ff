"""Room is given back when a copy's engine is seen gone, not when its stop is asked for: a copy
whose engine takes its time to stop keeps its room meanwhile: a deployment hosted in that window
does not fit and is told who holds the room, and fits once the engine is gone (checked by order
of events, not by time)."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from clusters.backends import supervisor
from deployments import actions
from deployments.choices import DeploymentState
from deployments.models import Copy, Deployment, Reservation
from tests.integration.test_lifecycle import host, reached, simulated_cluster
from tests.processes import console_processes, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
WHOLE_GPU = {"max_model_len": 4096}


@pytest.fixture
def catalog(db):
    call_command("load_catalog")


def alive(pid: int) -> bool:
    """Any process of the engine's group still there (a zombie holds nothing)."""
    return bool(supervisor.group_members(pid))


def test_a_slow_stop_keeps_its_room_until_the_engine_is_gone(tmp_path, catalog, bob, red):
    cluster = simulated_cluster("slow", gpus=1, BERTH_SIM_SHUTDOWN_DELAY_S="6")
    with console_processes(tmp_path):
        first = host(bob, red, cluster, "first", engine_settings=WHOLE_GPU)
        wait_for(reached(first, DeploymentState.DEPLOYED), 60, what="first DEPLOYED")
        pid = Copy.objects.get(deployment=first).process_id
        actions.stop(bob, Deployment.objects.get(pk=first.pk))
        second = host(bob, red, cluster, "second", engine_settings=WHOLE_GPU)
        # While the first engine lives, it keeps its GPU: the second does not fit, and is told
        # who holds the room.
        seen_while_alive = 0
        while alive(pid):
            held = Reservation.objects.filter(copy__deployment=first).exists()
            placed = Reservation.objects.filter(copy__deployment=second).exists()
            if alive(pid):  # still alive after reading: what was read held while it lived
                assert held and not placed
                seen_while_alive += 1
        assert seen_while_alive > 0
        wait_for(reached(second, DeploymentState.FAILED), 60, what="second FAILED")
        refused = Deployment.objects.get(pk=second.pk).last_error_message
        assert "Room is held by: first holds 1 copy" in refused
        wait_for(reached(first, DeploymentState.STOPPED), 60, what="first STOPPED")
        assert not Reservation.objects.filter(copy__deployment=first).exists()
        actions.check_now(bob, Deployment.objects.get(pk=second.pk))  # now it fits
        wait_for(reached(second, DeploymentState.DEPLOYED), 60, what="second DEPLOYED")
