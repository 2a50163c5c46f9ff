"""GET /api/v1/events: the Events list (console/events.py), filtered and paged as its page is."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from django import forms
from django.http import HttpRequest
from ninja import Field, Query, Router, Schema
from pydantic import WithJsonSchema

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


def stated(name: str) -> dict[str, Any]:
    """What EventFilter's field takes, for the schema: its choices (empty: any) or its length."""
    field = events.EventFilter.base_fields[name]
    if isinstance(field, forms.ChoiceField):
        values = [str(value) for value, _label in field.choices]
        return {"enum": values if "" in values else ["", *values]}
    return {"maxLength": field.max_length} if field.max_length else {}


def said(name: str, words: str) -> Any:
    return Field(None, description=words, json_schema_extra=stated(name))


# Read as text by read_limit(), which refuses one that is not a number in range, in words.
Limit = Annotated[
    str, WithJsonSchema({"type": "integer", "minimum": 1, "maximum": events.MAX_LIMIT})
]


class EventQuery(Schema):
    """Documented here; read by console/events.py's EventFilter, which refuses a bad value with
    its name (400) rather than dropping it. The choices and lengths stated are its own."""

    team: str | None = Field(None, description="a team's name, one of yours")
    actor: str | None = said("actor", "a username, exactly (case aside)")
    object: str | None = said("object", "text in the deployment's name or the target")
    kind: str | None = said("kind", "a kind of event; empty: any")
    since: str | None = said("since", "from: 2026-03-01 or 2026-03-01T14:30 (UTC), a day that is")
    until: str | None = said("until", "before this time; a date includes its day")
    order: str | None = said("order", "newest (the default) or oldest")
    limit: Limit | None = Field(
        None, description=f"rows per page, 1 to {events.MAX_LIMIT}; {events.PAGE_SIZE} left out"
    )
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
