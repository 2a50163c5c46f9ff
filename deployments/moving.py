"""Re-packing, the running half (DESIGN §8c): each CopyMove row, in its plan's order, is run
make-before-break. The new copy is placed at the move's target (its room taken while the old
copy still holds its own), copied to and started; once it serves, the gateway sends to it and
the old copy drains (no new requests, those in flight finish) and stops, its room given back;
then the next move of the plan begins, and after the last the deployment that waited is placed.
A move whose new copy does not start is rolled back: the old copy keeps serving, the new one is
stopped and its room given back, the plan's later moves are cancelled, and the deployment that
waited is told why.

`advance_all` takes each plan one step further and is idempotent: the reconciler calls it every
pass, so that a console restart in the middle continues from the rows. It also starts the
cluster's own consolidation where its policy says so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

import placement
from clusters.models import Cluster, RepackPolicy, in_window
from deployments import lifecycle, load, repacking, transitions
from deployments.choices import (
    COPY_PLACED,
    COPY_WAITING,
    DEPLOYMENT_PLACEABLE,
    MOVE_UNFINISHED,
    CopyState,
    MoveState,
)
from deployments.models import Copy, CopyMove
from deployments.placing import release, write_reservation
from deployments.snapshot import inventory_for
from placement.repack import fragmentation, over_committed, plan_consolidation

log = logging.getLogger(__name__)


def advance_all() -> None:
    """Each plan with moves left, one step further (as far as it can go without waiting)."""
    plans = CopyMove.objects.filter(state__in=MOVE_UNFINISHED).values_list("plan", flat=True)
    for plan in sorted(set(plans)):
        try:
            advance(plan)
        except Exception:  # one broken plan must not stop the others
            log.exception("advancing the moves of plan %s", plan)
    for cluster in Cluster.objects.filter(repack_policy=RepackPolicy.CONSOLIDATE):
        consolidate(cluster)


def advance(plan: str) -> None:
    """The plan's first unfinished move, as far as it goes now: a step that finishes a move
    goes on to the next one."""
    while True:
        with transaction.atomic():
            rows = CopyMove.objects.select_for_update().select_related("deployment", "to_machine")
            move = rows.filter(plan=plan, state__in=MOVE_UNFINISHED).order_by("position").first()
            if move is None:
                return
            before = move.state
            STEPS[move.state](move)
            if move.state == before:
                return
            if move.state not in MOVE_UNFINISHED:
                after_the_move(move)


def set_state(move: CopyMove, state: str, message: str = "") -> None:
    move.state = MoveState(state)
    move.message = message or move.message
    move.save(update_fields=["state", "message", "new_copy", "updated_at"])


def tell(move: CopyMove, message: str) -> None:
    repacking.move_event(move, message).save()


# --- the steps ------------------------------------------------------------------------------


def begin(move: CopyMove) -> None:
    """PLANNED: the new copy is placed at the target and started, if the old copy still runs
    and the target's room is still free."""
    old = fresh(move.old_copy_id)
    if old is None or old.state not in COPY_PLACED:
        set_state(move, MoveState.CANCELLED, "The copy no longer runs: nothing to move.")
        return
    if move.deployment.state not in DEPLOYMENT_PLACEABLE:
        set_state(move, MoveState.CANCELLED, "Its deployment is stopping: nothing to move.")
        return
    asking = move.for_deployment
    if asking is not None and asking.state not in DEPLOYMENT_PLACEABLE:
        set_state(move, MoveState.CANCELLED, "The deployment it made room for is stopping.")
        return
    cluster = Cluster.objects.select_for_update().get(pk=move.cluster_id)  # the cluster lock
    placed = target_placement(move, old)
    if not room_is_free(cluster, placed):
        set_state(move, MoveState.CANCELLED, "Its new place is no longer free.")
        tell(move, f"The move of copy {old.ordinal} to {repacking.to_words(move)} is cancelled: "
             "its new place is no longer free. The copy keeps serving where it is.")  # fmt: skip
        return
    new = start_new_copy(cluster, move, old, placed)
    move.new_copy = new
    set_state(move, MoveState.STARTING, f"Copy {new.ordinal} starts at its new place.")


