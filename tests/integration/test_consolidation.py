"""A cluster whose policy consolidates plans the moves that free a whole GPU: in its window,
when its free room lies in pieces past its threshold, and never while its copies are busier
than its load limit (read from the gateways' reports in Redis). The cluster page shows how the
free room lies. Running the moves is tests/integration/test_repacking.py's."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.core.management import call_command
from django.test import Client

from catalog.models import Model
from clusters.models import Cluster, in_window, parse_window
from deployments import load, moving
from deployments.choices import CopyState, EventKind, MoveState
from deployments.guard import state_change_allowed
from deployments.models import Copy, CopyMove, Deployment, Event, Reservation
from tests import factories

pytestmark = pytest.mark.django_db

AT_3 = datetime(2026, 12, 5, 3, 0, tzinfo=ZoneInfo("UTC"))
AT_NOON = datetime(2026, 12, 5, 12, 0, tzinfo=ZoneInfo("UTC"))


def quarter_on(cluster: Cluster, name: str, team, gpu_index: int) -> Copy:
    """A deployment whose one serving copy holds a quarter of GPU `gpu_index`."""
    model = Model.objects.get(repo_id="Qwen/Qwen3-0.6B")
    deployment = factories.make_deployment(name, team, cluster=cluster, model=model,
                                           accelerators_per_copy=Decimal("0.25"))  # fmt: skip
    copy = factories.make_copy(deployment)
    gpu = cluster.machines.get().accelerators.get(index=gpu_index)
    with state_change_allowed():
        Copy.objects.filter(pk=copy.pk).update(state=CopyState.READY, machine=gpu.machine)
    Reservation.objects.create(copy=copy, machine=gpu.machine, accelerator=gpu,
                               reserved_bytes=gpu.memory_bytes // 4, share=Decimal("0.25"))  # fmt: skip
    return copy


@pytest.fixture
def scattered(red, blue):
    """Two quarter-GPU copies, each alone on a GPU: all the free room lies in pieces."""
    call_command("load_catalog")
    cluster = factories.make_cluster("packed", gpus=2)
    Cluster.objects.filter(pk=cluster.pk).update(
        repack_policy="consolidate", consolidate_window="02:00-05:00"
    )
    cluster.refresh_from_db()
    return cluster, quarter_on(cluster, "ours", red, 0), quarter_on(cluster, "theirs", blue, 1)


def test_in_its_window_the_cluster_plans_one_move_that_frees_a_whole_gpu(scattered):
    cluster, ours, theirs = scattered
    assert moving.consolidate(cluster, AT_3) == "moving 1 to free a whole GPU"
    move = CopyMove.objects.get()
    assert move.state == MoveState.PLANNED and move.for_deployment is None
    # Either move frees a GPU with as few bytes: the first by deployment name, "ours" (GPU 0),
    # goes beside "theirs" on GPU 1.
    assert move.old_copy == ours
    assert move.to_accelerators == [1]
    told = Event.objects.get(kind=EventKind.MOVE)
    assert told.deployment == move.deployment and told.team == move.deployment.team
    assert told.message.endswith(
        "to free a whole GPU (the cluster consolidates its copies); it keeps serving: the new "
        "copy starts before the old one stops."
    )
    assert moving.consolidate(cluster, AT_3) == "moves are under way"  # one plan at a time


def test_outside_its_window_below_its_threshold_or_busy_it_does_not(scattered, settings):
    cluster, ours, theirs = scattered
    assert moving.consolidate(cluster, AT_NOON) == "outside its window 02:00-05:00"
    cluster.consolidate_above_percent = 100
    assert moving.consolidate(cluster, AT_3) == "fragmentation 100% is not above 100%"
    cluster.consolidate_above_percent = 30
    load.report_in_flight({ours.pk: 3, theirs.pk: 2}, process="gateway-test")
    try:
        assert moving.consolidate(cluster, AT_3) == (
            "the load, 2.5 requests per copy, is above 1.0"
        )
    finally:
        load.report_in_flight({}, process="gateway-test")
    Deployment.objects.filter(pk=ours.deployment_id).update(movable=False)
    Deployment.objects.filter(pk=theirs.deployment_id).update(movable=False)
    assert moving.consolidate(cluster, AT_3) == (
        "No moves of at most 3 copies free a whole GPU: none exists."
    )
    cluster.repack_policy = "on_request"
    assert moving.consolidate(cluster, AT_3) == "its policy does not consolidate"
    assert not CopyMove.objects.exists()


def test_a_window_may_run_past_midnight_and_bad_windows_are_refused_in_words():
    assert in_window("22:00-04:30", datetime(2026, 1, 1, 23, 0).time())
    assert in_window("22:00-04:30", datetime(2026, 1, 1, 4, 0).time())
    assert not in_window("22:00-04:30", datetime(2026, 1, 1, 12, 0).time())
    for bad, words in [("2-5", "is not a time window"), ("25:00-01:00", "is not a time window"),
                       ("03:00-03:00", "starts and ends at the same time")]:  # fmt: skip
        with pytest.raises(ValueError) as refused:
            parse_window(bad)
        assert words in str(refused.value)


def test_the_cluster_page_shows_how_the_free_room_lies(scattered, alice):
    cluster, _, _ = scattered
    client = Client()
    client.force_login(alice)
    page = " ".join(client.get(f"/clusters/{cluster.pk}/").content.decode().split())
    assert (
        "NVIDIA-H100-80GB-HBM3: 119.47 GiB free, at most 59.74 GiB on one GPU; 100% of the free "
        "room lies in pieces (on GPUs some copy uses)." in page
    )
    assert (
        "Re-packing: Consolidate: also pack copies in a window to free whole GPUs (02:00-05:00, "
        "above 30% in pieces, below 1.0 requests in flight per copy)" in page
    )
