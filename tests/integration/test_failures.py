"""Failures injected through the engine simulator are classified, retried or failed for good."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from clusters.backends import isolation
from deployments.choices import CopyState, DeploymentState
from deployments.models import Copy, Deployment, LogLine
from tests.integration.test_lifecycle import host, reached, simulated_cluster
from tests.processes import console_processes, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
SETTINGS = {"max_model_len": 4096}


@pytest.fixture
def catalog(db):
    call_command("load_catalog")


def with_engine_env(cluster, name: str, **env: str) -> None:
    inventory = dict(cluster.simulated_inventory)
    inventory["deployments"] = {name: env}
    type(cluster).objects.filter(pk=cluster.pk).update(simulated_inventory=inventory)


def reload(deployment) -> Deployment:
    return Deployment.objects.get(pk=deployment.pk)


def test_oom_at_load_fails_for_good_with_the_engines_line(tmp_path, catalog, bob, red):
    cluster = simulated_cluster("oom")
    with_engine_env(cluster, "ooms", BERTH_SIM_OOM_AT_LOAD="1")
    with console_processes(tmp_path):
        deployment = host(bob, red, cluster, "ooms", engine_settings=SETTINGS)
        wait_for(reached(deployment, DeploymentState.FAILED), 60, what="FAILED")
        failed = reload(deployment)
        assert failed.last_error_code == "OOM"
        assert "CUDA out of memory" in failed.last_error_message
        copy = Copy.objects.get(deployment=deployment)
        assert (
            copy.state == CopyState.FAILED and copy.next_attempt_at is None and copy.attempts == 1
        )
        assert LogLine.objects.filter(deployment=deployment, pattern="oom").exists()


def test_a_crash_after_serving_is_retried_and_serves_again(tmp_path, catalog, bob, red):
    cluster = simulated_cluster("crashy")
    # It exits as soon as it has printed why, as vLLM does: the watcher must still read the why.
    with_engine_env(
        cluster,
        "crashes",
        BERTH_SIM_CRASH_AFTER_S="2",
        BERTH_SIM_FAIL_ATTEMPTS="0",
        BERTH_SIM_DEAD_LINGER_S="0",
    )
    with console_processes(tmp_path):
        deployment = host(bob, red, cluster, "crashes", engine_settings=SETTINGS)
        wait_for(reached(deployment, DeploymentState.DEPLOYED), 60, what="first DEPLOYED")
        wait_for(lambda: Copy.objects.get(deployment=deployment).attempts >= 2, 60, what="a retry")
        # The engine prints vLLM's "RuntimeError: CUDA error: …" before it exits with 1.
        assert reload(deployment).last_error_code == "CUDA_ERROR"
        wait_for(
            lambda: Copy.objects.get(deployment=deployment).state == CopyState.READY,
            60,
            what="READY again",
        )


def test_a_hang_at_start_is_reaped_as_startup_timeout(tmp_path, catalog, bob, red):
    cluster = simulated_cluster("hangs")
    with_engine_env(cluster, "hangs", BERTH_SIM_HANG_AT_START="1")
    with console_processes(
        tmp_path, BERTH_STARTUP_TIMEOUT_BASE_S="3", BERTH_STARTUP_TIMEOUT_PER_GIB_S="0"
    ):
        deployment = host(bob, red, cluster, "hangs", engine_settings=SETTINGS)
        wait_for(
            lambda: reload(deployment).last_error_code == "STARTUP_TIMEOUT",
            60,
            what="STARTUP_TIMEOUT",
        )
        assert "did not become ready within 3 s" in reload(deployment).last_error_message


def test_failing_twice_then_succeeding_ends_deployed_after_three_attempts(
    tmp_path, catalog, bob, red
):
    cluster = simulated_cluster("flaky")
    # The engines run as the team's engine user: the counter lives where that user may write.
    shared = tmp_path / "counted"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    isolation.searchable_by_others(shared)
    with_engine_env(
        cluster,
        "flaky",
        BERTH_SIM_FAIL_ATTEMPTS="2",
        BERTH_SIM_ATTEMPTS_FILE=str(shared / "attempts"),
        BERTH_SIM_FAIL_KIND="cuda_error",
    )
    with console_processes(tmp_path):
        deployment = host(bob, red, cluster, "flaky", engine_settings=SETTINGS)
        wait_for(reached(deployment, DeploymentState.DEPLOYED), 90, what="DEPLOYED")
        assert Copy.objects.get(deployment=deployment).attempts == 3


def test_hidden_memory_use_is_caught_though_placement_said_it_fits(tmp_path, catalog, bob, red):
    cluster = simulated_cluster("hidden")
    with_engine_env(cluster, "hidden", BERTH_SIM_HIDDEN_MEMORY="70GiB")
    with console_processes(tmp_path):
        deployment = host(bob, red, cluster, "hidden", engine_settings=SETTINGS)
        wait_for(reached(deployment, DeploymentState.FAILED), 60, what="FAILED")
        failed = reload(deployment)
        assert failed.last_error_code == "OOM"
        assert (
            Copy.objects.get(deployment=deployment).allocated_bytes > 0
        )  # placement had placed it