def target_placement(move: CopyMove, old: Copy) -> placement.Placement:
    """The old copy's room, as its reservations hold it, at the move's target."""
    first = old.reservations.first()
    assert first is not None  # a placed copy holds room
    return placement.Placement(
        copy=1,
        machine=move.to_machine.name,
        accelerators=tuple(move.to_accelerators),
        slice=None,
        slice_id=None,
        allocated_bytes=first.reserved_bytes,
        share=float(first.share),
        gpu_memory_utilization=old.gpu_memory_utilization or 0.0,
        hardware_class=old.hardware_class,
        sharing_class=old.sharing_class,
    )


def room_is_free(cluster: Cluster, placed: placement.Placement) -> bool:
    """Whether the target holds the new copy beside everything held now (the old copy too:
    make-before-break)."""
    inventory = inventory_for(cluster)
    names = {machine.name for machine in inventory.machines}
    if placed.machine not in names:
        return False  # its machine is gone or not ready
    both = placement.Inventory(
        inventory.machines, inventory.reservations + placed.reservations(), inventory.sharing
    )
    return not over_committed(both)


def start_new_copy(
    cluster: Cluster, move: CopyMove, old: Copy, placed: placement.Placement
) -> Copy:
    deployment = move.deployment
    highest = deployment.copies.order_by("-ordinal").values_list("ordinal", flat=True).first()
    new = Copy.objects.create(
        deployment=deployment, ordinal=(highest or 0) + 1, generation=old.generation
    )
    write_reservation(cluster, new, placed)
    transitions.move_copy(
        new.pk,
        CopyState.COPYING_FILES,
        message=f"Placed on {repacking.to_words(move)}: copy {old.ordinal} moves here {move.why}.",
    )
    lifecycle.enqueue("prepare_copy", new.pk)
    return new


def switch(move: CopyMove) -> None:
    """STARTING: once the new copy serves, the old one drains; if it failed, roll back."""
    new, old = fresh(move.new_copy_id), fresh(move.old_copy_id)
    if new is None or new.state not in COPY_PLACED:
        roll_back(move, new)
        return
    if new.state != CopyState.READY:
        return
    if old is not None and old.state == CopyState.READY:
        lifecycle.start_draining(old)
    elif old is not None and old.state in COPY_PLACED | COPY_WAITING:
        lifecycle.stop_copy_soon(old)
    set_state(move, MoveState.SWITCHING, f"Copy {new.ordinal} serves; the old copy drains.")
    tell(move, f"Copy {new.ordinal} serves at {repacking.to_words(move)}; copy "
         f"{move_ordinal(move)} at {move.from_words} drains and stops.")  # fmt: skip


def finish(move: CopyMove) -> None:
    """SWITCHING: done once the old copy is stopped (finish_draining stops it)."""
    old = fresh(move.old_copy_id)
    if old is not None and old.state != CopyState.STOPPED:
        lifecycle.finish_draining(move.deployment)
        return
    set_state(move, MoveState.DONE, "Moved.")
    tell(move, f"Copy {move_ordinal(move)} moved from {move.from_words} to "
         f"{repacking.to_words(move)} {move.why}.")  # fmt: skip


STEPS: dict[str, Callable[[CopyMove], None]] = {
    MoveState.PLANNED: begin,
    MoveState.STARTING: switch,
    MoveState.SWITCHING: finish,
}


def fresh(copy_id: int | None) -> Copy | None:
    return None if copy_id is None else Copy.objects.filter(pk=copy_id).first()


def move_ordinal(move: CopyMove) -> str:
    old = fresh(move.old_copy_id)
    return str(old.ordinal) if old is not None else "?"


# --- rolling back -----------------------------------------------------------------------------


