"""GET /api/v1/events: the Events list (console/events.py), filtered and paged as its page is."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema

from console import events
from console.api_schema import ERRORS

router = Router(tags=["events"])


class EventOut(Schema):
    at: datetime = Field(description="when, in UTC")
    team: str | None = Field(description="the team; null for what belongs to none (admin actions)")
    actor: str = Field(description="the username, or what acted for no user (system, a command)")
    kind: str = Field(description=f"one of {', '.join(events.KINDS)}")
    object: str = Field(description="the deployment's name, or what the action was about")
    message: str


class EventsOut(Schema):
    items: list[EventOut]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page; null: last")


class EventQuery(Schema):
    """Documented here; read by console/events.py's EventFilter, which refuses a bad value with
    its name (400) rather than dropping it."""

    team: str | None = Field(None, description="a team's name, one of yours")
    actor: str | None = Field(None, description="a username, exactly (case aside)")
    object: str | None = Field(None, description="text in the deployment's name or the target")
    kind: str | None = Field(None, description=f"one of {', '.join(events.KINDS)}")
    since: str | None = Field(None, description="from: 2026-03-01 or 2026-03-01T14:30 (UTC)")
    until: str | None = Field(None, description="before this time; a date includes its day")
    order: str | None = Field(None, description="newest (the default) or oldest")
    limit: str | None = Field(None, description=f"1 to {events.MAX_LIMIT}; {events.PAGE_SIZE}")
    cursor: str | None = Field(None, description="the next_cursor of the page before")


def event_out(row: events.Row) -> dict[str, Any]:
    fields = ("at", "actor", "kind", "object", "message")
    return {**{name: getattr(row, name) for name in fields}, "team": row.team or None}


@router.get("/events", response={200: EventsOut, **ERRORS})
def list_events(request: HttpRequest, query: Query[EventQuery]) -> dict[str, Any]:
    """What happened in your teams (every team's, and the admin's, for platform admins), newest
    first: deployments' state changes and actions, downloads, file deletions, API keys, models
    added, code trust, clusters checked."""
    page = events.strict_page(request.user, request.GET)
    return {"items": [event_out(row) for row in page.rows], "next_cursor": page.next_cursor}
