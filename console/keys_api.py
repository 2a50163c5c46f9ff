"""The API's own keys: list, create (no wider and no longer-lived than the key asking) and
revoke the caller's keys. The secret of a new key is in the answer once, never again."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Field, Router, Schema, Status

from console import keys
from console.api_schema import ERRORS
from console.forms import KeyFilter
from console.models import ApiKey, KeyScope

router = Router(tags=["keys"])


class KeyIn(Schema):
    name: str = Field(max_length=100)
    scope: str = Field(KeyScope.OPERATE, description="read, chat or operate")
    expires_in_days: int | None = Field(None, description=f"1 to {keys.MAX_DAYS}; none: never")


class KeyOut(Schema):
    id: int
    name: str
    prefix: str = Field(description="the key starts with berth_ and these characters")
    scope: str
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked: bool


class NewKeyOut(KeyOut):
    key: str = Field(description="the secret: shown this once, store it now")


def key_out(key: ApiKey) -> dict[str, Any]:
    fields = ("id", "name", "prefix", "scope", "created_at", "expires_at", "last_used_at")
    return {**{name: getattr(key, name) for name in fields}, "revoked": bool(key.revoked_at)}


class KeysOut(Schema):
    items: list[KeyOut]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page; null: last")


@router.get("/keys", response={200: KeysOut, **ERRORS})
def list_keys(request: HttpRequest) -> dict[str, Any]:
    """Your keys: ?sort= (newest, the default, or name; "-" first reverses), ?limit= (1 to
    200, 50) and ?cursor=."""
    filters = KeyFilter(request.GET)
    page = filters.page(filters.strictly(ApiKey.objects.filter(user=request.user)))
    return {"items": [key_out(key) for key in page.rows], "next_cursor": page.next_cursor}


@router.post("/keys", response={201: NewKeyOut, **ERRORS})
def create_key(request: HttpRequest, payload: KeyIn) -> Status:
    """A key asking can make only keys within its own scope and lifetime."""
    made_with = getattr(request, "api_key", None)
    key, secret = keys.issue(
        request.user, payload.name, payload.scope, payload.expires_in_days, made_with=made_with
    )
    return Status(201, {**key_out(key), "key": secret})


@router.post("/keys/{key_id}/revoke", response={200: KeyOut, **ERRORS})
def revoke_key(request: HttpRequest, key_id: int) -> dict[str, Any]:
    key = get_object_or_404(ApiKey, pk=key_id, user=request.user)
    if key.revoked_at is None:
        keys.revoke(request.user, key)
        key.refresh_from_db()
    return key_out(key)
