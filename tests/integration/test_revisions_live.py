"""Revisions with the real processes (worker, beat, watcher, gateway) and simulated engines: a
rollback of a settings change while 16 streams run through the gateway fails not one request
(the new copies start beside the old, which drain before they stop); a revision whose copy
fails for good is marked failed and the deployment, which asked for it, rolls itself back to
the last revision that served, its old copy serving all along."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from clusters.backends import isolation
from console.models import ApiKey
from deployments import actions
from deployments.choices import CopyState, DeploymentState
from deployments.models import Copy, Deployment
from tests.integration.test_autoscaling import Load
from tests.integration.test_failures import with_engine_env
from tests.integration.test_lifecycle import host, simulated_cluster
from tests.processes import console_processes, gateway_server, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

FAST = {"BERTH_GATEWAY_REFRESH_S": "0.2"}
HALF = {"accelerators_per_copy": "0.5", "engine_settings": {"max_model_len": 4096}}


def settled(deployment: Deployment, revision: int):
    """The deployment serves revision `revision` with its one copy, and no other runs."""

    def check() -> bool:
        current = Deployment.objects.get(pk=deployment.pk)
        copies = Copy.objects.filter(deployment=deployment).exclude(state=CopyState.STOPPED)
        latest = current.revisions.order_by("-number").first()
        return (
            current.state == DeploymentState.DEPLOYED
            and latest.number == revision
            and latest.outcome == "served"
            and [(c.state, c.generation) for c in copies] == [(CopyState.READY, current.generation)]
        )

    return check


def test_a_rollback_while_16_streams_run_fails_no_request(tmp_path, bob, red):
    call_command("load_catalog")
    cluster = simulated_cluster("revs", gpus=2)
    key = ApiKey.issue(bob, "load")[1]
    with console_processes(tmp_path, **FAST), gateway_server(**FAST) as gateway:
        deployment = host(bob, red, cluster, "revs", **HALF)
        wait_for(settled(deployment, 1), 90, what="revision 1 served")
        actions.change_settings(bob, deployment, {"max_model_len": 2048}, "shorter")
        wait_for(settled(deployment, 2), 90, what="revision 2 served")
        load = Load(gateway, key, model="revs")
        load.set_streams(16)
        try:
            wait_for(lambda: load.endings["complete"] >= 16, 60, what="16 replies before")
            actions.roll_back(bob, Deployment.objects.get(pk=deployment.pk), 1, "too short")
            wait_for(settled(deployment, 3), 120, what="revision 3 served alone")
            done_at_rollback = load.endings["complete"]
            wait_for(lambda: load.endings["complete"] >= done_at_rollback + 16, 60,
                     what="16 replies after")  # fmt: skip
        finally:
            endings = load.stop()
    assert set(endings) == {"complete"}, endings
    after = Deployment.objects.get(pk=deployment.pk)
    assert after.engine_settings == {"max_model_len": 4096}
    newest = after.revisions.order_by("-number").first()
    assert (newest.number, newest.restores, newest.comment) == (3, 1, "too short")


def test_a_revision_that_never_serves_is_rolled_back_by_itself(tmp_path, bob, red):
    call_command("load_catalog")
    cluster = simulated_cluster("undo", gpus=2)
    with console_processes(tmp_path, **FAST):
        deployment = host(bob, red, cluster, "undo", auto_rollback=True, **HALF)
        wait_for(settled(deployment, 1), 90, what="revision 1 served")
        first_copy = Copy.objects.get(deployment=deployment, state=CopyState.READY)
        # From now on the next start fails for good (torch's out of memory), the one after it
        # serves: the new revision's copy fails, the rollback's copy serves.
        # The engines run as the team's engine user: the counter lives where it may write.
        shared = tmp_path / "counted"
        shared.mkdir(mode=0o777)
        shared.chmod(0o777)
        isolation.searchable_by_others(shared)
        with_engine_env(cluster, "undo", BERTH_SIM_FAIL_ATTEMPTS="1", BERTH_SIM_FAIL_KIND="oom",
                        BERTH_SIM_ATTEMPTS_FILE=str(shared / "starts"))  # fmt: skip
        actions.change_settings(bob, deployment, {"max_model_len": 2048})
        wait_for(settled(deployment, 3), 120, what="rolled back to revision 1 and served")
    outcomes = list(deployment.revisions.order_by("number").values_list("number", "outcome"))
    assert outcomes == [(1, "served"), (2, "failed"), (3, "served")]
    rollback = deployment.revisions.get(number=3)
    assert (rollback.restores, rollback.actor_name) == (1, "system")
    assert rollback.why == (
        "Roll back to revision 1: revision 2's copies never served: engine settings: "
        "max_model_len 2048 → 4096"
    )
    # The first copy served until the rollback's copy took over.
    first_copy.refresh_from_db()
    assert first_copy.state == CopyState.STOPPED
    assert Deployment.objects.get(pk=deployment.pk).engine_settings == {"max_model_len": 4096}
