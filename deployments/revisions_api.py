"""The API of revisions: each deployment's numbered changes, one compared with another, and
the rollback (deployments/revisions.py keeps them; deployments/actions.py rolls back)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Field, Router, Schema, Status

from console.access import NEEDS_OPERATE
from console.api_schema import ERRORS
from deployments import actions, revisions
from deployments.access import get_deployment
from deployments.api import DeploymentOut, shown
from deployments.api_input import AutoRollbackIn, RollbackIn

router = Router(tags=["deployments"])


class DifferenceOut(Schema):
    field: str
    label: str
    before: Any
    after: Any
    words: str = Field(description="the change in words, e.g. routing: least_loaded → prefix")


class RevisionOut(Schema):
    number: int
    at: datetime
    by: str = Field(description="who made the change; system for Berth's own")
    why: str = Field(description="the change, in the words of its Event")
    comment: str
    restores: int | None = Field(description="a rollback: the revision it makes again")
    outcome: str = Field(description="pending, served or failed: whether its copies served")
    current: bool = Field(description="true: the one the deployment is asked to be now")
    spec: dict[str, Any] = Field(description="what the deployment was asked to be")
    changes: list[DifferenceOut] = Field(description="what it changed from the one before")


class RevisionsOut(Schema):
    deployment: str
    items: list[RevisionOut]


class ComparisonOut(Schema):
    deployment: str
    from_revision: int
    to_revision: int
    changes: list[DifferenceOut]


def difference_out(change: revisions.Difference) -> dict[str, Any]:
    return {
        "field": change.field,
        "label": change.label,
        "before": change.before,
        "after": change.after,
        "words": change.words,
    }


def revision_out(item: revisions.Listed) -> dict[str, Any]:
    row = item.revision
    return {
        "number": row.number,
        "at": row.at,
        "by": row.actor_name or "system",
        "why": row.why,
        "comment": row.comment,
        "restores": row.restores,
        "outcome": row.outcome,
        "current": item.current,
        "spec": row.spec,
        "changes": [difference_out(change) for change in item.changes],
    }


@router.get("/deployments/{int:id}/revisions", response={200: RevisionsOut, **ERRORS})
def list_revisions(request: HttpRequest, id: int) -> dict[str, Any]:
    """Every change of what the deployment is asked to be, newest first."""
    deployment = get_deployment(request.user, id)
    items = [revision_out(item) for item in revisions.listed(deployment)]
    return {"deployment": deployment.name, "items": items}


@router.get("/deployments/{int:id}/revisions/{int:number}", response={200: RevisionOut, **ERRORS})
def show_revision(request: HttpRequest, id: int, number: int) -> dict[str, Any]:
    deployment = get_deployment(request.user, id)
    actions.revision_numbered(deployment, number)  # refuses a number it has not, in words
    item = next(i for i in revisions.listed(deployment) if i.revision.number == number)
    return revision_out(item)


@router.get(
    "/deployments/{int:id}/revisions/{int:number}/compare/{int:other}",
    response={200: ComparisonOut, **ERRORS},
)
def compare_revisions(request: HttpRequest, id: int, number: int, other: int) -> dict[str, Any]:
    """What changes from revision `number` to revision `other` (either may be the older)."""
    deployment = get_deployment(request.user, id)
    first = actions.revision_numbered(deployment, number)
    second = actions.revision_numbered(deployment, other)
    changes = revisions.differences(first.spec, second.spec)
    return {
        "deployment": deployment.name,
        "from_revision": first.number,
        "to_revision": second.number,
        "changes": [difference_out(change) for change in changes],
    }


@router.post("/deployments/{int:id}/rollback", response={202: DeploymentOut, **ERRORS})
def roll_back(request: HttpRequest, id: int, payload: RollbackIn) -> Status[dict[str, Any]]:
    """A new revision equal to the one named; where it changes what the copies run, new copies
    replace the old make-before-break."""
    deployment = get_deployment(request.user, id, NEEDS_OPERATE)
    actions.roll_back(request.user, deployment, payload.revision, payload.comment)
    return Status(202, shown(request.user, id))


@router.post("/deployments/{int:id}/auto-rollback", response={200: DeploymentOut, **ERRORS})
def set_auto_rollback(request: HttpRequest, id: int, payload: AutoRollbackIn) -> dict[str, Any]:
    """Whether a revision whose copies never serve is rolled back to the last that served."""
    deployment = get_deployment(request.user, id, NEEDS_OPERATE)
    actions.set_auto_rollback(request.user, deployment, payload.enabled)
    return shown(request.user, id)
