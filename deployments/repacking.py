"""Re-packing, the planning half: when copies that found no room may have room made for them by
moving other copies (placement/repack.py), the plan's moves are recorded as CopyMove rows, in
order, with an Event for the deployment that waits and for each deployment that moves (its team
learns why and for whom: a team, never a user). deployments/moving.py runs the rows.

Moves are made for a deployment whose operator accepted them (`make_room`, on Host or Scale) or
on a cluster whose policy moves without asking; a plan whose move was rolled back is not tried
again for ROLLED_BACK_PAUSE, so that a copy that cannot start at its new place is not started
there again and again.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone

from clusters.models import Cluster, Machine, RepackPolicy
from deployments.access import visible_deployments
from deployments.choices import COPY_PLACED, MOVE_UNFINISHED, EventKind, MoveState
from deployments.fit_words import gpus_words, moves_words, size_text
from deployments.models import Copy, CopyMove, Deployment, Event
from deployments.placing import fit_check_with_moves, request_for
from placement.repack import Move, Repack
from placement.words import plural

ROLLED_BACK_PAUSE = timedelta(minutes=10)
NO_DOWNTIME_NOTE = "it keeps serving: the new copy starts before the old one stops"


def may_move_for(deployment: Deployment) -> bool:
    """Whether other copies may be moved to make room for this deployment's copies."""
    return deployment.make_room or deployment.cluster.repack_policy != RepackPolicy.OFF


def unfinished(**where: object) -> list[CopyMove]:
    return list(CopyMove.objects.filter(state__in=MOVE_UNFINISHED, **where).order_by("position"))


def make_room(deployment: Deployment, waiting: list[Copy], reason: str) -> str:
    """For copies that found no room (`reason`, placement's words; the cluster is locked):
    the reason they wait now. Moves under way for them say how far they got; else, where
    moves may be made and some make the copies fit, they are planned and recorded here."""
    under_way = unfinished(for_deployment=deployment)
    if under_way:
        return waiting_words(under_way)
    if not may_move_for(deployment):
        return reason
    failed = last_rollback(deployment)
    if failed is not None:
        again = timezone.localtime(failed.updated_at + ROLLED_BACK_PAUSE).strftime("%H:%M")
        return (
            f"{reason} Moving other copies to make room failed: {failed.message} Moves are "
            f"tried again after {again}."
        )
    repack = fit_check_with_moves(deployment.cluster, request_for(deployment, len(waiting)))
    if not (repack.found and repack.moves):
        return reason
    rows = record_plan(deployment.cluster, repack.moves, deployment)
    tell_the_asker(deployment, repack)
    return waiting_words(rows)


def last_rollback(deployment: Deployment) -> CopyMove | None:
    since = timezone.now() - ROLLED_BACK_PAUSE
    rows = CopyMove.objects.filter(
        for_deployment=deployment, state=MoveState.ROLLED_BACK, updated_at__gte=since
    )
    return rows.order_by("-updated_at").first()


def waiting_words(rows: list[CopyMove]) -> str:
    """ "Room is being made: 2 copies of other deployments move first (move 1 of 2: …)." """
    current = rows[0]
    total = current.position + len(rows)
    moving = plural(total, "copy", "copies")
    step = current.get_state_display().lower()
    return (
        f"Room is being made for it: {moving} of other deployments move first "
        f"(move {current.position + 1} of {total}: {step})."
    )


def record_plan(
    cluster: Cluster, moves: tuple[Move, ...], for_deployment: Deployment | None
) -> list[CopyMove]:
    """The moves as rows to run in order, each told to the deployment it moves."""
    plan = uuid.uuid4().hex
    rows = [
        CopyMove.objects.create(
            cluster=cluster,
            plan=plan,
            position=position,
            for_deployment=for_deployment,
            why=why_words(for_deployment),
            deployment=old.deployment,
            old_copy=old,
            from_words=gpus_words(move.from_machine, move.from_accelerators),
            to_machine=Machine.objects.get(cluster=cluster, name=move.to_machine),
            to_accelerators=list(move.to_accelerators),
        )
        for position, move in enumerate(moves)
        for old in [moved_copy(cluster, move)]
    ]
    Event.create_many([planned_event(row) for row in rows])
    return rows