def roll_back(move: CopyMove, new: Copy | None) -> None:
    """The new copy did not start: it goes, its room given back; the old copy keeps serving."""
    why = failure_words(new)
    if new is not None and new.state == CopyState.FAILED:
        lifecycle.give_up_room(new, {CopyState.FAILED}, CopyState.STOPPED,
                               message=f"Rolled back: {why}")  # fmt: skip
    elif new is not None and new.state in COPY_PLACED | COPY_WAITING:
        lifecycle.stop_copy_soon(new)
    elif new is not None and new.state == CopyState.STOPPED:
        release(new)
    set_state(move, MoveState.ROLLED_BACK, why)
    tell(move, f"The move of copy {move_ordinal(move)} to {repacking.to_words(move)} was rolled "
         f"back: {why} Copy {move_ordinal(move)} keeps serving at {move.from_words}.")  # fmt: skip


def failure_words(new: Copy | None) -> str:
    if new is None:
        return "the new copy is gone."
    if new.last_error_code:
        return f"the new copy did not start ({new.last_error_code}: {new.last_error_message})."
    return f"the new copy stopped before it served ({new.get_state_display().lower()})."


def after_the_move(move: CopyMove) -> None:
    """A move finished: a rolled-back or cancelled one ends its plan; after the last, the
    deployment that waited is placed."""
    later = CopyMove.objects.filter(
        plan=move.plan, position__gt=move.position, state__in=MOVE_UNFINISHED
    )
    if move.state in (MoveState.ROLLED_BACK, MoveState.CANCELLED):
        later.update(state=MoveState.CANCELLED, message="An earlier move did not happen.")
        tell_the_waiting(move)
    elif later.exists():
        return
    if move.for_deployment_id is not None:
        lifecycle.enqueue("place_deployment", move.for_deployment_id)


def tell_the_waiting(move: CopyMove) -> None:
    if move.for_deployment is None:
        return
    why = move.message[:1].lower() + move.message[1:]  # a sentence of its own, continued here
    repacking.tell_the_waiting(
        move.for_deployment, f"Making room failed: {why} Its copies wait for room."
    )


# --- consolidation ------------------------------------------------------------------------


def consolidate(cluster: Cluster, now: datetime | None = None) -> str:
    """Where the cluster's policy consolidates: in its window, when its free room lies in
    pieces past its threshold and its copies are not busy, the moves that free a whole GPU.
    Returns what it did or why not (the tests read it)."""
    why_not = not_now(cluster, now or timezone.now())
    if why_not:
        return why_not
    inventory = inventory_for(cluster)
    worst = max((f.percent for f in fragmentation(inventory)), default=0)
    if worst <= cluster.consolidate_above_percent:
        return f"fragmentation {worst}% is not above {cluster.consolidate_above_percent}%"
    busy = load_per_copy(cluster)
    if busy > cluster.consolidate_below_load:
        return f"the load, {busy:.1f} requests per copy, is above {cluster.consolidate_below_load}"
    with transaction.atomic():
        Cluster.objects.select_for_update().get(pk=cluster.pk)
        moves, why = plan_consolidation(inventory_for(cluster), settings.REPACK_BUDGET_MS / 1000)
        if not moves:
            return why
        repacking.record_plan(cluster, moves, None)
    return f"moving {len(moves)} to free a whole GPU"


def not_now(cluster: Cluster, now: datetime) -> str:
    if cluster.repack_policy != RepackPolicy.CONSOLIDATE:
        return "its policy does not consolidate"
    window = cluster.consolidate_window
    if window and not in_window(window, timezone.localtime(now).time()):
        return f"outside its window {window}"
    if CopyMove.objects.filter(cluster=cluster, state__in=MOVE_UNFINISHED).exists():
        return "moves are under way"
    return ""


def load_per_copy(cluster: Cluster) -> float:
    """Requests in flight per serving copy of the cluster, over every gateway process."""
    serving = list(
        Copy.objects.filter(deployment__cluster=cluster, state=CopyState.READY).values_list(
            "pk", flat=True
        )
    )
    if not serving:
        return 0.0
    in_flight = load.in_flight_by_copy()
    return sum(in_flight.get(pk, 0) for pk in serving) / len(serving)
