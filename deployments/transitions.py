"""The only code that assigns a deployment's or a copy's state.

Each change locks the row, checks the allowed-transitions table, writes one Event, saves, and
broadcasts on commit. An illegal transition raises and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from console import live
from deployments import notifications
from deployments.choices import DEPLOYMENT_RUNNING, CopyState, DeploymentState, EventKind
from deployments.guard import state_change_allowed
from deployments.models import Copy, Deployment, Event

# While a deployment runs, its state follows its copies, so it may move between any of
# DEPLOYMENT_RUNNING; it leaves them for one of these.
LEAVING_RUNNING = frozenset(
    {DeploymentState.FAILED, DeploymentState.MUST_REDOWNLOAD, DeploymentState.STOPPING}
)

DEPLOYMENT_TRANSITIONS: dict[str, frozenset[str]] = {
    DeploymentState.REQUESTED: DEPLOYMENT_RUNNING | LEAVING_RUNNING,
    **{state: (DEPLOYMENT_RUNNING - {state}) | LEAVING_RUNNING for state in DEPLOYMENT_RUNNING},
    DeploymentState.FAILED: frozenset(
        {DeploymentState.REQUESTED, DeploymentState.STOPPING, DeploymentState.STOPPED}
    ),
    DeploymentState.MUST_REDOWNLOAD: frozenset(
        {
            DeploymentState.REQUESTED,
            DeploymentState.FAILED,
            DeploymentState.STOPPING,
            DeploymentState.STOPPED,
        }
    ),
    DeploymentState.STOPPING: frozenset({DeploymentState.STOPPED, DeploymentState.ERROR}),
    DeploymentState.STOPPED: frozenset({DeploymentState.REQUESTED}),
}

COPY_TRANSITIONS: dict[str, frozenset[str]] = {
    CopyState.REQUESTED: frozenset(
        {
            CopyState.PENDING,
            CopyState.COPYING_FILES,
            CopyState.STARTING,
            CopyState.FAILED,
            CopyState.STOPPING,
            CopyState.STOPPED,
        }
    ),
    CopyState.PENDING: frozenset(
        {CopyState.COPYING_FILES, CopyState.FAILED, CopyState.STOPPING, CopyState.STOPPED}
    ),
    CopyState.COPYING_FILES: frozenset(
        {
            CopyState.STARTING,
            CopyState.PENDING,
            CopyState.FAILED,
            CopyState.STOPPING,
            CopyState.STOPPED,
        }
    ),
    CopyState.STARTING: frozenset(
        {CopyState.READY, CopyState.PENDING, CopyState.FAILED, CopyState.STOPPING}
    ),
    # READY → STARTING: the platform starts the engine again by itself (Ray restarts an actor).
    CopyState.READY: frozenset(
        {CopyState.STARTING, CopyState.PENDING, CopyState.FAILED, CopyState.STOPPING}
    ),
    CopyState.STOPPING: frozenset({CopyState.STOPPED, CopyState.FAILED}),
    CopyState.STOPPED: frozenset({CopyState.REQUESTED}),
    CopyState.FAILED: frozenset({CopyState.REQUESTED, CopyState.STOPPING, CopyState.STOPPED}),
}


class IllegalTransition(Exception):
    """A state change the transitions table does not allow."""


def check_allowed(table: dict[str, frozenset[str]], what: str, current: str, wanted: str) -> None:
    if wanted not in table.get(current, frozenset()):
        raise IllegalTransition(f"{what} cannot go from {current} to {wanted}")


def actor_fields(actor: Any) -> dict[str, Any]:
    if actor is None or not getattr(actor, "is_authenticated", False):
        return {"actor": None, "actor_name": "system"}
    return {"actor": actor, "actor_name": actor.get_username()}


def move_deployment(
    deployment_id: int, to: str, *, message: str = "", actor: Any = None, **fields: Any
) -> Deployment:
    """Change a deployment's state (and any of its last_* fields given) under its row lock."""
    with transaction.atomic():
        deployment = Deployment.objects.select_for_update().get(pk=deployment_id)
        before = deployment.state
        check_allowed(DEPLOYMENT_TRANSITIONS, f"Deployment {deployment.name}", before, to)
        event = deployment_event(deployment, to, message, actor)
        event.save()
        deployment.state = to
        deployment.last_message = message or deployment.last_message
        deployment.last_checked_at = timezone.now()
        for name, value in fields.items():
            setattr(deployment, name, value)
        with state_change_allowed():
            deployment.save()
        # In the same transaction: a state change and the notices it owes are written together.
        notifications.on_state_change(deployment, before, event)
        live.broadcast_on_commit(live.deployment_group(deployment.pk), "deployment", deployment.pk)
        live.broadcast_on_commit("deployments", "deployment", deployment.pk)
        live.fleet_changed()
    return deployment


def move_copy(
    copy_id: int, to: str, *, message: str = "", actor: Any = None, **fields: Any
) -> Copy:
    """Change a copy's state (and any of its fields given) under its row lock."""
    with transaction.atomic():
        copy = Copy.objects.select_for_update().select_related("deployment").get(pk=copy_id)
        before = copy.state
        check_allowed(COPY_TRANSITIONS, str(copy), before, to)
        copy_event(copy, to, message, actor).save()
        copy.state = to
        copy.state_changed_at = timezone.now()
        for name, value in fields.items():
            setattr(copy, name, value)
        with state_change_allowed():
            copy.save()
        live.broadcast_on_commit(live.deployment_group(copy.deployment_id), "copy", copy.pk)
        live.fleet_changed()
    return copy


