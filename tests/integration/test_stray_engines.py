"""Engines no copy owns are swept: an engine this install started whose copy is gone (its rows
deleted behind Berth's back, as a restored database or a raw delete would) is stopped by the
reconciler once past the grace period, and an Event says so. An engine still inside the grace
period, one whose copy owns it, and one another install started are never touched."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import transaction
from django.utils import timezone

from clusters.backends import supervisor
from clusters.backends.base import CopyHandle, CopySpec
from clusters.registry import backend_for, install_id
from deployments import reconciler
from deployments.choices import CopyState, DeploymentState, EventKind
from deployments.guard import state_change_allowed
from deployments.models import Copy, Deployment, Event
from tests import factories
from tests.integration.test_lifecycle import host, reached, simulated_cluster
from tests.integration.test_simulator_backend import FAST, vllm_argv
from tests.processes import console_processes, kill_engines, wait_for

pytestmark = pytest.mark.timeout(120)
GRACE_S = 3


@pytest.fixture
def catalog(db):
    call_command("load_catalog")


def alive(pid: int) -> bool:
    return bool(supervisor.group_members(pid))


@pytest.mark.django_db(transaction=True)
def test_an_engine_whose_copy_was_deleted_is_stopped_and_said(tmp_path, catalog, bob, red):
    cluster = simulated_cluster("strays", gpus=1)
    sweep = {"BERTH_SWEEP_EVERY_S": "1", "BERTH_SWEEP_GRACE_S": str(GRACE_S)}
    with console_processes(tmp_path, **sweep):
        ghost = host(bob, red, cluster, "ghost", engine_settings={"max_model_len": 4096})
        wait_for(reached(ghost, DeploymentState.DEPLOYED), 60, what="ghost DEPLOYED")
        copy = Copy.objects.get(deployment=ghost)
        # While its copy owns it, sweep after sweep leaves it alone.
        wait_for(lambda: timezone.now() - copy.started_at > timedelta(seconds=GRACE_S + 2))
        assert alive(copy.process_id)
        with transaction.atomic():  # behind Berth's back: no stop asked
            # The row first, as Berth's own writers lock it (log lines, figures): deleting its
            # lines before the row would take the locks in the other order and may deadlock.
            Deployment.objects.select_for_update().get(pk=ghost.pk)
            Deployment.objects.filter(pk=ghost.pk).delete()
        assert alive(copy.process_id)
        wait_for(lambda: not alive(copy.process_id), 30, what="the stray engine stopped")
        said = wait_for(
            lambda: Event.objects.filter(deployment_name="ghost", kind=EventKind.SYSTEM).first(),
            10,
            what="the sweep's Event",
        )
        assert f"Stopped an engine that no copy owns (copy {copy.pk} of ghost" in said.message
        assert "cluster strays, machine strays-1" in said.message


@pytest.fixture
def local_state(tmp_path: Path, settings):
    settings.STATE_DIR = tmp_path / "state"
    yield settings.STATE_DIR
    kill_engines(settings.STATE_DIR)


SHARE = 0.2  # four engines share the one GPU: each asks for a fifth of it, as placement would


def launch(cluster, copy_id: int, install: str) -> CopyHandle:
    port = supervisor.free_port()
    argv = vllm_argv("Qwen/Qwen3-0.6B", port, "--gpu-memory-utilization", str(SHARE))
    spec = CopySpec(
        copy_id, "stray", 0, argv, FAST, f"{cluster.name}-1",
        gpu_indexes=(0,), memory_share=SHARE, port=port, install_id=install,
    )  # fmt: skip
    handle = backend_for(cluster).launch(spec)
    assert handle.pid is not None
    return handle


def all_ready(cluster, handles: list[CopyHandle]) -> bool:
    return all(seen.status == "ready" for seen in backend_for(cluster).observe(handles))


@pytest.mark.django_db
def test_only_this_installs_engines_past_the_grace_period_with_no_owner_are_swept(local_state, red):
    cluster = simulated_cluster("mixed", gpus=1)
    owner = factories.make_copy(factories.make_deployment("owned", red, cluster=cluster))
    finished = factories.make_copy(factories.make_deployment("done", red, cluster=cluster))
    with state_change_allowed():
        Copy.objects.filter(pk=owner.pk).update(state=CopyState.READY)
        Copy.objects.filter(pk=finished.pk).update(state=CopyState.STOPPED)
    ours = install_id()
    handles = [
        launch(cluster, owner.pk, ours),
        launch(cluster, finished.pk, ours),
        launch(cluster, 10**9, ours),
        launch(cluster, 10**9 + 1, "another-install"),
    ]
    try:
        # Serving first: an engine that ended on its own would pass for one the sweep stopped.
        wait_for(lambda: all_ready(cluster, handles), 60, what="the four engines serving")
        owned, of_a_stopped_copy, of_no_copy, of_another_install = (h.pid for h in handles)
        later = timezone.now() + timedelta(seconds=200)

        assert reconciler.sweep_strays(now=timezone.now()) == 0  # all inside the grace period
        assert all(map(alive, (owned, of_a_stopped_copy, of_no_copy, of_another_install)))
        assert reconciler.sweep_strays(now=later) == 2
        assert not alive(of_a_stopped_copy) and not alive(of_no_copy)
        assert alive(owned) and alive(of_another_install)
        stopped_copy = Event.objects.get(copy=finished, kind=EventKind.SYSTEM)
        assert stopped_copy.deployment_id == finished.deployment_id
        no_copy = Event.objects.get(deployment_name="stray")
        assert f"(copy {10**9} of stray, cluster mixed, machine mixed-1" in no_copy.message
        assert reconciler.sweep_strays(now=later) == 0  # nothing left to sweep
    finally:  # the engines the sweep rightly left alone
        for handle in handles:
            backend_for(cluster).stop(handle)


@pytest.mark.django_db
def test_the_install_id_is_made_once_and_kept(local_state):
    first = install_id()
    assert len(first) == 16 and int(first, 16) >= 0
    assert install_id() == first
    assert (local_state / "install-id").read_text().strip() == first
