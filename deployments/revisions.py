"""Revisions: every state an operator asked of a deployment, numbered, with who, when and why.

`deployments/actions.py` keeps one in the same transaction as each change of a desired state
(one door: nothing changes what a deployment should be without a revision). A revision's `spec`
holds the fields below, as plain JSON values; comparing two specs gives the differences in
words and fields. A revision whose copies never serve is marked failed; a deployment that asked
for it is then rolled back, by itself, to the last revision that served (a task, so that the
rollback goes through the one action every rollback takes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from deployments import transitions
from deployments.choices import EventKind, RevisionOutcome
from deployments.fit_words import size_text
from deployments.models import Copy, Deployment, Event, Revision

# What a revision keeps, in the order it is shown, with the words a difference uses.
LABELS = {
    "variant": "variant",
    "revision": "model revision",
    "accelerators_per_copy": "size of each copy",
    "copies": "copies",
    "autoscaling": "autoscaling",
    "engine_settings": "engine settings",
    "chat_name": "chat name",
    "reply_wait_s": "reply wait (s)",
    "routing": "routing",
    "max_waiting": "queue length",
    "queue_wait_s": "queue wait (s)",
    "movable": "movable",
}
# A change of one of these starts new copies (a new generation) that replace the old ones
# make-before-break; the others apply to the copies that run.
ROLLS_COPIES = ("variant", "revision", "accelerators_per_copy", "engine_settings")
# A copy of a revision that has never served, failing this many times, fails the revision.
FAILS_AFTER_ATTEMPTS = 3


@dataclass(frozen=True)
class Part:
    """A piece of what a deployment is asked to be that a higher layer keeps (the gateway's
    quota on it), handed in at start-up (gateway/apps.py): read into each spec, checked where a
    file asks for it, written back by a rollback or an apply."""

    label: str
    read: Callable[[Deployment], Any]
    check: Callable[[Any], Any]  # a value as a file gives it → as a spec keeps it (or raises)
    write: Callable[[Any, Deployment, Any], None]  # (actor, deployment, value)


PARTS: dict[str, Part] = {}


def add_part(name: str, part: Part) -> None:
    PARTS[name] = part
    LABELS.setdefault(name, part.label)


def spec_of(deployment: Deployment) -> dict[str, Any]:
    """What the deployment is asked to be now, as a revision keeps it. Copies are the number
    only without autoscaling: under a policy the autoscaler's number is not the operator's."""
    return {
        "variant": deployment.variant.name,
        "revision": deployment.revision,
        "accelerators_per_copy": size_text(deployment.accelerators_per_copy),
        "copies": None if deployment.autoscaling else deployment.copies_wanted,
        "autoscaling": deployment.autoscaling,
        "engine_settings": deployment.engine_settings or {},
        "chat_name": deployment.chat_name,
        "reply_wait_s": deployment.reply_wait_s,
        "routing": deployment.routing,
        "max_waiting": deployment.max_waiting,
        "queue_wait_s": deployment.queue_wait_s,
        "movable": deployment.movable,
        **{name: part.read(deployment) for name, part in PARTS.items()},
    }


def latest(deployment_id: int) -> Revision | None:
    return Revision.objects.filter(deployment_id=deployment_id).order_by("-number").first()


def keep(
    deployment_id: int, actor: Any, why: str, comment: str = "", restores: int | None = None
) -> Revision | None:
    """Write the deployment's spec as its next revision, unless it is the spec of the last one
    (a scale to the number it has). Called inside the transaction of the change."""
    deployment = Deployment.objects.select_related("variant").get(pk=deployment_id)
    spec, last = spec_of(deployment), latest(deployment_id)
    if last is not None and last.spec == spec:
        return None
    # The same copies run it where it rolled none: what they did, it did.
    same_copies = last is not None and last.generation == deployment.generation
    return Revision.objects.create(
        deployment=deployment,
        number=(last.number if last else 0) + 1,
        spec=spec,
        generation=deployment.generation,
        why=why[:1000],
        comment=comment,
        restores=restores,
        outcome=last.outcome if same_copies and last else RevisionOutcome.PENDING,
        **transitions.actor_fields(actor),
    )


# --- comparing --------------------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    field: str
    before: Any
    after: Any

    @property
    def label(self) -> str:
        return LABELS.get(self.field, self.field)

    @property
    def words(self) -> str:
        if isinstance(self.before, dict) and isinstance(self.after, dict):
            return f"{self.label}: {dict_change_words(self.before, self.after)}"
        return f"{self.label}: {shown(self.before)} → {shown(self.after)}"


def shown(value: Any) -> str:
    if isinstance(value, dict):  # what is set of it: "requests_per_minute 30, shadow yes"
        return ", ".join(f"{k} {shown(v)}" for k, v in value.items() if v not in (None, False))
    if value is None or value == "":
        return "none"
    if value is True or value is False:
        return "yes" if value else "no"
    return str(value)


def dict_change_words(before: dict[str, Any], after: dict[str, Any]) -> str:
    """Each key that differs: "max_model_len 2048 → 4096", "enforce_eager added (True)"."""
    parts = []
    for key in sorted(set(before) | set(after)):
        if key not in before:
            parts.append(f"{key} added ({shown(after[key])})")
        elif key not in after:
            parts.append(f"{key} removed (was {shown(before[key])})")
        elif before[key] != after[key]:
            parts.append(f"{key} {shown(before[key])} → {shown(after[key])}")
    return "; ".join(parts)


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[Difference]:
    """What changes from one spec to another, field by field in the shown order. A part one
    of them does not hold (kept before that part was) is not compared: it was not known."""
    fields = list(LABELS) + sorted((set(before) | set(after)) - set(LABELS))
    return [
        Difference(name, before.get(name), after.get(name))
        for name in fields
        if before.get(name) != after.get(name)
        and not (name in PARTS and (name not in before or name not in after))
    ]


@dataclass(frozen=True)
class Listed:
    """A revision as the API and the Revisions tab list it."""

    revision: Revision
    changes: list[Difference]  # from the revision before it
    current: bool  # the one the deployment is asked to be now


def listed(deployment: Deployment) -> list[Listed]:
    """Every revision, newest first, each with what it changed from the one before it."""
    rows = list(deployment.revisions.select_related("actor").order_by("number"))
    return [
        Listed(row, differences(rows[i - 1].spec, row.spec) if i else [], row is rows[-1])
        for i, row in enumerate(rows)
    ][::-1]


def rolls_copies(before: dict[str, Any], after: dict[str, Any]) -> bool:
    return any(before.get(name) != after.get(name) for name in ROLLS_COPIES)


# --- what the copies did ----------------------------------------------------------------


def copy_served(copy: Copy) -> None:
    """A copy of this generation serves: so do the revisions it runs."""
    Revision.objects.filter(
        deployment_id=copy.deployment_id,
        generation=copy.generation,
        outcome=RevisionOutcome.PENDING,
    ).update(outcome=RevisionOutcome.SERVED)


def copy_failed(copy: Copy, permanent: bool, reason: str) -> int | None:
    """A copy failed: where it runs the latest revision, which no copy has served, and the
    failure is for good or repeated, that revision failed. Returns its number where the
    deployment asked to roll such a revision back (the caller sends the task that does)."""
    last = latest(copy.deployment_id)
    if last is None or last.generation != copy.generation:
        return None
    if last.outcome != RevisionOutcome.PENDING:
        return None
    if not permanent and copy.attempts < FAILS_AFTER_ATTEMPTS:
        return None
    if not Revision.objects.filter(pk=last.pk, outcome=RevisionOutcome.PENDING).update(
        outcome=RevisionOutcome.FAILED
    ):
        return None  # another worker saw it first
    deployment = Deployment.objects.get(pk=copy.deployment_id)
    good = last_served(deployment.pk)
    message = f"Revision {last.number} failed: its copies never served ({reason})"
    # A failed rollback to the last that served has nothing left to go back to.
    roll_back = deployment.auto_rollback and good is not None and good.spec != last.spec
    if roll_back and good is not None:
        message += f"; rolling back to revision {good.number}, the last that served"
    Event.objects.create(
        deployment=deployment,
        deployment_name=deployment.name,
        kind=EventKind.SYSTEM,
        message=message + ".",
    )
    return last.number if roll_back else None


def last_served(deployment_id: int) -> Revision | None:
    return (
        Revision.objects.filter(deployment_id=deployment_id, outcome=RevisionOutcome.SERVED)
        .order_by("-number")
        .first()
    )
