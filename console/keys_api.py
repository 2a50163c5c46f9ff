"""The API's own keys: list, create (no wider and no longer-lived than the key asking) and
revoke the caller's keys. The secret of a new key is in the answer once, never again."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

from django.http import Http404, HttpRequest
from django.utils import timezone
from ninja import Field, Router, Schema, Status
from pydantic import AfterValidator

from console import api_schema, keys
from console.api_schema import ERRORS, StrictSchema, Whole
from console.forms import KeyFilter
from console.models import ApiKey, KeyScope

router = Router(tags=["keys"])


def ruled(check: Callable[[Any], Any]) -> AfterValidator:
    return api_schema.ruled(check, (keys.KeyRefused,))


# Each as console/keys.py checks it, stated from its constants.
KeyName = Annotated[
    str,
    ruled(keys.key_name),
    Field(json_schema_extra={"maxLength": keys.LONGEST_NAME, "pattern": keys.KEY_NAME}),
]
Scope = Annotated[str, ruled(keys.scope_named), Field(json_schema_extra={"enum": KeyScope.values})]
Days = Annotated[
    Whole,
    ruled(lambda days: keys.expiry_after(days, timezone.now())),
    Field(json_schema_extra={"minimum": 1, "maximum": keys.MAX_DAYS}),
]


class KeyIn(StrictSchema):
    name: KeyName = Field(description="what the key is for; the spaces around it are dropped")
    scope: Scope = Field(KeyScope.OPERATE, description="read, chat or operate")
    expires_in_days: Days | None = Field(None, description=f"1 to {keys.MAX_DAYS}; null: never")


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


@router.post("/keys/{int:key_id}/revoke", response={200: KeyOut, **ERRORS})
def revoke_key(request: HttpRequest, key_id: int) -> dict[str, Any]:
    key = ApiKey.objects.filter(pk=key_id, user=request.user).first()
    if key is None:
        raise Http404(f"No key {key_id} of yours; GET /api/v1/keys lists them.")
    if key.revoked_at is None:
        keys.revoke(request.user, key)
        key.refresh_from_db()
    return key_out(key)