def moved_copy(cluster: Cluster, move: Move) -> Copy:
    copies = Copy.objects.select_related("deployment").filter(
        deployment__cluster=cluster, state__in=COPY_PLACED
    )
    return copies.get(deployment__name=move.deployment, ordinal=move.copy)


def why_words(for_deployment: Deployment | None) -> str:
    if for_deployment is None:
        return "to free a whole GPU (the cluster consolidates its copies)"
    return f"to make room for a deployment of team {for_deployment.team.name}"


def to_words(row: CopyMove) -> str:
    return gpus_words(row.to_machine.name, tuple(row.to_accelerators))


def planned_event(row: CopyMove) -> Event:
    assert row.old_copy is not None
    return move_event(
        row,
        f"Copy {row.old_copy.ordinal} moves from {row.from_words} to {to_words(row)} "
        f"{row.why}; {NO_DOWNTIME_NOTE}.",
    )


def move_event(row: CopyMove, message: str) -> Event:
    """An Event of the moved deployment (unsaved)."""
    return Event(
        deployment=row.deployment,
        deployment_name=row.deployment.name,
        copy=row.old_copy,
        kind=EventKind.MOVE,
        message=message,
    )


def tell_the_asker(deployment: Deployment, repack: Repack) -> None:
    """The waiting deployment's Event: which copies move for it (others' only as another
    team's, by size)."""
    names = {move.deployment for move in repack.moves}
    own = set(
        Deployment.objects.filter(name__in=names, team_id=deployment.team_id).values_list(
            "name", flat=True
        )
    )
    tell_the_waiting(
        deployment, moves_words(repack, sizes_of(names), own, lead="Making room: moving")
    )


def tell_the_waiting(deployment: Deployment, message: str) -> None:
    """An Event of the deployment that waits for the moves."""
    Event.objects.create(
        deployment=deployment, deployment_name=deployment.name, kind=EventKind.MOVE, message=message
    )


def moves_told_to(user: Any, repack: Repack) -> str:
    """The moves in words for this user: staff see every deployment named, others their own
    teams' (another team's copy is told by its size only)."""
    names = {move.deployment for move in repack.moves}
    return moves_words(repack, sizes_of(names), nameable(user, names))


def moves_offered(user: Any, repack: Repack | None) -> str:
    """The moves to offer an operator, in words for them ("" where no moves make it fit)."""
    if repack is None or not (repack.found and repack.moves):
        return ""
    return moves_told_to(user, repack)


def nameable(user: Any, names: set[str]) -> set[str]:
    """The deployments of `names` this user may see named: staff all, others their teams'."""
    visible = visible_deployments(user).filter(name__in=names)
    return set(visible.values_list("name", flat=True))


def sizes_of(names: set[str]) -> dict[str, str]:
    """Each deployment's size per copy in words ("0.5 GPU"), for moves_words."""
    rows = Deployment.objects.filter(name__in=names).values_list("name", "accelerators_per_copy")
    return {name: f"{size_text(size)} GPU" for name, size in rows}


@dataclass(frozen=True)
class Moving:
    """A deployment's copies in moves under way (the old and the new of each), and how many
    moves: each counts as one copy while it runs."""

    copy_ids: frozenset[int]
    moves: int


def moving_copies(deployment: Deployment) -> Moving:
    rows = CopyMove.objects.filter(deployment=deployment, state__in=MOVE_UNFINISHED)
    pairs = list(rows.values_list("old_copy_id", "new_copy_id"))
    ids = frozenset(pk for pair in pairs for pk in pair if pk is not None)
    return Moving(ids, len(pairs))


def q_new_copy_of_a_move() -> Q:
    """Copies started at the new place of a move under way: the move, not a retry, decides
    what becomes of them."""
    return Q(moved_in__state__in=MOVE_UNFINISHED)
