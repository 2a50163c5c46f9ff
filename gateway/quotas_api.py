"""The API's quotas: list those you can see with their use, set one on a key, team or
deployment (made or replaced), remove one. Rules and access: gateway/quota_setting.py."""

from __future__ import annotations

from typing import Annotated, Any

from django.http import HttpRequest
from ninja import Field, Router, Schema, Status

from console import api_schema
from console.api_schema import ERRORS, StrictSchema, Text, Whole
from gateway import quota_setting, quotas
from gateway.models import Quota

router = Router(tags=["quotas"])


Limit = Annotated[
    Whole,
    api_schema.ruled(quotas.limit_value, (quotas.QuotaRefused,)),
    Field(json_schema_extra={"minimum": 1, "maximum": quotas.LARGEST_LIMIT}),
]


class QuotaIn(StrictSchema):
    api_key: Whole | None = Field(None, description="the id of one of your API keys")
    team: Text | None = Field(None, description="a team's name: all of its deployments' traffic")
    deployment: Text | None = Field(None, description="a deployment's name")
    tokens_per_day: Limit | None = Field(None, description="prompt + completion, UTC days")
    tokens_per_month: Limit | None = Field(None, description="prompt + completion, UTC months")
    requests_per_minute: Limit | None = Field(None, description="over the last 60 s")
    tokens_per_minute: Limit | None = Field(None, description="prompt + completion, per minute")
    shadow: bool = Field(False, description="only count and report what it would refuse")


class LimitUse(Schema):
    used: int = Field(description="in the present window (requests: the last 60 s)")
    shadow_refusals: int = Field(description="requests a shadow quota would have refused")


class QuotaOut(Schema):
    id: int
    subject: str = Field(description='in words, e.g. "team red"')
    api_key: int | None
    team: str | None
    deployment: str | None
    tokens_per_day: int | None
    tokens_per_month: int | None
    requests_per_minute: int | None
    tokens_per_minute: int | None
    shadow: bool
    use: dict[str, LimitUse] = Field(description="per limit set")


class QuotasOut(Schema):
    items: list[QuotaOut]


def quota_out(quota: Quota) -> dict[str, Any]:
    return {
        "id": quota.pk,
        "subject": quotas.subject_words(quota),
        "api_key": quota.api_key_id,
        "team": quota.team.name if quota.team_id else None,
        "deployment": quota.deployment.name if quota.deployment_id else None,
        **{name: getattr(quota, name) for name in quotas.LIMIT_FIELDS},
        "shadow": quota.shadow,
        "use": quotas.standing(quota),
    }


@router.get("/quotas", response={200: QuotasOut, **ERRORS})
def list_quotas(request: HttpRequest) -> dict[str, Any]:
    """The quotas on your keys, your teams and their deployments (platform admins: all)."""
    return {"items": [quota_out(q) for q in quota_setting.visible_quotas(request.user)]}


@router.post("/quotas", response={201: QuotaOut, **ERRORS})
def set_quota(request: HttpRequest, payload: QuotaIn) -> Status:
    """Set the quota of one key, team or deployment: it replaces the one there was."""
    subject = quota_setting.subject_for(
        request.user, payload.api_key, payload.team, payload.deployment
    )
    limits = {name: getattr(payload, name) for name in quotas.LIMIT_FIELDS}
    quota = quota_setting.set_quota(request.user, subject, limits, payload.shadow)
    return Status(201, quota_out(Quota.objects.get(pk=quota.pk)))


@router.delete("/quotas/{int:quota_id}", response={204: None, **ERRORS})
def remove_quota(request: HttpRequest, quota_id: int) -> Status:
    quota_setting.remove_quota(request.user, quota_id)
    return Status(204, None)