def set_last_message(deployment_id: int, message: str, **fields: Any) -> None:
    """Say in words what happened last, without a state change (and so without an Event)."""
    Deployment.objects.filter(pk=deployment_id).update(
        last_message=message, last_checked_at=timezone.now(), **fields
    )
    live.broadcast_on_commit(live.deployment_group(deployment_id), "deployment", deployment_id)
    live.broadcast_on_commit("deployments", "deployment", deployment_id)


def move_copy_if_in(
    copy_id: int, expected: frozenset[str] | set[str], to: str, **kwargs: Any
) -> Copy | None:
    """Move a copy only if it is still in one of the expected states (a compare-and-set claim).

    Tasks use it so that running twice, or after another worker, changes nothing.
    """
    with transaction.atomic():
        current = (
            Copy.objects.select_for_update().filter(pk=copy_id).values_list("state", flat=True)
        )
        if not current or current[0] not in expected:
            return None
        return move_copy(copy_id, to, **kwargs)


# --- many at once --------------------------------------------------------------------------
# A reconciler pass may move a hundred copies and deployments: the same table and the same
# Events, with one lock query, one insert of Events, one update and one broadcast per group.


@dataclass(frozen=True)
class Move:
    """One row's state change in a batch: its id, the new state, the Event's words, and any
    other fields to write with it."""

    id: int
    to: str
    message: str = ""
    fields: dict[str, Any] = field(default_factory=dict)
    # Where given, the state the change was decided from: a row that has moved on since (a
    # stop came meanwhile) is left as it is.
    decided_from: str = ""


def move_copies(moves: list[Move]) -> list[Copy]:
    """Change many copies' states at once, each checked against the table like move_copy; an
    illegal one raises and changes nothing."""
    if not moves:
        return []
    with transaction.atomic():
        locked = Copy.objects.select_for_update().select_related("deployment")
        copies = {c.pk: c for c in locked.filter(pk__in=[m.id for m in moves]).order_by("pk")}
        now = timezone.now()
        events = []
        for move in moves:
            copy = copies[move.id]
            check_allowed(COPY_TRANSITIONS, str(copy), copy.state, move.to)
            events.append(copy_event(copy, move.to, move.message))
            copy.state, copy.state_changed_at = move.to, now
            for name, value in move.fields.items():
                setattr(copy, name, value)
        Event.create_many(events)
        changed = {"state", "state_changed_at"} | {name for m in moves for name in m.fields}
        with state_change_allowed():
            Copy.objects.bulk_update([copies[m.id] for m in moves], sorted(changed))
        for deployment_id in sorted({c.deployment_id for c in copies.values()}):
            live.broadcast_on_commit(
                live.deployment_group(deployment_id), "deployment", deployment_id
            )
    return [copies[m.id] for m in moves]


def copy_event(copy: Copy, to: str, message: str, actor: Any = None) -> Event:
    """The Event of a copy's move from its state now (unsaved)."""
    return Event(
        deployment=copy.deployment,
        deployment_name=copy.deployment.name,
        copy=copy,
        kind=EventKind.STATE_CHANGE,
        from_state=copy.state,
        to_state=to,
        message=message,
        **actor_fields(actor),
    )


def move_deployments(moves: list[Move]) -> list[Deployment]:
    """Change many deployments' states at once, each as move_deployment would (table, Event,
    notices owed); an illegal one raises and changes nothing. A move decided from a state the
    row has left, or whose row is gone (deleted meanwhile), is left out."""
    if not moves:
        return []
    with transaction.atomic():
        locked = Deployment.objects.select_for_update()
        rows = {d.pk: d for d in locked.filter(pk__in=[m.id for m in moves]).order_by("pk")}
        moves = [m for m in moves if m.id in rows and still_decided(m, rows[m.id])]
        now = timezone.now()
        befores = {}
        for move in moves:
            deployment = rows[move.id]
            check_allowed(
                DEPLOYMENT_TRANSITIONS, f"Deployment {deployment.name}", deployment.state, move.to
            )
            befores[move.id] = deployment.state
        events = Event.create_many([deployment_event(rows[m.id], m.to, m.message) for m in moves])
        for move in moves:
            deployment = rows[move.id]
            deployment.state = move.to
            deployment.last_message = move.message or deployment.last_message
            deployment.last_checked_at = now
            for name, value in move.fields.items():
                setattr(deployment, name, value)
        changed = {"state", "last_message", "last_checked_at"} | {
            name for m in moves for name in m.fields
        }
        with state_change_allowed():
            Deployment.objects.bulk_update([rows[m.id] for m in moves], sorted(changed))
        for move, event in zip(moves, events, strict=True):
            notifications.on_state_change(rows[move.id], befores[move.id], event)
            group = live.deployment_group(move.id)
            live.broadcast_on_commit(group, "deployment", move.id)
        for move in moves:
            live.broadcast_on_commit("deployments", "deployment", move.id)
    return [rows[m.id] for m in moves]


def still_decided(move: Move, deployment: Deployment) -> bool:
    return not move.decided_from or deployment.state == move.decided_from


def deployment_event(deployment: Deployment, to: str, message: str, actor: Any = None) -> Event:
    """The Event of a deployment's move from its state now (unsaved)."""
    return Event(
        deployment=deployment,
        deployment_name=deployment.name,
        kind=EventKind.STATE_CHANGE,
        from_state=deployment.state,
        to_state=to,
        message=message,
        **actor_fields(actor),
    )
