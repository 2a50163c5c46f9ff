"""A reconciler pass that places many deployments' new copies together (deployments/
placing_pass.py) places them exactly as placing them one by one would, and never lets a
younger deployment pass an older one that waits for room."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.management import call_command

from catalog.models import Model
from deployments import reconciler, transitions
from deployments.choices import CopyState, DeploymentState
from deployments.models import Copy, Deployment, Event, Reservation
from tests import factories
from tests.integration.test_lifecycle import simulated_cluster

pytestmark = pytest.mark.django_db(transaction=True)
SIZES = [Decimal("0.5"), Decimal("1"), Decimal("0.25"), Decimal("2"), Decimal("0.5"), Decimal("1")]


@pytest.fixture
def qwen(db):
    call_command("load_catalog")
    return Model.objects.get(repo_id="Qwen/Qwen3-0.6B")


def settled(name, team, cluster, model, size) -> Deployment:
    """A deployment that serves 0 copies (DEPLOYED), as the pass finds most of them."""
    deployment = factories.make_deployment(
        name, team, cluster=cluster, model=model, accelerators_per_copy=size, copies_wanted=0
    )
    reconciler.converge(deployment.pk)
    assert Deployment.objects.get(pk=deployment.pk).state == DeploymentState.DEPLOYED
    return deployment


def outcome(deployment: Deployment) -> list[tuple]:
    """Where each copy went and what was said, without ids or the cluster's name."""
    prefix = f"{deployment.cluster.name}-"
    rows = []
    for copy in Copy.objects.filter(deployment=deployment).order_by("ordinal"):
        held = sorted(
            (r.machine.name.removeprefix(prefix), r.accelerator.index, r.reserved_bytes, r.share)
            for r in Reservation.objects.filter(copy=copy).select_related("machine", "accelerator")
        )
        said = [
            (state, message.replace(prefix, ""))
            for state, message in Event.objects.filter(copy=copy)
            .order_by("id")
            .values_list("to_state", "message")
        ]
        rows.append((copy.ordinal, copy.state, copy.gpu_memory_utilization,
                     copy.sharing_class, held, said))  # fmt: skip
    now = Deployment.objects.get(pk=deployment.pk)
    rows.append((now.state, now.last_message))
    return rows


def test_a_pass_places_many_deployments_as_one_by_one_would(red, qwen):
    together, alone = simulated_cluster("together", gpus=6), simulated_cluster("alone", gpus=6)
    batch = [settled(f"t-{n}", red, together, qwen, size) for n, size in enumerate(SIZES)]
    singles = [settled(f"a-{n}", red, alone, qwen, size) for n, size in enumerate(SIZES)]
    for deployments in (batch, singles):
        for n, deployment in enumerate(deployments):
            Deployment.objects.filter(pk=deployment.pk).update(copies_wanted=1 + n % 2)
    for deployment in singles:  # the one-by-one way, oldest first
        reconciler.converge(deployment.pk)
    reconciler.reconcile_all()  # the batch places "together"; "alone" has nothing left to do
    for mine, theirs in zip(batch, singles, strict=True):
        assert outcome(mine) == outcome(theirs)
    # The sizes ask for more GPUs than there are: the batch stops at the first deployment that
    # does not fit whole, and the rest go the one-by-one way, with the same outcome.
    placed = Copy.objects.filter(deployment__in=batch, state=CopyState.COPYING_FILES)
    assert placed.count() == 6
    assert Copy.objects.filter(deployment__in=batch, state=CopyState.PENDING).exists()


def test_a_younger_deployment_never_takes_room_an_older_one_waits_for(red, qwen):
    cluster = simulated_cluster("one-gpu", gpus=1)
    older = settled("older", red, cluster, qwen, Decimal("1"))
    younger = settled("younger", red, cluster, qwen, Decimal("1"))
    holder = settled("holder", red, cluster, qwen, Decimal("1"))
    Deployment.objects.filter(pk=holder.pk).update(copies_wanted=1)
    reconciler.converge(holder.pk)  # the GPU is taken
    Deployment.objects.filter(pk=older.pk).update(copies_wanted=1)
    reconciler.converge(older.pk)
    waiting = Copy.objects.get(deployment=older)
    assert waiting.state == CopyState.PENDING  # waits for room
    Deployment.objects.filter(pk=younger.pk).update(copies_wanted=1)
    # The holder's copy stops and gives its room back; then one pass.
    (copy,) = Copy.objects.filter(deployment=holder)
    transitions.move_copy(copy.pk, CopyState.STOPPING)
    transitions.move_copy(copy.pk, CopyState.STOPPED)
    Reservation.objects.filter(copy=copy).delete()
    Deployment.objects.filter(pk=holder.pk).update(copies_wanted=0)
    reconciler.reconcile_all()
    assert Copy.objects.get(pk=waiting.pk).state == CopyState.COPYING_FILES
    assert not Copy.objects.filter(deployment=younger, state=CopyState.COPYING_FILES).exists()
