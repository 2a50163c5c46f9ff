"""The API of configuration as code: GET /export writes deployments as a file's document,
POST /apply plans it (dry_run) or carries it out, GET /apply/schema publishes the file's JSON
Schema (deployments/api_input.py's ApplyDocument, its one home)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema, Status

from console.api_schema import ERRORS
from deployments import applying
from deployments.access import visible_deployments
from deployments.actions import ActionRefused
from deployments.api_input import ApplyDocument, ApplyIn
from deployments.revisions_api import DifferenceOut, difference_out

router = Router(tags=["configuration"])


class PlanItemOut(Schema):
    name: str
    action: str = Field(
        description="create, update, unchanged, would_not_fit, refused, or delete (prune)"
    )
    changes: list[DifferenceOut] = Field(description="an update's fields that change")
    reason: str = Field(description="why it would not fit or is refused; what waits for room")


class PlanOut(Schema):
    dry_run: bool
    applied: bool = Field(description="true: carried out; false: only planned")
    counts: dict[str, int]
    items: list[PlanItemOut]


class ApplyRefusedOut(Schema):
    detail: str
    plan: PlanOut


def plan_out(plan: applying.Plan, dry_run: bool, applied: bool) -> dict[str, Any]:
    return {
        "dry_run": dry_run,
        "applied": applied,
        "counts": plan.counts(),
        "items": [
            {
                "name": item.name,
                "action": item.action,
                "changes": [difference_out(change) for change in item.changes],
                "reason": item.reason,
            }
            for item in plan.items
        ],
    }


@router.post("/apply", response={**ERRORS, 200: PlanOut, 409: ApplyRefusedOut})
def apply(request: HttpRequest, payload: ApplyIn) -> Any:
    """Make a file's deployments true: the plan, and with dry_run false, the plan carried out,
    all or nothing (409 with the plan when an item would not fit or is refused)."""
    entries = [entry.model_dump(mode="json") for entry in payload.document.deployments]
    if payload.dry_run:
        plan = applying.plan(request.user, entries, payload.prune)
        return plan_out(plan, True, False)
    try:
        plan = applying.apply(request.user, entries, payload.prune)
    except applying.ApplyRefused as refused:
        return Status(409, {"detail": str(refused), "plan": plan_out(refused.plan, False, False)})
    return plan_out(plan, False, True)


@router.get("/apply/schema", response={200: dict[str, Any], **ERRORS})
def apply_schema(request: HttpRequest) -> dict[str, Any]:
    """The JSON Schema of the file `berth apply -f` reads (and `berth export` writes)."""
    return ApplyDocument.model_json_schema()


class ExportQuery(Schema):
    name: list[str] = Field(default_factory=list, description="these deployments (repeatable)")
    team: str | None = Field(None, description="every deployment of this team")


@router.get("/export", response={200: dict[str, Any], **ERRORS})
def export(request: HttpRequest, query: Query[ExportQuery]) -> dict[str, Any]:
    """Deployments as the file's document: those named, those of a team, or all you may see."""
    chosen = visible_deployments(request.user).filter(delete_when_stopped=False)
    if query.name:
        chosen = chosen.filter(name__in=query.name)
        missing = sorted(set(query.name) - set(chosen.values_list("name", flat=True)))
        if missing:
            raise ActionRefused(f"no deployment named {', '.join(missing)} in your teams", "name")
    if query.team:
        chosen = chosen.filter(team__name=query.team)
    rows = chosen.select_related("team", "model", "cluster", "variant").order_by("name")
    return applying.export(list(rows))
