"""Each step of a re-packing move (deployments/moving.py) on the rows, without the processes: it
begins by taking the target's room beside the old copy's; a taken target, a copy that no longer
runs or a deployment that no longer waits cancel it; a new copy that failed rolls it back with
its room given back and the old copy serving. (tests/integration/test_repacking.py runs whole
moves with the real processes.)"""

from __future__ import annotations

from decimal import Decimal

import pytest

from deployments import moving, repacking
from deployments.choices import CopyState, EventKind, MoveState
from deployments.guard import state_change_allowed
from deployments.models import Copy, CopyMove, Event, Reservation
from tests import factories
from tests.integration.test_consolidation import AT_3, quarter_on, scattered  # noqa: F401

pytestmark = pytest.mark.django_db


def planned(cluster) -> CopyMove:
    assert moving.consolidate(cluster, AT_3) == "moving 1 to free a whole GPU"
    return CopyMove.objects.get(state=MoveState.PLANNED)


def set_copy_state(copy_id: int, state: str) -> None:
    with state_change_allowed():
        Copy.objects.filter(pk=copy_id).update(state=state)


def test_a_move_begins_with_its_new_copy_holding_the_target_beside_the_old(scattered):  # noqa: F811
    cluster, _, _ = scattered
    move = planned(cluster)
    moving.advance(move.plan)
    move.refresh_from_db()
    assert move.state == MoveState.STARTING
    new = move.new_copy
    assert new.state == CopyState.COPYING_FILES and new.deployment == move.deployment
    held = Reservation.objects.get(copy=new)
    assert (held.accelerator.index, held.share) == (move.to_accelerators[0], Decimal("0.25"))
    assert Reservation.objects.filter(copy=move.old_copy).exists()  # make-before-break
    assert repacking.moving_copies(move.deployment).copy_ids == {move.old_copy_id, new.pk}
    moving.advance(move.plan)  # the new copy does not serve yet: nothing more happens
    assert CopyMove.objects.get(pk=move.pk).state == MoveState.STARTING


def test_a_new_copy_that_failed_is_rolled_back_and_the_old_keeps_serving(scattered):  # noqa: F811
    cluster, _, _ = scattered
    move = planned(cluster)
    moving.advance(move.plan)
    move.refresh_from_db()
    set_copy_state(move.new_copy_id, CopyState.FAILED)
    Copy.objects.filter(pk=move.new_copy_id).update(
        last_error_code="OOM", last_error_message="CUDA out of memory."
    )
    moving.advance(move.plan)
    move.refresh_from_db()
    assert move.state == MoveState.ROLLED_BACK
    assert move.message == "the new copy did not start (OOM: CUDA out of memory.)."
    assert Copy.objects.get(pk=move.new_copy_id).state == CopyState.STOPPED
    assert not Reservation.objects.filter(copy_id=move.new_copy_id).exists()
    old = Copy.objects.get(pk=move.old_copy_id)
    assert old.state == CopyState.READY and old.draining_since is None
    told = Event.objects.filter(kind=EventKind.MOVE, deployment=move.deployment).latest("id")
    assert told.message.endswith(f"keeps serving at {move.from_words}.")


def test_a_taken_target_or_a_copy_gone_cancels_the_move(scattered, red):  # noqa: F811
    cluster, _, _ = scattered
    move = planned(cluster)
    gpu = cluster.machines.get().accelerators.get(index=move.to_accelerators[0])
    other = factories.make_deployment("other", red, cluster=cluster)
    Reservation.objects.create(copy=factories.make_copy(other), machine=gpu.machine,
                               accelerator=gpu, reserved_bytes=gpu.memory_bytes * 3 // 4,
                               share=Decimal("0.75"))  # fmt: skip
    moving.advance(move.plan)
    move.refresh_from_db()
    assert (move.state, move.message) == (MoveState.CANCELLED, "Its new place is no longer free.")
    assert move.new_copy is None

    Reservation.objects.filter(copy__deployment=other).delete()
    again = planned(cluster)
    CopyMove.objects.filter(pk=again.pk).update(for_deployment=other)  # it made room for other
    set_copy_state(again.old_copy_id, CopyState.STOPPED)
    moving.advance(again.plan)
    again.refresh_from_db()
    assert (again.state, again.message) == (
        MoveState.CANCELLED,
        "The copy no longer runs: nothing to move.",
    )
    told = Event.objects.filter(kind=EventKind.MOVE, deployment=other).latest("id")
    assert told.message == (
        "Making room failed: the copy no longer runs: nothing to move. Its copies wait for room."
    )
