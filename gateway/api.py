"""GET /api/v1/usage: requests and tokens per team, key, user or deployment over time
(gateway/usage_report.py reads them)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema

from console.api_schema import ERRORS
from console.lists import MOST_PER_PAGE, PAGE_SIZE
from gateway import usage_report

router = Router(tags=["usage"])


class UsageItemOut(Schema):
    id: int | None = Field(
        description="the team's, key's, user's or deployment's id; null: deleted"
    )
    name: str | None = Field(description="its name (a deleted deployment's is kept)")
    bucket_start: datetime = Field(description="the hour's or day's start, in UTC")
    requests: int
    prompt_tokens: int = Field(description="as the engines reported them")
    completion_tokens: int
    mean_ttft_s: float | None = Field(description="mean time to first token; null: none came")


class UsageOut(Schema):
    items: list[UsageItemOut]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page; null: last")


class UsageQueryIn(Schema):
    """Documented here; read by usage_report.read_query, which refuses a bad value by name."""

    group_by: str | None = Field(None, description="team (the default), key, user or deployment")
    from_: str | None = Field(
        None, alias="from", description="2026-03-01 or 2026-03-01T14:30 (UTC); a week before to"
    )
    to: str | None = Field(None, description="before this time (a date includes its day); now")
    bucket: str | None = Field(None, description="hour or day (the default)")
    limit: str | None = Field(
        None, description=f"items per page, 1 to {MOST_PER_PAGE}; {PAGE_SIZE}"
    )
    cursor: str | None = Field(None, description="the next_cursor of the page before")


@router.get("/usage", response={200: UsageOut, **ERRORS})
def list_usage(request: HttpRequest, query: Query[UsageQueryIn]) -> dict[str, Any]:
    """Requests, tokens and mean time to first token through the gateway, per group and hour or
    day, oldest first: your operated teams' (every team's, for platform admins)."""
    page = usage_report.usage_page(request.user, request.GET)
    return {"items": page.items, "next_cursor": page.next_cursor}
